"""The embedded cluster with pull replication: elections, ISR, high watermark, acks, restarts,
and the KIP-101 scenarios, on real logs and real fetcher threads."""

import json

import pytest

from replication.cluster import LocalCluster
from replication.errors import ClusterError, InvalidTopicError
from replication.protocol import Errors, TopicPartition
from replication.records import encode_batch
from replication.transport import FaultPlan, LinkFaults

FAST = {
    "replica.fetch.backoff.ms": 20,
    "replica.lag.time.max.ms": 10000,
    # Dropped requests are noticed after this; Kafka's 30 s default would only slow the tests.
    "replica.socket.timeout.ms": 1000,
}


def batch(*values, ts=1000):
    return encode_batch([(None, v, ts) for v in values])


def records_on(cluster, broker, topic="t", partition=0, upto=None):
    """(offset, value) pairs of a broker's log below `upto` (default: its LEO)."""
    lg = cluster.partition_on(broker, topic, partition).log
    end = lg.log_end_offset if upto is None else upto
    out = []
    offset = lg.log_start_offset
    while offset < end:
        recs = lg.read(offset, 1 << 20, end).records()
        if not recs:
            break
        out.extend((r.offset, r.value) for r in recs if r.offset < end)
        offset = recs[-1].offset + 1
    return out


def wait_replicated(cluster, topic="t", partition=0, timeout_s=20):
    """Every replica in the ISR has the leader's LEO and the ISR holds every replica."""
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


@pytest.fixture
def cluster(tmp_path):
    with LocalCluster(tmp_path / "cluster", num_brokers=3, config=FAST) as c:
        yield c


def test_acks_all_commits_on_every_replica(cluster):
    cluster.create_topic("t", partitions=1, replication_factor=3)
    assert cluster.leader_epoch("t", 0) == 0
    resp = cluster.produce("t", 0, batch(b"a", b"b"), acks=-1)
    assert resp.error is Errors.NONE and resp.base_offset == 0
    # acks=all answered only once the high watermark covered the append
    assert cluster.high_watermark("t", 0) >= 2
    resp = cluster.produce("t", 0, batch(b"c"), acks=-1)
    assert resp.base_offset == 2
    wait_replicated(cluster)
    for b in range(3):
        assert records_on(cluster, b) == [(0, b"a"), (1, b"b"), (2, b"c")]


def test_consumers_read_only_below_high_watermark(tmp_path):
    # Followers cannot fetch, so the HW stays put while the leader's LEO moves on.
    plan = FaultPlan(seed=1)
    with LocalCluster(tmp_path / "c", num_brokers=3, config=FAST, faults=plan) as cluster:
        cluster.create_topic("t", partitions=1, replication_factor=3)
        cluster.produce("t", 0, batch(b"committed"), acks=-1)
        leader = cluster.leader("t", 0)
        plan.set(-1, leader, LinkFaults(drop_probability=1.0, request_types=frozenset({"FetchRequest"})))
        resp = cluster.produce("t", 0, batch(b"pending"), acks=1)
        assert resp.error is Errors.NONE and resp.base_offset == 1
        assert cluster.log_end_offset(leader, "t", 0) == 2
        assert cluster.high_watermark("t", 0) == 1
        plan.clear()
        fetched = cluster.fetch("t", 0, 0)
        assert [r.value for r in fetched.records.records()] == [b"committed"]
        assert fetched.high_watermark == 1


def test_leader_failover_bumps_epoch_and_keeps_acknowledged_records(cluster):
    cluster.create_topic("t", partitions=1, replication_factor=3)
    for i in range(5):
        assert cluster.produce("t", 0, batch(b"v%d" % i), acks=-1).error is Errors.NONE
    old_leader = cluster.leader("t", 0)
    cluster.stop_broker(old_leader)
    new_leader = cluster.leader("t", 0)
    assert new_leader not in (old_leader, -1)
    assert cluster.leader_epoch("t", 0) == 1
    assert old_leader not in cluster.isr("t", 0)
    resp = cluster.produce("t", 0, batch(b"after"), acks=-1)
    assert resp.error is Errors.NONE and resp.base_offset == 5
    cluster.start_broker(old_leader)
    wait_replicated(cluster)
    expected = [(i, b"v%d" % i) for i in range(5)] + [(5, b"after")]
    for b in range(3):
        assert records_on(cluster, b) == expected


def test_fetcher_threads_left_without_partitions_stop(cluster):
    """Kafka's shutdownIdleFetcherThreads: once the leader stops, the threads that fetched from it
    hold no partition any more and stop (closing their end points); the remaining follower
    fetches from the new leader through a thread of its own."""
    cluster.create_topic("t", partitions=1, replication_factor=3)
    assert cluster.produce("t", 0, batch(b"v0"), acks=-1).error is Errors.NONE
    wait_replicated(cluster)
    old_leader = cluster.leader("t", 0)
    followers = [b for b in range(3) if b != old_leader]
    from_old = [t for b in followers for key, t in cluster.brokers[b].fetcher_manager.fetcher_threads.items()
                if key[0] == old_leader]
    assert len(from_old) == 2 and all(t.is_alive() for t in from_old)
    cluster.stop_broker(old_leader)
    new_leader = cluster.leader("t", 0)
    cluster.wait_until(lambda: not any(t.is_alive() for t in from_old), 20, "idle fetcher threads stopped")
    assert list(cluster.brokers[new_leader].fetcher_manager.fetcher_threads) == []
    (follower,) = [b for b in followers if b != new_leader]
    assert [key[0] for key in cluster.brokers[follower].fetcher_manager.fetcher_threads] == [new_leader]
    resp = cluster.produce("t", 0, batch(b"v1"), acks=-1)
    assert resp.error is Errors.NONE and resp.base_offset == 1
    cluster.wait_until(lambda: cluster.log_end_offset(follower, "t", 0) == 2, 20, "the follower fetched v1")


def test_acks_all_refused_below_min_insync_replicas(tmp_path):
    with LocalCluster(tmp_path / "c", num_brokers=3, config=dict(FAST, **{"min.insync.replicas": 2})) as cluster:
        cluster.create_topic("t", partitions=1, replication_factor=3)
        leader = cluster.leader("t", 0)
        followers = [b for b in range(3) if b != leader]
        for b in followers:
            cluster.stop_broker(b)
        assert cluster.isr("t", 0) == [leader]
        resp = cluster.produce("t", 0, batch(b"x"), acks=-1)
        assert resp.error is Errors.NOT_ENOUGH_REPLICAS
        assert cluster.log_end_offset(leader, "t", 0) == 0  # refused before the append
        assert cluster.produce("t", 0, batch(b"y"), acks=1).error is Errors.NONE
        cluster.start_broker(followers[0])
        cluster.wait_until(lambda: len(cluster.isr("t", 0)) == 2, 20, "ISR back to two")
        assert cluster.produce("t", 0, batch(b"z"), acks=-1).error is Errors.NONE


def test_isr_shrinks_for_a_stalled_follower_and_expands_when_it_catches_up(tmp_path):
    plan = FaultPlan(seed=2)
    config = dict(FAST, **{"replica.lag.time.max.ms": 300})
    with LocalCluster(tmp_path / "c", num_brokers=3, config=config, faults=plan) as cluster:
        cluster.create_topic("t", partitions=1, replication_factor=3)
        leader = cluster.leader("t", 0)
        stalled = next(b for b in range(3) if b != leader)
        plan.set(stalled, leader, LinkFaults(drop_probability=1.0))
        cluster.produce("t", 0, batch(b"a"), acks=1)
        cluster.wait_until(lambda: stalled not in cluster.isr("t", 0), 20, "ISR shrink")
        # With the stalled follower out of the ISR, acks=all completes again.
        assert cluster.produce("t", 0, batch(b"b"), acks=-1).error is Errors.NONE
        plan.clear()
        cluster.wait_until(lambda: stalled in cluster.isr("t", 0), 20, "ISR expand")
        wait_replicated(cluster)
        assert records_on(cluster, stalled) == [(0, b"a"), (1, b"b")]


def test_crashed_follower_recovers_and_rejoins(cluster):
    cluster.create_topic("t", partitions=1, replication_factor=3)
    leader = cluster.leader("t", 0)
    follower = next(b for b in range(3) if b != leader)
    for i in range(10):
        cluster.produce("t", 0, batch(b"%d" % i), acks=-1)
    cluster.crash_broker(follower)
    for i in range(10, 15):
        cluster.produce("t", 0, batch(b"%d" % i), acks=-1)
    cluster.start_broker(follower)
    wait_replicated(cluster)
    assert records_on(cluster, follower) == [(i, b"%d" % i) for i in range(15)]


def test_metadata_and_data_survive_a_full_restart(tmp_path):
    with LocalCluster(tmp_path / "c", num_brokers=3, config=FAST) as cluster:
        cluster.create_topic("t", partitions=2, replication_factor=3, config={"segment.bytes": "4096"})
        cluster.produce("t", 1, batch(b"kept"), acks=-1)
        leader = cluster.leader("t", 1)
        cluster.stop_broker(leader)
        epoch = cluster.leader_epoch("t", 1)
        assert epoch == 1 and leader not in cluster.isr("t", 1)
    persisted = json.loads((tmp_path / "c" / "cluster-metadata.json").read_text())
    [topic] = persisted["topics"]
    final = topic["partitions"][1]
    assert topic["config"] == {"segment.bytes": "4096"} and final["leader_epoch"] >= epoch
    with LocalCluster(tmp_path / "c", num_brokers=3, config=FAST) as cluster:
        assert cluster.topics() == ["t"]
        assert cluster.leader_epoch("t", 1) >= final["leader_epoch"]
        assert cluster.leader("t", 1) in final["isr"]  # elected from the ISR persisted at close
        wait_replicated(cluster, partition=1)
        assert [r.value for r in cluster.fetch("t", 1, 0).records.records()] == [b"kept"]


def test_bad_topic_names_and_unknown_partitions_are_named(cluster):
    with pytest.raises(InvalidTopicError, match=r"\.\./escape"):
        cluster.create_topic("../escape", partitions=1)
    with pytest.raises(ClusterError, match="replication factor 4"):
        cluster.create_topic("t4", partitions=1, replication_factor=4)
    cluster.create_topic("t", partitions=1)
    with pytest.raises(ClusterError, match="already exists"):
        cluster.create_topic("t", partitions=1)
    with pytest.raises(ClusterError, match="unknown partition t-3"):
        cluster.leader("t", 3)


def test_kip101_follower_restart_with_lagging_high_watermark_keeps_acknowledged_record(tmp_path):
    """KIP-101 scenario 1: a restarted follower must not truncate to its stale HW."""
    plan = FaultPlan(seed=3)
    config = dict(FAST, **{"replica.fetch.wait.max.ms": 5000, "replica.socket.timeout.ms": 6000})
    with LocalCluster(tmp_path / "c", num_brokers=2, config=config, faults=plan) as cluster:
        cluster.create_topic("t", partitions=1, replication_factor=2)
        leader = cluster.leader("t", 0)
        follower = 1 - leader
        assert cluster.produce("t", 0, batch(b"m1"), acks=-1).error is Errors.NONE
        wait_replicated(cluster)
        follower_log = cluster.partition_on(follower, "t", 0).log
        cluster.wait_until(lambda: follower_log.high_watermark == 1, 10, "follower learns HW 1")
        assert cluster.produce("t", 0, batch(b"m2"), acks=-1).error is Errors.NONE
        # The follower has m2 but learns HW=2 only with its next (long-polled) fetch response.
        assert follower_log.log_end_offset == 2 and follower_log.high_watermark == 1
        cluster.stop_broker(follower)
        # Restart while fetches cannot reach the leader: only the epoch exchange gets through.
        plan.set(follower, leader, LinkFaults(drop_probability=1.0, request_types=frozenset({"FetchRequest"})))
        cluster.start_broker(follower)
        restarted = cluster.partition_on(follower, "t", 0).log
        fetcher = cluster.brokers[follower].fetcher_manager

        def truncation_done():
            thread = fetcher.fetcher_for(("t", 0))
            state = thread.fetch_state(("t", 0)) if thread else None
            return state is not None and not state.is_truncating()

        cluster.wait_until(truncation_done, 10, "truncation phase done")
        assert restarted.log_end_offset == 2  # not truncated to the stale HW of 1
        plan.clear()
        cluster.wait_until(lambda: follower in cluster.isr("t", 0), 20, "follower back in ISR")
        cluster.stop_broker(leader)
        assert cluster.leader("t", 0) == follower
        assert [r.value for r in cluster.fetch("t", 0, 0).records.records()] == [b"m1", b"m2"]


def test_kip101_double_failover_never_leaves_divergent_committed_records(tmp_path):
    """KIP-101 scenario 2: uncommitted records of an old leader are truncated, never mixed."""
    plan = FaultPlan(seed=4)
    with LocalCluster(tmp_path / "c", num_brokers=2, config=FAST, faults=plan) as cluster:
        cluster.create_topic("t", partitions=1, replication_factor=2)
        a = cluster.leader("t", 0)
        b = 1 - a
        cluster.produce("t", 0, batch(b"m1"), acks=-1)
        wait_replicated(cluster)
        # b stops fetching; a takes writes only it holds (acks=1), flushed to disk.
        plan.set(b, a, LinkFaults(drop_probability=1.0, request_types=frozenset({"FetchRequest"})))
        # A fetch parked before the fault would still carry the next append to b: let it expire.
        rm = cluster.brokers[a].replica_manager
        cluster.wait_until(lambda: rm.parked_fetches(("t", 0)) == 0, 10, "b's parked fetch expired")
        cluster.produce("t", 0, batch(b"a-only-1", b"a-only-2"), acks=1)
        cluster.partition_on(a, "t", 0).log.flush()
        cluster.crash_broker(a)
        plan.clear()
        assert cluster.leader("t", 0) == b  # b was still in the ISR: clean election
        cluster.produce("t", 0, batch(b"b-1"), acks=-1)
        # b alone is the ISR: its records survive a power cut only once fsynced.
        cluster.partition_on(b, "t", 0).log.flush()
        cluster.crash_broker(b)
        assert cluster.leader("t", 0) == -1  # offline: a is not in the ISR
        cluster.start_broker(b)
        assert cluster.leader("t", 0) == b
        cluster.produce("t", 0, batch(b"b-2"), acks=-1)
        cluster.start_broker(a)
        wait_replicated(cluster)
        hw = cluster.high_watermark("t", 0)
        expected = [(0, b"m1"), (1, b"b-1"), (2, b"b-2")]
        assert records_on(cluster, a, upto=hw) == expected
        assert records_on(cluster, b, upto=hw) == expected


def test_consumer_fetch_long_polls_until_data_arrives(cluster):
    import threading

    cluster.create_topic("t", partitions=1, replication_factor=3)
    rm = cluster.brokers[cluster.leader("t", 0)].replica_manager
    result = {}
    done = threading.Event()

    def poll():
        result["resp"] = cluster.fetch("t", 0, 0, max_wait_ms=60000)
        done.set()

    t = threading.Thread(target=poll, daemon=True)
    t.start()
    # Each follower has at most one fetch parked at the leader (one fetcher, one request in
    # flight), so a third watcher on the partition is the consumer's fetch.
    cluster.wait_until(lambda: rm.parked_fetches(TopicPartition("t", 0)) == 3, 10, "consumer fetch parked")
    assert not done.is_set()
    cluster.produce("t", 0, batch(b"wake"), acks=-1)
    # Completed by the high watermark moving over the record, long before its 60 s max wait.
    assert done.wait(10), "the parked consumer fetch did not complete when the data was committed"
    resp = result["resp"]
    assert resp.error is Errors.NONE and resp.high_watermark == 1
    assert [(r.offset, r.value) for r in resp.records.records()] == [(0, b"wake")]
    t.join(5)


def test_brokers_compact_and_apply_retention(tmp_path):
    config = dict(FAST, **{"log.cleaner.backoff.ms": 20, "log.retention.check.interval.ms": 50})
    with LocalCluster(tmp_path / "c", num_brokers=3, config=config) as cluster:
        cluster.create_topic("compacted", partitions=1, replication_factor=3,
                             config={"cleanup.policy": "compact", "segment.bytes": "2048",
                                     "min.cleanable.dirty.ratio": "0.01"})
        cluster.create_topic("expiring", partitions=1, replication_factor=3,
                             config={"retention.ms": "1", "segment.bytes": "2048"})
        for i in range(200):
            key = b"k%d" % (i % 5)
            cluster.produce("compacted", 0, encode_batch([(key, b"v%d" % i, 1000 + i)]), acks=-1)
            cluster.produce("expiring", 0, batch(b"old-%d" % i, ts=1), acks=-1)
        wait_replicated(cluster, "compacted")

        def compacted_on_every_replica():
            return all(len(records_on(cluster, b, "compacted")) < 100 for b in range(3))

        cluster.wait_until(compacted_on_every_replica, 30, "compaction on all replicas")
        for b in range(3):
            latest = {}
            lg = cluster.partition_on(b, "compacted", 0).log
            offset = lg.log_start_offset
            while offset < lg.log_end_offset:
                recs = lg.read(offset, 1 << 20, lg.log_end_offset).records()
                for r in recs:
                    latest[r.key] = (r.offset, r.value)
                offset = recs[-1].offset + 1
            for k in range(5):
                last = max(i for i in range(200) if i % 5 == k)
                assert latest[b"k%d" % k] == (last, b"v%d" % last)  # offsets preserved
        cluster.wait_until(lambda: cluster.partition_on(cluster.leader("expiring", 0), "expiring", 0)
                           .log.log_start_offset > 0, 30, "retention deleting old segments")
