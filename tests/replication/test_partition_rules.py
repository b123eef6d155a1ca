"""Leader-side replication rules (14, 16-21) on a real `Partition` over a real `Log`, with the
real `Controller` answering ISR changes and a manual clock, so each rule's breaking fails a
test; and two cluster-level rules (parked fetch wake-up, power cut) on a real LocalCluster."""

import threading

import pytest

from replication.cluster import LocalCluster
from replication.controller import Controller
from replication.log import Log
from replication.partition import Partition
from replication.protocol import (
    EARLIEST_TIMESTAMP,
    LATEST_TIMESTAMP,
    Errors,
    FetchPartition,
    IsolationLevel,
    TopicPartition,
)
from replication.records import encode_batch

TP = TopicPartition("t", 0)
LAG_MS = 10_000
T0 = 1_000_000


def batch(*values):
    return encode_batch([(None, v, 1000) for v in values])


class Setup:
    """A controller with brokers 0-2 alive and topic t (RF 3), and the leader's `Partition`
    built on a real log; the clock only moves when a test moves it."""

    def __init__(self, tmp_path, min_isr=1, prepare_log=None, leader_change=False):
        (tmp_path / "meta").mkdir()
        self.controller = Controller(tmp_path / "meta", [0, 1, 2])
        for b in range(3):
            self.controller.broker_started(b)
        self.controller.create_topic("t", 1, 3, {})
        if leader_change:
            # The first leader goes away (new leader, epoch 1, the old one out of the ISR)
            # and comes back as a live follower outside the ISR.
            first = self.controller.partition_state(TP).leader
            self.controller.broker_stopped(first)
            self.controller.broker_started(first)
        state = self.controller.partition_state(TP)
        self.leader_id = state.leader
        self.followers = [b for b in state.replicas if b != self.leader_id]
        self.now = T0
        self.log = Log(tmp_path / "t-0")
        if prepare_log is not None:
            prepare_log(self.log)
        self.partition = Partition(
            TP, self.leader_id, self.log,
            {"min.insync.replicas": min_isr, "replica.lag.time.max.ms": LAG_MS},
            self.controller.alter_partition, lambda b: b in self.controller.live_brokers,
            clock_ms=lambda: self.now)
        self.controller.register_listener(self.leader_id, self._apply)
        self.partition.make_leader(state.leader_epoch, state.partition_epoch, state.replicas, state.isr)

    def _apply(self, broker_id, tp, state, info):
        if state.leader == self.leader_id:
            self.partition.make_leader(state.leader_epoch, state.partition_epoch, state.replicas, state.isr)

    def controller_isr(self):
        return sorted(self.controller.partition_state(TP).isr)

    def fetch(self, replica_id, offset):
        p = self.partition
        return p.fetch_records(FetchPartition(offset, current_leader_epoch=p.leader_epoch), replica_id, 1,
                               IsolationLevel.HIGH_WATERMARK, 1 << 20)

    def append(self, *values, acks=1):
        return self.partition.append_records_to_leader(batch(*values), acks)

    def close(self):
        self.log.close()


@pytest.fixture
def setups():
    made = []
    yield made
    for s in made:
        s.close()


def make(setups, tmp_path, **kwargs):
    s = Setup(tmp_path, **kwargs)
    setups.append(s)
    return s


# -- rule 14 ----------------------------------------------------------------------------------------


def test_fetch_from_a_replica_id_not_hosting_the_partition_gets_unknown_leader_epoch(tmp_path, setups):
    s = make(setups, tmp_path)
    s.append(b"a", b"b")
    stranger = 7
    resp = s.fetch(stranger, 0)
    assert resp.error is Errors.UNKNOWN_LEADER_EPOCH
    assert len(resp.records) == 0 and stranger not in s.partition.remote_replicas
    # A replica of the partition and a consumer are served from the same offset.
    assert s.fetch(s.followers[0], 0).error is Errors.NONE
    consumer = s.fetch(-1, 0)
    assert consumer.error is Errors.NONE and consumer.high_watermark == 0


# -- rule 16 ----------------------------------------------------------------------------------------


def test_a_new_leader_counts_isr_followers_caught_up_from_now_and_others_never(tmp_path, setups):
    # After the leader change, the old leader is alive but outside the ISR.
    s = make(setups, tmp_path, leader_change=True)
    [in_isr] = [b for b in s.followers if b in s.partition.isr]
    [outside] = [b for b in s.followers if b not in s.partition.isr]
    assert s.partition.remote_replicas[in_isr].last_caught_up_time_ms == T0
    assert s.partition.remote_replicas[outside].last_caught_up_time_ms == 0
    # The ISR follower has not fetched yet: it keeps its place for the whole lag time...
    s.now = T0 + LAG_MS
    assert not s.partition.maybe_shrink_isr()
    assert s.controller_isr() == sorted([s.leader_id, in_isr])
    # ...and loses it once the lag time passed without a fetch.
    s.now = T0 + LAG_MS + 1
    assert s.partition.maybe_shrink_isr()
    assert s.controller_isr() == [s.leader_id]


# -- rule 17 ----------------------------------------------------------------------------------------


def test_a_follower_reaching_the_leo_of_its_previous_fetch_was_caught_up_at_that_fetch(tmp_path, setups):
    s = make(setups, tmp_path)
    f, other = s.followers
    s.append(b"0", b"1", b"2", b"3", b"4")
    # Fetch 1 at T0+5000: offset 0 while the leader's LEO is 5 (not caught up).
    s.now = T0 + 5000
    assert s.fetch(f, 0).error is Errors.NONE
    assert s.partition.remote_replicas[f].last_caught_up_time_ms == T0  # still make_leader's time
    s.append(b"5", b"6", b"7")
    # Fetch 2 at T0+6000: offset 5, short of the LEO 8 but at the LEO fetch 1 saw.
    s.now = T0 + 6000
    assert s.fetch(f, 5).error is Errors.NONE
    assert s.partition.remote_replicas[f].last_caught_up_time_ms == T0 + 5000
    # The other follower keeps up so that only `f` is judged.
    assert s.fetch(other, 8).error is Errors.NONE
    # Caught up as of fetch 1: still in the ISR a lag time after make_leader...
    s.now = T0 + 5000 + LAG_MS
    assert not s.partition.maybe_shrink_isr()
    assert f in s.controller_isr()
    # ...and out a lag time after fetch 1.
    s.now = T0 + 5000 + LAG_MS + 1
    assert s.partition.maybe_shrink_isr()
    assert s.controller_isr() == sorted([s.leader_id, other])


# -- rule 18 ----------------------------------------------------------------------------------------


def _three_records_at_epoch_0_hw_2(lg):
    lg.append_as_leader(batch(b"a", b"b", b"c"), 0)
    lg.maybe_increment_high_watermark(2)


def test_isr_expansion_needs_the_follower_past_the_leader_epoch_start(tmp_path, setups):
    s = make(setups, tmp_path, prepare_log=_three_records_at_epoch_0_hw_2, leader_change=True)
    p = s.partition
    [outside] = [b for b in s.followers if b not in p.isr]
    assert p.leader_epoch == 1 and p.leader_epoch_start_offset == 3 and s.log.high_watermark == 2
    # At the HW but short of the epoch start: not in sync with this leader's epoch yet.
    assert s.fetch(outside, 2).error is Errors.NONE
    assert outside not in p.isr and outside not in s.controller_isr()
    # At the epoch start: it joins.
    assert s.fetch(outside, 3).error is Errors.NONE
    assert outside in p.isr and outside in s.controller_isr()


def test_a_new_leader_answers_no_end_offset_until_its_high_watermark_reaches_its_epoch_start(tmp_path, setups):
    # Kafka's Partition.fetchOffsetForTimestamp: the new leader (epoch 1, from offset 3) holds a
    # high watermark of 2, behind what the previous leader may have acknowledged; an end offset
    # read from it would be too small (a changelog's restore would stop short of it).
    s = make(setups, tmp_path, prepare_log=_three_records_at_epoch_0_hw_2, leader_change=True)
    p = s.partition
    [in_isr] = [b for b in s.followers if b in p.isr]
    assert p.leader_epoch == 1 and p.leader_epoch_start_offset == 3 and s.log.high_watermark == 2

    def answer(timestamp, replica_id=-1, isolation=IsolationLevel.HIGH_WATERMARK):
        error, _ts, offset, _epoch = p.list_offset(timestamp, p.leader_epoch, replica_id, isolation)
        return error, offset

    for isolation in (IsolationLevel.HIGH_WATERMARK, IsolationLevel.TXN_COMMITTED):
        assert answer(LATEST_TIMESTAMP, isolation=isolation) == (Errors.OFFSET_NOT_AVAILABLE, -1)
    # A lookup past the high watermark is not answered either; one below it is.
    assert answer(1001) == (Errors.OFFSET_NOT_AVAILABLE, -1)
    assert answer(1000) == (Errors.NONE, 0)
    # The log start, and a replica's own view (its log end), are answered as always.
    assert answer(EARLIEST_TIMESTAMP) == (Errors.NONE, 0)
    assert answer(LATEST_TIMESTAMP, replica_id=in_isr) == (Errors.NONE, 3)
    # The ISR follower reaches the epoch start: the high watermark follows, the end is known.
    assert s.fetch(in_isr, 3).error is Errors.NONE
    assert s.log.high_watermark == 3
    assert answer(LATEST_TIMESTAMP) == (Errors.NONE, 3)
    assert answer(1001) == (Errors.NONE, -1)


# -- rule 19 ----------------------------------------------------------------------------------------


def test_high_watermark_is_frozen_while_the_isr_is_below_min_insync_replicas(tmp_path, setups):
    s = make(setups, tmp_path, min_isr=2)
    p = s.partition
    # Nobody fetched for a lag time: the ISR shrinks to the leader alone (below min.insync 2).
    s.now = T0 + LAG_MS + 1
    assert p.maybe_shrink_isr() and s.controller_isr() == [s.leader_id]
    s.append(b"a", b"b")  # acks=1 still appends
    assert s.log.log_end_offset == 2
    assert s.log.high_watermark == 0
    # A follower at the LEO rejoins: ISR 2 >= min.insync, the HW moves to it.
    f = s.followers[0]
    assert s.fetch(f, 2).error is Errors.NONE
    assert s.controller_isr() == sorted([s.leader_id, f])
    assert s.log.high_watermark == 2


# -- rule 20 ----------------------------------------------------------------------------------------


def test_acks_all_covered_by_the_hw_after_the_isr_shrank_below_min_isr_is_not_enough_replicas(tmp_path, setups):
    s = make(setups, tmp_path, min_isr=2)
    p = s.partition
    info = s.append(b"a", acks=-1)
    required = info.last_offset + 1
    assert p.check_enough_replicas_reach_offset(required) == (False, Errors.NONE)
    for f in s.followers:
        s.fetch(f, required)
    assert s.log.high_watermark == required
    # Before the acks=all produce is checked again, the followers fall behind a later append
    # and the ISR shrinks below min.insync.replicas.
    s.append(b"b")
    s.now = T0 + LAG_MS + 1
    assert p.maybe_shrink_isr() and s.controller_isr() == [s.leader_id]
    assert p.check_enough_replicas_reach_offset(required) == (True, Errors.NOT_ENOUGH_REPLICAS_AFTER_APPEND)


def test_acks_all_covered_by_the_hw_with_enough_replicas_succeeds(tmp_path, setups):
    s = make(setups, tmp_path, min_isr=2)
    info = s.append(b"a", acks=-1)
    for f in s.followers:
        s.fetch(f, info.last_offset + 1)
    assert s.partition.check_enough_replicas_reach_offset(info.last_offset + 1) == (True, Errors.NONE)


# -- rule 21 (cluster) ------------------------------------------------------------------------------


LONG_POLL = {
    "replica.fetch.backoff.ms": 20,
    "replica.lag.time.max.ms": 120_000,
    # Parked fetches wait up to 60 s: only a wake-up on the append delivers them in time.
    "replica.fetch.wait.max.ms": 60_000,
    "replica.socket.timeout.ms": 90_000,
}


def test_parked_follower_fetches_complete_on_a_leader_append(tmp_path):
    with LocalCluster(tmp_path / "c", num_brokers=3, config=LONG_POLL) as cluster:
        cluster.create_topic("t", partitions=1, replication_factor=3)
        leader = cluster.leader("t", 0)
        followers = [b for b in range(3) if b != leader]
        rm = cluster.brokers[leader].replica_manager
        # Both followers are caught up (nothing to read): their fetches park at the leader.
        cluster.wait_until(lambda: rm.parked_fetches(TP) == 2, 10, "both follower fetches parked")
        assert cluster.produce("t", 0, batch(b"wake"), acks=1).error is Errors.NONE
        # The deadline is a sixth of the fetch max wait: only the append's wake-up meets it.
        cluster.wait_until(lambda: all(cluster.log_end_offset(f, "t", 0) == 1 for f in followers), 10,
                           "followers fetched the append")


def test_parked_consumer_fetch_completes_on_a_leader_append(tmp_path):
    # One replica: the append moves the HW at once, and no follower fetch can wake the consumer.
    with LocalCluster(tmp_path / "c", num_brokers=1, config=LONG_POLL) as cluster:
        cluster.create_topic("t", partitions=1, replication_factor=1)
        purgatory = cluster.brokers[0].replica_manager.fetch_purgatory
        result = {}
        done = threading.Event()

        def poll():
            result["resp"] = cluster.fetch("t", 0, 0, max_wait_ms=60_000)
            done.set()

        t = threading.Thread(target=poll, daemon=True)
        t.start()
        cluster.wait_until(lambda: purgatory.watched(TP) == 1, 10, "consumer fetch parked")
        assert not done.is_set()
        assert cluster.produce("t", 0, batch(b"wake"), acks=1).error is Errors.NONE
        assert done.wait(10), "the parked fetch was not completed by the append"
        assert [r.value for r in result["resp"].records.records()] == [b"wake"]
        t.join(5)


# -- crash_broker (cluster) -------------------------------------------------------------------------


def test_crash_broker_drops_records_not_yet_flushed(tmp_path):
    with LocalCluster(tmp_path / "c", num_brokers=1) as cluster:
        cluster.create_topic("t", partitions=1, replication_factor=1)
        assert cluster.produce("t", 0, batch(b"durable-1", b"durable-2"), acks=1).error is Errors.NONE
        cluster.partition_on(0, "t", 0).log.flush()
        assert cluster.produce("t", 0, batch(b"volatile"), acks=1).error is Errors.NONE
        assert cluster.log_end_offset(0, "t", 0) == 3
        cluster.crash_broker(0)
        assert cluster.leader("t", 0) == -1
        cluster.start_broker(0)
        assert cluster.leader("t", 0) == 0
        lg = cluster.partition_on(0, "t", 0).log
        assert lg.log_end_offset == 2
        assert [r.value for r in lg.read(0, 1 << 20, 2).records()] == [b"durable-1", b"durable-2"]
