"""A RocksDB key-value store's pending writes (state/rocksdb_kv.py, PENDING_WRITES_MAX_BYTES):
puts and deletes wait in front of RocksDB and reach it as one batch; through the store nobody
can tell, on any path, across a close and on another thread."""

import random
import sys
import threading

import pytest

from state.errors import StateError
from state.rocksdb_kv import PENDING_ENTRY_OVERHEAD, RocksDBKeyValueStore
from state.window import RocksDBWindowStore

from recording_context import RecordingContext


@pytest.fixture
def ctx(tmp_path):
    return RecordingContext(tmp_path / "0_1")


@pytest.fixture
def store(ctx):
    s = RocksDBKeyValueStore("kv")
    s.init(ctx)
    yield s
    s.close()


def on_disk(store, key):
    """What RocksDB itself holds for `key` (the pending writes left out)."""
    return store._db.get(key)


def test_a_put_waits_and_a_read_finds_it(store):
    store.put(b"k", b"1")
    store.put(b"gone", b"x")
    store.delete(b"gone")
    assert store.put_if_absent(b"k", b"2") == b"1" and store.put_if_absent(b"p", b"3") is None
    assert on_disk(store, b"k") is None and on_disk(store, b"p") is None  # pending: not in RocksDB yet
    assert store.get(b"k") == b"1" and store.get(b"gone") is None and store.get(b"p") == b"3"
    store.flush()
    assert on_disk(store, b"k") == b"1" and on_disk(store, b"gone") is None and on_disk(store, b"p") == b"3"
    assert store._pending == {}


def test_past_the_budget_the_pending_writes_go_down_as_one_batch(store):
    store._pending_max_bytes = 3 * (PENDING_ENTRY_OVERHEAD + 2 + 3)
    for i in range(3):
        store.put(b"k%d" % i, b"v%02d" % i)
    assert store._pending_bytes == 3 * (PENDING_ENTRY_OVERHEAD + 2 + 3)
    assert all(on_disk(store, b"k%d" % i) is None for i in range(3))
    store.put(b"k1", b"v11")  # a rewrite counts its value's change only
    assert store._pending_bytes == 3 * (PENDING_ENTRY_OVERHEAD + 2 + 3)
    store.put(b"k3", b"v03")  # over: everything pending goes down
    assert store._pending == {} and store._pending_bytes == 0
    assert [on_disk(store, b"k%d" % i) for i in range(4)] == [b"v00", b"v11", b"v02", b"v03"]


def test_every_path_sees_the_pending_writes(store):
    """Random operations against a dict, the budget small enough to write down often."""
    store._pending_max_bytes = 600
    model: dict = {}
    rng = random.Random(3)
    keys = [b"k%02d" % i for i in range(40)]
    for step in range(3000):
        key = rng.choice(keys)
        op = rng.randrange(10)
        if op < 4:
            value = b"v%d" % step
            store.put(key, value)
            model[key] = value
        elif op == 4:
            assert store.delete(key) == model.pop(key, None)
        elif op == 5:
            batch = [(rng.choice(keys), None if rng.random() < 0.2 else b"b%d" % step) for _ in range(3)]
            store.put_all(batch)
            for k, v in batch:
                if v is None:
                    model.pop(k, None)
                else:
                    model[k] = v
        elif op == 6:
            value = b"a%d" % step
            assert store.put_if_absent(key, value) == model.get(key)
            model.setdefault(key, value)
        elif op == 7:
            lo, hi = sorted(rng.sample(keys, 2))
            with store.range(lo, hi) as it:
                assert list(it) == sorted((k, v) for k, v in model.items() if lo <= k <= hi)
            with store.reverse_range(lo, hi) as it:
                assert list(it) == sorted(((k, v) for k, v in model.items() if lo <= k <= hi), reverse=True)
        elif op == 8:
            with store.prefix_scan(key[:2]) as it:
                assert list(it) == sorted((k, v) for k, v in model.items() if k.startswith(key[:2]))
        else:
            assert store.get(key) == model.get(key)
    with store.all() as it:
        assert list(it) == sorted(model.items())


def test_an_open_iterator_does_not_see_later_writes(store):
    """As a RocksDB iterator (an implicit snapshot): what was written when it opened."""
    store.put(b"a", b"1")
    store.put(b"b", b"1")
    with store.all() as it:
        store.put(b"b", b"2")
        store.put(b"c", b"2")
        assert list(it) == [(b"a", b"1"), (b"b", b"1")]
    with store.all() as it:
        assert list(it) == [(b"a", b"1"), (b"b", b"2"), (b"c", b"2")]


@pytest.mark.parametrize("dirty", [False, True])
def test_close_writes_them_down_as_the_memtables(ctx, dirty):
    """Closing flushes RocksDB's memtables, dirty or not: the pending writes reach disk too."""
    store = RocksDBKeyValueStore("kv")
    store.init(ctx)
    store.put(b"k", b"1")
    store.put(b"d", b"x")
    store.flush()
    store.delete(b"d")
    store.close(dirty)
    again = RocksDBKeyValueStore("kv")
    again.init(ctx)
    try:
        assert again.get(b"k") == b"1" and again.get(b"d") is None
    finally:
        again.close()


@pytest.mark.parametrize("writes", [1, 3])  # one goes down as a put, three as a batch
def test_a_failed_write_down_names_the_store_and_keeps_them(store, writes):
    for i in range(writes):
        store.put(b"k%d" % i, b"%d" % i)
    db = store._db
    store._db = _Failing(db)
    with pytest.raises(StateError, match=f"'kv'.*cannot write {writes} pending writes"):
        store.flush()
    assert len(store._pending) == writes and store.get(b"k0") == b"0"
    store._db = db
    store.flush()
    assert [on_disk(store, b"k%d" % i) for i in range(writes)] == [b"%d" % i for i in range(writes)]


class _Failing:
    """A RocksDB handle whose writes fail (a full disk cannot be made on demand here)."""

    def __init__(self, db):
        self._db = db

    def write(self, *args):
        raise OSError("No space left on device")

    put = delete = write

    def __getattr__(self, name):
        return getattr(self._db, name)


def test_reads_on_another_thread_while_the_stream_thread_writes(store):
    """An interactive query's gets and range reads (which write the pending writes down) beside
    the writer: every read returns what was written, and nothing is lost (each key written once,
    so a lost write cannot hide under a later one)."""
    count = 100_000
    keys = [b"k%06d" % i for i in range(count)]
    written = [0]  # keys[:written[0]] are written (each key's value is the key reversed)
    errors: list = []
    done = threading.Event()

    def query() -> None:
        rng = random.Random(5)
        try:
            while not done.is_set():
                n = written[0]
                if n:
                    key = keys[rng.randrange(n)]
                    assert store.get(key) == key[::-1], key
                with store.range(keys[n // 2], keys[min(n // 2 + 20, count - 1)]) as it:
                    for k, v in it:
                        assert v == k[::-1], (k, v)
        except BaseException as exc:  # noqa: BLE001 - reported by the test below
            errors.append(exc)

    reader = threading.Thread(target=query)
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # the threads take turns between nearly every bytecode
    reader.start()
    try:
        for i, key in enumerate(keys):
            store.put(key, key[::-1])
            written[0] = i + 1
    finally:
        done.set()
        reader.join(timeout=60)
        sys.setswitchinterval(interval)
    assert not reader.is_alive()
    assert errors == []
    with store.all() as it:
        assert [k for k, _ in it] == keys


def test_a_segmented_stores_engine_writes_at_once(ctx):
    """Its C scans read the RocksDB handle directly: nothing may wait in front of it."""
    window = RocksDBWindowStore("w", retention_ms=1000, segment_interval_ms=500, window_size_ms=100)
    assert window._engine._pending_max_bytes == 0
