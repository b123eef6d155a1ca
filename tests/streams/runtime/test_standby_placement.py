"""Standby placement from the group's membership: client ids, owners, rendezvous ranking."""

from __future__ import annotations

from types import SimpleNamespace

from confluent_kafka import TopicPartition

from state.task_id import TaskId
from streams.runtime.standby_placement import (consumer_client_id, owners_from_members, place_standbys,
                                               process_of_client)

P1, P2, P3 = "0b7c6a52-1111-4c3e-9d1e-000000000001", "0b7c6a52-2222-4c3e-9d1e-000000000002", "p-3"


def member(client_id: str, *tps: tuple[str, int]):
    return SimpleNamespace(client_id=client_id,
                           assignment=SimpleNamespace(topic_partitions=[TopicPartition(t, p) for t, p in tps]))


def test_process_ids_come_back_from_client_ids_even_with_dashes_in_the_app_id():
    app = "my-app-v2"
    assert process_of_client(app, consumer_client_id(app, P1, 3)) == P1
    assert process_of_client(app, "my-app-v2-restore") is None          # not a stream thread
    assert process_of_client(app, "other-app-x-StreamThread-1-consumer") is None
    assert process_of_client(app, "my-app-v2--StreamThread-1-consumer") is None  # no process id


def test_owners_follow_assigned_source_partitions_and_ignore_foreign_members():
    app = "wc"
    tasks = {("wc-counts-repartition", 0): TaskId(1, 0), ("wc-counts-repartition", 1): TaskId(1, 1)}
    members = [member(consumer_client_id(app, P1, 1), ("lines", 0), ("wc-counts-repartition", 1)),
               member(consumer_client_id(app, P2, 1), ("wc-counts-repartition", 0)),
               member("rdkafka", ("wc-counts-repartition", 0))]
    processes, owners = owners_from_members(app, members, tasks)
    assert processes == {P1, P2}
    assert owners == {TaskId(1, 1): P1, TaskId(1, 0): P2}


def test_each_task_gets_the_requested_copies_never_on_its_owner():
    tasks = [TaskId(1, p) for p in range(8)]
    processes = {P1, P2, P3}
    owners = {t: [P1, P2, P3][t.partition % 3] for t in tasks}
    for replicas, copies in ((1, 1), (2, 2), (5, 2)):  # never more copies than other instances
        placement = place_standbys(tasks, processes, owners, replicas)
        for t in tasks:
            holders = [p for p, ts in placement.items() if t in ts]
            assert len(holders) == copies and owners[t] not in holders
    # every instance computes the same answer; an unowned task may go to any instance
    assert place_standbys(tasks, processes, owners, 1) == place_standbys(list(reversed(tasks)), set(processes),
                                                                         dict(owners), 1)
    assert sum(TaskId(9, 0) in ts for ts in place_standbys([TaskId(9, 0)], processes, {}, 1).values()) == 1


def test_an_instance_leaving_moves_only_its_own_standbys():
    tasks = [TaskId(1, p) for p in range(32)]
    owners = {t: "owner" for t in tasks}
    before = place_standbys(tasks, {"owner", P1, P2, P3}, owners, 1)
    after = place_standbys(tasks, {"owner", P1, P2}, owners, 1)
    for p in (P1, P2):
        assert before[p] <= after[p]  # kept everything it had; only P3's standbys moved
    assert after[P1] | after[P2] == set(tasks)
