"""The foreign-key join on the embedded runtime: two App instances, the left table's topic with 3
partitions and the right table's with 2 (so the subscription topic must follow the right table
and the response topic the left one), a rebalance in the middle (the second instance joins while
input flows). The final joined table must be the TopologyTestDriver's for the same input, which
is also the left join of the final tables computed directly."""

from __future__ import annotations

import random

import pytest
from confluent_kafka import TopicPartition

from eddy.murmur2 import murmur2_partition as partition_for_key
from streams import App, AppState, StreamsBuilder, serdes
from streams.dsl import Materialized
from streams.errors import TopologyError
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


def customer_partition(topic: str, key: str, value, num_partitions: int) -> int:
    """How the test's customers topic is partitioned: by the customer's number (not murmur2)."""
    return int(key[1:]) % num_partitions


@pytest.mark.parametrize("with_partitioners", [True, False], ids=["table-joined", "default-partitioner"])
def test_custom_partitioned_tables_join_with_their_partitioners(cluster, tmp_path, with_partitioners):
    """Kafka's TableJoined.with(partitioner, otherPartitioner): the customers' topic is partitioned
    by customer number, so a subscription must go where its customer is. Given the partitioners,
    every order joins its customer (and the responses go back by the orders' partitioner); with
    the default partitioner the subscriptions of the customers murmur2 puts elsewhere find no
    customer there, so those orders join None, as they would on Kafka."""
    orders, customers, out = unique("orders"), unique("customers"), unique("joined")
    cluster.create_topics(3, orders, customers, out)
    names = {f"c{i}": f"name{i}" for i in range(12)}
    misplaced = {c for c in names if partition_for_key(c.encode(), 3) != customer_partition(customers, c, None, 3)}
    assert misplaced and len(misplaced) < len(names)  # both kinds present: the test can tell them apart
    order_list = {f"o{i}": f"c{i % 12}|item{i}" for i in range(24)}
    expected = {o: joiner(v, names[customer_of(v)]) for o, v in order_list.items()}
    if not with_partitioners:
        expected = {o: joiner(v, None) if customer_of(v) in misplaced else expected[o]
                    for o, v in order_list.items()}

    responses: list = []

    def order_partition(topic: str, key: str, value, num_partitions: int) -> int:
        responses.append((topic, key, value, num_partitions))
        return int(key[1:]) % num_partitions

    b = StreamsBuilder()
    kwargs = {"partitioner": order_partition, "other_partitioner": customer_partition} if with_partitioners else {}
    joined = b.table(orders, key_serde=S, value_serde=S).left_join(
        b.table(customers, key_serde=S, value_serde=S), joiner, foreign_key_extractor=customer_of, **kwargs)
    joined.to_stream().to(out, key_serde=S, value_serde=S)
    app = App(b.build(), {**cluster.config, "application.id": unique("fkparts"), "state.dir": str(tmp_path),
                          "commit.interval.ms": 100})
    try:
        app.start()
        assert app.wait_for_state(AppState.RUNNING, timeout=60)
        for c, name in names.items():
            cluster.produce(customers, [(c.encode(), name.encode())], partition=customer_partition(customers, c, None, 3))
        # every order after the customers, in the partition its own partitioner gives
        for o, v in order_list.items():
            cluster.produce(orders, [(o.encode(), v.encode())], partition=int(o[1:]) % 3)
        got = fold(cluster.read_all(out, 3, until=lambda msgs: fold(msgs) == expected, timeout=90))
        assert got == expected
    finally:
        assert app.close(timeout=60)
    if with_partitioners:  # the responses were routed by the orders' partitioner, by key alone
        assert responses and all("-KTABLE-FK-JOIN-SUBSCRIPTION-RESPONSE-" in r[0] and r[2] is None
                                 and r[3] == 3 for r in responses)
        assert {r[1] for r in responses} == set(order_list)


def test_partitioners_are_a_foreign_key_joins_only():
    b = StreamsBuilder()
    left, right = b.table("l", key_serde=S, value_serde=S), b.table("r", key_serde=S, value_serde=S)
    with pytest.raises(TopologyError, match="foreign-key join only"):
        left.join(right, joiner, other_partitioner=customer_partition)
    with pytest.raises(TopologyError, match="KTable.left_join other_partitioner needs a callable, got 3"):
        left.left_join(right, joiner, foreign_key_extractor=customer_of, other_partitioner=3)
