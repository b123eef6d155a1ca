"""The caching session store: dedups updates of a session between commits."""

from __future__ import annotations

from typing import Optional

from state.cache.base import CachingStore
from state.cache.merge import merge_sorted_by
from state.cache.range_reads import SESSION_TIME_AT, cache_interval, next_segment_of, session_key_range, session_ranges, visit
from state.cache.thread_cache import SEGMENT_ID_BYTES
from state.errors import InvalidStoreArgumentError
from state.session import decode_session_changelog_key, session_changelog_key
from state.store import KeyValueIterator, check_key, check_value
from state.window import MAX_TIMESTAMP, Window, Windowed, check_timestamp


class CachingSessionStore(CachingStore):
    """Caching for session stores: dedups updates of a session between commits.

    Cache keys are the session changelog keys. The flush listener receives
    `(Windowed(key, Window(start, end)), new, old, timestamp)`. Reads give what is cached
    whatever the retention of the store below, which filters only its own sessions (Kafka's
    CachingSessionStore: a session still cached is still found).
    """

    cache_key_prefix = SEGMENT_ID_BYTES  # counted in each entry's size (see state.cache.thread_cache)
    # the largest session end put, -1 before any (Kafka's maxObservedTimestamp: it bounds a
    # backward read's first segment, see state.cache.range_reads)
    _max_observed = -1

    def _write_down(self, entries: list) -> None:
        listener = self._flush_listener
        changes = []
        for entry in entries:
            key, start, end = decode_session_changelog_key(entry[0])
            changes.append((key, start, end, entry[1], entry[2]))
        if listener is None:
            self._write_changes(changes, self.wrapped.put)
            return
        # the old values first (a flush's sessions are distinct), then the writes, then the
        # forwards (as the KV store)
        fetch_session = self._reader.fetch_session
        kept = []  # (key, start, end, value, timestamp, metadata, headers, old) of each change kept
        for change, entry in zip(changes, entries):
            key, start, end, value, _timestamp = change
            old = fetch_session(key, start, end)
            if value is not None or old is not None:
                kept.append(change + entry[4:6] + (old,))
        self._write_changes([change[:5] for change in kept], self.wrapped.put)

        def forward(change: tuple) -> None:
            key, start, end, value, timestamp = change[:5]
            listener(Windowed(key, Window(start, end)), value, change[7], timestamp)
        self.forward_in_contexts(kept, forward, at=5)

    def put(self, key: bytes, session_start: int, session_end: int, value: Optional[bytes],
            timestamp: Optional[int] = None) -> None:
        cache = self._check()
        check_key(self.name, key)
        check_value(self.name, value)
        check_timestamp(self.name, "session_start", session_start)
        check_timestamp(self.name, "session_end", session_end)
        if session_end < session_start:
            raise InvalidStoreArgumentError(
                f"state store {self.name!r}: session_end ({session_end}) < session_start ({session_start})"
            )
        if timestamp is None:
            timestamp = self._timestamp_supplier()
        if session_end > self._max_observed:
            self._max_observed = session_end
        cache.put(self._namespace, session_changelog_key(key, session_start, session_end), value,
                  dirty=True, timestamp=timestamp)

    def remove(self, key: bytes, session_start: int, session_end: int, timestamp: Optional[int] = None) -> None:
        self.put(key, session_start, session_end, None, timestamp)

    def fetch_session(self, key: bytes, session_start: int, session_end: int) -> Optional[bytes]:
        cache = self._check()
        check_key(self.name, key)
        entry = cache.get(self._namespace, session_changelog_key(key, session_start, session_end))
        if entry is not None:
            return entry.value
        return self.wrapped.fetch_session(key, session_start, session_end)

    def _sessions(self, key_from, key_to, exact, earliest_end, latest_start, reverse, store_iter) -> KeyValueIterator:
        persistent = self.wrapped.persistent
        interval = self.wrapped.segment_interval_ms
        segmented = (SESSION_TIME_AT, cache_interval(self.wrapped))
        if exact:
            ranges = session_ranges(key_from, earliest_end, latest_start, segmented[1], persistent, not reverse,
                                    self._max_observed, next_segment_of(self._cache, self._namespace, segmented))
        else:
            ranges = (session_key_range(key_from, key_to, latest_start, segmented[1]),)
        visited = visit(self._cache, self._namespace, ranges, reverse, segmented)
        if persistent or exact:  # by segment, then key, end and start (one key's: by end, then start)
            def position(key: bytes, start: int, end: int) -> tuple:
                return end // interval, session_changelog_key(key, start, end)
        else:  # Kafka's in-memory store: by end, then key, then start
            def position(key: bytes, start: int, end: int) -> tuple:
                return end, key, start

        def cached():  # (merge position, item or None for a cached delete) of the sessions asked for
            for ck, v in visited:
                key, start, end = decode_session_changelog_key(ck)
                if end < earliest_end or start > latest_start:
                    continue
                if exact and key != key_from:
                    continue
                if not exact and ((key_from is not None and key < key_from) or (key_to is not None and key > key_to)):
                    continue
                item = (Windowed(key, Window(start, end)), v) if v is not None else None
                yield position(key, start, end), item

        # read in Kafka's cache order; merged in the store's (the same for one key, or by
        # the store's own segments; else sorted once read)
        items = cached() if exact or persistent else sorted(cached(), key=lambda c: c[0], reverse=reverse)

        def store_sort_key(item):
            w = item[0]
            return position(w.key, w.window.start, w.window.end)

        return KeyValueIterator(merge_sorted_by(items, store_iter, store_sort_key, reverse), self.name)

    def find_sessions(self, key: bytes, earliest_session_end_time: int, latest_session_start_time: int) -> KeyValueIterator:
        self._check()
        it = self.wrapped.find_sessions(key, earliest_session_end_time, latest_session_start_time)
        return self._sessions(key, key, True, earliest_session_end_time, latest_session_start_time, False, it)

    def backward_find_sessions(self, key: bytes, earliest_session_end_time: int,
                               latest_session_start_time: int) -> KeyValueIterator:
        self._check()
        it = self.wrapped.backward_find_sessions(key, earliest_session_end_time, latest_session_start_time)
        return self._sessions(key, key, True, earliest_session_end_time, latest_session_start_time, True, it)

    def find_sessions_range(self, key_from, key_to, earliest_session_end_time: int,
                            latest_session_start_time: int) -> KeyValueIterator:
        self._check()
        it = self.wrapped.find_sessions_range(key_from, key_to, earliest_session_end_time, latest_session_start_time)
        if key_from is not None and key_to is not None and key_from > key_to:
            return it
        return self._sessions(key_from, key_to, False, earliest_session_end_time, latest_session_start_time, False, it)

    def backward_find_sessions_range(self, key_from, key_to, earliest_session_end_time: int,
                                     latest_session_start_time: int) -> KeyValueIterator:
        self._check()
        it = self.wrapped.backward_find_sessions_range(key_from, key_to, earliest_session_end_time,
                                                       latest_session_start_time)
        if key_from is not None and key_to is not None and key_from > key_to:
            return it
        return self._sessions(key_from, key_to, False, earliest_session_end_time, latest_session_start_time, True, it)

    def fetch(self, key: bytes) -> KeyValueIterator:
        return self.find_sessions(key, 0, MAX_TIMESTAMP)

    def backward_fetch(self, key: bytes) -> KeyValueIterator:
        return self.backward_find_sessions(key, 0, MAX_TIMESTAMP)

    def fetch_range(self, key_from, key_to) -> KeyValueIterator:
        return self.find_sessions_range(key_from, key_to, 0, MAX_TIMESTAMP)

    def backward_fetch_range(self, key_from, key_to) -> KeyValueIterator:
        return self.backward_find_sessions_range(key_from, key_to, 0, MAX_TIMESTAMP)

    def all(self) -> KeyValueIterator:
        return self.find_sessions_range(None, None, 0, MAX_TIMESTAMP)
