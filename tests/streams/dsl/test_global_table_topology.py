"""Global stores in the topology: Kafka's addGlobalStore rules and TopologyDescription text."""

import pytest

from state.stores import Stores
from streams import Processor, StreamsBuilder, Topology, serdes
from streams.dsl.global_table import stream_global_join
from streams.errors import TopologyError


class Noop(Processor):
    def process(self, record):
        pass


def global_builder(name="g", logging=False):
    builder = Stores.key_value_store_builder(Stores.in_memory_key_value_store(name), serdes.STRING, serdes.STRING)
    return builder if logging else builder.with_logging_disabled()


def test_dsl_global_table_join_describes_as_kafka():
    b = StreamsBuilder()
    orders = b.stream("orders", key_serde=serdes.STRING, value_serde=serdes.STRING)
    users = b.global_table("users", key_serde=serdes.STRING, value_serde=serdes.STRING)
    stream_global_join(orders, users, lambda k, v: v, lambda o, u: o, left=False).to("out")
    # Kafka's names: the stream source 0; global_table allocates its store name (1), its source
    # (2) and its KTABLE-SOURCE (3); the join is KSTREAM-LEFTJOIN- even for an inner join (4),
    # the sink 5. Groups are numbered walking source nodes by name: 0 -> orders, 2 -> users.
    # A global store prints "for global store (will not generate tasks)" and no blank line after.
    assert str(b.build().describe()) == (
        "Topologies:\n"
        "   Sub-topology: 0\n"
        "    Source: KSTREAM-SOURCE-0000000000 (topics: [orders])\n"
        "      --> KSTREAM-LEFTJOIN-0000000004\n"
        "    Processor: KSTREAM-LEFTJOIN-0000000004 (stores: [])\n"
        "      --> KSTREAM-SINK-0000000005\n"
        "      <-- KSTREAM-SOURCE-0000000000\n"
        "    Sink: KSTREAM-SINK-0000000005 (topic: out)\n"
        "      <-- KSTREAM-LEFTJOIN-0000000004\n"
        "\n"
        "  Sub-topology: 1 for global store (will not generate tasks)\n"
        "    Source: KSTREAM-SOURCE-0000000002 (topics: [users])\n"
        "      --> KTABLE-SOURCE-0000000003\n"
        "    Processor: KTABLE-SOURCE-0000000003 (stores: [users-STATE-STORE-0000000001])\n"
        "      --> none\n"
        "      <-- KSTREAM-SOURCE-0000000002\n")
    assert users.store_name == "users-STATE-STORE-0000000001"
    assert users.queryable_store_name is None


def test_processor_api_global_store_takes_its_id_but_generates_no_tasks():
    t = Topology()
    t.add_global_store(global_builder("g"), "a-global-source", serdes.STRING, serdes.STRING, "gtopic",
                       "a-global-proc", Noop)
    t.add_source("b-source", "in")
    t.add_processor("b-proc", Noop, "b-source")
    # sources sorted by name: a-global-source's group is 0, b-source's is 1 (Kafka's numbering)
    assert str(t.describe()) == (
        "Topologies:\n"
        "   Sub-topology: 0 for global store (will not generate tasks)\n"
        "    Source: a-global-source (topics: [gtopic])\n"
        "      --> a-global-proc\n"
        "    Processor: a-global-proc (stores: [g])\n"
        "      --> none\n"
        "      <-- a-global-source\n"
        "  Sub-topology: 1\n"
        "    Source: b-source (topics: [in])\n"
        "      --> b-proc\n"
        "    Processor: b-proc (stores: [])\n"
        "      --> none\n"
        "      <-- b-source\n"
        "\n")
    assert [(s.id, s.source_topics) for s in t.build()] == [(1, ("in",))]
    glob = t.global_subtopology()
    assert (glob.id, glob.node_names, glob.store_names, glob.source_topics) == (
        -1, ("a-global-source", "a-global-proc"), ("g",), ("gtopic",))
    assert t.global_topics == {"gtopic": "g"} and t.is_global_store("g") and not t.is_global_store("x")
    desc = t.describe()
    assert [g.id for g in desc.global_stores] == [0] and [s.id for s in desc.subtopologies] == [1]


def test_topology_without_global_store_has_no_global_subtopology():
    t = Topology()
    t.add_source("s", "in")
    assert t.global_subtopology() is None and t.global_topics == {}


@pytest.mark.parametrize("mutate,match", [
    (lambda t: t.add_global_store(global_builder("g2", logging=True), "s2", None, None, "t2", "p2", Noop),
     "global store 'g2' must have logging disabled: its topic 't2' is its changelog"),
    (lambda t: t.add_global_store(global_builder("g2"), "x", None, None, "t2", "x", Noop),
     "source_name and processor_name must differ"),
    (lambda t: t.add_global_store(global_builder("g"), "s2", None, None, "t2", "p2", Noop),
     "a global store named 'g' was already added"),
    (lambda t: t.add_global_store(global_builder("st"), "s2", None, None, "t2", "p2", Noop),
     "a state store named 'st' was already added"),
    (lambda t: t.add_global_store(global_builder("g2"), "s2", None, None, "gtopic", "p2", Noop),
     "topic 'gtopic' is already read by source 'gs'"),
    (lambda t: t.add_global_store(global_builder("g2"), "s2", None, None, "in", "p2", Noop),
     "topic 'in' is already read by source 'src'"),
    (lambda t: t.add_global_store(global_builder("g2"), "p", None, None, "t2", "p2", Noop),
     "a node named 'p' was already added"),
    (lambda t: t.add_global_store(global_builder("g2"), "s2", None, None, "t2", "p2", Noop()),
     "state_update_supplier must be a callable"),
    (lambda t: t.add_global_store(object(), "s2", None, None, "t2", "p2", Noop), "needs a StoreBuilder"),
    (lambda t: t.add_state_store(global_builder("g"), "p"), "'g' was already added as a global store"),
    (lambda t: t.connect_processor_and_state_stores("p", "g"),
     "global state store 'g' can be used by any processor without being connected"),
])
def test_global_store_validation(mutate, match):
    t = Topology()
    t.add_source("src", "in")
    t.add_processor("p", Noop, "src")
    t.add_state_store(global_builder("st"), "p")
    t.add_global_store(global_builder("g"), "gs", None, None, "gtopic", "gp", Noop)
    with pytest.raises(TopologyError, match=match):
        mutate(t)


def test_nodes_of_a_global_store_cannot_have_children():
    t = Topology()
    t.add_global_store(global_builder("g"), "gs", None, None, "gtopic", "gp", Noop)
    t.add_processor("child", Noop, "gp")
    with pytest.raises(TopologyError, match="processor 'child' cannot read from 'gp': the nodes of global store 'g'"):
        t.build()


def test_global_table_topic_cannot_be_read_twice():
    b = StreamsBuilder()
    b.stream("users")
    with pytest.raises(TopologyError, match="global_table\\(\\): topic 'users' is already read"):
        b.global_table("users")
    with pytest.raises(TopologyError, match="global_table\\(\\) needs a topic name"):
        b.global_table("")


def test_global_join_argument_errors():
    b = StreamsBuilder()
    s = b.stream("orders")
    g = b.global_table("users", store="users")
    assert g.queryable_store_name == "users" == g.store_name
    with pytest.raises(TopologyError, match="needs a GlobalKTable of the same StreamsBuilder"):
        stream_global_join(s, StreamsBuilder().global_table("x"), lambda k, v: k, lambda a, b: a, left=False)
    with pytest.raises(TopologyError, match=r"left_join \(key_selector\) needs a callable"):
        stream_global_join(s, g, None, lambda a, b: a, left=True)
    with pytest.raises(TopologyError, match=r"join \(joiner\) needs a callable"):
        stream_global_join(s, g, lambda k, v: k, "nope", left=False)
