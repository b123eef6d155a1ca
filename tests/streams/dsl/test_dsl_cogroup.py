"""KGroupedStream.cogroup on the TopologyTestDriver. Expected outputs are derived by hand from
Kafka's CogroupedStreamAggregateBuilder: each cogrouped stream has its own aggregate processor
(KStreamAggregate, or the windowed ones, with their own observed stream time) over the one
shared store, and every update goes through the merge node to the table. The driver commits
after every record, so a caching store emits once per record, as without caching."""

import pytest

from streams import CogroupedKStream, StreamsBuilder, serdes
from streams.dsl import Materialized, SessionWindows, SlidingWindows, TimeWindows, Window, Windowed
from streams.errors import TopologyError
from streams.runtime.errors import CoPartitioningError
from streams.runtime.internal import plan_internal_topics
from streams.testing import TopologyTestDriver

S = serdes.STRING
J = serdes.JSON
CONFIG = {"application.id": "cog"}


def records(d, topic="out", key_serde=S, value_serde=S):
    return [(r.key, r.value, r.timestamp) for r in d.create_output_topic(topic, key_serde, value_serde)
            .read_records_to_list()]


def metric(d, name):
    return sum(m.value for m in d.metrics() if m.name == name)


def flat(w, v):
    return f"{w.key}@{w.window.start}/{w.window.end}", v


def click(key, value, agg):
    return {**agg, "clicks": agg["clicks"] + 1}


def purchase(key, value, agg):
    return {**agg, "spent": agg["spent"] + int(value)}


def profile_topology(caching: bool):
    b = StreamsBuilder()
    clicks = b.stream("clicks", key_serde=S, value_serde=S).group_by_key()
    purchases = b.stream("purchases", key_serde=S, value_serde=S).group_by_key()
    mat = Materialized.as_("profiles").with_value_serde(J)
    (clicks.cogroup(click)
        .cogroup(purchases, purchase)
        .aggregate(lambda: {"clicks": 0, "spent": 0}, store=mat if caching else mat.with_caching_disabled())
        .to_stream().to("out", key_serde=S, value_serde=J))
    return b.build()


@pytest.mark.parametrize("caching", [True, False])
def test_two_streams_different_aggregators_one_store(caching):
    with TopologyTestDriver(profile_topology(caching), CONFIG) as d:
        clicks = d.create_input_topic("clicks", S, S)
        purchases = d.create_input_topic("purchases", S, S)
        clicks.pipe_input("u1", "home", timestamp=1)
        clicks.pipe_input("u2", "cart", timestamp=2)
        purchases.pipe_input("u1", "10", timestamp=3)
        clicks.pipe_input("u1", "shop", timestamp=4)
        purchases.pipe_input("u2", "5", timestamp=5)
        purchases.pipe_input("u1", None, timestamp=6)   # None value: skipped, counted
        clicks.pipe_input(None, "home", timestamp=6)    # None key: skipped, counted
        purchases.pipe_input("u1", "7", timestamp=7)
        # each record goes through its own stream's aggregator, from the one aggregate per key
        # in the shared store; every update reaches the table with the record's timestamp
        assert records(d, value_serde=J) == [
            ("u1", {"clicks": 1, "spent": 0}, 1),
            ("u2", {"clicks": 1, "spent": 0}, 2),
            ("u1", {"clicks": 1, "spent": 10}, 3),
            ("u1", {"clicks": 2, "spent": 10}, 4),
            ("u2", {"clicks": 1, "spent": 5}, 5),
            ("u1", {"clicks": 2, "spent": 17}, 7),
        ]
        assert metric(d, "dropped-records-total") == 2
        store = d.get_key_value_store("profiles")
        assert store.get("u1") == {"clicks": 2, "spent": 17}
        assert store.get("u2") == {"clicks": 1, "spent": 5}
        # one store, one changelog, written by both streams' processors
        changelog = [r for r in d.producer_history() if r.topic == "cog-profiles-changelog"]
        assert len(changelog) == 6


def three_streams(b: StreamsBuilder, store=None):
    """one and two grouped by key; three re-keyed (value becomes the key) -> repartitioned."""
    one = b.stream("one", key_serde=S, value_serde=S).group_by_key()
    two = b.stream("two", key_serde=S, value_serde=S).group_by_key()
    three = b.stream("three", key_serde=S, value_serde=S).map(lambda k, v: (v, k)).group_by_key(
        key_serde=S, value_serde=S)
    return (one.cogroup(lambda k, v, agg: agg + "a" + v)
            .cogroup(two, lambda k, v, agg: agg + "b" + v)
            .cogroup(three, lambda k, v, agg: agg + "c" + v)
            .aggregate(lambda: "", store=Materialized.as_(store).with_value_serde(S) if store else None))


def test_three_streams_with_a_key_change_go_through_a_repartition_topic():
    b = StreamsBuilder()
    three_streams(b, "agg").to_stream().to("out", key_serde=S, value_serde=S)
    topology = b.build()
    assert topology.internal_topics == {"agg-repartition": "repartition"}
    with TopologyTestDriver(topology, CONFIG) as d:
        one, two, three = (d.create_input_topic(t, S, S) for t in ("one", "two", "three"))
        one.pipe_input("x", "1", timestamp=1)
        three.pipe_input("k9", "x", timestamp=2)   # re-keyed to x: through agg-repartition
        two.pipe_input("y", "2", timestamp=3)
        three.pipe_input("k8", "y", timestamp=4)
        one.pipe_input("x", "3", timestamp=5)
        assert records(d) == [("x", "a1", 1), ("x", "a1ck9", 2), ("y", "b2", 3), ("y", "b2ck8", 4),
                              ("x", "a1ck9a3", 5)]
        rekeyed = [(S.deserialize(r.key), S.deserialize(r.value)) for r in d.producer_history()
                   if r.topic == "cog-agg-repartition"]
        assert rekeyed == [("x", "k9"), ("y", "k8")]
        assert d.get_key_value_store("agg").get("x") == "a1ck9a3"


def test_two_rekeyed_streams_get_a_repartition_topic_each():
    # Kafka cannot build this one (both topics would be <store>-repartition); the second gets
    # <store>-cogroup-<position>-repartition
    b = StreamsBuilder()
    first = b.stream("one", key_serde=S, value_serde=S).select_key(lambda k, v: v).group_by_key(key_serde=S)
    second = b.stream("two", key_serde=S, value_serde=S).group_by(lambda k, v: v, key_serde=S)
    (first.cogroup(lambda k, v, agg: agg + "<" + v)
        .cogroup(second, lambda k, v, agg: agg + ">" + v)
        .aggregate(lambda: "", store=Materialized.as_("s").with_value_serde(S).with_caching_disabled())
        .to_stream().to("out", key_serde=S, value_serde=S))
    topology = b.build()
    assert set(topology.internal_topics) == {"s-repartition", "s-cogroup-1-repartition"}
    assert topology.copartition_groups() == [frozenset({"s-repartition", "s-cogroup-1-repartition"})]
    text = str(topology.describe())
    assert "Sink: s-cogroup-1-repartition-sink (topic: s-cogroup-1-repartition)" in text
    with TopologyTestDriver(topology, CONFIG) as d:
        d.create_input_topic("one", S, S).pipe_input("a", "k", timestamp=1)
        d.create_input_topic("two", S, S).pipe_input("b", "k", timestamp=2)
        assert records(d) == [("k", "<k", 1), ("k", "<k>k", 2)]


def test_cogroup_copartitions_the_topics_its_processors_read():
    b = StreamsBuilder()
    three_streams(b).to_stream().to("out", key_serde=S, value_serde=S)
    topology = b.build()
    rep = "COGROUPKSTREAM-AGGREGATE-STATE-STORE-0000000004-repartition"
    assert topology.copartition_groups() == [frozenset({"one", "two", rep})]
    with pytest.raises(CoPartitioningError, match=r"Topics not co-partitioned: \[one=4, two=2\]"):
        plan_internal_topics(topology, topology.build(), "app", {"one": 4, "two": 2, "three": 4})
    # the repartition topic takes the count of the user topics it is read with, not of its
    # writer (three: 8 partitions), so the aggregate's tasks read matching partitions
    plan = plan_internal_topics(topology, topology.build(), "app", {"one": 2, "two": 2, "three": 8})
    assert plan.specs[f"app-{rep}"].partitions == 2
    assert plan.specs["app-COGROUPKSTREAM-AGGREGATE-STATE-STORE-0000000004-changelog"].partitions == 2


def lower_and_upper(b: StreamsBuilder) -> CogroupedKStream:
    """Streams one and two by key: one appends its values, two appends them upper-cased."""
    one = b.stream("one", key_serde=S, value_serde=S).group_by_key()
    two = b.stream("two", key_serde=S, value_serde=S).group_by_key()
    return one.cogroup(lambda k, v, agg: agg + v).cogroup(two, lambda k, v, agg: agg + v.upper())


def test_tumbling_windows_each_stream_keeps_its_own_stream_time():
    b = StreamsBuilder()
    (lower_and_upper(b)
        .windowed_by(TimeWindows.of_size_with_no_grace(10))
        .aggregate(lambda: "", store=Materialized.as_("w").with_value_serde(S).with_caching_disabled()
                   .with_retention(100))
        .to_stream().map(flat).to("out", key_serde=S, value_serde=S))
    with TopologyTestDriver(b.build(), CONFIG) as d:
        one_in, two_in = d.create_input_topic("one", S, S), d.create_input_topic("two", S, S)
        one_in.pipe_input("k", "a", timestamp=1)
        two_in.pipe_input("k", "b", timestamp=3)
        one_in.pipe_input("k", "c", timestamp=12)
        # two's processor has seen stream time 3 only: [0,10) is still open for it (Kafka keeps
        # the observed stream time per processor)
        two_in.pipe_input("k", "d", timestamp=5)
        # one's processor has seen 12: [0,10) closed at 10 + 0 grace, the record is late
        one_in.pipe_input("k", "e", timestamp=8)
        assert records(d) == [("k@0/10", "a", 1), ("k@0/10", "aB", 3), ("k@10/20", "c", 12),
                              ("k@0/10", "aBD", 5)]
        assert metric(d, "dropped-records-total") == 1
        with d.get_window_store("w").fetch("k", 0, 100) as it:
            assert list(it) == [(0, "aBD"), (10, "c")]


def test_session_windows_merge_sessions_of_both_streams():
    b = StreamsBuilder()
    (lower_and_upper(b)
        .windowed_by(SessionWindows.of_inactivity_gap_and_grace(5, 100))
        .aggregate(lambda: "", lambda k, a, b: a + b,
                   store=Materialized.as_("sess").with_value_serde(S).with_caching_disabled())
        .to_stream().map(flat).to("out", key_serde=S, value_serde=S))
    with TopologyTestDriver(b.build(), CONFIG) as d:
        one_in, two_in = d.create_input_topic("one", S, S), d.create_input_topic("two", S, S)
        one_in.pipe_input("k", "a", timestamp=0)
        two_in.pipe_input("k", "b", timestamp=10)
        one_in.pipe_input("k", "c", timestamp=4)   # within 5 of [0,0]: merges it
        two_in.pipe_input("k", "d", timestamp=7)   # within 5 of [0,4] and [10,10]: bridges both
        assert records(d) == [
            ("k@0/0", "a", 0), ("k@10/10", "B", 10),
            ("k@0/0", None, 0), ("k@0/4", "ac", 4),
            # merged "" + "ac" + "B" (merger in store order), then two's aggregator adds "D"
            ("k@0/4", None, 4), ("k@10/10", None, 10), ("k@0/10", "acBD", 10),
        ]
        with d.get_session_store("sess").fetch("k") as it:
            assert list(it) == [(Windowed("k", Window(0, 10)), "acBD")]


def test_sliding_windows_through_the_other_streams_aggregator():
    b = StreamsBuilder()
    (lower_and_upper(b)
        .windowed_by(SlidingWindows.of_time_difference_and_grace(10, 100))
        .aggregate(lambda: "", store=Materialized.as_("sl").with_value_serde(S).with_caching_disabled())
        .to_stream().map(flat).to("out", key_serde=S, value_serde=S))
    with TopologyTestDriver(b.build(), CONFIG) as d:
        d.create_input_topic("one", S, S).pipe_input("k", "a", timestamp=20)
        d.create_input_topic("two", S, S).pipe_input("k", "b", timestamp=25)
        # t=25 (two): the right window of the record at 20 ([21,31], just this record), then its
        # own left window [15,25], which starts from the aggregate holding the record at 20
        assert records(d) == [("k@10/20", "a", 20), ("k@21/31", "B", 25), ("k@15/25", "aB", 25)]


# Kafka Streams 4.1.1's describe() of the same topologies (KStreamImpl / CogroupedKStreamImpl
# names: the store first, then each repartition's three burned names, one aggregate per stream,
# the merge node)
KAFKA_TWO_PLAIN = (
    "Topologies:\n"
    "   Sub-topology: 0\n"
    "    Source: KSTREAM-SOURCE-0000000000 (topics: [one])\n"
    "      --> COGROUPKSTREAM-AGGREGATE-0000000003\n"
    "    Source: KSTREAM-SOURCE-0000000001 (topics: [two])\n"
    "      --> COGROUPKSTREAM-AGGREGATE-0000000004\n"
    "    Processor: COGROUPKSTREAM-AGGREGATE-0000000003 (stores: [COGROUPKSTREAM-AGGREGATE-STATE-STORE-0000000002])\n"
    "      --> COGROUPKSTREAM-MERGE-0000000005\n"
    "      <-- KSTREAM-SOURCE-0000000000\n"
    "    Processor: COGROUPKSTREAM-AGGREGATE-0000000004 (stores: [COGROUPKSTREAM-AGGREGATE-STATE-STORE-0000000002])\n"
    "      --> COGROUPKSTREAM-MERGE-0000000005\n"
    "      <-- KSTREAM-SOURCE-0000000001\n"
    "    Processor: COGROUPKSTREAM-MERGE-0000000005 (stores: [])\n"
    "      --> KTABLE-TOSTREAM-0000000006\n"
    "      <-- COGROUPKSTREAM-AGGREGATE-0000000003, COGROUPKSTREAM-AGGREGATE-0000000004\n"
    "    Processor: KTABLE-TOSTREAM-0000000006 (stores: [])\n"
    "      --> KSTREAM-SINK-0000000007\n"
    "      <-- COGROUPKSTREAM-MERGE-0000000005\n"
    "    Sink: KSTREAM-SINK-0000000007 (topic: out)\n"
    "      <-- KTABLE-TOSTREAM-0000000006\n"
    "\n")

KAFKA_REKEYED_UNNAMED = (
    "Topologies:\n"
    "   Sub-topology: 0\n"
    "    Source: KSTREAM-SOURCE-0000000000 (topics: [one])\n"
    "      --> KSTREAM-MAP-0000000001\n"
    "    Processor: KSTREAM-MAP-0000000001 (stores: [])\n"
    "      --> COGROUPKSTREAM-AGGREGATE-STATE-STORE-0000000003-repartition-filter\n"
    "      <-- KSTREAM-SOURCE-0000000000\n"
    "    Processor: COGROUPKSTREAM-AGGREGATE-STATE-STORE-0000000003-repartition-filter (stores: [])\n"
    "      --> COGROUPKSTREAM-AGGREGATE-STATE-STORE-0000000003-repartition-sink\n"
    "      <-- KSTREAM-MAP-0000000001\n"
    "    Sink: COGROUPKSTREAM-AGGREGATE-STATE-STORE-0000000003-repartition-sink "
    "(topic: COGROUPKSTREAM-AGGREGATE-STATE-STORE-0000000003-repartition)\n"
    "      <-- COGROUPKSTREAM-AGGREGATE-STATE-STORE-0000000003-repartition-filter\n"
    "\n"
    "  Sub-topology: 1\n"
    "    Source: COGROUPKSTREAM-AGGREGATE-STATE-STORE-0000000003-repartition-source "
    "(topics: [COGROUPKSTREAM-AGGREGATE-STATE-STORE-0000000003-repartition])\n"
    "      --> COGROUPKSTREAM-AGGREGATE-0000000007\n"
    "    Source: KSTREAM-SOURCE-0000000002 (topics: [two])\n"
    "      --> COGROUPKSTREAM-AGGREGATE-0000000008\n"
    "    Processor: COGROUPKSTREAM-AGGREGATE-0000000007 (stores: [COGROUPKSTREAM-AGGREGATE-STATE-STORE-0000000003])\n"
    "      --> COGROUPKSTREAM-MERGE-0000000009\n"
    "      <-- COGROUPKSTREAM-AGGREGATE-STATE-STORE-0000000003-repartition-source\n"
    "    Processor: COGROUPKSTREAM-AGGREGATE-0000000008 (stores: [COGROUPKSTREAM-AGGREGATE-STATE-STORE-0000000003])\n"
    "      --> COGROUPKSTREAM-MERGE-0000000009\n"
    "      <-- KSTREAM-SOURCE-0000000002\n"
    "    Processor: COGROUPKSTREAM-MERGE-0000000009 (stores: [])\n"
    "      --> KTABLE-TOSTREAM-0000000010\n"
    "      <-- COGROUPKSTREAM-AGGREGATE-0000000007, COGROUPKSTREAM-AGGREGATE-0000000008\n"
    "    Processor: KTABLE-TOSTREAM-0000000010 (stores: [])\n"
    "      --> KSTREAM-SINK-0000000011\n"
    "      <-- COGROUPKSTREAM-MERGE-0000000009\n"
    "    Sink: KSTREAM-SINK-0000000011 (topic: out)\n"
    "      <-- KTABLE-TOSTREAM-0000000010\n"
    "\n")

KAFKA_SESSION_NAMED = (
    "Topologies:\n"
    "   Sub-topology: 0\n"
    "    Source: KSTREAM-SOURCE-0000000000 (topics: [one])\n"
    "      --> COGROUPKSTREAM-AGGREGATE-0000000006\n"
    "    Source: sess-repartition-source (topics: [sess-repartition])\n"
    "      --> COGROUPKSTREAM-AGGREGATE-0000000007\n"
    "    Processor: COGROUPKSTREAM-AGGREGATE-0000000006 (stores: [sess])\n"
    "      --> COGROUPKSTREAM-MERGE-0000000008\n"
    "      <-- KSTREAM-SOURCE-0000000000\n"
    "    Processor: COGROUPKSTREAM-AGGREGATE-0000000007 (stores: [sess])\n"
    "      --> COGROUPKSTREAM-MERGE-0000000008\n"
    "      <-- sess-repartition-source\n"
    "    Processor: COGROUPKSTREAM-MERGE-0000000008 (stores: [])\n"
    "      --> KTABLE-TOSTREAM-0000000009\n"
    "      <-- COGROUPKSTREAM-AGGREGATE-0000000006, COGROUPKSTREAM-AGGREGATE-0000000007\n"
    "    Processor: KTABLE-TOSTREAM-0000000009 (stores: [])\n"
    "      --> KSTREAM-SINK-0000000010\n"
    "      <-- COGROUPKSTREAM-MERGE-0000000008\n"
    "    Sink: KSTREAM-SINK-0000000010 (topic: out)\n"
    "      <-- KTABLE-TOSTREAM-0000000009\n"
    "\n"
    "  Sub-topology: 1\n"
    "    Source: KSTREAM-SOURCE-0000000001 (topics: [two])\n"
    "      --> KSTREAM-KEY-SELECT-0000000002\n"
    "    Processor: KSTREAM-KEY-SELECT-0000000002 (stores: [])\n"
    "      --> sess-repartition-filter\n"
    "      <-- KSTREAM-SOURCE-0000000001\n"
    "    Processor: sess-repartition-filter (stores: [])\n"
    "      --> sess-repartition-sink\n"
    "      <-- KSTREAM-KEY-SELECT-0000000002\n"
    "    Sink: sess-repartition-sink (topic: sess-repartition)\n"
    "      <-- sess-repartition-filter\n"
    "\n")


def _concat(k, v, agg):
    return agg + v


def test_describe_two_plain_streams_matches_kafka():
    b = StreamsBuilder()
    g1 = b.stream("one", key_serde=S, value_serde=S).group_by_key()
    g2 = b.stream("two", key_serde=S, value_serde=S).group_by_key()
    g1.cogroup(_concat).cogroup(g2, _concat).aggregate(lambda: "").to_stream().to("out")
    assert str(b.build().describe()) == KAFKA_TWO_PLAIN


def test_describe_rekeyed_stream_with_generated_store_name_matches_kafka():
    b = StreamsBuilder()
    g1 = b.stream("one", key_serde=S, value_serde=S).map(lambda k, v: (v, k)).group_by_key()
    g2 = b.stream("two", key_serde=S, value_serde=S).group_by_key()
    g1.cogroup(_concat).cogroup(g2, _concat).aggregate(lambda: "").to_stream().to("out")
    assert str(b.build().describe()) == KAFKA_REKEYED_UNNAMED


def test_describe_session_windows_with_named_store_matches_kafka():
    b = StreamsBuilder()
    g1 = b.stream("one", key_serde=S, value_serde=S).group_by_key()
    g2 = b.stream("two", key_serde=S, value_serde=S).select_key(lambda k, v: v).group_by_key()
    (g1.cogroup(_concat).cogroup(g2, _concat)
        .windowed_by(SessionWindows.of_inactivity_gap_with_no_grace(10))
        .aggregate(lambda: "", lambda k, a, b: a + b, store="sess").to_stream().to("out"))
    assert str(b.build().describe()) == KAFKA_SESSION_NAMED


def test_three_windowed_streams_name_their_processors_in_order():
    # Kafka 4.1.1: store 3 (after three sources), aggregates 4, 5, 6, merge 7
    b = StreamsBuilder()
    g = [b.stream(t, key_serde=S, value_serde=S).group_by_key() for t in ("one", "two", "three")]
    table = (g[0].cogroup(_concat).cogroup(g[1], _concat).cogroup(g[2], _concat)
             .windowed_by(TimeWindows.of_size_with_no_grace(10)).aggregate(lambda: ""))
    table.to_stream().to("out")
    text = str(b.build().describe())
    assert ("    Processor: COGROUPKSTREAM-MERGE-0000000007 (stores: [])\n"
            "      --> KTABLE-TOSTREAM-0000000008\n"
            "      <-- COGROUPKSTREAM-AGGREGATE-0000000004, COGROUPKSTREAM-AGGREGATE-0000000005, "
            "COGROUPKSTREAM-AGGREGATE-0000000006\n") in text
    assert text.count("(stores: [COGROUPKSTREAM-AGGREGATE-STATE-STORE-0000000003])") == 3
    assert table.store_name == "COGROUPKSTREAM-AGGREGATE-STATE-STORE-0000000003"
    assert table.queryable_store_name is None


def test_bad_inputs_are_typed_errors():
    b = StreamsBuilder()
    g = b.stream("one", key_serde=S, value_serde=S).group_by_key()
    with pytest.raises(TopologyError, match="cogroup aggregator needs a callable"):
        g.cogroup(None)
    cogrouped = g.cogroup(_concat)
    assert isinstance(cogrouped, CogroupedKStream)
    with pytest.raises(TopologyError, match="cogroup needs a KGroupedStream"):
        cogrouped.cogroup("two", _concat)
    with pytest.raises(TopologyError, match="cogroup aggregator needs a callable"):
        cogrouped.cogroup(g, "nope")
    other = StreamsBuilder().stream("x", key_serde=S, value_serde=S).group_by_key()
    with pytest.raises(TopologyError, match="another StreamsBuilder"):
        cogrouped.cogroup(other, _concat)
    with pytest.raises(TopologyError, match="initializer needs a callable"):
        cogrouped.aggregate(None)
    with pytest.raises(TopologyError, match="windowed_by needs TimeWindows"):
        cogrouped.windowed_by(10)
    with pytest.raises(TopologyError, match="merger needs a callable"):
        cogrouped.windowed_by(SessionWindows.of_inactivity_gap_with_no_grace(5)).aggregate(lambda: "", None)
    with pytest.raises(TopologyError, match="store must be a name or a Materialized"):
        cogrouped.aggregate(lambda: "", store=42)
    with pytest.raises(TopologyError, match="retention"):
        cogrouped.windowed_by(TimeWindows.of_size_with_no_grace(10)).aggregate(
            lambda: "", store=Materialized.as_("w").with_retention(5))
