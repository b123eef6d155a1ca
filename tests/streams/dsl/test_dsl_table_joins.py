"""KTable-KTable joins through the DSL on the TopologyTestDriver. Expected outputs are derived by
hand from Kafka's KTableKTableInnerJoin / LeftJoin / RightJoin / OuterJoin (a result whenever
the joined sides have values; a tombstone when it no longer exists; timestamp = the larger of
the update's and the other side's) and KTableKTableJoinMerger (stored when materialized)."""

import sys
import types

import pytest

from state.timestamped import ValueAndTimestamp
from streams import StreamsBuilder, serdes
from streams.dsl import BufferConfig, Materialized, Suppressed
from streams.errors import TopologyError
from streams.testing import TopologyTestDriver

S = serdes.STRING
I64 = serdes.INT64
CONFIG = {"application.id": "tjoins", "default.key.serde": "string", "default.value.serde": "string"}


def joiner(left, right):
    return f"{left}+{right}"


def records(out):
    return [(r.key, r.value, r.timestamp) for r in out.read_records_to_list()]


# (table, key, value, timestamp): updates and tombstones on each side
STEPS = [("t1", "a", "A1", 1), ("t2", "a", "a2", 10), ("t1", "a", "A3", 3), ("t2", "a", None, 4),
         ("t1", "a", None, 5), ("t2", "b", "b6", 6), ("t1", "b", "B7", 7)]


def pipe(d, steps=STEPS):
    topics = {t: d.create_input_topic(t, S, S) for t in ("t1", "t2")}
    for table, key, value, ts in steps:
        topics[table].pipe_input(key, value, ts)


EXPECTED = {
    "join": [("a", "A1+a2", 10), ("a", "A3+a2", 10),   # max(3, the right side's 10)
             ("a", None, 4),                           # right tombstone: the result is deleted
             ("b", "B7+b6", 7)],                       # left tombstone: nothing left to delete
    "left_join": [("a", "A1+None", 1), ("a", "A1+a2", 10), ("a", "A3+a2", 10),
                  ("a", "A3+None", 4),                 # right tombstone: back to joiner(left, None)
                  ("a", None, 5),                      # left tombstone deletes the result
                  ("b", "B7+b6", 7)],                  # b6 alone has no left value: nothing
    "outer_join": [("a", "A1+None", 1), ("a", "A1+a2", 10), ("a", "A3+a2", 10), ("a", "A3+None", 4),
                   ("a", None, 5), ("b", "None+b6", 6), ("b", "B7+b6", 7)],
}


@pytest.mark.parametrize("join", ["join", "left_join", "outer_join"])
def test_table_table_joins_with_tombstones_on_each_side(join):
    b = StreamsBuilder()
    t1, t2 = b.table("t1", key_serde=S, value_serde=S), b.table("t2", key_serde=S, value_serde=S)
    getattr(t1, join)(t2, joiner).to_stream().to("out", value_serde=S)
    topology = b.build()
    assert topology.copartition_groups() == [frozenset({"t1", "t2"})]
    with TopologyTestDriver(topology, CONFIG) as d:
        pipe(d)
        assert records(d.create_output_topic("out", S, S)) == EXPECTED[join]


def test_materialized_join_is_queryable_with_the_larger_timestamp():
    b = StreamsBuilder()
    t1, t2 = b.table("t1", key_serde=S, value_serde=S), b.table("t2", key_serde=S, value_serde=S)
    joined = t1.outer_join(t2, joiner, store=Materialized.as_("joined").with_caching_disabled())
    assert joined.queryable_store_name == "joined"
    with TopologyTestDriver(b.build(), CONFIG) as d:
        pipe(d, STEPS[:2])
        store = d.get_timestamped_key_value_store("joined")
        assert store.get("a") == ValueAndTimestamp("A1+a2", 10)
        pipe(d, STEPS[2:])
        assert store.get("a") is None               # both sides deleted
        assert store.get("b") == ValueAndTimestamp("B7+b6", 7)


def test_old_values_reach_a_grouped_aggregation_of_the_join():
    # group_by needs Change(new, old): the subtractor removes each old joined value before the
    # adder counts the new one (Kafka: KTableKTableJoinMerger.enableSendingOldValues)
    b = StreamsBuilder()
    t1, t2 = b.table("t1", key_serde=S, value_serde=S), b.table("t2", key_serde=S, value_serde=S)
    (t1.left_join(t2, joiner)
       .group_by(lambda k, v: (v, v), key_serde=S, value_serde=S)
       .count(store=Materialized.as_("n").with_caching_disabled())
       .to_stream().to("counts", value_serde=I64))
    with TopologyTestDriver(b.build(), CONFIG) as d:
        pipe(d)
        out = [(r.key, r.value) for r in d.create_output_topic("counts", S, I64).read_records_to_list()]
    assert out == [("A1+None", 1),
                   ("A1+None", 0), ("A1+a2", 1),
                   ("A1+a2", 0), ("A3+a2", 1),
                   ("A3+a2", 0), ("A3+None", 1),
                   ("A3+None", 0),                 # the left tombstone only subtracts
                   ("B7+b6", 1)]


def test_left_join_gets_old_values_from_an_unmaterialized_filter():
    # a filter forwards old values only on request; a left join asks for them (Kafka's
    # doJoin: enableSendingOldValues on the left table), so a value the filter drops deletes
    # the join's result
    b = StreamsBuilder()
    t1, t2 = b.table("t1", key_serde=S, value_serde=S), b.table("t2", key_serde=S, value_serde=S)
    t1.filter(lambda k, v: v != "drop").left_join(t2, joiner).to_stream().to("out", value_serde=S)
    with TopologyTestDriver(b.build(), CONFIG) as d:
        pipe(d, [("t1", "k", "x", 1), ("t1", "k", "drop", 2)])
        assert records(d.create_output_topic("out", S, S)) == [("k", "x+None", 1), ("k", None, 2)]


@pytest.mark.parametrize("cache", [0, 10 * 1024 * 1024])
@pytest.mark.parametrize("named", [False, True])
def test_a_materialized_filter_reads_its_old_values_from_its_own_store(named, cache):
    """t outer-joined with t.filter_not(always, store).map_values(upper, store): one record
    updates both sides. The source's children run in the order they were added: the filter
    first, then the join's left side. A materialized node asks its parent for no old values
    (Kafka's KTableMapValues / KTableFilter read their own store), so the filter sends old values
    only if its parent agreed when it was built: a named source does, an unnamed one refuses.
    - unnamed: the filter forwards Change(None, None) (it knows no old value), the mapper too
      (its store has nothing for b); the join's right side then finds x on the left:
      joiner(x, None) at 300; the join's left side finds nothing on the right: joiner(x, None)
      again. Two results.
    - named: the filter knows the old value is None as well: nothing changed, nothing forwarded;
      only the join's left side: one result.
    With caching, the filter's store holds the delete until the commit, whose flush forwards
    nothing for a key that neither the cache nor the store had (Kafka's CachingKeyValueStore):
    one result either way."""
    b = StreamsBuilder()
    t = b.table("t", key_serde=S, value_serde=S, store="t" if named else None)
    right = t.filter_not(lambda k, v: True, store="f").map_values(str.upper, store="m")
    t.outer_join(right, joiner).to_stream().to("out", key_serde=S, value_serde=S)
    with TopologyTestDriver(b.build(), {**CONFIG, "statestore.cache.max.bytes": cache}) as d:
        d.create_input_topic("t", S, S).pipe_input("b", "x", 300)
        assert records(d.create_output_topic("out", S, S)) == [("b", "x+None", 300)] * (1 if named or cache else 2)


def test_a_join_of_an_unmaterialized_join_reads_both_of_its_sides():
    b = StreamsBuilder()
    t1, t2, t3 = (b.table(t, key_serde=S, value_serde=S) for t in ("t1", "t2", "t3"))
    t1.join(t2, joiner).join(t3, joiner).to_stream().to("out", value_serde=S)
    with TopologyTestDriver(b.build(), CONFIG) as d:
        t3_in = d.create_input_topic("t3", S, S)
        pipe(d, [("t1", "k", "x", 1), ("t2", "k", "y", 2)])   # x+y at 2; t3 empty: nothing
        t3_in.pipe_input("k", "z", 3)                         # reads x+y through the join's getter
        pipe(d, [("t2", "k", None, 4)])                       # x+y deleted: so is x+y+z, at max(4, 3)
        t3_in.pipe_input("k", "w", 5)                         # x+y is gone: nothing
        assert records(d.create_output_topic("out", S, S)) == [("k", "x+y+z", 3), ("k", None, 4)]


def test_table_join_argument_errors_name_the_problem():
    b = StreamsBuilder()
    t1, t2 = b.table("t1"), b.table("t2")
    with pytest.raises(TopologyError, match="needs a KTable to join with, got KStream"):
        t1.join(b.stream("s"), joiner)
    with pytest.raises(TopologyError, match="needs a joiner"):
        t1.left_join(t2)
    with pytest.raises(TopologyError, match="same StreamsBuilder"):
        t1.outer_join(StreamsBuilder().table("x"), joiner)
    suppressed = t2.suppress(Suppressed.until_time_limit(10, BufferConfig.unbounded()))
    with pytest.raises(TopologyError, match="cannot be read by a join"):
        t1.join(suppressed, joiner)


def test_a_foreign_key_join_is_handed_to_fk_join(monkeypatch):
    calls = []
    module = types.ModuleType("streams.dsl.fk_join")
    module.fk_join = lambda *args, **kw: calls.append((args, kw)) or "fk"
    monkeypatch.setitem(sys.modules, "streams.dsl.fk_join", module)
    b = StreamsBuilder()
    orders, customers = b.table("orders"), b.table("customers")

    def extract(value):
        return value

    def by_key(topic, key, value, n):
        return 0

    assert orders.join(customers, joiner, foreign_key_extractor=extract) == "fk"
    assert orders.left_join(customers, joiner, "s", foreign_key_extractor=extract, other_partitioner=by_key) == "fk"
    none = {"partitioner": None, "other_partitioner": None}
    assert calls == [((orders, customers, joiner, extract), {"left_join": False, "store": None, "name": None, **none}),
                     ((orders, customers, joiner, extract), {"left_join": True, "store": "s", "name": None,
                                                             **none, "other_partitioner": by_key})]


def test_a_foreign_key_join_result_is_materialized_when_a_table_join_reads_it():
    # orders (order -> customer) joined by customer with customers; the result (keyed by order)
    # joined with shipments (order -> carrier): the second join reads the first's result by key,
    # so that result gets its store (Kafka materializes the FK join's result KTableSource)
    b = StreamsBuilder()
    orders, customers, shipments = (b.table(t, key_serde=S, value_serde=S) for t in ("orders", "customers", "shipments"))
    named = orders.join(customers, joiner, foreign_key_extractor=lambda customer: customer)
    named.join(shipments, joiner).to_stream().to("out", value_serde=S)
    assert named.store_name is not None
    with TopologyTestDriver(b.build(), CONFIG) as d:
        d.create_input_topic("customers", S, S).pipe_input("c1", "Ann", 1)
        d.create_input_topic("orders", S, S).pipe_input("o1", "c1", 2)       # o1 -> c1+Ann at max(2, 1)
        d.create_input_topic("shipments", S, S).pipe_input("o1", "ups", 3)   # reads c1+Ann from its store
        assert records(d.create_output_topic("out", S, S)) == [("o1", "c1+Ann+ups", 3)]
