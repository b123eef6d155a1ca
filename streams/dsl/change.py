"""A table update flowing between KTable nodes."""

from __future__ import annotations

from functools import partial
from typing import Any, NamedTuple, Optional

from streams.errors import SerializationError

try:  # the unchecked functions in C (streams/dsl/_change.c); the Python ones below without it
    from streams.dsl import _change as _change_c
except ImportError:  # pragma: no cover - the accelerator is optional
    _change_c = None

_new_tuple = tuple.__new__  # a Change without NamedTuple's Python-level __new__


# A cached table's flush forwarded in C (streams/dsl/ops/table.py's attach_tuple_forwarder holds
# the Python loop, the definition); None without the accelerator.
forward_flushed = _change_c.forward_flushed if _change_c is not None else None


class Change(NamedTuple):
    """A table update flowing between KTable nodes: the new value and the previous one."""

    new_value: Any
    old_value: Any


class ChangeSerde:
    """Kafka's ChangedSerializer/ChangedDeserializer bytes (3.5+), for Change records through a
    grouped table's repartition topic: `old + 0x00`, `new + 0x01`, or
    `new length (4, big-endian) + new + old + 0x02` when both are present.

    `serialize_unchecked` / `deserialize_unchecked` (streams.serdes.unchecked_serializer) let the
    repartition topic's sink and source take the engine's C routes: C functions
    (streams/dsl/_change.c) doing the common case of `serialize`/`deserialize` and raising for
    any other (the caller then calls the Python function, the definition), or without the
    accelerator the Python functions themselves; the inner serde's own unchecked functions are
    used where it has them."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        inner_ser = getattr(inner, "serialize_unchecked", None) or inner.serialize
        inner_de = getattr(inner, "deserialize_unchecked", None) or inner.deserialize
        checked_ser, checked_de = inner.serialize, inner.deserialize

        def ser(value: Any) -> bytes:
            try:
                data = inner_ser(value)
            except Exception:
                data = None
            return data if type(data) is bytes else checked_ser(value)

        def de(data: bytes) -> Any:
            try:
                return inner_de(data)
            except Exception:  # the serde's own call: its value or its error
                return checked_de(data)

        def serialize(change: Any) -> Optional[bytes]:
            if change is None:
                return None
            new, old = change
            if new is not None and old is not None:
                new_bytes = ser(new)
                return len(new_bytes).to_bytes(4, "big") + new_bytes + ser(old) + b"\x02"
            # one side (a key change's two records): ser() inlined
            one, flag = (new, b"\x01") if new is not None else (old, b"\x00")
            if one is None:
                raise SerializationError("a Change with neither a new nor an old value cannot be serialized")
            try:
                data = inner_ser(one)
            except Exception:
                data = None
            return (data if type(data) is bytes else checked_ser(one)) + flag

        def deserialize(data: Optional[bytes]) -> Optional[Change]:
            if data is None:
                return None
            if not data:
                raise SerializationError("a serialized Change needs at least its flag byte")
            flag = data[-1]
            if flag < 2:  # de() inlined for the one-sided changes
                try:
                    value = inner_de(data[:-1])
                except Exception:  # the serde's own call: its value or its error
                    value = checked_de(data[:-1])
                return _new_tuple(Change, (value, None) if flag else (None, value))
            if flag == 2 and len(data) >= 5:
                n = int.from_bytes(data[:4], "big")
                return _new_tuple(Change, (de(data[4:4 + n]), de(data[4 + n:-1])))
            raise SerializationError(f"a serialized Change has an unknown flag byte {flag} or is too short")

        self.serialize = self.serialize_unchecked = serialize
        self.deserialize = self.deserialize_unchecked = deserialize
        if _change_c is not None:
            self.serialize_unchecked = partial(_change_c.serialize, inner_ser)
            self.deserialize_unchecked = partial(_change_c.deserialize, inner_de, Change)
