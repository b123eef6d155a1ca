"""Incremental fetch sessions on the leader (Kafka's FetchSession / FetchSessionCache, KIP-227).

A follower that fetches 1,000 partitions should not make the leader walk 1,000 partitions on
every fetch. With a session the leader remembers what the follower fetches; a request names
only the partitions added or changed since the last one (``forgotten`` the removed ones) and
the answer holds only the partitions with records, an error, or a high watermark, last stable
offset or log start offset the follower has not been told yet.

What this leader reads for an incremental fetch is the session's *changed* partitions:
`FetchSessionCache.mark_changed` is called for every append, high-watermark move and role
change of a partition (from `ReplicaManager.complete_delayed`), and a parked session fetch
watches one purgatory key, the session's, instead of one key per partition. Once per
``refresh_s`` a session fetch reads every partition of the session, so the leader's view of a
caught-up follower (its last caught-up time, for the ISR) stays fresh without traffic.

Epochs as in Kafka: a request with session id 0 and epoch 0 opens a session (a full fetch,
every partition answered); id X and epoch n >= 1 is incremental and must carry the next epoch
(``INVALID_FETCH_SESSION_EPOCH`` otherwise); an unknown or evicted id is
``FETCH_SESSION_ID_NOT_FOUND``; both make the follower start over with a full fetch. Epoch -1
closes the session, and so does an incremental request that forgets its last partition (the
answer then carries no session id). The cache holds at most ``max_slots`` sessions and evicts
the least recently used.
"""

from __future__ import annotations

import collections
import itertools
import threading
import time
from typing import Iterable

from replication.protocol import FetchPartition, FetchPartitionResponse, TopicPartition

__all__ = ["FetchSession", "FetchSessionCache"]


class FetchSession:
    """One follower's session: what it fetches, what it was told, what changed since."""

    __slots__ = ("id", "replica_id", "next_epoch", "partitions", "sent", "changed", "woken", "last_used",
                 "last_refresh", "key")

    def __init__(self, session_id: int, replica_id: int, partitions: dict[TopicPartition, FetchPartition],
                 now: float) -> None:
        self.id = session_id
        self.replica_id = replica_id
        self.next_epoch = 1
        self.partitions = dict(partitions)  # tp -> the follower's latest FetchPartition
        # tp -> (high watermark, last stable offset, log start offset) last answered
        self.sent: dict[TopicPartition, tuple[int, int, int]] = {}
        self.changed: set[TopicPartition] = set(partitions)
        self.woken = False  # a change that completes a parked fetch (records, a role change)
        self.last_used = now
        self.last_refresh = now
        self.key = ("fetch-session", session_id)  # the purgatory key a parked fetch watches

    def answer_needed(self, tp: TopicPartition, resp: FetchPartitionResponse) -> bool:
        """Whether an incremental answer must include ``tp`` (and remember what it says)."""
        marks = (resp.high_watermark, resp.last_stable_offset, resp.log_start_offset)
        if (resp.error or len(resp.records) or resp.diverging_epoch is not None or resp.switch_to_push
                or self.sent.get(tp) != marks):
            self.sent[tp] = marks
            return True
        return False

    def __repr__(self) -> str:
        return f"FetchSession(id={self.id}, replica={self.replica_id}, partitions={len(self.partitions)})"


class FetchSessionCache:
    """The leader's sessions, with an index from partition to the sessions fetching it."""

    def __init__(self, max_slots: int = 1000, refresh_s: float = 2.5) -> None:
        self.max_slots = max_slots
        self.refresh_s = refresh_s
        self._lock = threading.Lock()
        self._sessions: collections.OrderedDict[int, FetchSession] = collections.OrderedDict()
        self._by_tp: dict[TopicPartition, set[FetchSession]] = {}
        self._ids = itertools.count(1)

    def __len__(self) -> int:
        return len(self._sessions)

    def create(self, replica_id: int, partitions: dict[TopicPartition, FetchPartition],
               replaces: int = 0) -> FetchSession:
        """A new session (closing ``replaces``, the follower's previous one, if any)."""
        now = time.monotonic()
        with self._lock:
            if replaces:
                self._remove_locked(replaces)
            while len(self._sessions) >= self.max_slots:
                self._remove_locked(next(iter(self._sessions)))
            session = FetchSession(next(self._ids), replica_id, partitions, now)
            self._sessions[session.id] = session
            for tp in partitions:
                self._by_tp.setdefault(tp, set()).add(session)
            return session

    def get(self, session_id: int) -> FetchSession | None:
        with self._lock:
            session = self._sessions.get(session_id)
            if session is not None:
                self._sessions.move_to_end(session_id)
                session.last_used = time.monotonic()
            return session

    def remove(self, session_id: int) -> None:
        with self._lock:
            self._remove_locked(session_id)

    def _remove_locked(self, session_id: int) -> None:
        session = self._sessions.pop(session_id, None)
        if session is None:
            return
        for tp in session.partitions:
            sessions = self._by_tp.get(tp)
            if sessions is not None:
                sessions.discard(session)
                if not sessions:
                    del self._by_tp[tp]

    def update(self, session: FetchSession, epoch: int, partitions: dict[TopicPartition, FetchPartition],
               forgotten: Iterable[TopicPartition]) -> bool:
        """Apply an incremental request; False (nothing applied) when ``epoch`` is not the next."""
        with self._lock:
            if epoch != session.next_epoch:
                return False
            session.next_epoch = epoch + 1 if epoch < 0x7FFFFFFF else 1
            for tp in forgotten:
                if session.partitions.pop(tp, None) is not None:
                    session.sent.pop(tp, None)
                    session.changed.discard(tp)
                    sessions = self._by_tp.get(tp)
                    if sessions is not None:
                        sessions.discard(session)
                        if not sessions:
                            del self._by_tp[tp]
            if partitions:
                session.woken = True  # new positions: records may wait there
            for tp, fp in partitions.items():
                if tp not in session.partitions:
                    self._by_tp.setdefault(tp, set()).add(session)
                    session.sent.pop(tp, None)  # a re-added partition is answered in full
                session.partitions[tp] = fp
                session.changed.add(tp)
            return True

    def take_changed(self, session: FetchSession, now: float) -> list[TopicPartition]:
        """The partitions to read for this answer: the changed ones, or all once per refresh."""
        with self._lock:
            session.woken = False
            if now - session.last_refresh >= self.refresh_s:
                session.last_refresh = now
                session.changed = set()
                return list(session.partitions)
            changed, session.changed = session.changed, set()
            return [tp for tp in changed if tp in session.partitions]

    def has_changes(self, session: FetchSession) -> bool:
        """Whether a parked fetch of ``session`` should be answered now."""
        return session.woken or session.id not in self._sessions

    def mark_changed(self, tp: TopicPartition, wake: bool = True) -> list[tuple]:
        """Note a change of ``tp`` in every session fetching it (``wake``: one that answers a
        parked fetch); returns their purgatory keys."""
        sessions = self._by_tp.get(tp)
        if not sessions:
            return []
        with self._lock:
            keys = []
            for session in self._by_tp.get(tp, ()):
                session.changed.add(tp)
                if wake:
                    session.woken = True
                keys.append(session.key)
            return keys

    def sessions(self) -> list[FetchSession]:
        """Every session in the cache, least recently used first (a snapshot)."""
        with self._lock:
            return list(self._sessions.values())

    def sessions_of(self, tp: TopicPartition) -> list[FetchSession]:
        with self._lock:
            return list(self._by_tp.get(tp, ()))

    def clear(self) -> None:
        with self._lock:
            self._sessions.clear()
            self._by_tp.clear()
