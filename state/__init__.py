"""Eddy's state layer: stores, change logging, caching, checkpoints and restore."""

from state.cache import CachingKeyValueStore, CachingSessionStore, CachingWindowStore, ThreadCache
from state.checkpoint import OffsetCheckpoint
from state.directory import StateDirectory
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
from state.listener import StandbyUpdateListener, StateRestoreListener
from state.logging_store import ChangeLoggingKeyValueStore, ChangeLoggingSessionStore, ChangeLoggingWindowStore
from state.manager import ProcessorStateManager, TaskType
from state.memory_kv import InMemoryKeyValueStore
from state.restore import StoreChangelogReader
from state.rocksdb_kv import RocksDBKeyValueStore
from state.session import InMemorySessionStore, RocksDBSessionStore, SessionStore
from state.store import BatchRestoreCallback, KeyValueIterator, KeyValueStore, StateStore, StoreContext
from state.stores import StoreBuilder, Stores
from state.task_id import TaskId
from state.typed import TypedKeyValueStore, TypedSessionStore, TypedWindowStore
from state.window import InMemoryWindowStore, RocksDBWindowStore, Window, Windowed, WindowStore

__all__ = [
    "BatchRestoreCallback", "CachingKeyValueStore", "CachingSessionStore", "CachingWindowStore", "ChangeLoggingKeyValueStore", "ChangeLoggingSessionStore",
    "ChangeLoggingWindowStore", "CheckpointError", "InMemoryKeyValueStore", "InMemorySessionStore",
    "InMemoryWindowStore", "InvalidStateStoreError", "InvalidStoreArgumentError", "KeyValueIterator",
    "KeyValueStore", "LockError", "OffsetCheckpoint", "ProcessorStateManager", "RocksDBKeyValueStore",
    "RocksDBSessionStore", "RocksDBWindowStore", "SessionStore", "StateDirectory", "StateError", "StateStore",
    "StandbyUpdateListener", "StateRestoreListener", "StoreChangelogReader",
    "StoreBuilder", "StoreClosedError", "StoreContext", "StoreLayoutError", "Stores", "TaskCorruptedError",
    "TaskId", "TaskType", "ThreadCache", "TypedKeyValueStore", "TypedSessionStore", "TypedWindowStore",
    "Window", "WindowStore", "Windowed",
]
