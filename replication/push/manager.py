"""PushManager: buffers a leader's appends per (partition, follower) and pushes them.

The seed interface (``shared/seeds/push-manager.txt``) in snake_case. The manager does not
own the replication state machine (`replication.push.leader` does); it is told to
`start_push` / `stop_push` after the state changed, and reports back through a
`PushListener`: a session acknowledged, a follower's progress (to feed the leader's follower
state, as a fetch would), a session that failed (buffer full, request error, timeout), an
end-session signal answered.

Ordering: per partition, `start_push` happens-before `on_leader_append` of later offsets, and
`on_leader_append` / `on_high_watermark_update` / `on_log_start_offset_update` calls arrive in
log order (the leader calls them under its partition lock). The buffer of one follower is a
FIFO drained by one pusher, so records reach the follower in log order. Gaps (records the
leader appended without telling us) are filled from the log; records already covered by the
transition read are skipped.

Memory: ``push.max.memory.buffer.bytes`` bounds what is buffered. The transition read (and a
gap fill) buffers only what fits; the rest of the range, and appends made meanwhile, are read
from the log as the follower acknowledges (its "backlog"), so a session that starts far
behind never holds more than the budget. An append that does not fit ends the session with
BUFFER_FULL (the follower falls back to pull).
"""

from __future__ import annotations

import collections
import logging
import threading
import time
from dataclasses import dataclass
from typing import Callable, Iterable, Mapping, Protocol

from eddy.config_values import parse_bool

from replication.errors import IllegalStateError, TransportError
from replication.fetcher import fetcher_id_for
from replication.protocol import AppendRecordsBatchResponse, Errors, TopicPartition
from replication.records import MemoryRecords, iter_batch_headers
from replication.push.errors import PushConfigError
from replication.push.pusher import EndSessionSignal, PartitionBuffer, Pusher
from replication.push.session import PushSession, PushSessionEndReason

log = logging.getLogger(__name__)

# Outcomes of reading records from the leader's log into a push buffer.
_DONE = "done"
_NO_ROOM = "no room"
_SHORT = "short"


# --- configuration ---------------------------------------------------------------------------


def _int(config: Mapping[str, object], key: str, default: int, minimum: int) -> int:
    value = config.get(key, default)
    if isinstance(value, str) and value.strip().lstrip("-").isdigit():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int):
        raise PushConfigError(f"{key} must be an int, got {type(value).__name__} {value!r}", key=key)
    if value < minimum:
        raise PushConfigError(f"{key} must be >= {minimum}, got {value}", key=key)
    return value


def _bool(config: Mapping[str, object], key: str, default: bool) -> bool:
    value = config.get(key, default)
    parsed = parse_bool(value)
    if parsed is not None:
        return parsed
    raise PushConfigError(f"{key} must be true or false, got {value!r}", key=key)


@dataclass(frozen=True, slots=True)
class PushConfig:
    """push.* settings (Confluent's names where public, with their defaults)."""

    max_threads: int = 4
    threads_per_remote_broker: int = 1
    max_memory_buffer_bytes: int = 200 * 1024 * 1024
    max_request_bytes: int = 1 << 20
    max_in_flight_per_destination: int = 5
    request_timeout_ms: int = 30000
    heartbeat_interval_ms: int = 500
    follower_session_timeout_ms: int = 5000
    transition_caught_up_fetches: int = 2
    retry_backoff_ms: int = 2
    internal_topics_enable: bool = False

    @classmethod
    def from_mapping(cls, config: "Mapping[str, object] | PushConfig | None") -> "PushConfig":
        if config is None:
            return cls()
        if isinstance(config, PushConfig):
            return config
        if not isinstance(config, Mapping):
            raise PushConfigError(f"push config must be a mapping, got {type(config).__name__}")
        out = cls(
            max_threads=_int(config, "push.max.threads", 4, 1),
            threads_per_remote_broker=_int(config, "push.threads.per.remote.broker", 1, 1),
            max_memory_buffer_bytes=_int(config, "push.max.memory.buffer.bytes", 200 * 1024 * 1024, 0),
            max_request_bytes=_int(config, "push.max.request.bytes", 1 << 20, 1),
            max_in_flight_per_destination=_int(config, "push.max.in.flight.requests.per.destination", 5, 1),
            request_timeout_ms=_int(config, "push.request.timeout.ms",
                                    _int(config, "replica.socket.timeout.ms", 30000, 1), 1),
            heartbeat_interval_ms=_int(config, "push.heartbeat.interval.ms", 500, 1),
            follower_session_timeout_ms=_int(config, "push.follower.session.timeout.ms", 5000, 1),
            transition_caught_up_fetches=_int(config, "push.transition.caught.up.fetches", 2, 1),
            retry_backoff_ms=_int(config, "push.retry.backoff.ms", 2, 0),
            internal_topics_enable=_bool(config, "push.internal.topics.enable", False),
        )
        if out.threads_per_remote_broker > out.max_threads:
            raise PushConfigError(
                f"push.threads.per.remote.broker ({out.threads_per_remote_broker}) must be <= "
                f"push.max.threads ({out.max_threads})", key="push.threads.per.remote.broker")
        if out.follower_session_timeout_ms <= out.heartbeat_interval_ms:
            raise PushConfigError(
                f"push.follower.session.timeout.ms ({out.follower_session_timeout_ms}) must be > "
                f"push.heartbeat.interval.ms ({out.heartbeat_interval_ms})",
                key="push.follower.session.timeout.ms")
        return out

    @property
    def heartbeat_interval_s(self) -> float:
        return self.heartbeat_interval_ms / 1000.0

    @property
    def request_timeout_s(self) -> float:
        return self.request_timeout_ms / 1000.0


# --- listener and metrics -------------------------------------------------------------------


class PushListener(Protocol):
    """What the manager reports to the leader's replication state owner (called without the
    manager's lock, possibly on a pusher thread)."""

    def on_session_established(self, tp: TopicPartition, session: PushSession) -> None: ...

    def on_append_records_response(self, tp: TopicPartition, session: PushSession, follower_log_end_offset: int,
                                   follower_log_start_offset: int, leader_log_end_offset: int) -> None: ...

    def on_push_session_failed(self, tp: TopicPartition, session: PushSession,
                               reason: PushSessionEndReason) -> None: ...

    def on_end_session_acknowledged(self, tp: TopicPartition, session: PushSession) -> None: ...


class PushMetrics:
    """Counters of one manager; `snapshot()` gives Confluent's metric names."""

    def __init__(self) -> None:
        self.sessions_started = 0
        self.session_end_count: collections.Counter[str] = collections.Counter()
        self.requests_failed = 0


# --- the manager ------------------------------------------------------------------------------


class PushManager:
    """Buffers, pushers and sessions of one leader broker (see the module docstring)."""

    def __init__(self, broker_id: int, transport, config: "Mapping[str, object] | PushConfig | None" = None, *,
                 log_for: Callable[[TopicPartition], object | None] | None = None,
                 listener: PushListener | None = None) -> None:
        self.broker_id = broker_id
        self.transport = transport
        self.config = PushConfig.from_mapping(config)
        self.log_for = log_for or (lambda tp: None)
        self.listener = listener
        self.lock = threading.RLock()
        self.metrics = PushMetrics()
        self.bytes_used = 0
        self.stopping = 0
        self.deferred_failures: list[tuple[PartitionBuffer, PushSessionEndReason]] = []
        self._buffers: dict[tuple[TopicPartition, int], PartitionBuffer] = {}
        # (tp, replica) -> end of the records still to be read from the log for that session
        # (beyond buf.enqueued_end); appends during a backlog are read from the log too.
        self._backlog: dict[tuple[TopicPartition, int], int] = {}
        self._started = False
        self._shutdown = False
        # The seed: the manager initializes its pushers on creation; startup() starts them.
        self.pushers = [Pusher(i, self) for i in range(self.config.max_threads)]

    def __repr__(self) -> str:
        return f"PushManager(broker={self.broker_id}, sessions={len(self._buffers)}, bytes={self.bytes_used})"

    # -- lifecycle -----------------------------------------------------------------------------

    def startup(self) -> bool:
        """Start the pushers; True only if this call started them."""
        with self.lock:
            if self._started or self._shutdown:
                return False
            self._started = True
            for p in self.pushers:
                p.running = True
        for p in self.pushers:
            p.start()
        return True

    def shutdown(self) -> bool:
        """Stop the pushers and evict every buffer; True only for the first call.

        Followers still in a session are sent a best-effort end-session signal so they resume
        pulling without waiting for their session timeout."""
        with self.lock:
            if self._shutdown:
                return False
            self._shutdown = True
            buffers = list(self._buffers.values())
            self._buffers.clear()
            self._backlog.clear()
            self.bytes_used = 0
            self.stopping = 0
            self.deferred_failures.clear()
            for _ in buffers:
                self.metrics.session_end_count[PushSessionEndReason.SHUTDOWN.label] += 1
            for p in self.pushers:
                p.running = False
                p.buffers.clear()
                p.dirty.clear()
                p.end_signals.clear()
                p.cond.notify_all()
        self._send_final_end_signals(buffers)
        me = threading.current_thread()
        for p in self.pushers:
            if p.is_alive() and p is not me:
                p.join(5.0)
        return True

    def _send_final_end_signals(self, buffers: list[PartitionBuffer]) -> None:
        from replication.protocol import AppendRecordsBatchRequest, AppendRecordsRequest
        from replication.records import EMPTY

        by_destination: dict[int, list] = {}
        for buf in buffers:
            s = buf.session
            by_destination.setdefault(buf.destination, []).append(AppendRecordsRequest(
                self.broker_id, s.leader_epoch, s.replica_epoch, s.session_id, buf.tp, buf.send_offset,
                EMPTY, buf.high_watermark, buf.log_start_offset, end_session=True))
        for d, parts in by_destination.items():
            try:
                self.transport.send_async(self.broker_id, d, AppendRecordsBatchRequest(self.broker_id, parts),
                                          lambda response, error: None)
            except Exception:
                log.debug("broker %d: final end-session signal to %d failed", self.broker_id, d, exc_info=True)

    def is_active(self) -> bool:
        with self.lock:
            return self._started and not self._shutdown

    def is_push_replication_supported(self, is_internal_topic: bool, is_cluster_link_destination: bool) -> bool:
        """Internal topics stay on pull unless ``push.internal.topics.enable``; cluster link
        destinations (written by the link, not by producers) always pull."""
        if is_cluster_link_destination:
            return False
        return not is_internal_topic or self.config.internal_topics_enable

    def _check(self) -> None:
        if self._shutdown:
            raise IllegalStateError(f"the push manager of broker {self.broker_id} is shut down")

    def pusher_for(self, destination: int, tp: TopicPartition) -> Pusher:
        per_remote = self.config.threads_per_remote_broker
        k = fetcher_id_for(tp, per_remote) if per_remote > 1 else 0
        return self.pushers[(destination * per_remote + k) % len(self.pushers)]

    # -- push replication methods ----------------------------------------------------------------

    def start_push(self, tp: TopicPartition, session: PushSession, follower_log_end_offset: int | None = None) -> None:
        """Register `session` and push the follower what it lacks: [its LEO, leader LEO) read
        from the log, then every later `on_leader_append`, in order. Call it with the leader's
        partition lock held, right after the state change, so no append slips in between."""
        if not isinstance(session, PushSession):
            raise TypeError(f"session must be a PushSession, got {type(session).__name__}")
        lg = self.log_for(tp)
        if follower_log_end_offset is None:
            if lg is None:
                raise IllegalStateError(f"start_push({tp}): no follower LEO given and no local log to read")
            follower_log_end_offset = lg.log_end_offset
        if follower_log_end_offset < 0:
            raise ValueError(f"start_push({tp}): follower log end offset must be >= 0, got {follower_log_end_offset}")
        with self.lock:
            self._check()
            key = (tp, session.replica_id)
            if key in self._buffers:
                raise IllegalStateError(
                    f"start_push({tp}): replica {session.replica_id} already has push session "
                    f"{self._buffers[key].session.session_id}; stop it first")
            buf = PartitionBuffer(tp, session, follower_log_end_offset, time.monotonic())
            if lg is not None:
                buf.high_watermark = lg.high_watermark
                buf.log_start_offset = lg.log_start_offset
                leo = lg.log_end_offset
                if self._fill_from_log(buf, lg, leo) is _NO_ROOM:
                    self._backlog[key] = leo  # the rest is read as the follower acknowledges
            self._buffers[key] = buf
            self.metrics.sessions_started += 1
            self.pusher_for(session.replica_id, tp).add_buffer(buf)

    def _fill_from_log(self, buf: PartitionBuffer, lg, upto: int) -> str:
        """Buffer [buf.enqueued_end, upto) read from the leader's log, as far as the memory
        budget allows (lock held). Returns _DONE, _NO_ROOM (the budget stopped it) or _SHORT
        (the log had nothing more to give)."""
        limit = self.config.max_memory_buffer_bytes
        offset = buf.enqueued_end
        while offset < upto:
            room = limit - self.bytes_used
            if room <= 0:
                return _NO_ROOM
            data = lg.read(offset, min(self.config.max_request_bytes, room), upto)
            if not data.size:
                return _SHORT
            if self.bytes_used + data.size > limit:
                return _NO_ROOM  # the log hands out at least one whole batch, even past max bytes
            headers = data.batches()
            end = headers[-1].last_offset + 1
            chunk = bytes(data.buffer)
            buf.items.append((headers[0].base_offset, end, chunk))
            buf.bytes += len(chunk)
            self.bytes_used += len(chunk)
            buf.enqueued_end = end
            offset = end
        return _DONE

    def _refill(self, buf: PartitionBuffer) -> PushSessionEndReason | None:
        """Read more of a session's backlog from the log into its buffer (lock held); the
        reason to end the session if that can never work."""
        key = (buf.tp, buf.destination)
        pending = self._backlog.get(key)
        if pending is None or buf.items:
            return None
        lg = self.log_for(buf.tp)
        if lg is None:
            return PushSessionEndReason.LEADER_REPLICATION_ERROR
        status = self._fill_from_log(buf, lg, pending)
        if status is _DONE:
            del self._backlog[key]
        elif status is _SHORT:
            return PushSessionEndReason.LEADER_REPLICATION_ERROR
        elif not buf.items and self.bytes_used == 0:
            return PushSessionEndReason.BUFFER_FULL  # one batch is larger than the whole budget
        if buf.items:
            self.pusher_for(buf.destination, buf.tp).mark_dirty(buf)
        return None

    def on_leader_append(self, tp: TopicPartition, replica_ids: Iterable[int], append_offset: int,
                         records: "bytes | MemoryRecords", end_offset: int | None = None) -> None:
        """Buffer a leader append (stamped batches starting at `append_offset`) for each of
        `replica_ids` in a session; `end_offset` (the offset after the last record) is read
        from the batches if not given."""
        self._check()
        if not replica_ids:
            return
        data = records.buffer if isinstance(records, MemoryRecords) else records
        n = len(data)
        if not n:
            return
        failed: list[tuple[PartitionBuffer, PushSessionEndReason]] = []
        with self.lock:
            self._check()
            for r in tuple(replica_ids):
                buf = self._buffers.get((tp, r))
                if buf is None:
                    continue
                if end_offset is None:
                    headers = list(iter_batch_headers(data))
                    end_offset = headers[-1].last_offset + 1
                if end_offset <= buf.enqueued_end:
                    continue  # already read from the log when the session started
                key = (tp, r)
                pending = self._backlog.get(key)
                if pending is not None:
                    # Still reading older records from the log: this append is read from there too.
                    self._backlog[key] = max(pending, end_offset)
                    continue
                if append_offset != buf.enqueued_end:
                    if append_offset < buf.enqueued_end:
                        log.error("%s: append at %d overlaps records buffered up to %d for replica %d",
                                  tp, append_offset, buf.enqueued_end, r)
                        failed.append((buf, PushSessionEndReason.LEADER_REPLICATION_ERROR))
                        continue
                    lg = self.log_for(tp)
                    if lg is None:
                        failed.append((buf, PushSessionEndReason.LEADER_REPLICATION_ERROR))
                        continue
                    status = self._fill_from_log(buf, lg, append_offset)  # appends made without telling us
                    if status is _NO_ROOM:
                        self._backlog[key] = end_offset
                        self.pusher_for(r, tp).mark_dirty(buf)
                        continue
                    if status is _SHORT or buf.enqueued_end != append_offset:
                        failed.append((buf, PushSessionEndReason.LEADER_REPLICATION_ERROR))
                        continue
                if self.bytes_used + n > self.config.max_memory_buffer_bytes:
                    failed.append((buf, PushSessionEndReason.BUFFER_FULL))
                    continue
                buf.items.append((append_offset, end_offset, data))
                buf.bytes += n
                self.bytes_used += n
                buf.enqueued_end = end_offset
                self.pusher_for(r, tp).mark_dirty(buf)
        for buf, reason in failed:
            self._fail(buf, reason)

    def on_high_watermark_update(self, tp: TopicPartition, replica_ids: Iterable[int], high_watermark: int) -> None:
        self._raise_watermark(tp, replica_ids, "high_watermark", high_watermark)

    def on_log_start_offset_update(self, tp: TopicPartition, replica_ids: Iterable[int], log_start_offset: int) -> None:
        self._raise_watermark(tp, replica_ids, "log_start_offset", log_start_offset)

    def _raise_watermark(self, tp: TopicPartition, replica_ids: Iterable[int], field: str, value: int) -> None:
        """Move a buffer's high watermark or log start up (never down); it travels with the
        next request to that follower."""
        self._check()
        if not replica_ids:
            return
        with self.lock:
            self._check()
            for r in tuple(replica_ids):
                buf = self._buffers.get((tp, r))
                if buf is not None and value > getattr(buf, field):
                    setattr(buf, field, value)
                    self.pusher_for(r, tp).mark_dirty(buf)

    def stop_push(self, tp: TopicPartition, replica_ids: Iterable[int], reason: PushSessionEndReason) -> None:
        """Deregister the sessions of `replica_ids`, evict their buffers, and queue an
        end-session signal where `reason` asks for one. Replicas without a session: no-op."""
        if not isinstance(reason, PushSessionEndReason):
            raise TypeError(f"reason must be a PushSessionEndReason, got {reason!r}")
        with self.lock:
            self._check()
            for r in tuple(replica_ids):
                self._backlog.pop((tp, r), None)
                buf = self._buffers.pop((tp, r), None)
                if buf is None:
                    continue
                pusher = self.pusher_for(r, tp)
                pusher.remove_buffer(buf)
                self.bytes_used -= buf.bytes
                buf.items.clear()
                buf.bytes = 0
                self.metrics.session_end_count[reason.label] += 1
                log.info("broker %d: push session %d of %s to replica %d ended: %s", self.broker_id,
                         buf.session.session_id, tp, r, reason.label)
                if reason.send_end_session_request:
                    self.stopping += 1
                    pusher.add_end_signal(EndSessionSignal(tp, buf.session, buf.send_offset, buf.high_watermark,
                                                           buf.log_start_offset))

    def record_follower_not_caught_up(self, tp: TopicPartition, replica_id: int) -> None:
        """The ISR shrink found `replica_id` not caught up: end its session (if any)."""
        with self.lock:
            self._check()
            buf = self._buffers.get((tp, replica_id))
        if buf is not None:
            self._fail(buf, PushSessionEndReason.FOLLOWER_NOT_CAUGHT_UP)

    # -- introspection ---------------------------------------------------------------------------

    def session(self, tp: TopicPartition, replica_id: int) -> PushSession | None:
        with self.lock:
            buf = self._buffers.get((tp, replica_id))
            return buf.session if buf is not None else None

    def buffered_bytes(self, tp: TopicPartition, replica_id: int) -> int:
        with self.lock:
            buf = self._buffers.get((tp, replica_id))
            return buf.bytes if buf is not None else 0

    def metrics_snapshot(self) -> dict:
        with self.lock:
            awaiting = sum(1 for b in self._buffers.values() if not b.established)
            return {
                "PushSessionStartCount": self.metrics.sessions_started,
                "PushSessionEndCount": dict(self.metrics.session_end_count),
                "PushManagerMemoryBytesUsed": self.bytes_used,
                "PushPartitionsCount": len(self._buffers),
                "StoppingPushSessionsCount": self.stopping,
                "FollowersAwaitingPushTransition": awaiting,
            }

    # -- failures and responses (pusher side) ---------------------------------------------------

    def defer_failure(self, buf: PartitionBuffer, detail: str) -> None:
        """Called by a pusher with the lock held; the failure is reported after it is released."""
        log.info("broker %d: push session %d of %s to replica %d: %s", self.broker_id, buf.session.session_id,
                 buf.tp, buf.destination, detail)
        self.deferred_failures.append((buf, PushSessionEndReason.LEADER_REPLICATION_ERROR))
        buf.retry_at = float("inf")  # not retried while the failure is pending

    def run_deferred_failures(self) -> None:
        with self.lock:
            pending = self.deferred_failures
            self.deferred_failures = []
        for buf, reason in pending:
            self._fail(buf, reason)

    def _fail(self, buf: PartitionBuffer, reason: PushSessionEndReason) -> None:
        """End a session the manager found broken: through the listener (which changes the
        replica's state, then calls stop_push), or directly without one."""
        with self.lock:
            if self._shutdown or self._buffers.get((buf.tp, buf.destination)) is not buf:
                return  # already ended
        if self.listener is not None:
            self.listener.on_push_session_failed(buf.tp, buf.session, reason)
        else:
            with self.lock:
                if self._buffers.get((buf.tp, buf.destination)) is not buf:
                    return
            self.stop_push(buf.tp, [buf.destination], reason)

    def _current(self, entry) -> bool:
        buf = entry.buffer
        return buf is not None and self._buffers.get((entry.tp, buf.destination)) is buf

    def on_flight_failed(self, flight, error: Exception) -> None:
        self.metrics.requests_failed += 1
        log.info("broker %d: AppendRecords to broker %d failed: %s", self.broker_id, flight.destination, error)
        to_fail = []
        acked = []
        with self.lock:
            for e in flight.entries:
                if e.end_session:
                    self.stopping = max(0, self.stopping - 1)
                    acked.append(e)
                elif self._current(e):
                    to_fail.append(e.buffer)
        for e in acked:
            if self.listener is not None:
                self.listener.on_end_session_acknowledged(e.tp, e.session)
        for buf in to_fail:
            self._fail(buf, PushSessionEndReason.LEADER_REPLICATION_ERROR)

    def on_flight_response(self, flight, response) -> None:
        if not isinstance(response, AppendRecordsBatchResponse) or len(response.responses) != len(flight.entries):
            self.on_flight_failed(flight, TransportError(f"malformed AppendRecords response {response!r}"))
            return
        established = []
        progress = []
        to_fail = []
        refill_failed = []
        acked = []
        now = time.monotonic()
        with self.lock:
            for e, r in zip(flight.entries, response.responses):
                if e.end_session:
                    self.stopping = max(0, self.stopping - 1)
                    acked.append(e)
                    continue
                if not self._current(e):
                    continue
                buf = e.buffer
                if r.error == Errors.NONE:
                    if not buf.established:
                        buf.established = True
                        established.append(e)
                    # The follower is measured against everything the leader has for it, the
                    # backlog still in the log included (rule 17's leader LEO).
                    leader_end = max(e.leader_end, e.end, self._backlog.get((e.tp, buf.destination), -1))
                    progress.append((e, r, leader_end))
                    reason = self._refill(buf)
                    if reason is not None:
                        refill_failed.append((buf, reason))
                elif r.error == Errors.PUSH_SESSION_NOT_READY and not buf.established:
                    # The follower has not applied the switching fetch response yet: resend the
                    # same request shortly.
                    if e.chunks:
                        buf.items.extendleft(reversed(e.chunks))
                        n = sum(len(c[2]) for c in e.chunks)
                        buf.bytes += n
                        self.bytes_used += n
                    buf.send_offset = e.base
                    buf.high_watermark_sent = -1
                    buf.retry_at = now + self.config.retry_backoff_ms / 1000.0
                    self.pusher_for(buf.destination, buf.tp).mark_dirty(buf)
                else:
                    log.info("broker %d: replica %d rejected push session %d of %s: %s %s", self.broker_id,
                             buf.destination, buf.session.session_id, e.tp, Errors(r.error).name,
                             r.error_message or "")
                    to_fail.append(buf)
        listener = self.listener
        if listener is not None:
            for e in acked:
                listener.on_end_session_acknowledged(e.tp, e.session)
            for e in established:
                listener.on_session_established(e.tp, e.session)
            for e, r, leader_end in progress:
                listener.on_append_records_response(e.tp, e.session, r.log_end_offset, r.log_start_offset,
                                                    leader_end)
        for buf in to_fail:
            self._fail(buf, PushSessionEndReason.REQUEST_NON_RETRIABLE_ERROR)
        for buf, reason in refill_failed:
            self._fail(buf, reason)
