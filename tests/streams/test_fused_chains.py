"""Chains of stateless DSL nodes run fused (streams/engine/fusion.py): same records, same order,
same error attribution as record-at-a-time forwarding through each node."""

import pytest

from streams import Processor, StreamsBuilder, Topology, serdes
from streams.dsl.ops.stateless import FlatMapValuesProcessor, KeySelectProcessor, MapValuesProcessor
from streams.errors import ProcessingError
from streams.testing import TopologyTestDriver

S = serdes.STRING


def test_fused_chain_outputs_match_kafka_order():
    b = StreamsBuilder()
    seen = []
    (b.stream("in", key_serde=S, value_serde=S)
        .flat_map_values(str.split)
        .peek(lambda k, v: seen.append(("peek", k, v)))
        .filter(lambda k, v: v != "drop")
        .map_values(str.upper)
        .select_key(lambda k, v: v[0])
        .to("out", key_serde=S, value_serde=S))
    with TopologyTestDriver(b.build()) as driver:
        inp = driver.create_input_topic("in", S, S)
        inp.pipe_input("k1", "ab drop cd", timestamp=5)
        inp.pipe_input("k2", "ef", timestamp=7)
        out = driver.create_output_topic("out", S, S)
        records = out.read_records_to_list()
    assert [(r.key, r.value, r.timestamp) for r in records] == [
        ("A", "AB", 5), ("C", "CD", 5), ("E", "EF", 7)]
    assert seen == [("peek", "k1", "ab"), ("peek", "k1", "drop"), ("peek", "k1", "cd"), ("peek", "k2", "ef")]


def _failing_chain(where):
    def split(line):
        for i, word in enumerate(line.split()):
            if where == "flat_map_mid" and i == 1:
                raise ValueError("split failed")
            yield word

    def select(k, v):
        if where == "key_select":
            raise ValueError("select failed")
        return v

    b = StreamsBuilder()
    (b.stream("in", key_serde=S, value_serde=S)
        .flat_map_values(split)
        .select_key(select)
        .map_values(lambda v: 5 if where == "sink" else v)
        .to("out", key_serde=S, value_serde=S))
    return b.build()


@pytest.mark.parametrize("where,node", [
    ("flat_map_mid", "KSTREAM-FLATMAPVALUES-0000000001"),
    ("key_select", "KSTREAM-KEY-SELECT-0000000002"),
    ("sink", "KSTREAM-SINK-0000000004"),
])
def test_errors_name_the_failing_node_of_a_fused_chain(where, node):
    with TopologyTestDriver(_failing_chain(where)) as driver:
        inp = driver.create_input_topic("in", S, S)
        with pytest.raises(ProcessingError) as err:
            inp.pipe_input("k", "one two three", timestamp=1)
        assert f"processor={node}," in str(err.value)
        # Kafka's driver shows nothing of a record that failed (it captures a record's output
        # once it is processed) ...
        assert driver.create_output_topic("out", S, S).read_key_values_to_list() == []
        if where == "flat_map_mid":
            # ... though the first word went all the way down before the iterator failed; it
            # shows once the next record is piped (Kafka's driver captures it then)
            assert [(r.key, r.value) for r in driver.producer_history("out")] == [(b"one", b"one")]
            inp.pipe_input("k", "four", timestamp=2)
            assert driver.create_output_topic("out", S, S).read_key_values_to_list() == [("one", "one"),
                                                                                         ("four", "four")]


class MetadataProbe(Processor):
    """Not fusable: needs the context (metadata, its store-less forward, the current node)."""

    def init(self, context):
        self.context = context

    def process(self, record):
        meta = self.context.record_metadata()
        self.context.forward(record.with_value(f"{record.value}@{meta.topic}-{meta.offset}"))


class Boom(Processor):
    def process(self, record):
        raise RuntimeError("boom")


def test_a_fused_chain_ends_at_a_processor_that_needs_the_context():
    t = Topology()
    t.add_source("src", "in", key_serde=S, value_serde=S)
    t.add_processor("split", lambda: FlatMapValuesProcessor(str.split), "src")
    t.add_processor("probe", MetadataProbe, "split")
    t.add_processor("upper", lambda: MapValuesProcessor(str.upper), "probe")
    t.add_processor("key", lambda: KeySelectProcessor(lambda k, v: v[:1]), "upper")
    t.add_sink("out", "out", "key", key_serde=S, value_serde=S)
    with TopologyTestDriver(t) as driver:
        inp = driver.create_input_topic("in", S, S)
        inp.pipe_input("k", "a b", timestamp=1)
        inp.pipe_input("k", "c", timestamp=2)
        out = driver.create_output_topic("out", S, S)
        assert out.read_key_values_to_list() == [("A", "A@IN-0"), ("B", "B@IN-0"), ("C", "C@IN-1")]


def test_failure_in_a_processor_after_a_fused_chain_names_it():
    t = Topology()
    t.add_source("src", "in", key_serde=S, value_serde=S)
    t.add_processor("split", lambda: FlatMapValuesProcessor(str.split), "src")
    t.add_processor("boom", Boom, "split")
    with TopologyTestDriver(t) as driver:
        inp = driver.create_input_topic("in", S, S)
        with pytest.raises(ProcessingError) as err:
            inp.pipe_input("k", "a b", timestamp=1)
        assert "processor=boom," in str(err.value)
        assert isinstance(err.value.__cause__, RuntimeError)


def test_branching_nodes_are_not_fused_but_still_forward_to_every_child():
    t = Topology()
    t.add_source("src", "in", key_serde=S, value_serde=S)
    t.add_processor("split", lambda: FlatMapValuesProcessor(str.split), "src")
    t.add_processor("upper", lambda: MapValuesProcessor(str.upper), "split")
    t.add_processor("lower", lambda: MapValuesProcessor(str.lower), "split")
    t.add_sink("out", "out", "upper", "lower", key_serde=S, value_serde=S)
    with TopologyTestDriver(t) as driver:
        driver.create_input_topic("in", S, S).pipe_input("k", "aB cD", timestamp=1)
        out = driver.create_output_topic("out", S, S)
        assert out.read_values_to_list() == ["AB", "ab", "CD", "cd"]


class _Bytes(bytes):
    pass


@pytest.mark.parametrize("serde", [serdes.STRING, serdes.BYTES, serdes.INT64, serdes.INT32, serdes.DOUBLE,
                                   serdes.FLOAT])
def test_unchecked_serdes_agree_with_the_checked_ones_or_raise(serde):
    """The contract the hot paths rely on: same result as the serde, or an exception (then the
    caller asks the serde itself, which returns that result or raises its own error)."""
    import fractions

    ser = serdes.unchecked_serializer(serde)
    de = serdes.unchecked_deserializer(serde)
    assert ser is not None
    assert (de is not None) == (serde in (serdes.STRING, serdes.BYTES))
    inputs = ["word", "\udc80", b"raw", _Bytes(b"sub"), bytearray(b"ba"), memoryview(b"mv"), 5, -1, 2**63, 2**31,
              True, 1.5, 1e300, fractions.Fraction(1, 2), object(), b"\xff\xfe", b"\x00" * 8, b"\x00" * 4]
    for obj in inputs:
        for fast, checked in ((ser, serde.serialize), (de, serde.deserialize)):
            if fast is None:
                continue
            try:
                expected = checked(obj)
            except serdes.SerializationError:
                expected = "error"
            try:
                got = fast(obj)
            except Exception:
                continue  # allowed: the caller falls back to the serde
            assert got == expected and type(got) is type(expected), (obj, got, expected)
    assert serdes.unchecked_serializer(serdes.Serde.from_functions(str.encode, bytes.decode)) is None


def test_cached_count_runs_fused_and_counts_exactly():
    b = StreamsBuilder()
    (b.stream("in", key_serde=S, value_serde=S)
        .flat_map_values(str.split)
        .group_by(lambda k, w: w, key_serde=S, value_serde=S)
        .count(store="counts")
        .to_stream()
        .to("out", key_serde=S, value_serde=serdes.INT64))
    with TopologyTestDriver(b.build()) as driver:
        inp = driver.create_input_topic("in", S, S)
        for n, line in enumerate(["a b a", "b c", "a"]):
            inp.pipe_input(None, line, timestamp=n)
        store = driver.get_key_value_store("counts")
        assert {k: store.get(k) for k in "abc"} == {"a": 3, "b": 2, "c": 1}
        out = driver.create_output_topic("out", S, serdes.INT64)
        assert out.read_key_values_to_map() == {"a": 3, "b": 2, "c": 1}


def test_group_by_none_keys_are_dropped_before_the_repartition_topic():
    b = StreamsBuilder()
    (b.stream("in", key_serde=S, value_serde=S)
        .flat_map_values(str.split)
        .group_by(lambda k, w: None if w.startswith("x") else w, key_serde=S, value_serde=S)
        .count(store="counts")
        .to_stream()
        .to("out", key_serde=S, value_serde=serdes.INT64))
    with TopologyTestDriver(b.build()) as driver:
        driver.create_input_topic("in", S, S).pipe_input(None, "a x1 b a x2", timestamp=1)
        repartitioned = driver.producer_history(f"{driver.application_id}-counts-repartition")
        assert [(r.key, r.value) for r in repartitioned] == [(b"a", b"a"), (b"b", b"b"), (b"a", b"a")]
        out = driver.create_output_topic("out", S, serdes.INT64)
        assert out.read_key_values_to_map() == {"a": 2, "b": 1}


def test_an_operator_after_a_merge_keeps_one_stream_time():
    """A windowed count after merging two streams is one operator with one stream time: a record
    of either stream closes windows for both (Kafka's KStreamWindowAggregate keeps one observed
    stream time per processor). Fused once per merged stream, it would keep two."""
    from streams import TimeWindows

    b = StreamsBuilder()
    # a stateless step before the merge on each side: each side's chain would run through it
    one = b.stream("one", key_serde=serdes.STRING, value_serde=serdes.STRING).map_values(str.upper)
    two = b.stream("two", key_serde=serdes.STRING, value_serde=serdes.STRING).filter(lambda k, v: True)
    (one.merge(two).group_by_key(key_serde=serdes.STRING, value_serde=serdes.STRING).windowed_by(TimeWindows.of_size_with_no_grace(200)).count(store="c")
        .to_stream().to("out", key_serde=serdes.time_windowed(serdes.STRING, 200), value_serde=serdes.INT64))
    with TopologyTestDriver(b.build(), {"statestore.cache.max.bytes": 0}) as driver:
        driver.create_input_topic("two", serdes.STRING, serdes.STRING).pipe_input("b", "x", timestamp=1867)
        # stream time 1867: [1600, 1800) closed (end + grace 0 <= 1867), so d's record is late
        driver.create_input_topic("one", serdes.STRING, serdes.STRING).pipe_input("d", "y", timestamp=1600)
        out = driver.create_output_topic("out", serdes.time_windowed(serdes.STRING, 200), serdes.INT64)
        assert [(r.key.key, r.key.window.start, r.value, r.timestamp) for r in out.read_records_to_list()] == [
            ("b", 1800, 1, 1867)]
        assert sum(m.value for m in driver.metrics() if m.name == "dropped-records-total") == 1


def test_a_merge_is_fused_into_each_merged_chain():
    """The merge's pass-through keeps no state: each merged stream's chain runs through it (its
    node's process is never called), down to the sink. (A stateful node below a merge stays one
    operator entered through its node: the test above.)"""
    b = StreamsBuilder()
    one = b.stream("one", key_serde=S, value_serde=S).map_values(str.upper)
    two = b.stream("two", key_serde=S, value_serde=S).filter(lambda k, v: v != "drop")
    one.merge(two).to("out", key_serde=S, value_serde=S)
    with TopologyTestDriver(b.build()) as driver:
        merge = driver._engine_for_topic["one"].nodes["KSTREAM-MERGE-0000000004"]
        assert merge.parent_count == 2

        def not_called(record):
            raise AssertionError("the merge ran as a node: not fused")
        merge.process = not_called
        driver.create_input_topic("one", S, S).pipe_input("a", "x", timestamp=1)
        two = driver.create_input_topic("two", S, S)
        two.pipe_input("a", "drop", timestamp=2)
        two.pipe_input("b", "y", timestamp=3)
        assert driver.create_output_topic("out", S, S).read_key_values_to_list() == [("a", "X"), ("b", "y")]
