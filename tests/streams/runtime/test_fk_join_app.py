"""The foreign-key join on the embedded runtime: two App instances, the left table's topic with 3
partitions and the right table's with 2 (so the subscription topic must follow the right table
and the response topic the left one), a rebalance in the middle (the second instance joins while
input flows). The final joined table must be the TopologyTestDriver's for the same input, which
is also the left join of the final tables computed directly."""

from __future__ import annotations

import random

import pytest
from confluent_kafka import TopicPartition

from streams import App, AppState, StreamsBuilder, serdes
from streams.dsl import Materialized
from streams.testing import TopologyTestDriver

from _runtime_util import Cluster, unique, wait_for

S = serdes.STRING


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    c = Cluster({"bootstrap.servers": f"local://{tmp_path_factory.mktemp('fk')}/cluster",
                 "consumer.session.timeout.ms": 6000, "consumer.heartbeat.interval.ms": 500})
    yield c
    c.close()


def customer_of(order):
    return order.split("|")[0] or None


def joiner(order, name):
    return f"{order}/{name}"


def topology(orders: str, customers: str, out: str):
    b = StreamsBuilder()
    joined = b.table(orders, key_serde=S, value_serde=S).left_join(
        b.table(customers, key_serde=S, value_serde=S), joiner, foreign_key_extractor=customer_of,
        store=Materialized.as_("joined").with_value_serde(S))
    joined.to_stream().to(out, key_serde=S, value_serde=S)
    return b.build()


def script(seed: int) -> tuple[list, list]:
    """Two phases of (table, key, value): customers c0..c4 and orders o0..o23 with foreign key
    changes, unknown customers (c9), no customer ("|..."), order and customer deletions."""
    rng = random.Random(seed)
    fks = ["c0", "c1", "c2", "c3", "c4", "c9", ""]
    phase1 = [("customers", f"c{i}", f"name{i}") for i in range(5)]
    phase1 += [("orders", f"o{i}", f"{rng.choice(fks)}|item{i}") for i in range(24)]
    phase2 = []
    for step in range(60):
        if step % 5 == 0:
            c = rng.randrange(5)
            phase2.append(("customers", f"c{c}", None if step % 15 == 0 else f"name{c}v{step}"))
        elif step % 7 == 0:
            phase2.append(("orders", f"o{rng.randrange(24)}", None))
        else:
            phase2.append(("orders", f"o{rng.randrange(24)}", f"{rng.choice(fks)}|step{step}"))
    return phase1, phase2


def final_tables(records: list) -> tuple[dict, dict]:
    tables: dict = {"orders": {}, "customers": {}}
    for table, key, value in records:
        if value is None:
            tables[table].pop(key, None)
        else:
            tables[table][key] = value
    return tables["orders"], tables["customers"]


def driver_table(records: list) -> dict:
    with TopologyTestDriver(topology("orders", "customers", "out"), {"application.id": "fk-driver"}) as d:
        inputs = {name: d.create_input_topic(name, S, S) for name in ("orders", "customers")}
        for ts, (table, key, value) in enumerate(records):
            inputs[table].pipe_input(key, value, timestamp=ts)
        table = d.create_output_topic("out", S, S).read_key_values_to_map()
    return {k: v for k, v in table.items() if v is not None}  # a tombstone deletes the key


def fold(messages: list) -> dict:
    table: dict = {}
    for m in messages:
        key = m.key().decode()
        if m.value() is None:
            table.pop(key, None)
        else:
            table[key] = m.value().decode()
    return table


def test_two_instances_with_a_rebalance_give_the_drivers_table(cluster, tmp_path):
    orders, customers, out = unique("orders"), unique("customers"), unique("joined")
    cluster.create_topics(3, orders, out)
    cluster.create_topics(2, customers)
    phase1, phase2 = script(seed=17)
    expected = driver_table(phase1 + phase2)
    # the driver's table is the left join of the final tables (orders without a customer join None)
    final_orders, final_customers = final_tables(phase1 + phase2)
    assert expected == {k: joiner(v, final_customers.get(customer_of(v))) for k, v in final_orders.items()}
    assert any(v.endswith("/None") for v in expected.values()) and len(expected) > 10

    app_id = unique("fkapp")
    subscription_topic = f"{app_id}-KTABLE-FK-JOIN-SUBSCRIPTION-REGISTRATION-0000000006-topic"
    response_topic = f"{app_id}-KTABLE-FK-JOIN-SUBSCRIPTION-RESPONSE-0000000014-topic"
    topo = topology(orders, customers, out)

    def new_app(name: str) -> App:
        return App(topo, {**cluster.config, "application.id": app_id, "state.dir": str(tmp_path / name),
                          "commit.interval.ms": 100, "repartition.purge.interval.ms": 200})

    def produce(records: list) -> None:
        for table, key, value in records:
            cluster.produce(orders if table == "orders" else customers,
                            [(key.encode(), None if value is None else value.encode())])

    apps = []
    try:
        a = new_app("a")
        apps.append(a)
        a.start()
        assert a.wait_for_state(AppState.RUNNING, timeout=60)
        # the internal topics follow the tables they are co-partitioned with
        topics = cluster.admin.list_topics(timeout=10).topics
        assert len(topics[subscription_topic].partitions) == 2
        assert len(topics[response_topic].partitions) == 3
        produce(phase1)
        cluster.read_all(out, 3, until=lambda got: len(got) >= 10, timeout=60)
        b = new_app("b")
        apps.append(b)
        b.start()
        produce(phase2[:30])
        wait_for(lambda: all(x.state is AppState.RUNNING and x.local_tasks()["active"] for x in (a, b)), 60,
                 "both instances running with tasks")
        produce(phase2[30:])
        got = fold(cluster.read_all(out, 3, until=lambda msgs: fold(msgs) == expected, timeout=90))
        assert got == expected
        # the materialized result, queried on both instances, holds the same table
        queried = {}
        for x in (a, b):
            queried.update(dict(x.store("joined").all()))
        assert queried == expected
        # both internal topics are repartition topics: what the tasks consumed and committed is purged
        probe = cluster.backend.consumer({"group.id": unique("probe")})
        try:
            for topic, n in ((subscription_topic, 2), (response_topic, 3)):
                wait_for(lambda t=topic, n=n: any(
                    probe.get_watermark_offsets(TopicPartition(t, p), timeout=10, cached=False)[0] > 0
                    for p in range(n)), 30, f"{topic} purged")
        finally:
            probe.close()
    finally:
        for x in apps:
            assert x.close(timeout=60)
