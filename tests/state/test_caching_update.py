"""CachingKeyValueStore.update: one read-modify-write with exactly the cache effects of get + put."""

import pytest

from state.cache import ENTRY_OVERHEAD, CachingKeyValueStore, ThreadCache
from state.errors import InvalidStoreArgumentError, StoreClosedError
from state.memory_kv import InMemoryKeyValueStore

from recording_context import RecordingContext, assert_caches_alike, caching_store


_store = caching_store


def _add_one(old):
    return b"1" if old is None else str(int(old) + 1).encode()


# (key, timestamp) sequences: repeated keys, a budget that evicts, and one that holds nothing
OPS = [(b"a", 1), (b"b", 2), (b"a", 3), (b"c", 4), (b"d", 5), (b"a", 6), (b"b", 7), (b"e", 8), (b"a", 9)]


@pytest.mark.parametrize("kind", ["rocksdb", "memory"])
@pytest.mark.parametrize("max_bytes", [10_000_000, 3 * (2 + ENTRY_OVERHEAD), 0])
def test_update_equals_get_then_put(tmp_path, kind, max_bytes):
    a, a_inner, a_flushed = _store(kind, tmp_path / "a" / "0_0", max_bytes)
    b, b_inner, b_flushed = _store(kind, tmp_path / "b" / "0_0", max_bytes)
    for inner in (a_inner, b_inner):  # some counts already in the inner store
        inner.put(b"d", b"40", 0)
        inner.put(b"e", b"7", 0)
    for n, (key, ts) in enumerate(OPS):
        expected = _add_one(b.get(key))
        b.put(key, expected, ts)
        assert a.update(key, _add_one, ts) == expected
        if n == 4:
            a.flush_cache()
            b.flush_cache()
        assert_caches_alike(a, b, a_flushed, b_flushed)
    a.flush()
    b.flush()
    assert a_flushed == b_flushed
    assert list(a_inner.all()) == list(b_inner.all())
    assert dict(a_inner.all())[b"a"] == b"4" and dict(a_inner.all())[b"d"] == b"41"
    a.close()
    b.close()


def test_update_bad_inputs_and_closed(tmp_path):
    store, _, _ = _store("memory", tmp_path / "0_0", 10_000)
    with pytest.raises(InvalidStoreArgumentError):
        store.update("not bytes", _add_one, 1)
    with pytest.raises(InvalidStoreArgumentError):
        store.update(b"k", lambda old: 5, 1)
    assert store.get(b"k") is None  # nothing written by the failed update
    store.close()
    with pytest.raises(StoreClosedError):
        store.update(b"k", _add_one, 1)


class _CountingStore(InMemoryKeyValueStore):
    reads = 0

    def get(self, key):
        _CountingStore.reads += 1
        return super().get(key)


@pytest.mark.parametrize("max_bytes", [10_000_000, 4 * (2 + ENTRY_OVERHEAD), 0])
@pytest.mark.parametrize("seed", range(4))
def test_flush_listener_old_values_are_exact_without_extra_reads(tmp_path, max_bytes, seed):
    """The old value the listener gets is what the store held before each write-down, whether the
    cache knew it (clean before being dirtied, read through by update) or had to read it."""
    import random

    rnd = random.Random(seed)
    inner = _CountingStore("c")
    store = CachingKeyValueStore(inner, ThreadCache(max_bytes))
    store.init(RecordingContext(tmp_path / "0_0"))
    shadow = {}
    events = []

    def listener(key, new, old, ts):
        assert old == shadow.get(key), (key, new, old, shadow.get(key))
        events.append(key)
        if new is None:
            shadow.pop(key, None)
        else:
            shadow[key] = new

    store.set_flush_listener(listener)
    keys = [b"k%d" % i for i in range(6)]
    for ts in range(400):
        key, op = rnd.choice(keys), rnd.random()
        if op < 0.35:
            store.update(key, _add_one, ts)
        elif op < 0.6:
            store.put(key, b"%d" % ts, ts)
        elif op < 0.7:
            store.delete(key, ts)
        elif op < 0.9:
            store.get(key)
        else:
            store.flush_cache()
    store.flush()
    assert events  # the listener ran (the asserts inside it are the check)
    assert dict(inner.all()) == shadow
    store.close()


def test_a_counted_key_flushes_without_reading_the_store(tmp_path):
    inner = _CountingStore("c")
    store = CachingKeyValueStore(inner, ThreadCache(10_000))
    store.init(RecordingContext(tmp_path / "0_0"))
    flushed = []
    store.set_flush_listener(lambda k, new, old, ts: flushed.append((k, new, old)))
    for ts in range(3):
        store.update(b"a", _add_one, ts)
    store.flush_cache()
    store.update(b"a", _add_one, 3)
    _CountingStore.reads = 0
    store.flush_cache()
    assert _CountingStore.reads == 0
    assert flushed == [(b"a", b"3", None), (b"a", b"4", b"3")]
    store.close()


def _int64_add_one(old):
    if old is None:
        return (1).to_bytes(8, "big", signed=True)
    if len(old) != 8:
        return b"odd:" + old
    n = int.from_bytes(old, "big", signed=True)
    return b"overflow" if n == 2 ** 63 - 1 else (n + 1).to_bytes(8, "big", signed=True)


def test_update_many_inlines_an_int64_increment_and_leaves_every_odd_case_to_fn(tmp_path):
    marked = lambda old: _int64_add_one(old)  # noqa: E731
    marked.int64_increment = True
    big = (2 ** 63 - 1).to_bytes(8, "big", signed=True)
    results = []
    for name, fn in (("plain", _int64_add_one), ("marked", marked)):
        store, inner, flushed = _store("memory", tmp_path / name / "0_0", 10_000_000)
        for key, value in ((b"n", (41).to_bytes(8, "big")), (b"short", b"abc"), (b"max", big), (b"gone", None)):
            store.put(key, value, 1)  # cached (dirty) entries: the hit path
        last = store.update_many([b"n", b"short", b"max", b"gone", b"n", b"new"], fn, [2, 3, 4, 5, 6, 7])
        store.flush()
        results.append((last, sorted(inner.all()), flushed))
        store.close()
    assert results[0] == results[1]
    stored = dict(results[1][1])
    assert int.from_bytes(stored[b"n"], "big") == 43 and stored[b"short"] == b"odd:abc"
    assert stored[b"max"] == b"overflow" and int.from_bytes(stored[b"gone"], "big") == 1


def test_update_many_reports_how_far_it_got_when_fn_fails(tmp_path):
    store, _, _ = _store("memory", tmp_path / "0_0", 10_000_000)

    def fn(old):
        if old == b"x":
            raise ValueError("boom")
        return _add_one(old)
    store.put(b"b", b"x", 1)
    with pytest.raises(ValueError) as err:
        store.update_many([b"a", b"a", b"b", b"c"], fn, [1, 2, 3, 4])
    assert err.value.updates_done == 2 and store.get(b"a") == b"2" and store.get(b"c") is None
