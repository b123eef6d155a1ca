"""Typed errors of the streams layer (the runtime's own are in streams/runtime/errors.py). Every
class subclasses `StreamsError`, the layer's one base (itself an `eddy.errors.EddyError`)."""

from __future__ import annotations

from eddy.errors import EddyError


class StreamsError(EddyError):
    """Base of all streams-layer errors."""


class TopologyError(StreamsError):
    """An invalid topology; the message names the offending node, store or topic."""


class ProcessingError(StreamsError):
    """A failure while processing a record (a processor raised, a store was misused, ...).

    When raised by the processing core it names the task, the processor node and the
    input record's topic, partition and offset.
    """


class SerializationError(StreamsError):
    """A serde could not serialize or deserialize a value."""


class RecordDeserializationError(SerializationError):
    """An input record could not be deserialized.

    Carries where the record came from so deserialization handlers and callers can report it.
    """

    def __init__(self, message: str, *, topic: str | None, partition: int | None,
                 offset: int | None, key: bytes | None = None, value: bytes | None = None) -> None:
        super().__init__(message)
        self.topic = topic
        self.partition = partition
        self.offset = offset
        self.key = key
        self.value = value


class DeserializationHandlerError(ProcessingError):
    """The deserialization exception handler itself raised (or answered something that is not a
    DeserializationHandlerResponse) for an input record it was asked about; names the record."""

    def __init__(self, message: str, *, topic: str, partition: int, offset: int) -> None:
        super().__init__(message)
        self.topic = topic
        self.partition = partition
        self.offset = offset


class InvalidTimestampError(ProcessingError):
    """A timestamp extractor met a record with an invalid (negative) timestamp."""


class InvalidRecordError(StreamsError, ValueError):
    """A `Record` was built with invalid fields (e.g. a negative timestamp)."""


class UnknownProcessorError(ProcessingError):
    """`forward(record, child_name)` named a node that is not a child of the current processor."""


class StoreAccessError(ProcessingError):
    """A processor asked for a state store that does not exist or is not connected to it."""


class ConfigError(StreamsError, ValueError):
    """A configuration value is missing or invalid; the message names the key."""


class UnknownTopicError(StreamsError):
    """A test driver input names a topic that no source node reads."""


class EmptyTopicError(StreamsError):
    """A test driver output topic has no more records to read."""


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
