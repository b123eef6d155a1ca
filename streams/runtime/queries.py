"""Interactive queries: a read-only, typed view of one store over the instance's active tasks
(key-value, window or session, as the store is).

A key lookup asks every local task's store in turn and answers the first that has the key (a
value, or for an iterating fetch a non-empty iterator), as Kafka's composite stores do; the
task of the partition the default partitioner (murmur2) puts the key in is asked first, which
is where the key mostly is, but a key partitioned otherwise (explicit partitions, a custom
partitioner) is found in its own task all the same. Range queries and `all()` merge every local
task's store in key order.
"""

from __future__ import annotations

from typing import Any, Callable, Iterator

from state.errors import InvalidStateStoreError
from state.timestamped import ValueAndTimestamp
from state.task_id import TaskId
from eddy.murmur2 import murmur2_partition as partition_for_key


def _plain(value: Any) -> Any:
    """A DSL table's or windowed aggregation's timestamped value shows as the plain value
    (Kafka's keyValueStore() / windowStore() query types over timestamped stores)."""
    return value.value if isinstance(value, ValueAndTimestamp) else value


class _LocalStoresView:
    """One store name over this instance's running tasks of its sub-topology."""

    def __init__(self, name: str, subtopology_id: int, num_partitions: int,
                 local_stores: Callable[[], dict[TaskId, Any]], check_state: Callable[[], None]) -> None:
        self.name = name
        self._sub = subtopology_id
        self._num_partitions = num_partitions
        self._local_stores = local_stores
        self._check_state = check_state

    def _stores(self) -> dict[TaskId, Any]:
        self._check_state()
        stores = self._local_stores()
        for store in stores.values():
            if not getattr(store, "is_open", True):
                raise InvalidStateStoreError(f"store {self.name!r} is being migrated; retry later")
        return stores

    def _key_stores(self, key: Any) -> list:
        """The local stores in the order a key lookup asks them: the one of the partition the
        default partitioner puts `key` in first (when local), then the others."""
        stores = self._stores()
        if not stores:
            return []
        first = next(iter(stores.values()))
        serdes = getattr(first, "serdes", None)
        if serdes is not None and key is not None:
            routed = TaskId(self._sub, partition_for_key(serdes.key_to_bytes(key), self._num_partitions))
            store = stores.get(routed)
            if store is not None:
                return [store] + [s for task, s in stores.items() if task != routed]
        return list(stores.values())

    def _first_value(self, method: str, key: Any, *args: Any) -> Any:
        """The first non-None answer of `method(key, *args)` in `_key_stores` order."""
        for store in self._key_stores(key):
            value = getattr(store, method)(key, *args)
            if value is not None:
                return value
        return None


class ReadOnlyKeyValueView(_LocalStoresView):
    """Kafka's ReadOnlyKeyValueStore over the local tasks."""

    def get(self, key: Any) -> Any:
        return _plain(self._first_value("get", key))

    def _merged(self, iterators: list) -> Iterator[tuple[Any, Any]]:
        items = []
        for store, it in iterators:
            serdes = getattr(store, "serdes", None)
            with_bytes = [((serdes.key_to_bytes(k) if serdes is not None else k), k, v) for k, v in it]
            close = getattr(it, "close", None)
            if close is not None:
                close()
            items.extend(with_bytes)
        items.sort(key=lambda e: e[0])
        return iter([(k, _plain(v)) for _, k, v in items])

    def range(self, key_from: Any, key_to: Any) -> Iterator[tuple[Any, Any]]:
        return self._merged([(s, s.range(key_from, key_to)) for s in self._stores().values()])

    def all(self) -> Iterator[tuple[Any, Any]]:
        return self._merged([(s, s.all()) for s in self._stores().values()])

    def prefix_scan(self, prefix: Any) -> Iterator[tuple[Any, Any]]:
        return self._merged([(s, s.prefix_scan(prefix)) for s in self._stores().values()])

    def approximate_num_entries(self) -> int:
        return sum(s.approximate_num_entries() for s in self._stores().values())

    def __repr__(self) -> str:
        return f"ReadOnlyKeyValueView({self.name!r})"


class _ConcatenatedIterator:
    """The stores' iterators one after another (Kafka's composite store does not merge-sort
    windowed results either); `close()` closes what is left."""

    def __init__(self, iterators: list) -> None:
        self._iterators = iterators

    def __iter__(self) -> Iterator:
        try:
            for it in self._iterators:
                for pair in it:
                    yield (pair[0], _plain(pair[1]))
                close = getattr(it, "close", None)
                if close is not None:
                    close()
        finally:
            self.close()

    def close(self) -> None:
        iterators, self._iterators = self._iterators, []
        for it in iterators:
            close = getattr(it, "close", None)
            if close is not None:
                close()


class _FirstFoundIterator(_ConcatenatedIterator):
    """A key fetch over the local stores (Kafka's composite window and session stores): the
    results of the first store, in the order given, whose fetch finds anything. The first
    store's fetch is made at once (a bad argument fails the call, as Kafka's), each other only
    when the ones before it found nothing; `close()` closes those made."""

    def __init__(self, fetches: list[Callable[[], Any]]) -> None:
        super().__init__([fetches[0]()] if fetches else [])
        self._fetches = list(fetches[1:])

    def _in_turn(self) -> Iterator:
        """The fetch made at once, then each other one, made when the ones before are done."""
        yield from list(self._iterators)
        while self._fetches:
            self._iterators.append(self._fetches.pop(0)())
            yield self._iterators[-1]

    def __iter__(self) -> Iterator:
        try:
            for results in self._in_turn():
                found = False
                for pair in results:
                    found = True
                    yield (pair[0], _plain(pair[1]))
                if found:
                    return
        finally:
            self.close()


class _WindowedView(_LocalStoresView):
    """Shared by the window and session views: key lookups ask the local tasks in
    `_key_stores` order; range and scan queries ask every local task."""

    def _by_key(self, method: str, key: Any, *args: Any) -> _FirstFoundIterator:
        return _FirstFoundIterator([lambda s=s: getattr(s, method)(key, *args) for s in self._key_stores(key)])

    def _everywhere(self, method: str, *args: Any) -> _ConcatenatedIterator:
        return _ConcatenatedIterator([getattr(s, method)(*args) for s in self._stores().values()])


class ReadOnlyWindowView(_WindowedView):
    """Kafka's ReadOnlyWindowStore over the local tasks."""

    def fetch(self, key: Any, time_from: int, time_to: int | None = None) -> Any:
        if time_to is None:  # fetch(key, window_start): the value of that one window
            return _plain(self._first_value("fetch", key, time_from))
        return self._by_key("fetch", key, time_from, time_to)

    def backward_fetch(self, key: Any, time_from: int, time_to: int) -> _ConcatenatedIterator:
        return self._by_key("backward_fetch", key, time_from, time_to)

    def fetch_range(self, key_from: Any, key_to: Any, time_from: int, time_to: int) -> _ConcatenatedIterator:
        return self._everywhere("fetch_range", key_from, key_to, time_from, time_to)

    def fetch_all(self, time_from: int, time_to: int) -> _ConcatenatedIterator:
        return self._everywhere("fetch_all", time_from, time_to)

    def all(self) -> _ConcatenatedIterator:
        return self._everywhere("all")

    def __repr__(self) -> str:
        return f"ReadOnlyWindowView({self.name!r})"


class ReadOnlySessionView(_WindowedView):
    """Kafka's ReadOnlySessionStore over the local tasks."""

    def fetch(self, key: Any) -> _ConcatenatedIterator:
        return self._by_key("fetch", key)

    def backward_fetch(self, key: Any) -> _ConcatenatedIterator:
        return self._by_key("backward_fetch", key)

    def fetch_session(self, key: Any, session_start: int, session_end: int) -> Any:
        return self._first_value("fetch_session", key, session_start, session_end)

    def find_sessions(self, key: Any, earliest_session_end_time: int, latest_session_start_time: int
                      ) -> _ConcatenatedIterator:
        return self._by_key("find_sessions", key, earliest_session_end_time, latest_session_start_time)

    def fetch_range(self, key_from: Any, key_to: Any) -> _ConcatenatedIterator:
        return self._everywhere("fetch_range", key_from, key_to)

    def all(self) -> _ConcatenatedIterator:
        return self._everywhere("all")

    def __repr__(self) -> str:
        return f"ReadOnlySessionView({self.name!r})"
