"""The suppression buffer (Kafka's InMemoryTimeOrderedKeyValueChangeBuffer): order, non-resetting
re-buffering, prior values, sizes, the v3 changelog bytes and restore through the state manager."""

import pytest
from confluent_kafka import TopicPartition

from state.directory import StateDirectory
from state.errors import InvalidStoreArgumentError, StateError, StoreClosedError
from state.manager import ProcessorStateManager, TaskType, close_state_manager, register_state_stores
from state.suppress_buffer import (
    MAX_TIMESTAMP,
    BufferedContext,
    BufferValue,
    InMemoryTimeOrderedKeyValueBuffer,
    SuppressionBufferBuilder,
    decode_buffer_value,
    encode_buffer_value,
)
from state.task_id import TaskId

TASK = TaskId(0, 2)
CL = TopicPartition("app-sup-store-changelog", 2)


class Collector:
    def __init__(self):
        self.sent = []

    def send(self, topic, key, value, *, partition, timestamp, headers=None):
        self.sent.append((topic, partition, key, value, headers))


def ctx(ts, topic="in", offset=0):
    return BufferedContext(ts, offset, topic, 0, ())


def opened(name="sup", logging_enabled=False):
    b = InMemoryTimeOrderedKeyValueBuffer(name, logging_enabled=logging_enabled)
    b.open()
    return b


def drain(buf, until=MAX_TIMESTAMP):
    out = []
    buf.evict_while(lambda: buf.min_timestamp() <= until, out.append)
    return [(e.key, e.new, e.old, e.context.timestamp) for e in out]


def test_evicts_in_buffer_time_order_then_key_order():
    b = opened()
    b.put(20, b"b", b"1", None, ctx(20))
    b.put(10, b"z", b"2", None, ctx(10))
    b.put(10, b"a", b"3", None, ctx(11))
    assert b.min_timestamp() == 10 and b.num_records() == 3
    assert drain(b, 10) == [(b"a", b"3", None, 11), (b"z", b"2", None, 10)]
    assert b.min_timestamp() == 20
    assert drain(b) == [(b"b", b"1", None, 20)]
    assert b.min_timestamp() == MAX_TIMESTAMP and b.num_records() == 0 and b.buffer_size() == 0


def test_rebuffering_keeps_time_and_prior_value():
    b = opened()
    b.put(10, b"k", b"v1", b"v0", ctx(10))
    b.put(30, b"k", b"v2", b"v1", ctx(30))  # non-resetting: stays at time 10
    assert b.num_records() == 1 and b.min_timestamp() == 10
    assert b.prior_value_for_buffered(b"k") == (True, b"v0")
    assert b.prior_value_for_buffered(b"x") == (False, None)
    # the latest new/old values and context are emitted
    assert drain(b, 10) == [(b"k", b"v2", b"v1", 30)]
    # after eviction the key starts again with a fresh prior value and time
    b.put(40, b"k", b"v3", b"v2", ctx(40))
    assert b.min_timestamp() == 40 and b.prior_value_for_buffered(b"k") == (True, b"v2")


def test_buffer_size_counts_kafka_estimate():
    b = opened()
    # 8 (time) + 1 (key) + context (8 + 8 + 4 + topic "in" 2 = 22) + new 2 = 33
    b.put(5, b"k", b"v1", None, ctx(5))
    assert b.buffer_size() == 33
    # prior == old is counted once: 8 + 1 + 22 + prior 2 + new 2 = 35
    b2 = opened()
    b2.put(5, b"k", b"v2", b"v1", ctx(5))
    assert b2.buffer_size() == 35
    # replacing the value replaces its size: prior v1 (2) + old v2 (2) + new v33 (3) = 8+1+22+7 = 38
    b2.put(6, b"k", b"v33", b"v2", ctx(6))
    assert b2.buffer_size() == 38
    # an old value equal to the prior one but another bytes object is that one (Kafka's BufferValue
    # dedups them by content): prior v1 (the first put's old) + new v2 = 8 + 1 + 22 + 4 = 35
    b3 = opened()
    b3.put(5, b"k", b"v2", b"v1", ctx(5))
    b3.put(6, b"k", b"v2", bytes(bytearray(b"v1")), ctx(6))
    assert b3.buffer_size() == 35


def test_evict_while_stops_when_predicate_fails_and_callback_failure_keeps_entry():
    b = opened()
    for i, k in enumerate([b"a", b"b", b"c"]):
        b.put(i, k, b"x", None, ctx(i))
    count = b.evict_while(lambda: b.num_records() > 2, lambda e: None)
    assert count == 1 and b.num_records() == 2 and b.min_timestamp() == 1

    def boom(e):
        raise RuntimeError("downstream failed")

    with pytest.raises(RuntimeError):
        b.evict_while(lambda: True, boom)
    assert b.num_records() == 2 and b.min_timestamp() == 1  # nothing lost


def test_changelog_value_bytes_match_kafka_v3():
    c = BufferedContext(5, 7, "in", 1, (("h", b"x"),))
    data = encode_buffer_value(BufferValue(None, None, b"v", c), 10)
    expected = (
        (5).to_bytes(8, "big") + (7).to_bytes(8, "big")          # timestamp, offset
        + (2).to_bytes(4, "big") + b"in" + (1).to_bytes(4, "big")  # topic, partition
        + (1).to_bytes(4, "big")                                  # one header
        + (1).to_bytes(4, "big") + b"h" + (1).to_bytes(4, "big") + b"x"
        + b"\xff\xff\xff\xff"                                     # prior: null
        + b"\xff\xff\xff\xff"                                     # old: null
        + (1).to_bytes(4, "big") + b"v"                           # new
        + (10).to_bytes(8, "big")                                 # buffer time
    )
    assert data == expected
    assert decode_buffer_value(data) == (BufferValue(None, None, b"v", c), 10)
    # old equal to prior is written as the -2 sentinel
    same = encode_buffer_value(BufferValue(b"p", b"p", b"n", ctx(1)), 3)
    assert b"\xff\xff\xff\xfe" in same
    assert decode_buffer_value(same) == (BufferValue(b"p", b"p", b"n", ctx(1)), 3)
    with pytest.raises(StateError, match="malformed"):
        decode_buffer_value(data[:-3])
    with pytest.raises(StateError, match="trailing"):
        decode_buffer_value(data + b"\x00")


def test_changelog_written_on_flush_and_restore_rebuilds(tmp_path):
    sd = StateDirectory(tmp_path, "app")
    collector = Collector()
    mgr = ProcessorStateManager(TASK, TaskType.ACTIVE, False, sd, collector=collector)
    buf = SuppressionBufferBuilder("sup-store").build()
    register_state_stores(mgr, [buf])
    assert mgr.changelog_partitions() == [CL]
    buf.put(10, b"a", b"1", None, ctx(10))
    buf.put(20, b"b", b"2", None, ctx(20))
    buf.put(12, b"a", b"11", b"1", ctx(12))
    assert collector.sent == []  # deferred to the commit
    mgr.flush()
    assert [(s[2], s[4]) for s in collector.sent] == [(b"a", [("v", b"\x03")]), (b"b", [("v", b"\x03")])]
    assert decode_buffer_value(collector.sent[0][3]) == (BufferValue(None, b"1", b"11", ctx(12)), 10)
    drain(buf, 10)  # emits "a"
    mgr.flush()
    assert collector.sent[-1][2:4] == (b"a", None)  # the emitted key's tombstone
    buf.put(30, b"c", b"3", b"0", ctx(30))
    mgr.flush()
    close_state_manager(mgr, dirty=True)  # crash: the in-memory buffer is gone

    # restart: the restore loop replays the changelog into a new buffer
    mgr2 = ProcessorStateManager(TASK, TaskType.ACTIVE, False, sd, collector=Collector())
    buf2 = SuppressionBufferBuilder("sup-store").build()
    register_state_stores(mgr2, [buf2])
    assert mgr2.store_offset(CL) is None  # in-memory: restored from the start
    records = [(s[2], s[3]) for s in collector.sent]
    mgr2.restore(CL, records[:2], 1)
    mgr2.restore(CL, records[2:], len(records) - 1)
    assert [(t, k, v.new, v.old, v.prior) for t, k, v in buf2.entries()] == [
        (20, b"b", b"2", None, None), (30, b"c", b"3", b"0", b"0")]
    # b: 8 + 1 + context 22 + new 1 = 32; c: 8 + 1 + 22 + prior 1 (old is the same) + new 1 = 33
    assert buf2.buffer_size() == 65
    # restored keys keep their buffer time and do not emit "a" again
    assert drain(buf2) == [(b"b", b"2", None, 20), (b"c", b"3", b"0", 30)]
    close_state_manager(mgr2, dirty=False)
    sd.close()


def test_restore_rebuffers_key_at_new_time():
    b = opened()
    v1 = encode_buffer_value(BufferValue(None, None, b"1", ctx(5)), 5)
    v2 = encode_buffer_value(BufferValue(None, None, b"2", ctx(50)), 50)
    b.restore_batch([(b"k", v1), (b"k", None), (b"k", v2)])
    assert b.min_timestamp() == 50 and b.num_records() == 1
    b.restore_batch([(b"k", v1)])  # e.g. evicted then buffered at 5 again: time follows the log
    assert b.min_timestamp() == 5 and b.num_records() == 1
    assert drain(b) == [(b"k", b"1", None, 5)]


def test_unlogged_buffer_registers_unlogged_and_flush_sends_nothing(tmp_path):
    sd = StateDirectory(tmp_path, "app")
    collector = Collector()
    mgr = ProcessorStateManager(TASK, TaskType.ACTIVE, False, sd, collector=collector)
    buf = SuppressionBufferBuilder("sup-store").with_logging_disabled().build()
    register_state_stores(mgr, [buf])
    assert mgr.changelog_partitions() == []
    buf.put(1, b"a", b"1", None, ctx(1))
    mgr.flush()
    assert collector.sent == []
    close_state_manager(mgr, dirty=False)
    sd.close()


def test_bad_input_and_closed():
    b = opened()
    with pytest.raises(InvalidStoreArgumentError, match="key"):
        b.put(1, "str-key", b"v", None, ctx(1))
    with pytest.raises(InvalidStoreArgumentError, match="value"):
        b.put(1, b"k", 5, None, ctx(1))
    with pytest.raises(InvalidStoreArgumentError, match="buffer_time"):
        b.put("1", b"k", b"v", None, ctx(1))
    with pytest.raises(InvalidStoreArgumentError, match="BufferedContext"):
        b.put(1, b"k", b"v", None, 123)
    b.close()
    with pytest.raises(StoreClosedError):
        b.put(1, b"k", b"v", None, ctx(1))
    with pytest.raises(InvalidStoreArgumentError):
        InMemoryTimeOrderedKeyValueBuffer("")


def test_builder_changelog_config():
    builder = SuppressionBufferBuilder("s").with_logging_enabled({"min.insync.replicas": "2"})
    assert builder.changelog_topic_config() == {"cleanup.policy": "compact", "min.insync.replicas": "2"}
    assert builder.with_caching_enabled().caching_enabled is False  # a no-op, as Kafka
