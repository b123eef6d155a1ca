"""`Suppressed` and `BufferConfig`: how `KTable.suppress` holds back updates (Kafka's Suppressed).

`Suppressed.until_window_closes(buffer)` emits one final result per window once stream time
reaches window end + grace; it needs a strict buffer (`unbounded()` or `shut_down_when_full()`),
since emitting early would give non-final results. `Suppressed.until_time_limit(d, buffer)` emits
a key's latest value once stream time reaches the time the key was first buffered + d.

`time_definition` and `suppress_duration_ms` are what the suppress processor needs (Kafka's
SuppressedInternal): the buffer time of a record is its window end ("window_end") or its record
timestamp ("record_time"); a buffered key is emitted once its buffer time <= stream time -
suppress_duration_ms. For final results the duration is the upstream windows' grace, known only
when the operator is built: `resolve(grace_ms)`.
"""

from __future__ import annotations

from typing import Any, Optional

from streams.dsl.windows import Windowed, duration_ms
from streams.serdes import unchecked_serializer
from streams.errors import ProcessingError, TopologyError

__all__ = ["BufferConfig", "Suppressed", "BufferFullStrategy", "InvalidSuppressedError",
           "SuppressProcessorLogic", "SuppressionBufferFullError"]


class InvalidSuppressedError(TopologyError, ValueError):
    """An invalid Suppressed or BufferConfig argument."""


class BufferFullStrategy:
    EMIT = "EMIT"            # emit the oldest records early to make room
    SHUT_DOWN = "SHUT_DOWN"  # stop the application (a ProcessingError)


def _limit(value: Any, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidSuppressedError(f"BufferConfig: {what} must be an int, got {type(value).__name__} {value!r}")
    if value < 0:
        raise InvalidSuppressedError(f"BufferConfig: {what} must not be negative, got {value}")
    return value


class BufferConfig:
    """Bounds of a suppression buffer (None = unbounded) and what to do when it is full.
    Immutable; `max_records`/`max_bytes` default to emitting early when full, as Kafka's."""

    __slots__ = ("max_records_limit", "max_bytes_limit", "full_strategy", "logging_enabled", "log_config")

    def __init__(self, max_records_limit: Optional[int] = None, max_bytes_limit: Optional[int] = None,
                 full_strategy: str = BufferFullStrategy.SHUT_DOWN, logging_enabled: bool = True,
                 log_config: Optional[dict] = None) -> None:
        if full_strategy not in (BufferFullStrategy.EMIT, BufferFullStrategy.SHUT_DOWN):
            raise InvalidSuppressedError(f"BufferConfig: unknown buffer-full strategy {full_strategy!r}")
        if log_config is not None and not isinstance(log_config, dict):
            raise InvalidSuppressedError(f"BufferConfig: log config must be a dict, got {type(log_config).__name__}")
        for name, value in (("max_records_limit", max_records_limit), ("max_bytes_limit", max_bytes_limit),
                            ("full_strategy", full_strategy), ("logging_enabled", bool(logging_enabled)),
                            ("log_config", dict(log_config or {}))):
            object.__setattr__(self, name, value)

    def __setattr__(self, key: str, value: Any) -> None:
        raise AttributeError("BufferConfig is immutable")

    def _with(self, **changes: Any) -> "BufferConfig":
        fields = {name: getattr(self, name) for name in self.__slots__}
        fields.update(changes)
        return BufferConfig(**fields)

    # ---- factories (Kafka's BufferConfig.maxRecords / maxBytes / unbounded)
    @classmethod
    def max_records(cls, n: int) -> "BufferConfig":
        return cls(max_records_limit=_limit(n, "max_records"), full_strategy=BufferFullStrategy.EMIT)

    @classmethod
    def max_bytes(cls, n: int) -> "BufferConfig":
        return cls(max_bytes_limit=_limit(n, "max_bytes"), full_strategy=BufferFullStrategy.EMIT)

    @classmethod
    def unbounded(cls) -> "BufferConfig":
        return cls(full_strategy=BufferFullStrategy.SHUT_DOWN)

    # ---- builders
    def with_max_records(self, n: int) -> "BufferConfig":
        return self._with(max_records_limit=_limit(n, "max_records"))

    def with_max_bytes(self, n: int) -> "BufferConfig":
        return self._with(max_bytes_limit=_limit(n, "max_bytes"))

    def with_no_bound(self) -> "BufferConfig":
        """No limit on records or bytes (then a full buffer cannot happen; Kafka's strict config)."""
        return self._with(max_records_limit=None, max_bytes_limit=None, full_strategy=BufferFullStrategy.SHUT_DOWN)

    def emit_early_when_full(self) -> "BufferConfig":
        if self.is_unbounded:
            raise InvalidSuppressedError("BufferConfig: an unbounded buffer is never full; set max_records or "
                                         "max_bytes before emit_early_when_full()")
        return self._with(full_strategy=BufferFullStrategy.EMIT)

    def shut_down_when_full(self) -> "BufferConfig":
        return self._with(full_strategy=BufferFullStrategy.SHUT_DOWN)

    def with_logging_enabled(self, config: Optional[dict] = None) -> "BufferConfig":
        return self._with(logging_enabled=True, log_config=dict(config or {}))

    def with_logging_disabled(self) -> "BufferConfig":
        return self._with(logging_enabled=False, log_config={})

    # ---- queries
    @property
    def is_unbounded(self) -> bool:
        return self.max_records_limit is None and self.max_bytes_limit is None

    @property
    def is_strict(self) -> bool:
        """Never emits early: the buffer is unbounded or shuts the app down when full."""
        return self.full_strategy == BufferFullStrategy.SHUT_DOWN

    def is_over(self, num_records: int, num_bytes: int) -> bool:
        """True when a buffer of this size exceeds a limit (Kafka: records > max or bytes > max)."""
        r, b = self.max_records_limit, self.max_bytes_limit
        return (r is not None and num_records > r) or (b is not None and num_bytes > b)

    def _key(self) -> tuple:
        return tuple(getattr(self, name) if name != "log_config" else tuple(sorted(self.log_config.items()))
                     for name in self.__slots__)

    def __eq__(self, other: object) -> bool:
        return type(other) is BufferConfig and other._key() == self._key()

    def __hash__(self) -> int:
        return hash(self._key())

    def __repr__(self) -> str:
        if self.is_unbounded:
            return "BufferConfig.unbounded()"
        return (f"BufferConfig(max_records={self.max_records_limit}, max_bytes={self.max_bytes_limit}, "
                f"when_full={self.full_strategy})")


class Suppressed:
    """What `KTable.suppress` does; immutable. See the module docstring."""

    __slots__ = ("kind", "time_to_wait_ms", "buffer_config", "name")
    UNTIL_WINDOW_CLOSES = "until_window_closes"
    UNTIL_TIME_LIMIT = "until_time_limit"

    def __init__(self, kind: str, time_to_wait_ms: Optional[int], buffer_config: BufferConfig,
                 name: Optional[str] = None) -> None:
        if not isinstance(buffer_config, BufferConfig):
            raise InvalidSuppressedError(
                f"Suppressed.{kind}: buffer_config must be a BufferConfig, got {type(buffer_config).__name__}")
        if name is not None and (not isinstance(name, str) or not name):
            raise InvalidSuppressedError(f"Suppressed: name must be a non-empty string, got {name!r}")
        for field, value in (("kind", kind), ("time_to_wait_ms", time_to_wait_ms),
                             ("buffer_config", buffer_config), ("name", name)):
            object.__setattr__(self, field, value)

    def __setattr__(self, key: str, value: Any) -> None:
        raise AttributeError("Suppressed is immutable")

    @classmethod
    def until_window_closes(cls, buffer_config: BufferConfig) -> "Suppressed":
        """One final result per window, once stream time passes window end + grace."""
        if isinstance(buffer_config, BufferConfig) and not buffer_config.is_strict:
            raise InvalidSuppressedError(
                "Suppressed.until_window_closes needs a strict buffer_config (BufferConfig.unbounded() or "
                ".shut_down_when_full()): emitting early when full would emit non-final results")
        return cls(cls.UNTIL_WINDOW_CLOSES, None, buffer_config)

    @classmethod
    def until_time_limit(cls, time_to_wait_for_more_events: Any, buffer_config: BufferConfig) -> "Suppressed":
        """A key's latest value, once stream time reaches the key's first buffering + the limit."""
        wait = duration_ms(time_to_wait_for_more_events, "time_to_wait_for_more_events")
        if wait < 0:
            raise InvalidSuppressedError(
                f"Suppressed.until_time_limit: time_to_wait_for_more_events must not be negative, got {wait} ms")
        return cls(cls.UNTIL_TIME_LIMIT, wait, buffer_config)

    def with_name(self, name: str) -> "Suppressed":
        """Names the suppress node and its buffer store (`<name>-store`)."""
        return Suppressed(self.kind, self.time_to_wait_ms, self.buffer_config, name)

    # ---- what the suppress processor needs (Kafka's SuppressedInternal)
    @property
    def is_final_results(self) -> bool:
        return self.kind == self.UNTIL_WINDOW_CLOSES

    @property
    def time_definition(self) -> str:
        """"window_end": a record is buffered at its window's end; "record_time": at its timestamp."""
        return "window_end" if self.is_final_results else "record_time"

    @property
    def safe_to_drop_tombstones(self) -> bool:
        """Final results may drop a tombstone of a key not emitted yet (Kafka)."""
        return self.is_final_results

    def suppress_duration_ms(self, grace_ms: Optional[int] = None) -> int:
        """How far stream time must pass a record's buffer time before it is emitted: the
        upstream windows' grace for final results, the time limit otherwise."""
        if self.is_final_results:
            if grace_ms is None:
                raise InvalidSuppressedError(
                    "Suppressed.until_window_closes applies to windowed tables only (it needs the windows' grace)")
            return grace_ms
        return self.time_to_wait_ms

    def store_name(self, node_name: str) -> str:
        """Kafka names the buffer store `<suppress node name>-store`."""
        return f"{self.name or node_name}-store"

    def _key(self) -> tuple:
        return (self.kind, self.time_to_wait_ms, self.buffer_config, self.name)

    def __eq__(self, other: object) -> bool:
        return type(other) is Suppressed and other._key() == self._key()

    def __hash__(self) -> int:
        return hash(self._key())

    def __repr__(self) -> str:
        if self.is_final_results:
            return f"Suppressed.until_window_closes({self.buffer_config!r})"
        return f"Suppressed.until_time_limit({self.time_to_wait_ms}, {self.buffer_config!r})"


class SuppressionBufferFullError(ProcessingError):
    """A `shut_down_when_full()` suppression buffer went over its limit (Kafka throws a StreamsException)."""


def _serializer(serde: Any) -> Any:
    """`serde.serialize` for the buffer (None passes; no serde: bytes pass), its C function first
    where it has one (on any error the serde's own call decides)."""
    if serde is None:
        return lambda value: value
    serialize = serde.serialize
    unchecked = unchecked_serializer(serde)
    if unchecked is None:
        return lambda value: None if value is None else serialize(value)

    def to_bytes(value: Any) -> Optional[bytes]:
        if value is None:
            return None
        try:
            data = unchecked(value)
        except Exception:
            data = None
        return data if type(data) is bytes else serialize(value)
    return to_bytes


# values that cannot change after they were handed over (a Windowed key of one too: its window is two ints)
_IMMUTABLE = frozenset((int, float, str, bytes, bool, type(None)))


class SuppressProcessorLogic:
    """The operator-independent part of Kafka's KTableSuppressProcessor.

    `process(key, new, old, context)` buffers one table update (the record's timestamp is
    `context.timestamp`), advances the observed stream time, then emits every buffered key whose
    buffer time <= stream time - suppress duration, oldest first, and enforces the buffer limits
    (emit early or raise SuppressionBufferFullError). Each emission calls
    `forward(key, new_value, old_value, timestamp, context)` with the context and timestamp of the
    key's latest buffered update; with final results, a tombstone of a key is not forwarded.
    Keys and values are (de)serialized with the given serdes; the buffer holds bytes.

    Two shortcuts with the same results: an update already due when it arrives, with nothing due
    buffered before it and its key not buffered, is emitted at once (Kafka buffers it and evicts
    it in the same call; the changelog then has no live value for the key, so the tombstone
    Kafka would log for it is not needed); and an emitted update whose key and values cannot
    have changed since it was buffered (immutable values: a count, a string) is emitted from the
    objects it was buffered with rather than deserialized again.
    """

    def __init__(self, suppressed: Suppressed, buffer: Any, key_serde: Any, value_serde: Any,
                 forward: Any, *, grace_ms: Optional[int] = None, node_name: str = "KTABLE-SUPPRESS") -> None:
        self.suppressed = suppressed
        self.buffer = buffer
        self.key_serde = key_serde
        self.value_serde = value_serde
        self.forward = forward
        self.node_name = node_name
        self.suppress_duration_ms = suppressed.suppress_duration_ms(grace_ms)
        self.window_end_time = suppressed.time_definition == "window_end"
        self.safe_to_drop_tombstones = suppressed.safe_to_drop_tombstones
        config = suppressed.buffer_config
        self.max_records = config.max_records_limit
        self.max_bytes = config.max_bytes_limit
        self.emit_when_full = config.full_strategy == BufferFullStrategy.EMIT
        self.observed_stream_time = -1
        self.emitted = 0  # Kafka's suppression-emit sensor
        self._buffered: dict[bytes, tuple] = {}  # key bytes -> (key, new, old) of immutable updates
        self._key_bytes, self._value_bytes = _serializer(key_serde), _serializer(value_serde)

    def _ser(self, serde: Any, value: Any) -> Optional[bytes]:
        return value if serde is None or value is None else serde.serialize(value)

    def _de(self, serde: Any, data: Optional[bytes]) -> Any:
        return data if serde is None or data is None else serde.deserialize(data)

    def process(self, key: Any, new: Any, old: Any, context: Any) -> None:
        timestamp = context.timestamp
        if timestamp > self.observed_stream_time:
            self.observed_stream_time = timestamp
        if self.window_end_time:
            window = getattr(key, "window", None)
            if window is None:
                raise InvalidSuppressedError(
                    f"{self.node_name}: until_window_closes needs Windowed keys, got {type(key).__name__}")
            buffer_time = window.end
        else:
            buffer_time = timestamp
        buffer = self.buffer
        expiry = self.observed_stream_time - self.suppress_duration_ms
        first_due = buffer.min_timestamp()
        key_bytes = None
        if buffer_time <= expiry < first_due:
            # due on arrival, nothing due before it: a key buffered at a later time keeps that
            # time (record time only: a window's end is the same at every update of its key)
            if self.window_end_time or (key_bytes := self._key_bytes(key)) not in buffer:
                self._emit_update(key, new, old, timestamp, context)
                return
        if key_bytes is None:
            key_bytes = self._key_bytes(key)
        value_bytes = self._value_bytes
        buffer.put(buffer_time, key_bytes, value_bytes(new), value_bytes(old), context)
        immutable = _IMMUTABLE
        if ((type(key) in immutable or (type(key) is Windowed and type(key.key) in immutable))
                and type(new) in immutable and type(old) in immutable):
            self._buffered[key_bytes] = (key, new, old)
        else:
            self._buffered.pop(key_bytes, None)
        if first_due <= expiry or buffer_time <= expiry:  # else nothing is due yet
            buffer.evict_expired(expiry, self._emit)
        if self.max_records is not None or self.max_bytes is not None:
            self._enforce_limits()

    def view_value(self, key: Any, parent_get: Any) -> Any:
        """What the suppressed table shows for `key` (Kafka's suppress value getter): the prior
        value while the key is buffered (what downstream last saw), else the parent's value."""
        buffered, prior = self.buffer.prior_value_for_buffered(self._ser(self.key_serde, key))
        if buffered:
            return self._de(self.value_serde, prior)
        return parent_get(key)

    def _over_capacity(self) -> bool:
        buffer = self.buffer
        return ((self.max_records is not None and buffer.num_records() > self.max_records)
                or (self.max_bytes is not None and buffer.buffer_size() > self.max_bytes))

    def _enforce_limits(self) -> None:
        buffer = self.buffer
        if self._over_capacity():
            if self.emit_when_full:
                buffer.evict_while(self._over_capacity, self._emit)
            else:
                raise SuppressionBufferFullError(
                    f"{self.node_name} buffer exceeded its max capacity. Currently "
                    f"[{buffer.num_records()}/{self.max_records}] records and "
                    f"[{buffer.buffer_size()}/{self.max_bytes}] bytes.")

    def _emit(self, eviction: Any) -> None:
        typed = self._buffered.pop(eviction.key, None)
        if typed is not None:
            key, new, old = typed
        else:
            value_serde = self.value_serde
            if eviction.new is None and self.safe_to_drop_tombstones:
                return
            key = self._de(self.key_serde, eviction.key)
            new, old = self._de(value_serde, eviction.new), self._de(value_serde, eviction.old)
        self._emit_update(key, new, old, eviction.context.timestamp, eviction.context)

    def _emit_update(self, key: Any, new: Any, old: Any, timestamp: int, context: Any) -> None:
        if new is None and self.safe_to_drop_tombstones:
            return
        self.emitted += 1
        self.forward(key, new, old, timestamp, context)
