"""Key-value stores: RocksDB (real rocksdict) and in-memory behave the same."""

import random

import pytest
from rocksdict import Rdict

from state.errors import InvalidStoreArgumentError, StateError, StoreClosedError, StoreLayoutError
from state.memory_kv import InMemoryKeyValueStore
from state.rocksdb_kv import LAYOUT_FILE, RocksDBKeyValueStore, prefix_upper_bound
from state.task_id import TaskId

from recording_context import RecordingContext


@pytest.fixture(params=["rocksdb", "memory"])
def kind(request):
    return request.param


@pytest.fixture
def ctx(tmp_path):
    return RecordingContext(tmp_path / "0_1")


@pytest.fixture
def store(kind, ctx):
    s = RocksDBKeyValueStore("kv") if kind == "rocksdb" else InMemoryKeyValueStore("kv")
    s.init(ctx)
    yield s
    s.close()


KEYS = [b"", b"\x00", b"\x00\x00", b"\x01", b"a", b"ab", b"abc", b"ac", b"b", b"\x7f", b"\x80", b"\xff", b"\xff\xff"]


def fill(store):
    shuffled = KEYS[:]
    random.Random(7).shuffle(shuffled)
    for k in shuffled:
        store.put(k, b"v" + k)


def test_init_registers_store_with_restore_callback(store, ctx):
    assert len(ctx.registered) == 1
    registered, callback, logged = ctx.registered[0]
    assert registered is store and logged is False
    assert callback == store.restore_batch
    assert store.persistent == isinstance(store, RocksDBKeyValueStore)


def test_get_put_delete(store):
    assert store.get(b"k") is None
    store.put(b"k", b"1")
    store.put(b"k", b"2")
    assert store.get(b"k") == b"2"
    store.put(b"empty", b"")
    assert store.get(b"empty") == b""
    assert store.delete(b"k") == b"2"
    assert store.delete(b"k") is None
    assert store.get(b"k") is None
    store.put(b"empty", None)  # put None deletes
    assert store.get(b"empty") is None


def test_put_if_absent(store):
    assert store.put_if_absent(b"k", b"1") is None
    assert store.put_if_absent(b"k", b"2") == b"1"
    assert store.get(b"k") == b"1"


def test_put_all_with_deletes(store):
    store.put(b"gone", b"x")
    store.put_all([(b"a", b"1"), (b"b", b"2"), (b"gone", None), (b"a", b"3")])
    assert list(store.all()) == [(b"a", b"3"), (b"b", b"2")]


def test_byte_ordered_range_reverse_and_all(store):
    fill(store)
    expected = sorted(KEYS)
    assert [k for k, _ in store.all()] == expected
    assert [k for k, _ in store.reverse_all()] == expected[::-1]
    assert list(store.range(b"a", b"ac")) == [(k, b"v" + k) for k in (b"a", b"ab", b"abc", b"ac")]
    assert [k for k, _ in store.reverse_range(b"a", b"ac")] == [b"ac", b"abc", b"ab", b"a"]
    # bounds that are not keys, unbounded ends, high bytes
    assert [k for k, _ in store.range(b"aa", b"abz")] == [b"ab", b"abc"]
    assert [k for k, _ in store.range(b"\x80", None)] == [b"\x80", b"\xff", b"\xff\xff"]
    assert [k for k, _ in store.reverse_range(None, b"\x00\x00")] == [b"\x00\x00", b"\x00", b""]
    assert [k for k, _ in store.reverse_range(b"\xff", None)] == [b"\xff\xff", b"\xff"]
    # from > to: empty like Kafka
    assert list(store.range(b"b", b"a")) == []
    assert list(store.reverse_range(b"b", b"a")) == []


def test_range_bounds_from_above_to_warn_and_bad_bounds_are_named(store, caplog):
    fill(store)
    with caplog.at_level("WARNING"):
        assert list(store.range(b"b", b"a")) == []
        assert list(store.reverse_range(b"b", b"a")) == []
    warned = [r for r in caplog.records if "key_from > key_to" in r.getMessage()]
    assert len(warned) == 2 and all("kv" in r.getMessage() and r.levelname == "WARNING" for r in warned)
    assert list(store.range(b"a", b"a")) == [(b"a", b"va")]  # equal bounds: the one key, no WARN
    assert len([r for r in caplog.records if "key_from > key_to" in r.getMessage()]) == 2
    with pytest.raises(InvalidStoreArgumentError, match="'kv'.*key_from must be bytes, got str"):
        store.range("a", b"b")
    with pytest.raises(InvalidStoreArgumentError, match="'kv'.*key_to must be bytes, got int"):
        store.reverse_range(b"a", 3)


def test_prefix_scan(store):
    fill(store)
    assert [k for k, _ in store.prefix_scan(b"ab")] == [b"ab", b"abc"]
    assert [k for k, _ in store.prefix_scan(b"\xff")] == [b"\xff", b"\xff\xff"]
    assert [k for k, _ in store.prefix_scan(b"\x00")] == [b"\x00", b"\x00\x00"]
    assert [k for k, _ in store.prefix_scan(b"zz")] == []
    assert len(list(store.prefix_scan(b""))) == len(KEYS)


def test_prefix_upper_bound():
    assert prefix_upper_bound(b"ab") == b"ac"
    assert prefix_upper_bound(b"a\xff") == b"b"
    assert prefix_upper_bound(b"\xff\xff") is None


def test_restore_batch_with_tombstones(store):
    store.put(b"old", b"x")
    store.restore_batch([(b"a", b"1"), (b"b", b"2"), (b"old", None), (b"a", None), (b"a", b"3"), (b"c", b"")])
    assert list(store.all()) == [(b"a", b"3"), (b"b", b"2"), (b"c", b"")]
    assert store.approximate_num_entries() >= 1


def test_range_after_many_inserts_and_deletes_matches_model(store):
    rng = random.Random(3)
    model = {}
    for i in range(3000):
        k = rng.randbytes(rng.randint(1, 3))
        if rng.random() < 0.3:
            assert store.delete(k) == model.pop(k, None)
        else:
            v = str(i).encode()
            store.put(k, v)
            model[k] = v
        if i % 500 == 0:
            assert list(store.all()) == sorted(model.items())
    assert list(store.all()) == sorted(model.items())
    lo, hi = b"\x40", b"\xa0"
    assert list(store.range(lo, hi)) == sorted((k, v) for k, v in model.items() if lo <= k <= hi)


def test_iterator_close_and_context_manager(store):
    fill(store)
    it = store.all()
    assert next(it)[0] == b""
    it.close()
    with pytest.raises(StopIteration):
        next(it)
    with store.range(b"a", b"b") as it2:
        assert next(it2)[0] == b"a"
    assert not it2.is_open
    assert store.num_open_iterators() == 0


def test_close_store_with_open_iterator_gives_clear_error(store):
    fill(store)
    it = store.all()
    next(it)
    store.close()
    with pytest.raises(StoreClosedError, match="'kv'"):
        next(it)


def test_operations_on_closed_store_raise(store):
    store.close()
    for op in (lambda: store.get(b"k"), lambda: store.put(b"k", b"v"), lambda: store.all(),
               lambda: store.delete(b"k"), lambda: store.approximate_num_entries(), store.flush):
        with pytest.raises(StoreClosedError, match="'kv'"):
            op()
    store.close()  # idempotent


@pytest.mark.parametrize("bad", [None, "text", 3, bytearray(b"x")])
def test_bad_keys_name_the_store(store, bad):
    with pytest.raises(InvalidStoreArgumentError, match="'kv'"):
        store.put(bad, b"v")
    with pytest.raises(InvalidStoreArgumentError, match="'kv'"):
        store.get(bad)
    with pytest.raises(InvalidStoreArgumentError, match="'kv'"):
        store.put_all([(b"ok", b"v"), (bad, b"v")])


def test_bad_value_and_bounds(store):
    with pytest.raises(InvalidStoreArgumentError, match="value must be bytes"):
        store.put(b"k", "str")
    with pytest.raises(InvalidStoreArgumentError, match="key_from"):
        store.range("a", b"b")
    with pytest.raises(InvalidStoreArgumentError, match="prefix"):
        store.prefix_scan(None)


def test_rocksdb_persists_across_reopen_after_flush(ctx):
    s = RocksDBKeyValueStore("kv")
    s.init(ctx)
    s.put(b"k", b"v")
    s.restore_batch([(b"r", b"1")])
    s.flush()
    s.close()
    s2 = RocksDBKeyValueStore("kv")
    s2.init(ctx)
    assert list(s2.all()) == [(b"k", b"v"), (b"r", b"1")]
    s2.close()
    assert (ctx.store_dir("kv") / LAYOUT_FILE).exists()


def test_rocksdb_refuses_other_layout(ctx):
    path = ctx.store_dir("kv")
    path.mkdir(parents=True)
    (path / LAYOUT_FILE).write_text('{"layout": "window-v1", "format_version": 1}')
    with pytest.raises(StoreLayoutError, match="window-v1"):
        RocksDBKeyValueStore("kv").init(ctx)


def test_rocksdb_refuses_foreign_rocksdb_dir(ctx):
    path = ctx.store_dir("kv")
    path.parent.mkdir(parents=True)
    db = Rdict(str(path))
    db[b"x"] = b"y"
    db.close()
    with pytest.raises(StoreLayoutError, match="no EDDY_STORE_LAYOUT"):
        RocksDBKeyValueStore("kv").init(ctx)


def test_rocksdb_open_twice_is_an_error(ctx):
    s = RocksDBKeyValueStore("kv")
    s.init(ctx)
    with pytest.raises(StateError, match="already open"):
        s.open(ctx.store_dir("kv"))
    s.close()


def test_rocksdb_checkpoint_is_a_readable_snapshot(ctx, tmp_path):
    s = RocksDBKeyValueStore("kv")
    s.init(ctx)
    s.put(b"a", b"1")
    s.create_checkpoint(tmp_path / "snap")
    s.put(b"b", b"2")
    s.close()
    from rocksdict import Options
    snap = Rdict(str(tmp_path / "snap"), Options(raw_mode=True))
    assert list(snap.items()) == [(b"a", b"1")]
    snap.close()


def test_bad_store_name():
    with pytest.raises(StateError):
        RocksDBKeyValueStore("")
    with pytest.raises(StateError):
        InMemoryKeyValueStore(None)


# ------------------------------------------------------------------------------ TaskId
def test_task_id_str_parse_and_order():
    from state.task_id import InvalidTaskIdError

    assert str(TaskId(0, 3)) == "0_3"
    assert TaskId.parse("12_7") == TaskId(12, 7)
    assert sorted([TaskId(1, 0), TaskId(0, 10), TaskId(0, 2)]) == [TaskId(0, 2), TaskId(0, 10), TaskId(1, 0)]
    assert {TaskId(0, 1): "x"}[TaskId.parse("0_1")] == "x"
    for bad in ["", "0", "0_", "_1", "a_1", "0_1_2", "-1_2", " 0_1", "0_1\n"]:
        with pytest.raises(InvalidTaskIdError, match="invalid task id"):
            TaskId.parse(bad)
    with pytest.raises(InvalidTaskIdError):
        TaskId.parse(None)
    with pytest.raises(InvalidTaskIdError, match="partition"):
        TaskId(0, -1)


# ------------------------------------------------------------------------------ model-based
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

_keys = st.binary(min_size=0, max_size=3)
_ops = st.lists(
    st.one_of(
        st.tuples(st.just("put"), _keys, st.binary(max_size=3)),
        st.tuples(st.just("delete"), _keys, st.none()),
        st.tuples(st.just("restore"), _keys, st.one_of(st.none(), st.binary(max_size=3))),
    ),
    max_size=60,
)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops=_ops, lo=_keys, hi=_keys, prefix=st.binary(max_size=2))
def test_rocksdb_and_memory_agree_with_a_dict_model(tmp_path_factory, ops, lo, hi, prefix):
    rocks = RocksDBKeyValueStore("m")
    rocks.open(tmp_path_factory.mktemp("model") / "m")
    mem = InMemoryKeyValueStore("m")
    mem.open()
    model = {}
    try:
        for op, key, value in ops:
            for store in (rocks, mem):
                if op == "put":
                    store.put(key, value)
                elif op == "delete":
                    assert store.delete(key) == model.get(key)
                else:
                    store.restore_batch([(key, value)])
            if op == "put" or (op == "restore" and value is not None):
                model[key] = value
            else:
                model.pop(key, None)
        expected = sorted(model.items())
        in_range = [(k, v) for k, v in expected if lo <= k <= hi]
        with_prefix = [(k, v) for k, v in expected if k.startswith(prefix)]
        for store in (rocks, mem):
            assert list(store.all()) == expected
            assert list(store.reverse_all()) == expected[::-1]
            assert list(store.range(lo, hi)) == in_range
            assert list(store.reverse_range(lo, hi)) == in_range[::-1]
            assert list(store.prefix_scan(prefix)) == with_prefix
    finally:
        rocks.close()
        mem.close()
