"""Session stores (Kafka's RocksDBSessionStore / InMemorySessionStore), segmented by session end.

Stored key = `segment id (8 bytes BE, from the session end) + key + end (8 bytes BE) + start (8 bytes BE)`
on the same single-RocksDB segmented layout as window stores (see state/window.py for why).
Changelog key = Kafka's SessionKeySchema `key + end + start`; restore decodes the end time.
Sessions whose end is at or before observed stream time - retention are expired.
"""

from __future__ import annotations

import logging
import struct
from abc import abstractmethod
from typing import Iterator, Optional

from state.errors import InvalidStoreArgumentError, StateError
from state.rocksdb_kv import key_after
from state.store import KeyValueIterator, StateStore, check_key, check_value
from state.window import (
    MAX_TIMESTAMP,
    SEGMENT_PREFIX_SIZE,
    TIMESTAMP_SIZE,
    SegmentedBytesStore,
    Window,
    Windowed,
    check_timestamp,
    in_segment_order,
)

log = logging.getLogger(__name__)

_I64 = struct.Struct(">q")
_SESSION_SUFFIX = 2 * TIMESTAMP_SIZE


def session_changelog_key(key: bytes, session_start: int, session_end: int) -> bytes:
    """Kafka's SessionKeySchema.toBinary: key + 8-byte BE end + 8-byte BE start."""
    return key + _I64.pack(session_end) + _I64.pack(session_start)


def decode_session_changelog_key(data: bytes) -> tuple[bytes, int, int]:
    """(key, session_start, session_end) of a session changelog key."""
    if len(data) < _SESSION_SUFFIX:
        raise StateError(f"session changelog key too short ({len(data)} bytes): {data!r}")
    n = len(data) - _SESSION_SUFFIX
    return data[:n], _I64.unpack_from(data, n + TIMESTAMP_SIZE)[0], _I64.unpack_from(data, n)[0]


class SessionStore(StateStore):
    """Session store interface: sessions (key, start, end) -> aggregate.

    Iterators yield (Windowed(key, Window(start, end)), value) and must be exhausted or closed.
    """

    @abstractmethod
    def put(self, key, session_start: int, session_end: int, value, timestamp: Optional[int] = None) -> None:
        ...

    @abstractmethod
    def remove(self, key, session_start: int, session_end: int, timestamp: Optional[int] = None) -> None:
        ...

    @abstractmethod
    def fetch_session(self, key, session_start: int, session_end: int):
        ...

    @abstractmethod
    def find_sessions(self, key, earliest_session_end_time: int, latest_session_start_time: int) -> KeyValueIterator:
        """Sessions of `key` with end >= earliest_session_end_time and start <= latest_session_start_time
        (the sessions a new record may merge with)."""

    @abstractmethod
    def backward_find_sessions(self, key, earliest_session_end_time: int,
                               latest_session_start_time: int) -> KeyValueIterator:
        ...

    @abstractmethod
    def find_sessions_range(self, key_from, key_to, earliest_session_end_time: int,
                            latest_session_start_time: int) -> KeyValueIterator:
        ...

    def backward_find_sessions_range(self, key_from, key_to, earliest_session_end_time: int,
                                     latest_session_start_time: int) -> KeyValueIterator:
        """find_sessions_range backward (a store of its own may leave it out: Kafka's default
        throws UnsupportedOperationException)."""
        raise NotImplementedError(f"state store {self.name!r} does not read key ranges backward")

    def fetch(self, key) -> KeyValueIterator:
        """All live sessions of `key`."""
        return self.find_sessions(key, 0, MAX_TIMESTAMP)

    def backward_fetch(self, key) -> KeyValueIterator:
        return self.backward_find_sessions(key, 0, MAX_TIMESTAMP)

    def fetch_range(self, key_from, key_to) -> KeyValueIterator:
        return self.find_sessions_range(key_from, key_to, 0, MAX_TIMESTAMP)

    def backward_fetch_range(self, key_from, key_to) -> KeyValueIterator:
        return self.backward_find_sessions_range(key_from, key_to, 0, MAX_TIMESTAMP)

    def all(self) -> KeyValueIterator:
        return self.find_sessions_range(None, None, 0, MAX_TIMESTAMP)


class SegmentedSessionStore(SegmentedBytesStore, SessionStore):
    layout = "session-v1"
    _time_suffix = _SESSION_SUFFIX

    def __init__(self, name: str, *, retention_ms: int, segment_interval_ms: int, persistent: bool) -> None:
        super().__init__(name, retention_ms=retention_ms, segment_interval_ms=segment_interval_ms,
                         persistent=persistent)

    def _check_session(self, session_start, session_end) -> None:
        check_timestamp(self.name, "session_start", session_start)
        check_timestamp(self.name, "session_end", session_end)
        if session_end < session_start:
            raise InvalidStoreArgumentError(
                f"state store {self.name!r}: session_end ({session_end}) < session_start ({session_start})"
            )

    def put(self, key: bytes, session_start: int, session_end: int, value: Optional[bytes],
            timestamp: Optional[int] = None) -> None:
        """Store the session's aggregate; a None value removes the session."""
        self._check()
        check_key(self.name, key)
        check_value(self.name, value)
        self._check_session(session_start, session_end)
        self._write(session_end, session_changelog_key(key, session_start, session_end), value)

    def remove(self, key: bytes, session_start: int, session_end: int, timestamp: Optional[int] = None) -> None:
        self.put(key, session_start, session_end, None, timestamp)

    def fetch_session(self, key: bytes, session_start: int, session_end: int) -> Optional[bytes]:
        self._check()
        check_key(self.name, key)
        self._check_session(session_start, session_end)
        if session_end < self.actual_from(0):
            return None
        return self._get(session_end, session_changelog_key(key, session_start, session_end))

    def _find(self, key_from, key_to, exact: bool, earliest_end: int, latest_start: int,
              reverse: bool) -> KeyValueIterator:
        self._check()
        if exact:
            check_key(self.name, key_from)
        else:
            if key_from is not None:
                check_key(self.name, key_from, "key_from")
            if key_to is not None:
                check_key(self.name, key_to, "key_to")
        check_timestamp(self.name, "earliest_session_end_time", earliest_end)
        check_timestamp(self.name, "latest_session_start_time", latest_start)
        if key_from is not None and key_to is not None and key_from > key_to:
            log.warning("state store %s: session range with key_from > key_to returns no entries", self.name)
            return KeyValueIterator(iter(()), self.name)
        gen = self._find_gen(key_from, key_to, exact, self.actual_from(earliest_end), latest_start, reverse)
        return self._engine.track(gen)

    def _find_gen(self, key_from, key_to, exact, earliest_end, latest_start, reverse) -> Iterator:
        unpack = _I64.unpack_from
        raw_range = self._engine.raw_range
        total = SEGMENT_PREFIX_SIZE + len(key_from) + _SESSION_SUFFIX if exact else -1
        for seg in self._segments(earliest_end, MAX_TIMESTAMP, reverse):
            prefix = self._segment_prefix(seg)
            if exact:
                lower = prefix + key_from + _I64.pack(earliest_end) + _I64.pack(0)
                upper = key_after(prefix + key_from + b"\xff" * _SESSION_SUFFIX)
            else:
                lower = prefix + key_from if key_from is not None else prefix
                upper = (key_after(prefix + key_to + b"\xff" * _SESSION_SUFFIX) if key_to is not None
                         else self._segment_prefix(seg + 1))
            for k, v in raw_range(lower, upper, reverse):
                if exact and len(k) != total:
                    continue
                n = len(k) - _SESSION_SUFFIX
                end = unpack(k, n)[0]
                start = unpack(k, n + TIMESTAMP_SIZE)[0]
                if end < earliest_end or start > latest_start:
                    continue
                user_key = k[SEGMENT_PREFIX_SIZE:n]
                if not exact and ((key_from is not None and user_key < key_from)
                                  or (key_to is not None and user_key > key_to)):
                    continue
                yield Windowed(user_key, Window(start, end)), v

    def find_sessions(self, key: bytes, earliest_session_end_time: int,
                      latest_session_start_time: int) -> KeyValueIterator:
        return self._find(key, key, True, earliest_session_end_time, latest_session_start_time, False)

    def backward_find_sessions(self, key: bytes, earliest_session_end_time: int,
                               latest_session_start_time: int) -> KeyValueIterator:
        return self._find(key, key, True, earliest_session_end_time, latest_session_start_time, True)

    def find_sessions_range(self, key_from, key_to, earliest_session_end_time: int,
                            latest_session_start_time: int) -> KeyValueIterator:
        return self._find(key_from, key_to, False, earliest_session_end_time, latest_session_start_time, False)

    def backward_find_sessions_range(self, key_from, key_to, earliest_session_end_time: int,
                                     latest_session_start_time: int) -> KeyValueIterator:
        return self._find(key_from, key_to, False, earliest_session_end_time, latest_session_start_time, True)

    def fetch_ended_sessions(self, earliest_session_end_time: int, latest_session_end_time: int) -> KeyValueIterator:
        """The sessions of every key that ended within [earliest, latest], by end, then start,
        then key (Kafka's time-ordered session store's fetchSessions, what final results on
        window close scan: its keys are end + start + key): every session of the live segments,
        none held back by the retention."""
        self._check()
        check_timestamp(self.name, "earliest_session_end_time", earliest_session_end_time)
        check_timestamp(self.name, "latest_session_end_time", latest_session_end_time)
        return self._engine.track(self._ended_gen(earliest_session_end_time, latest_session_end_time))

    # the order of fetch_ended_sessions: (end, start, key), the time-ordered store's key
    _ended_order = staticmethod(lambda session: session[:3])

    def _ended_gen(self, earliest_end: int, latest_end: int) -> Iterator:
        unpack = _I64.unpack_from
        raw_range = self._engine.raw_range
        for seg in self._segments(earliest_end, latest_end, False):
            ended = []
            for k, v in raw_range(self._segment_prefix(seg), self._segment_prefix(seg + 1)):
                n = len(k) - _SESSION_SUFFIX
                end = unpack(k, n)[0]
                if earliest_end <= end <= latest_end:
                    ended.append((end, unpack(k, n + TIMESTAMP_SIZE)[0], k[SEGMENT_PREFIX_SIZE:n], v))
            ended.sort(key=self._ended_order)
            for end, start, user_key, v in ended:
                yield Windowed(user_key, Window(start, end)), v


class RocksDBSessionStore(SegmentedSessionStore):
    def __init__(self, name: str, *, retention_ms: int, segment_interval_ms: int) -> None:
        super().__init__(name, retention_ms=retention_ms, segment_interval_ms=segment_interval_ms, persistent=True)


class InMemorySessionStore(SegmentedSessionStore):
    def __init__(self, name: str, *, retention_ms: int, segment_interval_ms: int) -> None:
        super().__init__(name, retention_ms=retention_ms, segment_interval_ms=segment_interval_ms, persistent=False)

    # Kafka's InMemorySessionStore keeps its sessions by end, then key, then start, and skips a
    # put of a session ending at or before observed stream time - retention
    expires_by_time = True
    _ended_order = staticmethod(lambda session: (session[0], session[2], session[1]))

    def _find_gen(self, key_from, key_to, exact, earliest_end, latest_start, reverse) -> Iterator:
        """A key's sessions by end, then start, as the segmented layout has them; a key range's
        in Kafka's in-memory order, by end, then key, then start (each segment's, those of its
        ends, sorted as they are read)."""
        found = super()._find_gen(key_from, key_to, exact, earliest_end, latest_start, reverse)
        if exact:
            return found
        interval = self.segment_interval_ms
        return in_segment_order(found, lambda item: item[0].window.end // interval,
                                lambda item: (item[0].window.end, item[0].key, item[0].window.start), reverse)

    def fetch_ended_sessions(self, earliest_session_end_time: int, latest_session_end_time: int) -> KeyValueIterator:
        """Kafka's InMemorySessionStore.findSessions(earliest end, latest end), the store the DSL
        uses in memory whatever the emit strategy: only the sessions within the retention (a
        session closing as it expires is not emitted there), by end, then key, then start."""
        check_timestamp(self.name, "earliest_session_end_time", earliest_session_end_time)
        return super().fetch_ended_sessions(max(earliest_session_end_time, self.actual_from(0)),
                                            latest_session_end_time)
