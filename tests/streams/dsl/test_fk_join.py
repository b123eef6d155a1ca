"""KTable.join / left_join with a foreign_key_extractor on the TopologyTestDriver (Kafka's
KTableImpl.doJoinOnForeignKey wiring of the foreign-key join processors). Expected outputs are
derived by hand from Kafka 4.1's rules (the comments give the instructions each step sends):
orders (order id -> "customer|item") joined with customers (customer id -> name). The describe
text, the two scripts, the None-key, stale-response and forced-materialization cases were also
run once through Kafka Streams 4.1.1's own TopologyTestDriver, which gave the same records,
timestamps, dropped-record counts and text."""

import pytest

from streams import StreamsBuilder, Topology, serdes
from streams.dsl import BufferConfig, Materialized, Suppressed
from streams.dsl.joins.foreign_key import CombinedKeySchema
from streams.dsl.ops.table import TableSourceProcessor
from streams.errors import TopologyError
from streams.runtime.internal import plan_internal_topics
from streams.testing import TopologyTestDriver

S = serdes.STRING
I64 = serdes.INT64
CONFIG = {"application.id": "fk"}
SUBSCRIPTION_STORE = "KTABLE-FK-JOIN-SUBSCRIPTION-STATE-STORE-0000000010"


def customer_of(order):
    return order.split("|")[0] or None


def joiner(order, name):
    return f"{order}/{name}"


def build(left_join=False, store=None, downstream=None):
    b = StreamsBuilder()
    orders = b.table("orders", key_serde=S, value_serde=S)
    customers = b.table("customers", key_serde=S, value_serde=S)
    join = orders.left_join if left_join else orders.join
    joined = join(customers, joiner, foreign_key_extractor=customer_of,
                  store=store if store is None else Materialized.as_(store).with_value_serde(S))
    if downstream is not None:
        downstream(joined)
    else:
        joined.to_stream().to("out", key_serde=S, value_serde=S)
    return b.build()


class Run:
    def __init__(self, topology, config=CONFIG):
        self.driver = TopologyTestDriver(topology, config)
        self.orders = self.driver.create_input_topic("orders", S, S)
        self.customers = self.driver.create_input_topic("customers", S, S)
        self.out = self.driver.create_output_topic("out", S, S)

    def order(self, key, value, ts):
        self.orders.pipe_input(key, value, timestamp=ts)
        return self.read()

    def customer(self, key, value, ts):
        self.customers.pipe_input(key, value, timestamp=ts)
        return self.read()

    def read(self):
        return [(r.key, r.value, r.timestamp) for r in self.out.read_records_to_list()]

    def subscriptions(self):
        schema = CombinedKeySchema(S, S)
        store = self.driver.get_state_store(SUBSCRIPTION_STORE)
        with store.all() as it:
            return sorted(tuple(schema.from_bytes(k)) for k, _ in it)

    def dropped(self):
        return sum(m.value for m in self.driver.metrics() if m.name == "dropped-records-total")

    def close(self):
        self.driver.close()


@pytest.fixture
def run():
    runs = []

    def make(*args, **kwargs):
        runs.append(Run(build(*args, **kwargs)))
        return runs[-1]
    yield make
    for r in runs:
        r.close()


KAFKA_DESCRIBE = """\
Topologies:
   Sub-topology: 0
    Source: KTABLE-SOURCE-0000000016 (topics: [KTABLE-FK-JOIN-SUBSCRIPTION-RESPONSE-0000000014-topic])
      --> KTABLE-FK-JOIN-SUBSCRIPTION-RESPONSE-RESOLVER-PROCESSOR-0000000017
    Source: KSTREAM-SOURCE-0000000001 (topics: [orders])
      --> KTABLE-SOURCE-0000000002
    Processor: KTABLE-FK-JOIN-SUBSCRIPTION-RESPONSE-RESOLVER-PROCESSOR-0000000017 (stores: [orders-STATE-STORE-0000000000])
      --> KTABLE-FK-JOIN-OUTPUT-0000000018
      <-- KTABLE-SOURCE-0000000016
    Processor: KTABLE-FK-JOIN-OUTPUT-0000000018 (stores: [])
      --> KTABLE-TOSTREAM-0000000020
      <-- KTABLE-FK-JOIN-SUBSCRIPTION-RESPONSE-RESOLVER-PROCESSOR-0000000017
    Processor: KTABLE-SOURCE-0000000002 (stores: [orders-STATE-STORE-0000000000])
      --> KTABLE-FK-JOIN-SUBSCRIPTION-REGISTRATION-0000000007
      <-- KSTREAM-SOURCE-0000000001
    Processor: KTABLE-FK-JOIN-SUBSCRIPTION-REGISTRATION-0000000007 (stores: [])
      --> KTABLE-SINK-0000000008
      <-- KTABLE-SOURCE-0000000002
    Processor: KTABLE-TOSTREAM-0000000020 (stores: [])
      --> KSTREAM-SINK-0000000021
      <-- KTABLE-FK-JOIN-OUTPUT-0000000018
    Sink: KSTREAM-SINK-0000000021 (topic: out)
      <-- KTABLE-TOSTREAM-0000000020
    Sink: KTABLE-SINK-0000000008 (topic: KTABLE-FK-JOIN-SUBSCRIPTION-REGISTRATION-0000000006-topic)
      <-- KTABLE-FK-JOIN-SUBSCRIPTION-REGISTRATION-0000000007

  Sub-topology: 1
    Source: KSTREAM-SOURCE-0000000004 (topics: [customers])
      --> KTABLE-SOURCE-0000000005
    Source: KTABLE-SOURCE-0000000009 (topics: [KTABLE-FK-JOIN-SUBSCRIPTION-REGISTRATION-0000000006-topic])
      --> KTABLE-FK-JOIN-SUBSCRIPTION-PROCESSOR-0000000011
    Processor: KTABLE-FK-JOIN-SUBSCRIPTION-PROCESSOR-0000000011 (stores: [KTABLE-FK-JOIN-SUBSCRIPTION-STATE-STORE-0000000010])
      --> KTABLE-FK-JOIN-SUBSCRIPTION-PROCESSOR-0000000012
      <-- KTABLE-SOURCE-0000000009
    Processor: KTABLE-SOURCE-0000000005 (stores: [customers-STATE-STORE-0000000003])
      --> KTABLE-FK-JOIN-SUBSCRIPTION-PROCESSOR-0000000013
      <-- KSTREAM-SOURCE-0000000004
    Processor: KTABLE-FK-JOIN-SUBSCRIPTION-PROCESSOR-0000000012 (stores: [customers-STATE-STORE-0000000003])
      --> KTABLE-SINK-0000000015
      <-- KTABLE-FK-JOIN-SUBSCRIPTION-PROCESSOR-0000000011
    Processor: KTABLE-FK-JOIN-SUBSCRIPTION-PROCESSOR-0000000013 (stores: [KTABLE-FK-JOIN-SUBSCRIPTION-STATE-STORE-0000000010])
      --> KTABLE-SINK-0000000015
      <-- KTABLE-SOURCE-0000000005
    Sink: KTABLE-SINK-0000000015 (topic: KTABLE-FK-JOIN-SUBSCRIPTION-RESPONSE-0000000014-topic)
      <-- KTABLE-FK-JOIN-SUBSCRIPTION-PROCESSOR-0000000012, KTABLE-FK-JOIN-SUBSCRIPTION-PROCESSOR-0000000013

"""


@pytest.mark.parametrize("left_join", [False, True])
def test_describe_reads_as_kafkas(left_join):
    """Kafka's names in doJoinOnForeignKey's order: the subscription topic (6), the send
    processor (7), its sink (8) and source (9), the subscription store (10), the receive (11),
    subscription-join (12) and foreign-table-join (13) processors, the response topic (14), its
    sink (15) and source (16), the resolver (17), the output (18) and its unused store name (19);
    node order by sub-tree size then name, as Kafka's TopologyDescription."""
    topology = build(left_join)
    assert str(topology.describe()) == KAFKA_DESCRIBE
    assert topology.internal_topics == {"KTABLE-FK-JOIN-SUBSCRIPTION-REGISTRATION-0000000006-topic": "repartition",
                                        "KTABLE-FK-JOIN-SUBSCRIPTION-RESPONSE-0000000014-topic": "repartition"}


def test_internal_topics_take_the_partition_counts_of_the_tables_they_join():
    """The subscription topic is co-partitioned with the right table's topic (keyed by the
    foreign key), the response topic with the left table's (it goes back to the left record's
    partition); each sub-topology's changelogs follow its tasks."""
    topology = build()
    plan = plan_internal_topics(topology, topology.build(), "app", {"orders": 3, "customers": 2, "out": 1})
    counts = {topic: spec.partitions for topic, spec in plan.specs.items()}
    assert counts == {"app-KTABLE-FK-JOIN-SUBSCRIPTION-REGISTRATION-0000000006-topic": 2,
                      "app-KTABLE-FK-JOIN-SUBSCRIPTION-RESPONSE-0000000014-topic": 3,
                      "app-KTABLE-FK-JOIN-SUBSCRIPTION-STATE-STORE-0000000010-changelog": 2,
                      "app-orders-STATE-STORE-0000000000-changelog": 3,
                      "app-customers-STATE-STORE-0000000003-changelog": 2}
    assert plan.partitions_of_sub == {0: 3, 1: 2}
    assert plan.specs["app-KTABLE-FK-JOIN-SUBSCRIPTION-RESPONSE-0000000014-topic"].config["cleanup.policy"] == "delete"


@pytest.mark.parametrize("aggregated", ["right", "both"])
def test_internal_topics_when_a_table_is_an_aggregation(aggregated):
    """A side that reads a repartition topic: the subscription topic and the right side's
    repartition topic form a group of internal topics only, which takes the largest of their
    counts (Kafka's CopartitionedTopicsEnforcer); with both sides aggregated the two FK topics
    need each other's count (a cycle): the subscription topic, first in order, takes the largest
    known count of its writer's inputs (Kafka's RepartitionTopics), then the rest follows."""
    b = StreamsBuilder()
    if aggregated == "both":
        orders = (b.stream("order-events", key_serde=S, value_serde=S).group_by(lambda k, v: v.split("=")[0])
                  .reduce(lambda agg, v: v.split("=")[1], store="orders"))
    else:
        orders = b.table("orders", key_serde=S, value_serde=S)
    visits = b.stream("visits", key_serde=S, value_serde=S).group_by(lambda k, v: v).count(store="visits")
    orders.join(visits, joiner, foreign_key_extractor=customer_of).to_stream().to("out", key_serde=S, value_serde=S)
    topology = b.build()
    counts = {"orders": 3, "order-events": 3, "visits": 2, "out": 1}
    plan = plan_internal_topics(topology, topology.build(), "app", counts)
    got = {t: spec.partitions for t, spec in plan.specs.items() if not t.endswith("-changelog")}
    fk_topics = {t: 3 for t in got if "FK-JOIN" in t}
    assert got == {"app-visits-repartition": 3, **fk_topics, **({"app-orders-repartition": 3}
                                                              if aggregated == "both" else {})}
    # tasks: the visits source's sub-topology 2, every sub-topology reading a repartition topic 3
    assert len(fk_topics) == 2
    assert sorted(plan.partitions_of_sub.values()) == ([2, 3, 3, 3] if aggregated == "both" else [2, 3, 3])


# One script for both joins: (table, key, value, timestamp, inner join output, left join output).
# Result timestamps: a subscription meeting a customer takes max(order ts, customer ts); a
# customer update fanning out takes the customer's ts.
SCRIPT = [
    # no subscriber yet
    ("customer", "c1", "Ann", 10, [], []),
    # insert: inner PROPAGATE_ONLY_IF_FK_VAL_AVAILABLE, left PROPAGATE_NULL_IF_NO_FK_VAL_AVAILABLE; Ann is there
    ("order", "o1", "c1|x", 20, [("o1", "c1|x/Ann", 20)], [("o1", "c1|x/Ann", 20)]),
    ("order", "o2", "c1|y", 30, [("o2", "c1|y/Ann", 30)], [("o2", "c1|y/Ann", 30)]),
    # c2 unknown: inner nothing, left joiner(value, None)
    ("order", "o3", "c2|z", 40, [], [("o3", "c2|z/None", 40)]),
    # update of c1 fans out to both subscribers, in combined-key order (o1 < o2)
    ("customer", "c1", "Bea", 50, [("o1", "c1|x/Bea", 50), ("o2", "c1|y/Bea", 50)],
     [("o1", "c1|x/Bea", 50), ("o2", "c1|y/Bea", 50)]),
    ("customer", "c2", "Cid", 60, [("o3", "c2|z/Cid", 60)], [("o3", "c2|z/Cid", 60)]),
    # foreign key c1 -> c2: DELETE_KEY_NO_PROPAGATE to c1, PROPAGATE_NULL_IF_NO_FK_VAL_AVAILABLE to c2
    ("order", "o1", "c2|x", 70, [("o1", "c2|x/Cid", 70)], [("o1", "c2|x/Cid", 70)]),
    # c1 has o2 only now
    ("customer", "c1", "Bee", 80, [("o2", "c1|y/Bee", 80)], [("o2", "c1|y/Bee", 80)]),
    # c2 deleted: inner tombstones every subscriber, left joins them with None
    ("customer", "c2", None, 90, [("o1", None, 90), ("o3", None, 90)],
     [("o1", "c2|x/None", 90), ("o3", "c2|z/None", 90)]),
    # order deleted: inner DELETE_KEY_AND_PROPAGATE (ts max(100, Bee's 80)); left DELETE_KEY_NO_PROPAGATE to c1
    # and PROPAGATE_NULL_IF_NO_FK_VAL_AVAILABLE under a None key (ts 100); both come back as a tombstone
    ("order", "o2", None, 100, [("o2", None, 100)], [("o2", None, 100)]),
    ("order", "o4", "c3|w", 110, [], [("o4", "c3|w/None", 110)]),
    # c3 -> c1: the new key joins
    ("order", "o4", "c1|w", 120, [("o4", "c1|w/Bee", 120)], [("o4", "c1|w/Bee", 120)]),
    # c1 -> c9 (no such customer): the old result must go: a tombstone (inner), joiner(value, None) (left)
    ("order", "o4", "c9|w", 130, [("o4", None, 130)], [("o4", "c9|w/None", 130)]),
]


@pytest.mark.parametrize("left_join", [False, True])
def test_foreign_key_changes_deletions_and_fan_out(run, left_join):
    r = run(left_join)
    for step, (table, key, value, ts, inner, left) in enumerate(SCRIPT):
        got = (r.order if table == "order" else r.customer)(key, value, ts)
        assert got == (left if left_join else inner), f"step {step}: {table} {key}={value!r}"
    # subscriptions: o1 and o3 stay on the deleted c2 (a right delete does not unsubscribe), o2 is
    # gone with its order, o4 moved to c9; a left join's None key is never stored
    assert r.subscriptions() == [("c2", "o1"), ("c2", "o3"), ("c9", "o4")]
    assert r.dropped() == 0


def test_inner_join_none_foreign_key(run):
    r = run(False)
    assert r.customer("c1", "Ann", 10) == []
    assert r.order("o1", "|x", 20) == []                    # no key: dropped, counted
    assert r.dropped() == 1 and r.subscriptions() == []
    assert r.order("o1", "c1|x", 30) == [("o1", "c1|x/Ann", 30)]   # old key None: an insert
    # key gone: DELETE_KEY_AND_PROPAGATE to c1 (hash of "|y"): the result becomes a tombstone
    assert r.order("o1", "|y", 40) == [("o1", None, 40)]
    assert r.dropped() == 2 and r.subscriptions() == []
    assert r.customer("c1", "Bob", 50) == []                # nobody subscribed any more
    assert r.order("o1", None, 60) == []                    # old key None: nothing to delete


def test_left_join_none_foreign_key(run):
    """KIP-962: a left join row without a foreign key joins with None."""
    r = run(True)
    assert r.customer("c1", "Ann", 10) == []
    assert r.order("o1", "|x", 20) == [("o1", "|x/None", 20)]
    assert r.order("o1", "c1|x", 30) == [("o1", "c1|x/Ann", 30)]
    # c1 -> None: DELETE_KEY_NO_PROPAGATE to c1, PROPAGATE_NULL_IF_NO_FK_VAL_AVAILABLE under None
    assert r.order("o1", "|y", 40) == [("o1", "|y/None", 40)]
    assert r.customer("c1", "Bob", 50) == []
    assert r.order("o1", None, 60) == [("o1", None, 60)]
    assert r.dropped() == 0 and r.subscriptions() == []


def test_subscription_store_changelog_records_carry_their_subscriptions_time():
    """Kafka's change logging stamps a delete with context.timestamp(): the subscription store's
    tombstones carry the time of the subscription that removed the entry, never the wall clock.
    o1 subscribes to c1 at 20; moving to c2 at 30 unsubscribes c1 (tombstone at 30) and
    subscribes to c2 (put at 30); deleting o1 at 40 unsubscribes c2 (tombstone at 40)."""
    r = Run(build())
    r.customer("c1", "Ann", 10)
    r.order("o1", "c1|pen", 20)
    r.order("o1", "c2|ink", 30)
    r.order("o1", None, 40)
    schema = CombinedKeySchema(S, S)
    logged = [(schema.from_bytes(rec.key), rec.value is None, rec.timestamp)
              for rec in r.driver.producer_history(r.driver.changelog_topic(SUBSCRIPTION_STORE))]
    assert logged == [(("c1", "o1"), False, 20), (("c1", "o1"), True, 30),
                      (("c2", "o1"), False, 30), (("c2", "o1"), True, 40)]


def test_stale_response_is_dropped_by_the_value_hash():
    """One input record updates order o1 twice before any subscription is processed (the
    driver queues internal records FIFO): "c1|a" subscribes to c1 (hash of "c1|a"), then "c2|b"
    unsubscribes c1 and subscribes to c2 (hash of "c2|b"). The response to the first subscription
    comes back after o1 became "c2|b": its hash differs, it is dropped; without the check o1
    would first join "c2|b" with c1's name. One result: joiner("c2|b", c2's name), ts max(100, 20)."""
    b = StreamsBuilder()
    orders = (b.stream("order-batches", key_serde=S, value_serde=S)
              .flat_map_values(lambda v: v.split(","))
              .to_table(store=Materialized.as_("orders").with_value_serde(S).with_caching_disabled()))
    customers = b.table("customers", key_serde=S, value_serde=S)
    orders.join(customers, joiner, foreign_key_extractor=customer_of).to_stream().to("out", key_serde=S,
                                                                                   value_serde=S)
    with TopologyTestDriver(b.build(), CONFIG) as d:
        customers_in = d.create_input_topic("customers", S, S)
        customers_in.pipe_input("c1", "Ann", timestamp=10)
        customers_in.pipe_input("c2", "Cid", timestamp=20)
        d.create_input_topic("order-batches", S, S).pipe_input("o1", "c1|a,c2|b", timestamp=100)
        out = [(r.key, r.value, r.timestamp) for r in d.create_output_topic("out", S, S).read_records_to_list()]
        assert out == [("o1", "c2|b/Cid", 100)]
        # the stale response is a dropped record (Kafka's ResponseJoinProcessorSupplier)
        assert sum(m.value for m in d.metrics() if m.name == "dropped-records-total") == 1


def test_materialized_result_is_queryable_and_sends_old_values(run):
    """store= materializes the result; a grouped count downstream subtracts the old joined value
    first, so counts per customer name follow the join (without old values Ann would stay at 2)."""
    def per_name(joined):
        (joined.group_by(lambda k, v: (v.split("/")[1], v), key_serde=S, value_serde=S)
         .count(store=Materialized.as_("per-name").with_caching_disabled())
         .to_stream().to("out", key_serde=S, value_serde=I64))

    r = run(False, "joined", per_name)
    assert "KTABLE-FK-JOIN-OUTPUT-0000000018 (stores: [joined])" in str(r.driver.topology.describe())
    r.customer("c1", "Ann", 10)
    r.customer("c2", "Cid", 15)
    r.order("o1", "c1|x", 20)
    r.order("o2", "c1|y", 30)
    r.order("o1", "c2|x", 40)      # o1: "c1|x/Ann" -> "c2|x/Cid": Ann 2 -> 1, Cid 1
    r.customer("c1", "Bea", 50)    # o2: "c1|y/Ann" -> "c1|y/Bea": Ann 1 -> 0, Bea 1
    joined = r.driver.get_key_value_store("joined")
    assert dict(joined.all()) == {"o1": "c2|x/Cid", "o2": "c1|y/Bea"}
    assert r.driver.get_timestamped_key_value_store("joined").get("o2").timestamp == 50
    assert dict(r.driver.get_key_value_store("per-name").all()) == {"Ann": 0, "Bea": 1, "Cid": 1}


def test_result_gets_a_store_when_a_later_operation_needs_old_values():
    """Without store= the result is unmaterialized (Kafka's KTableSource without a store) unless a
    later operation needs old values: then it gets its generated store (Kafka's forced
    materialization), as group_by does here."""
    plain = build()
    assert "KTABLE-FK-JOIN-OUTPUT-0000000018 (stores: [])" in str(plain.describe())
    grouped = build(downstream=lambda joined: joined.group_by(lambda k, v: (v, v), key_serde=S, value_serde=S)
                    .count())
    assert ("KTABLE-FK-JOIN-OUTPUT-0000000018 (stores: [KTABLE-FK-JOIN-OUTPUT-STATE-STORE-0000000019])"
            in str(grouped.describe()))


@pytest.mark.parametrize("store", [None, "joined"])
def test_a_filter_below_the_result_forwards_tombstones_unless_the_result_has_a_store(run, store):
    """KTable.filter asks its parent for old values without forcing it (Kafka's KTableFilter):
    the result of an FK join without store= is a KTableSource that refuses, so the filter,
    knowing no old value, forwards every key it filters out as a tombstone (and it stays
    unmaterialized); with store= the result sends old values and the filter forwards nothing for
    a key it never forwarded. o1 joins Ann at 2 (the larger timestamp) and is filtered out."""
    r = run(True, store, lambda joined: joined.filter(lambda k, v: "Bob" in v).to_stream().to(
        "out", key_serde=S, value_serde=S))
    stores = "[joined]" if store else "[]"
    assert f"KTABLE-FK-JOIN-OUTPUT-0000000018 (stores: {stores})" in str(r.driver.topology.describe())
    r.customer("c1", "Ann", 1)
    assert r.order("o1", "c1|x", 2) == ([] if store else [("o1", None, 2)])


def test_chained_foreign_key_joins():
    """An FK join's result joined again by foreign key: the first result is read by key, so it
    gets its store. orders (id -> product) -> products (id -> "category:name") -> categories."""
    b = StreamsBuilder()
    orders = b.table("orders", key_serde=S, value_serde=S)
    products = b.table("products", key_serde=S, value_serde=S)
    categories = b.table("categories", key_serde=S, value_serde=S)
    with_product = orders.join(products, lambda o, p: p, foreign_key_extractor=lambda o: o,
                               store=Materialized().with_value_serde(S))
    (with_product.join(categories, lambda p, c: f"{p}@{c}", foreign_key_extractor=lambda p: p.split(":")[0])
        .to_stream().to("out", key_serde=S, value_serde=S))
    # the second join reads the first result by key: its generated store now exists, unqueryable
    assert with_product.queryable_store_name is None
    assert with_product.store_name == "KTABLE-FK-JOIN-OUTPUT-STATE-STORE-0000000022"
    with TopologyTestDriver(b.build(), CONFIG) as d:
        d.create_input_topic("categories", S, S).pipe_input("k1", "Kitchen", timestamp=1)
        products_in = d.create_input_topic("products", S, S)
        products_in.pipe_input("p1", "k1:pan", timestamp=2)
        d.create_input_topic("orders", S, S).pipe_input("o1", "p1", timestamp=3)
        products_in.pipe_input("p1", "k2:pan", timestamp=4)    # category k2 unknown: inner -> tombstone
        out = [(r.key, r.value, r.timestamp) for r in d.create_output_topic("out", S, S).read_records_to_list()]
        assert out == [("o1", "k1:pan@Kitchen", 3), ("o1", None, 4)]


def test_copartition_groups_name_sources_only():
    topology = Topology()
    topology.add_source("s", "t", key_serde=S, value_serde=S)
    topology.add_processor("p", lambda: TableSourceProcessor("unmaterialized", False, False), "s")
    topology.add_source("s2", "t2", key_serde=S, value_serde=S)
    topology.copartition_sources("s")  # one source alone: nothing to co-partition
    topology.copartition_sources("s", "s2")
    assert topology.copartition_groups() == [frozenset({"t", "t2"})]
    topology.copartition_sources("s", "p")
    with pytest.raises(TopologyError, match="'p' is not a source"):
        topology.copartition_groups()


def test_bad_arguments_are_named():
    b = StreamsBuilder()
    orders = b.table("orders", key_serde=S, value_serde=S)
    customers = b.table("customers", key_serde=S, value_serde=S)
    with pytest.raises(TopologyError, match="needs a KTable of the same StreamsBuilder"):
        orders.join(b.stream("s"), joiner, foreign_key_extractor=customer_of)
    with pytest.raises(TopologyError, match="needs a KTable of the same StreamsBuilder"):
        orders.join(StreamsBuilder().table("t"), joiner, foreign_key_extractor=customer_of)
    with pytest.raises(TopologyError, match="joiner needs a callable"):
        orders.join(customers, "nope", foreign_key_extractor=customer_of)
    with pytest.raises(TopologyError, match="foreign_key_extractor needs a callable"):
        orders.left_join(customers, joiner, foreign_key_extractor=42)
    with pytest.raises(TopologyError, match="store must be a name or a Materialized"):
        orders.join(customers, joiner, foreign_key_extractor=customer_of, store=3)
    suppressed = orders.suppress(Suppressed.until_time_limit(10, BufferConfig.unbounded()))
    with pytest.raises(TopologyError, match="the table KTABLE-SUPPRESS-.* cannot be read by a join"):
        suppressed.join(customers, joiner, foreign_key_extractor=customer_of)


def test_tables_without_a_store_are_read_through_value_getters():
    """Kafka reads both sides of the join through their value getters: an unmaterialized filter on
    the left, an unmaterialized map_values on the right. Derivation (inner join):
    - c1=ann@1: no subscriber of c1: nothing.
    - o1=c1|pan@2 passes the filter: subscribe to c1 (PROPAGATE_ONLY_IF_FK_VAL_AVAILABLE); the
      right getter maps ann to ANN@1; the response's hash matches the left getter's value, so
      joiner(c1|pan, ANN) at max(2, 1) = 2.
    - o1=c1|xpot@3 fails the filter: the filter forwards Change(None, c1|pan) (the source sends
      old values); the foreign key of the old value, c1, is unsubscribed with
      DELETE_KEY_AND_PROPAGATE: a tombstone for o1 at 3.
    - c1=bob@4: no subscriber left: nothing.
    - o2=c1|cup@5: subscribes, meets BOB@4: joiner(c1|cup, BOB) at 5."""
    b = StreamsBuilder()
    orders = b.table("orders", key_serde=S, value_serde=S).filter(lambda k, v: "x" not in v)
    customers = b.table("customers", key_serde=S, value_serde=S).map_values(str.upper)
    orders.join(customers, joiner, foreign_key_extractor=customer_of).to_stream().to("out", key_serde=S, value_serde=S)
    r = Run(b.build(), {**CONFIG, "default.value.serde": "string"})  # map_values gives no value serde
    try:
        assert r.customer("c1", "ann", 1) == []
        assert r.order("o1", "c1|pan", 2) == [("o1", "c1|pan/ANN", 2)]
        assert r.order("o1", "c1|xpot", 3) == [("o1", None, 3)]
        assert r.customer("c1", "bob", 4) == []
        assert r.order("o2", "c1|cup", 5) == [("o2", "c1|cup/BOB", 5)]
    finally:
        r.close()
