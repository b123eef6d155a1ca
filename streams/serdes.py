"""Serdes: pairs of `serialize(obj) -> bytes | None` and `deserialize(bytes | None) -> obj`.

The byte forms match Kafka's built-in serdes (big-endian fixed-width numbers, UTF-8 strings), so
data written by Eddy is readable by Kafka Streams apps and the reverse. `None` always maps to `None`
(a tombstone / null key), as in Kafka; it is never handed to a user function.

Deserialization errors raise `SerializationError`; the runtime wraps input-record failures in
`RecordDeserializationError` (with topic, partition and offset) and asks the configured handler
(`deserialization.exception.handler`, formerly `default.deserialization.exception.handler`) whether
to fail or skip the record.
"""

from __future__ import annotations

import enum
import logging
import struct
from typing import Any, Callable, Mapping

import orjson

from streams.config_names import DESERIALIZATION_HANDLER_CONFIG, handler_named, renamed_config
from streams.errors import ConfigError, RecordDeserializationError, SerializationError

log = logging.getLogger(__name__)

__all__ = [
    "Serde", "BYTES", "STRING", "INT32", "INT64", "FLOAT", "DOUBLE", "JSON",
    "INTEGER", "LONG", "serde_by_name", "serde_from_config", "unchecked_serializer", "unchecked_deserializer",
    "DeserializationHandlerResponse", "log_and_fail", "log_and_continue",
    "deserialization_handler_from_config", "DESERIALIZATION_HANDLER_CONFIG",
    "DEFAULT_KEY_SERDE_CONFIG", "DEFAULT_VALUE_SERDE_CONFIG",
]

DEFAULT_KEY_SERDE_CONFIG = "default.key.serde"
DEFAULT_VALUE_SERDE_CONFIG = "default.value.serde"


class Serde:
    """A serializer/deserializer pair. Subclass and override both methods, or use `from_functions`."""

    name: str = "custom"

    def serialize(self, obj: Any) -> bytes | None:  # pragma: no cover - overridden
        raise NotImplementedError

    def deserialize(self, data: bytes | None) -> Any:  # pragma: no cover - overridden
        raise NotImplementedError

    @staticmethod
    def from_functions(serialize: Callable[[Any], bytes], deserialize: Callable[[bytes], Any],
                       name: str = "custom") -> "Serde":
        """A serde from two plain functions. `None` bypasses both; their errors become
        `SerializationError` naming the serde."""
        if not callable(serialize) or not callable(deserialize):
            raise SerializationError(
                f"Serde.from_functions({name!r}) needs two callables, got "
                f"{type(serialize).__name__} and {type(deserialize).__name__}")
        return _FunctionSerde(serialize, deserialize, name)

    def __repr__(self) -> str:
        return f"Serde({self.name})"


class _FunctionSerde(Serde):
    def __init__(self, ser: Callable, de: Callable, name: str) -> None:
        self.name = name

        def serialize(obj: Any) -> bytes | None:
            if obj is None:
                return None
            try:
                out = ser(obj)
            except SerializationError:
                raise
            except Exception as exc:
                raise SerializationError(f"serde {name!r} failed to serialize {obj!r}: {exc!r}") from exc
            if out is not None and not isinstance(out, (bytes, bytearray, memoryview)):
                raise SerializationError(
                    f"serde {name!r} serializer returned {type(out).__name__}, expected bytes")
            return bytes(out) if out is not None and type(out) is not bytes else out

        def deserialize(data: bytes | None) -> Any:
            if data is None:
                return None
            try:
                return de(data)
            except SerializationError:
                raise
            except Exception as exc:
                raise SerializationError(
                    f"serde {name!r} failed to deserialize {_preview(data)}: {exc!r}") from exc

        # instance attributes shadow the class methods: one call, no bound-method hop
        self.serialize = serialize  # type: ignore[method-assign]
        self.deserialize = deserialize  # type: ignore[method-assign]


def _preview(data: Any, limit: int = 32) -> str:
    if isinstance(data, (bytes, bytearray, memoryview)):
        raw = bytes(data)
        shown = raw[:limit]
        return f"{len(raw)} bytes {shown!r}{'...' if len(raw) > limit else ''}"
    return f"{type(data).__name__} {data!r}"


def _builtin(name: str, serialize: Callable, deserialize: Callable,
             serialize_unchecked: Callable | None = None, deserialize_unchecked: Callable | None = None) -> Serde:
    serde = Serde()
    serde.name = name
    serde.serialize = serialize  # type: ignore[method-assign]
    serde.deserialize = deserialize  # type: ignore[method-assign]
    if serialize_unchecked is not None:
        serde.serialize_unchecked = serialize_unchecked  # type: ignore[attr-defined]
    if deserialize_unchecked is not None:
        serde.deserialize_unchecked = deserialize_unchecked  # type: ignore[attr-defined]
    return serde


def unchecked_serializer(serde: Any) -> Callable[[Any], bytes] | None:
    """For hot paths: a function that, given a non-None object, returns exactly what
    `serde.serialize` returns or raises (any exception: the caller then calls `serde.serialize`,
    which returns the same result or raises the serde's own error). A C function for STRING
    (`str.encode`), BYTES (`bytes.__bytes__`) and the fixed-width numbers (`struct.pack`), so
    no Python frame per call; None for serdes without one."""
    return getattr(serde, "serialize_unchecked", None)


def unchecked_deserializer(serde: Any) -> Callable[[bytes], Any] | None:
    """`unchecked_serializer`'s counterpart for `deserialize` (non-None bytes in)."""
    return getattr(serde, "deserialize_unchecked", None)


# ---- BYTES ----------------------------------------------------------------------------------

def _ser_bytes(obj: Any) -> bytes | None:
    if obj is None or type(obj) is bytes:
        return obj
    if isinstance(obj, (bytes, bytearray, memoryview)):
        return bytes(obj)
    raise SerializationError(f"BYTES serde cannot serialize {type(obj).__name__} {obj!r}: expected bytes")


def _de_bytes(data: bytes | None) -> bytes | None:
    if data is None or type(data) is bytes:
        return data
    if isinstance(data, (bytes, bytearray, memoryview)):  # a bytes subclass too, as _ser_bytes
        return bytes(data)
    raise SerializationError(f"BYTES serde cannot deserialize {type(data).__name__}: expected bytes")


# ---- STRING ---------------------------------------------------------------------------------

_str_encode = str.encode  # UTF-8, strict; raises TypeError for anything but a str (or subclass)


def _ser_string(obj: Any) -> bytes | None:
    # hot path (every sink and store key): one C call, the checks only on failure
    try:
        return _str_encode(obj)
    except TypeError:
        if obj is None:
            return None
        raise SerializationError(f"STRING serde cannot serialize {type(obj).__name__} {obj!r}: expected str") from None
    except UnicodeEncodeError as exc:  # lone surrogates
        raise SerializationError(f"STRING serde cannot encode {obj!r} as UTF-8: {exc}") from None


_bytes_decode = bytes.decode  # UTF-8, strict; TypeError for anything but bytes


def _de_string(data: bytes | None) -> str | None:
    try:
        return _bytes_decode(data)
    except TypeError:
        if data is None:
            return None
    except UnicodeDecodeError as exc:
        raise SerializationError(f"STRING serde: {_preview(data)} is not valid UTF-8: {exc}") from None
    try:  # bytearray, memoryview
        return str(data, "utf-8")
    except UnicodeDecodeError as exc:
        raise SerializationError(f"STRING serde: {_preview(data)} is not valid UTF-8: {exc}") from None
    except TypeError:
        raise SerializationError(f"STRING serde cannot deserialize {type(data).__name__}: expected bytes") from None


# ---- fixed-width numbers (Kafka: big-endian, signed two's complement / IEEE 754) ---------------

def _fixed(name: str, fmt: str, kind: type) -> Serde:
    st = struct.Struct(fmt)
    size = st.size
    pack = st.pack
    unpack = st.unpack

    def serialize(obj: Any) -> bytes | None:
        # exactly what `pack` accepts (ints and int-likes for the integer formats, numbers for
        # the floating ones), so `pack` itself is the unchecked serializer
        if obj is None:
            return None
        try:
            return pack(obj)
        except (struct.error, OverflowError, TypeError) as exc:
            expected = "expected int" if kind is int else "expected a number"
            raise SerializationError(
                f"{name} serde cannot serialize {type(obj).__name__} {obj!r}: {exc} ({expected})") from None

    def deserialize(data: bytes | None) -> Any:
        if data is None:
            return None
        try:
            if len(data) != size:
                raise SerializationError(
                    f"{name} serde: size of data received is {len(data)}, expected {size} ({_preview(data)})")
            return unpack(data)[0]
        except (struct.error, TypeError) as exc:
            raise SerializationError(f"{name} serde cannot deserialize {_preview(data)}: {exc}") from None

    return _builtin(name, serialize, deserialize, pack)


# ---- JSON (orjson) --------------------------------------------------------------------------

_dumps = orjson.dumps
_loads = orjson.loads


def _ser_json(obj: Any) -> bytes | None:
    if obj is None:
        return None
    try:
        return _dumps(obj)
    except TypeError as exc:  # orjson.JSONEncodeError subclasses TypeError
        raise SerializationError(f"JSON serde cannot serialize {type(obj).__name__} {obj!r}: {exc}") from None


def _de_json(data: bytes | None) -> Any:
    if data is None:
        return None
    try:
        return _loads(data)
    except (ValueError, TypeError) as exc:  # orjson.JSONDecodeError subclasses ValueError
        raise SerializationError(f"JSON serde cannot deserialize {_preview(data)}: {exc}") from None


# bytes.__bytes__: the same object for bytes, an exact copy for a bytes subclass, TypeError otherwise
BYTES: Serde = _builtin("BYTES", _ser_bytes, _de_bytes, bytes.__bytes__, bytes.__bytes__)
STRING: Serde = _builtin("STRING", _ser_string, _de_string, _str_encode, _bytes_decode)
INT32: Serde = _fixed("INT32", ">i", int)
INT64: Serde = _fixed("INT64", ">q", int)
FLOAT: Serde = _fixed("FLOAT", ">f", float)
DOUBLE: Serde = _fixed("DOUBLE", ">d", float)
JSON: Serde = _builtin("JSON", _ser_json, _de_json)
# Kafka's names for the same serdes
INTEGER = INT32


def round_trips(serde: Any) -> bool:
    """True when `serialize(deserialize(data)) == data` for all bytes `data` the serde
    deserializes without error (strict UTF-8 for STRING, exact sizes for the integers), so a hot
    path may keep the raw bytes it has checked instead of re-serializing. Not FLOAT/DOUBLE (NaN
    payloads) nor JSON."""
    return serde is BYTES or serde is STRING or serde is INT32 or serde is INT64

LONG = INT64

_BY_NAME: dict[str, Serde] = {
    "bytes": BYTES, "bytearray": BYTES, "string": STRING, "str": STRING,
    "int32": INT32, "integer": INT32, "int": INT32, "int64": INT64, "long": INT64,
    "float": FLOAT, "double": DOUBLE, "json": JSON,
    # Kafka class names, so configs copied from Java apps work
    "org.apache.kafka.common.serialization.serdes$bytearrayserde": BYTES,
    "org.apache.kafka.common.serialization.serdes$stringserde": STRING,
    "org.apache.kafka.common.serialization.serdes$integerserde": INT32,
    "org.apache.kafka.common.serialization.serdes$longserde": INT64,
    "org.apache.kafka.common.serialization.serdes$floatserde": FLOAT,
    "org.apache.kafka.common.serialization.serdes$doubleserde": DOUBLE,
}


def serde_by_name(name: str) -> Serde:
    """The built-in serde named `name` (case-insensitive: "string", "INT64", Kafka class names)."""
    serde = _BY_NAME.get(str(name).strip().lower())
    if serde is None:
        raise SerializationError(
            f"unknown serde name {name!r}; built-ins are BYTES, STRING, INT32, INT64, FLOAT, DOUBLE, JSON")
    return serde


def _is_serde(obj: Any) -> bool:
    return callable(getattr(obj, "serialize", None)) and callable(getattr(obj, "deserialize", None))


def serde_from_config(config: Mapping[str, Any] | None, key: str) -> Serde | None:
    """The serde configured under `key` (a Serde object or a built-in name), or None if unset."""
    value = (config or {}).get(key)
    if value is None:
        return None
    if isinstance(value, str):
        try:
            return serde_by_name(value)
        except SerializationError as exc:
            raise ConfigError(f"config {key!r}: {exc}") from None
    if _is_serde(value):
        return value
    raise ConfigError(f"config {key!r} must be a serde (serialize/deserialize) or a serde name, got {value!r}")


def resolve_serde(serde: Any, where: str) -> Serde | None:
    """Validate a serde argument (None allowed = use the configured default)."""
    if serde is None or _is_serde(serde):
        return serde
    if isinstance(serde, str):
        return serde_by_name(serde)
    raise SerializationError(f"{where}: {serde!r} is not a serde (needs serialize() and deserialize())")


# ---- deserialization exception handlers -----------------------------------------------------

class DeserializationHandlerResponse(enum.Enum):
    CONTINUE = "continue"
    FAIL = "fail"


def log_and_fail(error: RecordDeserializationError) -> DeserializationHandlerResponse:
    """Default handler: log the bad record and stop processing (the error propagates)."""
    log.error("deserialization failed, stopping: %s", error)
    return DeserializationHandlerResponse.FAIL


def log_and_continue(error: RecordDeserializationError) -> DeserializationHandlerResponse:
    """Log the bad record and skip it."""
    log.warning("deserialization failed, skipping the record: %s", error)
    return DeserializationHandlerResponse.CONTINUE


_HANDLERS: dict[str, Callable[[RecordDeserializationError], DeserializationHandlerResponse]] = {
    "log_and_fail": log_and_fail,
    "log_and_continue": log_and_continue,
    "org.apache.kafka.streams.errors.logandfailexceptionhandler": log_and_fail,
    "org.apache.kafka.streams.errors.logandcontinueexceptionhandler": log_and_continue,
}


def deserialization_handler_from_config(
        config: Mapping[str, Any] | None) -> Callable[[RecordDeserializationError], DeserializationHandlerResponse]:
    """The handler named by `deserialization.exception.handler` (or its deprecated name
    `default.deserialization.exception.handler`; default `log_and_fail`).

    The value may be "log_and_fail", "log_and_continue" (or Kafka's class names), or a callable
    `handler(error: RecordDeserializationError) -> DeserializationHandlerResponse`.
    """
    key, value = renamed_config(config, DESERIALIZATION_HANDLER_CONFIG)
    return log_and_fail if value is None else handler_named(key, value, _HANDLERS)


class ConfigDefaultSerde(Serde):
    """Stands for `default.key.serde` / `default.value.serde` where the DSL must fix a serde
    (e.g. inside a store builder) before the app config is known. The runtime binds it to the
    app config (`bind`) before any task uses it."""

    def __init__(self, config_key: str, where: str) -> None:
        self.config_key = config_key
        self.where = where
        self.name = f"default({config_key})"
        self._target: Serde | None = None

    def bind(self, config: Mapping[str, Any] | None) -> None:
        target = serde_from_config(config, self.config_key)
        if target is None:
            raise ConfigError(f"{self.where} has no serde and config {self.config_key!r} is not set; "
                              "pass one or set the default")
        self._target = target

    def _get(self) -> Serde:
        if self._target is None:
            raise SerializationError(f"{self.name} for {self.where} used before the app config was bound")
        return self._target

    def serialize(self, obj: Any) -> bytes | None:
        return self._get().serialize(obj)

    def deserialize(self, data: bytes | None) -> Any:
        return self._get().deserialize(data)


# ---- windowed key serdes (Kafka's TimeWindowedSerde / SessionWindowedSerde bytes) ------------

_WINDOW_TS = struct.Struct(">q")
_MAX_TIME_MS = (1 << 63) - 1


def _windowed_inner(inner: Any, where: str) -> Serde:
    serde = resolve_serde(inner, where)
    if serde is None:
        raise SerializationError(f"{where}: needs the serde of the key inside the window, got None")
    return serde


_windowed_type: list = []  # state.window.Windowed, imported at first use (it loads RocksDB)


def _check_windowed(obj: Any, where: str) -> Any:
    if not _windowed_type:
        from state.window import Windowed  # the one Windowed type (streams.dsl re-exports it)
        _windowed_type.append(Windowed)
    if not isinstance(obj, _windowed_type[0]):
        raise SerializationError(f"{where} serializes Windowed(key, window) keys, got {type(obj).__name__} {obj!r}")
    return obj


class TimeWindowedSerde(Serde):
    """Kafka's TimeWindowedSerde: inner key bytes + 8-byte big-endian window start. The end is not
    in the bytes: it is start + window_size (Long.MAX_VALUE on overflow, as Kafka)."""

    def __init__(self, inner: Any, window_size: Any) -> None:
        from streams.dsl.windows import duration_ms

        self.inner = _windowed_inner(inner, "serdes.time_windowed")
        if window_size is None:
            raise SerializationError("serdes.time_windowed: window_size must be set (the end is start + window_size)")
        size = duration_ms(window_size, "window_size")
        if size <= 0:
            raise SerializationError(f"serdes.time_windowed: window_size must be positive, got {size} ms")
        self.window_size_ms = size
        self.name = f"time_windowed({getattr(self.inner, 'name', 'custom')}, {size})"
        self._inner_unchecked = unchecked_serializer(self.inner)

    def serialize(self, obj: Any) -> bytes | None:
        if obj is None:
            return None
        _check_windowed(obj, "serdes.time_windowed")
        key = None
        unchecked = self._inner_unchecked
        if unchecked is not None:
            try:  # the inner serde's C function; on any error its own call decides
                key = unchecked(obj.key)
            except Exception:
                key = None
        if type(key) is not bytes:
            key = self.inner.serialize(obj.key)
        if key is None:
            raise SerializationError(f"serdes.time_windowed: key {obj.key!r} serialized to None")
        return key + _WINDOW_TS.pack(obj.window.start)

    def deserialize(self, data: bytes | None) -> Any:
        if data is None:
            return None
        from state.window import Window, Windowed

        if len(data) < 8:
            raise SerializationError(
                f"serdes.time_windowed: {len(data)} bytes is too short for key + 8-byte window start: {_preview(data)}")
        start = _WINDOW_TS.unpack_from(data, len(data) - 8)[0]
        end = start + self.window_size_ms
        return Windowed(self.inner.deserialize(data[:-8]), Window(start, end if end <= _MAX_TIME_MS else _MAX_TIME_MS))


class SessionWindowedSerde(Serde):
    """Kafka's SessionWindowedSerde (SessionKeySchema): inner key bytes + 8-byte big-endian end +
    8-byte big-endian start."""

    def __init__(self, inner: Any) -> None:
        self.inner = _windowed_inner(inner, "serdes.session_windowed")
        self.name = f"session_windowed({getattr(self.inner, 'name', 'custom')})"

    def serialize(self, obj: Any) -> bytes | None:
        if obj is None:
            return None
        from state.session import session_changelog_key  # the one SessionKeySchema encoding

        _check_windowed(obj, "serdes.session_windowed")
        key = self.inner.serialize(obj.key)
        if key is None:
            raise SerializationError(f"serdes.session_windowed: key {obj.key!r} serialized to None")
        return session_changelog_key(key, obj.window.start, obj.window.end)

    def deserialize(self, data: bytes | None) -> Any:
        if data is None:
            return None
        from state.window import Window, Windowed

        if len(data) < 16:
            raise SerializationError(
                f"serdes.session_windowed: {len(data)} bytes is too short for key + 16 bytes of end and start: "
                f"{_preview(data)}")
        n = len(data) - 16
        end = _WINDOW_TS.unpack_from(data, n)[0]
        start = _WINDOW_TS.unpack_from(data, n + 8)[0]
        return Windowed(self.inner.deserialize(data[:n]), Window(start, end))


def time_windowed(inner: Any, window_size: Any) -> TimeWindowedSerde:
    """Serde of `Windowed` keys of time windows of `window_size` (int ms or timedelta)."""
    return TimeWindowedSerde(inner, window_size)


def session_windowed(inner: Any) -> SessionWindowedSerde:
    """Serde of `Windowed` keys of session windows."""
    return SessionWindowedSerde(inner)


__all__ += ["TimeWindowedSerde", "SessionWindowedSerde", "time_windowed", "session_windowed"]
