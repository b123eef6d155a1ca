"""Caching layer: ThreadCache budget, dedup, LRU eviction order, flush listener, merged reads."""

import pathlib

import pytest

from state.caching import ENTRY_OVERHEAD, CachingKeyValueStore, ThreadCache
from state.errors import InvalidStoreArgumentError, StoreClosedError
from state.logging_store import ChangeLoggingKeyValueStore
from state.memory_kv import InMemoryKeyValueStore
from state.rocksdb_kv import RocksDBKeyValueStore
from state.task_id import TaskId


class RecordingContext:
    def __init__(self, task_dir: pathlib.Path, config=None):
        self.application_id = "app"
        self.task_id = TaskId(0, 2)
        self.task_dir = task_dir
        self.config = config or {}
        self.registered = []
        self.logged_changes = []

    def store_dir(self, store_name):
        return self.task_dir / "rocksdb" / store_name

    def register(self, store, restore_callback, *, logged):
        self.registered.append((store, restore_callback, logged))

    def log_change(self, store_name, key, value, timestamp, headers=None):
        self.logged_changes.append((store_name, key, value, timestamp))


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
