"""A real, minimal StoreContext for store tests: records registrations and change-log calls."""

import pathlib

from state.task_id import TaskId


class RecordingContext:
    """The task id comes from the directory name when it reads like one ("2_1"), else 0_1."""

    def __init__(self, task_dir: pathlib.Path, task_id: TaskId | None = None, config=None):
        self.application_id = "app"
        if task_id is None:
            try:
                task_id = TaskId.parse(pathlib.Path(task_dir).name)
            except Exception:
                task_id = TaskId(0, 1)
        self.task_id = task_id
        self.task_dir = task_dir
        self.config = config or {}
        self.registered = []
        self.logged_changes = []

    def store_dir(self, store_name):
        return self.task_dir / "rocksdb" / store_name

    def register(self, store, restore_callback, *, logged):
        self.registered.append((store, restore_callback, logged))

    def log_change(self, store_name, key, value, timestamp, headers=None):
        self.logged_changes.append((store_name, key, value, timestamp))


def caching_store(kind, path, max_bytes):
    """A CachingKeyValueStore over a RocksDB ("rocksdb") or in-memory store named "c", opened in
    a RecordingContext at `path`, with its flush listener recording (key, new, old, timestamp):
    (store, inner store, recorded flushes)."""
    from state.cache import CachingKeyValueStore, ThreadCache
    from state.memory_kv import InMemoryKeyValueStore
    from state.rocksdb_kv import RocksDBKeyValueStore

    inner = RocksDBKeyValueStore("c") if kind == "rocksdb" else InMemoryKeyValueStore("c")
    store = CachingKeyValueStore(inner, ThreadCache(max_bytes))
    store.init(RecordingContext(path))
    flushed = []
    store.set_flush_listener(lambda k, new, old, ts: flushed.append((k, new, old, ts)))
    return store, inner, flushed


def assert_caches_alike(a, b, a_flushed, b_flushed):
    """Two caching stores went through the same effects: the same listener calls, cache stats
    and cache sizes."""
    assert a_flushed == b_flushed
    assert a.cache.stats(a.namespace) == b.cache.stats(b.namespace)
    assert a.cache.size_bytes == b.cache.size_bytes
