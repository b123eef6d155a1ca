"""Leader side of push replication: the per-(partition, follower) state machine and hooks.

Hooks on each led `Partition` (all called with the partition lock held, which also guards the
states here, so state changes and `PushManager` calls are ordered per partition):

- a follower fetch was served: count fetches that arrive caught up (fetch offset == LEO,
  follower in the ISR); after ``push.transition.caught.up.fetches`` in a row, with buffer
  room, mark the response ``switch_to_push`` with a new session id and `start_push`. A fetch
  carrying the follower's current session id (or none) while the leader believes it is in
  that session means the follower left it: the session ends (the follower already pulls). A
  fetch carrying an older id, or a parked fetch read again on completion, was sent before the
  switch and leaves the session alone;
- a leader append: `on_leader_append` for the followers in a session;
- a high-watermark advance: `on_high_watermark_update`;
- an ISR shrink: `record_follower_not_caught_up` for each dropped follower.

Every push acknowledgement goes through `Partition.update_follower_fetch_state`, the path a
fetch takes, so ISR expansion and the high watermark are computed in one place; delayed
produces then complete.
"""

from __future__ import annotations

import collections
import logging
import time
from typing import TYPE_CHECKING, Callable

from eddy.config_values import parse_bool
from replication.partition import Partition
from replication.protocol import Errors, FetchPartition, FetchPartitionResponse, TopicPartition
from replication.push.manager import PushManager
from replication.push.session import PushSession, PushSessionEndReason, PushState, ReplicationState

if TYPE_CHECKING:  # pragma: no cover
    from replication.replica_manager import ReplicaManager

log = logging.getLogger(__name__)


# Fetch requests remembered per (partition, follower) to recognise a parked one read again.
_SEEN_FETCHES = 8


def _is_stale(st: ReplicationState, fetch_session_id: int) -> bool:
    """While a session is on, a fetch carrying an older session id was sent before the
    follower took this session (a fetch retried after a timeout, or delayed): it must not end
    the session. A follower's fetch state keeps its last session id when it goes back to
    pulling; an id below zero means none (its fetch state started over), which is never stale.
    Back on pull, such fetches count again: a follower that never saw the switching response
    keeps sending its old id."""
    return 0 <= fetch_session_id < st.session_id


class PushLeader:
    """Decides push transitions for the partitions one broker leads (see module docstring)."""

    def __init__(self, broker_id: int, replica_manager: "ReplicaManager", manager: PushManager,
                 leader_enabled: bool = True, now_ms: Callable[[], int] = lambda: int(time.time() * 1000)) -> None:
        self.broker_id = broker_id
        self.rm = replica_manager
        self.manager = manager
        self.leader_enabled = leader_enabled
        self._now_ms = now_ms
        self.k = manager.config.transition_caught_up_fetches
        self.states: dict[TopicPartition, dict[int, ReplicationState]] = {}
        # Followers in TRANSITIONING or PUSH, per partition (what appends are buffered for).
        self.push_replicas: dict[TopicPartition, set[int]] = {}
        # (tp, follower) -> the last fetch request objects seen, newest last.
        self._seen_fetches: dict[tuple[TopicPartition, int], collections.deque] = {}
        self._hooked: set[int] = set()

    # -- configuration ---------------------------------------------------------------------------

    def push_enabled_for(self, partition: Partition) -> bool:
        if not self.leader_enabled or not self.manager.is_active():
            return False
        topic_setting = partition.config.get("push.replication.enable")
        if topic_setting is not None and parse_bool(topic_setting) is not True:  # a bad value: off
            return False
        return self.manager.is_push_replication_supported(partition.tp.topic.startswith("__"), False)

    # -- partition role changes ------------------------------------------------------------------

    def install(self, partition: Partition) -> None:
        if id(partition) in self._hooked:
            return
        self._hooked.add(id(partition))
        partition.append_listeners.append(self._on_append)
        partition.hw_listeners.append(self._on_high_watermark)
        partition.out_of_sync_listeners.append(self._on_out_of_sync)
        partition.follower_fetch_listeners.append(self._on_follower_fetch)
        partition.log_start_listeners.append(self._on_log_start_offset)

    def on_become_leader(self, partition: Partition, new_epoch: bool) -> None:
        self.install(partition)
        with partition.lock:
            tp = partition.tp
            if new_epoch:
                self._end_all(tp, PushSessionEndReason.NEW_LEADER_EPOCH)
                self._forget(tp)
                return
            states = self.states.get(tp)
            if states:
                for r in [r for r in states if r not in partition.replicas]:
                    self._end(partition, r, PushSessionEndReason.REPLICA_REMOVED)
                    states.pop(r, None)
                    self._seen_fetches.pop((tp, r), None)
                # The controller took a follower out of the ISR (e.g. its broker went away).
                for r, st in states.items():
                    if st.in_session and r not in partition.isr:
                        self._end(partition, r, PushSessionEndReason.FOLLOWER_NOT_CAUGHT_UP)

    def on_become_follower(self, partition: Partition) -> None:
        with partition.lock:
            self._end_all(partition.tp, PushSessionEndReason.NEW_LEADER_EPOCH)
            self._forget(partition.tp)

    def on_partition_removed(self, tp: TopicPartition) -> None:
        self._end_all(tp, PushSessionEndReason.REPLICA_REMOVED)
        self._forget(tp)

    def _forget(self, tp: TopicPartition) -> None:
        states = self.states.pop(tp, None)
        for r in states or ():
            self._seen_fetches.pop((tp, r), None)

    def _end_all(self, tp: TopicPartition, reason: PushSessionEndReason) -> None:
        states = self.states.get(tp)
        if not states:
            return
        replicas = [r for r, st in states.items() if st.in_session]
        for r in replicas:
            st = states[r]
            st.begin_stop(reason)
            st.finish_stop()  # this leadership is over: nobody waits for the follower's answer
        self.push_replicas.pop(tp, None)
        if replicas and self.manager.is_active():
            self.manager.stop_push(tp, replicas, reason)

    def _end(self, partition: Partition, replica_id: int, reason: PushSessionEndReason,
             session_id: int | None = None) -> bool:
        """End `replica_id`'s session (lock held): state first, then the manager."""
        tp = partition.tp
        st = self.states.get(tp, {}).get(replica_id)
        if st is None or not st.in_session or (session_id is not None and st.session_id != session_id):
            return False
        st.begin_stop(reason)
        replicas = self.push_replicas.get(tp)
        if replicas is not None:
            replicas.discard(replica_id)
        if self.manager.is_active():
            self.manager.stop_push(tp, [replica_id], reason)
        if not reason.send_end_session_request or not self.manager.is_active():
            st.finish_stop()
        return True

    # -- hooks (partition lock held) -------------------------------------------------------------

    def _on_append(self, partition: Partition, first_offset: int, records) -> None:
        replicas = self.push_replicas.get(partition.tp)
        if replicas:
            self.manager.on_leader_append(partition.tp, replicas, first_offset, records,
                                          end_offset=partition.log.log_end_offset)

    def _on_high_watermark(self, partition: Partition, high_watermark: int) -> None:
        replicas = self.push_replicas.get(partition.tp)
        if replicas:
            self.manager.on_high_watermark_update(partition.tp, replicas, high_watermark)

    def _on_log_start_offset(self, partition: Partition, log_start_offset: int) -> None:
        replicas = self.push_replicas.get(partition.tp)
        if replicas:
            self.manager.on_log_start_offset_update(partition.tp, replicas, log_start_offset)

    def _on_out_of_sync(self, partition: Partition, replica_ids: list[int]) -> None:
        replicas = self.push_replicas.get(partition.tp)
        if replicas:
            for r in replica_ids:
                if r in replicas:
                    self.manager.record_follower_not_caught_up(partition.tp, r)

    def _on_follower_fetch(self, partition: Partition, replica_id: int, replica_epoch: int,
                           request: FetchPartition, response: FetchPartitionResponse) -> None:
        tp = partition.tp
        states = self.states.setdefault(tp, {})
        st = states.get(replica_id)
        if st is None:
            st = states[replica_id] = ReplicationState(replica_id)
        seen = self._seen_fetches.get((tp, replica_id))
        if seen is None:
            seen = self._seen_fetches[(tp, replica_id)] = collections.deque(maxlen=_SEEN_FETCHES)
        if any(r is request for r in seen):
            # A parked fetch read again on completion: it was judged on arrival, and the
            # follower may have taken a session since (it gave up on this fetch and sent another).
            return
        seen.append(request)
        st.last_fetch = request
        if st.state is not PushState.PULL:
            if _is_stale(st, request.push_session_id):
                return  # sent before the follower took this session: the session stands
            # A fetch for the current session (or with none: the follower's fetch state started
            # over) means the follower is not, or no longer, in that session.
            if st.in_session:
                self._end(partition, replica_id, PushSessionEndReason.REQUEST_NON_RETRIABLE_ERROR)
            if st.state is PushState.STOPPING:
                st.finish_stop()
        if (response.error == Errors.NONE and replica_id in partition.isr
                and request.fetch_offset == partition.log.log_end_offset):
            st.caught_up_fetches += 1
        else:
            st.caught_up_fetches = 0
            return
        if st.caught_up_fetches < self.k or not self.push_enabled_for(partition):
            return
        if self.manager.bytes_used >= self.manager.config.max_memory_buffer_bytes:
            return  # no buffer room: stay on pull
        session = st.begin_session(partition.leader_epoch, replica_epoch)
        self.push_replicas.setdefault(tp, set()).add(replica_id)
        response.switch_to_push = True
        response.push_session_id = session.session_id
        log.info("%s: replica %d switches to push (session %d, offset %d)", tp, replica_id, session.session_id,
                 request.fetch_offset)
        self.manager.start_push(tp, session, follower_log_end_offset=request.fetch_offset)

    # -- PushListener ----------------------------------------------------------------------------

    def _partition(self, tp: TopicPartition) -> Partition | None:
        return self.rm.partitions.get(tp)

    def _state(self, tp: TopicPartition, session: PushSession) -> ReplicationState | None:
        st = self.states.get(tp, {}).get(session.replica_id)
        if st is None or st.session is None or st.session.session_id != session.session_id:
            return None
        return st

    def on_session_established(self, tp: TopicPartition, session: PushSession) -> None:
        partition = self._partition(tp)
        if partition is None:
            return
        with partition.lock:
            st = self._state(tp, session)
            if st is not None and st.state is PushState.TRANSITIONING:
                st.mark_pushing()

    def on_append_records_response(self, tp: TopicPartition, session: PushSession, follower_log_end_offset: int,
                                   follower_log_start_offset: int, leader_log_end_offset: int) -> None:
        partition = self._partition(tp)
        if partition is None:
            return
        advanced = partition.update_follower_fetch_state(
            session.replica_id, follower_log_end_offset, follower_log_start_offset, self._now_ms(),
            leader_log_end_offset, session.replica_epoch)
        if partition.hw_changed() or advanced:
            self.rm.complete_delayed(tp)

    def on_push_session_failed(self, tp: TopicPartition, session: PushSession, reason: PushSessionEndReason) -> None:
        partition = self._partition(tp)
        if partition is None:
            if self.manager.is_active():
                self.manager.stop_push(tp, [session.replica_id], reason)
            return
        with partition.lock:
            if not self._end(partition, session.replica_id, reason, session.session_id):
                # No matching state (e.g. the partition changed role): make sure the buffer goes.
                if self.manager.is_active() and self.manager.session(tp, session.replica_id) == session:
                    self.manager.stop_push(tp, [session.replica_id], reason)

    def on_end_session_acknowledged(self, tp: TopicPartition, session: PushSession) -> None:
        partition = self._partition(tp)
        if partition is None:
            return
        with partition.lock:
            st = self._state(tp, session)
            if st is not None and st.state is PushState.STOPPING:
                st.finish_stop()

    # -- introspection ---------------------------------------------------------------------------

    def state_of(self, tp: TopicPartition, replica_id: int) -> PushState:
        st = self.states.get(tp, {}).get(replica_id)
        return st.state if st is not None else PushState.PULL
