"""The record cache of a stream thread: `ThreadCache` and its named caches (one per store).

Semantics follow Kafka's ThreadCache / NamedCache / CachingKeyValueStore:

- One byte budget (`statestore.cache.max.bytes`) is shared by all the named caches of a thread
  (one named cache per store of a task, named "<task id>-<store name>"). An entry costs what
  Kafka counts (`entry_size`): its key and value bytes, `ENTRY_OVERHEAD`, the record context
  of its latest write (`context_size`: the topic's and the header keys' chars, the header
  values' bytes) and, in a window or session store's cache, the 8 bytes of the segment id
  Kafka's cache keys start with (`NamedCache.entry_overhead`). A read-through entry has no
  record context (Kafka's: topic "", no headers).
- Writes go to the cache as dirty entries; repeated writes of a key between commits replace the
  cached entry, so only the latest value is written down and forwarded (deduplication).
- When the budget is exceeded after a put, the least recently used entries of the cache being
  written are evicted (as in Kafka: the eviction and what it forwards happen in the context of the
  store being written, never of another processor's store). Evicting a dirty entry flushes every
  dirty entry of that named cache, evicted one first, then the others in write order, so that
  downstream sees updates of one store in order.
- `flush()` (on commit) writes all dirty entries down in the order of their latest write, then
  flushes the wrapped store.
- The flush listener `fn(key, new_value, old_value, timestamp)` is called for each entry written
  down; `old_value` is read from the wrapped store just before the write. An entry whose new and
  old values are both None (a delete of a key that never reached the store) is skipped.
- A dirty entry keeps the record context of its latest write (Kafka's LRUCacheEntry context):
  the `metadata` (topic, partition, offset) and `headers` of the named cache's `context` (the
  task's processor context, given by the caching store) when the write was made. A flush hands
  them on with the entry (DirtyEntry), and the caching store sets them on the context while it
  writes that entry down and forwards it. A bulk run of consumed messages (an aggregation's
  keys straight from its input) gives each write's message itself as its metadata, which
  stands for its own metadata and headers: no tuple is made per record, only per entry flushed
  (`record_context_from`).
"""

from __future__ import annotations

import logging
import struct
import threading
from bisect import bisect_left, insort
from collections import OrderedDict
from typing import Any, Callable, NamedTuple, Optional, Sequence

from state.errors import InvalidStoreArgumentError, StateError

log = logging.getLogger(__name__)

DEFAULT_CACHE_MAX_BYTES = 10 * 1024 * 1024
CACHE_MAX_BYTES_CONFIG = "statestore.cache.max.bytes"
# What Kafka counts for a cache entry besides its key, value and record context's strings
# (NamedCache.LRUNode.size() and LRUCacheEntry's size): 24 bytes of LRU node, 1 for the dirty
# flag, and the record context's timestamp (8), offset (8) and partition (4).
ENTRY_OVERHEAD = 45
# A window or session store's cache key is its store key after the 8-byte segment id (Kafka's
# SegmentedCacheFunction); Eddy's cache keys leave the id out, its size is counted all the same.
SEGMENT_ID_BYTES = 8
_SEGMENT_ID = struct.Struct(">q")


def segment_id(timestamp: int, interval: int) -> int:
    """Kafka's `timestamp / segmentInterval` (Java's division truncates toward zero)."""
    return timestamp // interval if timestamp >= 0 else -((-timestamp) // interval)


def in_segment(segment: int, binary: bytes) -> bytes:
    """Kafka's SegmentedCacheFunction.cacheKey: the 8-byte segment id, then the store key."""
    return _SEGMENT_ID.pack(segment) + binary


# The old value of a dirty entry when the cache does not know what the wrapped store holds.
UNKNOWN = object()


class CacheEntry:
    """A cached value. `old` is, while the entry is dirty, the wrapped store's value for the key
    (known when the entry was clean - a read-through or a flushed write - or read through by
    `update`, before it was dirtied), else UNKNOWN: every write to the wrapped store goes
    through this cache, so the flush can hand it to the listener without reading the store."""

    __slots__ = ("value", "dirty", "timestamp", "size", "old", "metadata", "headers")

    def __init__(self, value: Optional[bytes], dirty: bool, timestamp: int, size: int, old: object = UNKNOWN,
                 metadata: Optional[tuple] = None, headers: Any = ()) -> None:
        self.value = value
        self.dirty = dirty
        self.timestamp = timestamp
        self.size = size
        self.old = old
        # the record context of the latest dirty write (see the module doc)
        self.metadata = metadata
        self.headers = headers


class DirtyEntry(NamedTuple):
    key: bytes
    value: Optional[bytes]
    timestamp: int
    old_value: object = UNKNOWN  # the wrapped store's value if known (see CacheEntry.old)
    metadata: Optional[tuple] = None  # the record context of the write (see the module doc)
    headers: Any = ()


DirtyEntryFlushListener = Callable[[list], None]

# DirtyEntry(k, v, ts) goes through a Python-level __new__; this builds the same tuple for less.
_new_tuple = tuple.__new__


def record_context_from(metadata: Any, headers: Any) -> tuple:
    """A write's record context as a flush hands it on: (metadata, headers) as they are, or, for
    a consumed message in place of the metadata (see the module doc), its (topic, partition,
    offset) and its headers (a tuple, () for none). `take_dirty` in C calls this for such an entry."""
    if metadata is None or type(metadata) is tuple:
        return metadata, headers
    message_headers = metadata.headers()
    return ((metadata.topic(), metadata.partition(), metadata.offset()),
            tuple(message_headers) if message_headers else ())


def _flushed(key: bytes, entry: CacheEntry) -> DirtyEntry:
    """The DirtyEntry a flush hands on for a dirty entry (`take_dirty` in C builds the same)."""
    return _new_tuple(DirtyEntry, (key, entry.value, entry.timestamp, entry.old)
                      + record_context_from(entry.metadata, entry.headers))


def _java_chars(text: str) -> int:
    """The length of a Java String of `text` (UTF-16 code units: what Kafka counts of a topic or
    header key, `toCharArray().length`)."""
    if text.isascii():
        return len(text)
    return len(text) + sum(1 for ch in text if ord(ch) > 0xFFFF)


def context_size(metadata: Any, headers: Any) -> int:
    """The bytes Kafka counts for a write's record context besides ENTRY_OVERHEAD's (its
    ProcessorRecordContext.residentMemorySizeEstimate): the topic's chars (none without a topic:
    a punctuation's write, a read-through), and each header's key chars and value bytes.
    `metadata`: None, (topic, partition, offset), or a consumed message standing for its own
    metadata and headers (see the module doc). state.cache._cache counts the same."""
    if metadata is None:
        topic = None
    elif type(metadata) is tuple:
        topic = metadata[0] if metadata else None
    else:  # a consumed message
        topic = metadata.topic()
        headers = metadata.headers()
    size = _java_chars(topic) if topic else 0
    if headers:
        for key, value in headers:
            size += _java_chars(key) + (len(value) if value is not None else 0)
    return size


def entry_size(named: "NamedCache", key: bytes, value: Optional[bytes], metadata: Any = None,
               headers: Any = ()) -> int:
    """What an entry of `named` costs with the record context (metadata, headers) of its write."""
    return (len(key) + (len(value) if value is not None else 0) + named.entry_overhead
            + context_size(metadata, headers))


def record_context_of(named: "NamedCache") -> tuple:
    """(metadata, headers) of the record a write of `named` is made for: its context's now, or
    (None, ()) without a context."""
    context = named.context
    if context is None:
        return None, ()
    return context.metadata, context.headers


def run_entry_cost(named: "NamedCache", metadatas: Optional[Sequence[Any]]) -> int:
    """What each write of an update_many run costs `named` besides its key and value: the named
    cache's overhead and the run's record context, the same for every write of the run (the
    context's own, which the run cannot change; or with `metadatas`, a keyed run's consumed
    messages, all of one topic and none with headers: the first one's)."""
    if metadatas is not None:
        return named.entry_overhead + (context_size(metadatas[0], ()) if len(metadatas) else 0)
    return named.entry_overhead + context_size(*record_context_of(named))


def write_entry_py(entries: "OrderedDict[bytes, CacheEntry]", dirty: "dict[bytes, None]", key: bytes,
                   value: Optional[bytes], timestamp: int, old: object, metadata: Optional[tuple] = None,
                   headers: Any = (), overhead: int = ENTRY_OVERHEAD) -> int:
    """A write of a dirty entry into a named cache's maps: a new entry, or the cached one
    rewritten in place (a clean one's value becoming its old value), made MRU and last in the
    write order, with the record context of the write. Returns the size change; the caller
    accounts for it and evicts. `old`: the wrapped store's value for a key not cached, when the
    caller knows it; `overhead`: the named cache's `entry_overhead`. `write_entry` is this, in C
    where state.cache._cache is built (None: not taken, call this)."""
    size = len(key) + (len(value) if value is not None else 0) + overhead + context_size(metadata, headers)
    entry = entries.get(key)
    if entry is None:
        entries[key] = CacheEntry(value, True, timestamp, size, old, metadata, headers)
        delta = size
    else:
        delta = size - entry.size
        if not entry.dirty:
            entry.old = entry.value  # a clean entry holds the store's value
            entry.dirty = True
        entry.value = value
        entry.timestamp = timestamp
        entry.size = size
        entry.metadata = metadata
        entry.headers = headers
        entries.move_to_end(key)
    if key in dirty:
        del dirty[key]
    dirty[key] = None
    return delta


def lookup_py(named: "NamedCache", key: bytes) -> Optional[CacheEntry]:
    """A read of a named cache: the entry of `key`, made MRU and counted a hit, or None (a miss).
    `lookup` is this, in C where state.cache._cache is built."""
    entries = named.entries
    entry = entries.get(key)
    if entry is None:
        named.misses += 1
        return None
    named.hits += 1
    entries.move_to_end(key)
    return entry


def put_clean_py(named: "NamedCache", key: bytes, value: Optional[bytes], timestamp: int = -1) -> bool:
    """A read-through into a named cache: never replaces what the cache holds (it may be a
    pending dirty write). An entry an empty named cache cannot take under the budget is not
    kept: inserting it would evict it at once (counted as an eviction; a clean entry flushes
    nothing). `put_clean` is this, in C where state.cache._cache is built (None: not taken,
    nothing done, call this)."""
    entries = named.entries
    if key in entries:
        entries.move_to_end(key)
        return True
    size = entry_size(named, key, value)  # no record context (see the module doc)
    owner = named.owner
    if not entries and owner._total_bytes + size > owner.max_bytes:
        named.evictions += 1
        return True
    if named.range_index is not None:
        named.range_index.add(key, entries)
    entries[key] = CacheEntry(value, False, timestamp, size)
    named.size_bytes += size
    owner._total_bytes += size
    maybe_evict(named)
    return True


def put_dirty_py(named: "NamedCache", key: bytes, value: Optional[bytes], timestamp: int,
                 old: object = UNKNOWN) -> bool:
    """A write into a named cache: replaces any cached entry (reusing its object), becomes MRU
    and last dirty (`write_entry`), then evicts while over the budget. `old`: the wrapped
    store's value for a key not cached, when the caller read it. A write into an empty named
    cache that the budget cannot take is written through (`write_through`): inserting it would
    evict it, alone, at once. `put_dirty` is this, in C where state.cache._cache is built (None:
    not taken, nothing done, call this)."""
    entries = named.entries
    owner = named.owner
    metadata, headers = record_context_of(named)
    if not entries:
        size = entry_size(named, key, value, metadata, headers)
        if owner._total_bytes + size > owner.max_bytes:
            named.write_through(key, value, timestamp, old, size)
            return True
    if named.range_index is not None and key not in entries:
        named.range_index.add(key, entries)
    overhead = named.entry_overhead
    delta = write_entry(entries, named.dirty, key, value, timestamp, old, metadata, headers, overhead)
    if delta is None:
        delta = write_entry_py(entries, named.dirty, key, value, timestamp, old, metadata, headers, overhead)
    if delta:
        named.size_bytes += delta
        owner._total_bytes += delta
    maybe_evict(named)
    return True


def maybe_evict_py(named: "NamedCache") -> None:
    """While the thread's cache is over its budget, the named cache that was written evicts its
    own eldest entries (never another's: Kafka's ThreadCache.maybeEvict), until it is empty.
    `maybe_evict` is this, in C where state.cache._cache is built."""
    owner = named.owner
    entries = named.entries
    while owner._total_bytes > owner.max_bytes and entries:
        named.evict_eldest()


try:  # the functions above and _take_dirty's loop in C (state/cache/_cache.c), Python without them
    from state.cache import _cache as _cache_c
except ImportError:  # pragma: no cover - the accelerator is optional
    _cache_c = None
if _cache_c is not None:
    _cache_c.set_entry_layout(CacheEntry, ENTRY_OVERHEAD, UNKNOWN, record_context_from)
    write_entry: Callable[..., Optional[int]] = _cache_c.write_entry
    _take_dirty_c: Optional[Callable[..., bool]] = _cache_c.take_dirty  # NamedCache._take_dirty's loop
    lookup: Callable[..., Optional[CacheEntry]] = _cache_c.lookup
    put_clean: Callable[..., Optional[bool]] = _cache_c.put_clean
    put_dirty: Callable[..., Optional[bool]] = _cache_c.put_dirty
    maybe_evict: Callable[..., None] = _cache_c.maybe_evict
else:  # pragma: no cover
    write_entry = write_entry_py
    _take_dirty_c = None
    lookup, put_clean, put_dirty, maybe_evict = lookup_py, put_clean_py, put_dirty_py, maybe_evict_py


class RangeIndex:
    """The Kafka cache keys of every key written into a named cache, sorted, so that a range read
    finds its keys by bisection (Kafka's cache is a TreeMap) instead of a scan of the cache: a
    key-value store's keys themselves; with `segmented`, a window or session store's segmented
    cache keys (see ThreadCache.keys_in_range). Keys are added as the named cache inserts them
    (put_clean, put_dirty) and not removed when evicted: a range read skips those no longer
    cached, and the index is rebuilt from the cache once it holds twice as many keys."""

    __slots__ = ("segmented", "time_at", "interval", "time_first", "positions", "keys")

    def __init__(self, segmented: Optional[tuple] = None) -> None:
        self.segmented = segmented
        self.time_at, self.interval = segmented[:2] if segmented is not None else (0, 0)
        self.time_first = segmented is not None and len(segmented) > 2 and segmented[2]
        self.positions: list[bytes] = []
        self.keys: set[bytes] = set()

    def position(self, key: bytes) -> bytes:
        """The Kafka cache key of a cache key (the schema's prefix byte of a time-first one left
        out: every key has the same)."""
        if self.segmented is None:
            return key
        at = len(key) - self.time_at
        stamp = key[at:at + 8]
        segment = in_segment(segment_id(int.from_bytes(stamp, "big", signed=True), self.interval), b"")
        if self.time_first:
            return segment + stamp + key[:at] + key[at + 8:]
        return segment + key

    def key_of(self, position: bytes) -> bytes:
        """The cache key whose Kafka cache key is `position`."""
        if self.segmented is None:
            return position
        if not self.time_first:
            return position[SEGMENT_ID_BYTES:]
        tail = len(position) - (self.time_at - 8)  # where what followed the time starts
        return position[SEGMENT_ID_BYTES + 8:tail] + position[SEGMENT_ID_BYTES:SEGMENT_ID_BYTES + 8] + position[tail:]

    def rebuild(self, entries: "OrderedDict[bytes, CacheEntry]") -> None:
        """The index of what the cache holds now."""
        self.positions = sorted(map(self.position, entries))
        self.keys = set(entries)

    def add(self, key: bytes, entries: "OrderedDict[bytes, CacheEntry]") -> None:
        """A key about to be inserted (new to the index, or already in it)."""
        if key in self.keys:
            return
        if len(self.keys) > 2 * len(entries) + 64:
            self.rebuild(entries)
            if key in self.keys:
                return
        insort(self.positions, self.position(key))
        self.keys.add(key)

    def keys_in_range(self, entries: "OrderedDict[bytes, CacheEntry]", low: bytes,
                      high: Optional[bytes]) -> list[bytes]:
        """The cached keys whose Kafka cache key is in [low, high) (None: no upper bound), in
        that key's order."""
        positions = self.positions
        found = positions[bisect_left(positions, low):
                          bisect_left(positions, high) if high is not None else len(positions)]
        if self.segmented is None:
            return [p for p in found if p in entries]
        if self.time_first:
            return [k for k in map(self.key_of, found) if k in entries]
        return [p[SEGMENT_ID_BYTES:] for p in found if p[SEGMENT_ID_BYTES:] in entries]

    def next_segment(self, entries: "OrderedDict[bytes, CacheEntry]", after: int, forward: bool) -> Optional[int]:
        """The segment id of the cached key nearest beyond segment `after` (None: none there)."""
        positions = self.positions
        if forward:
            i = bisect_left(positions, in_segment(after + 1, b"")) if after >= -1 else 0
            candidates = (positions[j] for j in range(i, len(positions)))
        else:
            if after <= 0:
                return None
            i = bisect_left(positions, in_segment(after, b""))
            candidates = (positions[j] for j in range(i - 1, -1, -1))
        for p in candidates:
            if self.key_of(p) in entries:  # (an evicted key's position is skipped)
                return _SEGMENT_ID.unpack_from(p)[0]
        return None


def _range_index(cache: "NamedCache", segmented: Optional[tuple]) -> RangeIndex:
    """The named cache's range index for keys `segmented` so (see ThreadCache.keys_in_range), made
    at a store's first range read from what it holds (a store that never reads one, a time window
    count, keeps none), kept up by the cache's insertions from then on. The cache lock is held."""
    index = cache.range_index
    if index is None or index.segmented != segmented:
        index = cache.range_index = RangeIndex(segmented)
        index.rebuild(cache.entries)
    return index


class NamedCache:
    """The LRU map of one store's cache; used only through `ThreadCache` (which holds the lock).

    Sizes are kept incrementally: this cache's `size_bytes`, and the owner's `_total_bytes`,
    which follows each operation's change of this cache's size as Kafka's ThreadCache does
    (`sizeInBytes += cache size after - before`). A write changes it at once; an eviction that
    flushes (and a flush) changes it when the flush is over, so while the listener forwards
    downstream the evicted entry still counts, and what downstream writes into this same cache
    meanwhile counts twice (Kafka's accounting, kept: it decides what other caches evict).
    """

    __slots__ = ("name", "owner", "entries", "dirty", "size_bytes", "listener", "hits", "misses", "evictions",
                 "context", "entry_overhead", "range_index")

    def __init__(self, name: str, owner: "ThreadCache") -> None:
        self.name = name
        self.owner = owner
        self.entries: "OrderedDict[bytes, CacheEntry]" = OrderedDict()  # LRU first, MRU last
        self.dirty: "dict[bytes, None]" = {}  # insertion order = order of latest write
        self.size_bytes = 0
        self.listener: Optional[DirtyEntryFlushListener] = None
        self.hits = 0
        self.misses = 0
        self.evictions = 0
        # where a write's record context is read (`metadata`, `headers`): the task's processor
        # context, set by the caching store; None: writes keep none
        self.context: Any = None
        # what each entry costs besides its key, value and record context (see the module doc)
        self.entry_overhead = ENTRY_OVERHEAD
        # the store's keys in Kafka's cache-key order, for its range reads (RangeIndex): None
        # until the first (ThreadCache.keys_in_range), kept up by this cache's insertions from
        # then on
        self.range_index: Optional[RangeIndex] = None

    def put_dirty(self, key: bytes, value: Optional[bytes], timestamp: int, old: object = UNKNOWN) -> None:
        """A write (put_dirty_py)."""
        if put_dirty(self, key, value, timestamp, old) is None:
            put_dirty_py(self, key, value, timestamp, old)

    def put_clean(self, key: bytes, value: Optional[bytes], timestamp: int = -1) -> None:
        """A read-through (put_clean_py)."""
        if put_clean(self, key, value, timestamp) is None:
            put_clean_py(self, key, value, timestamp)

    def _take_dirty(self, first: Optional[DirtyEntry]) -> tuple[list, list]:
        flushed = [first] if first is not None else []
        entries = self.entries
        tombstones: list = []
        if _take_dirty_c is not None and _take_dirty_c(entries, self.dirty, DirtyEntry, flushed, tombstones):
            self.dirty = {}  # the loop below, done in C
            return flushed, tombstones
        append = flushed.append
        for key in self.dirty:
            entry = entries[key]
            append(_flushed(key, entry))
            entry.dirty = False
            if entry.value is None:
                tombstones.append(key)
        self.dirty = {}
        return flushed, tombstones

    def _drop_tombstones(self, tombstones: list) -> None:
        """After a flush (as Kafka does, once the listener ran): a flushed delete has done its
        job, keeping it would only shadow the store. One written again meanwhile stays."""
        entries = self.entries
        for key in tombstones:
            entry = entries.get(key)
            if entry is not None and entry.value is None and not entry.dirty:
                self.size_bytes -= entries.pop(key).size

    def flush(self, first: Optional[DirtyEntry] = None) -> int:
        """Hands every dirty entry to the listener (`first` before them) and drops the flushed
        deletes. This cache's size only: the caller brings the owner's total along afterwards
        (`ThreadCache.flush`, `evict_eldest`: see the class doc)."""
        if first is None and not self.dirty:
            return 0
        if self.listener is None:
            raise StateError(f"cache {self.name!r} has dirty entries but no flush listener")
        flushed, tombstones = self._take_dirty(first)
        self.listener(flushed)
        if tombstones:
            self._drop_tombstones(tombstones)
        return len(flushed)

    def write_through(self, key: bytes, value: Optional[bytes], timestamp: int, old: object, size: int) -> None:
        """A write of `size` bytes this cache cannot hold (it is empty and the entry does not fit
        the budget): inserting it and evicting it at once would flush it alone, which is
        NamedCache.flush(first) with nothing else to take (an empty cache has no dirty entry);
        this does exactly that, counted as an eviction, the owner's total counting the entry
        until its flush is over (as evict_eldest)."""
        self.evictions += 1
        if self.listener is None:
            raise StateError(f"cache {self.name!r} has dirty entries but no flush listener")
        before = self.size_bytes
        self.owner._total_bytes += size
        try:
            self.listener([_new_tuple(DirtyEntry, (key, value, timestamp, old)
                                      + record_context_from(*record_context_of(self)))])
        finally:
            self.settle(before, size)

    def evict_eldest(self) -> int:
        """Evicts the LRU entry, flushing every dirty entry if it was dirty. The owner's total
        follows this cache's size change once the flush is over (see the class doc)."""
        key, entry = self.entries.popitem(last=False)
        size = entry.size
        before = self.size_bytes
        self.size_bytes -= size
        self.evictions += 1
        if not entry.dirty:
            self.owner._total_bytes -= size
            return size
        del self.dirty[key]
        try:
            self.flush(_flushed(key, entry))
        finally:
            self.settle(before)
        return size

    def settle(self, before: int, counted: int = 0) -> None:
        """Brings the owner's total along with this cache's size change since it was `before`,
        less the `counted` bytes already added (Kafka's sizeInBytes += after - before, taken
        once an operation that flushes is over: see the class doc)."""
        self.owner._total_bytes += self.size_bytes - before - counted


if _cache_c is not None:  # the C functions above read and write its slots directly
    _cache_c.set_named_layout(NamedCache)


class ThreadCache:
    """A byte-bounded record cache shared by the caching stores of one stream thread."""

    def __init__(self, max_bytes: int = DEFAULT_CACHE_MAX_BYTES) -> None:
        self._check_max(max_bytes)
        self.max_bytes = max_bytes
        self._caches: dict[str, NamedCache] = {}
        self._total_bytes = 0
        self.lock = threading.RLock()

    @staticmethod
    def _check_max(max_bytes) -> None:
        if not isinstance(max_bytes, int) or isinstance(max_bytes, bool) or max_bytes < 0:
            raise InvalidStoreArgumentError(
                f"{CACHE_MAX_BYTES_CONFIG} must be a non-negative int, got {max_bytes!r}"
            )

    @property
    def size_bytes(self) -> int:
        return self._total_bytes

    def __len__(self) -> int:
        return sum(len(c.entries) for c in self._caches.values())

    def named_cache(self, namespace: str) -> NamedCache:
        cache = self._caches.get(namespace)
        if cache is None:
            cache = self._caches[namespace] = NamedCache(namespace, self)
        return cache

    def add_dirty_entry_flush_listener(self, namespace: str, listener: DirtyEntryFlushListener) -> None:
        with self.lock:
            self.named_cache(namespace).listener = listener

    def get(self, namespace: str, key: bytes) -> Optional[CacheEntry]:
        """The entry of `key` (made MRU), or None. The entry's fields are valid until the next
        write to the cache (a later put of the same key updates the entry in place)."""
        lock = self.lock
        lock.acquire()
        try:
            cache = self._caches.get(namespace)
            if cache is None:
                return None
            return lookup(cache, key)
        finally:
            lock.release()

    def put(self, namespace: str, key: bytes, value: Optional[bytes], *, dirty: bool, timestamp: int) -> None:
        lock = self.lock
        lock.acquire()
        try:
            cache = self._caches.get(namespace)
            if cache is None:
                cache = self.named_cache(namespace)
            if dirty:
                cache.put_dirty(key, value, timestamp)
            else:
                cache.put_clean(key, value, timestamp)
        finally:
            lock.release()

    def _maybe_evict(self, cache: NamedCache) -> None:
        maybe_evict(cache)

    def keys_in_range(self, namespace: str, lower: Optional[bytes], upper_exclusive: Optional[bytes],
                      segmented: Optional[tuple] = None) -> list[bytes]:
        """The cached keys whose Kafka cache key is in [lower, upper_exclusive) (None: open),
        in that key's order; nothing is read (see state.cache.range_reads). A key-value store's
        cache key is its key; with `segmented` = (time at, interval), a window or session
        store's is Kafka's segmented one: the 8-byte segment id of the timestamp that starts
        `time at` bytes from the key's end (divided by `interval`), then the key; with
        (time at, interval, True) a time-ordered window store's: the segment id, the timestamp,
        then the key without it (Kafka's time-first schema, its prefix byte left out)."""
        with self.lock:
            cache = self._caches.get(namespace)
            if cache is None:
                return []
            return _range_index(cache, segmented).keys_in_range(cache.entries, lower or b"", upper_exclusive)

    def next_segment(self, namespace: str, segmented: tuple, after: int, forward: bool) -> Optional[int]:
        """The segment id (see `keys_in_range`) of a cached key nearest beyond `after` (above it
        `forward`, else below), None when no cached key is there."""
        with self.lock:
            cache = self._caches.get(namespace)
            if cache is None:
                return None
            return _range_index(cache, segmented).next_segment(cache.entries, after, forward)

    def flush(self, namespace: str) -> int:
        """Write down every dirty entry of `namespace`; returns how many were flushed. The total
        follows the named cache's size change once the flush is over (see NamedCache)."""
        with self.lock:
            cache = self._caches.get(namespace)
            if cache is None:
                return 0
            before = cache.size_bytes
            try:
                return cache.flush()
            finally:
                cache.settle(before)

    def close(self, namespace: str) -> None:
        """Drop a named cache without flushing it (the caller flushed first if it wanted to)."""
        with self.lock:
            cache = self._caches.pop(namespace, None)
            if cache is not None:
                self._total_bytes -= cache.size_bytes

    def resize(self, max_bytes: int) -> None:
        """A new budget (the app's thread count changed). Shrinking evicts until the thread's
        caches fit it, as Kafka's ThreadCache.resize: one eldest entry of each named cache in
        turn, round and round, so every store gives up its share (an evicted dirty entry
        flushes its cache, as any eviction does)."""
        self._check_max(max_bytes)
        with self.lock:
            self.max_bytes = max_bytes
            while self._total_bytes > max_bytes:
                evicted = False
                for cache in list(self._caches.values()):
                    if self._total_bytes <= max_bytes:
                        break
                    if cache.entries:
                        cache.evict_eldest()  # (brings the total along itself)
                        evicted = True
                if not evicted:
                    break

    def stats(self, namespace: str) -> dict:
        with self.lock:
            c = self._caches.get(namespace)
            if c is None:
                return {}
            return {"entries": len(c.entries), "dirty": len(c.dirty), "bytes": c.size_bytes,
                    "hits": c.hits, "misses": c.misses, "evictions": c.evictions}
