"""Co-partitioning of joined inputs when the internal topics are planned at start: a join's user
topics must have one partition count, its repartition topics take it (Kafka's
CopartitionedTopicsEnforcer run by RepartitionTopics.setup)."""

import pytest

from streams import Processor, StreamsBuilder, Topology
from streams.dsl import JoinWindows
from streams.errors import TopologyError
from streams.runtime.errors import CoPartitioningError
from streams.runtime.internal import plan_internal_topics


def joiner(a, b):
    return f"{a}+{b}"


def plan(build, partitions):
    b = StreamsBuilder()
    build(b)
    topology = b.build()
    return topology, plan_internal_topics(topology, topology.build(), "app", partitions)


def test_joined_topics_with_different_counts_fail_naming_them():
    def build(b):
        b.stream("clicks").join(b.table("profiles"), joiner).to("out")
    with pytest.raises(CoPartitioningError, match=r"clicks=3, profiles=2") as info:
        plan(build, {"clicks": 3, "profiles": 2, "out": 1})
    assert info.value.partition_counts == {"clicks": 3, "profiles": 2}

    def tables(b):
        b.table("t1").outer_join(b.table("t2"), joiner).to_stream().to("out")
    with pytest.raises(CoPartitioningError, match=r"t1=1, t2=4"):
        plan(tables, {"t1": 1, "t2": 4})


def test_a_repartition_topic_takes_the_count_of_the_table_it_joins():
    # the stream has 6 partitions, so its repartition topic would get 6; the join needs 2
    def build(b):
        b.stream("clicks").select_key(lambda k, v: v).join(b.table("profiles"), joiner).to("out")
    topology, got = plan(build, {"clicks": 6, "profiles": 2, "out": 1})
    assert got.specs["app-KSTREAM-KEY-SELECT-0000000001-repartition"].partitions == 2
    join_sub = next(s for s in topology.build() if "profiles" in s.source_topics)
    assert got.partitions_of_sub[join_sub.id] == 2
    assert got.specs["app-profiles-STATE-STORE-0000000002-changelog"].partitions == 2


def test_repartition_only_groups_take_the_largest_count_and_downstream_follows():
    # both sides re-keyed: the group has only repartition topics (3 and 5 from their writers):
    # both get 5; the aggregation after the join repartitions from the join's 5 tasks
    def build(b):
        left = b.stream("left").select_key(lambda k, v: v)
        right = b.stream("right").select_key(lambda k, v: v)
        (left.join(right, joiner, JoinWindows.of_time_difference_with_no_grace(10))
             .group_by(lambda k, v: v).count(store="n"))
    _, got = plan(build, {"left": 3, "right": 5})
    assert got.specs["app-KSTREAM-KEY-SELECT-0000000001-repartition"].partitions == 5
    assert got.specs["app-KSTREAM-KEY-SELECT-0000000003-repartition"].partitions == 5
    assert got.specs["app-n-repartition"].partitions == 5
    assert got.specs["app-KSTREAM-JOINTHIS-0000000012-store-changelog"].partitions == 5


def test_a_group_fixing_an_upstream_repartition_topic_is_seen_downstream():
    # left (8) re-keyed joins table t (2): the repartition topic gets 2, and the group_by after
    # the join writes a repartition topic sized from the join's 2 tasks, not from 8
    def build(b):
        joined = b.stream("left").select_key(lambda k, v: v).join(b.table("t"), joiner)
        joined.group_by(lambda k, v: v).count(store="n")
    _, got = plan(build, {"left": 8, "t": 2})
    assert got.specs["app-KSTREAM-KEY-SELECT-0000000001-repartition"].partitions == 2
    assert got.specs["app-n-repartition"].partitions == 2


def test_a_cycle_of_internal_topics_is_broken_by_their_groups():
    # a foreign-key join's shape: the left side writes the subscription topic the right side
    # reads, the right side the response topic the left side reads; each internal topic is
    # co-partitioned with the user topic of the side reading it, which breaks the cycle
    t = Topology()
    t.add_source("left", "left")
    t.add_source("response", "resp")
    t.add_processor("send", Noop, "left", "response")
    t.add_sink("to-sub", "sub", "send")
    t.add_source("right", "right")
    t.add_source("subscription", "sub")
    t.add_processor("receive", Noop, "right", "subscription")
    t.add_sink("to-resp", "resp", "receive")
    t.add_internal_topic("sub")
    t.add_internal_topic("resp")
    t.copartition_sources("subscription", "right")
    t.copartition_sources("response", "left")
    got = plan_internal_topics(t, t.build(), "app", {"left": 3, "right": 2})
    assert got.specs["app-sub"].partitions == 2 and got.specs["app-resp"].partitions == 3
    with pytest.raises(TopologyError, match="'send' is not a source"):
        t.copartition_sources("send", "left").copartition_groups()


class Noop(Processor):
    def process(self, record):
        pass
