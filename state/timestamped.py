"""Timestamped stores (Kafka's TimestampedKeyValueStore, TimestampedWindowStore): values are
ValueAndTimestamp.

Stored value format (Kafka's ValueAndTimestampSerializer): 8-byte big-endian timestamp followed
by the inner value's bytes; a None value is a delete.

Changelog format (Kafka's ChangeLoggingTimestamped*BytesStore): the record's value is the RAW
inner value and the record's timestamp is the value's timestamp; a tombstone has the timestamp of
the write that deleted. `split_timestamped` is what the timestamped change-logging layers log;
`restore_converter` is the one way back (Kafka's RecordConverters.rawValueToTimestampedValue),
applied by the state manager to every restored or standby batch of such a store.
"""

from __future__ import annotations

import struct
from operator import itemgetter
from typing import Any, Callable, NamedTuple, Optional

from state.errors import InvalidStoreArgumentError, StateError
from state.typed import TypedKeyValueStore

_I64 = struct.Struct(">q")
_pack_i64 = _I64.pack
_unpack_i64_from = _I64.unpack_from
TIMESTAMP_SIZE = 8
#: a timestamped INT64 as a timestamped store keeps it: the 8-byte timestamp, then the 8-byte value
TIMESTAMPED_INT64 = struct.Struct(">qq")
_second = itemgetter(1)
_startswith = bytes.startswith


class ValueAndTimestamp(NamedTuple):
    value: Any
    timestamp: int

    @staticmethod
    def make(value: Any, timestamp: int) -> Optional["ValueAndTimestamp"]:
        """None for a None value (Kafka's ValueAndTimestamp.make)."""
        return None if value is None else ValueAndTimestamp(value, timestamp)

    @staticmethod
    def get_value_or_null(value_and_timestamp: Optional["ValueAndTimestamp"]) -> Any:
        return None if value_and_timestamp is None else value_and_timestamp.value


def raw_value(data: bytes) -> bytes:
    """The inner value bytes of a stored timestamped value."""
    return data[TIMESTAMP_SIZE:]


def raw_timestamp(data: bytes) -> int:
    return _I64.unpack_from(data)[0]


class ValueAndTimestampSerde:
    """Serde of ValueAndTimestamp around an inner value serde (None: the value is bytes)."""

    def __init__(self, inner: Any = None) -> None:
        if inner is not None and not (hasattr(inner, "serialize") and hasattr(inner, "deserialize")):
            raise InvalidStoreArgumentError(f"ValueAndTimestampSerde: inner must be a serde, got {inner!r}")
        self.inner = inner
        self.name = f"value_and_timestamp({getattr(inner, 'name', 'bytes')})"

    def serialize(self, obj: Optional[ValueAndTimestamp]) -> Optional[bytes]:
        if obj is None:
            return None
        if not isinstance(obj, ValueAndTimestamp):
            raise InvalidStoreArgumentError(
                f"a timestamped store takes ValueAndTimestamp(value, timestamp) values, got {type(obj).__name__}")
        value = obj.value if self.inner is None else self.inner.serialize(obj.value)
        if value is None:
            return None
        return _I64.pack(obj.timestamp) + value

    def deserialize(self, data: Optional[bytes]) -> Optional[ValueAndTimestamp]:
        if data is None:
            return None
        if len(data) < TIMESTAMP_SIZE:
            raise StateError(f"timestamped value too short ({len(data)} bytes): {data[:32]!r}")
        value = data[TIMESTAMP_SIZE:]
        return ValueAndTimestamp(value if self.inner is None else self.inner.deserialize(value),
                                 _I64.unpack_from(data)[0])


class TimestampedKeyValueStore(TypedKeyValueStore):
    """A typed key-value store of ValueAndTimestamp values (get -> ValueAndTimestamp or None)."""

    def __init__(self, wrapped, key_serde=None, value_serde=None) -> None:
        super().__init__(wrapped, key_serde, ValueAndTimestampSerde(value_serde))
        self.inner_value_serde = value_serde

    def put(self, key, value: Optional[ValueAndTimestamp], timestamp: Optional[int] = None) -> None:
        if timestamp is None and value is not None:
            timestamp = getattr(value, "timestamp", None)
        super().put(key, value, timestamp)


# ------------------------------------------------------------------------- changelog format
def split_timestamped(store_name: str, data: bytes) -> tuple[bytes, int]:
    """(raw value, timestamp) of a stored timestamped value: what its changelog record carries
    as value and as record timestamp."""
    try:
        return data[TIMESTAMP_SIZE:], _unpack_i64_from(data)[0]
    except (struct.error, TypeError):
        raise StateError(f"state store {store_name!r}: a timestamped store's value must be an 8-byte timestamp "
                         f"followed by the value, got {data[:32]!r}") from None


class LegacyChangelogFormatError(StateError):
    """A timestamped store's changelog holds a record in the format Eddy wrote before it logged
    Kafka's (the value with its 8-byte timestamp in front): restoring it would corrupt the store."""


def restore_converter(store_name: str, *, check_legacy: bool = True) -> Callable[[list, list], list]:
    """`convert(records, timestamps)`: a timestamped store's changelog records `[(key, raw value
    or None)]` with their record timestamps, as the store keeps them `[(key, 8-byte timestamp +
    raw value or None)]` (Kafka's RecordConverters.rawValueToTimestampedValue).

    A record whose value already starts with its own record timestamp and goes on past it is what
    Eddy logged before it used Kafka's format (the same timestamp in the value and the record): it
    raises LegacyChangelogFormatError instead of being stamped twice (see `_check_legacy`). Not
    with `check_legacy=False`: a source topic read as the changelog, which Eddy never wrote in
    that format (its values may begin with anything)."""

    def convert(records: list, timestamps: list) -> list:
        if len(records) != len(timestamps):
            raise StateError(f"state store {store_name!r}: {len(records)} changelog records "
                             f"but {len(timestamps)} timestamps")
        stamps = list(map(_pack_i64, timestamps))
        values = list(map(_second, records))
        if None not in values:
            if check_legacy and any(map(_startswith, values, stamps)):  # one C-level pass; rarely true
                _check_legacy(store_name, values, stamps)
            return [(key, stamp + value) for (key, value), stamp in zip(records, stamps)]
        if check_legacy:
            _check_legacy(store_name, values, stamps)
        return [(key, None if value is None else stamp + value) for (key, value), stamp in zip(records, stamps)]

    return convert


def _check_legacy(store_name: str, values: list, stamps: list) -> None:
    """Raise for a value in the old prefixed format: longer than a timestamp and starting with the
    record's timestamp. Such a changelog mixes formats, or holds only the old one; stamping it again
    would corrupt every value, silently. Values of exactly 8 bytes equal to their timestamp (an
    INT64 aggregate of timestamps) are raw values: the old format always had more after the
    timestamp, except for an empty value."""
    for value, stamp in zip(values, stamps):
        if value is not None and len(value) > TIMESTAMP_SIZE and value.startswith(stamp):
            raise LegacyChangelogFormatError(
                f"state store {store_name!r}: its changelog holds a record in the format Eddy used before it "
                f"logged timestamped stores as Kafka does (8-byte timestamp {_unpack_i64_from(stamp)[0]} in front of "
                f"the value, {value[:24]!r}...). Restoring it would corrupt the store. Such a changelog cannot "
                "be restored by this version: reset the application's state (delete the changelog topic and "
                "the local state directory) and reprocess its input. (A store whose values really begin with "
                "their own record timestamp, big-endian, cannot be restored either: store it in another "
                "encoding.)")
