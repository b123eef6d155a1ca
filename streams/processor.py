"""The Processor API: records, processors, the processor context, punctuation and timestamps."""

from __future__ import annotations

import enum
import logging
import time
from abc import ABC, abstractmethod
from typing import TYPE_CHECKING, Any, Callable, Mapping, NamedTuple, Optional

from eddy.class_names import import_class
from streams.errors import ConfigError, InvalidRecordError, InvalidTimestampError

if TYPE_CHECKING:  # pragma: no cover
    from state.task_id import TaskId

log = logging.getLogger(__name__)

__all__ = [
    "Record", "Headers", "Processor", "ProcessingContext", "ProcessorContext", "ProcessorSupplier", "PunctuationType",
    "Punctuator", "Cancellable", "RecordMetadata", "RecordContext", "ConsumerRecord", "TimestampExtractor",
    "FailOnInvalidTimestamp", "LogAndSkipOnInvalidTimestamp", "UsePartitionTimeOnInvalidTimestamp",
    "WallclockTimestampExtractor",
]

# Headers are an ordered sequence of (key, value) pairs; keys may repeat, as in Kafka.
Headers = tuple[tuple[str, Optional[bytes]], ...]
_EMPTY_HEADERS: Headers = ()


def _normalize_headers(headers: Any) -> Headers:
    if not headers:
        return _EMPTY_HEADERS
    if type(headers) is tuple:
        return headers
    if isinstance(headers, dict):
        headers = headers.items()
    try:
        out = tuple((k, v) for k, v in headers)
    except (TypeError, ValueError):
        raise InvalidRecordError(
            f"record headers must be a sequence of (str, bytes|None) pairs or a dict, got {headers!r}") from None
    for k, v in out:
        if not isinstance(k, str) or not (v is None or isinstance(v, (bytes, bytearray))):
            raise InvalidRecordError(f"record header ({k!r}, {v!r}) must be (str, bytes|None)")
    return out


_new = object.__new__


def checked_timestamp(timestamp: Any) -> int:
    """A record's timestamp as Kafka accepts it: an int (ms), not negative; else InvalidRecordError."""
    if type(timestamp) is not int:
        if not isinstance(timestamp, int) or isinstance(timestamp, bool):
            raise InvalidRecordError(f"record timestamp must be an int (ms), got {timestamp!r}")
    if timestamp < 0:
        raise InvalidRecordError(f"record timestamp may not be negative, got {timestamp}")
    return timestamp


class RecordFields:
    """What Record and streams.fixed_key.FixedKeyRecord share: their four fields, reading a
    header, equality (with a record of the same class) and the text. Treat as immutable."""

    __slots__ = ("key", "value", "timestamp", "headers")

    def header(self, key: str) -> bytes | None:
        """The last value of header `key`, or None (Kafka's `headers().lastHeader(key)`)."""
        for k, v in reversed(self.headers):
            if k == key:
                return v
        return None

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, self._same_kind):
            return NotImplemented
        return (self.key == other.key and self.value == other.value
                and self.timestamp == other.timestamp and self.headers == other.headers)

    __hash__ = None  # type: ignore[assignment]
    _same_kind: type = object

    def __repr__(self) -> str:
        hdr = f", headers={list(self.headers)!r}" if self.headers else ""
        return f"{type(self).__name__}(key={self.key!r}, value={self.value!r}, timestamp={self.timestamp}{hdr})"


class Record(RecordFields):
    """One record flowing through a topology. Treat as immutable; the `with_*` methods copy."""

    __slots__ = ()

    def __init__(self, key: Any, value: Any, timestamp: int, headers: Any = None) -> None:
        if type(timestamp) is not int or timestamp < 0:
            checked_timestamp(timestamp)
        self.key = key
        self.value = value
        self.timestamp = timestamp
        self.headers = _normalize_headers(headers)

    @classmethod
    def _make(cls, key: Any, value: Any, timestamp: int, headers: Headers) -> "Record":
        # trusted fast path for the runtime (fields already validated)
        rec = object.__new__(cls)
        rec.key = key
        rec.value = value
        rec.timestamp = timestamp
        rec.headers = headers
        return rec

    def with_key(self, key: Any) -> "Record":
        rec = _new(Record)
        rec.key = key
        rec.value = self.value
        rec.timestamp = self.timestamp
        rec.headers = self.headers
        return rec

    def with_value(self, value: Any) -> "Record":
        # hot path (every map/flat_map): build the copy inline, no validation needed
        rec = _new(Record)
        rec.key = self.key
        rec.value = value
        rec.timestamp = self.timestamp
        rec.headers = self.headers
        return rec

    def with_timestamp(self, timestamp: int) -> "Record":
        return Record(self.key, self.value, timestamp, self.headers)

    def with_headers(self, headers: Any) -> "Record":
        return Record._make(self.key, self.value, self.timestamp, _normalize_headers(headers))


Record._same_kind = Record


class RecordMetadata(NamedTuple):
    """Where the record being processed came from (None inside a punctuation)."""

    topic: str
    partition: int
    offset: int


class RecordContext(NamedTuple):
    """What a topic name extractor is told of the record it names a topic for (Kafka's
    RecordContext): where the input record came from (topic None, partition and offset -1 in a
    punctuation), and the timestamp and headers of the record being written."""

    topic: Optional[str]
    partition: int
    offset: int
    timestamp: int
    headers: Headers


class PunctuationType(enum.Enum):
    STREAM_TIME = "stream_time"
    WALL_CLOCK_TIME = "wall_clock_time"


Punctuator = Callable[[int], None]

#: Kafka's StreamPartitioner: `partitioner(topic, key, value, num_partitions)` gives the partition
#: of a record written to `topic`, or None for the default partitioner (murmur2 of the key's bytes).
StreamPartitioner = Callable[[str, Any, Any, int], Optional[int]]


class Cancellable(ABC):
    @abstractmethod
    def cancel(self) -> None:
        """Stop this punctuation; safe to call more than once and from inside the callback."""


class ProcessingContext(ABC):
    """What every processor sees of its task (Kafka's ProcessingContext): ProcessorContext and
    streams.fixed_key.FixedKeyProcessorContext add their `forward`."""

    @property
    @abstractmethod
    def application_id(self) -> str: ...

    @property
    @abstractmethod
    def task_id(self) -> "TaskId": ...

    @abstractmethod
    def schedule(self, interval_ms: int, punctuation_type: PunctuationType,
                 callback: Punctuator) -> Cancellable:
        """Call `callback(timestamp)` every `interval_ms` of stream time or wall-clock time."""

    @abstractmethod
    def get_state_store(self, name: str) -> Any:
        """The state store `name`; it must be connected to the current processor."""

    @abstractmethod
    def commit(self) -> None:
        """Request a commit as soon as possible (after the current record)."""

    @abstractmethod
    def record_metadata(self) -> RecordMetadata | None:
        """Topic, partition and offset of the input record being processed; None in a punctuation."""

    @property
    @abstractmethod
    def current_stream_time_ms(self) -> int: ...

    @property
    @abstractmethod
    def current_system_time_ms(self) -> int: ...

    @property
    @abstractmethod
    def app_config(self) -> dict: ...


class ProcessorContext(ProcessingContext):
    """What a processor sees of its task. Implemented by `streams.engine.ProcessorContextImpl`."""

    @abstractmethod
    def forward(self, record: Record, child_name: str | None = None) -> None:
        """Send `record` to all children of the current node, or only to `child_name`."""


class Processor(ABC):
    """A node of a topology. Subclass and implement `process`; `init` and `close` are optional."""

    def init(self, context: ProcessorContext) -> None:
        self.context = context

    @abstractmethod
    def process(self, record: Record) -> None: ...

    def close(self) -> None:  # noqa: B027 - an optional hook, empty by default as Kafka's
        pass


ProcessorSupplier = Callable[[], Processor]


class ConsumerRecord:
    """The deserialized input record as a timestamp extractor sees it."""

    __slots__ = ("topic", "partition", "offset", "key", "value", "timestamp", "headers")

    def __init__(self, topic: str, partition: int, offset: int, key: Any, value: Any,
                 timestamp: int, headers: Headers = _EMPTY_HEADERS) -> None:
        self.topic = topic
        self.partition = partition
        self.offset = offset
        self.key = key
        self.value = value
        self.timestamp = timestamp
        self.headers = headers

    def __repr__(self) -> str:
        return (f"ConsumerRecord(topic={self.topic!r}, partition={self.partition}, offset={self.offset}, "
                f"timestamp={self.timestamp})")


class TimestampExtractor(ABC):
    """Chooses a record's event time. A negative result means "invalid": the record is skipped."""

    @abstractmethod
    def extract(self, record: ConsumerRecord, partition_time: int) -> int: ...


class FailOnInvalidTimestamp(TimestampExtractor):
    """The default: the record's own (message) timestamp; a negative one is an error."""

    def extract(self, record: ConsumerRecord, partition_time: int) -> int:
        ts = record.timestamp
        if ts < 0:
            raise InvalidTimestampError(
                f"input record from topic {record.topic!r} partition {record.partition} offset {record.offset} "
                f"has invalid (negative) timestamp {ts}; use a different timestamp extractor "
                "(e.g. UsePartitionTimeOnInvalidTimestamp) to process it")
        return ts


class LogAndSkipOnInvalidTimestamp(TimestampExtractor):
    """The message timestamp; records with a negative one are logged and skipped."""

    def extract(self, record: ConsumerRecord, partition_time: int) -> int:
        if record.timestamp < 0:
            log.warning("skipping record with invalid timestamp %d: %r", record.timestamp, record)
        return record.timestamp


class UsePartitionTimeOnInvalidTimestamp(TimestampExtractor):
    """The message timestamp, or the partition's time (the highest seen so far) when it is negative."""

    def extract(self, record: ConsumerRecord, partition_time: int) -> int:
        ts = record.timestamp
        if ts >= 0:
            return ts
        if partition_time < 0:
            raise InvalidTimestampError(
                f"input record from topic {record.topic!r} partition {record.partition} offset {record.offset} "
                f"has invalid timestamp {ts} and there is no partition time yet to use instead")
        return partition_time


class WallclockTimestampExtractor(TimestampExtractor):
    """Processing time: the current wall-clock time in ms."""

    def extract(self, record: ConsumerRecord, partition_time: int) -> int:
        return int(time.time() * 1000)


DEFAULT_TIMESTAMP_EXTRACTOR_CONFIG = "default.timestamp.extractor"

# Kafka's names of the built-in extractors: a config carried over from a Java app names them so
_KAFKA_EXTRACTORS = {f"org.apache.kafka.streams.processor.{cls.__name__}": cls for cls in (
    FailOnInvalidTimestamp, LogAndSkipOnInvalidTimestamp, UsePartitionTimeOnInvalidTimestamp,
    WallclockTimestampExtractor)}


def default_timestamp_extractor(config: Mapping[str, Any]) -> Optional[TimestampExtractor]:
    """The extractor `default.timestamp.extractor` gives the sources without one of their own
    (Kafka's StreamsConfig.defaultTimestampExtractor: a new instance of a class each call), or
    None when it is unset or FailOnInvalidTimestamp, the record timestamp rule every source
    follows without an extractor. The value: an object with `extract(record, partition_time)`,
    a class of such objects, its 'package.module.Class' name, or Kafka's name of a built-in.
    Raises ConfigError naming the config for anything else."""
    value = config.get(DEFAULT_TIMESTAMP_EXTRACTOR_CONFIG) if config else None
    if value is None:
        return None
    what = f"config '{DEFAULT_TIMESTAMP_EXTRACTOR_CONFIG}'"
    if isinstance(value, str):
        try:
            value = _KAFKA_EXTRACTORS.get(value.strip()) or import_class(value, what)
        except ValueError as exc:
            raise ConfigError(str(exc)) from None
    if isinstance(value, type):
        if not callable(getattr(value, "extract", None)):
            raise ConfigError(f"{what}: class {value.__module__}.{value.__qualname__} has no "
                              "extract(record, partition_time) method")
        try:
            value = value()
        except Exception as exc:
            raise ConfigError(f"{what}: cannot make a {value.__qualname__}: {exc!r}") from exc
    elif not callable(getattr(value, "extract", None)):
        raise ConfigError(f"{what} must be a TimestampExtractor (an instance, a class or its "
                          f"'package.module.Class' name), got {value!r}")
    return None if type(value) is FailOnInvalidTimestamp else value
