"""Session stores: RocksDB and in-memory, merge-finding, retention, changelog key schema."""

import pytest

from state.errors import InvalidStoreArgumentError, StoreClosedError
from state.session import (
    InMemorySessionStore,
    RocksDBSessionStore,
    decode_session_changelog_key,
    session_changelog_key,
)
from state.stores import Stores
from state.window import Window, Windowed

from recording_context import RecordingContext

MIN = 60_000


@pytest.fixture(params=["rocksdb", "memory"])
def cls(request):
    return RocksDBSessionStore if request.param == "rocksdb" else InMemorySessionStore


@pytest.fixture
def ctx(tmp_path):
    return RecordingContext(tmp_path / "2_1")


def make(cls, ctx, retention=10 * MIN):
    store = cls("s", retention_ms=retention, segment_interval_ms=max(retention // 2, MIN))
    store.init(ctx)
    return store


def sess(key, start, end, value):
    return Windowed(key, Window(start, end)), value


def test_changelog_key_schema_is_kafkas():
    key = session_changelog_key(b"k", 5, 9)  # key + end + start
    assert key == b"k" + (9).to_bytes(8, "big") + (5).to_bytes(8, "big")
    assert decode_session_changelog_key(key) == (b"k", 5, 9)


def test_put_fetch_remove(cls, ctx):
    store = make(cls, ctx)
    assert ctx.registered == [(store, store.restore_batch, False)]
    store.put(b"a", 0, 100, b"agg1")
    store.put(b"a", 200, 300, b"agg2")
    store.put(b"ab", 0, 100, b"other")
    assert store.fetch_session(b"a", 0, 100) == b"agg1"
    assert store.fetch_session(b"a", 0, 101) is None
    assert list(store.fetch(b"a")) == [sess(b"a", 0, 100, b"agg1"), sess(b"a", 200, 300, b"agg2")]
    assert list(store.backward_fetch(b"a")) == [sess(b"a", 200, 300, b"agg2"), sess(b"a", 0, 100, b"agg1")]
    store.remove(b"a", 0, 100)
    assert store.fetch_session(b"a", 0, 100) is None
    store.put(b"a", 200, 300, None)  # None value removes too
    assert list(store.fetch(b"a")) == []
    assert list(store.fetch(b"ab")) == [sess(b"ab", 0, 100, b"other")]
    store.close()


def test_find_sessions_for_merging(cls, ctx):
    store = make(cls, ctx)
    store.put(b"k", 0, 10, b"s1")
    store.put(b"k", 20, 30, b"s2")
    store.put(b"k", 100, 150, b"s3")
    store.put(b"k", 2 * MIN, 2 * MIN + 5, b"s4")  # another segment
    store.put(b"other", 20, 30, b"x")
    # a record at t=25 with gap 10 merges with sessions ending >= 15 and starting <= 35
    assert list(store.find_sessions(b"k", 15, 35)) == [sess(b"k", 20, 30, b"s2")]
    # a wide window overlapping several sessions, across segments
    assert list(store.find_sessions(b"k", 5, 2 * MIN)) == [
        sess(b"k", 0, 10, b"s1"), sess(b"k", 20, 30, b"s2"), sess(b"k", 100, 150, b"s3"),
        sess(b"k", 2 * MIN, 2 * MIN + 5, b"s4")]
    assert list(store.backward_find_sessions(b"k", 5, 25))[0] == sess(b"k", 20, 30, b"s2")
    assert list(store.find_sessions(b"k", 160, 2 * MIN - 1)) == []
    assert list(store.find_sessions_range(b"k", b"other", 20, 30)) == [sess(b"k", 20, 30, b"s2"), sess(b"other", 20, 30, b"x")]
    assert len(list(store.all())) == 5
    store.close()


def test_retention_by_session_end(cls, ctx):
    store = make(cls, ctx, retention=2 * MIN)
    store.put(b"k", 0, 1000, b"old")
    store.put(b"k", 5 * MIN, 5 * MIN, b"new")  # stream time 5 min: segments below 3 min dropped
    assert list(store.fetch(b"k")) == [sess(b"k", 5 * MIN, 5 * MIN, b"new")]
    assert store.fetch_session(b"k", 0, 1000) is None
    store.put(b"k", 0, 2000, b"late")
    assert store.expired_records == 1
    assert store.live_segment_ids() == [5]
    store.close()


def test_restore_batch(cls, ctx):
    store = make(cls, ctx)
    store.restore_batch([
        (session_changelog_key(b"k", 0, 10), b"a"),
        (session_changelog_key(b"k", 20, 30), b"b"),
        (session_changelog_key(b"k", 0, 10), None),
    ])
    assert list(store.fetch(b"k")) == [sess(b"k", 20, 30, b"b")]
    assert store.observed_stream_time == 30
    store.close()


def test_logged_session_store_changelog(cls, ctx):
    supplier = (Stores.persistent_session_store if cls is RocksDBSessionStore else Stores.in_memory_session_store)("sess", 10 * MIN)
    store = Stores.session_store_builder(supplier).build()
    store.init(ctx)
    store.put(b"k", 5, 9, b"v", timestamp=9)
    store.remove(b"k", 5, 9, timestamp=12)
    assert ctx.logged_changes == [
        ("sess", session_changelog_key(b"k", 5, 9), b"v", 9),
        ("sess", session_changelog_key(b"k", 5, 9), None, 12),
    ]
    assert list(store.fetch(b"k")) == []
    store.close()


def test_bad_inputs_and_closed(cls, ctx):
    store = make(cls, ctx)
    with pytest.raises(InvalidStoreArgumentError, match="'s'.*key"):
        store.put(None, 0, 1, b"v")
    with pytest.raises(InvalidStoreArgumentError, match="session_end"):
        store.put(b"k", 10, 5, b"v")
    with pytest.raises(InvalidStoreArgumentError, match="earliest_session_end_time"):
        store.find_sessions(b"k", -1, 5)
    it = store.fetch(b"k")
    store.put(b"k", 0, 1, b"v")
    store.close()
    with pytest.raises(StoreClosedError, match="'s'"):
        store.fetch(b"k")
    with pytest.raises(StoreClosedError):
        next(it)


def test_fetch_ended_sessions_by_end_then_start_then_key_without_the_retention(ctx):
    # Kafka's time-ordered session store (keys end + start + key), what final results on window
    # close scan on RocksDB: the sessions of every key ending within the bounds, from the live
    # segments, whatever the retention within them
    store = make(RocksDBSessionStore, ctx, retention=2 * MIN)  # segments of 60 s
    for key, start, end in [(b"b", 10, 50), (b"a", 20, 50), (b"c", 5, 50), (b"a", 0, 30), (b"d", 70, 70)]:
        store.put(key, start, end, key)
    assert list(store.fetch_ended_sessions(30, 60)) == [
        sess(b"a", 0, 30, b"a"), sess(b"c", 5, 50, b"c"), sess(b"b", 10, 50, b"b"), sess(b"a", 20, 50, b"a")]
    store.put(b"z", 150_000, 150_000, b"z")  # retention now keeps ends after 30 s; segment 0 stays live
    assert list(store.find_sessions_range(None, None, 0, 100)) == []
    assert [w.key for w, _ in store.fetch_ended_sessions(0, 100)] == [b"a", b"c", b"b", b"a", b"d"]
    store.put(b"z", 190_000, 190_000, b"z")  # segment 0 is dropped
    assert list(store.fetch_ended_sessions(0, 100)) == []
    store.close()


def test_fetch_ended_sessions_in_memory_by_end_then_key_then_start_within_the_retention(ctx):
    # Kafka's InMemorySessionStore.findSessions(earliest end, latest end), what final results on
    # window close scan in memory (the DSL's in-memory store whatever the emit strategy): end ->
    # key -> start, and only the sessions ending after observed stream time - retention
    store = make(InMemorySessionStore, ctx, retention=2 * MIN)
    for key, start, end in [(b"b", 10, 50), (b"a", 20, 50), (b"c", 5, 50), (b"a", 0, 30), (b"d", 70, 70)]:
        store.put(key, start, end, key)
    assert list(store.fetch_ended_sessions(30, 60)) == [
        sess(b"a", 0, 30, b"a"), sess(b"a", 20, 50, b"a"), sess(b"b", 10, 50, b"b"), sess(b"c", 5, 50, b"c")]
    store.put(b"y", 120_050, 120_050, b"y")  # retention now keeps ends after 50
    assert [w.key for w, _ in store.fetch_ended_sessions(0, 100)] == [b"d"]
    assert list(store.fetch_ended_sessions(0, 50)) == []
    store.close()


def test_range_reads_go_in_kafkas_order_for_each_store(cls, ctx):
    """Kafka's RocksDB session store reads segment by segment, each by key, then end, then
    start; its InMemorySessionStore keeps a map of ends, each a map of keys, each a map of
    starts: a key range goes by end, then key, then start. One key's sessions go by end, then
    start, in both."""
    store = make(cls, ctx)
    for key, start, end in [(b"b", 0, 10), (b"a", 30, 40), (b"c", 5, 10), (b"a", 0, 5), (b"a", 2, 5)]:
        store.put(key, start, end, b"%s@%d-%d" % (key, start, end))
    s = lambda k, start, end: sess(k, start, end, b"%s@%d-%d" % (k, start, end))
    if cls is RocksDBSessionStore:
        everything = [s(b"a", 0, 5), s(b"a", 2, 5), s(b"a", 30, 40), s(b"b", 0, 10), s(b"c", 5, 10)]
    else:
        everything = [s(b"a", 0, 5), s(b"a", 2, 5), s(b"b", 0, 10), s(b"c", 5, 10), s(b"a", 30, 40)]
    assert list(store.find_sessions_range(None, None, 0, 1000)) == everything
    assert list(store.backward_find_sessions_range(None, None, 0, 1000)) == everything[::-1]
    assert list(store.fetch_range(b"a", b"b")) == [row for row in everything if row[0].key in (b"a", b"b")]
    assert list(store.fetch(b"a")) == [s(b"a", 0, 5), s(b"a", 2, 5), s(b"a", 30, 40)]
    store.close()


def test_in_memory_store_skips_every_put_at_or_before_its_retention():
    """Kafka's InMemorySessionStore skips (and counts) a put of a session ending at or before
    observed stream time - retention, whatever segment it would fall in."""
    store = InMemorySessionStore("s", retention_ms=10 * MIN, segment_interval_ms=5 * MIN)
    store.open()
    store.put(b"k", 690_000, 700_000, b"late-enough")
    store.put(b"k", 90_000, 100_000, b"at-edge")  # 700 s - 600 s: expired
    store.put(b"k", 95_000, 100_001, b"after-edge")
    assert store.expired_records == 1
    assert list(store.fetch(b"k")) == [sess(b"k", 95_000, 100_001, b"after-edge"),
                                       sess(b"k", 690_000, 700_000, b"late-enough")]
    store.close()
