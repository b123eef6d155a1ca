"""Record caches: `ThreadCache` (one per stream thread) and the caching store wrappers.

Semantics follow Kafka's ThreadCache / NamedCache / CachingKeyValueStore:

- One byte budget (`statestore.cache.max.bytes`) is shared by all the named caches of a thread
  (one named cache per store of a task, named "<task id>-<store name>"). An entry costs its key
  and value bytes plus `ENTRY_OVERHEAD`.
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
"""

from __future__ import annotations

import logging
import struct
import threading
from collections import OrderedDict
from typing import Any, Callable, Iterable, Iterator, NamedTuple, Optional, Sequence

from state.errors import InvalidStoreArgumentError, StateError, StoreClosedError
from state.logging_store import ChangeLoggingKeyValueStore
from state.session import decode_session_changelog_key, session_changelog_key
from state.rocksdb_kv import RocksDBKeyValueStore, key_after, prefix_upper_bound
from state.store import (
    KeyValueIterator,
    KeyValueStore,
    StoreContext,
    WrappedStateStore,
    check_key,
    check_value,
    open_probe,
)
from state.window import (
    MAX_TIMESTAMP,
    Window,
    Windowed,
    check_timestamp,
    decode_window_changelog_key,
    window_changelog_key,
)

log = logging.getLogger(__name__)
_INT64 = struct.Struct(">q")
_pack_int64, _unpack_int64 = _INT64.pack, _INT64.unpack

DEFAULT_CACHE_MAX_BYTES = 10 * 1024 * 1024
CACHE_MAX_BYTES_CONFIG = "statestore.cache.max.bytes"
# Approximate bookkeeping cost of one entry (entry object, LRU links, dict slots).
ENTRY_OVERHEAD = 64


# The old value of a dirty entry when the cache does not know what the wrapped store holds.
UNKNOWN = object()


class CacheEntry:
    """A cached value. `old` is, while the entry is dirty, the wrapped store's value for the key
    (known when the entry was clean - a read-through or a flushed write - or read through by
    `update`, before it was dirtied), else UNKNOWN: every write to the wrapped store goes
    through this cache, so the flush can hand it to the listener without reading the store."""

    __slots__ = ("value", "dirty", "timestamp", "size", "old")

    def __init__(self, value: Optional[bytes], dirty: bool, timestamp: int, size: int, old: object = UNKNOWN) -> None:
        self.value = value
        self.dirty = dirty
        self.timestamp = timestamp
        self.size = size
        self.old = old


class DirtyEntry(NamedTuple):
    key: bytes
    value: Optional[bytes]
    timestamp: int
    old_value: object = UNKNOWN  # the wrapped store's value if known (see CacheEntry.old)


DirtyEntryFlushListener = Callable[[list], None]

try:  # update_many's hot case in C (state/_cache.c); the Python loop does the same without it
    from state import _cache as _cache_c
except ImportError:  # pragma: no cover - the accelerator is optional
    _cache_c = None
if _cache_c is not None:
    _cache_c.set_entry_layout(CacheEntry)
    _increment_run: Optional[Callable] = _cache_c.increment_run
else:  # pragma: no cover
    _increment_run = None
_LIST_OR_TUPLE = (list, tuple)
# DirtyEntry(k, v, ts) goes through a Python-level __new__; this builds the same tuple for less.
_new_tuple = tuple.__new__


class NamedCache:
    """The LRU map of one store's cache; used only through `ThreadCache` (which holds the lock).

    Sizes are kept incrementally (this cache's `size_bytes` and the owner's `_total_bytes`).
    """

    __slots__ = ("name", "owner", "entries", "dirty", "size_bytes", "listener", "hits", "misses", "evictions")

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

    def _resize(self, delta: int) -> None:
        self.size_bytes += delta
        self.owner._total_bytes += delta

    def put_dirty(self, key: bytes, value: Optional[bytes], timestamp: int, old: object = UNKNOWN) -> None:
        """A write: replaces any cached entry (reusing its object), becomes MRU and last dirty.
        `old`: the wrapped store's value for a key not cached, when the caller read it.
        CachingKeyValueStore.put inlines this body; keep the two in step."""
        size = len(key) + (len(value) if value is not None else 0) + ENTRY_OVERHEAD
        entries = self.entries
        entry = entries.get(key)
        if entry is None:
            entries[key] = CacheEntry(value, True, timestamp, size, old)
            delta = size
        else:
            delta = size - entry.size
            if not entry.dirty:
                entry.old = entry.value  # a clean entry holds the store's value
                entry.dirty = True
            entry.value = value
            entry.timestamp = timestamp
            entry.size = size
            entries.move_to_end(key)
        dirty = self.dirty
        if key in dirty:
            del dirty[key]
        dirty[key] = None
        owner = self.owner
        if delta:
            self.size_bytes += delta
            owner._total_bytes += delta
        if owner._total_bytes > owner.max_bytes:
            owner._maybe_evict(self)

    def put_clean(self, key: bytes, value: Optional[bytes], timestamp: int = -1) -> None:
        """A read-through: never replaces what the cache holds (it may be a pending dirty write)."""
        entries = self.entries
        if key in entries:
            entries.move_to_end(key)
            return
        size = len(key) + (len(value) if value is not None else 0) + ENTRY_OVERHEAD
        entries[key] = CacheEntry(value, False, timestamp, size)
        self.size_bytes += size
        owner = self.owner
        owner._total_bytes += size
        if owner._total_bytes > owner.max_bytes:
            owner._maybe_evict(self)

    def _take_dirty(self, first: Optional[DirtyEntry]) -> tuple[list, list]:
        flushed = [first] if first is not None else []
        append = flushed.append
        entries = self.entries
        tombstones = []
        for key in self.dirty:
            entry = entries[key]
            value = entry.value
            append(_new_tuple(DirtyEntry, (key, value, entry.timestamp, entry.old)))
            entry.dirty = False
            if value is None:
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
                self._resize(-entries.pop(key).size)

    def flush(self, first: Optional[DirtyEntry] = None) -> int:
        if first is None and not self.dirty:
            return 0
        if self.listener is None:
            raise StateError(f"cache {self.name!r} has dirty entries but no flush listener")
        flushed, tombstones = self._take_dirty(first)
        self.listener(flushed)
        if tombstones:
            self._drop_tombstones(tombstones)
        return len(flushed)

    def write_through(self, key: bytes, value: Optional[bytes], timestamp: int, old: object) -> None:
        """A write no entry can hold (the cache is smaller than one entry and empty): inserting
        it and evicting it at once would flush it alone, which is NamedCache.flush(first) with
        nothing else to take; this does exactly that, counted as an eviction."""
        self.evictions += 1
        if self.listener is None:
            raise StateError(f"cache {self.name!r} has dirty entries but no flush listener")
        self.listener([_new_tuple(DirtyEntry, (key, value, timestamp, old))])

    def evict_eldest(self) -> int:
        key, entry = self.entries.popitem(last=False)
        size = entry.size
        self.size_bytes -= size
        self.owner._total_bytes -= size
        self.evictions += 1
        if entry.dirty:
            del self.dirty[key]
            self.flush(_new_tuple(DirtyEntry, (key, entry.value, entry.timestamp, entry.old)))
        return size


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
            entry = cache.entries.get(key)
            if entry is None:
                cache.misses += 1
                return None
            cache.hits += 1
            cache.entries.move_to_end(key)
            return entry
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
        max_bytes = self.max_bytes
        entries = cache.entries
        while self._total_bytes > max_bytes and entries:
            cache.evict_eldest()

    def range_snapshot(
        self, namespace: str, lower: Optional[bytes], upper_exclusive: Optional[bytes]
    ) -> list[tuple[bytes, Optional[bytes]]]:
        """Sorted (key, value-or-None) pairs of the cached keys in [lower, upper_exclusive)."""
        with self.lock:
            cache = self._caches.get(namespace)
            if cache is None:
                return []
            items = [
                (k, e.value)
                for k, e in cache.entries.items()
                if (lower is None or k >= lower) and (upper_exclusive is None or k < upper_exclusive)
            ]
        items.sort()
        return items

    def flush(self, namespace: str) -> int:
        """Write down every dirty entry of `namespace`; returns how many were flushed."""
        with self.lock:
            cache = self._caches.get(namespace)
            return cache.flush() if cache is not None else 0

    def close(self, namespace: str) -> None:
        """Drop a named cache without flushing it (the caller flushed first if it wanted to)."""
        with self.lock:
            cache = self._caches.pop(namespace, None)
            if cache is not None:
                self._total_bytes -= cache.size_bytes

    def resize(self, max_bytes: int) -> None:
        self._check_max(max_bytes)
        with self.lock:
            self.max_bytes = max_bytes
            for cache in list(self._caches.values()):
                while cache.entries and self.size_bytes > max_bytes:
                    cache.evict_eldest()

    def stats(self, namespace: str) -> dict:
        with self.lock:
            c = self._caches.get(namespace)
            if c is None:
                return {}
            return {"entries": len(c.entries), "dirty": len(c.dirty), "bytes": c.size_bytes,
                    "hits": c.hits, "misses": c.misses, "evictions": c.evictions}


FlushListener = Callable[[bytes, Optional[bytes], Optional[bytes], int], None]


def _merge(cached: list, store_iter: KeyValueIterator, reverse: bool) -> Iterator:
    """Merge a sorted cache snapshot with a store iterator; the cache wins, cached deletes hide."""
    try:
        ci = iter(cached)
        c = next(ci, None)
        for item in store_iter:
            store_key = item[0]
            while c is not None and ((c[0] > store_key) if reverse else (c[0] < store_key)):
                if c[1] is not None:
                    yield c
                c = next(ci, None)
            if c is not None and c[0] == store_key:
                if c[1] is not None:
                    yield c
                c = next(ci, None)
            else:
                yield item
        while c is not None:
            if c[1] is not None:
                yield c
            c = next(ci, None)
    finally:
        store_iter.close()


class _CachingStore(WrappedStateStore):
    """Binds a wrapper to its named cache in a `ThreadCache`.

    The `ThreadCache` is the one passed in (or set with `set_cache`) before `init`; otherwise the
    context's `thread_cache` attribute if it has one; otherwise a private cache sized by the
    context's `statestore.cache.max.bytes`.
    """

    def __init__(self, wrapped, cache: Optional[ThreadCache] = None) -> None:
        super().__init__(wrapped)
        self._cache = cache
        self._namespace: Optional[str] = None
        self._named: Optional[NamedCache] = None  # set while open
        self._flush_listener: Optional[Callable] = None
        # `self._probe.is_open` is `self.wrapped.is_open` without the delegation chain.
        self._probe = open_probe(wrapped)

    def set_cache(self, cache: ThreadCache) -> None:
        if self._namespace is not None:
            raise StateError(f"state store {self.name!r}: cannot change the cache after init")
        self._cache = cache

    @property
    def cache(self) -> Optional[ThreadCache]:
        return self._cache

    @property
    def namespace(self) -> Optional[str]:
        return self._namespace

    def init(self, context: StoreContext) -> None:
        super().init(context)
        if self._cache is None:
            cache = getattr(context, "thread_cache", None)
            if cache is None:
                config = getattr(context, "config", None) or {}
                cache = ThreadCache(int(config.get(CACHE_MAX_BYTES_CONFIG, DEFAULT_CACHE_MAX_BYTES)))
            self._cache = cache
        self._namespace = f"{getattr(context, 'task_id', 'none')}-{self.name}"
        self._cache.add_dirty_entry_flush_listener(self._namespace, self._write_down)
        self._named = self._cache.named_cache(self._namespace)

    def set_flush_listener(self, listener: Optional[Callable]) -> bool:
        """`listener(key, new_value, old_value, timestamp)` for each entry written down."""
        self._flush_listener = listener
        return True

    def _write_down(self, entries: list) -> None:  # pragma: no cover - overridden
        raise NotImplementedError

    def _check(self) -> ThreadCache:
        if self._named is None or not self._probe.is_open:
            raise StoreClosedError(f"state store {self.name!r} is not open")
        return self._cache

    def flush_cache(self) -> None:
        """Write dirty entries down (and forward them) without flushing the wrapped store."""
        self._check().flush(self._namespace)

    def flush(self) -> None:
        self.flush_cache()
        self.wrapped.flush()

    def close(self, dirty: bool = False) -> None:
        """Clean close flushes the cache first (like Kafka); dirty close drops dirty entries."""
        if self._namespace is None:
            self.wrapped.close(dirty)
            return
        errors = []
        try:
            if self.wrapped.is_open and not dirty:
                self._cache.flush(self._namespace)
        except Exception as exc:  # close the rest anyway; re-raise below
            errors.append(exc)
        self._cache.close(self._namespace)
        self._namespace = None
        self._named = None
        try:
            self.wrapped.close(dirty)
        except Exception as exc:
            errors.append(exc)
        if errors:
            raise errors[0]

    @property
    def is_open(self) -> bool:
        return self._named is not None and self._probe.is_open


class CachingKeyValueStore(_CachingStore, KeyValueStore):
    """Caches reads and deduplicates writes of the wrapped bytes store until flush or eviction.

    get and put are the processors' hot path: they work on their named cache directly (the
    ThreadCache lock held once), and when the cache cannot hold even the smallest entry
    (max_bytes < ENTRY_OVERHEAD, e.g. statestore.cache.max.bytes=0) they skip it: a put is
    written down at once and a read is not kept, exactly what inserting the entry and evicting
    it again would do (same listener calls, changelog and stats), as Kafka bypasses a zero cache.
    """

    # update_many's C loop for an int64 increment's hot case, None without state._cache (a
    # store's own attribute set to None makes it use the Python loop, as tests do)
    _increment_run: Optional[Callable] = _increment_run

    def __init__(self, wrapped, cache: Optional[ThreadCache] = None) -> None:
        super().__init__(wrapped, cache)
        # The store whose get answers `wrapped.get`: a change-logging layer's get only
        # delegates, so reads skip it.
        reader = wrapped
        while type(reader).get is ChangeLoggingKeyValueStore.get:
            reader = reader.wrapped
        self._reader = reader

    def _write_down(self, entries: list) -> None:
        wrapped = self.wrapped
        listener = self._flush_listener
        if type(wrapped) is ChangeLoggingKeyValueStore and wrapped._log_change is not None and listener is not None:
            # ChangeLoggingKeyValueStore.put inlined (an entry always has its timestamp): the
            # inner store's put, then the changelog record
            inner = wrapped.wrapped
            if type(inner) is RocksDBKeyValueStore:
                self._write_down_batched(entries, inner.put_all, wrapped._log_change, wrapped.name, listener)
            else:
                self._write_down_logged(entries, inner.put, wrapped._log_change, wrapped.name, listener)
            return
        put = wrapped.put
        if listener is None:
            for key, value, timestamp, _old in entries:
                put(key, value, timestamp)
            return
        for key, value, timestamp, old in self._changes(entries):
            put(key, value, timestamp)
            listener(key, value, old, timestamp)

    def _changes(self, entries: list) -> list:
        """The entries to write down, each with the store's old value (read now where the cache
        did not know it), without deletes of keys the store does not hold. The keys of one
        flush are distinct, so reading every old value first reads what entry-by-entry would."""
        get = self._reader.get
        unknown = UNKNOWN
        changed = []
        for entry in entries:
            key, value, timestamp, old = entry
            if old is unknown:
                old = get(key)
                entry = (key, value, timestamp, old)
            if value is None and old is None:
                continue
            changed.append(entry)
        return changed

    def _write_down_batched(self, entries: list, put_all: Callable, log_change: Callable, name: str,
                            listener: Callable) -> None:
        """_write_down_logged with the inner store's writes in one WriteBatch, written before the
        first changelog record and forward. Through this store nobody can tell: every flushed
        key is still cached (a read returns its new value either way) except an evicted one,
        which is written and forwarded first in both orders."""
        changed = self._changes(entries)
        if not changed:
            return
        put_all([(key, value) for key, value, _ts, _old in changed])
        for key, value, timestamp, old in changed:
            log_change(name, key, value, timestamp)
            listener(key, value, old, timestamp)

    def _write_down_logged(self, entries: list, put: Callable, log_change: Callable, name: str,
                           listener: Callable) -> None:
        for key, value, timestamp, old in self._changes(entries):
            put(key, value, timestamp)
            log_change(name, key, value, timestamp)
            listener(key, value, old, timestamp)

    # ---------------------------------------------------------------- reads
    def get(self, key: bytes) -> Optional[bytes]:
        named = self._named
        if named is None or not self._probe.is_open:
            raise StoreClosedError(f"state store {self.name!r} is not open")
        if type(key) is not bytes:
            check_key(self.name, key)
        cache = self._cache
        # acquire/release, not `with`: measurably cheaper per call on CPython 3.11.
        lock = cache.lock
        lock.acquire()
        try:
            entries = named.entries
            entry = entries.get(key)
            if entry is not None:
                named.hits += 1
                entries.move_to_end(key)
                return entry.value
            named.misses += 1
            value = self._reader.get(key)
            if value is not None:
                if cache.max_bytes < ENTRY_OVERHEAD and not entries:
                    named.evictions += 1  # kept and evicted at once: a clean entry flushes nothing
                else:
                    named.put_clean(key, value)
            return value
        finally:
            lock.release()

    def _merged(self, lower, upper_exclusive, store_iter: KeyValueIterator, reverse: bool) -> KeyValueIterator:
        cached = self._cache.range_snapshot(self._namespace, lower, upper_exclusive)
        if reverse:
            cached.reverse()
        return KeyValueIterator(_merge(cached, store_iter, reverse), self.name)

    def range(self, key_from, key_to) -> KeyValueIterator:
        self._check()
        store_iter = self.wrapped.range(key_from, key_to)
        if key_from is not None and key_to is not None and key_from > key_to:
            return store_iter
        upper = key_after(key_to) if key_to is not None else None
        return self._merged(key_from, upper, store_iter, False)

    def reverse_range(self, key_from, key_to) -> KeyValueIterator:
        self._check()
        store_iter = self.wrapped.reverse_range(key_from, key_to)
        if key_from is not None and key_to is not None and key_from > key_to:
            return store_iter
        upper = key_after(key_to) if key_to is not None else None
        return self._merged(key_from, upper, store_iter, True)

    def prefix_scan(self, prefix: bytes) -> KeyValueIterator:
        self._check()
        store_iter = self.wrapped.prefix_scan(prefix)
        return self._merged(prefix, prefix_upper_bound(prefix), store_iter, False)

    def all(self) -> KeyValueIterator:
        return self.range(None, None)

    def reverse_all(self) -> KeyValueIterator:
        return self.reverse_range(None, None)

    def approximate_num_entries(self) -> int:
        return self.wrapped.approximate_num_entries()

    # ---------------------------------------------------------------- writes
    def put(self, key: bytes, value: Optional[bytes], timestamp: Optional[int] = None) -> None:
        named = self._named
        if named is None or not self._probe.is_open:
            raise StoreClosedError(f"state store {self.name!r} is not open")
        if type(key) is not bytes:
            check_key(self.name, key)
        if value is not None and type(value) is not bytes:
            check_value(self.name, value)
        if timestamp is None:
            timestamp = self._timestamp_supplier()
        cache = self._cache
        lock = cache.lock
        lock.acquire()
        try:
            entries = named.entries
            if cache.max_bytes < ENTRY_OVERHEAD and not entries:
                named.write_through(key, value, timestamp, UNKNOWN)
                return
            # NamedCache.put_dirty, inlined.
            size = len(key) + (len(value) if value is not None else 0) + ENTRY_OVERHEAD
            entry = entries.get(key)
            if entry is None:
                entries[key] = CacheEntry(value, True, timestamp, size)
                delta = size
            else:
                delta = size - entry.size
                if not entry.dirty:
                    entry.old = entry.value  # a clean entry holds the store's value
                    entry.dirty = True
                entry.value = value
                entry.timestamp = timestamp
                entry.size = size
                entries.move_to_end(key)
            dirty = named.dirty
            if key in dirty:
                del dirty[key]
            dirty[key] = None
            if delta:
                named.size_bytes += delta
                cache._total_bytes += delta
            if cache._total_bytes > cache.max_bytes:
                cache._maybe_evict(named)
        finally:
            lock.release()

    def update(self, key: bytes, fn: Callable[[Optional[bytes]], Optional[bytes]],
               timestamp: Optional[int] = None) -> Optional[bytes]:
        """`put(key, fn(get(key)), timestamp)` in one call, holding the cache lock once; returns
        the value written. The cache sees exactly what the two calls do: a hit or a miss, the
        read-through entry on a miss (and any eviction it causes), then the dirty write. This is
        an aggregation's read-modify-write (count, reduce) without a second pass through the layers.
        """
        if type(key) is not bytes:
            check_key(self.name, key)
        if timestamp is None:
            timestamp = self._timestamp_supplier()
        return self.update_many((key,), fn, (timestamp,))

    def update_many(self, keys: Sequence[bytes], fn: Callable[[Optional[bytes]], Optional[bytes]],
                    timestamps: Sequence[int], clock: Any = None) -> Optional[bytes]:
        """`update(key, fn, timestamp)` for each key (bytes) and timestamp in order, holding the
        cache lock once; returns the last value written. A run of a count's records in one call.

        `clock`: the owner of the caller's stream time (the task engine): this store reads
        `clock.stream_time` and asks `clock.advance_stream_time(t)` to raise it to each record's
        timestamp before anything that could read it runs for that record (`fn`, a read-through,
        an eviction forwarding downstream) and at the end; it never sets it. If an update raises, the exception carries
        `updates_done`, the number of keys fully updated before it. A `fn` with the attribute
        `int64_increment` set says it adds one to a big-endian 8-byte signed integer: that is
        done here for cached values (no call; by state._cache.increment_run in C when it is
        built, for runs of such keys), `fn` still deciding every other case."""
        increment = getattr(fn, "int64_increment", False)
        named = self._named
        if named is None or not self._probe.is_open:
            raise StoreClosedError(f"state store {self.name!r} is not open")
        cache = self._cache
        lock = cache.lock
        entries = named.entries
        value = None
        hits = 0
        i = 0
        n = min(len(keys), len(timestamps))
        # An increment's cached int64 values are updated by C, the run stopping at the first
        # other key (a miss, another value, an overflow): the loop body below does that one.
        run = self._increment_run if (increment and type(keys) in _LIST_OR_TUPLE
                                      and type(timestamps) in _LIST_OR_TUPLE) else None
        # the run's stream time so far, handed to the clock before anything that could look
        # at it runs (fn, an eviction, a read-through) and at the end
        newest = clock.stream_time if clock is not None else 0
        lock.acquire()
        try:
            while i < n:
                if run is not None:
                    stop, run_hits, newest, run_value, error = run(entries, named.dirty, keys, timestamps, i, newest)
                    hits += run_hits
                    if stop != i:
                        value = run_value
                        i = stop
                    if error is not None:
                        raise error
                    if i >= n:
                        break
                key = keys[i]
                timestamp = timestamps[i]
                # read per key: a flush (an eviction's, or one done by fn) replaces the dict
                dirty = named.dirty
                if timestamp > newest:
                    newest = timestamp
                entry = entries.get(key)
                if entry is not None:
                    # get: a hit; put: the entry rewritten in place and made MRU (the cache holds it,
                    # so the zero-size bypass below cannot apply)
                    hits += 1
                    resized = True
                    if increment:
                        try:
                            value = _pack_int64(_unpack_int64(entry.value)[0] + 1)
                            resized = False  # 8 bytes for 8 bytes: no size change, so no eviction
                        except Exception:  # None, not 8 bytes, overflow: fn decides
                            if clock is not None:
                                clock.advance_stream_time(newest)
                            value = fn(entry.value)
                    else:
                        if clock is not None:
                            clock.advance_stream_time(newest)
                        value = fn(entry.value)
                    if resized and value is not None and type(value) is not bytes:
                        check_value(self.name, value)
                    if entry.dirty:
                        if key in dirty:
                            del dirty[key]
                    else:
                        entry.old = entry.value  # a clean entry holds the store's value
                        entry.dirty = True
                    dirty[key] = None
                    entry.value = value
                    entry.timestamp = timestamp
                    entries.move_to_end(key)
                    if resized:
                        delta = len(key) + (len(value) if value is not None else 0) + ENTRY_OVERHEAD - entry.size
                        if delta:
                            entry.size += delta
                            named.size_bytes += delta
                            cache._total_bytes += delta
                        if cache._total_bytes > cache.max_bytes:
                            if clock is not None:
                                clock.advance_stream_time(newest)
                            cache._maybe_evict(named)
                else:
                    if clock is not None:
                        clock.advance_stream_time(newest)
                    value = self._update_missed(named, cache, key, fn, timestamp)
                i += 1
            return value
        except BaseException as exc:
            exc.updates_done = i  # type: ignore[attr-defined]
            raise
        finally:
            named.hits += hits
            if clock is not None and newest > clock.stream_time:
                clock.advance_stream_time(newest)
            lock.release()

    def _update_missed(self, named: NamedCache, cache: ThreadCache, key: bytes,
                       fn: Callable[[Optional[bytes]], Optional[bytes]], timestamp: int) -> Optional[bytes]:
        """update() of a key the cache does not hold (the lock is held): read through, write dirty."""
        entries = named.entries
        named.misses += 1
        old = self._reader.get(key)
        if old is not None:
            if cache.max_bytes < ENTRY_OVERHEAD and not entries:
                named.evictions += 1
            else:
                named.put_clean(key, old)  # then dirtied below (it keeps `old`), unless evicted at once
        value = fn(old)
        if value is not None and type(value) is not bytes:
            check_value(self.name, value)
        if cache.max_bytes < ENTRY_OVERHEAD and not entries:
            named.write_through(key, value, timestamp, old)
            return value
        named.put_dirty(key, value, timestamp, old)
        return value

    def put_if_absent(self, key: bytes, value: Optional[bytes], timestamp: Optional[int] = None):
        cache = self._check()
        with cache.lock:
            existing = self.get(key)
            if existing is None and value is not None:
                self.put(key, value, timestamp)
            return existing

    def put_all(self, entries: Iterable[tuple], timestamp: Optional[int] = None) -> None:
        cache = self._check()
        entries = list(entries)
        for key, value in entries:
            check_key(self.name, key)
            check_value(self.name, value)
        with cache.lock:
            for key, value in entries:
                self.put(key, value, timestamp)

    def delete(self, key: bytes, timestamp: Optional[int] = None) -> Optional[bytes]:
        cache = self._check()
        with cache.lock:
            old = self.get(key)
            self.put(key, None, timestamp)
            return old


# ------------------------------------------------------------------------------ windowed stores
def _merge_by(cached: list, store_iter: KeyValueIterator, store_sort_key: Callable, reverse: bool) -> Iterator:
    """Merge a sorted cache snapshot of (sort_key, item-or-None) with a store iterator sorted the
    same way; the cache wins on equal sort keys and a None item (cached delete) hides the store's."""
    try:
        ci = iter(cached)
        c = next(ci, None)
        for item in store_iter:
            sk = store_sort_key(item)
            while c is not None and ((c[0] > sk) if reverse else (c[0] < sk)):
                if c[1] is not None:
                    yield c[1]
                c = next(ci, None)
            if c is not None and c[0] == sk:
                if c[1] is not None:
                    yield c[1]
                c = next(ci, None)
            else:
                yield item
        while c is not None:
            if c[1] is not None:
                yield c[1]
            c = next(ci, None)
    finally:
        store_iter.close()


class CachingWindowStore(_CachingStore):
    """Caching for window stores: dedups updates of a (key, window) between commits.

    Cache keys are the window changelog keys (sequence number 0). With `retain_duplicates` every
    put must be kept, so writes go straight through and `set_flush_listener` returns False.
    The flush listener receives `(Windowed(key, Window(start, end)), new, old, timestamp)`.
    """

    def __init__(self, wrapped, cache: Optional[ThreadCache] = None) -> None:
        super().__init__(wrapped, cache)
        self.window_size_ms = wrapped.window_size_ms
        self.retain_duplicates = wrapped.retain_duplicates

    def set_flush_listener(self, listener) -> bool:
        if self.retain_duplicates:
            return False
        return super().set_flush_listener(listener)

    def _segments_of(self):
        return self.inner_most()

    def _write_down(self, entries: list) -> None:
        wrapped = self.wrapped
        listener = self._flush_listener
        size = self.window_size_ms
        for changelog_key, value, timestamp, _old in entries:
            key, start, _ = decode_window_changelog_key(changelog_key)
            if listener is None:
                wrapped.put(key, value, start, timestamp)
                continue
            old = wrapped.fetch(key, start)
            if value is None and old is None:
                continue
            wrapped.put(key, value, start, timestamp)
            listener(Windowed(key, Window(start, start + size)), value, old, timestamp)

    def put(self, key: bytes, value: Optional[bytes], window_start_timestamp: int,
            timestamp: Optional[int] = None) -> Optional[int]:
        cache = self._check()
        if self.retain_duplicates:
            return self.wrapped.put(key, value, window_start_timestamp, timestamp)
        check_key(self.name, key)
        check_value(self.name, value)
        check_timestamp(self.name, "window_start_timestamp", window_start_timestamp)
        if timestamp is None:
            timestamp = self._timestamp_supplier()
        cache.put(self._namespace, window_changelog_key(key, window_start_timestamp, 0), value,
                  dirty=True, timestamp=timestamp)
        return 0

    def fetch(self, key: bytes, time_from: int, time_to: Optional[int] = None):
        cache = self._check()
        if self.retain_duplicates:
            return self.wrapped.fetch(key, time_from, time_to)
        check_key(self.name, key)
        if time_to is None:
            start = check_timestamp(self.name, "window_start", time_from)
            if start < self._segments_of()._actual_from(0):
                return None
            entry = cache.get(self._namespace, window_changelog_key(key, start, 0))
            if entry is not None:
                return entry.value
            return self.wrapped.fetch(key, start)
        return self._fetch_key(key, time_from, time_to, False)

    def backward_fetch(self, key: bytes, time_from: int, time_to: int) -> KeyValueIterator:
        self._check()
        if self.retain_duplicates:
            return self.wrapped.backward_fetch(key, time_from, time_to)
        check_key(self.name, key)
        return self._fetch_key(key, time_from, time_to, True)

    def _fetch_key(self, key: bytes, time_from: int, time_to: int, reverse: bool) -> KeyValueIterator:
        store_iter = self.wrapped.backward_fetch(key, time_from, time_to) if reverse else \
            self.wrapped.fetch(key, time_from, time_to)
        actual_from = self._segments_of()._actual_from(time_from)
        lower = window_changelog_key(key, max(actual_from, 0), 0)
        upper = key_after(window_changelog_key(key, time_to, 0)) if time_to >= actual_from else lower
        total = len(key) + 12
        cached = []
        for ck, v in self._cache.range_snapshot(self._namespace, lower, upper):
            if len(ck) == total:  # same length within the bounds => same key
                start = decode_window_changelog_key(ck)[1]
                cached.append((start, (start, v) if v is not None else None))
        if reverse:
            cached.reverse()
        return KeyValueIterator(_merge_by(cached, store_iter, lambda item: item[0], reverse), self.name)

    def _windows(self, key_from, key_to, time_from, time_to, reverse, store_iter) -> KeyValueIterator:
        if self.retain_duplicates:
            return store_iter
        segments = self._segments_of()
        interval = segments.segment_interval_ms
        actual_from = segments._actual_from(time_from)
        size = self.window_size_ms
        cached = []
        for ck, v in self._cache.range_snapshot(self._namespace, None, None):
            key, start, _ = decode_window_changelog_key(ck)
            if start < actual_from or start > time_to:
                continue
            if (key_from is not None and key < key_from) or (key_to is not None and key > key_to):
                continue
            item = (Windowed(key, Window(start, start + size)), v) if v is not None else None
            cached.append(((start // interval, ck), item))
        cached.sort(key=lambda c: c[0], reverse=reverse)

        def store_sort_key(item):
            start = item[0].window.start
            return start // interval, window_changelog_key(item[0].key, start, 0)

        return KeyValueIterator(_merge_by(cached, store_iter, store_sort_key, reverse), self.name)

    def fetch_range(self, key_from, key_to, time_from: int, time_to: int) -> KeyValueIterator:
        self._check()
        it = self.wrapped.fetch_range(key_from, key_to, time_from, time_to)
        if key_from is not None and key_to is not None and key_from > key_to:
            return it
        return self._windows(key_from, key_to, time_from, time_to, False, it)

    def backward_fetch_range(self, key_from, key_to, time_from: int, time_to: int) -> KeyValueIterator:
        self._check()
        it = self.wrapped.backward_fetch_range(key_from, key_to, time_from, time_to)
        if key_from is not None and key_to is not None and key_from > key_to:
            return it
        return self._windows(key_from, key_to, time_from, time_to, True, it)

    def fetch_all(self, time_from: int, time_to: int) -> KeyValueIterator:
        self._check()
        return self._windows(None, None, time_from, time_to, False, self.wrapped.fetch_all(time_from, time_to))

    def backward_fetch_all(self, time_from: int, time_to: int) -> KeyValueIterator:
        self._check()
        return self._windows(None, None, time_from, time_to, True, self.wrapped.backward_fetch_all(time_from, time_to))

    def all(self) -> KeyValueIterator:
        return self.fetch_all(0, MAX_TIMESTAMP)

    def backward_all(self) -> KeyValueIterator:
        return self.backward_fetch_all(0, MAX_TIMESTAMP)


class CachingSessionStore(_CachingStore):
    """Caching for session stores: dedups updates of a session between commits.

    Cache keys are the session changelog keys. The flush listener receives
    `(Windowed(key, Window(start, end)), new, old, timestamp)`.
    """

    def _write_down(self, entries: list) -> None:
        wrapped = self.wrapped
        listener = self._flush_listener
        for changelog_key, value, timestamp, _old in entries:
            key, start, end = decode_session_changelog_key(changelog_key)
            if listener is None:
                wrapped.put(key, start, end, value, timestamp)
                continue
            old = wrapped.fetch_session(key, start, end)
            if value is None and old is None:
                continue
            wrapped.put(key, start, end, value, timestamp)
            listener(Windowed(key, Window(start, end)), value, old, timestamp)

    def put(self, key: bytes, session_start: int, session_end: int, value: Optional[bytes],
            timestamp: Optional[int] = None) -> None:
        cache = self._check()
        check_key(self.name, key)
        check_value(self.name, value)
        check_timestamp(self.name, "session_start", session_start)
        check_timestamp(self.name, "session_end", session_end)
        if session_end < session_start:
            raise InvalidStoreArgumentError(
                f"state store {self.name!r}: session_end ({session_end}) < session_start ({session_start})"
            )
        if timestamp is None:
            timestamp = self._timestamp_supplier()
        cache.put(self._namespace, session_changelog_key(key, session_start, session_end), value,
                  dirty=True, timestamp=timestamp)

    def remove(self, key: bytes, session_start: int, session_end: int, timestamp: Optional[int] = None) -> None:
        self.put(key, session_start, session_end, None, timestamp)

    def fetch_session(self, key: bytes, session_start: int, session_end: int) -> Optional[bytes]:
        cache = self._check()
        check_key(self.name, key)
        entry = cache.get(self._namespace, session_changelog_key(key, session_start, session_end))
        if entry is not None:
            if session_end < self.inner_most()._actual_from(0):
                return None
            return entry.value
        return self.wrapped.fetch_session(key, session_start, session_end)

    def _sessions(self, key_from, key_to, exact, earliest_end, latest_start, reverse, store_iter) -> KeyValueIterator:
        segments = self.inner_most()
        interval = segments.segment_interval_ms
        actual_from = segments._actual_from(earliest_end)
        if exact:
            lower, upper = key_from, key_after(key_from + b"\xff" * 16)
        else:
            lower, upper = None, None
        cached = []
        for ck, v in self._cache.range_snapshot(self._namespace, lower, upper):
            key, start, end = decode_session_changelog_key(ck)
            if end < actual_from or start > latest_start:
                continue
            if exact and key != key_from:
                continue
            if not exact and ((key_from is not None and key < key_from) or (key_to is not None and key > key_to)):
                continue
            item = (Windowed(key, Window(start, end)), v) if v is not None else None
            cached.append(((end // interval, ck), item))
        cached.sort(key=lambda c: c[0], reverse=reverse)

        def store_sort_key(item):
            w = item[0]
            return w.window.end // interval, session_changelog_key(w.key, w.window.start, w.window.end)

        return KeyValueIterator(_merge_by(cached, store_iter, store_sort_key, reverse), self.name)

    def find_sessions(self, key: bytes, earliest_session_end_time: int, latest_session_start_time: int) -> KeyValueIterator:
        self._check()
        it = self.wrapped.find_sessions(key, earliest_session_end_time, latest_session_start_time)
        return self._sessions(key, key, True, earliest_session_end_time, latest_session_start_time, False, it)

    def backward_find_sessions(self, key: bytes, earliest_session_end_time: int,
                               latest_session_start_time: int) -> KeyValueIterator:
        self._check()
        it = self.wrapped.backward_find_sessions(key, earliest_session_end_time, latest_session_start_time)
        return self._sessions(key, key, True, earliest_session_end_time, latest_session_start_time, True, it)

    def find_sessions_range(self, key_from, key_to, earliest_session_end_time: int,
                            latest_session_start_time: int) -> KeyValueIterator:
        self._check()
        it = self.wrapped.find_sessions_range(key_from, key_to, earliest_session_end_time, latest_session_start_time)
        if key_from is not None and key_to is not None and key_from > key_to:
            return it
        return self._sessions(key_from, key_to, False, earliest_session_end_time, latest_session_start_time, False, it)

    def fetch(self, key: bytes) -> KeyValueIterator:
        return self.find_sessions(key, 0, MAX_TIMESTAMP)

    def backward_fetch(self, key: bytes) -> KeyValueIterator:
        return self.backward_find_sessions(key, 0, MAX_TIMESTAMP)

    def fetch_range(self, key_from, key_to) -> KeyValueIterator:
        return self.find_sessions_range(key_from, key_to, 0, MAX_TIMESTAMP)

    def all(self) -> KeyValueIterator:
        return self.find_sessions_range(None, None, 0, MAX_TIMESTAMP)
