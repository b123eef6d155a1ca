"""Typed errors of the embedded replicated log (`replication/`).

Names follow Kafka's exceptions (``OffsetOutOfRangeException`` -> ``OffsetOutOfRangeError``).
Every error subclasses :class:`ReplicationError`, itself an ``eddy.errors.EddyError``.
"""

from __future__ import annotations

from eddy.errors import EddyError


class ReplicationError(EddyError):
    """Base of every error raised by `replication/`."""


class OffsetOutOfRangeError(ReplicationError):
    """A fetch/read/start-offset request falls outside ``[log_start_offset, log_end_offset]``
    (or, for log start increments, above the high watermark)."""


class UnexpectedAppendOffsetError(ReplicationError):
    """A follower append's first offset is below the log end offset (rule 2)."""

    def __init__(self, message: str, first_offset: int = -1, last_offset: int = -1) -> None:
        super().__init__(message)
        self.first_offset = first_offset
        self.last_offset = last_offset


class OffsetsOutOfOrderError(ReplicationError):
    """Offsets inside a follower append do not increase strictly (rule 2)."""


class RecordBatchTooLargeError(ReplicationError):
    """One append is larger than ``segment.bytes`` and can never fit a segment."""


class RecordTooLargeError(ReplicationError):
    """A batch exceeds ``max.message.bytes`` (leader append)."""


class InvalidRecordError(ReplicationError):
    """An appended batch is malformed for this log (e.g. empty or wrong magic)."""


class RecordValidationError(InvalidRecordError):
    """A leader append refused for some of its records (Kafka's RecordValidationException with
    an InvalidRecordException): the batch is written not at all, and ``record_errors`` holds
    ``(index of the record in its batch, message)`` for each record at fault. Produce answers
    it with INVALID_RECORD and these record errors (KIP-467)."""

    def __init__(self, message: str, record_errors: list[tuple[int, str]]) -> None:
        super().__init__(message)
        self.record_errors = record_errors


class CorruptRecordError(ReplicationError):
    """A record batch failed validation (torn, bad CRC, bad length).

    ``source`` names the file or buffer, ``position`` the byte position of the bad batch in it,
    ``base_offset`` the batch's base offset when it could be read (else -1).
    """

    def __init__(self, message: str = "", source: str = "", position: int = -1,
                 base_offset: int = -1) -> None:
        super().__init__(message)
        self.source = source
        self.position = position
        self.base_offset = base_offset


class LogSegmentOffsetOverflowError(ReplicationError):
    """A batch's offsets cannot be expressed relative to its segment's base (Int32 overflow)."""


class CorruptIndexError(ReplicationError):
    """An offset or time index file failed its sanity check (it is rebuilt on open)."""


class KafkaStorageError(ReplicationError):
    """An I/O error on the log directory: the replica is offline."""


class InvalidTopicError(ReplicationError):
    """A topic name breaks Kafka's naming rules."""


class InvalidPartitionError(ReplicationError):
    """A partition number is negative or not an int."""


class InvalidConfigurationError(ReplicationError):
    """A log/topic configuration value is missing, of the wrong type or out of range.

    ``key`` is the Kafka configuration key at fault (e.g. ``"segment.bytes"``).
    """

    def __init__(self, message: str, key: str = "") -> None:
        super().__init__(message)
        self.key = key


class IllegalStateError(ReplicationError):
    """An operation was called in a state that forbids it (closed log, shut-down manager...)."""


class LogClosedError(IllegalStateError):
    """An operation was attempted on a closed (or crashed) log."""


class InvalidEpochEntryError(ReplicationError):
    """A leader epoch cache entry with a negative epoch or start offset (rule 11)."""


class TruncationLoopError(ReplicationError):
    """A follower log was truncated below its high watermark to the same offset again and again:
    its leader epochs and the leader's disagree (e.g. a wrong ``leader-epoch-checkpoint``), so
    every refetch of the committed records would be truncated once more."""


class CorruptCheckpointError(ReplicationError):
    """A checkpoint file (e.g. ``leader-epoch-checkpoint``) is malformed.

    ``path`` names the file and ``line`` the 1-based line at fault (0 when not line-specific).
    """

    def __init__(self, message: str, path: str = "", line: int = 0) -> None:
        super().__init__(message)
        self.path = path
        self.line = line


class TransportError(ReplicationError):
    """A request between brokers failed: destination down, dropped, or timed out."""


class ClusterError(ReplicationError):
    """A cluster-level operation failed (unknown broker, topic exists, no leader...)."""


class DataDirInUseError(ClusterError):
    """Another embedded cluster, in this process or another, holds the lock of the data
    directory a cluster was started on (Kafka's log directory lock)."""


class NotLeaderError(ReplicationError):
    """This broker is not the leader of the partition."""


class NotEnoughReplicasError(ReplicationError):
    """acks=all refused before the append: the ISR is below min.insync.replicas (rule 20)."""


class InvalidOffsetError(ReplicationError):
    """An offset argument is negative or otherwise impossible (e.g. a high watermark above the
    log end offset)."""


class CleaningAbortedError(ReplicationError):
    """A log cleaner pass stopped without changing the log: the log was truncated, lost segments
    to retention or was closed meanwhile, another pass was running, or the cleaner shut down."""
