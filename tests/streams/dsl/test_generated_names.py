"""Generated names and which source tables get a store, derived by hand from Kafka Streams 4.1's
builder: every generated name takes the next index of one counter, a name the user gives still
uses one up (NamedInternal.orElseGenerateWithPrefix), a split uses one per branch
(BranchedKStreamImpl.createBranch), a store the user names uses none (MaterializedInternal), and
a source table keeps a store only when it is materialized (KTableSource.materialized()). The
differential conformance tests compare whole describe() texts with Kafka's; these pin the rules."""

import pytest

from streams import Branched, Materialized, SessionWindows, SlidingWindows, StreamsBuilder, TimeWindows, serdes
from streams.testing import TopologyTestDriver

S = serdes.STRING
CONFIG = {"application.id": "names", "default.key.serde": "string", "default.value.serde": "string"}


def test_a_named_split_uses_an_index_for_itself_and_one_per_branch():
    b = StreamsBuilder()
    branches = (b.stream("in", key_serde=S, value_serde=S)  # KSTREAM-SOURCE-0000000000
                .split("s-")  # named: index 1 used up
                .branch(lambda k, v: v.startswith("a"), Branched.as_("x"))  # index 2
                .default_branch())  # s-0, index 3
    branches["s-0"].map_values(str.upper).to("out", key_serde=S, value_serde=S)
    text = str(b.build().describe())
    assert "Processor: KSTREAM-MAPVALUES-0000000004 (stores: [])" in text
    assert "Sink: KSTREAM-SINK-0000000005 (topic: out)" in text


def test_an_unnamed_split_uses_the_splitter_s_index_and_one_per_branch():
    b = StreamsBuilder()
    branches = (b.stream("in", key_serde=S, value_serde=S)
                .split()  # KSTREAM-BRANCH-0000000001
                .branch(lambda k, v: v.startswith("a"))  # KSTREAM-BRANCH-00000000011, index 2
                .default_branch())  # KSTREAM-BRANCH-00000000010, index 3
    branches["KSTREAM-BRANCH-00000000011"].filter(lambda k, v: True).to("out", key_serde=S, value_serde=S)
    text = str(b.build().describe())
    assert "Processor: KSTREAM-BRANCH-00000000011 (stores: [])" in text
    assert "Processor: KSTREAM-FILTER-0000000004 (stores: [])" in text


def test_a_foreign_key_join_into_a_named_store_uses_no_index_for_the_store():
    b = StreamsBuilder()
    left = b.table("left", key_serde=S, value_serde=S)  # left-STATE-STORE-0, SOURCE-1, KTABLE-SOURCE-2
    right = b.table("right", key_serde=S, value_serde=S)  # right-STATE-STORE-3, SOURCE-4, KTABLE-SOURCE-5
    # subscription topic 6, send 7, sink 8, source 9, subscription store 10, receive 11, join 12,
    # foreign join 13, response topic 14, sink 15, source 16, resolver 17, output 18
    joined = left.join(right, lambda lv, rv: f"{lv}+{rv}", foreign_key_extractor=lambda v: v, store="joined")
    joined.to_stream().to("out", key_serde=S, value_serde=S)
    text = str(b.build().describe())
    assert "Processor: KTABLE-FK-JOIN-OUTPUT-0000000018 (stores: [joined])" in text
    assert "Processor: KTABLE-TOSTREAM-0000000019 (stores: [])" in text


def test_an_unnamed_foreign_key_join_result_uses_an_index_for_its_store_name():
    b = StreamsBuilder()
    left = b.table("left", key_serde=S, value_serde=S)
    right = b.table("right", key_serde=S, value_serde=S)
    left.join(right, lambda lv, rv: f"{lv}+{rv}", foreign_key_extractor=lambda v: v).to_stream().to(
        "out", key_serde=S, value_serde=S)
    text = str(b.build().describe())
    assert "KTABLE-FK-JOIN-OUTPUT-0000000018" in text
    assert "Processor: KTABLE-TOSTREAM-0000000020 (stores: [])" in text  # 19: the unused store name


def test_a_source_table_nothing_materializes_has_no_store_and_forwards_every_update():
    b = StreamsBuilder()
    b.table("in", key_serde=S, value_serde=S).to_stream().to("out", key_serde=S, value_serde=S)
    topology = b.build()
    assert "Processor: KTABLE-SOURCE-0000000002 (stores: [])" in str(topology.describe())
    assert not any(topic.endswith("-changelog") for topic in topology.internal_topics)
    with TopologyTestDriver(topology, CONFIG) as d:
        inp = d.create_input_topic("in", S, S)
        inp.pipe_input("a", "1", timestamp=5)
        inp.pipe_input("a", "2", timestamp=3)  # older: no store, nothing to compare it with
        inp.pipe_input("b", None, timestamp=6)  # a delete of an absent key is forwarded too
        inp.pipe_input(None, "x", timestamp=7)  # a None key is dropped
        out = d.create_output_topic("out", S, S)
        assert [(r.key, r.value, r.timestamp) for r in out.read_records_to_list()] == [
            ("a", "1", 5), ("a", "2", 3), ("b", None, 6)]
        assert sum(m.value for m in d.metrics() if m.name == "dropped-records-total") == 1


def test_an_unnamed_to_table_nothing_materializes_has_no_store():
    b = StreamsBuilder()
    b.stream("in", key_serde=S, value_serde=S).to_table().to_stream().to("out", key_serde=S, value_serde=S)
    topology = b.build()
    assert "Processor: KSTREAM-TOTABLE-0000000001 (stores: [])" in str(topology.describe())
    assert not any(topic.endswith("-changelog") for topic in topology.internal_topics)


def test_a_source_table_is_materialized_by_a_grouping_a_join_or_a_name():
    b = StreamsBuilder()
    b.table("grouped", key_serde=S, value_serde=S).group_by(lambda k, v: (v, k)).count().to_stream().to(
        "out1", key_serde=S, value_serde=serdes.INT64)
    joined = b.table("joined", key_serde=S, value_serde=S)
    b.stream("clicks", key_serde=S, value_serde=S).join(joined, lambda c, p: c + p).to("out2", key_serde=S,
                                                                                        value_serde=S)
    b.table("named", key_serde=S, value_serde=S, store="named-store").to_stream().to("out3", key_serde=S,
                                                                                      value_serde=S)
    text = str(b.build().describe())
    assert "Processor: KTABLE-SOURCE-0000000002 (stores: [grouped-STATE-STORE-0000000000])" in text
    assert "(stores: [joined-STATE-STORE-0000000010])" in text
    assert "(stores: [named-store])" in text


def test_an_unmaterialized_table_needs_no_serde_for_the_store_it_does_not_have():
    """map_values leaves the value serde to the config; the table below it has no store, so no
    default.value.serde is needed (a materialized one would fail to start without it)."""
    b = StreamsBuilder()
    (b.stream("in", key_serde=S, value_serde=S).map_values(str.upper).to_table().to_stream()
     .to("out", key_serde=S, value_serde=S))
    with TopologyTestDriver(b.build(), {"application.id": "names"}) as d:
        d.create_input_topic("in", S, S).pipe_input("a", "b", timestamp=1)
        assert [(r.key, r.value) for r in d.create_output_topic("out", S, S).read_records_to_list()] == [("a", "B")]


def test_a_grouped_table_reduce_without_a_store_name_uses_the_aggregate_store_prefix():
    """Kafka's KGroupedTableImpl.reduce generates its store name with KTABLE-AGGREGATE- (the
    processor is KTABLE-REDUCE-): the repartition and changelog topics carry that name."""
    b = StreamsBuilder()
    (b.table("in", key_serde=S, value_serde=S).group_by(lambda k, v: (v, k))
     .reduce(lambda agg, v: agg + v, lambda agg, v: agg).to_stream().to("out", key_serde=S, value_serde=S))
    topology = b.build()
    text = str(topology.describe())
    assert "Processor: KTABLE-REDUCE-0000000007 (stores: [KTABLE-AGGREGATE-STATE-STORE-0000000004])" in text
    assert "KTABLE-AGGREGATE-STATE-STORE-0000000004-repartition" in topology.internal_topics
    assert not any("REDUCE-STATE-STORE" in topic for topic in topology.internal_topics)


@pytest.mark.parametrize("windowed,extra", [
    (lambda g: g, 1),  # KGroupedStream.count
    (lambda g: g.windowed_by(TimeWindows.of_size_with_no_grace(100)), 1),
    (lambda g: g.windowed_by(SessionWindows.of_inactivity_gap_with_no_grace(100)), 1),
    (lambda g: g.windowed_by(SlidingWindows.of_time_difference_with_no_grace(100)), 0),  # Kafka's newer API
])
def test_count_given_a_materialized_without_a_name_uses_up_one_more_index(windowed, extra):
    """Kafka's count(Materialized) "burns a topology name" when the Materialized has no name;
    count() without one does not."""
    def processor_name(store):
        b = StreamsBuilder()
        counted = windowed(b.stream("in", key_serde=S, value_serde=S).group_by_key())
        table = counted.count() if store is None else counted.count(store=store)
        return table.name
    assert processor_name(None) == "KSTREAM-AGGREGATE-0000000002"
    assert processor_name(Materialized.with_serdes(S, serdes.INT64)) == f"KSTREAM-AGGREGATE-000000000{2 + extra}"
    assert processor_name("named") == "KSTREAM-AGGREGATE-0000000001"


def test_a_table_filter_given_a_materialized_without_a_name_keeps_no_store():
    """Kafka's KTable filter / map_values materialize only a named store (queryableStoreName); the
    generated name still uses an index, before the processor's."""
    b = StreamsBuilder()
    (b.table("in", key_serde=S, value_serde=S)  # in-STATE-STORE-0, SOURCE-1, KTABLE-SOURCE-2
     .filter(lambda k, v: v != "x", store=Materialized.with_serdes(S, S))  # store name 3, KTABLE-FILTER-4
     .to_stream().to("out", key_serde=S, value_serde=S))
    text = str(b.build().describe())
    assert "Processor: KTABLE-FILTER-0000000004 (stores: [])" in text
    assert "KTABLE-FILTER-STATE-STORE" not in text
    assert "Processor: KTABLE-TOSTREAM-0000000005 (stores: [])" in text
