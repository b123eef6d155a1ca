"""Interactive queries: a read-only, typed view of one store over the instance's active tasks.

`get(key)` routes the key to the partition the default partitioner (murmur2) put it in and
reads that task's store; if that task is not local (another instance owns it, or a custom
partitioner was used) the other local tasks are searched, as Kafka's composite store does.
Range queries and `all()` merge every local task's store in key order.
"""

from __future__ import annotations

from typing import Any, Callable, Iterator

from state.errors import InvalidStateStoreError
from state.task_id import TaskId
from eddy.murmur2 import murmur2_partition as partition_for_key


class ReadOnlyKeyValueView:
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

    def get(self, key: Any) -> Any:
        stores = self._stores()
        if not stores:
            return None
        first = next(iter(stores.values()))
        serdes = getattr(first, "serdes", None)
        if serdes is not None and key is not None:
            routed = TaskId(self._sub, partition_for_key(serdes.key_to_bytes(key), self._num_partitions))
            store = stores.get(routed)
            if store is not None:
                return store.get(key)
        for store in stores.values():
            value = store.get(key)
            if value is not None:
                return value
        return None

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
        return iter([(k, v) for _, k, v in items])

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
