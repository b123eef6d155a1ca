"""A caching store keeps each write's record context and forwards its flushed entry in it, as
Kafka's CachingKeyValueStore does (the LRUCacheEntry's ProcessorRecordContext set around
putAndMaybeForward): downstream sees the headers of the cached write and, in the record context,
the topic, partition and offset of the record that made it. Expected outputs derived by hand."""

from __future__ import annotations

import pytest

from streams import Processor, StreamsBuilder, serdes
from streams.dsl import Materialized
from streams.testing import TopologyTestDriver

S = serdes.STRING
CONFIG = {"application.id": "ctx", "default.key.serde": "string", "default.value.serde": "string"}
H1, H2 = (("h", b"1"),), (("h", b"2"),)
#: no caching layer, a cache every put overflows (each write evicted at once), the default
CACHES = [0, 1, 10 * 1024 * 1024]


def _routed(seen: list):
    """A topic name extractor that writes everything to "out", noting what it is told."""
    def route(key, value, record_context):
        seen.append((key, value, record_context.topic, record_context.partition, record_context.offset,
                     record_context.headers))
        return "out"
    return route


@pytest.mark.parametrize("cache", CACHES, ids=["uncached", "one-byte", "cached"])
def test_a_counts_updates_go_out_in_the_record_context_of_their_write(cache):
    """Each input record becomes two updates of its key (flat_map_values: no repartition). Kafka's
    driver commits after every record, so a cache forwards the key's last update once per record,
    in that record's context; without a cache (or one every put overflows) every update goes,
    each in the context it was written in. The third record has no headers: its update has none."""
    seen: list = []
    b = StreamsBuilder()
    materialized = Materialized.as_("counts") if cache else Materialized.as_("counts").with_caching_disabled()
    (b.stream("in", key_serde=S, value_serde=S).flat_map_values(str.split).group_by_key()
     .count(materialized).to_stream().to(_routed(seen), key_serde=S, value_serde=serdes.INT64))
    with TopologyTestDriver(b.build(), {**CONFIG, "statestore.cache.max.bytes": max(cache, 0)}) as d:
        inp = d.create_input_topic("in", S, S)
        inp.pipe_input("a", "x y", timestamp=1, headers=H1)
        inp.pipe_input("b", "z", timestamp=2, headers=H2)
        inp.pipe_input("a", "w", timestamp=3)
        out = d.create_output_topic("out", S, serdes.INT64).read_records_to_list()
    every = [("a", 1, "in", 0, 0, H1), ("a", 2, "in", 0, 0, H1), ("b", 1, "in", 0, 1, H2), ("a", 3, "in", 0, 2, ())]
    expected = every if cache != 10 * 1024 * 1024 else [every[1], every[2], every[3]]
    assert seen == expected
    assert [(r.key, r.value, tuple(r.headers)) for r in out] == [(k, v, h) for k, v, *_, h in expected]


class _Tagged(Processor):
    """Forwards each record with the header ("tag", <its value>) in place of its own."""

    def init(self, context):
        self.context = context

    def process(self, record):
        self.context.forward(record.with_headers((("tag", record.value.encode()),)))


def test_a_cached_table_below_a_processor_keeps_the_headers_the_processor_forwarded():
    """A process() may change the key: the table below it reads a repartition topic, whose
    records carry the headers the processor forwarded; the cached table flushes with those,
    naming the repartition record."""
    seen: list = []
    b = StreamsBuilder()
    (b.stream("in", key_serde=S, value_serde=S).process(_Tagged)
     .to_table(store=Materialized.as_("latest")).to_stream().to(_routed(seen)))
    with TopologyTestDriver(b.build(), CONFIG) as d:
        inp = d.create_input_topic("in", S, S)
        inp.pipe_input("k", "v1", timestamp=1, headers=H1)
        inp.pipe_input("k", "v2", timestamp=2)
    assert seen == [("k", "v1", "ctx-KSTREAM-TOTABLE-0000000002-repartition", 0, 0, (("tag", b"v1"),)),
                    ("k", "v2", "ctx-KSTREAM-TOTABLE-0000000002-repartition", 0, 1, (("tag", b"v2"),))]


def test_a_flushed_update_after_a_repartition_names_the_repartition_record():
    """Below a key change the count's writes are made for records of the repartition topic: the
    flushed updates name that topic and the repartition records' offsets, and keep the headers
    the repartition records carried over from the input."""
    seen: list = []
    b = StreamsBuilder()
    (b.stream("in", key_serde=S, value_serde=S).select_key(lambda k, v: v).group_by_key()
     .count(Materialized.as_("counts")).to_stream().to(_routed(seen), key_serde=S, value_serde=serdes.INT64))
    topology = b.build()
    with TopologyTestDriver(topology, CONFIG) as d:
        inp = d.create_input_topic("in", S, S)
        inp.pipe_input("k1", "v", timestamp=1, headers=H1)
        inp.pipe_input("k2", "v", timestamp=2, headers=H2)
        inp.pipe_input("k3", "u", timestamp=3)
    (repartition,) = {topic for _k, _v, topic, *_ in seen}
    assert repartition.startswith("ctx-") and repartition.endswith("-repartition")
    assert [(k, v, partition, offset, h) for k, v, _t, partition, offset, h in seen] == [
        ("v", 1, 0, 0, H1), ("v", 2, 0, 1, H2), ("u", 1, 0, 2, ())]


def test_a_windowed_and_a_session_count_forward_in_their_writes_record_context():
    """The window and session caches keep the record context too (their own write-downs)."""
    from streams.dsl import SessionWindows, TimeWindows
    for windows in (TimeWindows.of_size_with_no_grace(10), SessionWindows.of_inactivity_gap_with_no_grace(10)):
        seen: list = []
        b = StreamsBuilder()
        (b.stream("in", key_serde=S, value_serde=S).group_by_key().windowed_by(windows)
         .count(Materialized.as_("counts")).to_stream(lambda wk, v: wk.key).to(_routed(seen), key_serde=S,
                                                                               value_serde=serdes.INT64))
        with TopologyTestDriver(b.build(), CONFIG) as d:
            inp = d.create_input_topic("in", S, S)
            inp.pipe_input("a", "x", timestamp=1, headers=H1)
            inp.pipe_input("a", "y", timestamp=2, headers=H2)
        if isinstance(windows, TimeWindows):
            assert seen == [("a", 1, "in", 0, 0, H1), ("a", 2, "in", 0, 1, H2)]
        else:  # the second record merges the session away: its tombstone, then the new session
            assert seen == [("a", 1, "in", 0, 0, H1), ("a", None, "in", 0, 1, H2), ("a", 2, "in", 0, 1, H2)]
