"""TaskManager: a stream thread's active and standby tasks across assignment changes.

Tasks are (sub-topology, partition): an assigned source partition `(topic, p)` belongs to task
`<sub-topology of topic>_<p>`, whose input is every source topic of that sub-topology at
partition p (co-partitioning). New tasks are CREATED, initialised (directory lock, stores,
checkpoint), restored by the thread's StoreChangelogReader (active changelogs first, then
standbys), and only then process; their input partitions stay paused meanwhile.

Commit (`commit`) is Kafka's: flush caches -> flush the producer (at least once) or commit the
transaction with the input offsets (exactly-once v2) -> commit offsets -> checkpoint. Failures:
`handle_corruption` (semantics-restore step 14) and `handle_migrated` (fenced producer or stale
group generation: every active task is closed dirty and revived).
"""

from __future__ import annotations

import logging
import threading
from typing import Any, Callable, Iterable, Optional

from confluent_kafka import OFFSET_STORED, KafkaError, KafkaException, Message, TopicPartition
from eddy.messages import partition_runs, payload_bytes, untrack_messages

from state.errors import LockError, TaskCorruptedError
from state.listener import SuspendReason
from state.task_id import TaskId
from streams.runtime import offsets
from streams.runtime.collector import RecordCollector, breaks_transactional_producer
from streams.runtime.config import StreamsConfig
from streams.runtime.errors import (MissingValidOffsetError, RebalanceInProgressError, RetriableCommitError,
                                   TaskMigratedError)
from streams.runtime.standby import StandbyState, StandbyTask
from streams.runtime.task import StreamTask, TaskState
from streams.topology import Subtopology, Topology

log = logging.getLogger(__name__)

# how long a commit waits for the committed offsets a standby follows a source topic up to
STANDBY_LIMIT_LOOKUP_TIMEOUT_S = 1.0

_ERROR = Message.error


def fetched_lag(consumer: Any, tp: tuple[str, int], start: Optional[int] = None) -> Optional[int]:
    """Records of `tp` on the broker past `consumer`'s position, from what its fetches saw (no
    request; max.task.idle.ms reads it): None while the watermarks are not known yet (Kafka's
    unknown lag: the task waits for them).

    Before the first record is delivered (after the assign or a seek) the clients report no
    position; the consumer is then where it started fetching: `start` (the committed offset),
    else the log start offset (the main consumer resets to earliest). A partition holding
    nothing deliverable past its start cannot hold its task back: an empty one has no lag from
    its start, and the clients report a position once a fetch moves past transaction markers or
    aborted records (librdkafka does, and the embedded consumer with it)."""
    partition = TopicPartition(tp[0], tp[1])
    low, high = consumer.get_watermark_offsets(partition, cached=True)
    if high is None or high < 0:
        return None
    position = consumer.position([partition])[0].offset
    if position < 0:
        if low is None or low < 0:
            return None
        position = low if start is None else max(start, low)  # a start before the log's: reset there
    return max(0, high - position)


#: the bounds that hold an input partition paused (TaskManager.held_by)
RECORDS, BYTES = "buffered.records.per.partition", "input.buffer.max.bytes"


class TaskManager:
    def __init__(self, topology: Topology, subtopologies: list[Subtopology], *, config: StreamsConfig,
                 state_directory: Any, consumer: Any, collector: RecordCollector, reader: Any,
                 thread_cache: Any, clock_ms: Callable[[], int],
                 reset_producer: Optional[Callable[[], None]] = None, metrics: Any = None,
                 thread_id: str = "main", global_stores: Optional[dict] = None,
                 reset_policies: dict[str, str], default_reset_policy: str, cooperative: bool,
                 paused: Optional[threading.Event] = None) -> None:
        """`paused`: set while the app is paused (App.pause, Kafka's KIP-834): the tasks are
        initialized and their input consumed (up to the buffer bounds) and committed, but nothing
        is restored, no standby updated, no record processed and nothing punctuated."""
        self.topology = topology
        self._paused = paused if paused is not None else threading.Event()
        self.global_stores = global_stores
        self.metrics = metrics
        self.thread_id = thread_id
        self.config = config
        self.task_config = config.task_config()
        self.state_directory = state_directory
        self.consumer = consumer
        self.collector = collector
        self.reader = reader
        self.thread_cache = thread_cache
        self.clock_ms = clock_ms
        self.reset_producer = reset_producer
        # where the consumer starts each input partition (its committed offset, or the end
        # offset a "latest" reset policy started it at; absent: the log start), for the lag of a
        # partition nothing was delivered from yet (fetched_lag)
        self._start_offsets: dict[tuple[str, int], int] = {}
        # the committed (offset, metadata), or None, start_positions read for a partition whose
        # task has not started yet (_committed_metadata)
        self._looked_up: dict[tuple[str, int], Optional[tuple[int, Optional[str]]]] = {}
        self.eos = config.eos_enabled
        app = config.application_id
        self.subtopologies = {s.id: s for s in subtopologies}
        self.sub_of_topic: dict[str, Subtopology] = {}
        self.inputs_of_sub: dict[int, tuple[str, ...]] = {}
        # where a partition without a valid offset starts (offsets.reset_policies)
        self.cooperative = cooperative  # the group's rebalance protocol: how a partition is assigned again
        self.default_reset_policy = default_reset_policy
        self.reset_policies = reset_policies
        for s in subtopologies:
            topics = tuple(topology.decorate_topic(t, app) for t in s.source_topics)
            self.inputs_of_sub[s.id] = topics
            for t in topics:
                self.sub_of_topic[t] = s
        self.tasks: dict[TaskId, StreamTask] = {}
        self.standbys: dict[TaskId, StandbyTask] = {}
        self.desired_standbys: set[TaskId] = set()
        self._task_of_tp: dict[tuple[str, int], StreamTask] = {}
        self._to_pause: set[tuple[str, int]] = set()
        # buffered.records.per.partition: partitions paused because their buffer exceeds it,
        # resumed once processing brings the buffer down to it (Kafka's StreamTask.addRecords).
        # Checked after processing, before the next poll: a running task drains what one poll
        # brings (StreamThread processes up to max(20000, max.poll.records) records a task), so
        # only a task that cannot process (idling for max.task.idle.ms, not running yet) is
        # paused; pausing right after the add would pause and resume every busy partition each
        # loop, and the consumer drops and fetches again what it prefetched for a paused
        # partition (word count fell to 1/5).
        self._max_buffered = config.buffered_records_per_partition
        self._over_limit: list[tuple[str, int]] = []
        # input.buffer.max.bytes (KIP-770), this thread's share (the thread sets it, and again when
        # the app's thread count changes): over it, every partition with records buffered is paused
        # until the buffers are back under it (`_check_buffer_bytes`). Counting the bytes means
        # reading every buffered record, so it is done only when the buffered records times the
        # largest record added could be over the share.
        self.input_buffer_max_bytes = config.thread_shares(config.num_stream_threads)[1]
        self._largest_record = 0  # key and value bytes of the largest record buffered, or added since
        # the partitions the two bounds hold paused, with the bounds (RECORDS, BYTES) holding each:
        # the consumer pauses a partition when a first bound holds it, resumes it when the last lets go
        self._held: dict[tuple[str, int], set[str]] = {}
        self._running: list[StreamTask] = []
        self.only_idle_buffered = False  # see process()
        self.on_tasks_changed: Callable[[], None] = lambda: None

    # ---- assignment -------------------------------------------------------------------------

    def active_task_ids(self) -> set[TaskId]:
        return set(self.tasks)

    def handle_assignment(self, partitions: Iterable[TopicPartition]) -> None:
        """Create tasks for newly assigned source partitions (promoting standbys when we have
        them); their input stays paused until they are restored."""
        created = []
        for tp in partitions:
            sub = self.sub_of_topic.get(tp.topic)
            if sub is None:
                log.warning("assigned partition %s-%d is not a source of the topology", tp.topic, tp.partition)
                continue
            task_id = TaskId(sub.id, tp.partition)
            if task_id in self.tasks:
                continue
            inputs = self.input_partitions_of(task_id)
            manager = None
            standby = self.standbys.pop(task_id, None)
            if standby is not None:
                if standby.state is StandbyState.RUNNING:
                    self.reader.unregister(standby.changelog_partitions(), SuspendReason.PROMOTED)
                    manager = standby.hand_over()
                    log.info("promoting standby %s to active", task_id)
                else:
                    standby.close()
            task = StreamTask(task_id, sub, self.topology, input_partitions=inputs,
                              application_id=self.config.application_id, config=self.task_config,
                              collector=self.collector, state_directory=self.state_directory,
                              thread_cache=self.thread_cache, eos_enabled=self.eos,
                              clock_ms=self.clock_ms, state_manager=manager, metrics=self.metrics,
                              thread_id=self.thread_id, max_task_idle_ms=self.config.max_task_idle_ms,
                              fetched_lag=self._fetched_lag, global_stores=self.global_stores,
                              committed_metadata=self._committed_metadata)
            self.tasks[task_id] = task
            for key in inputs:
                self._task_of_tp[key] = task
                self._to_pause.add(key)
            created.append(task_id)
        if created:
            log.info("new active tasks %s", sorted(str(t) for t in created))
            self._refresh_running()
            self.on_tasks_changed()

    def _committed_metadata(self, tps: list[tuple[str, int]]) -> dict[tuple[str, int], Optional[str]]:
        """The offset metadata committed for a task's inputs (StreamTask reads it when it starts
        running): what the lookup of start_positions read, where it read them all (nobody else
        commits for partitions this thread owns), else read now; the committed offsets are where
        the consumer starts them."""
        committed = self._committed(tps, take=True)
        # (a partition without one keeps the start its reset policy gave it: start_positions)
        self._start_offsets.update((tp, offset) for tp, (offset, _) in committed.items())
        return {tp: metadata for tp, (_, metadata) in committed.items()}

    def _committed(self, tps: list[tuple[str, int]], *, take: bool) -> dict[tuple[str, int], tuple[int, Optional[str]]]:
        """The committed (offset, metadata) of `tps` (only those committed): what start_positions
        read at assignment when it read them all (`take`: dropped from there, the task having
        started), else read now."""
        looked_up = self._looked_up
        if all(tp in looked_up for tp in tps):
            found = [(tp, looked_up.pop(tp) if take else looked_up[tp]) for tp in tps]
            return {tp: entry for tp, entry in found if entry is not None}
        return offsets.committed_offsets(self.consumer, tps)

    def start_positions(self, partitions: Iterable[TopicPartition]) -> list[TopicPartition]:
        """`partitions` at the offsets the consumer starts them from (offsets.start_positions),
        remembered for fetched_lag; the committed offsets and metadata read for them are kept
        for the tasks' start (_committed_metadata)."""
        partitions = list(partitions)
        tps = [(tp.topic, tp.partition) for tp in partitions]
        committed = offsets.committed_offsets(self.consumer, tps)
        self._looked_up.update((tp, committed.get(tp)) for tp in tps)
        positions = offsets.start_positions(self.consumer, partitions, committed, self.reset_policies,
                                            self.default_reset_policy)
        for tp in positions:
            if tp.offset >= 0:
                self._start_offsets[(tp.topic, tp.partition)] = tp.offset
            else:
                self._start_offsets.pop((tp.topic, tp.partition), None)
        return positions

    def _reset_out_of_range(self, topic: str, partition: int, err: KafkaError) -> None:
        """A partition whose position is out of range (its records deleted) under a consumer
        running with auto.offset.reset "error": moved where its topic's policy says, as Kafka
        Streams' StreamThread.resetOffsets; a topic without earliest or latest fails, naming it."""
        policy = self.reset_policies[topic]
        offset = offsets.reset_target(self.consumer, topic, partition, policy)
        if offset == OFFSET_STORED:
            raise MissingValidOffsetError(
                f"input partition {topic}-{partition} has no valid offset ({err.str()}) and its reset policy "
                f"is {policy!r}: set offset_reset on its source, or main.consumer.auto.offset.reset, to "
                "'earliest' or 'latest'")
        log.warning("input partition %s-%d: %s; reset to offset %d (offset_reset %s)",
                    topic, partition, err.str(), offset, policy)
        key = (topic, partition)
        if offset >= 0:
            self._start_offsets[key] = offset
        # librdkafka stops fetching a partition that met auto.offset.reset "error" and refuses to
        # seek it (_STATE); assigning it again at the target starts it again
        consumer = self.consumer
        if self.cooperative:
            consumer.incremental_unassign([TopicPartition(topic, partition)])
            assigned = [TopicPartition(topic, partition, offset)]
            consumer.incremental_assign(assigned)
        else:  # an eager group's assignment changes only whole: the others where they are
            current = consumer.position(consumer.assignment())
            assigned = [TopicPartition(tp.topic, tp.partition, offset if (tp.topic, tp.partition) == key
                                       else self._resume_offset(tp)) for tp in current]
            consumer.assign(assigned)
        # an assignment starts unpaused
        pause = [tp for tp in assigned if self._paused_by_us((tp.topic, tp.partition))]
        if pause:
            consumer.pause(pause)

    def _resume_offset(self, position: TopicPartition) -> int:
        """Where a partition assigned again goes on: its position, else (nothing delivered yet)
        where it was started."""
        if position.offset is not None and position.offset >= 0:
            return position.offset
        key = (position.topic, position.partition)
        start = self._start_offsets.get(key)
        return start if start is not None else offsets.reset_offset(
            self.reset_policies.get(position.topic, self.default_reset_policy))

    def _paused_by_us(self, key: tuple[str, int]) -> bool:
        """The partition is held by a buffer bound, or its task does not run (restoring, revived)."""
        task = self._task_of_tp.get(key)
        return task is not None and (task.state is not TaskState.RUNNING or key in self._held)

    def _fetched_lag(self, tp: tuple[str, int]) -> Optional[int]:
        return fetched_lag(self.consumer, tp, self._start_offsets.get(tp))

    def tasks_for_partitions(self, partitions: Iterable[TopicPartition]) -> list[StreamTask]:
        found = {}
        for tp in partitions:
            task = self._task_of_tp.get((tp.topic, tp.partition))
            if task is not None:
                found[task.id] = task
        return list(found.values())

    def handle_revocation(self, partitions: Iterable[TopicPartition]) -> None:
        """Commit everything (one transaction under EOS), then close the revoked tasks clean."""
        revoked = self.tasks_for_partitions(partitions)
        if not revoked:
            return
        try:
            self.commit(use_positions=False)
        except TaskMigratedError as exc:
            if isinstance(exc, RetriableCommitError) and not self.eos:
                # At least once the kept tasks lose nothing: their output is flushed and their
                # offsets go with the next commit. Only the revoked ones' uncommitted progress is
                # given up (the next owner reprocesses it), as Kafka closes them dirty.
                log.warning("commit before revocation failed (%s): closing the revoked tasks dirty", exc)
                for task in revoked:
                    self._remove(task, dirty=True)
                return
            log.warning("commit before revocation failed (%s): closing revoked tasks dirty", exc)
            self.handle_migrated(exc)
            for task in revoked:
                self._remove(task, dirty=True)
            return
        for task in revoked:
            self._remove(task, dirty=False)

    def handle_lost(self, partitions: Iterable[TopicPartition]) -> None:
        """Partitions lost without a chance to commit: drop their tasks dirty; under EOS the
        open transaction holds their output, so every task is revived."""
        lost = self.tasks_for_partitions(partitions)
        if not lost:
            return
        self.handle_migrated(TaskMigratedError("partitions lost"), reset_positions=False)
        for task in lost:
            self._remove(task, dirty=True)

    def _remove(self, task: StreamTask, *, dirty: bool) -> None:
        self.reader.unregister(task.changelog_partitions())
        for tp in task.input_partitions:  # another owner may commit for them before they come back
            self._looked_up.pop(tp, None)
        if dirty:
            task.close_dirty()
        else:
            try:
                task.close_clean()
            except Exception:
                log.exception("task %s: clean close failed, closing dirty", task.id)
                task.close_dirty()
        self.tasks.pop(task.id, None)
        for key in task.input_partitions:
            if self._task_of_tp.get(key) is task:
                del self._task_of_tp[key]
                self._start_offsets.pop(key, None)
            self._to_pause.discard(key)
            self._held.pop(key, None)
        self._refresh_running()
        self.on_tasks_changed()

    def _refresh_running(self) -> None:
        self._running = [t for t in self.tasks.values() if t.state is TaskState.RUNNING]

    def apply_pauses(self) -> None:
        """Pause the input of tasks that are not running yet (deferred: partitions handed to
        on_assign are assigned only after the callback returns)."""
        if not self._to_pause:
            return
        assigned = {(tp.topic, tp.partition) for tp in self.consumer.assignment()}
        ready = [k for k in self._to_pause if k in assigned]
        if ready:
            task_states = [self._task_of_tp[k].state for k in ready]
            pause = [TopicPartition(t, p) for (t, p), s in zip(ready, task_states) if s is not TaskState.RUNNING]
            if pause:
                self.consumer.pause(pause)
            self._to_pause.difference_update(ready)

    # ---- standbys ---------------------------------------------------------------------------

    def set_desired_standbys(self, task_ids: set[TaskId]) -> None:
        self.desired_standbys = set(task_ids)

    def _reconcile_standbys(self) -> None:
        wanted = {t for t in self.desired_standbys if t not in self.tasks}
        for task_id in [t for t in self.standbys if t not in wanted]:
            standby = self.standbys.pop(task_id)
            self.reader.unregister(standby.changelog_partitions(), SuspendReason.MIGRATED)
            standby.close()
        for task_id in wanted:
            if task_id in self.standbys:
                continue
            sub = self.subtopologies.get(task_id.subtopology)
            if sub is None or not sub.store_names:
                continue
            self.standbys[task_id] = StandbyTask(
                task_id, sub, self.topology, application_id=self.config.application_id,
                config=self.task_config, state_directory=self.state_directory,
                thread_cache=self.thread_cache, eos_enabled=self.eos)

    # ---- restoration ------------------------------------------------------------------------

    def _initialize(self, task: Any) -> bool:
        try:
            task.initialize_if_needed()
        except LockError as exc:
            log.debug("task %s: directory busy (%s); retrying", task.id, exc)
            return False
        except TaskCorruptedError as exc:
            log.warning("task %s: %s", task.id, exc)
            # register_state_stores left the directory locked so it can be wiped safely
            from state.manager import close_state_manager
            if task.manager is not None:
                close_state_manager(task.manager, dirty=True, wipe=True)
            task.manager = None
            return False
        self._limit_source_restores(task.manager)
        for tp in task.changelog_partitions():
            self.reader.register(tp, task.manager)
        return True

    def _limit_source_restores(self, manager: Any) -> None:
        """A store whose changelog is its task's source topic restores (a standby: follows it)
        up to the offset the group committed there (0 without one): what follows is processed
        (Kafka's restore end and standby limit of a source changelog)."""
        sources = manager.source_changelog_partitions()
        if not sources:
            return
        committed = self._committed([(tp.topic, tp.partition) for tp in sources], take=False)
        manager.set_restore_limits({tp: committed.get((tp.topic, tp.partition), (0, None))[0] for tp in sources})

    def _raise_standby_limits(self) -> None:
        """The standbys' source changelogs go on up to what the group committed since (Kafka's
        updateLimitOffsetsForStandbyChangelogs, once a commit interval): one lookup for all.
        A lookup that fails is left to the next commit."""
        managers = [s.manager for s in self.standbys.values()
                    if s.state is StandbyState.RUNNING and s.manager is not None and s.manager.source_changelog_partitions()]
        if not managers:
            return
        tps = [(tp.topic, tp.partition) for m in managers for tp in m.source_changelog_partitions()]
        try:
            committed = offsets.committed_offsets(self.consumer, tps, timeout_s=STANDBY_LIMIT_LOOKUP_TIMEOUT_S)
        except KafkaException as exc:
            log.debug("standby limits not raised now (%s): the next commit tries again", exc)
            return
        for manager in managers:
            manager.set_restore_limits({tp: committed[(tp.topic, tp.partition)][0]
                                        for tp in manager.source_changelog_partitions()
                                        if (tp.topic, tp.partition) in committed})
        self.reader.update_limits()

    def initialize_and_restore(self) -> bool:
        """One restoration step; True when every active task is running."""
        self._reconcile_standbys()
        restoring = []
        for task in self.tasks.values():
            if task.state is TaskState.CREATED:
                self._initialize(task)
            if task.state is TaskState.RESTORING:
                restoring.append(task)
        for standby in self.standbys.values():
            if standby.state is StandbyState.CREATED:
                self._initialize(standby)
        if self._paused.is_set():  # restoring and standby updating wait for resume()
            return len(self._running) == len(self.tasks)
        if restoring:
            if self.reader.state.value != "ACTIVE_RESTORING":
                self.reader.enforce_restore_active()
            # do not hold up running tasks that have input waiting
            busy = any(t.buffered for t in self._running)
            self.reader.poll_timeout_s = 0.0 if busy else self.config.poll_ms / 1000.0
            try:
                self.reader.restore()
            except TaskCorruptedError as exc:
                self.handle_corruption(getattr(exc, "task_ids", None) or [t.id for t in restoring],
                                       list(exc.changelog_partitions))
                return False
            completed = self.reader.completed_changelogs()
            newly_running = []
            for task in restoring:
                if all(tp in completed for tp in task.changelog_partitions()) and task.complete_restoration():
                    newly_running.append(task)
            if newly_running:
                self._refresh_running()
                resume = [TopicPartition(t, p) for task in newly_running for (t, p) in task.input_partitions
                          if (t, p) not in self._to_pause and (t, p) not in self._held]
                if resume:
                    self.consumer.resume(resume)
        elif self.standbys:
            if self.reader.state.value == "ACTIVE_RESTORING":
                self.reader.transit_to_update_standby()
            try:
                self.reader.restore()
            except TaskCorruptedError as exc:
                for task_id in getattr(exc, "task_ids", []) or list(self.standbys):
                    standby = self.standbys.pop(task_id, None)
                    if standby is not None:
                        self.reader.unregister(standby.changelog_partitions())
                        standby.close(dirty=True)
                        if not self.eos:
                            self.state_directory.lock(task_id)
                            try:
                                self.state_directory.wipe_task(task_id)
                            finally:
                                self.state_directory.unlock(task_id)
        return len(self._running) == len(self.tasks)

    # ---- processing -------------------------------------------------------------------------

    def add_records(self, msgs: list) -> None:
        if any(map(_ERROR, msgs)):
            errors = [m for m in msgs if m.error() is not None]
            for m in errors:
                err = m.error()
                code = err.code()
                if code == KafkaError._AUTO_OFFSET_RESET and m.topic() in self.reset_policies:
                    self._reset_out_of_range(m.topic(), m.partition(), err)
                elif code != KafkaError._PARTITION_EOF:
                    # librdkafka's fatal consumer error event (a static member fenced) is _FATAL
                    # with fatal() unset: the consumer is done either way, so is this thread (Kafka's
                    # poll throws FencedInstanceIdException)
                    if err.fatal() or code == KafkaError._FATAL:
                        raise KafkaException(err)
                    log.warning("consumer error: %s", err)
            msgs = [m for m in msgs if m.error() is None]
        # confluent-kafka's consumer makes tracked messages; the caches may keep them (a bulk
        # run's record context), and the cyclic collector need not scan them
        untrack_messages(msgs)
        task_of = self._task_of_tp
        limit = self._max_buffered
        over = self._over_limit
        for tp, run in partition_runs(msgs):  # one C pass over the messages' fields where it can
            task = task_of.get(tp)
            if task is not None:
                task.end_offsets[tp] = run[-1].offset()  # a partition's runs come in offset order
                if task.add_records(tp, run) > limit:
                    over.append(tp)
        if msgs:
            largest = payload_bytes(msgs)[1]
            if largest > self._largest_record:
                self._largest_record = largest

    def held_by(self, bound: str) -> set[tuple[str, int]]:
        """The partitions `bound` (RECORDS: buffered.records.per.partition, BYTES:
        input.buffer.max.bytes) holds paused."""
        return {tp for tp, bounds in self._held.items() if bound in bounds}

    def _hold(self, tps: Iterable[tuple[str, int]], bound: str) -> None:
        """`bound` holds each of `tps` paused (again: no change); the consumer pauses those no
        bound held yet."""
        new = []
        for tp in tps:
            bounds = self._held.setdefault(tp, set())
            if not bounds:
                new.append(TopicPartition(*tp))
            bounds.add(bound)
        if new:
            self.consumer.pause(new)

    def _release(self, tps: Iterable[tuple[str, int]], bound: str) -> None:
        """`bound` lets each of `tps` go; the consumer resumes those no bound holds any more. A
        partition whose task is no longer running is let go without resuming: its task's
        restoration pauses and resumes it."""
        resume = []
        for tp in tps:
            bounds = self._held.get(tp)
            if bounds is None or bound not in bounds:
                continue
            bounds.discard(bound)
            if not bounds:
                del self._held[tp]
                task = self._task_of_tp.get(tp)
                if task is not None and task.state is TaskState.RUNNING:
                    resume.append(TopicPartition(*tp))
        if resume:
            self.consumer.resume(resume)

    def _pause_full(self) -> None:
        """Hold the partitions added over buffered.records.per.partition that still exceed it."""
        limit = self._max_buffered
        task_of = self._task_of_tp
        self._hold([tp for tp in self._over_limit if (task := task_of.get(tp)) is not None
                    and task.partition_group.buffered_in(tp) > limit], RECORDS)
        self._over_limit.clear()

    def _resume_drained(self) -> None:
        """Let go the partitions held by buffered.records.per.partition whose buffer is down to
        it (or whose task is no longer running)."""
        limit = self._max_buffered
        task_of = self._task_of_tp
        self._release([tp for tp in self.held_by(RECORDS)
                       if (task := task_of.get(tp)) is None or task.state is not TaskState.RUNNING
                       or task.partition_group.buffered_in(tp) <= limit], RECORDS)

    def buffered_bytes(self) -> tuple[int, int]:
        """`(total, largest)`: the key and value bytes of the records the running tasks buffer."""
        total = largest = 0
        for task in self._running:
            size, big = task.partition_group.buffered_bytes()
            total += size
            largest = big if big > largest else largest
        return total, largest

    def _check_buffer_bytes(self) -> None:
        """input.buffer.max.bytes: over this thread's share, hold every partition with records
        buffered (the others may still fetch: their tasks may be waiting for them); once back
        under it, let them go."""
        total, self._largest_record = self.buffered_bytes()
        if total > self.input_buffer_max_bytes:
            nonempty = [tp for task in self._running for tp, q in task.partition_group.queues.items() if q]
            log.debug("%s: %d bytes buffered, over input.buffer.max.bytes' share of %d: holding %d partitions",
                      self.thread_id, total, self.input_buffer_max_bytes, len(nonempty))
            self._hold(nonempty, BYTES)
        else:
            self._release(self.held_by(BYTES), BYTES)

    @property
    def paused(self) -> bool:
        return self._paused.is_set()

    def process(self, max_per_task: int) -> int:
        total = 0
        waiting = False
        # paused: nothing processed, the buffers' bounds kept all the same (partitions paused as
        # they fill)
        for task in (self._running if not self._paused.is_set() else ()):
            if task.partition_group.buffered:
                n = task.process(max_per_task)
                total += n
                waiting = waiting or not n  # buffered, yet idling (max.task.idle.ms)
        # every buffered record belongs to an idling task: the thread may block in its next poll
        self.only_idle_buffered = waiting and not total
        if self._held:
            self._resume_drained()
        if self._over_limit:
            self._pause_full()
        if (any(BYTES in bounds for bounds in self._held.values())
                or self.buffered() * self._largest_record > self.input_buffer_max_bytes):
            self._check_buffer_bytes()
        return total

    def punctuate(self) -> int:
        if self._paused.is_set():
            return 0
        return sum(1 for task in self._running if task.maybe_punctuate())

    def buffered(self) -> int:
        return sum(t.buffered for t in self._running)

    def commit_requested(self) -> bool:
        return any(t.commit_requested for t in self._running)

    # ---- commit -----------------------------------------------------------------------------

    def commit(self, *, use_positions: bool = True) -> int:
        """Commit every task that has something to commit; returns how many tasks committed.
        Raises TaskMigratedError when the commit cannot happen (the caller revives the tasks),
        or its RetriableCommitError when it cannot happen yet (nothing committed; the tasks,
        their flushed caches and their commit_needed stay as they are, ready for the retry).

        `use_positions=False` inside rebalance callbacks: librdkafka runs them in the middle of
        `consume()`, when the consumer's position already counts the messages gathered into
        that call's result but not yet handed to the tasks; committing that position would skip
        them (lost for good on a revoked partition)."""
        tasks = [t for t in self.tasks.values()
                 if t.state in (TaskState.RUNNING, TaskState.SUSPENDED) and (t.commit_needed or t.position_check)]
        per_task = {}
        tps = []
        position = self._positions if use_positions else None
        for task in tasks:
            o = task.prepare_commit(position)
            per_task[task.id] = o
            tps += [TopicPartition(t, p, off, task.offset_metadata((t, p))) for (t, p), off in o.items()]
        if self.eos:
            self._commit_transaction(tps)
        else:
            self.collector.flush()
            if tps:
                try:
                    self.consumer.commit(offsets=tps, asynchronous=False)
                except KafkaException as exc:
                    err = exc.args[0] if exc.args else None
                    code = err.code() if isinstance(err, KafkaError) else None
                    if code == KafkaError.REBALANCE_IN_PROGRESS:
                        raise RebalanceInProgressError(f"offset commit refused during a rebalance: {exc}") from exc
                    if code in offsets.RETRIABLE_COMMIT_ERRORS or (err is not None and err.retriable()):
                        raise RetriableCommitError(f"offset commit failed, retriable: {exc}") from exc
                    raise TaskMigratedError(f"offset commit failed: {exc}") from exc
        for task in tasks:
            task.post_commit(per_task[task.id])
        for standby in self.standbys.values():
            standby.commit()
        if use_positions:  # not inside a rebalance callback: no lookup to hold the rebalance up
            self._raise_standby_limits()
        self.collector.refresh_partition_counts()
        return len(tasks)

    def input_partitions_of(self, task_id: TaskId) -> list[tuple[str, int]]:
        """The input partitions of a task (of a standby: what it would read were it active)."""
        return [(t, task_id.partition) for t in self.inputs_of_sub.get(task_id.subtopology, ())]

    def _positions(self, tps: list[tuple[str, int]]) -> dict[tuple[str, int], int]:
        """The main consumer's position (next offset the application receives) of `tps`."""
        try:
            got = self.consumer.position([TopicPartition(t, p) for t, p in tps])
        except KafkaException as exc:
            log.debug("cannot read the consumer positions of %s: %s", tps, exc)
            return {}
        return {(tp.topic, tp.partition): tp.offset for tp in got if tp.offset is not None and tp.offset >= 0}

    def _commit_transaction(self, tps: list[TopicPartition]) -> None:
        collector = self.collector
        if not tps and not collector.in_transaction:
            return
        producer = collector.producer
        try:
            collector.begin_transaction()
            if tps:
                producer.send_offsets_to_transaction(tps, self.consumer.consumer_group_metadata(), 30)
            while True:
                try:
                    producer.commit_transaction(60)
                    break
                except KafkaException as exc:
                    err = exc.args[0] if exc.args else None
                    if isinstance(err, KafkaError) and err.retriable() and not err.txn_requires_abort():
                        continue
                    raise
        except KafkaException as exc:
            raise TaskMigratedError(f"transaction commit failed: {exc}") from exc
        collector.in_transaction = False
        collector.check_error()

    # ---- failures ---------------------------------------------------------------------------

    def _abort_transaction(self) -> None:
        collector = self.collector
        if not self.eos:
            collector.reset_error()
            return
        try:
            if collector.in_transaction:
                collector.producer.abort_transaction(30)
        except KafkaException as exc:
            log.warning("cannot abort the transaction (%s): recreating the producer", exc)
            if self.reset_producer is not None:
                self.reset_producer()
        collector.in_transaction = False
        collector.reset_error()

    def _reset_positions(self, tasks: list[StreamTask]) -> None:
        """Rewind the tasks' input to the committed offsets, or where their reset policy starts
        them (their uncommitted work was lost)."""
        tps = [TopicPartition(t, p) for task in tasks for (t, p) in task.input_partitions]
        assigned = {(tp.topic, tp.partition) for tp in self.consumer.assignment()}
        tps = [tp for tp in tps if (tp.topic, tp.partition) in assigned]
        if not tps:
            return
        for tp in self.start_positions(tps):
            try:
                self.consumer.seek(tp)
            except KafkaException as exc:
                log.warning("cannot rewind %s-%d to %s: %s", tp.topic, tp.partition, tp.offset, exc)

    def _close_dirty_and_revive(self, tasks: list[StreamTask]) -> None:
        for task in tasks:
            self.reader.unregister(task.changelog_partitions())
            task.close_dirty()
            task.revive()
        self._refresh_running()
        pause = [TopicPartition(t, p) for task in tasks for (t, p) in task.input_partitions]
        assigned = {(tp.topic, tp.partition) for tp in self.consumer.assignment()}
        pause = [tp for tp in pause if (tp.topic, tp.partition) in assigned]
        if pause:
            self.consumer.pause(pause)

    def handle_corruption(self, task_ids: Iterable[TaskId], changelogs: list[TopicPartition]) -> None:
        """Semantics-restore step 14: commit the healthy tasks, then close the corrupted ones
        dirty (corrupted changelogs left out of the checkpoint; under EOS the directory is
        wiped), revive them and rewind their input."""
        ids = set(task_ids)
        corrupted = [t for t in self.tasks.values() if t.id in ids]
        if not corrupted:
            return
        log.warning("tasks %s are corrupted: closing dirty and reviving", sorted(str(t) for t in ids))
        try:
            self.commit()
        except TaskMigratedError as exc:
            self.handle_migrated(exc)
            return
        for task in corrupted:
            task.mark_changelogs_corrupted(changelogs)
        self._close_dirty_and_revive(corrupted)
        if not self.eos:
            # at least once keeps directories on a dirty close; a corrupted store must still go
            for task in corrupted:
                self.state_directory.lock(task.id)
                try:
                    self.state_directory.wipe_task(task.id)
                finally:
                    self.state_directory.unlock(task.id)
        self._reset_positions(corrupted)

    def handle_migrated(self, exc: BaseException, *, reset_positions: bool = True) -> None:
        """The thread's transaction or offset commit failed (fenced, stale generation): abort,
        close every active task dirty (EOS: wipe), revive them and rewind their input."""
        log.warning("tasks migrated or producer fenced (%s): closing all active tasks dirty", exc)
        cause = exc.__cause__
        if self.eos and cause is not None and breaks_transactional_producer(cause) and self.reset_producer is not None:
            self.collector.in_transaction = False
            self.reset_producer()
        else:
            self._abort_transaction()
        tasks = list(self.tasks.values())
        self._close_dirty_and_revive(tasks)
        if reset_positions:
            self._reset_positions(tasks)

    # ---- shutdown ---------------------------------------------------------------------------

    def shutdown(self, *, clean: bool) -> None:
        if clean:
            try:
                self.commit()
            except Exception as exc:
                log.warning("final commit failed (%s): closing tasks dirty", exc)
                clean = False
                if self.eos:
                    self._abort_transaction()
        for task in list(self.tasks.values()):
            self._remove(task, dirty=not clean)
        for task_id in list(self.standbys):
            standby = self.standbys.pop(task_id)
            self.reader.unregister(standby.changelog_partitions())
            standby.close(dirty=not clean)
        self.reader.clear()
