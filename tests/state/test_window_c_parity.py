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


def _typed(tmp_path, name, python):
    from recording_context import RecordingContext
    from state.stores import Stores
    from streams import serdes

    ctx = RecordingContext(tmp_path / name / "0_0")
    supplier = Stores.persistent_window_store(name, retention_ms=300, window_size_ms=50, retain_duplicates=True)
    store = Stores.window_store_builder(supplier, serdes.STRING, serdes.INT64).with_caching_disabled() \
        .with_logging_enabled().build()
    store.init(ctx)
    if python:  # the class's Python methods
        del store.put
        del store.fetch_values
    return store, ctx


def _outcome(call, *args):
    try:
        return "ok", call(*args)
    except Exception as exc:  # the error is part of what must match
        return type(exc).__name__, str(exc).replace("'py'", "'c'")


def test_c_typed_put_and_fetch_match_the_python_methods(tmp_path):
    c_store, c_ctx = _typed(tmp_path, "c", False)
    py_store, py_ctx = _typed(tmp_path, "py", True)
    assert not isinstance(py_store.put, type(c_store.put))  # C is in use
    rng = random.Random(9)
    kinds = set()
    try:
        for step in range(1500):
            key = rng.choice(("a", "b", "ab", "", 5, None))  # 5 and None do not serialize
            ts = rng.randint(0, 400)
            if rng.random() < 0.6:
                value = rng.choice((step, None, "not an int"))  # the last does not serialize
                args = (key, value, ts, ts + 1)  # the record's timestamp: what the changelog record carries
                got = _outcome(c_store.put, *args)
                assert got == _outcome(py_store.put, *args), step
                kinds.add(("put", got[0]))
            else:
                if rng.random() < 0.05 and isinstance(key, str):  # a stored value INT64 refuses
                    for store in (c_store, py_store):
                        store.inner_most().put(key.encode(), b"bad", ts)
                args = (key, max(0, ts - 100), ts + 100)
                got = _outcome(c_store.fetch_values, *args)
                assert got == _outcome(py_store.fetch_values, *args), step
                kinds.add(("fetch", got[0], bool(got[1]) if got[0] == "ok" else None))
        assert [c[1:] for c in c_ctx.logged_changes] == [c[1:] for c in py_ctx.logged_changes]
        assert len(c_ctx.logged_changes) > 100
        # the cases the C forms hand over happened: keys and values that do not serialize, a
        # stored value that does not decode, and plain reads that found records
        assert {("put", "InvalidStoreArgumentError"), ("fetch", "ok", True)} <= kinds
        assert len({k for k in kinds if k[0] == "fetch" and k[1] != "ok"}) >= 2, kinds
    finally:
        c_store.close()
        py_store.close()


def test_keyword_and_odd_calls_reach_the_python_methods(tmp_path):
    # the C forms take the positional common call; a call with keywords (or too few arguments)
    # is the Python method's, with its own errors
    store, ctx = _typed(tmp_path, "kw", False)
    store.put("k", 1, window_start_timestamp=10, timestamp=11)
    store.put(key="k", value=2, window_start_timestamp=20)
    assert store.fetch_values("k", time_from=0, time_to=30) == [(10, 1), (20, 2)]
    with pytest.raises(TypeError):
        store.put("k", 3)
    inner = store.inner_most()
    assert inner.put_for_changelog(b"j", b"v", window_start_timestamp=25) is not None
    assert inner.fetch_values(key=b"j", time_from=0, time_to=30) == [(25, b"v")]
    with pytest.raises(TypeError):
        inner.fetch_values(b"j", 0)
    assert [change[1:3] for change in ctx.logged_changes][:2] == [
        (window.window_changelog_key(b"k", 10, 1), b"\x00" * 7 + b"\x01"),
        (window.window_changelog_key(b"k", 20, 2), b"\x00" * 7 + b"\x02")]
    store.close()
