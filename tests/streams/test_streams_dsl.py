import pytest

from streams import StreamsBuilder, serdes
from streams.dsl import Materialized
from streams.errors import TopologyError
from streams.testing import TopologyTestDriver

S = serdes.STRING


def wordcount(builder, store="counts-store", caching=True, logging=True):
    mat = Materialized.as_(store)
    mat = mat if caching else mat.with_caching_disabled()
    mat = mat if logging else mat.with_logging_disabled()
    (builder.stream("streams-plaintext-input", key_serde=S, value_serde=S)
        .flat_map_values(lambda line: line.lower().split())
        .group_by(lambda key, word: word, key_serde=S, value_serde=S)
        .count(store=mat)
        .to_stream()
        .to("streams-wordcount-output", key_serde=S, value_serde=serdes.INT64))
    return builder.build()


def test_wordcount_describe_matches_kafka():
    topology = wordcount(StreamsBuilder())
    # Kafka Streams 4.1.1's describe() of its WordCountDemo with Materialized.as("counts-store"):
    # a repartition topic named after a store the user named gives its nodes derived names
    # (KStreamImpl.createRepartitionedSource; the three generated names are burned anyway)
    assert str(topology.describe()) == (
        "Topologies:\n"
        "   Sub-topology: 0\n"
        "    Source: KSTREAM-SOURCE-0000000000 (topics: [streams-plaintext-input])\n"
        "      --> KSTREAM-FLATMAPVALUES-0000000001\n"
        "    Processor: KSTREAM-FLATMAPVALUES-0000000001 (stores: [])\n"
        "      --> KSTREAM-KEY-SELECT-0000000002\n"
        "      <-- KSTREAM-SOURCE-0000000000\n"
        "    Processor: KSTREAM-KEY-SELECT-0000000002 (stores: [])\n"
        "      --> counts-store-repartition-filter\n"
        "      <-- KSTREAM-FLATMAPVALUES-0000000001\n"
        "    Processor: counts-store-repartition-filter (stores: [])\n"
        "      --> counts-store-repartition-sink\n"
        "      <-- KSTREAM-KEY-SELECT-0000000002\n"
        "    Sink: counts-store-repartition-sink (topic: counts-store-repartition)\n"
        "      <-- counts-store-repartition-filter\n"
        "\n"
        "  Sub-topology: 1\n"
        "    Source: counts-store-repartition-source (topics: [counts-store-repartition])\n"
        "      --> KSTREAM-AGGREGATE-0000000003\n"
        "    Processor: KSTREAM-AGGREGATE-0000000003 (stores: [counts-store])\n"
        "      --> KTABLE-TOSTREAM-0000000007\n"
        "      <-- counts-store-repartition-source\n"
        "    Processor: KTABLE-TOSTREAM-0000000007 (stores: [])\n"
        "      --> KSTREAM-SINK-0000000008\n"
        "      <-- KSTREAM-AGGREGATE-0000000003\n"
        "    Sink: KSTREAM-SINK-0000000008 (topic: streams-wordcount-output)\n"
        "      <-- KTABLE-TOSTREAM-0000000007\n"
        "\n")
    assert topology.internal_topics == {"counts-store-repartition": "repartition"}


def test_unnamed_count_store_and_repartition_names():
    b = StreamsBuilder()
    b.stream("in", key_serde=S, value_serde=S).group_by(lambda k, v: v).count().to_stream().to("out")
    t = b.build()
    assert t.store_names == ["KSTREAM-AGGREGATE-STATE-STORE-0000000002"]
    assert list(t.internal_topics) == ["KSTREAM-AGGREGATE-STATE-STORE-0000000002-repartition"]


def test_stateless_operations_in_driver():
    b = StreamsBuilder()
    seen = []
    (b.stream(["a", "b"], key_serde=S, value_serde=S)
        .peek(lambda k, v: seen.append(("peek", k, v)))
        .filter(lambda k, v: v != "drop")
        .filter_not(lambda k, v: v == "skip")
        .map_values(len)
        .to("lengths", value_serde=serdes.INT32))
    b.stream("c", key_serde=S, value_serde=S).foreach(lambda k, v: seen.append(("each", k, v)))
    with TopologyTestDriver(b.build()) as driver:
        a = driver.create_input_topic("a", S, S)
        a.pipe_input("x", "hello", timestamp=1)
        a.pipe_input("y", "drop", timestamp=2)
        driver.create_input_topic("b", S, S).pipe_input("z", "skip")
        driver.create_input_topic("b", S, S).pipe_input("w", "hey")
        driver.create_input_topic("c", S, S).pipe_input("q", "v")
        out = driver.create_output_topic("lengths", S, serdes.INT32)
        assert out.read_key_values_to_list() == [("x", 5), ("w", 3)]
        assert seen == [("peek", "x", "hello"), ("peek", "y", "drop"), ("peek", "z", "skip"),
                        ("peek", "w", "hey"), ("each", "q", "v")]


def test_dsl_bad_arguments():
    b = StreamsBuilder()
    s = b.stream("in", key_serde=S, value_serde=S)
    with pytest.raises(TopologyError, match="map_values needs a callable"):
        s.map_values("nope")
    with pytest.raises(TopologyError, match="already read"):
        b.stream("in")
    with pytest.raises(TopologyError, match="count: store must be a name or a Materialized"):
        s.group_by(lambda k, v: v).count(store=5)
    with pytest.raises(TopologyError, match="to\\(\\) needs a topic"):
        s.to("")


def test_a_topic_streamed_twice_is_one_source_both_streams_read():
    """Kafka's mergeDuplicateSourceNodes: builder.stream of the same topics again gives a stream
    of the first source node (its name still allocated, so later names are Kafka's)."""
    b = StreamsBuilder()
    b.stream(["in", "in2"], key_serde=S, value_serde=S).map_values(str.upper).to("upper", key_serde=S, value_serde=S)
    b.stream(["in2", "in"], key_serde=S, value_serde=S).filter(lambda k, v: v.startswith("a")).to(
        "a-words", key_serde=S, value_serde=S)
    topology = b.build()
    assert topology.children("KSTREAM-SOURCE-0000000000") == ["KSTREAM-MAPVALUES-0000000001",
                                                             "KSTREAM-FILTER-0000000004"]
    with TopologyTestDriver(topology) as driver:
        for topic, value in (("in", "apple"), ("in2", "berry"), ("in", "avocado")):
            driver.create_input_topic(topic, S, S).pipe_input("k", value, timestamp=1)
        assert driver.create_output_topic("upper", S, S).read_values_to_list() == ["APPLE", "BERRY", "AVOCADO"]
        assert driver.create_output_topic("a-words", S, S).read_values_to_list() == ["apple", "avocado"]


@pytest.mark.parametrize("again,error", [
    (lambda b: b.stream(["in", "other"], key_serde=S, value_serde=S), "'in' is already read by KSTREAM-SOURCE"),
    (lambda b: b.stream("in", key_serde=S, value_serde=serdes.JSON), "with value_serde"),
    (lambda b: b.stream("in", key_serde=S, value_serde=S, offset_reset="latest"), "with offset_reset None"),
    (lambda b: b.table("in", key_serde=S, value_serde=S), "already read"),
])
def test_a_topic_read_again_differently_is_refused_by_name(again, error):
    b = StreamsBuilder()
    b.stream("in", key_serde=S, value_serde=S)
    with pytest.raises(TopologyError, match=error):
        again(b)
