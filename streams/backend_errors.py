"""Typed errors of the backend contract (`streams.backends`) and internal topic management."""

from __future__ import annotations

from streams.errors import StreamsError


class BackendError(StreamsError):
    """No backend can be built for a configuration, or a backend is unavailable."""


class InternalTopicError(BackendError):
    """An internal (changelog or repartition) topic cannot be created or validated."""

    def __init__(self, message: str, topic: str | None = None) -> None:
        super().__init__(message)
        self.topic = topic


class InternalTopicPartitionMismatchError(InternalTopicError):
    """An existing internal topic has a different partition count than the topology needs."""

    def __init__(self, topic: str, expected_partitions: int, actual_partitions: int) -> None:
        super().__init__(
            f"internal topic {topic!r} has {actual_partitions} partitions but the topology "
            f"needs {expected_partitions}; delete the topic (or reset the application) to recreate it",
            topic,
        )
        self.expected_partitions = expected_partitions
        self.actual_partitions = actual_partitions
