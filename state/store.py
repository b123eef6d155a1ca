"""The state-store base contract shared by every store and by the state manager.

Everything below the typed layer is bytes-in, bytes-out. See notes/STATE_API.md.
"""

from __future__ import annotations

import logging
import pathlib
from abc import ABC, abstractmethod
from typing import TYPE_CHECKING, Any, Callable, Optional, Protocol, runtime_checkable

from state.errors import StoreClosedError

if TYPE_CHECKING:  # pragma: no cover
    from state.task_id import TaskId

# Applies one restored batch of changelog records (key bytes, value bytes or None = tombstone).
# RocksDB stores implement it as ONE rocksdict WriteBatch with the WAL disabled.
BatchRestoreCallback = Callable[[list[tuple[bytes, Optional[bytes]]]], None]


@runtime_checkable
class StoreContext(Protocol):
    """What a store needs from its owner (ProcessorStateManager implements it)."""

    application_id: str
    task_id: "TaskId"
    task_dir: pathlib.Path
    config: dict

    def store_dir(self, store_name: str) -> pathlib.Path:
        """task_dir / "rocksdb" / store_name."""
        ...

    def register(
        self,
        store: "StateStore",
        restore_callback: Optional[BatchRestoreCallback],
        *,
        logged: bool,
    ) -> None:
        ...

    def log_change(
        self,
        store_name: str,
        key: bytes,
        value: Optional[bytes],
        timestamp: int,
        headers: Any = None,
    ) -> None:
        ...


class StateStore(ABC):
    """Base of every store and store wrapper.

    `init(context)` opens the store and registers it with the context for restore;
    `flush()` makes written data durable (or writes caches down); `close()` releases it.
    """

    name: str
    persistent: bool = False

    @abstractmethod
    def init(self, context: StoreContext) -> None:
        """Open the store and register it (with its restore callback) in `context`."""

    @abstractmethod
    def flush(self) -> None:
        ...

    @abstractmethod
    def close(self, dirty: bool = False) -> None:
        """Release the store. `dirty=True` (a task closed after an error) must not write buffered
        updates down: a caching layer drops its dirty entries instead of flushing them."""

    @property
    @abstractmethod
    def is_open(self) -> bool:
        ...

    def _check_open(self) -> None:
        if not self.is_open:
            raise StoreClosedError(f"state store {self.name!r} is not open")

    def __repr__(self) -> str:
        return f"{type(self).__name__}(name={self.name!r}, open={self.is_open})"


# --------------------------------------------------------------------------------------------
# Shared building blocks for stores and store wrappers (additive to the contract above).
# --------------------------------------------------------------------------------------------

import time as _time
import weakref as _weakref
from typing import Iterable, Iterator

from state.errors import InvalidStoreArgumentError


def wall_clock_ms() -> int:
    """Default record timestamp for change logging when the caller supplies none."""
    return int(_time.time() * 1000)


class KeyValueIterator:
    """Iterator over (key, value) pairs of a store range.

    A store iterator pins resources (a RocksDB iterator keeps the database alive), so a caller
    must either exhaust it or close it; it is also a context manager. Closing the store while an
    iterator is open invalidates it: the next `next()` raises `StoreClosedError` naming the store.
    """

    __slots__ = ("_source", "_store_name", "_invalidated", "_on_close", "__weakref__")

    def __init__(self, source: Iterator, store_name: str, on_close: Optional[Callable[[], None]] = None):
        self._source: Optional[Iterator] = source
        self._store_name = store_name
        self._invalidated = False
        self._on_close = on_close

    def __iter__(self) -> "KeyValueIterator":
        return self

    def __next__(self):
        source = self._source
        if source is None:
            if self._invalidated:
                raise StoreClosedError(
                    f"iterator of state store {self._store_name!r} was invalidated: the store was closed"
                )
            raise StopIteration
        try:
            return next(source)
        except StopIteration:
            self.close()
            raise

    def close(self) -> None:
        """Release the underlying iterator; idempotent."""
        source = self._source
        if source is None:
            return
        self._source = None
        close = getattr(source, "close", None)
        if close is not None:
            close()
        on_close = self._on_close
        self._on_close = None
        if on_close is not None:
            on_close()

    def invalidate(self) -> None:
        """Called by the owning store when it closes."""
        if self._source is not None:
            self.close()
            self._invalidated = True

    @property
    def is_open(self) -> bool:
        return self._source is not None

    def __enter__(self) -> "KeyValueIterator":
        return self

    def __exit__(self, *exc) -> None:
        if self._source is not None:
            self.close()

    def __del__(self) -> None:
        if self._source is None:  # exhausted or closed already (the common case)
            return
        try:
            self.close()
        except Exception:  # pragma: no cover - interpreter shutdown
            pass


class IteratorTracker:
    """Keeps weak references to a store's open iterators so `close()` can invalidate them."""

    __slots__ = ("_open",)

    def __init__(self) -> None:
        self._open: "_weakref.WeakSet[KeyValueIterator]" = _weakref.WeakSet()

    def track(self, source: Iterator, store_name: str) -> KeyValueIterator:
        it = KeyValueIterator(source, store_name)
        self._open.add(it)
        return it

    def invalidate_all(self) -> None:
        for it in list(self._open):
            it.invalidate()
        self._open.clear()

    def __len__(self) -> int:
        return sum(1 for it in self._open if it.is_open)


def check_key(store_name: str, key, what: str = "key") -> None:
    """Bytes layers accept only `bytes` keys; anything else is a typed error naming the store."""
    if type(key) is not bytes:
        if key is None:
            raise InvalidStoreArgumentError(f"state store {store_name!r}: {what} must not be None")
        raise InvalidStoreArgumentError(
            f"state store {store_name!r}: {what} must be bytes, got {type(key).__name__}"
        )


def checked_range_bounds(store_name: str, key_from, key_to, logger: logging.Logger) -> bool:
    """A key range's bounds checked (None: unbounded); False for key_from > key_to, which
    reads no entries and is logged at WARN on `logger` (Kafka's range with from > to)."""
    if key_from is not None:
        check_key(store_name, key_from, "key_from")
    if key_to is not None:
        check_key(store_name, key_to, "key_to")
    if key_from is not None and key_to is not None and key_from > key_to:
        logger.warning("state store %s: range with key_from > key_to returns no entries (like Kafka)", store_name)
        return False
    return True


def check_value(store_name: str, value) -> None:
    if value is not None and type(value) is not bytes:
        raise InvalidStoreArgumentError(
            f"state store {store_name!r}: value must be bytes or None, got {type(value).__name__}"
        )


class KeyValueStore(StateStore):
    """The key-value store interface (bytes at inner layers, typed objects at the typed layer).

    `put(key, None)` deletes. Ranges are inclusive on both ends and ordered by the key's bytes;
    `None` as a bound means unbounded. Iterators must be exhausted or closed.
    The optional `timestamp` is the record timestamp used by change logging and caching.
    """

    @abstractmethod
    def get(self, key):
        ...

    @abstractmethod
    def put(self, key, value, timestamp: Optional[int] = None) -> None:
        ...

    @abstractmethod
    def put_if_absent(self, key, value, timestamp: Optional[int] = None):
        """Put only if no value exists; returns the existing value (None if the put happened)."""

    @abstractmethod
    def put_all(self, entries: Iterable[tuple], timestamp: Optional[int] = None) -> None:
        ...

    @abstractmethod
    def delete(self, key, timestamp: Optional[int] = None):
        """Delete the key; returns the old value or None."""

    @abstractmethod
    def range(self, key_from, key_to) -> KeyValueIterator:
        ...

    @abstractmethod
    def reverse_range(self, key_from, key_to) -> KeyValueIterator:
        ...

    @abstractmethod
    def prefix_scan(self, prefix) -> KeyValueIterator:
        ...

    @abstractmethod
    def all(self) -> KeyValueIterator:
        ...

    def reverse_all(self) -> KeyValueIterator:
        return self.reverse_range(None, None)

    @abstractmethod
    def approximate_num_entries(self) -> int:
        ...


class _ChildContext:
    """The context a wrapper hands to the store it wraps.

    `register` always registers the outermost store (so the state manager flushes and closes
    the whole stack) with the innermost store's restore callback (restore bypasses caching and
    change logging), and `logged=True` once any change-logging layer is in the stack.
    """

    def __init__(self, parent, root: StateStore, logged: bool) -> None:
        self._parent = parent
        self._root = root
        self._logged = logged

    def register(self, store, restore_callback, *, logged: bool = False) -> None:
        self._parent.register(self._root, restore_callback, logged=logged or self._logged)

    def __getattr__(self, name):
        return getattr(self._parent, name)


def child_context(context, wrapper: StateStore, *, logged: bool = False):
    if isinstance(context, _ChildContext):
        if logged and not context._logged:
            return _ChildContext(context._parent, context._root, True)
        return context
    return _ChildContext(context, wrapper, logged)


class WrappedStateStore(StateStore):
    """Base of wrappers (typed, caching, change logging): delegates lifecycle to `wrapped`."""

    def __init__(self, wrapped: StateStore) -> None:
        self.wrapped = wrapped
        self.name = wrapped.name
        self.persistent = wrapped.persistent
        self._context = None
        self._timestamp_supplier: Callable[[], int] = wall_clock_ms

    def init(self, context: StoreContext) -> None:
        self._context = context
        self.wrapped.init(child_context(context, self))

    def flush(self) -> None:
        self.wrapped.flush()

    def close(self, dirty: bool = False) -> None:
        self.wrapped.close(dirty)

    @property
    def is_open(self) -> bool:
        return self.wrapped.is_open

    def set_timestamp_supplier(self, supplier: Callable[[], int]) -> None:
        """Where record timestamps come from when a call passes none (e.g. the processor context)."""
        self._timestamp_supplier = supplier
        inner = getattr(self.wrapped, "set_timestamp_supplier", None)
        if inner is not None:
            inner(supplier)

    def set_record_context(self, context: Any) -> None:
        """The record context caching layers keep with each write and set again while they
        flush (an object with `metadata` and `headers`: the task's processor context)."""
        inner = getattr(self.wrapped, "set_record_context", None)
        if inner is not None:
            inner(context)

    def inner_most(self) -> StateStore:
        store = self.wrapped
        while isinstance(store, WrappedStateStore):
            store = store.wrapped
        return store


def open_probe(store: StateStore) -> StateStore:
    """The store whose `is_open` always equals `store.is_open`: wrappers that only delegate it
    are skipped, so a hot path can test one attribute instead of a chain of properties."""
    while isinstance(store, WrappedStateStore) and type(store).is_open is WrappedStateStore.is_open:
        store = store.wrapped
    return store
