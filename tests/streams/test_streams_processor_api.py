import pytest

from streams import Processor, PunctuationType, Record, Topology, serdes
from streams.errors import (ConfigError, DeserializationHandlerError, InvalidRecordError, InvalidTimestampError, RecordDeserializationError,
                            ProcessingError, UnknownProcessorError, UnknownTopicError)
from streams.processor import UsePartitionTimeOnInvalidTimestamp
from streams.testing import TopologyTestDriver

S = serdes.STRING


class Router(Processor):
    """Numbers go to 'nums', everything else to 'words'; 'both' goes to all children."""

    def init(self, context):
        self.context = context

    def process(self, record):
        if record.value == "both":
            self.context.forward(record)
        elif record.value.isdigit():
            self.context.forward(record.with_value(int(record.value)), "nums")
        else:
            self.context.forward(record.with_value(record.value.upper()), child_name="words")


def router_topology(bad_child=False):
    t = Topology()
    t.add_source("src", "in", key_serde=S, value_serde=S)
    t.add_processor("router", Router, "src")
    t.add_sink("nums", "numbers", "router", key_serde=S, value_serde=serdes.JSON)
    t.add_sink("words", "words", "router", key_serde=S, value_serde=S)
    return t


def test_forward_to_all_and_named_children():
    with TopologyTestDriver(router_topology()) as driver:
        inp = driver.create_input_topic("in", S, S)
        nums = driver.create_output_topic("numbers", S, serdes.JSON)
        words = driver.create_output_topic("words", S, S)
        inp.pipe_input("a", "42", timestamp=5)
        inp.pipe_input("b", "hello", timestamp=6)
        assert nums.read_key_value() == ("a", 42)
        assert nums.is_empty()
        rec = words.read_record()
        assert (rec.key, rec.value, rec.timestamp) == ("b", "HELLO", 6)
        inp.pipe_input("c", "both", timestamp=7)
        assert words.read_value() == "both"
        assert driver.producer_history("numbers")[-1].value == b'"both"'
        assert nums.read_value() == "both"


def test_forward_to_unknown_child_is_an_error_naming_it():
    class Bad(Processor):
        def process(self, record):
            self.context.forward(record, "nope")

    t = Topology()
    t.add_source("src", "in", key_serde=S, value_serde=S)
    t.add_processor("bad", Bad, "src")
    t.add_sink("out", "out", "bad", key_serde=S, value_serde=S)
    with TopologyTestDriver(t) as driver:
        with pytest.raises(ProcessingError, match="processor=bad") as err:
            driver.create_input_topic("in", S, S).pipe_input("k", "v")
        assert isinstance(err.value.__cause__, UnknownProcessorError)
        assert "no child named 'nope'" in str(err.value.__cause__)


class Recorder(Processor):
    seen = None

    def init(self, context):
        self.context = context
        Recorder.seen = []
        Recorder.context_ref = context

    def process(self, record):
        Recorder.seen.append((record, self.context.record_metadata(), self.context.current_stream_time_ms))
        self.context.forward(record.with_headers(list(record.headers) + [("seen", b"1")]))


def recorder_topology(**source_kwargs):
    t = Topology()
    t.add_source("src", "in", key_serde=S, value_serde=S, **source_kwargs)
    t.add_processor("rec", Recorder, "src")
    t.add_sink("out", "out", "rec", key_serde=S, value_serde=S)
    return t


def test_headers_metadata_and_stream_time():
    with TopologyTestDriver(recorder_topology(), {"application.id": "meta-app"}) as driver:
        inp = driver.create_input_topic("in", S, S)
        out = driver.create_output_topic("out", S, S)
        inp.pipe_input("k1", "v1", timestamp=100, headers=[("h", b"x")])
        inp.pipe_input("k2", "v2", timestamp=50, headers={"d": b"y"})  # out of order: stream time stays 100
        (r1, m1, st1), (r2, m2, st2) = Recorder.seen
        assert r1 == Record("k1", "v1", 100, [("h", b"x")])
        assert (m1.topic, m1.partition, m1.offset) == ("in", 0, 0)
        assert (m2.topic, m2.offset) == ("in", 1)
        assert (st1, st2) == (100, 100)
        first = out.read_record()
        assert first.headers == (("h", b"x"), ("seen", b"1"))
        assert out.read_record().headers == (("d", b"y"), ("seen", b"1"))
        ctx = Recorder.context_ref
        assert ctx.application_id == "meta-app"
        assert str(ctx.task_id) == "0_0"


class Punctuating(Processor):
    def __init__(self, ptype, interval):
        self.ptype, self.interval = ptype, interval
        self.fired = []
        self.metadata_in_punctuation = []

    def init(self, context):
        self.context = context
        self.cancellable = context.schedule(self.interval, self.ptype, self.punctuate)
        Punctuating.instance = self

    def punctuate(self, timestamp):
        self.fired.append(timestamp)
        self.metadata_in_punctuation.append(self.context.record_metadata())
        self.context.forward(Record("tick", str(timestamp), timestamp))

    def process(self, record):
        pass


def punctuation_topology(ptype, interval):
    t = Topology()
    t.add_source("src", "in", key_serde=S, value_serde=S)
    t.add_processor("p", lambda: Punctuating(ptype, interval), "src")
    t.add_sink("out", "ticks", "p", key_serde=S, value_serde=S)
    return t


def test_stream_time_punctuation_fires_as_records_advance_stream_time():
    with TopologyTestDriver(punctuation_topology(PunctuationType.STREAM_TIME, 10)) as driver:
        inp = driver.create_input_topic("in", S, S)
        p = Punctuating.instance
        driver.advance_wall_clock_time(1000)
        assert p.fired == []  # no stream time yet
        expected_after = [(0, [0]), (5, [0]), (10, [0, 10]), (35, [0, 10, 35]), (39, [0, 10, 35]),
                          (20, [0, 10, 35]), (40, [0, 10, 35, 40])]
        for ts, fired in expected_after:
            inp.pipe_input("k", "v", timestamp=ts)
            assert p.fired == fired, ts
        assert p.metadata_in_punctuation == [None] * 4
        ticks = driver.create_output_topic("ticks", S, S)
        assert ticks.read_values_to_list() == ["0", "10", "35", "40"]


def test_wall_clock_punctuation_and_cancel():
    with TopologyTestDriver(punctuation_topology(PunctuationType.WALL_CLOCK_TIME, 100),
                            initial_wall_clock_time_ms=1000) as driver:
        p = Punctuating.instance
        driver.create_input_topic("in", S, S).pipe_input("k", "v", timestamp=99999)
        assert p.fired == []  # records do not drive wall-clock punctuation
        driver.advance_wall_clock_time(50)
        assert p.fired == []
        driver.advance_wall_clock_time(50)
        assert p.fired == [1100]
        driver.advance_wall_clock_time(250)  # missed intervals fire once, then realign
        assert p.fired == [1100, 1350]
        driver.advance_wall_clock_time(49)
        assert p.fired == [1100, 1350]
        driver.advance_wall_clock_time(1)
        assert p.fired == [1100, 1350, 1400]
        p.cancellable.cancel()
        driver.advance_wall_clock_time(1000)
        assert p.fired == [1100, 1350, 1400]
        assert driver.create_output_topic("ticks", S, S).get_queue_size() == 3


def test_deserialization_failure_names_topic_partition_offset():
    t = Topology()
    t.add_source("src", "in", key_serde=S, value_serde=serdes.INT64)
    t.add_processor("rec", Recorder, "src")
    t.add_sink("out", "out", "rec", key_serde=S, value_serde=serdes.INT64)
    with TopologyTestDriver(t) as driver:
        driver.pipe_raw("in", b"k", serdes.INT64.serialize(1), 0)
        with pytest.raises(RecordDeserializationError) as err:
            driver.pipe_raw("in", b"k", b"\x01\x02", 0)
        msg = str(err.value)
        assert "topic 'in' partition 0 offset 1" in msg
        assert (err.value.topic, err.value.partition, err.value.offset) == ("in", 0, 1)
        assert err.value.value == b"\x01\x02"


def test_deserialization_log_and_continue_skips():
    t = Topology()
    t.add_source("src", "in", key_serde=S, value_serde=serdes.INT64)
    t.add_processor("rec", Recorder, "src")
    t.add_sink("out", "out", "rec", key_serde=S, value_serde=serdes.INT64)
    cfg = {"default.deserialization.exception.handler": "log_and_continue"}
    with TopologyTestDriver(t, cfg) as driver:
        driver.pipe_raw("in", b"a", serdes.INT64.serialize(1), 0)
        driver.pipe_raw("in", b"b", b"garbage", 1)
        driver.pipe_raw("in", b"c", serdes.INT64.serialize(3), 2)
        out = driver.create_output_topic("out", S, serdes.INT64)
        assert out.read_key_values_to_list() == [("a", 1), ("c", 3)]
        assert [m.offset for _, m, _ in Recorder.seen] == [0, 2]
        # Kafka's RecordDeserializer counts the skipped record as dropped
        assert sum(m.value for m in driver.metrics() if m.name == "dropped-records-total") == 1


def _handler_topology():
    t = Topology()
    t.add_source("src", "in", key_serde=S, value_serde=serdes.INT64)
    t.add_processor("rec", Recorder, "src")
    t.add_sink("out", "out", "rec", key_serde=S, value_serde=serdes.INT64)
    return t


def test_a_deserialization_handler_that_raises_is_named_with_its_record():
    def handler(error):
        raise RuntimeError("handler bug")

    with TopologyTestDriver(_handler_topology(), {"default.deserialization.exception.handler": handler}) as driver:
        driver.pipe_raw("in", b"a", serdes.INT64.serialize(1), 0)
        with pytest.raises(DeserializationHandlerError) as err:
            driver.pipe_raw("in", b"b", b"garbage", 1)
    msg = str(err.value)
    assert "deserialization exception handler failed" in msg
    assert "topic 'in' partition 0 offset 1" in msg and "handler bug" in msg
    assert (err.value.topic, err.value.partition, err.value.offset) == ("in", 0, 1)
    assert isinstance(err.value.__cause__, RuntimeError)


def test_a_deserialization_handler_answering_nonsense_is_named_with_its_record():
    with TopologyTestDriver(_handler_topology(),
                            {"default.deserialization.exception.handler": lambda error: "continue"}) as driver:
        with pytest.raises(DeserializationHandlerError, match="returned 'continue' for the record from topic 'in' "
                                                              "partition 0 offset 0"):
            driver.pipe_raw("in", b"b", b"garbage", 1)


def test_processor_exception_is_wrapped_with_context():
    class Boom(Processor):
        def process(self, record):
            raise ValueError("kaboom")

    t = Topology()
    t.add_source("src", "in", key_serde=S, value_serde=S)
    t.add_processor("fwd", Recorder, "src")
    t.add_processor("boom", Boom, "fwd")
    with TopologyTestDriver(t) as driver:
        inp = driver.create_input_topic("in", S, S)
        with pytest.raises(ProcessingError) as err:
            inp.pipe_input("k", "v", timestamp=1)
        assert "task_id=0_0, processor=boom, topic=in, partition=0, offset=0" in str(err.value)
        assert isinstance(err.value.__cause__, ValueError)


def test_timestamps_and_extractors():
    with TopologyTestDriver(recorder_topology()) as driver:
        with pytest.raises(InvalidTimestampError, match="offset 0 has invalid .negative. timestamp -5"):
            driver.pipe_raw("in", b"k", b"v", -5)
    with TopologyTestDriver(recorder_topology(timestamp_extractor=UsePartitionTimeOnInvalidTimestamp())) as driver:
        with pytest.raises(InvalidTimestampError, match="no partition time"):
            driver.pipe_raw("in", b"k", b"v", -1)
        driver.pipe_raw("in", b"k", b"v", 70)
        driver.pipe_raw("in", b"k", b"v", -1)
        assert [r.timestamp for r, _, _ in Recorder.seen] == [70, 70]
    with pytest.raises(InvalidRecordError):
        Record("k", "v", -1)


def test_input_topic_time_auto_advance():
    with TopologyTestDriver(recorder_topology()) as driver:
        inp = driver.create_input_topic("in", S, S, start_timestamp_ms=1000, auto_advance_ms=10)
        inp.pipe_value_list(["a", "b"])
        inp.pipe_key_value_list([("x", "c")])
        inp.advance_time(100)
        inp.pipe_input("y", "d")
        assert [(r.key, r.value, r.timestamp) for r, _, _ in Recorder.seen] == [
            (None, "a", 1000), (None, "b", 1010), ("x", "c", 1020), ("y", "d", 1130)]


def test_default_serdes_from_config_and_missing():
    t = Topology()
    t.add_source("src", "in")
    t.add_processor("rec", Recorder, "src")
    t.add_sink("out", "out", "rec")
    with pytest.raises(ConfigError, match="source 'src' has no serde and config 'default.key.serde'"):
        TopologyTestDriver(t)
    cfg = {"default.key.serde": "STRING", "default.value.serde": serdes.JSON}
    with TopologyTestDriver(t, cfg) as driver:
        driver.create_input_topic("in", S, serdes.JSON).pipe_input("k", {"a": 1})
        assert driver.create_output_topic("out", S, serdes.JSON).read_value() == {"a": 1}


def test_driver_input_errors():
    with TopologyTestDriver(recorder_topology()) as driver:
        with pytest.raises(UnknownTopicError, match="unknown input topic 'nope'"):
            driver.create_input_topic("nope", S, S)
        out = driver.create_output_topic("out", S, S)
        from streams.errors import EmptyTopicError
        with pytest.raises(EmptyTopicError, match="'out' is empty"):
            out.read_value()
    with pytest.raises(ProcessingError, match="closed"):
        driver.pipe_raw("in", None, None, 0)


class Rekey(Processor):
    def process(self, record):
        for word in record.value.split():
            self.context.forward(record.with_key(word))


def test_internal_topic_records_route_to_downstream_subtopology_in_order():
    t = Topology()
    t.add_source("src", "in", key_serde=S, value_serde=S)
    t.add_processor("rekey", Rekey, "src")
    t.add_sink("to-rep", "rekeyed", "rekey", key_serde=S, value_serde=S)
    t.add_source("from-rep", "rekeyed", key_serde=S, value_serde=S)
    t.add_processor("rec", Recorder, "from-rep")
    t.add_sink("out", "out", "rec", key_serde=S, value_serde=S)
    t.add_internal_topic("rekeyed")
    assert len(t.build()) == 2
    with TopologyTestDriver(t, {"application.id": "app"}) as driver:
        inp = driver.create_input_topic("in", S, S)
        inp.pipe_input(None, "b a", timestamp=10)
        inp.pipe_input(None, "c", timestamp=20)
        # everything downstream happened before pipe_input returned
        out = driver.create_output_topic("out", S, S)
        assert out.read_key_values_to_list() == [("b", "b a"), ("a", "b a"), ("c", "c")]
        metas = [(m.topic, m.offset) for _, m, _ in Recorder.seen]
        assert metas == [("app-rekeyed", 0), ("app-rekeyed", 1), ("app-rekeyed", 2)]
        # sub-topologies are numbered in the order their first node was added, as Kafka 2.4+
        # (its 4.1.1 describe() of this topology puts src in 0, from-rep in 1)
        assert str(Recorder.context_ref.task_id) == "1_0"
        hist = [(r.topic, r.key) for r in driver.producer_history()]
        assert hist == [("app-rekeyed", b"b"), ("app-rekeyed", b"a"), ("out", b"b"), ("out", b"a"),
                        ("app-rekeyed", b"c"), ("out", b"c")]


def test_punctuation_can_cancel_itself_and_errors_are_wrapped():
    class SelfCancel(Processor):
        def init(self, context):
            self.context = context
            self.fired = 0
            self.handle = context.schedule(10, PunctuationType.STREAM_TIME, self.tick)
            context.schedule(100, PunctuationType.WALL_CLOCK_TIME, self.explode)
            SelfCancel.instance = self

        def tick(self, ts):
            self.fired += 1
            self.context.commit()
            if self.fired == 2:
                self.handle.cancel()

        def explode(self, ts):
            raise RuntimeError("punctuator failed")

        def process(self, record):
            pass

    t = Topology()
    t.add_source("src", "in", key_serde=S, value_serde=S)
    t.add_processor("sc", SelfCancel, "src")
    with TopologyTestDriver(t) as driver:
        inp = driver.create_input_topic("in", S, S)
        for ts in (0, 10, 20, 30):
            inp.pipe_input("k", "v", timestamp=ts)
        assert SelfCancel.instance.fired == 2
        with pytest.raises(ProcessingError, match="while punctuating: task_id=0_0, processor=sc, timestamp=100"):
            driver.advance_wall_clock_time(100)


def test_schedule_rejects_bad_interval():
    class BadSchedule(Processor):
        def init(self, context):
            context.schedule(0, PunctuationType.STREAM_TIME, lambda ts: None)

        def process(self, record):
            pass

    t = Topology()
    t.add_source("src", "in", key_serde=S, value_serde=S)
    t.add_processor("bad", BadSchedule, "src")
    with pytest.raises(ProcessingError, match="punctuation interval must be a positive int"):
        TopologyTestDriver(t)


class RawStoreBuilder:
    """The minimal StoreBuilder surface (name, build, logging_enabled) over a real bytes store."""

    def __init__(self, name, store_cls):
        self.name = name
        self.store_cls = store_cls
        self.logging_enabled = False

    def build(self):
        return self.store_cls(self.name)


class Remember(Processor):
    def init(self, context):
        self.context = context
        self.store = context.get_state_store("raw")

    def process(self, record):
        old = self.store.get(record.key)
        self.store.put(record.key, (old or b"") + record.value, record.timestamp)
        self.context.forward(record.with_value(self.store.get(record.key)))


@pytest.mark.parametrize("store_cls_name", ["InMemoryKeyValueStore", "RocksDBKeyValueStore"])
def test_get_state_store_with_real_stores(store_cls_name):
    import state.memory_kv
    import state.rocksdb_kv
    cls = getattr(state.memory_kv, store_cls_name, None) or getattr(state.rocksdb_kv, store_cls_name)
    B = serdes.BYTES
    t = Topology()
    t.add_source("src", "in", key_serde=B, value_serde=B)
    t.add_processor("remember", Remember, "src")
    t.add_sink("out", "out", "remember", key_serde=B, value_serde=B)
    t.add_state_store(RawStoreBuilder("raw", cls), "remember")
    with TopologyTestDriver(t, {"application.id": "raw-app"}) as driver:
        inp = driver.create_input_topic("in", B, B)
        inp.pipe_input(b"k", b"a")
        inp.pipe_input(b"k", b"b")
        inp.pipe_input(b"j", b"c")
        assert driver.create_output_topic("out", B, B).read_values_to_list() == [b"a", b"ab", b"c"]
        store = driver.get_key_value_store("raw")
        assert store.get(b"k") == b"ab"
        assert driver.get_state_store("raw") is store
        task_dir = driver.config["state.dir"] + "/raw-app/0_0"
        import os
        assert os.path.isdir(task_dir)
    assert not store.is_open


def test_sink_partitioner_and_serialization_error():
    calls = []

    def partitioner(topic, key, value, num_partitions):
        calls.append((topic, key, value, num_partitions))
        return 0

    t = Topology()
    t.add_source("src", "in", key_serde=S, value_serde=S)
    t.add_sink("out", "out", "src", key_serde=S, value_serde=serdes.INT32, partitioner=partitioner)
    with TopologyTestDriver(t) as driver:
        with pytest.raises(ProcessingError):
            driver.pipe_raw("in", b"k", b"v", 0)
        assert calls == []  # serialization failed before partitioning
    t2 = Topology()
    t2.add_source("src", "in", key_serde=S, value_serde=S)
    t2.add_sink("out", "out", "src", key_serde=S, value_serde=S, partitioner=partitioner)
    with TopologyTestDriver(t2) as driver:
        driver.create_input_topic("in", S, S).pipe_input("k", "v", timestamp=3)
        assert calls == [("out", "k", "v", 1)]
        assert driver.producer_history("out")[0].partition == 0


def test_sink_serialization_error_names_sink_and_topic():
    t = Topology()
    t.add_source("src", "in", key_serde=S, value_serde=S)
    t.add_sink("out", "numbers", "src", key_serde=S, value_serde=serdes.INT32)
    with TopologyTestDriver(t) as driver:
        with pytest.raises(ProcessingError, match="processor=out") as err:
            driver.pipe_raw("in", b"k", b"v", 0)
        assert "sink 'out' could not serialize a record for topic 'numbers'" in str(err.value)
