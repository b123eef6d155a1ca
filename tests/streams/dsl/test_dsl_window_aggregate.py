"""Windowed aggregation logic on real in-memory stores, with expected outputs derived by hand from
Kafka's KStreamWindowAggregate / KStreamSessionWindowAggregate rules."""

import pytest

from streams import serdes
from streams.dsl import EmitStrategy, Materialized, SessionWindows, TimeWindows, Window, Windowed
from streams.dsl.materialized import session_store_builder, window_store_builder
from streams.dsl.window_aggregate import SessionWindowAggregateLogic, TimeWindowAggregateLogic
from streams.dsl.windows import LateRecordReporter
from streams.metrics import MetricsRegistry, task_dropped_records_sensor



class Context:
    """The StoreContext an in-memory, unlogged store needs."""

    application_id = "app"
    config = {}

    def __init__(self, task_dir):
        self.task_dir = task_dir
        self.registered = []

    def store_dir(self, name):
        return self.task_dir / name

    def register(self, store, restore_callback, *, logged):
        self.registered.append(store.name)

    def log_change(self, *args, **kwargs):
        raise AssertionError("unlogged stores must not log")


@pytest.fixture
def reg():
    return MetricsRegistry()


def opened(builder, tmp_path):
    store = builder.build()
    store.init(Context(tmp_path))
    return store


def uncached(name, in_memory, retention):
    """Materialized.as_(name), uncached and unlogged, in memory and with a retention if asked."""
    mat = Materialized.as_(name).with_caching_disabled().with_logging_disabled()
    if in_memory:
        mat = mat.with_in_memory_store()
    return mat if retention is None else mat.with_retention(retention)


def count_logic(tmp_path, reg, windows, retention=None, in_memory=True, **kw):
    mat = uncached("agg", in_memory, retention)
    # final results on window close come from a time-ordered store, as the DSL builds it
    store = opened(window_store_builder(mat, "agg", windows, serdes.STRING, serdes.INT64, timestamped=True,
                                        emit_strategy=kw.get("emit_strategy")), tmp_path)
    out = []
    late = LateRecordReporter(task_dropped_records_sensor(reg, "t", "0_0"), "0_0")
    logic = TimeWindowAggregateLogic(windows, store, lambda: 0, lambda k, v, agg: agg + 1,
                                     lambda k, new, old, ts: out.append((k, new, old, ts)), late=late, **kw)
    return logic, out, store


def W(key, start, end):
    return Windowed(key, Window(start, end))


def test_tumbling_count_out_of_order_and_late(tmp_path, reg):
    logic, out, _ = count_logic(tmp_path, reg, TimeWindows.of_size_and_grace(10, 5), send_old_values=True)
    for key, ts in [("a", 1), ("a", 3), ("a", 12), ("a", 2), ("b", 16), ("a", 9)]:
        logic.process(key, "x", ts)
    assert out == [
        (W("a", 0, 10), 1, 0, 1),   # a new window's old value is the initializer's (Kafka)
        (W("a", 0, 10), 2, 1, 3),
        (W("a", 10, 20), 1, 0, 12),
        (W("a", 0, 10), 3, 2, 3),   # out of order but before end + grace (close time 7): kept, ts stays 3
        (W("b", 10, 20), 1, 0, 16),
        # a@9: stream time 16, close time 11 >= end 10: dropped
    ]
    assert reg.value("dropped-records-total", task_id="0_0") == 1


def test_window_end_plus_grace_boundary(tmp_path, reg):
    logic, out, _ = count_logic(tmp_path, reg, TimeWindows.of_size_and_grace(10, 5))
    logic.process("a", "x", 15)   # close time 10: [0,10) is closed exactly at end + grace
    logic.process("a", "x", 9)
    logic.process("b", "x", 14)   # close time still 10 < end 20: accepted
    assert out == [(W("a", 10, 20), 1, None, 15), (W("b", 10, 20), 1, None, 15 - 1)]
    assert reg.value("dropped-records-total", task_id="0_0") == 1


def test_hopping_updates_every_window(tmp_path, reg):
    logic, out, store = count_logic(tmp_path, reg, TimeWindows.of_size_with_no_grace(10).advance_by(5))
    logic.process("a", "x", 7)
    logic.process("a", "x", 12)
    assert out == [(W("a", 0, 10), 1, None, 7), (W("a", 5, 15), 1, None, 7),
                   (W("a", 5, 15), 2, None, 12), (W("a", 10, 20), 1, None, 12)]
    # retention = size + grace = 10: the store no longer returns [0,10) once it has seen start 10
    # (Kafka: nothing starting at or before observed - retention); that window is closed anyway
    assert [(w.window.start, v.value) for w, v in store.all()] == [(5, 2), (10, 1)]


def test_emit_on_window_close_emits_each_window_once(tmp_path, reg):
    logic, out, _ = count_logic(tmp_path, reg, TimeWindows.of_size_and_grace(10, 5),
                                emit_strategy=EmitStrategy.on_window_close())
    logic.process("a", "x", 1)
    logic.process("a", "x", 3)
    logic.process("b", "x", 12)   # close time 7: nothing closed
    assert out == []
    logic.process("c", "x", 15)   # close time 10: [0,10) closes
    assert out == [(W("a", 0, 10), 2, None, 3)]
    logic.process("a", "x", 17)   # close time 12: no new window closed
    assert len(out) == 1
    logic.process("a", "x", 4)    # late for [0,10): dropped, not emitted again
    logic.process("a", "x", 25)   # close time 20: [10,20) closes for a, b, c
    assert out[1:] == [(W("a", 10, 20), 1, None, 17), (W("b", 10, 20), 1, None, 12), (W("c", 10, 20), 1, None, 15)]
    assert reg.value("dropped-records-total", task_id="0_0") == 1


def test_emit_interval_throttles_by_wall_clock(tmp_path, reg):
    now = {"t": 0}
    logic, out, _ = count_logic(tmp_path, reg, TimeWindows.of_size_with_no_grace(10), retention=1000,
                                emit_strategy=EmitStrategy.on_window_close(), emit_interval_ms=1000,
                                wall_clock=lambda: now["t"])
    logic.process("a", "x", 1)   # uses the scan of wall-clock interval [0, 1000): nothing closed yet
    now["t"] = 1000
    logic.process("a", "x", 10)  # [0,10) closed
    assert out == [(W("a", 0, 10), 1, None, 1)]
    logic.process("a", "x", 20)  # [10,20) closed but the interval has not passed
    assert len(out) == 1
    now["t"] = 2000
    logic.process("a", "x", 21)
    assert out[1:] == [(W("a", 10, 20), 1, None, 10)]


def test_a_throttled_scan_loses_what_the_retention_passed(tmp_path, reg):
    now = {"t": 0}
    logic, out, _ = count_logic(tmp_path, reg, TimeWindows.of_size_with_no_grace(10),  # retention 10
                                emit_strategy=EmitStrategy.on_window_close(), emit_interval_ms=1000,
                                wall_clock=lambda: now["t"])
    logic.process("a", "x", 1)   # the scan of wall-clock interval [0, 1000): nothing closed yet
    logic.process("a", "x", 20)  # [0,10) closed, but the scan waits for the interval
    now["t"] = 1000
    logic.process("a", "x", 21)  # close time 21: scan [0, 11] from the store's 20 - 10 = 10 on:
    assert out == []             # [0,10) is behind the retention, never emitted (Kafka)


def test_final_results_are_scanned_after_the_put(tmp_path, reg):
    logic, out, _ = count_logic(tmp_path, reg, TimeWindows.of_size_and_grace(10, 5),  # retention 15
                                emit_strategy=EmitStrategy.on_window_close())
    logic.process("a", "x", 1)
    logic.process("a", "x", 100)  # its put (start 100) leaves [0,10) behind the retention: lost
    assert out == []
    logic.process("b", "x", 105)  # close time 100: [90,100) and before; none stored
    assert out == []


@pytest.mark.parametrize("in_memory", [False, True], ids=["rocksdb", "memory"])
def test_the_scan_includes_the_window_at_the_retention_boundary(tmp_path, reg, in_memory):
    # Kafka's time-ordered store (RocksDB) returns windows starting at observed stream time -
    # retention; a key-ordered one, and Kafka's InMemoryWindowStore (the DSL's store in memory
    # whatever the emit strategy), only after it
    logic, out, store = count_logic(tmp_path, reg, TimeWindows.of_size_with_no_grace(10),  # retention 10
                                    in_memory=in_memory, emit_strategy=EmitStrategy.on_window_close())
    logic.process("a", "x", 5)
    logic.process("a", "x", 10)   # put [10,20): scan [0, 0] from 10 - 10 = 0 on (in memory: 1 on)
    kept = [] if in_memory else [(W("a", 0, 10), 1, None, 5)]
    assert out == kept
    assert [(w.window.start, v.value) for w, v in store.all()] == ([(10, 1)] if in_memory else [(0, 1), (10, 1)])


def test_final_results_come_by_window_start_then_key(tmp_path, reg):
    logic, out, _ = count_logic(tmp_path, reg, TimeWindows.of_size_with_no_grace(10).advance_by(5), retention=100,
                                emit_strategy=EmitStrategy.on_window_close())
    logic.process("b", "x", 7)    # b: [0,10), [5,15)
    logic.process("a", "x", 8)    # a: [0,10), [5,15)
    logic.process("c", "x", 20)   # close time 20: the windows starting at 10 at the latest, by start
    assert out == [(W("a", 0, 10), 1, None, 8), (W("b", 0, 10), 1, None, 7),
                   (W("a", 5, 15), 1, None, 8), (W("b", 5, 15), 1, None, 7)]


def session_logic(tmp_path, reg, windows, in_memory=True, retention=None, **kw):
    mat = uncached("sess", in_memory, retention)
    store = opened(session_store_builder(mat, "sess", windows, serdes.STRING, serdes.INT64), tmp_path)
    out = []
    late = LateRecordReporter(task_dropped_records_sensor(reg, "t", "0_0"), "0_0")
    logic = SessionWindowAggregateLogic(windows, store, lambda: 0, lambda k, v, agg: agg + 1,
                                        lambda k, a, b: a + b, lambda k, new, old, ts: out.append((k, new, old, ts)),
                                        late=late, **kw)
    return logic, out, store


def test_sessions_merge_with_tombstones(tmp_path, reg):
    logic, out, store = session_logic(tmp_path, reg, SessionWindows.of_inactivity_gap_and_grace(5, 100),
                                      send_old_values=True)
    logic.process("a", "x", 0)
    logic.process("a", "x", 3)   # within the gap: [0,0] merges into [0,3]
    logic.process("a", "x", 20)  # a new session
    logic.process("a", "x", 10)  # a new session [10,10]
    logic.process("a", "x", 14)  # bridges [10,10] and... [20,20] is 6 away: only [10,10]
    logic.process("a", "x", 17)  # bridges [10,14] and [20,20]
    assert out == [
        (W("a", 0, 0), 1, None, 0),
        (W("a", 0, 0), None, 1, 0),       # tombstone of the merged-away session, at its end
        (W("a", 0, 3), 2, None, 3),
        (W("a", 20, 20), 1, None, 20),
        (W("a", 10, 10), 1, None, 10),
        (W("a", 10, 10), None, 1, 10),
        (W("a", 10, 14), 2, None, 14),
        (W("a", 10, 14), None, 2, 14),
        (W("a", 20, 20), None, 1, 20),
        (W("a", 10, 20), 4, None, 20),
    ]
    assert list(store.fetch("a")) == [(W("a", 0, 3), 2), (W("a", 10, 20), 4)]


def test_session_same_timestamp_updates_in_place_and_late_sessions_drop(tmp_path, reg):
    logic, out, _ = session_logic(tmp_path, reg, SessionWindows.of_inactivity_gap_with_no_grace(5))
    logic.process("a", "x", 0)
    logic.process("a", "x", 0)   # same window: no tombstone, updated
    logic.process("a", "x", 20)
    logic.process("a", "x", 10)  # [10,10] ends before stream time 20 - grace 0: dropped
    logic.process("a", "x", 16)  # merges with [20,20] (end 20 >= 16 - 5 ... start 20 <= 21)
    assert out == [(W("a", 0, 0), 1, None, 0), (W("a", 0, 0), 2, None, 0), (W("a", 20, 20), 1, None, 20),
                   (W("a", 20, 20), None, None, 20), (W("a", 16, 20), 2, None, 20)]
    assert reg.value("dropped-records-total", task_id="0_0") == 1


def test_sessions_emit_on_close(tmp_path, reg):
    # RocksDB: Kafka's time-ordered session store, whose scan of ended sessions keeps no retention
    logic, out, _ = session_logic(tmp_path, reg, SessionWindows.of_inactivity_gap_with_no_grace(5),
                                  in_memory=False, emit_strategy=EmitStrategy.on_window_close())
    logic.process("a", "x", 0)
    logic.process("a", "x", 3)   # merged into [0,3]; no tombstones with emit-on-close
    assert out == []
    logic.process("a", "x", 10)  # close time 10 - 5: [0,3] ended
    assert out == [(W("a", 0, 3), 2, None, 3)]
    logic.process("b", "x", 20)  # close time 20 - 5: [10,10] ended
    assert out[1:] == [(W("a", 10, 10), 1, None, 10)]


def test_sessions_emit_on_close_in_memory_within_the_retention(tmp_path, reg):
    # in memory (Kafka's InMemorySessionStore), the scan keeps only the sessions ending after
    # observed stream time - retention; gap 5, grace 2, retention 10 (with the default gap +
    # grace, a session is behind the retention as soon as it closes)
    logic, out, _ = session_logic(tmp_path, reg, SessionWindows.of_inactivity_gap_and_grace(5, 2), retention=10,
                                  emit_strategy=EmitStrategy.on_window_close())
    logic.process("a", "x", 0)
    logic.process("a", "x", 3)   # [0,3]
    logic.process("b", "x", 11)  # close time 11 - 7 = 4: [0,3] ended and ends after 11 - 10: emitted
    assert out == [(W("a", 0, 3), 2, None, 3)]
    logic.process("c", "x", 30)  # close time 23: [11,11] ended but ends before 30 - 10: lost
    assert out[1:] == []


def sliding_logic(tmp_path, reg, windows, **kw):
    from streams.dsl.window_aggregate import SlidingWindowAggregateLogic

    mat = uncached("slide", True, None)
    store = opened(window_store_builder(mat, "slide", windows, serdes.STRING, serdes.INT64, timestamped=True),
                   tmp_path)
    out = []
    late = LateRecordReporter(task_dropped_records_sensor(reg, "t", "0_0"), "0_0")
    logic = SlidingWindowAggregateLogic(windows, store, lambda: 0, lambda k, v, agg: agg + 1,
                                        lambda k, new, old, ts: out.append((k, new, ts)), late=late, **kw)
    return logic, out, store


def test_sliding_left_and_right_windows(tmp_path, reg):
    from streams.dsl import SlidingWindows

    logic, out, store = sliding_logic(tmp_path, reg, SlidingWindows.of_time_difference_and_grace(10, 100))
    logic.process("a", "x", 15)
    assert out == [(W("a", 5, 15), 1, 15)]            # left window of 15
    out.clear()
    logic.process("a", "x", 20)
    assert out == [(W("a", 16, 26), 1, 20),           # right window of 15 (holds 20)
                   (W("a", 10, 20), 2, 20)]           # left window of 20 (holds 15 and 20)
    out.clear()
    logic.process("a", "x", 18)                       # out of order
    assert out == [(W("a", 16, 26), 2, 20),           # windows containing 18, latest start first
                   (W("a", 10, 20), 3, 20),           # (Kafka's processReverse)
                   (W("a", 8, 18), 2, 18),            # left window of 18: 15 and 18
                   (W("a", 19, 29), 1, 20)]           # right window of 18: holds 20
    got = {(w.window.start, w.window.end): (v.value, v.timestamp) for w, v in store.all()}
    assert got == {(5, 15): (1, 15), (8, 18): (2, 18), (10, 20): (3, 20), (16, 26): (2, 20), (19, 29): (1, 20)}


def test_sliding_early_records_share_the_first_window(tmp_path, reg):
    from streams.dsl import SlidingWindows

    logic, out, _ = sliding_logic(tmp_path, reg, SlidingWindows.of_time_difference_and_grace(10, 100))
    logic.process("a", "x", 3)
    logic.process("a", "x", 5)
    assert out == [(W("a", 0, 10), 1, 3),
                   (W("a", 4, 14), 1, 5),             # right window of 3 holds 5
                   (W("a", 0, 10), 2, 5)]


def test_sliding_late_records_are_dropped(tmp_path, reg):
    from streams.dsl import SlidingWindows

    logic, out, _ = sliding_logic(tmp_path, reg, SlidingWindows.of_time_difference_with_no_grace(10))
    logic.process("a", "x", 30)
    out.clear()
    logic.process("a", "x", 19)   # 19 + 1 + 10 <= 30: every window of it is closed
    assert out == []
    logic.process("a", "x", 20)   # its left window [10,20] ends before close time 30: dropped;
    # its right window [21,31] (holding 30) is created and [20,30] (30's left window) updated
    assert out == [(W("a", 20, 30), 2, 30), (W("a", 21, 31), 1, 30)]
    assert reg.value("dropped-records-total", task_id="0_0") == 2
