"""Consumer group conformance: rebalances under both assignors, eviction of a stalled member."""

from __future__ import annotations

import pytest
from _clients_util import GROUP_CONF, create_topic, unique, wait_for
from confluent_kafka import KafkaError

PARTITIONS = 6


class Member:
    """A group member that tracks what its rebalance callbacks say it owns."""

    def __init__(self, backend, topic: str, group: str, strategy: str, extra: dict | None = None) -> None:
        self.owned: set[int] = set()
        self.cooperative = strategy == "cooperative-sticky"
        self.consumer = backend.consumer({"group.id": group, "partition.assignment.strategy": strategy,
                                          **GROUP_CONF, **(extra or {})})
        self.consumer.subscribe([topic], on_assign=self._on_assign, on_revoke=self._on_revoke,
                                on_lost=self._on_revoke)
        self.errors: list = []
        self.callbacks: list[tuple[str, list[int]]] = []  # (assign | revoke, partitions), in order

    def _on_assign(self, consumer, partitions) -> None:
        got = {tp.partition for tp in partitions}
        self.callbacks.append(("assign", sorted(got)))
        if self.cooperative:
            assert not (got & self.owned), f"assigned partitions it already owns: {got & self.owned}"
            self.owned |= got
        else:
            self.owned = got

    def _on_revoke(self, consumer, partitions) -> None:
        self.callbacks.append(("revoke", sorted(tp.partition for tp in partitions)))
        self.owned -= {tp.partition for tp in partitions}

    def poll(self) -> None:
        msg = self.consumer.poll(0.02)
        if msg is not None and msg.error() is not None:
            self.errors.append(msg.error())

    def close(self) -> None:
        self.consumer.close()


def _settle(members: list[Member], partitions: int = PARTITIONS, timeout: float = 40.0) -> None:
    """Poll every member until the assignment covers all partitions, each once, balanced
    (sizes within one: a cooperative rebalance passes through unbalanced rounds); at every
    step no partition may be owned by two members."""

    def settled() -> bool:
        for member in members:
            member.poll()
        owned = [p for m in members for p in m.owned]
        assert len(owned) == len(set(owned)), f"a partition is owned twice: {[sorted(m.owned) for m in members]}"
        sizes = [len(m.owned) for m in members]
        return set(owned) == set(range(partitions)) and min(sizes) > 0 and max(sizes) - min(sizes) <= 1

    try:
        wait_for(settled, timeout, "the group to settle", step=0)
    except AssertionError as exc:
        raise AssertionError(f"{exc}; owned: {[sorted(m.owned) for m in members]}, "
                             f"errors: {[m.errors for m in members]}") from None


@pytest.mark.parametrize("strategy", ["range", "cooperative-sticky"])
def test_rebalance_two_then_three_members_then_one_leaves(backend, admin, strategy: str) -> None:
    topic = create_topic(admin, partitions=PARTITIONS)
    group = unique("g")
    members = [Member(backend, topic, group, strategy) for _ in range(2)]
    _settle(members)
    assert sorted(len(m.owned) for m in members) == [3, 3]
    if strategy == "range":  # range hands out contiguous runs
        assert sorted(tuple(sorted(m.owned)) for m in members) == [(0, 1, 2), (3, 4, 5)]
    before = [set(m.owned) for m in members]

    members.append(Member(backend, topic, group, strategy))
    _settle(members)
    assert sorted(len(m.owned) for m in members) == [2, 2, 2]
    if strategy == "cooperative-sticky":  # the old members only give partitions up
        assert all(m.owned <= prior for m, prior in zip(members, before))
    else:
        assert sorted(tuple(sorted(m.owned)) for m in members) == [(0, 1), (2, 3), (4, 5)]

    leaving = members.pop(0)
    kept = [set(m.owned) for m in members]
    leaving.close()
    _settle(members)
    assert sorted(len(m.owned) for m in members) == [3, 3]
    if strategy == "cooperative-sticky":
        assert all(m.owned >= prior for m, prior in zip(members, kept))
    assert not any(m.errors for m in members), [m.errors for m in members]


def test_cooperative_rebalance_always_ends_with_an_assignment_callback(backend, admin) -> None:
    """librdkafka's rebalance_cb contract (KIP-429): every cooperative rebalance ends with one
    assignment callback, even when it adds nothing, a revocation's too; a revocation callback
    comes only with partitions to revoke. A member that only gives partitions up learns that
    the rebalance is over from an empty assignment."""
    topic = create_topic(admin, partitions=4)
    group = unique("g")
    first = Member(backend, topic, group, "cooperative-sticky")
    _settle([first], partitions=4)
    assert first.callbacks == [("assign", [0, 1, 2, 3])]
    second = Member(backend, topic, group, "cooperative-sticky")
    _settle([first, second], partitions=4)
    wait_for(lambda: (first.poll(), len(first.callbacks) >= 3)[1], 30, "the first member's revocation to end", step=0)
    given_up = sorted({0, 1, 2, 3} - first.owned)
    assert first.callbacks[:3] == [("assign", [0, 1, 2, 3]), ("revoke", given_up), ("assign", [])], first.callbacks
    for member in (first, second):
        kinds = [kind for kind, _ in member.callbacks]
        assert kinds[0] == "assign" and all(parts for kind, parts in member.callbacks if kind == "revoke")
        assert all(kinds[i + 1] == "assign" for i, kind in enumerate(kinds) if kind == "revoke"), member.callbacks
    # the second member got what the first gave up (through one or two rebalances: one of
    # them may end for it before it syncs, when the first rejoins)
    assert [p for kind, parts in second.callbacks if kind == "assign" for p in parts] == given_up
    assert not first.errors and not second.errors
    first.close()
    second.close()


def test_eager_rebalance_revokes_each_nonempty_assignment_once(backend, admin) -> None:
    """librdkafka's rebalance callbacks under an eager assignor: when the next rebalance starts,
    a member revokes all it was assigned, in one callback, before its next assignment. A member
    assigned nothing may or may not be called to revoke nothing (librdkafka does either,
    depending on timing; the embedded consumer does not)."""
    topic = create_topic(admin, partitions=1)
    group = unique("g")
    members = [Member(backend, topic, group, "range") for _ in range(2)]

    def polled(predicate) -> bool:
        for m in members:
            m.poll()
        return predicate()
    wait_for(lambda: polled(lambda: sorted(len(m.owned) for m in members) == [0, 1] and all(m.callbacks for m in members)),
             40, "one member owning the partition, the other none", step=0)
    owner, idle = sorted(members[:2], key=lambda m: len(m.owned), reverse=True)
    members.append(Member(backend, topic, group, "range"))  # a rebalance of all three
    wait_for(lambda: polled(lambda: all([k for k, _ in m.callbacks].count("assign") >= 2 for m in members[:2])),
             40, "the first two members' second assignments", step=0)
    # (either member may have joined alone first and held the partition for a generation)
    for member in (owner, idle):
        held = None  # the assignment not revoked yet
        for kind, parts in member.callbacks:
            if kind == "assign":
                assert not held, member.callbacks  # a nonempty assignment is revoked before the next
                held = parts
            else:
                assert parts == (held or []), member.callbacks  # all of it, in one callback
                held = None
    assert ("revoke", [0]) in owner.callbacks and ("assign", []) in idle.callbacks, (owner.callbacks, idle.callbacks)
    assert not any(m.errors for m in members)
    for m in members:
        m.close()


def test_member_that_stops_polling_is_evicted(backend, admin) -> None:
    topic = create_topic(admin, partitions=2)
    group = unique("g")
    conf = {"max.poll.interval.ms": GROUP_CONF["session.timeout.ms"]}
    active = Member(backend, topic, group, "range", conf)
    stalled = Member(backend, topic, group, "range", conf)
    _settle([active, stalled], partitions=2)
    assert len(active.owned) == 1 and len(stalled.owned) == 1

    # Only the active member polls now: the stalled one exceeds max.poll.interval.ms,
    # leaves the group, and its partition moves to the active member.
    def active_owns_all() -> bool:
        active.poll()
        return active.owned == {0, 1}

    wait_for(active_owns_all, 40, "the stalled member's partition to move", step=0)
    stalled.poll()
    assert [e.code() for e in stalled.errors] == [KafkaError._MAX_POLL_EXCEEDED]
    wait_for(lambda: (stalled.poll(), not stalled.owned)[1], 10, "the evicted member to lose its partition")
    assert active.errors == []


def test_static_member_restarted_within_its_session_timeout_takes_its_partitions_back_without_a_rebalance(
        backend, admin) -> None:
    """KIP-345: a consumer with a group.instance.id does not leave the group on close; a new one
    with the same id, joining within the session timeout, takes over its assignment at once and
    the other members see no rebalance. A second live consumer with that id fences the first
    (FENCED_INSTANCE_ID: librdkafka's fatal consumer error, the one error its poll returns)."""
    topic = create_topic(admin, partitions=4)
    group = unique("g")
    ids = {"a": unique("inst"), "b": unique("inst")}

    def static(name: str) -> Member:
        return Member(backend, topic, group, "range", {"group.instance.id": ids[name], "session.timeout.ms": 30000})
    first, second = static("a"), static("b")
    _settle([first, second], partitions=4)
    kept, given = set(first.owned), set(second.owned)
    # (the first member may have had every partition before the second joined: a rebalance
    # before this point is not what the test is about)
    settled = list(first.callbacks)
    described = admin.describe_consumer_groups([group])[group].result(10)
    assert sorted(m.group_instance_id for m in described.members) == sorted(ids.values())

    second.close()  # no LeaveGroup: the member keeps its place until its session times out
    assert len(admin.describe_consumer_groups([group])[group].result(10).members) == 2
    restarted = static("b")
    wait_for(lambda: (first.poll(), restarted.poll(), restarted.owned)[-1], 30, "the restarted member's partitions",
             step=0)
    # under an eager assignor a rebalance would have revoked the first member's partitions
    # before any assignment of its generation: its callbacks show there was none
    assert restarted.owned == given and first.callbacks == settled and settled[-1] == ("assign", sorted(kept))
    assert restarted.callbacks == [("assign", sorted(given))]

    twin = static("b")  # the same id while the restarted member is alive: it is fenced

    def fenced() -> bool:
        for m in (first, restarted, twin):
            m.poll()
        return any(e.code() == KafkaError._FATAL for e in restarted.errors)
    wait_for(fenced, 30, "the older member with the id fenced", step=0)
    assert [e.code() for e in restarted.errors] == [KafkaError._FATAL], restarted.errors
    assert "Static consumer fenced by other consumer with same group.instance.id" in restarted.errors[0].str()
    assert not first.errors
