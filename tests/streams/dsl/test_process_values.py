"""KStream.process_values (Kafka's processValues, KIP-820) and the processor names of process
and process_values (Kafka's Named). Expected outputs derived by hand from Kafka's rules: a
fixed-key processor cannot change keys, so the stream keeps its key serde and its need (or not)
for a repartition; its forward sets the record context's headers, which a caching store below
keeps with each write. The describe() texts are those Kafka Streams 4.1.1 prints for the same
topologies."""

from __future__ import annotations

import pytest

from state.stores import Stores
from streams import (FixedKeyProcessor, FixedKeyRecord, Processor, PunctuationType, Record, StreamsBuilder,
                     serdes)
from streams.dsl import Materialized
from streams.errors import ProcessingError, TopologyError
from streams.testing import TopologyTestDriver

S, I64 = serdes.STRING, serdes.INT64
CONFIG = {"application.id": "pv", "default.key.serde": "string", "default.value.serde": "string"}


class Upper(FixedKeyProcessor):
    def process(self, record):
        self.context.forward(record.with_value(record.value.upper()))


class Deduplicate(FixedKeyProcessor):
    """Forwards a key's first value only, remembering the keys seen in the store "seen"."""

    def init(self, context):
        self.context = context
        self.seen = context.get_state_store("seen")

    def process(self, record):
        if self.seen.get(record.key) is None:
            self.seen.put(record.key, record.timestamp)
            self.context.forward(record)


def _seen_store():
    return Stores.key_value_store_builder(Stores.persistent_key_value_store("seen"), S, I64)


def test_a_fixed_key_processor_keeps_keys_so_a_grouping_below_needs_no_repartition():
    b = StreamsBuilder()
    (b.stream("in", key_serde=S, value_serde=S).process_values(Upper).group_by_key().count()
     .to_stream().to("out", key_serde=S, value_serde=I64))
    topology = b.build()
    assert [t for t in topology.internal_topics if t.endswith("-repartition")] == []
    assert str(topology.describe()) == """Topologies:
   Sub-topology: 0
    Source: KSTREAM-SOURCE-0000000000 (topics: [in])
      --> KSTREAM-PROCESSVALUES-0000000001
    Processor: KSTREAM-PROCESSVALUES-0000000001 (stores: [])
      --> KSTREAM-AGGREGATE-0000000003
      <-- KSTREAM-SOURCE-0000000000
    Processor: KSTREAM-AGGREGATE-0000000003 (stores: [KSTREAM-AGGREGATE-STATE-STORE-0000000002])
      --> KTABLE-TOSTREAM-0000000004
      <-- KSTREAM-PROCESSVALUES-0000000001
    Processor: KTABLE-TOSTREAM-0000000004 (stores: [])
      --> KSTREAM-SINK-0000000005
      <-- KSTREAM-AGGREGATE-0000000003
    Sink: KSTREAM-SINK-0000000005 (topic: out)
      <-- KTABLE-TOSTREAM-0000000004

"""
    with TopologyTestDriver(topology, {**CONFIG, "statestore.cache.max.bytes": 0}) as d:
        inp = d.create_input_topic("in", S, S)
        for key, value, ts in [("a", "x", 1), ("b", "y", 2), ("a", "z", 3)]:
            inp.pipe_input(key, value, timestamp=ts)
        out = d.create_output_topic("out", S, I64).read_records_to_list()
    assert [(r.key, r.value, r.timestamp) for r in out] == [("a", 1, 1), ("b", 1, 2), ("a", 2, 3)]


def test_after_a_key_change_the_stream_still_repartitions_below_the_fixed_key_processor():
    """processValues inherits the need for a repartition: the grouping's repartition comes after
    it, so the processor (and its store) runs with the input's tasks."""
    b = StreamsBuilder()
    b.add_state_store(Stores.key_value_store_builder(Stores.in_memory_key_value_store("seen"), S, I64))
    (b.stream("in", key_serde=S, value_serde=S).select_key(lambda k, v: v)
     .process_values(Deduplicate, name="pv", stores=["seen"]).group_by_key().count().to_stream().to("out"))
    assert str(b.build().describe()) == """Topologies:
   Sub-topology: 0
    Source: KSTREAM-SOURCE-0000000000 (topics: [in])
      --> KSTREAM-KEY-SELECT-0000000001
    Processor: KSTREAM-KEY-SELECT-0000000001 (stores: [])
      --> pv
      <-- KSTREAM-SOURCE-0000000000
    Processor: pv (stores: [seen])
      --> KSTREAM-FILTER-0000000005
      <-- KSTREAM-KEY-SELECT-0000000001
    Processor: KSTREAM-FILTER-0000000005 (stores: [])
      --> KSTREAM-SINK-0000000004
      <-- pv
    Sink: KSTREAM-SINK-0000000004 (topic: KSTREAM-AGGREGATE-STATE-STORE-0000000002-repartition)
      <-- KSTREAM-FILTER-0000000005

  Sub-topology: 1
    Source: KSTREAM-SOURCE-0000000006 (topics: [KSTREAM-AGGREGATE-STATE-STORE-0000000002-repartition])
      --> KSTREAM-AGGREGATE-0000000003
    Processor: KSTREAM-AGGREGATE-0000000003 (stores: [KSTREAM-AGGREGATE-STATE-STORE-0000000002])
      --> KTABLE-TOSTREAM-0000000007
      <-- KSTREAM-SOURCE-0000000006
    Processor: KTABLE-TOSTREAM-0000000007 (stores: [])
      --> KSTREAM-SINK-0000000008
      <-- KSTREAM-AGGREGATE-0000000003
    Sink: KSTREAM-SINK-0000000008 (topic: out)
      <-- KTABLE-TOSTREAM-0000000007

"""


def test_a_fixed_key_processor_with_a_store_deduplicates():
    b = StreamsBuilder()
    b.add_state_store(_seen_store())
    b.stream("in", key_serde=S, value_serde=S).process_values(Deduplicate, stores="seen").to("out")
    with TopologyTestDriver(b.build(), CONFIG) as d:
        inp = d.create_input_topic("in", S, S)
        for key, value, ts in [("a", "1", 5), ("b", "2", 6), ("a", "3", 7), ("c", "4", 8), ("b", "5", 9)]:
            inp.pipe_input(key, value, timestamp=ts)
        out = d.create_output_topic("out", S, S).read_records_to_list()
        assert [(r.key, r.value, r.timestamp) for r in out] == [("a", "1", 5), ("b", "2", 6), ("c", "4", 8)]
        assert dict(d.get_key_value_store("seen").all()) == {"a": 5, "b": 6, "c": 8}


class _Tag(FixedKeyProcessor):
    """Forwards each record with the header ("tag", <its value>) in place of its own."""

    def process(self, record):
        self.context.forward(record.with_headers((("tag", record.value.encode()),)))


def test_a_cached_count_below_keeps_the_headers_the_fixed_key_processor_forwarded():
    """No repartition lies between: Kafka's forward() makes the forwarded headers the record
    context's, so the count's cache keeps them with its write and flushes the update with them
    (the driver commits after every record: one update each). The input's headers are gone."""
    b = StreamsBuilder()
    (b.stream("in", key_serde=S, value_serde=S).process_values(_Tag).group_by_key()
     .count(Materialized.as_("counts")).to_stream().to("out", key_serde=S, value_serde=I64))
    with TopologyTestDriver(b.build(), CONFIG) as d:
        inp = d.create_input_topic("in", S, S)
        inp.pipe_input("k", "v1", timestamp=1, headers=(("h", b"1"),))
        inp.pipe_input("k", "v2", timestamp=2)
        out = d.create_output_topic("out", S, I64).read_records_to_list()
    assert [(r.key, r.value, tuple(r.headers)) for r in out] == [("k", 1, (("tag", b"v1"),)),
                                                                ("k", 2, (("tag", b"v2"),))]


class _Latest(FixedKeyProcessor):
    """Keeps each key's latest record and forwards them all on a stream-time punctuation, with the
    punctuation's time: a fixed-key processor forwards records derived from ones it was handed."""

    def init(self, context):
        self.context = context
        self.latest: dict = {}
        context.schedule(10, PunctuationType.STREAM_TIME, self.emit)

    def emit(self, timestamp):
        for record in self.latest.values():
            self.context.forward(record.with_timestamp(timestamp))
        self.latest.clear()

    def process(self, record):
        self.latest[record.key] = record


def test_a_fixed_key_processor_forwards_from_a_punctuation():
    b = StreamsBuilder()
    b.stream("in", key_serde=S, value_serde=S).process_values(_Latest).to("out")
    with TopologyTestDriver(b.build(), CONFIG) as d:
        inp = d.create_input_topic("in", S, S)
        for key, value, ts in [("a", "1", 0), ("b", "2", 3), ("a", "3", 5), ("c", "4", 12)]:
            inp.pipe_input(key, value, timestamp=ts)
        out = d.create_output_topic("out", S, S).read_records_to_list()
    # Kafka's stream-time schedule starts at 0 and punctuates after the record that moves stream
    # time to it: a at 0 (just kept) goes at 0; then b and a (kept in that order) and c, kept
    # by the record at 12 before the punctuation at 12 (process, then punctuate)
    assert [(r.key, r.value, r.timestamp) for r in out] == [("a", "1", 0), ("b", "2", 12), ("a", "3", 12),
                                                           ("c", "4", 12)]


class _Route(FixedKeyProcessor):
    """Sends short values to the child named "short", the rest to every child."""

    def process(self, record):
        self.context.forward(record, "short" if len(record.value) < 3 else None)


def test_forward_to_one_named_child():
    b = StreamsBuilder()
    routed = b.stream("in", key_serde=S, value_serde=S).process_values(_Route)
    routed.process_values(Upper, name="short").to("short-out")
    routed.to("all-out")
    with TopologyTestDriver(b.build(), CONFIG) as d:
        inp = d.create_input_topic("in", S, S)
        inp.pipe_input("k", "ab", timestamp=1)
        inp.pipe_input("k", "abcd", timestamp=2)
        short = [r.value for r in d.create_output_topic("short-out", S, S).read_records_to_list()]
        every = [r.value for r in d.create_output_topic("all-out", S, S).read_records_to_list()]
    assert (short, every) == (["AB", "ABCD"], ["abcd"])


class _Rekey(FixedKeyProcessor):
    def process(self, record):
        self.context.forward(Record("other", record.value, record.timestamp))


def test_forwarding_anything_but_a_fixed_key_record_fails_naming_the_processor():
    b = StreamsBuilder()
    b.stream("in", key_serde=S, value_serde=S).process_values(_Rekey, name="rekey").to("out")
    with TopologyTestDriver(b.build(), CONFIG) as d:
        inp = d.create_input_topic("in", S, S)
        with pytest.raises(ProcessingError, match="'rekey' forwarded Record.*FixedKeyRecords"):
            inp.pipe_input("k", "v", timestamp=1)
        assert d.create_output_topic("out", S, S).read_records_to_list() == []


def test_a_fixed_key_record_is_made_by_the_framework_and_keeps_its_key():
    with pytest.raises(TypeError, match="made by the framework"):
        FixedKeyRecord("k", "v", 1)
    record = FixedKeyRecord._of(Record("k", "v", 1, (("h", b"1"),)))
    assert not hasattr(record, "with_key")
    derived = record.with_value("w").with_timestamp(7).with_headers({"x": b"2"})
    assert (derived.key, derived.value, derived.timestamp, derived.headers) == ("k", "w", 7, (("x", b"2"),))
    assert (record.value, record.timestamp, record.header("h")) == ("v", 1, b"1")
    with pytest.raises(ValueError, match="may not be negative"):
        record.with_timestamp(-1)


class _PlainProcessor(Processor):
    def process(self, record):
        self.context.forward(record)


def test_a_processor_given_to_process_values_fails_clearly():
    b = StreamsBuilder()
    b.stream("in", key_serde=S, value_serde=S).process_values(_PlainProcessor).to("out")
    with pytest.raises(ProcessingError, match="process_values runs FixedKeyProcessors"):
        with TopologyTestDriver(b.build(), CONFIG):
            pass


def test_processor_names_follow_kafkas_named_rules():
    b = StreamsBuilder()
    s = b.stream("in", key_serde=S, value_serde=S)
    s.process(_PlainProcessor, name="p1").process_values(Upper, name="p2").to("out")
    # a given name uses up no generated index: the sink is KSTREAM-SINK-0000000001
    assert str(b.build().describe()) == """Topologies:
   Sub-topology: 0
    Source: KSTREAM-SOURCE-0000000000 (topics: [in])
      --> p1
    Processor: p1 (stores: [])
      --> p2
      <-- KSTREAM-SOURCE-0000000000
    Processor: p2 (stores: [])
      --> KSTREAM-SINK-0000000001
      <-- p1
    Sink: KSTREAM-SINK-0000000001 (topic: out)
      <-- p2

"""
    for bad, message in [("", "non-empty"), ("..", "cannot be"), ("a b", "character other than"),
                         ("x" * 250, "longer than 249"), (3, "non-empty string")]:
        with pytest.raises(TopologyError, match=message):
            s.process_values(Upper, name=bad)
        with pytest.raises(TopologyError, match=message):
            s.process(_PlainProcessor, name=bad)
    with pytest.raises(TopologyError, match="process_values needs a callable"):
        s.process_values(Upper())
