"""A plain RocksDB window store takes put_for_changelog and fetch_values through C
(state/_window.c put_window / fetch_window) in the common case and hands every other case to
the Python methods: over random puts and fetches (out of order, expired, with segments to drop,
None values, with and without duplicates) the C store must return, store and keep exactly what
the same store without the C forms does."""

import random

import pytest

from state import window
from state.errors import InvalidStoreArgumentError, StoreClosedError
from state.window import RocksDBWindowStore

pytestmark = pytest.mark.skipif(window._put_window_c is None, reason="state._window not built")

STATE = ("observed_stream_time", "_min_live_segment", "_max_segment", "_seqnum", "expired_records")


def _store(tmp_path, name, retain, python):
    store = RocksDBWindowStore(name, retention_ms=300, window_size_ms=50, segment_interval_ms=100,
                               retain_duplicates=retain)
    store.open(tmp_path / name)
    if python:  # the class's Python methods
        del store.put_for_changelog
        del store.fetch_values
    return store


def _contents(store):
    with store.all() as it:
        return list(it)


@pytest.mark.parametrize("retain", [True, False])
def test_c_put_and_fetch_match_the_python_methods(tmp_path, retain):
    c_store, py_store = _store(tmp_path, "c", retain, False), _store(tmp_path, "py", retain, True)
    assert not isinstance(py_store.put_for_changelog, type(c_store.put_for_changelog))  # C is in use
    rng = random.Random(5 if retain else 6)
    now = 0
    try:
        for step in range(3000):
            key = rng.choice((b"a", b"b", b"ab", b"", b"a\x00"))
            if rng.random() < 0.6:
                now += rng.randint(0, 15)
                # mostly near the stream time, some late (expired), a few None values
                ts = max(0, now - (rng.randint(0, 500) if rng.random() < 0.1 else rng.randint(0, 40)))
                value = None if rng.random() < 0.05 else b"v%d" % step
                assert c_store.put_for_changelog(key, value, ts) == py_store.put_for_changelog(key, value, ts), step
            else:
                low = max(0, now - rng.randint(0, 400))
                high = low + rng.randint(0, 300)
                assert c_store.fetch_values(key, low, high) == py_store.fetch_values(key, low, high), step
            assert [getattr(c_store, a) for a in STATE] == [getattr(py_store, a) for a in STATE], step
        assert c_store.expired_records > 0 and c_store.min_live_segment > 0  # the odd cases happened
        assert _contents(c_store) == _contents(py_store)
    finally:
        c_store.close()
        py_store.close()


def test_bad_arguments_and_a_closed_store_get_the_python_methods_errors(tmp_path):
    store = _store(tmp_path, "s", True, False)
    with pytest.raises(InvalidStoreArgumentError):
        store.put_for_changelog(b"k", b"v", -1)
    with pytest.raises(InvalidStoreArgumentError):
        store.fetch_values(b"k", 5, -2)
    with pytest.raises(InvalidStoreArgumentError):
        store.put_for_changelog(b"k", "not bytes", 5)
    store.close()
    with pytest.raises(StoreClosedError):
        store.put_for_changelog(b"k", b"v", 5)
    with pytest.raises(StoreClosedError):
        store.fetch_values(b"k", 0, 5)
