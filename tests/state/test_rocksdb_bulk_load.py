"""Bulk loading of RocksDBKeyValueStore during large restores (automatic compactions off).

The mode is observed where RocksDB records it: the OPTIONS file it rewrites on every option
change, and the number of level-0 files (which compactions would otherwise merge).
"""

from __future__ import annotations

import pathlib

import pytest

import state.rocksdb_kv as kv
from state.errors import StoreClosedError
from state.rocksdb_kv import RocksDBKeyValueStore


def auto_compactions_disabled(path: pathlib.Path) -> bool:
    latest = max(path.glob("OPTIONS-*"), key=lambda p: int(p.name.split("-")[1]))
    values = [line.split("=", 1)[1].strip() for line in latest.read_text().splitlines()
              if line.strip().startswith("disable_auto_compactions=")]
    assert values, f"no disable_auto_compactions in {latest}"
    return values[0] == "true"


def l0_files(store: RocksDBKeyValueStore) -> int:
    return store._db.property_int_value("rocksdb.num-files-at-level0")


def batch(start: int, n: int, value: bytes = b"v") -> list:
    return [(b"key-%08d" % i, value + b"%d" % i) for i in range(start, start + n)]


@pytest.fixture
def small_bulk(monkeypatch):
    monkeypatch.setattr(kv, "BULK_LOAD_MIN_RECORDS", 2_000)
    monkeypatch.setattr(kv, "BULK_LOAD_CHECK_EVERY", 1)


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
    store.restore_batch(batch(1_000, 1_000))
    assert store.bulk_loading and auto_compactions_disabled(path)
    store.restore_batch(batch(2_000, 1_000) + [(b"key-%08d" % 5, None)])
    store.flush()
    assert not store.bulk_loading and not auto_compactions_disabled(path)
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


def test_level0_files_pile_up_while_bulk_loading_and_end_it_at_the_limit(small_bulk, monkeypatch, tmp_path):
    monkeypatch.setattr(kv, "WRITE_BUFFER_SIZE", 64 * 1024)  # many small memtable flushes
    monkeypatch.setattr(kv, "BULK_LOAD_MAX_L0_FILES", 6)
    s = RocksDBKeyValueStore("l0")
    s.open(tmp_path / "l0")
    try:
        s.restore_batch(batch(0, 2_000, b"x" * 100))
        assert s.bulk_loading
        seen = 0
        i = 2_000
        while s.bulk_loading:
            s.restore_batch(batch(i, 1_000, b"x" * 100))
            i += 1_000
            seen = max(seen, l0_files(s))
            assert i < 400_000, "bulk loading never ended"
        # compactions would have kept level 0 below the universal trigger (4 files by default)
        assert seen >= 6
        assert not auto_compactions_disabled(tmp_path / "l0")
        # ended early: stays off for the rest of this restore
        s.restore_batch(batch(i, 1_000, b"x" * 100))
        assert not s.bulk_loading
        assert s.get(b"key-%08d" % (i + 999)) == b"x" * 100 + b"%d" % (i + 999)
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


def test_a_store_left_in_bulk_loading_by_a_crash_reopens_with_compactions_on(small_bulk, tmp_path):
    s = RocksDBKeyValueStore("crash")
    s.open(tmp_path / "crash")
    s.restore_batch(batch(0, 3_000))
    assert s.bulk_loading and auto_compactions_disabled(tmp_path / "crash")
    # the process dies here: RocksDB's OPTIONS file still says compactions are off
    s._bulk = kv._BULK_OFF
    s.close()
    assert auto_compactions_disabled(tmp_path / "crash")
    reopened = RocksDBKeyValueStore("crash")
    reopened.open(tmp_path / "crash")
    try:
        assert not auto_compactions_disabled(tmp_path / "crash")
        assert reopened.get(b"key-00000000") == b"v0"
    finally:
        reopened.close()
