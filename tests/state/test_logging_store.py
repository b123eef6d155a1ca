"""Change logging: the exact (store, key, value, timestamp) sequence sent to the changelog."""

import pytest

from state.errors import InvalidStoreArgumentError
from state.logging_store import ChangeLoggingKeyValueStore
from state.memory_kv import InMemoryKeyValueStore
from state.rocksdb_kv import RocksDBKeyValueStore
from state.stores import Stores

from recording_context import RecordingContext


class Utf8:
    def serialize(self, obj):
        return None if obj is None else obj.encode()

    def deserialize(self, data):
        return None if data is None else data.decode()


class Int64:
    def serialize(self, obj):
        return None if obj is None else obj.to_bytes(8, "big", signed=True)

    def deserialize(self, data):
        return None if data is None else int.from_bytes(data, "big", signed=True)


@pytest.fixture(params=["rocksdb", "memory"])
def persistent(request):
    return request.param == "rocksdb"


@pytest.fixture
def ctx(tmp_path):
    return RecordingContext(tmp_path / "1_0")


def test_kv_logs_every_update_in_order(persistent, ctx):
    inner = RocksDBKeyValueStore("s") if persistent else InMemoryKeyValueStore("s")
    store = ChangeLoggingKeyValueStore(inner)
    store.init(ctx)
    [(registered, callback, logged)] = ctx.registered
    assert registered is store and logged is True and callback == inner.restore_batch
    store.put(b"a", b"1", timestamp=100)
    assert store.put_if_absent(b"a", b"x", timestamp=101) == b"1"   # no write, nothing logged
    assert store.put_if_absent(b"b", b"2", timestamp=102) is None
    store.put_all([(b"c", b"3"), (b"a", None)], timestamp=103)
    assert store.delete(b"b", timestamp=104) == b"2"
    store.put(b"d", None, timestamp=105)
    assert ctx.logged_changes == [
        ("s", b"a", b"1", 100),
        ("s", b"b", b"2", 102),
        ("s", b"c", b"3", 103),
        ("s", b"a", None, 103),
        ("s", b"b", None, 104),
        ("s", b"d", None, 105),
    ]
    assert list(store.all()) == [(b"c", b"3")]
    store.close()


def test_failed_write_is_not_logged(ctx):
    store = ChangeLoggingKeyValueStore(InMemoryKeyValueStore("s"))
    store.init(ctx)
    with pytest.raises(InvalidStoreArgumentError):
        store.put(None, b"v", timestamp=1)
    assert ctx.logged_changes == []
    store.close()


def test_timestamp_supplier_used_when_none_given(ctx):
    store = ChangeLoggingKeyValueStore(InMemoryKeyValueStore("s"))
    store.init(ctx)
    store.set_timestamp_supplier(lambda: 4242)
    store.put(b"k", b"v")
    assert ctx.logged_changes == [("s", b"k", b"v", 4242)]
    store.close()


def test_builder_stack_typed_cached_logged(persistent, ctx):
    supplier = Stores.persistent_key_value_store("counts") if persistent else Stores.in_memory_key_value_store("counts")
    builder = Stores.key_value_store_builder(supplier, key_serde=Utf8(), value_serde=Int64())
    assert builder.logging_enabled and not builder.caching_enabled
    store = builder.with_caching_enabled().with_logging_enabled({"min.insync.replicas": "2"}).build()
    assert builder.changelog_topic_config() == {"cleanup.policy": "compact", "min.insync.replicas": "2"}
    store.init(ctx)
    [(registered, _, logged)] = ctx.registered
    assert registered is store and logged is True
    assert store.persistent is persistent
    forwarded = []
    assert store.set_flush_listener(lambda k, new, old, ts: forwarded.append((k, new, old, ts)))
    store.put("hello", 1, timestamp=7)
    store.put("hello", 2, timestamp=8)
    assert store.get("hello") == 2
    assert ctx.logged_changes == []
    store.flush()
    assert forwarded == [("hello", 2, None, 8)]
    assert ctx.logged_changes == [("counts", b"hello", (2).to_bytes(8, "big"), 8)]
    assert list(store.all()) == [("hello", 2)]
    store.close()


def test_builder_without_logging_or_caching(ctx):
    store = (Stores.key_value_store_builder(Stores.in_memory_key_value_store("plain"), Utf8(), Utf8())
             .with_logging_disabled().build())
    store.init(ctx)
    assert ctx.registered[0][2] is False
    assert store.set_flush_listener(lambda *a: None) is False
    store.put("a", "b")
    assert ctx.logged_changes == []
    with pytest.raises(InvalidStoreArgumentError, match="'plain'.*None"):
        store.put(None, "x")
    store.close()


@pytest.mark.parametrize("name", ["", "a/b", None, ".."])
def test_bad_store_names(name):
    with pytest.raises(InvalidStoreArgumentError):
        Stores.persistent_key_value_store(name)


def test_builder_needs_matching_supplier():
    with pytest.raises(InvalidStoreArgumentError):
        Stores.key_value_store_builder("not a supplier")


def test_window_logging_sequence(persistent, ctx):
    from state.logging_store import ChangeLoggingWindowStore
    from state.window import InMemoryWindowStore, RocksDBWindowStore, window_changelog_key

    cls = RocksDBWindowStore if persistent else InMemoryWindowStore
    inner = cls("w", retention_ms=120_000, window_size_ms=1000, segment_interval_ms=60_000)
    store = ChangeLoggingWindowStore(inner)
    store.init(ctx)
    assert ctx.registered == [(store, inner.restore_batch, True)]
    store.put(b"k", b"1", 0, timestamp=10)
    store.put(b"k", None, 0, timestamp=11)
    store.put(b"j", b"2", 1000, timestamp=12)
    assert ctx.logged_changes == [
        ("w", window_changelog_key(b"k", 0, 0), b"1", 10),
        ("w", window_changelog_key(b"k", 0, 0), None, 11),
        ("w", window_changelog_key(b"j", 1000, 0), b"2", 12),
    ]
    # the logged records rebuild the same store through the restore path
    replica = cls("w", retention_ms=120_000, window_size_ms=1000, segment_interval_ms=60_000)
    replica.init(RecordingContext(ctx.task_dir.parent / "replica"))
    replica.restore_batch([(k, v) for _, k, v, _ in ctx.logged_changes])
    assert list(replica.all()) == list(store.all())
    replica.close()
    store.close()


def test_window_logging_logs_a_duplicate_delete_it_stores_nothing_for(ctx):
    """Kafka's ChangeLoggingWindowBytesStore logs every put, under the next sequence number of
    a store keeping duplicates; the delete finds nothing to delete (no record has that number)."""
    from state.logging_store import ChangeLoggingWindowStore
    from state.window import InMemoryWindowStore, window_changelog_key

    store = ChangeLoggingWindowStore(InMemoryWindowStore("w", retention_ms=120_000, window_size_ms=1000,
                                                         segment_interval_ms=60_000, retain_duplicates=True))
    store.init(ctx)
    assert store.put(b"k", b"v", 0, timestamp=1) == 1
    assert store.put(b"k", None, 5, timestamp=2) is None
    assert store.put(b"k", b"w", 5, timestamp=3) == 3
    assert [(k, v) for _, k, v, _ in ctx.logged_changes] == [
        (window_changelog_key(b"k", 0, 1), b"v"), (window_changelog_key(b"k", 5, 2), None),
        (window_changelog_key(b"k", 5, 3), b"w")]
    assert [(w, v) for w, v in store.fetch(b"k", 0, 10)] == [(0, b"v"), (5, b"w")]
    store.close()
