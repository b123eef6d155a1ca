"""Kafka's range reads of a record cache: which cached entries a caching store's range read
visits, in which order, and the visit itself (Kafka's ThreadCache.range/reverseRange/all and
MemoryLRUCacheBytesIterator).

Kafka takes a snapshot of the cache keys in the range when the cache iterator is made, then
reads each key when the iteration reaches it with NamedCache.get: the entry becomes the most
recently used, and a key evicted meanwhile is skipped. So a range read reorders the LRU (what a
later write evicts depends on it), and it visits every cached entry in the range, also those the
store's filter (key, time) then drops.

The range is over Kafka's cache keys. A key-value store's are its keys. A window or session
store's are the 8-byte big-endian segment id followed by the store key (SegmentedCacheFunction),
the segment id being the window start (a session's end) divided by the cache's segment interval:
the store's for a persistent store, 1 for an in-memory one. Eddy's window and session cache keys
are the store keys alone: their ranges here are over Kafka's cache keys all the same (each
entry's made from its key by ThreadCache.keys_in_range: `WINDOW_TIME_AT`, `SESSION_TIME_AT`).

A persistent window or session store reads its cache segment by segment (Kafka's
CacheIteratorWrapper): one range per segment, each snapshotted when the iteration reaches it.
A time-ordered RocksDB window store's cache (Kafka's TimeOrderedCachingWindowStore) keys its
entries time first (`time_first_ranges`).
"""

from __future__ import annotations

import struct
from typing import Any, Callable, Iterable, Iterator, Optional

from state.cache.thread_cache import in_segment, lookup, segment_id

MAX_LONG = (1 << 63) - 1
MAX_INT = (1 << 31) - 1
_I64 = struct.Struct(">q")
_I32 = struct.Struct(">i")

# (lower, upper_exclusive) over Kafka's cache keys; None: open
Range = tuple[Optional[bytes], Optional[bytes]]
# where a window (session) store key holds the timestamp its segment id is of: the 8 bytes
# starting this many bytes from its end (the window start; the session end), and the cache's
# segment interval with it (and True for time-first keys): ThreadCache.keys_in_range's `segmented`
WINDOW_TIME_AT, SESSION_TIME_AT = 12, 16
# next_segment(after, forward): the next segment id beyond `after` holding a cached entry, or None
NextSegment = Callable[[int, bool], Optional[int]]
_STEPPED = 8


def visit(cache: Any, namespace: str, ranges: Iterable[Range], reverse: bool = False,
          segmented: Optional[tuple] = None) -> Iterator[tuple[bytes, Optional[bytes]]]:
    """(cache key, value) of each entry in each range in turn, in Kafka's cache-key order
    (descending with `reverse`), each read (made MRU) when the iteration reaches it;
    `segmented`: (time at, segment interval) of a window or session store's keys (see
    ThreadCache.keys_in_range). `ranges` is iterated lazily."""
    lock = cache.lock
    for lower, upper in ranges:
        keys = cache.keys_in_range(namespace, lower, upper, segmented)
        if not keys:
            continue
        if reverse:
            keys.reverse()
        named = cache.named_cache(namespace)
        for key in keys:
            lock.acquire()
            try:
                entry = lookup(named, key)
                value = entry.value if entry is not None else None
            finally:
                lock.release()
            if entry is not None:  # evicted since the snapshot: skipped (Kafka's internalNext)
                yield key, value


def inclusive(bound: bytes) -> bytes:
    """The exclusive upper bound equal to an inclusive one (the next key in byte order)."""
    return bound + b"\x00"


def ordered_upper_range(key: bytes, max_suffix: bytes) -> bytes:
    """Kafka's OrderedBytes.upperRange: the key's bytes up to the first (after the first) below
    the suffix's first byte (all of them when that byte is 0), then the suffix."""
    first = max_suffix[0]
    if first == 0:
        return key + max_suffix
    i = 1
    while i < len(key) and key[i] >= first:
        i += 1
    return key[:i] + max_suffix


def _window_key(key: bytes, start: int, seqnum: int) -> bytes:
    return key + _I64.pack(start) + _I32.pack(seqnum)


def _session_key(key: bytes, start: int, end: int) -> bytes:
    return key + _I64.pack(end) + _I64.pack(start)


def _segmented(binary: bytes, timestamp: int, interval: int) -> bytes:
    """Kafka's SegmentedCacheFunction.cacheKey: the segment id of `timestamp`, then the key."""
    return in_segment(segment_id(timestamp, interval), binary)


def cache_interval(store: Any) -> int:
    """The segment interval of a window or session store's Kafka cache keys: the store's, an
    in-memory store's 1."""
    return store.segment_interval_ms if store.persistent else 1


def next_segment_of(cache: Any, namespace: str, segmented: tuple) -> NextSegment:
    """`next_segment` (see `_segments`) over the named cache `namespace` of keys `segmented` so."""
    return lambda after, forward: cache.next_segment(namespace, segmented, after, forward)


def window_ranges(key_from: Optional[bytes], key_to: Optional[bytes], time_from: int, time_to: int,
                  interval: int, persistent: bool, forward: bool, one_key: bool = False,
                  next_segment: Optional[NextSegment] = None) -> Iterator[Range]:
    """The ranges of Kafka's CachingWindowStore.fetch / backwardFetch of a key range, or with
    `one_key` of one key (`key_from`, the API taking one key: an in-memory store's range then
    spans that key's fixed-size keys; the key-range API's spans Kafka's lowerRange/upperRange
    even for equal keys). `interval`: the cache's segment interval (see the module doc);
    `next_segment`: see `_segments`."""
    if not persistent:
        if one_key:
            low = max(0, time_from)
            yield (_segmented(_window_key(key_from, low, 0), low, interval),
                   inclusive(_segmented(_window_key(key_from, time_to, MAX_INT), time_to, interval)))
            return
        lower = None if key_from is None else in_segment(0, key_from + bytes(12))
        upper = None
        if key_to is not None:
            upper = inclusive(_segmented(ordered_upper_range(key_to, _I64.pack(time_to) + _I32.pack(MAX_INT)),
                                         time_to, interval))
        yield lower, upper
        return
    fixed = key_from is not None and key_from == key_to
    for segment, low, high in _segment_times(time_from, time_to, interval, forward, next_segment):
        if fixed:
            lower = _segmented(_window_key(key_from, max(0, low), 0), max(0, low), interval)
            upper = inclusive(_segmented(_window_key(key_to, high, MAX_INT), high, interval))
        else:
            lower = None if key_from is None else in_segment(segment, key_from + bytes(12))
            upper = None if key_to is None else inclusive(
                in_segment(segment, ordered_upper_range(key_to, _I64.pack(time_to) + _I32.pack(MAX_INT))))
        yield lower, upper


def _segment_times(time_from: int, time_to: int, interval: int, forward: bool,
                   next_segment: Optional[NextSegment]) -> Iterator[tuple[int, int, int]]:
    """(segment id, first time, last time) of each segment a window store's CacheIteratorWrapper
    reads (Kafka's CachingWindowStore and TimeOrderedCachingWindowStore alike): the first from
    `time_from` forward (to `time_to` backward), the others whole, none past `time_to`. Kafka's
    last segment is also bounded by the largest window start put, beyond which no entry is
    cached: the same reads."""
    if forward:
        first, last = segment_id(time_from, interval), segment_id(time_to, interval)
    else:
        first, last = segment_id(time_to, interval), segment_id(time_from, interval)
    for segment in _segments(first, last, forward, next_segment):
        begin = segment * interval
        low, high = begin, min(time_to, begin + interval - 1)
        if segment == first:
            low, high = (time_from, high) if forward else (begin, time_to)
        yield segment, low, high


def _segments(first: int, last: int, forward: bool, next_segment: Optional[NextSegment]) -> Iterator[int]:
    """The segment ids a CacheIteratorWrapper reads, from `first` towards `last` (inclusive;
    `first` always). Kafka steps through every id; `next_segment(after, forward)`, the next id
    beyond `after` that holds a cached entry now (None: none), skips the empty ones, which read
    nothing: the same reads (Kafka steps through them within one hasNext, no write between)
    without a scan of the cache per id of a long time range. Within `_STEPPED` ids of the
    last, a step is one id (cheaper than the search: a read of the DSL's spans a few)."""
    segment = first
    while True:
        yield segment
        if next_segment is None or abs(last - segment) <= _STEPPED:
            segment += 1 if forward else -1
        else:
            following = next_segment(segment, forward)
            if following is None:
                return
            segment = following
        if (segment > last) if forward else (segment < last):
            return


def time_first_ranges(key_from: Optional[bytes], key_to: Optional[bytes], time_from: int, time_to: int,
                      interval: int, forward: bool, next_segment: Optional[NextSegment] = None) -> Iterator[Range]:
    """The ranges of Kafka's TimeOrderedCachingWindowStore reads (fetch, fetchAll, all: its
    CacheIteratorWrapper without an index), over time-first cache keys (segment id, window start,
    key, sequence number; see ThreadCache.keys_in_range): segment by segment, one key's (equal
    bounds) between its fixed-size keys at the segment's times, a key range from the lower key at
    the segment's first time to the upper key at `time_to` (no upper key: the segment's end).
    These pass other keys' windows, and their last segment windows beyond `time_to`: the reader
    stops at the first window past its time bounds (Kafka's hasNextCondition), having read it.
    """
    fixed = key_from is not None and key_from == key_to
    for segment, low, high in _segment_times(time_from, time_to, interval, forward, next_segment):
        if fixed:
            lower = in_segment(segment, _I64.pack(max(0, low)) + key_from + _I32.pack(0))
            upper = inclusive(in_segment(segment, _I64.pack(high) + key_to + _I32.pack(MAX_INT)))
        else:
            lower = in_segment(segment, _I64.pack(low) + (key_from or b""))
            upper = in_segment(segment + 1, b"") if key_to is None else inclusive(
                in_segment(segment, _I64.pack(time_to) + b"\xff" * len(key_to) + _I32.pack(MAX_INT)))
        yield lower, upper


def session_ranges(key: bytes, earliest_end: int, latest_start: int, interval: int, persistent: bool,
                   forward: bool, max_observed: int, next_segment: Optional[NextSegment] = None) -> Iterator[Range]:
    """The ranges of Kafka's CachingSessionStore.findSessions / backwardFindSessions of one key
    (`max_observed`: the largest session end put into the store, -1 before any: Kafka's
    maxObservedTimestamp, which bounds a backward read's first segment; `next_segment`: see
    `_segments`)."""
    if not persistent:
        low = max(0, earliest_end)
        yield (_segmented(_session_key(key, 0, low), low, interval),
               inclusive(_segmented(_session_key(key, latest_start, MAX_LONG), MAX_LONG, interval)))
        return
    if forward:
        first, last = segment_id(earliest_end, interval), segment_id(max_observed, interval)
    else:
        first, last = segment_id(max_observed, interval), segment_id(earliest_end, interval)
    for segment in _segments(first, last, forward, next_segment):
        low, high = segment * interval, segment * interval + interval - 1
        if segment == first:
            low, high = (earliest_end, high) if forward else (low, min(latest_start, max_observed))
        lower = _segmented(_session_key(key, 0, max(0, low)), max(0, low), interval)
        upper = inclusive(_segmented(_session_key(key, min(latest_start, high), high), high, interval))
        yield lower, upper


def session_key_range(key_from: Optional[bytes], key_to: Optional[bytes], latest_start: int,
                      interval: int) -> Range:
    """The range of Kafka's CachingSessionStore.findSessions of a key range (one cache range,
    persistent store or not)."""
    lower = None if key_from is None else in_segment(0, key_from + bytes(16))
    upper = None
    if key_to is not None:
        upper = inclusive(in_segment(segment_id(MAX_LONG, interval),
                                      ordered_upper_range(key_to, _I64.pack(MAX_LONG) + _I64.pack(latest_start))))
    return lower, upper
