"""StreamTask: one sub-topology instance for one partition group, on the shared TaskEngine.

States follow Kafka's Task.State: CREATED -> RESTORING -> RUNNING -> SUSPENDED -> CLOSED, with
CREATED/RESTORING -> SUSPENDED, SUSPENDED -> RESTORING (resume) and CLOSED -> CREATED (revive).
The owning thread registers the task's changelogs with its StoreChangelogReader while the task
is RESTORING and calls `complete_restoration()` when they are all restored.

Commit is split as in Kafka: `prepare_commit()` flushes the caches (forwarding their entries
downstream into the collector) and returns the input offsets to commit; the thread then flushes
the producer or commits the transaction and the offsets; `post_commit()` checkpoints (at least
once: past the 10,000-offset threshold; exactly-once: only when forced).
"""

from __future__ import annotations

import enum
import logging
from typing import Any, Callable, Optional

from confluent_kafka import Message, TopicPartition

from state.manager import ProcessorStateManager, TaskType, close_state_manager, register_state_stores
from state.task_id import TaskId
from streams.engine import TaskEngine
from streams.engine.processor_metadata import NO_PARTITION_TIME, decode_offset_metadata, encode_offset_metadata
from streams.metrics import task_input_buffer_bytes_gauge
from streams.runtime.errors import RuntimeStateError
from streams.runtime.partition_group import PartitionGroup
from streams.topology import Subtopology, Topology, changelog_topic_name, source_changelogs

log = logging.getLogger(__name__)

_TOPIC = Message.topic
_PARTITION = Message.partition
_OFFSET = Message.offset
_KEY = Message.key
_VALUE = Message.value
_TIMESTAMP = Message.timestamp
_HEADERS = Message.headers


class TaskState(enum.Enum):
    CREATED = "CREATED"
    RESTORING = "RESTORING"
    RUNNING = "RUNNING"
    SUSPENDED = "SUSPENDED"
    CLOSED = "CLOSED"


_ALLOWED = {
    TaskState.CREATED: {TaskState.RESTORING, TaskState.SUSPENDED, TaskState.CLOSED},
    TaskState.RESTORING: {TaskState.RUNNING, TaskState.SUSPENDED},
    TaskState.RUNNING: {TaskState.SUSPENDED},
    TaskState.SUSPENDED: {TaskState.RESTORING, TaskState.CLOSED},
    TaskState.CLOSED: {TaskState.CREATED},
}


def check_transition(what: str, old: enum.Enum, new: enum.Enum, allowed: dict) -> None:
    if new not in allowed[old]:
        raise RuntimeStateError(f"{what}: invalid transition {old.value} -> {new.value}")


class StreamTask:
    """An active task. Not thread-safe: driven by one stream thread."""

    def __init__(self, task_id: TaskId, subtopology: Subtopology, topology: Topology, *,
                 input_partitions: list[tuple[str, int]], application_id: str, config: dict,
                 collector: Any, state_directory: Any, thread_cache: Any, eos_enabled: bool,
                 clock_ms: Callable[[], int], state_manager: Optional[ProcessorStateManager] = None,
                 metrics: Any = None, thread_id: str = "main", max_task_idle_ms: int = -1,
                 fetched_lag: Optional[Callable[[tuple[str, int]], Optional[int]]] = None,
                 global_stores: Optional[dict] = None,
                 committed_metadata: Optional[Callable[[list[tuple[str, int]]], dict]] = None) -> None:
        """`max_task_idle_ms` and `fetched_lag` (the main consumer's lag of a partition, None
        when unknown): see PartitionGroup.ready_to_process; -1 never waits.
        `committed_metadata(partitions)`: the offset metadata strings committed for the task's
        input partitions, read when its processors are initialised (processor metadata)."""
        self.committed_metadata = committed_metadata
        self.id = task_id
        self.global_stores = global_stores  # the instance's global stores (readable by every processor)
        self.metrics = metrics
        self.thread_id = thread_id
        self.subtopology = subtopology
        self.topology = topology
        self.input_partitions = list(input_partitions)
        self.application_id = application_id
        self.config = config
        self.collector = collector
        self.state_directory = state_directory
        self.thread_cache = thread_cache
        self.eos_enabled = eos_enabled
        self.clock_ms = clock_ms
        self.state = TaskState.CREATED
        self.partition_group = PartitionGroup(self.input_partitions)
        self.max_task_idle_ms = max_task_idle_ms if fetched_lag is not None else -1
        self.fetched_lag = fetched_lag
        self.consumed: dict[tuple[str, int], int] = {}       # last processed offset per partition
        self.committed: dict[tuple[str, int], int] = {}      # last committed next-offset
        # the offset of the last record fetched from each input partition (TaskMetadata.end_offsets,
        # Kafka's: set by the task manager at every poll)
        self.end_offsets: dict[tuple[str, int], int] = {}
        # since when (wall-clock ms) the task has buffered records it may not process yet
        # (max.task.idle.ms: an empty partition may bring earlier ones), None when it may
        self.idling_since: Optional[int] = None
        self.commit_needed = False
        self.position_check = False  # commit again if the consumer position moves (see committable_offsets)
        self.manager: Optional[ProcessorStateManager] = state_manager  # a promoted standby's
        self.engine: Optional[TaskEngine] = None
        # (engine, its MergedDispatch over this task's partitions or None)
        self._merged: Optional[tuple] = None
        self._processors_initialized = False
        self._recycled = state_manager is not None

    def __repr__(self) -> str:
        return f"StreamTask({self.id}, {self.state.value})"

    def _transit(self, new: TaskState) -> None:
        check_transition(f"task {self.id}", self.state, new, _ALLOWED)
        log.debug("task %s: %s -> %s", self.id, self.state.value, new.value)
        self.state = new

    def changelog_partitions(self) -> list[TopicPartition]:
        return self.manager.changelog_partitions() if self.manager is not None else []

    # ---- lifecycle --------------------------------------------------------------------------

    def _new_manager(self) -> ProcessorStateManager:
        manager = ProcessorStateManager(
            self.id, TaskType.ACTIVE, self.eos_enabled, self.state_directory,
            changelog_topics={s: changelog_topic_name(self.application_id, s) for s in self.subtopology.store_names},
            source_changelogs=source_changelogs(self.topology, self.subtopology),
            changelog_partition=self.id.partition, collector=self.collector, config=self.config)
        manager.thread_cache = self.thread_cache  # type: ignore[attr-defined]  # read by caching stores
        return manager

    def initialize_if_needed(self) -> None:
        """CREATED -> RESTORING: build the engine, lock the task directory, open and register the
        stores and load the checkpoint. Raises LockError (retry later) or TaskCorruptedError."""
        if self.state is not TaskState.CREATED:
            return
        self.engine = TaskEngine(self.topology, self.subtopology, task_id=self.id,
                                 application_id=self.application_id, config=self.config,
                                 collector=self.collector, clock_ms=self.clock_ms, state_context=self.manager,
                                 metrics=self.metrics, thread_id=self.thread_id, global_stores=self.global_stores)
        if self.metrics is not None:
            group = self.partition_group
            task_input_buffer_bytes_gauge(self.metrics, self.thread_id, self.id, lambda: group.buffered_bytes()[0])
        if len(self.partition_group.queues) > 1 and self.engine.has_custom_timestamp_extractor():
            extracted = self.engine.extracted_timestamp
            self.partition_group.head_timestamp = lambda tp, m: extracted(
                tp[0], tp[1], _KEY(m), _VALUE(m), _TIMESTAMP(m)[1], _HEADERS(m), _OFFSET(m))
        if self._recycled:
            # a promoted standby: its stores are open and registered with their offsets
            self.manager.collector = self.collector
            self.engine.stores.update({name: meta.store for name, meta in self.manager.stores.items()})
            self.engine.build_stores()
            self._recycled = False
        else:
            self.manager = self._new_manager()
            self.engine.state_context = self.manager
            register_state_stores(self.manager, self.engine.build_stores().values())
        consumed = self.consumed
        # the offsets a store whose changelog is its source topic holds at a checkpoint
        self.manager.source_offsets = lambda: {TopicPartition(t, p): o for (t, p), o in consumed.items()}
        self._transit(TaskState.RESTORING)

    def complete_restoration(self) -> bool:
        """RESTORING -> RUNNING: initialise the processors (once per engine), after the processor
        metadata committed with the input offsets is loaded (Kafka's initializeMetadata). False
        (still RESTORING, try again) when the committed offsets cannot be read now."""
        if self.state is not TaskState.RESTORING:
            raise RuntimeStateError(f"task {self.id}: complete_restoration in state {self.state.value}")
        if not self._processors_initialized:
            if not self._load_committed_metadata():
                return False
            self.engine.init_processors()
            self._processors_initialized = True
        self._transit(TaskState.RUNNING)
        log.info("task %s restored and running", self.id)
        return True

    def _load_committed_metadata(self) -> bool:
        """What the offsets committed on the input partitions carry (Kafka's initializeMetadata):
        each partition's time, from which the task's stream time goes on (initializeTaskTime: a
        restarted task's stream time, punctuations and extractors see no earlier time than
        before), and the processor metadata, merged (the largest value of each key wins, as
        Kafka's ProcessorMetadata.update)."""
        if self.committed_metadata is None:
            return True
        try:
            committed = self.committed_metadata(self.input_partitions)
        except Exception as exc:  # noqa: BLE001 - a broker round trip: retried on the next loop
            log.warning("task %s: cannot read the committed offsets' metadata yet (%s); retrying", self.id, exc)
            return False
        engine = self.engine
        merged = engine.processor_metadata
        for tp, text in committed.items():
            partition_time, metadata = decode_offset_metadata(text)
            merged.update(metadata)
            if partition_time != NO_PARTITION_TIME and tp in self.partition_group.queues:
                engine.partition_times[tp] = partition_time
                engine.advance_stream_time(partition_time)
                log.debug("task %s: partition time of %s-%d is %d (committed)", self.id, tp[0], tp[1], partition_time)
        merged.needs_commit = False
        return True

    def suspend(self) -> None:
        if self.state in (TaskState.SUSPENDED, TaskState.CLOSED):
            return
        self._transit(TaskState.SUSPENDED)

    def resume(self) -> None:
        """SUSPENDED -> RESTORING (the thread completes restoration again)."""
        if self.state is TaskState.SUSPENDED:
            self._transit(TaskState.RESTORING)
            if self.eos_enabled and self.manager is not None:
                self.manager.checkpoint_file.delete()  # KAFKA-10362

    def _remove_sensors(self) -> None:
        """Drop this task's task- and store-level metrics (Kafka's removeAllTaskLevelSensors on
        closeClean/closeDirty): a closed or migrated task's sensors must not stay listed."""
        if self.metrics is not None:
            self.metrics.remove(thread_id=self.thread_id, task_id=str(self.id))

    def close_clean(self) -> None:
        """Close after a successful commit: processors, then stores with a forced checkpoint."""
        self._remove_sensors()
        self.suspend()
        first_error: Optional[BaseException] = None
        try:
            if self.engine is not None:
                self.engine.close(close_stores=False)
        except BaseException as exc:
            first_error = exc
        if self.manager is not None:
            try:
                close_state_manager(self.manager, dirty=False)
            except BaseException as exc:
                first_error = first_error or exc
        self.partition_group.clear()
        self._transit(TaskState.CLOSED)
        if first_error is not None:
            raise first_error

    def close_dirty(self) -> None:
        """Close without flushing or checkpointing; under exactly-once the state is wiped (the
        stores may hold uncommitted writes). Errors are logged, never raised."""
        if self.state is TaskState.CLOSED:
            return
        self._remove_sensors()
        if self.state is not TaskState.SUSPENDED:
            self.state = TaskState.SUSPENDED  # a dirty close may come from any state
        if self.engine is not None:
            try:
                self.engine.close(close_stores=False)
            except BaseException:
                log.exception("task %s: error closing processors (dirty close)", self.id)
        if self.manager is not None:
            try:
                close_state_manager(self.manager, dirty=True, wipe=self.eos_enabled)
            except BaseException:
                log.exception("task %s: error closing state (dirty close)", self.id)
        self.partition_group.clear()
        self._transit(TaskState.CLOSED)

    def revive(self) -> None:
        """CLOSED -> CREATED: a fresh engine and stores on the next initialisation (after a
        corruption the stores restore from the changelog)."""
        self._transit(TaskState.CREATED)
        self.engine = None
        self.manager = None
        self._processors_initialized = False
        self.consumed.clear()
        self.committed.clear()
        self.commit_needed = False
        self.position_check = False

    def mark_changelogs_corrupted(self, tps: list[TopicPartition]) -> None:
        if self.manager is not None:
            mine = set(self.manager.changelog_partitions())
            self.manager.mark_changelog_as_corrupted([tp for tp in tps if tp in mine])

    # ---- processing -------------------------------------------------------------------------

    def add_records(self, tp: tuple[str, int], messages: list) -> int:
        """Buffer `messages` of `tp`; returns how many records `tp` now has buffered."""
        return self.partition_group.add(tp, messages)

    @property
    def buffered(self) -> int:
        return self.partition_group.buffered

    def process(self, max_records: int) -> int:
        """Process up to `max_records` buffered records in timestamp order; returns the count."""
        group = self.partition_group
        if self.state is not TaskState.RUNNING or not group.buffered:
            return 0
        enforced = False  # Kafka's enforced processing: going on while an input partition is empty
        if self.max_task_idle_ms >= 0:
            if group.all_buffered():
                group.forget_idle_deadlines()
                self.idling_since = None
            else:
                now = self.clock_ms()
                if not group.ready_to_process(now, self.max_task_idle_ms, self.fetched_lag):
                    if self.idling_since is None:
                        self.idling_since = now
                    return 0  # max.task.idle.ms: an empty partition may still bring earlier records
                enforced = True
                self.idling_since = None
        engine = self.engine
        consumed = self.consumed
        stop_when_empty = self.max_task_idle_ms >= 0
        n = 0
        merged = self._merged
        if merged is None or merged[0] is not engine:
            merged = self._merged = (engine, engine.accelerated.merged(list(group.queues)))
        if merged[1] is not None and group.head_timestamp is None and group.buffered_partitions() > 1:
            # several partitions: Kafka's choice and the records' dispatch in one C pass
            n, _, done = merged[1](group, max_records, stop_when_empty, consumed)
            if done:
                self.commit_needed = True
                if enforced:
                    engine.enforced_processing_sensor.record(n)
                return n
        processors = engine.partition_processors
        for tp, run in group.runs(max_records - n, stop_when_empty):
            processors[tp](run)
            consumed[tp] = _OFFSET(run[-1])
            n += len(run)
        if n:
            self.commit_needed = True
            if enforced:  # counted per record, as Kafka checks per record
                engine.enforced_processing_sensor.record(n)
        return n

    def maybe_punctuate(self) -> bool:
        if self.state is not TaskState.RUNNING:
            return False
        fired = self.engine.maybe_punctuate_stream_time()
        fired = self.engine.maybe_punctuate_system_time() or fired
        if fired:
            self.commit_needed = True
        return fired

    @property
    def commit_requested(self) -> bool:
        return self.engine is not None and self.engine.context.commit_requested

    # ---- commit -----------------------------------------------------------------------------

    def prepare_commit(self, position: Optional[Callable[[list[tuple[str, int]]], dict[tuple[str, int], int]]] = None
                       ) -> dict[tuple[str, int], int]:
        """Flush the caches (their entries go downstream into the collector) and return the
        input offsets to commit (next offset to read) for partitions that moved.

        As Kafka's StreamTask.committableOffsetsAndMetadata: a partition with buffered records
        commits its head record's offset; one whose buffer is empty commits the consumer's
        `position` (given, for those partitions, by the optional callable), which is past any
        transaction commit markers following the last record - committing last offset + 1 there
        would leave a read_committed group a lag of 1 forever on transactional input."""
        if self.state not in (TaskState.RUNNING, TaskState.SUSPENDED) or self.engine is None \
                or not self._processors_initialized:
            return {}
        self.engine.flush_cache()
        self.engine.context.commit_requested = False
        return self.committable_offsets(position)

    def committable_offsets(self, position: Optional[Callable[[list[tuple[str, int]]], dict[tuple[str, int], int]]]
                            = None) -> dict[tuple[str, int], int]:
        """Next offset to read per consumed partition, only where it differs from the last commit."""
        queues = self.partition_group.queues
        committed = self.committed
        offsets: dict[tuple[str, int], int] = {}
        drained: list[tuple[str, int]] = []
        for tp, off in self.consumed.items():
            q = queues.get(tp)
            if q:
                offsets[tp] = _OFFSET(q[0])
            else:
                # a position committed earlier (past a marker) is never taken back
                offsets[tp] = max(off + 1, committed.get(tp, -1))
                drained.append(tp)
        if drained and position is not None:
            for tp, pos in position(drained).items():
                # never behind what was processed (an unknown position is negative)
                if tp in offsets and pos is not None and pos > offsets[tp]:
                    offsets[tp] = pos
        consumed = self.consumed
        # A commit marker may reach the consumer after the last record was processed and
        # committed: look at the position again on later commits until it has moved past.
        self.position_check = any(offsets[tp] == consumed[tp] + 1 for tp in drained)
        if self.engine is not None and self.engine.processor_metadata.needs_commit:
            # changed processor metadata goes to every input partition (Kafka): whichever
            # partition a restarted task reads it back from has it
            for tp, off in committed.items():
                offsets.setdefault(tp, off)
            return offsets
        return {tp: off for tp, off in offsets.items() if committed.get(tp) != off}

    def offset_metadata(self, tp: tuple[str, int]) -> str:
        """The metadata string committed with `tp`'s offset: its partition time and the task's
        processor metadata (Kafka's TopicPartitionMetadata)."""
        engine = self.engine
        return encode_offset_metadata(engine.partition_times.get(tp, NO_PARTITION_TIME), engine.processor_metadata)

    def post_commit(self, committed: dict[tuple[str, int], int], *, force_checkpoint: bool = False) -> None:
        """After offsets committed: remember them; checkpoint (ALOS past the threshold; EOS only
        when forced, e.g. before a clean close)."""
        for tp, off in committed.items():
            if tp in self.partition_group.queues:
                self.committed[tp] = off
        self.commit_needed = False
        if self.engine is not None:
            self.engine.processor_metadata.needs_commit = False
        if self.manager is None or self.state is TaskState.CREATED:
            return
        if force_checkpoint:
            self.manager.checkpoint(force=True)
        elif not self.eos_enabled:
            self.manager.checkpoint()

    # ---- queries ----------------------------------------------------------------------------

    def store(self, name: str) -> Any:
        if self.engine is None:
            return None
        return self.engine.stores.get(name)
