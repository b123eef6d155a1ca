"""The KV hot path's shortcuts keep the plain path's results: the typed layer's key memo, the
caching layer's inlined put/get and its write-through when the cache cannot hold an entry."""

import json

import pytest

from state.cache import ENTRY_OVERHEAD, CachingKeyValueStore, ThreadCache
from state.errors import InvalidStoreArgumentError, StoreClosedError
from state.logging_store import ChangeLoggingKeyValueStore
from state.memory_kv import InMemoryKeyValueStore
from state.rocksdb_kv import RocksDBKeyValueStore
from state.typed import TypedKeyValueStore

from recording_context import RecordingContext

try:
    from state.cache import _cache
except ImportError:  # pragma: no cover - the accelerator is optional
    _cache = None


class CountingSerde:
    """A str or JSON serde that counts serialize calls."""

    def __init__(self, json_mode=False):
        self.json_mode = json_mode
        self.calls = 0

    def serialize(self, obj):
        self.calls += 1
        if obj is None:
            return None
        return json.dumps(obj).encode() if self.json_mode else str(obj).encode()

    def deserialize(self, data):
        if data is None:
            return None
        return json.loads(data) if self.json_mode else data.decode()


class IntSerde:
    def serialize(self, obj):
        return None if obj is None else obj.to_bytes(8, "big", signed=True)

    def deserialize(self, data):
        return None if data is None else int.from_bytes(data, "big", signed=True)


@pytest.fixture(params=["rocksdb", "memory"])
def inner(request):
    return RocksDBKeyValueStore("hp") if request.param == "rocksdb" else InMemoryKeyValueStore("hp")


@pytest.fixture
def ctx(tmp_path):
    return RecordingContext(tmp_path / "0_4")


def typed_over(inner, ctx, key_serde, *, cache_bytes=None):
    store = ChangeLoggingKeyValueStore(inner)
    if cache_bytes is not None:
        store = CachingKeyValueStore(store, ThreadCache(cache_bytes))
    typed = TypedKeyValueStore(store, key_serde, IntSerde())
    typed.init(ctx)
    return typed


def test_key_serialized_once_for_get_then_put_of_the_same_key(inner, ctx):
    serde = CountingSerde()
    store = typed_over(inner, ctx, serde)
    key = "word"
    assert store.get(key) is None
    store.put(key, 1, 5)
    assert serde.calls == 1
    assert store.get(key) == 1
    assert inner.get(b"word") == (1).to_bytes(8, "big", signed=True)
    # an equal but distinct key object is serialized again (the memo needs the same object)
    other = "".join(["wo", "rd"])
    assert other == key and other is not key
    store.put(other, 2, 6)
    assert serde.calls == 2
    assert store.get("word") == 2
    store.close()


def test_mutable_key_is_serialized_on_every_call(inner, ctx):
    serde = CountingSerde(json_mode=True)
    store = typed_over(inner, ctx, serde)
    key = ["a"]
    store.put(key, 1)
    key.append("b")  # same object, new content: must land under the new serialized key
    store.put(key, 2)
    assert serde.calls == 2
    assert store.get(["a"]) == 1
    assert store.get(["a", "b"]) == 2
    store.close()


def test_float_keys_equal_but_differently_serialized_are_not_confused(inner, ctx):
    serde = CountingSerde()
    store = typed_over(inner, ctx, serde)
    store.put(0.0, 1)
    store.put(-0.0, 2)  # 0.0 == -0.0 but "0.0" != "-0.0"
    assert inner.get(b"0.0") is not None and inner.get(b"-0.0") is not None
    store.close()


def test_bad_key_and_value_errors_name_the_store(inner, ctx):
    store = typed_over(inner, ctx, CountingSerde())
    with pytest.raises(InvalidStoreArgumentError, match="'hp'.*key must not be None"):
        store.get(None)
    with pytest.raises(InvalidStoreArgumentError, match="'hp'.*key must not be None"):
        store.put(None, 1)
    with pytest.raises(InvalidStoreArgumentError, match="'hp'.*cannot serialize value 'x'"):
        store.put("k", "x")
    store.close()
    with pytest.raises(StoreClosedError, match="'hp'"):
        store.get("k")
    with pytest.raises(StoreClosedError, match="'hp'"):
        store.put("k", 1)


def run_ops(store, ops):
    """Apply (op, key, value, ts) tuples; 'flush' flushes the cache."""
    results = []
    for op, key, value, ts in ops:
        if op == "get":
            results.append(store.get(key))
        elif op == "put":
            store.put(key, value, ts)
        elif op == "delete":
            results.append(store.delete(key, ts))
        elif op == "flush":
            store.flush()
    return results


OPS = [
    ("get", b"a", None, 0), ("put", b"a", b"1", 1), ("get", b"a", None, 0), ("put", b"b", b"1", 2),
    ("put", b"a", b"2", 3), ("delete", b"c", None, 4), ("put", b"c", b"9", 5), ("flush", None, None, 0),
    ("get", b"b", None, 0), ("delete", b"b", None, 6), ("get", b"b", None, 0), ("put", b"a", b"3", 7),
    ("flush", None, None, 0), ("delete", b"zz", None, 8),
]


STATS_AFTER_OPS = {"entries": 0, "dirty": 0, "bytes": 0, "hits": 0, "misses": 7, "evictions": 11}


@pytest.mark.parametrize("max_bytes", [0, 1, ENTRY_OVERHEAD - 1])
def test_cache_too_small_for_any_entry_writes_each_put_down_at_once(tmp_path, max_bytes):
    """Same flush-listener calls (with old values), changelog and stats as an insert followed by
    the eviction of that entry (the figures were taken from the insert-then-evict code)."""
    ctx = RecordingContext(tmp_path / "t")
    store = CachingKeyValueStore(ChangeLoggingKeyValueStore(InMemoryKeyValueStore("hp")), ThreadCache(max_bytes))
    store.init(ctx)
    flushed = []
    store.set_flush_listener(lambda k, new, old, ts: flushed.append((k, new, old, ts)))
    assert run_ops(store, OPS) == [None, b"1", None, b"1", b"1", None, None]
    assert flushed == [
        (b"a", b"1", None, 1), (b"b", b"1", None, 2), (b"a", b"2", b"1", 3), (b"c", b"9", None, 5),
        (b"b", None, b"1", 6), (b"a", b"3", b"2", 7),
    ]
    # the deletes of keys never stored are neither forwarded nor logged (both values None)
    assert ctx.logged_changes == [("hp", k, new, ts) for k, new, _, ts in flushed]
    assert store.cache.size_bytes == 0
    assert store.cache.stats(store.namespace) == STATS_AFTER_OPS
    store.close()


def test_empty_cache_in_a_budget_another_store_fills_writes_each_put_down_at_once(tmp_path):
    """Another store's entries fill the thread's budget and this store's cache is empty: each
    entry would be inserted and evicted at once (a store over the budget evicts only its own
    entries, Kafka's ThreadCache.maybeEvict), so the same listener calls, changelog and stats as
    a cache too small for any entry; the other store's entry stays, never evicted by this one."""
    ctx = RecordingContext(tmp_path / "f")
    filler_bytes = 1 + 200 + ENTRY_OVERHEAD
    cache = ThreadCache(filler_bytes)
    filler = CachingKeyValueStore(ChangeLoggingKeyValueStore(InMemoryKeyValueStore("fill")), cache)
    filler.init(ctx)
    filler.set_flush_listener(lambda *change: None)
    filler.put(b"f", b"x" * 200, 0)
    store = CachingKeyValueStore(ChangeLoggingKeyValueStore(InMemoryKeyValueStore("hp")), cache)
    store.init(ctx)
    flushed = []
    store.set_flush_listener(lambda k, new, old, ts: flushed.append((k, new, old, ts)))
    assert run_ops(store, [op for op in OPS if op[0] != "flush"]) == [None, b"1", None, b"1", b"1", None, None]
    assert flushed == [
        (b"a", b"1", None, 1), (b"b", b"1", None, 2), (b"a", b"2", b"1", 3), (b"c", b"9", None, 5),
        (b"b", None, b"1", 6), (b"a", b"3", b"2", 7),
    ]
    assert store.cache.stats(store.namespace) == STATS_AFTER_OPS
    assert cache.stats(filler.namespace)["entries"] == 1 and cache.stats(filler.namespace)["evictions"] == 0
    assert cache.size_bytes == filler_bytes
    # room again (the filler flushed and closed): an entry is kept
    filler.close()
    store.put(b"k", b"v", 9)
    assert cache.stats(store.namespace)["entries"] == 1 and flushed[-1][0] == b"a"
    store.close()


def test_write_through_without_listener_logs_every_write(tmp_path):
    ctx = RecordingContext(tmp_path / "x")
    store = CachingKeyValueStore(ChangeLoggingKeyValueStore(InMemoryKeyValueStore("hp")), ThreadCache(0))
    store.init(ctx)
    store.put(b"k", b"v", 1)
    store.put(b"gone", None, 2)
    assert ctx.logged_changes == [("hp", b"k", b"v", 1), ("hp", b"gone", None, 2)]
    store.close()


def test_shrinking_to_zero_keeps_earlier_dirty_entries_in_order(tmp_path):
    ctx = RecordingContext(tmp_path / "y")
    cache = ThreadCache(10_000)
    store = CachingKeyValueStore(ChangeLoggingKeyValueStore(InMemoryKeyValueStore("hp")), cache)
    store.init(ctx)
    flushed = []
    store.set_flush_listener(lambda k, new, old, ts: flushed.append((k, new, old, ts)))
    store.put(b"a", b"1", 1)
    store.put(b"b", b"1", 2)
    cache.resize(0)  # evicts a (flushing a then b), leaving the cache empty
    assert flushed == [(b"a", b"1", None, 1), (b"b", b"1", None, 2)]
    store.put(b"a", b"2", 3)
    assert flushed[-1] == (b"a", b"2", b"1", 3)
    assert cache.size_bytes == 0
    store.close()


def test_closed_inner_store_fails_cached_reads_and_writes(inner, ctx):
    store = CachingKeyValueStore(ChangeLoggingKeyValueStore(inner), ThreadCache(10_000))
    store.init(ctx)
    store.put(b"a", b"1", 1)
    assert store.get(b"a") == b"1"
    inner.close()
    with pytest.raises(StoreClosedError, match="'hp'"):
        store.get(b"a")
    with pytest.raises(StoreClosedError, match="'hp'"):
        store.put(b"a", b"2", 2)
    store.close(dirty=True)
    with pytest.raises(StoreClosedError, match="'hp'"):
        store.get(b"a")


def _python_store(store):
    """The same store through the Python definitions of get and put (not the C calls bound to it)."""
    store.__dict__.pop("get", None)
    store.__dict__.pop("put", None)
    return store


@pytest.mark.parametrize("seed", range(3))
def test_c_get_and_put_match_the_python_definitions(tmp_path, seed):
    """CachingKeyValueStore.get / put in C (state/cache/_cache.c, where built) against the
    Python methods: the same reads, flushes (old values too), changelog, stats and reads of
    the store below, over random operations of two stores sharing a small budget."""
    import random
    runs = []
    for python in (False, True):
        rng = random.Random(seed)
        ctx = RecordingContext(tmp_path / f"{seed}_{python}")
        cache = ThreadCache(600)
        stores, flushed, reads = [], [], []
        for name in ("a", "b"):
            inner = ChangeLoggingKeyValueStore(InMemoryKeyValueStore(name))
            store = CachingKeyValueStore(inner, cache)
            store.init(ctx)
            if python:
                _python_store(store)
            elif _cache is not None:
                assert store.get.__func__ is _cache.cached_get and store.put.__func__ is _cache.cached_put
            store.set_flush_listener(lambda k, new, old, ts, name=name, flushed=flushed:
                                     flushed.append((name, k, new, old, ts)))
            below_get = store._reader.get
            store._reader.get = (lambda key, below_get=below_get, name=name, reads=reads:
                                 reads.append((name, key)) or below_get(key))
            stores.append(store)
        results = []
        for step in range(2500):
            store = rng.choice(stores)
            key = b"k%d" % rng.randrange(12)
            r = rng.random()
            if r < 0.45:
                results.append(store.get(key))
            elif r < 0.95:
                store.put(key, rng.choice([None, b"", b"v", b"w" * 100, b"x" * 600]), step)
            else:
                store.flush()
        runs.append((results, flushed, reads, ctx.logged_changes,
                     [cache.stats(store.namespace) for store in stores], cache.size_bytes))
    assert runs[0] == runs[1]
    assert runs[0][1] and runs[0][2]  # flushes and reads below happened


def test_c_get_and_put_hand_other_cases_to_the_python_definitions(inner, ctx):
    store = CachingKeyValueStore(ChangeLoggingKeyValueStore(inner), ThreadCache(10_000))
    store.init(ctx)
    flushed = []
    store.set_flush_listener(lambda k, new, old, ts: flushed.append((k, new, old, ts)))
    with pytest.raises(InvalidStoreArgumentError, match="'hp'.*key must be bytes"):
        store.get("k")
    with pytest.raises(InvalidStoreArgumentError, match="'hp'"):
        store.put(b"k", "v", 1)
    store.put(b"k", b"v", timestamp=3)  # a keyword: the Python method's call
    store.put(b"j", b"w")  # no timestamp: the supplier's
    assert store.get(key=b"k") == b"v"
    store.flush()
    assert [(k, new, old) for k, new, old, _ in flushed] == [(b"k", b"v", None), (b"j", b"w", None)]
    assert flushed[0][3] == 3
    store.close()
    with pytest.raises(StoreClosedError):
        store.get(b"k")
    with pytest.raises(StoreClosedError):
        store.put(b"k", b"v", 1)
