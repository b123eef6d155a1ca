"""What an instance's stream threads run, for monitoring (Kafka's ThreadMetadata and TaskMetadata,
KafkaStreams.metadataForLocalThreads)."""

from __future__ import annotations

from typing import Any, NamedTuple, Optional

from state.task_id import TaskId


class TaskMetadata(NamedTuple):
    """One task of a thread: its input partitions as (topic, partition); the offsets its last
    commit committed (the next to read); the offset of the last record fetched from each
    partition, updated at every poll (Kafka's endOffsets: that record's offset, so a task that
    committed all it fetched shows committed = end + 1); none of either for a standby; the
    wall-clock ms since when it has been idling, waiting for input on another partition
    (max.task.idle.ms), else None."""

    task_id: TaskId
    topic_partitions: frozenset
    committed_offsets: dict
    end_offsets: dict
    time_current_idling_started: Optional[int]


class ThreadMetadata(NamedTuple):
    """One stream thread: its name and state, its clients' ids and its tasks (by task id)."""

    thread_name: str
    thread_state: str
    consumer_client_id: str
    restore_consumer_client_id: str
    producer_client_ids: frozenset
    admin_client_id: str
    active_tasks: tuple
    standby_tasks: tuple


def active_task_metadata(task: Any) -> TaskMetadata:
    """A StreamTask's metadata (read from another thread: every field is copied)."""
    return TaskMetadata(task.id, frozenset(task.input_partitions), dict(task.committed), dict(task.end_offsets),
                        task.idling_since)


def standby_task_metadata(task_id: TaskId, input_partitions: list) -> TaskMetadata:
    return TaskMetadata(task_id, frozenset(input_partitions), {}, {}, None)
