"""Requests and responses exchanged between brokers and clients of the embedded cluster.

The shapes follow Kafka's wire protocol (Produce, Fetch, ListOffsets, OffsetsForLeaderEpoch)
plus AppendRecords for push replication, as plain Python objects carried by the in-process
transport. Error codes are Kafka's protocol codes, which are also the positive codes of
`confluent_kafka.KafkaError`, so clients can surface them unchanged.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import NamedTuple, Sequence

from replication.records import MemoryRecords, EMPTY


class TopicPartition(NamedTuple):
    """A partition name inside the replication layer (cheap, hashable)."""

    topic: str
    partition: int

    def __str__(self) -> str:
        return f"{self.topic}-{self.partition}"


class Errors(enum.IntEnum):
    """Kafka protocol error codes used by the embedded cluster."""

    NONE = 0
    OFFSET_OUT_OF_RANGE = 1
    CORRUPT_MESSAGE = 2
    UNKNOWN_TOPIC_OR_PART = 3
    INVALID_FETCH_SIZE = 4
    LEADER_NOT_AVAILABLE = 5
    NOT_LEADER_OR_FOLLOWER = 6
    REQUEST_TIMED_OUT = 7
    BROKER_NOT_AVAILABLE = 8
    REPLICA_NOT_AVAILABLE = 9
    MSG_SIZE_TOO_LARGE = 10
    NOT_COORDINATOR = 16
    INVALID_TOPIC_EXCEPTION = 17
    RECORD_LIST_TOO_LARGE = 18
    NOT_ENOUGH_REPLICAS = 19
    NOT_ENOUGH_REPLICAS_AFTER_APPEND = 20
    INVALID_REQUIRED_ACKS = 21
    TOPIC_ALREADY_EXISTS = 36
    INVALID_PARTITIONS = 37
    INVALID_REPLICATION_FACTOR = 38
    INVALID_CONFIG = 40
    INVALID_REQUEST = 42
    OUT_OF_ORDER_SEQUENCE_NUMBER = 45
    DUPLICATE_SEQUENCE_NUMBER = 46
    INVALID_PRODUCER_EPOCH = 47
    INVALID_TXN_STATE = 48
    PRODUCER_FENCED = 90
    KAFKA_STORAGE_ERROR = 56
    UNKNOWN_PRODUCER_ID = 59
    FETCH_SESSION_ID_NOT_FOUND = 70
    INVALID_FETCH_SESSION_EPOCH = 71
    FENCED_LEADER_EPOCH = 74
    UNKNOWN_LEADER_EPOCH = 75
    OFFSET_NOT_AVAILABLE = 78
    INVALID_RECORD = 87
    # Push replication: the follower rejects an AppendRecords whose session is not current.
    INVALID_PUSH_SESSION = 10001
    # Push replication: the follower has not applied the fetch response that switched it to
    # push yet; the leader retries shortly.
    PUSH_SESSION_NOT_READY = 10002


# Sentinels as Kafka uses them.
UNDEFINED_EPOCH = -1
UNDEFINED_EPOCH_OFFSET = -1
FOLLOWER_REPLICA_ID_NONE = -1  # a consumer's fetch
LATEST_TIMESTAMP = -1
EARLIEST_TIMESTAMP = -2


class IsolationLevel(enum.IntEnum):
    """Where a fetch may read up to (rule 5): LEO for followers, HW, or the last stable offset."""

    LOG_END = 0
    HIGH_WATERMARK = 1
    TXN_COMMITTED = 2


# --- Produce ---------------------------------------------------------------------------------


@dataclass(slots=True)
class ProduceRequest:
    acks: int  # 0, 1 or -1 (all)
    timeout_ms: int
    partitions: dict[TopicPartition, bytes]  # encoded batches per partition
    transactional_id: str | None = None


@dataclass(slots=True)
class ProducePartitionResponse:
    error: Errors = Errors.NONE
    base_offset: int = -1
    log_append_time: int = -1
    log_start_offset: int = -1
    error_message: str | None = None
    #: KIP-467: (index of the record in its batch, message) for each record that failed
    #: validation (INVALID_RECORD); the batch as a whole was not written.
    record_errors: list[tuple[int, str]] = field(default_factory=list)


# --- Fetch -----------------------------------------------------------------------------------


@dataclass(slots=True)
class FetchPartition:
    fetch_offset: int
    current_leader_epoch: int = UNDEFINED_EPOCH
    last_fetched_epoch: int = UNDEFINED_EPOCH
    log_start_offset: int = -1  # the follower's, informational
    max_bytes: int = 1 << 20
    push_session_id: int = -1  # push replication: the follower's current session id


#: Fetch session epochs (KIP-227): INITIAL_EPOCH with session id 0 opens a session (a full
#: fetch); FINAL_EPOCH closes one, and with id 0 is a fetch without a session (the default).
INITIAL_EPOCH = 0
FINAL_EPOCH = -1
INVALID_SESSION_ID = 0


@dataclass(slots=True)
class FetchRequest:
    """A Fetch. In an incremental fetch (``session_id`` and an epoch >= 1) ``partitions`` holds
    only the partitions added or changed since the last request of the session, and
    ``forgotten`` the ones it no longer fetches."""

    replica_id: int  # broker id of a follower, or FOLLOWER_REPLICA_ID_NONE for consumers
    replica_epoch: int  # the follower broker's epoch (bumped on every restart); -1 for consumers
    max_wait_ms: int
    min_bytes: int
    max_bytes: int
    isolation_level: IsolationLevel
    partitions: dict[TopicPartition, FetchPartition]
    session_id: int = INVALID_SESSION_ID
    session_epoch: int = FINAL_EPOCH
    forgotten: tuple[TopicPartition, ...] = ()

    @property
    def is_incremental(self) -> bool:
        return self.session_id != INVALID_SESSION_ID and self.session_epoch > INITIAL_EPOCH


class FetchResponse(dict):
    """A Fetch answer: ``tp -> FetchPartitionResponse`` (a dict, as sessionless callers read it),
    plus the session fields. An incremental answer holds only the partitions with records, an
    error, or a high watermark, last stable offset or log start offset that changed since the
    session last told them; ``error`` is a session error (then no partition is included)."""

    __slots__ = ("error", "session_id")

    def __init__(self, partitions=(), error: "Errors" = None, session_id: int = INVALID_SESSION_ID) -> None:
        super().__init__(partitions)
        self.error = Errors.NONE if error is None else error
        self.session_id = session_id


@dataclass(slots=True)
class AbortedTransaction:
    producer_id: int
    first_offset: int
    # Offset of the ABORT marker: read_committed decoding filters (producer_id, first, last).
    last_offset: int = -1


@dataclass(slots=True)
class FetchPartitionResponse:
    error: Errors = Errors.NONE
    high_watermark: int = -1
    last_stable_offset: int = -1
    log_start_offset: int = -1
    log_end_offset: int = -1
    records: MemoryRecords = EMPTY
    # Set when the follower's last fetched epoch diverges from the leader's log (rule 15).
    diverging_epoch: tuple[int, int] | None = None  # (epoch, end_offset)
    aborted_transactions: list[AbortedTransaction] | None = None
    # Push replication: the leader tells the follower to stop fetching (it will push instead).
    push_session_id: int = -1
    switch_to_push: bool = False


# --- ListOffsets -----------------------------------------------------------------------------


class ListOffsetsPartition(NamedTuple):
    tp: TopicPartition
    timestamp: int  # or LATEST_TIMESTAMP / EARLIEST_TIMESTAMP / -3 (the largest timestamp)
    current_leader_epoch: int = UNDEFINED_EPOCH


@dataclass(slots=True)
class ListOffsetsRequest:
    """A ListOffsets. As on the wire, ``partitions`` is a list: a partition named twice is
    answered INVALID_REQUEST (Kafka's duplicatePartitions); the answer is a dict ``tp ->
    ListOffsetsPartitionResponse`` with one entry per partition named."""

    replica_id: int
    isolation_level: IsolationLevel
    partitions: Sequence[ListOffsetsPartition]


@dataclass(slots=True)
class ListOffsetsPartitionResponse:
    error: Errors = Errors.NONE
    timestamp: int = -1
    offset: int = -1
    leader_epoch: int = UNDEFINED_EPOCH


# --- OffsetsForLeaderEpoch -------------------------------------------------------------------


@dataclass(slots=True)
class OffsetForLeaderPartition:
    current_leader_epoch: int
    leader_epoch: int


@dataclass(slots=True)
class OffsetsForLeaderEpochRequest:
    replica_id: int
    partitions: dict[TopicPartition, OffsetForLeaderPartition]


@dataclass(slots=True)
class EpochEndOffset:
    error: Errors = Errors.NONE
    leader_epoch: int = UNDEFINED_EPOCH
    end_offset: int = UNDEFINED_EPOCH_OFFSET

    @property
    def has_undefined_epoch_or_offset(self) -> bool:
        return self.leader_epoch == UNDEFINED_EPOCH or self.end_offset == UNDEFINED_EPOCH_OFFSET


# --- AppendRecords (push replication) --------------------------------------------------------


@dataclass(slots=True)
class AppendRecordsRequest:
    leader_id: int
    leader_epoch: int
    replica_epoch: int
    session_id: int
    topic_partition: TopicPartition
    base_offset: int  # must equal the follower's LEO when records are present
    records: MemoryRecords
    high_watermark: int
    log_start_offset: int
    end_session: bool = False


@dataclass(slots=True)
class AppendRecordsResponse:
    error: Errors = Errors.NONE
    log_end_offset: int = -1
    log_start_offset: int = -1
    error_message: str | None = None


@dataclass(slots=True)
class AppendRecordsBatchRequest:
    """Push replication: AppendRecords for several partitions to one follower broker."""

    leader_id: int
    partitions: list[AppendRecordsRequest]


@dataclass(slots=True)
class AppendRecordsBatchResponse:
    responses: list[AppendRecordsResponse]  # one per request partition, in request order


@dataclass(slots=True)
class Request:
    """Envelope carried by the transport: who sent it, to whom, and the body."""

    source: int
    destination: int
    body: object
    correlation_id: int = 0
    extra: dict = field(default_factory=dict)
