"""A caching store's range reads reorder the cache's LRU as Kafka's do: each cached entry in
Kafka's cache-key range is read (made the most recently used) when the iteration reaches it,
entries of other keys or times in that range too (Kafka's MemoryLRUCacheBytesIterator reads them
before the store's filter drops them). The expected LRU orders below are worked out by hand from
Kafka 4.1's ranges (state.cache.range_reads names them): a key-value store's are its keys; a
window or session store's cache keys lead with the segment id (an in-memory store's interval is
1, so the window start or session end), and a persistent store reads segment by segment."""

import random

import pytest

from state.cache import CachingKeyValueStore, CachingSessionStore, CachingWindowStore, ThreadCache
from state.cache.range_reads import (MAX_INT, MAX_LONG, inclusive, ordered_upper_range, segment_id, time_first_ranges,
                                     window_ranges)
from state.cache.thread_cache import RangeIndex, in_segment
from state.memory_kv import InMemoryKeyValueStore
from state.session import InMemorySessionStore, RocksDBSessionStore, session_changelog_key
from state.window import InMemoryWindowStore, RocksDBWindowStore, TimeOrderedWindowStore, window_changelog_key

from recording_context import RecordingContext

MIN = 60_000


def _lru(store) -> list:
    """The named cache's keys, least recently used first."""
    return list(store._named.entries)


def _kv(tmp_path):
    store = CachingKeyValueStore(InMemoryKeyValueStore("kv"), ThreadCache(1_000_000))
    store.init(RecordingContext(tmp_path / "0_0"))
    for key in (b"a", b"b", b"c", b"d"):
        store.put(key, key.upper(), 1)
    return store


def test_a_key_value_range_makes_its_entries_most_recent_in_key_order(tmp_path):
    store = _kv(tmp_path)
    with store.range(b"b", b"c") as it:
        assert list(it) == [(b"b", b"B"), (b"c", b"C")]
    assert _lru(store) == [b"a", b"d", b"b", b"c"]
    with store.reverse_range(b"a", b"c") as it:
        assert [k for k, _ in it] == [b"c", b"b", b"a"]
    assert _lru(store) == [b"d", b"c", b"b", b"a"]
    with store.prefix_scan(b"d") as it:
        assert list(it) == [(b"d", b"D")]
    assert _lru(store) == [b"c", b"b", b"a", b"d"]
    store.close()


def test_a_key_value_range_reads_each_entry_when_the_iteration_reaches_it(tmp_path):
    store = _kv(tmp_path)
    with store.all() as it:
        assert next(it) == (b"a", b"A")
        assert _lru(store) == [b"b", b"c", b"d", b"a"]  # b, c, d not reached yet
        store._cache.put(store._namespace, b"c", None, dirty=True, timestamp=2)  # a delete meanwhile
        assert _lru(store) == [b"b", b"d", b"a", b"c"]
        assert [k for k, _ in it] == [b"b", b"d"]  # the delete hides c, read when reached all the same
    assert _lru(store) == [b"a", b"b", b"c", b"d"]
    store.close()


def test_a_key_evicted_during_the_iteration_is_skipped_not_read_back(tmp_path):
    store = _kv(tmp_path)
    with store.all() as it:
        assert next(it)[0] == b"a"
        store._named.evict_eldest()  # b: written to the store below, no longer cached
        # nor in the store's iterator, made before (a RocksDB iterator's snapshot, as Kafka's)
        assert [k for k, _ in it] == [b"c", b"d"]
    assert b"b" not in store._named.entries
    assert _lru(store) == [b"a", b"c", b"d"]
    store.close()


@pytest.mark.parametrize("seed", range(3))
def test_key_value_range_reads_see_every_write_after_the_index_is_made(tmp_path, seed):
    """A key-value store's range reads find their keys in the range index from the first one on;
    every way a key enters the cache afterwards (put, replace, update_many, put_all,
    put_if_absent, delete, a get's read-through: the C paths and the Python ones) puts it in the
    index. Against a dict model, with a cache small enough to evict."""
    rng = random.Random(seed)
    store = CachingKeyValueStore(InMemoryKeyValueStore("kv"), ThreadCache(900))
    store.init(RecordingContext(tmp_path / "0_0"))
    store.set_flush_listener(lambda *change: None)
    model: dict[bytes, bytes] = {}
    with store.all() as it:  # the first range read makes the index
        assert list(it) == []
    assert store._named.range_index is not None

    def key():
        return bytes([rng.choice(b"ab\xff")]) + b"%d" % rng.randrange(30)

    for step in range(1500):
        k, v, r = key(), b"v%d" % step, rng.random()
        if r < 0.25:
            store.put(k, v, step)
            model[k] = v
        elif r < 0.4:
            assert store.replace(k, v, step) == model.get(k)
            model[k] = v
        elif r < 0.5:
            store.update_many([k], lambda old, v=v: v, [step])
            model[k] = v
        elif r < 0.6:
            other = key()
            store.put_all([(k, v), (other, None)], step)
            model[k] = v
            model.pop(other, None)
        elif r < 0.65:
            assert store.put_if_absent(k, v, step) == model.get(k)
            model.setdefault(k, v)
        elif r < 0.75:
            assert store.delete(k, step) == model.pop(k, None)
        else:
            assert store.get(k) == model.get(k)
        low, high = sorted((key(), key()))
        prefix = key()[:rng.choice((1, 2))]
        with store.range(low, high) as it:
            assert list(it) == sorted((k, v) for k, v in model.items() if low <= k <= high)
        with store.prefix_scan(prefix) as it:
            assert list(it) == sorted((k, v) for k, v in model.items() if k.startswith(prefix))
    assert store._named.evictions > 0
    store.close()


def _sessions(tmp_path, persistent):
    cls = RocksDBSessionStore if persistent else InMemorySessionStore
    store = CachingSessionStore(cls("s", retention_ms=10 * MIN, segment_interval_ms=MIN), ThreadCache(1_000_000))
    store.init(RecordingContext(tmp_path / "0_0"))
    # (key, start, end), written in this order
    for key, start, end in ((b"k", 100, 200), (b"a", 50, 150), (b"z", 300, 400), (b"k", 500, 600),
                            (b"b", 90, 90), (b"k", 70_000, 70_000)):
        store.put(key, start, end, b"v")
    return store


def _session(key, start, end):
    return session_changelog_key(key, start, end)


def test_an_in_memory_find_sessions_reads_every_key_ending_from_the_earliest_end(tmp_path):
    """Cache keys (end, key, end, start): the range from (150, k, 150, 0) to (max, k, max, 650)
    holds every session ending after 150 (a's at 150 sorts before k's bound), in end order."""
    store = _sessions(tmp_path, persistent=False)
    with store.find_sessions(b"k", 150, 650) as it:
        assert [(w.key, w.window.start, w.window.end) for w, _ in it] == [(b"k", 100, 200), (b"k", 500, 600)]
    assert _lru(store) == [_session(b"a", 50, 150), _session(b"b", 90, 90), _session(b"k", 100, 200),
                           _session(b"z", 300, 400), _session(b"k", 500, 600), _session(b"k", 70_000, 70_000)]
    store.close()


@pytest.mark.parametrize("read, bounds, found, read_last", [
    # Segment 0 from (0, k, 150, 0) to (0, k, 59_999, 650), then segment 1 from (1, k, 60_000, 0)
    # to (1, k, 119_999, 650): k's sessions only, the one starting after 650 too (read, then
    # dropped by the filter)
    ("find_sessions", (150, 650), [(100, 200), (500, 600)], [(100, 200), (500, 600), (70_000, 70_000)]),
    # backward from the segment of the largest end put (70,000: segment 1), its first range
    # ending at min(latest start, 70,000) = 65,000: k's session [70,000] is not read; then
    # segment 0, newest first
    ("backward_find_sessions", (0, 65_000), [(500, 600), (100, 200)], [(70_000, 70_000), (500, 600), (100, 200)]),
])
def test_a_persistent_find_reads_the_keys_sessions_segment_by_segment(tmp_path, read, bounds, found, read_last):
    store = _sessions(tmp_path, persistent=True)
    with getattr(store, read)(b"k", *bounds) as it:
        assert [(w.window.start, w.window.end) for w, _ in it] == found
    assert _lru(store) == [_session(b"a", 50, 150), _session(b"z", 300, 400), _session(b"b", 90, 90)] + [
        _session(b"k", start, end) for start, end in read_last]
    store.close()


def _windows(tmp_path, persistent):
    cls = RocksDBWindowStore if persistent else InMemoryWindowStore
    store = CachingWindowStore(cls("w", retention_ms=10 * MIN, window_size_ms=100, segment_interval_ms=MIN,
                                   retain_duplicates=False), ThreadCache(1_000_000))
    store.init(RecordingContext(tmp_path / "0_0"))
    for key, start in ((b"k", 100), (b"a", 200), (b"k", 300), (b"z", 50), (b"k", 60_000), (b"a", 400)):
        store.put(key, b"v", start, timestamp=start)
    return store


def _window(key, start):
    return window_changelog_key(key, start, 0)


def test_an_in_memory_fetch_of_a_key_reads_every_window_between_its_bounds(tmp_path):
    """One range, (100, k, 100, 0) to (300, k, 300, max): a's window at 200 is in it."""
    store = _windows(tmp_path, persistent=False)
    with store.fetch(b"k", 100, 300) as it:
        assert [start for start, _ in it] == [100, 300]
    assert _lru(store) == [_window(b"z", 50), _window(b"k", 60_000), _window(b"a", 400),
                           _window(b"k", 100), _window(b"a", 200), _window(b"k", 300)]
    store.close()


def test_an_in_memory_key_range_fetch_of_one_key_reads_from_segment_zero(tmp_path):
    """The key-range API (sliding windows') with equal keys: lowerRange gives (0, k + 12 zero
    bytes), upperRange (400, k, 400, max): every window starting before 400, and a's at 400
    sorts before k's bound."""
    store = _windows(tmp_path, persistent=False)
    with store.fetch_range(b"k", b"k", 100, 400) as it:
        assert [(w.key, w.window.start) for w, _ in it] == [(b"k", 100), (b"k", 300)]
    assert _lru(store) == [_window(b"k", 60_000), _window(b"z", 50), _window(b"k", 100), _window(b"a", 200),
                           _window(b"k", 300), _window(b"a", 400)]
    store.close()


def test_a_persistent_fetch_reads_only_the_keys_windows_by_segment(tmp_path):
    store = _windows(tmp_path, persistent=True)
    assert store._named.range_index is None  # no range read yet: writes keep no index
    with store.backward_fetch(b"k", 0, 70_000) as it:
        assert [start for start, _ in it] == [60_000, 300, 100]
    assert _lru(store) == [_window(b"a", 200), _window(b"z", 50), _window(b"a", 400),
                           _window(b"k", 60_000), _window(b"k", 300), _window(b"k", 100)]
    store.close()


def test_fetch_all_reads_the_whole_cache_in_cache_key_order(tmp_path):
    store = _windows(tmp_path, persistent=True)  # segment 0 (every start below 60,000), then 1
    with store.fetch_all(150, 350) as it:
        assert [(w.key, w.window.start) for w, _ in it] == [(b"a", 200), (b"k", 300)]
    assert _lru(store) == [_window(b"a", 200), _window(b"a", 400), _window(b"k", 100), _window(b"k", 300),
                           _window(b"z", 50), _window(b"k", 60_000)]
    store.close()


def _time_ordered(tmp_path, persistent=True):
    """An emit-on-close aggregation's store: time-ordered, cached (on RocksDB by Kafka's
    TimeOrderedCachingWindowStore, whose cache keys are time first; in memory by the plain one)."""
    inner = TimeOrderedWindowStore("t", retention_ms=10 * MIN, window_size_ms=1000, segment_interval_ms=MIN,
                                   persistent=persistent)
    store = CachingWindowStore(inner, ThreadCache(1_000_000))
    store.init(RecordingContext(tmp_path / "0_0"))
    for key, start in ((b"b", 0), (b"a", 1000), (b"c", 0), (b"a", 61_000), (b"b", 62_000), (b"a", 3000),
                       (b"b", 1000)):
        store.put(key, b"v", start, timestamp=start)
    return store


def test_a_time_first_fetch_all_reads_by_start_and_stops_past_its_end(tmp_path):
    """fetchAll(0, 2000): segment 0 from time 0 to its end, by (start, key): b@0, c@0, a@1000,
    b@1000, then a@3000, past 2000: read (made most recent) and the read stops there."""
    store = _time_ordered(tmp_path)
    with store.fetch_all(0, 2000) as it:
        assert [(w.key, w.window.start) for w, _ in it] == [(b"b", 0), (b"c", 0), (b"a", 1000), (b"b", 1000)]
    assert _lru(store) == [_window(b"a", 61_000), _window(b"b", 62_000), _window(b"b", 0), _window(b"c", 0),
                           _window(b"a", 1000), _window(b"b", 1000), _window(b"a", 3000)]
    store.close()


def test_a_time_first_backward_fetch_all_reads_segments_down_and_stops_before_its_start(tmp_path):
    """backwardFetchAll(1000, 70000): segment 1 from its end (b@62000, a@61000), then segment 0
    down: a@3000, b@1000, a@1000, then c@0, before 1000: read, and the read stops (b@0 unread)."""
    store = _time_ordered(tmp_path)
    with store.backward_fetch_all(1000, 70_000) as it:
        assert [(w.key, w.window.start) for w, _ in it] == [(b"b", 62_000), (b"a", 61_000), (b"a", 3000),
                                                             (b"b", 1000), (b"a", 1000)]
    assert _lru(store) == [_window(b"b", 0), _window(b"b", 62_000), _window(b"a", 61_000), _window(b"a", 3000),
                           _window(b"b", 1000), _window(b"a", 1000), _window(b"c", 0)]
    store.close()


def test_a_time_first_fetch_of_a_key_reads_every_key_between_its_fixed_size_bounds(tmp_path):
    """fetch(a, 500, 2500): (500, a, 0) to (2500, a, max) in segment 0 spans b@1000 too (read,
    not returned); b@0 and c@0 are below it, a@3000 above."""
    store = _time_ordered(tmp_path)
    with store.fetch(b"a", 500, 2500) as it:
        assert [start for start, _ in it] == [1000]
    assert _lru(store) == [_window(b"b", 0), _window(b"c", 0), _window(b"a", 61_000), _window(b"b", 62_000),
                           _window(b"a", 3000), _window(b"a", 1000), _window(b"b", 1000)]
    store.close()


def test_an_in_memory_time_ordered_fetch_all_reads_the_whole_cache(tmp_path):
    """In memory the DSL's store is cached by Kafka's plain CachingWindowStore: fetchAll reads
    every cached window (ThreadCache.all), by (start, key) (the segment id is the start)."""
    store = _time_ordered(tmp_path, persistent=False)
    with store.fetch_all(0, 2000) as it:
        assert [(w.key, w.window.start) for w, _ in it] == [(b"b", 0), (b"c", 0), (b"a", 1000), (b"b", 1000)]
    assert _lru(store) == [_window(b"b", 0), _window(b"c", 0), _window(b"a", 1000), _window(b"b", 1000),
                           _window(b"a", 3000), _window(b"a", 61_000), _window(b"b", 62_000)]
    store.close()


def test_time_first_ranges_step_through_segments_with_kafkas_bounds():
    seg = MIN
    fixed = list(time_first_ranges(b"k", b"k", 500, seg + 10, seg, True))
    assert fixed == [(in_segment(0, (500).to_bytes(8, "big") + b"k" + bytes(4)),
                      inclusive(in_segment(0, (seg - 1).to_bytes(8, "big") + b"k" + MAX_INT.to_bytes(4, "big")))),
                     (in_segment(1, seg.to_bytes(8, "big") + b"k" + bytes(4)),
                      inclusive(in_segment(1, (seg + 10).to_bytes(8, "big") + b"k" + MAX_INT.to_bytes(4, "big"))))]
    everything = list(time_first_ranges(None, None, 500, seg + 10, seg, False))
    assert everything == [(in_segment(1, seg.to_bytes(8, "big")), in_segment(2, b"")),
                          (in_segment(0, bytes(8)), in_segment(1, b""))]
    keys = list(time_first_ranges(b"a", b"bb", 500, 10, seg, True))
    assert keys == [(in_segment(0, (500).to_bytes(8, "big") + b"a"),
                     inclusive(in_segment(0, (10).to_bytes(8, "big") + b"\xff\xff" + MAX_INT.to_bytes(4, "big"))))]


@pytest.mark.parametrize("timestamp, interval, segment", [
    (0, MIN, 0), (59_999, MIN, 0), (60_000, MIN, 1), (-1, MIN, 0), (-60_000, MIN, -1), (-60_001, MIN, -1),
    (MAX_LONG, 1, MAX_LONG),
])
def test_segment_ids_divide_as_java_does(timestamp, interval, segment):
    assert segment_id(timestamp, interval) == segment


def test_ordered_upper_range_keeps_the_key_bytes_up_to_one_below_the_suffixs_first():
    suffix = (MAX_LONG).to_bytes(8, "big") + (650).to_bytes(8, "big")  # first byte 0x7f
    assert ordered_upper_range(b"a\x7f\x80\x10\x90", suffix) == b"a\x7f\x80" + suffix
    assert ordered_upper_range(b"\x00\x00", suffix) == b"\x00" + suffix  # the first byte always
    zero_first = (300).to_bytes(8, "big") + MAX_INT.to_bytes(4, "big")
    assert ordered_upper_range(b"a\x00", zero_first) == b"a\x00" + zero_first


def test_a_persistent_key_range_fetch_with_an_open_lower_bound_reads_earlier_segments_again():
    """Kafka's CacheIteratorWrapper keeps a null keyFrom open in every segment's range."""
    ranges = list(window_ranges(None, b"k", 0, 60_500, MIN, True, True))
    suffix = (60_500).to_bytes(8, "big") + MAX_INT.to_bytes(4, "big")
    assert ranges == [(None, inclusive(bytes(8) + b"k" + suffix)),
                      (None, inclusive((1).to_bytes(8, "big") + b"k" + suffix))]


def test_a_persistent_fetch_over_a_long_time_range_reads_only_the_segments_holding_entries(tmp_path):
    """Kafka steps through every segment id of the range (here about 77 billion of them); the
    empty ones read nothing, so only the two holding k's windows are read, in order."""
    store = _windows(tmp_path, persistent=True)
    with store.fetch(b"k", 0, 1 << 62) as it:
        assert [start for start, _ in it] == [100, 300, 60_000]
    assert _lru(store)[-3:] == [_window(b"k", 100), _window(b"k", 300), _window(b"k", 60_000)]
    with store.backward_fetch_range(b"k", b"k", 0, 1 << 62) as it:
        assert [w.window.start for w, _ in it] == [60_000, 300, 100]
    assert _lru(store)[-3:] == [_window(b"k", 60_000), _window(b"k", 300), _window(b"k", 100)]
    store.close()


def test_segments_skip_to_the_next_one_holding_an_entry():
    """Far from the last id, the next held one; within 8 of it, one id at a time."""
    held = [0, 5, 25, 40]

    def next_segment(after, forward):
        beyond = [s for s in held if (s > after if forward else s < after)]
        return (min(beyond) if forward else max(beyond)) if beyond else None

    def ids(forward):
        ranges = window_ranges(b"k", b"k", 0, 30 * MIN + 5, MIN, True, forward, next_segment=next_segment)
        return [int.from_bytes(lower[:8], "big") for lower, _ in ranges]
    assert ids(True) == [0, 5, 25, 26, 27, 28, 29, 30]  # 40 is past the range
    assert ids(False) == [30, 25, 5, 4, 3, 2, 1, 0]


@pytest.mark.parametrize("segmented", [None, (12, 1), (12, MIN), (16, 1), (16, MIN), (12, 1, True), (12, MIN, True)])
def test_the_range_index_finds_what_a_scan_of_the_cache_finds(segmented):
    """RangeIndex (keys added as the cache inserts them, clean or dirty, evicted ones left
    behind, rebuilt when twice the cache) against the cache's keys filtered and sorted by their
    Kafka cache keys (a key-value store's: the keys; a time-ordered store's: time first), over
    random writes, evictions and ranges."""
    time_at, interval = segmented[:2] if segmented else (12, 0)
    rng = random.Random(time_at * 7 + interval)
    cache = ThreadCache(1 << 30)
    named = cache.named_cache("ns")
    named.listener = lambda entries: None
    index = named.range_index = RangeIndex(segmented)

    def key():
        stamp = rng.choice((0, 5, 100, MIN - 1, MIN, 3 * MIN + 7, 10 * MIN))
        tail = stamp.to_bytes(8, "big") + rng.randrange(100).to_bytes(4 if time_at == 12 else 8, "big")
        return rng.choice((b"a", b"b", b"ab", b"\xff")) + tail

    most = 0  # the most entries the cache has held: the index keeps at most twice as many keys (+ 65)
    rebuilt = False
    for step in range(600):
        held = len(index.keys)
        if named.entries and rng.random() < (0.2 if step < 200 else 0.6):
            named.entries.pop(rng.choice(list(named.entries)))  # evicted: left in the index
        else:
            cache.put("ns", key(), b"v", dirty=rng.random() < 0.5, timestamp=1)
        most = max(most, len(named.entries))
        assert len(index.keys) <= 2 * most + 65
        rebuilt = rebuilt or len(index.keys) < held
        bounds = sorted(index.position(key()) + rng.choice((b"", b"\x00")) for _ in range(2))
        low, high = rng.choice((bounds[0], None)), rng.choice((bounds[1], None))
        expected = sorted((p, k) for k in named.entries for p in (index.position(k),)
                          if (low is None or p >= low) and (high is None or p < high))
        assert cache.keys_in_range("ns", low, high, segmented) == [k for _p, k in expected]
        assert named.range_index is index
        if segmented is None:
            continue
        ids = {int.from_bytes(index.position(k)[:8], "big") for k in named.entries}
        after, forward = rng.choice((-5, -1, 0, 1, 3, 10, 100_000)), rng.random() < 0.5
        beyond = [i for i in ids if (i > after if forward else i < after)]
        assert cache.next_segment("ns", segmented, after, forward) == (
            (min(beyond) if forward else max(beyond)) if beyond else None)
    assert rebuilt


def test_window_and_session_reads_skip_what_was_evicted(tmp_path):
    """Keys stay in the index after their eviction; the reads skip them."""
    store = CachingWindowStore(RocksDBWindowStore("w", retention_ms=10 * MIN, window_size_ms=100,
                                                  segment_interval_ms=MIN, retain_duplicates=False), ThreadCache(210))
    store.init(RecordingContext(tmp_path / "0_0"))
    with store.fetch(b"k", 0, 1000) as it:  # the first range read makes the index
        assert list(it) == []
    assert store._named.range_index is not None
    for start in (100, 200, 300, 400, 500):  # 8 + 13 + 1 + 45 = 67 bytes each: three fit
        store.put(b"k", b"v", start, timestamp=start)
    assert _lru(store) == [_window(b"k", 300), _window(b"k", 400), _window(b"k", 500)]
    assert len(store._named.range_index.keys) == 5
    with store.fetch(b"k", 0, 1000) as it:
        assert [start for start, _ in it] == [100, 200, 300, 400, 500]  # the evicted from the store
    assert _lru(store) == [_window(b"k", 300), _window(b"k", 400), _window(b"k", 500)]
    store.close()
