"""On the embedded cluster: a cogrouped store restored from its changelog after a restart,
repartition(num_partitions=n) creating its topic with n partitions keyed by murmur2, and the
metrics of tasks that moved away to another instance dropped (Kafka's
removeAllTaskLevelSensors)."""

from __future__ import annotations

import pytest

from eddy.murmur2 import murmur2_partition
from streams import App, AppState, Processor, StreamsBuilder, serdes
from streams.dsl import Materialized
from streams.metrics import TASK_GROUP

from _runtime_util import Cluster, embedded_config, pass_through_topology, unique, wait_for

S = serdes.STRING
J = serdes.JSON


@pytest.fixture
def cluster(tmp_path):
    c = Cluster(embedded_config(tmp_path))
    yield c
    c.close()


def _app(cluster: Cluster, topology, app_id: str, state_dir) -> App:
    return App(topology, {**cluster.config, "application.id": app_id, "state.dir": str(state_dir),
                          "commit.interval.ms": 100})


def _profiles(clicks: str, purchases: str, out: str):
    b = StreamsBuilder()
    by_user = b.stream(clicks, key_serde=S, value_serde=S).group_by_key()
    spending = b.stream(purchases, key_serde=S, value_serde=S).group_by_key()
    (by_user.cogroup(lambda k, v, agg: {**agg, "clicks": agg["clicks"] + 1})
        .cogroup(spending, lambda k, v, agg: {**agg, "spent": agg["spent"] + int(v)})
        .aggregate(lambda: {"clicks": 0, "spent": 0}, store=Materialized.as_("profiles").with_value_serde(J))
        .to_stream().to(out, key_serde=S, value_serde=J))
    return b.build()


def test_cogrouped_store_is_restored_from_its_changelog_and_continues(cluster, tmp_path):
    clicks, purchases, out = unique("clicks"), unique("purchases"), unique("profiles")
    cluster.create_topics(2, clicks, purchases, out)
    app_id = unique("cog")
    topology = _profiles(clicks, purchases, out)
    cluster.produce(clicks, [(b"u1", b"home"), (b"u2", b"cart"), (b"u1", b"shop")])
    cluster.produce(purchases, [(b"u1", b"10"), (b"u2", b"5")])
    first = {"u1": {"clicks": 2, "spent": 10}, "u2": {"clicks": 1, "spent": 5}}
    app = _app(cluster, topology, app_id, tmp_path / "a")
    try:
        app.start()
        assert app.wait_for_state(AppState.RUNNING, timeout=60)
        store = app.store("profiles")
        wait_for(lambda: all(store.get(k) == v for k, v in first.items()), 60, "first profiles")
    finally:
        assert app.close(timeout=60)
    # a new state directory: the store can only come back from its changelog
    again = _app(cluster, topology, app_id, tmp_path / "b")
    try:
        again.start()
        assert again.wait_for_state(AppState.RUNNING, timeout=60)
        store = again.store("profiles")
        assert {k: store.get(k) for k in first} == first  # restored before processing starts
        cluster.produce(clicks, [(b"u2", b"home")])
        cluster.produce(purchases, [(b"u1", b"7")])
        # each stream's aggregator continues from the restored aggregate, not the initializer
        final = {"u1": {"clicks": 2, "spent": 17}, "u2": {"clicks": 2, "spent": 5}}
        wait_for(lambda: all(store.get(k) == v for k, v in final.items()), 60, "continued profiles")
        msgs = cluster.read_all(out, 2, until=lambda got: {m.key().decode(): J.deserialize(m.value())
                                                           for m in got} == final)
        assert all(m.error() is None for m in msgs)
    finally:
        assert again.close(timeout=60)


def test_repartition_topic_gets_the_enforced_count_and_murmur2_keys(cluster, tmp_path):
    src, out = unique("in"), unique("out")
    cluster.create_topics(1, src, out)
    app_id = unique("rp")
    b = StreamsBuilder()
    b.stream(src, key_serde=S, value_serde=S).repartition(name="spread", num_partitions=3).to(out)
    keys = [f"key-{i}" for i in range(30)]
    cluster.produce(src, [(k.encode(), b"v") for k in keys])
    app = _app(cluster, b.build(), app_id, tmp_path)
    try:
        app.start()
        assert app.wait_for_state(AppState.RUNNING, timeout=60)
        topic = f"{app_id}-spread-repartition"
        assert len(cluster.admin.list_topics(timeout=10).topics[topic].partitions) == 3
        got = cluster.read_all(topic, 3, until=lambda msgs: len(msgs) >= len(keys))
        assert sorted(m.key().decode() for m in got) == sorted(keys)
        # Kafka's default partitioner: murmur2 of the serialized key, mod the 3 partitions
        assert all(m.partition() == murmur2_partition(m.key(), 3) for m in got)
        assert len({m.partition() for m in got}) == 3
        # the sub-topology reading it has one task per partition
        wait_for(lambda: app.local_tasks()["active"] and len(app.local_tasks()["active"]) == 4, 30, "four tasks")
        assert sorted(str(t) for t in app.local_tasks()["active"]) == ["0_0", "1_0", "1_1", "1_2"]
        cluster.read_all(out, 1, until=lambda msgs: len(msgs) >= len(keys))
    finally:
        assert app.close(timeout=60)


def _task_ids_in_metrics(app: App) -> set[str]:
    return {m.tags["task-id"] for m in app.metrics() if m.group == TASK_GROUP}


def test_metrics_list_only_the_tasks_an_instance_still_has(cluster, tmp_path):
    src, out = unique("in"), unique("out")
    cluster.create_topics(2, src, out)
    app_id = unique("met")
    topology = pass_through_topology(src, out, _Forward)
    a = _app(cluster, topology, app_id, tmp_path / "a")
    b = _app(cluster, topology, app_id, tmp_path / "b")
    try:
        a.start()
        wait_for(lambda: a.state is AppState.RUNNING and len(a.local_tasks()["active"]) == 2, 60, "a with both tasks")
        assert _task_ids_in_metrics(a) == {"0_0", "0_1"}
        b.start()
        # b joins: one task moves from a to b; a closes it, and its sensors with it
        wait_for(lambda: all(x.state is AppState.RUNNING and len(x.local_tasks()["active"]) == 1 for x in (a, b)),
                 60, "a and b with one task each")
        mine_a = {str(t) for t in a.local_tasks()["active"]}
        mine_b = {str(t) for t in b.local_tasks()["active"]}
        assert mine_a | mine_b == {"0_0", "0_1"}
        assert _task_ids_in_metrics(a) == mine_a
        assert _task_ids_in_metrics(b) == mine_b
    finally:
        assert b.close(timeout=60)
        assert a.close(timeout=60)


class _Forward(Processor):
    def init(self, context):
        self.context = context

    def process(self, record):
        self.context.forward(record)
