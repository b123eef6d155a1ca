"""Timestamped key-value stores (Kafka's TimestampedKeyValueStore): values are ValueAndTimestamp.

Stored value format (Kafka's ValueAndTimestampSerializer): 8-byte big-endian timestamp followed
by the inner value's bytes; a None value is a delete. The change-logging layer logs that same
format, with the record timestamp taken from the value when a put gives none.
"""

from __future__ import annotations

import struct
from typing import Any, NamedTuple, Optional

from state.errors import InvalidStoreArgumentError, StateError
from state.typed import TypedKeyValueStore

_I64 = struct.Struct(">q")
TIMESTAMP_SIZE = 8


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
