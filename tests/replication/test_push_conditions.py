"""The leader's push decisions (issue 8) on a real ReplicaManager, Partition, Log, Controller and
PushManager: when a follower may switch to push (in the ISR, caught up K times, buffer room),
what ends its session (an ISR shrink, a fetch for that session, not a stale fetch), and the
memory bound of the transition read."""

import threading

import pytest

from replication.controller import Controller
from replication.log import Log
from replication.partition import Partition
from replication.protocol import (
    AppendRecordsBatchRequest,
    AppendRecordsBatchResponse,
    AppendRecordsResponse,
    Errors,
    FetchPartition,
    FetchRequest,
    IsolationLevel,
    ProduceRequest,
    TopicPartition,
)
from replication.push import PushManager, PushSession, PushSessionEndReason, PushState
from replication.push.leader import PushLeader
from replication.replica_manager import ReplicaManager
from replication.transport import Transport

from test_push import batch, wait_for

TP = TopicPartition("t", 0)
T0 = 1_000_000
LAG_MS = 10_000


class HoldingFollower:
    """A follower broker that records pushed requests and never answers them, so a session
    stays in TRANSITIONING and its later appends stay buffered at the leader."""

    def __init__(self, transport, broker_id):
        self.requests = []
        self.lock = threading.Lock()
        transport.register(broker_id, self.handle)

    def handle(self, source, body, respond):
        with self.lock:
            self.requests.extend(body.partitions)

    def entries(self):
        with self.lock:
            return list(self.requests)


class Rig:
    """The leader broker of t-0 (RF 3) with push replication wired as the broker does it, and
    the controller's state applied by hand (no controller listener), on a manual clock."""

    def __init__(self, tmp_path, config=None):
        (tmp_path / "meta").mkdir()
        self.controller = Controller(tmp_path / "meta", [0, 1, 2])
        for b in range(3):
            self.controller.broker_started(b)
        self.controller.create_topic("t", 1, 3, {})
        state = self.controller.partition_state(TP)
        self.leader_id = state.leader
        self.followers = [b for b in state.replicas if b != self.leader_id]
        self.now = T0
        self.config = {"replica.lag.time.max.ms": LAG_MS, "min.insync.replicas": 1,
                       "push.request.timeout.ms": 60_000, "push.heartbeat.interval.ms": 50,
                       "push.follower.session.timeout.ms": 1000, **(config or {})}
        alive = lambda b: b in self.controller.live_brokers  # noqa: E731
        self.rm = ReplicaManager(self.leader_id, tmp_path / "leader", self.config,
                                 self.controller.alter_partition, alive)
        self.transport = Transport()
        self.holders = {f: HoldingFollower(self.transport, f) for f in self.followers}
        self.manager = PushManager(self.leader_id, self.transport, self.config,
                                   log_for=lambda tp: self.rm.logs.get(tp))
        self.leader = PushLeader(self.leader_id, self.rm, self.manager, now_ms=lambda: self.now)
        self.manager.listener = self.leader
        self.rm.on_become_leader = self.leader.on_become_leader
        lg = self.rm.get_or_create_log(TP, {})
        self.partition = Partition(TP, self.leader_id, lg, self.config, self.controller.alter_partition, alive,
                                   clock_ms=lambda: self.now)
        self.rm.partitions[TP] = self.partition
        self.manager.startup()
        self.sync()

    def sync(self):
        """Apply the controller's current state of t-0 (as its notification would)."""
        self.rm.apply_partition_state(TP, self.controller.partition_state(TP), {"config": {}})

    @property
    def leo(self):
        return self.partition.log.log_end_offset

    def fetch(self, replica_id, offset, session_id=-1, max_wait_ms=0):
        """A follower fetch; returns the partition's response, or a list that receives the
        response dict later if the fetch parked."""
        req = FetchRequest(replica_id, self.controller.broker_epochs[replica_id], max_wait_ms, 1, 1 << 20,
                           IsolationLevel.HIGH_WATERMARK,
                           {TP: FetchPartition(offset, current_leader_epoch=self.partition.leader_epoch,
                                               push_session_id=session_id)})
        out = []
        self.rm.handle_fetch(req, out.append)
        return out[0][TP] if out else out

    def produce(self, records):
        out = []
        self.rm.handle_produce(ProduceRequest(1, 30000, {TP: records}), out.append)
        assert out[0][TP].error is Errors.NONE
        return out[0][TP].base_offset

    def switch(self, f):
        """K caught-up fetches: the last one's response moves `f` to push."""
        resp = None
        for _ in range(self.manager.config.transition_caught_up_fetches):
            resp = self.fetch(f, self.leo, self.current_session_id(f))
        assert resp.switch_to_push, resp
        return resp.push_session_id

    def current_session_id(self, f):
        st = self.leader.states.get(TP, {}).get(f)
        return -1 if st is None or st.session_id == 0 else st.session_id

    def close(self):
        self.manager.shutdown()
        self.rm.shutdown()
        self.transport.close()


@pytest.fixture
def rigs():
    made = []
    yield made
    for r in made:
        r.close()


def make(rigs, tmp_path, config=None):
    r = Rig(tmp_path, config)
    rigs.append(r)
    return r


# -- entering push --------------------------------------------------------------------------------


def test_a_caught_up_follower_outside_the_isr_stays_on_pull(tmp_path, rigs):
    rig = make(rigs, tmp_path)
    f = rig.followers[0]
    # The controller saw f go away: it leaves the ISR, and while it is down it cannot rejoin.
    rig.controller.broker_stopped(f)
    rig.sync()
    assert f not in rig.partition.isr
    for _ in range(3):
        resp = rig.fetch(f, rig.leo)
        assert resp.error is Errors.NONE and not resp.switch_to_push
    assert f not in rig.partition.isr
    assert rig.leader.state_of(TP, f) is PushState.PULL and rig.manager.session(TP, f) is None
    # Back and caught up: the first fetch puts it in the ISR, K=2 in-ISR fetches switch it.
    rig.controller.broker_started(f)
    first = rig.fetch(f, rig.leo)
    assert f in rig.partition.isr and not first.switch_to_push
    second = rig.fetch(f, rig.leo)
    assert second.switch_to_push and second.push_session_id == 1
    assert rig.manager.session(TP, f).session_id == 1


def test_no_switch_to_push_without_buffer_room(tmp_path, rigs):
    payload = b"x" * 100
    rig = make(rigs, tmp_path, {"push.max.memory.buffer.bytes": len(batch(payload))})
    f1, f2 = rig.followers
    assert rig.switch(f1) == 1
    # f1's first push is never answered, so the next append stays in its buffer: full.
    wait_for(lambda: rig.holders[f1].entries(), what="the first push to f1")
    rig.produce(batch(payload))
    assert rig.manager.bytes_used == rig.manager.config.max_memory_buffer_bytes
    assert rig.manager.session(TP, f1) is not None
    for _ in range(3):
        resp = rig.fetch(f2, rig.leo)
        assert resp.error is Errors.NONE and not resp.switch_to_push
    assert rig.leader.state_of(TP, f2) is PushState.PULL and rig.manager.session(TP, f2) is None
    # f1 goes back to pulling (its session ends, its buffer is freed): now f2 may push.
    rig.fetch(f1, 0, session_id=1)
    assert rig.manager.session(TP, f1) is None and rig.manager.bytes_used == 0
    resp = rig.fetch(f2, rig.leo)
    assert resp.switch_to_push and rig.manager.session(TP, f2) is not None


# -- leaving push ---------------------------------------------------------------------------------


def test_isr_shrink_ends_the_push_session_of_a_dropped_follower(tmp_path, rigs):
    rig = make(rigs, tmp_path)
    f1, f2 = rig.followers
    assert rig.switch(f1) == 1
    wait_for(lambda: rig.holders[f1].entries(), what="the first push to f1")
    rig.produce(batch(b"a"))
    rig.fetch(f2, rig.leo)  # f2 keeps up; f1's pushes are never acknowledged
    rig.now = T0 + LAG_MS + 1
    assert rig.partition.maybe_shrink_isr()
    assert rig.partition.isr == {rig.leader_id, f2}
    # No controller notification reaches the leader here: only the shrink's own hook acts.
    assert rig.manager.session(TP, f1) is None
    assert rig.leader.state_of(TP, f1) is PushState.STOPPING
    assert rig.manager.metrics_snapshot()["PushSessionEndCount"] == {"FOLLOWER_NOT_CAUGHT_UP": 1}
    wait_for(lambda: any(e.end_session and e.session_id == 1 for e in rig.holders[f1].entries()),
             what="end-session signal to f1")


def test_a_fetch_with_an_older_session_id_does_not_end_the_current_session(tmp_path, rigs):
    rig = make(rigs, tmp_path)
    f = rig.followers[0]
    assert rig.switch(f) == 1
    # The follower left session 1 and pulls again: its fetches carry session 1.
    rig.fetch(f, rig.leo, session_id=1)
    assert rig.manager.session(TP, f) is None and rig.leader.state_of(TP, f) is PushState.PULL
    resp = rig.fetch(f, rig.leo, session_id=1)
    assert resp.switch_to_push and resp.push_session_id == 2
    # A fetch sent before the follower took session 2 (retried after a timeout) arrives late.
    stale = rig.fetch(f, rig.leo, session_id=1)
    assert stale.error is Errors.NONE and not stale.switch_to_push
    assert rig.manager.session(TP, f).session_id == 2
    assert rig.leader.state_of(TP, f) is PushState.TRANSITIONING
    # A fetch for session 2 means the follower left it.
    rig.fetch(f, rig.leo, session_id=2)
    assert rig.manager.session(TP, f) is None and rig.leader.state_of(TP, f) is PushState.PULL


def test_a_fetch_without_a_session_ends_the_current_session(tmp_path, rigs):
    rig = make(rigs, tmp_path)
    f = rig.followers[0]
    assert rig.switch(f) == 1
    rig.fetch(f, rig.leo, session_id=1)
    assert rig.fetch(f, rig.leo, session_id=1).push_session_id == 2
    # The follower's fetch state started over (no session id): it pulls, session 2 is over.
    rig.fetch(f, rig.leo, session_id=-1)
    assert rig.manager.session(TP, f) is None and rig.leader.state_of(TP, f) is PushState.PULL


def test_a_parked_fetch_completing_after_the_switch_does_not_end_the_session(tmp_path, rigs):
    rig = make(rigs, tmp_path)
    f = rig.followers[0]
    purgatory = rig.rm.fetch_purgatory
    # Fetch 1 parks (nothing to read); the follower gives up on it and fetches again.
    parked = rig.fetch(f, rig.leo, max_wait_ms=60_000)
    assert parked == [] and purgatory.watched(TP) == 1
    resp = rig.fetch(f, rig.leo)
    assert resp.switch_to_push and resp.push_session_id == 1
    # The append that the session will push also completes the old parked fetch.
    rig.produce(batch(b"a"))
    assert len(parked) == 1 and purgatory.watched(TP) == 0
    assert rig.manager.session(TP, f).session_id == 1
    assert rig.leader.state_of(TP, f) is PushState.TRANSITIONING


# -- the transition read is bounded by push.max.memory.buffer.bytes ----------------------------------


class AppendingFollower:
    """A follower broker that appends pushed records to its own real log, answers like the
    real one (gap or overlap -> OFFSET_OUT_OF_RANGE) and notes the leader's buffered bytes
    each time a request arrives."""

    def __init__(self, tmp_path, transport, broker_id, manager_ref):
        self.log = Log(tmp_path / f"follower-{broker_id}")
        self.lock = threading.Lock()
        self.manager_ref = manager_ref
        self.peak_buffered = 0
        transport.register(broker_id, self.handle)

    def handle(self, source, body, respond):
        assert isinstance(body, AppendRecordsBatchRequest)
        out = []
        with self.lock:
            self.peak_buffered = max(self.peak_buffered, self.manager_ref[0].bytes_used)
            for e in body.partitions:
                lg = self.log
                if e.end_session:
                    out.append(AppendRecordsResponse(log_end_offset=lg.log_end_offset))
                elif e.base_offset != lg.log_end_offset:
                    out.append(AppendRecordsResponse(Errors.OFFSET_OUT_OF_RANGE, lg.log_end_offset))
                else:
                    if e.records.size:
                        lg.append_as_follower(e.records)
                    out.append(AppendRecordsResponse(log_end_offset=lg.log_end_offset, log_start_offset=0))
        respond(AppendRecordsBatchResponse(out))

    def values(self):
        return [r.value for r in self.log.read(0, 1 << 30).records()] if self.log.log_end_offset else []


class FailureListener:
    def __init__(self):
        self.manager = None
        self.failed = []
        self.progress = []

    def on_session_established(self, tp, session):
        pass

    def on_append_records_response(self, tp, session, leo, lso, leader_leo):
        self.progress.append((leo, leader_leo))

    def on_push_session_failed(self, tp, session, reason):
        self.failed.append(reason)
        self.manager.stop_push(tp, [session.replica_id], reason)

    def on_end_session_acknowledged(self, tp, session):
        pass


@pytest.fixture
def push_parts(tmp_path):
    leader_log = Log(tmp_path / "leader-t-0")
    transport = Transport()
    made = []

    def build(limit):
        ref = []
        follower = AppendingFollower(tmp_path, transport, 1, ref)
        listener = FailureListener()
        m = PushManager(0, transport, {"push.max.memory.buffer.bytes": limit, "push.heartbeat.interval.ms": 20,
                                       "push.follower.session.timeout.ms": 1000},
                        log_for={TP: leader_log}.get, listener=listener)
        listener.manager = m
        ref.append(m)
        made.append((m, follower))
        return m, follower, listener

    yield leader_log, build
    for m, follower in made:
        m.shutdown()
        follower.log.close()
    transport.close()
    leader_log.close()


SESSION = PushSession(leader_epoch=0, replica_epoch=1, session_id=1, replica_id=1)


def test_a_session_starting_far_behind_buffers_no_more_than_the_budget(push_parts):
    leader_log, build = push_parts
    values = [b"%03d-" % i + b"x" * 200 for i in range(60)]
    for v in values:
        leader_log.append_as_leader(batch(v), 0)
    one = len(batch(values[0]))
    limit = 4 * one
    m, follower, listener = build(limit)
    m.start_push(TP, SESSION, follower_log_end_offset=0)
    # Only what fits was read from the log: the other ~56 batches wait there.
    assert 0 < m.bytes_used <= limit
    assert m.buffered_bytes(TP, 1) == m.bytes_used
    # An append while the session still reads from the log is read from there too, in order.
    info = leader_log.append_as_leader(batch(b"late"), 0)
    m.on_leader_append(TP, {1}, info.first_offset, info.records)
    assert m.bytes_used <= limit
    m.startup()
    wait_for(lambda: follower.log.log_end_offset == leader_log.log_end_offset, what="follower caught up")
    assert follower.values() == values + [b"late"]
    assert listener.failed == [] and m.session(TP, 1) == SESSION
    assert follower.peak_buffered <= limit
    # Acknowledgements during the backlog measured the follower against the leader's end.
    assert all(leader_leo == leader_log.log_end_offset or leo < leader_leo for leo, leader_leo in listener.progress)
    # Caught up: later appends are buffered and pushed as usual.
    info = leader_log.append_as_leader(batch(b"after"), 0)
    m.on_leader_append(TP, {1}, info.first_offset, info.records)
    wait_for(lambda: follower.values()[-1:] == [b"after"], what="append pushed")


def test_a_batch_larger_than_the_whole_budget_ends_the_session_as_buffer_full(push_parts):
    leader_log, build = push_parts
    leader_log.append_as_leader(batch(b"x" * 500), 0)
    m, follower, listener = build(100)
    m.start_push(TP, SESSION, follower_log_end_offset=0)
    assert m.bytes_used == 0
    m.startup()
    wait_for(lambda: listener.failed, what="session failed")
    assert listener.failed == [PushSessionEndReason.BUFFER_FULL]
    assert m.session(TP, 1) is None and m.bytes_used == 0


def test_a_gap_larger_than_the_budget_is_read_from_the_log_as_the_follower_acknowledges(push_parts):
    leader_log, build = push_parts
    one = len(batch(b"000-" + b"y" * 200))
    m, follower, listener = build(3 * one)
    m.start_push(TP, SESSION, follower_log_end_offset=0)
    m.startup()
    # Appends the manager is not told about, then one it is told about: the gap is filled
    # from the log, within the budget.
    values = [b"%03d-" % i + b"y" * 200 for i in range(30)]
    for v in values:
        info = leader_log.append_as_leader(batch(v), 0)
    m.on_leader_append(TP, {1}, info.first_offset, info.records)
    assert m.bytes_used <= 3 * one
    wait_for(lambda: follower.log.log_end_offset == leader_log.log_end_offset, what="follower caught up")
    assert follower.values() == values
    assert listener.failed == [] and follower.peak_buffered <= 3 * one
