"""Timestamped stores' changelogs in Kafka's format (ChangeLoggingTimestamped*BytesStore): the
record's value is the raw value and its timestamp the value's timestamp; restore puts the timestamp
back in front (RecordConverters.rawValueToTimestampedValue: the state manager's record converter, or
the reader's C pass for the common batch), on active restores and standby updates, into real
RocksDB stores through the real StoreChangelogReader on the embedded cluster."""

from __future__ import annotations

import struct
import time

import pytest
from confluent_kafka import TopicPartition
from confluent_kafka.admin import NewTopic

import state.restore as restore_module
import state.rocksdb_kv as kv
from state.directory import StateDirectory
from state.errors import StateError
from state.manager import ProcessorStateManager, TaskType, close_state_manager, register_state_stores
from state.restore import ChangelogState, StoreChangelogReader, restore_consumer_config
from state.stores import Stores
from state.task_id import TaskId
from state.timestamped import LegacyChangelogFormatError, ValueAndTimestamp, restore_converter
from streams import serdes

from recording_context import RecordingContext

I64 = struct.Struct(">q")
TASK = TaskId(0, 0)


def _i64(n: int) -> bytes:
    return I64.pack(n)


def _kv_builder(name="ts", in_memory=False, caching=False):
    supplier = Stores.in_memory_key_value_store(name) if in_memory else Stores.persistent_key_value_store(name)
    builder = Stores.timestamped_key_value_store_builder(supplier, serdes.STRING, serdes.STRING)
    return builder.with_caching_enabled() if caching else builder


def _window_builder(name="tw", caching=False):
    supplier = Stores.persistent_window_store(name, retention_ms=1_000_000, window_size_ms=10)
    builder = Stores.timestamped_window_store_builder(supplier, serdes.STRING, serdes.INT64)
    return builder.with_caching_enabled() if caching else builder


def _open(builder, tmp_path):
    store = builder.build()
    ctx = RecordingContext(tmp_path / "0_0")
    store.init(ctx)
    return store, ctx


# ------------------------------------------------------------------------------ what is logged
@pytest.mark.parametrize("in_memory", [False, True], ids=["rocksdb", "in-memory"])
def test_a_timestamped_put_logs_the_raw_value_with_the_values_timestamp(tmp_path, in_memory):
    store, ctx = _open(_kv_builder(in_memory=in_memory), tmp_path)
    # the put's own timestamp (5) is not the value's (100): Kafka logs the value's
    store.put("a", ValueAndTimestamp("x", 100), 5)
    store.put("b", ValueAndTimestamp("yy", 7))
    store.put_if_absent("c", ValueAndTimestamp("z", 9), 1)
    store.put_if_absent("c", ValueAndTimestamp("not written", 10), 1)
    store.put_all([("d", ValueAndTimestamp("dd", 11)), ("e", ValueAndTimestamp("ee", 12))], 2)
    store.delete("b", 42)  # a tombstone: the write's timestamp
    store.put("a", None, 43)
    assert ctx.logged_changes == [
        ("ts", b"a", b"x", 100), ("ts", b"b", b"yy", 7), ("ts", b"c", b"z", 9),
        ("ts", b"d", b"dd", 11), ("ts", b"e", b"ee", 12), ("ts", b"b", None, 42), ("ts", b"a", None, 43)]
    # the store itself keeps the timestamp
    assert store.get("c") == ValueAndTimestamp("z", 9) and store.get("a") is None
    store.close()


def test_a_cache_flush_logs_each_key_once_in_kafkas_format(tmp_path):
    store, ctx = _open(_kv_builder(caching=True), tmp_path)
    store.put("a", ValueAndTimestamp("1", 10), 10)
    store.put("a", ValueAndTimestamp("2", 30), 20)  # deduplicated: the last value, its timestamp
    store.put("b", ValueAndTimestamp("3", 15), 15)
    store.put("c", ValueAndTimestamp("4", 16), 16)
    store.delete("c", 17)  # a tombstone: the write's timestamp (written down: no flush listener)
    assert ctx.logged_changes == []
    store.flush()
    assert ctx.logged_changes == [("ts", b"a", b"2", 30), ("ts", b"b", b"3", 15), ("ts", b"c", None, 17)]
    store.close()


def test_a_bytes_value_without_its_timestamp_is_refused_before_it_is_written(tmp_path):
    store, ctx = _open(_kv_builder(), tmp_path)
    logging_layer = store.wrapped
    with pytest.raises(StateError, match="8-byte timestamp"):
        logging_layer.put(b"k", b"short", 1)
    with pytest.raises(StateError, match="8-byte timestamp"):
        logging_layer.write_changes([(b"j", _i64(1) + b"ok", 1, None, None, ()), (b"k", b"short", 1, None, None, ())])
    assert logging_layer.get(b"k") is None and logging_layer.get(b"j") is None and ctx.logged_changes == []
    store.close()


@pytest.mark.parametrize("caching", [False, True], ids=["logged", "cached+logged"])
def test_a_timestamped_window_store_logs_the_raw_value_with_the_values_timestamp(tmp_path, caching):
    from state.window import window_changelog_key

    store, ctx = _open(_window_builder(caching=caching), tmp_path)
    store.put("a", ValueAndTimestamp(4, 7), 0, 3)
    store.put("a", ValueAndTimestamp(5, 12), 10, 12)
    store.put("b", None, 0, 20)
    store.flush()
    # window changelog key (key + start + seqnum) -> the raw INT64, record timestamp = value's
    logged = [(k, v, t) for _, k, v, t in ctx.logged_changes]
    assert (window_changelog_key(b"a", 0, 0), _i64(4), 7) in logged
    assert (window_changelog_key(b"a", 10, 0), _i64(5), 12) in logged
    assert all(v is None or len(v) == 8 for _, v, _ in logged)
    assert list(store.fetch("a", 0, 10)) == [(0, ValueAndTimestamp(4, 7)), (10, ValueAndTimestamp(5, 12))]
    store.close()


def test_timestamped_builders_refuse_what_cannot_be_timestamped():
    from state.errors import InvalidStoreArgumentError
    from state.stores import StoreBuilder

    with pytest.raises(InvalidStoreArgumentError, match="'s': session stores cannot be timestamped"):
        StoreBuilder(Stores.persistent_session_store("s", 1_000), timestamped=True)
    with pytest.raises(InvalidStoreArgumentError, match="needs a window supplier"):
        Stores.timestamped_window_store_builder(Stores.persistent_key_value_store("kv"))


# ------------------------------------------------------------------------------ the converter
def test_the_restore_converter_puts_the_record_timestamp_in_front():
    convert = restore_converter("s")
    # the C-level route (no tombstone) and the loop (one) give the same
    assert convert([(b"a", b"x"), (b"b", b"")], [5, 6]) == [(b"a", _i64(5) + b"x"), (b"b", _i64(6))]
    assert convert([(b"a", b"x"), (b"b", None)], [5, 6]) == [(b"a", _i64(5) + b"x"), (b"b", None)]
    assert convert([], []) == []
    with pytest.raises(StateError, match="2 changelog records but 1 timestamps"):
        convert([(b"a", b"x"), (b"b", b"y")], [1])


@pytest.mark.parametrize("tombstone", [False, True])
def test_a_changelog_in_the_old_prefixed_format_is_refused_not_stamped_twice(tombstone):
    convert = restore_converter("counts")
    # the old format: value = 8-byte timestamp + raw value, record timestamp = the same timestamp
    old = (b"w", _i64(1_700_000_000_000) + _i64(3))
    records = [(b"a", b"raw"), old] + ([(b"t", None)] if tombstone else [])
    with pytest.raises(LegacyChangelogFormatError, match="'counts'.*reset the application"):
        convert(records, [1, 1_700_000_000_000] + ([2] if tombstone else []))
    # an INT64 equal to its own timestamp is a raw value (the old format had more after it)
    assert convert([(b"m", _i64(77))], [77]) == [(b"m", _i64(77) + _i64(77))]
    # a value starting with another timestamp is raw too
    assert convert([(b"w", _i64(5) + _i64(3))], [6]) == [(b"w", _i64(6) + _i64(5) + _i64(3))]


# ------------------------------------------------------------------------------ round trips
class ProducerCollector:
    """An active task's record collector on a real producer (delivery offsets for checkpoints)."""

    def __init__(self, producer):
        self.producer = producer
        self._offsets = {}

    def _delivered(self, err, msg):
        assert err is None, err
        self._offsets[(msg.topic(), msg.partition())] = msg.offset()

    def send(self, topic, key, value, *, partition, timestamp, headers=None):
        self.producer.produce(topic, key=key, value=value, partition=partition, timestamp=timestamp,
                              on_delivery=self._delivered)

    def offsets(self):
        assert self.producer.flush(30) == 0
        return {TopicPartition(t, p): o for (t, p), o in self._offsets.items()}


@pytest.fixture(scope="module")
def backend(tmp_path_factory):
    from streams.backends import for_config

    local = for_config({"bootstrap.servers": f"local://{tmp_path_factory.mktemp('cluster')}"})
    yield local
    local.close()


def _topic(backend, app, store):
    topic = f"{app}-{store}-changelog"
    for f in backend.admin({}).create_topics([NewTopic(topic, 1, 3, config={"cleanup.policy": "compact"})]).values():
        f.result(30)
    return TopicPartition(topic, 0)


def _manager(tmp_path, app, task_type=TaskType.ACTIVE, collector=None):
    return ProcessorStateManager(TASK, task_type, False, StateDirectory(tmp_path, app), collector=collector)


def _writer(backend, tmp_path, app, builder):
    """An active task's state writing to a new changelog: (changelog partition, collector,
    manager, the store built by `builder`)."""
    tp = _topic(backend, app, builder.name)
    collector = ProducerCollector(backend.producer({"linger.ms": 5}))
    manager = _manager(tmp_path / "writer", app, collector=collector)
    store = builder.build()
    register_state_stores(manager, [store])
    return tp, collector, manager, store


def _close_writer(manager, collector):
    """Flush the caches into the changelog and the producer, then close (the checkpoint holds the
    last offset written)."""
    manager.flush_cache()
    collector.offsets()
    close_state_manager(manager, dirty=False)


def _restore(backend, manager, tp, standby=False, until=None):
    consumer = backend.consumer({**restore_consumer_config(False), "client.id": "ts-restore"})
    reader = StoreChangelogReader(consumer, admin=backend.admin({}), progress_bar=False)
    try:
        reader.register(tp, manager)
        if standby:
            reader.transit_to_update_standby()
        deadline = time.monotonic() + 60  # a deadline, not a poll count: a loaded machine's fetches arrive late
        while time.monotonic() < deadline:
            if (until() if until is not None else reader.all_changelogs_completed()):
                break
            reader.restore()
        assert reader.changelog_state(tp) is (ChangelogState.RESTORING if standby else ChangelogState.COMPLETED)
        return reader.total_restored(tp)
    finally:
        reader.unregister([tp])
        consumer.close()


def _changelog(backend, tp, n):
    consumer = backend.consumer({"group.id": "ts-read", "auto.offset.reset": "earliest"})
    try:
        consumer.assign([TopicPartition(tp.topic, tp.partition, 0)])
        out = []
        for _ in range(1_000):
            if len(out) >= n:
                break
            out += [(m.key(), m.value(), m.timestamp()[1]) for m in consumer.consume(n, 0.1) if m.error() is None]
        return out
    finally:
        consumer.close()


RECORDS = 3_000


@pytest.mark.parametrize("route", ["C", "python"])
@pytest.mark.parametrize("standby", [False, True], ids=["active", "standby"])
def test_a_restore_gives_back_the_values_and_timestamps_stored(backend, tmp_path, monkeypatch, standby, route):
    monkeypatch.setattr(kv, "BULK_LOAD_MIN_RECORDS", 1_000)  # the bulk-loading route (active restore)
    c_stamped = []  # batches the C pass stamped
    if route == "python":  # the reader's general path: the state manager's record converter
        monkeypatch.setattr(restore_module, "_changelog_records", None)
    elif restore_module._changelog_records is None:
        pytest.skip("C accelerator or Message layout unavailable")
    else:
        c_pass = restore_module._changelog_records

        def counted(msgs, stamped=False):
            out = c_pass(msgs, stamped)
            if stamped and out is not None:
                c_stamped.append(len(out[2]))
            return out
        monkeypatch.setattr(restore_module, "_changelog_records", counted)
    app = f"tsrt-{'s' if standby else 'a'}-{route}"
    tp, collector, writer, store = _writer(backend, tmp_path, app, _kv_builder(caching=True))
    expected = {}
    for i in range(RECORDS):
        key = f"k{i % 1_100}"
        if i % 211 == 0:
            store.delete(key, i)
            expected.pop(key, None)
        else:
            # timestamps go back and forth; values of several lengths, an empty one
            value = ValueAndTimestamp("" if i % 500 == 1 else f"v{i}" * (i % 3 + 1), 1_000_000 + (i * 7919) % 5_000)
            store.put(key, value, value.timestamp)
            expected[key] = value
        if i % 1_000 == 999:
            writer.flush_cache()
    _close_writer(writer, collector)
    written = writer.checkpoint_file.read()[tp] + 1

    # the changelog holds raw values, each with its value's timestamp as the record timestamp
    latest = {}
    for key, value, timestamp in _changelog(backend, tp, written):
        latest[key.decode()] = None if value is None else (value.decode(), timestamp)
    assert {k: v for k, v in latest.items() if v is not None} == {k: tuple(v) for k, v in expected.items()}

    reader_dir = tmp_path / "restored"
    manager = _manager(reader_dir, app, TaskType.STANDBY if standby else TaskType.ACTIVE)
    restored = _kv_builder().build()
    register_state_stores(manager, [restored])
    try:
        total = _restore(backend, manager, tp, standby, until=(lambda: manager.store_offset(tp) == written - 1)
                         if standby else None)
        assert total == written
        assert sum(c_stamped) == (written if route == "C" else 0)
        with restored.all() as it:
            assert dict(it) == expected
        assert restored.get("k5") == expected.get("k5")
    finally:
        close_state_manager(manager, dirty=False)


def test_a_window_store_restore_gives_back_the_values_and_timestamps_stored(backend, tmp_path):
    app = "tsrt-w"
    tp, collector, writer, store = _writer(backend, tmp_path, app, _window_builder(caching=True))
    expected = {}
    for i in range(300):
        key, start = f"w{i % 7}", (i % 11) * 10
        # (not 0: a producer takes record timestamp 0 for "now", as librdkafka does)
        value = ValueAndTimestamp(i, start + 1 + i % 9)
        store.put(key, value, start, value.timestamp)
        expected[(key, start)] = value
    _close_writer(writer, collector)

    manager = _manager(tmp_path / "restored", app)
    restored = _window_builder().build()
    register_state_stores(manager, [restored])
    try:
        assert _restore(backend, manager, tp) == len(expected)
        with restored.all() as it:
            assert {(w.key, w.window.start): v for w, v in it} == expected
    finally:
        close_state_manager(manager, dirty=False)


def test_restoring_a_changelog_in_the_old_format_fails_with_a_typed_error(backend, tmp_path):
    app = "tsrt-old"
    tp = _topic(backend, app, "ts")
    producer = backend.producer({})
    # what Eddy logged before: the stored value (8-byte timestamp + value) with that timestamp
    producer.produce(tp.topic, key=b"a", value=_i64(1_000) + b"old", partition=0, timestamp=1_000)
    assert producer.flush(30) == 0
    manager = _manager(tmp_path, app)
    store = _kv_builder().build()
    register_state_stores(manager, [store])
    try:
        with pytest.raises(LegacyChangelogFormatError, match="'ts'"):
            _restore(backend, manager, tp)
        assert store.get("a") is None  # nothing half-converted was written
    finally:
        close_state_manager(manager, dirty=True)
