"""A large restore through the real StoreChangelogReader on the embedded cluster: the RocksDB
store bulk loads (vector memtable, compactions off) while records stream in and is back in
normal mode when the reader completes its changelog, before anything reads it."""

from __future__ import annotations

import contextlib
import pathlib
import time

import pytest
from confluent_kafka import TopicPartition
from confluent_kafka.admin import NewTopic

import state.rocksdb_kv as kv
from state.cache import CachingKeyValueStore
from state.directory import StateDirectory
from state.listener import StateRestoreListener
from state.logging_store import ChangeLoggingKeyValueStore
from state.manager import ProcessorStateManager, TaskType, close_state_manager, register_state_stores
from state.restore import ChangelogState, StoreChangelogReader, restore_consumer_config
from state.rocksdb_kv import RocksDBKeyValueStore
from state.task_id import TaskId

pytestmark = pytest.mark.integration

APP = "bulk-restore"
STORE = "store"
TOPIC = f"{APP}-{STORE}-changelog"
TASK = TaskId(0, 0)
TP = TopicPartition(TOPIC, 0)
RECORDS = 6_000


def options_value(path: pathlib.Path, name: str) -> str:
    latest = max(path.glob("OPTIONS-*"), key=lambda p: int(p.name.split("-")[1]))
    return next(line.split("=", 1)[1].strip() for line in latest.read_text().splitlines()
                if line.strip().startswith(name + "="))


@pytest.fixture(scope="module")
def changelog(tmp_path_factory):
    """A compacted RF=3 changelog with RECORDS records: overwrites and tombstones included."""
    from streams.backends import for_config

    backend = for_config({"bootstrap.servers": f"local://{tmp_path_factory.mktemp('cluster')}"})
    try:
        admin = backend.admin({})
        for f in admin.create_topics([NewTopic(TOPIC, 1, 3, config={"cleanup.policy": "compact"})]).values():
            f.result(30)
        producer = backend.producer({"linger.ms": 5})
        expected: dict[bytes, bytes] = {}
        for i in range(RECORDS):
            key = b"key-%06d" % (i % 4_000)
            value = None if i % 997 == 0 else b"value-%d" % i
            producer.produce(TOPIC, key=key, value=value, partition=0)
            if value is None:
                expected.pop(key, None)
            else:
                expected[key] = value
            if i % 1_000 == 999:
                producer.poll(0)
        assert producer.flush(30) == 0
        yield backend, expected
    finally:
        backend.close()


class ModeAtEnd(StateRestoreListener):
    """Records the store's mode when the reader reports the end of its restore."""

    def __init__(self):
        self.store = None
        self.modes = []
        self.mode_at_end = None

    def on_batch_restored(self, tp, store_name, batch_end_offset, num_restored):
        self.modes.append(self.store.bulk_loading)

    def on_restore_end(self, tp, store_name, total_restored):
        self.mode_at_end = (self.store.bulk_loading, options_value(self.store.path, "memtable_factory"))


@contextlib.contextmanager
def restored_to_the_end(backend, manager, inner, client_id):
    """An active restore of TP into `manager`'s stores, looped until the changelog completed:
    yields the reader and a ModeAtEnd listener on `inner`; closes the manager afterwards."""
    listener = ModeAtEnd()
    listener.store = inner
    consumer = backend.consumer({**restore_consumer_config(False), "client.id": client_id})
    reader = StoreChangelogReader(consumer, listener, admin=backend.admin({}), progress_bar=False)
    try:
        reader.register(TP, manager)
        deadline = time.monotonic() + 60  # a deadline, not a poll count: a loaded machine's fetches arrive late
        while time.monotonic() < deadline:
            if reader.all_changelogs_completed():
                break
            reader.restore()
        yield reader, listener
    finally:
        reader.unregister([TP])
        consumer.close()
        close_state_manager(manager, dirty=False)


@pytest.mark.parametrize("caching", [False, True], ids=["logged", "cached+logged"])
def test_a_bulk_restore_ends_in_normal_mode_and_serves_reads(changelog, tmp_path, monkeypatch, caching):
    backend, expected = changelog
    monkeypatch.setattr(kv, "BULK_LOAD_MIN_RECORDS", 2_000)
    monkeypatch.setattr(kv, "BULK_LOAD_WRITE_BUFFER_SIZE", 128 * 1024)  # flushes while restoring
    manager = ProcessorStateManager(TASK, TaskType.ACTIVE, False, StateDirectory(tmp_path / "state", APP))
    inner = RocksDBKeyValueStore(STORE)
    outer = ChangeLoggingKeyValueStore(inner)
    register_state_stores(manager, [CachingKeyValueStore(outer) if caching else outer])
    with restored_to_the_end(backend, manager, inner, f"{APP}-restore") as (reader, listener):
        assert reader.changelog_state(TP) is ChangelogState.COMPLETED
        assert reader.total_restored(TP) == RECORDS
        # the reader announced a restore of 6,000 records (>= 2,000): bulk loading from the start
        assert listener.modes and all(listener.modes)
        assert listener.mode_at_end == (False, "SkipListFactory")
        assert options_value(inner.path, "disable_auto_compactions") == "false"
        store = manager.get_store(STORE)
        assert store.get(b"key-000000") == expected.get(b"key-000000")  # a tombstone's key
        assert store.get(b"key-003999") == expected[b"key-003999"]
        with store.all() as it:
            assert dict(it) == expected
        with store.range(b"key-000100", b"key-000102") as it:
            assert list(it) == [(k, expected[k]) for k in (b"key-000100", b"key-000101", b"key-000102")
                                if k in expected]
        assert not inner.bulk_loading
    # the checkpoint covers everything: reopening restores nothing
    assert manager.checkpoint_file.read() == {TP: RECORDS - 1}


def test_a_small_restore_never_bulk_loads(changelog, tmp_path, monkeypatch):
    backend, expected = changelog
    monkeypatch.setattr(kv, "BULK_LOAD_MIN_RECORDS", RECORDS + 1)
    manager = ProcessorStateManager(TASK, TaskType.ACTIVE, False, StateDirectory(tmp_path / "state", APP))
    inner = RocksDBKeyValueStore(STORE)
    register_state_stores(manager, [ChangeLoggingKeyValueStore(inner)])
    with restored_to_the_end(backend, manager, inner, f"{APP}-restore-small") as (reader, listener):
        assert reader.total_restored(TP) == RECORDS
        assert listener.modes and not any(listener.modes)
        assert listener.mode_at_end == (False, "SkipListFactory")
        with manager.get_store(STORE).all() as it:
            assert dict(it) == expected


def test_a_standby_catching_up_bulk_loads_until_its_checkpoint(changelog, tmp_path, monkeypatch):
    backend, expected = changelog
    monkeypatch.setattr(kv, "BULK_LOAD_MIN_RECORDS", 2_000)
    manager = ProcessorStateManager(TASK, TaskType.STANDBY, False, StateDirectory(tmp_path / "state", APP))
    inner = RocksDBKeyValueStore(STORE)
    register_state_stores(manager, [ChangeLoggingKeyValueStore(inner)])
    consumer = backend.consumer({**restore_consumer_config(False), "client.id": f"{APP}-standby"})
    reader = StoreChangelogReader(consumer, admin=backend.admin({}), progress_bar=False)
    try:
        reader.register(TP, manager)
        reader.transit_to_update_standby()
        deadline = time.monotonic() + 60  # a deadline, not a poll count: a loaded machine's fetches arrive late
        while time.monotonic() < deadline:  # a standby never completes: run until it has everything
            if reader.changelog_state(TP) is ChangelogState.RESTORING and reader.total_restored(TP) == RECORDS:
                break
            reader.restore()
        assert reader.total_restored(TP) == RECORDS
        # no restore size for a standby: the mode came from the records since the last flush
        assert inner.bulk_loading
        assert manager.checkpoint(force=True)
        assert not inner.bulk_loading
        assert options_value(inner.path, "memtable_factory") == "SkipListFactory"
        assert manager.checkpoint_file.read() == {TP: RECORDS - 1}
        with manager.get_store(STORE).all() as it:
            assert dict(it) == expected
    finally:
        reader.unregister([TP])
        consumer.close()
        close_state_manager(manager, dirty=False)
