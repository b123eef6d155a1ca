"""Read-only views of stores for interactive queries (Kafka's ReadOnly*Store and Composite*Store).

A view wraps one store or several (the same store of several tasks); reads look in each in turn:
`get` returns the first value found, iterations chain the stores' iterations (per store in the
store's order, as Kafka's composite stores). Views have no write methods. Time arguments are int
milliseconds or `datetime.datetime` / `datetime.timedelta` since the epoch.

- KV: `get(key)`, `range(key_from, key_to)`, `reverse_range`, `all()`, `reverse_all()`,
  `approximate_num_entries()`; with `unwrap_timestamps` (the default) a timestamped store shows
  plain values; `timestamped=True` views show ValueAndTimestamp.
- Window: `fetch(key, time_from, time_to)` -> (window_start, value); `fetch(key, window_start)`
  -> value; `fetch_range`, `fetch_all(time_from, time_to)`, `all()` -> (Windowed, value).
- Session: `fetch(key)`, `find_sessions(key, earliest_session_end, latest_session_start)`,
  `fetch_range(key_from, key_to)`, `all()` -> (Windowed, value).
"""

from __future__ import annotations

import datetime
from typing import Any, Iterable, Iterator, Optional, Sequence

from state.errors import InvalidStoreArgumentError, InvalidStateStoreError
from state.store import KeyValueIterator
from state.timestamped import ValueAndTimestamp

_EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.timezone.utc)


def time_ms(value: Any, what: str) -> int:
    """Int ms, a timezone-aware datetime or a timedelta since the epoch, as int ms."""
    if isinstance(value, datetime.datetime):
        if value.tzinfo is None:
            raise InvalidStoreArgumentError(f"{what}: a datetime must be timezone-aware, got {value!r}")
        delta = value - _EPOCH
        return delta // datetime.timedelta(milliseconds=1)
    if isinstance(value, datetime.timedelta):
        return value // datetime.timedelta(milliseconds=1)
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidStoreArgumentError(f"{what} must be int milliseconds or a datetime, got {value!r}")
    return value


class _View:
    def __init__(self, stores: Any, name: Optional[str] = None) -> None:
        stores = list(stores) if isinstance(stores, (list, tuple)) else [stores]
        if not stores:
            raise InvalidStateStoreError(f"no instance of store {name!r} is available for queries")
        self._stores: Sequence[Any] = stores
        self.name = name or stores[0].name

    def _open_stores(self) -> Sequence[Any]:
        for store in self._stores:
            if not store.is_open:
                raise InvalidStateStoreError(
                    f"state store {self.name!r} is not available for queries (closed or migrating); retry")
        return self._stores

    def _chain(self, iterators: Iterable[KeyValueIterator], mapper=None) -> KeyValueIterator:
        its = list(iterators)

        def gen() -> Iterator:
            try:
                for it in its:
                    if mapper is None:
                        yield from it
                    else:
                        for pair in it:
                            yield mapper(pair)
            finally:
                for it in its:
                    it.close()

        return KeyValueIterator(gen(), self.name)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.name!r}, {len(self._stores)} store(s))"


def _unwrap(pair: tuple) -> tuple:
    value = pair[1]
    return (pair[0], value.value) if isinstance(value, ValueAndTimestamp) else pair


class ReadOnlyKeyValueView(_View):
    def __init__(self, stores: Any, name: Optional[str] = None, *, timestamped: bool = False) -> None:
        super().__init__(stores, name)
        self.timestamped = timestamped

    def _out(self, value: Any) -> Any:
        if not self.timestamped and isinstance(value, ValueAndTimestamp):
            return value.value
        return value

    def get(self, key: Any) -> Any:
        if key is None:
            raise InvalidStoreArgumentError(f"state store {self.name!r}: key must not be None")
        for store in self._open_stores():
            value = store.get(key)
            if value is not None:
                return self._out(value)
        return None

    def _map(self):
        return None if self.timestamped else _unwrap

    def range(self, key_from: Any, key_to: Any) -> KeyValueIterator:
        return self._chain((s.range(key_from, key_to) for s in self._open_stores()), self._map())

    def reverse_range(self, key_from: Any, key_to: Any) -> KeyValueIterator:
        return self._chain((s.reverse_range(key_from, key_to) for s in self._open_stores()), self._map())

    def all(self) -> KeyValueIterator:
        return self._chain((s.all() for s in self._open_stores()), self._map())

    def reverse_all(self) -> KeyValueIterator:
        return self._chain((s.reverse_all() for s in self._open_stores()), self._map())

    def prefix_scan(self, prefix: Any, prefix_serde: Any = None) -> KeyValueIterator:
        """The entries whose serialized key starts with `prefix` serialized (by `prefix_serde`,
        else the key serde): Kafka's prefixScan."""
        return self._chain((s.prefix_scan(prefix, prefix_serde) for s in self._open_stores()), self._map())

    def approximate_num_entries(self) -> int:
        return sum(s.approximate_num_entries() for s in self._open_stores())


class ReadOnlyWindowView(_View):
    """Timestamped window stores show plain values unless `timestamped=True` (Kafka's
    windowStore() vs timestampedWindowStore() query types)."""

    def __init__(self, stores: Any, name: Optional[str] = None, *, timestamped: bool = False) -> None:
        super().__init__(stores, name)
        self._map = None if timestamped else _unwrap
        self.timestamped = timestamped

    def fetch(self, key: Any, time_from: Any, time_to: Any = None) -> Any:
        """`fetch(key, window_start)` -> value or None; `fetch(key, t0, t1)` -> (window_start, value)
        for the windows of `key` starting in [t0, t1]."""
        if key is None:
            raise InvalidStoreArgumentError(f"state store {self.name!r}: key must not be None")
        t0 = time_ms(time_from, "time_from")
        if time_to is None:
            for store in self._open_stores():
                value = store.fetch(key, t0)
                if value is not None:
                    return value.value if self._map and isinstance(value, ValueAndTimestamp) else value
            return None
        t1 = time_ms(time_to, "time_to")
        return self._chain((store.fetch(key, t0, t1) for store in self._open_stores()), self._map)

    def backward_fetch(self, key: Any, time_from: Any, time_to: Any) -> KeyValueIterator:
        t0, t1 = time_ms(time_from, "time_from"), time_ms(time_to, "time_to")
        return self._chain((store.backward_fetch(key, t0, t1) for store in self._open_stores()), self._map)

    def fetch_range(self, key_from: Any, key_to: Any, time_from: Any, time_to: Any) -> KeyValueIterator:
        t0, t1 = time_ms(time_from, "time_from"), time_ms(time_to, "time_to")
        return self._chain((store.fetch_range(key_from, key_to, t0, t1) for store in self._open_stores()), self._map)

    def backward_fetch_range(self, key_from: Any, key_to: Any, time_from: Any, time_to: Any) -> KeyValueIterator:
        t0, t1 = time_ms(time_from, "time_from"), time_ms(time_to, "time_to")
        return self._chain((store.backward_fetch_range(key_from, key_to, t0, t1) for store in self._open_stores()),
                           self._map)

    def fetch_all(self, time_from: Any, time_to: Any) -> KeyValueIterator:
        t0, t1 = time_ms(time_from, "time_from"), time_ms(time_to, "time_to")
        return self._chain((store.fetch_all(t0, t1) for store in self._open_stores()), self._map)

    def backward_fetch_all(self, time_from: Any, time_to: Any) -> KeyValueIterator:
        t0, t1 = time_ms(time_from, "time_from"), time_ms(time_to, "time_to")
        return self._chain((store.backward_fetch_all(t0, t1) for store in self._open_stores()), self._map)

    def all(self) -> KeyValueIterator:
        return self._chain((store.all() for store in self._open_stores()), self._map)

    def backward_all(self) -> KeyValueIterator:
        return self._chain((store.backward_all() for store in self._open_stores()), self._map)


class ReadOnlySessionView(_View):
    def fetch(self, key: Any) -> KeyValueIterator:
        """All sessions of `key` -> (Windowed, value)."""
        if key is None:
            raise InvalidStoreArgumentError(f"state store {self.name!r}: key must not be None")
        return self._chain(store.fetch(key) for store in self._open_stores())

    def backward_fetch(self, key: Any) -> KeyValueIterator:
        if key is None:
            raise InvalidStoreArgumentError(f"state store {self.name!r}: key must not be None")
        return self._chain(store.backward_fetch(key) for store in self._open_stores())

    def find_sessions(self, key: Any, earliest_session_end: Any, latest_session_start: Any) -> KeyValueIterator:
        """Sessions of `key` ending at or after `earliest_session_end` and starting at or before
        `latest_session_start`."""
        return self._find("find_sessions", key, earliest_session_end, latest_session_start)

    def backward_find_sessions(self, key: Any, earliest_session_end: Any, latest_session_start: Any
                               ) -> KeyValueIterator:
        return self._find("backward_find_sessions", key, earliest_session_end, latest_session_start)

    def _find(self, method: str, key: Any, earliest_session_end: Any, latest_session_start: Any) -> KeyValueIterator:
        if key is None:
            raise InvalidStoreArgumentError(f"state store {self.name!r}: key must not be None")
        t0 = time_ms(earliest_session_end, "earliest_session_end")
        t1 = time_ms(latest_session_start, "latest_session_start")
        return self._chain(getattr(store, method)(key, t0, t1) for store in self._open_stores())

    def find_sessions_range(self, key_from: Any, key_to: Any, earliest_session_end: Any,
                            latest_session_start: Any) -> KeyValueIterator:
        """The sessions of the keys in [key_from, key_to] (None: unbounded) ending at or after
        `earliest_session_end` and starting at or before `latest_session_start` (Kafka's
        findSessions over a key range)."""
        return self._find_range("find_sessions_range", key_from, key_to, earliest_session_end, latest_session_start)

    def backward_find_sessions_range(self, key_from: Any, key_to: Any, earliest_session_end: Any,
                                     latest_session_start: Any) -> KeyValueIterator:
        return self._find_range("backward_find_sessions_range", key_from, key_to, earliest_session_end,
                                latest_session_start)

    def _find_range(self, method: str, key_from: Any, key_to: Any, earliest_session_end: Any,
                    latest_session_start: Any) -> KeyValueIterator:
        t0 = time_ms(earliest_session_end, "earliest_session_end")
        t1 = time_ms(latest_session_start, "latest_session_start")
        return self._chain(getattr(store, method)(key_from, key_to, t0, t1) for store in self._open_stores())

    def fetch_session(self, key: Any, session_start: Any, session_end: Any) -> Any:
        t0, t1 = time_ms(session_start, "session_start"), time_ms(session_end, "session_end")
        for store in self._open_stores():
            value = store.fetch_session(key, t0, t1)
            if value is not None:
                return value
        return None

    def fetch_range(self, key_from: Any, key_to: Any) -> KeyValueIterator:
        return self._chain(store.fetch_range(key_from, key_to) for store in self._open_stores())

    def backward_fetch_range(self, key_from: Any, key_to: Any) -> KeyValueIterator:
        return self._chain(store.backward_fetch_range(key_from, key_to) for store in self._open_stores())

    def all(self) -> KeyValueIterator:
        return self._chain(store.all() for store in self._open_stores())


def read_only_view(stores: Any, name: Optional[str] = None, *, timestamped: bool = False) -> _View:
    """The view matching the store kind: window, session or key-value (by the store's interface)."""
    first = stores[0] if isinstance(stores, (list, tuple)) and stores else stores
    if hasattr(first, "find_sessions"):
        return ReadOnlySessionView(stores, name)
    if hasattr(first, "fetch_all"):
        return ReadOnlyWindowView(stores, name, timestamped=timestamped)
    if hasattr(first, "get") and hasattr(first, "range"):
        return ReadOnlyKeyValueView(stores, name, timestamped=timestamped)
    raise InvalidStateStoreError(f"store {name or getattr(first, 'name', first)!r} cannot be queried: "
                                 f"{type(first).__name__} is not a key-value, window or session store")
