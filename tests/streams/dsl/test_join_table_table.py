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


def make(join_type, send_old_values=True, store=None):
    reg = MetricsRegistry()
    left, right, out = Table(), Table(), []
    logic = TableTableJoinLogic(left.get, right.get, lambda a, b: f"{a}+{b}",
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


def test_null_key_dropped_and_bad_type_named():
    logic, _, _, out, reg = make(INNER)
    logic.process_left(None, C("x", None), 1)
    logic.process_right(None, C("y", None), 1)
    assert out == [] and reg.value("dropped-records-total", task_id="0_0") == 2
    with pytest.raises(TopologyError, match="cross"):
        make("cross")
