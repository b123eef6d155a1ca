"""The window stores' single-key put/fetch path (a stream-stream join's every record): the bytes
store's `fetch_values` against a model of Kafka's rules, the typed layer's TimedFetch, the
change-logging put with the key the store made, and the RocksDB engine's tailing scan."""

import random
import threading

import pytest

from state.errors import InvalidStoreArgumentError, StoreClosedError
from state.rocksdb_kv import RocksDBKeyValueStore
from state.stores import Stores
from state.typed import TimedFetch
from state import window as window_module
from state.window import InMemoryWindowStore, RocksDBWindowStore, window_changelog_key
from streams import serdes

from recording_context import RecordingContext

MIN = 60_000


@pytest.fixture(params=["rocksdb", "memory"])
def persistent(request):
    return request.param == "rocksdb"


@pytest.fixture(params=["C", "python"])
def loop(request):
    """fetch_values' loop over a RocksDB engine: state/_window.c, or the Python one."""
    if request.param == "C" and window_module._scan_key_c is None:
        pytest.skip("state._window (the C loop) not built")
    return request.param


@pytest.fixture
def ctx(tmp_path):
    return RecordingContext(tmp_path / "0_0")


def test_fetch_values_follows_kafkas_rules(persistent, loop, ctx):
    """Random puts (keys that extend one another, duplicates, times over several segments, some
    older than the retention) and fetches; each fetch's answer derived from the rules: the
    key's records whose window start is in [time_from, time_to] and after observed stream time
    minus the retention, and whose segment (start // interval) was not dropped (segments below
    segment(observed - retention) are), in time order, equal starts in put order."""
    retention, interval = 2 * MIN, MIN
    cls = RocksDBWindowStore if persistent else InMemoryWindowStore
    store = cls("w", retention_ms=retention, window_size_ms=1000, segment_interval_ms=interval,
                retain_duplicates=True)
    store.init(ctx)
    if persistent:
        assert (store._scan_iterator is not None) == (window_module._scan_key_c is not None)
        if loop == "python":
            store._scan_iterator = None
    rng = random.Random(7)
    keys = [b"a", b"ab", b"a\x00", b"b", b"\xff"]
    kept: list = []  # (key, start, value) in put order
    observed = -1
    for i in range(3000):
        key = rng.choice(keys)
        start = max(0, observed - rng.randint(-2000, 3 * MIN)) if observed >= 0 else rng.randint(0, 1000)
        value = b"v%d" % i
        store.put(key, value, start)
        observed = max(observed, start)
        dropped_below = max(observed - retention, 0) // interval
        if start // interval >= dropped_below:
            kept.append((key, start, value))
        kept = [r for r in kept if r[1] // interval >= dropped_below]
        if i % 7 == 0:
            key = rng.choice(keys)
            time_from = max(0, observed - rng.randint(0, 3 * MIN))
            time_to = time_from + rng.randint(0, 2 * MIN)
            expected = sorted(((s, v) for k, s, v in kept if k == key and time_from <= s <= time_to
                               and s > observed - retention), key=lambda r: r[0])  # stable: put order
            assert store.fetch_values(key, time_from, time_to) == expected
            assert list(store.fetch(key, time_from, time_to)) == expected
        if i % 500 == 499:
            store.flush()  # later fetches read files too
    store.close()


def test_the_c_loop_gives_what_the_python_loop_gives(ctx):
    """Parity of the seam: the same store read by both loops, keys of many lengths (a long
    one past the C loop's stack buffer), some sharing bytes with the bounds' encodings."""
    if window_module._scan_key_c is None:
        pytest.skip("state._window (the C loop) not built")
    store = RocksDBWindowStore("w", retention_ms=10 * MIN, window_size_ms=1, segment_interval_ms=MIN,
                               retain_duplicates=True)
    store.init(ctx)
    rng = random.Random(3)
    keys = [b"", b"\x00", b"\xff", b"\x7f\xff\xff\xff", b"a" * 200] + [
        bytes(rng.randrange(256) for _ in range(rng.randrange(1, 12))) for _ in range(30)]
    for i in range(4000):
        store.put(rng.choice(keys), b"%d" % i, rng.randrange(0, 9 * MIN))
    c_loop = store._scan_iterator
    for _ in range(400):
        key = rng.choice(keys)
        time_from = rng.randrange(0, 9 * MIN)
        time_to = time_from + rng.randrange(0, 3 * MIN)
        store._scan_iterator = c_loop
        by_c = store.fetch_values(key, time_from, time_to)
        store._scan_iterator = None
        assert by_c == store.fetch_values(key, time_from, time_to)
    store.close()


def test_fetch_values_checks_its_arguments(persistent, ctx):
    cls = RocksDBWindowStore if persistent else InMemoryWindowStore
    store = cls("w", retention_ms=MIN, window_size_ms=10, segment_interval_ms=MIN)
    store.init(ctx)
    with pytest.raises(InvalidStoreArgumentError, match="'w'.*key must be bytes"):
        store.fetch_values("k", 0, 10)
    with pytest.raises(InvalidStoreArgumentError, match="'w'.*time_to"):
        store.fetch_values(b"k", 0, -1)
    with pytest.raises(InvalidStoreArgumentError, match="'w'.*time_from"):
        store.fetch_values(b"k", "0", 10)
    assert store.fetch_values(b"k", 0, 10) == []  # an empty store
    store.close()
    with pytest.raises(StoreClosedError, match="'w'"):
        store.fetch_values(b"k", 0, 10)


def test_put_for_changelog_returns_kafkas_changelog_key(persistent, ctx):
    cls = RocksDBWindowStore if persistent else InMemoryWindowStore
    dups = cls("d", retention_ms=MIN, window_size_ms=10, segment_interval_ms=MIN, retain_duplicates=True)
    plain = cls("p", retention_ms=MIN, window_size_ms=10, segment_interval_ms=MIN)
    dups.init(ctx)
    plain.init(ctx)
    # duplicates: sequence numbers 1, 2, ...; a None value stores nothing but takes the next
    # number (Kafka's change logging logs it), and only an in-memory store observes its time
    assert dups.put_for_changelog(b"k", b"1", 5) == window_changelog_key(b"k", 5, 1)
    assert dups.put_for_changelog(b"k", b"2", 5) == window_changelog_key(b"k", 5, 2)
    assert dups.put_for_changelog(b"k", None, 7) == window_changelog_key(b"k", 7, 3)
    assert dups.observed_stream_time == (5 if persistent else 7)
    assert dups.put(b"k", b"4", 5) == 4
    assert dups.put(b"k", None, 5) is None
    assert [v for _, v in dups.fetch(b"k", 0, 10)] == [b"1", b"2", b"4"]
    # no duplicates: sequence number 0, a None value deletes (and is logged)
    assert plain.put_for_changelog(b"k", b"1", 5) == window_changelog_key(b"k", 5, 0)
    assert plain.put_for_changelog(b"k", None, 5) == window_changelog_key(b"k", 5, 0)
    assert plain.fetch(b"k", 5) is None
    # an expired put is skipped and counted, and still has its key (Kafka logs it)
    plain.put(b"k", b"x", 10 * MIN)
    assert plain.put_for_changelog(b"k", b"late", 0) == window_changelog_key(b"k", 0, 0)
    assert plain.expired_records == 1 and plain.fetch(b"k", 0) is None
    dups.close()
    plain.close()


def typed_store(ctx, *, caching=False, logging=True, key_serde=serdes.STRING, value_serde=serdes.STRING):
    supplier = Stores.persistent_window_store("t", retention_ms=2 * MIN, window_size_ms=1000, retain_duplicates=True)
    builder = Stores.window_store_builder(supplier, key_serde, value_serde)
    builder = builder.with_caching_enabled() if caching else builder.with_caching_disabled()
    builder = builder.with_logging_enabled() if logging else builder.with_logging_disabled()
    store = builder.build()
    store.init(ctx)
    return store


def test_typed_fetch_decodes_and_logs_once(ctx):
    store = typed_store(ctx)
    store.put("k", "a", 1000, 1500)
    store.put("k", "b", 2000, 2500)
    store.put("kk", "c", 1000, 1500)  # a key that extends "k"
    # each put logged once, under the key the bytes store made (Kafka's WindowKeySchema)
    assert ctx.logged_changes == [("t", window_changelog_key(b"k", 1000, 1), b"a", 1500),
                                  ("t", window_changelog_key(b"k", 2000, 2), b"b", 2500),
                                  ("t", window_changelog_key(b"kk", 1000, 3), b"c", 1500)]
    with store.fetch("k", 0, 5000) as it:
        assert isinstance(it, TimedFetch)
        assert list(it) == [(1000, "a"), (2000, "b")]
        assert not it.is_open  # exhausted
    assert list(store.fetch("k", 1500, 5000)) == [(2000, "b")]
    assert store.fetch("k", 1000) == "a"  # the single-window form is unchanged
    store.close()


def test_typed_fetch_is_invalidated_when_the_store_closes(ctx):
    store = typed_store(ctx)
    store.put("k", "a", 1000)
    store.put("k", "b", 1000)
    it = store.fetch("k", 0, 5000)
    assert next(it) == (1000, "a")
    done = store.fetch("k", 0, 5000)
    assert list(done) == [(1000, "a"), (1000, "b")]
    closed = store.fetch("k", 0, 5000)
    closed.close()
    store.close()
    with pytest.raises(StoreClosedError, match="'t'"):
        next(it)
    with pytest.raises(StopIteration):  # exhausted before the store closed: nothing to invalidate
        next(done)
    with pytest.raises(StopIteration):
        next(closed)


def test_typed_put_and_fetch_errors_name_the_store(ctx):
    store = typed_store(ctx, value_serde=serdes.INT64)
    with pytest.raises(InvalidStoreArgumentError, match="'t'.*key must not be None"):
        store.put(None, 1, 0)
    with pytest.raises(InvalidStoreArgumentError, match="'t'.*cannot serialize key 5"):
        store.put(5, 1, 0)
    with pytest.raises(InvalidStoreArgumentError, match="'t'.*cannot serialize value 'x'"):
        store.put("k", "x", 0)
    with pytest.raises(InvalidStoreArgumentError, match="'t'.*cannot serialize key 5"):
        store.fetch(5, 0, 10)
    store.put("k", 7, 0)
    store.put("k", None, 0)  # ignored: retain duplicates (Kafka)
    assert list(store.fetch("k", 0, 10)) == [(0, 7)]
    store.close()


def test_typed_fetch_with_a_cache_reads_through_it(ctx):
    # the cache holds writes not yet flushed: a fetch must not read the bytes store directly
    store = typed_store(ctx, caching=True)
    store.put("k", "a", 1000)
    assert not isinstance(store.fetch("k", 0, 5000), TimedFetch)
    assert list(store.fetch("k", 0, 5000)) == [(1000, "a")]
    store.close()


def test_typed_fetch_without_logging_and_with_a_checked_only_serde(ctx):
    class Upper:  # no C forms: the checked serialize/deserialize are used
        def serialize(self, obj):
            return obj.upper().encode()

        def deserialize(self, data):
            return data.decode().lower()

    store = typed_store(ctx, logging=False, key_serde=Upper(), value_serde=Upper())
    store.put("k", "a", 1000)
    assert list(store.fetch("K", 0, 5000)) == [(1000, "a")]  # "K" and "k" serialize alike
    assert ctx.logged_changes == []
    store.close()


# ---------------------------------------------------------------- the RocksDB engine's scan
def test_rocksdb_scan_sees_every_write_since_its_iterator_was_made(tmp_path):
    kv = RocksDBKeyValueStore("s")
    kv.open(tmp_path / "s")
    assert kv.scan(b"a", b"b") == []
    kv.put(b"a1", b"1")
    kv.put(b"a2", b"2")
    kv.put(b"b1", b"x")  # outside the range
    assert kv.scan(b"a", b"b") == [(b"a1", b"1"), (b"a2", b"2")]
    kv.put(b"a2", None)  # a point delete
    kv.put(b"a3", b"3")
    assert kv.scan(b"a", b"b") == [(b"a1", b"1"), (b"a3", b"3")]
    kv.flush()  # memtable to a file; the next scan reads it
    kv.put(b"a4", b"4")
    assert kv.scan(b"a", b"b") == [(b"a1", b"1"), (b"a3", b"3"), (b"a4", b"4")]
    kv.close()
    with pytest.raises(StoreClosedError):
        kv.scan(b"a", b"b")
    kv.open(tmp_path / "s")  # a new handle, a new iterator
    assert kv.scan(b"a", b"a4") == [(b"a1", b"1"), (b"a3", b"3")]
    kv.close()


def test_rocksdb_scan_on_another_thread_uses_its_own_iterator(tmp_path):
    kv = RocksDBKeyValueStore("s")
    kv.open(tmp_path / "s")
    for i in range(100):
        kv.put(b"k%03d" % i, b"%d" % i)
    assert len(kv.scan(b"k", b"l")) == 100  # this thread's tailing iterator
    results = []

    def query():
        for _ in range(50):
            results.append(kv.scan(b"k050", b"k060"))
    other = threading.Thread(target=query)
    other.start()
    for _ in range(50):
        assert kv.scan(b"k000", b"k010") == [(b"k%03d" % i, b"%d" % i) for i in range(10)]
    other.join(30)
    assert results == [[(b"k%03d" % i, b"%d" % i) for i in range(50, 60)]] * 50
    kv.close()


@pytest.mark.parametrize("with_index", [False, True])
def test_time_ordered_store_logs_the_changelog_key_and_fetches_its_values(persistent, with_index, ctx):
    # the time-ordered store keeps records start first (and key first in its index part): the
    # key it logs is still the changelog key, and fetch_values reads what fetch reads
    store = window_module.TimeOrderedWindowStore("t", retention_ms=MIN, window_size_ms=10, segment_interval_ms=100,
                                                 persistent=persistent, with_index=with_index)
    store.init(ctx)
    rng = random.Random(7)
    model: dict = {}
    for i in range(300):
        key, start = rng.choice([b"a", b"ab", b"b"]), rng.randrange(0, 1000)
        value = rng.choice([b"v%d" % i, None])
        assert store.put_for_changelog(key, value, start) == window_changelog_key(key, start, 0)
        model[key, start] = value
    for _ in range(100):
        key, time_from = rng.choice([b"a", b"ab", b"b", b"c"]), rng.randrange(0, 1000)
        time_to = time_from + rng.randrange(0, 400)
        expected = sorted((start, v) for (k, start), v in model.items()
                          if k == key and v is not None and time_from <= start <= time_to)
        with store.fetch(key, time_from, time_to) as it:
            assert list(it) == expected
        assert store.fetch_values(key, time_from, time_to) == expected
    with pytest.raises(InvalidStoreArgumentError):
        store.fetch_values(b"k", -1, 10)
    store.close()


def test_typed_fetch_values_is_fetch_read_at_once(ctx):
    store = typed_store(ctx, value_serde=serdes.INT64)
    store.put("k", 1, 1000)
    store.put("k", 2, 1000)
    store.put("kk", 3, 2000)
    store.put("k", 4, 3000)
    assert store.fetch_values("k", 0, 5000) == [(1000, 1), (1000, 2), (3000, 4)] == list(store.fetch("k", 0, 5000))
    assert store.fetch_values("k", 1001, 2999) == []
    with pytest.raises(InvalidStoreArgumentError, match="'t'.*cannot serialize key 5"):
        store.fetch_values(5, 0, 10)
    # a stored value the serde refuses: the checked form's error, as the iterator raises it
    store.inner_most().put(b"k", b"short", 4000)
    with pytest.raises(Exception) as by_list:
        store.fetch_values("k", 3500, 5000)
    with pytest.raises(Exception) as by_iterator:
        list(store.fetch("k", 3500, 5000))
    assert type(by_list.value) is type(by_iterator.value) and str(by_list.value) == str(by_iterator.value)
    store.close()


def test_typed_fetch_values_reads_through_a_cache(ctx):
    store = typed_store(ctx, caching=True)
    store.put("k", "a", 1000)
    assert store.fetch_values("k", 0, 5000) == [(1000, "a")]
    store.close()
