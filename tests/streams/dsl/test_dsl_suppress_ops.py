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
