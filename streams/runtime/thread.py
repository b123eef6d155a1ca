"""StreamThread: poll -> restore -> process -> punctuate -> commit, on one main consumer.

Each thread owns a main consumer (group = application.id, subscribed to every source topic
including repartition topics; rebalance callbacks drive its TaskManager), a restore consumer
(no group, partitions assigned by the StoreChangelogReader) and one producer (transactional
under exactly_once_v2, `transactional.id = <application.id>-<process id>-<thread index>`, so a
restarted instance fences its crashed predecessor and aborts its open transaction at once).
"""

from __future__ import annotations

import enum
import logging
import threading
import time
from typing import Any, Callable, Optional

from confluent_kafka import TopicPartition

from state.cache import ThreadCache
from state.errors import TaskCorruptedError
from state.restore import StoreChangelogReader, restore_consumer_config
from streams.errors import ProcessingError
from streams.runtime.collector import RecordCollector, production_handler_from_config, uses_murmur2
from streams.runtime.config import MAIN_CONSUMER_PREFIX, RESTORE_CONSUMER_PREFIX, StreamsConfig
from streams.runtime.errors import CommitTimeoutError, RetriableCommitError, TaskMigratedError
from streams.runtime.metadata import ThreadMetadata, active_task_metadata, standby_task_metadata
from streams.runtime.streams_metadata import endpoint_client_suffix
from streams.runtime.offsets import DEFAULT_RESET_POLICY, consumer_reset_policy, reset_policies
from streams.runtime.snapshots import ThreadSnapshots
from streams.runtime.task import check_transition
from streams.runtime.standby_placement import admin_client_id, consumer_client_id
from streams.runtime.task_manager import TaskManager
from streams.topology import REPARTITION

log = logging.getLogger(__name__)

# the consumer's retry.backoff.ms default: how soon a commit that failed retriably is tried again
COMMIT_RETRY_BACKOFF_S = 0.1

MAX_PROCESS_PER_TASK = 20000
#: Kafka Streams' transaction.timeout.ms under exactly-once (librdkafka's default is 60 s): an
#: instance lost mid-transaction holds its partitions' read_committed readers, the tasks moved
#: elsewhere among them, only this long. A producer setting still wins.
EOS_TRANSACTION_TIMEOUT_MS = 10_000
#: how long a removed static member's thread waits for its LeaveGroup to go out
STATIC_LEAVE_TIMEOUT_S = 5.0


class ThreadState(enum.Enum):
    CREATED = "CREATED"
    STARTING = "STARTING"
    PARTITIONS_REVOKED = "PARTITIONS_REVOKED"
    PARTITIONS_ASSIGNED = "PARTITIONS_ASSIGNED"
    RUNNING = "RUNNING"
    PENDING_SHUTDOWN = "PENDING_SHUTDOWN"
    DEAD = "DEAD"


_ALLOWED = {
    ThreadState.CREATED: {ThreadState.STARTING, ThreadState.PENDING_SHUTDOWN},
    ThreadState.STARTING: {ThreadState.PARTITIONS_REVOKED, ThreadState.PARTITIONS_ASSIGNED,
                           ThreadState.PENDING_SHUTDOWN},
    ThreadState.PARTITIONS_REVOKED: {ThreadState.PARTITIONS_REVOKED, ThreadState.PARTITIONS_ASSIGNED,
                                     ThreadState.RUNNING, ThreadState.PENDING_SHUTDOWN},
    ThreadState.PARTITIONS_ASSIGNED: {ThreadState.PARTITIONS_REVOKED, ThreadState.PARTITIONS_ASSIGNED,
                                      ThreadState.RUNNING, ThreadState.PENDING_SHUTDOWN},
    ThreadState.RUNNING: {ThreadState.PARTITIONS_REVOKED, ThreadState.PARTITIONS_ASSIGNED,
                          ThreadState.PENDING_SHUTDOWN},
    ThreadState.PENDING_SHUTDOWN: {ThreadState.DEAD},
    ThreadState.DEAD: set(),
}


class SimulatedCrash(BaseException):
    """Raised by a test fault injector: the thread stops at once as if its process died
    (no commit, no flush, no transaction abort; stores closed without checkpoint)."""


def _wall_clock_ms() -> int:
    return int(time.time() * 1000)


def _leave_static_membership(consumer: Any) -> None:
    """Take a static member out of its group before its consumer closes (which leaves the group
    only for a dynamic member): unsubscribe, then poll until the LeaveGroup went out (librdkafka
    sends it once the revocation is served; the member id is cleared then), at most
    STATIC_LEAVE_TIMEOUT_S."""
    consumer.unsubscribe()
    deadline = time.monotonic() + STATIC_LEAVE_TIMEOUT_S
    while consumer.memberid() and time.monotonic() < deadline:
        consumer.poll(0.05)


class StreamThread(threading.Thread):
    def __init__(self, index: int, *, topology: Any, subtopologies: list, config: StreamsConfig,
                 backend: Any, admin: Any, state_directory: Any, process_id: str, source_topics: list[str],
                 restore_listener: Any = None, standby_listener: Any = None,
                 on_state_change: Callable[["StreamThread", ThreadState, ThreadState], None],
                 on_error: Callable[["StreamThread", BaseException], None],
                 on_tasks_changed: Callable[["StreamThread"], None],
                 assignment_strategy: str = "cooperative-sticky",
                 on_failure: Optional[Callable[["StreamThread", BaseException], None]] = None,
                 shutdown_requested: Optional[Callable[[], bool]] = None, metrics: Any = None,
                 global_stores: Optional[dict] = None, live_threads: Optional[int] = None,
                 paused: Optional[threading.Event] = None) -> None:
        """`on_failure` runs when the loop fails, before the thread closes its tasks and leaves
        the group (where Kafka Streams calls its uncaught exception handler); `on_error` runs
        once the thread is dead. `shutdown_requested` is asked on every non-empty assignment:
        True means the application is shutting down, and the thread stops without processing
        what it was given. `live_threads`: how many stream threads the app runs with this one
        (default num.stream.threads), which share statestore.cache.max.bytes and
        input.buffer.max.bytes equally (`resize` when the count changes; the cache with the
        global thread too when the topology has global stores, as Kafka's). `paused`: the app's
        pause flag (see TaskManager)."""
        self.metrics = metrics  # the App's MetricsRegistry (task sensors register there)
        self.global_stores = global_stores  # the App's global stores, which every task may read
        super().__init__(name=f"{config.application_id}-StreamThread-{index}", daemon=True)
        self.index = index
        self.topology = topology
        self.subtopologies = subtopologies
        self.config = config
        self.backend = backend
        self.admin = admin
        self.state_directory = state_directory
        self.process_id = process_id
        self.source_topics = source_topics
        # Repartition topics this app reads: records below the committed offsets are deleted
        # every repartition.purge.interval.ms, as Kafka Streams does (they are never read again).
        repartition = {topology.decorate_topic(t, config.application_id)
                       for t, kind in topology.internal_topics.items() if kind == REPARTITION}
        self.repartition_topics = frozenset(t for t in source_topics if t in repartition)
        self.purge_interval_s = float(config.raw.get("repartition.purge.interval.ms", 30000)) / 1000.0
        # a running task processes at least what one poll brings before the next poll (see
        # TaskManager's buffered.records.per.partition)
        self._max_process_per_task = max(MAX_PROCESS_PER_TASK, config.max_poll_records)
        self._purged: dict[tuple[str, int], int] = {}
        self.restore_listener = restore_listener
        self.standby_listener = standby_listener
        self.assignment_strategy = assignment_strategy
        self._cooperative = "cooperative" in assignment_strategy
        self._on_state_change = on_state_change
        self._on_error = on_error
        self._on_failure = on_failure
        self._shutdown_requested = shutdown_requested
        self._on_tasks_changed = on_tasks_changed
        self.state = ThreadState.CREATED
        self._state_lock = threading.Lock()
        self._stop_event = threading.Event()
        self._leave_group_on_close = False  # see shutdown
        self._abandoned = False
        self.fault_injector: Optional[Callable[[str], None]] = None
        self.task_manager: Optional[TaskManager] = None
        self.consumer: Any = None
        self.restore_consumer: Any = None
        self.producer: Any = None
        self.collector: Optional[RecordCollector] = None
        self.active_task_ids: frozenset = frozenset()
        self.desired_standbys: frozenset = frozenset()
        self._standby_version = 0
        self._applied_standby_version = -1
        self.processed_total = 0
        self.snapshots = ThreadSnapshots()  # store snapshots taken right after a commit
        self.transactional_id = f"{config.application_id}-{process_id}-{index}" if config.eos_enabled else None
        # Kafka's cache split counts the global thread when there are global stores
        self._with_global_thread = topology.global_subtopology() is not None
        self.cache_max_bytes, self.input_buffer_max_bytes = config.thread_shares(
            live_threads if live_threads is not None else config.num_stream_threads, self._with_global_thread)
        # (cache bytes, input buffer bytes) the loop applies at its next turn (`resize`)
        self._resize_to: Optional[tuple[int, int]] = None
        self.paused = paused if paused is not None else threading.Event()

    # ---- state ------------------------------------------------------------------------------

    def _set_state(self, new: ThreadState) -> None:
        with self._state_lock:
            old = self.state
            if old is new and new is not ThreadState.PARTITIONS_ASSIGNED:
                return
            check_transition(f"stream thread {self.name}", old, new, _ALLOWED)
            self.state = new
        if old is not new or new is ThreadState.PARTITIONS_ASSIGNED:  # each assignment is news (Kafka)
            self._on_state_change(self, new, old)

    def resize(self, live_threads: int) -> None:
        """Take this thread's share for `live_threads` stream threads (the app added or removed
        one). Applied by the thread itself at its next loop turn, as Kafka's resizeCache: a
        smaller cache evicts (ThreadCache.resize), and what that flushes is forwarded on this
        thread, like any eviction."""
        self.cache_max_bytes, self.input_buffer_max_bytes = self.config.thread_shares(
            live_threads, self._with_global_thread)
        self._resize_to = (self.cache_max_bytes, self.input_buffer_max_bytes)

    @property
    def consumer_client_id(self) -> str:
        """The main consumer's client id, which carries the instance's application.server
        (streams_metadata.endpoint_client_suffix)."""
        return (consumer_client_id(self.config.application_id, self.process_id, self.index)
                + endpoint_client_suffix(self.config.application_server))

    @property
    def producer_client_id(self) -> str:
        return f"{self.name}-producer"

    @property
    def restore_consumer_client_id(self) -> str:
        return f"{self.name}-restore-consumer"

    def metadata(self) -> ThreadMetadata:
        """What this thread runs (Kafka's StreamThread.threadMetadata), read from another thread:
        the task maps are copied first (a rebalance may change them meanwhile)."""
        tm = self.task_manager
        active, standbys = (list(tm.tasks.values()), list(tm.standbys)) if tm is not None else ([], [])
        app = self.config.application_id
        return ThreadMetadata(
            self.name, self.state.value, self.consumer_client_id,
            self.restore_consumer_client_id, frozenset({self.producer_client_id}), admin_client_id(app),
            tuple(sorted((active_task_metadata(t) for t in active), key=lambda m: m.task_id)),
            tuple(standby_task_metadata(task_id, tm.input_partitions_of(task_id))
                  for task_id in sorted(standbys)))

    def set_desired_standbys(self, task_ids: frozenset) -> None:
        self.desired_standbys = task_ids
        self._standby_version += 1

    @property
    def stopping(self) -> bool:
        """True once asked to stop (it commits no more loop turns)."""
        return self._stop_event.is_set()

    def shutdown(self, leave_group: bool = False) -> None:
        """Ask the thread to stop after its current loop iteration (it commits and closes).
        `leave_group`: its main consumer leaves the group even as a static member, which
        otherwise keeps its place until its session times out (Kafka's removeStreamThread
        removes it from the group with the admin client; confluent-kafka's has no such call, so
        the consumer unsubscribes, which sends LeaveGroup, before it closes)."""
        self._leave_group_on_close = leave_group
        self._stop_event.set()

    def _inject(self, point: str) -> None:
        if self.fault_injector is not None:
            self.fault_injector(point)

    # ---- clients ----------------------------------------------------------------------------

    def _producer_conf(self) -> dict:
        conf = {"client.id": self.producer_client_id}
        if self.transactional_id is not None:
            conf["transactional.id"] = self.transactional_id
            conf["enable.idempotence"] = True
            raw = self.config.raw
            if "transaction.timeout.ms" not in raw and "producer.transaction.timeout.ms" not in raw:
                conf["transaction.timeout.ms"] = EOS_TRANSACTION_TIMEOUT_MS
        return conf

    def _new_producer(self) -> Any:
        producer = self.backend.producer(self._producer_conf())
        if self.transactional_id is not None:
            producer.init_transactions(60)
        return producer

    def _reset_producer(self) -> None:
        """Replace a fenced or broken transactional producer (same transactional.id: the new
        one fences the old and aborts its transaction)."""
        old = self.producer
        try:
            purge = getattr(old, "purge", None)
            if purge is not None:
                purge()
        except Exception:  # noqa: BLE001 - the old producer is discarded anyway
            pass
        self.producer = self._new_producer()
        self.collector.use_producer(self.producer)

    def _create_clients(self) -> None:
        cfg = self.config
        main_conf = {
            "group.id": cfg.application_id,
            "client.id": self.consumer_client_id,
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
            "auto.offset.reset": DEFAULT_RESET_POLICY,
            "partition.assignment.strategy": self.assignment_strategy,
            "isolation.level": "read_committed" if cfg.eos_enabled else "read_uncommitted",
            **cfg.consumer_overrides(MAIN_CONSUMER_PREFIX),
        }
        instance_id = cfg.main_consumer_instance_id(self.index)
        if instance_id is not None:
            main_conf["group.instance.id"] = instance_id
        default_reset = main_conf["auto.offset.reset"]
        policies = reset_policies(self.topology, self.subtopologies, cfg.application_id, default_reset)
        main_conf["auto.offset.reset"] = consumer_reset_policy(policies, default_reset)
        self.consumer = self.backend.consumer(main_conf)
        restore_conf = {
            **restore_consumer_config(cfg.eos_enabled, group_id=f"{cfg.application_id}-restore"),
            "client.id": self.restore_consumer_client_id,
            **cfg.consumer_overrides(RESTORE_CONSUMER_PREFIX),
        }
        self.restore_consumer = self.backend.consumer(restore_conf)
        self.producer = self._new_producer()
        self.collector = RecordCollector(self.producer, eos_enabled=cfg.eos_enabled,
                                         production_handler=production_handler_from_config(cfg.raw),
                                         murmur2_partitioning=uses_murmur2(cfg.raw),
                                         metadata_refresh_ms=cfg.metadata_refresh_ms)
        reader = StoreChangelogReader(self.restore_consumer, self.restore_listener, eos_enabled=cfg.eos_enabled,
                                      admin=self.admin, poll_ms=cfg.poll_ms, task_timeout_ms=cfg.task_timeout_ms,
                                      max_poll_records=cfg.restore_max_poll_records,
                                      standby_listener=self.standby_listener)
        self.task_manager = TaskManager(
            self.topology, self.subtopologies, config=cfg, state_directory=self.state_directory,
            consumer=self.consumer, collector=self.collector, reader=reader,
            thread_cache=ThreadCache(self.cache_max_bytes),
            clock_ms=_wall_clock_ms, reset_producer=self._reset_producer,
            metrics=self.metrics, thread_id=self.name, global_stores=self.global_stores,
            reset_policies=policies, default_reset_policy=default_reset, cooperative=self._cooperative,
            paused=self.paused)
        self.task_manager.on_tasks_changed = self._tasks_changed
        self.task_manager.input_buffer_max_bytes = self.input_buffer_max_bytes

    def _tasks_changed(self) -> None:
        self.active_task_ids = frozenset(self.task_manager.tasks)
        self._on_tasks_changed(self)

    # ---- rebalance callbacks (run inside consume()) -----------------------------------------

    def _on_assign(self, consumer: Any, partitions: list) -> None:
        if self._abandoned:
            return
        log.info("%s: assigned %s", self.name, [f"{tp.topic}-{tp.partition}" for tp in partitions])
        if partitions and self._shutdown_requested is not None and self._shutdown_requested():
            self._stop_event.set()
        self.task_manager.handle_assignment(partitions)
        # explicit start offsets (streams/runtime/offsets.py): the sources' reset policies, and
        # no client-side committed-offset lookup that could stall
        positions = self.task_manager.start_positions(partitions)
        if self._cooperative:
            consumer.incremental_assign(positions)
        else:
            consumer.assign(positions)
        self._set_state(ThreadState.PARTITIONS_ASSIGNED)

    def _on_revoke(self, consumer: Any, partitions: list) -> None:
        if self._abandoned:
            return
        log.info("%s: revoked %s", self.name, [f"{tp.topic}-{tp.partition}" for tp in partitions])
        if self.state is not ThreadState.PENDING_SHUTDOWN:
            self._set_state(ThreadState.PARTITIONS_REVOKED)
        self.task_manager.handle_revocation(partitions)

    def _on_lost(self, consumer: Any, partitions: list) -> None:
        if self._abandoned:
            return
        log.warning("%s: lost %s", self.name, [f"{tp.topic}-{tp.partition}" for tp in partitions])
        if self.state is not ThreadState.PENDING_SHUTDOWN:
            self._set_state(ThreadState.PARTITIONS_REVOKED)
        self.task_manager.handle_lost(partitions)

    # ---- the loop ---------------------------------------------------------------------------

    def run(self) -> None:
        try:
            self._set_state(ThreadState.STARTING)
            self._create_clients()
            self.consumer.subscribe(self.source_topics, on_assign=self._on_assign,
                                    on_revoke=self._on_revoke, on_lost=self._on_lost)
            commit_interval_s = self.config.commit_interval_ms / 1000.0
            next_commit = time.monotonic() + commit_interval_s
            next_purge = time.monotonic() + self.purge_interval_s
            task_timeout_s = self.config.task_timeout_ms / 1000.0
            commit_failing_since: Optional[float] = None  # the first of the retriable commit failures in a row
            while not self._stop_event.is_set():
                try:
                    self._run_once()
                    now = time.monotonic()
                    if now >= next_commit or self.task_manager.commit_requested() or self.snapshots.pending:
                        self._inject("before_commit")
                        self.task_manager.commit()
                        commit_failing_since = None
                        self._inject("after_commit")
                        if self.snapshots.pending:
                            self.snapshots.run(self)
                        next_commit = now + commit_interval_s
                        if self.repartition_topics and now >= next_purge:
                            self._purge_repartition_topics()
                            next_purge = now + self.purge_interval_s
                except RetriableCommitError as exc:
                    # consume() lets a rebalance finish meanwhile; retry.backoff.ms apart, so a
                    # long one does not meet a commit on every loop turn
                    now = time.monotonic()
                    if commit_failing_since is None:
                        commit_failing_since = now
                    elif now - commit_failing_since > task_timeout_s:
                        raise CommitTimeoutError(
                            f"{self.name}: offset commits failed for longer than task.timeout.ms "
                            f"({self.config.task_timeout_ms} ms), the last with: {exc}") from exc
                    log.info("%s: %s; committing again shortly", self.name, exc)
                    next_commit = now + min(commit_interval_s, COMMIT_RETRY_BACKOFF_S)
                except TaskMigratedError as exc:
                    self.task_manager.handle_migrated(exc)
                except ProcessingError as exc:
                    # the processing core wraps what a sink's send raised
                    cause = exc.__cause__
                    if isinstance(cause, TaskMigratedError):
                        self.task_manager.handle_migrated(cause)
                    elif isinstance(cause, TaskCorruptedError):
                        self.task_manager.handle_corruption(
                            getattr(cause, "task_ids", None) or list(self.task_manager.tasks),
                            list(cause.changelog_partitions))
                    else:
                        raise
                except TaskCorruptedError as exc:
                    self.task_manager.handle_corruption(getattr(exc, "task_ids", None) or list(self.task_manager.tasks),
                                                        list(exc.changelog_partitions))
            self._set_state(ThreadState.PENDING_SHUTDOWN)
            self._shutdown(clean=True)
        except SimulatedCrash:
            self._abandon()
        except BaseException as exc:  # noqa: BLE001 - reported to the App's handler
            log.exception("%s failed", self.name)
            if self._on_failure is not None:
                try:
                    self._on_failure(self, exc)
                except BaseException:  # noqa: BLE001
                    log.exception("%s: failure hook failed", self.name)
            try:
                if self.state is not ThreadState.PENDING_SHUTDOWN:
                    self._set_state(ThreadState.PENDING_SHUTDOWN)
                self._shutdown(clean=False)
            except BaseException:  # noqa: BLE001
                log.exception("%s: error while shutting down after a failure", self.name)
            self._set_dead()
            self._on_error(self, exc)
            return
        self._set_dead()

    def _set_dead(self) -> None:
        if self.state is not ThreadState.DEAD:
            if self.state is not ThreadState.PENDING_SHUTDOWN:
                self.state = ThreadState.PENDING_SHUTDOWN
            self._set_state(ThreadState.DEAD)

    def _run_once(self) -> None:
        tm = self.task_manager
        resize = self._resize_to
        if resize is not None:
            self._resize_to = None
            log.info("%s: cache resized to %d bytes, input buffer to %d bytes", self.name, *resize)
            tm.input_buffer_max_bytes = resize[1]
            tm.thread_cache.resize(resize[0])
        self._inject("poll")
        if self._applied_standby_version != self._standby_version:
            self._applied_standby_version = self._standby_version
            tm.set_desired_standbys(set(self.desired_standbys))
        restoring = len(tm._running) != len(tm.tasks)
        # records buffered: poll without blocking, unless their tasks idle for max.task.idle.ms
        # (they wait for data: a blocking poll brings it without spinning), or the app is paused
        busy = not tm.paused and (restoring or (tm.buffered() and not tm.only_idle_buffered))
        timeout = 0.0 if busy else self.config.poll_ms / 1000.0
        msgs = self.consumer.consume(self.config.max_poll_records, timeout)
        tm.apply_pauses()
        if msgs:
            tm.add_records(msgs)
        if self._stop_event.is_set():
            return  # a stop asked during this consume() (close(), or an application shutdown seen in
            # its assignment): process nothing more; what was added is committed from its first offset
        if tm.tasks or tm.standbys or tm.desired_standbys:
            all_running = tm.initialize_and_restore()
        else:
            all_running = True
        if all_running and (self.state is ThreadState.PARTITIONS_ASSIGNED or (
                self.state is ThreadState.PARTITIONS_REVOKED and self._cooperative)):
            # a cooperative revocation may not be followed by an (empty) assignment callback
            self._set_state(ThreadState.RUNNING)
        processed = tm.process(self._max_process_per_task)
        if processed:
            self.processed_total += processed
            self._inject("after_process")
        tm.punctuate()

    def _purge_repartition_topics(self) -> None:
        """Delete repartition records below the offsets this thread's tasks committed; the
        request runs in the background and a failure only costs disk (logged, retried later)."""
        offsets = {}
        for task in self.task_manager.tasks.values():
            for tp, offset in task.committed.items():
                if tp[0] in self.repartition_topics and self._purged.get(tp) != offset:
                    offsets[tp] = offset
        if not offsets or self.admin is None:
            return
        try:
            futures = self.admin.delete_records([TopicPartition(t, p, o) for (t, p), o in offsets.items()])
        except Exception as exc:  # noqa: BLE001 - purging is best effort
            log.info("%s: cannot purge repartition topics: %s", self.name, exc)
            return
        for tp, future in futures.items():
            future.add_done_callback(lambda f, key=(tp.topic, tp.partition), off=tp.offset: self._purge_done(key, off, f))

    def _purge_done(self, tp: tuple[str, int], offset: int, future: Any) -> None:
        exc = future.exception()
        if exc is None:
            self._purged[tp] = offset
        else:
            log.debug("%s: purging %s-%d below %d failed: %s", self.name, tp[0], tp[1], offset, exc)

    # ---- shutdown ---------------------------------------------------------------------------

    def _shutdown(self, *, clean: bool) -> None:
        tm = self.task_manager
        if tm is not None:
            try:
                tm.shutdown(clean=clean)
            except BaseException:
                log.exception("%s: error closing tasks", self.name)
                if clean:
                    raise
        self._close_clients(flush=clean)

    def _close_clients(self, *, flush: bool) -> None:
        self._abandoned = True  # callbacks during close have nothing left to do
        for name in ("consumer", "restore_consumer"):
            client = getattr(self, name)
            if client is not None:
                try:
                    # (a dynamic member leaves as its consumer closes)
                    if name == "consumer" and self._leave_group_on_close and self.config.group_instance_id is not None:
                        _leave_static_membership(client)
                    client.close()
                except Exception:  # noqa: BLE001
                    log.debug("%s: error closing %s", self.name, name, exc_info=True)
        if self.producer is not None:
            try:
                if flush:
                    self.producer.flush(30)
                else:
                    purge = getattr(self.producer, "purge", None)
                    if purge is not None:
                        purge()
            except Exception:  # noqa: BLE001
                log.debug("%s: error closing the producer", self.name, exc_info=True)
            close = getattr(self.producer, "close", None)
            if close is not None:
                try:
                    close()
                except Exception:  # noqa: BLE001
                    pass
        # the admin client is the app's, shared, and has no close: the last reference dropped ends
        # it (the app drops its own when it closes), so a closed thread keeps none
        self.admin = None
        if self.task_manager is not None:
            self.task_manager.reader.admin = None

    def _abandon(self) -> None:
        """A simulated process death: nothing is committed, flushed or aborted."""
        log.warning("%s: simulated crash, abandoning tasks", self.name)
        self._abandoned = True
        tm = self.task_manager
        if tm is not None:
            for task in list(tm.tasks.values()) + list(tm.standbys.values()):
                manager = task.manager
                if manager is not None:
                    try:
                        manager.close(dirty=True)
                    except Exception:  # noqa: BLE001
                        pass
                    self.state_directory.unlock(task.id)
        # a dead process stops heartbeating; leaving the group is the in-process equivalent
        self._close_clients(flush=False)
        if self.state is not ThreadState.DEAD:
            self.state = ThreadState.PENDING_SHUTDOWN
            self._set_state(ThreadState.DEAD)
