"""KTable.transform_values (Kafka's KTable.transformValues and KTableTransformValues). Expected
outputs derived by hand from Kafka's rules: each task's transformer gives the new value, and the
old one when downstream wants old values and the table has no store; it is called for a
tombstone's None too; its context refuses forward; a join reads an unmaterialized one through a
transformer of the getter's own. The describe() texts are Kafka Streams 4.1.1's."""

from __future__ import annotations

import pytest

from state.stores import Stores
from streams import StreamsBuilder, serdes
from streams.dsl import Materialized
from streams.errors import ProcessingError, TopologyError
from streams.testing import TopologyTestDriver

S, I64 = serdes.STRING, serdes.INT64
CONFIG = {"application.id": "tv", "default.key.serde": "string", "default.value.serde": "string",
          "statestore.cache.max.bytes": 0}


class Upper:
    def init(self, context):
        pass

    def transform(self, key, value):
        return None if value is None else value.upper()

    def close(self):
        pass


class Versioned:
    """Counts each key's updates in the store "versions" (a tombstone's too) and tags the value."""

    def init(self, context):
        self.versions = context.get_state_store("versions")

    def transform(self, key, value):
        n = (self.versions.get(key) or 0) + 1
        self.versions.put(key, n)
        return None if value is None else f"{value}@v{n}"


def _records(out):
    return [(r.key, r.value, r.timestamp) for r in out.read_records_to_list()]


def test_the_transformer_sees_every_update_a_tombstone_too_and_reads_its_store():
    b = StreamsBuilder()
    b.add_state_store(Stores.key_value_store_builder(Stores.persistent_key_value_store("versions"), S, I64))
    b.table("t", key_serde=S, value_serde=S).transform_values(Versioned, stores=["versions"]).to_stream().to("out")
    with TopologyTestDriver(b.build(), CONFIG) as d:
        inp = d.create_input_topic("t", S, S)
        for key, value, ts in [("a", "x", 1), ("a", "y", 2), ("a", None, 3), ("b", "z", 4)]:
            inp.pipe_input(key, value, timestamp=ts)
        assert _records(d.create_output_topic("out", S, S)) == [("a", "x@v1", 1), ("a", "y@v2", 2), ("a", None, 3),
                                                                ("b", "z@v1", 4)]
        assert dict(d.get_key_value_store("versions").all()) == {"a": 3, "b": 1}


def test_a_materialized_transform_is_queryable():
    b = StreamsBuilder()
    b.table("t", key_serde=S, value_serde=S).transform_values(Upper, Materialized.as_("upper"))
    with TopologyTestDriver(b.build(), CONFIG) as d:
        inp = d.create_input_topic("t", S, S)
        inp.pipe_input("a", "x", timestamp=1)
        inp.pipe_input("b", "y", timestamp=2)
        inp.pipe_input("a", None, timestamp=3)
        assert dict(d.get_key_value_store("upper").all()) == {"b": "Y"}


def test_a_join_reads_an_unmaterialized_transform_through_its_own_transformer():
    """t2's update reads t's value transformed ("X"); t's later update goes through the
    transform processor and joins t2's value."""
    assert _joined_with_transform(Upper) == [("k", "y+X", 2), ("k", "y+Z", 3)]


def _joined_with_transform(transformer_supplier) -> list:
    """t2 joined with t.transform_values(transformer_supplier), unmaterialized: t's "x"@1, t2's
    "y"@2 (a lookup through the getter), t's "z"@3 (through the processor); the join's output."""
    b = StreamsBuilder()
    t = b.table("t", key_serde=S, value_serde=S)
    t2 = b.table("t2", key_serde=S, value_serde=S)
    t2.join(t.transform_values(transformer_supplier), lambda left, right: f"{left}+{right}").to_stream().to("out")
    with TopologyTestDriver(b.build(), CONFIG) as d:
        d.create_input_topic("t", S, S).pipe_input("k", "x", timestamp=1)
        d.create_input_topic("t2", S, S).pipe_input("k", "y", timestamp=2)
        d.create_input_topic("t", S, S).pipe_input("k", "z", timestamp=3)
        return _records(d.create_output_topic("out", S, S))


def test_old_values_are_transformed_for_a_table_aggregation():
    """The count by transformed value: a moving from X to Y is subtracted from X (its old value
    transformed again, the table having no store of its own) and added to Y."""
    b = StreamsBuilder()
    (b.table("t", key_serde=S, value_serde=S).transform_values(Upper).group_by(lambda k, v: (v, k))
     .count().to_stream().to("out", key_serde=S, value_serde=I64))
    with TopologyTestDriver(b.build(), CONFIG) as d:
        inp = d.create_input_topic("t", S, S)
        for key, value, ts in [("a", "x", 1), ("b", "x", 2), ("a", "y", 3)]:
            inp.pipe_input(key, value, timestamp=ts)
        assert _records(d.create_output_topic("out", S, I64)) == [("X", 1, 1), ("X", 2, 2), ("X", 1, 3), ("Y", 1, 3)]


class _Contexts:
    """Tags each value with the input topic its context shows (None: no input record)."""

    def init(self, context):
        self.context = context

    def transform(self, key, value):
        meta = self.context.record_metadata()
        return None if value is None else f"{value}<{meta.topic if meta is not None else None}>"


def test_a_getters_transformer_runs_in_a_record_context_of_its_own():
    """Kafka's KTableTransformValuesGetter: no input record while a join's lookup transforms; the
    table's own updates are transformed in their record's context."""
    assert _joined_with_transform(_Contexts) == [("k", "y+x<None>", 2), ("k", "y+z<t>", 3)]


class _Forwarding:
    def init(self, context):
        self.context = context

    def transform(self, key, value):
        self.context.forward(None)
        return value


def test_bad_inputs_are_typed_errors():
    b = StreamsBuilder()
    b.table("t", key_serde=S, value_serde=S).transform_values(_Forwarding, name="fwd").to_stream().to("out")
    with TopologyTestDriver(b.build(), CONFIG) as d:
        with pytest.raises(ProcessingError, match="fwd: forward\\(\\) is not allowed"):
            d.create_input_topic("t", S, S).pipe_input("k", "v", timestamp=1)
    b = StreamsBuilder()
    b.table("t", key_serde=S, value_serde=S).transform_values(lambda: "no transform").to_stream().to("out")
    with pytest.raises(ProcessingError, match="no transform\\(key, value\\) method"):
        with TopologyTestDriver(b.build(), CONFIG):
            pass
    table = StreamsBuilder().table("t")
    with pytest.raises(TopologyError, match="needs a callable"):
        table.transform_values(Upper())
    with pytest.raises(TopologyError, match="character other than"):
        table.transform_values(Upper, name="a b")


def test_describe_matches_kafka():
    b = StreamsBuilder()
    b.add_state_store(Stores.key_value_store_builder(Stores.in_memory_key_value_store("tv-state"), S, I64))
    b.table("t", key_serde=S, value_serde=S).transform_values(Upper, "tv-store", stores=["tv-state"]).to_stream().to("o")
    assert str(b.build().describe()) == TWO
    b = StreamsBuilder()
    t = b.table("t", key_serde=S, value_serde=S)
    t.transform_values(Upper, Materialized.with_serdes(S, S), name="tv").to_stream().to("o")
    t2 = b.table("t2", key_serde=S, value_serde=S)
    t2.join(t.transform_values(Upper), lambda x, y: x + y).to_stream().to("o2")
    assert str(b.build().describe()) == THREE


# Kafka Streams 4.1.1's describe() texts of the two topologies above
TWO = """Topologies:
   Sub-topology: 0
    Source: KSTREAM-SOURCE-0000000001 (topics: [t])
      --> KTABLE-SOURCE-0000000002
    Processor: KTABLE-SOURCE-0000000002 (stores: [])
      --> KTABLE-TRANSFORMVALUES-0000000003
      <-- KSTREAM-SOURCE-0000000001
    Processor: KTABLE-TRANSFORMVALUES-0000000003 (stores: [tv-store, tv-state])
      --> KTABLE-TOSTREAM-0000000004
      <-- KTABLE-SOURCE-0000000002
    Processor: KTABLE-TOSTREAM-0000000004 (stores: [])
      --> KSTREAM-SINK-0000000005
      <-- KTABLE-TRANSFORMVALUES-0000000003
    Sink: KSTREAM-SINK-0000000005 (topic: o)
      <-- KTABLE-TOSTREAM-0000000004

"""

THREE = """Topologies:
   Sub-topology: 0
    Source: KSTREAM-SOURCE-0000000001 (topics: [t])
      --> KTABLE-SOURCE-0000000002
    Processor: KTABLE-SOURCE-0000000002 (stores: [t-STATE-STORE-0000000000])
      --> KTABLE-TRANSFORMVALUES-0000000009, tv
      <-- KSTREAM-SOURCE-0000000001
    Source: KSTREAM-SOURCE-0000000007 (topics: [t2])
      --> KTABLE-SOURCE-0000000008
    Processor: KTABLE-SOURCE-0000000008 (stores: [t2-STATE-STORE-0000000006])
      --> KTABLE-JOINTHIS-0000000011
      <-- KSTREAM-SOURCE-0000000007
    Processor: KTABLE-TRANSFORMVALUES-0000000009 (stores: [])
      --> KTABLE-JOINOTHER-0000000012
      <-- KTABLE-SOURCE-0000000002
    Processor: KTABLE-JOINOTHER-0000000012 (stores: [t2-STATE-STORE-0000000006])
      --> KTABLE-MERGE-0000000010
      <-- KTABLE-TRANSFORMVALUES-0000000009
    Processor: KTABLE-JOINTHIS-0000000011 (stores: [t-STATE-STORE-0000000000])
      --> KTABLE-MERGE-0000000010
      <-- KTABLE-SOURCE-0000000008
    Processor: KTABLE-MERGE-0000000010 (stores: [])
      --> KTABLE-TOSTREAM-0000000013
      <-- KTABLE-JOINTHIS-0000000011, KTABLE-JOINOTHER-0000000012
    Processor: tv (stores: [])
      --> KTABLE-TOSTREAM-0000000004
      <-- KTABLE-SOURCE-0000000002
    Processor: KTABLE-TOSTREAM-0000000004 (stores: [])
      --> KSTREAM-SINK-0000000005
      <-- tv
    Processor: KTABLE-TOSTREAM-0000000013 (stores: [])
      --> KSTREAM-SINK-0000000014
      <-- KTABLE-MERGE-0000000010
    Sink: KSTREAM-SINK-0000000005 (topic: o)
      <-- KTABLE-TOSTREAM-0000000004
    Sink: KSTREAM-SINK-0000000014 (topic: o2)
      <-- KTABLE-TOSTREAM-0000000013

"""
