"""Follower side of push replication: the AppendRecords handler and the session watchdog.

The follower's fetcher state is the session registry: a partition is in a push session iff
its fetch state is ``PUSHING`` with that session id (set by the fetch response that switched
it). Each pushed entry is checked, under the follower partition's lock (so a leader change
cannot interleave), for: the leader (id and epoch, rule 14), the follower's own broker epoch,
the session, and ``base_offset == LEO`` (a gap or an overlap ends the session). Records are
appended as follower, then the HW and log start offset move as after a fetch (rule 27).
Ending a session, for whatever reason, means resuming fetching from the LEO: truncation and
divergence always go through pull.

A watchdog resumes fetching for a partition whose session has been silent for
``push.follower.session.timeout.ms`` (the leader sends heartbeats to idle sessions), so a
lost end-session signal or a leader that stopped pushing never leaves a follower stranded.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import TYPE_CHECKING

from replication.errors import (
    CorruptRecordError,
    InvalidRecordError,
    KafkaStorageError,
    OffsetOutOfRangeError,
    ReplicationError,
)
from replication.protocol import (
    AppendRecordsBatchRequest,
    AppendRecordsBatchResponse,
    AppendRecordsRequest,
    AppendRecordsResponse,
    Errors,
    TopicPartition,
)

if TYPE_CHECKING:  # pragma: no cover
    from replication.broker import Broker

log = logging.getLogger(__name__)


class PushFollower:
    """Handles AppendRecords on one follower broker."""

    def __init__(self, broker: "Broker", session_timeout_ms: int) -> None:
        self.broker = broker
        self.session_timeout_s = session_timeout_ms / 1000.0
        self._last_push: dict[TopicPartition, float] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.sessions_ended_by_follower = 0

    def start(self) -> None:
        self._stop.clear()
        self._thread = threading.Thread(target=self._watchdog, name=f"push-follower-{self.broker.broker_id}",
                                        daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(5.0)

    # -- fetcher callback ------------------------------------------------------------------------

    def on_switch_to_push(self, tp: TopicPartition, session_id: int) -> None:
        with self._lock:
            self._last_push[tp] = time.monotonic()

    # -- requests --------------------------------------------------------------------------------

    def handle(self, source: int, body: object, respond) -> None:
        if isinstance(body, AppendRecordsBatchRequest):
            respond(AppendRecordsBatchResponse([self.append(source, p) for p in body.partitions]))
        elif isinstance(body, AppendRecordsRequest):
            respond(self.append(source, body))
        else:  # pragma: no cover - registered for these two types only
            raise TypeError(f"unexpected request {type(body).__name__}")

    def _fetch_state(self, tp: TopicPartition):
        fm = self.broker.fetcher_manager
        thread = fm.fetcher_for(tp) if fm is not None else None
        return (thread.fetch_state(tp) if thread is not None else None), fm

    def append(self, source: int, req: AppendRecordsRequest) -> AppendRecordsResponse:
        """Apply one pushed partition entry (see the module docstring)."""
        rm = self.broker.replica_manager
        tp = req.topic_partition
        partition = rm.partitions.get(tp) if rm is not None else None
        if partition is None:
            return AppendRecordsResponse(Errors.UNKNOWN_TOPIC_OR_PART, error_message=f"no replica of {tp} here")
        with partition.lock:
            lg = partition.log
            if partition.is_leader or partition.leader_id != req.leader_id or source != req.leader_id:
                return AppendRecordsResponse(
                    Errors.NOT_LEADER_OR_FOLLOWER,
                    error_message=f"broker {req.leader_id} is not the leader of {tp} here "
                                  f"(leader {partition.leader_id})")
            if req.leader_epoch < partition.leader_epoch:
                return AppendRecordsResponse(Errors.FENCED_LEADER_EPOCH,
                                             error_message=f"leader epoch {req.leader_epoch} < {partition.leader_epoch}")
            if req.leader_epoch > partition.leader_epoch:
                return AppendRecordsResponse(Errors.UNKNOWN_LEADER_EPOCH,
                                             error_message=f"leader epoch {req.leader_epoch} > {partition.leader_epoch}")
            if req.replica_epoch != self.broker.broker_epoch:
                return AppendRecordsResponse(
                    Errors.INVALID_PUSH_SESSION,
                    error_message=f"replica epoch {req.replica_epoch} is not this broker's {self.broker.broker_epoch}")
            st, fm = self._fetch_state(tp)
            if st is None or st.current_leader_epoch != req.leader_epoch:
                return AppendRecordsResponse(Errors.INVALID_PUSH_SESSION, error_message=f"{tp} is not fetched "
                                             f"from this leader epoch")
            if not st.is_pushing:
                if req.session_id > st.push_session_id and not req.end_session:
                    # The fetch response that switches us has not been applied yet.
                    return AppendRecordsResponse(Errors.PUSH_SESSION_NOT_READY)
                return AppendRecordsResponse(Errors.INVALID_PUSH_SESSION,
                                             error_message=f"{tp} is pulling (session {st.push_session_id})")
            if st.push_session_id != req.session_id:
                return AppendRecordsResponse(
                    Errors.INVALID_PUSH_SESSION,
                    error_message=f"session {req.session_id} is not the current session {st.push_session_id}")
            leo = lg.log_end_offset
            if req.end_session:
                self._end_session(tp, fm, leo, "the leader ended the session")
                return AppendRecordsResponse(log_end_offset=leo, log_start_offset=lg.log_start_offset)
            records = req.records
            first = req.base_offset
            if records.size:
                first = records.batches()[0].base_offset
            if req.base_offset != leo or first != leo:
                what = "gap" if max(req.base_offset, first) > leo else "overlap"
                self._end_session(tp, fm, leo, f"{what}: pushed offset {first} (declared {req.base_offset}), "
                                               f"log end offset {leo}")
                return AppendRecordsResponse(Errors.OFFSET_OUT_OF_RANGE, log_end_offset=leo,
                                             log_start_offset=lg.log_start_offset,
                                             error_message=f"{what} at offset {first}, log end offset {leo}")
            try:
                if records.size:
                    lg.append_as_follower(records)
                # Rule 27, as after a fetch: HW := clamp(leader HW), log start := max(own, leader's).
                if req.high_watermark >= 0:
                    lg.maybe_update_high_watermark(req.high_watermark)
                if req.log_start_offset > lg.log_start_offset:
                    try:
                        lg.maybe_increment_log_start_offset(req.log_start_offset, "leader's log start offset")
                    except OffsetOutOfRangeError:
                        pass  # above our HW for now; a later push moves it
            except (CorruptRecordError, InvalidRecordError, KafkaStorageError, ReplicationError) as e:
                code = Errors.KAFKA_STORAGE_ERROR if isinstance(e, KafkaStorageError) else Errors.CORRUPT_MESSAGE
                self._end_session(tp, fm, lg.log_end_offset, f"append failed: {e}")
                return AppendRecordsResponse(code, log_end_offset=lg.log_end_offset,
                                             log_start_offset=lg.log_start_offset, error_message=str(e))
            with self._lock:
                self._last_push[tp] = time.monotonic()
            return AppendRecordsResponse(log_end_offset=lg.log_end_offset, log_start_offset=lg.log_start_offset)

    def _end_session(self, tp: TopicPartition, fm, leo: int, why: str) -> None:
        """Back to pulling from the LEO (caller holds the partition lock)."""
        log.info("broker %d: push session of %s ends (%s); fetching from %d", self.broker.broker_id, tp, why, leo)
        self.sessions_ended_by_follower += 1
        with self._lock:
            self._last_push.pop(tp, None)
        if fm is not None:
            fm.resume_fetching(tp, leo)

    # -- watchdog --------------------------------------------------------------------------------

    def _watchdog(self) -> None:
        interval = max(0.005, self.session_timeout_s / 4)
        while not self._stop.wait(interval):
            try:
                self.check_sessions()
            except Exception:
                log.exception("broker %d: push session watchdog failed", self.broker.broker_id)

    def check_sessions(self, now: float | None = None) -> list[TopicPartition]:
        """Resume fetching for sessions silent longer than the timeout; returns them."""
        now = time.monotonic() if now is None else now
        with self._lock:
            silent = [tp for tp, t in self._last_push.items() if now - t > self.session_timeout_s]
        ended = []
        rm = self.broker.replica_manager
        for tp in silent:
            partition = rm.partitions.get(tp) if rm is not None else None
            if partition is None:
                with self._lock:
                    self._last_push.pop(tp, None)
                continue
            with partition.lock:
                with self._lock:
                    t = self._last_push.get(tp)
                    if t is None or now - t <= self.session_timeout_s:
                        continue
                st, fm = self._fetch_state(tp)
                if st is None or not st.is_pushing:
                    with self._lock:
                        self._last_push.pop(tp, None)
                    continue
                self._end_session(tp, fm, partition.log.log_end_offset, "no push from the leader in time")
                ended.append(tp)
        return ended
