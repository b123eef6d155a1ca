"""Eddy's state layer: stores, change logging, caching, checkpoints and restore.

The names below are loaded on first use (PEP 562), so that importing one module of the package
(a Spark worker importing `state.snapshot`, say) does not load RocksDB, the cache and the restore
loop with it.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "BatchRestoreCallback": "state.store",
    "KeyValueIterator": "state.store",
    "KeyValueStore": "state.store",
    "StateStore": "state.store",
    "StoreContext": "state.store",
    "CachingKeyValueStore": "state.cache",
    "CachingSessionStore": "state.cache",
    "CachingWindowStore": "state.cache",
    "ThreadCache": "state.cache",
    "ChangeLoggingKeyValueStore": "state.logging_store",
    "ChangeLoggingSessionStore": "state.logging_store",
    "ChangeLoggingWindowStore": "state.logging_store",
    "CheckpointError": "state.errors",
    "InvalidStateStoreError": "state.errors",
    "InvalidStoreArgumentError": "state.errors",
    "LockError": "state.errors",
    "StateError": "state.errors",
    "StoreClosedError": "state.errors",
    "StoreLayoutError": "state.errors",
    "TaskCorruptedError": "state.errors",
    "InMemoryKeyValueStore": "state.memory_kv",
    "InMemorySessionStore": "state.session",
    "RocksDBSessionStore": "state.session",
    "SessionStore": "state.session",
    "InMemoryWindowStore": "state.window",
    "RocksDBWindowStore": "state.window",
    "Window": "state.window",
    "WindowStore": "state.window",
    "Windowed": "state.window",
    "OffsetCheckpoint": "state.checkpoint",
    "ProcessorStateManager": "state.manager",
    "TaskType": "state.manager",
    "RocksDBKeyValueStore": "state.rocksdb_kv",
    "RocksDBConfigSetter": "state.rocksdb_config",
    "StateDirectory": "state.directory",
    "StandbyUpdateListener": "state.listener",
    "StateRestoreListener": "state.listener",
    "StoreChangelogReader": "state.restore",
    "StoreBuilder": "state.stores",
    "Stores": "state.stores",
    "TaskId": "state.task_id",
    "TypedKeyValueStore": "state.typed",
    "TypedSessionStore": "state.typed",
    "TypedWindowStore": "state.typed",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # the next lookup is a plain attribute
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_EXPORTS))
