"""Window stores: RocksDB and in-memory, segments, retention, duplicates, changelog key schema."""

import pytest

from state.errors import InvalidStoreArgumentError, StateError, StoreClosedError, StoreLayoutError
from state.rocksdb_kv import RocksDBKeyValueStore
from state.stores import Stores
from state.window import (
    InMemoryWindowStore,
    RocksDBWindowStore,
    Window,
    Windowed,
    decode_window_changelog_key,
    window_changelog_key,
)

from recording_context import RecordingContext

MIN = 60_000


@pytest.fixture(params=["rocksdb", "memory"])
def cls(request):
    return RocksDBWindowStore if request.param == "rocksdb" else InMemoryWindowStore


@pytest.fixture
def ctx(tmp_path):
    return RecordingContext(tmp_path / "0_0")


def make(cls, ctx, retention=2 * MIN, size=1000, dups=False, name="w"):
    store = cls(name, retention_ms=retention, window_size_ms=size, segment_interval_ms=max(retention // 2, MIN),
                retain_duplicates=dups)
    store.init(ctx)
    return store


def test_changelog_key_schema_is_kafkas():
    key = window_changelog_key(b"k", 0x0102, 7)
    assert key == b"k" + bytes([0, 0, 0, 0, 0, 0, 1, 2]) + bytes([0, 0, 0, 7])
    assert decode_window_changelog_key(key) == (b"k", 0x0102, 7)


def test_put_and_fetch(cls, ctx):
    store = make(cls, ctx)
    assert ctx.registered == [(store, store.restore_batch, False)]
    store.put(b"a", b"1", 0)
    store.put(b"a", b"2", 1000)
    store.put(b"a", b"3", 61_000)  # next segment
    store.put(b"ab", b"x", 1000)  # a key that extends "a" must not leak into fetch(b"a")
    store.put(b"b", b"y", 1000)
    assert list(store.fetch(b"a", 0, 100_000)) == [(0, b"1"), (1000, b"2"), (61_000, b"3")]
    assert list(store.backward_fetch(b"a", 0, 100_000)) == [(61_000, b"3"), (1000, b"2"), (0, b"1")]
    assert list(store.fetch(b"a", 500, 61_000)) == [(1000, b"2"), (61_000, b"3")]
    assert store.fetch(b"a", 1000) == b"2"
    assert store.fetch(b"a", 2000) is None
    store.put(b"a", b"2b", 1000)  # overwrite without duplicates
    assert store.fetch(b"a", 1000) == b"2b"
    store.put(b"a", None, 1000)  # delete
    assert list(store.fetch(b"a", 0, 2000)) == [(0, b"1")]
    store.close()


def test_fetch_range_fetch_all_and_all(cls, ctx):
    store = make(cls, ctx)
    for key, start in [(b"a", 0), (b"b", 0), (b"c", 0), (b"a", 61_000), (b"b", 62_000), (b"bb", 1000)]:
        store.put(key, key + b"@%d" % start, start)
    w = lambda k, s: (Windowed(k, Window(s, s + 1000)), k + b"@%d" % s)
    assert list(store.fetch_range(b"a", b"b", 0, 100_000)) == [w(b"a", 0), w(b"b", 0), w(b"a", 61_000), w(b"b", 62_000)]
    assert list(store.fetch_range(b"b", None, 0, 500)) == [w(b"b", 0), w(b"c", 0)]
    assert list(store.fetch_all(0, 999)) == [w(b"a", 0), w(b"b", 0), w(b"c", 0)]
    assert list(store.fetch_all(61_000, 62_000)) == [w(b"a", 61_000), w(b"b", 62_000)]
    everything = list(store.all())
    assert len(everything) == 6 and everything[0] == w(b"a", 0)
    assert list(store.backward_all()) == everything[::-1]
    assert list(store.backward_fetch_all(0, 999)) == [w(b"c", 0), w(b"b", 0), w(b"a", 0)]
    assert list(store.backward_fetch_range(b"a", b"b", 0, 100_000))[0] == w(b"b", 62_000)
    assert list(store.fetch_range(b"c", b"a", 0, 10)) == []
    store.close()


def test_retention_drops_expired_segments(cls, ctx):
    store = make(cls, ctx, retention=2 * MIN)  # segment interval 60 s
    store.put(b"k", b"s0", 1000)
    store.put(b"k", b"s1", MIN + 1000)
    store.put(b"k", b"s2", 125_000)
    assert store.live_segment_ids() == [0, 1, 2]
    store.put(b"k", b"s4", 241_000)  # min live segment = segment(241s - 120s) = 2
    assert store.live_segment_ids() == [2, 4]
    assert list(store.fetch(b"k", 0, 10 * MIN)) == [(125_000, b"s2"), (241_000, b"s4")]
    # a late put into a dropped segment is skipped
    store.put(b"late", b"x", 1000)
    assert store.expired_records == 1
    assert store.fetch(b"late", 1000) is None
    # within a live segment, windows starting at or before stream time - retention are expired
    store.put(b"k", b"at-edge", 121_000)
    store.put(b"k", b"after-edge", 121_001)
    assert store.fetch(b"k", 121_000) is None
    assert store.fetch(b"k", 121_001) == b"after-edge"
    assert [t for t, _ in store.fetch(b"k", 0, 10 * MIN)] == [121_001, 125_000, 241_000]
    store.put(b"k", b"s4b", 245_000)  # expiry boundary moves to 125 s
    assert [t for t, _ in store.fetch(b"k", 0, 10 * MIN)] == [241_000, 245_000]
    assert [w.window.start for w, _ in store.all()] == [241_000, 245_000]
    store.close()


def test_retain_duplicates_uses_sequence_numbers(cls, ctx):
    store = make(cls, ctx, dups=True)
    store.put(b"k", b"1", 0)
    store.put(b"k", b"2", 0)
    store.put(b"k", None, 0)  # ignored with duplicates
    store.put(b"k", b"3", 1000)
    assert list(store.fetch(b"k", 0, 1000)) == [(0, b"1"), (0, b"2"), (1000, b"3")]
    assert store.fetch(b"k", 0) == b"1"
    store.close()


def test_restore_batch_decodes_changelog_keys(cls, ctx):
    store = make(cls, ctx)
    store.restore_batch([
        (window_changelog_key(b"a", 0, 0), b"1"),
        (window_changelog_key(b"a", 61_000, 0), b"2"),
        (window_changelog_key(b"b", 1000, 0), b"3"),
        (window_changelog_key(b"b", 1000, 0), None),  # tombstone
    ])
    assert list(store.fetch(b"a", 0, 100_000)) == [(0, b"1"), (61_000, b"2")]
    assert store.fetch(b"b", 1000) is None
    assert store.observed_stream_time == 61_000
    # a later batch moves stream time past retention: the old segment is dropped
    store.restore_batch([(window_changelog_key(b"c", 5 * MIN, 0), b"4"), (window_changelog_key(b"old", 0, 0), b"x")])
    assert store.live_segment_ids() == [5]
    assert list(store.fetch_all(0, 10 * MIN)) == [(Windowed(b"c", Window(5 * MIN, 5 * MIN + 1000)), b"4")]
    store.close()


def test_rocksdb_window_store_reopens_with_stream_time(ctx):
    store = make(RocksDBWindowStore, ctx)
    store.put(b"a", b"1", 5 * MIN)
    store.flush()
    store.close()
    again = make(RocksDBWindowStore, ctx)
    assert again.observed_stream_time == 5 * MIN
    assert list(again.fetch(b"a", 0, 10 * MIN)) == [(5 * MIN, b"1")]
    again.put(b"old", b"x", 1000)  # expired relative to the recovered stream time
    assert again.expired_records == 1
    again.close()


def test_layout_mismatch_with_kv_store(ctx):
    kv = RocksDBKeyValueStore("w")
    kv.init(ctx)
    kv.close()
    with pytest.raises(StoreLayoutError, match="kv-v1"):
        make(RocksDBWindowStore, ctx)


def test_iterator_invalidated_on_close(cls, ctx):
    store = make(cls, ctx)
    store.put(b"a", b"1", 0)
    store.put(b"a", b"2", 1000)
    it = store.fetch(b"a", 0, 5000)
    next(it)
    store.close()
    with pytest.raises(StoreClosedError, match="'w'"):
        next(it)
    with pytest.raises(StoreClosedError):
        store.put(b"a", b"1", 0)


def test_bad_inputs(cls, ctx):
    store = make(cls, ctx)
    with pytest.raises(InvalidStoreArgumentError, match="'w'.*key"):
        store.put(None, b"v", 0)
    with pytest.raises(InvalidStoreArgumentError, match="window_start_timestamp"):
        store.put(b"k", b"v", -1)
    with pytest.raises(InvalidStoreArgumentError, match="time_to"):
        store.fetch(b"k", 0, "x")
    with pytest.raises(InvalidStoreArgumentError):
        cls("w2", retention_ms=-1, window_size_ms=10, segment_interval_ms=MIN)
    store.close()


def test_builder_typed_window_store_logs_kafka_keys(ctx):
    class Utf8:
        def serialize(self, o):
            return None if o is None else o.encode()

        def deserialize(self, d):
            return None if d is None else d.decode()

    supplier = Stores.persistent_window_store("win", retention_ms=2 * MIN, window_size_ms=1000, retain_duplicates=True)
    builder = Stores.window_store_builder(supplier, Utf8(), Utf8()).with_caching_enabled()
    assert builder.changelog_topic_config() == {"cleanup.policy": "compact,delete", "retention.ms": str(2 * MIN + 86_400_000)}
    store = builder.build()
    store.init(ctx)
    [(registered, _, logged)] = ctx.registered
    assert registered is store and logged is True
    store.put("k", "a", 1000, timestamp=1500)
    store.put("k", "b", 1000, timestamp=1600)
    assert ctx.logged_changes == [
        ("win", window_changelog_key(b"k", 1000, 1), b"a", 1500),
        ("win", window_changelog_key(b"k", 1000, 2), b"b", 1600),
    ]
    assert list(store.fetch("k", 0, 2000)) == [(1000, "a"), (1000, "b")]
    assert list(store.fetch_all(0, 2000)) == [(Windowed("k", Window(1000, 2000)), "a"), (Windowed("k", Window(1000, 2000)), "b")]
    assert store.set_flush_listener(lambda *a: None) is False
    store.close()


def test_window_supplier_validation():
    with pytest.raises(InvalidStoreArgumentError, match="retention_ms"):
        Stores.persistent_window_store("w", retention_ms=10, window_size_ms=100)
    with pytest.raises(InvalidStoreArgumentError, match="window_size_ms"):
        Stores.in_memory_window_store("w", retention_ms=10, window_size_ms=-1)
    # Kafka accepts a window size of 0 (sliding/join windows of time difference 0)
    assert Stores.in_memory_window_store("w", retention_ms=10, window_size_ms=0).window_size_ms == 0
    assert Stores.persistent_window_store("w", 10 * MIN, 1000).segment_interval_ms == 5 * MIN
    assert Stores.persistent_window_store("w", MIN, 1000).segment_interval_ms == MIN


def test_restore_batch_rejects_malformed_changelog_key(cls, ctx):
    store = make(cls, ctx)
    with pytest.raises(StateError, match="'w'.*malformed changelog key b'short'"):
        store.restore_batch([(window_changelog_key(b"a", 0, 0), b"1"), (b"short", b"2")])
    store.close()


def test_zero_size_windows(tmp_path):
    from streams import serdes

    store = Stores.window_store_builder(Stores.in_memory_window_store("z", retention_ms=100, window_size_ms=0),
                                        serdes.STRING, serdes.INT64).with_logging_disabled().build()
    store.init(RecordingContext(tmp_path / "0_0"))
    store.put("a", 1, 5)
    assert list(store.fetch("a", 5, 5)) == [(5, 1)]
    assert list(store.all()) == [(Windowed("a", Window(5, 5)), 1)]  # [t, t]
    store.close()


def test_reads_go_in_kafkas_order_for_each_store(cls, ctx):
    """Kafka's RocksDB window store reads segment by segment, each by key, then start; its
    InMemoryWindowStore keeps a map of starts, each a map of keys: every read goes by start,
    then key, a key range's and a backward one's too."""
    store = make(cls, ctx)
    for key, start in [(b"b", 0), (b"a", 1000), (b"a", 0), (b"c", 500), (b"a", 61_000), (b"b", 61_000)]:
        store.put(key, key + b"@%d" % start, start)
    w = lambda k, s: (Windowed(k, Window(s, s + 1000)), k + b"@%d" % s)
    if cls is RocksDBWindowStore:
        everything = [w(b"a", 0), w(b"a", 1000), w(b"b", 0), w(b"c", 500), w(b"a", 61_000), w(b"b", 61_000)]
        a_to_b = [w(b"a", 0), w(b"a", 1000), w(b"b", 0), w(b"a", 61_000), w(b"b", 61_000)]
    else:
        everything = [w(b"a", 0), w(b"b", 0), w(b"c", 500), w(b"a", 1000), w(b"a", 61_000), w(b"b", 61_000)]
        a_to_b = [w(b"a", 0), w(b"b", 0), w(b"a", 1000), w(b"a", 61_000), w(b"b", 61_000)]
    assert list(store.all()) == everything
    assert list(store.backward_all()) == everything[::-1]
    assert list(store.fetch_range(b"a", b"b", 0, 100_000)) == a_to_b
    assert list(store.backward_fetch_range(b"a", b"b", 0, 100_000)) == a_to_b[::-1]
    assert list(store.fetch_all(0, 1000)) == [row for row in everything if row[0].window.start <= 1000]
    assert list(store.fetch(b"a", 0, 100_000)) == [(0, b"a@0"), (1000, b"a@1000"), (61_000, b"a@61000")]
    store.close()


def test_a_one_key_range_sees_a_write_made_while_it_is_open_only_in_memory(cls, ctx):
    """A sliding window aggregation writes a key's windows while its fetch of them is open.
    Kafka's InMemoryWindowStore opens a window start's map when the iteration reaches it, so a
    window written meanwhile is read as written; its RocksDB store reads the store as it was when
    the iterator opened (each segment's)."""
    store = make(cls, ctx)
    for start in (0, 500, 1000):
        store.put(b"a", b"old@%d" % start, start)
    store.put(b"b", b"b@500", 500)
    w = lambda start, value: (Windowed(b"a", Window(start, start + 1000)), value)  # noqa: E731
    with store.backward_fetch_range(b"a", b"a", 0, 1000) as it:
        assert next(it) == w(1000, b"old@1000")
        store.put(b"a", b"new@500", 500)
        store.put(b"a", b"new@700", 700)  # a window the store did not have, ahead of the iteration
        store.put(b"a", None, 0)
        rest = list(it)
    with store.fetch_range(b"a", b"a", 0, 1000) as it:
        assert next(it) == w(500, b"new@500")
        store.put(b"a", b"new@900", 900)
        store.put(b"a", None, 1000)
        forward = list(it)
    if cls is InMemoryWindowStore:
        assert rest == [w(700, b"new@700"), w(500, b"new@500")]
        assert forward == [w(700, b"new@700"), w(900, b"new@900")]
    else:
        assert rest == [w(500, b"old@500"), w(0, b"old@0")]
        assert forward == [w(700, b"new@700"), w(1000, b"old@1000")]
    store.close()


def test_in_memory_store_skips_every_put_at_or_before_its_retention():
    """Kafka's InMemoryWindowStore skips (and counts) a put of a window starting at or before
    observed stream time - retention, whatever segment it would fall in; the RocksDB store skips
    the puts into dropped segments only (a window of a live segment is written, never read)."""
    store = InMemoryWindowStore("w", retention_ms=2 * MIN, window_size_ms=1000, segment_interval_ms=MIN)
    store.open()
    store.put(b"k", b"s", 241_000)
    store.put(b"k", b"at-edge", 121_000)  # 241 s - 120 s: expired
    store.put(b"k", b"after-edge", 121_001)
    assert store.expired_records == 1
    assert [t for t, _ in store.fetch(b"k", 0, 10 * MIN)] == [121_001, 241_000]
    store.close()
