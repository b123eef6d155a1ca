"""The suppression buffer: Kafka's InMemoryTimeOrderedKeyValueChangeBuffer.

Keyed by the serialized record key and ordered by (buffer time, key). Each entry holds the
latest `new` value, the `old` value of that update, the `prior` value (the old value when the key
was first buffered: what downstream last saw, for old-value propagation) and the record context of
the latest update. Re-buffering a key keeps its original place in the order (Kafka's
non-resetting semantics). `evict_while(predicate, callback)` hands entries to the callback
oldest-first while the predicate holds. Sizes are counted in records and bytes.

Changelog (as Kafka writes it). Logging is deferred: the keys touched since the last flush are
written on `flush()` (the commit), one record per key: a tombstone if the key was evicted (unless
the changelog holds no value for it: a key buffered and evicted between two flushes), else
key -> BufferValue(context, prior, old, new) + 8-byte buffer time with the header v=3:

    context:  timestamp (8) offset (8) topic length (4) topic (UTF-8) partition (4)
              header count (4) { key length (4) key, value length (4, -1 = null) value }*
    values:   prior: length (4, -1 = null) bytes; old: -1 = null, -2 = same as prior, else
              length + bytes; new: length (4, -1 = null) bytes
    then the buffer time (8)

All integers are big-endian and signed. Restore applies the same records, so a restart restores
exactly the buffered (not yet emitted) results: an emitted key's tombstone is in the changelog
before the commit that covers the input it came from.
"""

from __future__ import annotations

import heapq
import logging
import struct
from typing import Callable, Mapping, NamedTuple, Optional

from state.errors import InvalidStoreArgumentError, StateError, StoreClosedError
from state.store import StateStore, StoreContext, check_key, check_value, wall_clock_ms

log = logging.getLogger(__name__)

_I64 = struct.Struct(">q")
_I32 = struct.Struct(">i")
_CTX_HEAD = struct.Struct(">qqi")  # timestamp, offset, topic length
_NULL = -1
_OLD_SAME_AS_PRIOR = -2
MAX_TIMESTAMP = (1 << 63) - 1
_new_tuple = tuple.__new__  # a NamedTuple without its Python-level __new__
CHANGELOG_HEADERS = [("v", b"\x03")]


class BufferedContext(NamedTuple):
    """The record context of a buffered update (Kafka's ProcessorRecordContext)."""

    timestamp: int
    offset: int = -1
    topic: str = ""
    partition: int = -1
    headers: tuple = ()  # ((key: str, value: bytes | None), ...)


class BufferValue(NamedTuple):
    prior: Optional[bytes]
    old: Optional[bytes]
    new: Optional[bytes]
    context: BufferedContext


class Eviction(NamedTuple):
    """An entry leaving the buffer: emit `new` (with `old` as the old value) in `context`."""

    key: bytes
    new: Optional[bytes]
    old: Optional[bytes]
    context: BufferedContext


def _record_size(key: bytes, value: BufferValue) -> int:
    """Kafka's computeRecordSize: 8 (the buffer time) + the key + the BufferValue's estimate (the
    prior value, the old one unless it is the prior one, the new one) + the context's (Kafka's
    residentMemorySizeEstimate: 8 + 8 + topic chars + 4 + header keys and values)."""
    context = value.context
    size = 28 + len(key) + len(context.topic)
    for hkey, hvalue in context.headers:
        size += len(hkey) + (len(hvalue) if hvalue is not None else 0)
    prior, old, new = value.prior, value.old, value.new
    if prior is not None:
        size += len(prior)
    if old is not None and old is not prior:
        size += len(old)
    if new is not None:
        size += len(new)
    return size


# ------------------------------------------------------------------------------ changelog format
def _put_bytes(parts: list, value: Optional[bytes]) -> None:
    if value is None:
        parts.append(_I32.pack(_NULL))
    else:
        parts.append(_I32.pack(len(value)))
        parts.append(value)


def encode_buffer_value(value: BufferValue, buffer_time: int) -> bytes:
    """The v3 changelog value of a buffered entry (see the module docstring)."""
    ctx = value.context
    topic = ctx.topic.encode()
    parts = [_CTX_HEAD.pack(ctx.timestamp, ctx.offset, len(topic)), topic,
             _I32.pack(ctx.partition), _I32.pack(len(ctx.headers))]
    for hkey, hvalue in ctx.headers:
        hk = hkey.encode()
        parts.append(_I32.pack(len(hk)))
        parts.append(hk)
        _put_bytes(parts, hvalue)
    _put_bytes(parts, value.prior)
    if value.old is None:
        parts.append(_I32.pack(_NULL))
    elif value.old == value.prior:
        parts.append(_I32.pack(_OLD_SAME_AS_PRIOR))
    else:
        _put_bytes(parts, value.old)
    _put_bytes(parts, value.new)
    parts.append(_I64.pack(buffer_time))
    return b"".join(parts)


class _Reader:
    __slots__ = ("data", "pos")

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.pos = 0

    def i32(self) -> int:
        v = _I32.unpack_from(self.data, self.pos)[0]
        self.pos += 4
        return v

    def i64(self) -> int:
        v = _I64.unpack_from(self.data, self.pos)[0]
        self.pos += 8
        return v

    def take(self, n: int) -> bytes:
        if n < 0 or self.pos + n > len(self.data):
            raise struct.error(f"length {n} at byte {self.pos} runs past the end ({len(self.data)} bytes)")
        v = self.data[self.pos:self.pos + n]
        self.pos += n
        return v

    def nullable(self, n: int) -> Optional[bytes]:
        return None if n == _NULL else self.take(n)


def decode_buffer_value(data: bytes) -> tuple[BufferValue, int]:
    """(BufferValue, buffer time) of a v3 changelog value."""
    r = _Reader(data)
    try:
        timestamp = r.i64()
        offset = r.i64()
        topic = r.take(r.i32()).decode()
        partition = r.i32()
        count = r.i32()
        headers = []
        if count != -1:  # -1: no headers (Kafka keeps it for compatibility)
            if count < 0 or count > (len(data) - r.pos) // 8:
                raise struct.error(f"bad header count {count}")
            for _ in range(count):
                hkey = r.take(r.i32()).decode()
                headers.append((hkey, r.nullable(r.i32())))
        prior = r.nullable(r.i32())
        n = r.i32()
        old = prior if n == _OLD_SAME_AS_PRIOR else r.nullable(n)
        new = r.nullable(r.i32())
        buffer_time = r.i64()
    except (struct.error, UnicodeDecodeError) as exc:
        raise StateError(f"malformed suppression buffer changelog value ({len(data)} bytes): {exc}") from exc
    if r.pos != len(data):
        raise StateError(f"malformed suppression buffer changelog value: {len(data) - r.pos} trailing bytes")
    return BufferValue(prior, old, new, BufferedContext(timestamp, offset, topic, partition, tuple(headers))), buffer_time


# ------------------------------------------------------------------------------ the store
class InMemoryTimeOrderedKeyValueBuffer(StateStore):
    """See the module docstring. Bytes in, bytes out; not persistent (restored from its changelog)."""

    persistent = False

    def __init__(self, name: str, *, logging_enabled: bool = True) -> None:
        if not isinstance(name, str) or not name:
            raise InvalidStoreArgumentError(f"store name must be a non-empty string, got {name!r}")
        self.name = name
        self.logging_enabled = logging_enabled
        self._index: dict[bytes, int] = {}          # key -> buffer time
        self._values: dict[bytes, BufferValue] = {}
        self._sizes: dict[bytes, int] = {}          # key -> its _record_size
        self._live: set[bytes] = set()               # keys whose last changelog record is a value
        self._sizing = False  # sizes kept once buffer_size() was asked for
        self._heap: list[tuple[int, bytes]] = []     # (buffer time, key); stale entries skipped lazily
        self._dirty: set[bytes] = set()
        self._size = 0
        self._open = False
        self._context: Optional[StoreContext] = None
        self._log_change = None

    # ------------------------------------------------------------------ lifecycle
    def init(self, context: StoreContext) -> None:
        self._clear()
        self._context = context
        self._log_change = context.log_change if self.logging_enabled else None
        context.register(self, self.restore_batch, logged=self.logging_enabled)
        self._open = True

    def open(self) -> None:
        """Open without a context (no changelog); for tests and standalone use."""
        self._clear()
        self._open = True

    @property
    def is_open(self) -> bool:
        return self._open

    def _check(self) -> None:
        if not self._open:
            raise StoreClosedError(f"state store {self.name!r} is not open")

    def _clear(self) -> None:
        self._index.clear()
        self._values.clear()
        self._sizes.clear()
        self._live.clear()
        self._sizing = False
        self._heap.clear()
        self._dirty.clear()
        self._size = 0

    def flush(self) -> None:
        """Write the changelog records of the keys touched since the last flush (Kafka's commit)."""
        self._check()
        if not self._dirty:
            return
        log_change = self._log_change
        if log_change is None:
            self._dirty.clear()
            return
        now = wall_clock_ms()  # Kafka sends these without a timestamp: the producer's clock
        live = self._live
        for key in sorted(self._dirty):
            time = self._index.get(key)
            if time is None:
                # a key buffered and evicted since the last flush has no value in the changelog
                # to delete (Kafka logs the tombstone anyway; compaction would drop it)
                if key in live:
                    live.discard(key)
                    log_change(self.name, key, None, now)
            else:
                live.add(key)
                log_change(self.name, key, encode_buffer_value(self._values[key], time), now, CHANGELOG_HEADERS)
        self._dirty.clear()

    def flush_cache(self) -> None:
        """Every commit writes the buffer's changelog, not only a checkpoint: Kafka's
        ProcessorStateManager.flushCache() flushes a TimeOrderedKeyValueBuffer fully, so the
        input offsets a commit covers never run ahead of the buffered results they produced."""
        self.flush()

    def close(self, dirty: bool = False) -> None:
        self._open = False
        self._clear()

    # ------------------------------------------------------------------ writes
    def put(self, buffer_time: int, key: bytes, new: Optional[bytes], old: Optional[bytes],
            context: BufferedContext) -> None:
        """Buffer an update of `key` (new value, old value) at `buffer_time`. A key already
        buffered keeps its time and its prior value; otherwise the prior value is `old`."""
        if not self._open:
            raise StoreClosedError(f"state store {self.name!r} is not open")
        if type(key) is not bytes:
            check_key(self.name, key)
        if new is not None and type(new) is not bytes:
            check_value(self.name, new)
        if old is not None and type(old) is not bytes:
            check_value(self.name, old)
        if type(buffer_time) is not int:
            raise InvalidStoreArgumentError(f"state store {self.name!r}: buffer_time must be an int, got {buffer_time!r}")
        if type(context) is not BufferedContext:
            raise InvalidStoreArgumentError(
                f"state store {self.name!r}: context must be a BufferedContext, got {type(context).__name__}")
        previous = self._values.get(key)
        prior = old if previous is None else previous.prior
        if prior is not old and prior == old:
            prior = old  # one value, counted once (Kafka's BufferValue dedups them by content)
        self._clean_put(buffer_time, key, _new_tuple(BufferValue, (prior, old, new, context)))
        if self.logging_enabled:
            self._dirty.add(key)

    def _clean_put(self, time: int, key: bytes, value: BufferValue) -> None:
        existing_time = self._index.get(key)
        if existing_time is None:
            self._index[key] = time
            heapq.heappush(self._heap, (time, key))
        elif self._sizing:
            self._size -= self._sizes[key]
        self._values[key] = value
        if self._sizing:
            size = self._sizes[key] = _record_size(key, value)
            self._size += size

    def _remove(self, key: bytes) -> None:
        if self._index.pop(key, None) is not None:
            del self._values[key]
            if self._sizing:
                self._size -= self._sizes.pop(key)

    # ------------------------------------------------------------------ reads
    def _head(self) -> Optional[tuple[int, bytes]]:
        heap, index = self._heap, self._index
        while heap:
            time, key = heap[0]
            if index.get(key) == time:
                return time, key
            heapq.heappop(heap)  # stale: evicted or deleted by restore
        return None

    def evict_while(self, predicate: Callable[[], bool], callback: Callable[[Eviction], None]) -> int:
        """Evict oldest-first while `predicate()` holds; each eviction goes to `callback` before
        the next predicate check. Returns the number evicted."""
        self._check()
        evicted = 0
        while predicate():
            head = self._head()
            if head is None:
                break
            key = head[1]
            value = self._values[key]
            callback(Eviction(key, value.new, value.old, value.context))
            # removed only after the callback succeeded (Kafka); its heap entry is now stale
            self._remove(key)
            if self.logging_enabled:
                self._dirty.add(key)
            evicted += 1
        return evicted

    def evict_expired(self, expiry: int, callback: Callable[[Eviction], None]) -> int:
        """`evict_while(lambda: min_timestamp() <= expiry, callback)` in one loop."""
        self._check()
        heap, index, values = self._heap, self._index, self._values
        logged = self.logging_enabled
        evicted = 0
        while heap:
            time, key = heap[0]
            if index.get(key) != time:
                heapq.heappop(heap)  # stale: evicted or deleted by restore
                continue
            if time > expiry:
                break
            value = values[key]
            callback(_new_tuple(Eviction, (key, value.new, value.old, value.context)))
            # removed only after the callback succeeded (Kafka); its heap entry is now stale
            self._remove(key)
            if logged:
                self._dirty.add(key)
            evicted += 1
        return evicted

    def prior_value_for_buffered(self, key: bytes) -> tuple[bool, Optional[bytes]]:
        """(True, prior value) if `key` is buffered, else (False, None) (Kafka's Maybe)."""
        self._check()
        value = self._values.get(key)
        return (False, None) if value is None else (True, value.prior)

    def __contains__(self, key: bytes) -> bool:
        return key in self._index

    def num_records(self) -> int:
        return len(self._index)

    def buffer_size(self) -> int:
        """Bytes held, as Kafka counts them (key + 8 + values + record context estimate). Sizes
        are kept from the first time they are asked for (a buffer bounded by bytes asks at
        every put; others may never)."""
        if not self._sizing:
            self._sizes = {key: _record_size(key, value) for key, value in self._values.items()}
            self._size = sum(self._sizes.values())
            self._sizing = True
        return self._size

    def min_timestamp(self) -> int:
        """The smallest buffer time, or MAX_TIMESTAMP when empty."""
        head = self._head()
        return MAX_TIMESTAMP if head is None else head[0]

    def entries(self) -> list[tuple[int, bytes, BufferValue]]:
        """(buffer time, key, value) in eviction order (for tools and tests)."""
        return sorted((t, k, self._values[k]) for k, t in self._index.items())

    def approximate_num_entries(self) -> int:
        return len(self._index)

    # ------------------------------------------------------------------ restore
    def restore_batch(self, records: list) -> None:
        """Apply changelog records: a tombstone removes the key; a value re-buffers it."""
        live = self._live
        for key, value in records:
            if value is None:
                self._remove(key)
                live.discard(key)
            else:
                live.add(key)
                buffer_value, time = decode_buffer_value(value)
                existing = self._index.get(key)
                if existing is not None and existing != time:
                    self._remove(key)  # evicted and buffered again at another time
                self._clean_put(time, key, buffer_value)


class SuppressionBufferBuilder:
    """StoreBuilder-shaped builder of the buffer (Kafka's buffer Builder: caching is a no-op)."""

    kind = "suppression_buffer"
    caching_enabled = False

    def __init__(self, name: str) -> None:
        if not isinstance(name, str) or not name:
            raise InvalidStoreArgumentError(f"store name must be a non-empty string, got {name!r}")
        self.name = name
        self._logging = True
        self._log_config: dict = {}

    def with_caching_enabled(self) -> "SuppressionBufferBuilder":
        return self

    def with_caching_disabled(self) -> "SuppressionBufferBuilder":
        return self

    def with_logging_enabled(self, config: Optional[dict] = None) -> "SuppressionBufferBuilder":
        self._logging = True
        self._log_config = dict(config or {})
        return self

    def with_logging_disabled(self) -> "SuppressionBufferBuilder":
        self._logging = False
        self._log_config = {}
        return self

    @property
    def logging_enabled(self) -> bool:
        return self._logging

    @property
    def log_config(self) -> dict:
        return dict(self._log_config)

    def changelog_topic_config(self, additional_retention_ms: Optional[int] = None,
                               defaults: Optional[Mapping[str, str]] = None) -> dict:
        """Compacted, under `defaults` (the app's `topic.` configs), under the buffer's logging
        config (a buffer has no retention: `additional_retention_ms` does not apply)."""
        config = {"cleanup.policy": "compact", **(defaults or {})}
        config.update(self._log_config)
        return config

    def build(self) -> InMemoryTimeOrderedKeyValueBuffer:
        return InMemoryTimeOrderedKeyValueBuffer(self.name, logging_enabled=self._logging)
