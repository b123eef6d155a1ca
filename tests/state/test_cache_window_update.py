"""CachingWindowStore.update_many: a windowed aggregation's read-modify-write through the cache,
on real window stores (RocksDB and in-memory) under change logging."""

import pytest

from state.cache import CachingWindowStore, ThreadCache
from state.errors import InvalidStoreArgumentError, StoreClosedError
from state.logging_store import ChangeLoggingWindowStore
from state.window import InMemoryWindowStore, RocksDBWindowStore, Window, Windowed, window_changelog_key

from recording_context import RecordingContext

MIN = 60_000


@pytest.fixture(params=["rocksdb", "memory"])
def inner(request):
    cls = RocksDBWindowStore if request.param == "rocksdb" else InMemoryWindowStore
    return cls("w", retention_ms=2 * MIN, window_size_ms=1000, segment_interval_ms=MIN)


def make(inner, tmp_path, max_bytes=1_000_000, retain_duplicates=False):
    ctx = RecordingContext(tmp_path / "0_1")
    store = CachingWindowStore(ChangeLoggingWindowStore(inner), ThreadCache(max_bytes))
    store.init(ctx)
    out = []
    store.set_flush_listener(lambda k, new, old, ts: out.append((k, new, old, ts)))
    return store, ctx, out


def appended(old, t):
    """old + one byte per update, stamped with the newest timestamp (a window's aggregate)."""
    return (old or b"") + b"x", t


class Clock:
    stream_time = -1

    def __init__(self):
        self.raised = []

    def advance_stream_time(self, t):
        self.raised.append(t)
        self.stream_time = max(self.stream_time, t)


def test_updates_read_through_write_dirty_and_flush_with_the_stored_old_value(inner, tmp_path):
    store, ctx, out = make(inner, tmp_path)
    inner.put(b"k", b"s", 0)  # what the store held before (as after a restore)
    clock = Clock()
    store.update_many([b"k", b"j", b"k"], [0, 1000, 0], appended, [5, 1200, 7], clock)
    assert clock.raised == [5, 1200] and clock.stream_time == 1200  # raised as records went by
    assert store.fetch(b"k", 0) == b"sxx" and store.fetch(b"j", 1000) == b"x"
    assert inner.fetch(b"k", 0) == b"s" and ctx.logged_changes == []  # nothing written down yet
    store.flush()
    # in order of the latest write: j (1200) was written before k's second update (7)
    assert out == [(Windowed(b"j", Window(1000, 2000)), b"x", None, 1200),
                   (Windowed(b"k", Window(0, 1000)), b"sxx", b"s", 7)]
    assert ctx.logged_changes == [("w", window_changelog_key(b"j", 1000, 0), b"x", 1200),
                                  ("w", window_changelog_key(b"k", 0, 0), b"sxx", 7)]
    assert inner.fetch(b"k", 0) == b"sxx"
    # a window newer than anything the store holds is new; an older one is read
    store.update_many([b"k", b"k"], [5000, 0], appended, [5000, 8])
    assert store.fetch(b"k", 5000) == b"x" and store.fetch(b"k", 0) == b"sxxx"
    store.close()


def test_a_cached_window_is_read_whatever_the_retention_below(inner, tmp_path):
    # Kafka's caching window store reads its cache first, whatever the retention of the store
    # below (which filters only its own windows)
    store, _, out = make(inner, tmp_path)
    inner.put(b"j", b"y", 0)     # below only, never cached
    store.update_many([b"k"], [0], appended, [1])
    store.flush()                # [0, 1000) of k stays cached, clean
    store.update_many([b"k"], [3 * MIN], appended, [3 * MIN])
    store.flush()  # the store below has seen start 3 min: [0, 1000) is past its retention of 2 min
    out.clear()
    store.update_many([b"k", b"j"], [0, 0], appended, [2, 3])
    assert store.fetch(b"k", 0) == b"xx"  # still cached: read and updated
    assert store.fetch(b"j", 0) == b"x"   # not cached: the store below reads nothing there
    store.flush()
    # written down into an expired segment: the store below drops them
    assert inner.fetch(b"k", 0) is None and inner.fetch(b"j", 0) is None
    store.close()


def test_bad_calls(inner, tmp_path):
    store, _, _ = make(inner, tmp_path)
    with pytest.raises(InvalidStoreArgumentError, match="must be a non-negative int"):
        store.update_many([b"k"], [-1], appended, [1])
    with pytest.raises(InvalidStoreArgumentError, match="must be bytes"):
        store.update_many(["k"], [0], appended, [1])
    with pytest.raises(InvalidStoreArgumentError, match="bytes or None"):
        store.update_many([b"k"], [0], lambda old, t: ("text", t), [1])
    store.close()
    with pytest.raises(StoreClosedError):
        store.update_many([b"k"], [0], appended, [1])
    dup = InMemoryWindowStore("d", retention_ms=2 * MIN, window_size_ms=1000, segment_interval_ms=MIN,
                              retain_duplicates=True)
    store, _, _ = make(dup, tmp_path / "dup")
    with pytest.raises(InvalidStoreArgumentError, match="without duplicates"):
        store.update_many([b"k"], [0], appended, [1])
