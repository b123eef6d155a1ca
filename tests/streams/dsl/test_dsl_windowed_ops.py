"""windowed_by(TimeWindows | SlidingWindows | SessionWindows) count/reduce/aggregate on the
TopologyTestDriver, expected outputs derived by hand from Kafka's KStreamWindowAggregate,
KStreamSlidingWindowAggregate and KStreamSessionWindowAggregate."""

import pytest

from streams import StreamsBuilder, serdes
from streams.dsl import EmitStrategy, Materialized, SessionWindows, SlidingWindows, TimeWindows, Window, Windowed
from streams.errors import TopologyError
from streams.testing import TopologyTestDriver

S = serdes.STRING
I64 = serdes.INT64
CONFIG = {"application.id": "win", "default.key.serde": "string", "default.value.serde": "string",
          "__emit.interval.ms.kstreams.windowed.aggregation__": 0}


def flat(w, v):
    return f"{w.key}@{w.window.start}/{w.window.end}", v


def out_records(d, serde=I64):
    return [(r.key, r.value, r.timestamp) for r in d.create_output_topic("out", S, serde).read_records_to_list()]


def metric(d, name):
    return sum(m.value for m in d.metrics() if m.name == name)


def test_tumbling_count_with_grace_out_of_order_and_late_records():
    b = StreamsBuilder()
    (b.stream("in", key_serde=S, value_serde=S).group_by_key()
        .windowed_by(TimeWindows.of_size_and_grace(10, 5))
        .count(store=Materialized.as_("counts").with_caching_disabled())
        .to_stream().map(flat).to("out", key_serde=S, value_serde=I64))
    with TopologyTestDriver(b.build(), CONFIG) as d:
        inp = d.create_input_topic("in", S, S)
        for t in (1, 5, 12, 3, 20, 4, 14):
            inp.pipe_input("k", "v", timestamp=t)
        # t=3: stream time 12, window [0,10) closes at 10 + 5 > 12: still open (its timestamp stays 5)
        # t=4: stream time 20, 10 + 5 <= 20: late, dropped and counted
        assert out_records(d) == [("k@0/10", 1, 1), ("k@0/10", 2, 5), ("k@10/20", 1, 12), ("k@0/10", 3, 5),
                                  ("k@20/30", 1, 20), ("k@10/20", 2, 14)]
        assert metric(d, "dropped-records-total") == 1
        assert metric(d, "process-total") == 7
        # retention is size + grace = 15: at stream time 20 the window [0,10) has expired
        store = d.get_window_store("counts")
        with store.fetch("k", 0, 100) as it:
            assert list(it) == [(10, 2), (20, 1)]
        with store.all() as it:
            assert list(it) == [(Windowed("k", Window(10, 20)), 2), (Windowed("k", Window(20, 30)), 1)]


def test_hopping_windows_each_record_updates_every_window_containing_it():
    b = StreamsBuilder()
    (b.stream("in", key_serde=S, value_serde=S).group_by_key()
        .windowed_by(TimeWindows.of_size_with_no_grace(10).advance_by(5))
        .reduce(lambda a, v: a + v, store=Materialized.as_("r").with_caching_disabled())
        .to_stream().map(flat).to("out", key_serde=S, value_serde=S))
    with TopologyTestDriver(b.build(), CONFIG) as d:
        inp = d.create_input_topic("in", S, S)
        inp.pipe_input("k", "a", timestamp=7)
        inp.pipe_input("k", "b", timestamp=12)
        assert out_records(d, S) == [("k@0/10", "a", 7), ("k@5/15", "a", 7), ("k@5/15", "ab", 12),
                                     ("k@10/20", "b", 12)]


def test_emit_on_window_close_gives_one_final_result_per_window():
    b = StreamsBuilder()
    (b.stream("in", key_serde=S, value_serde=S).group_by_key()
        .windowed_by(TimeWindows.of_size_with_no_grace(10))
        .emit_strategy(EmitStrategy.on_window_close())
        .count()
        .to_stream().map(flat).to("out", key_serde=S, value_serde=I64))
    with TopologyTestDriver(b.build(), CONFIG) as d:
        inp = d.create_input_topic("in", S, S)
        inp.pipe_input("k", "v", timestamp=1)
        inp.pipe_input("k", "v", timestamp=5)
        assert out_records(d) == []
        inp.pipe_input("k", "v", timestamp=12)  # stream time 12 closes [0,10)
        inp.pipe_input("k", "v", timestamp=25)  # closes [10,20)
        assert out_records(d) == [("k@0/10", 2, 5), ("k@10/20", 1, 12)]


def test_session_windows_merge_and_emit_a_tombstone_per_merged_away_session():
    b = StreamsBuilder()
    (b.stream("in", key_serde=S, value_serde=S).group_by_key()
        .windowed_by(SessionWindows.of_inactivity_gap_and_grace(5, 100))
        .count(store=Materialized.as_("sessions").with_caching_disabled())
        .to_stream().map(flat).to("out", key_serde=S, value_serde=I64))
    with TopologyTestDriver(b.build(), CONFIG) as d:
        inp = d.create_input_topic("in", S, S)
        for t in (0, 10, 4, 7):
            inp.pipe_input("k", "v", timestamp=t)
        assert out_records(d) == [
            ("k@0/0", 1, 0), ("k@10/10", 1, 10),
            ("k@0/0", None, 0), ("k@0/4", 2, 4),                          # t=4 merges [0,0]
            ("k@0/4", None, 4), ("k@10/10", None, 10), ("k@0/10", 4, 10),  # t=7 bridges both
        ]
        with d.get_session_store("sessions").fetch("k") as it:
            assert list(it) == [(Windowed("k", Window(0, 10)), 4)]


def test_sliding_windows_create_left_and_right_windows():
    b = StreamsBuilder()
    (b.stream("in", key_serde=S, value_serde=S).group_by_key()
        .windowed_by(SlidingWindows.of_time_difference_and_grace(10, 100))
        .count(store=Materialized.as_("sliding").with_caching_disabled())
        .to_stream().map(flat).to("out", key_serde=S, value_serde=I64))
    with TopologyTestDriver(b.build(), CONFIG) as d:
        inp = d.create_input_topic("in", S, S)
        inp.pipe_input("k", "v", timestamp=20)
        inp.pipe_input("k", "v", timestamp=25)
        # t=25: the right window of the record at 20 ([21,31]) then its own left window [15,25]
        assert out_records(d) == [("k@10/20", 1, 20), ("k@21/31", 1, 25), ("k@15/25", 2, 25)]


def test_windowed_aggregate_with_caching_gives_the_same_final_values():
    finals = []
    for caching in (True, False):
        b = StreamsBuilder()
        mat = Materialized.as_("agg").with_value_serde(S)
        (b.stream("in", key_serde=S, value_serde=S).group_by_key()
            .windowed_by(TimeWindows.of_size_with_no_grace(10))
            .aggregate(lambda: "", lambda k, v, agg: agg + v, store=mat if caching else mat.with_caching_disabled())
            .to_stream().map(flat).to("out", key_serde=S, value_serde=S))
        with TopologyTestDriver(b.build(), CONFIG) as d:
            inp = d.create_input_topic("in", S, S)
            for t, v in ((1, "a"), (2, "b"), (11, "c"), (3, "d")):
                inp.pipe_input("k", v, timestamp=t)
            finals.append(d.create_output_topic("out", S, S).read_key_values_to_map())
    assert finals[0] == finals[1] == {"k@0/10": "ab", "k@10/20": "c"}  # t=3 is late (no grace)


def test_windowed_bad_inputs():
    grouped = StreamsBuilder().stream("in", key_serde=S, value_serde=S).group_by_key()
    with pytest.raises(TopologyError, match="windowed_by needs"):
        grouped.windowed_by(10)
    with pytest.raises(TopologyError, match="retention period"):
        grouped.windowed_by(TimeWindows.of_size_and_grace(10, 5)).count(
            store=Materialized.as_("x").with_retention(12))


def test_session_windows_emit_on_window_close():
    b = StreamsBuilder()
    (b.stream("in", key_serde=S, value_serde=S).group_by_key()
        .windowed_by(SessionWindows.of_inactivity_gap_with_no_grace(5))
        .emit_strategy(EmitStrategy.on_window_close())
        .reduce(lambda a, v: a + v)
        .to_stream().map(flat).to("out", key_serde=S, value_serde=S))
    with TopologyTestDriver(b.build(), CONFIG) as d:
        inp = d.create_input_topic("in", S, S)
        inp.pipe_input("k", "a", timestamp=0)
        inp.pipe_input("k", "b", timestamp=3)   # merges into [0,3]; nothing emitted yet
        assert out_records(d, S) == []
        inp.pipe_input("k", "c", timestamp=20)  # stream time 20 > 3: [0,3] closed, emitted once
        assert out_records(d, S) == [("k@0/3", "ab", 3)]
