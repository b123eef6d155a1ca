"""GlobalKTable and the stream-global-table join on the TopologyTestDriver. Expected outputs are
derived by hand from Kafka's rules: KTableSource for the global store (None key skipped and
counted, None value deletes, the record's timestamp kept), KStreamGlobalKTableJoin through
StreamTableJoinLogic for the join (only the stream triggers; the key_selector picks the lookup
key; the result keeps the stream record's key, timestamp and headers)."""

import pytest

from state.stores import Stores
from state.timestamped import ValueAndTimestamp
from streams import GlobalKTable, Processor, StreamsBuilder, Topology, serdes
from streams.dsl.global_table import stream_global_join
from streams.errors import ProcessingError, RecordDeserializationError, StoreAccessError, UnknownTopicError
from streams.processor import Record
from streams.testing import TopologyTestDriver

S = serdes.STRING


def dropped(driver, task_id):
    return sum(m.value for m in driver.metrics()
               if m.name == "dropped-records-total" and m.tags.get("task-id") == str(task_id))


def selector(key, value):
    """The order value is "<user>:<n>"; a value without ':' names no user."""
    return value.split(":")[0] if ":" in value else None


def join_topology(left):
    b = StreamsBuilder()
    orders = b.stream("orders", key_serde=S, value_serde=S)
    users = b.global_table("users", key_serde=S, value_serde=S, store="users")
    assert isinstance(users, GlobalKTable)
    stream_global_join(orders, users, selector, lambda v, u: f"{v}|{u}", left=left).to("out", value_serde=S)
    return b.build()


def test_global_table_content_updates_tombstones_and_null_keys():
    b = StreamsBuilder()
    b.global_table("users", key_serde=S, value_serde=S, store="users")
    with TopologyTestDriver(b.build()) as d:
        users = d.create_input_topic("users", S, S)
        users.pipe_input("alice", "A", 5)
        users.pipe_input("bob", "B", 6)
        users.pipe_input(None, "nokey", 7)     # skipped and counted (KTableSource)
        users.pipe_input("alice", "A2", 8)     # the latest value wins, with its timestamp
        users.pipe_input("bob", None, 9)       # tombstone: bob is deleted
        users.pipe_input("carol", "C", 3)      # an older timestamp still updates (Kafka only warns)
        store = d.get_key_value_store("users")
        assert list(store.all()) == [("alice", "A2"), ("carol", "C")]
        assert store.get("bob") is None
        timestamped = d.get_timestamped_key_value_store("users")
        assert timestamped.get("alice") == ValueAndTimestamp("A2", 8)
        assert timestamped.get("carol") == ValueAndTimestamp("C", 3)
        assert dropped(d, "-1_-1") == 1
        assert "users" in d.get_all_state_stores()
        with pytest.raises(UnknownTopicError, match="unknown input topic 'nope'"):
            d.create_input_topic("nope", S, S)


def run_join_scenario(d):
    users = d.create_input_topic("users", S, S)
    orders = d.create_input_topic("orders", S, S)
    users.pipe_input("alice", "A", 1)
    orders.pipe_input("o1", "alice:1", 10)     # alice -> A
    orders.pipe_input("o2", "bob:2", 11)       # no bob yet
    users.pipe_input("bob", "B", 12)
    orders.pipe_input("o3", "bob:3", 9)        # out of order: joins, keeps its own timestamp 9
    users.pipe_input("alice", None, 13)        # tombstone
    orders.pipe_input("o4", "alice:4", 14)     # alice gone
    orders.pipe_input("o5", "plain", 15)       # key_selector -> None
    orders.pipe_input("o6", None, 16)          # None value: dropped and counted by both joins
    orders.pipe_input(None, "bob:7", 17)       # None stream key, lookup key bob: joins
    return [(r.key, r.value, r.timestamp) for r in d.create_output_topic("out", S, S).read_records_to_list()]


def test_a_global_table_update_older_than_its_value_is_applied_and_warned_of(caplog):
    """Kafka's KTableSource on the global thread: an update older than the stored value is
    applied all the same, with the WARN of a table's (store, both timestamps, where from)."""
    b = StreamsBuilder()
    b.global_table("users", key_serde=S, value_serde=S, store="users")
    with caplog.at_level("WARNING", logger="streams.dsl.ops.table"):
        with TopologyTestDriver(b.build()) as d:
            users = d.create_input_topic("users", S, S)
            users.pipe_input("alice", "A", 100)
            users.pipe_input("alice", "A2", 100)   # the same time: no WARN
            users.pipe_input("bob", "B", 50)       # another key: no WARN
            users.pipe_input("alice", "A3", 40)
            assert d.get_timestamped_key_value_store("users").get("alice") == ValueAndTimestamp("A3", 40)
    warned = [r.getMessage() for r in caplog.records if "out-of-order KTable update" in r.getMessage()]
    assert warned == ["Detected out-of-order KTable update for users, old timestamp=[100] new timestamp=[40]. "
                      "topic=[users] partition=[0] offset=[3]."]


def test_inner_join_with_global_table():
    with TopologyTestDriver(join_topology(left=False)) as d:
        out = run_join_scenario(d)
        # inner: only lookups that find a value; o5 (no lookup key) and o6 (None value) dropped
        assert out == [("o1", "alice:1|A", 10), ("o3", "bob:3|B", 9), (None, "bob:7|B", 17)]
        assert dropped(d, "0_0") == 2


def test_left_join_with_global_table():
    with TopologyTestDriver(join_topology(left=True)) as d:
        out = run_join_scenario(d)
        # left: every record with a value, joiner(value, None) when nothing is found or the
        # key_selector gives None (StreamTableJoinLogic's KAFKA-19208 rule); o6 is dropped
        assert out == [("o1", "alice:1|A", 10), ("o2", "bob:2|None", 11), ("o3", "bob:3|B", 9),
                       ("o4", "alice:4|None", 14), ("o5", "plain|None", 15), (None, "bob:7|B", 17)]
        assert dropped(d, "0_0") == 1


def test_join_keeps_the_stream_records_headers():
    with TopologyTestDriver(join_topology(left=False)) as d:
        d.create_input_topic("users", S, S).pipe_input("alice", "A", 1)
        d.create_input_topic("orders", S, S).pipe_input("o1", "alice:1", 10, headers=[("h", b"1")])
        record = d.create_output_topic("out", S, S).read_record()
        assert (record.value, record.headers) == ("alice:1|A", (("h", b"1"),))


def test_a_sink_into_the_global_topic_updates_the_global_store():
    b = StreamsBuilder()
    b.stream("raw-users", key_serde=S, value_serde=S).map_values(str.upper).to("users", value_serde=S)
    b.global_table("users", key_serde=S, value_serde=S, store="users")
    with TopologyTestDriver(b.build()) as d:
        d.create_input_topic("raw-users", S, S).pipe_input("alice", "a", 4)
        assert d.get_timestamped_key_value_store("users").get("alice") == ValueAndTimestamp("A", 4)


class Reader(Processor):
    """Forwards the global store's value of each record's value; tries to write when asked."""

    def init(self, context):
        self.context = context
        self.users = context.get_state_store("users")

    def process(self, record):
        if record.value == "write":
            self.users.put(record.key, ValueAndTimestamp("x", 0))
        found = self.users.get(record.value)
        self.context.forward(record.with_value(None if found is None else found.value))


class UpperUpdater(Processor):
    """A Processor API global store updater: keeps upper-cased values."""

    def init(self, context):
        self.store = context.get_state_store("g")

    def process(self, record: Record):
        if record.value is None:
            self.store.delete(record.key)
        else:
            self.store.put(record.key, record.value.upper())


def processor_api_topology():
    t = Topology()
    t.add_global_store(Stores.key_value_store_builder(Stores.persistent_key_value_store("g"), S, S)
                       .with_logging_disabled(), "gsource", S, S, "gtopic", "gproc", UpperUpdater)
    b = StreamsBuilder()
    b.global_table("users", key_serde=S, value_serde=S, store="users")
    b.stream("in", key_serde=S, value_serde=S).process(Reader).to("out", key_serde=S, value_serde=S)
    return t, b.build()


def test_stream_processors_read_global_stores_read_only():
    _, topology = processor_api_topology()
    with TopologyTestDriver(topology) as d:
        d.create_input_topic("users", S, S).pipe_input("alice", "A", 1)
        stream = d.create_input_topic("in", S, S)
        stream.pipe_input("k1", "alice", 2)
        stream.pipe_input("k2", "bob", 3)
        assert d.create_output_topic("out", S, S).read_key_values_to_list() == [("k1", "A"), ("k2", None)]
        with pytest.raises(ProcessingError) as failure:
            stream.pipe_input("k3", "write", 4)
        assert isinstance(failure.value.__cause__, StoreAccessError)
        assert "global state store 'users' is read-only here: put() is refused" in str(failure.value)


def test_processor_api_global_store_on_the_driver():
    topology, _ = processor_api_topology()
    with TopologyTestDriver(topology) as d:
        g = d.create_input_topic("gtopic", S, S)
        g.pipe_input("a", "x", 1)
        g.pipe_input("b", "y", 2)
        g.pipe_input("a", None, 3)
        assert list(d.get_key_value_store("g").all()) == [("b", "Y")]


def test_bad_global_records_meet_the_deserialization_handler():
    b = StreamsBuilder()
    b.global_table("counts", key_serde=S, value_serde=serdes.INT64, store="counts")
    with TopologyTestDriver(b.build(), {"default.deserialization.exception.handler": "log_and_continue"}) as d:
        d.pipe_raw("counts", b"a", b"bad", 1)                      # 3 bytes: not an INT64, skipped
        d.pipe_raw("counts", b"b", serdes.INT64.serialize(7), 2)
        assert list(d.get_key_value_store("counts").all()) == [("b", 7)]
    with TopologyTestDriver(b.build()) as d:  # log_and_fail, the default
        with pytest.raises(RecordDeserializationError, match="topic 'counts' partition 0 offset 0"):
            d.pipe_raw("counts", b"a", b"bad", 1)


def test_kstream_join_and_left_join_dispatch_a_global_table():
    b = StreamsBuilder()
    orders = b.stream("orders", key_serde=S, value_serde=S)
    users = b.global_table("users", key_serde=S, value_serde=S)
    orders.join(users, selector, lambda v, u: f"inner {v}|{u}").to("out", value_serde=S)
    orders.left_join(users, key_selector=selector, joiner=lambda v, u: f"left {v}|{u}").to("out", value_serde=S)
    with TopologyTestDriver(b.build()) as d:
        d.create_input_topic("users", S, S).pipe_input("alice", "A", 1)
        orders_in = d.create_input_topic("orders", S, S)
        orders_in.pipe_input("o1", "alice:1", 5)
        orders_in.pipe_input("o2", "bob:2", 6)
        # both joins read the one global store; the inner one emits only where a user is found
        assert d.create_output_topic("out", S, S).read_key_values_to_list() == [
            ("o1", "inner alice:1|A"), ("o1", "left alice:1|A"), ("o2", "left bob:2|None")]
