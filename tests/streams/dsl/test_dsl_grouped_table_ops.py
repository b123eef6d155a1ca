"""KTable.group_by -> KGroupedTable count/reduce/aggregate on the TopologyTestDriver, expected
outputs derived by hand from Kafka's KTableRepartitionMap (old pair subtracted first; one
Change(new, old) when the key is kept, KIP-904) and KTableAggregate / KTableReduce."""

import pytest

from streams import StreamsBuilder, serdes
from streams.dsl import Materialized
from streams.dsl.change import Change, ChangeSerde
from streams.errors import SerializationError, TopologyError
from streams.testing import TopologyTestDriver

S = serdes.STRING
I64 = serdes.INT64
CONFIG = {"application.id": "gt", "default.key.serde": "string", "default.value.serde": "string"}


def region_of(user, region):
    return (None if region == "skip" else region), user


@pytest.mark.parametrize("caching", [False, True])
def test_regions_count_subtracts_the_old_value_first(caching):
    b = StreamsBuilder()
    mat = Materialized.as_("region-counts")
    (b.table("users", key_serde=S, value_serde=S)
        .group_by(region_of, key_serde=S, value_serde=S)
        .count(store=mat if caching else mat.with_caching_disabled())
        .to_stream().to("out", key_serde=S, value_serde=I64))
    topology = b.build()
    assert "region-counts-repartition" in topology.internal_topics
    text = str(topology.describe())
    assert "KTABLE-SELECT-0000000003" in text and "KTABLE-AGGREGATE-0000000006 (stores: [region-counts])" in text
    with TopologyTestDriver(topology, CONFIG) as d:
        inp = d.create_input_topic("users", S, S)
        for user, region, t in (("alice", "eu", 1), ("bob", "eu", 2), ("alice", "us", 3), ("bob", None, 4),
                                ("carol", "us", 5), ("carol", "us", 6), ("dave", "skip", 7)):
            inp.pipe_input(user, region, timestamp=t)
        out = [(r.key, r.value, r.timestamp) for r in d.create_output_topic("out", S, I64).read_records_to_list()]
        if not caching:
            assert out == [("eu", 1, 1), ("eu", 2, 2), ("eu", 1, 3), ("us", 1, 3), ("eu", 0, 4), ("us", 2, 5),
                           ("us", 2, 6)]
        assert {k: v for k, v, _ in out} == {"eu": 0, "us": 2}
        assert d.get_key_value_store("region-counts").get("us") == 2


def test_reduce_with_adder_and_subtractor_in_one_update_when_the_key_is_kept():
    b = StreamsBuilder()
    (b.table("scores", key_serde=S, value_serde=I64)
        .group_by(lambda user, score: ("all", score), key_serde=S, value_serde=I64)
        .reduce(lambda agg, v: agg + v, lambda agg, v: agg - v,
                store=Materialized.as_("total").with_value_serde(I64).with_caching_disabled())
        .to_stream().to("out", key_serde=S, value_serde=I64))
    with TopologyTestDriver(b.build(), CONFIG) as d:
        inp = d.create_input_topic("scores", S, I64)
        inp.pipe_input("a", 5, timestamp=1)
        inp.pipe_input("b", 3, timestamp=2)
        inp.pipe_input("a", 7, timestamp=3)  # one Change(7, 5): 8 - 5 + 7
        assert d.create_output_topic("out", S, I64).read_values_to_list() == [5, 8, 10]


def test_aggregate_with_initializer_adder_subtractor():
    b = StreamsBuilder()

    def add(region, user, agg):
        return ",".join(sorted([u for u in agg.split(",") if u] + [user]))

    def remove(region, user, agg):
        return ",".join(u for u in agg.split(",") if u and u != user)

    (b.table("users", key_serde=S, value_serde=S)
        .group_by(region_of)
        .aggregate(lambda: "", add, remove, store=Materialized.as_("members").with_caching_disabled())
        .to_stream().to("out", key_serde=S, value_serde=S))
    with TopologyTestDriver(b.build(), CONFIG) as d:
        inp = d.create_input_topic("users", S, S)
        inp.pipe_input("bob", "eu", timestamp=1)
        inp.pipe_input("alice", "eu", timestamp=2)
        inp.pipe_input("bob", "us", timestamp=3)
        assert d.create_output_topic("out", S, S).read_key_values_to_list() == [
            ("eu", "bob"), ("eu", "alice,bob"), ("eu", "alice"), ("us", "bob")]


def test_change_serde_is_kafkas_changed_serializer():
    serde = ChangeSerde(S)
    assert serde.serialize(Change("n", None)) == b"n\x01"
    assert serde.serialize(Change(None, "o")) == b"o\x00"
    assert serde.serialize(Change("new", "o")) == b"\x00\x00\x00\x03newo\x02"
    for change in (Change("n", None), Change(None, "o"), Change("new", "o")):
        assert serde.deserialize(serde.serialize(change)) == change
    with pytest.raises(SerializationError):
        serde.deserialize(b"x\x07")
    with pytest.raises(SerializationError):
        serde.serialize(Change(None, None))


def test_group_by_needs_a_callable():
    with pytest.raises(TopologyError):
        StreamsBuilder().table("t", key_serde=S, value_serde=S).group_by("region")
