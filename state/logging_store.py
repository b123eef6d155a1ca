"""Change-logging wrappers: every update is also sent to the store's changelog.

`context.log_change(store_name, key, value_or_None, timestamp)` is called after the inner store
accepted the write; the state manager turns it into a record of
`<application.id>-<store>-changelog` on the task's partition. Window and session stores log their
changelog key encodings (see state/window.py and state/session.py), which their restore callbacks
decode. Restore bypasses this layer (the inner store registers its own restore callback).

A timestamped store (values are an 8-byte timestamp + the value, state/timestamped.py) logs
Kafka's format through `ChangeLoggingTimestampedKeyValueStore` / `ChangeLoggingTimestampedWindowStore`:
the record's value is the raw value and its timestamp the value's (a tombstone: the write's
timestamp); the state manager puts the timestamp back in front on restore (`restore_converter`).
"""

from __future__ import annotations

import struct
from typing import Iterable, Optional

from state.errors import StoreClosedError
from state.session import session_changelog_key
from state.timestamped import TIMESTAMP_SIZE as _STAMP, split_timestamped
from state.window import window_changelog_key
from state.store import KeyValueIterator, KeyValueStore, StoreContext, WrappedStateStore, child_context

_stamp_of = struct.Struct(">q").unpack_from
_seqnum_at = struct.Struct(">i").unpack_from  # a window changelog key ends with its sequence number


class _ChangeLoggingMixin:
    _context: Optional[StoreContext]
    # `context.log_change`, resolved once at init (the context handed down by an outer wrapper
    # delegates attributes through __getattr__, too slow to go through on every put).
    _log_change = None
    # `context.change_sender` where the context offers it (the state manager), else None
    _change_sender = None

    def init(self, context: StoreContext) -> None:
        self._context = context
        self._log_change = context.log_change
        self._change_sender = getattr(context, "change_sender", None)
        self.wrapped.init(child_context(context, self, logged=True))

    def _batch_sender(self):
        """`send(key, value, timestamp, headers)` logging a batch of this store's changes: the
        context's sender for the store where it offers one (one lookup a batch), else its
        log_change of each."""
        if self._log_change is None:
            raise StoreClosedError(f"state store {self.name!r} is not initialized (no context to log to)")
        if self._change_sender is not None:
            return self._change_sender(self.name)
        log_change, name = self._log_change, self.name
        return lambda key, value, timestamp, _headers: log_change(name, key, value, timestamp)

    def _log(self, key: bytes, value: Optional[bytes], timestamp: Optional[int]) -> None:
        log_change = self._log_change
        if log_change is None:
            raise StoreClosedError(f"state store {self.name!r} is not initialized (no context to log to)")
        if timestamp is None:
            timestamp = self._timestamp_supplier()
        log_change(self.name, key, value, timestamp)


class ChangeLoggingKeyValueStore(_ChangeLoggingMixin, WrappedStateStore, KeyValueStore):
    @property
    def reads_from(self):
        """The store this layer's reads come from (it only logs writes): a layer above may read
        there directly."""
        return self.wrapped

    def get(self, key):
        return self.wrapped.get(key)

    def write_changes(self, changes: list) -> None:
        """Write a flush's changes of distinct keys, DirtyEntry's `(key, value, timestamp,
        old_value, metadata, headers)` (the first three play a part), as `put` of each would:
        the inner store's writes in one `put_all` (one WriteBatch on RocksDB), then one
        changelog record each, in order. A caching layer writes its flush down through this."""
        send = self._batch_sender()
        # no pairs kept (see ChangeLoggingTimestampedKeyValueStore.write_changes)
        self.wrapped.put_all((key, value) for key, value, _timestamp, _old, _meta, _headers in changes)
        for key, value, timestamp, _old, _meta, _headers in changes:
            send(key, value, timestamp, None)

    def put(self, key: bytes, value: Optional[bytes], timestamp: Optional[int] = None) -> None:
        # The hot path of every write-down: _log inlined.
        self.wrapped.put(key, value, timestamp)
        log_change = self._log_change
        if log_change is None:
            raise StoreClosedError(f"state store {self.name!r} is not initialized (no context to log to)")
        if timestamp is None:
            timestamp = self._timestamp_supplier()
        log_change(self.name, key, value, timestamp)

    def put_if_absent(self, key: bytes, value: Optional[bytes], timestamp: Optional[int] = None):
        previous = self.wrapped.put_if_absent(key, value, timestamp)
        if previous is None and value is not None:
            self._log(key, value, timestamp)
        return previous

    def put_all(self, entries: Iterable[tuple], timestamp: Optional[int] = None) -> None:
        entries = list(entries)
        self.wrapped.put_all(entries, timestamp)
        log_change = self._log_change
        if log_change is None:
            raise StoreClosedError(f"state store {self.name!r} is not initialized (no context to log to)")
        if timestamp is None:
            timestamp = self._timestamp_supplier()
        name = self.name
        for key, value in entries:
            log_change(name, key, value, timestamp)

    def delete(self, key: bytes, timestamp: Optional[int] = None):
        old = self.wrapped.delete(key, timestamp)
        # Kafka logs the tombstone even when nothing was there: cheap, and keeps replicas exact.
        self._log(key, None, timestamp)
        return old

    def range(self, key_from, key_to) -> KeyValueIterator:
        return self.wrapped.range(key_from, key_to)

    def reverse_range(self, key_from, key_to) -> KeyValueIterator:
        return self.wrapped.reverse_range(key_from, key_to)

    def prefix_scan(self, prefix) -> KeyValueIterator:
        return self.wrapped.prefix_scan(prefix)

    def all(self) -> KeyValueIterator:
        return self.wrapped.all()

    def reverse_all(self) -> KeyValueIterator:
        return self.wrapped.reverse_all()

    def approximate_num_entries(self) -> int:
        return self.wrapped.approximate_num_entries()


class _TimestampedChangeLogging:
    """Kafka's format for a timestamped store's changelog: the record's value is the raw value,
    its timestamp the value's timestamp (a delete: the write's timestamp)."""

    #: the state manager restores this store's changelog through `restore_converter`
    timestamped_changelog = True
    name: str

    def _log(self, key: bytes, value: Optional[bytes], timestamp: Optional[int]) -> None:
        if value is not None:
            value, timestamp = split_timestamped(self.name, value)
        _ChangeLoggingMixin._log(self, key, value, timestamp)  # type: ignore[arg-type]


class ChangeLoggingTimestampedKeyValueStore(_TimestampedChangeLogging, ChangeLoggingKeyValueStore):
    """Kafka's ChangeLoggingTimestampedKeyValueBytesStore over a store of timestamped values."""

    def write_changes(self, changes: list) -> None:
        """As ChangeLoggingKeyValueStore.write_changes, each record in Kafka's timestamped format
        (all values split before anything is written, so a malformed one writes nothing)."""
        send = self._batch_sender()
        name = self.name
        for _key, value, _timestamp, _old, _meta, _headers in changes:
            if value is not None and (type(value) is not bytes or len(value) < _STAMP):
                split_timestamped(name, value)  # raises the typed error
        # No list of pairs or of records kept: a big flush's tuples would outlive the young
        # collections and trigger full ones (each pair and record is dropped as it is used).
        self.wrapped.put_all((key, value) for key, value, _timestamp, _old, _meta, _headers in changes)
        for key, value, timestamp, _old, _meta, _headers in changes:
            if value is None:
                send(key, None, timestamp, None)
            else:
                send(key, value[_STAMP:], _stamp_of(value)[0], None)

    def put(self, key: bytes, value: Optional[bytes], timestamp: Optional[int] = None) -> None:
        # the hot path of an uncached table's writes: split_timestamped and _log inlined
        if value is None:
            self.wrapped.put(key, None, timestamp)
            _ChangeLoggingMixin._log(self, key, None, timestamp)
            return
        try:  # first: a malformed value is written nowhere
            raw, record_timestamp = value[_STAMP:], _stamp_of(value)[0]
        except (struct.error, TypeError):
            split_timestamped(self.name, value)  # raises the typed error
            raise
        self.wrapped.put(key, value, timestamp)
        log_change = self._log_change
        if log_change is None:
            raise StoreClosedError(f"state store {self.name!r} is not initialized (no context to log to)")
        log_change(self.name, key, raw, record_timestamp)

    def put_all(self, entries: Iterable[tuple], timestamp: Optional[int] = None) -> None:
        entries = list(entries)
        name = self.name
        records = [(key, None, timestamp) if value is None else (key, *split_timestamped(name, value))
                   for key, value in entries]
        self.wrapped.put_all(entries, timestamp)
        for key, value, record_timestamp in records:
            _ChangeLoggingMixin._log(self, key, value, record_timestamp)


class ChangeLoggingWindowStore(_ChangeLoggingMixin, WrappedStateStore):
    """Logs `window_changelog_key(key, window_start, seqnum)` -> value for every put the store
    takes; a None value among duplicates too, which stores nothing (Kafka logs it)."""

    def __init__(self, wrapped) -> None:
        super().__init__(wrapped)
        self.window_size_ms = wrapped.window_size_ms
        self.retain_duplicates = wrapped.retain_duplicates
        # the store's put that returns the changelog key it stored under (state/window.py);
        # another window store's put returns the sequence number, the key is made here
        self._put_keyed = getattr(wrapped, "put_for_changelog", None) or self._keyed_by_seqnum

    def _keyed_by_seqnum(self, key: bytes, value: Optional[bytes], window_start: int) -> Optional[bytes]:
        seqnum = self.wrapped.put(key, value, window_start)
        return None if seqnum is None else window_changelog_key(key, window_start, seqnum)

    @property
    def reads_from(self):
        """The store this layer's reads come from (it only logs writes)."""
        return self.wrapped

    def write_changes(self, changes: list) -> None:
        """Write `(key, value, window_start, timestamp)` changes, as `put` of each would: the
        inner store's writes first, then one changelog record each, in order. A caching layer
        writes its flush down through this."""
        put_keyed = self._put_keyed
        logged = []
        for key, value, window_start, timestamp in changes:
            changelog_key = put_keyed(key, value, window_start)
            if changelog_key is not None:
                logged.append((changelog_key, value, timestamp))
        for changelog_key, value, timestamp in logged:
            self._log(changelog_key, value, timestamp)

    def put(self, key: bytes, value: Optional[bytes], window_start_timestamp: int,
            timestamp: Optional[int] = None) -> Optional[int]:
        # the hot write (a join's every record): the inner store makes the changelog key once
        changelog_key = self._put_keyed(key, value, window_start_timestamp)
        if changelog_key is None:
            return None
        self._log(changelog_key, value, timestamp)  # the timestamped class's _log: Kafka's format
        if value is None and self.retain_duplicates:
            return None  # logged, nothing stored (the store's put says the same)
        return _seqnum_at(changelog_key, len(changelog_key) - 4)[0]

    def fetch(self, key: bytes, time_from: int, time_to: Optional[int] = None):
        # the hot read (a join's every record) without __getattr__'s lookup
        return self.wrapped.fetch(key, time_from, time_to)

    def __getattr__(self, name):
        # Reads (fetch_range, fetch_all, all and backward variants) go straight through.
        if name.startswith("_") or name == "wrapped":
            raise AttributeError(name)
        return getattr(self.wrapped, name)


class ChangeLoggingTimestampedWindowStore(_TimestampedChangeLogging, ChangeLoggingWindowStore):
    """Kafka's ChangeLoggingTimestampedWindowBytesStore over a window store of timestamped values."""


class ChangeLoggingSessionStore(_ChangeLoggingMixin, WrappedStateStore):
    """Logs `session_changelog_key(key, start, end)` -> value (None on remove)."""

    @property
    def reads_from(self):
        """The store this layer's reads come from (it only logs writes)."""
        return self.wrapped

    def write_changes(self, changes: list) -> None:
        """Write `(key, session_start, session_end, value, timestamp)` changes, as `put` of each
        would: the inner store's writes first, then one changelog record each, in order."""
        put = self.wrapped.put
        for key, start, end, value, timestamp in changes:
            put(key, start, end, value, timestamp)
        for key, start, end, value, timestamp in changes:
            self._log(session_changelog_key(key, start, end), value, timestamp)

    def put(self, key: bytes, session_start: int, session_end: int, value: Optional[bytes],
            timestamp: Optional[int] = None) -> None:
        self.wrapped.put(key, session_start, session_end, value, timestamp)
        self._log(session_changelog_key(key, session_start, session_end), value, timestamp)

    def remove(self, key: bytes, session_start: int, session_end: int, timestamp: Optional[int] = None) -> None:
        self.put(key, session_start, session_end, None, timestamp)

    def __getattr__(self, name):
        if name.startswith("_") or name == "wrapped":
            raise AttributeError(name)
        return getattr(self.wrapped, name)
