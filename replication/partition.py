"""One partition on one broker, as leader or follower (Kafka's Partition and Replica).

The leader keeps a `ReplicaState` per follower (rule 17), expands and shrinks the ISR
(rule 18) through the controller, maintains the high watermark as the minimum log end offset
of the maximal ISR plus caught-up replicas (rule 19), and answers acks=all once the high
watermark covers an append (rule 20). Fetches from followers are checked for epoch (rule 14)
and divergence (rule 15) before any records are read.

Push replication (issue 8) reports a follower's progress through the same
`update_follower_fetch_state` a fetch uses, so ISR and high-watermark logic exist once.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Callable

from replication.errors import (
    KafkaStorageError,
    NotEnoughReplicasError,
    NotLeaderError,
    OffsetOutOfRangeError,
)
from replication.log import Log
from replication.protocol import (
    EpochEndOffset,
    Errors,
    FetchPartition,
    FetchPartitionResponse,
    IsolationLevel,
    TopicPartition,
    UNDEFINED_EPOCH,
)
from replication.records import EMPTY, MemoryRecords

log = logging.getLogger(__name__)


def _now_ms() -> int:
    return int(time.time() * 1000)


class ReplicaState:
    """The leader's view of one follower (Kafka's Replica)."""

    __slots__ = (
        "broker_id",
        "log_end_offset",
        "log_start_offset",
        "last_caught_up_time_ms",
        "last_fetch_leader_log_end_offset",
        "last_fetch_time_ms",
        "broker_epoch",
    )

    def __init__(self, broker_id: int) -> None:
        self.broker_id = broker_id
        self.reset(0)

    def reset(self, last_caught_up_time_ms: int) -> None:
        self.log_end_offset = -1
        self.log_start_offset = -1
        self.last_caught_up_time_ms = last_caught_up_time_ms
        self.last_fetch_leader_log_end_offset = -1
        self.last_fetch_time_ms = 0
        self.broker_epoch = -1

    def update_fetch_state(self, follower_log_end_offset: int, follower_log_start_offset: int,
                           fetch_time_ms: int, leader_log_end_offset: int, broker_epoch: int) -> None:
        # Rule 17: caught up now if the follower reached the leader's LEO as of this fetch;
        # otherwise caught up as of the previous fetch if it reached the LEO the leader had then.
        if follower_log_end_offset >= leader_log_end_offset:
            self.last_caught_up_time_ms = max(self.last_caught_up_time_ms, fetch_time_ms)
        elif follower_log_end_offset >= self.last_fetch_leader_log_end_offset:
            self.last_caught_up_time_ms = max(self.last_caught_up_time_ms, self.last_fetch_time_ms)
        self.log_end_offset = follower_log_end_offset
        self.log_start_offset = follower_log_start_offset
        self.last_fetch_leader_log_end_offset = leader_log_end_offset
        self.last_fetch_time_ms = fetch_time_ms
        self.broker_epoch = broker_epoch

    def is_caught_up(self, leader_log_end_offset: int, now_ms: int, lag_time_max_ms: int) -> bool:
        return (self.log_end_offset == leader_log_end_offset
                or now_ms - self.last_caught_up_time_ms <= lag_time_max_ms)


# alter_isr(tp, leader_id, leader_epoch, partition_epoch, new_isr) -> applied state or None
AlterIsr = Callable[[TopicPartition, int, int, int, list[int]], object]


class Partition:
    """A partition replica hosted by one broker."""

    def __init__(self, tp: TopicPartition, broker_id: int, local_log: Log, config: dict,
                 alter_isr: AlterIsr, is_broker_alive: Callable[[int], bool],
                 on_high_watermark_change: Callable[["Partition"], None] | None = None,
                 clock_ms: Callable[[], int] = _now_ms) -> None:
        self.tp = tp
        self.broker_id = broker_id
        self.log = local_log
        self.config = config
        self._alter_isr = alter_isr
        self._is_broker_alive = is_broker_alive
        # Set when the leader's HW advanced; the replica manager takes it (outside this lock)
        # to complete parked produces and fetches.
        self._hw_changed = False
        self._clock_ms = clock_ms
        self.lock = threading.RLock()
        self.leader_id = -1
        self.leader_epoch = UNDEFINED_EPOCH
        self.partition_epoch = -1
        self.replicas: list[int] = []
        self.isr: set[int] = set()
        self.leader_epoch_start_offset = -1
        self.remote_replicas: dict[int, ReplicaState] = {}
        self.deleted = False
        # Hooks for push replication: called with the lock held, after a leader append.
        self.append_listeners: list[Callable[["Partition", int, MemoryRecords], None]] = []
        # Push replication hooks, called with the lock held: after the leader's HW advanced
        # (partition, new_hw); with the followers an ISR shrink drops (partition, replica_ids);
        # after a follower fetch was served (partition, replica_id, replica_epoch, request,
        # response), which may mark the response to switch the follower to push.
        self.hw_listeners: list[Callable[["Partition", int], None]] = []
        self.out_of_sync_listeners: list[Callable[["Partition", list[int]], None]] = []
        self.follower_fetch_listeners: list[Callable] = []
        # Called with the lock held after the leader's log start offset moved (partition, lso).
        self.log_start_listeners: list[Callable[["Partition", int], None]] = []
        self._announced_log_start = -1

    # -- configuration -------------------------------------------------------------------------

    @property
    def lag_time_max_ms(self) -> int:
        return int(self.config.get("replica.lag.time.max.ms", 30000))

    @property
    def min_insync_replicas(self) -> int:
        return int(self.config.get("min.insync.replicas", 1))

    @property
    def is_leader(self) -> bool:
        return self.leader_id == self.broker_id

    def __repr__(self) -> str:
        return (f"Partition({self.tp}, broker={self.broker_id}, leader={self.leader_id}, "
                f"epoch={self.leader_epoch}, isr={sorted(self.isr)})")

    # -- role changes --------------------------------------------------------------------------

    def is_stale_state(self, partition_epoch: int, role: str = "", leader_epoch: int = -1) -> bool:
        """True if a partition state with this partition epoch is older than the one held.

        The controller bumps the partition epoch with every leader or ISR change, so an older
        one is a state that arrived late; applying it would give this replica a view behind
        the controller's (a leader would then quote a refused epoch for ever). Re-applying the
        same epoch is harmless: it is the same state.
        """
        with self.lock:
            if partition_epoch >= self.partition_epoch:
                return False
            log.info("%s: broker %d ignores a stale state (%s, leader epoch %d, partition epoch "
                     "%d): it holds partition epoch %d", self.tp, self.broker_id, role or "?",
                     leader_epoch, partition_epoch, self.partition_epoch)
            return True

    def make_leader(self, leader_epoch: int, partition_epoch: int, replicas: list[int],
                    isr: list[int]) -> bool:
        """Become (or stay) leader; returns True if this is a new leadership (new epoch).

        A state older than the one held (lower partition epoch) changes nothing.
        """
        with self.lock:
            if self.is_stale_state(partition_epoch, "leader", leader_epoch):
                return False
            now = self._clock_ms()
            new_epoch = leader_epoch != self.leader_epoch or not self.is_leader
            self.replicas = list(replicas)
            self.isr = set(isr)
            self.partition_epoch = partition_epoch
            if new_epoch:
                leo = self.log.log_end_offset
                # Rule 16: the new epoch starts at the current LEO.
                self.log.leader_epoch_cache.assign(leader_epoch, leo)
                self.leader_epoch_start_offset = leo
                self.leader_epoch = leader_epoch
                self.leader_id = self.broker_id
                self.remote_replicas = {}
                for b in replicas:
                    if b == self.broker_id:
                        continue
                    state = ReplicaState(b)
                    state.reset(now if b in self.isr else 0)
                    self.remote_replicas[b] = state
                log.info("%s: broker %d is leader at epoch %d from offset %d, ISR %s",
                         self.tp, self.broker_id, leader_epoch, leo, sorted(self.isr))
            else:
                for b in replicas:
                    if b != self.broker_id and b not in self.remote_replicas:
                        self.remote_replicas[b] = ReplicaState(b)
            # A smaller ISR may let the high watermark advance.
            self._maybe_increment_leader_high_watermark(now)
            return new_epoch

    def make_follower(self, leader_id: int, leader_epoch: int, partition_epoch: int,
                      replicas: list[int], isr: list[int]) -> bool:
        """Become (or stay) follower; True if the leader or epoch changed (refetch needed).

        A state older than the one held (lower partition epoch) changes nothing.
        """
        with self.lock:
            if self.is_stale_state(partition_epoch, f"follower of {leader_id}", leader_epoch):
                return False
            changed = leader_id != self.leader_id or leader_epoch != self.leader_epoch
            self.replicas = list(replicas)
            self.isr = set(isr)
            self.partition_epoch = partition_epoch
            self.leader_id = leader_id
            self.leader_epoch = leader_epoch
            if changed:
                self.remote_replicas = {}
                self.leader_epoch_start_offset = -1
            return changed

    # -- leader: appends -----------------------------------------------------------------------

    def append_records_to_leader(self, records: bytes, acks: int):
        """Append as leader; raises NotLeaderError, or returns the log's append info.

        Rule 20: acks=all is refused before the append when the ISR is below
        min.insync.replicas (the caller maps `NotEnoughReplicasError` to the error code).
        """
        with self.lock:
            if not self.is_leader or self.deleted:
                raise NotLeaderError(f"broker {self.broker_id} is not the leader of {self.tp}")
            if acks == -1 and len(self.isr) < self.min_insync_replicas:
                raise NotEnoughReplicasError(
                    f"{self.tp}: ISR {sorted(self.isr)} is smaller than min.insync.replicas="
                    f"{self.min_insync_replicas}")
            info = self.log.append_as_leader(records, self.leader_epoch)
            if not info.batches:
                return info  # a duplicate of an idempotent producer's batch: nothing was written
            for listener in self.append_listeners:
                listener(self, info.first_offset, info.records)
            self._maybe_increment_leader_high_watermark(self._clock_ms())
            return info

    def check_enough_replicas_reach_offset(self, required_offset: int) -> tuple[bool, Errors]:
        """acks=all completion: (done, error) for an append whose next offset is `required_offset`."""
        with self.lock:
            if not self.is_leader:
                return True, Errors.NOT_LEADER_OR_FOLLOWER
            if self.log.high_watermark >= required_offset:
                if len(self.isr) >= self.min_insync_replicas:
                    return True, Errors.NONE
                return True, Errors.NOT_ENOUGH_REPLICAS_AFTER_APPEND
            return False, Errors.NONE

    # -- leader: high watermark and ISR ----------------------------------------------------------

    def _maybe_increment_leader_high_watermark(self, now_ms: int) -> bool:
        if not self.is_leader:
            return False
        leo = self.log.log_end_offset
        # Rule 19: frozen while the ISR is below min(min.insync.replicas, #replicas).
        if len(self.isr) < min(self.min_insync_replicas, len(self.replicas)):
            return False
        new_hw = leo
        for b, state in self.remote_replicas.items():
            if b in self.isr or (self._is_broker_alive(b)
                                 and state.is_caught_up(leo, now_ms, self.lag_time_max_ms)
                                 and state.log_end_offset >= 0):
                if state.log_end_offset < new_hw:
                    new_hw = state.log_end_offset
        if new_hw < 0 or new_hw <= self.log.high_watermark:
            return False
        self.log.maybe_increment_high_watermark(new_hw)
        self._hw_changed = True
        for listener in self.hw_listeners:
            listener(self, new_hw)
        return True

    def hw_changed(self) -> bool:
        """True once after each high-watermark advance."""
        if self._hw_changed:
            self._hw_changed = False
            return True
        return False

    def update_follower_fetch_state(self, replica_id: int, follower_log_end_offset: int,
                                    follower_log_start_offset: int, fetch_time_ms: int,
                                    leader_log_end_offset: int, broker_epoch: int) -> bool:
        """Record a follower's progress (from a fetch or a push acknowledgement).

        Returns True if the high watermark advanced.
        """
        with self.lock:
            state = self.remote_replicas.get(replica_id)
            if state is None or not self.is_leader:
                return False
            state.update_fetch_state(follower_log_end_offset, follower_log_start_offset,
                                     fetch_time_ms, leader_log_end_offset, broker_epoch)
            self._maybe_expand_isr(state)
            return self._maybe_increment_leader_high_watermark(fetch_time_ms)

    def _maybe_expand_isr(self, state: ReplicaState) -> None:
        # Rule 18: join once at or past the HW and past the start of this leader epoch.
        if state.broker_id in self.isr or not self._is_broker_alive(state.broker_id):
            return
        if (state.log_end_offset >= self.log.high_watermark
                and state.log_end_offset >= self.leader_epoch_start_offset):
            new_isr = sorted(self.isr | {state.broker_id})
            log.info("%s: expanding ISR %s -> %s (follower %d at %d)", self.tp, sorted(self.isr),
                     new_isr, state.broker_id, state.log_end_offset)
            self._submit_isr(new_isr)

    def maybe_shrink_isr(self) -> bool:
        """Drop ISR members that are not caught up (rule 18); called every lag/2 ms."""
        with self.lock:
            if not self.is_leader:
                return False
            now = self._clock_ms()
            leo = self.log.log_end_offset
            out_of_sync = [
                b for b in self.isr
                if b != self.broker_id
                and (b not in self.remote_replicas
                     or not self.remote_replicas[b].is_caught_up(leo, now, self.lag_time_max_ms))
            ]
            if not out_of_sync:
                return False
            for listener in self.out_of_sync_listeners:
                listener(self, out_of_sync)
            new_isr = sorted(self.isr - set(out_of_sync))
            log.info("%s: shrinking ISR %s -> %s (out of sync: %s)", self.tp, sorted(self.isr),
                     new_isr, out_of_sync)
            self._submit_isr(new_isr)
            self._maybe_increment_leader_high_watermark(now)
            return True

    def _submit_isr(self, new_isr: list[int]) -> None:
        state = self._alter_isr(self.tp, self.broker_id, self.leader_epoch, self.partition_epoch, new_isr)
        if state is None:
            # Refused (Kafka: INVALID_UPDATE_VERSION / FENCED_LEADER_EPOCH, or a broker that is
            # down): the controller sends a refused requester its current state, which replaces
            # this view (it may already have, if it was delivered on this thread).
            log.info("%s: AlterPartition to ISR %s at partition epoch %d refused", self.tp,
                     new_isr, self.partition_epoch)
        elif state.partition_epoch > self.partition_epoch:
            # The controller also notifies us; applying here keeps this call's view current.
            self.isr = set(state.isr)
            self.partition_epoch = state.partition_epoch

    # -- leader: reads -------------------------------------------------------------------------

    def _check_epoch(self, current_leader_epoch: int) -> Errors:
        if not self.is_leader or self.deleted:
            return Errors.NOT_LEADER_OR_FOLLOWER
        if current_leader_epoch == UNDEFINED_EPOCH:
            return Errors.NONE
        if current_leader_epoch < self.leader_epoch:
            return Errors.FENCED_LEADER_EPOCH
        if current_leader_epoch > self.leader_epoch:
            return Errors.UNKNOWN_LEADER_EPOCH
        return Errors.NONE

    def fetch_records(self, request: FetchPartition, replica_id: int, replica_epoch: int,
                      isolation: IsolationLevel, max_bytes: int) -> FetchPartitionResponse:
        """Serve one partition of a fetch; follower fetches also update the follower's state."""
        now = self._clock_ms()
        with self.lock:
            error = self._check_epoch(request.current_leader_epoch)
            if error is Errors.NONE and replica_id >= 0 and replica_id not in self.remote_replicas:
                error = Errors.UNKNOWN_LEADER_EPOCH  # rule 14: not a replica of this partition
            if error is not Errors.NONE:
                return FetchPartitionResponse(error=error)
            lg = self.log
            leo = lg.log_end_offset
            log_start = lg.log_start_offset
            hw = lg.high_watermark
            lso = lg.last_stable_offset
            fetch_offset = request.fetch_offset
            if request.last_fetched_epoch != UNDEFINED_EPOCH:
                epoch, end = lg.leader_epoch_cache.end_offset_for(request.last_fetched_epoch, leo)
                if epoch == UNDEFINED_EPOCH or fetch_offset < log_start:
                    return self._out_of_range(hw, lso, log_start, leo)
                if epoch < request.last_fetched_epoch or end < fetch_offset:
                    # Rule 15: tell the follower where the logs diverge; its state is not updated.
                    return FetchPartitionResponse(high_watermark=hw, last_stable_offset=lso,
                                                  log_start_offset=log_start, log_end_offset=leo,
                                                  diverging_epoch=(epoch, end))
            if fetch_offset < log_start or fetch_offset > leo:
                return self._out_of_range(hw, lso, log_start, leo)
            upper = self._last_fetchable_offset(replica_id, isolation)
            try:
                records = lg.read(fetch_offset, max_bytes, upper) if fetch_offset < upper else EMPTY
            except OffsetOutOfRangeError:
                return self._out_of_range(hw, lso, log_start, leo)
            except KafkaStorageError:
                return FetchPartitionResponse(error=Errors.KAFKA_STORAGE_ERROR)
            aborted = None
            if replica_id < 0 and isolation == IsolationLevel.TXN_COMMITTED and len(records):
                aborted = self.aborted_transactions(fetch_offset, upper)
            if replica_id >= 0:
                self.update_follower_fetch_state(replica_id, fetch_offset, request.log_start_offset,
                                                 now, leo, replica_epoch)
            response = FetchPartitionResponse(
                high_watermark=hw, last_stable_offset=lso, log_start_offset=log_start,
                log_end_offset=leo, records=records, aborted_transactions=aborted)
            if replica_id >= 0:
                for listener in self.follower_fetch_listeners:
                    listener(self, replica_id, replica_epoch, request, response)
            return response

    def delete_records(self, offset: int) -> int:
        """DeleteRecords on the leader: move the log start offset up to `offset` (-1: the HW)."""
        with self.lock:
            if not self.is_leader:
                raise NotLeaderError(f"broker {self.broker_id} is not the leader of {self.tp}")
            low = self.log.delete_records(offset)
            self.announce_log_start_offset()
            return low

    def announce_log_start_offset(self) -> None:
        """Tell listeners (push replication) when retention or DeleteRecords moved the log start."""
        with self.lock:
            lso = self.log.log_start_offset
            if not self.is_leader or lso == self._announced_log_start:
                return
            self._announced_log_start = lso
            for listener in self.log_start_listeners:
                listener(self, lso)

    def aborted_transactions(self, start_offset: int, upper_offset: int):
        """Aborted transactions overlapping [start, upper) for read_committed consumers."""
        index = getattr(self.log, "aborted_transactions", None)
        return index(start_offset, upper_offset) if index is not None else []

    def _out_of_range(self, hw: int, lso: int, log_start: int, leo: int) -> FetchPartitionResponse:
        return FetchPartitionResponse(error=Errors.OFFSET_OUT_OF_RANGE, high_watermark=hw,
                                      last_stable_offset=lso, log_start_offset=log_start,
                                      log_end_offset=leo)

    def _last_fetchable_offset(self, replica_id: int, isolation: IsolationLevel) -> int:
        """Where a fetch or an offset lookup stops: a replica's at the log end, a consumer's at
        the last stable offset (read_committed) or the high watermark."""
        lg = self.log
        if replica_id >= 0:
            return lg.log_end_offset
        if isolation == IsolationLevel.TXN_COMMITTED:
            return lg.last_stable_offset
        return lg.high_watermark

    def available_bytes(self, fetch_offset: int, replica_id: int, isolation: IsolationLevel) -> int:
        """A cheap lower bound of the bytes a parked fetch could now return (0 if none)."""
        return max(0, self._last_fetchable_offset(replica_id, isolation) - fetch_offset)

    def last_offset_for_leader_epoch(self, current_leader_epoch: int, leader_epoch: int) -> EpochEndOffset:
        """OffsetsForLeaderEpoch (rule 12) after the epoch checks of rule 14."""
        with self.lock:
            error = self._check_epoch(current_leader_epoch)
            if error is not Errors.NONE:
                return EpochEndOffset(error=error)
            epoch, end = self.log.leader_epoch_cache.end_offset_for(leader_epoch, self.log.log_end_offset)
            return EpochEndOffset(leader_epoch=epoch, end_offset=end)

    def list_offset(self, timestamp: int, current_leader_epoch: int, replica_id: int,
                    isolation: IsolationLevel) -> tuple[Errors, int, int, int]:
        """ListOffsets: (error, timestamp, offset, leader_epoch).

        A client's request (replica_id < 0) to a new leader whose high watermark has not yet
        reached the start of its epoch gets OFFSET_NOT_AVAILABLE (retriable) for the latest
        offset, or for a lookup that finds nothing below the last fetchable offset, as Kafka's
        Partition.fetchOffsetForTimestamp: that high watermark can lag what the previous
        leader had acknowledged (a follower learns it a fetch late, and a restarted broker
        reads it from a checkpoint), and an end offset read from it would, say, end a
        changelog's restore before records already committed."""
        from replication.protocol import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP

        with self.lock:
            error = self._check_epoch(current_leader_epoch)
            if error is not Errors.NONE:
                return error, -1, -1, UNDEFINED_EPOCH
            lg = self.log
            if timestamp == EARLIEST_TIMESTAMP:
                return Errors.NONE, -1, lg.log_start_offset, self.leader_epoch
            last_fetchable = self._last_fetchable_offset(replica_id, isolation)
            lagging = replica_id < 0 and self.leader_epoch_start_offset > lg.high_watermark
            if timestamp == LATEST_TIMESTAMP:
                if lagging:
                    return Errors.OFFSET_NOT_AVAILABLE, -1, -1, self.leader_epoch
                return Errors.NONE, -1, last_fetchable, self.leader_epoch
            found = lg.fetch_offset_by_timestamp(timestamp)
            if found is None or found[1] >= last_fetchable:
                return Errors.OFFSET_NOT_AVAILABLE if lagging else Errors.NONE, -1, -1, self.leader_epoch
            ts, offset = found
            return Errors.NONE, ts, offset, self.leader_epoch

    # -- follower -----------------------------------------------------------------------------

    def delete(self) -> None:
        with self.lock:
            self.deleted = True
            self.leader_id = -1
