"""Caching layer: ThreadCache budget, dedup, LRU eviction order, flush listener, merged reads."""

import pytest

from state.cache import ENTRY_OVERHEAD, CachingKeyValueStore, ThreadCache
from state.errors import InvalidStoreArgumentError, StoreClosedError
from state.logging_store import ChangeLoggingKeyValueStore, ChangeLoggingSessionStore, ChangeLoggingWindowStore
from state.memory_kv import InMemoryKeyValueStore
from state.rocksdb_kv import RocksDBKeyValueStore

from recording_context import RecordingContext


@pytest.fixture(params=["rocksdb", "memory"])
def inner(request):
    return RocksDBKeyValueStore("c") if request.param == "rocksdb" else InMemoryKeyValueStore("c")


@pytest.fixture
def ctx(tmp_path):
    return RecordingContext(tmp_path / "0_2")


def entry_size(key, value):
    return len(key) + len(value) + ENTRY_OVERHEAD


def make(inner, ctx, max_bytes=10_000_000):
    cache = ThreadCache(max_bytes)
    store = CachingKeyValueStore(inner, cache)
    store.init(ctx)
    flushed = []
    store.set_flush_listener(lambda k, new, old, ts: flushed.append((k, new, old, ts)))
    return store, cache, flushed


def test_registers_outer_store_with_inner_restore(inner, ctx):
    store, _, _ = make(inner, ctx)
    [(registered, callback, logged)] = ctx.registered
    assert registered is store
    assert callback == inner.restore_batch
    assert logged is False
    store.close()


def test_dedup_between_commits_and_flush_order(inner, ctx):
    store, cache, flushed = make(inner, ctx)
    store.put(b"a", b"1", timestamp=10)
    store.put(b"b", b"1", timestamp=11)
    store.put(b"a", b"2", timestamp=12)
    store.put(b"a", b"3", timestamp=13)
    assert store.get(b"a") == b"3"
    assert inner.get(b"a") is None  # nothing written down before flush
    assert flushed == []
    store.flush()
    # one write per key, in order of the latest write: b (11), then a (13)
    assert flushed == [(b"b", b"1", None, 11), (b"a", b"3", None, 13)]
    assert inner.get(b"a") == b"3" and inner.get(b"b") == b"1"
    flushed.clear()
    store.put(b"a", b"4", timestamp=20)
    store.flush()
    assert flushed == [(b"a", b"4", b"3", 20)]  # old value read from the wrapped store
    store.flush()
    assert flushed == [(b"a", b"4", b"3", 20)]  # nothing dirty: no more calls
    store.close()


def test_delete_through_cache(inner, ctx):
    store, cache, flushed = make(inner, ctx)
    store.put(b"k", b"v", timestamp=1)
    store.flush()
    flushed.clear()
    assert store.delete(b"k", timestamp=2) == b"v"
    assert store.get(b"k") is None
    assert inner.get(b"k") == b"v"
    store.flush()
    assert flushed == [(b"k", None, b"v", 2)]
    assert inner.get(b"k") is None
    # delete of a key that never reached the store: neither written down nor forwarded
    flushed.clear()
    store.put(b"tmp", b"x", timestamp=3)
    store.delete(b"tmp", timestamp=4)
    store.flush()
    assert flushed == []
    store.close()


def test_put_if_absent_sees_cached_value(inner, ctx):
    store, _, _ = make(inner, ctx)
    assert store.put_if_absent(b"k", b"1") is None
    assert store.put_if_absent(b"k", b"2") == b"1"
    store.delete(b"k")
    assert store.put_if_absent(b"k", b"3") is None
    assert store.get(b"k") == b"3"
    store.close()


def test_eviction_is_lru_and_flushes_all_dirty_in_order(inner, ctx):
    size = entry_size(b"k1", b"v1")
    store, cache, flushed = make(inner, ctx, max_bytes=3 * size)
    store.put(b"k1", b"v1", timestamp=1)
    store.put(b"k2", b"v2", timestamp=2)
    store.put(b"k3", b"v3", timestamp=3)
    assert cache.size_bytes == 3 * size and flushed == []
    store.get(b"k1")  # k1 becomes most recently used; k2 is now the eldest
    store.put(b"k4", b"v4", timestamp=4)
    # evicting dirty k2 flushes it first, then the other dirty entries in write order
    assert flushed == [(b"k2", b"v2", None, 2), (b"k1", b"v1", None, 1),
                       (b"k3", b"v3", None, 3), (b"k4", b"v4", None, 4)]
    assert cache.size_bytes <= 3 * size
    assert store.get(b"k2") == b"v2"  # read back through from the wrapped store
    assert cache.stats(store.namespace)["evictions"] >= 1
    store.close()


def test_clean_evictions_do_not_forward(inner, ctx):
    size = entry_size(b"k1", b"v1")
    store, cache, flushed = make(inner, ctx, max_bytes=2 * size)
    for i in range(2):
        store.put(b"k%d" % i, b"v%d" % i, timestamp=i)
    store.flush()
    flushed.clear()
    store.get(b"k0")
    store.put(b"k2", b"v2", timestamp=5)  # evicts clean k1 only
    assert flushed == []
    store.put(b"k3", b"v3", timestamp=6)  # evicts clean k0; dirty k2 stays
    assert flushed == []
    store.flush()
    assert flushed == [(b"k2", b"v2", None, 5), (b"k3", b"v3", None, 6)]
    store.close()


def test_zero_budget_writes_through(inner, ctx):
    store, cache, flushed = make(inner, ctx, max_bytes=0)
    store.put(b"a", b"1", timestamp=1)
    assert inner.get(b"a") == b"1"
    assert flushed == [(b"a", b"1", None, 1)]
    assert cache.size_bytes == 0
    store.close()


def test_budget_shared_between_stores(tmp_path):
    size = entry_size(b"k1", b"v1")
    cache = ThreadCache(3 * size)
    ctx = RecordingContext(tmp_path / "0_2")
    s1 = CachingKeyValueStore(InMemoryKeyValueStore("one"), cache)
    s2 = CachingKeyValueStore(InMemoryKeyValueStore("two"), cache)
    s1.init(ctx)
    s2.init(ctx)
    out1, out2 = [], []
    s1.set_flush_listener(lambda *a: out1.append(a))
    s2.set_flush_listener(lambda *a: out2.append(a))
    s1.put(b"k1", b"v1", timestamp=1)
    s1.put(b"k2", b"v2", timestamp=2)
    s2.put(b"k1", b"v1", timestamp=3)
    assert cache.size_bytes == 3 * size
    s2.put(b"k2", b"v2", timestamp=4)  # over budget: evicts from the cache being written (s2)
    assert out1 == []
    assert [a[0] for a in out2] == [b"k1", b"k2"]
    assert cache.size_bytes <= 3 * size
    s1.close()
    s2.close()
    assert cache.size_bytes == 0


def test_shrinking_evicts_from_every_store_in_turn(tmp_path):
    # Kafka's ThreadCache.resize: one eldest entry of each named cache in turn until the caches
    # fit, so both stores give up entries (not the first store's all, then the second's)
    size = entry_size(b"k1", b"v1")
    cache = ThreadCache(6 * size)
    ctx = RecordingContext(tmp_path / "0_3")
    stores = [CachingKeyValueStore(InMemoryKeyValueStore(name), cache) for name in ("one", "two")]
    flushed: dict = {"one": [], "two": []}
    for store in stores:
        store.init(ctx)
        store.set_flush_listener(lambda *a, out=flushed[store.name]: out.append(a[0]))
        for i in (1, 2, 3):
            store.put(b"k%d" % i, b"v%d" % i, timestamp=i)
    assert cache.size_bytes == 6 * size
    cache.resize(3 * size)  # three evictions: one's k1 (flushing its three), two's k1 (the same), one's k2
    assert flushed == {"one": [b"k1", b"k2", b"k3"], "two": [b"k1", b"k2", b"k3"]}
    assert cache.size_bytes == 3 * size
    assert [store.get(b"k3") for store in stores] == [b"v3", b"v3"]  # read through, or still cached
    stats = [cache.stats(f"{ctx.task_id}-{name}") for name in ("one", "two")]
    assert [s["evictions"] for s in stats] == [2, 1]
    cache.resize(0)  # every entry goes; the stores' caches are empty, nothing left to evict
    assert cache.size_bytes == 0
    for store in stores:
        store.close()


def test_range_merges_cache_and_store(inner, ctx):
    store, _, _ = make(inner, ctx)
    for k in (b"a", b"c", b"e", b"g"):
        store.put(k, b"store-" + k)
    store.flush()
    store.put(b"b", b"cache-b")
    store.put(b"c", b"cache-c")
    store.delete(b"e")
    store.put(b"h", b"cache-h")
    expected = [(b"a", b"store-a"), (b"b", b"cache-b"), (b"c", b"cache-c"), (b"g", b"store-g"), (b"h", b"cache-h")]
    assert list(store.all()) == expected
    assert list(store.reverse_all()) == expected[::-1]
    assert list(store.range(b"b", b"g")) == expected[1:4]
    assert list(store.reverse_range(b"b", b"g")) == expected[1:4][::-1]
    store.put(b"ca", b"cache-ca")
    assert [k for k, _ in store.prefix_scan(b"c")] == [b"c", b"ca"]
    store.close()


def test_close_flushes_and_closes(inner, ctx):
    store, cache, flushed = make(inner, ctx)
    store.put(b"a", b"1", timestamp=1)
    store.close()
    assert flushed == [(b"a", b"1", None, 1)]
    assert not store.is_open and not inner.is_open
    with pytest.raises(StoreClosedError, match="'c'"):
        store.get(b"a")
    with pytest.raises(StoreClosedError):
        store.put(b"a", b"1")


def test_cache_over_logging_logs_only_written_down_values(inner, ctx):
    logged = ChangeLoggingKeyValueStore(inner)
    store = CachingKeyValueStore(logged, ThreadCache(10_000))
    store.init(ctx)
    [(registered, callback, is_logged)] = ctx.registered
    assert registered is store and is_logged is True and callback == inner.restore_batch
    store.put(b"a", b"1", timestamp=5)
    store.put(b"a", b"2", timestamp=6)
    assert ctx.logged_changes == []
    store.flush()
    assert ctx.logged_changes == [("c", b"a", b"2", 6)]
    store.close()


def test_private_cache_from_config(tmp_path):
    ctx = RecordingContext(tmp_path / "t", config={"statestore.cache.max.bytes": 0})
    store = CachingKeyValueStore(InMemoryKeyValueStore("p"))
    store.init(ctx)
    assert store.cache.max_bytes == 0
    store.close()


def test_bad_inputs(inner, ctx):
    store, _, _ = make(inner, ctx)
    with pytest.raises(InvalidStoreArgumentError, match="'c'"):
        store.put(None, b"v")
    with pytest.raises(InvalidStoreArgumentError, match="value must be bytes"):
        store.put(b"k", 5)
    with pytest.raises(InvalidStoreArgumentError):
        ThreadCache(-1)
    store.close()


def test_dirty_close_drops_cached_writes(inner, ctx):
    store, cache, flushed = make(inner, ctx)
    store.put(b"kept", b"1", timestamp=1)
    store.flush()
    flushed.clear()
    store.put(b"lost", b"2", timestamp=2)
    store.close(dirty=True)
    assert flushed == []
    assert cache.size_bytes == 0
    assert not inner.is_open
    if isinstance(inner, RocksDBKeyValueStore):
        again = RocksDBKeyValueStore("c")
        again.init(ctx)
        assert list(again.all()) == [(b"kept", b"1")]
        again.close()


# ------------------------------------------------------------------------------ windowed caching
from state.cache import CachingSessionStore, CachingWindowStore  # noqa: E402
from state.session import InMemorySessionStore, RocksDBSessionStore, session_changelog_key  # noqa: E402
from state.window import InMemoryWindowStore, RocksDBWindowStore, Window, Windowed, window_changelog_key  # noqa: E402

MIN = 60_000


@pytest.fixture(params=["rocksdb", "memory"])
def window_inner(request):
    cls = RocksDBWindowStore if request.param == "rocksdb" else InMemoryWindowStore
    return cls("w", retention_ms=2 * MIN, window_size_ms=1000, segment_interval_ms=MIN)


@pytest.fixture(params=["rocksdb", "memory"])
def session_inner(request):
    cls = RocksDBSessionStore if request.param == "rocksdb" else InMemorySessionStore
    return cls("s", retention_ms=2 * MIN, segment_interval_ms=MIN)


def W(key, start, value):
    return Windowed(key, Window(start, start + 1000)), value


def test_window_cache_dedups_and_forwards_on_flush(window_inner, ctx):
    logged = ChangeLoggingWindowStore(window_inner)
    store = CachingWindowStore(logged, ThreadCache(1_000_000))
    store.init(ctx)
    assert ctx.registered == [(store, window_inner.restore_batch, True)]
    out = []
    assert store.set_flush_listener(lambda *a: out.append(a))
    store.put(b"k", b"1", 0, timestamp=10)
    store.put(b"k", b"2", 0, timestamp=11)
    store.put(b"j", b"3", 1000, timestamp=12)
    assert store.fetch(b"k", 0) == b"2"
    assert window_inner.fetch(b"k", 0) is None and ctx.logged_changes == []
    store.flush()
    assert out == [(Windowed(b"k", Window(0, 1000)), b"2", None, 11),
                   (Windowed(b"j", Window(1000, 2000)), b"3", None, 12)]
    assert ctx.logged_changes == [("w", window_changelog_key(b"k", 0, 0), b"2", 11),
                                  ("w", window_changelog_key(b"j", 1000, 0), b"3", 12)]
    out.clear()
    store.put(b"k", b"4", 0, timestamp=13)
    store.flush()
    assert out == [(Windowed(b"k", Window(0, 1000)), b"4", b"2", 13)]
    store.close()


def test_window_cache_merges_reads(window_inner, ctx):
    store = CachingWindowStore(window_inner, ThreadCache(1_000_000))
    store.init(ctx)
    store.put(b"a", b"s0", 0)
    store.put(b"a", b"s1", 1000)
    store.put(b"b", b"s2", MIN + 5)
    store.flush()
    store.put(b"a", b"c1", 1000)      # overrides the store's value
    store.put(b"a", None, 0)          # hides the store's value
    store.put(b"a", b"c3", MIN + 10)  # only in the cache, later segment
    store.put(b"ab", b"c4", 500)
    assert list(store.fetch(b"a", 0, 10 * MIN)) == [(1000, b"c1"), (MIN + 10, b"c3")]
    assert list(store.backward_fetch(b"a", 0, 10 * MIN)) == [(MIN + 10, b"c3"), (1000, b"c1")]
    if window_inner.persistent:  # by segment, then key, then start (Kafka's RocksDB window store)
        expected = [W(b"a", 1000, b"c1"), W(b"ab", 500, b"c4"), W(b"a", MIN + 10, b"c3"), W(b"b", MIN + 5, b"s2")]
    else:  # by start, then key (Kafka's InMemoryWindowStore)
        expected = [W(b"ab", 500, b"c4"), W(b"a", 1000, b"c1"), W(b"b", MIN + 5, b"s2"), W(b"a", MIN + 10, b"c3")]
    assert list(store.all()) == expected
    assert list(store.backward_all()) == expected[::-1]
    assert list(store.fetch_range(b"a", b"a", 0, 10 * MIN)) == [W(b"a", 1000, b"c1"), W(b"a", MIN + 10, b"c3")]
    assert list(store.fetch_all(0, 999)) == [W(b"ab", 500, b"c4")]
    store.flush()
    assert list(window_inner.all()) == expected  # the store now holds exactly what was read
    store.close()


def test_window_cache_with_duplicates_writes_through(ctx):
    inner = InMemoryWindowStore("w", retention_ms=2 * MIN, window_size_ms=1000, segment_interval_ms=MIN,
                                retain_duplicates=True)
    store = CachingWindowStore(inner, ThreadCache(1_000_000))
    store.init(ctx)
    assert store.set_flush_listener(lambda *a: None) is False
    store.put(b"k", b"1", 0)
    store.put(b"k", b"2", 0)
    assert list(inner.fetch(b"k", 0, 0)) == [(0, b"1"), (0, b"2")]
    store.close()


def test_session_cache_dedups_merges_and_forwards(session_inner, ctx):
    logged = ChangeLoggingSessionStore(session_inner)
    store = CachingSessionStore(logged, ThreadCache(1_000_000))
    store.init(ctx)
    out = []
    store.set_flush_listener(lambda *a: out.append(a))
    store.put(b"k", 0, 10, b"a", timestamp=10)
    store.flush()
    store.remove(b"k", 0, 10, timestamp=20)        # session merged away...
    store.put(b"k", 0, 25, b"ab", timestamp=25)    # ...into a longer one
    store.put(b"k", 0, 25, b"abc", timestamp=26)   # dedup
    store.put(b"k", 2 * MIN, 2 * MIN, b"z", timestamp=2 * MIN)
    assert list(store.find_sessions(b"k", 5, 30)) == [(Windowed(b"k", Window(0, 25)), b"abc")]
    assert store.fetch_session(b"k", 0, 10) is None
    assert [w.window for w, _ in store.fetch(b"k")] == [Window(0, 25), Window(2 * MIN, 2 * MIN)]
    assert [w.window for w, _ in store.backward_fetch(b"k")] == [Window(2 * MIN, 2 * MIN), Window(0, 25)]
    out.clear()
    store.flush()
    assert out == [
        (Windowed(b"k", Window(0, 10)), None, b"a", 20),
        (Windowed(b"k", Window(0, 25)), b"abc", None, 26),
        (Windowed(b"k", Window(2 * MIN, 2 * MIN)), b"z", None, 2 * MIN),
    ]
    assert ctx.logged_changes[-3:] == [
        ("s", session_changelog_key(b"k", 0, 10), None, 20),
        ("s", session_changelog_key(b"k", 0, 25), b"abc", 26),
        ("s", session_changelog_key(b"k", 2 * MIN, 2 * MIN), b"z", 2 * MIN),
    ]
    assert list(session_inner.fetch(b"k")) == list(store.fetch(b"k"))
    store.close()


class _Layer:
    """A layer between a caching store and the change-logging layer that records what the
    caching store asks of it: the caching store must use the protocol (reads_from,
    write_changes, segment_interval_ms, the reads), not its type or private fields."""

    def __init__(self, below):
        self.below = below
        self.asked = []
        self.name, self.persistent = below.name, below.persistent
        for attr in ("window_size_ms", "retain_duplicates"):
            if hasattr(below, attr):
                setattr(self, attr, getattr(below, attr))

    @property
    def reads_from(self):
        self.asked.append("reads_from")
        return self.below.reads_from

    def write_changes(self, changes):
        self.asked.append(("write_changes", len(changes)))
        self.below.write_changes(changes)

    def put(self, *args):  # pragma: no cover - the protocol's write_changes is used
        raise AssertionError("put instead of write_changes")

    def __getattr__(self, name):
        if name.startswith("_"):
            raise AttributeError(name)
        self.asked.append(name)
        return getattr(self.below, name)


@pytest.mark.parametrize("kind", ["window", "session"])
def test_window_and_session_caches_talk_to_the_layer_below_through_the_protocol(kind, ctx):
    if kind == "window":
        inner = InMemoryWindowStore("w", retention_ms=2 * MIN, window_size_ms=1000, segment_interval_ms=MIN)
        layer = _Layer(ChangeLoggingWindowStore(inner))
        store = CachingWindowStore(layer, ThreadCache(1_000_000))
    else:
        inner = InMemorySessionStore("s", retention_ms=2 * MIN, segment_interval_ms=MIN)
        layer = _Layer(ChangeLoggingSessionStore(inner))
        store = CachingSessionStore(layer, ThreadCache(1_000_000))
    assert "reads_from" in layer.asked  # old values are read below the logging layer
    store.init(ctx)
    out = []
    store.set_flush_listener(lambda *a: out.append(a))
    for i in range(3):
        if kind == "window":
            store.put(b"k%d" % i, b"v", i * 1000, timestamp=5 + i)
        else:
            store.put(b"k%d" % i, 0, i, b"v", timestamp=5 + i)
    layer.asked.clear()
    store.flush()
    assert ("write_changes", 3) in layer.asked and len(out) == 3 and len(ctx.logged_changes) == 3
    assert [row[3] for row in ctx.logged_changes] == [5, 6, 7]
    if kind == "window":
        assert [v for _t, v in store.fetch(b"k1", 0, MIN)] == [b"v"]
        assert "fetch" in layer.asked
    else:
        assert [w.window for w, _v in store.find_sessions(b"k2", 0, MIN)] == [Window(0, 2)]
        assert "find_sessions" in layer.asked and "segment_interval_ms" in layer.asked
    store.close()


def test_typed_windowed_flush_listener_through_builder(ctx):
    from state.stores import Stores

    class Utf8:
        def serialize(self, o):
            return None if o is None else o.encode()

        def deserialize(self, d):
            return None if d is None else d.decode()

    store = (Stores.window_store_builder(Stores.in_memory_window_store("tw", 2 * MIN, 1000), Utf8(), Utf8())
             .with_caching_enabled().with_cache(ThreadCache(1_000_000)).build())
    store.init(ctx)
    out = []
    assert store.set_flush_listener(lambda *a: out.append(a)) is True
    store.put("k", "v1", 0, timestamp=1)
    store.put("k", "v2", 0, timestamp=2)
    store.flush()
    assert out == [(Windowed("k", Window(0, 1000)), "v2", None, 2)]
    store.close()


@pytest.mark.parametrize("max_bytes", [10_000, 3 * (2 + 2 + 64)])
def test_a_logged_rocksdb_flush_in_one_batch_equals_entry_by_entry(tmp_path, max_bytes):
    """Over RocksDB the flush writes the store in one WriteBatch before logging and forwarding;
    the changelog, the forwarded updates and what a forward reads back through the store are
    those of the in-memory store's entry-by-entry flush."""
    seen = {}
    for kind in ("rocksdb", "memory"):
        inner = RocksDBKeyValueStore("c") if kind == "rocksdb" else InMemoryKeyValueStore("c")
        ctx = RecordingContext(tmp_path / kind / "0_1")
        store = CachingKeyValueStore(ChangeLoggingKeyValueStore(inner), ThreadCache(max_bytes))
        store.init(ctx)
        inner.put(b"x0", b"old", 0)  # a stored value: the first flush reads it as `old`
        forwarded = []

        def listener(key, new, old, ts, store=store, forwarded=forwarded):
            forwarded.append((key, new, old, ts, [store.get(k) for k in (b"x0", b"x1", b"x2", b"x3")]))
        store.set_flush_listener(listener)
        for ts, (key, value) in enumerate([(b"x0", b"a"), (b"x1", b"b"), (b"x2", None), (b"x1", b"c"),
                                           (b"x3", b"d"), (b"x0", None), (b"x2", b"e")], start=1):
            store.put(key, value, ts)
            if ts == 4:
                store.flush()
        store.flush()
        seen[kind] = (ctx.logged_changes, forwarded, sorted(inner.all()))
        store.close()
    assert seen["rocksdb"] == seen["memory"]
    logged, forwarded, stored = seen["rocksdb"]
    assert (b"x2", None, None) not in [(k, n, o) for k, n, o, _t, _r in forwarded]  # deleting nothing: skipped
    assert stored == [(b"x1", b"c"), (b"x2", b"e"), (b"x3", b"d")]
    # as in Kafka, a flushed delete leaves the cache only after the forwards: a read made while
    # forwarding x3 (before x0's delete is forwarded) sees x0 deleted, not the stored b"a"
    reads_while_forwarding_x3 = next(reads for k, _n, _o, _t, reads in forwarded if k == b"x3")
    assert reads_while_forwarding_x3[0] is None


def test_a_listener_with_flush_many_gets_each_flush_at_once(inner, ctx):
    """Over a change-logging layer a listener offering `flush_many` is handed each flush's
    changes in one call, `(key, new, timestamp, old)` in write order, where the plain listener
    would be called for each; the plain call is never made then."""
    store = CachingKeyValueStore(ChangeLoggingKeyValueStore(inner), ThreadCache(10_000))
    store.init(ctx)
    plain, batches = [], []

    def listener(key, new, old, ts):
        plain.append((key, new, old, ts))
    listener.flush_many = lambda changes: batches.append(list(changes))
    store.set_flush_listener(listener)
    store.put(b"a", b"1", timestamp=1)
    store.put(b"b", b"2", timestamp=2)
    store.put(b"a", b"3", timestamp=3)
    store.flush()
    # dedup: a once with its latest value, after b (order of the latest write); nothing stored before
    assert batches == [[(b"b", b"2", 2, None, None, ()), (b"a", b"3", 3, None, None, ())]]
    store.delete(b"b", timestamp=4)
    store.flush()  # one change: written with the layer's put, still handed over as a batch
    assert batches[1:] == [[(b"b", None, 4, b"2", None, ())]]
    assert ctx.logged_changes == [("c", b"b", b"2", 2), ("c", b"a", b"3", 3), ("c", b"b", None, 4)]
    assert plain == []
    store.close()


class CountingReads:
    """The store below a caching layer, counting its reads."""

    def __init__(self, inner):
        self.inner, self.reads = inner, []

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def get(self, key):
        self.reads.append(key)
        return self.inner.get(key)


def test_a_put_right_after_a_read_that_found_nothing_flushes_without_reading_again(inner, ctx):
    store, cache, flushed = make(inner, ctx)
    store.put(b"there", b"1", timestamp=1)
    store.flush()
    flushed.clear()
    counting = store._reader = CountingReads(store._reader)
    # a table source's get-then-put: the read finds nothing, so the store's old value is None
    assert store.get(b"k") is None
    store.put(b"k", b"v", timestamp=2)
    # the memo is for the next put only: a put of a key not read before still reads at flush
    store.put(b"j", b"w", timestamp=3)
    # a read that found nothing, then another key's put, then the first key's: read at flush
    assert store.get(b"m") is None
    store.put(b"j", b"x", timestamp=4)
    store.put(b"m", b"y", timestamp=5)
    assert counting.reads == [b"k", b"m"]
    store.flush()
    # k's old value known (None); j's and m's read at flush (None: never written down)
    assert counting.reads == [b"k", b"m", b"j", b"m"]
    assert flushed == [(b"k", b"v", None, 2), (b"j", b"x", None, 4), (b"m", b"y", None, 5)]
    store.close()


def test_a_put_right_after_a_read_that_found_a_value_flushes_without_reading_again(inner, ctx):
    # an aggregation's get-then-put in a cache another store has filled: the read finds the
    # stored value, the cache cannot keep it (empty, over the budget), the put is written
    # through; its old value is the one just read, so the store is read once
    filler_bytes = 1 + 300 + ENTRY_OVERHEAD
    store, cache, flushed = make(inner, ctx, max_bytes=filler_bytes)
    filler = CachingKeyValueStore(InMemoryKeyValueStore("fill"), cache)
    filler.init(ctx)
    filler.set_flush_listener(lambda *change: None)
    filler.put(b"f", b"x" * 300, 0)
    store.put(b"k", b"1", timestamp=1)  # the cache cannot keep it: written through
    assert flushed == [(b"k", b"1", None, 1)] and cache.size_bytes == filler_bytes
    flushed.clear()
    store.put(b"j", b"0", timestamp=1)
    counting = store._reader = CountingReads(store._reader)
    assert store.get(b"k") == b"1"
    store.put(b"k", b"2", timestamp=2)
    assert flushed == [(b"j", b"0", None, 1), (b"k", b"2", b"1", 2)]
    assert counting.reads == [b"k"]
    # the memo is for the next put only: another read of j, then k's put reads k again
    assert store.get(b"j") == b"0"
    store.put(b"k", b"3", timestamp=3)
    assert flushed[2:] == [(b"k", b"3", b"2", 3)] and counting.reads == [b"k", b"j", b"k"]
    filler.close()
    store.close()


def test_a_write_through_between_the_read_and_the_put_is_not_forgotten(inner, ctx):
    # a read finds nothing, an update writes the key through (a cache too small for one
    # entry), then a put of the key: its old value is the written one, read at flush
    store, cache, flushed = make(inner, ctx, max_bytes=0)
    assert store.get(b"k") is None
    store.update(b"k", lambda old: b"1", timestamp=1)
    assert flushed == [(b"k", b"1", None, 1)]
    cache.resize(10_000)
    store.put(b"k", b"2", timestamp=2)
    store.flush()
    assert flushed[1:] == [(b"k", b"2", b"1", 2)]
    store.close()
