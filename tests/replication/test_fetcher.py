"""Follower side of pull replication (rules 22-29): the behaviours of Kafka's
AbstractFetcherThreadTest / ReplicaFetcherThreadTest / AbstractFetcherManagerTest.

The fetcher runs synchronously (``do_work()`` on a thread object that was never started)
against ``LeaderDouble``, a test double of the *remote leader* in Kafka's MockLeaderEndPoint
style: it answers Fetch / OffsetsForLeaderEpoch / ListOffsets from REAL leader ``Log`` objects
following the leader rules (CLUSTER_ARCH.md, rules 14-15). The follower side is real too:
``LogReplicaOps`` over real ``Log`` objects in temporary directories. Time is a manual clock.
"""

from __future__ import annotations

import threading
import time
from typing import Callable

import pytest

from replication.errors import (
    IllegalStateError, InvalidConfigurationError, KafkaStorageError, ReplicationError, TransportError,
)
from replication.fetcher import (
    FailedPartitions,
    FetcherConfig,
    FollowerReplicaOps,
    InitialFetchState,
    LeaderEndPoint,
    LeaderResponseError,
    LogReplicaOps,
    PartitionFetchState,
    RemoteLeaderEndPoint,
    ReplicaFetcherManager,
    ReplicaFetcherThread,
    ReplicaState,
    fetcher_id_for,
    java_string_hashcode,
    kafka_abs,
)
from replication.log import Log
from replication.protocol import (
    FINAL_EPOCH,
    UNDEFINED_EPOCH,
    EpochEndOffset,
    Errors,
    FetchPartition,
    FetchPartitionResponse,
    FetchRequest,
    FetchResponse,
    IsolationLevel,
    ListOffsetsPartitionResponse,
    ListOffsetsRequest,
    OffsetForLeaderPartition,
    OffsetsForLeaderEpochRequest,
    TopicPartition,
)
from replication.records import EMPTY, MemoryRecords, encode_batch
from replication.transport import FaultPlan, LinkFaults, Transport

TP = TopicPartition("t", 0)
TP1 = TopicPartition("t", 1)
LEADER_ID = 1
FOLLOWER_ID = 2
BACKOFF_S = 1.0
pytestmark = pytest.mark.timeout(30)


# --- real logs --------------------------------------------------------------------------------


class Logs:
    """Real Log objects in a temp dir, closed at teardown."""

    def __init__(self, root) -> None:
        self.root = root
        self.opened: list = []

    def new(self, name: str):
        lg = Log(str(self.root / name))
        self.opened.append(lg)
        return lg

    def close(self) -> None:
        for lg in self.opened:
            try:
                lg.close()
            except Exception:
                pass


def batch(values, ts: int = 1000) -> MemoryRecords:
    return MemoryRecords(encode_batch([(None, v, ts) for v in values]))


def append(lg, epoch: int, values) -> None:
    """Append as the leader of ``epoch`` (a log that once led, or the leader double's)."""
    cache = lg.leader_epoch_cache
    if cache.latest_epoch != epoch:
        cache.assign(epoch, lg.log_end_offset)  # rule 16: a new epoch starts at the LEO
    lg.append_as_leader(batch([v if isinstance(v, bytes) else str(v).encode() for v in values]), epoch)


def read_all(lg) -> MemoryRecords:
    start, end = lg.log_start_offset, lg.log_end_offset
    return lg.read(start, 1 << 30, end) if start < end else EMPTY


def contents(lg) -> list[tuple[int, bytes, int]]:
    """(offset, value, leader epoch) of every record."""
    out = []
    for b in read_all(lg).record_batches():
        for r in b.records():
            out.append((r.offset, r.value, b.partition_leader_epoch))
    return out


# --- the leader double ------------------------------------------------------------------------


class LeaderReplica:
    def __init__(self, log, leader_epoch: int) -> None:
        self.log = log
        self.leader_epoch = leader_epoch
        self.error: Errors | None = None  # forced error for fetches (NOT_LEADER_OR_FOLLOWER...)
        self.push_session: int | None = None  # answer the next fetch with switch_to_push
        self.corrupt_next = False  # flip a byte of the next records sent (a corrupt transfer)
        self.replica_ids = {FOLLOWER_ID}


class LeaderDouble(LeaderEndPoint):
    """A remote leader answering from real leader logs with the leader-side rules (14-15)."""

    def __init__(self, leader_id: int = LEADER_ID, long_poll: bool = False) -> None:
        self.leader_id = leader_id
        self.long_poll = long_poll
        self.partitions: dict[TopicPartition, LeaderReplica] = {}
        self.cond = threading.Condition()
        self.fetch_requests: list[FetchRequest] = []
        self.epoch_requests: list[dict] = []
        self.list_offset_calls: list[tuple[str, TopicPartition, int]] = []
        self.fetch_failures = 0
        self.on_fetch: Callable[[FetchRequest], None] | None = None
        self.on_epoch_request: Callable[[dict], None] | None = None
        self.after_earliest: Callable[[TopicPartition], None] | None = None
        self.before_list_offsets: Callable[[TopicPartition], None] | None = None
        self.extra_epoch_replies: dict[TopicPartition, EpochEndOffset] = {}
        self.closed = False

    # leader-side set-up

    def add(self, tp: TopicPartition, log, leader_epoch: int) -> LeaderReplica:
        lr = LeaderReplica(log, leader_epoch)
        self.partitions[tp] = lr
        return lr

    def append(self, tp: TopicPartition, values, hw: int | None = None) -> None:
        lr = self.partitions[tp]
        with self.cond:
            append(lr.log, lr.leader_epoch, values)
            target = lr.log.log_end_offset if hw is None else hw
            if target > lr.log.high_watermark:
                lr.log.maybe_increment_high_watermark(target)
            self.cond.notify_all()

    def bump_epoch(self, tp: TopicPartition, epoch: int) -> None:
        lr = self.partitions[tp]
        lr.leader_epoch = epoch
        lr.log.leader_epoch_cache.assign(epoch, lr.log.log_end_offset)

    # LeaderEndPoint

    def build_fetch(self, partitions, log_start_offsets=None):
        parts = {
            tp: FetchPartition(
                fetch_offset=st.fetch_offset, current_leader_epoch=st.current_leader_epoch,
                last_fetched_epoch=UNDEFINED_EPOCH if st.last_fetched_epoch is None else st.last_fetched_epoch,
                log_start_offset=(log_start_offsets or {}).get(tp, -1), max_bytes=self.max_bytes,
                push_session_id=st.push_session_id)
            for tp, st in partitions.items() if st.state is ReplicaState.FETCHING
        }
        if not parts:
            return None
        return FetchRequest(FOLLOWER_ID, 7, 100, 1, 10 << 20, IsolationLevel.LOG_END, parts)

    max_bytes = 1 << 20

    def _epoch_error(self, lr: LeaderReplica | None, current_epoch: int) -> Errors | None:
        if lr is None:
            return Errors.UNKNOWN_TOPIC_OR_PART
        if current_epoch < lr.leader_epoch:
            return Errors.FENCED_LEADER_EPOCH
        if current_epoch > lr.leader_epoch:
            return Errors.UNKNOWN_LEADER_EPOCH
        return None

    def _read(self, tp: TopicPartition, fp: FetchPartition, replica_id: int) -> FetchPartitionResponse:
        lr = self.partitions.get(tp)
        error = self._epoch_error(lr, fp.current_leader_epoch)
        if error is None and replica_id not in lr.replica_ids:
            error = Errors.UNKNOWN_LEADER_EPOCH
        if error is None and lr.error is not None:
            error = lr.error
        if error is not None:
            return FetchPartitionResponse(error=error)
        lg = lr.log
        leo, start, hw = lg.log_end_offset, lg.log_start_offset, lg.high_watermark
        oor = FetchPartitionResponse(error=Errors.OFFSET_OUT_OF_RANGE, high_watermark=hw,
                                     log_start_offset=start, log_end_offset=leo)
        if fp.last_fetched_epoch != UNDEFINED_EPOCH:
            epoch, end = lg.leader_epoch_cache.end_offset_for(fp.last_fetched_epoch, leo)
            if epoch == UNDEFINED_EPOCH or fp.fetch_offset < start:
                return oor
            if epoch < fp.last_fetched_epoch or end < fp.fetch_offset:
                return FetchPartitionResponse(high_watermark=hw, log_start_offset=start,
                                              log_end_offset=leo, diverging_epoch=(epoch, end))
        if fp.fetch_offset < start or fp.fetch_offset > leo:
            return oor
        records = lg.read(fp.fetch_offset, fp.max_bytes, leo) if fp.fetch_offset < leo else EMPTY
        if lr.corrupt_next and records.size:
            lr.corrupt_next = False
            broken = bytearray(records.buffer)
            broken[-2] ^= 0xFF
            records = MemoryRecords(bytes(broken))
        resp = FetchPartitionResponse(high_watermark=hw, log_start_offset=start, log_end_offset=leo,
                                      records=records)
        if lr.push_session is not None:
            resp.switch_to_push = True
            resp.push_session_id = lr.push_session
            lr.push_session = None
        return resp

    def fetch(self, request):
        self.fetch_requests.append(request)
        if self.on_fetch is not None:
            self.on_fetch(request)
        if self.fetch_failures:
            self.fetch_failures -= 1
            raise TransportError("injected: fetch dropped")
        deadline = time.monotonic() + request.max_wait_ms / 1000.0
        with self.cond:
            while True:
                out = {tp: self._read(tp, fp, request.replica_id) for tp, fp in request.partitions.items()}
                if (not self.long_poll or self.closed or time.monotonic() >= deadline
                        or any(r.error != Errors.NONE or r.diverging_epoch or r.records.size
                               for r in out.values())):
                    return out
                # Parked until an append (rule 21) or max_wait_ms.
                self.cond.wait(deadline - time.monotonic())

    def fetch_epoch_end_offsets(self, partitions):
        self.epoch_requests.append(dict(partitions))
        if self.on_epoch_request is not None:
            self.on_epoch_request(partitions)
        out = {}
        for tp, req in partitions.items():
            lr = self.partitions.get(tp)
            error = self._epoch_error(lr, req.current_leader_epoch)
            if error is not None:
                out[tp] = EpochEndOffset(error=error)
            else:
                epoch, end = lr.log.leader_epoch_cache.end_offset_for(req.leader_epoch, lr.log.log_end_offset)
                out[tp] = EpochEndOffset(Errors.NONE, epoch, end)
        out.update(self.extra_epoch_replies)
        return out

    def _offset(self, kind: str, tp: TopicPartition, current_epoch: int) -> tuple[int, int]:
        self.list_offset_calls.append((kind, tp, current_epoch))
        if self.before_list_offsets is not None:
            self.before_list_offsets(tp)
        lr = self.partitions.get(tp)
        error = self._epoch_error(lr, current_epoch)
        if error is not None:
            raise LeaderResponseError(f"{kind} offset of {tp}: {error.name}", error=error, partition=tp)
        offset = lr.log.log_start_offset if kind == "earliest" else lr.log.log_end_offset
        return lr.leader_epoch, offset

    def fetch_earliest_offset(self, tp, current_leader_epoch):
        result = self._offset("earliest", tp, current_leader_epoch)
        if self.after_earliest is not None:
            self.after_earliest(tp)
        return result

    def fetch_latest_offset(self, tp, current_leader_epoch):
        return self._offset("latest", tp, current_leader_epoch)

    def close(self):
        with self.cond:
            self.closed = True
            self.cond.notify_all()

    initiate_close = close


class ManualClock:
    """The fetcher's clock in tests: time moves only when told; idle waits return at once."""

    def __init__(self) -> None:
        self.now = 1000.0
        self.waits: list[float] = []

    def monotonic(self) -> float:
        return self.now

    def wait(self, condition, timeout_s: float) -> None:
        self.waits.append(timeout_s)

    def advance(self, seconds: float) -> None:
        self.now += seconds


# --- fixtures ---------------------------------------------------------------------------------


class Env:
    def __init__(self, logs: Logs) -> None:
        self.logs = logs
        self.leader = LeaderDouble()
        self.follower_logs: dict[TopicPartition, object] = {}
        self.replicas = LogReplicaOps(self.follower_logs.get)
        self.clock = ManualClock()
        self.failed = FailedPartitions()
        self.switched: list[tuple[TopicPartition, int]] = []
        self.thread = self.make_thread()

    def make_thread(self, replicas=None, **config) -> ReplicaFetcherThread:
        cfg = {"replica.fetch.backoff.ms": int(BACKOFF_S * 1000), **config}
        return ReplicaFetcherThread(
            "ReplicaFetcherThread-0-1", 0, self.leader, replicas or self.replicas, cfg, self.failed,
            on_switch_to_push=lambda tp, sid: self.switched.append((tp, sid)), clock=self.clock)

    def leader_log(self, tp: TopicPartition = TP, epoch: int = 0):
        lg = self.logs.new(f"leader-{tp.topic}-{tp.partition}")
        self.leader.add(tp, lg, epoch)
        return lg

    def follower_log(self, tp: TopicPartition = TP):
        lg = self.logs.new(f"follower-{tp.topic}-{tp.partition}")
        self.follower_logs[tp] = lg
        return lg

    def add(self, tp: TopicPartition = TP, epoch: int = 0, offset: int | None = None) -> None:
        """Add as the broker does (rule 23): initial offset = LEO if the log has an epoch, else HW."""
        lg = self.follower_logs[tp]
        if offset is None:
            offset = lg.log_end_offset if lg.leader_epoch_cache.latest_epoch is not None else lg.high_watermark
        self.thread.add_partitions({tp: InitialFetchState(LEADER_ID, epoch, offset)})

    def state(self, tp: TopicPartition = TP) -> PartitionFetchState | None:
        return self.thread.fetch_state(tp)

    def run(self, rounds: int = 1) -> None:
        for _ in range(rounds):
            self.thread.do_work()


@pytest.fixture
def logs(tmp_path):
    lg = Logs(tmp_path)
    yield lg
    lg.close()


@pytest.fixture
def env(logs):
    return Env(logs)


# --- simple fetch, HW, lag --------------------------------------------------------------------


def test_simple_fetch_replicates_records_hw_and_lag(env):
    leader = env.leader_log()
    env.leader.append(TP, range(10))
    follower = env.follower_log()
    env.add()
    # No epoch in the empty log: the partition starts truncating (to its HW, 0).
    assert env.state().state is ReplicaState.TRUNCATING
    env.run()
    assert contents(follower) == contents(leader)
    assert follower.log_end_offset == 10
    assert follower.high_watermark == 10
    st = env.state()
    assert (st.fetch_offset, st.lag, st.state, st.last_fetched_epoch) == (10, 0, ReplicaState.FETCHING, 0)
    # Nothing new: an empty response leaves the log alone.
    env.run()
    assert follower.log_end_offset == 10 and env.state().fetch_offset == 10
    assert env.leader.epoch_requests == []  # no epoch in the log: no OffsetsForLeaderEpoch


def test_follower_high_watermark_follows_leader_and_clamps_to_own_leo(env):
    env.leader_log()
    env.leader.append(TP, range(5), hw=3)
    follower = env.follower_log()
    env.add()
    env.run()
    assert follower.log_end_offset == 5
    assert follower.high_watermark == 3  # the leader's HW, below our LEO
    env.leader.append(TP, range(5))  # HW now 10
    env.run()
    assert follower.high_watermark == 10


def test_lag_is_leader_hw_minus_next_offset_and_updated_on_empty_response(env):
    env.leader.max_bytes = 1  # one batch per response
    env.leader_log()
    env.leader.append(TP, range(5), hw=0)
    env.leader.append(TP, range(5), hw=8)  # two batches, leader HW 8, LEO 10
    env.follower_log()
    env.add()
    env.run()
    st = env.state()
    assert st.fetch_offset == 5 and st.lag == 3  # max(0, 8 - 5)
    env.run()
    assert env.state().fetch_offset == 10 and env.state().lag == 0  # max(0, 8 - 10)
    # A fresh state has no lag; the first (empty) response sets it.
    env.thread.add_partitions({TP: InitialFetchState(LEADER_ID, 1, 10)})
    env.leader.bump_epoch(TP, 1)
    assert env.state().lag is None
    env.run()
    assert env.state().lag == 0 and env.state().fetch_offset == 10


def test_leader_log_start_offset_raises_follower_log_start(env):
    leader = env.leader_log()
    env.leader.append(TP, range(10))
    follower = env.follower_log()
    env.add()
    env.run()
    leader.maybe_increment_log_start_offset(4)
    env.leader.append(TP, range(2))
    env.run()
    assert follower.log_start_offset == 4
    assert follower.log_end_offset == 12


# --- truncation phase (rules 25-26) -----------------------------------------------------------


def test_truncation_on_epoch_removes_records_of_old_epoch(env):
    # Follower led epoch 1 and wrote 5..7 that never replicated; the leader of epoch 2 wrote 5..9.
    leader = env.leader_log(epoch=2)
    append(leader, 0, range(5))
    append(leader, 2, ["a", "b", "c", "d", "e"])
    leader.maybe_increment_high_watermark(10)
    follower = env.follower_log()
    append(follower, 0, range(5))
    append(follower, 1, ["x", "y", "z"])
    env.add(epoch=2)
    env.thread.mark_partitions_for_truncation(TP, follower.log_end_offset)
    assert env.state().state is ReplicaState.TRUNCATING
    env.run()
    # OffsetsForLeaderEpoch asked about our latest epoch, 1; the leader says epoch 0 ends at 5.
    assert env.leader.epoch_requests == [{TP: OffsetForLeaderPartition(2, 1)}]
    # The truncation ran before the fetch, which started at 5 with last fetched epoch 0.
    fetch = env.leader.fetch_requests[0].partitions[TP]
    assert (fetch.fetch_offset, fetch.last_fetched_epoch) == (5, 0)
    assert contents(follower) == contents(leader)
    assert [e for _, _, e in contents(follower)] == [0] * 5 + [2] * 5


def test_truncation_takes_several_rounds_when_follower_lacks_leader_epoch(env):
    # Leader epochs 0@0, 2@4; follower epochs 0@0, 1@3, 3@5: the leader's answer for epoch 3
    # is epoch 2, which the follower never saw, so it truncates to its epoch-1 end and asks again.
    # (Both logs share epoch 0's first batch; the follower missed its second batch, offset 3.)
    leader = env.leader_log(epoch=4)
    append(leader, 0, range(3))
    append(leader, 0, [3])
    append(leader, 2, range(4))
    leader.maybe_increment_high_watermark(8)
    env.leader.bump_epoch(TP, 4)
    follower = env.follower_log()
    append(follower, 0, range(3))
    append(follower, 1, range(2))
    append(follower, 3, range(3))
    env.add(epoch=4)
    env.thread.mark_partitions_for_truncation(TP, follower.log_end_offset)
    env.leader.fetch_failures = 1  # isolate the truncation phase of the first round
    env.run()
    assert env.leader.epoch_requests[0] == {TP: OffsetForLeaderPartition(4, 3)}
    # Leader: end_offset_for(3) = (2, 8); follower end_offset_for(2) = (1, 5): incomplete, to 5.
    assert follower.log_end_offset == 5
    st = env.state()
    assert st.state is ReplicaState.FETCHING and st.last_fetched_epoch == 1
    env.clock.advance(BACKOFF_S)
    env.run(3)  # diverging epoch (1 ends at 3), then fetch the rest
    assert contents(follower) == contents(leader)


def test_truncation_to_high_watermark_without_epoch(env):
    leader = env.leader_log()
    env.leader.append(TP, range(3))
    env.leader.append(TP, ["l3", "l4"])
    follower = env.follower_log()
    append(follower, 0, range(3))
    follower.maybe_increment_high_watermark(3)
    append(follower, 0, ["f3", "f4", "f5"])
    follower.leader_epoch_cache.clear()  # a log written before leader epochs existed
    env.add()
    assert env.state().state is ReplicaState.TRUNCATING and env.state().fetch_offset == 3
    env.run()
    assert env.leader.epoch_requests == []
    assert env.leader.fetch_requests[0].partitions[TP].fetch_offset == 3
    assert contents(follower) == contents(leader)


def test_truncation_undefined_leader_end_offset_falls_back_to_high_watermark(env):
    # The leader (epoch 5) only has epoch 0 in its cache; the follower's latest epoch, 3, is
    # above it with no higher entry: the leader answers (-1, -1).
    leader = env.leader_log(epoch=5)
    append(leader, 0, range(2))
    append(leader, 0, range(2))
    leader.maybe_increment_high_watermark(4)
    follower = env.follower_log()
    append(follower, 0, range(2))
    follower.maybe_increment_high_watermark(2)
    append(follower, 3, range(3))
    env.thread.add_partitions({TP: InitialFetchState(LEADER_ID, 5, 2)})  # HW as initial offset
    env.thread.mark_partitions_for_truncation(TP, 2)
    env.leader.fetch_failures = 1
    env.run()
    # The leader's cache has no epoch <= 1: (-1, -1), so the follower truncates to its HW.
    assert follower.log_end_offset == 2
    assert env.state().state is ReplicaState.FETCHING


def test_fenced_leader_epoch_in_truncation_marks_partition_failed(env):
    leader = env.leader_log(epoch=3)
    append(leader, 3, range(2))
    follower = env.follower_log()
    append(follower, 1, range(2))
    env.add(epoch=2)
    env.thread.mark_partitions_for_truncation(TP, 2)
    env.run()
    assert env.state() is None
    assert TP in env.failed
    assert follower.log_end_offset == 2


def test_epoch_reply_dropped_when_partition_removed_during_truncation(env):
    leader = env.leader_log(epoch=2)
    append(leader, 0, range(2))
    append(leader, 2, range(2))
    follower = env.follower_log()
    append(follower, 0, range(2))
    append(follower, 1, range(3))
    env.add(epoch=2)
    env.thread.mark_partitions_for_truncation(TP, 5)
    env.leader.on_epoch_request = lambda parts: env.thread.remove_partitions([TP])
    env.run()
    assert env.leader.epoch_requests  # asked ...
    assert follower.log_end_offset == 5  # ... but the answer was dropped
    assert env.state() is None and TP not in env.failed
    assert env.leader.fetch_requests == []


def test_epoch_reply_dropped_when_leader_epoch_changed_during_truncation(env):
    leader = env.leader_log(epoch=2)
    append(leader, 0, range(2))
    append(leader, 2, range(2))
    follower = env.follower_log()
    append(follower, 0, range(2))
    append(follower, 1, range(3))
    env.add(epoch=2)
    env.thread.mark_partitions_for_truncation(TP, 5)

    def new_epoch(parts):
        env.leader.bump_epoch(TP, 3)
        env.add(epoch=3)

    env.leader.on_epoch_request = new_epoch
    env.leader.fetch_failures = 1
    env.run()
    assert follower.log_end_offset == 5
    st = env.state()
    assert st.current_leader_epoch == 3 and st.fetch_offset == 5


def test_epoch_reply_for_unrequested_partition_raises(env):
    leader = env.leader_log(epoch=1)
    append(leader, 1, range(2))
    env.follower_log()
    append(env.follower_logs[TP], 1, range(2))
    env.add(epoch=1)
    env.thread.mark_partitions_for_truncation(TP, 2)
    env.leader.extra_epoch_replies = {TP1: EpochEndOffset(Errors.NONE, 1, 0)}
    with pytest.raises(IllegalStateError, match="not requested"):
        env.run()


def test_epoch_request_error_delays_and_retries(env):
    leader = env.leader_log(epoch=1)
    append(leader, 1, range(2))
    append(leader, 1, [2])
    follower = env.follower_log()
    append(follower, 1, range(2))
    env.add(epoch=2)  # the leader does not know epoch 2 yet: UNKNOWN_LEADER_EPOCH
    env.thread.mark_partitions_for_truncation(TP, 2)
    env.run()
    assert env.state().is_delayed(env.clock.now) and env.state().state is ReplicaState.TRUNCATING
    env.run()
    assert len(env.leader.epoch_requests) == 1  # delayed: not asked again yet
    env.leader.bump_epoch(TP, 2)
    env.clock.advance(BACKOFF_S)
    env.run()
    assert len(env.leader.epoch_requests) == 2
    assert contents(follower) == contents(leader)


# --- diverging epoch in a fetch response (rule 27) --------------------------------------------


def test_diverging_epoch_truncates_without_append_or_hw_change(env):
    leader = env.leader_log(epoch=2)
    append(leader, 0, range(5))
    append(leader, 2, ["a", "b", "c", "d", "e"])
    leader.maybe_increment_high_watermark(10)
    follower = env.follower_log()
    append(follower, 0, range(5))
    follower.maybe_increment_high_watermark(3)
    append(follower, 1, ["x", "y", "z"])
    env.add(epoch=2)
    st = env.state()
    assert (st.state, st.fetch_offset, st.last_fetched_epoch) == (ReplicaState.FETCHING, 8, 1)
    env.run()
    # Round 1: diverging (0, 5) -> truncate to 5, nothing appended, HW untouched.
    assert follower.log_end_offset == 5
    assert follower.high_watermark == 3
    st = env.state()
    assert (st.fetch_offset, st.last_fetched_epoch, st.state) == (5, 0, ReplicaState.FETCHING)
    env.run()
    assert contents(follower) == contents(leader)
    assert follower.high_watermark == 10


# --- errors (rule 28) -------------------------------------------------------------------------


def test_fenced_leader_epoch_in_fetch_marks_partition_failed(env):
    env.leader_log(epoch=5)
    env.leader.append(TP, range(3))
    follower = env.follower_log()
    env.add(epoch=4)
    env.run()  # truncate to HW 0, fetch: FENCED
    assert env.state() is None
    assert TP in env.failed
    assert follower.log_end_offset == 0
    # Re-adding (new leader epoch) clears the failure.
    env.add(epoch=5)
    assert TP not in env.failed
    env.run()
    assert follower.log_end_offset == 3


def test_fenced_for_a_stale_request_epoch_retries_instead_of_failing(env):
    leader = env.leader_log(epoch=0)
    append(leader, 0, range(3))
    env.leader.bump_epoch(TP, 5)
    follower = env.follower_log()
    append(follower, 0, range(3))
    env.add(epoch=4)
    assert env.state().state is ReplicaState.FETCHING

    def moved_on(request):  # the controller moves this replica to epoch 6 while the fetch is out
        env.add(epoch=6)

    env.leader.on_fetch = moved_on
    env.run()  # the epoch-4 fetch is FENCED, but we are at epoch 6 now: retry later
    st = env.state()
    assert st is not None and st.current_leader_epoch == 6 and st.is_delayed(env.clock.now)
    assert TP not in env.failed
    assert follower.log_end_offset == 3


def test_unknown_leader_epoch_delays_then_retries(env):
    env.leader_log(epoch=5)
    env.leader.append(TP, range(3))
    follower = env.follower_log()
    env.add(epoch=6)
    env.run()  # fetch: UNKNOWN_LEADER_EPOCH
    st = env.state()
    assert st is not None and st.delay == env.clock.now + BACKOFF_S
    assert TP not in env.failed
    fetches = len(env.leader.fetch_requests)
    env.run()
    assert len(env.leader.fetch_requests) == fetches  # delayed: not fetched
    assert env.clock.waits and env.clock.waits[-1] <= BACKOFF_S  # waited instead
    env.clock.advance(BACKOFF_S / 2)
    env.run()
    assert len(env.leader.fetch_requests) == fetches
    env.leader.bump_epoch(TP, 6)
    env.clock.advance(BACKOFF_S / 2)
    env.run()
    assert len(env.leader.fetch_requests) == fetches + 1
    assert follower.log_end_offset == 3


@pytest.mark.parametrize("error", [Errors.NOT_LEADER_OR_FOLLOWER, Errors.UNKNOWN_TOPIC_OR_PART,
                                   Errors.CORRUPT_MESSAGE, Errors.KAFKA_STORAGE_ERROR])
def test_retriable_fetch_errors_delay_the_partition(env, error):
    lr_log = env.leader_log()
    env.leader.append(TP, range(2))
    follower = env.follower_log()
    env.add()
    env.leader.partitions[TP].error = error
    env.run()
    st = env.state()
    assert st.is_delayed(env.clock.now) and TP not in env.failed
    assert follower.log_end_offset == 0
    env.leader.partitions[TP].error = None
    env.run()
    assert follower.log_end_offset == 0  # still delayed
    env.clock.advance(BACKOFF_S)
    env.run()
    assert contents(follower) == contents(lr_log)


def test_corrupt_records_delay_the_partition_and_are_refetched(env):
    leader = env.leader_log()
    env.leader.append(TP, range(3))
    follower = env.follower_log()
    env.add()
    env.leader.partitions[TP].corrupt_next = True
    env.run()
    assert follower.log_end_offset == 0  # nothing of the corrupt batch was written
    assert env.state().is_delayed(env.clock.now) and TP not in env.failed
    env.clock.advance(BACKOFF_S)
    env.run()
    assert contents(follower) == contents(leader)


def test_already_delayed_partition_is_not_redelayed(env):
    env.leader_log()
    env.follower_log()
    env.add()
    env.thread.delay_partitions([TP])
    first = env.state().delay
    env.clock.advance(0.5)
    env.thread.delay_partitions([TP])
    assert env.state().delay == first


def test_transport_error_delays_every_partition_of_the_request(env):
    for tp in (TP, TP1):
        env.leader_log(tp)
        env.leader.append(tp, range(2))
        env.follower_log(tp)
        env.add(tp)
    env.leader.fetch_failures = 1
    env.run()
    assert all(env.state(tp).is_delayed(env.clock.now) for tp in (TP, TP1))
    n = len(env.leader.fetch_requests)
    env.run()
    assert len(env.leader.fetch_requests) == n
    # The idle wait is bounded by the earliest delay, not longer than the backoff.
    env.clock.advance(0.25)
    env.run()
    assert env.clock.waits[-1] == pytest.approx(BACKOFF_S - 0.25)
    env.clock.advance(BACKOFF_S)
    env.run()
    assert all(env.follower_logs[tp].log_end_offset == 2 for tp in (TP, TP1))


def test_storage_error_fails_only_that_partition(env):
    class BrokenDisk(LogReplicaOps):
        def process_partition_data(self, tp, fetch_offset, response):
            if tp == TP1:
                raise KafkaStorageError(f"log dir of {tp} is offline")  # a disk fault cannot be made real here
            return super().process_partition_data(tp, fetch_offset, response)

    env.thread = env.make_thread(replicas=BrokenDisk(env.follower_logs.get))
    for tp in (TP, TP1):
        env.leader_log(tp)
        env.leader.append(tp, range(3))
        env.follower_log(tp)
        env.add(tp)
    env.run()
    assert TP1 in env.failed and env.state(TP1) is None
    assert env.follower_logs[TP].log_end_offset == 3 and TP not in env.failed


def test_fetch_offset_mismatch_with_log_end_fails_partition(env):
    env.leader_log()
    env.leader.append(TP, range(3))
    follower = env.follower_log()
    append(follower, 0, range(1))
    with pytest.raises(IllegalStateError, match="offset mismatch"):
        env.replicas.process_partition_data(TP, 0, FetchPartitionResponse(high_watermark=3))
    # In the thread, the same mismatch fails only that partition.
    env.thread.add_partitions({TP: InitialFetchState(LEADER_ID, 0, 0, last_fetched_epoch=0)})
    env.run()
    assert TP in env.failed
    assert follower.log_end_offset == 1


def test_response_ignored_if_partition_changed_while_in_flight(env):
    env.leader_log()
    env.leader.append(TP, range(3))
    follower = env.follower_log()
    env.add()
    env.run()
    env.leader.append(TP, range(3))
    # While the fetch is in flight, the partition is re-added at a new epoch from offset 1.
    env.leader.on_fetch = lambda req: (env.leader.bump_epoch(TP, 1),
                                       env.thread.add_partitions({TP: InitialFetchState(LEADER_ID, 1, 1)}))
    env.run()
    env.leader.on_fetch = None
    assert follower.log_end_offset == 3  # the answer for offset 3 was not applied
    assert env.state().fetch_offset == 1


# --- out of range (rule 29) -------------------------------------------------------------------


def test_out_of_range_high_truncates_to_leader_end(env):
    # An unclean election left the leader shorter than the follower.
    leader = env.leader_log(epoch=1)
    append(leader, 0, range(6))
    leader.maybe_increment_high_watermark(6)
    follower = env.follower_log()
    append(follower, 0, range(10))
    follower.maybe_increment_high_watermark(10)
    follower.leader_epoch_cache.clear()  # no epochs: nothing but the out-of-range reset catches it
    env.add(epoch=1)
    env.run()  # truncate to HW 10 (no-op), fetch 10: OUT_OF_RANGE -> truncate to 6
    assert [c[0] for c in env.leader.list_offset_calls] == ["latest"]
    assert follower.log_end_offset == 6
    st = env.state()
    assert (st.fetch_offset, st.lag, st.state) == (6, 0, ReplicaState.FETCHING)
    env.leader.append(TP, ["n"])
    env.run()
    assert [v for _, v, _ in contents(follower)][-1] == b"n" and follower.log_end_offset == 7


def test_out_of_range_low_restarts_at_leader_start_as_retention_moves(env):
    leader = env.leader_log()
    for i in range(10):
        env.leader.append(TP, [i])  # one batch per record: retention stays batch-aligned
    leader.maybe_increment_log_start_offset(5)
    follower = env.follower_log()
    env.add()
    env.run()  # fetch 0 < leader start 5: OUT_OF_RANGE -> start over at 5
    assert follower.log_start_offset == 5 and follower.log_end_offset == 5
    assert env.state().fetch_offset == 5 and env.state().lag == 5
    # Retention moves on before the next fetch: out of range again, start over at 8.
    leader.maybe_increment_log_start_offset(8)
    env.run()
    assert follower.log_start_offset == 8 and follower.log_end_offset == 8
    env.run()
    assert contents(follower) == contents(leader) and contents(follower)[0][0] == 8
    assert [c[0] for c in env.leader.list_offset_calls] == ["latest", "earliest"] * 2


def test_leader_start_inside_a_batch_restarts_empty_follower_log_at_batch_base(env):
    leader = env.leader_log()
    env.leader.append(TP, range(10))  # one batch 0..9
    leader.maybe_increment_log_start_offset(5)
    follower = env.follower_log()
    env.add()
    env.run()  # out of range: the follower log restarts empty at 5
    assert (follower.log_start_offset, follower.log_end_offset) == (5, 5)
    env.run()  # the fetch at 5 returns the whole batch 0..9
    assert follower.log_end_offset == 10 and TP not in env.failed
    assert follower.log_start_offset == 5  # raised to the leader's again (rule 27)
    assert env.state().fetch_offset == 10


def test_out_of_range_low_when_retention_moves_between_list_offsets_and_fetch(env):
    leader = env.leader_log()
    env.leader.append(TP, range(10))
    leader.maybe_increment_log_start_offset(3)
    follower = env.follower_log()
    env.add()
    env.leader.after_earliest = lambda tp: leader.maybe_increment_log_start_offset(6)
    env.run()
    assert follower.log_start_offset == 3  # reset to the start the leader reported
    env.leader.after_earliest = None
    env.run(3)
    assert follower.log_start_offset == 6
    assert contents(follower) == contents(leader)


def test_fenced_while_resolving_out_of_range_fails_partition(env):
    leader = env.leader_log()
    env.leader.append(TP, range(10))
    leader.maybe_increment_log_start_offset(5)
    env.follower_log()
    env.add()

    def fence(tp):
        env.leader.partitions[TP].leader_epoch = 1  # a new leader epoch: this call is fenced

    env.leader.before_list_offsets = fence
    env.run()
    assert TP in env.failed and env.state() is None


# --- partition management (rule 23) -----------------------------------------------------------


def test_readding_at_same_epoch_keeps_state_new_epoch_resets(env):
    env.leader_log()
    env.leader.append(TP, range(4))
    follower = env.follower_log()
    env.add()
    env.run()
    before = env.state()
    assert before.fetch_offset == 4
    env.thread.add_partitions({TP: InitialFetchState(LEADER_ID, 0, 0)})
    assert env.state() == before
    env.thread.add_partitions({TP: InitialFetchState(LEADER_ID, 1, follower.log_end_offset)})
    st = env.state()
    assert (st.current_leader_epoch, st.fetch_offset, st.state, st.last_fetched_epoch) == \
        (1, 4, ReplicaState.FETCHING, 0)


def test_add_with_epoch_starts_fetching_without_epoch_truncating(env):
    env.leader_log()
    with_epoch = env.follower_log(TP)
    append(with_epoch, 3, range(2))
    env.follower_log(TP1)
    env.add(TP)
    env.add(TP1)
    assert env.state(TP).state is ReplicaState.FETCHING and env.state(TP).last_fetched_epoch == 3
    assert env.state(TP1).state is ReplicaState.TRUNCATING and env.state(TP1).last_fetched_epoch is None
    assert env.thread.partition_count == 2
    removed = env.thread.remove_partitions([TP, TopicPartition("other", 0)])
    assert set(removed) == {TP} and env.thread.partition_count == 1


def test_negative_initial_offset_asks_the_leader(env):
    env.leader_log()
    env.leader.append(TP, range(6))
    follower = env.follower_log()
    env.thread.add_partitions({TP: InitialFetchState(LEADER_ID, 0, -1)})
    assert env.state().fetch_offset == 0 and env.state().lag == 6
    env.run()
    assert follower.log_end_offset == 6


# --- push replication extension point ---------------------------------------------------------


def test_switch_to_push_pauses_fetching_until_resumed(env):
    env.leader_log()
    env.leader.append(TP, range(3))
    follower = env.follower_log()
    env.add()
    env.run()
    env.leader.append(TP, range(2))
    env.leader.partitions[TP].push_session = 7
    env.run()
    assert follower.log_end_offset == 5  # the records of the switching response are appended
    st = env.state()
    assert st.state is ReplicaState.PUSHING and st.push_session_id == 7
    assert not st.is_ready_for_fetch(env.clock.now) and not st.is_truncating(env.clock.now)
    assert env.switched == [(TP, 7)]
    n = len(env.leader.fetch_requests)
    env.run()
    assert len(env.leader.fetch_requests) == n  # pushed, not fetched
    env.leader.append(TP, ["p"])
    assert env.thread.resume_fetching(TP, follower.log_end_offset)
    assert env.state().state is ReplicaState.FETCHING and env.state().push_session_id == 7
    env.run()
    assert follower.log_end_offset == 6
    assert env.leader.fetch_requests[-1].partitions[TP].push_session_id == 7
    assert env.thread.resume_fetching(TP, follower.log_end_offset, session_id=8)
    assert env.state().push_session_id == 8
    assert not env.thread.resume_fetching(TP1, 0)


# --- fetcher id (rule 22) ---------------------------------------------------------------------


def test_java_string_hashcode_known_values():
    assert java_string_hashcode("test") == 3556498
    assert java_string_hashcode("") == 0
    assert java_string_hashcode("hello") == 99162322
    assert java_string_hashcode("polygenelubricants") == -2**31  # Integer.MIN_VALUE
    assert java_string_hashcode("\U0001F600") == 1772899  # UTF-16 surrogate pair D83D DE00
    with pytest.raises(TypeError):
        java_string_hashcode(b"test")


def test_fetcher_id_formula():
    assert kafka_abs(-5) == 5 and kafka_abs(-2**31) == 0 and kafka_abs(2**31) == 0
    # 31 * 3556498 + p = 110251438 + p
    assert [fetcher_id_for(TopicPartition("test", p), 4) for p in range(4)] == [2, 3, 0, 1]
    assert fetcher_id_for(TopicPartition("test", 0), 1) == 0
    # 31 * MIN_VALUE overflows back to MIN_VALUE; Utils.abs maps it to 0 (a naive abs gives 2).
    assert fetcher_id_for(TopicPartition("polygenelubricants", 0), 3) == 0
    with pytest.raises(InvalidConfigurationError):
        fetcher_id_for(TP, 0)


def test_config_defaults_and_bad_values():
    cfg = FetcherConfig.from_mapping({})
    assert (cfg.num_replica_fetchers, cfg.replica_fetch_wait_max_ms, cfg.replica_fetch_min_bytes,
            cfg.replica_fetch_max_bytes, cfg.replica_fetch_response_max_bytes,
            cfg.replica_fetch_backoff_ms, cfg.replica_socket_timeout_ms) == \
        (1, 500, 1, 1 << 20, 10 << 20, 1000, 30000)
    assert FetcherConfig.from_mapping({"fetch.min.bytes": 7}).replica_fetch_min_bytes == 7
    with pytest.raises(InvalidConfigurationError) as e:
        FetcherConfig.from_mapping({"num.replica.fetchers": 0})
    assert e.value.key == "num.replica.fetchers"
    with pytest.raises(InvalidConfigurationError) as e:
        FetcherConfig.from_mapping({"replica.fetch.backoff.ms": "1000"})
    assert e.value.key == "replica.fetch.backoff.ms"
    with pytest.raises(InvalidConfigurationError) as e:
        FetcherConfig.from_mapping({"replica.socket.timeout.ms": 100})
    assert e.value.key == "replica.socket.timeout.ms"
    with pytest.raises(InvalidConfigurationError):
        FetcherConfig.from_mapping(["num.replica.fetchers"])


# --- manager ----------------------------------------------------------------------------------


def _two_partitions_on_two_fetchers() -> tuple[TopicPartition, TopicPartition]:
    a = TopicPartition("test", 0)  # fetcher 0 of 2 (110251438 % 2)
    b = TopicPartition("test", 1)  # fetcher 1
    assert (fetcher_id_for(a, 2), fetcher_id_for(b, 2)) == (0, 1)
    return a, b


def test_manager_groups_by_leader_and_fetcher_and_moves_on_leader_change(logs):
    a, b = _two_partitions_on_two_fetchers()
    leaders = {1: LeaderDouble(1), 3: LeaderDouble(3)}
    follower_logs = {}
    for tp in (a, b):
        for lid, lead in leaders.items():
            lead.add(tp, logs.new(f"leader{lid}-{tp.partition}"), 0)
        follower_logs[tp] = logs.new(f"follower-{tp.partition}")
    leaders[1].append(a, range(3))
    created = []

    def factory(leader_id, fetcher_id):
        created.append((leader_id, fetcher_id))
        return leaders[leader_id]

    clock = ManualClock()
    mgr = ReplicaFetcherManager(FOLLOWER_ID, {"num.replica.fetchers": 2}, factory,
                                LogReplicaOps(follower_logs.get), clock=clock, start_threads=False)
    mgr.add_fetcher_for_partitions({a: InitialFetchState(1, 0, 0), b: InitialFetchState(1, 0, 0)})
    assert set(mgr.fetcher_threads) == {(1, 0), (1, 1)}
    assert mgr.fetcher_for(a) is mgr.fetcher_threads[(1, 0)]
    mgr.fetcher_for(a).do_work()
    assert follower_logs[a].log_end_offset == 3

    # Leader of `a` moves to broker 3 at epoch 1: it leaves thread (1, 0) for (3, 0).
    leaders[3].partitions[a].leader_epoch = 1
    mgr.add_fetcher_for_partitions({a: InitialFetchState(3, 1, 3)})
    assert mgr.fetcher_threads[(1, 0)].partition_count == 0
    assert mgr.fetcher_for(a) is mgr.fetcher_threads[(3, 0)]
    assert mgr.fetcher_for(a).fetch_state(a).current_leader_epoch == 1
    assert created == [(1, 0), (1, 1), (3, 0)]
    mgr.shutdown_idle_fetcher_threads()
    assert set(mgr.fetcher_threads) == {(1, 1), (3, 0)}
    assert leaders[1].closed  # the idle thread closed its end point

    removed = mgr.remove_fetcher_for_partitions([a, b])
    assert set(removed) == {a, b} and removed[a].current_leader_epoch == 1
    assert mgr.fetcher_for(a) is None
    mgr.close_all_fetchers()
    assert mgr.fetcher_threads == {}
    with pytest.raises(IllegalStateError):
        mgr.add_fetcher_for_partitions({a: InitialFetchState(1, 0, 0)})


def test_manager_rejects_bad_initial_state(logs):
    mgr = ReplicaFetcherManager(FOLLOWER_ID, {}, lambda l, f: LeaderDouble(l),
                                LogReplicaOps(lambda tp: None), start_threads=False)
    with pytest.raises(TypeError, match="InitialFetchState"):
        mgr.add_fetcher_for_partitions({TP: (1, 0, 0)})
    mgr.close_all_fetchers()


# --- threaded run -----------------------------------------------------------------------------


def wait_until(predicate, timeout_s: float = 10.0, what: str = "condition") -> None:
    done = threading.Event()
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        done.wait(0.005)


def test_threaded_follower_catches_up_with_long_polling_leader(logs):
    leader_double = LeaderDouble(long_poll=True)
    leader = logs.new("leader-0")
    leader_double.add(TP, leader, 0)
    follower = logs.new("follower-0")
    mgr = ReplicaFetcherManager(FOLLOWER_ID, {"replica.fetch.backoff.ms": 10},
                                lambda l, f: leader_double, LogReplicaOps({TP: follower}.get))
    try:
        mgr.add_fetcher_for_partitions({TP: InitialFetchState(LEADER_ID, 0, 0)})
        thread = mgr.fetcher_for(TP)
        assert thread.is_alive()
        for i in range(5):
            leader_double.append(TP, [f"m{i}-{j}" for j in range(10)])
            target = leader.log_end_offset
            wait_until(lambda target=target: follower.log_end_offset == target and follower.high_watermark == target,
                       what=f"follower to reach {target}")
        assert contents(follower) == contents(leader)
        # Parked fetches, not a spin: a handful of requests per append.
        assert len(leader_double.fetch_requests) < 50
    finally:
        mgr.close_all_fetchers()
    assert not thread.is_alive() and thread.failure is None


# --- RemoteLeaderEndPoint over the real transport ---------------------------------------------


def test_remote_leader_end_point_over_transport():
    transport = Transport()
    seen = []

    def handler(source, body, respond):
        seen.append((source, body))
        if isinstance(body, FetchRequest):
            respond({tp: FetchPartitionResponse(high_watermark=5) for tp in body.partitions})
        elif isinstance(body, OffsetsForLeaderEpochRequest):
            respond({tp: EpochEndOffset(Errors.NONE, 1, 9) for tp in body.partitions})
        elif isinstance(body, ListOffsetsRequest):
            (tp, ts, epoch), = body.partitions
            if epoch != 3:
                respond({tp: ListOffsetsPartitionResponse(error=Errors.FENCED_LEADER_EPOCH)})
            else:
                respond({tp: ListOffsetsPartitionResponse(offset=-ts * 10, leader_epoch=3)})

    transport.register(LEADER_ID, handler)
    ep = RemoteLeaderEndPoint(FOLLOWER_ID, lambda: 42, LEADER_ID, transport, {})
    try:
        states = {
            TP: PartitionFetchState(7, None, 3, None, ReplicaState.FETCHING, 2),
            TP1: PartitionFetchState(0, None, 3, None, ReplicaState.TRUNCATING, None),
        }
        req = ep.build_fetch(states, {TP: 4})
        assert (req.replica_id, req.replica_epoch, req.max_wait_ms, req.min_bytes, req.max_bytes,
                req.isolation_level) == (FOLLOWER_ID, 42, 500, 1, 10 << 20, IsolationLevel.LOG_END)
        assert list(req.partitions) == [TP]  # only fetching partitions
        p = req.partitions[TP]
        assert (p.fetch_offset, p.current_leader_epoch, p.last_fetched_epoch, p.log_start_offset,
                p.max_bytes) == (7, 3, 2, 4, 1 << 20)
        assert ep.build_fetch({TP1: states[TP1]}) is None
        assert ep.fetch(req)[TP].high_watermark == 5
        assert ep.fetch_epoch_end_offsets({TP: OffsetForLeaderPartition(3, 1)}) == \
            {TP: EpochEndOffset(Errors.NONE, 1, 9)}
        assert ep.fetch_epoch_end_offsets({}) == {}
        assert ep.fetch_earliest_offset(TP, 3) == (3, 20)  # EARLIEST_TIMESTAMP = -2
        assert ep.fetch_latest_offset(TP, 3) == (3, 10)  # LATEST_TIMESTAMP = -1
        with pytest.raises(LeaderResponseError) as e:
            ep.fetch_latest_offset(TP, 2)
        assert e.value.error is Errors.FENCED_LEADER_EPOCH
        assert all(src == FOLLOWER_ID for src, _ in seen)

        transport.unregister(LEADER_ID)
        with pytest.raises(TransportError):
            ep.fetch(req)
        # A failed epoch request becomes an error for each partition (then retried).
        out = ep.fetch_epoch_end_offsets({TP: OffsetForLeaderPartition(3, 1)})
        assert out[TP].error != Errors.NONE
        ep.close()
        with pytest.raises(TransportError):
            ep.fetch(req)
    finally:
        transport.close()


def test_closing_the_end_point_closes_its_fetch_session_even_one_opened_late():
    """close() sends FINAL_EPOCH for the session the leader opened; a session whose opening
    answer arrives after close() (no fetch will ever use it) is closed as soon as it arrives.
    The leader is a stand-in here: only it can hold an answer back past the close."""
    transport = Transport()
    closes, held = [], []

    def leader(source, body, respond):
        if body.session_epoch == FINAL_EPOCH:
            closes.append((body.session_id, dict(body.partitions)))
            respond(FetchResponse())
        elif len(held) == 0:
            respond(FetchResponse({TP: FetchPartitionResponse()}, session_id=11))
            held.append(None)
        else:
            held.append(respond)  # answered by the test, after close()

    transport.register(LEADER_ID, leader)
    states = {TP: PartitionFetchState(0, None, 0, None, ReplicaState.FETCHING, 0)}
    try:
        ep = RemoteLeaderEndPoint(FOLLOWER_ID, lambda: 1, LEADER_ID, transport, {})
        ep.fetch(ep.build_fetch(states))
        ep.close()
        assert closes == [(11, {})]

        late = RemoteLeaderEndPoint(FOLLOWER_ID, lambda: 1, LEADER_ID, transport, {})
        errors = []
        fetching = threading.Thread(target=lambda: errors.append(_raises(lambda: late.fetch(late.build_fetch(states)))))
        fetching.start()
        wait_until(lambda: len(held) == 2, what="the session-opening fetch held by the leader")
        late.close()
        fetching.join(5)
        assert errors == [TransportError]
        assert closes == [(11, {})]  # the leader has opened nothing for it yet
        held[1](FetchResponse({TP: FetchPartitionResponse()}, session_id=12))
        assert closes == [(11, {}), (12, {})]
    finally:
        transport.close()


def _raises(call):
    try:
        call()
    except Exception as e:  # noqa: BLE001 - the test compares the type
        return type(e)
    return None


def test_shutdown_does_not_wait_for_a_lost_fetch(logs):
    """A fetch dropped on the way never gets an answer; shutdown must not wait for the socket
    timeout (30 s here): initiate_shutdown fails the request in flight."""
    plan = FaultPlan(seed=1)
    plan.set(FOLLOWER_ID, LEADER_ID, LinkFaults(drop_probability=1.0))
    transport = Transport(plan)
    handled = threading.Event()
    transport.register(LEADER_ID, lambda source, body, respond: handled.set())
    follower = logs.new("follower-0")
    ep = RemoteLeaderEndPoint(FOLLOWER_ID, lambda: 1, LEADER_ID, transport, {})
    thread = ReplicaFetcherThread("fetcher-lost", 0, ep, LogReplicaOps({TP: follower}.get), {})
    thread.add_partitions({TP: InitialFetchState(LEADER_ID, 0, 0, last_fetched_epoch=0)})
    try:
        thread.start()
        # Wait until the fetch is out (dropped, so it is never handled and never answered).
        wait_until(lambda: ep.requests_in_flight == 1, what="a fetch in flight")
        assert not handled.is_set()
        assert thread.shutdown(timeout_s=5.0)
        assert thread.failure is None
        with pytest.raises(TransportError, match="closed"):
            ep.fetch_latest_offset(TP, 0)
    finally:
        thread.shutdown(timeout_s=5.0)
        transport.close()


def test_log_replica_ops_missing_log_is_a_storage_error(logs):
    ops = LogReplicaOps(lambda tp: None)
    assert isinstance(ops, FollowerReplicaOps)
    assert not ops.is_present(TP)
    with pytest.raises(KafkaStorageError, match="t-0"):
        ops.log_end_offset(TP)
    assert issubclass(LeaderResponseError, ReplicationError)
