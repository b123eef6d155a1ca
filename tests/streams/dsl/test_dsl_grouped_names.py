"""Named groupings (Kafka's Grouped.as: `group_by(..., name=)`, `group_by_key(name=)`, KTable
`group_by(..., name=)`) and the repartitions of several aggregations of one grouped stream or
table. The expected describe() texts are Kafka Streams 4.1.1's for the same topologies
(printed by its Topology.describe(); Eddy's nodes and topics follow Kafka's rules:
GroupedStreamAggregateBuilder, KGroupedTableImpl, NamedInternal): an unnamed grouping gives each
aggregation a repartition topic named after its store; a named one names its selector and one
topic `<name>-repartition` that its aggregations share, every aggregation still using up the
names of a repartition; a given name uses up the index its node would have had."""

import pytest

from streams import StreamsBuilder, TimeWindows, serdes
from streams.errors import TopologyError
from streams.runtime.internal import plan_internal_topics
from streams.testing import TopologyTestDriver

S, I64 = serdes.STRING, serdes.INT64


def describe(builder: StreamsBuilder) -> str:
    return "\n".join(line.rstrip() for line in str(builder.build().describe()).strip("\n").splitlines())


def test_two_counts_of_an_unnamed_grouping_each_have_their_own_repartition_topic():
    b = StreamsBuilder()
    grouped = b.stream("in", key_serde=S, value_serde=S).group_by(lambda k, v: v)
    grouped.count(store="a")
    grouped.count(store="b")
    assert describe(b) == """Topologies:
   Sub-topology: 0
    Source: KSTREAM-SOURCE-0000000000 (topics: [in])
      --> KSTREAM-KEY-SELECT-0000000001
    Processor: KSTREAM-KEY-SELECT-0000000001 (stores: [])
      --> a-repartition-filter, b-repartition-filter
      <-- KSTREAM-SOURCE-0000000000
    Processor: a-repartition-filter (stores: [])
      --> a-repartition-sink
      <-- KSTREAM-KEY-SELECT-0000000001
    Processor: b-repartition-filter (stores: [])
      --> b-repartition-sink
      <-- KSTREAM-KEY-SELECT-0000000001
    Sink: a-repartition-sink (topic: a-repartition)
      <-- a-repartition-filter
    Sink: b-repartition-sink (topic: b-repartition)
      <-- b-repartition-filter

  Sub-topology: 1
    Source: a-repartition-source (topics: [a-repartition])
      --> KSTREAM-AGGREGATE-0000000002
    Processor: KSTREAM-AGGREGATE-0000000002 (stores: [a])
      --> none
      <-- a-repartition-source

  Sub-topology: 2
    Source: b-repartition-source (topics: [b-repartition])
      --> KSTREAM-AGGREGATE-0000000006
    Processor: KSTREAM-AGGREGATE-0000000006 (stores: [b])
      --> none
      <-- b-repartition-source"""


def test_a_named_grouping_names_its_selector_and_one_shared_repartition_topic():
    b = StreamsBuilder()
    grouped = b.stream("in", key_serde=S, value_serde=S).group_by(lambda k, v: v, name="g")
    grouped.count(store="a")
    grouped.count(store="b")
    grouped.windowed_by(TimeWindows.of_size_with_no_grace(100)).count(store="w")
    b.stream("other", key_serde=S, value_serde=S).to("out")
    assert describe(b) == """Topologies:
   Sub-topology: 0
    Source: KSTREAM-SOURCE-0000000000 (topics: [in])
      --> g
    Processor: g (stores: [])
      --> g-repartition-filter
      <-- KSTREAM-SOURCE-0000000000
    Processor: g-repartition-filter (stores: [])
      --> g-repartition-sink
      <-- g
    Sink: g-repartition-sink (topic: g-repartition)
      <-- g-repartition-filter

  Sub-topology: 1
    Source: g-repartition-source (topics: [g-repartition])
      --> KSTREAM-AGGREGATE-0000000002, KSTREAM-AGGREGATE-0000000006, KSTREAM-AGGREGATE-0000000010
    Processor: KSTREAM-AGGREGATE-0000000002 (stores: [a])
      --> none
      <-- g-repartition-source
    Processor: KSTREAM-AGGREGATE-0000000006 (stores: [b])
      --> none
      <-- g-repartition-source
    Processor: KSTREAM-AGGREGATE-0000000010 (stores: [w])
      --> none
      <-- g-repartition-source

  Sub-topology: 2
    Source: KSTREAM-SOURCE-0000000014 (topics: [other])
      --> KSTREAM-SINK-0000000015
    Sink: KSTREAM-SINK-0000000015 (topic: out)
      <-- KSTREAM-SOURCE-0000000014"""


def test_a_named_group_by_key_after_a_key_change_names_its_repartition_topic():
    b = StreamsBuilder()
    b.stream("in", key_serde=S, value_serde=S).map(lambda k, v: (v, k)).group_by_key(name="gk").count()
    assert describe(b) == """Topologies:
   Sub-topology: 0
    Source: KSTREAM-SOURCE-0000000000 (topics: [in])
      --> KSTREAM-MAP-0000000001
    Processor: KSTREAM-MAP-0000000001 (stores: [])
      --> gk-repartition-filter
      <-- KSTREAM-SOURCE-0000000000
    Processor: gk-repartition-filter (stores: [])
      --> gk-repartition-sink
      <-- KSTREAM-MAP-0000000001
    Sink: gk-repartition-sink (topic: gk-repartition)
      <-- gk-repartition-filter

  Sub-topology: 1
    Source: gk-repartition-source (topics: [gk-repartition])
      --> KSTREAM-AGGREGATE-0000000003
    Processor: KSTREAM-AGGREGATE-0000000003 (stores: [KSTREAM-AGGREGATE-STATE-STORE-0000000002])
      --> none
      <-- gk-repartition-source"""


def test_a_named_table_grouping_shares_its_repartition_topic():
    b = StreamsBuilder()
    grouped = b.table("t", key_serde=S, value_serde=S).group_by(lambda k, v: (v, k), name="tg")
    grouped.count(store="ta")
    grouped.count()
    assert describe(b) == """Topologies:
   Sub-topology: 0
    Source: KSTREAM-SOURCE-0000000001 (topics: [t])
      --> KTABLE-SOURCE-0000000002
    Processor: KTABLE-SOURCE-0000000002 (stores: [t-STATE-STORE-0000000000])
      --> tg
      <-- KSTREAM-SOURCE-0000000001
    Processor: tg (stores: [])
      --> KSTREAM-SINK-0000000004
      <-- KTABLE-SOURCE-0000000002
    Sink: KSTREAM-SINK-0000000004 (topic: tg-repartition)
      <-- tg

  Sub-topology: 1
    Source: KSTREAM-SOURCE-0000000005 (topics: [tg-repartition])
      --> KTABLE-AGGREGATE-0000000006, KTABLE-AGGREGATE-0000000010
    Processor: KTABLE-AGGREGATE-0000000006 (stores: [ta])
      --> none
      <-- KSTREAM-SOURCE-0000000005
    Processor: KTABLE-AGGREGATE-0000000010 (stores: [KTABLE-AGGREGATE-STATE-STORE-0000000007])
      --> none
      <-- KSTREAM-SOURCE-0000000005"""


def test_two_counts_of_an_unnamed_table_grouping_each_have_their_own_repartition_topic():
    b = StreamsBuilder()
    grouped = b.table("t", key_serde=S, value_serde=S).group_by(lambda k, v: (v, k))
    grouped.count()
    grouped.count(store="tb")
    assert describe(b) == """Topologies:
   Sub-topology: 0
    Source: KSTREAM-SOURCE-0000000001 (topics: [t])
      --> KTABLE-SOURCE-0000000002
    Processor: KTABLE-SOURCE-0000000002 (stores: [t-STATE-STORE-0000000000])
      --> KTABLE-SELECT-0000000003
      <-- KSTREAM-SOURCE-0000000001
    Processor: KTABLE-SELECT-0000000003 (stores: [])
      --> KSTREAM-SINK-0000000005, KSTREAM-SINK-0000000008
      <-- KTABLE-SOURCE-0000000002
    Sink: KSTREAM-SINK-0000000005 (topic: KTABLE-AGGREGATE-STATE-STORE-0000000004-repartition)
      <-- KTABLE-SELECT-0000000003
    Sink: KSTREAM-SINK-0000000008 (topic: tb-repartition)
      <-- KTABLE-SELECT-0000000003

  Sub-topology: 1
    Source: KSTREAM-SOURCE-0000000006 (topics: [KTABLE-AGGREGATE-STATE-STORE-0000000004-repartition])
      --> KTABLE-AGGREGATE-0000000007
    Processor: KTABLE-AGGREGATE-0000000007 (stores: [KTABLE-AGGREGATE-STATE-STORE-0000000004])
      --> none
      <-- KSTREAM-SOURCE-0000000006

  Sub-topology: 2
    Source: KSTREAM-SOURCE-0000000009 (topics: [tb-repartition])
      --> KTABLE-AGGREGATE-0000000010
    Processor: KTABLE-AGGREGATE-0000000010 (stores: [tb])
      --> none
      <-- KSTREAM-SOURCE-0000000009"""


def test_aggregations_of_a_named_grouping_share_its_topic_and_count_alike():
    b = StreamsBuilder()
    grouped = b.stream("in", key_serde=S, value_serde=S).group_by(lambda k, v: v, key_serde=S, name="by-value")
    grouped.count(store="a").to_stream().to("out-a", value_serde=I64)
    grouped.reduce(lambda agg, v: agg + v, store="b").to_stream().to("out-b", value_serde=S)
    topology = b.build()
    plan = plan_internal_topics(topology, topology.build(), "app", {"in": 3})
    assert [name for name in plan.specs if name.endswith("-repartition")] == ["app-by-value-repartition"]
    assert plan.specs["app-by-value-repartition"].partitions == 3
    with TopologyTestDriver(topology, {"application.id": "app"}) as driver:
        inp = driver.create_input_topic("in", S, S)
        for key, value in (("1", "x"), ("2", "y"), ("3", "x")):
            inp.pipe_input(key, value)
        assert driver.create_output_topic("out-a", S, I64).read_key_values_to_list() == [("x", 1), ("y", 1), ("x", 2)]
        assert driver.create_output_topic("out-b", S, S).read_key_values_to_list() == [("x", "x"), ("y", "y"),
                                                                                       ("x", "xx")]


@pytest.mark.parametrize("name", ["", "a b", "x" * 250, 7])
def test_a_grouping_name_that_cannot_name_a_topic_is_refused(name):
    b = StreamsBuilder()
    stream = b.stream("in", key_serde=S, value_serde=S)
    with pytest.raises(TopologyError, match="group_by: name"):
        stream.group_by(lambda k, v: v, name=name)
    with pytest.raises(TopologyError, match="group_by_key: name"):
        stream.group_by_key(name=name)
    with pytest.raises(TopologyError, match="KTable.group_by: name"):
        b.table("t", key_serde=S, value_serde=S).group_by(lambda k, v: (v, k), name=name)
