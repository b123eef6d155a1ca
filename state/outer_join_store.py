"""The shared store of a left/outer stream-stream join's not-yet-joined records (Kafka's
KeyValueStore<TimestampedKeyAndJoinSide<K>, LeftOrRightValue<V1, V2>> over a ListValueStore).

Bytes, as Kafka's serializers write them:
- key (TimestampedKeyAndJoinSide): 8-byte big-endian timestamp, 1 byte side (1 = left, 0 = right),
  then the serialized record key. Timestamps are non-negative, so the store's byte order is time
  order, and at one timestamp right-side records come before left-side ones.
- one value (LeftOrRightValue): 1 byte side (1 = left, 0 = right), then the serialized value.
- stored value: every record of one (timestamp, side, key) in arrival order, as Kafka's ListSerde
  of byte arrays writes the list: 1 byte strategy (1 = variable size), 4-byte BE count, then per
  entry a 4-byte BE length and the bytes. The changelog carries these same bytes.

`OuterJoinStore` wraps a bytes key-value store (any layered store built without serdes, so the
change-logging and caching layers see the bytes above) and applies the key and value serdes.
Serdes are duck-typed (`serialize` / `deserialize`); None means bytes pass through.
"""

from __future__ import annotations

import struct
from typing import Any, Iterator, NamedTuple, Optional

from state.errors import InvalidStoreArgumentError, StateError

__all__ = ["OuterJoinStore", "OuterRecord", "encode_key", "decode_key", "encode_value_list",
           "decode_value_list", "LEFT", "RIGHT"]

_I64 = struct.Struct(">q")
_I32 = struct.Struct(">i")
LEFT = 1
RIGHT = 0
_VARIABLE_SIZE = 1  # Kafka's ListSerde SerializationStrategy.VARIABLE_SIZE ordinal
_NULL_ENTRY = -1


class OuterRecord(NamedTuple):
    """One held record: its key, timestamp, side and value (the other side's value is None)."""

    key: Any
    timestamp: int
    is_left: bool
    value: Any


def encode_key(timestamp: int, is_left: bool, key_bytes: bytes) -> bytes:
    if timestamp < 0:
        raise InvalidStoreArgumentError(f"outer join store: timestamp must be non-negative, got {timestamp}")
    return _I64.pack(timestamp) + (b"\x01" if is_left else b"\x00") + key_bytes


def decode_key(data: bytes) -> tuple[int, bool, bytes]:
    if len(data) < 9:
        raise StateError(f"outer join store key too short ({len(data)} bytes): {data!r}")
    return _I64.unpack_from(data)[0], data[8] == LEFT, data[9:]


def encode_value_list(values: list) -> bytes:
    parts = [bytes((_VARIABLE_SIZE,)), _I32.pack(len(values))]
    for value in values:
        parts.append(_I32.pack(len(value)))
        parts.append(value)
    return b"".join(parts)


def decode_value_list(data: bytes) -> list:
    try:
        if data[0] != _VARIABLE_SIZE:
            raise StateError(f"outer join store: unsupported list strategy {data[0]} (expected variable size)")
        count = _I32.unpack_from(data, 1)[0]
        pos = 5
        values = []
        for _ in range(count):
            size = _I32.unpack_from(data, pos)[0]
            pos += 4
            if size == _NULL_ENTRY:
                values.append(None)
                continue
            if pos + size > len(data):
                raise StateError(f"outer join store: list entry of {size} bytes runs past the value's end")
            values.append(data[pos:pos + size])
            pos += size
    except (IndexError, struct.error) as exc:
        raise StateError(f"outer join store: malformed value list {data[:32]!r}: {exc}") from exc
    return values


def _serde_bytes(serde: Any, obj: Any, what: str) -> bytes:
    if serde is None:
        if not isinstance(obj, bytes):
            raise InvalidStoreArgumentError(f"outer join store: {what} must be bytes without a serde, got {obj!r}")
        return obj
    data = serde.serialize(obj)
    if data is None:
        raise InvalidStoreArgumentError(f"outer join store: {what} {obj!r} serialized to None")
    return data


class OuterJoinStore:
    """Held left/outer join records keyed by (timestamp, side, key), several per key in arrival order."""

    def __init__(self, store: Any, key_serde: Any = None, left_value_serde: Any = None,
                 right_value_serde: Any = None) -> None:
        self.store = store
        self.key_serde = key_serde
        self.left_value_serde = left_value_serde
        self.right_value_serde = right_value_serde

    @property
    def name(self) -> str:
        return self.store.name

    def _key(self, key: Any, timestamp: int, is_left: bool) -> bytes:
        return encode_key(timestamp, is_left, _serde_bytes(self.key_serde, key, "key"))

    def put(self, key: Any, timestamp: int, is_left: bool, value: Any) -> None:
        """Append one record (Kafka's ListValueStore.put), logged at its own timestamp (the
        record being processed: Kafka's context.timestamp())."""
        if value is None:
            raise InvalidStoreArgumentError("outer join store: a held record's value must not be None")
        serde = self.left_value_serde if is_left else self.right_value_serde
        entry = (b"\x01" if is_left else b"\x00") + _serde_bytes(serde, value, "value")
        store_key = self._key(key, timestamp, is_left)
        old = self.store.get(store_key)
        values = decode_value_list(old) if old is not None else []
        values.append(entry)
        self.store.put(store_key, encode_value_list(values), timestamp)

    def remove_if_present(self, key: Any, timestamp: int, is_left: bool, write_timestamp: int) -> None:
        """Drop every record held under (timestamp, side, key), if any (Kafka's putIfAbsent(k, null)
        on the ListValueStore: read first, so a join that finds nothing held writes nothing). The
        tombstone is logged at `write_timestamp`, the time of the record being processed."""
        store_key = self._key(key, timestamp, is_left)
        if self.store.get(store_key) is not None:
            self.store.put(store_key, None, write_timestamp)

    def delete_raw(self, store_key: bytes, write_timestamp: int) -> None:
        """Drop what `store_key` holds, logged at `write_timestamp` (see remove_if_present)."""
        self.store.put(store_key, None, write_timestamp)

    def all(self) -> Iterator[tuple[bytes, OuterRecord]]:
        """(store key, record) in time order, then right before left, then key bytes; every record
        of a key in arrival order. The iterator is closed when exhausted or garbage."""
        key_serde = self.key_serde
        with self.store.all() as it:
            for store_key, data in it:
                timestamp, is_left, key_bytes = decode_key(store_key)
                key = key_bytes if key_serde is None else key_serde.deserialize(key_bytes)
                for entry in decode_value_list(data):
                    if not entry:
                        raise StateError(f"outer join store: empty held value under {store_key!r}")
                    entry_left = entry[0] == LEFT
                    serde = self.left_value_serde if entry_left else self.right_value_serde
                    raw = entry[1:]
                    yield store_key, OuterRecord(key, timestamp, entry_left, raw if serde is None else serde.deserialize(raw))

    def get(self, key: Any, timestamp: int, is_left: bool) -> Optional[list]:
        """The values held under (timestamp, side, key), or None (for tests and tools)."""
        data = self.store.get(self._key(key, timestamp, is_left))
        if data is None:
            return None
        serde = self.left_value_serde if is_left else self.right_value_serde
        return [e[1:] if serde is None else serde.deserialize(e[1:]) for e in decode_value_list(data)]
