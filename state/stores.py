"""`Stores`: factories for store suppliers and builders (Kafka's `Stores` in snake_case).

A supplier makes the innermost bytes store; a builder stacks the layers
`typed -> caching -> change logging -> inner` and returns the typed, outermost store.
Builders default to logging enabled and caching disabled, as in Kafka (the DSL enables caching).
"""

from __future__ import annotations

import logging
from typing import Callable, Mapping, Optional

from state.cache import CachingKeyValueStore, CachingSessionStore, CachingWindowStore, ThreadCache
from state.errors import InvalidStoreArgumentError
from state.logging_store import (ChangeLoggingKeyValueStore, ChangeLoggingSessionStore,
                                 ChangeLoggingTimestampedKeyValueStore, ChangeLoggingTimestampedWindowStore,
                                 ChangeLoggingWindowStore)
from state.memory_kv import InMemoryKeyValueStore
from state.rocksdb_kv import RocksDBKeyValueStore
from state.store import StateStore
from state.session import InMemorySessionStore, RocksDBSessionStore
from state.timestamped import TimestampedKeyValueStore, ValueAndTimestampSerde
from state.typed import TypedKeyValueStore, TypedSessionStore, TypedWindowStore
from state.window import InMemoryWindowStore, RocksDBWindowStore, TimeOrderedWindowStore

log = logging.getLogger(__name__)

# Kafka's windowstore.changelog.additional.retention.ms default: 1 day.
WINDOW_CHANGELOG_ADDITIONAL_RETENTION_MS = 24 * 60 * 60 * 1000
MAX_RETENTION_MS = 2**63 - 1  # a Java long's largest
MIN_SEGMENT_INTERVAL_MS = 60_000


def _check_name(name) -> str:
    if not isinstance(name, str) or not name:
        raise InvalidStoreArgumentError(f"store name must be a non-empty string, got {name!r}")
    bad = set(name) - set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-")
    if bad or name in (".", ".."):
        raise InvalidStoreArgumentError(
            f"store name {name!r} must use only [a-zA-Z0-9._-] (it names a directory and a changelog topic)"
        )
    return name


def _check_ms(what: str, value, store_name: str, minimum: int = 0) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
        raise InvalidStoreArgumentError(
            f"store {store_name!r}: {what} must be an int >= {minimum}, got {value!r}"
        )
    return value


class StoreSupplier:
    """Makes new inner (bytes) stores of one kind; `kind` is "key_value", "window" or "session"."""

    kind = "key_value"

    def __init__(self, name: str, factory: Callable[[], StateStore], persistent: bool) -> None:
        self.name = _check_name(name)
        self._factory = factory
        self.persistent = persistent

    def get(self) -> StateStore:
        return self._factory()

    def metrics_scope(self) -> str:
        return ("rocksdb" if self.persistent else "in-memory") + "-" + self.kind.replace("_", "-")

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.name!r}, {self.metrics_scope()})"


class KeyValueBytesStoreSupplier(StoreSupplier):
    kind = "key_value"


class WindowBytesStoreSupplier(StoreSupplier):
    kind = "window"

    def __init__(self, name, factory, persistent, *, retention_ms: int, window_size_ms: int,
                 segment_interval_ms: int, retain_duplicates: bool) -> None:
        super().__init__(name, factory, persistent)
        self.retention_ms = retention_ms
        self.window_size_ms = window_size_ms
        self.segment_interval_ms = segment_interval_ms
        self.retain_duplicates = retain_duplicates


class SessionBytesStoreSupplier(StoreSupplier):
    kind = "session"

    def __init__(self, name, factory, persistent, *, retention_ms: int, segment_interval_ms: int) -> None:
        super().__init__(name, factory, persistent)
        self.retention_ms = retention_ms
        self.segment_interval_ms = segment_interval_ms


def segment_interval_for(retention_ms: int) -> int:
    """Kafka's default segment interval: max(retention / 2, 60 s)."""
    return max(retention_ms // 2, MIN_SEGMENT_INTERVAL_MS)


class StoreBuilder:
    """Builds the layered, typed store for one supplier."""

    def __init__(self, supplier: StoreSupplier, key_serde=None, value_serde=None, *,
                 timestamped: bool = False) -> None:
        if not isinstance(supplier, StoreSupplier):
            raise InvalidStoreArgumentError(f"a store builder needs a store supplier, got {type(supplier).__name__}")
        if timestamped and supplier.kind == "session":
            raise InvalidStoreArgumentError(f"store {supplier.name!r}: session stores cannot be timestamped")
        self.supplier = supplier
        # Values are ValueAndTimestamp (state/timestamped.py), as Kafka's TimestampedKeyValueStore
        # and TimestampedWindowStore; their changelogs are in Kafka's timestamped format.
        self.timestamped = timestamped
        self.key_serde = key_serde
        self.value_serde = value_serde
        self._caching = False
        self._logging = True
        self._log_config: dict = {}
        self._cache: Optional[ThreadCache] = None
        self._additional_retention_ms: Optional[int] = None  # with_additional_changelog_retention's

    @property
    def name(self) -> str:
        return self.supplier.name

    @property
    def kind(self) -> str:
        return self.supplier.kind

    def with_caching_enabled(self) -> "StoreBuilder":
        self._caching = True
        return self

    def with_caching_disabled(self) -> "StoreBuilder":
        self._caching = False
        return self

    def with_cache(self, cache: ThreadCache) -> "StoreBuilder":
        """Use this ThreadCache instead of the context's (tests and custom runtimes)."""
        self._cache = cache
        return self

    def with_logging_enabled(self, config: Optional[dict] = None) -> "StoreBuilder":
        if config is not None and not isinstance(config, dict):
            raise InvalidStoreArgumentError(f"store {self.name!r}: log config must be a dict, got {type(config).__name__}")
        self._logging = True
        self._log_config = dict(config or {})
        return self

    def with_logging_disabled(self) -> "StoreBuilder":
        self._logging = False
        self._log_config = {}
        return self

    def with_additional_changelog_retention(self, additional_retention_ms: int) -> "StoreBuilder":
        """This store's own windowstore.changelog.additional.retention.ms: added to a windowed
        store's retention for its changelog's retention.ms (over the app's config)."""
        self._additional_retention_ms = _check_ms("additional_retention_ms", additional_retention_ms, self.name)
        return self

    @property
    def caching_enabled(self) -> bool:
        return self._caching

    @property
    def logging_enabled(self) -> bool:
        return self._logging

    @property
    def log_config(self) -> dict:
        return dict(self._log_config)

    def changelog_topic_config(self, additional_retention_ms: Optional[int] = None,
                               defaults: Optional[Mapping[str, str]] = None) -> dict:
        """Topic config for the changelog, as Kafka's: its own (compacted; a windowed store's also
        deleted by time), under `defaults` (the app's `topic.` configs), under the logging config
        given to the store. A windowed store's retention.ms, unless that logging config sets it,
        is the store's retention plus the additional retention: this builder's own, else
        `additional_retention_ms` (the app's windowstore.changelog.additional.retention.ms),
        else Kafka's default of 1 day."""
        retention = getattr(self.supplier, "retention_ms", None)
        config = {"cleanup.policy": "compact" if retention is None else "compact,delete"}
        config.update(defaults or {})
        config.update(self._log_config)
        if retention is not None and "retention.ms" not in self._log_config:
            extra = self._additional_retention_ms
            if extra is None:
                extra = WINDOW_CHANGELOG_ADDITIONAL_RETENTION_MS if additional_retention_ms is None \
                    else additional_retention_ms
            config["retention.ms"] = str(min(retention + extra, MAX_RETENTION_MS))  # Kafka's addExact, capped
        return config

    def build(self) -> StateStore:
        inner = self.supplier.get()
        kind = self.supplier.kind
        timestamped = self.timestamped
        if kind == "key_value":
            store = inner
            if self._logging:
                store = (ChangeLoggingTimestampedKeyValueStore if timestamped else ChangeLoggingKeyValueStore)(store)
            if self._caching:
                store = CachingKeyValueStore(store, self._cache)
            if timestamped:
                return TimestampedKeyValueStore(store, self.key_serde, self.value_serde)
            return TypedKeyValueStore(store, self.key_serde, self.value_serde)
        if kind == "window":
            store = inner
            if self._logging:
                store = (ChangeLoggingTimestampedWindowStore if timestamped else ChangeLoggingWindowStore)(store)
            if self._caching:
                store = CachingWindowStore(store, self._cache)
            value_serde = ValueAndTimestampSerde(self.value_serde) if timestamped else self.value_serde
            return TypedWindowStore(store, self.key_serde, value_serde)
        if kind == "session":
            store = ChangeLoggingSessionStore(inner) if self._logging else inner
            if self._caching:
                store = CachingSessionStore(store, self._cache)
            return TypedSessionStore(store, self.key_serde, self.value_serde)
        raise InvalidStoreArgumentError(f"store {self.name!r}: unknown store kind {kind!r}")  # pragma: no cover


class Stores:
    """Factories for store suppliers and builders."""

    @staticmethod
    def persistent_key_value_store(name: str) -> KeyValueBytesStoreSupplier:
        _check_name(name)
        return KeyValueBytesStoreSupplier(name, lambda: RocksDBKeyValueStore(name), True)

    @staticmethod
    def in_memory_key_value_store(name: str) -> KeyValueBytesStoreSupplier:
        _check_name(name)
        return KeyValueBytesStoreSupplier(name, lambda: InMemoryKeyValueStore(name), False)

    @staticmethod
    def _window_supplier(name, retention_ms, window_size_ms, retain_duplicates, persistent, time_ordered=False,
                         with_index=False):
        _check_name(name)
        _check_ms("retention_ms", retention_ms, name)
        _check_ms("window_size_ms", window_size_ms, name)  # >= 0, as Kafka
        if window_size_ms > retention_ms:
            raise InvalidStoreArgumentError(
                f"store {name!r}: retention_ms ({retention_ms}) must be >= window_size_ms ({window_size_ms})"
            )
        interval = segment_interval_for(retention_ms)
        if time_ordered:
            def factory():
                return TimeOrderedWindowStore(name, retention_ms=retention_ms, window_size_ms=window_size_ms,
                                              segment_interval_ms=interval, retain_duplicates=bool(retain_duplicates),
                                              persistent=persistent, with_index=with_index)
        else:
            cls = RocksDBWindowStore if persistent else InMemoryWindowStore

            def factory():
                return cls(name, retention_ms=retention_ms, window_size_ms=window_size_ms,
                           segment_interval_ms=interval, retain_duplicates=bool(retain_duplicates))

        return WindowBytesStoreSupplier(name, factory, persistent, retention_ms=retention_ms,
                                        window_size_ms=window_size_ms, segment_interval_ms=interval,
                                        retain_duplicates=bool(retain_duplicates))

    @staticmethod
    def persistent_window_store(name: str, retention_ms: int, window_size_ms: int,
                                retain_duplicates: bool = False) -> WindowBytesStoreSupplier:
        return Stores._window_supplier(name, retention_ms, window_size_ms, retain_duplicates, True)

    @staticmethod
    def in_memory_window_store(name: str, retention_ms: int, window_size_ms: int,
                               retain_duplicates: bool = False) -> WindowBytesStoreSupplier:
        return Stores._window_supplier(name, retention_ms, window_size_ms, retain_duplicates, False)

    @staticmethod
    def time_ordered_window_store(name: str, retention_ms: int, window_size_ms: int, *,
                                  persistent: bool = True, with_index: bool = False) -> WindowBytesStoreSupplier:
        """A window store ordered by window start, then key (state.window.TimeOrderedWindowStore),
        with a key index if asked: what the DSL gives a windowed aggregation emitting final
        results on window close (Kafka's internal RocksDbIndexedTimeOrderedWindowBytesStoreSupplier:
        with index for sliding windows, without for time windows)."""
        return Stores._window_supplier(name, retention_ms, window_size_ms, False, persistent, time_ordered=True,
                                       with_index=with_index)

    @staticmethod
    def _session_supplier(name, retention_ms, persistent):
        _check_name(name)
        _check_ms("retention_ms", retention_ms, name)
        interval = segment_interval_for(retention_ms)
        cls = RocksDBSessionStore if persistent else InMemorySessionStore
        return SessionBytesStoreSupplier(
            name, lambda: cls(name, retention_ms=retention_ms, segment_interval_ms=interval), persistent,
            retention_ms=retention_ms, segment_interval_ms=interval,
        )

    @staticmethod
    def persistent_session_store(name: str, retention_ms: int) -> SessionBytesStoreSupplier:
        return Stores._session_supplier(name, retention_ms, True)

    @staticmethod
    def in_memory_session_store(name: str, retention_ms: int) -> SessionBytesStoreSupplier:
        return Stores._session_supplier(name, retention_ms, False)

    @staticmethod
    def key_value_store_builder(supplier: KeyValueBytesStoreSupplier, key_serde=None, value_serde=None) -> StoreBuilder:
        if not isinstance(supplier, KeyValueBytesStoreSupplier):
            raise InvalidStoreArgumentError(f"key_value_store_builder needs a key-value supplier, got {supplier!r}")
        return StoreBuilder(supplier, key_serde, value_serde)

    @staticmethod
    def timestamped_key_value_store_builder(supplier: KeyValueBytesStoreSupplier, key_serde=None,
                                            value_serde=None) -> StoreBuilder:
        """A key-value store of ValueAndTimestamp values (Kafka's timestampedKeyValueStoreBuilder)."""
        if not isinstance(supplier, KeyValueBytesStoreSupplier):
            raise InvalidStoreArgumentError(
                f"timestamped_key_value_store_builder needs a key-value supplier, got {supplier!r}")
        return StoreBuilder(supplier, key_serde, value_serde, timestamped=True)

    @staticmethod
    def window_store_builder(supplier: WindowBytesStoreSupplier, key_serde=None, value_serde=None) -> StoreBuilder:
        if not isinstance(supplier, WindowBytesStoreSupplier):
            raise InvalidStoreArgumentError(f"window_store_builder needs a window supplier, got {supplier!r}")
        return StoreBuilder(supplier, key_serde, value_serde)

    @staticmethod
    def timestamped_window_store_builder(supplier: WindowBytesStoreSupplier, key_serde=None,
                                         value_serde=None) -> StoreBuilder:
        """A window store of ValueAndTimestamp values (Kafka's timestampedWindowStoreBuilder)."""
        if not isinstance(supplier, WindowBytesStoreSupplier):
            raise InvalidStoreArgumentError(
                f"timestamped_window_store_builder needs a window supplier, got {supplier!r}")
        return StoreBuilder(supplier, key_serde, value_serde, timestamped=True)

    @staticmethod
    def session_store_builder(supplier: SessionBytesStoreSupplier, key_serde=None, value_serde=None) -> StoreBuilder:
        if not isinstance(supplier, SessionBytesStoreSupplier):
            raise InvalidStoreArgumentError(f"session_store_builder needs a session supplier, got {supplier!r}")
        return StoreBuilder(supplier, key_serde, value_serde)
