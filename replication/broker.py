"""One broker of the embedded cluster: its logs, request handlers, fetchers and ISR upkeep.

Lifecycle: `start()` recovers the logs under ``<data_dir>/broker-<id>/``, registers with the
transport and the controller (which pushes the partition states), and starts the fetchers
and the ISR-shrink task. `stop()` is a clean shutdown (everything flushed); `crash()` is a
power cut: every byte not yet fsynced is dropped, as `Log.crash` simulates.
"""

from __future__ import annotations

import enum
import logging
import threading
import time
from pathlib import Path

from replication.cleaner import LogCleaner
from replication.controller import Controller, PartitionState
from replication.errors import IllegalStateError
from replication.fetcher import (
    InitialFetchState,
    LogReplicaOps,
    RemoteLeaderEndPoint,
    ReplicaFetcherManager,
)
from replication.partition import Partition
from replication.protocol import (
    AppendRecordsRequest,
    FetchRequest,
    ListOffsetsRequest,
    OffsetsForLeaderEpochRequest,
    ProduceRequest,
    TopicPartition,
)
from replication.replica_manager import ReplicaManager
from replication.transport import Transport

log = logging.getLogger(__name__)

# How soon a fetcher thread left with no partition is stopped (Kafka does it at once, at the end
# of each leadership change; here the broker's upkeep thread sweeps for them).
_IDLE_FETCHERS_INTERVAL_S = 1.0


class BrokerState(enum.Enum):
    NOT_RUNNING = "NOT_RUNNING"
    RUNNING = "RUNNING"
    SHUTTING_DOWN = "SHUTTING_DOWN"


class Broker:
    """A broker living in this process."""

    def __init__(self, broker_id: int, data_dir: Path, config: dict, controller: Controller,
                 transport: Transport) -> None:
        self.broker_id = broker_id
        self.log_dir = Path(data_dir) / f"broker-{broker_id}"
        self.config = config
        self.controller = controller
        self.transport = transport
        self.state = BrokerState.NOT_RUNNING
        self.broker_epoch = -1
        self.replica_manager: ReplicaManager | None = None
        self.fetcher_manager: ReplicaFetcherManager | None = None
        self.cleaner: LogCleaner | None = None
        self._stop_event = threading.Event()
        self._isr_thread: threading.Thread | None = None
        self._lifecycle_lock = threading.Lock()
        # Extra request handlers (push replication registers AppendRecords here).
        self.extra_handlers: dict[type, object] = {}
        self.push = None  # replication.push.wiring.BrokerPush when replication.mode is push

    def __repr__(self) -> str:
        return f"Broker({self.broker_id}, {self.state.value})"

    # -- lifecycle -----------------------------------------------------------------------------

    def start(self) -> None:
        with self._lifecycle_lock:
            if self.state is not BrokerState.NOT_RUNNING:
                raise IllegalStateError(f"broker {self.broker_id} is already {self.state.value}")
            self.log_dir.mkdir(parents=True, exist_ok=True)
            self._stop_event.clear()
            rm = ReplicaManager(self.broker_id, self.log_dir, self.config, self.controller.alter_partition,
                                lambda b: b in self.controller.live_brokers)
            self.cleaner = LogCleaner(self.config)
            rm.on_log_opened = self._on_log_opened
            rm.on_log_closing = self.cleaner.remove_log
            topic_configs = {name: dict(t.config) for name, t in self.controller.topics.items()}
            rm.load_logs(topic_configs)
            self.replica_manager = rm
            self.fetcher_manager = ReplicaFetcherManager(
                self.broker_id, self.config, self._endpoint_for, LogReplicaOps(self._follower_log))
            rm.on_become_leader = self._on_become_leader
            rm.on_become_follower = self._on_become_follower
            rm.on_partition_removed = self._on_partition_removed
            from replication.push.wiring import attach_push

            self.push = attach_push(self)
            self.transport.register(self.broker_id, self.handle)
            self.controller.register_listener(self.broker_id, self._on_partition_state)
            self.state = BrokerState.RUNNING
            self.broker_epoch = self.controller.broker_started(self.broker_id)
            self.cleaner.start()
            self._isr_thread = threading.Thread(target=self._upkeep, name=f"upkeep-{self.broker_id}",
                                                daemon=True)
            self._isr_thread.start()
            log.info("broker %d started (epoch %d)", self.broker_id, self.broker_epoch)

    def stop(self) -> None:
        """Clean shutdown: leadership moves away, fetchers stop, logs are flushed and closed."""
        self._shutdown(crash=False)

    def crash(self) -> None:
        """Power cut: stop at once and drop every byte not yet fsynced."""
        self._shutdown(crash=True)

    def _shutdown(self, crash: bool) -> None:
        with self._lifecycle_lock:
            if self.state is not BrokerState.RUNNING:
                return
            self.state = BrokerState.SHUTTING_DOWN
            self.transport.unregister(self.broker_id)
            self._stop_event.set()
            if self.fetcher_manager is not None:
                self.fetcher_manager.close_all_fetchers()
            self.controller.broker_stopped(self.broker_id)
            if self._isr_thread is not None:
                self._isr_thread.join(timeout=5)
            if self.push is not None:
                self.push.shutdown()
                self.push = None
            if self.cleaner is not None:
                self.cleaner.shutdown()
            if self.replica_manager is not None:
                self.replica_manager.shutdown(crash=crash)
            self.state = BrokerState.NOT_RUNNING
            log.info("broker %d %s", self.broker_id, "crashed" if crash else "stopped")

    @property
    def is_running(self) -> bool:
        return self.state is BrokerState.RUNNING

    # -- controller callbacks ------------------------------------------------------------------

    def _on_partition_state(self, broker_id: int, tp: TopicPartition, state: PartitionState, info: dict) -> None:
        rm = self.replica_manager
        if rm is None or self.state is not BrokerState.RUNNING:
            return
        rm.apply_partition_state(tp, state, info)

    def _on_become_leader(self, partition: Partition, changed: bool) -> None:
        if self.fetcher_manager is not None:
            self.fetcher_manager.remove_fetcher_for_partitions([partition.tp])

    def _on_become_follower(self, partition: Partition, needs_fetch: bool) -> None:
        fm = self.fetcher_manager
        if fm is None:
            return
        if partition.leader_id < 0:
            fm.remove_fetcher_for_partitions([partition.tp])
            return
        if not needs_fetch:
            return
        fm.remove_fetcher_for_partitions([partition.tp])
        lg = partition.log
        # Rule 23: start from the LEO when the log knows its epochs, else from the HW.
        init_offset = lg.log_end_offset if lg.leader_epoch_cache.latest_epoch is not None else lg.high_watermark
        try:
            fm.add_fetcher_for_partitions({
                partition.tp: InitialFetchState(partition.leader_id, partition.leader_epoch, init_offset)
            })
        except IllegalStateError:
            # The cluster is closing and has stopped every fetcher already.
            log.debug("broker %d: not fetching %s, fetchers are closed", self.broker_id, partition.tp)

    def _on_partition_removed(self, tp: TopicPartition) -> None:
        if self.fetcher_manager is not None:
            self.fetcher_manager.remove_fetcher_for_partitions([tp])

    def _follower_log(self, tp: TopicPartition):
        rm = self.replica_manager
        if rm is None:
            return None
        partition = rm.partitions.get(tp)
        if partition is None or partition.is_leader:
            return None
        return partition.log

    def _endpoint_for(self, leader_id: int, fetcher_id: int):
        return RemoteLeaderEndPoint(self.broker_id, lambda: self.broker_epoch, leader_id, self.transport,
                                    self.config)

    # -- requests ------------------------------------------------------------------------------

    def handle(self, source: int, body: object, respond) -> None:
        rm = self.replica_manager
        if rm is None or self.state is not BrokerState.RUNNING:
            raise IllegalStateError(f"broker {self.broker_id} is not running")
        if isinstance(body, FetchRequest):
            rm.handle_fetch(body, respond)
        elif isinstance(body, ProduceRequest):
            rm.handle_produce(body, respond)
        elif isinstance(body, ListOffsetsRequest):
            respond(rm.handle_list_offsets(body))
        elif isinstance(body, OffsetsForLeaderEpochRequest):
            respond(rm.handle_offsets_for_leader_epoch(body))
        else:
            handler = self.extra_handlers.get(type(body))
            if handler is None:
                raise IllegalStateError(f"broker {self.broker_id} has no handler for {type(body).__name__}")
            handler(source, body, respond)

    # -- periodic upkeep -----------------------------------------------------------------------

    def _on_log_opened(self, lg) -> None:
        if lg.config.compact and self.cleaner is not None:
            self.cleaner.add_log(lg)

    def _upkeep(self) -> None:
        """Periodic tasks: ISR shrink every lag/2 (rule 18), retention, flush.ms flushing, and
        stopping fetcher threads left with no partition."""
        isr_interval = int(self.config.get("replica.lag.time.max.ms", 30000)) / 2000.0
        retention_interval = int(self.config.get("log.retention.check.interval.ms", 300000)) / 1000.0
        flush_interval = int(self.config.get("log.flush.scheduler.interval.ms", 1000)) / 1000.0
        tick = max(0.01, min(isr_interval, retention_interval, flush_interval, _IDLE_FETCHERS_INTERVAL_S))
        due = {"isr": 0.0, "retention": 0.0, "flush": 0.0, "idle fetchers": 0.0}
        intervals = {"isr": isr_interval, "retention": retention_interval, "flush": flush_interval,
                     "idle fetchers": _IDLE_FETCHERS_INTERVAL_S}
        now = time.monotonic()
        for name in due:
            due[name] = now + intervals[name]
        while not self._stop_event.wait(tick):
            rm = self.replica_manager
            if rm is None:
                return
            now = time.monotonic()
            for name, task in (("isr", rm.maybe_shrink_isr), ("retention", rm.delete_old_segments),
                               ("flush", rm.flush_due_logs), ("idle fetchers", self._shutdown_idle_fetchers)):
                if now < due[name]:
                    continue
                due[name] = now + intervals[name]
                try:
                    task()
                except Exception:
                    log.exception("broker %d: %s upkeep failed", self.broker_id, name)

    def _shutdown_idle_fetchers(self) -> None:
        """Kafka's shutdownIdleFetcherThreads after a leadership change: a fetcher thread whose
        partitions all moved to other leaders (or here) stops and closes its end point. Done on
        this thread, not in the controller's callbacks, because it joins the fetcher thread,
        which may be waiting on a lock a callback holds."""
        fm = self.fetcher_manager
        if fm is not None:
            fm.shutdown_idle_fetcher_threads()


__all__ = ["Broker", "BrokerState", "AppendRecordsRequest"]
