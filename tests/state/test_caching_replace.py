"""CachingKeyValueStore.replace (a table source's read-then-write): exactly the effects and the read
of get then put, in its C form (state/cache/_cache.c cached_replace) and its Python definition."""

import pytest

from state.cache import ENTRY_OVERHEAD, CachingKeyValueStore
from state.errors import InvalidStoreArgumentError, StoreClosedError

from recording_context import assert_caches_alike, caching_store


def _store(kind, path, max_bytes):
    store, inner, flushed = caching_store(kind, path, max_bytes)
    for key, value in ((b"d", b"40"), (b"e", b"7")):  # some keys already in the inner store
        inner.put(key, value, 0)
    return store, inner, flushed


# (key, value, timestamp): repeated keys, deletes, a key in the inner store, one it never held
OPS = [(b"a", b"1", 1), (b"b", b"22", 2), (b"a", b"333", 3), (b"c", None, 4), (b"d", b"4", 5),
       (b"a", None, 6), (b"b", b"7", 7), (b"e", b"88", 8), (b"a", b"9", 9), (b"f", None, 10)]


@pytest.mark.parametrize("form", ["c", "python"])
@pytest.mark.parametrize("kind", ["rocksdb", "memory"])
@pytest.mark.parametrize("max_bytes", [10_000_000, 3 * (3 + ENTRY_OVERHEAD), 0])
def test_replace_equals_get_then_put(tmp_path, form, kind, max_bytes):
    a, a_inner, a_flushed = _store(kind, tmp_path / "a" / "0_0", max_bytes)
    b, b_inner, b_flushed = _store(kind, tmp_path / "b" / "0_0", max_bytes)
    replace = a.replace if form == "c" else lambda *args: CachingKeyValueStore.replace(a, *args)
    for n, (key, value, ts) in enumerate(OPS):
        read = b.get(key)
        b.put(key, value, ts)
        assert replace(key, value, ts) == read  # what the get read
        if n == 4:
            a.flush_cache()
            b.flush_cache()
        assert_caches_alike(a, b, a_flushed, b_flushed)
        assert a.get(key) == value
        b.get(key)  # the same read on both sides: the LRU orders stay alike
    a.flush()
    b.flush()
    assert a_flushed == b_flushed
    assert list(a_inner.all()) == list(b_inner.all())
    assert dict(a_inner.all()) == {b"b": b"7", b"d": b"4", b"e": b"88", b"a": b"9"}
    if max_bytes == 10_000_000:  # nothing evicted before the flushes: each listener call is known
        assert (b"d", b"4", b"40", 5) in a_flushed  # the old value read by the replace's get
    a.close()
    b.close()


def test_replace_bad_inputs_and_closed(tmp_path):
    store, inner, _ = _store("memory", tmp_path / "0_0", 10_000)
    with pytest.raises(InvalidStoreArgumentError):
        store.replace("not bytes", b"v", 1)
    with pytest.raises(InvalidStoreArgumentError):
        store.replace(b"k", "not bytes", 1)
    assert store.get(b"k") is None  # the bad value wrote nothing
    store.close()
    with pytest.raises(StoreClosedError):
        store.replace(b"k", b"v", 1)
    with pytest.raises(StoreClosedError):
        CachingKeyValueStore.replace(store, b"k", b"v", 1)
