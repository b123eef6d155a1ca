"""App: runs a topology on `num.stream.threads` StreamThreads against any backend.

States (Kafka's KafkaStreams.State): CREATED -> REBALANCING <-> RUNNING -> PENDING_SHUTDOWN ->
NOT_RUNNING, and PENDING_ERROR -> ERROR when a thread dies and the uncaught exception handler
says to shut the client down (SHUTDOWN_CLIENT, the default) or the whole application
(SHUTDOWN_APPLICATION: every running instance ends in ERROR, see `shutdown_requests`);
REPLACE_THREAD starts a new thread in the dead one's place. `add_stream_thread()` and
`remove_stream_thread()` change the thread count while the app runs (Kafka's addStreamThread and
removeStreamThread): the group rebalances the tasks over the threads, and the threads share the
record cache and the input buffer equally.

Task placement: the group's assignor (cooperative-sticky, or range when a sub-topology reads
several topics, since only range keeps co-partitioned topics together) hands out source
partitions; a partition's task is (its sub-topology, its number). confluent-kafka cannot plug
in Kafka Streams' assignor, so standbys are placed by every instance from the group's membership
(`standby_placement`): num.standby.replicas copies of each stateful task on other instances,
refreshed on every local task change and every few seconds. When the membership cannot be read
(a broker without DescribeConsumerGroups), an instance keeps a standby of every stateful task
it does not run, which still covers any single instance failure.

Global stores (GlobalKTable, Topology.add_global_store) are kept by one GlobalStreamThread per
instance, from every partition of their topics; `start()` returns once they are bootstrapped
(the app stays REBALANCING meanwhile) and only then starts the stream threads, whose tasks read
them. A global thread that dies shuts the client down to ERROR (it is never replaced).
"""

from __future__ import annotations

import enum
import json
import logging
import os
import threading
import time
import uuid
import zlib
from typing import Any, Callable, Optional

from eddy.murmur2 import murmur2_partition
from state.directory import StateDirectory
from state.global_manager import GLOBAL_DIR_NAME
from state.errors import InvalidStateStoreError
from state.listener import StandbyUpdateListener, StateRestoreListener
from state.snapshot import Snapshot
from state.task_id import TaskId
from streams import backends
from streams.errors import ConfigError
from streams.internal_topics import InternalTopicManager
from streams.metrics import MetricsRegistry
from streams.runtime.config import StreamsConfig
from streams.runtime.global_thread import GlobalStreamThread, GlobalThreadState
from streams.runtime.errors import (InvalidQueryArgumentError, InvalidTimeoutError, RuntimeStateError,
                                    ThreadRemovalTimeoutError)
from streams.runtime.internal import plan_internal_topics
from streams.runtime.lags import LagInfo, local_store_partition_lags
from streams.runtime.metadata import ThreadMetadata
from streams.runtime.streams_metadata import (NOT_AVAILABLE, UNKNOWN_PARTITION, KeyQueryMetadata, Placement,
                                              StreamsMetadata, all_metadata, key_query_metadata, metadata_for_store)
from streams.runtime.queries import ReadOnlyKeyValueView, ReadOnlySessionView, ReadOnlyWindowView
from streams.runtime.snapshots import AppSnapshots
from streams.runtime.shutdown_requests import ShutdownRequests, shutdown_topic_name, shutdown_topic_spec
from streams.runtime.standby_placement import admin_client_id, standbys_from_members
from streams.runtime.task import TaskState
from streams.runtime.thread import StreamThread, ThreadState
from streams.topology import Topology

log = logging.getLogger(__name__)


class AppState(enum.Enum):
    CREATED = "CREATED"
    REBALANCING = "REBALANCING"
    RUNNING = "RUNNING"
    PENDING_SHUTDOWN = "PENDING_SHUTDOWN"
    NOT_RUNNING = "NOT_RUNNING"
    PENDING_ERROR = "PENDING_ERROR"
    ERROR = "ERROR"

    def is_running_or_rebalancing(self) -> bool:
        return self in (AppState.RUNNING, AppState.REBALANCING)


_ALLOWED = {
    AppState.CREATED: {AppState.REBALANCING, AppState.PENDING_SHUTDOWN, AppState.PENDING_ERROR},
    AppState.REBALANCING: {AppState.RUNNING, AppState.REBALANCING, AppState.PENDING_SHUTDOWN, AppState.PENDING_ERROR},
    AppState.RUNNING: {AppState.REBALANCING, AppState.PENDING_SHUTDOWN, AppState.PENDING_ERROR},
    AppState.PENDING_SHUTDOWN: {AppState.NOT_RUNNING},
    AppState.NOT_RUNNING: set(),
    AppState.PENDING_ERROR: {AppState.ERROR},
    AppState.ERROR: {AppState.PENDING_SHUTDOWN},
}


class StreamThreadExceptionResponse(enum.Enum):
    REPLACE_THREAD = "REPLACE_THREAD"
    SHUTDOWN_CLIENT = "SHUTDOWN_CLIENT"
    SHUTDOWN_APPLICATION = "SHUTDOWN_APPLICATION"


_PROCESS_FILE = "eddy-process-metadata"
#: How often the standby placement is recomputed from the group's membership besides after every
#: rebalance of this instance's threads (every rebalance of the group reaches each member): a
#: safety net that reads the membership again when the read after the last rebalance failed.
STANDBY_REFRESH_S = 3.0
#: How often the maintenance thread looks for another instance's SHUTDOWN_APPLICATION request.
SHUTDOWN_POLL_S = 1.0


def _load_process_id(app_dir: str) -> str:
    """A process id kept in the state directory, so a restarted instance reuses its
    transactional ids (fencing the crashed run's producers at once)."""
    path = os.path.join(app_dir, _PROCESS_FILE)
    try:
        with open(path, encoding="utf-8") as f:
            return str(uuid.UUID(json.load(f)["process_id"]))
    except (FileNotFoundError, ValueError, KeyError, TypeError):
        pass
    os.makedirs(app_dir, exist_ok=True)
    pid = str(uuid.uuid4())
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump({"process_id": pid}, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    return pid


def _deadline(timeout: Optional[float]) -> Optional[float]:
    """When (time.monotonic) `timeout` seconds from now end; None to wait as long as it takes."""
    return None if timeout is None or timeout == float("inf") else time.monotonic() + timeout


class App:
    """See the module doc. `App(topology, config)`, then `start()`, `store(name)`, `close()`."""

    def __init__(self, topology: Topology, config: dict) -> None:
        if not isinstance(topology, Topology):
            raise ConfigError(f"App needs a Topology (e.g. StreamsBuilder().build()), got {type(topology).__name__}")
        self.config = StreamsConfig.parse(config)
        self.topology = topology
        self.subtopologies = topology.build()
        topology.bind_config(self.config.raw)
        self.application_id = self.config.application_id
        self._state = AppState.CREATED
        self._lock = threading.RLock()
        self._state_changed = threading.Condition(self._lock)
        self._state_listener: Optional[Callable[[AppState, AppState], None]] = None
        self._exception_handler: Optional[Callable[[BaseException], StreamThreadExceptionResponse]] = None
        self._restore_listener: Optional[StateRestoreListener] = None
        self._standby_listener: Optional[StandbyUpdateListener] = None
        self.threads: list[StreamThread] = []
        # the global thread and the global stores it keeps (filled before the stream threads start)
        self._global_thread: Optional[GlobalStreamThread] = None
        self._global_stores: dict[str, Any] = {}
        self._metrics = MetricsRegistry()
        self._backend: Any = None
        self._admin: Any = None
        self._state_directory: Optional[StateDirectory] = None
        self._plan: Any = None
        self._store_sub: dict[str, int] = {s: sub.id for sub in self.subtopologies for s in sub.store_names}
        self.process_id: Optional[str] = None
        self._fault_injector: Optional[Callable[[StreamThread, str], None]] = None
        self._standby_wakeup = threading.Event()
        self._maintenance: Optional[threading.Thread] = None
        self._placed_standbys: Optional[set[TaskId]] = None  # None: membership unknown
        # rebalances this instance's threads have finished, and the group's members as read
        # after the latest of them, (rebalances, members): what query metadata and standby
        # placement read between rebalances (Kafka's StreamsMetadataState, kept from the last
        # assignment), so a query costs no round trip to the coordinator
        self._rebalances = 0
        self._membership: Optional[tuple[int, Any]] = None
        self._shutdown_requests: Optional[ShutdownRequests] = None
        self._responses: dict[StreamThread, StreamThreadExceptionResponse] = {}  # failed thread -> handler's answer
        self._snapshots = AppSnapshots(self)
        self._paused = threading.Event()  # pause() / resume(): every stream thread reads it

    # ---- state ------------------------------------------------------------------------------

    @property
    def state(self) -> AppState:
        return self._state

    def _set_state(self, new: AppState) -> bool:
        with self._lock:
            old = self._state
            if old is new and new is not AppState.REBALANCING:
                return False
            if new not in _ALLOWED[old]:
                if old in (AppState.PENDING_SHUTDOWN, AppState.NOT_RUNNING, AppState.PENDING_ERROR, AppState.ERROR):
                    return False  # late thread events while shutting down
                raise RuntimeStateError(f"app {self.application_id}: invalid transition {old.value} -> {new.value}")
            self._state = new
            self._state_changed.notify_all()
            listener = self._state_listener
        if listener is not None and old is not new:
            try:
                listener(new, old)
            except Exception:  # noqa: BLE001 - a listener must not break the runtime
                log.exception("state listener failed on %s -> %s", old.value, new.value)
        return True

    def wait_for_state(self, *states: AppState, timeout: float = 60.0) -> bool:
        """Block until the app is in one of `states` (True) or `timeout` passes (False)."""
        deadline = time.monotonic() + timeout
        with self._lock:
            while self._state not in states:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return False
                self._state_changed.wait(remaining)
            return True

    def set_state_listener(self, listener: Callable[[AppState, AppState], None]) -> None:
        self._require_created("set_state_listener")
        if not callable(listener):
            raise ConfigError(f"state listener must be callable, got {listener!r}")
        self._state_listener = listener

    def set_uncaught_exception_handler(self, handler: Callable[[BaseException], StreamThreadExceptionResponse]) -> None:
        self._require_created("set_uncaught_exception_handler")
        if not callable(handler):
            raise ConfigError(f"uncaught exception handler must be callable, got {handler!r}")
        self._exception_handler = handler

    def set_global_state_restore_listener(self, listener: StateRestoreListener) -> None:
        self._require_created("set_global_state_restore_listener")
        for name in ("on_restore_start", "on_batch_restored", "on_restore_end", "on_restore_suspended"):
            if not callable(getattr(listener, name, None)):
                raise ConfigError(f"restore listener {listener!r} has no {name}()")
        self._restore_listener = listener

    def set_standby_update_listener(self, listener: StandbyUpdateListener) -> None:
        """The listener told as standby tasks keep their stores up to date (Kafka's
        setStandbyUpdateListener): on_update_start, on_batch_loaded, on_update_suspended."""
        self._require_created("set_standby_update_listener")
        for name in ("on_update_start", "on_batch_loaded", "on_update_suspended"):
            if not callable(getattr(listener, name, None)):
                raise ConfigError(f"standby update listener {listener!r} has no {name}()")
        self._standby_listener = listener

    def _require_created(self, what: str) -> None:
        if self._state is not AppState.CREATED:
            raise RuntimeStateError(f"{what} is only allowed before start() (app is {self._state.value})")

    # ---- start ------------------------------------------------------------------------------

    def start(self) -> None:
        self._require_created("start")
        cfg = self.config
        self._backend = backends.for_config(cfg.backend_config())
        try:
            self._admin = self._backend.admin({"client.id": admin_client_id(self.application_id)})
            self._plan = self._prepare_topics()
            os.makedirs(cfg.state_dir, exist_ok=True)
            self._state_directory = StateDirectory(cfg.state_dir, self.application_id)
            self._state_directory.lock_application()
            self.process_id = _load_process_id(str(self._state_directory.app_dir))
            self._shutdown_requests = ShutdownRequests(self._backend, self._admin, self.application_id,
                                                       self.process_id)
            self._shutdown_requests.start()
        except BaseException:
            if self._state_directory is not None:
                self._state_directory.close()
                self._state_directory = None
            self._backend.close()
            raise
        multi_topic = any(len(s.source_topics) > 1 for s in self.subtopologies)
        self._assignment_strategy = cfg.raw.get("main.consumer.partition.assignment.strategy") or (
            "range" if multi_topic else "cooperative-sticky")
        self._set_state(AppState.REBALANCING)
        if self.topology.global_subtopology() is not None and not self._start_global_thread():
            return
        # a topology of global stores only runs no stream thread (Kafka): it is RUNNING at once
        num_threads = cfg.num_stream_threads if self.subtopologies else 0
        with self._lock:
            for i in range(1, num_threads + 1):
                self.threads.append(self._new_thread(i))
        self._update_standbys()
        for t in list(self.threads):
            t.start()
        if not self.subtopologies:
            self._set_state(AppState.RUNNING)
        self._maintenance = threading.Thread(target=self._maintenance_loop, daemon=True,
                                             name=f"{self.application_id}-maintenance")
        self._maintenance.start()
        self._snapshots.start()

    def _start_global_thread(self) -> bool:
        """Start the global thread and wait for its bootstrap, as Kafka's start() does: the
        stream threads start only once every global store is loaded. A bootstrap failure
        ends the app in ERROR and is raised; False if the app was closed meanwhile."""
        thread = GlobalStreamThread(self.topology, config=self.config, backend=self._backend,
                                    state_directory=self._state_directory, restore_listener=self._restore_listener,
                                    metrics=self._metrics, on_error=self._on_global_thread_error,
                                    live_threads=self.config.num_stream_threads if self.subtopologies else 0)
        self._global_thread = thread
        try:
            thread.start()
        except BaseException:
            log.error("application %s: bootstrapping the global stores failed; the client shuts down to ERROR",
                      self.application_id)
            if self._set_state(AppState.PENDING_ERROR):
                self._release()
                self._set_state(AppState.ERROR)
            raise
        self._global_stores.update(thread.stores)
        return self._state is AppState.REBALANCING

    def _prepare_topics(self) -> Any:
        metadata = self._admin.list_topics(timeout=30)
        existing = {name: len(t.partitions) for name, t in metadata.topics.items()
                    if t.error is None and t.partitions}
        plan = plan_internal_topics(self.topology, self.subtopologies, self.application_id, existing,
                                    self.config.replication_factor,
                                    self.config.window_changelog_additional_retention_ms,
                                    self.config.internal_topic_configs)
        InternalTopicManager(self._admin).make_ready({
            **plan.specs, shutdown_topic_name(self.application_id): shutdown_topic_spec(self.config.replication_factor)})
        return plan

    def _new_thread(self, index: int, live_threads: Optional[int] = None) -> StreamThread:
        """Stream thread number `index`, taking its share for `live_threads` stream threads
        (default num.stream.threads)."""
        thread = StreamThread(
            index, topology=self.topology, subtopologies=self.subtopologies, config=self.config,
            backend=self._backend, admin=self._admin, state_directory=self._state_directory,
            process_id=self.process_id, source_topics=self._plan.source_topics,
            restore_listener=self._restore_listener, standby_listener=self._standby_listener,
            on_state_change=self._on_thread_state,
            on_error=self._on_thread_error, on_tasks_changed=self._on_tasks_changed,
            assignment_strategy=self._assignment_strategy, on_failure=self._on_thread_failure,
            shutdown_requested=self._shutdown_requested, metrics=self._metrics, global_stores=self._global_stores,
            live_threads=live_threads, paused=self._paused)
        if self._fault_injector is not None:
            injector = self._fault_injector
            thread.fault_injector = lambda point, th=thread: injector(th, point)
        return thread

    def set_fault_injector(self, injector: Optional[Callable[[StreamThread, str], None]]) -> None:
        """Testing hook: `injector(thread, point)` runs at named points of each thread's loop
        ("after_process", "before_commit", "after_commit") and may raise SimulatedCrash."""
        self._fault_injector = injector
        for thread in self.threads:
            thread.fault_injector = None if injector is None else (lambda point, th=thread: injector(th, point))

    # ---- the thread count (Kafka's addStreamThread / removeStreamThread) --------------------

    def _live_threads(self) -> list[StreamThread]:
        """The stream threads neither stopping nor dead (Kafka's numLiveStreamThreads), after
        trimming the dead ones from `threads` (their numbers are free again). The lock is held."""
        self.threads[:] = [t for t in self.threads if t.state is not ThreadState.DEAD]
        return [t for t in self.threads if not t.stopping and t.state is not ThreadState.PENDING_SHUTDOWN]

    def _next_thread_index(self) -> int:
        """The lowest number no stream thread in `threads` has (Kafka's nextThreadIndex: the
        names of stopped threads are reused). The lock is held."""
        taken = {t.index for t in self.threads if t.state is not ThreadState.DEAD}
        index = 1
        while index in taken:
            index += 1
        return index

    def add_stream_thread(self) -> Optional[str]:
        """Start one more stream thread (Kafka's addStreamThread). It joins the group, and the
        rebalance that follows gives it its share of the tasks; the live threads' caches and
        input buffers become statestore.cache.max.bytes and input.buffer.max.bytes over the new
        count, each thread resizing its own at its next loop turn. Returns the new thread's name
        (`<application.id>-StreamThread-<n>`, n the lowest free number), or None when the app is
        not RUNNING or REBALANCING, or its topology has no stream tasks (global stores only)."""
        with self._lock:
            if not self._state.is_running_or_rebalancing():
                log.warning("cannot add a stream thread while the app is %s", self._state.value)
                return None
            if not self.subtopologies:
                log.warning("cannot add a stream thread: the topology has global stores only")
                return None
            live = self._live_threads()
            count = len(live) + 1
            for other in live:
                other.resize(count)
            if self._global_thread is not None:
                self._global_thread.resize(count)
            thread = self._new_thread(self._next_thread_index(), live_threads=count)
            self.threads.append(thread)
            log.info("adding %s: %d live stream threads, %d cache bytes each", thread.name, count,
                     thread.cache_max_bytes)
            thread.start()
        self._update_standbys()
        return thread.name

    def remove_stream_thread(self, timeout: Optional[float] = None) -> Optional[str]:
        """Stop one live stream thread (Kafka's removeStreamThread: the first one started that
        is not the caller, unless it is the only one). It commits, closes its tasks and leaves
        the group (a static member too, as Kafka's removes it from the group), whose rebalance
        moves its tasks to the other threads and instances; the remaining live threads' caches
        and input buffers grow to the totals over their count.
        Waits up to `timeout` seconds for the thread to end (None: as long as it takes; a thread
        removing itself is not waited for). Returns the thread's name, or None when the app is
        not RUNNING or REBALANCING or no thread is live. Raises ThreadRemovalTimeoutError when
        the thread did not end within `timeout` (it goes on stopping)."""
        if timeout is not None and (isinstance(timeout, bool) or not isinstance(timeout, (int, float))
                                    or not timeout >= 0):
            raise InvalidTimeoutError(f"remove_stream_thread: timeout must be None or seconds >= 0, got {timeout!r}")
        deadline = _deadline(timeout)
        me = threading.current_thread()
        with self._lock:
            if not self._state.is_running_or_rebalancing():
                log.warning("cannot remove a stream thread while the app is %s", self._state.value)
                return None
            live = self._live_threads()
            victim = next((t for t in live if t is not me or len(live) == 1), None)
            if victim is None:
                log.warning("no stream thread can be removed: none is live")
                return None
            log.info("removing %s", victim.name)
            victim.shutdown(leave_group=True)  # a static member too: its tasks move now
        if victim is not me:
            victim.join(None if deadline is None else max(0.0, deadline - time.monotonic()))
        with self._lock:
            remaining = self._live_threads()  # (trims the victim once it is dead)
            for other in remaining:
                other.resize(len(remaining))
            if self._global_thread is not None:
                self._global_thread.resize(len(remaining))
        self._update_standbys()
        if victim is not me and victim.is_alive():
            raise ThreadRemovalTimeoutError(f"{victim.name} did not stop within {timeout} s")
        return victim.name

    # ---- pause (Kafka's KIP-834) ------------------------------------------------------------

    def pause(self) -> None:
        """Pause processing (Kafka's pause): the stream threads go on polling, taking part in
        rebalances and committing, but restore nothing, update no standby, process no record and
        punctuate nothing until `resume()`; their input waits in the buffers, whose bounds pause
        the partitions as they fill. The global thread goes on. May be called before start()."""
        log.info("application %s: processing paused", self.application_id)
        self._paused.set()

    def resume(self) -> None:
        """Resume what `pause()` paused."""
        log.info("application %s: processing resumed", self.application_id)
        self._paused.clear()

    def is_paused(self) -> bool:
        return self._paused.is_set()

    # ---- thread events ----------------------------------------------------------------------

    def _on_thread_state(self, thread: StreamThread, new: ThreadState, old: ThreadState) -> None:
        with self._lock:
            if self._state not in (AppState.RUNNING, AppState.REBALANCING):
                return
            if new is ThreadState.PARTITIONS_ASSIGNED:  # a rebalance ended: the membership may differ
                self._rebalances += 1
                self._standby_wakeup.set()
            live = [t for t in self.threads if t.state is not ThreadState.DEAD]
            global_running = self._global_thread is None or self._global_thread.state is GlobalThreadState.RUNNING
            if live and all(t.state is ThreadState.RUNNING for t in live) and global_running:
                self._set_state(AppState.RUNNING)
            elif any(t.state in (ThreadState.STARTING, ThreadState.PARTITIONS_ASSIGNED,
                                 ThreadState.PARTITIONS_REVOKED) for t in live):
                if self._state is AppState.RUNNING:
                    self._set_state(AppState.REBALANCING)

    def _on_tasks_changed(self, thread: StreamThread) -> None:
        self._update_standbys()
        self._standby_wakeup.set()

    def _maintenance_loop(self) -> None:
        """Off the stream threads (all need broker round trips or disk scans): look for another
        instance's shutdown request every SHUTDOWN_POLL_S; recompute this instance's standbys from
        the group's membership (see the module doc) after every rebalance, on every local task
        change and every STANDBY_REFRESH_S; and every state.cleanup.delay.ms delete the
        directories of tasks this instance no longer has."""
        standbys = self.config.num_standby_replicas >= 1
        cleanup_delay_s = max(0.0, float(self.config.raw.get("state.cleanup.delay.ms", 600000)) / 1000.0)
        now = time.monotonic()
        next_cleanup = now + cleanup_delay_s
        next_shutdown_poll = now + SHUTDOWN_POLL_S
        next_standbys = now + STANDBY_REFRESH_S if standbys else float("inf")
        while self._state.is_running_or_rebalancing():
            due = min(next_cleanup, next_shutdown_poll, next_standbys)
            woken = self._standby_wakeup.wait(max(0.0, due - time.monotonic()))
            self._standby_wakeup.clear()
            if not self._state.is_running_or_rebalancing():
                break
            now = time.monotonic()
            if now >= next_shutdown_poll:
                if self._shutdown_requested():
                    break
                next_shutdown_poll = time.monotonic() + SHUTDOWN_POLL_S
            if standbys and (woken or now >= next_standbys):
                placed = self._standbys_from_membership()
                if placed != self._placed_standbys:
                    self._placed_standbys = placed
                    self._update_standbys()
                next_standbys = time.monotonic() + STANDBY_REFRESH_S
            if now >= next_cleanup:
                self._clean_removed_tasks(cleanup_delay_s)
                next_cleanup = time.monotonic() + cleanup_delay_s

    def _shutdown_requested(self) -> bool:
        """True if this instance is stopping, or some instance asked the application to shut
        down since this one started (this one then stops to ERROR). Asked by the maintenance
        thread and by stream threads on every assignment."""
        if not self._state.is_running_or_rebalancing():
            return True
        requests = self._shutdown_requests
        request = requests.poll() if requests is not None else None
        if request is None:
            return False
        if self._begin_error_shutdown():
            log.error("application %s: shutdown requested (%s); shutting this instance down",
                      self.application_id, request.describe())
        return True

    def _clean_removed_tasks(self, cleanup_delay_s: float) -> None:
        directory = self._state_directory
        if directory is None:
            return
        owned = set()
        try:
            for thread in list(self.threads):
                tm = thread.task_manager
                if tm is not None:
                    owned |= set(tm.tasks) | set(tm.standbys) | set(thread.desired_standbys)
        except RuntimeError:  # a thread changed its tasks while we looked: try next round
            return
        try:
            removed = directory.clean_removed_tasks(owned, int(cleanup_delay_s * 1000))
        except Exception:  # noqa: BLE001 - cleaning is housekeeping; the next round retries
            log.exception("cleaning obsolete task directories failed")
            return
        if removed:
            log.info("deleted the state of tasks no longer here: %s", sorted(str(t) for t in removed))

    def _group_members(self, admin: Any, what: str, level: int = logging.INFO) -> Optional[list]:
        """The group's members as read once after this instance's latest rebalance (one
        DescribeConsumerGroups request); None when they cannot be read now (logged at `level`;
        the next call asks again)."""
        rebalances, membership = self._rebalances, self._membership
        if membership is not None and membership[0] == rebalances:
            return membership[1]
        try:
            group = admin.describe_consumer_groups([self.application_id])[self.application_id].result(10)
        except Exception as exc:  # noqa: BLE001 - unknown for now, as Kafka's before its first assignment
            log.log(level, "cannot describe group %s to %s: %s", self.application_id, what, exc)
            return None
        self._membership = (rebalances, group.members)  # a rebalance meanwhile outdates it at once
        return group.members

    def _standbys_from_membership(self) -> Optional[set[TaskId]]:
        admin = self._admin
        if admin is None or self._plan is None or self.process_id is None:
            return None
        members = self._group_members(admin, "place the standbys", level=logging.DEBUG)
        if members is None:  # fall back to every non-active task
            return None
        processes, placed = standbys_from_members(self.application_id, members,
                                                  self._placement().stateful_task_of_partition(),
                                                  self.config.num_standby_replicas)
        if self.process_id not in processes:
            return None  # not (yet) a member: nothing trustworthy to place from
        return placed[self.process_id]

    def _update_standbys(self) -> None:
        if self.config.num_standby_replicas < 1 or self._plan is None:
            return
        with self._lock:
            threads = [t for t in self.threads if t.state is not ThreadState.DEAD]
            if not threads:
                return
            active = set()
            for t in threads:
                active |= t.active_task_ids
            stateful = [TaskId(sub.id, p) for sub in self.subtopologies if sub.store_names
                        for p in range(self._plan.partitions_of_sub[sub.id])]
            wanted: dict[int, set] = {t.index: set() for t in threads}
            indexes = sorted(wanted)
            placed = self._placed_standbys
            for task_id in stateful:
                if task_id not in active and (placed is None or task_id in placed):
                    slot = indexes[zlib.crc32(str(task_id).encode()) % len(indexes)]
                    wanted[slot].add(task_id)
            for t in threads:
                if t.desired_standbys != frozenset(wanted[t.index]):
                    t.set_desired_standbys(frozenset(wanted[t.index]))

    def _on_thread_failure(self, thread: StreamThread, exc: BaseException) -> None:
        """On the failing thread, before it closes its tasks and leaves the group (where Kafka
        Streams asks its handler): ask the uncaught exception handler, and for
        SHUTDOWN_APPLICATION write the request before the group rebalances the thread's
        partitions to another instance, which checks for requests on every assignment."""
        handler = self._exception_handler
        response = StreamThreadExceptionResponse.SHUTDOWN_CLIENT
        if handler is not None:
            try:
                response = handler(exc)
            except Exception:  # noqa: BLE001
                log.exception("uncaught exception handler failed; shutting the client down")
            if not isinstance(response, StreamThreadExceptionResponse):
                log.error("uncaught exception handler returned %r; shutting the client down", response)
                response = StreamThreadExceptionResponse.SHUTDOWN_CLIENT
        self._responses[thread] = response
        if response is StreamThreadExceptionResponse.SHUTDOWN_APPLICATION and self._state.is_running_or_rebalancing():
            log.error("%s failed (%r): asking every instance of %s to shut down", thread.name, exc,
                      self.application_id)
            requests = self._shutdown_requests
            if requests is None or not requests.send(thread.name, exc):
                log.error("the other instances of %s could not be asked to shut down; only this one stops",
                          self.application_id)
            self._begin_error_shutdown()

    def _on_thread_error(self, thread: StreamThread, exc: BaseException) -> None:
        """Once the failed thread is dead: replace it or shut down, as its handler answered."""
        response = self._responses.pop(thread, StreamThreadExceptionResponse.SHUTDOWN_CLIENT)
        if response is StreamThreadExceptionResponse.REPLACE_THREAD and self._state.is_running_or_rebalancing():
            log.warning("replacing %s after: %r", thread.name, exc)
            with self._lock:
                live = self._live_threads()  # (trims the dead thread: add_stream_thread may have)
                # its number, unless a thread added meanwhile took it
                index = thread.index if all(t.index != thread.index for t in self.threads) else self._next_thread_index()
                replacement = self._new_thread(index, live_threads=len(live) + 1)
                self.threads.append(replacement)
            replacement.start()
            return
        if response is not StreamThreadExceptionResponse.SHUTDOWN_APPLICATION:
            log.error("%s died (%r): shutting the client down", thread.name, exc)
        self._begin_error_shutdown()

    def _on_global_thread_error(self, thread: GlobalStreamThread, exc: BaseException) -> None:
        """The global thread died after its bootstrap: ask the handler (SHUTDOWN_APPLICATION
        reaches every instance), then shut this client down to ERROR; a global thread is never
        replaced (Kafka)."""
        self._on_thread_failure(thread, exc)  # type: ignore[arg-type]
        response = self._responses.pop(thread, StreamThreadExceptionResponse.SHUTDOWN_CLIENT)  # type: ignore[arg-type]
        if response is StreamThreadExceptionResponse.REPLACE_THREAD:
            log.error("the global thread cannot be replaced (%r): shutting the client down", exc)
        elif response is not StreamThreadExceptionResponse.SHUTDOWN_APPLICATION:
            log.error("the global thread died (%r): shutting the client down", exc)
        self._begin_error_shutdown()

    def _begin_error_shutdown(self) -> bool:
        """PENDING_ERROR, then (off the calling thread) stop every thread and end in ERROR;
        False if the app was already stopping."""
        if not self._set_state(AppState.PENDING_ERROR):
            return False
        threading.Thread(target=self._shutdown_after_error, name=f"{self.application_id}-shutdown",
                         daemon=True).start()
        return True

    def _shutdown_after_error(self) -> None:
        for t in self.threads:
            t.shutdown()
        for t in self.threads:
            if t is not threading.current_thread():
                t.join()
        self._stop_global_thread(None)
        self._release()
        self._set_state(AppState.ERROR)

    # ---- close ------------------------------------------------------------------------------

    def close(self, timeout: Optional[float] = None, *, leave_group: bool = False) -> bool:
        """Stop every thread (each commits and closes its tasks); True if all stopped within
        `timeout` seconds (None: wait as long as it takes). With static membership
        (group.instance.id) the threads keep their places in the group until their sessions
        time out, so that a restart gets its tasks back without a rebalance; `leave_group`
        (Kafka's CloseOptions.leaveGroup) takes them out at once, for an instance that is not
        coming back. A dynamic member always leaves."""
        with self._lock:
            state = self._state
            if state is AppState.NOT_RUNNING:
                return True
            if state is AppState.PENDING_ERROR:
                pass
            elif state is not AppState.PENDING_SHUTDOWN:
                self._set_state(AppState.PENDING_SHUTDOWN)
        if state is AppState.PENDING_ERROR:
            if not self.wait_for_state(AppState.ERROR, timeout=timeout if timeout is not None else 1e9):
                return False
            self._set_state(AppState.PENDING_SHUTDOWN)
        deadline = _deadline(timeout)
        self._standby_wakeup.set()  # the placer sees the state and ends
        for t in self.threads:
            t.shutdown(leave_group=leave_group)
        for t in self.threads:
            if t.is_alive():
                t.join(None if deadline is None else max(0.0, deadline - time.monotonic()))
        if any(t.is_alive() for t in self.threads) or not self._stop_global_thread(deadline):
            return False
        self._release()
        self._set_state(AppState.NOT_RUNNING)
        return True

    def _stop_global_thread(self, deadline: Optional[float], *, clean: bool = True) -> bool:
        """Stop the global thread after the stream threads (they read its stores); True once it
        is stopped (False: still running at `deadline`)."""
        thread = self._global_thread
        if thread is None or not thread.is_alive() or thread is threading.current_thread():
            return True
        thread.shutdown(clean=clean)
        thread.join(None if deadline is None else max(0.0, deadline - time.monotonic()))
        return not thread.is_alive()

    def _release(self) -> None:
        self._snapshots.stop()
        with self._lock:
            sd, self._state_directory = self._state_directory, None
            backend, self._backend = self._backend, None
            # the admin client has no close: dropping every reference ends it (the stream
            # threads drop theirs as they close their clients)
            self._admin = None
            self._shutdown_requests = None
        if sd is not None:
            sd.close()
        if backend is not None:
            backend.close()

    def crash(self) -> None:
        """Testing aid: every thread stops at once as if the process died (no commit, flush or
        transaction abort); the app ends NOT_RUNNING."""
        from streams.runtime.thread import SimulatedCrash

        def boom(thread: StreamThread, point: str) -> None:
            raise SimulatedCrash(point)

        self.set_fault_injector(boom)
        with self._lock:
            if self._state is not AppState.PENDING_SHUTDOWN and self._state is not AppState.NOT_RUNNING:
                self._state = AppState.PENDING_SHUTDOWN
        for t in self.threads:
            t.join(60)
        self._stop_global_thread(time.monotonic() + 60, clean=False)
        self._release()
        self._set_state(AppState.NOT_RUNNING)

    def clean_up(self) -> None:
        """Delete this instance's local state (Kafka's cleanUp): every task directory and the
        global stores' directory under `<state.dir>/<application.id>`, so that the next start
        restores every store from its changelog (the process id stays). Only before start() or
        once the app is NOT_RUNNING or in ERROR: raises RuntimeStateError otherwise, and
        LockError when another running instance uses the state directory."""
        with self._lock:
            if self._state not in (AppState.CREATED, AppState.NOT_RUNNING, AppState.ERROR):
                raise RuntimeStateError(f"cannot clean up the state of app {self.application_id} while it is "
                                        f"{self._state.value}: close it first")
            directory = StateDirectory(self.config.state_dir, self.application_id)
            directory.lock_application()
            try:
                directory.clean([GLOBAL_DIR_NAME])
            finally:
                directory.close()

    def __enter__(self) -> "App":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def metrics(self) -> list:
        """Kafka Streams' metrics of this instance (streams.metrics.Metric list): at least the
        tasks' dropped-records and process totals and rates."""
        return self._metrics.metrics()

    # ---- interactive queries ----------------------------------------------------------------

    def store(self, name: str) -> ReadOnlyKeyValueView | ReadOnlyWindowView | ReadOnlySessionView:
        """A read-only view of store `name` over this instance's active tasks: Kafka's
        ReadOnlyKeyValueStore, ReadOnlyWindowStore or ReadOnlySessionStore, as the store is. A
        global store is queried in full on every instance (its one local copy)."""
        if self.topology.is_global_store(name):
            sub, partitions = 0, 1

            def local() -> dict[TaskId, Any]:
                store = self._global_stores.get(name)
                return {} if store is None else {TaskId(0, 0): store}
        else:
            self._check_store_name(name)
            sub = self._store_sub[name]
            partitions = self._plan.partitions_of_sub[sub] if self._plan is not None else 1

            def local() -> dict[TaskId, Any]:
                return self._local_stores(name, sub)
        self._check_queryable(name)
        builder = self.topology.store_builder(name)
        if callable(getattr(builder, "store_builder", None)):  # a DSL materialization
            builder = builder.store_builder()
        kind = getattr(builder, "kind", "key_value")
        view = {"window": ReadOnlyWindowView, "session": ReadOnlySessionView}.get(kind, ReadOnlyKeyValueView)
        return view(name, sub, partitions, local, lambda: self._check_queryable(name))

    def _check_queryable(self, name: str) -> None:
        if not self._state.is_running_or_rebalancing():
            raise InvalidStateStoreError(
                f"cannot query store {name!r}: the app is {self._state.value}, not RUNNING or REBALANCING")

    def _local_stores(self, name: str, sub: int) -> dict[TaskId, Any]:
        result = {}
        for thread in list(self.threads):
            tm = thread.task_manager
            if tm is None:
                continue
            for task_id, task in list(tm.tasks.items()):
                if task_id.subtopology == sub and task.state is TaskState.RUNNING:
                    store = task.store(name)
                    if store is not None:
                        result[task_id] = store
        return result

    def metadata_for_local_threads(self) -> list[ThreadMetadata]:
        """What each live stream thread of this instance runs (Kafka's metadataForLocalThreads):
        its name, state, clients' ids, and its active and standby tasks with their partitions,
        committed and end offsets as of their last commit, and idling."""
        with self._lock:
            threads = [t for t in self.threads if t.state is not ThreadState.DEAD]
        return [t.metadata() for t in threads]

    # ---- interactive-query metadata (Kafka's StreamsMetadata, see streams_metadata) ---------

    def _require_running(self, what: str) -> Any:
        """The admin client, if the app is RUNNING or REBALANCING; else RuntimeStateError."""
        with self._lock:
            if not self._state.is_running_or_rebalancing() or self._admin is None:
                raise RuntimeStateError(f"cannot {what} of app {self.application_id}: it is {self._state.value}, "
                                        "not RUNNING or REBALANCING")
            return self._admin

    def _placement(self) -> Placement:
        return Placement(
            stores_of_sub={sub.id: tuple(sub.store_names) for sub in self.subtopologies},
            topics_of_sub={sub.id: tuple(self.topology.decorate_topic(t, self.application_id) for t in sub.source_topics)
                           for sub in self.subtopologies},
            partitions_of_sub=dict(self._plan.partitions_of_sub),
            global_stores=frozenset(self.topology.global_store_names), standby_replicas=self.config.num_standby_replicas)

    def _all_metadata(self, what: str) -> Optional[list[StreamsMetadata]]:
        """Every instance's metadata from the group's membership as of this instance's latest
        rebalance (read once after it); None when it cannot be read now."""
        members = self._group_members(self._require_running(what), what)
        return None if members is None else all_metadata(self.application_id, members, self._placement())

    def metadata_for_all_streams_clients(self) -> list[StreamsMetadata]:
        """Every instance of this application that has an `application.server`: its endpoint and
        the stores and partitions of its active and standby tasks (Kafka's
        metadataForAllStreamsClients; as of this instance's latest rebalance)."""
        return self._all_metadata("read the streams metadata") or []

    def streams_metadata_for_store(self, store: str) -> list[StreamsMetadata]:
        """The instances (with an `application.server`) holding `store`, actively or in a standby
        (Kafka's streamsMetadataForStore); every one for a global store."""
        self._check_store_name(store)
        return metadata_for_store(store, self._all_metadata("read the streams metadata") or [], self._placement())

    def query_metadata_for_key(self, store: str, key: Any, key_serde: Any = None, *,
                               partitioner: Optional[Callable[[str, Any, Any, int], Optional[int]]] = None
                               ) -> KeyQueryMetadata:
        """Which instance's active task holds `key` of `store`, which keep standbys of it, and its
        partition (Kafka's queryMetadataForKey): the partition is what Kafka's default partitioner
        gives the key serialized by `key_serde` (the store's source topics are partitioned so), or
        `partitioner(topic, key, None, num_partitions)` for a store whose input a custom partitioner
        wrote. NOT_AVAILABLE while the group's membership cannot be read."""
        self._check_store_name(store)
        everyone = self._all_metadata("query the metadata of a key")
        if everyone is None:
            return NOT_AVAILABLE
        placement = self._placement()
        if store in placement.global_stores:
            return key_query_metadata(store, -1, UNKNOWN_PARTITION, everyone, placement, self.config.application_server)
        sub = self._store_sub[store]
        topic, count = placement.topics_of_sub[sub][0], placement.partitions_of_sub[sub]
        partition = partitioner(topic, key, None, count) if partitioner is not None else None
        if partition is None:
            serialize = getattr(key_serde, "serialize", None)
            if not callable(serialize):
                raise InvalidQueryArgumentError(f"query_metadata_for_key({store!r}): give the key's serde (or a "
                                                f"partitioner) to place the key, got key_serde={key_serde!r}")
            partition = murmur2_partition(serialize(key), count)
        elif isinstance(partition, bool) or not isinstance(partition, int) or not 0 <= partition < count:
            raise InvalidQueryArgumentError(f"query_metadata_for_key({store!r}): the partitioner gave {partition!r}, "
                                            f"not a partition of 0-{count - 1}")
        return key_query_metadata(store, sub, partition, everyone, placement, self.config.application_server)

    def _check_store_name(self, name: str) -> None:
        if name not in self._store_sub and not self.topology.is_global_store(name):
            raise InvalidStateStoreError(
                f"unknown state store {name!r}; the topology has "
                f"{sorted({*self._store_sub, *self.topology.global_store_names})}")

    def all_local_store_partition_lags(self) -> dict[str, dict[int, LagInfo]]:
        """{store name: {partition: LagInfo}} of every store partition this instance holds,
        active or standby: its position in its changelog, the changelog's end offset and the lag
        between them (Kafka's allLocalStorePartitionLags; one list_offsets request to the
        brokers, so call it every few seconds at most). A running active task is at the end."""
        admin = self._require_running("read the store lags")
        return local_store_partition_lags(list(self.threads), admin)

    # ---- snapshots --------------------------------------------------------------------------

    def snapshot(self, store_name: str, dest: Optional[str] = None) -> "Snapshot":
        """A consistent snapshot of every local shard of store `store_name`, taken at a commit
        boundary, in `dest` (default: a new directory under `snapshot.dir`); see
        `streams.runtime.snapshots`. Read it with `connectors.spark` or `state.snapshot`."""
        return self._snapshots.take(store_name, dest)

    # ---- introspection ----------------------------------------------------------------------

    def local_tasks(self) -> dict[str, list[TaskId]]:
        """Active and standby task ids of this instance."""
        active, standby = [], []
        for thread in self.threads:
            tm = thread.task_manager
            if tm is not None:
                active += list(tm.tasks)
                standby += list(tm.standbys)
        return {"active": sorted(active), "standby": sorted(standby)}
