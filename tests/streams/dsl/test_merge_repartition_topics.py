"""topology.optimization merge.repartition.topics (Kafka's mergeRepartitionTopics): the
repartitions below one key change become one topic right after it, with the same results. The
expected outputs are derived by hand; the optimized and plain topologies are also run side by side.
(On the embedded runtime: tests/streams/runtime/test_merged_repartition_runtime.py.)"""

from __future__ import annotations

import logging

import pytest

from streams import JoinWindows, Materialized, Processor, StreamsBuilder, serdes
from streams.testing import TopologyTestDriver

S, I64 = serdes.STRING, serdes.INT64
ALL = {"topology.optimization": "all"}
MERGE = {"topology.optimization": "merge.repartition.topics"}
UNCACHED = {"statestore.cache.max.bytes": 0}
# (key, value, timestamp): the value's first letter is the new key
INPUT = [("1", "apple", 10), ("2", "avocado", 20), ("3", "banana", 30), ("4", "skip", 40), ("5", "blueberry", 50),
         ("6", "apricot", 60)]


def _two_aggregations(between=None) -> StreamsBuilder:
    """select_key(first letter) [-> between] -> a count and a reduce, each grouping the stream."""
    b = StreamsBuilder()
    s = b.stream("in", key_serde=S, value_serde=S).select_key(lambda k, v: v[0])
    if between is not None:
        s = between(s)
    s.group_by_key(key_serde=S).count(store="counts").to_stream().to("counts-out", key_serde=S, value_serde=I64)
    s.group_by_key(key_serde=S).reduce(lambda a, v: a + "+" + v, store="joined").to_stream().to(
        "joined-out", key_serde=S, value_serde=S)
    return b


def _run(topology, records=INPUT) -> tuple[list, list]:
    with TopologyTestDriver(topology, UNCACHED) as driver:
        inp = driver.create_input_topic("in", S, S)
        for key, value, ts in records:
            inp.pipe_input(key, value, timestamp=ts)
        counts = driver.create_output_topic("counts-out", S, I64).read_key_values_to_list()
        joined = driver.create_output_topic("joined-out", S, S).read_key_values_to_list()
    return counts, joined


def test_two_groupings_below_one_key_change_share_one_repartition_topic():
    b = _two_aggregations()
    plain, merged = b.build(), b.build(MERGE)
    assert set(plain.internal_topics) == {"counts-repartition", "joined-repartition"}
    # the first repartition's topic, right after the key change; its nodes are named after it
    assert merged.internal_topics == {"counts-repartition": "repartition"}
    assert merged.children("KSTREAM-KEY-SELECT-0000000001") == ["counts-repartition-filter"]
    assert sorted(merged.children("counts-repartition-source")) == ["KSTREAM-AGGREGATE-0000000002",
                                                                    "KSTREAM-REDUCE-0000000008"]
    assert len(merged.build()) == 2 and len(plain.build()) == 3
    expected_counts = [("a", 1), ("a", 2), ("b", 1), ("s", 1), ("b", 2), ("a", 3)]
    expected_joined = [("a", "apple"), ("a", "apple+avocado"), ("b", "banana"), ("s", "skip"),
                       ("b", "banana+blueberry"), ("a", "apple+avocado+apricot")]
    assert _run(merged) == _run(plain) == (expected_counts, expected_joined)


def test_steps_that_pass_records_through_move_after_the_merged_repartition():
    """Kafka moves what lies between the key change and the groupings (here a filter) below the
    one repartition: the filter now runs on the repartitioned records, with the same results."""
    b = _two_aggregations(lambda s: s.filter(lambda k, v: v != "skip"))
    merged = b.build(ALL)
    assert merged.internal_topics == {"counts-repartition": "repartition"}
    assert merged.children("KSTREAM-KEY-SELECT-0000000001") == ["counts-repartition-filter"]
    assert merged.node("KSTREAM-FILTER-0000000002").parents == ("counts-repartition-source",)
    expected_counts = [("a", 1), ("a", 2), ("b", 1), ("b", 2), ("a", 3)]
    assert _run(merged) == _run(b.build())
    assert _run(merged)[0] == expected_counts


def test_a_join_and_a_grouping_below_one_key_change_share_the_topic_and_stay_copartitioned():
    b = StreamsBuilder()
    rekeyed = b.stream("in", key_serde=S, value_serde=S).select_key(lambda k, v: v[0])
    rekeyed.key_serde = S
    other = b.stream("other", key_serde=S, value_serde=S)
    rekeyed.join(other, lambda v, o: f"{v}/{o}", JoinWindows.of_time_difference_with_no_grace(1000)).to(
        "joined-out", key_serde=S, value_serde=S)
    rekeyed.group_by_key(key_serde=S).count(store="counts").to_stream().to("counts-out", key_serde=S, value_serde=I64)
    plain, merged = b.build(), b.build(ALL)
    assert len(plain.internal_topics) == 2 and len(merged.internal_topics) == 1
    [topic] = merged.internal_topics
    # the join's co-partition group names the merged topic, the count reads it in the join's sub-topology
    assert merged.copartition_groups() == [frozenset({topic, "other"})]
    assert len(merged.build()) == 2
    records = [("1", "apple", 10), ("x", "a-side", 20), ("2", "banana", 30), ("y", "c-side", 40)]

    def run(topology):
        with TopologyTestDriver(topology, UNCACHED) as driver:
            inp, oth = driver.create_input_topic("in", S, S), driver.create_input_topic("other", S, S)
            inp.pipe_input(*records[0][:2], timestamp=records[0][2])
            oth.pipe_input("a", "a-side", timestamp=20)
            inp.pipe_input(*records[2][:2], timestamp=records[2][2])
            oth.pipe_input("c", "c-side", timestamp=40)
            return (driver.create_output_topic("joined-out", S, S).read_key_values_to_list(),
                    driver.create_output_topic("counts-out", S, I64).read_key_values_to_list())

    assert run(merged) == run(plain) == ([("a", "apple/a-side")], [("a", 1), ("b", 1)])


class _Tag(Processor):
    def process(self, record):
        self.context.forward(record.with_key(record.key + "!"))


@pytest.mark.parametrize("between,why", [
    (lambda s: s.map_values(str.upper), "a value change between (Kafka's rule: the topic's serdes would not fit)"),
    (lambda s: s.process(_Tag), "a process() step between: it may change the key again"),
    (lambda s: s.repartition(name="mine"), "KStream.repartition's topic is the user's, never merged"),
])
def test_repartitions_not_reached_through_pass_through_steps_stay_as_they_are(between, why):
    b = _two_aggregations(between)
    plain, merged = b.build(), b.build(ALL)
    assert merged.internal_topics == plain.internal_topics, why
    assert str(merged.describe()) == str(plain.describe())


def test_a_serde_left_to_the_default_takes_the_one_given_to_another_grouping():
    """Kafka's getRepartitionSerdes: the first key and value serdes given (a default is Kafka's
    null), so a join left to the default key serde shares the groupings' topic."""
    b = StreamsBuilder()
    s = b.stream("in", key_serde=S, value_serde=S).select_key(lambda k, v: v[0])
    s.group_by_key().count(store="counts")  # the key serde left to default.key.serde
    s.group_by_key(key_serde=S).count(store="more-counts")
    merged = b.build(ALL)
    assert merged.internal_topics == {"counts-repartition": "repartition"}
    sink = merged.node("counts-repartition-sink")
    assert sink.key_serde is S and sink.value_serde is S


def test_groupings_with_different_serdes_are_not_merged_and_a_warning_says_so(caplog):
    b = StreamsBuilder()
    s = b.stream("in", key_serde=S, value_serde=S).select_key(lambda k, v: v[0])
    s.group_by_key(key_serde=S).count(store="counts")
    s.group_by_key(key_serde=S, value_serde=serdes.JSON).count(store="json-counts")
    with caplog.at_level(logging.WARNING, logger="streams.dsl.repartition_merge"):
        merged = b.build(ALL)
    assert set(merged.internal_topics) == {"counts-repartition", "json-counts-repartition"}
    assert any("different serdes" in r.getMessage() and "json-counts-repartition" in r.getMessage()
               for r in caplog.records)


def test_the_recorded_graph_is_unchanged_so_a_later_build_without_the_optimization_is_plain():
    b = _two_aggregations(lambda s: s.filter(lambda k, v: True))
    before = str(b.build().describe())
    assert len(b.build(ALL).internal_topics) == 1
    assert str(b.build().describe()) == before
    assert len(b.build({"topology.optimization": "reuse.ktable.source.topics"}).internal_topics) == 2


def test_a_single_grouping_keeps_its_topic_and_the_split_branches_move_below_it():
    """One repartition below a key change is still moved up (Kafka rewrites every key changer
    with a repartition below it): the split between runs on the repartitioned records."""
    b = StreamsBuilder()
    s = b.stream("in", key_serde=S, value_serde=S).map(lambda k, v: (v[0], v))
    branches = s.split(name="split-").branch(lambda k, v: v != "skip").no_default_branch()
    [branch] = branches.values()
    branch.group_by_key(key_serde=S, value_serde=S).count(store="counts").to_stream().to("counts-out", key_serde=S, value_serde=I64)
    plain, merged = b.build(), b.build(ALL)
    assert merged.internal_topics == plain.internal_topics == {"counts-repartition": "repartition"}
    assert merged.children("KSTREAM-MAP-0000000001") == ["counts-repartition-filter"]
    assert merged.node("split-").parents == ("counts-repartition-source",)
    with TopologyTestDriver(merged, UNCACHED) as driver:
        inp = driver.create_input_topic("in", S, S)
        for key, value, ts in INPUT:
            inp.pipe_input(key, value, timestamp=ts)
        got = driver.create_output_topic("counts-out", S, I64).read_key_values_to_list()
    assert got == [("a", 1), ("a", 2), ("b", 1), ("b", 2), ("a", 3)]


class _Collect(Processor):
    def __init__(self, into: list) -> None:
        self.into = into

    def process(self, record):
        self.into.append(record.value)


@pytest.mark.parametrize("optimization,repartition_topics", [("none", 4), ("all", 1)])
def test_kafkas_repartition_optimizing_topology(optimization, repartition_topics):
    """Kafka's RepartitionOptimizingTest: a map feeding a count, an aggregate, a reduce behind a
    filter and a peek, and a join behind a filter (four repartitions, one when optimized, the
    join's left to the default key serde), plus a filter -> map_values -> process branch that
    needs none; the same results either way."""
    collected: list = []
    b = StreamsBuilder()
    mapped = b.stream("input", key_serde=S, value_serde=S).map(lambda k, v: (k.upper(), v))
    mapped.filter(lambda k, v: k == "B").map_values(str.upper).process(lambda: _Collect(collected))
    counts = mapped.group_by_key(key_serde=S, value_serde=S).count(store="count-store").to_stream()
    counts.to("count", key_serde=S, value_serde=I64)
    (mapped.group_by_key(key_serde=S, value_serde=S)
     .aggregate(lambda: 0, lambda k, v, agg: agg + len(v), store=Materialized.as_("aggregate-store")
                .with_value_serde(serdes.INT32))
     .to_stream().to("aggregate", key_serde=S, value_serde=serdes.INT32))
    (mapped.filter(lambda k, v: True).peek(lambda k, v: None).group_by_key(key_serde=S, value_serde=S)
     .reduce(lambda agg, v: agg + ":" + v, store="reduce-store").to_stream().to("reduce", key_serde=S, value_serde=S))
    (mapped.filter(lambda k, v: k == "A")
     .join(counts, lambda v, n: f"{v}:{n}", JoinWindows.of_time_difference_with_no_grace(5000), other_value_serde=I64)
     .to("joined", key_serde=S, value_serde=S))
    topology = b.build({"topology.optimization": optimization})
    assert len(topology.internal_topics) == repartition_topics
    config = {"statestore.cache.max.bytes": 10 * 1024, "default.key.serde": "string",
              "default.value.serde": "string"}
    with TopologyTestDriver(topology, config) as driver:
        inp = driver.create_input_topic("input", S, S)
        for key in "abc":
            for value in ("foo", "bar", "baz"):
                inp.pipe_input(key, value, timestamp=1000)
        outputs = {topic: dict(driver.create_output_topic(topic, S, serde).read_key_values_to_list())
                   for topic, serde in (("count", I64), ("aggregate", serdes.INT32), ("reduce", S), ("joined", S))}
    assert outputs == {"count": {"A": 3, "B": 3, "C": 3}, "aggregate": {"A": 9, "B": 9, "C": 9},
                       "reduce": {"A": "foo:bar:baz", "B": "foo:bar:baz", "C": "foo:bar:baz"},
                       "joined": {"A": "baz:3"}}
    assert collected == ["FOO", "BAR", "BAZ"]


def test_a_global_table_join_between_is_walked_through_and_runs_after_the_merged_repartition():
    """Kafka's getKeyChangingParentNode walks through steps that change neither keys nor values
    by its flags, a join with a global table among them: the join below reads the repartition."""
    b = StreamsBuilder()
    regions = b.global_table("regions", key_serde=S, value_serde=S, store="regions")
    s = b.stream("in", key_serde=S, value_serde=S).select_key(lambda k, v: v[0])
    joined = s.left_join(regions, lambda k, v: k, lambda v, region: f"{v}@{region}")
    joined.group_by_key(key_serde=S, value_serde=S).count(store="counts").to_stream().to(
        "counts-out", key_serde=S, value_serde=I64)
    plain, merged = b.build(), b.build(ALL)
    assert merged.internal_topics == plain.internal_topics == {"counts-repartition": "repartition"}
    join = next(name for name in merged.children("counts-repartition-source") if name.startswith("KSTREAM-LEFTJOIN"))
    assert merged.children("KSTREAM-KEY-SELECT-0000000003") == ["counts-repartition-filter"]
    assert merged.node(join).parents == ("counts-repartition-source",)
    results = []
    for topology in (plain, merged):
        with TopologyTestDriver(topology, UNCACHED) as driver:
            driver.create_input_topic("regions", S, S).pipe_input("a", "north", timestamp=1)
            inp = driver.create_input_topic("in", S, S)
            for key, value, ts in INPUT:
                inp.pipe_input(key, value, timestamp=ts)
            results.append(driver.create_output_topic("counts-out", S, I64).read_key_values_to_list())
    assert results[0] == results[1] == [("a", 1), ("a", 2), ("b", 1), ("s", 1), ("b", 2), ("a", 3)]


def test_a_merge_below_a_key_change_takes_its_repartition_over():
    """Kafka's maybeUpdateKeyChangingRepartitionNodeMap: the merge becomes the key change its
    repartition belongs to; the rewritten repartition comes right after the merge, its nodes named
    after the topic (Kafka's describe() of the same topology)."""
    b = StreamsBuilder()
    rekeyed = b.stream("in", key_serde=S, value_serde=S).select_key(lambda k, v: v[0])
    rekeyed.merge(b.stream("in2", key_serde=S, value_serde=S)).to_table(store="latest").to_stream().to(
        "out", key_serde=S, value_serde=S)
    text = str(b.build(ALL).describe())
    assert "Processor: KSTREAM-MERGE-0000000003 (stores: [])\n      --> KSTREAM-TOTABLE-0000000004-repartition-filter" in text
    assert "Sink: KSTREAM-TOTABLE-0000000004-repartition-sink (topic: KSTREAM-TOTABLE-0000000004-repartition)" in text
    assert "Source: KSTREAM-TOTABLE-0000000004-repartition-source" in text
    plain = str(b.build().describe())
    assert "KSTREAM-FILTER-0000000006" in plain and "repartition-filter" not in plain
