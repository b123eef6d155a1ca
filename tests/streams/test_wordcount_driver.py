import pytest

from streams import Processor, PunctuationType, Record, StreamsBuilder, Topology, serdes
from streams.dsl import Materialized
from streams.errors import StoreAccessError, ProcessingError
from streams.testing import TopologyTestDriver

from state.stores import Stores

S = serdes.STRING
I64 = serdes.INT64


def wordcount(caching=True, logging=True, in_memory=False, store="counts"):
    mat = Materialized.as_(store)
    if not caching:
        mat = mat.with_caching_disabled()
    if not logging:
        mat = mat.with_logging_disabled()
    if in_memory:
        mat = mat.with_in_memory_store()
    b = StreamsBuilder()
    (b.stream("lines", key_serde=S, value_serde=S)
        .flat_map_values(lambda line: line.lower().split())
        .group_by(lambda key, word: word, key_serde=S, value_serde=S)
        .count(store=mat)
        .to_stream()
        .to("word-counts", key_serde=S, value_serde=I64))
    return b.build()


@pytest.mark.parametrize("caching", [True, False])
@pytest.mark.parametrize("in_memory", [True, False])
def test_wordcount_counts_and_repartition(caching, in_memory):
    with TopologyTestDriver(wordcount(caching=caching, in_memory=in_memory), {"application.id": "wc"}) as driver:
        lines = driver.create_input_topic("lines", S, S)
        out = driver.create_output_topic("word-counts", S, I64)
        lines.pipe_input(None, "Hello world hello", timestamp=1000)
        lines.pipe_value_list(["the world", "", "HELLO again"], timestamp=2000)
        # the driver commits after every record, so every update reaches the output
        assert out.read_key_values_to_list() == [
            ("hello", 1), ("world", 1), ("hello", 2), ("the", 1), ("world", 2), ("hello", 3), ("again", 1)]
        store = driver.get_key_value_store("counts")
        assert store.get("hello") == 3
        assert store.get("world") == 2
        assert store.get("missing") is None
        # records really went through the internal repartition topic
        rep = driver.producer_history("wc-counts-repartition")
        assert [r.key for r in rep] == [b"hello", b"world", b"hello", b"the", b"world", b"hello", b"again"]
        assert [r.value for r in rep][:3] == [b"hello", b"world", b"hello"]
        assert rep[0].timestamp == 1000


def test_changelog_writes_are_captured():
    with TopologyTestDriver(wordcount(), {"application.id": "wc"}) as driver:
        driver.create_input_topic("lines", S, S).pipe_input(None, "a b a", timestamp=5)
        changelog = driver.producer_history(driver.changelog_topic("counts"))
        assert driver.changelog_topic("counts") == "wc-counts-changelog"
        # Kafka's format for the count's timestamped store: the raw INT64, the count's timestamp
        assert [(r.key, I64.deserialize(r.value), r.partition, r.timestamp) for r in changelog] == [
            (b"a", 1, 0, 5), (b"b", 1, 0, 5), (b"a", 2, 0, 5)]
    with TopologyTestDriver(wordcount(logging=False), {"application.id": "wc"}) as driver:
        driver.create_input_topic("lines", S, S).pipe_input(None, "a b a", timestamp=5)
        assert driver.producer_history("wc-counts-changelog") == []


@pytest.mark.parametrize("caching", [True, False])
def test_a_count_is_stamped_with_the_newest_timestamp_it_has_seen(caching):
    # Kafka's KStreamAggregate over a timestamped store (KIP-258): the result's timestamp is
    # max(record timestamp, previous result's timestamp). "a" at 10, 5, 12: counts 1, 2, 3 at
    # 10, max(5, 10) = 10, max(12, 10) = 12; "b" at 12 then 3: counts 1, 2 at 12, max(3, 12) = 12.
    # The changelog carries the same timestamps with the raw INT64 counts; with caching the same
    # records (the driver commits after each input record, and each line has a word once).
    with TopologyTestDriver(wordcount(caching=caching), {"application.id": "wc"}) as driver:
        lines = driver.create_input_topic("lines", S, S)
        for line, ts in (("a", 10), ("a", 5), ("a b", 12)):
            lines.pipe_input(None, line, timestamp=ts)
        lines.pipe_input(None, "b", timestamp=3)
        out = driver.create_output_topic("word-counts", S, I64)
        expected = [("a", 1, 10), ("a", 2, 10), ("a", 3, 12), ("b", 1, 12), ("b", 2, 12)]
        assert [(r.key, r.value, r.timestamp) for r in out.read_records_to_list()] == expected
        changelog = driver.producer_history("wc-counts-changelog")
        assert [(r.key.decode(), I64.deserialize(r.value), r.timestamp) for r in changelog] == expected
        assert driver.get_key_value_store("counts").get("a") == 3  # plain values
        stamped = driver.get_timestamped_key_value_store("counts")
        assert (stamped.get("a"), stamped.get("b")) == ((3, 12), (2, 12))


def test_state_dir_is_temporary_and_removed(tmp_path):
    driver = TopologyTestDriver(wordcount(), {"application.id": "wc"})
    state_dir = driver.config["state.dir"]
    import os
    assert os.path.isdir(state_dir)
    driver.create_input_topic("lines", S, S).pipe_input(None, "x")
    driver.close()
    assert not os.path.exists(state_dir)


class CachingCounter(Processor):
    """Counts per key in a cached store; emits the store contents on wall-clock punctuation."""

    def init(self, context):
        self.context = context
        self.store = context.get_state_store("kv")
        context.schedule(1000, PunctuationType.WALL_CLOCK_TIME, self.emit)

    def emit(self, timestamp):
        with self.store.all() as it:
            for k, v in it:
                self.context.forward(Record(k, v, timestamp))

    def process(self, record):
        old = self.store.get(record.key)
        self.store.put(record.key, (old or 0) + 1, record.timestamp)


def kv_topology(connect=True):
    t = Topology()
    t.add_source("src", "in", key_serde=S, value_serde=S)
    t.add_processor("counter", CachingCounter, "src")
    t.add_sink("out", "out", "counter", key_serde=S, value_serde=I64)
    builder = Stores.key_value_store_builder(Stores.persistent_key_value_store("kv"), key_serde=S,
                                             value_serde=I64)
    if connect:
        t.add_state_store(builder, "counter")
    else:
        t.add_processor("other", CachingCounter, "src")
        t.add_state_store(builder, "other")
    return t


def test_processor_api_state_store_and_punctuation():
    with TopologyTestDriver(kv_topology()) as driver:
        inp = driver.create_input_topic("in", S, S)
        for k in ["x", "y", "x"]:
            inp.pipe_input(k, "v", timestamp=1)
        out = driver.create_output_topic("out", S, I64)
        assert out.is_empty()
        driver.advance_wall_clock_time(1000)
        assert out.read_key_values_to_map() == {"x": 2, "y": 1}
        kv = driver.get_key_value_store("kv")
        assert kv.get("x") == 2
        assert driver.get_state_store("kv") is kv
        with pytest.raises(StoreAccessError, match="unknown state store 'nope'"):
            driver.get_state_store("nope")


def test_unconnected_store_access_is_an_error():
    with pytest.raises(ProcessingError, match="processor 'counter' has no access to state store 'kv'"):
        TopologyTestDriver(kv_topology(connect=False))


@pytest.mark.parametrize("caching,expected", [
    (True, [("x", 3), ("y", 1)]),                       # cache flushed once per input record
    (False, [("x", 1), ("x", 2), ("x", 3), ("y", 1)]),  # every update forwarded
])
def test_count_caching_dedups_updates_within_a_commit(caching, expected):
    mat = Materialized.as_("per-key") if caching else Materialized.as_("per-key").with_caching_disabled()
    b = StreamsBuilder()
    (b.stream("in", key_serde=S, value_serde=S)
        .flat_map_values(str.split)
        .group_by_key()
        .count(store=mat)
        .to_stream()
        .to("out", value_serde=I64))
    topology = b.build()
    assert topology.internal_topics == {}  # group_by_key without a key change: no repartition
    with TopologyTestDriver(topology, {"application.id": "dedup"}) as driver:
        inp = driver.create_input_topic("in", S, S)
        inp.pipe_input("x", "a b c", timestamp=10)
        inp.pipe_input("y", "d", timestamp=20)
        out = driver.create_output_topic("out", S, I64)
        records = out.read_records_to_list()
        assert [(r.key, r.value) for r in records] == expected
        assert records[-1].timestamp == 20
        # the changelog sees what reaches the store: with caching only the flushed value
        changelog = [I64.deserialize(r.value) for r in driver.producer_history("dedup-per-key-changelog")]
        assert changelog == [v for _, v in expected]


def test_store_kind_is_checked():
    with TopologyTestDriver(wordcount(), {"application.id": "wc"}) as driver:
        with pytest.raises(StoreAccessError, match="'counts' is a key_value store, not a window store"):
            driver.get_window_store("counts")


def test_default_serdes_for_grouping_come_from_config():
    b = StreamsBuilder()
    (b.stream("lines", key_serde=S, value_serde=S)
        .flat_map_values(str.split)
        .group_by(lambda k, w: w)            # no serdes: default.key.serde / default.value.serde
        .count(store="c")
        .to_stream()
        .to("out", key_serde=S, value_serde=I64))
    topology = b.build()
    cfg = {"application.id": "defaults", "default.key.serde": "STRING", "default.value.serde": "STRING"}
    with TopologyTestDriver(topology, cfg) as driver:
        driver.create_input_topic("lines", S, S).pipe_input(None, "p q p")
        assert driver.create_output_topic("out", S, I64).read_key_values_to_map() == {"p": 2, "q": 1}
        assert driver.get_key_value_store("c").get("p") == 2
    from streams.errors import ConfigError
    with pytest.raises(ConfigError, match="default.key.serde"):
        TopologyTestDriver(topology, {"application.id": "nodefaults"})


def test_persistent_state_and_checkpoint_survive_driver_restart(tmp_path):
    from confluent_kafka import TopicPartition

    from state.checkpoint import OffsetCheckpoint

    cfg = {"application.id": "wc", "state.dir": str(tmp_path)}
    with TopologyTestDriver(wordcount(), cfg) as driver:
        driver.create_input_topic("lines", S, S).pipe_input(None, "a b a", timestamp=1)
        counts_task = [e for e in driver._engines if "counts" in e.stores][0]
        task_dir = tmp_path / "wc" / str(counts_task.task_id)
    # a clean close writes Kafka's .checkpoint with the last changelog offset of the store
    assert OffsetCheckpoint(task_dir / ".checkpoint").read() == {TopicPartition("wc-counts-changelog", 0): 2}
    assert (task_dir / "rocksdb" / "counts").is_dir()
    with TopologyTestDriver(wordcount(), cfg) as driver:
        assert driver.get_key_value_store("counts").get("a") == 2
        driver.create_input_topic("lines", S, S).pipe_input(None, "a", timestamp=2)
        assert driver.create_output_topic("word-counts", S, I64).read_key_value() == ("a", 3)
    assert tmp_path.is_dir()  # a caller-provided state.dir is not removed


def test_exactly_once_config_runs():
    with TopologyTestDriver(wordcount(), {"application.id": "wc", "processing.guarantee": "exactly_once_v2"}) as driver:
        driver.create_input_topic("lines", S, S).pipe_input(None, "x y x")
        assert driver.get_key_value_store("counts").get("x") == 2
