"""In-memory key-value store with byte-ordered range and prefix scans.

A dict holds the data; a sorted key list serves ranges. Keeping the list sorted on every insert
would cost O(n) per new key (a million-record restore would be quadratic), so new keys are
collected in `_pending` and merged when a range is next asked for (insort for a few, re-sort for
many); deleted keys are left in the list and skipped, and compacted away on the next re-sort.
Range iterators walk a snapshot of the matching keys and read values lazily, so writes during
iteration are safe (a key deleted meanwhile is skipped).
"""

from __future__ import annotations

import bisect
import logging
from typing import Iterable, Iterator, Optional

from state.errors import StateError, StoreClosedError
from state.rocksdb_kv import key_after, prefix_upper_bound
from state.store import (
    IteratorTracker,
    KeyValueIterator,
    KeyValueStore,
    StoreContext,
    check_key,
    check_value,
    checked_range_bounds,
)

log = logging.getLogger(__name__)

_INSORT_LIMIT = 64


class InMemoryKeyValueStore(KeyValueStore):
    persistent = False
    # A plain attribute, not a property: the caching layer tests it on every get and put.
    is_open: bool = False

    def __init__(self, name: str) -> None:
        if not name or not isinstance(name, str):
            raise StateError(f"store name must be a non-empty string, got {name!r}")
        self.name = name
        self._data: dict[bytes, bytes] = {}
        self._sorted: list[bytes] = []
        self._pending: set[bytes] = set()
        self._stale = 0
        self._open = False
        self._iterators = IteratorTracker()

    # ---------------------------------------------------------------- lifecycle
    def init(self, context: StoreContext) -> None:
        self.open()
        context.register(self, self.restore_batch, logged=False)

    def open(self, path=None) -> None:
        self._open = True
        self.is_open = True

    def _check(self) -> None:
        if not self._open:
            raise StoreClosedError(f"state store {self.name!r} is not open")

    def flush(self) -> None:
        self._check()

    def close(self, dirty: bool = False) -> None:
        if not self._open:
            return
        self._iterators.invalidate_all()
        self._open = False
        self.is_open = False
        self._data = {}
        self._sorted = []
        self._pending = set()
        self._stale = 0

    # ---------------------------------------------------------------- point ops
    def get(self, key: bytes) -> Optional[bytes]:
        if not self._open:
            raise StoreClosedError(f"state store {self.name!r} is not open")
        if type(key) is not bytes:
            check_key(self.name, key)
        return self._data.get(key)

    def _put(self, key: bytes, value: Optional[bytes]) -> None:
        data = self._data
        if value is None:
            if data.pop(key, None) is not None:
                self._stale += 1
                self._pending.discard(key)
        else:
            if key not in data:
                self._pending.add(key)
            data[key] = value

    def put(self, key: bytes, value: Optional[bytes], timestamp: Optional[int] = None) -> None:
        if not self._open:
            raise StoreClosedError(f"state store {self.name!r} is not open")
        if type(key) is not bytes:
            check_key(self.name, key)
        data = self._data
        if value is None:
            if data.pop(key, None) is not None:
                self._stale += 1
                self._pending.discard(key)
            return
        if type(value) is not bytes:
            check_value(self.name, value)
        if key not in data:
            self._pending.add(key)
        data[key] = value

    def put_if_absent(self, key: bytes, value: Optional[bytes], timestamp: Optional[int] = None):
        self._check()
        check_key(self.name, key)
        check_value(self.name, value)
        existing = self._data.get(key)
        if existing is None and value is not None:
            self._put(key, value)
        return existing

    def put_all(self, entries: Iterable[tuple], timestamp: Optional[int] = None) -> None:
        self._check()
        entries = list(entries)
        for key, value in entries:  # validate all first: put_all is all-or-nothing
            check_key(self.name, key)
            check_value(self.name, value)
        for key, value in entries:
            self._put(key, value)

    def delete(self, key: bytes, timestamp: Optional[int] = None) -> Optional[bytes]:
        self._check()
        check_key(self.name, key)
        old = self._data.get(key)
        if old is not None:
            self._put(key, None)
        return old

    def delete_range(self, key_from: bytes, key_to_exclusive: bytes) -> None:
        self._check()
        for key in self._keys_between(key_from, key_to_exclusive):
            self._put(key, None)

    def restore_batch(self, records: list) -> None:
        self._check()
        data = self._data
        pending = self._pending
        for key, value in records:
            if value is None:
                if data.pop(key, None) is not None:
                    self._stale += 1
                    pending.discard(key)
            else:
                if key not in data:
                    pending.add(key)
                data[key] = value

    # ---------------------------------------------------------------- ordering
    def _sorted_keys(self) -> list[bytes]:
        pending = self._pending
        keys = self._sorted
        if pending or self._stale > len(keys) // 2 + 16:
            if len(pending) <= _INSORT_LIMIT and self._stale <= len(keys) // 2 + 16:
                for key in pending:
                    i = bisect.bisect_left(keys, key)
                    if i == len(keys) or keys[i] != key:
                        keys.insert(i, key)
            else:
                keys = self._sorted = sorted(self._data)
                self._stale = 0
            pending.clear()
        return keys

    def _keys_between(self, lower: Optional[bytes], upper_exclusive: Optional[bytes]) -> list[bytes]:
        keys = self._sorted_keys()
        lo = 0 if lower is None else bisect.bisect_left(keys, lower)
        hi = len(keys) if upper_exclusive is None else bisect.bisect_left(keys, upper_exclusive)
        return keys[lo:hi]

    def _generate(self, keys: list[bytes]) -> Iterator:
        data = self._data
        for key in keys:
            value = data.get(key)
            if value is not None:
                yield key, value

    def scan(self, lower: bytes, upper_exclusive: bytes) -> list:
        """Every (key, value) in [lower, upper_exclusive), read at once (as RocksDBKeyValueStore.scan)."""
        self._check()
        return list(self._generate(self._keys_between(lower, upper_exclusive)))

    def raw_range(self, lower: Optional[bytes], upper_exclusive: Optional[bytes], reverse: bool = False) -> Iterator:
        """Untracked generator over [lower, upper_exclusive) for segmented stores built on this one."""
        self._check()
        keys = self._keys_between(lower, upper_exclusive)
        if reverse:
            keys.reverse()
        return self._generate(keys)

    def live_range(self, lower: bytes, upper_exclusive: bytes, reverse: bool = False) -> Iterator:
        """Untracked generator over [lower, upper_exclusive) that finds each next key when asked
        (raw_range takes the keys when it starts): a key written meanwhile ahead of it is met,
        one deleted is not, as a ConcurrentSkipListMap's iterator in Kafka's in-memory stores."""
        self._check()
        data = self._data
        while True:
            keys = self._sorted_keys()
            if reverse:
                i = bisect.bisect_left(keys, upper_exclusive) - 1
                if i < 0 or keys[i] < lower:
                    return
                key = upper_exclusive = keys[i]
            else:
                i = bisect.bisect_left(keys, lower)
                if i == len(keys) or keys[i] >= upper_exclusive:
                    return
                key = keys[i]
                lower = key_after(key)
            value = data.get(key)
            if value is not None:
                yield key, value

    def track(self, source: Iterator) -> KeyValueIterator:
        return self._iterators.track(source, self.name)

    def range(self, key_from: Optional[bytes], key_to: Optional[bytes]) -> KeyValueIterator:
        self._check()
        if not checked_range_bounds(self.name, key_from, key_to, log):
            return KeyValueIterator(iter(()), self.name)
        upper = key_after(key_to) if key_to is not None else None
        return self.track(self.raw_range(key_from, upper))

    def reverse_range(self, key_from: Optional[bytes], key_to: Optional[bytes]) -> KeyValueIterator:
        self._check()
        if not checked_range_bounds(self.name, key_from, key_to, log):
            return KeyValueIterator(iter(()), self.name)
        upper = key_after(key_to) if key_to is not None else None
        return self.track(self.raw_range(key_from, upper, reverse=True))

    def prefix_scan(self, prefix: bytes) -> KeyValueIterator:
        self._check()
        check_key(self.name, prefix, "prefix")
        return self.track(self.raw_range(prefix, prefix_upper_bound(prefix)))

    def all(self) -> KeyValueIterator:
        return self.range(None, None)

    def reverse_all(self) -> KeyValueIterator:
        return self.reverse_range(None, None)

    def num_open_iterators(self) -> int:
        return len(self._iterators)

    def approximate_num_entries(self) -> int:
        self._check()
        return len(self._data)
