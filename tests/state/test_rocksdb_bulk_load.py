"""Bulk loading of RocksDBKeyValueStore during large restores (automatic compactions off, a
vector memtable, more write buffers; entered and left by reopening the DB).

The mode is observed where RocksDB records it: the OPTIONS file it writes at every open and
option change, and the number of level-0 files (which compactions would otherwise merge).
"""

from __future__ import annotations

import pathlib
import subprocess
import sys
import threading
import time

import pytest

import state.rocksdb_kv as kv
from state.errors import StateError, StoreClosedError
from state.rocksdb_kv import RocksDBKeyValueStore, bulk_loading_leftovers


def latest_options(path: pathlib.Path, name: str) -> str:
    latest = max(path.glob("OPTIONS-*"), key=lambda p: int(p.name.split("-")[1]))
    values = [line.split("=", 1)[1].strip() for line in latest.read_text().splitlines()
              if line.strip().startswith(name + "=")]
    assert values, f"no {name} in {latest}"
    return values[0]


def auto_compactions_disabled(path: pathlib.Path) -> bool:
    return latest_options(path, "disable_auto_compactions") == "true"


def memtable(path: pathlib.Path) -> str:
    return latest_options(path, "memtable_factory")


def l0_files(store: RocksDBKeyValueStore) -> int:
    return (store._bulk_db or store._db).property_int_value("rocksdb.num-files-at-level0")


def batch(start: int, n: int, value: bytes = b"v") -> list:
    return [(b"key-%08d" % i, value + b"%d" % i) for i in range(start, start + n)]


@pytest.fixture
def small_bulk(monkeypatch):
    monkeypatch.setattr(kv, "BULK_LOAD_MIN_RECORDS", 2_000)
    monkeypatch.setattr(kv, "BULK_LOAD_CHECK_EVERY", 1)
    monkeypatch.setattr(kv, "BULK_LOAD_WRITE_BUFFER_SIZE", 256 * 1024)


@pytest.fixture
def store(tmp_path):
    s = RocksDBKeyValueStore("bulk")
    s.open(tmp_path / "bulk")
    yield s
    s.close()


def test_a_large_restore_turns_compactions_off_until_flush(small_bulk, store, tmp_path):
    path = tmp_path / "bulk"
    store.restore_batch(batch(0, 1_000))
    assert not store.bulk_loading and not auto_compactions_disabled(path)
    assert memtable(path) == "SkipListFactory"
    store.restore_batch(batch(1_000, 1_000))
    assert store.bulk_loading and auto_compactions_disabled(path)
    assert memtable(path).startswith("{id=VectorRepFactory")
    store.restore_batch(batch(2_000, 1_000) + [(b"key-%08d" % 5, None)])
    store.flush()
    assert not store.bulk_loading and not auto_compactions_disabled(path)
    assert memtable(path) == "SkipListFactory"
    assert store.get(b"key-00000005") is None
    assert store.get(b"key-00002999") == b"v2999"
    with store.all() as it:
        assert sum(1 for _ in it) == 2_999


def test_small_restores_between_flushes_never_toggle(small_bulk, store, tmp_path):
    for i in range(5):  # a standby applying a few records per commit
        store.restore_batch(batch(i * 1_000, 1_000))
        store.flush()
        assert not store.bulk_loading
    assert not auto_compactions_disabled(tmp_path / "bulk")


def wait_for(predicate, timeout: float = 30.0) -> bool:
    deadline = time.monotonic() + timeout
    pause = threading.Event()
    while not predicate():
        if time.monotonic() > deadline:
            return False
        pause.wait(0.02)
    return True


def test_level0_files_pile_up_while_bulk_loading_then_compactions_resume_in_the_mode(small_bulk, monkeypatch, tmp_path):
    monkeypatch.setattr(kv, "BULK_LOAD_WRITE_BUFFER_SIZE", 64 * 1024)  # many small memtable flushes
    monkeypatch.setattr(kv, "BULK_LOAD_MAX_L0_FILES", 6)
    path = tmp_path / "l0"
    s = RocksDBKeyValueStore("l0")
    s.open(path)
    try:
        s.restore_batch(batch(0, 2_000, b"x" * 100))
        assert s.bulk_loading and auto_compactions_disabled(path)
        seen = 0
        i = 2_000
        while auto_compactions_disabled(path):
            s.restore_batch(batch(i, 1_000, b"x" * 100))
            i += 1_000
            seen = max(seen, l0_files(s))
            assert i < 400_000, "compactions never came back"
        # compactions would have kept level 0 below the universal trigger (4 files by default)
        assert seen >= 6
        # still bulk loading (vector memtable), now with compactions merging level 0 meanwhile
        assert s.bulk_loading and memtable(path).startswith("{id=VectorRepFactory")
        s.restore_batch(batch(i, 1_000, b"x" * 100))
        assert wait_for(lambda: l0_files(s) < 6), f"level 0 still holds {l0_files(s)} files"
        assert s.bulk_loading
        s.end_bulk_loading()
        assert not auto_compactions_disabled(path) and memtable(path) == "SkipListFactory"
        assert s.get(b"key-%08d" % (i + 999)) == b"x" * 100 + b"%d" % (i + 999)
        assert _all(s) == i + 1_000
    finally:
        s.close()


def test_close_ends_bulk_loading_and_reopening_applies_the_store_options(small_bulk, tmp_path):
    s = RocksDBKeyValueStore("reopen")
    s.open(tmp_path / "reopen")
    s.restore_batch(batch(0, 3_000))
    assert s.bulk_loading
    s.close()
    assert not s.bulk_loading
    with pytest.raises(StoreClosedError):
        s.flush()
    s.open(tmp_path / "reopen")
    try:
        assert not s.bulk_loading and not auto_compactions_disabled(tmp_path / "reopen")
        assert s.get(b"key-00002999") == b"v2999"  # the WAL is off: close flushed the memtables
    finally:
        s.close()


def test_restore_batch_with_tombstones_anywhere(store):
    # the puts run from C and a tombstone takes the per-record path: every position, and runs
    store.restore_batch([(b"a", None), (b"b", b"1"), (b"c", b"2")])
    store.restore_batch([(b"b", b"3"), (b"c", None)])
    store.restore_batch([(b"d", b"4"), (b"e", None), (b"e", b"5"), (b"d", None), (b"f", b"")])
    store.restore_batch(iter([(b"g", b"6")]))  # any iterable
    with store.all() as it:
        assert dict(it) == {b"b": b"3", b"e": b"5", b"f": b"", b"g": b"6"}
    with pytest.raises(ValueError):
        store.restore_batch([(b"h", b"7"), (b"i", "not bytes")])


CRASH_IN_BULK_LOADING = """
import os, sys
sys.path.insert(0, {root!r})
import state.rocksdb_kv as kv
kv.BULK_LOAD_MIN_RECORDS = 2_000
store = kv.RocksDBKeyValueStore("crash")
store.open({path!r})
store.restore_batch([(b"key-%08d" % i, b"v%d" % i) for i in range(2_000)])
assert store.bulk_loading
store.restore_batch([(b"key-%08d" % i, b"v%d" % i) for i in range(2_000, 3_000)])
os._exit(0)  # dies in bulk loading mode: no flush, no close
"""


def test_a_store_left_in_bulk_loading_by_a_crash_reopens_in_normal_mode(tmp_path):
    path = tmp_path / "crash"
    root = str(pathlib.Path(__file__).resolve().parents[2])
    subprocess.run([sys.executable, "-c", CRASH_IN_BULK_LOADING.format(root=root, path=str(path))],
                   check=True, timeout=60)
    assert auto_compactions_disabled(path) and memtable(path).startswith("{id=VectorRepFactory")
    assert sorted(bulk_loading_leftovers(path)) == ["automatic compactions off",
                                                    "memtable {id=VectorRepFactory;count=0;}"]
    reopened = RocksDBKeyValueStore("crash")
    reopened.open(path)
    try:
        assert not reopened.bulk_loading
        assert not auto_compactions_disabled(path) and memtable(path) == "SkipListFactory"
        assert bulk_loading_leftovers(path) == []
        # what was flushed when the mode started survived; the WAL is off, so the rest did not
        assert reopened.get(b"key-00001999") == b"v1999"
        assert reopened.get(b"key-00002000") is None
        reopened.restore_batch(batch(5_000, 10))  # and it takes writes again
        assert reopened.get(b"key-00005009") == b"v5009"
    finally:
        reopened.close()


def test_a_restore_announced_large_enough_starts_in_bulk_loading(small_bulk, store, tmp_path):
    store.start_bulk_loading(1_999)
    assert not store.bulk_loading
    store.start_bulk_loading(2_000)
    assert store.bulk_loading and memtable(tmp_path / "bulk").startswith("{id=VectorRepFactory")
    store.start_bulk_loading(5_000)  # already on: nothing changes
    store.restore_batch(batch(0, 10))
    assert store.bulk_loading
    store.end_bulk_loading()
    store.start_bulk_loading(5_000)  # ended for this restore: stays off until the next flush
    assert not store.bulk_loading
    store.flush()
    store.start_bulk_loading(5_000)
    assert store.bulk_loading
    assert store.get(b"key-00000009") == b"v9"


def test_bulk_loading_ends_when_the_changelog_reader_completes_the_restore(small_bulk, store, tmp_path):
    store.restore_batch(batch(0, 3_000))
    assert store.bulk_loading
    store.restore_batch(batch(3_000, 500))  # into the vector memtable
    store.end_bulk_loading()
    assert not store.bulk_loading and memtable(tmp_path / "bulk") == "SkipListFactory"
    assert not auto_compactions_disabled(tmp_path / "bulk")
    store.end_bulk_loading()  # a no-op now
    # ended for this restore: later batches (until the next flush) stay in normal mode
    store.restore_batch(batch(3_500, 3_000))
    assert not store.bulk_loading
    assert store.get(b"key-00003499") == b"v3499" and store.get(b"key-00006499") == b"v6499"
    assert _all(store) == 6_500


def _range(store):
    with store.range(b"key-00000010", b"key-00000012") as it:
        return list(it)


def _reverse_range(store):
    with store.reverse_range(b"key-00000010", b"key-00000012") as it:
        return list(it)


def _prefix_scan(store):
    with store.prefix_scan(b"key-0000001") as it:
        return [k for k, _ in it]


def _all(store):
    with store.all() as it:
        return sum(1 for _ in it)


def _reverse_all(store):
    with store.reverse_all() as it:
        return next(it)


READS = {
    "get": (lambda s: s.get(b"key-00002999"), b"v2999"),
    "get of a deleted key": (lambda s: s.get(b"key-00000003"), None),
    "range": (_range, [(b"key-00000010", b"v10"), (b"key-00000011", b"v11"), (b"key-00000012", b"v12")]),
    "reverse_range": (_reverse_range, [(b"key-00000012", b"v12"), (b"key-00000011", b"v11"),
                                       (b"key-00000010", b"v10")]),
    "prefix_scan": (_prefix_scan, [b"key-%08d" % i for i in range(10, 20)]),
    "all": (_all, 2_999),
    "reverse_all": (_reverse_all, (b"key-00002999", b"v2999")),
    "approximate_num_entries": (lambda s: s.approximate_num_entries() > 0, True),
    "put then get": (lambda s: (s.put(b"key-00000001", b"new"), s.get(b"key-00000001"))[1], b"new"),
    "delete": (lambda s: s.delete(b"key-00000002"), b"v2"),
    "put_if_absent": (lambda s: s.put_if_absent(b"key-00000002", b"x"), b"v2"),
}


@pytest.mark.parametrize("read", sorted(READS))
def test_a_read_or_write_during_bulk_loading_ends_it_first_and_sees_everything(small_bulk, store, tmp_path, read):
    op, expected = READS[read]
    store.restore_batch(batch(0, 2_000))  # reaches the threshold: bulk loading from here on
    assert store.bulk_loading
    store.restore_batch(batch(2_000, 1_000) + [(b"key-00000003", None)])  # into the vector memtable
    assert op(store) == expected
    assert not store.bulk_loading and memtable(tmp_path / "bulk") == "SkipListFactory"


def test_readers_on_other_threads_end_bulk_loading_once(small_bulk, store, tmp_path, monkeypatch):
    store.restore_batch(batch(0, 3_000))
    assert store.bulk_loading
    store.restore_batch(batch(3_000, 10))  # into the vector memtable
    ends = []
    original = RocksDBKeyValueStore._end_bulk_loading
    monkeypatch.setattr(RocksDBKeyValueStore, "_end_bulk_loading",
                        lambda self, then: (ends.append(then), original(self, then))[1])
    results, errors = [], []
    start = threading.Barrier(4)

    def read(i):
        try:
            start.wait(10)
            results.append(store.get(b"key-%08d" % (3_000 + i)))
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=read, args=(i,)) for i in (1, 2, 3, 4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert not errors
    assert sorted(results) == [b"v3001", b"v3002", b"v3003", b"v3004"]
    assert len(ends) == 1 and not store.bulk_loading


def test_close_in_bulk_loading_keeps_what_was_restored(small_bulk, tmp_path):
    s = RocksDBKeyValueStore("close")
    s.open(tmp_path / "close")
    s.restore_batch(batch(0, 3_000))
    s.restore_batch(batch(3_000, 1_000))
    assert s.bulk_loading
    s.close()
    assert not s.is_open and not s.bulk_loading
    s.close()  # closing twice is harmless
    with pytest.raises(StoreClosedError):
        s.restore_batch(batch(0, 1))
    s.open(tmp_path / "close")
    try:
        assert memtable(tmp_path / "close") == "SkipListFactory"
        assert s.get(b"key-00003999") == b"v3999" and _all(s) == 4_000
    finally:
        s.close()


def corrupt_current(path: pathlib.Path) -> None:
    """RocksDB reads CURRENT (the name of the live MANIFEST) only when it opens a DB."""
    (path / "CURRENT").write_text("not a manifest name")


def test_a_failed_reopen_at_the_end_of_bulk_loading_names_the_store_and_leaves_it_closed(small_bulk, tmp_path):
    s = RocksDBKeyValueStore("broken-end")
    s.open(tmp_path / "broken-end")
    s.restore_batch(batch(0, 3_000))
    assert s.bulk_loading
    corrupt_current(tmp_path / "broken-end")
    with pytest.raises(StateError, match=r"state store 'broken-end': cannot end bulk loading in RocksDB at .*CURRENT"):
        s.get(b"key-00000001")
    assert not s.is_open and not s.bulk_loading
    with pytest.raises(StoreClosedError, match="broken-end"):
        s.get(b"key-00000001")
    with pytest.raises(StoreClosedError, match="broken-end"):
        s.restore_batch(batch(0, 1))
    s.close()  # nothing left to close


def test_a_failed_reopen_at_the_start_of_bulk_loading_names_the_store_and_leaves_it_closed(small_bulk, tmp_path):
    s = RocksDBKeyValueStore("broken-start")
    s.open(tmp_path / "broken-start")
    s.restore_batch(batch(0, 1_000))
    corrupt_current(tmp_path / "broken-start")
    with pytest.raises(StateError, match=r"state store 'broken-start': cannot reopen after failing to start "
                                         r"bulk loading in RocksDB at .*CURRENT"):
        s.restore_batch(batch(1_000, 1_000))  # reaches the threshold: the switch reopens
    assert not s.is_open and not s.bulk_loading
    with pytest.raises(StoreClosedError):
        s.flush()


def test_the_end_of_bulk_loading_keeps_the_store_usable_for_another_bulk_restore(small_bulk, store, tmp_path):
    for round_ in range(3):  # e.g. a standby catching up several times between checkpoints
        store.restore_batch(batch(round_ * 3_000, 3_000))
        assert store.bulk_loading
        store.flush()
        assert not store.bulk_loading
    assert _all(store) == 9_000 and memtable(tmp_path / "bulk") == "SkipListFactory"


def test_store_options_hold_after_reopen_not_the_persisted_ones(tmp_path, monkeypatch):
    # rocksdict reopens a column family with the options in the OPTIONS file unless told
    # otherwise: the store's own options (its block cache included) must apply at every open.
    s = RocksDBKeyValueStore("opts")
    s.open(tmp_path / "opts")
    s.put(b"a", b"1")
    s.close()
    monkeypatch.setattr(kv, "WRITE_BUFFER_SIZE", 8 * 1024 * 1024)
    s.open(tmp_path / "opts")
    try:
        assert latest_options(tmp_path / "opts", "write_buffer_size") == str(8 * 1024 * 1024)
        assert s.get(b"a") == b"1"
    finally:
        s.close()


def test_interactive_queries_on_a_store_left_bulk_loading_read_everything(small_bulk, tmp_path):
    # A store the reader did not end the mode of (a hook-less wrapper, say) and that a query
    # thread reads: the first read ends the mode, every answer is complete.
    from state.task_id import TaskId
    from streams.runtime.queries import ReadOnlyKeyValueView

    stores = {}
    for partition in (0, 1):
        s = RocksDBKeyValueStore("iq")
        s.open(tmp_path / f"iq-{partition}")
        records = [(b"p%d-%05d" % (partition, i), b"v%d" % i) for i in range(3_000)]
        s.restore_batch(records[:2_000])
        assert s.bulk_loading
        s.restore_batch(records[2_000:])  # into the vector memtable
        stores[TaskId(0, partition)] = s
    view = ReadOnlyKeyValueView("iq", 0, 2, lambda: stores, lambda: None)
    answers = {}

    def query():
        answers["get"] = (view.get(b"p0-00042"), view.get(b"p1-02999"), view.get(b"nope"))
        answers["range"] = list(view.range(b"p0-02998", b"p1-00001"))
        answers["count"] = view.approximate_num_entries() > 0
        answers["all"] = sum(1 for _ in view.all())

    t = threading.Thread(target=query)
    t.start()
    t.join(30)
    try:
        assert answers["get"] == (b"v42", b"v2999", None)
        assert answers["range"] == [(b"p0-02998", b"v2998"), (b"p0-02999", b"v2999"),
                                    (b"p1-00000", b"v0"), (b"p1-00001", b"v1")]
        assert answers["count"] and answers["all"] == 6_000
        assert not any(s.bulk_loading for s in stores.values())
    finally:
        for s in stores.values():
            s.close()
