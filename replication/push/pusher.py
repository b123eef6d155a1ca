"""Pusher threads: drain per-(partition, destination) buffers into AppendRecords requests.

A `Pusher` serves a set of destination brokers (the manager maps each destination, and with
``push.threads.per.remote.broker`` > 1 each partition of it, to one pusher). For each
destination it batches every partition with something to send into one
`AppendRecordsBatchRequest`, keeps up to ``push.max.in.flight.requests.per.destination`` of
them in flight (the transport delivers a link's requests in order), sends empty heartbeats to
idle sessions so the follower knows its session is alive, and expires requests that got no
answer. Responses go back to the `PushManager`.

All buffer state is guarded by the manager's lock, which each pusher's condition shares.
"""

from __future__ import annotations

import collections
import logging
import threading
import time
from typing import TYPE_CHECKING

from replication.errors import TransportError
from replication.protocol import AppendRecordsBatchRequest, AppendRecordsRequest, TopicPartition
from replication.records import EMPTY, MemoryRecords
from replication.push.session import PushSession

if TYPE_CHECKING:  # pragma: no cover
    from replication.push.manager import PushManager

log = logging.getLogger(__name__)


class PartitionBuffer:
    """Records and offsets waiting to be pushed to one follower of one partition."""

    __slots__ = ("tp", "session", "destination", "send_offset", "enqueued_end", "items", "bytes",
                 "high_watermark", "high_watermark_sent", "log_start_offset", "log_start_offset_sent",
                 "established", "in_flight", "retry_at", "started_at", "last_sent_at", "dirty")

    def __init__(self, tp: TopicPartition, session: PushSession, start_offset: int, now: float) -> None:
        self.tp = tp
        self.session = session
        self.destination = session.replica_id
        self.send_offset = start_offset  # the follower's LEO once everything sent is applied
        self.enqueued_end = start_offset  # the offset after the last buffered record
        self.items: collections.deque[tuple[int, int, bytes]] = collections.deque()
        self.bytes = 0
        self.high_watermark = -1
        self.high_watermark_sent = -1
        self.log_start_offset = -1
        self.log_start_offset_sent = -1
        self.established = False  # the follower acknowledged the session's first request
        self.in_flight = 0
        self.retry_at = 0.0
        self.started_at = now
        self.last_sent_at = now
        self.dirty = True  # the first request goes out at once

    def __repr__(self) -> str:
        return (f"PartitionBuffer({self.tp}->{self.destination}, session={self.session.session_id}, "
                f"send={self.send_offset}, end={self.enqueued_end}, bytes={self.bytes})")


class _Sent:
    """One partition entry of a request in flight."""

    __slots__ = ("buffer", "session", "base", "end", "leader_end", "chunks", "end_session", "tp")

    def __init__(self, tp, buffer, session, base, end, leader_end, chunks, end_session) -> None:
        self.tp = tp
        self.buffer = buffer
        self.session = session
        self.base = base
        self.end = end
        self.leader_end = leader_end
        self.chunks = chunks
        self.end_session = end_session


class _Flight:
    __slots__ = ("destination", "entries", "deadline", "done")

    def __init__(self, destination: int, entries: list[_Sent], deadline: float) -> None:
        self.destination = destination
        self.entries = entries
        self.deadline = deadline
        self.done = False


class EndSessionSignal:
    """A pending end-of-session notice for a follower (sent in the next request)."""

    __slots__ = ("tp", "session", "base_offset", "high_watermark", "log_start_offset")

    def __init__(self, tp: TopicPartition, session: PushSession, base_offset: int,
                 high_watermark: int, log_start_offset: int) -> None:
        self.tp = tp
        self.session = session
        self.base_offset = base_offset
        self.high_watermark = high_watermark
        self.log_start_offset = log_start_offset


class Pusher(threading.Thread):
    """One pusher thread; ``id()`` is in [0, push.max.threads)."""

    def __init__(self, pusher_id: int, manager: "PushManager") -> None:
        super().__init__(name=f"Pusher-{pusher_id}@broker-{manager.broker_id}", daemon=True)
        self._id = pusher_id
        self.manager = manager
        self.cond = threading.Condition(manager.lock)
        self.running = False
        # destination -> {tp: buffer}; destination -> buffers with something to send
        self.buffers: dict[int, dict[TopicPartition, PartitionBuffer]] = {}
        self.dirty: dict[int, dict[TopicPartition, PartitionBuffer]] = {}
        self.end_signals: dict[int, list[EndSessionSignal]] = {}
        self.in_flight: dict[int, int] = {}
        self.flights: set[_Flight] = set()
        self.last_request_at: dict[int, float] = {}
        self.requests_sent = 0
        self.max_in_flight_seen = 0  # the deepest pipeline to one destination so far

    def id(self) -> int:  # noqa: A003 - the seed's name
        return self._id

    def __repr__(self) -> str:
        return f"Pusher({self._id}, destinations={sorted(self.buffers)})"

    # -- called with the lock held -------------------------------------------------------------

    def add_buffer(self, buf: PartitionBuffer) -> None:
        self.buffers.setdefault(buf.destination, {})[buf.tp] = buf
        self.mark_dirty(buf)

    def remove_buffer(self, buf: PartitionBuffer) -> None:
        d = buf.destination
        bufs = self.buffers.get(d)
        if bufs is not None and bufs.get(buf.tp) is buf:
            del bufs[buf.tp]
        dirty = self.dirty.get(d)
        if dirty is not None and dirty.get(buf.tp) is buf:
            del dirty[buf.tp]

    def mark_dirty(self, buf: PartitionBuffer) -> None:
        if not buf.dirty:
            buf.dirty = True
        self.dirty.setdefault(buf.destination, {})[buf.tp] = buf
        self.cond.notify()

    def add_end_signal(self, signal: EndSessionSignal) -> None:
        self.end_signals.setdefault(signal.session.replica_id, []).append(signal)
        self.cond.notify()

    # -- the thread ----------------------------------------------------------------------------

    def run(self) -> None:
        m = self.manager
        try:
            while True:
                with self.cond:
                    while True:
                        if not self.running:
                            return
                        now = time.monotonic()
                        expired = [f for f in self.flights if f.deadline <= now]
                        for f in expired:
                            self._finish_flight(f)
                        requests = self._collect(now)
                        if requests or expired or m.deferred_failures:
                            break
                        self.cond.wait(self._wait_s(now))
                for f in expired:
                    m.on_flight_failed(f, TransportError(
                        f"AppendRecords to broker {f.destination} got no answer in time"))
                m.run_deferred_failures()
                for flight, request in requests:
                    self._send(flight, request)
        except BaseException:
            if self.running:
                log.exception("%s stopped by an unexpected error", self.name)
            raise

    def _wait_s(self, now: float) -> float:
        m = self.manager
        wait = m.config.heartbeat_interval_s
        for f in self.flights:
            wait = min(wait, f.deadline - now)
        for d, bufs in self.buffers.items():
            if bufs:
                wait = min(wait, self.last_request_at.get(d, now) + m.config.heartbeat_interval_s - now)
        for bufs in self.dirty.values():
            for buf in bufs.values():
                if buf.retry_at > now:
                    wait = min(wait, buf.retry_at - now)
        return max(wait, 0.0005)

    def _send(self, flight: _Flight, request: AppendRecordsBatchRequest) -> None:
        m = self.manager

        def callback(response, error, flight=flight) -> None:
            with self.cond:
                if flight.done:
                    return  # expired already
                self._finish_flight(flight)
            if error is not None:
                m.on_flight_failed(flight, error)
            else:
                m.on_flight_response(flight, response)

        try:
            m.transport.send_async(m.broker_id, flight.destination, request, callback)
        except Exception as e:  # the transport itself failed: the flight fails like a lost request
            callback(None, TransportError(f"sending AppendRecords to broker {flight.destination}: {e!r}"))

    def _finish_flight(self, flight: _Flight) -> None:
        flight.done = True
        self.flights.discard(flight)
        d = flight.destination
        self.in_flight[d] = self.in_flight.get(d, 1) - 1
        for e in flight.entries:
            if e.buffer is not None:
                e.buffer.in_flight -= 1
                if e.buffer.items or e.buffer.high_watermark > e.buffer.high_watermark_sent:
                    self.mark_dirty(e.buffer)
        self.cond.notify()

    def _collect(self, now: float) -> list[tuple[_Flight, AppendRecordsBatchRequest]]:
        """Build at most one request per destination that has something to send."""
        m = self.manager
        cfg = m.config
        out = []
        heartbeat_s = cfg.heartbeat_interval_s
        for d in list(self.buffers.keys() | self.end_signals.keys()):
            if self.in_flight.get(d, 0) >= cfg.max_in_flight_per_destination:
                continue
            dirty = self.dirty.get(d)
            signals = self.end_signals.pop(d, None)
            heartbeat = now - self.last_request_at.get(d, 0.0) >= heartbeat_s and bool(self.buffers.get(d))
            if not dirty and not signals and not heartbeat:
                continue
            entries: list[_Sent] = []
            parts: list[AppendRecordsRequest] = []
            budget = cfg.max_request_bytes
            if signals:
                for sig in signals:
                    s = sig.session
                    entries.append(_Sent(sig.tp, None, s, sig.base_offset, sig.base_offset, -1, None, True))
                    parts.append(AppendRecordsRequest(m.broker_id, s.leader_epoch, s.replica_epoch, s.session_id,
                                                      sig.tp, sig.base_offset, EMPTY, sig.high_watermark,
                                                      sig.log_start_offset, end_session=True))
            candidates = list(self.buffers.get(d, {}).values()) if heartbeat else list(dirty.values()) if dirty else []
            for buf in candidates:
                if not buf.established:
                    if buf.in_flight or buf.retry_at > now:
                        continue  # one request at a time until the follower acknowledged
                    if now - buf.started_at > cfg.request_timeout_s:
                        m.defer_failure(buf, "the follower did not take the push session in time")
                        continue
                chunks = []
                n = 0
                while buf.items and (not chunks or n + len(buf.items[0][2]) <= budget):
                    base, end, data = buf.items.popleft()
                    chunks.append((base, end, data))
                    n += len(data)
                if not chunks and not heartbeat and buf.high_watermark <= buf.high_watermark_sent \
                        and buf.log_start_offset <= buf.log_start_offset_sent and buf.established:
                    buf.dirty = False
                    if dirty is not None:
                        dirty.pop(buf.tp, None)
                    continue
                budget -= n
                m.bytes_used -= n
                buf.bytes -= n
                base = buf.send_offset
                end = chunks[-1][1] if chunks else base
                buf.send_offset = end
                if len(chunks) == 1:
                    records = MemoryRecords(chunks[0][2])
                elif chunks:
                    records = MemoryRecords(b"".join(c[2] for c in chunks))
                else:
                    records = EMPTY
                s = buf.session
                hw = buf.high_watermark
                lso = buf.log_start_offset
                buf.high_watermark_sent = hw
                buf.log_start_offset_sent = lso
                buf.in_flight += 1
                buf.last_sent_at = now
                entries.append(_Sent(buf.tp, buf, s, base, end, buf.enqueued_end,
                                     chunks if not buf.established else None, False))
                parts.append(AppendRecordsRequest(m.broker_id, s.leader_epoch, s.replica_epoch, s.session_id,
                                                  buf.tp, base, records, hw, lso))
                if not buf.items:
                    buf.dirty = False
                    if dirty is not None:
                        dirty.pop(buf.tp, None)
                if budget <= 0:
                    break
            if not entries:
                continue
            flight = _Flight(d, entries, now + cfg.request_timeout_s)
            self.flights.add(flight)
            self.in_flight[d] = self.in_flight.get(d, 0) + 1
            self.max_in_flight_seen = max(self.max_in_flight_seen, self.in_flight[d])
            self.last_request_at[d] = now
            self.requests_sent += 1
            out.append((flight, AppendRecordsBatchRequest(m.broker_id, parts)))
        return out
