"""The time-ordered window store (Kafka's RocksDBTimeOrderedWindowStore, what the DSL gives windowed
aggregations emitting final results on window close; with a key index for sliding windows):
(start, key) order, Kafka's time-first retention boundary, the plain store's changelog, restore,
and a caching layer over it."""

import pytest

from state.cache import ENTRY_OVERHEAD, CachingWindowStore, ThreadCache
from state.cache.thread_cache import SEGMENT_ID_BYTES
from state.errors import StoreLayoutError
from state.logging_store import ChangeLoggingWindowStore
from state.stores import Stores
from state.window import RocksDBWindowStore, TimeOrderedWindowStore, Window, Windowed, window_changelog_key

from recording_context import RecordingContext

MIN = 60_000


@pytest.fixture(params=[True, False], ids=["rocksdb", "memory"])
def persistent(request):
    return request.param


@pytest.fixture
def ctx(tmp_path):
    return RecordingContext(tmp_path / "0_0")


@pytest.fixture(params=[False, True], ids=["plain", "indexed"])
def indexed(request):
    return request.param


def make(ctx, persistent=True, retention=2 * MIN, size=1000, name="w", with_index=False):
    store = TimeOrderedWindowStore(name, retention_ms=retention, window_size_ms=size,
                                   segment_interval_ms=max(retention // 2, MIN), persistent=persistent,
                                   with_index=with_index)
    store.init(ctx)
    return store


def w(key, start, size=1000):
    return Windowed(key, Window(start, start + size)), key + b"@%d" % start


def test_scans_are_by_start_then_key(ctx, persistent, indexed):
    store = make(ctx, persistent, with_index=indexed)
    for key, start in [(b"b", 0), (b"a", 1000), (b"c", 0), (b"a", 0), (b"ab", 1000), (b"b", 61_000), (b"a", 62_000)]:
        store.put(key, key + b"@%d" % start, start)
    everything = [w(b"a", 0), w(b"b", 0), w(b"c", 0), w(b"a", 1000), w(b"ab", 1000), w(b"b", 61_000),
                  w(b"a", 62_000)]
    assert list(store.all()) == everything
    assert list(store.backward_all()) == everything[::-1]
    assert list(store.fetch_all(0, 1000)) == everything[:5]
    assert list(store.fetch_all(500, 61_000)) == [w(b"a", 1000), w(b"ab", 1000), w(b"b", 61_000)]
    assert list(store.backward_fetch_all(0, 999)) == [w(b"c", 0), w(b"b", 0), w(b"a", 0)]
    in_range = list(store.fetch_range(b"a", b"b", 0, 100_000))
    if indexed and persistent:  # Kafka's indexed store reads keys through its index: by segment, then key
        assert in_range == [w(b"a", 0), w(b"a", 1000), w(b"ab", 1000), w(b"b", 0), w(b"a", 62_000), w(b"b", 61_000)]
    else:  # by start, then key (in memory as Kafka's InMemoryWindowStore, the DSL's store there)
        assert in_range == [w(b"a", 0), w(b"b", 0), w(b"a", 1000), w(b"ab", 1000), w(b"b", 61_000), w(b"a", 62_000)]
    # open bounds are still a key range: through the index (Kafka's fetch(null, null, ...)), while
    # fetch_all and all read every key by start
    open_range = list(store.fetch_range(None, None, 0, 100_000))
    if indexed and persistent:
        assert open_range == [w(b"a", 0), w(b"a", 1000), w(b"ab", 1000), w(b"b", 0), w(b"c", 0), w(b"a", 62_000),
                              w(b"b", 61_000)]
    else:
        assert open_range == everything
    # one open bound, backward (the two orders agree on these windows)
    assert list(store.backward_fetch_range(b"b", None, 0, 100_000)) == [w(b"b", 61_000), w(b"c", 0), w(b"b", 0)]
    # one key: a key that extends it ("ab") does not leak in
    assert list(store.fetch(b"a", 0, 100_000)) == [(0, b"a@0"), (1000, b"a@1000"), (62_000, b"a@62000")]
    assert list(store.backward_fetch(b"a", 0, 1000)) == [(1000, b"a@1000"), (0, b"a@0")]
    assert store.fetch(b"ab", 1000) == b"ab@1000"
    assert store.fetch(b"ab", 0) is None
    store.put(b"a", None, 1000)  # a delete
    assert list(store.fetch(b"a", 0, 2000)) == [(0, b"a@0")]
    store.close()


def test_retention_keeps_the_window_at_the_boundary(ctx, persistent, indexed):
    # Kafka's time-first schema (RocksDB): windows starting at observed stream time - retention
    # are still returned; the key-first store, and in memory Kafka's InMemoryWindowStore (the
    # DSL's store in memory whatever the emit strategy), only after it
    store = make(ctx, persistent, retention=2 * MIN, with_index=indexed)
    store.put(b"k", b"at-edge", 121_000)
    store.put(b"k", b"before-edge", 120_999)
    store.put(b"k", b"new", 241_000)
    at_edge = [121_000] if persistent else []
    assert store.fetch(b"k", 121_000) == (b"at-edge" if persistent else None)
    assert store.fetch(b"k", 120_999) is None
    assert [start for start, _ in store.fetch(b"k", 0, 10 * MIN)] == at_edge + [241_000]
    assert [x.window.start for x, _ in store.fetch_all(0, 10 * MIN)] == at_edge + [241_000]
    store.close()


def test_restore_puts_changelog_keys_in_time_order(ctx, persistent, indexed):
    store = make(ctx, persistent, with_index=indexed)
    store.restore_batch([(window_changelog_key(b"b", 0, 0), b"b@0"), (window_changelog_key(b"a", 1000, 0), b"a@1000"),
                         (window_changelog_key(b"a", 0, 0), b"a@0"), (window_changelog_key(b"b", 0, 0), None)])
    assert list(store.all()) == [w(b"a", 0), w(b"a", 1000)]
    assert list(store.fetch(b"a", 0, 1000)) == [(0, b"a@0"), (1000, b"a@1000")]
    assert list(store.fetch(b"b", 0, 1000)) == []
    assert store.observed_stream_time == 1000
    # a later batch moves past the retention: the old segment goes, its index part too
    store.restore_batch([(window_changelog_key(b"c", 5 * MIN, 0), b"c@300000"), (window_changelog_key(b"old", 0, 0), b"x")])
    assert store.live_segment_ids() == [5]
    assert list(store.fetch_range(b"a", b"z", 0, 10 * MIN)) == [w(b"c", 5 * MIN)]
    store.close()


def test_the_index_follows_puts_and_deletes(ctx):
    store = make(ctx, persistent=False, with_index=True)
    store.put(b"a", b"a@0", 0)
    store.put(b"a", b"a@0", 0)
    store.put(b"b", b"b@0", 0)
    store.put(b"b", None, 0)
    assert list(store.fetch_range(b"a", b"b", 0, 10)) == [w(b"a", 0)]
    assert list(store.backward_fetch(b"a", 0, 10)) == [(0, b"a@0")]
    assert store.approximate_num_entries() >= 2  # the record and its index entry
    store.close()


def test_reopens_with_its_records_and_stream_time(ctx):
    store = make(ctx)
    store.put(b"a", b"a@300000", 5 * MIN)
    store.flush()
    store.close()
    again = make(ctx)
    assert again.observed_stream_time == 5 * MIN
    assert list(again.all()) == [w(b"a", 5 * MIN)]
    again.close()


def test_a_key_ordered_store_directory_is_refused(ctx):
    plain = RocksDBWindowStore("w", retention_ms=2 * MIN, window_size_ms=1000, segment_interval_ms=MIN)
    plain.init(ctx)
    plain.close()
    with pytest.raises(StoreLayoutError, match="window-v1"):
        make(ctx)
    with pytest.raises(StoreLayoutError, match="window-v1"):
        make(ctx, with_index=True)


def test_logs_the_plain_changelog_keys(ctx):
    store = ChangeLoggingWindowStore(make(ctx, persistent=False))
    store.init(ctx)
    store.put(b"k", b"v", 2000, 2500)
    assert ctx.logged_changes == [("w", window_changelog_key(b"k", 2000, 0), b"v", 2500)]


def test_supplier_builds_it():
    supplier = Stores.time_ordered_window_store("t", 2 * MIN, 1000)
    store = supplier.get()
    assert isinstance(store, TimeOrderedWindowStore) and store.persistent and not store.with_index
    assert Stores.time_ordered_window_store("t", 2 * MIN, 1000, with_index=True).get().with_index
    assert (supplier.retention_ms, supplier.window_size_ms, supplier.segment_interval_ms) == (2 * MIN, 1000, MIN)
    assert not Stores.time_ordered_window_store("t", 2 * MIN, 1000, persistent=False).get().persistent


def test_a_caching_layer_merges_by_start_then_key_without_the_retention_of_the_store_below(ctx):
    # Kafka's TimeOrderedCachingWindowStore: the cached windows within the time bounds, by
    # (start, key), the store's windows from its retention on
    inner = make(ctx, persistent=False, retention=2 * MIN)
    store = CachingWindowStore(inner, ThreadCache(1 << 20))
    store.init(ctx)
    inner.put(b"b", b"b@1000", 1000)             # in the store below only
    inner.put(b"a", b"a@0", 0)
    store.put(b"a", b"a@1000", 1000, 1000)       # cached only
    store.put(b"c", b"c@0", 0, 0)
    assert list(store.fetch_all(0, 1000)) == [w(b"a", 0), w(b"c", 0), w(b"a", 1000), w(b"b", 1000)]
    inner.put(b"z", b"z@300000", 5 * MIN)        # the store below moves past [0, 1000]'s retention
    assert list(store.fetch_all(0, 1000)) == [w(b"c", 0), w(b"a", 1000)]  # the cached ones only
    assert list(store.backward_fetch_all(0, 1000)) == [w(b"a", 1000), w(b"c", 0)]


def test_a_caching_layer_counts_the_time_first_schema_byte_over_rocksdb_only(ctx, persistent):
    # Kafka's TimeOrderedCachingWindowStore (over its RocksDB store) keys its cache by the time-first
    # store key, one prefix byte before the time; in memory the DSL's store is the plain one,
    # cached by the plain CachingWindowStore
    inner = TimeOrderedWindowStore("w", retention_ms=2 * MIN, window_size_ms=1000, segment_interval_ms=MIN,
                                   persistent=persistent)
    store = CachingWindowStore(inner, ThreadCache(1 << 20))
    store.init(ctx)
    store.put(b"k", b"v", 1000, 1000)
    entry_size = store._named.size_bytes
    plain = len(window_changelog_key(b"k", 1000, 0)) + len(b"v") + ENTRY_OVERHEAD + SEGMENT_ID_BYTES
    assert entry_size == plain + (1 if persistent else 0)
