"""PushManager contract (seed interface), sessions and the state machine, on a real leader log,
a real transport and a follower that appends to its own real log."""

import threading
import time

import pytest

from replication.errors import IllegalStateError
from replication.log import Log
from replication.protocol import (
    AppendRecordsBatchRequest,
    AppendRecordsBatchResponse,
    AppendRecordsResponse,
    Errors,
    TopicPartition,
)
from replication.push import (
    InvalidPushSessionError,
    InvalidPushStateTransitionError,
    PushConfig,
    PushConfigError,
    PushManager,
    PushSession,
    PushSessionEndReason,
    PushState,
    ReplicationState,
)
from replication.records import encode_batch
from replication.transport import FaultPlan, LinkFaults, Transport

TP = TopicPartition("t", 0)
TP2 = TopicPartition("t", 1)
LEADER = 0
FOLLOWER = 1


def batch(*values):
    return encode_batch([(None, v, 1000) for v in values])


def wait_for(predicate, timeout_s=10.0, what="condition"):
    cond = threading.Condition()
    deadline = time.monotonic() + timeout_s
    with cond:
        while not predicate():
            if time.monotonic() > deadline:
                raise TimeoutError(f"timed out waiting for {what}")
            cond.wait(0.002)


class Follower:
    """A follower broker stand-in: appends pushed records to real logs, checks contiguity."""

    def __init__(self, tmp_path, transport, broker_id=FOLLOWER, answer=None):
        self.logs = {}
        self.tmp_path = tmp_path
        self.requests = []
        self.ended = []
        self.answer = answer  # optional hook: (entry) -> AppendRecordsResponse | None
        self.lock = threading.RLock()
        transport.register(broker_id, self.handle)

    def log(self, tp):
        with self.lock:
            if tp not in self.logs:
                self.logs[tp] = Log(self.tmp_path / f"follower-{tp}")
            return self.logs[tp]

    def handle(self, source, body, respond):
        assert isinstance(body, AppendRecordsBatchRequest)
        out = []
        with self.lock:
            self.requests.append(body)
            for e in body.partitions:
                custom = self.answer(e) if self.answer else None
                if custom is not None:
                    out.append(custom)
                    continue
                lg = self.log(e.topic_partition)
                if e.end_session:
                    self.ended.append((e.topic_partition, e.session_id))
                    out.append(AppendRecordsResponse(log_end_offset=lg.log_end_offset))
                    continue
                if e.base_offset != lg.log_end_offset:
                    out.append(AppendRecordsResponse(Errors.OFFSET_OUT_OF_RANGE, lg.log_end_offset))
                    continue
                if e.records.size:
                    lg.append_as_follower(e.records)
                if e.high_watermark >= 0:
                    lg.maybe_update_high_watermark(e.high_watermark)
                out.append(AppendRecordsResponse(log_end_offset=lg.log_end_offset, log_start_offset=0))
        respond(AppendRecordsBatchResponse(out))

    def values(self, tp=TP):
        lg = self.log(tp)
        return [r.value for r in lg.read(0, 1 << 30).records()] if lg.log_end_offset else []


class Listener:
    def __init__(self, manager=None):
        self.manager = manager
        self.established = []
        self.progress = []
        self.failed = []
        self.acked = []

    def on_session_established(self, tp, session):
        self.established.append((tp, session))

    def on_append_records_response(self, tp, session, leo, lso, leader_leo):
        self.progress.append((tp, session.replica_id, leo, leader_leo))

    def on_push_session_failed(self, tp, session, reason):
        self.failed.append((tp, session.session_id, reason))
        self.manager.stop_push(tp, [session.replica_id], reason)

    def on_end_session_acknowledged(self, tp, session):
        self.acked.append((tp, session.session_id))


@pytest.fixture
def leader_log(tmp_path):
    lg = Log(tmp_path / "leader-t-0")
    yield lg
    lg.close()


def make_manager(transport, leader_log, config=None, listener=True):
    logs = {TP: leader_log}
    m = PushManager(LEADER, transport, dict({"push.heartbeat.interval.ms": 50,
                                             "push.follower.session.timeout.ms": 1000}, **(config or {})),
                    log_for=logs.get)
    if listener:
        m.listener = Listener(m)
    return m


def append(lg, manager, replicas, *values):
    info = lg.append_as_leader(batch(*values), 0)
    manager.on_leader_append(TP, replicas, info.first_offset, info.records)
    return info


SESSION = PushSession(leader_epoch=0, replica_epoch=1, session_id=1, replica_id=FOLLOWER)


# -- lifecycle ------------------------------------------------------------------------------------


def test_startup_and_shutdown_are_true_only_the_first_time(leader_log):
    m = make_manager(Transport(), leader_log)
    assert not m.is_active()
    assert m.startup() is True
    assert m.startup() is False
    assert m.is_active()
    assert all(p.is_alive() for p in m.pushers)
    assert m.shutdown() is True
    assert m.shutdown() is False
    assert not m.is_active()
    assert not any(p.is_alive() for p in m.pushers)
    assert m.startup() is False  # a shut-down manager cannot be restarted


def test_shutdown_evicts_every_buffer_and_counts_the_ends(leader_log):
    m = make_manager(Transport(), leader_log)  # not started: buffers fill, nothing is sent
    m.start_push(TP, SESSION, follower_log_end_offset=0)
    append(leader_log, m, {FOLLOWER}, b"a", b"b")
    assert m.buffered_bytes(TP, FOLLOWER) > 0
    assert m.shutdown() is True
    snap = m.metrics_snapshot()
    assert snap["PushManagerMemoryBytesUsed"] == 0 and snap["PushPartitionsCount"] == 0
    assert snap["PushSessionEndCount"] == {"SHUTDOWN": 1}


def test_every_push_method_raises_after_shutdown(leader_log):
    m = make_manager(Transport(), leader_log)
    m.startup()
    m.shutdown()
    calls = [
        lambda: m.start_push(TP, SESSION, follower_log_end_offset=0),
        lambda: m.on_leader_append(TP, {FOLLOWER}, 0, batch(b"x")),
        lambda: m.on_high_watermark_update(TP, {FOLLOWER}, 1),
        lambda: m.on_log_start_offset_update(TP, {FOLLOWER}, 1),
        lambda: m.stop_push(TP, {FOLLOWER}, PushSessionEndReason.SHUTDOWN),
        lambda: m.record_follower_not_caught_up(TP, FOLLOWER),
    ]
    for call in calls:
        with pytest.raises(IllegalStateError, match="shut down"):
            call()


def test_calls_for_replicas_without_a_session_are_noops(tmp_path, leader_log):
    transport = Transport()
    follower = Follower(tmp_path, transport)
    m = make_manager(transport, leader_log)
    m.startup()
    try:
        append(leader_log, m, {FOLLOWER, 2}, b"a")
        m.on_high_watermark_update(TP, {FOLLOWER}, 1)
        m.on_log_start_offset_update(TP, {FOLLOWER}, 1)
        m.stop_push(TP, {FOLLOWER}, PushSessionEndReason.FOLLOWER_NOT_CAUGHT_UP)
        m.record_follower_not_caught_up(TP, FOLLOWER)
        m.on_leader_append(TP, set(), 1, batch(b"b"))
        snap = m.metrics_snapshot()
        assert snap["PushPartitionsCount"] == 0 and snap["PushManagerMemoryBytesUsed"] == 0
        assert snap["PushSessionEndCount"] == {} and snap["StoppingPushSessionsCount"] == 0
        assert m.listener.failed == []
    finally:
        m.shutdown()
    assert follower.requests == []  # nothing was ever sent


# -- ordering and content --------------------------------------------------------------------------


def test_start_push_sends_missing_log_records_then_appends_in_order(tmp_path, leader_log):
    transport = Transport()
    follower = Follower(tmp_path, transport)
    for v in (b"0", b"1", b"2"):
        leader_log.append_as_leader(batch(v), 0)
    follower.log(TP).append_as_follower(leader_log.read(0, 1 << 20, 1))  # the follower has offset 0
    m = make_manager(transport, leader_log)
    m.start_push(TP, SESSION, follower_log_end_offset=1)
    for i in range(3, 40):
        append(leader_log, m, {FOLLOWER}, b"%d" % i)
    m.startup()
    try:
        for i in range(40, 80):
            append(leader_log, m, {FOLLOWER}, b"%d" % i)
        wait_for(lambda: follower.log(TP).log_end_offset == 80, what="follower caught up")
        assert follower.values() == [b"%d" % i for i in range(80)]
        wait_for(lambda: m.listener.established, what="session established")
        assert m.listener.established == [(TP, SESSION)]
        # progress is reported with the follower's LEO, never beyond what the leader handed over
        assert all(leo <= leader_leo for _, _, leo, leader_leo in m.listener.progress)
        assert m.listener.progress[-1][2] == 80
        assert m.metrics_snapshot()["PushManagerMemoryBytesUsed"] == 0
    finally:
        m.shutdown()


def test_appends_the_manager_was_not_told_about_are_filled_from_the_log(tmp_path, leader_log):
    transport = Transport()
    follower = Follower(tmp_path, transport)
    m = make_manager(transport, leader_log)
    m.start_push(TP, SESSION, follower_log_end_offset=0)
    append(leader_log, m, {FOLLOWER}, b"a")
    leader_log.append_as_leader(batch(b"unannounced"), 0)  # e.g. a marker written elsewhere
    append(leader_log, m, {FOLLOWER}, b"c")
    # An append already covered (re-announced) is skipped, not sent twice.
    m.on_leader_append(TP, {FOLLOWER}, 0, leader_log.read(0, 1 << 20, 1).buffer, end_offset=1)
    m.startup()
    try:
        wait_for(lambda: follower.log(TP).log_end_offset == 3, what="follower caught up")
        assert follower.values() == [b"a", b"unannounced", b"c"]
    finally:
        m.shutdown()


def test_several_partitions_share_one_request_and_hw_travels_with_it(tmp_path, leader_log):
    transport = Transport()
    follower = Follower(tmp_path, transport)
    other = Log(tmp_path / "leader-t-1")
    logs = {TP: leader_log, TP2: other}
    m = PushManager(LEADER, transport, {"push.heartbeat.interval.ms": 1000, "push.follower.session.timeout.ms": 5000},
                    log_for=logs.get)
    m.listener = Listener(m)
    m.start_push(TP, SESSION, follower_log_end_offset=0)
    m.start_push(TP2, PushSession(0, 1, 1, FOLLOWER), follower_log_end_offset=0)
    append(leader_log, m, {FOLLOWER}, b"a")
    info = other.append_as_leader(batch(b"b"), 0)
    m.on_leader_append(TP2, {FOLLOWER}, info.first_offset, info.records)
    m.on_high_watermark_update(TP, {FOLLOWER}, 1)
    m.on_log_start_offset_update(TP, {FOLLOWER}, 0)
    m.startup()
    try:
        wait_for(lambda: follower.log(TP).log_end_offset == 1 and follower.log(TP2).log_end_offset == 1,
                 what="both partitions pushed")
        first = follower.requests[0]
        assert {e.topic_partition for e in first.partitions} == {TP, TP2}
        assert [e.high_watermark for e in first.partitions if e.topic_partition == TP] == [1]
        assert follower.log(TP).high_watermark == 1
        assert m.pusher_for(FOLLOWER, TP) is m.pusher_for(FOLLOWER, TP2)  # one destination, one pusher
    finally:
        m.shutdown()
        other.close()


def test_requests_to_one_destination_are_pipelined(tmp_path, leader_log):
    plan = FaultPlan(seed=5)
    plan.set(LEADER, FOLLOWER, LinkFaults(delay_ms=30))
    transport = Transport(plan)
    follower = Follower(tmp_path, transport)
    m = make_manager(transport, leader_log, {"push.max.in.flight.requests.per.destination": 4})
    m.start_push(TP, SESSION, follower_log_end_offset=0)
    m.startup()
    try:
        wait_for(lambda: m.listener.established, what="session established")
        for i in range(30):
            append(leader_log, m, {FOLLOWER}, b"%d" % i)
            if i % 5 == 4:
                wait_for(lambda: m.pusher_for(FOLLOWER, TP).in_flight.get(FOLLOWER, 0) > 0, what="request sent")
        wait_for(lambda: follower.log(TP).log_end_offset == 30, what="follower caught up")
        assert follower.values() == [b"%d" % i for i in range(30)]
        assert m.pusher_for(FOLLOWER, TP).max_in_flight_seen > 1
        assert m.listener.failed == []
    finally:
        m.shutdown()
        transport.close()


# -- ending sessions -------------------------------------------------------------------------------


@pytest.mark.parametrize("reason", list(PushSessionEndReason))
def test_stop_push_evicts_the_buffer_and_signals_the_follower_per_reason(tmp_path, leader_log, reason):
    transport = Transport()
    follower = Follower(tmp_path, transport)
    m = make_manager(transport, leader_log)
    m.start_push(TP, SESSION, follower_log_end_offset=0)
    append(leader_log, m, {FOLLOWER}, b"a")
    assert m.buffered_bytes(TP, FOLLOWER) > 0
    m.stop_push(TP, {FOLLOWER}, reason)
    assert m.session(TP, FOLLOWER) is None and m.metrics_snapshot()["PushManagerMemoryBytesUsed"] == 0
    assert m.metrics_snapshot()["PushSessionEndCount"] == {reason.label: 1}
    assert m.metrics_snapshot()["StoppingPushSessionsCount"] == (1 if reason.send_end_session_request else 0)
    m.startup()
    try:
        if reason.send_end_session_request:
            wait_for(lambda: m.listener.acked, what="end-session acknowledged")
            assert follower.ended == [(TP, 1)] and m.listener.acked == [(TP, 1)]
            assert m.metrics_snapshot()["StoppingPushSessionsCount"] == 0
        assert follower.values() == []  # the evicted record never went out
    finally:
        m.shutdown()
    if not reason.send_end_session_request:
        assert follower.ended == []


def test_end_reasons_say_whether_the_follower_is_told():
    told = {r.name for r in PushSessionEndReason if r.send_end_session_request}
    assert told == {"FOLLOWER_NOT_CAUGHT_UP", "BUFFER_FULL", "LEADER_REPLICATION_ERROR", "SHUTDOWN"}
    assert {r.label for r in PushSessionEndReason} == {
        "NEW_LEADER_EPOCH", "FOLLOWER_NOT_CAUGHT_UP", "BUFFER_FULL", "REQUEST_NON_RETRIABLE_ERROR",
        "LEADER_REPLICATION_ERROR", "REPLICA_REMOVED", "SHUTDOWN"}


def test_buffer_full_ends_the_session(tmp_path, leader_log):
    m = make_manager(Transport(), leader_log, {"push.max.memory.buffer.bytes": 200})
    m.start_push(TP, SESSION, follower_log_end_offset=0)
    append(leader_log, m, {FOLLOWER}, b"small")
    assert m.session(TP, FOLLOWER) == SESSION
    append(leader_log, m, {FOLLOWER}, b"x" * 300)
    assert m.listener.failed == [(TP, 1, PushSessionEndReason.BUFFER_FULL)]
    assert m.session(TP, FOLLOWER) is None
    assert m.metrics_snapshot()["PushSessionEndCount"] == {"BUFFER_FULL": 1}
    assert m.metrics_snapshot()["PushManagerMemoryBytesUsed"] == 0


def test_a_rejected_request_ends_the_session_as_non_retriable(tmp_path, leader_log):
    transport = Transport()
    Follower(tmp_path, transport, answer=lambda e: AppendRecordsResponse(Errors.INVALID_PUSH_SESSION))
    m = make_manager(transport, leader_log)
    m.start_push(TP, SESSION, follower_log_end_offset=0)
    m.startup()
    try:
        wait_for(lambda: m.listener.failed, what="session failed")
        assert m.listener.failed == [(TP, 1, PushSessionEndReason.REQUEST_NON_RETRIABLE_ERROR)]
        assert m.session(TP, FOLLOWER) is None
    finally:
        m.shutdown()


def test_not_ready_is_retried_until_the_follower_takes_the_session(tmp_path, leader_log):
    transport = Transport()
    refusals = [2]

    def answer(e):
        if refusals[0] > 0:
            refusals[0] -= 1
            return AppendRecordsResponse(Errors.PUSH_SESSION_NOT_READY)
        return None

    follower = Follower(tmp_path, transport, answer=answer)
    leader_log.append_as_leader(batch(b"transition"), 0)
    m = make_manager(transport, leader_log)
    m.start_push(TP, SESSION, follower_log_end_offset=0)
    m.startup()
    try:
        wait_for(lambda: m.listener.established, what="session established")
        append(leader_log, m, {FOLLOWER}, b"next")
        wait_for(lambda: follower.log(TP).log_end_offset == 2, what="records pushed")
        assert follower.values() == [b"transition", b"next"]  # the refused records were resent once
        assert m.listener.failed == []
    finally:
        m.shutdown()


def test_an_unanswered_request_times_out_and_ends_the_session(tmp_path, leader_log):
    plan = FaultPlan(seed=1)
    plan.set(LEADER, FOLLOWER, LinkFaults(drop_probability=1.0))
    transport = Transport(plan)
    Follower(tmp_path, transport)
    m = make_manager(transport, leader_log, {"push.request.timeout.ms": 50})
    m.start_push(TP, SESSION, follower_log_end_offset=0)
    m.startup()
    try:
        wait_for(lambda: m.listener.failed, what="session failed")
        assert m.listener.failed[0][2] is PushSessionEndReason.LEADER_REPLICATION_ERROR
    finally:
        m.shutdown()


def test_record_follower_not_caught_up_ends_the_session(leader_log):
    m = make_manager(Transport(), leader_log)
    m.start_push(TP, SESSION, follower_log_end_offset=0)
    m.record_follower_not_caught_up(TP, FOLLOWER)
    assert m.listener.failed == [(TP, 1, PushSessionEndReason.FOLLOWER_NOT_CAUGHT_UP)]
    assert m.session(TP, FOLLOWER) is None


def test_start_push_twice_for_one_replica_is_refused(leader_log):
    m = make_manager(Transport(), leader_log)
    m.start_push(TP, SESSION, follower_log_end_offset=0)
    with pytest.raises(IllegalStateError, match="already has push session 1"):
        m.start_push(TP, PushSession(0, 1, 2, FOLLOWER), follower_log_end_offset=0)
    with pytest.raises(TypeError, match="PushSession"):
        m.start_push(TP2, (0, 1, 2, FOLLOWER))
    with pytest.raises(TypeError, match="PushSessionEndReason"):
        m.stop_push(TP, {FOLLOWER}, "BUFFER_FULL")
    m.shutdown()


# -- configuration, sessions, state machine ----------------------------------------------------------


def test_push_config_defaults_and_bad_values_are_named():
    cfg = PushConfig.from_mapping({})
    assert (cfg.max_threads, cfg.threads_per_remote_broker, cfg.max_memory_buffer_bytes) == (4, 1, 200 * 1024 * 1024)
    assert cfg.transition_caught_up_fetches == 2
    for bad, key in [({"push.max.threads": 0}, "push.max.threads"),
                     ({"push.max.threads": "many"}, "push.max.threads"),
                     ({"push.max.threads": 2, "push.threads.per.remote.broker": 3}, "push.threads.per.remote.broker"),
                     ({"push.max.memory.buffer.bytes": -1}, "push.max.memory.buffer.bytes"),
                     ({"push.transition.caught.up.fetches": 0}, "push.transition.caught.up.fetches"),
                     ({"push.heartbeat.interval.ms": 500, "push.follower.session.timeout.ms": 400},
                      "push.follower.session.timeout.ms"),
                     ({"push.internal.topics.enable": "maybe"}, "push.internal.topics.enable")]:
        with pytest.raises(PushConfigError, match=key.replace(".", r"\.")) as e:
            PushConfig.from_mapping(bad)
        assert e.value.key == key


def test_pushers_map_destinations_and_ids(leader_log):
    m = make_manager(Transport(), leader_log, {"push.max.threads": 4, "push.threads.per.remote.broker": 2})
    assert sorted(p.id() for p in m.pushers) == [0, 1, 2, 3]
    tps = [TopicPartition("t", p) for p in range(16)]
    used = {m.pusher_for(1, tp).id() for tp in tps}
    assert len(used) == 2  # two threads per remote broker
    assert all(m.pusher_for(1, tp) is m.pusher_for(1, tp) for tp in tps)
    m.shutdown()


def test_internal_topics_stay_on_pull_unless_configured(leader_log):
    m = make_manager(Transport(), leader_log)
    assert m.is_push_replication_supported(False, False)
    assert not m.is_push_replication_supported(True, False)
    assert not m.is_push_replication_supported(False, True)
    m2 = make_manager(Transport(), leader_log, {"push.internal.topics.enable": "true"})
    assert m2.is_push_replication_supported(True, False)


def test_push_session_rejects_bad_fields():
    assert PushSession(3, 7, 1, 2).session_id == 1
    with pytest.raises(InvalidPushSessionError, match="leader_epoch"):
        PushSession(-1, 0, 1, 2)
    with pytest.raises(InvalidPushSessionError, match="session_id"):
        PushSession(0, 0, "1", 2)
    with pytest.raises(InvalidPushSessionError, match="replica_epoch"):
        PushSession(0, None, 1, 2)


def test_replication_state_machine_transitions_are_checked():
    st = ReplicationState(1)
    assert st.state is PushState.PULL
    for bad in (st.mark_pushing, lambda: st.begin_stop(PushSessionEndReason.BUFFER_FULL), st.finish_stop):
        with pytest.raises(InvalidPushStateTransitionError, match="PULL"):
            bad()
    s1 = st.begin_session(leader_epoch=4, replica_epoch=9)
    assert st.state is PushState.TRANSITIONING and s1 == PushSession(4, 9, 1, 1)
    with pytest.raises(InvalidPushStateTransitionError):
        st.begin_session(4, 9)
    st.mark_pushing()
    st.begin_stop(PushSessionEndReason.FOLLOWER_NOT_CAUGHT_UP)
    assert st.state is PushState.STOPPING and st.end_reason is PushSessionEndReason.FOLLOWER_NOT_CAUGHT_UP
    with pytest.raises(InvalidPushStateTransitionError):
        st.mark_pushing()
    st.finish_stop()
    s2 = st.begin_session(4, 9)
    assert s2.session_id == 2  # session ids only grow
    st.begin_stop(PushSessionEndReason.REQUEST_NON_RETRIABLE_ERROR)  # TRANSITIONING -> STOPPING
    st.finish_stop()
    assert st.state is PushState.PULL and st.session is None
