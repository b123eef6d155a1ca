"""StandbyTask: a task's stores kept up to date from their changelogs, never processing input.

The owning thread's StoreChangelogReader updates the changelogs in STANDBY_UPDATING mode. On
promotion the open stores and their offsets are handed to a new StreamTask
(`ProcessorStateManager.transition_task_type`), which then restores only the changelog tail.
"""

from __future__ import annotations

import enum
import logging
from typing import Any, Optional

from confluent_kafka import TopicPartition

from state.errors import LockError
from state.manager import ProcessorStateManager, TaskType, close_state_manager, register_state_stores
from state.task_id import TaskId
from streams.runtime.errors import RuntimeStateError
from streams.runtime.task import check_transition
from streams.topology import Subtopology, Topology, changelog_topic_name, source_changelogs

log = logging.getLogger(__name__)


class StandbyState(enum.Enum):
    CREATED = "CREATED"
    RUNNING = "RUNNING"
    CLOSED = "CLOSED"


_ALLOWED = {
    StandbyState.CREATED: {StandbyState.RUNNING, StandbyState.CLOSED},
    StandbyState.RUNNING: {StandbyState.CLOSED},
    StandbyState.CLOSED: {StandbyState.CREATED},
}


class StandbyTask:
    def __init__(self, task_id: TaskId, subtopology: Subtopology, topology: Topology, *,
                 application_id: str, config: dict, state_directory: Any, thread_cache: Any,
                 eos_enabled: bool) -> None:
        self.id = task_id
        self.subtopology = subtopology
        self.topology = topology
        self.application_id = application_id
        self.config = config
        self.state_directory = state_directory
        self.thread_cache = thread_cache
        self.eos_enabled = eos_enabled
        self.state = StandbyState.CREATED
        self.manager: Optional[ProcessorStateManager] = None

    def __repr__(self) -> str:
        return f"StandbyTask({self.id}, {self.state.value})"

    def _transit(self, new: StandbyState) -> None:
        check_transition(f"standby task {self.id}", self.state, new, _ALLOWED)
        self.state = new

    def changelog_partitions(self) -> list[TopicPartition]:
        return self.manager.changelog_partitions() if self.manager is not None else []

    def initialize_if_needed(self) -> None:
        """Lock the directory, open the stores (not processors), load the checkpoint."""
        if self.state is not StandbyState.CREATED:
            return
        manager = ProcessorStateManager(
            self.id, TaskType.STANDBY, self.eos_enabled, self.state_directory,
            changelog_topics={s: changelog_topic_name(self.application_id, s) for s in self.subtopology.store_names},
            source_changelogs=source_changelogs(self.topology, self.subtopology),
            changelog_partition=self.id.partition, collector=None, config=self.config)
        manager.thread_cache = self.thread_cache  # type: ignore[attr-defined]
        stores = [self.topology.store_builder(name).build() for name in self.subtopology.store_names]
        self.manager = manager  # set first: a TaskCorruptedError leaves it for the caller to wipe
        try:
            register_state_stores(manager, stores)
        except LockError:
            self.manager = None  # retried later with a new manager; nothing is open
            raise
        self._transit(StandbyState.RUNNING)

    def commit(self) -> None:
        """Checkpoint what was applied (past the threshold; never under exactly-once, where a
        checkpoint is written only at a clean close)."""
        if self.manager is not None and not self.eos_enabled:
            self.manager.checkpoint()

    def close(self, *, dirty: bool = False) -> None:
        if self.state is StandbyState.CLOSED:
            return
        if self.manager is not None:
            try:
                close_state_manager(self.manager, dirty=dirty, wipe=dirty and self.eos_enabled)
            except BaseException:
                if not dirty:
                    raise
                log.exception("standby %s: error on dirty close", self.id)
        self.manager = None
        self._transit(StandbyState.CLOSED)

    def hand_over(self) -> ProcessorStateManager:
        """Promotion: give the open, registered stores to an active task (no close, no restore
        from scratch). The caller has unregistered the changelogs from the reader."""
        manager = self.manager
        if manager is None or self.state is not StandbyState.RUNNING:
            raise RuntimeStateError(f"standby {self.id} has no open state to hand over")
        manager.transition_task_type(TaskType.ACTIVE)
        self.manager = None
        self.state = StandbyState.CLOSED
        return manager
