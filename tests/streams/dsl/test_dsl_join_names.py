"""Named stream joins and to_table (Kafka's StreamJoined.withName, Joined.withName: `join(..., name=)`,
`left_join`, `outer_join`): the name names the join's processors (`<name>-this-windowed`,
`-other-windowed`, `-this-join` / `-outer-this-join`, `-other-join` / `-outer-other-join`,
`-merge`; a stream-table join's processor is `<name>`) and its repartition topics
(`<name>-left-repartition` / `-right-repartition`; a stream-table join's `<name>-repartition`),
while the window stores keep the generated side names unless `store=` names them; every
generated name is still used up. The expected describe() texts are Kafka Streams 4.1.1's for the
same topologies (Eddy matched the five cases tried). `to_table(name=)` (Kafka's Named) names
its processor and, after a key change, its repartition topic."""

import pytest

from streams import StreamsBuilder, serdes
from streams.dsl import JoinWindows
from streams.errors import TopologyError
from streams.testing import TopologyTestDriver

S = serdes.STRING
WINDOWS = JoinWindows.of_time_difference_with_no_grace(10)


def describe(builder: StreamsBuilder) -> str:
    return "\n".join(line.rstrip() for line in str(builder.build().describe()).strip("\n").splitlines())


def test_a_named_stream_join_of_two_rekeyed_streams():
    b = StreamsBuilder()
    left = b.stream("l", key_serde=S, value_serde=S).select_key(lambda k, v: v)
    right = b.stream("r", key_serde=S, value_serde=S).select_key(lambda k, v: v)
    left.join(right, lambda x, y: x + y, WINDOWS, name="j").to("out")
    assert describe(b) == """Topologies:
   Sub-topology: 0
    Source: KSTREAM-SOURCE-0000000000 (topics: [l])
      --> KSTREAM-KEY-SELECT-0000000001
    Processor: KSTREAM-KEY-SELECT-0000000001 (stores: [])
      --> j-left-repartition-filter
      <-- KSTREAM-SOURCE-0000000000
    Processor: j-left-repartition-filter (stores: [])
      --> j-left-repartition-sink
      <-- KSTREAM-KEY-SELECT-0000000001
    Sink: j-left-repartition-sink (topic: j-left-repartition)
      <-- j-left-repartition-filter

  Sub-topology: 1
    Source: KSTREAM-SOURCE-0000000002 (topics: [r])
      --> KSTREAM-KEY-SELECT-0000000003
    Processor: KSTREAM-KEY-SELECT-0000000003 (stores: [])
      --> j-right-repartition-filter
      <-- KSTREAM-SOURCE-0000000002
    Processor: j-right-repartition-filter (stores: [])
      --> j-right-repartition-sink
      <-- KSTREAM-KEY-SELECT-0000000003
    Sink: j-right-repartition-sink (topic: j-right-repartition)
      <-- j-right-repartition-filter

  Sub-topology: 2
    Source: j-left-repartition-source (topics: [j-left-repartition])
      --> j-this-windowed
    Source: j-right-repartition-source (topics: [j-right-repartition])
      --> j-other-windowed
    Processor: j-other-windowed (stores: [KSTREAM-JOINOTHER-0000000013-store])
      --> j-other-join
      <-- j-right-repartition-source
    Processor: j-this-windowed (stores: [KSTREAM-JOINTHIS-0000000012-store])
      --> j-this-join
      <-- j-left-repartition-source
    Processor: j-other-join (stores: [KSTREAM-JOINTHIS-0000000012-store])
      --> j-merge
      <-- j-other-windowed
    Processor: j-this-join (stores: [KSTREAM-JOINOTHER-0000000013-store])
      --> j-merge
      <-- j-this-windowed
    Processor: j-merge (stores: [])
      --> KSTREAM-SINK-0000000015
      <-- j-this-join, j-other-join
    Sink: KSTREAM-SINK-0000000015 (topic: out)
      <-- j-merge"""


def test_a_named_stream_table_join_after_a_key_change():
    b = StreamsBuilder()
    table = b.table("t", key_serde=S, value_serde=S, store="tt")
    b.stream("s", key_serde=S, value_serde=S).select_key(lambda k, v: v).join(
        table, lambda x, y: x + y, name="stj").to("out")
    assert describe(b) == """Topologies:
   Sub-topology: 0
    Source: stj-repartition-source (topics: [stj-repartition])
      --> stj
    Source: KSTREAM-SOURCE-0000000000 (topics: [t])
      --> KTABLE-SOURCE-0000000001
    Processor: stj (stores: [tt])
      --> KSTREAM-SINK-0000000008
      <-- stj-repartition-source
    Sink: KSTREAM-SINK-0000000008 (topic: out)
      <-- stj
    Processor: KTABLE-SOURCE-0000000001 (stores: [tt])
      --> none
      <-- KSTREAM-SOURCE-0000000000

  Sub-topology: 1
    Source: KSTREAM-SOURCE-0000000002 (topics: [s])
      --> KSTREAM-KEY-SELECT-0000000003
    Processor: KSTREAM-KEY-SELECT-0000000003 (stores: [])
      --> stj-repartition-filter
      <-- KSTREAM-SOURCE-0000000002
    Processor: stj-repartition-filter (stores: [])
      --> stj-repartition-sink
      <-- KSTREAM-KEY-SELECT-0000000003
    Sink: stj-repartition-sink (topic: stj-repartition)
      <-- stj-repartition-filter"""


def test_a_named_join_joins_as_an_unnamed_one():
    for name in (None, "orders-payments"):
        b = StreamsBuilder()
        orders = b.stream("orders", key_serde=S, value_serde=S).select_key(lambda k, v: v.split(":")[0])
        payments = b.stream("payments", key_serde=S, value_serde=S)
        orders.left_join(payments, lambda o, p: f"{o}|{p}", WINDOWS, name=name).to("paid", key_serde=S, value_serde=S)
        config = {"application.id": "joins", "default.key.serde": "string", "default.value.serde": "string"}
        with TopologyTestDriver(b.build(), config) as driver:
            driver.create_input_topic("payments", S, S).pipe_input("o1", "card", timestamp=5)
            driver.create_input_topic("orders", S, S).pipe_input("x", "o1:book", timestamp=8)
            assert driver.create_output_topic("paid", S, S).read_key_values_to_list() == [("o1", "o1:book|card")]


def test_named_joins_and_stores_satisfy_explicit_naming():
    b = StreamsBuilder({"ensure.explicit.internal.resource.naming": True})
    left = b.stream("l", key_serde=S, value_serde=S).select_key(lambda k, v: v)
    left.join(b.stream("r", key_serde=S, value_serde=S), lambda x, y: x, WINDOWS, name="j", store="js").to("out")
    left.join(b.table("t", key_serde=S, value_serde=S, store="tt"), lambda x, y: x, name="tj").to("out2")
    b.build()
    b = StreamsBuilder({"ensure.explicit.internal.resource.naming": True})
    left = b.stream("l", key_serde=S, value_serde=S).select_key(lambda k, v: v)
    left.join(b.stream("r", key_serde=S, value_serde=S), lambda x, y: x, WINDOWS, name="j").to("out")
    with pytest.raises(TopologyError, match="state store.s. has not been named: KSTREAM-JOINTHIS"):
        b.build()


@pytest.mark.parametrize("name", ["", "a b", "x" * 240, 3])
def test_a_join_name_that_cannot_name_its_topics_is_refused(name):
    b = StreamsBuilder()
    stream = b.stream("l", key_serde=S, value_serde=S)
    with pytest.raises(TopologyError, match="join: name"):
        stream.join(b.stream("r", key_serde=S, value_serde=S), lambda x, y: x, WINDOWS, name=name)
    with pytest.raises(TopologyError, match="left_join: name"):
        stream.left_join(b.table("t", key_serde=S, value_serde=S), lambda x, y: x, name=name)


def test_a_named_to_table_after_a_key_change():
    b = StreamsBuilder({"ensure.explicit.internal.resource.naming": True})
    (b.stream("in", key_serde=S, value_serde=S).select_key(lambda k, v: v)
        .to_table(name="latest", store="latest-store").to_stream().to("out"))
    assert describe(b) == """Topologies:
   Sub-topology: 0
    Source: KSTREAM-SOURCE-0000000000 (topics: [in])
      --> KSTREAM-KEY-SELECT-0000000001
    Processor: KSTREAM-KEY-SELECT-0000000001 (stores: [])
      --> latest-repartition-filter
      <-- KSTREAM-SOURCE-0000000000
    Processor: latest-repartition-filter (stores: [])
      --> latest-repartition-sink
      <-- KSTREAM-KEY-SELECT-0000000001
    Sink: latest-repartition-sink (topic: latest-repartition)
      <-- latest-repartition-filter

  Sub-topology: 1
    Source: latest-repartition-source (topics: [latest-repartition])
      --> latest
    Processor: latest (stores: [latest-store])
      --> KTABLE-TOSTREAM-0000000006
      <-- latest-repartition-source
    Processor: KTABLE-TOSTREAM-0000000006 (stores: [])
      --> KSTREAM-SINK-0000000007
      <-- latest
    Sink: KSTREAM-SINK-0000000007 (topic: out)
      <-- KTABLE-TOSTREAM-0000000006"""
