"""The caching window store: dedups updates of a (key, window) between commits."""

from __future__ import annotations

import struct
from typing import Any, Callable, Optional, Sequence

from state.cache.base import CachingStore
from state.cache.kv import _LIST_OR_TUPLE, _increment_run
from state.cache.merge import merge_sorted_by
from state.cache.range_reads import WINDOW_TIME_AT, cache_interval, next_segment_of, time_first_ranges, visit, window_ranges
from state.cache.thread_cache import SEGMENT_ID_BYTES, UNKNOWN, ThreadCache, record_context_of, run_entry_cost
from state.errors import InvalidStoreArgumentError
from state.store import KeyValueIterator, check_key, check_value
from state.window import MAX_TIMESTAMP, Window, Windowed, check_timestamp, decode_window_changelog_key, window_changelog_key

# the schema byte before a time-ordered store's keys (Kafka's PrefixedWindowKeySchemas)
TIME_FIRST_PREFIX_BYTES = 1
# a window cache key's start (WINDOW_TIME_AT bytes from its end)
_START = struct.Struct(">q")
# Windowed(key, Window(start, end)) per flushed window without NamedTuple's Python-level __new__
_new_tuple = tuple.__new__


class CachingWindowStore(CachingStore):
    """Caching for window stores: dedups updates of a (key, window) between commits.

    Cache keys are the window changelog keys (sequence number 0). With `retain_duplicates` every
    put must be kept, so writes go straight through and `set_flush_listener` returns False.
    The flush listener receives `(Windowed(key, Window(start, end)), new, old, timestamp)`.
    Reads give what is cached whatever the retention of the store below, which filters only its
    own windows (Kafka's caching window stores: a window still cached is still read).
    """

    cache_key_prefix = SEGMENT_ID_BYTES  # counted in each entry's size (see state.cache.thread_cache)
    # update_many's C loop for a count's cached windows (the KV store's), None without
    # state.cache._cache (a store's own attribute set to None makes it use the Python loop)
    _increment_run: Optional[Callable] = _increment_run

    def __init__(self, wrapped, cache: Optional[ThreadCache] = None) -> None:
        super().__init__(wrapped, cache)
        self.window_size_ms = wrapped.window_size_ms
        self.retain_duplicates = wrapped.retain_duplicates
        # the store below iterates by window start, then key (state.window.TimeOrderedWindowStore)
        self._time_ordered = bool(getattr(self._reader, "time_ordered", False))
        # Kafka's TimeOrderedCachingWindowStore (over its RocksDB time-ordered store only; in
        # memory the DSL's store is the plain one) keys its cache by the time-first store key
        self._time_first = self._time_ordered and self._reader.persistent
        if self._time_first:  # whose schema (PrefixedWindowKeySchemas) starts with a one-byte prefix
            self.cache_key_prefix = SEGMENT_ID_BYTES + TIME_FIRST_PREFIX_BYTES
        # how range reads find this cache's keys in Kafka's order (ThreadCache.keys_in_range)
        self._segmented = (WINDOW_TIME_AT, cache_interval(wrapped)) + ((True,) if self._time_first else ())

    def set_flush_listener(self, listener) -> bool:
        if self.retain_duplicates:
            return False
        return super().set_flush_listener(listener)

    def _write_down(self, entries: list) -> None:
        listener = self._flush_listener
        changes = []
        for entry in entries:
            key, start, _ = decode_window_changelog_key(entry[0])
            changes.append((key, entry[1], start, entry[2]))
        if listener is None:
            self._write_changes(changes, self.wrapped.put)
            return
        # the old values first (a flush's windows are distinct, so this reads what reading
        # before each write would; the cache knows most of them), then the writes, then the
        # forwards (as the KV store)
        fetch = self._reader.fetch
        unknown = UNKNOWN
        olds = [fetch(change[0], change[2]) if entry[3] is unknown else entry[3]
                for change, entry in zip(changes, entries)]
        # (key, value, window start, timestamp, metadata, headers, old) of each change kept
        kept = [change + entry[4:6] + (old,) for change, old, entry in zip(changes, olds, entries)
                if change[1] is not None or old is not None]
        self._write_changes([change[:4] for change in kept], self.wrapped.put)
        size = self.window_size_ms

        def forward(change: tuple) -> None:
            key, value, start, timestamp = change[:4]
            listener(_new_tuple(Windowed, (key, _new_tuple(Window, (start, start + size)))), value, change[6],
                     timestamp)
        self.forward_in_contexts(kept, forward)

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

    def update_many(  # noqa: C901 - the Python form of a per-record loop, in one frame on purpose
            self, keys: Sequence[bytes], starts: Sequence[int], fn: Callable[[Optional[bytes], int], tuple],
            timestamps: Sequence[int], clock: Any = None, metadatas: Optional[Sequence[Any]] = None) -> None:
        """A windowed aggregation's read-modify-write for a run of records: for each key (bytes),
        window start and record timestamp in order, `fn(old, timestamp) -> (new, entry
        timestamp)` over the window's stored bytes (old: None when absent, or expired below and
        not cached, as `fetch(key, start)` reads it) is written as `put(key, new, start, entry
        timestamp)` would: a read that misses is read through (kept clean), then the dirty write,
        in the context's record context, or with `metadatas` in metadatas[i] (a bulk run's
        consumed message, standing for its metadata and headers; a keyed run's, as
        CachingKeyValueStore.update_many says). The cache lock is held once.
        `clock`: the owner of the caller's stream time, raised to each record's timestamp before
        anything that could read it (fn, a read-through, an eviction forwarding downstream) and
        at the end (as CachingKeyValueStore.update_many).

        A `fn` with `int64_increment` and `timestamped` set (a count: CachingKeyValueStore.update_many
        says what they promise) has its cached windows' hot case done without a call, by the
        KV store's C loop (`increment_run`, over the windows' cache keys) where it is built."""
        cache = self._check()
        if self.retain_duplicates:
            raise InvalidStoreArgumentError(f"state store {self.name!r}: update_many needs a store without "
                                            "duplicates (every put of one retaining them is kept)")
        named = self._named
        entries = named.entries
        put_dirty = named.put_dirty
        reader = self._reader
        fetch, actual_from = reader.fetch, reader.actual_from
        suffixes: dict[int, bytes] = {}
        newest = clock.stream_time if clock is not None else 0
        context = named.context
        if context is None:
            metadatas = None
        written_in = context.metadata if metadatas is not None else None
        entry_cost = run_entry_cost(named, metadatas)  # besides the cache key's and value's bytes
        run = self._count_loop(fn, timestamps, metadatas)
        # the cache keys of the leading records the C loop may take (none without it)
        cache_keys = self._cache_keys(keys, starts, suffixes) if run is not None else ()
        lock = cache.lock
        lock.acquire()
        try:
            # the first live window start, and the newest window start the store below holds (a
            # window starting later is not there: no read), move only when that store is
            # written: on evictions
            live_from, evictions = actual_from(0), named.evictions
            newest_stored = getattr(reader, "observed_stream_time", None)
            i, n = 0, len(keys)
            while i < n:
                # cached windows' counts, up to the first other case (not over the budget: see
                # CachingKeyValueStore.update_many)
                if i < len(cache_keys) and cache._total_bytes <= cache.max_bytes:
                    i, run_hits, newest, _, error = run(entries, named.dirty, cache_keys, timestamps, i, newest,
                                                        True, context, metadatas, None, entry_cost)
                    named.hits += run_hits
                    if error is not None:
                        raise error
                    if i >= n:
                        break
                key, start, timestamp = keys[i], starts[i], timestamps[i]
                if timestamp > newest:
                    newest = timestamp
                if i < len(cache_keys):  # made and checked already, for the C loop
                    cache_key = cache_keys[i]
                else:
                    suffix = suffixes.get(start)
                    if suffix is None:
                        suffix = suffixes[start] = self._suffix(start)
                    if type(key) is not bytes:
                        check_key(self.name, key)
                    cache_key = key + suffix
                read = UNKNOWN
                entry = entries.get(cache_key)  # cached: whatever the retention below (Kafka)
                if entry is not None:
                    named.hits += 1
                    old = entry.value
                else:
                    named.misses += 1
                    if start < live_from:
                        old = None  # expired: fetch reads nothing there
                    elif newest_stored is not None and start > newest_stored:
                        old = read = None
                    else:
                        old = read = fetch(key, start)
                if clock is not None and newest > clock.stream_time:
                    clock.advance_stream_time(newest)  # before fn and what the put may evict and forward
                new, entry_timestamp = fn(old, timestamp)
                if new is not None and type(new) is not bytes:
                    check_value(self.name, new)
                if (entry is not None and old is not None and new is not None
                        and entry.size == len(cache_key) + len(new) + entry_cost
                        and cache._total_bytes <= cache.max_bytes):
                    # NamedCache.put_dirty for a cached entry rewritten at the same size (a count):
                    # no size change, so nothing to evict (inlined, as the KV store's update_many)
                    dirty = named.dirty  # read per key: a flush replaces the dict
                    if entry.dirty:
                        del dirty[cache_key]
                    else:
                        entry.old = old  # a clean entry holds the store's value
                        entry.dirty = True
                    dirty[cache_key] = None
                    entry.value = new
                    entry.timestamp = entry_timestamp
                    if metadatas is None:
                        entry.metadata, entry.headers = record_context_of(named)
                    else:  # a consumed message, standing for its headers too (record_context_from)
                        entry.metadata, entry.headers = metadatas[i], ()
                    entries.move_to_end(cache_key)
                    i += 1
                    continue
                if metadatas is not None:  # the write's record context, read by put_dirty
                    context.metadata = metadatas[i]
                put_dirty(cache_key, new, entry_timestamp, read)
                if named.evictions != evictions:
                    live_from, evictions = actual_from(0), named.evictions
                    newest_stored = getattr(reader, "observed_stream_time", None)
                i += 1
        finally:
            if metadatas is not None:
                context.metadata = written_in
            if clock is not None and newest > clock.stream_time:
                clock.advance_stream_time(newest)
            lock.release()

    def _count_loop(self, fn: Callable, timestamps: Sequence[int], metadatas: Optional[Sequence[Any]]
                    ) -> Optional[Callable]:
        """The C loop (`increment_run`) where it takes `fn`'s hot case with these arguments, else None."""
        run = self._increment_run
        if (run is None or not getattr(fn, "int64_increment", False) or not getattr(fn, "timestamped", False)
                or type(timestamps) not in _LIST_OR_TUPLE or (metadatas is not None and type(metadatas) is not list)):
            return None
        return run

    def _suffix(self, start: int) -> bytes:
        """What follows the key in the cache key of window `start`: the cache key is the changelog
        key (key + start + sequence number 0)."""
        return window_changelog_key(b"", check_timestamp(self.name, "window_start_timestamp", start), 0)

    def _cache_keys(self, keys: Sequence[bytes], starts: Sequence[int], suffixes: dict[int, bytes]) -> list:
        """The cache keys of the leading records of a run up to the first whose key is not bytes
        or whose window start is not valid (the per-record loop raises its error there)."""
        out = []
        append = out.append
        try:
            for key, start in zip(keys, starts):
                suffix = suffixes.get(start)
                if suffix is None:
                    suffix = suffixes[start] = self._suffix(start)
                if type(key) is not bytes:
                    break
                append(key + suffix)
        except Exception:  # the per-record loop raises it at that record
            pass
        return out

    def fetch(self, key: bytes, time_from: int, time_to: Optional[int] = None):
        cache = self._check()
        if self.retain_duplicates:
            return self.wrapped.fetch(key, time_from, time_to)
        check_key(self.name, key)
        if time_to is None:
            start = check_timestamp(self.name, "window_start", time_from)
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
        ranges = self._ranges(key, key, time_from, time_to, reverse, True) if time_to >= time_from else ()
        total = len(key) + 12
        stops = self._stops(time_from, time_to, reverse)

        def cached():  # (window start, item or None for a cached delete) of the key's windows
            for ck, v in visit(self._cache, self._namespace, ranges, reverse, self._segmented):
                if stops is not None and stops(ck):
                    break
                if len(ck) == total and ck.startswith(key):
                    start = decode_window_changelog_key(ck)[1]
                    if time_from <= start <= time_to:
                        yield start, ((start, v) if v is not None else None)
        return KeyValueIterator(merge_sorted_by(cached(), store_iter, lambda item: item[0], reverse), self.name)

    def _windows(self, key_from, key_to, time_from, time_to, reverse, store_iter) -> KeyValueIterator:
        if self.retain_duplicates:
            return store_iter
        interval = self.wrapped.segment_interval_ms
        size = self.window_size_ms
        # the store below iterates by (start, key): a time-ordered one, an in-memory one (Kafka's)
        by_start = self._time_ordered or not self.wrapped.persistent
        if by_start:
            def sort_key(key: bytes, start: int) -> tuple:
                return start, key
        else:  # by segment, then the changelog key
            def sort_key(key: bytes, start: int) -> tuple:
                return start // interval, window_changelog_key(key, start, 0)
        visited = visit(self._cache, self._namespace, self._ranges(key_from, key_to, time_from, time_to, reverse),
                        reverse, self._segmented)
        one_key = key_from if key_from is not None and key_from == key_to else None
        one_size = len(key_from) + 12 if one_key is not None else 0
        stops = self._stops(time_from, time_to, reverse)
        # read in Kafka's cache order, merged in the store's: the same when ordered alike (a
        # persistent store's segments, a time-ordered store's starts: a time-first cache or an
        # in-memory one's, led by the start), or for one key (by window start); else sorted
        # once all are read
        lazy = by_start or self.wrapped.persistent or one_key is not None

        def cached():  # (merge position, item or None for a cached delete) of the windows asked for
            last = None
            for ck, v in visited:
                if stops is not None and stops(ck):
                    break
                if one_key is not None and (len(ck) != one_size or not ck.startswith(one_key)):
                    continue  # another key's window (undecoded: sliding windows pass many)
                key, start, _ = decode_window_changelog_key(ck)
                if start < time_from or start > time_to:
                    continue
                if (key_from is not None and key < key_from) or (key_to is not None and key > key_to):
                    continue
                position = sort_key(key, start)
                if lazy:
                    if last is not None and ((position >= last) if reverse else (position <= last)):
                        continue  # read again by a later segment's range (Kafka's open lower bound)
                    last = position
                yield position, ((Windowed(key, Window(start, start + size)), v) if v is not None else None)
        items = cached() if lazy else sorted(cached(), key=lambda c: c[0], reverse=reverse)

        def store_sort_key(item):
            return sort_key(item[0].key, item[0].window.start)

        return KeyValueIterator(merge_sorted_by(items, store_iter, store_sort_key, reverse), self.name)

    def _ranges(self, key_from: Optional[bytes], key_to: Optional[bytes], time_from: int, time_to: int,
                reverse: bool, one_key: bool = False) -> Any:
        """Kafka's cache ranges of a read of keys (None: open) and window starts (state.cache.range_reads)."""
        interval = self._segmented[1]
        next_segment = next_segment_of(self._cache, self._namespace, self._segmented)
        if self._time_first:
            return time_first_ranges(key_from, key_to, time_from, time_to, interval, not reverse, next_segment)
        if key_from is None and key_to is None:  # Kafka's CachingWindowStore.fetchAll, all: the whole cache
            return ((None, None),)
        return window_ranges(key_from, key_to, time_from, time_to, interval, self.wrapped.persistent, not reverse,
                             one_key, next_segment)

    def _stops(self, time_from: int, time_to: int, reverse: bool) -> Optional[Callable[[bytes], bool]]:
        """Where a time-first cache read stops (Kafka's TimeFirstWindowKeySchema.hasNextCondition:
        at the first window starting past the time bounds, read all the same), None elsewhere."""
        if not self._time_first:
            return None
        if reverse:
            return lambda cache_key: _START.unpack_from(cache_key, len(cache_key) - WINDOW_TIME_AT)[0] < time_from
        return lambda cache_key: _START.unpack_from(cache_key, len(cache_key) - WINDOW_TIME_AT)[0] > time_to

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
