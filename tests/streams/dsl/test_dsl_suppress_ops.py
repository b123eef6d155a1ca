"""KTable.suppress on the TopologyTestDriver, expected outputs derived by hand from Kafka's
KTableSuppressProcessor (buffer ordered by buffer time then key bytes; emitted with the context
of the key's latest update)."""

import pytest

from streams import StreamsBuilder, Window, Windowed, serdes
from streams.dsl import BufferConfig, Materialized, Suppressed, TimeWindows
from streams.errors import TopologyError
from streams.testing import TopologyTestDriver

S = serdes.STRING
I64 = serdes.INT64
CONFIG = {"application.id": "sup", "default.key.serde": "string", "default.value.serde": "string"}


def flat(w, v):
    return f"{w.key}@{w.window.start}/{w.window.end}", v


def out_records(d, serde):
    return [(r.key, r.value, r.timestamp) for r in d.create_output_topic("out", S, serde).read_records_to_list()]


@pytest.mark.parametrize("caching", [True, False])
def test_until_window_closes_emits_exactly_one_final_result_per_window(caching):
    b = StreamsBuilder()
    mat = Materialized.as_("counts")
    (b.stream("in", key_serde=S, value_serde=S).group_by_key()
        .windowed_by(TimeWindows.of_size_and_grace(10, 5))
        .count(store=mat if caching else mat.with_caching_disabled())
        .suppress(Suppressed.until_window_closes(BufferConfig.unbounded()))
        .to_stream().map(flat).to("out", key_serde=S, value_serde=I64))
    topology = b.build()
    assert "KTABLE-SUPPRESS-0000000002 (stores: [KTABLE-SUPPRESS-STATE-STORE-0000000003])" in str(topology.describe())
    with TopologyTestDriver(topology, CONFIG) as d:
        inp = d.create_input_topic("in", S, S)
        for key, t in (("k", 1), ("k", 5), ("k", 12), ("k", 3)):
            inp.pipe_input(key, "v", timestamp=t)
        assert out_records(d, I64) == []  # stream time 12: [0,10) closes only at 10 + 5
        inp.pipe_input("j", "v", timestamp=16)  # 16 - 5 >= 10: [0,10) is final
        inp.pipe_input("j", "v", timestamp=30)  # 30 - 5 >= 20: both [10,20) windows, key bytes order
        assert out_records(d, I64) == [("k@0/10", 3, 5), ("j@10/20", 1, 16), ("k@10/20", 1, 12)]
    # the buffer is changelogged when the stores flush (here: at close): the still-buffered
    # j@[30,40) is there
    changelog = d.producer_history(d.changelog_topic("KTABLE-SUPPRESS-STATE-STORE-0000000003"))
    live = {r.key: r.value for r in changelog}
    assert [k for k, v in live.items() if v is not None] == [serdes.time_windowed(S, 10).serialize(
        Windowed("j", Window(30, 40)))]


def test_until_time_limit_emits_a_keys_latest_value_once_the_limit_passed():
    b = StreamsBuilder()
    (b.table("t", key_serde=S, value_serde=S, store=Materialized.as_("t").with_caching_disabled())
        .suppress(Suppressed.until_time_limit(10, BufferConfig.max_records(10)))
        .to_stream().to("out", key_serde=S, value_serde=S))
    with TopologyTestDriver(b.build(), CONFIG) as d:
        inp = d.create_input_topic("t", S, S)
        for key, value, t in (("a", "1", 0), ("a", "2", 5), ("b", "1", 8), ("x", "1", 12)):
            inp.pipe_input(key, value, timestamp=t)
        # the timer of "a" started at 0 (first buffered): 12 - 10 >= 0 emits its latest value
        assert out_records(d, S) == [("a", "2", 5)]
        inp.pipe_input("y", "1", timestamp=20)  # 20 - 10 >= 8: "b"; "x" (12) waits
        assert out_records(d, S) == [("b", "1", 8)]


def test_an_emitted_record_carries_the_record_context_it_was_buffered_with():
    """Kafka's KTableSuppressProcessor forwards an eviction in the buffered record's context: a
    topic name extractor below sees the topic, partition and offset of the update that was
    buffered, not of the record whose stream time released it."""
    seen = []

    def route(key, value, record_context):
        seen.append((key, record_context.topic, record_context.offset, record_context.timestamp))
        return "out"

    b = StreamsBuilder()
    merged = b.stream("left", key_serde=S, value_serde=S).merge(b.stream("right", key_serde=S, value_serde=S))
    (merged.to_table(store=Materialized.as_("t").with_caching_disabled())
        .suppress(Suppressed.until_time_limit(100, BufferConfig.unbounded()))
        .to_stream().to(route, key_serde=S, value_serde=S))
    with TopologyTestDriver(b.build(), CONFIG) as d:
        left, right = d.create_input_topic("left", S, S), d.create_input_topic("right", S, S)
        left.pipe_input("k", "1", timestamp=0)
        right.pipe_input("j", "1", timestamp=10)
        right.pipe_input("j", "2", timestamp=20)
        left.pipe_input("x", "1", timestamp=200)  # releases k (left@0) and j (its last update, right@1)
    assert seen == [("k", "left", 0, 0), ("j", "right", 1, 20)]


def test_max_records_emits_early_when_full():
    b = StreamsBuilder()
    (b.table("t", key_serde=S, value_serde=S, store=Materialized.as_("t").with_caching_disabled())
        .suppress(Suppressed.until_time_limit(1000, BufferConfig.max_records(1)))
        .to_stream().to("out", key_serde=S, value_serde=S))
    with TopologyTestDriver(b.build(), CONFIG) as d:
        inp = d.create_input_topic("t", S, S)
        inp.pipe_input("a", "1", timestamp=0)
        inp.pipe_input("b", "1", timestamp=1)  # two records over a limit of one: the oldest goes
        assert out_records(d, S) == [("a", "1", 0)]


def test_until_window_closes_needs_a_windowed_table():
    table = StreamsBuilder().table("t", key_serde=S, value_serde=S)
    with pytest.raises(TopologyError, match="windowed tables only"):
        table.suppress(Suppressed.until_window_closes(BufferConfig.unbounded()))
    with pytest.raises(TopologyError, match="needs a Suppressed"):
        table.suppress("final")


def test_every_commit_writes_the_buffer_changelog():
    b = StreamsBuilder()
    (b.stream("in", key_serde=S, value_serde=S).group_by_key()
        .windowed_by(TimeWindows.of_size_and_grace(10, 5))
        .count(store=Materialized.as_("counts").with_caching_disabled())
        .suppress(Suppressed.until_window_closes(BufferConfig.unbounded()).with_name("final"))
        .to_stream().map(flat).to("out", key_serde=S, value_serde=I64))
    with TopologyTestDriver(b.build(), CONFIG) as d:
        d.create_input_topic("in", S, S).pipe_input("k", "v", timestamp=1)  # the driver commits after it
        changelog = d.producer_history(d.changelog_topic("final-store"))
        assert [r.key for r in changelog] == [serdes.time_windowed(S, 10).serialize(Windowed("k", Window(0, 10)))]
        assert changelog[0].value is not None


def test_until_window_closes_after_sessions_waits_one_gap_past_the_grace():
    from streams.dsl import SessionWindows

    b = StreamsBuilder()
    (b.stream("in", key_serde=S, value_serde=S).group_by_key()
        .windowed_by(SessionWindows.of_inactivity_gap_with_no_grace(100)).count(store="sessions")
        .suppress(Suppressed.until_window_closes(BufferConfig.unbounded()))
        .to_stream().map(flat).to("out", key_serde=S, value_serde=I64))
    # no cache: a merged-away session's tombstone out of a session cache carries no record
    # timestamp yet (a finding of the conformance harness, left to the windowed operators)
    with TopologyTestDriver(b.build(), {**CONFIG, "statestore.cache.max.bytes": 0}) as d:
        inp = d.create_input_topic("in", S, S)
        # a session may still grow for one gap after its end: Kafka's suppression waits for stream
        # time >= end + grace + gap (GraphGraceSearchUtil: session grace + inactivity gap), so c's
        # session [964, 964] is final at 1064, not at 964
        inp.pipe_input("c", "v", timestamp=964)
        inp.pipe_input("d", "v", timestamp=1063)
        assert out_records(d, I64) == []
        inp.pipe_input("d", "v", timestamp=1064)  # d's session [1063, 1064] is not final yet
        assert out_records(d, I64) == [("c@964/964", 1, 964)]


def test_until_window_closes_finds_the_grace_through_table_operations():
    b = StreamsBuilder()
    (b.stream("in", key_serde=S, value_serde=S).group_by_key()
        .windowed_by(TimeWindows.of_size_with_no_grace(100)).count(store="counts")
        # Kafka walks up through these to the windowed aggregation for the grace
        .filter(lambda w, v: v >= 1).map_values(lambda v: v * 10, store=Materialized.as_("m").with_value_serde(I64))
        .suppress(Suppressed.until_window_closes(BufferConfig.unbounded()))
        .to_stream().map(flat).to("out", key_serde=S, value_serde=I64))
    with TopologyTestDriver(b.build(), CONFIG) as d:
        inp = d.create_input_topic("in", S, S)
        inp.pipe_input("a", "v", timestamp=10)
        inp.pipe_input("a", "v", timestamp=20)
        inp.pipe_input("b", "v", timestamp=100)  # stream time 100 closes [0, 100): a's final count, 2 * 10
        assert out_records(d, I64) == [("a@0/100", 20, 20)]
