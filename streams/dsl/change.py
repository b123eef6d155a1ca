"""A table update flowing between KTable nodes."""

from __future__ import annotations

from typing import Any, NamedTuple, Optional

from streams.errors import SerializationError


class Change(NamedTuple):
    """A table update flowing between KTable nodes: the new value and the previous one."""

    new_value: Any
    old_value: Any


class ChangeSerde:
    """Kafka's ChangedSerializer/ChangedDeserializer bytes (3.5+), for Change records through a
    grouped table's repartition topic: `old + 0x00`, `new + 0x01`, or
    `new length (4, big-endian) + new + old + 0x02` when both are present."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner

    def serialize(self, change: Any) -> Optional[bytes]:
        if change is None:
            return None
        new, old = change
        inner = self.inner
        if new is not None and old is not None:
            new_bytes = inner.serialize(new)
            return len(new_bytes).to_bytes(4, "big") + new_bytes + inner.serialize(old) + b"\x02"
        if new is not None:
            return inner.serialize(new) + b"\x01"
        if old is not None:
            return inner.serialize(old) + b"\x00"
        raise SerializationError("a Change with neither a new nor an old value cannot be serialized")

    def deserialize(self, data: Optional[bytes]) -> Optional[Change]:
        if data is None:
            return None
        if not data:
            raise SerializationError("a serialized Change needs at least its flag byte")
        flag, body, inner = data[-1], data[:-1], self.inner
        if flag == 1:
            return Change(inner.deserialize(body), None)
        if flag == 0:
            return Change(None, inner.deserialize(body))
        if flag == 2 and len(body) >= 4:
            n = int.from_bytes(body[:4], "big")
            return Change(inner.deserialize(body[4:4 + n]), inner.deserialize(body[4 + n:]))
        raise SerializationError(f"a serialized Change has an unknown flag byte {flag} or is too short")
