"""Stream-stream join logic on real stores; every expected output is derived by hand from Kafka's
KStreamKStreamJoin rules (windows [t - before, t + after], inner results at once with the larger
timestamp, left/outer results only once t + after (+ before for the right side) + grace < stream
time, right before left at one timestamp)."""

import pytest

from _join_util import Context, opened
from state.outer_join_store import OuterJoinStore, decode_key, decode_value_list, encode_key
from streams import serdes
from streams.dsl import JoinWindows
from streams.dsl.joins.stream_stream import (
    INNER, LEFT, OUTER, StreamStreamJoinLogic, join_window_store_builder, outer_join_store_builder)
from streams.dsl.store_suppliers import BuiltInDslStoreSuppliers
from streams.dsl.windows import LateRecordReporter
from streams.errors import TopologyError
from streams.metrics import MetricsRegistry, task_dropped_records_sensor


def joiner(left, right):
    return f"{left}+{right}"


def make(tmp_path, windows, join_type=INNER, persistent=False, **kw):
    reg = MetricsRegistry()
    suppliers = BuiltInDslStoreSuppliers.ROCKS_DB if persistent else BuiltInDslStoreSuppliers.IN_MEMORY
    left = opened(join_window_store_builder("left", windows, serdes.STRING, serdes.STRING, suppliers=suppliers,
                                            logging_enabled=False), tmp_path)
    right = opened(join_window_store_builder("right", windows, serdes.STRING, serdes.STRING, suppliers=suppliers,
                                             logging_enabled=False), tmp_path)
    outer = None
    if join_type != INNER:
        raw = opened(outer_join_store_builder("outer", suppliers=suppliers, logging_enabled=False), tmp_path)
        outer = OuterJoinStore(raw, serdes.STRING, serdes.STRING, serdes.STRING)
    out = []
    late = LateRecordReporter(task_dropped_records_sensor(reg, "t", "0_0"), "0_0")
    logic = StreamStreamJoinLogic(windows, left, right, joiner, lambda k, v, ts: out.append((k, v, ts)),
                                  join_type=join_type, outer_store=outer, late=late, **kw)
    return logic, out, reg, outer


def dropped(reg):
    return reg.value("dropped-records-total", task_id="0_0")


def test_inner_join_symmetric_window_and_out_of_order_records(tmp_path):
    logic, out, reg, _ = make(tmp_path, JoinWindows.of_time_difference_with_no_grace(10))
    logic.process_left("a", "A0", 0)
    logic.process_right("a", "a5", 5)         # left in [0, 15]
    logic.process_right("b", "b7", 7)
    logic.process_left("a", "A12", 12)        # right in [2, 22]
    logic.process_left("a", "A30", 30)        # right in [20, 40]: nothing
    logic.process_right("a", "a15", 15)       # its window [5, 25] ended, A12 is still retained: joined
    logic.process_right("a", "a21", 21)       # left in [11, 31]
    assert out == [("a", "A0+a5", 5), ("a", "A12+a5", 12), ("a", "A12+a15", 15), ("a", "A12+a21", 21),
                   ("a", "A30+a21", 30)]
    assert dropped(reg) == 0


def test_expired_put_is_counted_and_still_joined(tmp_path):
    # retention 20, segments of 60 s: a left record 3 segments behind the left store's time is
    # skipped by the store (counted), and still joined with what the right store holds (Kafka)
    logic, out, reg, _ = make(tmp_path, JoinWindows.of_time_difference_with_no_grace(10))
    logic.process_right("a", "r", 100)
    logic.process_left("z", "Z", 200_000)
    logic.process_left("a", "L", 95)
    assert out == [("a", "L+r", 100)]
    assert dropped(reg) == 1
    logic.process_right("a", "r2", 99)         # the left store never kept L: nothing to join
    assert len(out) == 1


def test_inner_join_before_after_asymmetry(tmp_path):
    windows = JoinWindows.of_time_difference_and_grace(10, 10).before(0)   # left t joins right [t, t + 10]
    logic, out, reg, _ = make(tmp_path, windows)
    logic.process_left("k", "L10", 10)
    logic.process_right("k", "R5", 5)         # left in [-5 -> 0, 5]: L10 is after it
    logic.process_right("k", "R15", 15)       # left in [5, 15]
    logic.process_right("k", "R25", 25)       # left in [15, 25]: nothing
    logic.process_left("k", "L20", 20)        # right in [20, 30]: R25 only
    assert out == [("k", "L10+R15", 15), ("k", "L20+R25", 25)]
    assert dropped(reg) == 0


def test_duplicates_on_one_side_all_join(tmp_path):
    logic, out, _, _ = make(tmp_path, JoinWindows.of_time_difference_with_no_grace(5))
    logic.process_left("a", "x", 3)
    logic.process_left("a", "y", 3)
    logic.process_right("a", "r", 4)
    assert out == [("a", "x+r", 4), ("a", "y+r", 4)]


def test_left_join_emits_unmatched_only_when_window_closes(tmp_path):
    logic, out, reg, outer = make(tmp_path, JoinWindows.of_time_difference_with_no_grace(10), LEFT)
    logic.process_left("a", "A0", 0)          # held
    logic.process_left("b", "B3", 3)          # held
    assert out == []
    logic.process_right("b", "b8", 8)         # joins B3 and removes it from the outer store
    assert out == [("b", "B3+b8", 8)]
    assert outer.get("b", 3, True) is None
    logic.process_left("c", "C11", 11)        # A0's window [0, 10] closed (10 < 11): emitted; C11 held
    assert out[1:] == [("a", "A0+None", 0)]
    logic.process_right("c", "c30", 30)       # C11 closes (21 < 30); c30 finds nothing, right is inner
    assert out[2:] == [("c", "C11+None", 11)]
    assert list(outer.all()) == []
    assert dropped(reg) == 0


def test_left_join_grace_holds_results_until_end_plus_grace(tmp_path):
    logic, out, _, _ = make(tmp_path, JoinWindows.of_time_difference_and_grace(10, 5), LEFT)
    logic.process_left("a", "A0", 0)
    logic.process_left("z", "Z15", 15)        # A0: 0 + 10 + 5 >= 15: still open
    assert out == []
    logic.process_right("a", "a9", 9)         # within grace: joins, no spurious A0+None
    assert out == [("a", "A0+a9", 9)]
    logic.process_left("z", "Z40", 40)        # Z15 closes (30 < 40); A0 is gone
    assert out[1:] == [("z", "Z15+None", 15)]


def test_outer_join_both_sides_and_order_at_equal_timestamps(tmp_path):
    windows = JoinWindows.of_time_difference_and_grace(5, 2)
    logic, out, reg, outer = make(tmp_path, windows, OUTER, persistent=True)
    logic.process_right("x", "r1", 1)         # held (right)
    logic.process_left("y", "l2", 2)          # held (left)
    logic.process_left("x", "l4", 4)          # right in [0, 9]: r1, removed from the outer store
    logic.process_right("x", "r4b", 4)        # left in [0, 9]: l4
    assert out == [("x", "l4+r1", 4), ("x", "l4+r4b", 4)]
    logic.process_left("z", "l10", 10)        # y@2 closes (2 + 5 + 2 < 10); z held
    assert out[2:] == [("y", "l2+None", 2)]
    logic.process_right("w", "r9", 9)         # behind stream time: no scan; held
    logic.process_right("v", "r17", 17)       # w@9 closes (16 < 17), z@10 open (17 >= 17); v held
    assert out[3:] == [("w", "None+r9", 9)]
    logic.process_left("u", "l9", 9)          # window end 14 < 17 and no match: forwarded at once
    assert out[4:] == [("u", "l9+None", 9)]
    assert dropped(reg) == 0
    logic.process_left("p", "l30", 30)        # z@10 and v@17 close
    assert out[5:] == [("z", "l10+None", 10), ("v", "None+r17", 17)]
    logic.process_right("q", "r30", 30)       # held, p@30 is still open
    logic.process_left("s", "l40", 40)        # at 30 the right record comes before the left one
    assert out[7:] == [("q", "None+r30", 30), ("p", "l30+None", 30)]
    assert [(rec.key, rec.timestamp, rec.is_left) for _, rec in outer.all()] == [("s", 40, True)]


def test_outer_store_bytes_are_kafkas(tmp_path):
    windows = JoinWindows.of_time_difference_with_no_grace(5)
    logic, _, _, outer = make(tmp_path, windows, OUTER, persistent=True)
    logic.process_left("k", "v1", 7)
    logic.process_left("k", "v2", 7)
    logic.process_right("j", "w", 7)
    with outer.store.all() as it:
        raw = list(it)
    # TimestampedKeyAndJoinSide: 8-byte BE timestamp, side byte (1 left, 0 right), key
    assert [k for k, _ in raw] == [b"\x00" * 7 + b"\x07\x00j", b"\x00" * 7 + b"\x07\x01k"]
    assert decode_key(raw[1][0]) == (7, True, b"k")
    assert raw[1][0] == encode_key(7, True, b"k")
    # ListSerde (variable size) of LeftOrRightValue: side byte + value, in arrival order
    assert raw[1][1] == b"\x01" + b"\x00\x00\x00\x02" + b"\x00\x00\x00\x03\x01v1" + b"\x00\x00\x00\x03\x01v2"
    assert decode_value_list(raw[0][1]) == [b"\x00w"]


def test_emit_interval_throttles_the_outer_scan(tmp_path):
    now = {"t": 0}
    logic, out, _, _ = make(tmp_path, JoinWindows.of_time_difference_with_no_grace(10), LEFT,
                            emit_interval_ms=1000, wall_clock=lambda: now["t"])
    logic.process_left("a", "A0", 0)
    logic.process_left("b", "B20", 20)        # scan at wall 0: A0 closed
    assert out == [("a", "A0+None", 0)]
    now["t"] = 500
    logic.process_left("c", "C40", 40)        # B20 closed, but the next scan is due at wall 1000
    assert out == [("a", "A0+None", 0)]
    now["t"] = 1000
    logic.process_left("d", "D41", 41)        # B20 closed; C40 open (50 >= 41)
    assert out[1:] == [("b", "B20+None", 20)]


def test_null_keys_and_values(tmp_path):
    logic, out, reg, _ = make(tmp_path, JoinWindows.of_time_difference_with_no_grace(10), LEFT)
    logic.process_left(None, "v", 1)          # left side of a left join: forwarded at once (KIP-962)
    logic.process_right(None, "w", 2)         # right side of a left join: dropped
    logic.process_left("k", None, 3)          # null value: dropped
    assert out == [(None, "v+None", 1)]
    assert dropped(reg) == 2
    logic, out, reg, _ = make(tmp_path / "inner", JoinWindows.of_time_difference_with_no_grace(10))
    logic.process_left(None, "v", 1)
    assert out == [] and dropped(reg) == 1
    logic, out, reg, _ = make(tmp_path / "outer", JoinWindows.of_time_difference_with_no_grace(10), OUTER)
    logic.process_right(None, "w", 1)
    assert out == [(None, "None+w", 1)]


def test_restart_recovers_the_oldest_held_record(tmp_path):
    windows = JoinWindows.of_time_difference_with_no_grace(10)
    logic, _, _, outer = make(tmp_path, windows, LEFT)
    logic.process_left("a", "A3", 3)
    out = []
    again = StreamStreamJoinLogic(windows, logic.left.this_store, logic.right.this_store, joiner,
                                  lambda k, v, ts: out.append((k, v, ts)), join_type=LEFT, outer_store=outer,
                                  late=logic.late)
    assert again.min_time == 3
    again.process_left("b", "B20", 20)
    assert out == [("a", "A3+None", 3)]


def test_bad_join_types_are_named(tmp_path):
    windows = JoinWindows.of_time_difference_with_no_grace(10)
    with pytest.raises(TopologyError, match="sideways"):
        make(tmp_path, windows, "sideways")
    with pytest.raises(TopologyError, match="left stream-stream join needs the shared outer store"):
        StreamStreamJoinLogic(windows, None, None, joiner, print, join_type=LEFT, late=None)


def test_logged_stores_restore_and_resume_emission(tmp_path):
    windows = JoinWindows.of_time_difference_with_no_grace(10)

    def build(task_dir):
        ctx = Context(task_dir, record_logs=True)
        stores = {}
        for name in ("left", "right"):
            stores[name] = join_window_store_builder(name, windows, serdes.STRING, serdes.STRING,
                                                     suppliers=BuiltInDslStoreSuppliers.IN_MEMORY).build()
            stores[name].init(ctx)
        raw = outer_join_store_builder("outer", suppliers=BuiltInDslStoreSuppliers.IN_MEMORY).build()
        raw.init(ctx)
        return ctx, stores, OuterJoinStore(raw, serdes.STRING, serdes.STRING, serdes.STRING)

    reg = MetricsRegistry()
    late = LateRecordReporter(task_dropped_records_sensor(reg, "t", "0_0"), "0_0")
    ctx, stores, outer = build(tmp_path / "0_0")
    logic = StreamStreamJoinLogic(windows, stores["left"], stores["right"], joiner, lambda *r: None,
                                  join_type=LEFT, outer_store=outer, late=late)
    logic.process_left("a", "A1", 1)
    logic.process_left("b", "B2", 2)
    logic.process_right("b", "b3", 3)           # B2 joined: its held entry is deleted
    outer_log = [(k, v) for name, k, v, _ in ctx.logged_changes if name == "outer"]
    assert outer_log == [
        (encode_key(1, True, b"a"), b"\x01\x00\x00\x00\x01\x00\x00\x00\x03\x01A1"),
        (encode_key(2, True, b"b"), b"\x01\x00\x00\x00\x01\x00\x00\x00\x03\x01B2"),
        (encode_key(2, True, b"b"), None),
    ]
    # a new task restores the changelogs and emits A1 once its window closes
    ctx2, stores2, outer2 = build(tmp_path / "0_0b")
    by_store = {}
    for name, k, v, _ in ctx.logged_changes:
        by_store.setdefault(name, []).append((k, v))
    for store, restore, _ in ctx2.registered:
        if store.name in by_store:
            restore(by_store[store.name])
    out = []
    again = StreamStreamJoinLogic(windows, stores2["left"], stores2["right"], joiner,
                                  lambda k, v, ts: out.append((k, v, ts)), join_type=LEFT, outer_store=outer2,
                                  late=late)
    assert again.min_time == 1
    again.process_right("b", "b12", 12)         # left in [2, 22]: B2 (restored); A1 closed: 1 + 10 < 12
    assert out == [("a", "A1+None", 1), ("b", "B2+b12", 12)]


def test_scan_hint_defers_emission_as_kafka(tmp_path):
    """Kafka's minTime is the last record the previous scan visited: B5 closes at 15 but is only
    emitted once stream time passes C8's close."""
    logic, out, _, _ = make(tmp_path, JoinWindows.of_time_difference_with_no_grace(10), LEFT)
    for key, ts in [("a", 0), ("b", 5), ("c", 8)]:
        logic.process_left(key, key.upper(), ts)
    logic.process_left("d", "D", 11)          # A0 emitted; B5, C8 visited open: hint 8
    assert out == [("a", "A+None", 0)]
    logic.process_left("e", "E", 16)          # 8 + 10 >= 16: no scan, though B5 closed at 15
    assert len(out) == 1
    logic.process_left("f", "F", 19)          # 8 + 10 < 19: B5 and C8 go out
    assert out[1:] == [("b", "B+None", 5), ("c", "C+None", 8)]


def test_kafka_left_join_duplicates(tmp_path):
    """Kafka's KStreamKStreamLeftJoinTest.testLeftJoinDuplicates, same inputs and outputs."""
    logic, out, _, _ = make(tmp_path, JoinWindows.of_time_difference_and_grace(100, 10), LEFT)
    logic.process_left("0", "A0", 0)
    logic.process_left("0", "A0-0", 0)
    logic.process_right("1", "a0", 111)
    logic.process_right("2", "dummy", 500)
    assert out == [("0", "A0+None", 0), ("0", "A0-0+None", 0)]
    logic.process_left("2", "A2", 1000)
    logic.process_left("2", "A2-0", 1000)
    logic.process_right("2", "a2", 1001)
    assert out[2:] == [("2", "A2+a2", 1001), ("2", "A2-0+a2", 1001)]
    logic.process_right("3", "a3", 315)       # expired; A2, A2-0 were joined: nothing more
    assert len(out) == 4


def test_kafka_left_joined_records_with_zero_after_are_emitted(tmp_path):
    """Kafka's KStreamKStreamLeftJoinTest.testLeftJoinedRecordsWithZeroAfterAreEmitted: a left
    record's window [t - 100, t] closes at once, yet a right record inside it still joins it
    while the right record's own window is open."""
    windows = JoinWindows.of_time_difference_with_no_grace(100).after(0)
    logic, out, _, _ = make(tmp_path, windows, LEFT)
    keys = ["0", "1", "2", "3"]
    for i, key in enumerate(keys):
        logic.process_left(key, "A" + key, 1000 + i)
    assert out == [("0", "A0+None", 1000), ("1", "A1+None", 1001), ("2", "A2+None", 1002)]
    out.clear()
    expected = {999: "0123", 1000: "0123", 1001: "123", 1002: "23", 1003: "3", 1100: ""}
    for (ts, joined), prefix in zip(expected.items(), "abcdef", strict=True):
        for key in keys:
            logic.process_right(key, prefix + key, ts)
        assert out == [(k, f"A{k}+{prefix}{k}", 1000 + int(k)) for k in joined], ts
        out.clear()


def test_kafka_grace_period(tmp_path):
    """Kafka's KStreamKStreamLeftJoinTest.testGracePeriod."""
    logic, out, _, _ = make(tmp_path, JoinWindows.of_time_difference_and_grace(100, 10), LEFT)
    logic.process_left("0", "A0", 0)
    logic.process_left("1", "A1", 0)
    for key in "0123":
        logic.process_right(key, "a" + key, 101)
    assert out == []
    logic.process_right("0", "dummy", 1201)
    assert out == [("0", "A0+None", 0), ("1", "A1+None", 0)]


def test_kafka_should_not_emit_left_join_result_for_asymmetric_window(tmp_path):
    """Kafka's KStreamKStreamLeftJoinTest.shouldNotEmitLeftJoinResultForAsymmetricWindow."""
    logic, out, _, _ = make(tmp_path, JoinWindows.of_time_difference_with_no_grace(100).before(0), LEFT)
    logic.process_left("0", "A0", 0)
    logic.process_left("1", "A1", 1)
    assert out == []
    logic.process_right("0", "a0", 100)
    assert out == [("0", "A0+a0", 100)]
    logic.process_right("1", "a1", 102)
    assert out[1:] == [("1", "A1+None", 1)]


def test_kafka_outer_join_duplicates(tmp_path):
    """Kafka's KStreamKStreamOuterJoinTest.testOuterJoinDuplicates (right values as strings)."""
    logic, out, _, _ = make(tmp_path, JoinWindows.of_time_difference_and_grace(100, 10), OUTER)
    logic.process_left("0", "A0", 0)
    logic.process_left("0", "A0-0", 0)
    logic.process_right("1", "11", 0)
    logic.process_right("1", "12", 0)
    logic.process_right("1", "10", 111)
    logic.process_right("3", "100", 211)
    assert out == [("1", "None+11", 0), ("1", "None+12", 0), ("0", "A0+None", 0), ("0", "A0-0+None", 0)]
    out.clear()
    logic.process_left("2", "A2", 200)
    logic.process_left("2", "A2-0", 200)
    logic.process_right("2", "13", 201)
    logic.process_right("2", "14", 201)
    assert out == [("2", "A2+13", 201), ("2", "A2-0+13", 201), ("2", "A2+14", 201), ("2", "A2-0+14", 201)]
    out.clear()
    logic.process_right("3", "100", 1500)
    assert out == [("1", "None+10", 111), ("3", "None+100", 211)]


def test_kafka_outer_join_ordering_and_grace(tmp_path):
    """Kafka's KStreamKStreamOuterJoinTest.testOrdering and testGracePeriod."""
    logic, out, _, _ = make(tmp_path, JoinWindows.of_time_difference_with_no_grace(100), OUTER)
    logic.process_left("0", "A0", 0)
    logic.process_left("1", "A1", 100)
    assert out == []
    logic.process_right("1", "11", 110)
    assert out == [("0", "A0+None", 0), ("1", "A1+11", 110)]
    logic, out, _, _ = make(tmp_path / "grace", JoinWindows.of_time_difference_and_grace(100, 10), OUTER)
    logic.process_left("0", "A0", 0)
    logic.process_right("1", "11", 0)
    logic.process_left("1", "A1", 101)
    logic.process_right("0", "10", 101)
    assert out == []
    logic.process_right("0", "100", 112)
    assert out == [("1", "None+11", 0), ("0", "A0+None", 0)]


def test_kafka_emit_all_non_joined_results_for_asymmetric_window(tmp_path):
    """Kafka's KStreamKStreamOuterJoinTest.testEmitAllNonJoinedResultsForAsymmetricWindow."""
    windows = JoinWindows.of_time_difference_with_no_grace(5).after(20)
    logic, out, _, _ = make(tmp_path, windows, OUTER)
    logic.process_left("0", "A0", 29)
    logic.process_left("1", "A1", 30)
    logic.process_right("2", "12", 31)
    logic.process_right("3", "13", 36)
    assert out == []
    logic.process_right("4", "14", 37)
    assert out == [("2", "None+12", 31)]
    logic.process_right("5", "15", 50)
    assert out[1:] == [("0", "A0+None", 29), ("3", "None+13", 36), ("4", "None+14", 37)]


def test_kafka_asymmetric_windowing_after(tmp_path):
    """Kafka's KStreamKStreamJoinTest.testAsymmetricWindowingAfter: right records join left ones
    in [t - 100, t] whatever the stream time, while the left store retains them."""
    logic, out, reg, _ = make(tmp_path, JoinWindows.of_time_difference_with_no_grace(0).after(100))
    keys = ["0", "1", "2", "3"]
    for i, key in enumerate(keys):
        logic.process_left(key, "A" + key, 1000 + i)
    expected = {999: "", 1000: "0", 1001: "01", 1002: "012", 1003: "0123", 1100: "0123", 1101: "123",
                1102: "23", 1103: "3", 1104: ""}
    for (ts, joined), prefix in zip(expected.items(), "abcdefghij", strict=True):
        for key in keys:
            logic.process_right(key, prefix + key, ts)
        assert out == [(k, f"A{k}+{prefix}{k}", ts) for k in joined], ts
        out.clear()
    assert dropped(reg) == 0


def test_store_builders_follow_kafkas_join_store_settings():
    windows = JoinWindows.of_time_difference_and_grace(30, 7).after(50)
    builder = join_window_store_builder("this", windows, serdes.STRING, serdes.STRING)
    supplier = builder.supplier
    assert (supplier.retention_ms, supplier.window_size_ms, supplier.retain_duplicates) == (30 + 50 + 7, 80, True)
    assert supplier.persistent and not builder.caching_enabled and builder.logging_enabled
    outer = outer_join_store_builder("outer", suppliers=BuiltInDslStoreSuppliers.IN_MEMORY, logging_enabled=False)
    assert outer.supplier.kind == "key_value" and not outer.supplier.persistent
    assert not outer.caching_enabled and not outer.logging_enabled
