"""The caching key-value store: reads cached, writes deduplicated until flush or eviction, and
the read-modify-write `update`/`update_many` an aggregation's hot path uses (C `increment_run`
from state/cache/_cache.c for an int64 increment's hot case, when it is built)."""

from __future__ import annotations

import logging
import struct
import threading
from types import MethodType
from typing import Any, Callable, Iterable, Optional, Sequence

from state.cache.base import CachingStore
from state.cache.merge import merge_sorted
from state.cache.range_reads import visit
from state.cache.thread_cache import UNKNOWN, NamedCache, ThreadCache, lookup, record_context_of, run_entry_cost
from state.errors import StoreClosedError
from state.rocksdb_kv import key_after, prefix_upper_bound
from state.store import KeyValueIterator, KeyValueStore, check_key, check_value
from state.timestamped import TIMESTAMPED_INT64

log = logging.getLogger(__name__)
_INT64 = struct.Struct(">q")
_pack_int64, _unpack_int64 = _INT64.pack, _INT64.unpack
_pack_stamped, _unpack_stamped = TIMESTAMPED_INT64.pack, TIMESTAMPED_INT64.unpack

try:  # update_many's hot case in C (state/cache/_cache.c); the Python loop does the same without it
    from state.cache import _cache as _cache_c
except ImportError:  # pragma: no cover - the accelerator is optional
    _cache_c = None
if _cache_c is not None:  # the entry layout registered by state.cache.thread_cache
    _increment_run: Optional[Callable] = _cache_c.increment_run
    _cached_get: Optional[Callable] = _cache_c.cached_get
    _cached_put: Optional[Callable] = _cache_c.cached_put
    _cached_replace: Optional[Callable] = _cache_c.cached_replace
else:  # pragma: no cover
    _increment_run = _cached_get = _cached_put = _cached_replace = None
_LIST_OR_TUPLE = (list, tuple)


class CachingKeyValueStore(CachingStore, KeyValueStore):
    """Caches reads and deduplicates writes of the wrapped bytes store until flush or eviction.

    get and put are the processors' hot path: they work on their named cache directly (the
    ThreadCache lock held once). An entry the named cache cannot take (it is empty and the
    entry does not fit the budget, always so when statestore.cache.max.bytes=0) is not kept:
    a put is written down at once and a read is not kept, exactly what inserting the entry and
    evicting it again would do (same listener calls, changelog and stats; NamedCache.put_dirty
    and put_clean), as Kafka bypasses a zero cache.

    A read that misses on a thread other than the one that opened the store (an interactive
    query's) returns the store's value and caches nothing (Kafka's CachingKeyValueStore caches
    read-throughs on its stream thread only): it neither evicts nor flushes the owner's entries.

    A flush listener with a `flush_many` attribute is handed the changes of a flush at once
    where they are written down at once (over a change-logging layer): `flush_many(changes)`,
    `(key, new_value, timestamp, old_value, metadata, headers)` each, in order, does what the
    listener's call of each in its record context would do (`CachingStore.forward_in_contexts`).
    """

    # update_many's C loop for an int64 increment's hot case, None without state.cache._cache (a
    # store's own attribute set to None makes it use the Python loop, as tests do)
    _increment_run: Optional[Callable] = _increment_run
    # The key whose last read missed the cache and read the store, and what it read (None or
    # the bytes), until the next write of any kind: a put of that key right after the read (a
    # table source's or an aggregation's get-then-put) knows the store's old value and its flush
    # need not read it again (the store changes only through this cache's write-downs).
    _read_key: Optional[bytes] = None
    _read_value: Optional[bytes] = None

    def __init__(self, wrapped: Any, cache: Optional[ThreadCache] = None) -> None:
        super().__init__(wrapped, cache)
        if _cached_get is not None:
            # get and put in one C call each (state/cache/_cache.c): the methods below are their
            # definitions, and what the C calls hand every case but the hot one
            self.get = MethodType(_cached_get, self)  # type: ignore[method-assign]
            self.put = MethodType(_cached_put, self)  # type: ignore[method-assign]
            self.replace = MethodType(_cached_replace, self)  # type: ignore[method-assign]

    def init(self, context: Any) -> None:
        self._read_key = None  # a restore may have written the store since
        super().init(context)

    def _write_down(self, entries: list) -> None:
        self._read_key = None
        wrapped = self.wrapped
        listener = self._flush_listener
        write_changes = getattr(wrapped, "write_changes", None)
        if write_changes is not None and listener is not None:
            # the layer below takes the flush's changes at once (the change-logging layer: one
            # batch to its store, then the changelog records). Through this store nobody can
            # tell: every flushed key is still cached (a read returns its new value either way)
            # except an evicted one, which is written and forwarded first in both orders.
            changed = self._changes(entries)
            if len(changed) == 1:  # one change (an eviction's, mostly): the layer's put, no batch
                key, value, timestamp = changed[0][:3]
                wrapped.put(key, value, timestamp)
            elif changed:
                write_changes(changed)
            else:
                return
            flush_many = getattr(listener, "flush_many", None)
            if flush_many is not None:
                flush_many(changed)  # sets each change's record context itself
            else:
                self.forward_in_contexts(changed, lambda change: listener(change[0], change[1], change[3], change[2]))
            return
        put = wrapped.put
        if listener is None:
            for entry in entries:
                put(entry[0], entry[1], entry[2])
            return

        def write_and_forward(change: tuple) -> None:
            key, value, timestamp, old = change[:4]
            put(key, value, timestamp)
            listener(key, value, old, timestamp)
        self.forward_in_contexts(self._changes(entries), write_and_forward)

    def _changes(self, entries: list) -> list:
        """The entries to write down, each with the store's old value (read now where the cache
        did not know it), without deletes of keys the store does not hold. The keys of one
        flush are distinct, so reading every old value first reads what entry-by-entry would."""
        get = self._reader.get
        unknown = UNKNOWN
        changed = []
        for entry in entries:
            key, value, timestamp, old, metadata, headers = entry
            if old is unknown:
                old = get(key)
                entry = (key, value, timestamp, old, metadata, headers)
            if value is None and old is None:
                continue
            changed.append(entry)
        return changed

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
            entry = lookup(named, key)
            if entry is not None:
                return entry.value
            value = self._reader.get(key)
            if threading.get_ident() != self._owner_thread:
                # another thread's read (an interactive query's) caches nothing: as Kafka's
                # getInternal, it must not evict and flush (write down, forward) the owner's entries
                return value
            if value is not None:
                named.put_clean(key, value)
            # after put_clean: a flush it caused wrote other keys (this one was not cached)
            self._read_key, self._read_value = key, value
            return value
        finally:
            lock.release()

    def _merged(self, lower, upper_exclusive, store_iter: KeyValueIterator, reverse: bool) -> KeyValueIterator:
        # the cached entries in the range, each read (made MRU) as the merge reaches it (Kafka)
        cached = visit(self._cache, self._namespace, ((lower, upper_exclusive),), reverse)
        return KeyValueIterator(merge_sorted(cached, store_iter, reverse), self.name)

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
            old = self._read_value if key == self._read_key else UNKNOWN
            self._read_key = None
            named.put_dirty(key, value, timestamp, old)
        finally:
            lock.release()

    def replace(self, key: bytes, value: Optional[bytes], timestamp: Optional[int] = None) -> Optional[bytes]:
        """`get(key)` then `put(key, value, timestamp)`, returning the value read: a table
        source's read before its write (its effects here are the cache's: a hit, or a miss with
        its read-through entry and any eviction that causes), in one call holding the lock once."""
        cache = self._check()
        with cache.lock:
            old = self.get(key)
            self.put(key, value, timestamp)
        return old

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

    def update_many(  # noqa: C901 - the Python form of a per-record loop, in one frame on purpose
            self, keys: Sequence[bytes], fn: Callable[[Optional[bytes]], Optional[bytes]],
            timestamps: Sequence[int], clock: Any = None, metadatas: Optional[Sequence[Any]] = None,
            increments: Optional[bytes] = None) -> Optional[bytes]:
        """`update(key, fn, timestamp)` for each key (bytes) and timestamp in order, holding the
        cache lock once; returns the last value written. A run of a count's records in one call.

        `clock`: the owner of the caller's stream time (the task engine): this store reads
        `clock.stream_time` and asks `clock.advance_stream_time(t)` to raise it to each record's
        timestamp before anything that could read it runs for that record (`fn`, a read-through,
        an eviction forwarding downstream) and at the end; it never sets it. If an update raises, the exception carries
        `updates_done`, the number of keys fully updated before it. A `fn` with the attribute
        `int64_increment` set says it adds one to a big-endian 8-byte signed integer: that is
        done here for cached values (no call; by state.cache._cache.increment_run in C when it is
        built, for runs of such keys), `fn` still deciding every other case.

        A `fn` with the attribute `timestamped` set writes a timestamped store's value (8-byte
        timestamp + value) and picks the timestamp written with it: it is called
        `fn(old, timestamp) -> (value, timestamp)` (an aggregation stamps its result with
        max(record, previous result) timestamps, KIP-258). With `int64_increment` too, the
        hot case is a 16-byte value whose int64 part gets one added and whose timestamp part
        becomes max(its own, the record's), the entry's timestamp the same.

        `increments` (bytes, a signed byte a key, with an `int64_increment` fn: a table count's
        +1, -1 or 0 by its record's Change) adds increments[i] to key i's int64 instead of one,
        and `fn` gets it as a last argument: `fn(old, timestamp, increments[i])` (timestamped)
        or `fn(old, increments[i])`.

        The record context of each write is the context's (the named cache's, see
        state.cache.thread_cache), or with `metadatas` metadatas[i] (a bulk run's consumed
        message, standing for its metadata and headers): set on the context while the key is
        updated. `metadatas` are a keyed run's messages: of one topic, none with headers
        (eddy's keyed_run takes no other), so every write of the run costs the cache the same
        record context size, the first message's."""
        increment = getattr(fn, "int64_increment", False)
        stamped = getattr(fn, "timestamped", False)
        named = self._named
        if named is None or not self._probe.is_open:
            raise StoreClosedError(f"state store {self.name!r} is not open")
        self._read_key = None
        cache = self._cache
        lock = cache.lock
        entries = named.entries
        value = None
        hits = 0
        i = 0
        n = min(len(keys), len(timestamps))
        if increments is not None:
            if not increment or type(increments) is not bytes:
                raise TypeError("update_many: increments must be bytes and fn must have int64_increment")
            n = min(n, len(increments))
        context = named.context
        if context is None:  # writes keep no record context
            metadatas = None
        # An increment's cached int64 values are updated by C, the run stopping at the first
        # other key (a miss, another value, an overflow): the loop body below does that one.
        run = self._increment_run if (increment and type(keys) in _LIST_OR_TUPLE
                                      and type(timestamps) in _LIST_OR_TUPLE
                                      and (metadatas is None or type(metadatas) is list)) else None
        if metadatas is not None:
            written_in = context.metadata
        # what each write costs besides its key and value (one for the run: see the docstring)
        entry_cost = run_entry_cost(named, metadatas)
        stamped_flag = bool(stamped)
        add, extra = 1, ()  # key i's increment, and fn's last argument when increments are given
        # the run's stream time so far, handed to the clock before anything that could look
        # at it runs (fn, an eviction, a read-through) and at the end
        newest = clock.stream_time if clock is not None else 0
        lock.acquire()
        try:
            while i < n:
                # (over the budget, as Kafka's accounting can leave it, every write evicts: not the
                # C loop's case)
                if run is not None and cache._total_bytes <= cache.max_bytes:
                    stop, run_hits, newest, run_value, error = run(entries, named.dirty, keys, timestamps, i, newest,
                                                                   stamped_flag, context, metadatas, increments,
                                                                   entry_cost)
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
                if metadatas is not None:
                    context.metadata = metadatas[i]
                # read per key: a flush (an eviction's, or one done by fn) replaces the dict
                dirty = named.dirty
                if timestamp > newest:
                    newest = timestamp
                if increments is not None:
                    add = increments[i]
                    if add > 127:  # a signed byte
                        add -= 256
                    extra = (add,)
                entry = entries.get(key)
                if entry is not None:
                    # get: a hit; put: the entry rewritten in place and made MRU (the cache holds it,
                    # so the zero-size bypass below cannot apply)
                    hits += 1
                    packed = False
                    if increment:
                        try:
                            if stamped:
                                stamp, count = _unpack_stamped(entry.value)
                                stamp = stamp if stamp > timestamp else timestamp
                                value = _pack_stamped(stamp, count + add)
                                timestamp = stamp
                            else:
                                value = _pack_int64(_unpack_int64(entry.value)[0] + add)
                            packed = True
                        except Exception:  # None, another size, overflow: fn decides
                            if clock is not None:
                                clock.advance_stream_time(newest)
                            if stamped:
                                value, timestamp = fn(entry.value, timestamp, *extra)
                            else:
                                value = fn(entry.value, *extra)
                    else:
                        if clock is not None:
                            clock.advance_stream_time(newest)
                        if stamped:
                            value, timestamp = fn(entry.value, timestamp)
                        else:
                            value = fn(entry.value)
                    if not packed and value is not None and type(value) is not bytes:
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
                    entry.metadata, entry.headers = record_context_of(named)
                    entries.move_to_end(key)
                    # the size with this write's record context (a count's is mostly unchanged)
                    delta = len(key) + (len(value) if value is not None else 0) + entry_cost - entry.size
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
                    value = self._update_missed(named, cache, key, fn, timestamp, stamped, extra)
                i += 1
            return value
        except BaseException as exc:
            exc.updates_done = i  # type: ignore[attr-defined]
            raise
        finally:
            named.hits += hits
            if metadatas is not None:
                context.metadata = written_in
            if clock is not None and newest > clock.stream_time:
                clock.advance_stream_time(newest)
            lock.release()

    def _update_missed(self, named: NamedCache, cache: ThreadCache, key: bytes,
                       fn: Callable[..., Any], timestamp: int, stamped: bool, extra: tuple = ()) -> Optional[bytes]:
        """update() of a key the cache does not hold (the lock is held): read through, write dirty;
        `extra`: fn's last arguments (update_many's increment)."""
        named.misses += 1
        old = self._reader.get(key)
        if old is not None:
            named.put_clean(key, old)  # then dirtied below (it keeps `old`), unless evicted at once
        if stamped:
            value, timestamp = fn(old, timestamp, *extra)
        else:
            value = fn(old, *extra)
        if value is not None and type(value) is not bytes:
            check_value(self.name, value)
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


if _cache_c is not None:
    _cache_c.set_store_definitions(CachingKeyValueStore.get, CachingKeyValueStore.put,
                                   CachingKeyValueStore.replace)
