"""Push replication in the embedded cluster: transitions, follower checks (epoch, session,
gaps), fallback to pull (buffer full, not caught up, errors), leader change, follower crash,
mixed push/pull, and the randomized fault workload compared with pull."""

import pytest

from fault_workload import TOPIC, check_fault_outcome, read_log, run_fault_workload
from replication.cluster import LocalCluster
from replication.protocol import (
    AppendRecordsBatchRequest,
    AppendRecordsRequest,
    Errors,
    TopicPartition,
)
from replication.push import PushState
from replication.records import EMPTY, MemoryRecords, encode_batch
from replication.transport import FaultPlan, LinkFaults

TP = TopicPartition("t", 0)
FAST = {
    "replica.fetch.backoff.ms": 20,
    "replica.lag.time.max.ms": 10000,
    "replica.socket.timeout.ms": 1000,
    "push.heartbeat.interval.ms": 50,
    "push.follower.session.timeout.ms": 500,
    "push.request.timeout.ms": 500,
}


def batch(*values):
    return encode_batch([(None, v, 1000) for v in values])


def values_on(cluster, broker, topic="t", partition=0):
    lg = cluster.partition_on(broker, topic, partition).log
    return [v for _, v in _read(lg, lg.log_end_offset)]


def _read(lg, upto):
    out, offset = [], lg.log_start_offset
    while offset < upto:
        recs = lg.read(offset, 1 << 20, upto).records()
        if not recs:
            break
        out.extend((r.offset, r.value) for r in recs)
        offset = recs[-1].offset + 1
    return out


def fetch_state(cluster, broker, tp=TP):
    thread = cluster.brokers[broker].fetcher_manager.fetcher_for(tp)
    return thread.fetch_state(tp) if thread is not None else None


def push_state(cluster, leader, follower, tp=TP):
    return cluster.brokers[leader].push.leader.state_of(tp, follower)


def wait_pushing(cluster, tp=TP, followers=None, timeout_s=20):
    """Every (given) follower is in PUSH at the leader and PUSHING at its fetcher."""
    def done():
        leader = cluster.leader(tp.topic, tp.partition)
        if leader < 0 or cluster.brokers[leader].push is None:
            return False
        fs = followers if followers is not None else [b for b in cluster.replicas(tp.topic, tp.partition)
                                                       if b != leader]
        return all(push_state(cluster, leader, f, tp) is PushState.PUSH
                   and (st := fetch_state(cluster, f, tp)) is not None and st.is_pushing for f in fs)
    cluster.wait_until(done, timeout_s, f"{tp} followers in push")


def wait_replicated(cluster, topic="t", partition=0, timeout_s=20):
    def done():
        leader = cluster.leader(topic, partition)
        if leader < 0:
            return False
        leo = cluster.log_end_offset(leader, topic, partition)
        isr = cluster.isr(topic, partition)
        return (sorted(isr) == sorted(cluster.replicas(topic, partition))
                and all(cluster.log_end_offset(b, topic, partition) == leo for b in isr)
                and cluster.high_watermark(topic, partition) == leo)
    cluster.wait_until(done, timeout_s, f"{topic}-{partition} fully replicated")


def end_counts(cluster, broker):
    return cluster.brokers[broker].push.metrics()["PushSessionEndCount"]


@pytest.fixture
def cluster(tmp_path):
    with LocalCluster(tmp_path / "c", num_brokers=3, replication="push", config=FAST) as c:
        yield c


def test_caught_up_followers_switch_to_push_and_commit_through_it(cluster):
    cluster.create_topic("t", partitions=1, replication_factor=3)
    leader = cluster.leader("t", 0)
    assert cluster.produce("t", 0, batch(b"pulled"), acks=-1).error is Errors.NONE
    wait_pushing(cluster)
    metrics = cluster.brokers[leader].push.metrics()
    assert metrics["PushPartitionsCount"] == 2 and metrics["FollowersAwaitingPushTransition"] == 0
    followers = [b for b in range(3) if b != leader]
    fetched_before = {f: fetch_state(cluster, f).fetch_offset for f in followers}
    for i in range(50):
        assert cluster.produce("t", 0, batch(b"v%d" % i), acks=-1).error is Errors.NONE
    wait_replicated(cluster)
    expected = [b"pulled"] + [b"v%d" % i for i in range(50)]
    for b in range(3):
        assert values_on(cluster, b) == expected
    # The records came by push: the followers' fetchers stayed paused where they switched.
    for f in followers:
        st = fetch_state(cluster, f)
        assert st.is_pushing and st.fetch_offset == fetched_before[f]
    # Followers learn the new high watermark by push too.
    cluster.wait_until(lambda: all(cluster.partition_on(f, "t", 0).log.high_watermark == 51 for f in followers),
                       10, "follower HW")
    assert end_counts(cluster, leader) == {}


def test_pull_remains_the_default(tmp_path):
    with LocalCluster(tmp_path / "c", num_brokers=2, config=FAST) as cluster:
        assert all(b.push is None for b in cluster.brokers.values())
        cluster.create_topic("t", partitions=1, replication_factor=2)
        assert cluster.produce("t", 0, batch(b"a"), acks=-1).error is Errors.NONE


def _send(cluster, source, destination, **fields):
    leader_part = cluster.partition_on(source, "t", 0)
    s = cluster.brokers[source].push.leader.states[TP][destination].session
    req = dict(leader_id=source, leader_epoch=leader_part.leader_epoch, replica_epoch=s.replica_epoch,
               session_id=s.session_id, topic_partition=TP, base_offset=cluster.log_end_offset(destination, "t", 0),
               records=EMPTY, high_watermark=-1, log_start_offset=-1)
    req.update(fields)
    resp = cluster.transport.request(source, destination, AppendRecordsBatchRequest(source, [AppendRecordsRequest(**req)]),
                                     5.0)
    return resp.responses[0]


def test_follower_rejects_stale_epoch_session_and_replica_epoch(cluster):
    cluster.create_topic("t", partitions=1, replication_factor=3)
    cluster.produce("t", 0, batch(b"a"), acks=-1)
    wait_pushing(cluster)
    leader = cluster.leader("t", 0)
    follower = next(b for b in range(3) if b != leader)
    epoch = cluster.partition_on(leader, "t", 0).leader_epoch
    session = cluster.brokers[leader].push.leader.states[TP][follower].session
    assert _send(cluster, leader, follower, leader_epoch=epoch - 1).error is Errors.FENCED_LEADER_EPOCH
    assert _send(cluster, leader, follower, leader_epoch=epoch + 1).error is Errors.UNKNOWN_LEADER_EPOCH
    assert _send(cluster, leader, follower, session_id=session.session_id - 1).error is Errors.INVALID_PUSH_SESSION
    assert _send(cluster, leader, follower, replica_epoch=session.replica_epoch - 1).error is Errors.INVALID_PUSH_SESSION
    other = next(b for b in range(3) if b not in (leader, follower))
    assert _send(cluster, leader, follower, leader_id=other).error is Errors.NOT_LEADER_OR_FOLLOWER
    # None of them disturbed the session.
    assert fetch_state(cluster, follower).is_pushing
    assert _send(cluster, leader, follower).error is Errors.NONE  # the genuine session still works


@pytest.mark.parametrize("shift", [1, -1], ids=["gap", "overlap"])
def test_gap_or_overlap_ends_the_session_and_the_follower_resumes_pulling(cluster, shift):
    cluster.create_topic("t", partitions=1, replication_factor=3)
    for v in (b"a", b"b"):
        cluster.produce("t", 0, batch(v), acks=-1)
    wait_pushing(cluster)
    leader = cluster.leader("t", 0)
    follower = next(b for b in range(3) if b != leader)
    leo = cluster.log_end_offset(follower, "t", 0)
    stamped = encode_batch([(None, b"bogus", 1000)], base_offset=leo + shift,
                           partition_leader_epoch=cluster.leader_epoch("t", 0))
    resp = _send(cluster, leader, follower, base_offset=leo + shift, records=MemoryRecords(stamped))
    assert resp.error is Errors.OFFSET_OUT_OF_RANGE and resp.log_end_offset == leo
    assert cluster.log_end_offset(follower, "t", 0) == leo  # nothing appended
    assert cluster.brokers[follower].push.follower.sessions_ended_by_follower == 1
    # The follower pulls again from its LEO, the leader notices, and push resumes later.
    for v in (b"c", b"d"):
        assert cluster.produce("t", 0, batch(v), acks=-1).error is Errors.NONE
    wait_replicated(cluster)
    assert values_on(cluster, follower) == [b"a", b"b", b"c", b"d"]
    wait_pushing(cluster)
    assert cluster.brokers[leader].push.leader.states[TP][follower].session_id >= 2


def test_buffer_full_falls_back_to_pull_without_losing_records(tmp_path):
    config = dict(FAST, **{"push.max.memory.buffer.bytes": 150})
    with LocalCluster(tmp_path / "c", num_brokers=3, replication="push", config=config) as cluster:
        cluster.create_topic("t", partitions=1, replication_factor=3)
        cluster.produce("t", 0, batch(b"a"), acks=-1)
        wait_pushing(cluster)
        leader = cluster.leader("t", 0)
        big = [b"%03d" % i + b"x" * 200 for i in range(20)]
        for v in big:
            assert cluster.produce("t", 0, batch(v), acks=-1).error is Errors.NONE
        wait_replicated(cluster)
        for b in range(3):
            assert values_on(cluster, b) == [b"a"] + big
        assert end_counts(cluster, leader).get("BUFFER_FULL", 0) >= 1
        # Small records fit again: the followers go back to push.
        cluster.produce("t", 0, batch(b"z"), acks=-1)
        wait_pushing(cluster)
        assert cluster.brokers[leader].push.metrics()["PushManagerMemoryBytesUsed"] <= 150


def test_leader_change_mid_push_ends_sessions_and_keeps_committed_records(cluster):
    cluster.create_topic("t", partitions=1, replication_factor=3)
    for i in range(5):
        cluster.produce("t", 0, batch(b"v%d" % i), acks=-1)
    wait_pushing(cluster)
    old = cluster.leader("t", 0)
    cluster.crash_broker(old)
    new = cluster.leader("t", 0)
    assert new not in (old, -1) and cluster.leader_epoch("t", 0) == 1
    for i in range(5, 10):
        assert cluster.produce("t", 0, batch(b"v%d" % i), acks=-1).error is Errors.NONE
    remaining = next(b for b in range(3) if b not in (old, new))
    wait_pushing(cluster, followers=[remaining])  # a fresh session under the new leader
    session = cluster.brokers[new].push.leader.states[TP][remaining].session
    assert session.leader_epoch == 1
    cluster.start_broker(old)
    for i in range(10, 15):
        assert cluster.produce("t", 0, batch(b"v%d" % i), acks=-1).error is Errors.NONE
    wait_replicated(cluster)
    wait_pushing(cluster)
    for b in range(3):
        assert values_on(cluster, b) == [b"v%d" % i for i in range(15)]


def test_follower_crash_and_restart_while_in_push(tmp_path):
    config = dict(FAST, **{"replica.lag.time.max.ms": 600})
    with LocalCluster(tmp_path / "c", num_brokers=3, replication="push", config=config) as cluster:
        cluster.create_topic("t", partitions=1, replication_factor=3)
        for i in range(10):
            cluster.produce("t", 0, batch(b"v%d" % i), acks=-1)
        wait_pushing(cluster)
        leader = cluster.leader("t", 0)
        follower = next(b for b in range(3) if b != leader)
        cluster.crash_broker(follower)
        for i in range(10, 20):
            assert cluster.produce("t", 0, batch(b"v%d" % i), acks=-1).error is Errors.NONE
        assert follower not in cluster.isr("t", 0)
        assert push_state(cluster, leader, follower) is not PushState.PUSH
        cluster.start_broker(follower)
        for i in range(20, 25):
            assert cluster.produce("t", 0, batch(b"v%d" % i), acks=-1).error is Errors.NONE
        wait_replicated(cluster)
        wait_pushing(cluster)
        # The restarted broker has a new epoch, and its new session carries it.
        session = cluster.brokers[leader].push.leader.states[TP][follower].session
        assert session.replica_epoch == cluster.brokers[follower].broker_epoch
        for b in range(3):
            assert values_on(cluster, b) == [b"v%d" % i for i in range(25)]


def test_unreachable_follower_is_dropped_from_push_then_rejoins(tmp_path):
    plan = FaultPlan(seed=7)
    config = dict(FAST, **{"replica.lag.time.max.ms": 400})
    with LocalCluster(tmp_path / "c", num_brokers=3, replication="push", config=config, faults=plan) as cluster:
        cluster.create_topic("t", partitions=1, replication_factor=3)
        cluster.produce("t", 0, batch(b"a"), acks=-1)
        wait_pushing(cluster)
        leader = cluster.leader("t", 0)
        follower = next(b for b in range(3) if b != leader)
        plan.set(leader, follower, LinkFaults(drop_probability=1.0,
                                              request_types=frozenset({"AppendRecordsBatchRequest"})))
        plan.set(follower, leader, LinkFaults(drop_probability=1.0))
        assert cluster.produce("t", 0, batch(b"b"), acks=1).error is Errors.NONE
        cluster.wait_until(lambda: follower not in cluster.isr("t", 0), 20, "ISR shrink")
        assert push_state(cluster, leader, follower) is not PushState.PUSH
        counts = end_counts(cluster, leader)
        assert counts.get("FOLLOWER_NOT_CAUGHT_UP", 0) + counts.get("LEADER_REPLICATION_ERROR", 0) >= 1
        # The follower's watchdog gave up on the silent session and it pulls (in vain for now).
        cluster.wait_until(lambda: not fetch_state(cluster, follower).is_pushing, 10, "follower pulls")
        plan.clear()
        assert cluster.produce("t", 0, batch(b"c"), acks=-1).error is Errors.NONE
        wait_replicated(cluster)
        wait_pushing(cluster)
        assert values_on(cluster, follower) == [b"a", b"b", b"c"]


def test_mixed_push_and_pull_by_broker_and_by_topic(tmp_path):
    config = dict(FAST, **{"push.enabled.brokers": "0"})
    with LocalCluster(tmp_path / "c", num_brokers=3, replication="push", config=config) as cluster:
        cluster.create_topic("t", partitions=3, replication_factor=3)
        cluster.create_topic("pulled", partitions=3, replication_factor=3, config={"push.replication.enable": "false"})
        for topic in ("t", "pulled"):
            for p in range(3):
                assert cluster.produce(topic, p, batch(b"x%d" % p), acks=-1).error is Errors.NONE
        pushed = [p for p in range(3) if cluster.leader("t", p) == 0]
        pulled = [p for p in range(3) if cluster.leader("t", p) != 0]
        assert pushed and pulled
        for p in pushed:
            wait_pushing(cluster, TopicPartition("t", p))
        for topic in ("t", "pulled"):
            for p in range(3):
                for i in range(10):
                    assert cluster.produce(topic, p, batch(b"%s-%d-%d" % (topic.encode(), p, i)),
                                           acks=-1).error is Errors.NONE
                wait_replicated(cluster, topic, p)
                expected = [b"x%d" % p] + [b"%s-%d-%d" % (topic.encode(), p, i) for i in range(10)]
                for b in range(3):
                    assert values_on(cluster, b, topic, p) == expected
                leader = cluster.leader(topic, p)
                for f in range(3):
                    if f != leader and (topic == "pulled" or p in pulled):
                        assert push_state(cluster, leader, f, TopicPartition(topic, p)) is PushState.PULL
                        assert not fetch_state(cluster, f, TopicPartition(topic, p)).is_pushing
        assert cluster.brokers[0].push.metrics()["PushSessionStartCount"] >= 2
        assert all(cluster.brokers[b].push.metrics()["PushSessionStartCount"] == 0 for b in (1, 2))


# -- randomized faults --------------------------------------------------------------------------------

FAULT_CONFIG = {
    "replica.fetch.backoff.ms": 20,
    "replica.socket.timeout.ms": 1000,
    "replica.lag.time.max.ms": 2000,
    "replica.fetch.wait.max.ms": 100,
    "push.heartbeat.interval.ms": 50,
    "push.follower.session.timeout.ms": 500,
    "push.request.timeout.ms": 1000,
}
MODES = {
    "pull": ("pull", {}),
    "push": ("push", {}),
    "mixed": ("push", {"push.enabled.brokers": "0,2"}),
}


@pytest.mark.parametrize("mode", ["push", "mixed"])
def test_shared_fault_workload_under_push(tmp_path, mode):
    replication, extra = MODES[mode]
    with LocalCluster(tmp_path / "c", num_brokers=3, replication=replication,
                      config=dict(FAULT_CONFIG, **extra)) as cluster:
        outcome = run_fault_workload(cluster, 23, steps=12, acks_per_step=30)
        started = sum(b.push.metrics()["PushSessionStartCount"] for b in cluster.brokers.values() if b.push)
    check_fault_outcome(outcome)
    assert started > 0, "no push session ever started"


def run_keyed_workload(cluster, seed, *, partitions=2, records=120, fault_every=15):
    """Deterministic content: one producer per partition writes records k = 0..records-1 in
    order, retrying record k (same value) until acknowledged; a seeded fault every
    `fault_every` acknowledgements. Returns each partition's committed log, deduplicated by
    value (a retried record may be committed twice), as read from every ISR replica."""
    import random
    import threading

    from fault_workload import _fully_replicated, _pick_action, _wait
    from replication.errors import ClusterError, TransportError

    rng = random.Random(seed)
    cluster.create_topic(TOPIC, partitions=partitions, replication_factor=3, config={"min.insync.replicas": "2"})
    acked = [0]
    lock = threading.Lock()
    errors = []

    def producer(p):
        for k in range(records):
            value = b"p%d-k%04d" % (p, k)
            while True:
                try:
                    resp = cluster.produce(TOPIC, p, batch(value), acks=-1, timeout_ms=2000)
                except (TransportError, ClusterError):
                    continue
                if resp.error is Errors.NONE:
                    with lock:
                        acked[0] += 1
                    break

    threads = [threading.Thread(target=producer, args=(p,), daemon=True) for p in range(partitions)]
    for t in threads:
        t.start()
    actions = []
    total = partitions * records
    while acked[0] < total - fault_every:
        target = acked[0] + fault_every
        if not _wait(lambda target=target: acked[0] >= target, 20):
            errors.append(f"stalled at {acked[0]} acks after {actions}")
            break
        action = _pick_action(cluster, rng, partitions)
        actions.append(action)
        kind, b = action.split(":")
        getattr(cluster, {"crash": "crash_broker", "stop": "stop_broker", "start": "start_broker"}[kind])(int(b))
    for b in range(cluster.num_brokers):
        if b not in cluster.live_brokers():
            cluster.start_broker(b)
    for t in threads:
        t.join(timeout=60)
    assert not errors and not any(t.is_alive() for t in threads), (errors, actions)
    out = {}
    for p in range(partitions):
        assert _wait(lambda p=p: _fully_replicated(cluster, p), 30), f"p{p} not replicated after {actions}"
        hw = cluster.high_watermark(TOPIC, p)
        logs = {b: read_log(cluster, b, p, hw) for b in cluster.isr(TOPIC, p)}
        first = next(iter(logs.values()))
        assert all(lg == first for lg in logs.values()), f"p{p}: ISR replicas differ ({actions})"
        seen, dedup = set(), []
        for _, v in first:
            if v not in seen:
                seen.add(v)
                dedup.append(v)
        out[p] = dedup
    return out, actions


def test_random_faults_give_identical_committed_logs_in_pull_push_and_mixed(tmp_path):
    seed = 41
    logs = {}
    for name, (replication, extra) in MODES.items():
        with LocalCluster(tmp_path / name, num_brokers=3, replication=replication,
                          config=dict(FAULT_CONFIG, **extra)) as cluster:
            logs[name], actions = run_keyed_workload(cluster, seed)
    expected = {p: [b"p%d-k%04d" % (p, k) for k in range(120)] for p in range(2)}
    assert logs["pull"] == expected
    assert logs["push"] == logs["pull"]
    assert logs["mixed"] == logs["pull"]


def test_log_start_offset_moves_reach_pushing_followers(cluster):
    cluster.create_topic("t", partitions=1, replication_factor=3)
    leader = cluster.leader("t", 0)
    for i in range(10):
        assert cluster.produce("t", 0, batch(b"v%d" % i), acks=-1).error is Errors.NONE
    wait_pushing(cluster)
    wait_replicated(cluster)
    followers = [b for b in range(3) if b != leader]
    assert cluster.partition_on(leader, "t", 0).delete_records(6) == 6
    cluster.wait_until(lambda: all(cluster.partition_on(f, "t", 0).log.log_start_offset == 6 for f in followers),
                       10, "followers learn the new log start offset by push")
    for f in followers:
        assert fetch_state(cluster, f).is_pushing  # learned without going back to pull
