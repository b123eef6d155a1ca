"""Eddy's state layer: stores, change logging, caching, checkpoints and restore."""

from state.caching import CachingKeyValueStore, ThreadCache
from state.errors import (
    CheckpointError,
    InvalidStateStoreError,
    InvalidStoreArgumentError,
    LockError,
    StateError,
    StoreClosedError,
    StoreLayoutError,
    TaskCorruptedError,
)
from state.logging_store import ChangeLoggingKeyValueStore
from state.memory_kv import InMemoryKeyValueStore
from state.rocksdb_kv import RocksDBKeyValueStore
from state.store import BatchRestoreCallback, KeyValueIterator, KeyValueStore, StateStore, StoreContext
from state.stores import StoreBuilder, Stores
from state.task_id import TaskId
from state.typed import TypedKeyValueStore
