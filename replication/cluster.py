"""LocalCluster: an embedded, replicated Kafka-like cluster of brokers in one process.

    with LocalCluster("/var/lib/eddy", num_brokers=3) as cluster:
        cluster.create_topic("orders", partitions=3, replication_factor=3)
        cluster.leader("orders", 0)

Files follow Kafka's layout under ``<data_dir>/broker-<id>/<topic>-<partition>/``; cluster
metadata lives in ``<data_dir>/cluster-metadata.json`` so a restarted cluster comes back with
the same topics, leader epochs and ISR. Broker configuration uses Kafka's names, given as a
``config`` dict or as keyword arguments with underscores (``replica_lag_time_max_ms=2000``).

A running cluster holds an exclusive lock on ``<data_dir>/.lock``, as a Kafka broker locks its
log directories: a second cluster on the same directory, in this process or another (a second
app instance pointed at the same ``local://`` directory), fails to start with
`DataDirInUseError` instead of writing the same log files. The operating system drops the lock
with the process, so a crashed cluster's directory can be started again at once.
"""

from __future__ import annotations

import logging
import tempfile
import threading
import time
from pathlib import Path
from typing import Callable

from replication.broker import Broker
from replication.controller import NO_LEADER, Controller
from eddy import file_lock
from eddy.config_values import parse_bool
from replication.errors import ClusterError, DataDirInUseError, InvalidConfigurationError
from replication.protocol import (
    FetchPartition,
    FetchRequest,
    IsolationLevel,
    Errors,
    ProducePartitionResponse,
    ProduceRequest,
    TopicPartition,
)
from replication.transport import FaultPlan, Transport

log = logging.getLogger(__name__)

DEFAULT_BROKER_CONFIG = {
    "replica.lag.time.max.ms": 30000,
    "replica.fetch.wait.max.ms": 500,
    "replica.fetch.min.bytes": 1,
    "replica.fetch.backoff.ms": 1000,
    "num.replica.fetchers": 1,
    "min.insync.replicas": 1,
    "unclean.leader.election.enable": False,
    "default.replication.factor": 3,
    "num.partitions": 1,
    "request.timeout.ms": 30000,
}


LOCK_FILE = ".lock"


def lock_data_dir(data_dir: Path) -> int:
    """Takes the exclusive lock of a cluster's data directory (Kafka's log directory lock): the
    descriptor for `file_lock.release`. `DataDirInUseError` when another holder, in this process
    or another, has it."""
    path = data_dir / LOCK_FILE
    try:
        return file_lock.acquire(path)
    except file_lock.FileLockHeldError as e:
        raise DataDirInUseError(
            f"cannot lock {path}: another embedded cluster"
            + (f" ({e.holder})" if e.holder else ", in this process or another,")
            + f" is using {data_dir} (two clusters on one directory would overwrite each other's logs)") from None


def _config_from_kwargs(kwargs: dict) -> dict:
    return {k.replace("_", "."): v for k, v in kwargs.items()}


class LocalCluster:
    """Brokers, a controller and a transport, all in this process."""

    def __init__(self, data_dir: str | Path | None = None, num_brokers: int = 3, replication: str = "pull",
                 config: dict | None = None, faults: FaultPlan | None = None, **kwargs) -> None:
        if replication not in ("pull", "push"):
            raise ClusterError(f"replication must be 'pull' or 'push', not {replication!r}")
        if num_brokers < 1:
            raise ClusterError(f"num_brokers must be >= 1, got {num_brokers}")
        self._tmp = None
        if data_dir is None:
            self._tmp = tempfile.TemporaryDirectory(prefix="eddy-cluster-")
            data_dir = self._tmp.name
        self.data_dir = Path(data_dir)
        self.num_brokers = num_brokers
        self.replication = replication
        self.config = dict(DEFAULT_BROKER_CONFIG)
        self.config.update(config or {})
        self.config.update(_config_from_kwargs(kwargs))
        self.config["replication.mode"] = replication
        self.transport = Transport(faults)
        self.controller: Controller | None = None
        self.brokers: dict[int, Broker] = {}
        self.group_coordinator = None  # replication.group_coordinator.GroupCoordinator, made in start()
        self.txn_coordinator = None  # replication.txn_coordinator.TransactionCoordinator, made in start()
        self._started = False
        self._lock = threading.RLock()
        self._data_dir_lock: int | None = None  # the lock file's descriptor while started

    # -- lifecycle -----------------------------------------------------------------------------

    def start(self) -> "LocalCluster":
        """Start the controller, every broker and the coordinators.

        If anything fails, what was started is stopped again before the error propagates: a
        half-started cluster never keeps brokers running.
        """
        with self._lock:
            if self._started:
                return self
            try:
                self._start()
            except BaseException:
                log.error("cluster %s failed to start; stopping the brokers already started",
                          self.data_dir)
                self._stop_all()
                raise
            return self

    def _start(self) -> None:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        # before anything reads or writes the directory's files
        self._data_dir_lock = lock_data_dir(self.data_dir)
        broker_ids = list(range(self.num_brokers))
        unclean = parse_bool(self.config.get("unclean.leader.election.enable", False))
        if unclean is None:
            raise InvalidConfigurationError(
                "unclean.leader.election.enable must be true or false, got "
                f"{self.config['unclean.leader.election.enable']!r}", key="unclean.leader.election.enable")
        self.controller = Controller(self.data_dir, broker_ids, unclean_leader_election=unclean)
        self.brokers = {b: Broker(b, self.data_dir, self.config, self.controller, self.transport)
                        for b in broker_ids}
        for b in broker_ids:
            self.brokers[b].start()
        from replication.group_coordinator import GroupCoordinator

        self.group_coordinator = GroupCoordinator(self, self.config)
        self.group_coordinator.start()
        from replication.txn_coordinator import TransactionCoordinator, WriteTxnMarkersRequest

        for broker in self.brokers.values():
            broker.extra_handlers[WriteTxnMarkersRequest] = (
                lambda source, body, respond, broker=broker:
                broker.replica_manager.handle_write_txn_markers(body, respond))
        self.txn_coordinator = TransactionCoordinator(self)
        self._started = True
        self.txn_coordinator.start()

    def _stop_all(self) -> None:
        """Stop the coordinators and every running broker (fetchers first), then release the
        data directory."""
        try:
            if self.txn_coordinator is not None:
                self.txn_coordinator.close()
            if self.group_coordinator is not None:
                self.group_coordinator.close()
            # Fetchers first, so no broker sees its peers vanish while it is still replicating.
            for broker in self.brokers.values():
                if broker.fetcher_manager is not None and broker.is_running:
                    broker.fetcher_manager.close_all_fetchers()
            for broker in self.brokers.values():
                broker.stop()
            self._started = False
        finally:
            if self._data_dir_lock is not None:  # last: every file of the directory is closed
                file_lock.release(self._data_dir_lock)
                self._data_dir_lock = None

    def close(self) -> None:
        """Stop every broker (also after a failed start) and release the transport."""
        with self._lock:
            self._stop_all()
            self.transport.close()
        if self._tmp is not None:
            self._tmp.cleanup()
            self._tmp = None

    def __enter__(self) -> "LocalCluster":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.close()

    def _broker(self, broker_id: int) -> Broker:
        broker = self.brokers.get(broker_id)
        if broker is None:
            raise ClusterError(f"unknown broker {broker_id} (brokers: {sorted(self.brokers)})")
        return broker

    def stop_broker(self, broker_id: int) -> None:
        """Clean shutdown of one broker (flush and close)."""
        self._broker(broker_id).stop()

    def crash_broker(self, broker_id: int) -> None:
        """Power cut of one broker: unflushed bytes are lost."""
        self._broker(broker_id).crash()

    def start_broker(self, broker_id: int) -> None:
        """Restart a stopped or crashed broker: recover, rejoin as follower, catch up."""
        self._broker(broker_id).start()

    def live_brokers(self) -> list[int]:
        return sorted(b for b, broker in self.brokers.items() if broker.is_running)

    # -- topics and metadata -------------------------------------------------------------------

    def create_topic(self, name: str, partitions: int = 1, replication_factor: int | None = None,
                     config: dict | None = None) -> None:
        if replication_factor is None:
            replication_factor = min(int(self.config["default.replication.factor"]), self.num_brokers)
        self._require_started()
        self.controller.create_topic(name, partitions, replication_factor,
                                     {k: str(v) for k, v in (config or {}).items()},
                                     internal=name.startswith("__"))

    def delete_topic(self, name: str) -> None:
        self._require_started()
        self.controller.delete_topic(name)

    def topics(self) -> list[str]:
        self._require_started()
        return sorted(self.controller.topics)

    def _require_started(self) -> None:
        if not self._started:
            raise ClusterError("the cluster is not started; call start() or use it as a context manager")

    def _state(self, topic: str, partition: int):
        self._require_started()
        state = self.controller.partition_state(TopicPartition(topic, partition))
        if state is None:
            raise ClusterError(f"unknown partition {topic}-{partition}")
        return state

    def leader(self, topic: str, partition: int) -> int:
        """The leader's broker id, or -1 while the partition is offline."""
        return self._state(topic, partition).leader

    def leader_epoch(self, topic: str, partition: int) -> int:
        return self._state(topic, partition).leader_epoch

    def isr(self, topic: str, partition: int) -> list[int]:
        return sorted(self._state(topic, partition).isr)

    def replicas(self, topic: str, partition: int) -> list[int]:
        return list(self._state(topic, partition).replicas)

    def partition_on(self, broker_id: int, topic: str, partition: int):
        """The `Partition` object hosted by a running broker (tests look inside)."""
        rm = self._broker(broker_id).replica_manager
        p = rm.partitions.get(TopicPartition(topic, partition)) if rm else None
        if p is None:
            raise ClusterError(f"broker {broker_id} hosts no partition {topic}-{partition}")
        return p

    def high_watermark(self, topic: str, partition: int) -> int:
        """The leader's high watermark (-1 while offline)."""
        leader = self.leader(topic, partition)
        if leader == NO_LEADER:
            return -1
        return self.partition_on(leader, topic, partition).log.high_watermark

    def log_end_offset(self, broker_id: int, topic: str, partition: int) -> int:
        return self.partition_on(broker_id, topic, partition).log.log_end_offset

    # -- clients (confluent-kafka's API) -------------------------------------------------------

    def producer(self, conf: dict | None = None):
        """A `replication.clients.Producer` on this cluster (confluent_kafka.Producer's API)."""
        from replication.clients.producer import Producer

        self._require_started()
        return Producer(conf or {}, cluster=self)

    def consumer(self, conf: dict | None = None):
        """A `replication.clients.Consumer` on this cluster (confluent_kafka.Consumer's API)."""
        from replication.clients.consumer import Consumer

        self._require_started()
        return Consumer(conf or {}, cluster=self)

    def admin(self, conf: dict | None = None):
        """A `replication.clients.AdminClient` on this cluster (confluent_kafka.admin's API)."""
        from replication.clients.admin import AdminClient

        self._require_started()
        return AdminClient(conf or {}, cluster=self)

    # -- minimal request helpers (the clients issue adds full producer/consumer/admin) -----------

    def request(self, broker_id: int, body: object, timeout_s: float = 30.0) -> object:
        """Send a protocol request to a broker as a client would (client id -1)."""
        return self.transport.request(-1, broker_id, body, timeout_s)

    def produce(self, topic: str, partition: int, batch: bytes, acks: int = -1,
                timeout_ms: int = 30000) -> ProducePartitionResponse:
        """Send one encoded batch to the partition's current leader and wait for the answer."""
        tp = TopicPartition(topic, partition)
        leader = self.leader(topic, partition)
        if leader == NO_LEADER:
            return ProducePartitionResponse(error=Errors.LEADER_NOT_AVAILABLE)
        result = self.request(leader, ProduceRequest(acks, timeout_ms, {tp: batch}), timeout_ms / 1000 + 5)
        if result is None:
            return ProducePartitionResponse()
        return result[tp]

    def fetch(self, topic: str, partition: int, offset: int, max_bytes: int = 1 << 20,
              isolation: IsolationLevel = IsolationLevel.HIGH_WATERMARK, max_wait_ms: int = 0):
        """Fetch as a consumer from the leader (reads stop at the high watermark)."""
        tp = TopicPartition(topic, partition)
        leader = self.leader(topic, partition)
        req = FetchRequest(-1, -1, max_wait_ms, 1, max_bytes, isolation,
                           {tp: FetchPartition(offset, max_bytes=max_bytes)})
        return self.request(leader, req, max_wait_ms / 1000 + 30)[tp]

    def wait_until(self, predicate: Callable[[], bool], timeout_s: float = 30.0, what: str = "condition") -> None:
        """Wait for a cluster condition with a deadline (tests use this, never sleeps)."""
        deadline = time.monotonic() + timeout_s
        delay = 0.001
        while not predicate():
            if time.monotonic() > deadline:
                raise TimeoutError(f"timed out after {timeout_s}s waiting for {what}")
            time.sleep(delay)
            delay = min(delay * 2, 0.05)
