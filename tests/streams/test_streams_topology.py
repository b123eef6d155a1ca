import pytest

from streams import Processor, Topology, serdes
from streams.errors import TopologyError


class Noop(Processor):
    def process(self, record):
        self.context.forward(record)


class FakeStoreBuilder:
    """Only the builder surface Topology looks at (name, build); stores are not built here."""

    def __init__(self, name):
        self.name = name

    def build(self):  # pragma: no cover - never called by Topology
        raise AssertionError


def simple():
    t = Topology()
    t.add_source("src", "in", key_serde=serdes.STRING, value_serde=serdes.STRING)
    t.add_processor("p", Noop, "src")
    t.add_sink("out", "output", "p")
    return t


def test_describe_matches_kafka_layout():
    t = Topology()
    t.add_source("KSTREAM-SOURCE-0000000000", "streams-plaintext-input")
    t.add_processor("KSTREAM-FLATMAPVALUES-0000000001", Noop, "KSTREAM-SOURCE-0000000000")
    t.add_processor("KSTREAM-KEY-SELECT-0000000002", Noop, "KSTREAM-FLATMAPVALUES-0000000001")
    t.add_processor("KSTREAM-FILTER-0000000005", Noop, "KSTREAM-KEY-SELECT-0000000002")
    t.add_sink("KSTREAM-SINK-0000000004", "counts-store-repartition", "KSTREAM-FILTER-0000000005")
    t.add_source("KSTREAM-SOURCE-0000000006", "counts-store-repartition")
    t.add_processor("KSTREAM-AGGREGATE-0000000003", Noop, "KSTREAM-SOURCE-0000000006")
    t.add_state_store(FakeStoreBuilder("counts-store"), "KSTREAM-AGGREGATE-0000000003")
    t.add_internal_topic("counts-store-repartition")
    # the text Kafka's TopologyDescription.toString() gives for the WordCount demo
    expected = (
        "Topologies:\n"
        "   Sub-topology: 0\n"
        "    Source: KSTREAM-SOURCE-0000000000 (topics: [streams-plaintext-input])\n"
        "      --> KSTREAM-FLATMAPVALUES-0000000001\n"
        "    Processor: KSTREAM-FLATMAPVALUES-0000000001 (stores: [])\n"
        "      --> KSTREAM-KEY-SELECT-0000000002\n"
        "      <-- KSTREAM-SOURCE-0000000000\n"
        "    Processor: KSTREAM-KEY-SELECT-0000000002 (stores: [])\n"
        "      --> KSTREAM-FILTER-0000000005\n"
        "      <-- KSTREAM-FLATMAPVALUES-0000000001\n"
        "    Processor: KSTREAM-FILTER-0000000005 (stores: [])\n"
        "      --> KSTREAM-SINK-0000000004\n"
        "      <-- KSTREAM-KEY-SELECT-0000000002\n"
        "    Sink: KSTREAM-SINK-0000000004 (topic: counts-store-repartition)\n"
        "      <-- KSTREAM-FILTER-0000000005\n"
        "\n"
        "  Sub-topology: 1\n"
        "    Source: KSTREAM-SOURCE-0000000006 (topics: [counts-store-repartition])\n"
        "      --> KSTREAM-AGGREGATE-0000000003\n"
        "    Processor: KSTREAM-AGGREGATE-0000000003 (stores: [counts-store])\n"
        "      --> none\n"
        "      <-- KSTREAM-SOURCE-0000000006\n"
        "\n"
    )
    assert str(t.describe()) == expected
    subs = t.build()
    assert [s.id for s in subs] == [0, 1]
    assert subs[1].internal_source_topics == ("counts-store-repartition",)
    assert subs[1].store_names == ("counts-store",)
    assert t.decorate_topic("counts-store-repartition", "wc") == "wc-counts-store-repartition"
    assert t.decorate_topic("streams-plaintext-input", "wc") == "streams-plaintext-input"


def test_branching_successors_and_nodes_in_kafkas_order():
    t = Topology()
    t.add_source("s", "a", "b")
    t.add_processor("z-small", Noop, "s")
    t.add_processor("a-small", Noop, "s")
    t.add_processor("m-big", Noop, "s")
    t.add_sink("k", "out", "m-big")
    text = str(t.describe())
    # Kafka Streams 4.1.1 prints this order: a node's successors are a TreeSet filled while the
    # sub-tree sizes still grow (m-big joined it before its sink made it bigger), so it is not
    # the final size order the node list has
    assert "Source: s (topics: [a, b])\n      --> a-small, m-big, z-small\n" in text
    names = [line.split()[1] for line in text.splitlines() if line.startswith("    ") and ":" in line.split()[0]]
    # equal sub-tree sizes fall back to the name, as in Kafka's NODE_COMPARATOR
    assert names == ["s", "m-big", "a-small", "k", "z-small"]


def test_store_shared_by_processors_joins_subtopologies():
    t = Topology()
    t.add_source("s1", "t1")
    t.add_source("s2", "t2")
    t.add_processor("p1", Noop, "s1")
    t.add_processor("p2", Noop, "s2")
    assert len(t.build()) == 2
    t.add_state_store(FakeStoreBuilder("shared"), "p1", "p2")
    subs = t.build()
    assert len(subs) == 1
    assert set(subs[0].source_topics) == {"t1", "t2"}


def test_forward_references_allowed_until_build():
    t = Topology()
    t.add_processor("p", Noop, "src")  # parent added later
    t.add_source("src", "in")
    assert [s.node_names for s in t.build()] == [("p", "src")]


@pytest.mark.parametrize("mutate,match", [
    (lambda t: t.add_processor("p", Noop, "src"), "node named 'p' was already added"),
    (lambda t: t.add_source("out", "x"), "node named 'out' was already added"),
    (lambda t: t.add_source("src2", "in"), "topic 'in' is already read by source 'src'"),
    (lambda t: t.add_processor("q", Noop), "processor 'q' must have at least one parent"),
    (lambda t: t.add_processor("q", Noop, "q"), "processor 'q' cannot be its own parent"),
    (lambda t: t.add_processor("q", Noop(), "p"), "processor 'q': supplier must be a callable"),
    (lambda t: t.add_source("s9"), "source 's9' must read at least one topic"),
    (lambda t: t.add_source("s9", "x", offset_reset="middle"), "source 's9': offset_reset"),
    (lambda t: t.add_source("s9", "x", key_serde=42), "key_serde of source 's9'"),
    (lambda t: t.add_sink("k", "", "p"), "topic of sink 'k'"),
    (lambda t: t.add_source("", "x"), "source name must be a non-empty string"),
    (lambda t: t.connect_processor_and_state_stores("nope", "st"), "unknown processor 'nope'"),
    (lambda t: t.connect_processor_and_state_stores("src", "st"), "source 'src'; only processors"),
    (lambda t: t.add_state_store(object()), "needs a StoreBuilder"),
])
def test_eager_validation_errors_name_the_node(mutate, match):
    t = simple()
    with pytest.raises(TopologyError, match=match):
        mutate(t)


def test_duplicate_store():
    t = simple()
    t.add_state_store(FakeStoreBuilder("st"), "p")
    with pytest.raises(TopologyError, match="state store 'st' was already added"):
        t.add_state_store(FakeStoreBuilder("st"), "p")


@pytest.mark.parametrize("mutate,match", [
    (lambda t: t.add_processor("q", Noop, "ghost"), "processor 'q' has unknown parent 'ghost'"),
    (lambda t: t.add_processor("q", Noop, "out"), "sink 'out' cannot have children, but processor 'q'"),
    (lambda t: t.add_state_store(FakeStoreBuilder("lonely")), "state store 'lonely' is not connected"),
    (lambda t: t.connect_processor_and_state_stores("p", "ghost-store"),
     "processor 'p' is connected to unknown state store 'ghost-store'"),
])
def test_build_time_validation_errors(mutate, match):
    t = simple()
    mutate(t)
    with pytest.raises(TopologyError, match=match):
        t.build()
    with pytest.raises(TopologyError, match=match):
        t.describe()


def test_cycle_detected_and_named():
    t = Topology()
    t.add_source("src", "in")
    t.add_processor("a", Noop, "src", "c")
    t.add_processor("b", Noop, "a")
    t.add_processor("c", Noop, "b")
    with pytest.raises(TopologyError, match=r"part of a cycle: .*a.*c|part of a cycle: .*c.*a"):
        t.build()


def test_empty_topology_rejected():
    with pytest.raises(TopologyError, match="no nodes"):
        Topology().build()
    t = Topology()
    t.add_processor("p", Noop, "x")
    with pytest.raises(TopologyError, match="no source"):
        t.build()
