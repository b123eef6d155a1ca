"""Names users give DSL operations (Kafka's Named, Consumed.as, Produced.as, Printed.withName)
and KStream.print (Kafka's Printed). The describe() texts are those Kafka Streams 4.1.1 prints for
the same topologies: a given name replaces the generated one but, as in Kafka, still uses up its
index. The printed lines are Kafka's format, derived by hand."""

from __future__ import annotations

import pytest

from streams import Printed, StreamsBuilder, serdes
from streams.dsl import Materialized, SessionWindows, SlidingWindows, TimeWindows
from streams.errors import TopologyError
from streams.testing import TopologyTestDriver

S = serdes.STRING
CONFIG = {"application.id": "names", "default.key.serde": "string", "default.value.serde": "string"}


def test_every_stateless_stream_operation_source_and_sink_takes_a_name():
    b = StreamsBuilder()
    other = b.stream("in2", key_serde=S, value_serde=S)
    s = (b.stream("in", key_serde=S, value_serde=S, name="src")
         .filter(lambda k, v: True, name="f").filter_not(lambda k, v: False, name="fn")
         .map_values(lambda v: v, name="mv").flat_map_values(lambda v: [v], name="fmv")
         .select_key(lambda k, v: v, name="sk").map(lambda k, v: (k, v), name="m")
         .flat_map(lambda k, v: [(k, v)], name="fm").peek(lambda k, v: None, name="pk")
         .merge(other, name="mg"))
    s.to("out", name="sink")
    s.foreach(lambda k, v: None, name="fe")
    s.print(Printed.to_sys_out().with_name("pr"))
    s.print(Printed.to_sys_out())
    s.filter(lambda k, v: True).to("out3")
    assert str(b.build().describe()) == """Topologies:
   Sub-topology: 0
    Source: src (topics: [in])
      --> f
    Processor: f (stores: [])
      --> fn
      <-- src
    Processor: fn (stores: [])
      --> mv
      <-- f
    Processor: mv (stores: [])
      --> fmv
      <-- fn
    Processor: fmv (stores: [])
      --> sk
      <-- mv
    Processor: sk (stores: [])
      --> m
      <-- fmv
    Processor: m (stores: [])
      --> fm
      <-- sk
    Processor: fm (stores: [])
      --> pk
      <-- m
    Source: KSTREAM-SOURCE-0000000000 (topics: [in2])
      --> mg
    Processor: pk (stores: [])
      --> mg
      <-- fm
    Processor: mg (stores: [])
      --> KSTREAM-FILTER-0000000015, KSTREAM-PRINTER-0000000014, fe, pr, sink
      <-- pk, KSTREAM-SOURCE-0000000000
    Processor: KSTREAM-FILTER-0000000015 (stores: [])
      --> KSTREAM-SINK-0000000016
      <-- mg
    Processor: KSTREAM-PRINTER-0000000014 (stores: [])
      --> none
      <-- mg
    Sink: KSTREAM-SINK-0000000016 (topic: out3)
      <-- KSTREAM-FILTER-0000000015
    Processor: fe (stores: [])
      --> none
      <-- mg
    Processor: pr (stores: [])
      --> none
      <-- mg
    Sink: sink (topic: out)
      <-- mg

"""


def test_table_operations_take_a_name():
    b = StreamsBuilder()
    (b.table("t", key_serde=S, value_serde=S, store="ts").filter(lambda k, v: True, name="tf")
     .map_values(lambda v: v, "tmv-store", name="tmv")
     .filter_not(lambda k, v: False, Materialized.with_serdes(S, S), name="tfn")
     .to_stream(name="t2s").to("out2"))
    assert str(b.build().describe()) == """Topologies:
   Sub-topology: 0
    Source: KSTREAM-SOURCE-0000000000 (topics: [t])
      --> KTABLE-SOURCE-0000000001
    Processor: KTABLE-SOURCE-0000000001 (stores: [ts])
      --> tf
      <-- KSTREAM-SOURCE-0000000000
    Processor: tf (stores: [])
      --> tmv
      <-- KTABLE-SOURCE-0000000001
    Processor: tmv (stores: [tmv-store])
      --> tfn
      <-- tf
    Processor: tfn (stores: [])
      --> t2s
      <-- tmv
    Processor: t2s (stores: [])
      --> KSTREAM-SINK-0000000007
      <-- tfn
    Sink: KSTREAM-SINK-0000000007 (topic: out2)
      <-- t2s

"""


def test_aggregations_take_a_name():
    b = StreamsBuilder()
    g = b.stream("in", key_serde=S, value_serde=S).select_key(lambda k, v: v).group_by_key(key_serde=S, value_serde=S)
    g.count(name="cnt").to_stream().to("o1")
    g.reduce(lambda a, x: a + x, "red-store", name="red").to_stream().to("o2")
    g.aggregate(lambda: "", lambda k, v, a: a + v, Materialized.with_serdes(S, S), name="agg").to_stream().to("o3")
    assert str(b.build().describe()) == """Topologies:
   Sub-topology: 0
    Source: KSTREAM-SOURCE-0000000000 (topics: [in])
      --> KSTREAM-KEY-SELECT-0000000001
    Processor: KSTREAM-KEY-SELECT-0000000001 (stores: [])
      --> KSTREAM-FILTER-0000000005, KSTREAM-FILTER-0000000018, red-store-repartition-filter
      <-- KSTREAM-SOURCE-0000000000
    Processor: KSTREAM-FILTER-0000000005 (stores: [])
      --> KSTREAM-SINK-0000000004
      <-- KSTREAM-KEY-SELECT-0000000001
    Processor: KSTREAM-FILTER-0000000018 (stores: [])
      --> KSTREAM-SINK-0000000017
      <-- KSTREAM-KEY-SELECT-0000000001
    Processor: red-store-repartition-filter (stores: [])
      --> red-store-repartition-sink
      <-- KSTREAM-KEY-SELECT-0000000001
    Sink: KSTREAM-SINK-0000000004 (topic: KSTREAM-AGGREGATE-STATE-STORE-0000000002-repartition)
      <-- KSTREAM-FILTER-0000000005
    Sink: KSTREAM-SINK-0000000017 (topic: KSTREAM-AGGREGATE-STATE-STORE-0000000015-repartition)
      <-- KSTREAM-FILTER-0000000018
    Sink: red-store-repartition-sink (topic: red-store-repartition)
      <-- red-store-repartition-filter

  Sub-topology: 1
    Source: KSTREAM-SOURCE-0000000006 (topics: [KSTREAM-AGGREGATE-STATE-STORE-0000000002-repartition])
      --> cnt
    Processor: cnt (stores: [KSTREAM-AGGREGATE-STATE-STORE-0000000002])
      --> KTABLE-TOSTREAM-0000000007
      <-- KSTREAM-SOURCE-0000000006
    Processor: KTABLE-TOSTREAM-0000000007 (stores: [])
      --> KSTREAM-SINK-0000000008
      <-- cnt
    Sink: KSTREAM-SINK-0000000008 (topic: o1)
      <-- KTABLE-TOSTREAM-0000000007

  Sub-topology: 2
    Source: red-store-repartition-source (topics: [red-store-repartition])
      --> red
    Processor: red (stores: [red-store])
      --> KTABLE-TOSTREAM-0000000013
      <-- red-store-repartition-source
    Processor: KTABLE-TOSTREAM-0000000013 (stores: [])
      --> KSTREAM-SINK-0000000014
      <-- red
    Sink: KSTREAM-SINK-0000000014 (topic: o2)
      <-- KTABLE-TOSTREAM-0000000013

  Sub-topology: 3
    Source: KSTREAM-SOURCE-0000000019 (topics: [KSTREAM-AGGREGATE-STATE-STORE-0000000015-repartition])
      --> agg
    Processor: agg (stores: [KSTREAM-AGGREGATE-STATE-STORE-0000000015])
      --> KTABLE-TOSTREAM-0000000020
      <-- KSTREAM-SOURCE-0000000019
    Processor: KTABLE-TOSTREAM-0000000020 (stores: [])
      --> KSTREAM-SINK-0000000021
      <-- agg
    Sink: KSTREAM-SINK-0000000021 (topic: o3)
      <-- KTABLE-TOSTREAM-0000000020

"""


def test_windowed_aggregations_take_a_name():
    b = StreamsBuilder()
    g = b.stream("in", key_serde=S, value_serde=S).group_by_key()
    g.windowed_by(TimeWindows.of_size_with_no_grace(10)).count(name="wc").to_stream().to("o1")
    g.windowed_by(SlidingWindows.of_time_difference_with_no_grace(10)).reduce(lambda a, x: a + x,
                                                                              name="sr").to_stream().to("o2")
    g.windowed_by(SessionWindows.of_inactivity_gap_with_no_grace(10)).aggregate(
        lambda: "", lambda k, v, a: a + v, lambda k, a1, a2: a1 + a2, Materialized.with_serdes(S, S),
        name="sa").to_stream().to("o3")
    assert str(b.build().describe()) == """Topologies:
   Sub-topology: 0
    Source: KSTREAM-SOURCE-0000000000 (topics: [in])
      --> sr, wc, sa
    Processor: sa (stores: [KSTREAM-AGGREGATE-STATE-STORE-0000000009])
      --> KTABLE-TOSTREAM-0000000011
      <-- KSTREAM-SOURCE-0000000000
    Processor: sr (stores: [KSTREAM-REDUCE-STATE-STORE-0000000005])
      --> KTABLE-TOSTREAM-0000000007
      <-- KSTREAM-SOURCE-0000000000
    Processor: wc (stores: [KSTREAM-AGGREGATE-STATE-STORE-0000000001])
      --> KTABLE-TOSTREAM-0000000003
      <-- KSTREAM-SOURCE-0000000000
    Processor: KTABLE-TOSTREAM-0000000003 (stores: [])
      --> KSTREAM-SINK-0000000004
      <-- wc
    Processor: KTABLE-TOSTREAM-0000000007 (stores: [])
      --> KSTREAM-SINK-0000000008
      <-- sr
    Processor: KTABLE-TOSTREAM-0000000011 (stores: [])
      --> KSTREAM-SINK-0000000012
      <-- sa
    Sink: KSTREAM-SINK-0000000004 (topic: o1)
      <-- KTABLE-TOSTREAM-0000000003
    Sink: KSTREAM-SINK-0000000008 (topic: o2)
      <-- KTABLE-TOSTREAM-0000000007
    Sink: KSTREAM-SINK-0000000012 (topic: o3)
      <-- KTABLE-TOSTREAM-0000000011

"""


def test_table_aggregations_name_their_repartition_sink_and_source_too():
    """Kafka's KGroupedTable: <name>-sink and <name>-source; a named grouping's second
    aggregation reads the first one's repartition, its own names used up all the same."""
    b = StreamsBuilder()
    t = b.table("t", key_serde=S, value_serde=S).group_by(lambda k, v: (v, k), key_serde=S, value_serde=S)
    t.count(name="tc").to_stream().to("o1")
    t.reduce(lambda a, x: a + x, lambda a, x: a, "tr-store", name="tr").to_stream().to("o2")
    t2 = b.table("t2", key_serde=S, value_serde=S).group_by(lambda k, v: (v, k), key_serde=S, value_serde=S, name="grp")
    t2.aggregate(lambda: "", lambda k, v, a: a + v, lambda k, v, a: a, Materialized.with_serdes(S, S),
                 name="ta").to_stream().to("o3")
    t2.count(name="tc2").to_stream().to("o4")
    assert str(b.build().describe()) == """Topologies:
   Sub-topology: 0
    Source: KSTREAM-SOURCE-0000000001 (topics: [t])
      --> KTABLE-SOURCE-0000000002
    Processor: KTABLE-SOURCE-0000000002 (stores: [t-STATE-STORE-0000000000])
      --> KTABLE-SELECT-0000000003
      <-- KSTREAM-SOURCE-0000000001
    Processor: KTABLE-SELECT-0000000003 (stores: [])
      --> tc-sink, tr-sink
      <-- KTABLE-SOURCE-0000000002
    Sink: tc-sink (topic: KTABLE-AGGREGATE-STATE-STORE-0000000004-repartition)
      <-- KTABLE-SELECT-0000000003
    Sink: tr-sink (topic: tr-store-repartition)
      <-- KTABLE-SELECT-0000000003

  Sub-topology: 1
    Source: tc-source (topics: [KTABLE-AGGREGATE-STATE-STORE-0000000004-repartition])
      --> tc
    Processor: tc (stores: [KTABLE-AGGREGATE-STATE-STORE-0000000004])
      --> KTABLE-TOSTREAM-0000000008
      <-- tc-source
    Processor: KTABLE-TOSTREAM-0000000008 (stores: [])
      --> KSTREAM-SINK-0000000009
      <-- tc
    Sink: KSTREAM-SINK-0000000009 (topic: o1)
      <-- KTABLE-TOSTREAM-0000000008

  Sub-topology: 2
    Source: tr-source (topics: [tr-store-repartition])
      --> tr
    Processor: tr (stores: [tr-store])
      --> KTABLE-TOSTREAM-0000000013
      <-- tr-source
    Processor: KTABLE-TOSTREAM-0000000013 (stores: [])
      --> KSTREAM-SINK-0000000014
      <-- tr
    Sink: KSTREAM-SINK-0000000014 (topic: o2)
      <-- KTABLE-TOSTREAM-0000000013

  Sub-topology: 3
    Source: KSTREAM-SOURCE-0000000016 (topics: [t2])
      --> KTABLE-SOURCE-0000000017
    Processor: KTABLE-SOURCE-0000000017 (stores: [t2-STATE-STORE-0000000015])
      --> grp
      <-- KSTREAM-SOURCE-0000000016
    Processor: grp (stores: [])
      --> ta-sink
      <-- KTABLE-SOURCE-0000000017
    Sink: ta-sink (topic: grp-repartition)
      <-- grp

  Sub-topology: 4
    Source: ta-source (topics: [grp-repartition])
      --> tc2, ta
    Processor: ta (stores: [KTABLE-AGGREGATE-STATE-STORE-0000000019])
      --> KTABLE-TOSTREAM-0000000023
      <-- ta-source
    Processor: tc2 (stores: [KTABLE-AGGREGATE-STATE-STORE-0000000025])
      --> KTABLE-TOSTREAM-0000000029
      <-- ta-source
    Processor: KTABLE-TOSTREAM-0000000023 (stores: [])
      --> KSTREAM-SINK-0000000024
      <-- ta
    Processor: KTABLE-TOSTREAM-0000000029 (stores: [])
      --> KSTREAM-SINK-0000000030
      <-- tc2
    Sink: KSTREAM-SINK-0000000024 (topic: o3)
      <-- KTABLE-TOSTREAM-0000000023
    Sink: KSTREAM-SINK-0000000030 (topic: o4)
      <-- KTABLE-TOSTREAM-0000000029

"""


def test_a_named_count_counts():
    b = StreamsBuilder()
    (b.stream("in", key_serde=S, value_serde=S).group_by_key().count(name="counted")
     .to_stream().to("out", key_serde=S, value_serde=serdes.INT64))
    with TopologyTestDriver(b.build(), {**CONFIG, "statestore.cache.max.bytes": 0}) as d:
        inp = d.create_input_topic("in", S, S)
        inp.pipe_input("a", "x", timestamp=1)
        inp.pipe_input("a", "y", timestamp=2)
        out = d.create_output_topic("out", S, serdes.INT64).read_records_to_list()
    assert [(r.key, r.value) for r in out] == [("a", 1), ("a", 2)]


def test_a_cogroups_aggregate_names_each_streams_processor_and_the_merge():
    b = StreamsBuilder()
    g1 = b.stream("in", key_serde=S, value_serde=S).group_by_key()
    g2 = b.stream("in2", key_serde=S, value_serde=S).select_key(lambda k, v: v).group_by_key()
    (g1.cogroup(lambda k, v, a: a + v).cogroup(g2, lambda k, v, a: a + v)
     .aggregate(lambda: "", Materialized.with_serdes(S, S), name="cg").to_stream().to("o1"))
    assert str(b.build().describe()) == """Topologies:
   Sub-topology: 0
    Source: COGROUPKSTREAM-AGGREGATE-STATE-STORE-0000000003-repartition-source (topics: [COGROUPKSTREAM-AGGREGATE-STATE-STORE-0000000003-repartition])
      --> cg-cogroup-agg-1
    Source: KSTREAM-SOURCE-0000000000 (topics: [in])
      --> cg-cogroup-agg-0
    Processor: cg-cogroup-agg-0 (stores: [COGROUPKSTREAM-AGGREGATE-STATE-STORE-0000000003])
      --> cg-cogroup-merge
      <-- KSTREAM-SOURCE-0000000000
    Processor: cg-cogroup-agg-1 (stores: [COGROUPKSTREAM-AGGREGATE-STATE-STORE-0000000003])
      --> cg-cogroup-merge
      <-- COGROUPKSTREAM-AGGREGATE-STATE-STORE-0000000003-repartition-source
    Processor: cg-cogroup-merge (stores: [])
      --> KTABLE-TOSTREAM-0000000010
      <-- cg-cogroup-agg-0, cg-cogroup-agg-1
    Processor: KTABLE-TOSTREAM-0000000010 (stores: [])
      --> KSTREAM-SINK-0000000011
      <-- cg-cogroup-merge
    Sink: KSTREAM-SINK-0000000011 (topic: o1)
      <-- KTABLE-TOSTREAM-0000000010

  Sub-topology: 1
    Source: KSTREAM-SOURCE-0000000001 (topics: [in2])
      --> KSTREAM-KEY-SELECT-0000000002
    Processor: KSTREAM-KEY-SELECT-0000000002 (stores: [])
      --> COGROUPKSTREAM-AGGREGATE-STATE-STORE-0000000003-repartition-filter
      <-- KSTREAM-SOURCE-0000000001
    Processor: COGROUPKSTREAM-AGGREGATE-STATE-STORE-0000000003-repartition-filter (stores: [])
      --> COGROUPKSTREAM-AGGREGATE-STATE-STORE-0000000003-repartition-sink
      <-- KSTREAM-KEY-SELECT-0000000002
    Sink: COGROUPKSTREAM-AGGREGATE-STATE-STORE-0000000003-repartition-sink (topic: COGROUPKSTREAM-AGGREGATE-STATE-STORE-0000000003-repartition)
      <-- COGROUPKSTREAM-AGGREGATE-STATE-STORE-0000000003-repartition-filter

"""
    b = StreamsBuilder()
    h1 = b.stream("in", key_serde=S, value_serde=S).group_by_key()
    h2 = b.stream("in2", key_serde=S, value_serde=S).group_by_key()
    (h1.cogroup(lambda k, v, a: a + v).cogroup(h2, lambda k, v, a: a + v).windowed_by(TimeWindows.of_size_with_no_grace(10))
     .aggregate(lambda: "", Materialized.with_serdes(S, S), name="wcg").to_stream().to("o1"))
    assert str(b.build().describe()) == """Topologies:
   Sub-topology: 0
    Source: KSTREAM-SOURCE-0000000000 (topics: [in])
      --> wcg-cogroup-agg-0
    Source: KSTREAM-SOURCE-0000000001 (topics: [in2])
      --> wcg-cogroup-agg-1
    Processor: wcg-cogroup-agg-0 (stores: [COGROUPKSTREAM-AGGREGATE-STATE-STORE-0000000002])
      --> wcg-cogroup-merge
      <-- KSTREAM-SOURCE-0000000000
    Processor: wcg-cogroup-agg-1 (stores: [COGROUPKSTREAM-AGGREGATE-STATE-STORE-0000000002])
      --> wcg-cogroup-merge
      <-- KSTREAM-SOURCE-0000000001
    Processor: wcg-cogroup-merge (stores: [])
      --> KTABLE-TOSTREAM-0000000006
      <-- wcg-cogroup-agg-0, wcg-cogroup-agg-1
    Processor: KTABLE-TOSTREAM-0000000006 (stores: [])
      --> KSTREAM-SINK-0000000007
      <-- wcg-cogroup-merge
    Sink: KSTREAM-SINK-0000000007 (topic: o1)
      <-- KTABLE-TOSTREAM-0000000006

"""


def test_table_sources_table_joins_and_global_joins_take_a_name():
    """Kafka's Consumed.as for a table names its processor and its source `<name>-source`; a
    named primary-key join's processors are `<name>`, `<name>-join-this`, `<name>-join-other`."""
    b = StreamsBuilder()
    t1 = b.table("t1", key_serde=S, value_serde=S, name="first")
    t2 = b.table("t2", key_serde=S, value_serde=S, store="t2-store")
    t1.join(t2, lambda x, y: x + y, name="tj").to_stream().to("o1")
    t1.left_join(t2, lambda x, y: x + y, "tlj-store", name="tlj").to_stream().to("o2")
    t1.outer_join(t2, lambda x, y: x + y, name="toj").to_stream().to("o3")
    g = b.global_table("g", key_serde=S, value_serde=S, name="glob")
    b.stream("s", key_serde=S, value_serde=S).join(g, lambda k, v: v, lambda x, y: x + y, name="gj").to("o4")
    b.stream("s2", key_serde=S, value_serde=S).left_join(g, lambda k, v: v, lambda x, y: x + y, name="glj").to("o5")
    assert str(b.build().describe()) == """Topologies:
   Sub-topology: 0
    Source: KSTREAM-SOURCE-0000000003 (topics: [t2])
      --> KTABLE-SOURCE-0000000004
    Source: first-source (topics: [t1])
      --> first
    Processor: KTABLE-SOURCE-0000000004 (stores: [t2-store])
      --> tj-join-other, tlj-join-other, toj-join-other
      <-- KSTREAM-SOURCE-0000000003
    Processor: first (stores: [t1-STATE-STORE-0000000000])
      --> toj-join-this, tj-join-this, tlj-join-this
      <-- first-source
    Processor: tj-join-other (stores: [t1-STATE-STORE-0000000000])
      --> tj
      <-- KTABLE-SOURCE-0000000004
    Processor: tj-join-this (stores: [t2-store])
      --> tj
      <-- first
    Processor: tlj-join-other (stores: [t1-STATE-STORE-0000000000])
      --> tlj
      <-- KTABLE-SOURCE-0000000004
    Processor: tlj-join-this (stores: [t2-store])
      --> tlj
      <-- first
    Processor: toj-join-other (stores: [t1-STATE-STORE-0000000000])
      --> toj
      <-- KTABLE-SOURCE-0000000004
    Processor: toj-join-this (stores: [t2-store])
      --> toj
      <-- first
    Processor: tj (stores: [])
      --> KTABLE-TOSTREAM-0000000008
      <-- tj-join-this, tj-join-other
    Processor: tlj (stores: [tlj-store])
      --> KTABLE-TOSTREAM-0000000013
      <-- tlj-join-this, tlj-join-other
    Processor: toj (stores: [])
      --> KTABLE-TOSTREAM-0000000018
      <-- toj-join-this, toj-join-other
    Processor: KTABLE-TOSTREAM-0000000008 (stores: [])
      --> KSTREAM-SINK-0000000009
      <-- tj
    Processor: KTABLE-TOSTREAM-0000000013 (stores: [])
      --> KSTREAM-SINK-0000000014
      <-- tlj
    Processor: KTABLE-TOSTREAM-0000000018 (stores: [])
      --> KSTREAM-SINK-0000000019
      <-- toj
    Sink: KSTREAM-SINK-0000000009 (topic: o1)
      <-- KTABLE-TOSTREAM-0000000008
    Sink: KSTREAM-SINK-0000000014 (topic: o2)
      <-- KTABLE-TOSTREAM-0000000013
    Sink: KSTREAM-SINK-0000000019 (topic: o3)
      <-- KTABLE-TOSTREAM-0000000018

  Sub-topology: 1 for global store (will not generate tasks)
    Source: glob-source (topics: [g])
      --> glob
    Processor: glob (stores: [g-STATE-STORE-0000000020])
      --> none
      <-- glob-source
  Sub-topology: 2
    Source: KSTREAM-SOURCE-0000000023 (topics: [s])
      --> gj
    Processor: gj (stores: [])
      --> KSTREAM-SINK-0000000025
      <-- KSTREAM-SOURCE-0000000023
    Sink: KSTREAM-SINK-0000000025 (topic: o4)
      <-- gj

  Sub-topology: 3
    Source: KSTREAM-SOURCE-0000000026 (topics: [s2])
      --> glj
    Processor: glj (stores: [])
      --> KSTREAM-SINK-0000000028
      <-- KSTREAM-SOURCE-0000000026
    Sink: KSTREAM-SINK-0000000028 (topic: o5)
      <-- glj

"""


def test_a_named_table_join_joins():
    b = StreamsBuilder()
    t1 = b.table("t1", key_serde=S, value_serde=S)
    t2 = b.table("t2", key_serde=S, value_serde=S)
    t1.join(t2, lambda x, y: f"{x}+{y}", name="both").to_stream().to("out")
    with TopologyTestDriver(b.build(), CONFIG) as d:
        d.create_input_topic("t1", S, S).pipe_input("k", "a", timestamp=1)
        d.create_input_topic("t2", S, S).pipe_input("k", "b", timestamp=2)
        out = d.create_output_topic("out", S, S).read_records_to_list()
    assert [(r.key, r.value, r.timestamp) for r in out] == [("k", "a+b", 2)]


def test_a_named_foreign_key_join_names_its_processors_topics_and_store():
    """Kafka's TableJoined.as: every part `<name>-<suffix>`; the unnamed join beside it keeps
    the generated names, their indexes after the named join's."""
    b = StreamsBuilder()
    orders = b.table("orders", key_serde=S, value_serde=S)
    customers = b.table("customers", key_serde=S, value_serde=S)
    orders.join(customers, lambda o, cu: o + cu, foreign_key_extractor=lambda v: v, name="oc").to_stream().to("o1")
    orders.left_join(customers, lambda o, cu: o + cu, foreign_key_extractor=lambda v: v).to_stream().to("o2")
    topology = b.build()
    assert str(topology.describe()) == """Topologies:
   Sub-topology: 0
    Source: KSTREAM-SOURCE-0000000001 (topics: [orders])
      --> KTABLE-SOURCE-0000000002
    Processor: KTABLE-SOURCE-0000000002 (stores: [orders-STATE-STORE-0000000000])
      --> KTABLE-FK-JOIN-SUBSCRIPTION-REGISTRATION-0000000023, oc-subscription-registration-processor
      <-- KSTREAM-SOURCE-0000000001
    Source: KTABLE-SOURCE-0000000032 (topics: [KTABLE-FK-JOIN-SUBSCRIPTION-RESPONSE-0000000030-topic])
      --> KTABLE-FK-JOIN-SUBSCRIPTION-RESPONSE-RESOLVER-PROCESSOR-0000000033
    Source: oc-subscription-response-source (topics: [oc-subscription-response-topic])
      --> oc-subscription-response-resolver
    Processor: KTABLE-FK-JOIN-SUBSCRIPTION-RESPONSE-RESOLVER-PROCESSOR-0000000033 (stores: [orders-STATE-STORE-0000000000])
      --> KTABLE-FK-JOIN-OUTPUT-0000000034
      <-- KTABLE-SOURCE-0000000032
    Processor: oc-subscription-response-resolver (stores: [orders-STATE-STORE-0000000000])
      --> oc-result
      <-- oc-subscription-response-source
    Processor: KTABLE-FK-JOIN-OUTPUT-0000000034 (stores: [])
      --> KTABLE-TOSTREAM-0000000036
      <-- KTABLE-FK-JOIN-SUBSCRIPTION-RESPONSE-RESOLVER-PROCESSOR-0000000033
    Processor: oc-result (stores: [])
      --> KTABLE-TOSTREAM-0000000020
      <-- oc-subscription-response-resolver
    Processor: KTABLE-FK-JOIN-SUBSCRIPTION-REGISTRATION-0000000023 (stores: [])
      --> KTABLE-SINK-0000000024
      <-- KTABLE-SOURCE-0000000002
    Processor: KTABLE-TOSTREAM-0000000020 (stores: [])
      --> KSTREAM-SINK-0000000021
      <-- oc-result
    Processor: KTABLE-TOSTREAM-0000000036 (stores: [])
      --> KSTREAM-SINK-0000000037
      <-- KTABLE-FK-JOIN-OUTPUT-0000000034
    Processor: oc-subscription-registration-processor (stores: [])
      --> oc-subscription-registration-sink
      <-- KTABLE-SOURCE-0000000002
    Sink: KSTREAM-SINK-0000000021 (topic: o1)
      <-- KTABLE-TOSTREAM-0000000020
    Sink: KSTREAM-SINK-0000000037 (topic: o2)
      <-- KTABLE-TOSTREAM-0000000036
    Sink: KTABLE-SINK-0000000024 (topic: KTABLE-FK-JOIN-SUBSCRIPTION-REGISTRATION-0000000022-topic)
      <-- KTABLE-FK-JOIN-SUBSCRIPTION-REGISTRATION-0000000023
    Sink: oc-subscription-registration-sink (topic: oc-subscription-registration-topic)
      <-- oc-subscription-registration-processor

  Sub-topology: 1
    Source: KSTREAM-SOURCE-0000000004 (topics: [customers])
      --> KTABLE-SOURCE-0000000005
    Processor: KTABLE-SOURCE-0000000005 (stores: [customers-STATE-STORE-0000000003])
      --> KTABLE-FK-JOIN-SUBSCRIPTION-PROCESSOR-0000000029, oc-foreign-join-subscription
      <-- KSTREAM-SOURCE-0000000004
    Source: KTABLE-SOURCE-0000000025 (topics: [KTABLE-FK-JOIN-SUBSCRIPTION-REGISTRATION-0000000022-topic])
      --> KTABLE-FK-JOIN-SUBSCRIPTION-PROCESSOR-0000000027
    Source: oc-subscription-registration-source (topics: [oc-subscription-registration-topic])
      --> oc-subscription-receive
    Processor: KTABLE-FK-JOIN-SUBSCRIPTION-PROCESSOR-0000000027 (stores: [KTABLE-FK-JOIN-SUBSCRIPTION-STATE-STORE-0000000026])
      --> KTABLE-FK-JOIN-SUBSCRIPTION-PROCESSOR-0000000028
      <-- KTABLE-SOURCE-0000000025
    Processor: oc-subscription-receive (stores: [oc-subscription-store])
      --> oc-subscription-join-foreign
      <-- oc-subscription-registration-source
    Processor: KTABLE-FK-JOIN-SUBSCRIPTION-PROCESSOR-0000000028 (stores: [customers-STATE-STORE-0000000003])
      --> KTABLE-SINK-0000000031
      <-- KTABLE-FK-JOIN-SUBSCRIPTION-PROCESSOR-0000000027
    Processor: KTABLE-FK-JOIN-SUBSCRIPTION-PROCESSOR-0000000029 (stores: [KTABLE-FK-JOIN-SUBSCRIPTION-STATE-STORE-0000000026])
      --> KTABLE-SINK-0000000031
      <-- KTABLE-SOURCE-0000000005
    Processor: oc-foreign-join-subscription (stores: [oc-subscription-store])
      --> oc-subscription-response-sink
      <-- KTABLE-SOURCE-0000000005
    Processor: oc-subscription-join-foreign (stores: [customers-STATE-STORE-0000000003])
      --> oc-subscription-response-sink
      <-- oc-subscription-receive
    Sink: KTABLE-SINK-0000000031 (topic: KTABLE-FK-JOIN-SUBSCRIPTION-RESPONSE-0000000030-topic)
      <-- KTABLE-FK-JOIN-SUBSCRIPTION-PROCESSOR-0000000028, KTABLE-FK-JOIN-SUBSCRIPTION-PROCESSOR-0000000029
    Sink: oc-subscription-response-sink (topic: oc-subscription-response-topic)
      <-- oc-subscription-join-foreign, oc-foreign-join-subscription

"""
    assert {"oc-subscription-registration-topic", "oc-subscription-response-topic"} <= set(topology.internal_topics)
    b = StreamsBuilder()
    orders = b.table("orders", key_serde=S, value_serde=S)
    customers = b.table("customers", key_serde=S, value_serde=S)
    orders.join(customers, lambda o, cu: f"{o}/{cu}", foreign_key_extractor=lambda v: v,
                name="oc").to_stream().to("out")
    with TopologyTestDriver(b.build(), CONFIG) as d:
        d.create_input_topic("customers", S, S).pipe_input("c1", "Ann", timestamp=1)
        d.create_input_topic("orders", S, S).pipe_input("o1", "c1", timestamp=2)
        out = d.create_output_topic("out", S, S).read_records_to_list()
    assert [(r.key, r.value) for r in out] == [("o1", "c1/Ann")]


@pytest.mark.parametrize("bad,message", [("", "non-empty"), (".", "cannot be"), ("a/b", "character other than"),
                                         ("n" * 250, "longer than 249"), (7, "non-empty string")])
def test_a_bad_name_is_refused_naming_the_operation(bad, message):
    b = StreamsBuilder()
    s = b.stream("in", key_serde=S, value_serde=S)
    table = b.table("t", key_serde=S, value_serde=S)
    calls = {
        "filter": lambda: s.filter(lambda k, v: True, name=bad),
        "map_values": lambda: s.map_values(str.upper, name=bad),
        "select_key": lambda: s.select_key(lambda k, v: v, name=bad),
        "merge": lambda: s.merge(s, name=bad),
        "to": lambda: s.to("out", name=bad),
        "stream": lambda: b.stream("in9", name=bad),
        "Printed.with_name": lambda: Printed.to_sys_out().with_name(bad),
        "KTable.filter": lambda: table.filter(lambda k, v: True, name=bad),
        "KTable.to_stream": lambda: table.to_stream(name=bad),
        "KTable.outer_join": lambda: table.outer_join(table, max, name=bad),
        "global_table": lambda: b.global_table("g9", name=bad),
        "count": lambda: s.group_by_key().count(name=bad),
        "reduce": lambda: s.group_by_key().windowed_by(TimeWindows.of_size_with_no_grace(5)).reduce(max, name=bad),
        "aggregate": lambda: table.group_by(lambda k, v: (v, k)).aggregate(str, max, min, name=bad),
    }
    for op, call in calls.items():
        with pytest.raises(TopologyError, match=f"{op}: .*{message}"):
            call()


def test_a_name_used_twice_is_refused():
    b = StreamsBuilder()
    s = b.stream("in", key_serde=S, value_serde=S)
    s.filter(lambda k, v: True, name="same").to("a")
    s.map_values(str.upper, name="same").to("b")
    with pytest.raises(TopologyError, match="same"):
        b.build()


def _print_topology(printed):
    b = StreamsBuilder()
    b.stream("in", key_serde=S, value_serde=S).map_values(lambda v: v and v.upper()).print(printed)
    return b.build()


def _pipe(topology, records):
    with TopologyTestDriver(topology, CONFIG) as d:
        inp = d.create_input_topic("in", S, S)
        for key, value in records:
            inp.pipe_input(key, value, timestamp=1)


def test_print_writes_kafkas_lines_to_standard_output(capsys):
    """The label is the printed stream's node name (the map_values), None prints as null."""
    _pipe(_print_topology(Printed.to_sys_out()), [("k", "v"), (None, "w"), ("k", None)])
    assert capsys.readouterr().out == ("[KSTREAM-MAPVALUES-0000000001]: k, V\n"
                                       "[KSTREAM-MAPVALUES-0000000001]: null, W\n"
                                       "[KSTREAM-MAPVALUES-0000000001]: k, null\n")


def test_print_to_a_file_with_a_label_and_a_mapper(tmp_path):
    path = tmp_path / "printed.txt"
    path.write_text("an earlier run's lines\n")
    printed = Printed.to_file(str(path)).with_label("views").with_key_value_mapper(lambda k, v: f"{k}={v}")
    _pipe(_print_topology(printed), [("a", "x"), ("b", "y")])
    assert path.read_text() == "[views]: a=X\n[views]: b=Y\n"


def test_print_to_a_file_buffers_its_lines_until_the_printer_closes(tmp_path):
    """Kafka's KStreamPrint flushes a file's writer when it closes (System.out per line)."""
    path = tmp_path / "printed.txt"
    with TopologyTestDriver(_print_topology(Printed.to_file(str(path))), CONFIG) as d:
        d.create_input_topic("in", S, S).pipe_input("a", "x", timestamp=1)
        assert path.read_text() == ""
    assert path.read_text() == "[KSTREAM-MAPVALUES-0000000001]: a, X\n"


def test_print_bad_inputs_are_typed_errors(tmp_path):
    for bad in ("", "  ", None):
        with pytest.raises(TopologyError, match="needs a file path"):
            Printed.to_file(bad)
    with pytest.raises(TopologyError, match="Unable to write stream to file"):
        Printed.to_file(str(tmp_path / "no-such-dir" / "x.txt"))
    with pytest.raises(TopologyError, match="with_label needs a string"):
        Printed.to_sys_out().with_label(None)
    with pytest.raises(TopologyError, match="needs a callable"):
        Printed.to_sys_out().with_key_value_mapper("k=v")
    b = StreamsBuilder()
    with pytest.raises(TopologyError, match="print needs a Printed"):
        b.stream("in").print("stdout")
