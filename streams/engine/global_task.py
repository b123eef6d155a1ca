"""GlobalStateUpdateTask: how records of global topics update the global stores (Kafka's
GlobalStateUpdateTask), one implementation for the App's global thread and the TopologyTestDriver.

The global sub-topology (every global store's source and processor, `Topology.global_subtopology()`)
runs on a `TaskEngine` of its own, task id -1_-1, so deserialization and its handler, timestamp
extraction and error reporting are the stream tasks' own. Consumed messages of one partition go
through `update` (steady state) or `restore` (bootstrap: records with a None key are skipped
there, uncounted, as Kafka's global restore skips them); both record the partition's next offset
in the GlobalStateManager. The checkpoint follows Kafka's global task: written by
`maybe_checkpoint` once `commit.interval.ms` has passed and more than 10,000 offsets were applied
since the last one, and (unlike Kafka 3.x, which skips it) at a clean close, so a restart resumes
where the instance stopped.

Bootstrap goes through the processor for DSL global tables too (Kafka restores their raw bytes
without deserializing, KAFKA-8037): a bad record meets the deserialization handler here, and the
same code fills the store in both phases. What only processing does in Kafka (the table
source's WARN of an out-of-order update) is skipped while `context.bootstrapping` says so.
"""

from __future__ import annotations

from typing import Any, Callable, Mapping, Optional

from confluent_kafka import Message, TopicPartition

from state.directory import StateDirectory
from state.global_manager import GLOBAL_TASK_ID, GlobalStateManager
from state.manager import OFFSET_DELTA_THRESHOLD_FOR_CHECKPOINT
from streams.engine.task_engine import TaskEngine
from streams.errors import ProcessingError
from streams.topology import Subtopology, Topology

_KEY = Message.key
_OFFSET = Message.offset


class _NoSinks:
    """The global sub-topology has no sinks (Topology validates it): nothing is ever sent."""

    def send(self, topic: str, *args: Any, **kwargs: Any) -> None:
        raise ProcessingError(f"a global store processor cannot send records (to {topic!r})")

    def partitions_for(self, topic: str) -> int:
        raise ProcessingError(f"a global store processor cannot send records (to {topic!r})")


class GlobalStateUpdateTask:
    """See the module doc. Driven by one thread; stream tasks read the stores it updates."""

    def __init__(self, topology: Topology, subtopology: Subtopology, manager: GlobalStateManager, *,
                 application_id: str, config: Mapping[str, Any], clock_ms: Callable[[], int],
                 metrics: Any = None, thread_id: str = "global") -> None:
        self.manager = manager
        self.clock_ms = clock_ms
        self.commit_interval_ms = int(config.get("commit.interval.ms", 30_000))
        self.engine = TaskEngine(topology, subtopology, task_id=GLOBAL_TASK_ID, application_id=application_id,
                                 config=config, collector=_NoSinks(), clock_ms=clock_ms, state_context=manager,
                                 metrics=metrics, thread_id=thread_id, global_task=True)
        self._checkpointed: Optional[dict[TopicPartition, int]] = None
        self._last_flush_ms = 0

    @property
    def stores(self) -> dict[str, Any]:
        return self.engine.stores

    def initialize(self) -> dict[TopicPartition, int]:
        """Open the global stores, read the checkpoint, init the processors; returns the
        checkpointed next offset of each source partition."""
        offsets = self.manager.initialize(self.engine.build_stores().values())
        try:
            self.engine.init_processors()
        except BaseException:
            self.manager.close()
            raise
        self._checkpointed = dict(offsets)
        self._last_flush_ms = self.clock_ms()
        return offsets

    def update(self, topic: str, partition: int, messages: list) -> int:
        """Apply consumed messages of one partition, in offset order; returns how many were
        processed (not skipped by the deserialization handler)."""
        if not messages:
            return 0
        done = self.engine.process_messages(topic, partition, messages)
        self.manager.update_offsets({TopicPartition(topic, partition): _OFFSET(messages[-1]) + 1})
        return done

    def restore(self, topic: str, partition: int, messages: list) -> int:
        """`update` for the bootstrap: records with a None key are skipped."""
        keyed = [m for m in messages if _KEY(m) is not None]
        context = self.engine.context
        context.bootstrapping = True
        try:
            done = self.engine.process_messages(topic, partition, keyed) if keyed else 0
        finally:
            context.bootstrapping = False
        if messages:
            self.manager.update_offsets({TopicPartition(topic, partition): _OFFSET(messages[-1]) + 1})
        return done

    def set_offset(self, topic: str, partition: int, next_offset: int) -> None:
        """Where a partition's reading stands beyond its last record (transaction markers, an
        empty partition): the consumer position."""
        self.manager.update_offsets({TopicPartition(topic, partition): next_offset})

    def flush_state(self) -> None:
        """Flush the stores and write the checkpoint."""
        self.manager.flush()
        self.manager.checkpoint()
        self._checkpointed = self.manager.offsets()

    def maybe_checkpoint(self) -> bool:
        """Kafka's rule: every commit.interval.ms, if more than 10,000 offsets were applied."""
        now = self.clock_ms()
        if self._checkpointed is None or now - self._last_flush_ms < self.commit_interval_ms:
            return False
        old = self._checkpointed
        delta = sum(o - old.get(tp, 0) for tp, o in self.manager.offsets().items())
        if delta <= OFFSET_DELTA_THRESHOLD_FOR_CHECKPOINT:
            return False
        self.flush_state()
        self._last_flush_ms = now
        return True

    def close(self, *, clean: bool, wipe: bool = False) -> None:
        """Close the processors and the stores; clean: checkpoint first; wipe: delete the global
        state afterwards (offsets out of range: the next start restores from the beginning)."""
        first_error: Optional[BaseException] = None
        try:
            self.engine.close(close_stores=False)
        except BaseException as exc:  # noqa: BLE001 - the stores must still be closed
            first_error = exc
        if clean and not wipe and first_error is None and self._checkpointed is not None:
            try:
                self.flush_state()
            except BaseException as exc:  # noqa: BLE001
                first_error = exc
        try:
            if wipe:
                self.manager.wipe()
            else:
                self.manager.close()
        except BaseException as exc:  # noqa: BLE001
            first_error = first_error or exc
        if first_error is not None:
            raise first_error


def global_update_task(topology: Topology, state_directory: StateDirectory, *, config: Mapping[str, Any],
                       clock_ms: Callable[[], int], metrics: Any = None, thread_id: str = "global",
                       thread_cache: Any = None) -> Optional[GlobalStateUpdateTask]:
    """The update task of `topology`'s global stores, with their state manager (not initialised
    yet); None when the topology has no global store. `thread_cache`: the cache of its caching
    stores (the global thread's own; the test driver's one cache, as Kafka's driver shares it)."""
    subtopology = topology.global_subtopology()
    if subtopology is None:
        return None
    store_topics = {store: topic for topic, store in topology.global_topics.items()}
    manager = GlobalStateManager(state_directory, store_topics, dict(config), thread_cache=thread_cache)
    return GlobalStateUpdateTask(topology, subtopology, manager, application_id=state_directory.application_id,
                                 config=config, clock_ms=clock_ms, metrics=metrics, thread_id=thread_id)
