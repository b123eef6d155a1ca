"""Partition states reach brokers in the controller's order, a late (older) state is ignored,
and a refused AlterPartition brings the leader the current state (issue 20, item 1)."""

import threading

import pytest

from fault_workload import TOPIC, check_fault_outcome, run_fault_workload
from replication.cluster import LocalCluster
from replication.protocol import Errors, TopicPartition
from replication.transport import FaultPlan, LinkFaults
from test_cluster import FAST, batch, records_on, wait_replicated

TP = TopicPartition("t", 0)


def _roles(cluster):
    """(leader, first follower, second follower) in the order the controller elects them."""
    leader = cluster.leader("t", 0)
    f1, f2 = [b for b in cluster.replicas("t", 0) if b != leader]
    return leader, f1, f2


def _view_matches_controller(cluster, broker):
    state = cluster.controller.partition_state(TP)
    part = cluster.partition_on(broker, "t", 0)
    return part.partition_epoch == state.partition_epoch and sorted(part.isr) == sorted(state.isr)


def test_an_older_state_delivered_last_does_not_overwrite_the_newer_one(tmp_path):
    with LocalCluster(tmp_path / "c", num_brokers=3, config=FAST) as cluster:
        cluster.create_topic("t", partitions=1, replication_factor=3, config={"min.insync.replicas": "3"})
        leader, _f1, f2 = _roles(cluster)
        assert cluster.produce("t", 0, batch(b"a"), acks=-1).error is Errors.NONE
        wait_replicated(cluster)

        cluster.stop_broker(f2)
        older = cluster.controller.partition_state(TP)
        assert f2 not in older.isr
        # f2's restart sends the leader the (unchanged) state again; hold that delivery until a
        # newer state exists, so the older one would arrive last.
        deliver_to_leader = cluster.brokers[leader]._on_partition_state
        held, release = threading.Event(), threading.Event()

        def delaying_listener(broker_id, tp, state, info):
            if tp == TP and f2 not in state.isr and not held.is_set():
                held.set()
                release.wait(30)
            deliver_to_leader(broker_id, tp, state, info)

        cluster.controller.register_listener(leader, delaying_listener)
        starter = threading.Thread(target=cluster.start_broker, args=(f2,))
        starter.start()
        cluster.wait_until(held.is_set, 10, "the restart's delivery to the leader is held")
        # The leader's expansion (as its AlterPartition would ask) makes the newer state.
        newer = cluster.controller.alter_partition(TP, leader, older.leader_epoch, older.partition_epoch,
                                                   sorted(older.isr + [f2]))
        assert newer is not None and newer.partition_epoch > older.partition_epoch
        release.set()
        starter.join(30)
        assert not starter.is_alive()

        cluster.wait_until(lambda: _view_matches_controller(cluster, leader), 20,
                           "the leader's view equals the controller's state")
        wait_replicated(cluster)
        assert sorted(cluster.isr("t", 0)) == [0, 1, 2]
        assert cluster.produce("t", 0, batch(b"b"), acks=-1).error is Errors.NONE
        assert records_on(cluster, f2) == [(0, b"a"), (1, b"b")]


def test_a_late_state_on_the_leader_loses_no_acknowledged_write_after_clean_stops(tmp_path):
    """The issue's scenario: a late state leaves f2 in the controller's ISR but outside the
    leader's view; f2 stops fetching; the leader acknowledges more records; clean stops of the
    leader and then f1 must not elect f2 (which lacks them)."""
    plan = FaultPlan(seed=5)
    config = dict(FAST, **{"replica.lag.time.max.ms": 1000})
    with LocalCluster(tmp_path / "c", num_brokers=3, config=config, faults=plan) as cluster:
        cluster.create_topic("t", partitions=1, replication_factor=3, config={"min.insync.replicas": "2"})
        leader, f1, f2 = _roles(cluster)
        acked = {}
        for i in range(10):
            resp = cluster.produce("t", 0, batch(b"v%d" % i), acks=-1)
            assert resp.error is Errors.NONE
            acked[resp.base_offset] = b"v%d" % i
        wait_replicated(cluster)
        cluster.stop_broker(f2)
        older = cluster.controller.partition_state(TP)  # ISR without f2
        cluster.start_broker(f2)
        wait_replicated(cluster)
        # The older state arrives at the leader late.
        cluster.brokers[leader].replica_manager.apply_partition_state(TP, older, {"config": {}})

        # f2 stops fetching (and cannot start again until the end).
        cluster.brokers[f2].fetcher_manager.remove_fetcher_for_partitions([TP])
        plan.set(f2, -1, LinkFaults(drop_probability=1.0, request_types=frozenset({"FetchRequest"})))
        for i in range(10, 40):
            resp = cluster.produce("t", 0, batch(b"v%d" % i), acks=-1)
            assert resp.error is Errors.NONE, resp
            acked[resp.base_offset] = b"v%d" % i
        assert cluster.log_end_offset(f2, "t", 0) == 10

        cluster.stop_broker(leader)
        cluster.stop_broker(f1)
        plan.clear()
        cluster.start_broker(leader)
        cluster.start_broker(f1)
        cluster.wait_until(lambda: cluster.leader("t", 0) >= 0, 20, "a leader")
        wait_replicated(cluster)
        hw = cluster.high_watermark("t", 0)
        for b in (0, 1, 2):
            log = dict(records_on(cluster, b, upto=hw))
            lost = {o: v for o, v in acked.items() if log.get(o) != v}
            assert not lost, f"broker {b} lost acknowledged records {sorted(lost)}"
        assert cluster.produce("t", 0, batch(b"after"), acks=-1).error is Errors.NONE
        assert _view_matches_controller(cluster, cluster.leader("t", 0))


def test_a_refused_alter_partition_sends_the_leader_the_current_state(tmp_path):
    with LocalCluster(tmp_path / "c", num_brokers=3, config=FAST) as cluster:
        cluster.create_topic("t", partitions=1, replication_factor=3)
        leader, _f1, _f2 = _roles(cluster)
        wait_replicated(cluster)
        part = cluster.partition_on(leader, "t", 0)
        state = cluster.controller.partition_state(TP)
        # Make the leader's view stale behind the partition lock's back (as a lost delivery would).
        with part.lock:
            part.partition_epoch = state.partition_epoch - 1
            part.isr = {leader}
        assert cluster.controller.alter_partition(TP, leader, state.leader_epoch, state.partition_epoch - 1,
                                                  [leader]) is None
        cluster.wait_until(lambda: _view_matches_controller(cluster, leader), 10,
                           "the refused leader has the controller's state")
        assert sorted(part.isr) == sorted(state.isr)


def _follower_stops(cluster, rng, partitions):
    """Stop a broker leading no partition (restart it next): ISR shrinks and expands."""
    live = cluster.live_brokers()
    down = [b for b in range(cluster.num_brokers) if b not in live]
    if down:
        return f"start:{down[0]}"
    leaders = {cluster.leader(TOPIC, p) for p in range(partitions)}
    followers = [b for b in live if b not in leaders] or live
    return f"stop:{rng.choice(followers)}"


@pytest.mark.parametrize("replication,seed", [("pull", 5), ("pull", 17), ("push", 29)])
def test_follower_stops_and_restarts_keep_every_acknowledged_write(tmp_path, replication, seed):
    config = dict(FAST, **{"replica.lag.time.max.ms": 2000, "replica.fetch.wait.max.ms": 100})
    with LocalCluster(tmp_path / "c", num_brokers=3, replication=replication, config=config) as cluster:
        outcome = run_fault_workload(cluster, seed, partitions=2, steps=20, acks_per_step=10,
                                     pick_action=_follower_stops)
        for p in range(2):
            assert len(cluster.isr(TOPIC, p)) == 3
            resp = cluster.produce(TOPIC, p, batch(b"after-%d" % p), acks=-1)
            assert resp.error is Errors.NONE, f"p{p}: {resp} (seed {seed}, {outcome.actions})"
            part = cluster.partition_on(cluster.leader(TOPIC, p), TOPIC, p)
            state = cluster.controller.partition_state(TopicPartition(TOPIC, p))
            assert part.partition_epoch == state.partition_epoch, (p, seed, outcome.actions)
    assert any(a.startswith("stop") for a in outcome.actions)
    check_fault_outcome(outcome)
