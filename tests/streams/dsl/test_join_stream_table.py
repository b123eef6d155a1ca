"""Stream-table and stream-global-table join logic; expected outputs derived by hand from Kafka's
KStreamKTableJoinProcessor (only the stream triggers, the table's current value after tombstones,
the stream record's key and timestamp, KIP-962 / KAFKA-19208 null-key rules)."""

import pytest

from _join_util import opened
from state.stores import Stores
from streams import serdes
from streams.dsl.joins.stream_table import StreamTableJoinLogic
from streams.metrics import MetricsRegistry, task_dropped_records_sensor
from state.timestamped import ValueAndTimestamp


@pytest.fixture
def table(tmp_path):
    builder = Stores.timestamped_key_value_store_builder(
        Stores.in_memory_key_value_store("table"), serdes.STRING, serdes.STRING).with_logging_disabled()
    return opened(builder, tmp_path)


def make(table, left_join, key_selector=None):
    reg = MetricsRegistry()
    out = []
    logic = StreamTableJoinLogic(table.get, lambda v, t: f"{v}+{t}", lambda k, v, ts: out.append((k, v, ts)),
                                 left_join=left_join, dropped=task_dropped_records_sensor(reg, "t", "0_0"),
                                 key_selector=key_selector)
    return logic, out, reg


def run_table_scenario(table, logic):
    table.put("a", ValueAndTimestamp("A", 50))
    logic.process("a", "x", 10)               # the stream's timestamp, not the table's
    table.put("a", None)                       # tombstone
    logic.process("a", "y", 13)
    logic.process("b", "z", 1)                 # no table row for b
    logic.process("a", None, 14)               # null value: dropped
    logic.process(None, "n", 15)               # null key


def test_inner_stream_table_join(table):
    logic, out, reg = make(table, left_join=False)
    run_table_scenario(table, logic)
    assert out == [("a", "x+A", 10)]
    assert reg.value("dropped-records-total", task_id="0_0") == 2


def test_left_stream_table_join(table):
    logic, out, reg = make(table, left_join=True)
    run_table_scenario(table, logic)
    assert out == [("a", "x+A", 10), ("a", "y+None", 13), ("b", "z+None", 1), (None, "n+None", 15)]
    assert reg.value("dropped-records-total", task_id="0_0") == 1


def selector(key, value):
    return value.split(":")[0] if ":" in value else None


def test_inner_global_table_join_with_key_selector(table):
    table.put("g1", ValueAndTimestamp("G", 3))
    logic, out, reg = make(table, left_join=False, key_selector=selector)
    logic.process("s1", "g1:x", 7)
    logic.process(None, "g1:y", 8)             # a null stream key with a mapped key still joins
    logic.process("s2", "g2:z", 9)             # no row for g2
    logic.process("s3", "plain", 10)           # mapped key None: dropped
    assert out == [("s1", "g1:x+G", 7), (None, "g1:y+G", 8)]
    assert reg.value("dropped-records-total", task_id="0_0") == 1


def test_left_global_table_join_with_key_selector(table):
    table.put("g1", ValueAndTimestamp("G", 3))
    logic, out, reg = make(table, left_join=True, key_selector=selector)
    logic.process("s1", "g1:x", 7)
    logic.process("s2", "g2:z", 9)
    logic.process("s3", "plain", 10)           # mapped key None: joined with None (KAFKA-19208)
    logic.process("s4", None, 11)              # null value: dropped, the selector is not called
    assert out == [("s1", "g1:x+G", 7), ("s2", "g2:z+None", 9), ("s3", "plain+None", 10)]
    assert reg.value("dropped-records-total", task_id="0_0") == 1
