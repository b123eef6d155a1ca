"""KStream.repartition(num_partitions=n) (Kafka's Repartitioned.withNumberOfPartitions): the
topic's count is enforced, downstream sizes follow it, co-partition groups are checked.

Partition counts are planned the way Kafka's RepartitionTopics and CopartitionedTopicsEnforcer
plan them; the embedded-cluster test checks the topic the App creates and where records land."""

from __future__ import annotations

import pytest

from streams import StreamsBuilder, Topology, serdes
from streams.runtime.errors import CoPartitioningError
from streams.runtime.internal import plan_internal_topics
from streams.testing import TopologyTestDriver

S = serdes.STRING


def _enforced_then_count() -> Topology:
    b = StreamsBuilder()
    (b.stream("in", key_serde=S, value_serde=S)
        .repartition(num_partitions=3, name="spread")
        .group_by(lambda k, v: v)
        .count(store="counts"))
    return b.build()


def test_enforced_count_wins_over_the_upstream_count_and_sizes_what_reads_it():
    topo = _enforced_then_count()
    assert topo.enforced_partitions == {"spread-repartition": 3}
    plan = plan_internal_topics(topo, topo.build(), "app", {"in": 8})
    # the enforced topic has 3 partitions although its writer reads 8; the sub-topology reading
    # it has 3 tasks, and the group_by repartition it writes takes the max of its sources: 3
    assert plan.specs["app-spread-repartition"].partitions == 3
    assert plan.specs["app-counts-repartition"].partitions == 3
    assert plan.specs["app-counts-changelog"].partitions == 3
    assert plan.partitions_of_sub == {0: 8, 1: 3, 2: 3}


def test_without_a_count_the_repartition_topic_follows_its_writer():
    b = StreamsBuilder()
    b.stream("in", key_serde=S, value_serde=S).repartition().to("out")
    topo = b.build()
    assert topo.enforced_partitions == {}
    plan = plan_internal_topics(topo, topo.build(), "app", {"in": 5})
    assert plan.specs["app-KSTREAM-REPARTITION-0000000001-repartition"].partitions == 5


def _two_repartitions(n1: int, n2: int, user_topic: bool = False) -> Topology:
    """Two fixed-count repartition topics (and maybe a user topic) read by one co-partitioned
    sub-topology, with the Processor API."""
    t = Topology()
    t.add_source("s1", "a")
    t.add_sink("k1", "r1-repartition", "s1")
    t.add_internal_topic("r1-repartition", num_partitions=n1)
    t.add_source("s2", "b")
    t.add_sink("k2", "r2-repartition", "s2")
    t.add_internal_topic("r2-repartition", num_partitions=n2)
    t.add_source("r1", "r1-repartition")
    t.add_source("r2", "r2-repartition")
    sources = ["r1", "r2"]
    if user_topic:
        t.add_source("u", "c")
        sources.append("u")
    t.add_sink("out", "out", *sources)
    t.copartition_sources(*sources)
    return t


def test_copartition_group_with_conflicting_enforced_counts_fails_naming_topics_and_counts():
    topo = _two_repartitions(2, 3)
    assert topo.copartition_groups() == [frozenset({"r1-repartition", "r2-repartition"})]
    with pytest.raises(CoPartitioningError, match=r"app-r1-repartition=2, app-r2-repartition=3") as info:
        plan_internal_topics(topo, topo.build(), "app", {"a": 1, "b": 1})
    assert info.value.partition_counts == {"app-r1-repartition": 2, "app-r2-repartition": 3}


def test_copartition_group_agreeing_enforced_counts_passes():
    topo = _two_repartitions(4, 4)
    plan = plan_internal_topics(topo, topo.build(), "app", {"a": 1, "b": 9})
    assert plan.specs["app-r1-repartition"].partitions == plan.specs["app-r2-repartition"].partitions == 4
    assert plan.partitions_of_sub[2] == 4


def test_enforced_count_must_match_the_user_topic_of_its_group():
    topo = _two_repartitions(4, 4, user_topic=True)
    with pytest.raises(CoPartitioningError, match=r"Number of partitions \[4\] of repartition topic \[app-r[12]-repartition\].*c=6"):
        plan_internal_topics(topo, topo.build(), "app", {"a": 1, "b": 1, "c": 6})
    plan = plan_internal_topics(topo, topo.build(), "app", {"a": 1, "b": 1, "c": 4})
    assert plan.partitions_of_sub[2] == 4


def test_repartition_names_and_bad_arguments():
    from streams.errors import TopologyError

    b = StreamsBuilder()
    s = b.stream("in", key_serde=S, value_serde=S)
    s.repartition(name="rp", num_partitions=2).group_by_key().count().to_stream().to("out")
    t = b.build()
    # Kafka 4.1.1's describe() of the same topology: a named repartition still burns the three
    # generated indices (1, 2, 3), so the count's store is 4 and its processor 5
    assert str(t.describe()) == (
        "Topologies:\n"
        "   Sub-topology: 0\n"
        "    Source: KSTREAM-SOURCE-0000000000 (topics: [in])\n"
        "      --> rp-repartition-filter\n"
        "    Processor: rp-repartition-filter (stores: [])\n"
        "      --> rp-repartition-sink\n"
        "      <-- KSTREAM-SOURCE-0000000000\n"
        "    Sink: rp-repartition-sink (topic: rp-repartition)\n"
        "      <-- rp-repartition-filter\n"
        "\n"
        "  Sub-topology: 1\n"
        "    Source: rp-repartition-source (topics: [rp-repartition])\n"
        "      --> KSTREAM-AGGREGATE-0000000005\n"
        "    Processor: KSTREAM-AGGREGATE-0000000005 (stores: [KSTREAM-AGGREGATE-STATE-STORE-0000000004])\n"
        "      --> KTABLE-TOSTREAM-0000000006\n"
        "      <-- rp-repartition-source\n"
        "    Processor: KTABLE-TOSTREAM-0000000006 (stores: [])\n"
        "      --> KSTREAM-SINK-0000000007\n"
        "      <-- KSTREAM-AGGREGATE-0000000005\n"
        "    Sink: KSTREAM-SINK-0000000007 (topic: out)\n"
        "      <-- KTABLE-TOSTREAM-0000000006\n"
        "\n")
    for bad in (0, -1, 2.5, True, "3"):
        with pytest.raises(TopologyError, match="num_partitions must be an int >= 1"):
            s.repartition(num_partitions=bad)
    with pytest.raises(TopologyError, match="cannot name a topic"):
        s.repartition(name="a b")
    with pytest.raises(TopologyError, match="num_partitions must be an int >= 1"):
        Topology().add_internal_topic("x", num_partitions=0)
    t = Topology().add_source("s", "a").add_sink("k", "b", "s").copartition_sources("s", "k")
    with pytest.raises(TopologyError, match="co-partitioned node 'k' is not a source"):
        t.build()


def test_driver_runs_a_fixed_count_repartition_like_any_other():
    # the test driver has one partition per topic (as Kafka's): records go through in order
    b = StreamsBuilder()
    b.stream("in", key_serde=S, value_serde=S).repartition(num_partitions=4).map_values(str.upper).to("out", value_serde=S)
    with TopologyTestDriver(b.build()) as d:
        inp = d.create_input_topic("in", S, S)
        for i, key in enumerate(["a", "b", "a"]):
            inp.pipe_input(key, f"v{i}", timestamp=i)
        out = d.create_output_topic("out", S, S)
        assert out.read_key_values_to_list() == [("a", "V0"), ("b", "V1"), ("a", "V2")]
        first = d.producer_history()[0]
        assert (first.topic, first.partition) == ("topology-test-driver-KSTREAM-REPARTITION-0000000001-repartition", 0)
