"""Names users give DSL operations (Kafka's Named, Consumed.as, Produced.as, Printed.withName)
and KStream.print (Kafka's Printed). The describe() texts are those Kafka Streams 4.1.1 prints for
the same topologies: a given name replaces the generated one but, as in Kafka, still uses up its
index. The printed lines are Kafka's format, derived by hand."""

from __future__ import annotations

import pytest

from streams import Printed, StreamsBuilder, serdes
from streams.dsl import Materialized
from streams.errors import TopologyError
from streams.testing import TopologyTestDriver

S = serdes.STRING
CONFIG = {"application.id": "names", "default.key.serde": "string", "default.value.serde": "string"}


def test_every_stateless_stream_operation_source_and_sink_takes_a_name():
    b = StreamsBuilder()
    other = b.stream("in2", key_serde=S, value_serde=S)
    s = (b.stream("in", key_serde=S, value_serde=S, name="src")
         .filter(lambda k, v: True, name="f").filter_not(lambda k, v: False, name="fn")
         .map_values(lambda v: v, name="mv").flat_map_values(lambda v: [v], name="fmv")
         .select_key(lambda k, v: v, name="sk").map(lambda k, v: (k, v), name="m")
         .flat_map(lambda k, v: [(k, v)], name="fm").peek(lambda k, v: None, name="pk")
         .merge(other, name="mg"))
    s.to("out", name="sink")
    s.foreach(lambda k, v: None, name="fe")
    s.print(Printed.to_sys_out().with_name("pr"))
    s.print(Printed.to_sys_out())
    s.filter(lambda k, v: True).to("out3")
    assert str(b.build().describe()) == """Topologies:
   Sub-topology: 0
    Source: src (topics: [in])
      --> f
    Processor: f (stores: [])
      --> fn
      <-- src
    Processor: fn (stores: [])
      --> mv
      <-- f
    Processor: mv (stores: [])
      --> fmv
      <-- fn
    Processor: fmv (stores: [])
      --> sk
      <-- mv
    Processor: sk (stores: [])
      --> m
      <-- fmv
    Processor: m (stores: [])
      --> fm
      <-- sk
    Processor: fm (stores: [])
      --> pk
      <-- m
    Source: KSTREAM-SOURCE-0000000000 (topics: [in2])
      --> mg
    Processor: pk (stores: [])
      --> mg
      <-- fm
    Processor: mg (stores: [])
      --> KSTREAM-FILTER-0000000015, KSTREAM-PRINTER-0000000014, fe, pr, sink
      <-- pk, KSTREAM-SOURCE-0000000000
    Processor: KSTREAM-FILTER-0000000015 (stores: [])
      --> KSTREAM-SINK-0000000016
      <-- mg
    Processor: KSTREAM-PRINTER-0000000014 (stores: [])
      --> none
      <-- mg
    Sink: KSTREAM-SINK-0000000016 (topic: out3)
      <-- KSTREAM-FILTER-0000000015
    Processor: fe (stores: [])
      --> none
      <-- mg
    Processor: pr (stores: [])
      --> none
      <-- mg
    Sink: sink (topic: out)
      <-- mg

"""


def test_table_operations_take_a_name():
    b = StreamsBuilder()
    (b.table("t", key_serde=S, value_serde=S, store="ts").filter(lambda k, v: True, name="tf")
     .map_values(lambda v: v, "tmv-store", name="tmv")
     .filter_not(lambda k, v: False, Materialized.with_serdes(S, S), name="tfn")
     .to_stream(name="t2s").to("out2"))
    assert str(b.build().describe()) == """Topologies:
   Sub-topology: 0
    Source: KSTREAM-SOURCE-0000000000 (topics: [t])
      --> KTABLE-SOURCE-0000000001
    Processor: KTABLE-SOURCE-0000000001 (stores: [ts])
      --> tf
      <-- KSTREAM-SOURCE-0000000000
    Processor: tf (stores: [])
      --> tmv
      <-- KTABLE-SOURCE-0000000001
    Processor: tmv (stores: [tmv-store])
      --> tfn
      <-- tf
    Processor: tfn (stores: [])
      --> t2s
      <-- tmv
    Processor: t2s (stores: [])
      --> KSTREAM-SINK-0000000007
      <-- tfn
    Sink: KSTREAM-SINK-0000000007 (topic: out2)
      <-- t2s

"""


@pytest.mark.parametrize("bad,message", [("", "non-empty"), (".", "cannot be"), ("a/b", "character other than"),
                                         ("n" * 250, "longer than 249"), (7, "non-empty string")])
def test_a_bad_name_is_refused_naming_the_operation(bad, message):
    b = StreamsBuilder()
    s = b.stream("in", key_serde=S, value_serde=S)
    table = b.table("t", key_serde=S, value_serde=S)
    calls = {
        "filter": lambda: s.filter(lambda k, v: True, name=bad),
        "map_values": lambda: s.map_values(str.upper, name=bad),
        "select_key": lambda: s.select_key(lambda k, v: v, name=bad),
        "merge": lambda: s.merge(s, name=bad),
        "to": lambda: s.to("out", name=bad),
        "stream": lambda: b.stream("in9", name=bad),
        "Printed.with_name": lambda: Printed.to_sys_out().with_name(bad),
        "KTable.filter": lambda: table.filter(lambda k, v: True, name=bad),
        "KTable.to_stream": lambda: table.to_stream(name=bad),
    }
    for op, call in calls.items():
        with pytest.raises(TopologyError, match=f"{op}: .*{message}"):
            call()


def test_a_name_used_twice_is_refused():
    b = StreamsBuilder()
    s = b.stream("in", key_serde=S, value_serde=S)
    s.filter(lambda k, v: True, name="same").to("a")
    s.map_values(str.upper, name="same").to("b")
    with pytest.raises(TopologyError, match="same"):
        b.build()


def _print_topology(printed):
    b = StreamsBuilder()
    b.stream("in", key_serde=S, value_serde=S).map_values(lambda v: v and v.upper()).print(printed)
    return b.build()


def _pipe(topology, records):
    with TopologyTestDriver(topology, CONFIG) as d:
        inp = d.create_input_topic("in", S, S)
        for key, value in records:
            inp.pipe_input(key, value, timestamp=1)


def test_print_writes_kafkas_lines_to_standard_output(capsys):
    """The label is the printed stream's node name (the map_values), None prints as null."""
    _pipe(_print_topology(Printed.to_sys_out()), [("k", "v"), (None, "w"), ("k", None)])
    assert capsys.readouterr().out == ("[KSTREAM-MAPVALUES-0000000001]: k, V\n"
                                       "[KSTREAM-MAPVALUES-0000000001]: null, W\n"
                                       "[KSTREAM-MAPVALUES-0000000001]: k, null\n")


def test_print_to_a_file_with_a_label_and_a_mapper(tmp_path):
    path = tmp_path / "printed.txt"
    path.write_text("an earlier run's lines\n")
    printed = Printed.to_file(str(path)).with_label("views").with_key_value_mapper(lambda k, v: f"{k}={v}")
    _pipe(_print_topology(printed), [("a", "x"), ("b", "y")])
    assert path.read_text() == "[views]: a=X\n[views]: b=Y\n"


def test_print_bad_inputs_are_typed_errors(tmp_path):
    for bad in ("", "  ", None):
        with pytest.raises(TopologyError, match="needs a file path"):
            Printed.to_file(bad)
    with pytest.raises(TopologyError, match="Unable to write stream to file"):
        Printed.to_file(str(tmp_path / "no-such-dir" / "x.txt"))
    with pytest.raises(TopologyError, match="with_label needs a string"):
        Printed.to_sys_out().with_label(None)
    with pytest.raises(TopologyError, match="needs a callable"):
        Printed.to_sys_out().with_key_value_mapper("k=v")
    b = StreamsBuilder()
    with pytest.raises(TopologyError, match="print needs a Printed"):
        b.stream("in").print("stdout")
