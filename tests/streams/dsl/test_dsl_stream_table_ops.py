"""KStream map/flat_map/merge/split/repartition/process/to_table, KGroupedStream reduce/aggregate
and KTable filter/map_values/to_stream on the TopologyTestDriver. Expected outputs are derived by
hand from Kafka's operators (KStreamMap, KStreamReduce, KStreamAggregate, KTableSource,
KTableFilter, KTableMapValues, KTableToStream, KStreamBranch)."""

import pytest

from state.stores import Stores
from state.timestamped import ValueAndTimestamp
from streams import Branched, Processor, PunctuationType, Record, StreamsBuilder, serdes
from streams.dsl import Materialized
from streams.errors import TopologyError
from streams.testing import TopologyTestDriver

S = serdes.STRING
I64 = serdes.INT64
CONFIG = {"application.id": "ops", "default.key.serde": "string", "default.value.serde": "string"}


def records(out):
    return [(r.key, r.value, r.timestamp) for r in out.read_records_to_list()]


def test_map_then_group_by_key_reduce_goes_through_a_repartition_topic():
    b = StreamsBuilder()
    (b.stream("in", key_serde=S, value_serde=S)
        .map(lambda k, v: (v, k))
        .group_by_key(key_serde=S, value_serde=S)
        .reduce(lambda agg, v: agg + "," + v, store=Materialized.as_("r").with_caching_disabled())
        .to_stream().to("out", key_serde=S, value_serde=S))
    topology = b.build()
    assert "r-repartition" in topology.internal_topics
    with TopologyTestDriver(topology, CONFIG) as d:
        inp = d.create_input_topic("in", S, S)
        inp.pipe_input("a", "x", timestamp=1)
        inp.pipe_input("b", "y", timestamp=2)
        inp.pipe_input("c", "x", timestamp=3)
        inp.pipe_input("d", None, timestamp=4)  # maps to key None: dropped before the repartition topic
        assert records(d.create_output_topic("out", S, S)) == [("x", "a", 1), ("y", "b", 2), ("x", "a,c", 3)]
        assert [r.key for r in d.producer_history("ops-r-repartition")] == [b"x", b"y", b"x"]
        assert d.get_key_value_store("r").get("x") == "a,c"


def test_aggregate_skips_none_values_and_takes_its_serde_from_materialized():
    b = StreamsBuilder()
    (b.stream("in", key_serde=S, value_serde=S)
        .group_by_key()
        .aggregate(lambda: 0, lambda k, v, agg: agg + len(v),
                   store=Materialized.as_("lens").with_value_serde(I64).with_caching_disabled())
        .to_stream().to("out", key_serde=S, value_serde=I64))
    with TopologyTestDriver(b.build(), CONFIG) as d:
        inp = d.create_input_topic("in", S, S)
        inp.pipe_input("k", "ab", timestamp=5)
        inp.pipe_input("k", None, timestamp=6)
        inp.pipe_input("k", "cde", timestamp=7)
        inp.pipe_input("j", "", timestamp=8)
        assert records(d.create_output_topic("out", S, I64)) == [("k", 2, 5), ("k", 5, 7), ("j", 0, 8)]


def test_table_source_filter_map_values_to_stream():
    b = StreamsBuilder()
    (b.table("t", key_serde=S, value_serde=S, store=Materialized.as_("t-store").with_caching_disabled())
        .filter(lambda k, v: v.startswith("a"))
        .map_values(str.upper)
        .to_stream().to("out", key_serde=S, value_serde=S))
    with TopologyTestDriver(b.build(), CONFIG) as d:
        inp = d.create_input_topic("t", S, S)
        inp.pipe_input("k1", "apple", timestamp=1)
        inp.pipe_input("k2", "bob", timestamp=2)
        inp.pipe_input("k1", "avocado", timestamp=3)
        store = d.get_timestamped_key_value_store("t-store")
        assert store.get("k1") == ValueAndTimestamp("avocado", 3)
        assert store.get("k2") == ValueAndTimestamp("bob", 2)
        inp.pipe_input("k1", None, timestamp=4)
        assert store.get("k1") is None
        inp.pipe_input(None, "ant", timestamp=5)  # no key: dropped and counted (Kafka's KTableSource)
        assert sum(m.value for m in d.metrics() if m.name == "dropped-records-total") == 1
        # Kafka's KTableFilter asks its materialized parent for old values as it is built, so a
        # value filtered out is a tombstone downstream only for a key the filter forwarded before:
        # k2's "bob" (no old value, new filtered out) gives nothing; k1's delete gives (k1, None)
        assert records(d.create_output_topic("out", S, S)) == [
            ("k1", "APPLE", 1), ("k1", "AVOCADO", 3), ("k1", None, 4)]


def test_materialized_filter_is_queryable_and_caching_gives_the_same_final_values():
    for caching in (True, False):
        b = StreamsBuilder()
        mat = Materialized.as_("f")
        table = b.table("t", key_serde=S, value_serde=S).filter_not(
            lambda k, v: v == "drop", store=mat if caching else mat.with_caching_disabled())
        assert table.queryable_store_name == "f"
        table.to_stream().to("out", key_serde=S, value_serde=S)
        with TopologyTestDriver(b.build(), CONFIG) as d:
            inp = d.create_input_topic("t", S, S)
            inp.pipe_input("a", "keep", timestamp=1)
            inp.pipe_input("b", "drop", timestamp=2)
            inp.pipe_input("a", "drop", timestamp=3)
            inp.pipe_input("c", "keep", timestamp=4)
            store = d.get_timestamped_key_value_store("f")
            assert store.get("a") is None and store.get("b") is None
            assert store.get("c") == ValueAndTimestamp("keep", 4)
            assert d.get_key_value_store("f").get("c") == "keep"
            final = d.create_output_topic("out", S, S).read_key_values_to_map()
            # the same final values; with caching a tombstone of a key that never existed is not
            # forwarded at all (Kafka's caching store skips it)
            assert final == ({"a": None, "c": "keep"} if caching else {"a": None, "b": None, "c": "keep"})


def test_to_stream_with_a_key_mapper():
    b = StreamsBuilder()
    b.table("t", key_serde=S, value_serde=S).to_stream(lambda k, v: f"{k}:{v}").to("out", key_serde=S, value_serde=S)
    with TopologyTestDriver(b.build(), CONFIG) as d:
        d.create_input_topic("t", S, S).pipe_input("k", "v", timestamp=9)
        assert records(d.create_output_topic("out", S, S)) == [("k:v", "v", 9)]


def test_split_branches_default_and_merge():
    b = StreamsBuilder()
    branches = (b.stream("in", key_serde=S, value_serde=S).split("s-")
                .branch(lambda k, v: v.startswith("a"), Branched.as_("a"))
                .branch(lambda k, v: v.startswith("b"))
                .default_branch())
    assert sorted(branches) == ["s-0", "s-2", "s-a"]
    branches["s-a"].to("a-out")
    branches["s-2"].merge(branches["s-0"]).map_values(str.upper).to("rest-out")
    with TopologyTestDriver(b.build(), CONFIG) as d:
        inp = d.create_input_topic("in", S, S)
        for i, v in enumerate(["apple", "banana", "cherry", "avocado", "ab"]):
            inp.pipe_input(str(i), v, timestamp=i)
        assert records(d.create_output_topic("a-out", S, S)) == [("0", "apple", 0), ("3", "avocado", 3), ("4", "ab", 4)]
        assert records(d.create_output_topic("rest-out", S, S)) == [("1", "BANANA", 1), ("2", "CHERRY", 2)]


def test_split_without_default_and_with_function_and_consumer():
    b = StreamsBuilder()
    seen = []
    branches = (b.stream("in", key_serde=S, value_serde=S).split()
                .branch(lambda k, v: v == "x", Branched.with_function(lambda s: s.map_values(lambda v: v * 2)))
                .branch(lambda k, v: v == "y", Branched.with_consumer(lambda s: seen.append(s), name="c"))
                .no_default_branch())
    # an unnamed split's keys start with its generated name, as Kafka's (KSTREAM-BRANCH-0000000001)
    assert list(branches) == ["KSTREAM-BRANCH-00000000011"] and len(seen) == 1
    branches["KSTREAM-BRANCH-00000000011"].to("x-out")
    seen[0].to("y-out")
    with TopologyTestDriver(b.build(), CONFIG) as d:
        inp = d.create_input_topic("in", S, S)
        for v in ["x", "y", "z"]:
            inp.pipe_input("k", v, timestamp=1)
        assert d.create_output_topic("x-out", S, S).read_values_to_list() == ["xx"]
        assert d.create_output_topic("y-out", S, S).read_values_to_list() == ["y"]


def test_flat_map_to_table_and_describe_names():
    b = StreamsBuilder()
    (b.stream("in", key_serde=S, value_serde=S)
        .flat_map(lambda k, v: [(w, k) for w in v.split()])
        .to_table(store=Materialized.as_("latest").with_key_serde(S).with_value_serde(S).with_caching_disabled())
        .to_stream().to("out", key_serde=S, value_serde=S))
    topology = b.build()
    text = str(topology.describe())
    for name in ("KSTREAM-FLATMAP-0000000001", "KSTREAM-TOTABLE-0000000002", "KTABLE-TOSTREAM-"):
        assert name in text
    # the key changed before the table: a repartition topic named after the processor, not the
    # store (Kafka's toTable), with generated node names
    assert "KSTREAM-TOTABLE-0000000002-repartition" in topology.internal_topics
    assert not any("latest" in topic for topic in topology.internal_topics if topic.endswith("-repartition"))
    assert "latest-repartition-sink" not in text and "KSTREAM-SINK-0000000003" in text
    with TopologyTestDriver(topology, CONFIG) as d:
        inp = d.create_input_topic("in", S, S)
        inp.pipe_input("u1", "a b", timestamp=1)
        inp.pipe_input("u2", "b", timestamp=2)
        assert records(d.create_output_topic("out", S, S)) == [("a", "u1", 1), ("b", "u1", 1), ("b", "u2", 2)]
        assert d.get_timestamped_key_value_store("latest").get("b") == ValueAndTimestamp("u2", 2)


class CountingProcessor(Processor):
    def init(self, context):
        self.context = context
        self.store = context.get_state_store("seen")

    def process(self, record):
        n = (self.store.get(record.key) or 0) + 1
        self.store.put(record.key, n)
        self.context.forward(Record(f"{record.key}#{n}", record.value, record.timestamp))


def test_process_with_a_store_then_repartition():
    b = StreamsBuilder()
    b.add_state_store(Stores.key_value_store_builder(Stores.in_memory_key_value_store("seen"), S, I64))
    (b.stream("in", key_serde=S, value_serde=S)
        .process(CountingProcessor, stores=["seen"])
        .repartition(key_serde=S, value_serde=S, name="through")
        .to("out", key_serde=S, value_serde=S))
    topology = b.build()
    assert "through-repartition" in topology.internal_topics
    assert "KSTREAM-PROCESSOR-0000000001 (stores: [seen])" in str(topology.describe())
    with TopologyTestDriver(topology, CONFIG) as d:
        inp = d.create_input_topic("in", S, S)
        inp.pipe_input("k", "v1", timestamp=1)
        inp.pipe_input("k", "v2", timestamp=2)
        assert records(d.create_output_topic("out", S, S)) == [("k#1", "v1", 1), ("k#2", "v2", 2)]


def test_bad_inputs_are_typed_errors():
    b = StreamsBuilder()
    s = b.stream("in", key_serde=S, value_serde=S)
    with pytest.raises(TopologyError, match="map needs a callable"):
        s.map(None)
    with pytest.raises(TopologyError, match="merge needs a KStream"):
        s.merge("other")
    with pytest.raises(TopologyError, match="already read"):
        b.table("in")
    with pytest.raises(TopologyError, match="num_partitions must be an int >= 1"):
        s.repartition(num_partitions=0)
    split = s.split().branch(lambda k, v: True)
    split.default_branch()
    with pytest.raises(TopologyError, match="already ended"):
        split.branch(lambda k, v: True)


def route(key, value, record_context):
    return f"{record_context.topic}-{value[0]}"


def test_to_with_a_topic_name_extractor():
    b = StreamsBuilder()
    b.stream("in", key_serde=S, value_serde=S).to(route)
    topology = b.build()
    assert "Sink: KSTREAM-SINK-0000000001 (extractor class: " in str(topology.describe())
    assert "route" in str(topology.describe())
    with TopologyTestDriver(topology, CONFIG) as d:
        inp = d.create_input_topic("in", S, S)
        inp.pipe_input("k1", "apple", timestamp=1)
        inp.pipe_input("k2", "berry", timestamp=2)
        inp.pipe_input("k3", "avocado", timestamp=3)
        assert d.create_output_topic("in-a", S, S).read_key_values_to_list() == [("k1", "apple"), ("k3", "avocado")]
        assert d.create_output_topic("in-b", S, S).read_key_values_to_list() == [("k2", "berry")]


class _Restamp(Processor):
    """Forwards each record 5 ms later with a header, and a "tick" from each stream-time punctuation."""

    def init(self, context):
        self.context = context
        context.schedule(10, PunctuationType.STREAM_TIME,
                         lambda t: context.forward(Record("p", "tick", t, (("from", b"punctuation"),))))

    def process(self, record):
        self.context.forward(record.with_timestamp(record.timestamp + 5).with_headers((("h", b"1"),)))


def test_a_topic_name_extractor_is_told_the_record_context():
    """Kafka's SinkNode hands the extractor a RecordContext: the input record's topic, partition
    and offset, the written record's timestamp and headers; in a punctuation no topic, -1s."""
    seen = []

    def route(key, value, record_context):
        seen.append(record_context)
        return "out"

    b = StreamsBuilder()
    b.stream("in", key_serde=S, value_serde=S).process(_Restamp).to(route)
    with TopologyTestDriver(b.build(), CONFIG) as d:
        inp = d.create_input_topic("in", S, S)
        inp.pipe_input("k1", "a", timestamp=1, headers=(("in", b"x"),))
        inp.pipe_input("k2", "b", timestamp=12)
        assert [r.key for r in d.create_output_topic("out", S, S).read_records_to_list()] == ["k1", "p", "k2", "p"]
    tick = (None, -1, -1)
    assert [tuple(c) for c in seen] == [
        ("in", 0, 0, 6, (("h", b"1"),)), (*tick, 1, (("from", b"punctuation"),)),
        ("in", 0, 1, 17, (("h", b"1"),)), (*tick, 12, (("from", b"punctuation"),)),
    ]
    assert (seen[0].topic, seen[0].timestamp, seen[0].headers) == ("in", 6, (("h", b"1"),))


def test_a_topic_name_extractor_returning_no_name_fails_clearly():
    b = StreamsBuilder()
    b.stream("in", key_serde=S, value_serde=S).to(lambda k, v, ctx: None)
    with TopologyTestDriver(b.build(), CONFIG) as d:
        with pytest.raises(Exception, match="topic name extractor returned None"):
            d.create_input_topic("in", S, S).pipe_input("k", "v", timestamp=1)


@pytest.mark.parametrize("store,map_first,expected", [
    # a named source is materialized (Kafka's sense): the filter gets old values, so "b", never
    # forwarded, gets no tombstone; "a" does once its value is filtered out
    ("t-store", False, [("a", "keep", 1), ("a", None, 3)]),
    # through an unmaterialized map_values the filter still reaches the materialized source
    ("t-store", True, [("a", "keep", 1), ("a", None, 3)]),
    # an unnamed source is not materialized and a filter does not force it: no old values, so
    # every filtered-out value is a tombstone downstream (Kafka's KTableFilter with sendOldValues false)
    (None, False, [("a", "keep", 1), ("b", None, 2), ("a", None, 3)]),
    (None, True, [("a", "keep", 1), ("b", None, 2), ("a", None, 3)]),
])
def test_a_table_filter_asks_its_parent_for_old_values(store, map_first, expected):
    b = StreamsBuilder()
    table = b.table("t", key_serde=S, value_serde=S, store=store)
    if map_first:
        table = table.map_values(lambda v: v)
    table.filter(lambda k, v: v == "keep").to_stream().to("out", key_serde=S, value_serde=S)
    with TopologyTestDriver(b.build(), CONFIG) as d:
        inp = d.create_input_topic("t", S, S)
        inp.pipe_input("a", "keep", timestamp=1)
        inp.pipe_input("b", "drop", timestamp=2)
        inp.pipe_input("a", "drop", timestamp=3)
        assert records(d.create_output_topic("out", S, S)) == expected


@pytest.mark.parametrize("store,expected", [
    # unnamed: Kafka does not materialize the source, which then forwards every record, a delete
    # of a key it never had too (KTableSource without a queryable name)
    (None, [("a", "x", 1), ("b", None, 2)]),
    # named: materialized with its (default) cache, which drops an update with neither a new nor
    # an old value (Kafka's CachingKeyValueStore)
    ("t-store", [("a", "x", 1)]),
])
def test_a_source_table_caches_only_when_materialized(store, expected):
    b = StreamsBuilder()
    b.table("t", key_serde=S, value_serde=S, store=store).to_stream().to("out", key_serde=S, value_serde=S)
    with TopologyTestDriver(b.build(), CONFIG) as d:  # the default cache: 10 MiB
        inp = d.create_input_topic("t", S, S)
        inp.pipe_input("a", "x", timestamp=1)
        inp.pipe_input("b", None, timestamp=2)
        assert records(d.create_output_topic("out", S, S)) == expected


@pytest.mark.parametrize("cache_bytes", [0, 10_000_000])
def test_a_table_update_older_than_the_tables_value_is_applied_and_warned_of(cache_bytes, caplog):
    """Kafka's KTableSource: an update with a timestamp below the stored one's is applied all the
    same, with a WARN naming the store, both timestamps and the record's topic, partition and
    offset; an update at the same or a later time is not warned of."""
    b = StreamsBuilder()
    b.table("users", key_serde=S, value_serde=S, store="regions").to_stream().to("out", key_serde=S, value_serde=S)
    with caplog.at_level("WARNING", logger="streams.dsl.ops.table"):
        with TopologyTestDriver(b.build(), {"statestore.cache.max.bytes": cache_bytes}) as driver:
            inp = driver.create_input_topic("users", S, S)
            inp.pipe_input("u1", "north", timestamp=100)
            inp.pipe_input("u1", "south", timestamp=100)
            inp.pipe_input("u2", "east", timestamp=50)
            inp.pipe_input("u1", "west", timestamp=40)
            assert driver.get_key_value_store("regions").get("u1") == "west"
    warned = [r.getMessage() for r in caplog.records if "out-of-order KTable update" in r.getMessage()]
    assert warned == ["Detected out-of-order KTable update for regions, old timestamp=[100] new timestamp=[40]. "
                      "topic=[users] partition=[0] offset=[3]."]
