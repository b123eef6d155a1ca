"""A caching key-value store read from a thread other than the one that opened it (an interactive
query's, a global store read by a stream task): Kafka's CachingKeyValueStore caches a read-through
value only on its own stream thread, "as we don't want other threads to trigger an
eviction/flush". A miss read elsewhere leaves the cache as it was (the read's hit or miss is
still counted); on the owning thread it is cached, in both forms of get (C and Python)."""

import threading

import pytest

from state.cache import ENTRY_OVERHEAD, CachingKeyValueStore

from recording_context import caching_store

KEY_BYTES = 2  # b"k1"... and one-byte values: an entry costs 3 + ENTRY_OVERHEAD bytes


def _in_thread(fn):
    """fn() run on a new thread: its result."""
    out = {}

    def run():
        out["result"] = fn()
    t = threading.Thread(target=run)
    t.start()
    t.join(30)
    assert not t.is_alive()
    return out["result"]


def _store(tmp_path, kind):
    """A store holding k0..k3 below its cache, and a cache of two entries holding k4 and k5
    dirty (written, not flushed): a read-through entry would evict the dirty eldest, k4, and so
    flush both."""
    store, inner, flushed = caching_store(kind, tmp_path / "0_0", 2 * (KEY_BYTES + 1 + ENTRY_OVERHEAD))
    for i in range(4):
        inner.put(b"k%d" % i, b"%d" % i, 0)
    store.put(b"k4", b"4", 1)
    store.put(b"k5", b"5", 2)
    return store, flushed


@pytest.mark.parametrize("form", ["c", "python"])
@pytest.mark.parametrize("kind", ["rocksdb", "memory"])
def test_a_miss_read_on_another_thread_is_not_cached_and_flushes_nothing(tmp_path, form, kind):
    store, flushed = _store(tmp_path, kind)
    get = store.get if form == "c" else (lambda key: CachingKeyValueStore.get(store, key))
    before = store.cache.stats(store.namespace)
    flushing_threads = []
    listener = store._flush_listener
    store.set_flush_listener(lambda *change: (flushing_threads.append(threading.get_ident()), listener(*change)))

    value = _in_thread(lambda: get(b"k0"))

    assert value == b"0"  # read from the store below
    after = store.cache.stats(store.namespace)
    assert (after["entries"], after["dirty"], after["bytes"], after["evictions"]) == (
        before["entries"], before["dirty"], before["bytes"], before["evictions"])
    assert after["misses"] == before["misses"] + 1  # the miss is counted, as Kafka's get counts it
    assert flushed == [] and flushing_threads == []
    # a hit from another thread reads the cached value
    assert _in_thread(lambda: get(b"k5")) == b"5"
    # and the writer's next put of k0 does not take the other thread's read as its old value
    store.put(b"k0", b"new", 3)
    assert store.get(b"k0") == b"new"
    store.flush()
    assert (b"k0", b"new", b"0", 3) in flushed  # the old value read by the flush itself
    store.close()


@pytest.mark.parametrize("form", ["c", "python"])
def test_a_miss_read_on_the_opening_thread_is_cached_as_kafka_does(tmp_path, form):
    store, flushed = _store(tmp_path, "memory")
    get = store.get if form == "c" else (lambda key: CachingKeyValueStore.get(store, key))
    assert get(b"k0") == b"0"
    stats = store.cache.stats(store.namespace)
    # the read-through entry went in and evicted k4, whose flush wrote k4 and k5
    assert stats["evictions"] == 1 and stats["dirty"] == 0
    assert [change[0] for change in flushed] == [b"k4", b"k5"]
    store.close()
