"""The group coordinator on a real LocalCluster: membership, assignors, durable offsets."""

from __future__ import annotations

import threading
import time
import uuid

import pytest

from replication.cluster import LocalCluster
from replication.group_coordinator import (
    FENCED_INSTANCE_ID,
    GROUP_ID_NOT_FOUND,
    ILLEGAL_GENERATION,
    NON_EMPTY_GROUP,
    OFFSETS_TOPIC,
    REBALANCE_IN_PROGRESS,
    UNKNOWN_MEMBER_ID,
    OffsetAndMetadata,
    _java_string_hash,
    assign_range,
    assign_sticky,
    decode_offset_record,
    encode_offset_key,
    encode_offset_value,
)
from replication.protocol import Errors, TopicPartition as TP

FAST = {"replica.fetch.backoff.ms": 20, "replica.socket.timeout.ms": 1000,
        "group.initial.rebalance.delay.ms": 20}


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def wait_until(predicate, timeout: float = 20.0, what: str = "condition"):
    deadline = time.monotonic() + timeout
    pause = threading.Event()
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        pause.wait(0.01)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    with LocalCluster(tmp_path_factory.mktemp("gc"), num_brokers=3, config=FAST) as c:
        yield c


# -- pure parts ----------------------------------------------------------------------------


def test_offset_records_round_trip_in_kafkas_format():
    key = encode_offset_key("group-1", TP("orders", 7))
    # key v1: int16 version, string group, string topic, int32 partition (Kafka's layout)
    assert key == b"\x00\x01" + b"\x00\x07group-1" + b"\x00\x06orders" + b"\x00\x00\x00\x07"
    value = encode_offset_value(OffsetAndMetadata(42, "meta", 3, 1700000000000))
    assert decode_offset_record(key, value) == ("group-1", TP("orders", 7), OffsetAndMetadata(42, "meta", 3, 1700000000000))
    assert decode_offset_record(key, None) == ("group-1", TP("orders", 7), None)
    assert decode_offset_record(b"\x00\x02\x00\x01g", b"x") is None  # group metadata record: skipped


def test_group_partition_uses_javas_string_hash(cluster):
    assert _java_string_hash("") == 0
    assert _java_string_hash("hello") == 99162322
    assert _java_string_hash("polygenelubricants") == -2147483648  # the abs() corner case
    coordinator = cluster.group_coordinator
    assert coordinator.partition_for("hello") == 99162322 % coordinator.num_partitions
    assert 0 <= coordinator.partition_for("polygenelubricants") < coordinator.num_partitions


def test_range_assignor_gives_contiguous_runs_per_topic():
    result = assign_range({"a": ["t", "u"], "b": ["t"]}, {"t": 5, "u": 2})
    assert result["a"] == [TP("t", 0), TP("t", 1), TP("t", 2), TP("u", 0), TP("u", 1)]
    assert result["b"] == [TP("t", 3), TP("t", 4)]


def test_sticky_assignor_keeps_owned_partitions_and_balances():
    parts = {"t": 6}
    subs = {"a": ["t"], "b": ["t"], "c": ["t"]}
    owned = {"a": [TP("t", p) for p in (0, 1, 2)], "b": [TP("t", p) for p in (3, 4, 5)]}
    result = assign_sticky(subs, parts, owned)
    assert sorted(len(v) for v in result.values()) == [2, 2, 2]
    assert set(result["a"]) <= set(owned["a"]) and set(result["b"]) <= set(owned["b"])
    all_assigned = [tp for v in result.values() for tp in v]
    assert sorted(all_assigned) == [TP("t", p) for p in range(6)]
    # a partition claimed by two members goes to one only
    clash = assign_sticky({"a": ["t"], "b": ["t"]}, {"t": 2}, {"a": [TP("t", 0)], "b": [TP("t", 0)]})
    assert sorted(clash["a"] + clash["b"]) == [TP("t", 0), TP("t", 1)]


# -- membership on the cluster ----------------------------------------------------------------


def _join_all(coordinator, group, count, strategy="range", topics=("t",), session_ms=10000, owned=None):
    results = [None] * count
    member_ids = owned.keys() if owned else [""] * count

    def run(i, member_id):
        results[i] = coordinator.join_group(group, member_id, client_id=f"c{i}", session_timeout_ms=session_ms,
                                            rebalance_timeout_ms=5000, protocols=[strategy],
                                            subscription=list(topics),
                                            owned=(owned or {}).get(member_id, []))

    threads = [threading.Thread(target=run, args=(i, m)) for i, m in enumerate(member_ids)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(20)
    return results


def test_join_sync_heartbeat_and_leave(cluster):
    topic = unique("t")
    cluster.create_topic(topic, partitions=4)
    coordinator = cluster.group_coordinator
    group = unique("g")
    results = _join_all(coordinator, group, 2, topics=[topic])
    assert all(r.error == Errors.NONE for r in results)
    assert results[0].generation == results[1].generation
    leader = results[0].leader_id
    assert leader in {r.member_id for r in results}
    assert [sorted(r.members) for r in results if r.member_id == leader][0] == sorted(r.member_id for r in results)
    assignments = [coordinator.sync_group(group, r.generation, r.member_id) for r in results]
    assert all(err == Errors.NONE for err, _ in assignments)
    owned = sorted(tp for _, tps in assignments for tp in tps)
    assert owned == [TP(topic, p) for p in range(4)]
    generation = results[0].generation
    assert coordinator.heartbeat(group, results[0].member_id, generation) == Errors.NONE
    assert coordinator.heartbeat(group, results[0].member_id, generation - 1) == ILLEGAL_GENERATION
    assert coordinator.heartbeat(group, "nobody", generation) == UNKNOWN_MEMBER_ID
    # commits: a member's with its generation; one without member and generation only while
    # the group is empty (Kafka's rule); a stale generation is refused
    tp = TP(topic, 0)
    assert coordinator.commit_offsets(group, {tp: OffsetAndMetadata(1)}, results[0].member_id,
                                      generation) == {tp: Errors.NONE}
    assert coordinator.commit_offsets(group, {tp: OffsetAndMetadata(2)}) == {tp: UNKNOWN_MEMBER_ID}
    assert coordinator.commit_offsets(group, {tp: OffsetAndMetadata(2)}, results[0].member_id,
                                      generation - 1) == {tp: ILLEGAL_GENERATION}
    assert coordinator.fetch_offsets(group, [tp])[tp].offset == 1

    assert coordinator.leave_group(group, results[1].member_id) == Errors.NONE
    assert coordinator.heartbeat(group, results[0].member_id, generation) == REBALANCE_IN_PROGRESS
    again = coordinator.join_group(group, results[0].member_id, session_timeout_ms=10000,
                                   rebalance_timeout_ms=5000, protocols=["range"], subscription=[topic])
    assert again.error == Errors.NONE and again.generation == generation + 1
    err, tps = coordinator.sync_group(group, again.generation, again.member_id)
    assert err == Errors.NONE and sorted(tps) == [TP(topic, p) for p in range(4)]
    assert coordinator.describe_group(group).state == "Stable"
    assert coordinator.delete_group(group) == NON_EMPTY_GROUP
    coordinator.leave_group(group, again.member_id)


def test_cooperative_rebalance_withholds_moving_partitions_for_one_round(cluster):
    topic = unique("t")
    cluster.create_topic(topic, partitions=6)
    coordinator = cluster.group_coordinator
    group = unique("g")
    first = _join_all(coordinator, group, 2, strategy="cooperative-sticky", topics=[topic])
    owned = {r.member_id: coordinator.sync_group(group, r.generation, r.member_id)[1] for r in first}
    assert sorted(len(v) for v in owned.values()) == [3, 3]

    # A third member joins: the old members rejoin with what they own.
    results: dict = {}

    def join(member_id):
        r = coordinator.join_group(group, member_id, client_id="x", session_timeout_ms=10000,
                                   rebalance_timeout_ms=5000, protocols=["cooperative-sticky"],
                                   subscription=[topic], owned=owned.get(member_id, []))
        results[r.member_id] = r

    # The newcomer's join starts a rebalance; the old members learn of it and rejoin.
    threads = [threading.Thread(target=join, args=(m,)) for m in ["", *owned]]
    threads[0].start()
    wait_until(lambda: coordinator.describe_group(group).state == "PreparingRebalance", 10, "a rebalance")
    for t in threads[1:]:
        t.start()
    for t in threads:
        t.join(20)
    second = {m: coordinator.sync_group(group, r.generation, m)[1] for m, r in results.items()}
    newcomer = next(m for m in second if m not in owned)
    # Round one: old members only shrink; the partitions they give up are not handed out yet.
    assert second[newcomer] == []
    for m in owned:
        assert set(second[m]) <= set(owned[m]) and len(second[m]) == 2
    # Round two: everyone rejoins with what it owns now; the released partitions move.
    results.clear()
    threads = [threading.Thread(target=join, args=(m,)) for m in second]
    for m in second:
        owned[m] = second[m]
    owned[newcomer] = []
    for t in threads:
        t.start()
    for t in threads:
        t.join(20)
    third = {m: coordinator.sync_group(group, r.generation, m)[1] for m, r in results.items()}
    assert sorted(len(v) for v in third.values()) == [2, 2, 2]
    assert sorted(tp for v in third.values() for tp in v) == [TP(topic, p) for p in range(6)]
    for m in results:
        coordinator.leave_group(group, m)


def test_member_that_stops_heartbeating_is_evicted(cluster):
    topic = unique("t")
    cluster.create_topic(topic, partitions=2)
    coordinator = cluster.group_coordinator
    group = unique("g")
    results = _join_all(coordinator, group, 2, topics=[topic], session_ms=300)
    keeper, silent = results
    generation = keeper.generation

    # Only the keeper heartbeats; the silent member's session expires and a rebalance starts.
    def rebalancing():
        return coordinator.heartbeat(group, keeper.member_id, generation) == REBALANCE_IN_PROGRESS

    wait_until(rebalancing, 10, "the silent member's eviction")
    assert coordinator.heartbeat(group, silent.member_id, generation) == UNKNOWN_MEMBER_ID
    again = coordinator.join_group(group, keeper.member_id, session_timeout_ms=300, rebalance_timeout_ms=5000,
                                   protocols=["range"], subscription=[topic])
    assert coordinator.sync_group(group, again.generation, keeper.member_id) == (
        Errors.NONE, [TP(topic, 0), TP(topic, 1)])
    coordinator.leave_group(group, keeper.member_id)


def test_static_member_replaced_fenced_and_expired(cluster):
    """KIP-345 on the coordinator: a join under a held group.instance.id replaces the member (its
    old id fenced everywhere); with the subscription kept, in the same generation with the same
    assignment; with another, through a rebalance; a static member whose session expires frees
    its id."""
    topic, other = unique("t"), unique("t")
    cluster.create_topic(topic, partitions=2)
    cluster.create_topic(other, partitions=1)
    coordinator = cluster.group_coordinator
    group = unique("g")

    def join(member_id: str, topics: list, session_ms: int = 10000):
        return coordinator.join_group(group, member_id, session_timeout_ms=session_ms, rebalance_timeout_ms=5000,
                                      protocols=["range"], subscription=topics, group_instance_id="node-1")
    first = join("", [topic])
    assert first.error == Errors.NONE
    assert coordinator.sync_group(group, first.generation, first.member_id, "node-1") == (
        Errors.NONE, [TP(topic, 0), TP(topic, 1)])
    second = join("", [topic])  # a restart: same generation, same assignment, no rebalance
    assert (second.error, second.generation, second.leader_id) == (Errors.NONE, first.generation, second.member_id)
    assert coordinator.sync_group(group, second.generation, second.member_id, "node-1") == (
        Errors.NONE, [TP(topic, 0), TP(topic, 1)])
    old = first.member_id
    assert coordinator.heartbeat(group, old, first.generation, "node-1") == FENCED_INSTANCE_ID
    assert coordinator.sync_group(group, first.generation, old, "node-1") == (FENCED_INSTANCE_ID, [])
    assert set(coordinator.commit_offsets(group, {TP(topic, 0): OffsetAndMetadata(1)}, old, first.generation,
                                          "node-1").values()) == {FENCED_INSTANCE_ID}
    assert coordinator.leave_group(group, old, "node-1") == FENCED_INSTANCE_ID
    assert join(old, [topic]).error == FENCED_INSTANCE_ID
    [member] = coordinator.describe_group(group).members
    assert (member.member_id, member.group_instance_id) == (second.member_id, "node-1")

    third = join("", [topic, other])  # another subscription: a rebalance, a new generation
    assert third.error == Errors.NONE and third.generation == first.generation + 1
    error, assigned = coordinator.sync_group(group, third.generation, third.member_id, "node-1")
    assert error == Errors.NONE and sorted(assigned) == sorted([TP(other, 0), TP(topic, 0), TP(topic, 1)])

    short = join(third.member_id, [topic], session_ms=300)  # rejoin with a short session, then silence
    assert short.error == Errors.NONE
    wait_until(lambda: coordinator.describe_group(group).members == [], 10, "the static member's session to expire")
    fresh = join("", [topic])
    assert fresh.error == Errors.NONE and fresh.generation > short.generation
    assert coordinator.leave_group(group, fresh.member_id, "node-1") == Errors.NONE
    assert coordinator.describe_group(group).members == []


def test_bad_join_arguments(cluster):
    coordinator = cluster.group_coordinator
    assert coordinator.join_group("", "").error == 24  # INVALID_GROUP_ID
    assert coordinator.join_group("g", "", session_timeout_ms=0).error == 26  # INVALID_SESSION_TIMEOUT
    assert coordinator.join_group(unique("g"), "ghost", session_timeout_ms=1000).error == UNKNOWN_MEMBER_ID


# -- offsets ------------------------------------------------------------------------------------


def test_offsets_are_written_to_consumer_offsets_with_acks_all(cluster):
    coordinator = cluster.group_coordinator
    group = unique("g")
    errors = coordinator.commit_offsets(group, {TP("x", 0): OffsetAndMetadata(5, "m")})
    assert errors == {TP("x", 0): Errors.NONE}
    p = coordinator.partition_for(group)
    # acks=all: the record is below the high watermark of the offsets partition.
    lg = cluster.partition_on(cluster.leader(OFFSETS_TOPIC, p), OFFSETS_TOPIC, p).log
    records = lg.read(0, 1 << 24, lg.high_watermark).records()
    decoded = [decode_offset_record(r.key, r.value) for r in records]
    assert (group, TP("x", 0), OffsetAndMetadata(5, "m", -1, decoded[-1][2].commit_timestamp)) in decoded
    assert coordinator.fetch_offsets(group, [TP("x", 0), TP("x", 1)])[TP("x", 0)].offset == 5
    assert coordinator.fetch_offsets(group, [TP("x", 1)])[TP("x", 1)] is None


def test_transactional_offsets_visible_only_after_commit(cluster):
    coordinator = cluster.group_coordinator
    group = unique("g")
    coordinator.txn_offset_commit(group, 1001, 0, {("src", 0): 10})
    assert coordinator.fetch_offsets(group, [TP("src", 0)])[TP("src", 0)] is None
    coordinator.complete_pending_txn_offsets(1001, commit=False)
    coordinator.complete_pending_txn_offsets(1001, commit=True)  # nothing pending any more
    assert coordinator.fetch_offsets(group, [TP("src", 0)])[TP("src", 0)] is None
    coordinator.txn_offset_commit(group, 1002, 0, {("src", 0): (12, "tx")})
    coordinator.complete_pending_txn_offsets(1002, commit=True)
    assert coordinator.fetch_offsets(group, [TP("src", 0)])[TP("src", 0)].offset == 12


def test_delete_group_and_offsets(cluster):
    coordinator = cluster.group_coordinator
    group = unique("g")
    assert coordinator.delete_group(group) == GROUP_ID_NOT_FOUND
    coordinator.commit_offsets(group, {TP("x", 0): OffsetAndMetadata(1), TP("x", 1): OffsetAndMetadata(2)})
    assert coordinator.delete_offsets(group, [TP("x", 0)]) == Errors.NONE
    assert coordinator.fetch_offsets(group) == {TP("x", 1): coordinator.fetch_offsets(group)[TP("x", 1)]}
    assert coordinator.delete_group(group) == Errors.NONE
    assert coordinator.fetch_offsets(group) == {}
    assert coordinator.describe_group(group) is None


def test_commits_survive_a_leader_crash_and_a_full_restart(tmp_path):
    directory = tmp_path / "c"
    group = unique("g")
    with LocalCluster(directory, num_brokers=3, config=FAST) as cluster:
        coordinator = cluster.group_coordinator
        assert coordinator.commit_offsets(group, {TP("a", 0): OffsetAndMetadata(7, "before")})[TP("a", 0)] == 0
        p = coordinator.partition_for(group)
        leader = cluster.leader(OFFSETS_TOPIC, p)
        cluster.crash_broker(leader)
        cluster.wait_until(lambda: cluster.leader(OFFSETS_TOPIC, p) not in (-1, leader), 20, "a new leader")
        assert coordinator.fetch_offsets(group, [TP("a", 0)])[TP("a", 0)].offset == 7
        # Commits keep working on the new leader.
        assert coordinator.commit_offsets(group, {TP("a", 1): OffsetAndMetadata(9)})[TP("a", 1)] == 0
        cluster.start_broker(leader)
    with LocalCluster(directory, num_brokers=3, config=FAST) as restarted:
        offsets = restarted.group_coordinator.fetch_offsets(group)
        assert {tp: (om.offset, om.metadata) for tp, om in offsets.items()} == {
            TP("a", 0): (7, "before"), TP("a", 1): (9, None)}
