"""Suppressed / BufferConfig value objects and the suppress processor logic (Kafka's
KTableSuppressProcessor rules; expected emissions derived by hand)."""

import datetime

import pytest

from state.suppress_buffer import BufferedContext, InMemoryTimeOrderedKeyValueBuffer
from streams import serdes
from streams.dsl import Window, Windowed
from streams.dsl.suppressed import (
    BufferConfig,
    BufferFullStrategy,
    InvalidSuppressedError,
    SuppressProcessorLogic,
    Suppressed,
    SuppressionBufferFullError,
)
from streams.dsl.windows import InvalidWindowsError


def test_buffer_config_factories():
    u = BufferConfig.unbounded()
    assert u.is_unbounded and u.is_strict and u.full_strategy == BufferFullStrategy.SHUT_DOWN
    r = BufferConfig.max_records(3)
    assert r.max_records_limit == 3 and r.max_bytes_limit is None
    assert r.full_strategy == BufferFullStrategy.EMIT and not r.is_strict  # Kafka's default: emit early
    assert r.shut_down_when_full().is_strict
    assert r.shut_down_when_full().emit_early_when_full() == r
    b = BufferConfig.max_bytes(100).with_max_records(5)
    assert (b.max_records_limit, b.max_bytes_limit) == (5, 100)
    assert b.is_over(6, 0) and b.is_over(0, 101) and not b.is_over(5, 100)
    assert b.with_no_bound().is_unbounded
    assert BufferConfig.unbounded().with_logging_disabled().logging_enabled is False
    assert BufferConfig.unbounded().with_logging_enabled({"a": "1"}).log_config == {"a": "1"}
    with pytest.raises(AttributeError):
        u.max_records_limit = 1


@pytest.mark.parametrize("call, word", [
    (lambda: BufferConfig.max_records(-1), "max_records"),
    (lambda: BufferConfig.max_records("3"), "max_records"),
    (lambda: BufferConfig.max_bytes(-5), "max_bytes"),
    (lambda: BufferConfig.max_bytes(True), "max_bytes"),
    (lambda: BufferConfig.unbounded().emit_early_when_full(), "unbounded"),
    (lambda: Suppressed.until_window_closes(BufferConfig.max_records(3)), "strict"),
    (lambda: Suppressed.until_window_closes("unbounded"), "BufferConfig"),
    (lambda: Suppressed.until_time_limit(-1, BufferConfig.unbounded()), "negative"),
    (lambda: Suppressed.until_time_limit(5, None), "BufferConfig"),
])
def test_bad_arguments(call, word):
    with pytest.raises(InvalidSuppressedError, match=word):
        call()


def test_suppressed_values():
    final = Suppressed.until_window_closes(BufferConfig.unbounded())
    assert final.is_final_results and final.time_definition == "window_end" and final.safe_to_drop_tombstones
    assert final.suppress_duration_ms(grace_ms=7) == 7
    with pytest.raises(InvalidSuppressedError, match="windowed"):
        final.suppress_duration_ms()
    assert Suppressed.until_window_closes(BufferConfig.max_records(2).shut_down_when_full()).is_final_results
    limit = Suppressed.until_time_limit(datetime.timedelta(seconds=1), BufferConfig.max_records(10))
    assert limit.time_definition == "record_time" and not limit.safe_to_drop_tombstones
    assert limit.suppress_duration_ms(grace_ms=99) == 1000
    assert limit == Suppressed.until_time_limit(1000, BufferConfig.max_records(10))
    assert limit.with_name("sup").store_name("KTABLE-SUPPRESS-0000000004") == "sup-store"
    assert limit.store_name("KTABLE-SUPPRESS-0000000004") == "KTABLE-SUPPRESS-0000000004-store"
    with pytest.raises(InvalidWindowsError):
        Suppressed.until_time_limit("1s", BufferConfig.unbounded())


def make_logic(suppressed, grace_ms=None, key_serde=None):
    buf = InMemoryTimeOrderedKeyValueBuffer("sup", logging_enabled=False)
    buf.open()
    out = []
    logic = SuppressProcessorLogic(
        suppressed, buf, key_serde or serdes.time_windowed(serdes.STRING, 10), serdes.INT64,
        lambda k, new, old, ts, c: out.append((k, new, old, ts)), grace_ms=grace_ms)
    return logic, out


def w(key, start, size=10):
    return Windowed(key, Window(start, start + size))


def c(ts):
    return BufferedContext(ts, 0, "in", 0, ())


def test_until_window_closes_emits_once_per_window_after_end_plus_grace():
    logic, out = make_logic(Suppressed.until_window_closes(BufferConfig.unbounded()), grace_ms=5)
    logic.process(w("a", 0), 1, None, c(1))
    logic.process(w("a", 0), 2, 1, c(4))
    logic.process(w("b", 0), 1, None, c(9))
    logic.process(w("a", 10), 1, None, c(12))
    assert out == []  # stream time 12 < window end 10 + grace 5
    logic.process(w("a", 10), 2, 1, c(14))
    assert out == []
    logic.process(w("c", 10), 1, None, c(15))  # stream time 15 >= 10 + 5: [0,10) closes
    # one final result per key of [0,10): the latest update (new, old) with its timestamp
    assert out == [(w("a", 0), 2, 1, 4), (w("b", 0), 1, None, 9)]
    out.clear()
    logic.process(w("a", 0), 3, 2, c(3))  # a late update of a closed window is emitted right away
    assert out == [(w("a", 0), 3, 2, 3)]
    out.clear()
    logic.process(w("c", 20), 1, None, c(25))  # 25 >= 20 + 5 closes [10,20)
    assert out == [(w("a", 10), 2, 1, 14), (w("c", 10), 1, None, 15)]


def test_final_results_drop_tombstones():
    logic, out = make_logic(Suppressed.until_window_closes(BufferConfig.unbounded()), grace_ms=0)
    logic.process(w("a", 0), 1, None, c(1))
    logic.process(w("a", 0), None, 1, c(2))  # deleted before the window closed
    logic.process(w("b", 10), 1, None, c(10))
    assert out == []


def test_until_time_limit_timer_starts_when_key_is_first_buffered():
    logic, out = make_logic(Suppressed.until_time_limit(10, BufferConfig.unbounded()), key_serde=serdes.STRING)
    logic.process("a", 1, None, c(0))
    logic.process("a", 2, 1, c(8))     # still waits from time 0
    logic.process("b", 1, None, c(9))
    assert out == []
    logic.process("c", 1, None, c(10))  # 10 - 10 >= 0: "a" emitted with its latest update
    assert out == [("a", 2, 1, 8)]  # Kafka's eviction carries the latest update's old value
    logic.process("b", None, 1, c(19))  # tombstones are forwarded for time limits
    assert out[1:] == [("b", None, 1, 19)]  # "b" was first buffered at 9 <= 19 - 10; "c" (10) waits


def test_emit_early_when_full_and_shut_down_when_full():
    logic, out = make_logic(Suppressed.until_time_limit(100, BufferConfig.max_records(2)), key_serde=serdes.STRING)
    for i, k in enumerate("abc"):
        logic.process(k, i, None, c(i))
    assert out == [("a", 0, None, 0)]  # the oldest goes out to get back to 2 records
    strict = Suppressed.until_window_closes(BufferConfig.max_records(1).shut_down_when_full())
    logic2, _ = make_logic(strict, grace_ms=0)
    logic2.process(w("a", 0), 1, None, c(1))
    with pytest.raises(SuppressionBufferFullError, match=r"\[2/1\] records"):
        logic2.process(w("b", 0), 1, None, c(2))


def test_final_results_need_windowed_keys():
    logic, _ = make_logic(Suppressed.until_window_closes(BufferConfig.unbounded()), grace_ms=0,
                          key_serde=serdes.STRING)
    with pytest.raises(InvalidSuppressedError, match="Windowed"):
        logic.process("plain", 1, None, c(1))


def test_view_value_shows_prior_while_buffered():
    logic, out = make_logic(Suppressed.until_time_limit(10, BufferConfig.unbounded()), key_serde=serdes.STRING)
    parent = {"a": 5, "b": 9}
    logic.process("a", 5, 1, c(0))
    logic.process("a", 6, 5, c(1))
    assert logic.view_value("a", parent.get) == 1  # downstream has seen 1 (the prior value) so far
    assert logic.view_value("b", parent.get) == 9  # not buffered: the parent's value
    logic.process("b", 1, None, c(10))  # "a" emitted
    assert logic.view_value("a", parent.get) == 5


class _Logged:
    """The StoreContext of a logged buffer: what it writes to its changelog."""

    application_id = "app"
    task_id = "0_0"

    def __init__(self):
        self.changes = []

    def register(self, store, restore_callback, *, logged):
        self.restore = restore_callback

    def log_change(self, name, key, value, timestamp, headers=None):
        self.changes.append((key, value))


def logged_logic(suppressed, grace_ms=None, key_serde=None, value_serde=serdes.INT64):
    buf = InMemoryTimeOrderedKeyValueBuffer("sup", logging_enabled=True)
    ctx = _Logged()
    buf.init(ctx)
    out = []
    logic = SuppressProcessorLogic(
        suppressed, buf, key_serde or serdes.time_windowed(serdes.STRING, 10), value_serde,
        lambda k, new, old, ts, c: out.append((k, new, old, ts)), grace_ms=grace_ms)
    return logic, out, buf, ctx


def test_an_update_due_on_arrival_goes_out_unbuffered_and_leaves_no_changelog_record():
    logic, out, buf, ctx = logged_logic(Suppressed.until_window_closes(BufferConfig.unbounded()), grace_ms=0)
    logic.process(w("a", 20), 1, None, c(25))  # buffered: [20,30) is open at stream time 25
    logic.process(w("b", 0), 4, 3, c(9))       # [0,10) closed at 25, nothing due before it: out at once
    assert out == [(w("b", 0), 4, 3, 9)] and buf.num_records() == 1
    buf.flush()
    key_a = serdes.time_windowed(serdes.STRING, 10).serialize(w("a", 20))
    assert [k for k, _ in ctx.changes] == [key_a]  # the buffered one only; b never had a value logged
    logic.process(w("c", 30), 1, None, c(35))  # stream time 35 closes [20,30): a goes out, c waits
    assert out[1:] == [(w("a", 20), 1, None, 25)]
    ctx.changes.clear()
    buf.flush()
    changes = dict(ctx.changes)
    key_c = serdes.time_windowed(serdes.STRING, 10).serialize(w("c", 30))
    assert sorted(changes) == sorted([key_a, key_c])
    assert changes[key_a] is None and changes[key_c] is not None  # a's value was logged: a tombstone now
    # an update due on arrival while an earlier one is due too takes its turn in the buffer's order
    logic.process(w("d", 30), 2, None, c(36))
    logic.process(w("b", 0), 5, 4, c(50))
    assert out[2:] == [(w("b", 0), 5, 4, 50), (w("c", 30), 1, None, 35), (w("d", 30), 2, None, 36)]


def test_a_key_buffered_at_an_earlier_time_keeps_its_time():
    # record time: "a" first buffered at 10 stays due at 10 + 10, even when an older update of it
    # arrives after stream time passed its own limit (Kafka keeps a buffered key's time)
    logic, out, buf, _ = logged_logic(Suppressed.until_time_limit(10, BufferConfig.unbounded()),
                                      key_serde=serdes.STRING)
    logic.process("a", 1, None, c(10))
    logic.process("b", 1, None, c(15))
    logic.process("a", 2, 1, c(3))   # 3 <= 15 - 10, but "a" is buffered since 10: it waits
    assert out == []
    logic.process("c", 1, None, c(20))
    assert out == [("a", 2, 1, 3)]


def test_emitted_values_are_the_buffered_objects_only_when_they_cannot_change():
    logic, out, _, _ = logged_logic(Suppressed.until_window_closes(BufferConfig.unbounded()), grace_ms=0)
    key = w("a", 0)
    logic.process(key, 7, None, c(5))
    logic.process(w("z", 10), 1, None, c(10))
    assert out[0][0] is key  # an immutable key and counts: emitted as buffered
    json = serdes.serde_from_config({"default.value.serde": "json"}, "default.value.serde")
    logic, out, _, _ = logged_logic(Suppressed.until_window_closes(BufferConfig.unbounded()), grace_ms=0,
                                    value_serde=json)
    value = [1, 2]
    logic.process(key, value, None, c(5))
    value.append(3)  # changed after it was buffered: the buffer holds its bytes
    logic.process(w("z", 10), [0], None, c(10))
    assert out[0][1] == [1, 2] and out[0][1] is not value
