"""Table-table join logic; expected Change(new, old) pairs and timestamps derived by hand from
Kafka's KTableKTableInnerJoin / LeftJoin / RightJoin / OuterJoin and KTableKTableJoinMerger."""

import pytest

from _join_util import Table, opened
from state.stores import Stores
from state.timestamped import ValueAndTimestamp
from streams import serdes
from streams.dsl import Change
from streams.dsl.joins.table_table import INNER, LEFT, OUTER, TableTableJoinLogic
from streams.errors import TopologyError
from streams.metrics import MetricsRegistry, task_dropped_records_sensor


def make(join_type, send_old_values=True, store=None, joiner=None):
    reg = MetricsRegistry()
    left, right, out = Table(), Table(), []
    logic = TableTableJoinLogic(left.get, right.get, joiner or (lambda a, b: f"{a}+{b}"),
                                lambda k, change, ts: out.append((k, change, ts)), join_type=join_type,
                                dropped=task_dropped_records_sensor(reg, "t", "0_0"),
                                send_old_values=send_old_values, store=store)
    return logic, left, right, out, reg


def run(logic, left, right):
    steps = [(left, "a", "A1", 1), (right, "a", "a2", 10), (left, "a", "A3", 3), (right, "a", None, 4),
             (left, "a", None, 5), (right, "b", "b6", 6), (left, "b", "B7", 7)]
    for table, key, value, ts in steps:
        change = table.update(key, value, ts)
        (logic.process_left if table is left else logic.process_right)(key, change, ts)


def C(new, old):
    return Change(new, old)


def test_inner_join_old_values_tombstones_and_max_timestamp():
    logic, left, right, out, _ = make(INNER)
    run(logic, left, right)
    assert out == [
        ("a", C("A1+a2", None), 10),
        ("a", C("A3+a2", "A1+a2"), 10),       # max(3, right's 10)
        ("a", C(None, "A3+a2"), 4),           # right tombstone: the result is deleted
        ("b", C("B7+b6", None), 7),
    ]


def test_left_join():
    logic, left, right, out, _ = make(LEFT)
    run(logic, left, right)
    assert out == [
        ("a", C("A1+None", None), 1),
        ("a", C("A1+a2", "A1+None"), 10),
        ("a", C("A3+a2", "A1+a2"), 10),
        ("a", C("A3+None", "A3+a2"), 4),      # right tombstone: back to joiner(left, None)
        ("a", C(None, "A3+None"), 5),         # left tombstone deletes the result
        ("b", C("B7+b6", None), 7),           # right b6 alone produced nothing
    ]


def test_outer_join():
    logic, left, right, out, _ = make(OUTER)
    run(logic, left, right)
    assert out == [
        ("a", C("A1+None", None), 1),
        ("a", C("A1+a2", "A1+None"), 10),
        ("a", C("A3+a2", "A1+a2"), 10),
        ("a", C("A3+None", "A3+a2"), 4),
        ("a", C(None, "A3+None"), 5),
        ("b", C("None+b6", None), 6),
        ("b", C("B7+b6", "None+b6"), 7),
    ]


def test_without_old_values_only_new_values_are_forwarded():
    logic, left, right, out, _ = make(OUTER, send_old_values=False)
    run(logic, left, right)
    assert [change.old_value for _, change, _ in out] == [None] * 7
    assert [change.new_value for _, change, _ in out] == [
        "A1+None", "A1+a2", "A3+a2", "A3+None", None, "None+b6", "B7+b6"]


def test_materialized_join_stores_results_and_deletes_on_tombstone(tmp_path):
    builder = Stores.timestamped_key_value_store_builder(
        Stores.in_memory_key_value_store("joined"), serdes.STRING, serdes.STRING).with_logging_disabled()
    store = opened(builder, tmp_path)
    logic, left, right, out, _ = make(LEFT, store=store)
    run(logic, left, right)
    assert store.get("a") is None
    assert store.get("b") == ValueAndTimestamp("B7+b6", 7)
    assert logic.get("b") == ValueAndTimestamp("B7+b6", 7)
    assert len(out) == 6


@pytest.mark.parametrize("join_type,expected", [
    (INNER, None), (LEFT, ValueAndTimestamp("L+None", 3)), (OUTER, ValueAndTimestamp("L+None", 3))])
def test_value_getter_without_store(join_type, expected):
    logic, left, right, _, _ = make(join_type)
    left.update("k", "L", 3)
    assert logic.get("k") == expected
    right.update("k", "R", 9)
    assert logic.get("k") == ValueAndTimestamp("L+R", 9)
    left.update("k", None, 10)
    assert logic.get("k") == (ValueAndTimestamp("None+R", 9) if join_type == OUTER else None)


@pytest.mark.parametrize("join_type", [INNER, LEFT, OUTER])
def test_value_getter_gives_no_result_for_a_joiner_returning_none(join_type):
    # Kafka's join value getters wrap the joiner's result with ValueAndTimestamp.make: a None
    # result is no value at all (a foreign-key join reading this table then finds nothing, as for
    # a missing key), not a value of None
    logic, left, right, _, _ = make(join_type, joiner=lambda a, b: None if a is None or b is None else a + b)
    left.update("k", "L", 3)
    assert logic.get("k") is None               # left/outer: joiner(L, None) is None
    right.update("k", "R", 9)
    assert logic.get("k") == ValueAndTimestamp("LR", 9)
    left.update("k", None, 10)
    assert logic.get("k") is None               # outer: joiner(None, R) is None


def test_null_key_dropped_and_bad_type_named():
    logic, _, _, out, reg = make(INNER)
    logic.process_left(None, C("x", None), 1)
    logic.process_right(None, C("y", None), 1)
    assert out == [] and reg.value("dropped-records-total", task_id="0_0") == 2
    with pytest.raises(TopologyError, match="cross"):
        make("cross")


def kafka_joiner(a, b):
    """Kafka's MockValueJoiner.TOSTRING_JOINER."""
    return f"{'null' if a is None else a}+{'null' if b is None else b}"


STEPS = [
    ("left", [(0, "X0", 5), (1, "X1", 6)]),
    ("right", [(0, "Y0", 0), (1, "Y1", 10)]),
    ("left", [(k, f"XX{k}", 7) for k in range(4)]),
    ("right", [(k, f"YY{k}", k * 5) for k in range(4)]),
    ("left", [(k, f"XXX{k}", 6) for k in range(4)]),
    ("right", [(0, None, 5), (1, None, 7)]),
    ("left", [(k, f"XXXX{k}", 13) for k in range(4)]),
    ("left", [(0, None, 0), (1, None, 42), (2, None, 5), (3, None, 20)]),
]
_LEFT_OR_OUTER = [
    [(0, ("X0+null", None), 5), (1, ("X1+null", None), 6)],
    [(0, ("X0+Y0", "X0+null"), 5), (1, ("X1+Y1", "X1+null"), 10)],
    [(0, ("XX0+Y0", "X0+Y0"), 7), (1, ("XX1+Y1", "X1+Y1"), 10), (2, ("XX2+null", None), 7),
     (3, ("XX3+null", None), 7)],
    [(0, ("XX0+YY0", "XX0+Y0"), 7), (1, ("XX1+YY1", "XX1+Y1"), 7), (2, ("XX2+YY2", "XX2+null"), 10),
     (3, ("XX3+YY3", "XX3+null"), 15)],
    [(0, ("XXX0+YY0", "XX0+YY0"), 6), (1, ("XXX1+YY1", "XX1+YY1"), 6), (2, ("XXX2+YY2", "XX2+YY2"), 10),
     (3, ("XXX3+YY3", "XX3+YY3"), 15)],
    [(0, ("XXX0+null", "XXX0+YY0"), 6), (1, ("XXX1+null", "XXX1+YY1"), 7)],
    [(0, ("XXXX0+null", "XXX0+null"), 13), (1, ("XXXX1+null", "XXX1+null"), 13),
     (2, ("XXXX2+YY2", "XXX2+YY2"), 13), (3, ("XXXX3+YY3", "XXX3+YY3"), 15)],
]
KAFKA_SENDING_OLD_VALUES = {
    INNER: [
        [],
        [(0, ("X0+Y0", None), 5), (1, ("X1+Y1", None), 10)],
        [(0, ("XX0+Y0", "X0+Y0"), 7), (1, ("XX1+Y1", "X1+Y1"), 10)],
        [(0, ("XX0+YY0", "XX0+Y0"), 7), (1, ("XX1+YY1", "XX1+Y1"), 7), (2, ("XX2+YY2", None), 10),
         (3, ("XX3+YY3", None), 15)],
        _LEFT_OR_OUTER[4],
        [(0, (None, "XXX0+YY0"), 6), (1, (None, "XXX1+YY1"), 7)],
        [(2, ("XXXX2+YY2", "XXX2+YY2"), 13), (3, ("XXXX3+YY3", "XXX3+YY3"), 15)],
        [(2, (None, "XXXX2+YY2"), 10), (3, (None, "XXXX3+YY3"), 20)],
    ],
    LEFT: _LEFT_OR_OUTER + [
        [(0, (None, "XXXX0+null"), 0), (1, (None, "XXXX1+null"), 42), (2, (None, "XXXX2+YY2"), 10),
         (3, (None, "XXXX3+YY3"), 20)]],
    OUTER: _LEFT_OR_OUTER + [
        [(0, (None, "XXXX0+null"), 0), (1, (None, "XXXX1+null"), 42), (2, ("null+YY2", "XXXX2+YY2"), 10),
         (3, ("null+YY3", "XXXX3+YY3"), 20)]],
}


@pytest.mark.parametrize("join_type", [INNER, LEFT, OUTER])
def test_kafka_sending_old_values(join_type):
    """Kafka's KTableKTable{Inner,Left,Outer}JoinTest.testSendingOldValue(s) (the null-key records
    are the table sources' to drop, so they are left out)."""
    logic, left, right, out, _ = make(join_type, joiner=kafka_joiner)
    for (side, updates), expected in zip(STEPS, KAFKA_SENDING_OLD_VALUES[join_type], strict=True):
        out.clear()
        table = left if side == "left" else right
        for key, value, ts in updates:
            change = table.update(key, value, ts)
            (logic.process_left if table is left else logic.process_right)(key, change, ts)
        assert [(k, (c.new_value, c.old_value), ts) for k, c, ts in out] == expected, (side, updates)
