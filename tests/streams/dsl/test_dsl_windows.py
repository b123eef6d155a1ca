"""Window specs: Kafka's assignment rules and validation (expected values derived by hand)."""

import datetime

import pytest

from streams.dsl.windows import (
    EmitStrategy,
    InvalidWindowsError,
    JoinWindows,
    SessionWindows,
    SlidingWindows,
    TimeWindows,
    Window,
    Windowed,
)


def test_tumbling_window_for_timestamp():
    w = TimeWindows.of_size_with_no_grace(10)
    assert w.windows_for(0) == {0: Window(0, 10)}
    assert w.windows_for(9) == {0: Window(0, 10)}
    assert w.windows_for(10) == {10: Window(10, 20)}  # end is exclusive
    assert w.windows_for(25) == {20: Window(20, 30)}
    assert w.size() == 10 and w.grace_period_ms() == 0 and w.is_tumbling


def test_hopping_windows_for_timestamp():
    # size 10, advance 5: a record at 12 is in [5,15) and [10,20)
    w = TimeWindows.of_size_and_grace(10, 3).advance_by(5)
    assert w.windows_for(12) == {5: Window(5, 15), 10: Window(10, 20)}
    # exactly on a boundary: 15 is in [10,20) and [15,25), not [5,15)
    assert w.windows_for(15) == {10: Window(10, 20), 15: Window(15, 25)}
    # near zero: no negative starts
    assert w.windows_for(3) == {0: Window(0, 10)}
    assert not w.is_tumbling and w.grace_period_ms() == 3


def test_hopping_uneven_advance():
    # size 10, advance 3: starts are multiples of 3 with 11 - 10 < start <= 11 -> 3, 6, 9
    w = TimeWindows.of_size_with_no_grace(10).advance_by(3)
    assert list(w.windows_for(11)) == [3, 6, 9]
    assert w.windows_for(11)[9] == Window(9, 19)


def test_durations_accept_timedelta():
    w = TimeWindows.of_size_and_grace(datetime.timedelta(minutes=5), datetime.timedelta(seconds=30))
    assert (w.size_ms, w.advance_ms, w.grace_ms) == (300_000, 300_000, 30_000)
    assert w == TimeWindows.of_size_and_grace(300_000, 30_000)
    assert hash(w) == hash(TimeWindows.of_size_and_grace(300_000, 30_000))
    s = SessionWindows.of_inactivity_gap_and_grace(datetime.timedelta(seconds=2), 0)
    assert s.inactivity_gap() == 2000


@pytest.mark.parametrize("call, word", [
    (lambda: TimeWindows.of_size_with_no_grace(0), "size"),
    (lambda: TimeWindows.of_size_with_no_grace(-1), "size"),
    (lambda: TimeWindows.of_size_and_grace(10, -1), "grace"),
    (lambda: TimeWindows.of_size_with_no_grace(10).advance_by(11), "advance"),
    (lambda: TimeWindows.of_size_with_no_grace(10).advance_by(0), "advance"),
    (lambda: TimeWindows.of_size_with_no_grace("10"), "size"),
    (lambda: TimeWindows.of_size_with_no_grace(True), "size"),
    (lambda: SlidingWindows.of_time_difference_with_no_grace(-1), "time_difference"),
    (lambda: SlidingWindows.of_time_difference_and_grace(5, -1), "grace"),
    (lambda: SessionWindows.of_inactivity_gap_with_no_grace(0), "gap"),
    (lambda: SessionWindows.of_inactivity_gap_and_grace(5, -2), "grace"),
    (lambda: JoinWindows.of_time_difference_with_no_grace(-1), "before"),
    (lambda: JoinWindows.of_time_difference_and_grace(5, -1), "grace"),
    (lambda: JoinWindows.of_time_difference_with_no_grace(5).before(-6), "before"),
    (lambda: JoinWindows.of_time_difference_with_no_grace(5).after(1.5), "after"),
])
def test_bad_arguments_are_typed_and_named(call, word):
    with pytest.raises(InvalidWindowsError, match=word):
        call()
    assert issubclass(InvalidWindowsError, ValueError)


def test_sliding_windows():
    w = SlidingWindows.of_time_difference_and_grace(10, 5)
    assert (w.size(), w.grace_period_ms()) == (10, 5)
    assert SlidingWindows.of_time_difference_with_no_grace(0).time_difference_ms == 0  # Kafka allows 0


def test_join_windows_before_after():
    j = JoinWindows.of_time_difference_and_grace(10, 2)
    assert (j.before_ms, j.after_ms, j.grace_ms, j.size()) == (10, 10, 2, 20)
    j2 = j.before(3).after(7)
    assert (j2.before_ms, j2.after_ms, j2.grace_ms) == (3, 7, 2)
    assert (j.before_ms, j.after_ms) == (10, 10)  # immutable
    # a negative bound is fine while before + after >= 0 (Kafka)
    assert JoinWindows.of_time_difference_with_no_grace(5).before(-5).size() == 0
    with pytest.raises(AttributeError):
        j.before_ms = 1


def test_emit_strategy():
    assert EmitStrategy.on_window_close().emits_on_close
    assert not EmitStrategy.on_window_update().emits_on_close
    assert EmitStrategy.on_window_update() == EmitStrategy.on_window_update()
    assert EmitStrategy.on_window_close() != EmitStrategy.on_window_update()


def test_windowed_value_semantics_and_str():
    a = Windowed("alice", Window(0, 10))
    b = Windowed("alice", Window(0, 10))
    assert a == b and hash(a) == hash(b) and {a: 1}[b] == 1
    assert a != Windowed("alice", Window(0, 20))
    assert str(a) == "[alice@0/10]"
    assert a.key == "alice" and a.window.start == 0 and a.window.end == 10


def test_one_window_definition():
    import state.window
    import streams
    import streams.dsl
    assert streams.dsl.Window is state.window.Window is streams.Window
    assert streams.dsl.Windowed is state.window.Windowed is streams.Windowed


def test_window_closed_rule():
    # [0,10) with grace 5 closes when stream time reaches 15
    from streams.dsl.windows import window_closed
    assert not window_closed(10, 5, 14)
    assert window_closed(10, 5, 15)


def test_late_record_reporter_counts_every_drop_and_warns_once_per_window(caplog):
    import logging

    from streams.dsl.windows import LateRecordReporter
    from streams.metrics import MetricsRegistry, task_dropped_records_sensor

    reg = MetricsRegistry()
    reporter = LateRecordReporter(task_dropped_records_sensor(reg, "t1", "0_0"), "0_0")
    with caplog.at_level(logging.WARNING, logger="streams.dsl.windows"):
        reporter.report("a", 3, Window(0, 10), 10, 20)
        reporter.report("b", 4, Window(0, 10), 10, 20)
        reporter.report("a", 12, Window(10, 20), 20, 30)
    assert reg.value("dropped-records-total", task_id="0_0") == 3
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 2
    assert "window=[0,10)" in warnings[0] and "streamTime=[20]" in warnings[0]
