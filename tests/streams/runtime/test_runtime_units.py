"""Runtime pieces that need no broker: config, murmur2, partition group, state machines,
internal topic planning, App misuse."""

from __future__ import annotations

import pytest
from confluent_kafka import Message, TopicPartition

from state.directory import StateDirectory
from state.errors import InvalidStateStoreError
from state.task_id import TaskId
from streams import App, AppState, Processor, StreamsBuilder, Topology, serdes
from streams.processor import TimestampExtractor
from streams.errors import ConfigError
from eddy.murmur2 import murmur2_partition as partition_for_key
from streams.runtime.collector import RecordCollector
from streams.runtime.config import StreamsConfig
from streams.runtime.errors import MissingSourceTopicError, ProductionError, RuntimeStateError
from streams.runtime.internal import plan_internal_topics
from streams.runtime.partition_group import PartitionGroup
from streams.runtime.task import StreamTask, TaskState

from _runtime_util import wordcount_topology


def test_config_defaults_and_errors():
    cfg = StreamsConfig.parse({"application.id": "a", "bootstrap.servers": "local://"})
    assert (cfg.commit_interval_ms, cfg.num_stream_threads, cfg.num_standby_replicas, cfg.poll_ms) == (30000, 1, 0, 100)
    assert cfg.processing_guarantee == "at_least_once" and cfg.state_dir.endswith("eddy-streams")
    eos = StreamsConfig.parse({"application.id": "a", "bootstrap.servers": "x:1",
                               "processing.guarantee": "exactly_once_v2"})
    assert eos.commit_interval_ms == 100 and eos.eos_enabled
    with pytest.raises(ConfigError, match="application.id"):
        StreamsConfig.parse({"bootstrap.servers": "x:1"})
    with pytest.raises(ConfigError, match="application.id"):
        StreamsConfig.parse({"application.id": "bad id!", "bootstrap.servers": "x:1"})
    with pytest.raises(ConfigError, match="1-249 characters"):
        StreamsConfig.parse({"application.id": "a" * 250, "bootstrap.servers": "x:1"})
    assert StreamsConfig.parse({"application.id": "a" * 249, "bootstrap.servers": "x:1"}).application_id == "a" * 249
    with pytest.raises(ConfigError, match="processing.guarantee"):
        StreamsConfig.parse({"application.id": "a", "bootstrap.servers": "x:1", "processing.guarantee": "maybe"})
    with pytest.raises(ConfigError, match="exactly_once_v2"):
        StreamsConfig.parse({"application.id": "a", "bootstrap.servers": "x:1", "processing.guarantee": "exactly_once"})
    with pytest.raises(ConfigError, match="num.stream.threads"):
        StreamsConfig.parse({"application.id": "a", "bootstrap.servers": "x:1", "num.stream.threads": 0})
    with pytest.raises(ConfigError, match="bootstrap.servers"):
        StreamsConfig.parse({"application.id": "a"})
    assert cfg.metadata_refresh_ms == 300_000
    assert StreamsConfig.parse({"application.id": "a", "bootstrap.servers": "x:1",
                                "topic.metadata.refresh.interval.ms": "1000"}).metadata_refresh_ms == 1000
    with pytest.raises(ConfigError, match="topic.metadata.refresh.interval.ms"):
        StreamsConfig.parse({"application.id": "a", "bootstrap.servers": "x:1",
                             "topic.metadata.refresh.interval.ms": "soon"})
    with pytest.raises(ConfigError, match="Topology"):
        App("not a topology", {"application.id": "a", "bootstrap.servers": "x:1"})


class _Msg:
    """Stands in for a consumer Message in the partition group (only timestamp() is read)."""

    def __init__(self, ts: int, tag: str) -> None:
        self.ts, self.tag = ts, tag

    def timestamp(self):
        return (1, self.ts)


def test_partition_group_picks_lowest_head_timestamp(monkeypatch):
    import streams.runtime.partition_group as pg

    monkeypatch.setattr(pg, "_TIMESTAMP", _Msg.timestamp)
    group = PartitionGroup([("a", 0), ("b", 0)])
    group.add(("a", 0), [_Msg(5, "a5"), _Msg(20, "a20")])
    group.add(("b", 0), [_Msg(1, "b1"), _Msg(10, "b10"), _Msg(30, "b30")])
    assert group.buffered == 5
    assert [m.tag for m in group.drain(4)] == ["b1", "a5", "b10", "a20"]
    assert group.buffered == 1
    assert [m.tag for m in group.drain(10)] == ["b30"]
    assert group.buffered == 0 and list(group.drain(10)) == []


def test_partition_group_counts_the_key_and_value_bytes_it_buffers():
    """What input.buffer.max.bytes and input-buffer-bytes-total count: key and value bytes (None
    counting 0) of the records still buffered, and the largest of them."""
    group = PartitionGroup([("a", 0), ("b", 0)])
    assert group.buffered_bytes() == (0, 0)
    group.add(("a", 0), [Message("a", 0, 0, b"k1", b"v" * 10, None, None, (0, 5)),
                         Message("a", 0, 1, None, b"w" * 3, None, None, (0, 7))])
    group.add(("b", 0), [Message("b", 0, 0, b"key", None, None, None, (0, 6))])
    assert group.buffered_bytes() == (12 + 3 + 3, 12)
    assert [tp for tp, _ in group.runs(1)] == [("a", 0)]  # the first record, 12 bytes, taken
    assert group.buffered_bytes() == (6, 3)
    group.clear()
    assert group.buffered_bytes() == (0, 0)


def test_partition_group_runs_follow_the_record_by_record_choice(monkeypatch):
    """runs() takes stretches of one partition; what it yields, flattened, is Kafka's choice
    made record by record (the lowest head timestamp, the first partition on a tie), each run
    one partition's records, up to max_records in all; with stop_when_empty it stops once the
    partition it took from runs empty."""
    import random

    import streams.runtime.partition_group as pg

    monkeypatch.setattr(pg, "_TIMESTAMP", _Msg.timestamp)
    rng = random.Random(11)
    for case in range(300):
        tps = [("t", p) for p in range(rng.randint(2, 3))]
        contents = {tp: [_Msg(rng.randint(0, 12), f"{tp[1]}:{i}") for i in range(rng.randint(0, 8))] for tp in tps}
        stop_when_empty = case % 3 == 0
        limit = rng.randint(1, 30)
        # the model: record by record over copies of the queues
        heads = {tp: list(ms) for tp, ms in contents.items()}
        expected = []
        while len(expected) < limit:
            live = [tp for tp in tps if heads[tp]]
            if not live:
                break
            tp = min(live, key=lambda t: (heads[t][0].ts, tps.index(t)))
            expected.append((tp, heads[tp].pop(0).tag))
            if stop_when_empty and len(live) > 1 and not heads[tp]:
                break
        group = PartitionGroup(tps)
        for tp, ms in contents.items():
            group.add(tp, ms)
        got = [(tp, m.tag) for tp, run in group.runs(limit, stop_when_empty) for m in run]
        assert got == expected, case
        assert group.buffered == sum(map(len, contents.values())) - len(expected)


def test_task_state_machine_rejects_invalid_transitions(tmp_path):
    topo = wordcount_topology("lines", "out")
    sub = topo.build()[0]
    task = StreamTask(TaskId(0, 0), sub, topo, input_partitions=[("lines", 0)], application_id="app",
                      config={}, collector=None, state_directory=StateDirectory(tmp_path, "app"),
                      thread_cache=None, eos_enabled=False, clock_ms=lambda: 0)
    assert task.state is TaskState.CREATED
    with pytest.raises(RuntimeStateError, match="complete_restoration"):
        task.complete_restoration()
    with pytest.raises(RuntimeStateError, match="CREATED -> CREATED"):
        task.revive()
    task.initialize_if_needed()
    assert task.state is TaskState.RESTORING
    task.complete_restoration()
    assert task.state is TaskState.RUNNING
    task.close_clean()
    assert task.state is TaskState.CLOSED
    with pytest.raises(RuntimeStateError, match="CLOSED -> RESTORING"):
        task._transit(TaskState.RESTORING)
    task.revive()
    assert task.state is TaskState.CREATED


class _OffsetMsg:
    """Stands in for a buffered consumer Message (only offset() is read by the commit)."""

    def __init__(self, offset: int) -> None:
        self._offset = offset

    def offset(self) -> int:
        return self._offset


def test_committable_offsets_use_head_record_or_consumer_position(monkeypatch, tmp_path):
    import streams.runtime.task as task_module

    monkeypatch.setattr(task_module, "_OFFSET", _OffsetMsg.offset)
    topo = wordcount_topology("lines", "out")
    sub = topo.build()[0]
    parts = [("lines", 0), ("lines", 1), ("lines", 2)]
    task = StreamTask(TaskId(0, 0), sub, topo, input_partitions=parts, application_id="app",
                      config={}, collector=None, state_directory=StateDirectory(tmp_path, "app"),
                      thread_cache=None, eos_enabled=True, clock_ms=lambda: 0)
    task.consumed.update({("lines", 0): 9, ("lines", 1): 4, ("lines", 2): 7})
    task.partition_group.queues[("lines", 1)].extend([_OffsetMsg(5), _OffsetMsg(6)])
    asked = []

    def position(tps):
        asked.append(sorted(tps))
        # partition 0: a commit marker at offset 10 was consumed; partition 2: no position known
        return {("lines", 0): 11}

    offsets = task.committable_offsets(position)
    assert asked == [[("lines", 0), ("lines", 2)]]  # only drained partitions ask the consumer
    assert offsets == {("lines", 0): 11, ("lines", 1): 5, ("lines", 2): 8}
    assert task.position_check  # partition 2 may still have a marker to step past
    task.post_commit(offsets)
    # nothing moved: nothing to commit again; a position behind what was processed is ignored
    assert task.committable_offsets(lambda tps: {("lines", 2): 3}) == {}
    assert task.committable_offsets(lambda tps: {("lines", 2): 9}) == {("lines", 2): 9}
    assert not task.position_check
    assert task.committable_offsets() == {}  # without a position: last processed + 1 (as committed)


def test_plan_internal_topics_partition_counts():
    topo = wordcount_topology("lines", "out")
    subs = topo.build()
    plan = plan_internal_topics(topo, subs, "wc", {"lines": 4, "out": 1}, replication_factor=3)
    rep = plan.specs["wc-counts-repartition"]
    log = plan.specs["wc-counts-changelog"]
    assert (rep.partitions, rep.config["cleanup.policy"], rep.replication_factor) == (4, "delete", 3)
    assert (log.partitions, log.config["cleanup.policy"]) == (4, "compact")
    assert plan.partitions_of_sub == {0: 4, 1: 4}
    assert plan.source_topics == ["lines", "wc-counts-repartition"]
    with pytest.raises(MissingSourceTopicError, match="lines"):
        plan_internal_topics(topo, subs, "wc", {"out": 1})


def test_unlogged_store_gets_no_changelog():
    from streams.dsl import Materialized

    b = StreamsBuilder()
    (b.stream("in", key_serde=serdes.STRING, value_serde=serdes.STRING)
        .group_by(lambda k, v: v, key_serde=serdes.STRING, value_serde=serdes.STRING)
        .count(store=Materialized.as_("c").with_logging_disabled()))
    topo = b.build()
    plan = plan_internal_topics(topo, topo.build(), "x", {"in": 2})
    assert set(plan.specs) == {"x-c-repartition"}


def test_app_misuse_before_start():
    app = App(wordcount_topology("lines", "out"), {"application.id": "a", "bootstrap.servers": "x:1"})
    assert app.state is AppState.CREATED
    with pytest.raises(InvalidStateStoreError, match="CREATED"):
        app.store("counts")
    with pytest.raises(InvalidStateStoreError, match="unknown state store"):
        app.store("nope")
    with pytest.raises(ConfigError):
        app.set_state_listener("not callable")
    seen = []
    app.set_state_listener(lambda new, old: seen.append((old, new)))
    assert app.close() is True
    assert app.state is AppState.NOT_RUNNING
    assert seen == [(AppState.CREATED, AppState.PENDING_SHUTDOWN), (AppState.PENDING_SHUTDOWN, AppState.NOT_RUNNING)]
    with pytest.raises(RuntimeStateError, match="before start"):
        app.start()


class _FailingProducer:
    def __init__(self) -> None:
        self.callbacks = []

    def produce(self, topic, value=None, key=None, partition=-1, on_delivery=None, callback=None, timestamp=0,
                headers=None):  # confluent-kafka's order, positional or not
        self.callbacks.append((topic, partition, on_delivery))

    def poll(self, timeout=0):
        return 0

    def flush(self, timeout=0):
        return 0


class _DeliveredMsg:
    def __init__(self, topic, partition, offset):
        self._t, self._p, self._o = topic, partition, offset

    def topic(self):
        return self._t

    def partition(self):
        return self._p

    def offset(self):
        return self._o


def test_collector_tracks_offsets_and_surfaces_errors_at_next_send():
    from confluent_kafka import KafkaError

    producer = _FailingProducer()
    collector = RecordCollector(producer)
    collector.send("t", b"k", b"v", partition=1, timestamp=5)
    collector.send("t", b"k", b"v", partition=1, timestamp=6)
    producer.callbacks[0][2](None, _DeliveredMsg("t", 1, 41))
    producer.callbacks[1][2](None, _DeliveredMsg("t", 1, 42))
    assert collector.offsets() == {TopicPartition("t", 1): 42}
    collector.send("t", b"k", b"v", partition=0, timestamp=7)
    producer.callbacks[2][2](KafkaError(KafkaError.MSG_SIZE_TOO_LARGE), _DeliveredMsg("t", 0, -1))
    with pytest.raises(ProductionError, match="topic 't' partition 0"):
        collector.send("t", b"k", b"v", partition=0, timestamp=8)
    collector.send("t", b"k", b"v", partition=0, timestamp=9)  # reported once
    producer.callbacks[-1][2](KafkaError(KafkaError.MSG_SIZE_TOO_LARGE), _DeliveredMsg("t", 0, -1))
    with pytest.raises(ProductionError):
        collector.flush()


class _Metadata:
    def __init__(self, n):
        self.topics = {"t": type("T", (), {"partitions": {i: None for i in range(n)}})()}


def test_collector_routes_keys_like_the_default_partitioner():
    from confluent_kafka import KafkaError

    from streams.runtime.collector import uses_murmur2

    producer = _FailingProducer()
    producer.list_topics = lambda topic, timeout=None: _Metadata(5)
    collector = RecordCollector(producer, murmur2_partitioning=True)
    for key in (b"alpha", b"beta", b"alpha", b"gamma"):
        collector.send("t", key, b"v", partition=None, timestamp=1)
    collector.send("t", None, b"v", partition=None, timestamp=1)  # null key: the producer decides
    collector.send("t", b"alpha", b"v", partition=4, timestamp=1)  # an explicit partition wins
    assert [c[1] for c in producer.callbacks] == [partition_for_key(b"alpha", 5), partition_for_key(b"beta", 5),
                                                  partition_for_key(b"alpha", 5), partition_for_key(b"gamma", 5),
                                                  -1, 4]
    # a sink's sender routes the same way and surfaces a failed delivery at its next send
    send_t = collector.sender("t")
    for key in (b"alpha", b"delta", None):
        send_t(key, b"v", 1, None)
    assert [c[1] for c in producer.callbacks[6:]] == [partition_for_key(b"alpha", 5),
                                                      partition_for_key(b"delta", 5), -1]
    producer.callbacks[-1][2](KafkaError(KafkaError.MSG_SIZE_TOO_LARGE), _DeliveredMsg("t", 0, -1))
    with pytest.raises(ProductionError, match="topic 't' partition 0"):
        send_t(b"alpha", b"v", 2, None)
    assert uses_murmur2({}) and uses_murmur2({"partitioner": "murmur2"})
    assert not uses_murmur2({"producer.partitioner": "consistent_random"})


class _ValueTime(TimestampExtractor):
    """Event time carried in the value: b"<name>@<ms>"."""

    def extract(self, record, partition_time):
        return int(record.value.split(b"@")[1])


def test_partitions_are_ordered_by_the_extracted_timestamp_of_their_heads(tmp_path):
    class Collect(Processor):
        def process(self, record):
            pass

    topo = Topology()
    topo.add_source("x", "x-topic", key_serde=serdes.BYTES, value_serde=serdes.BYTES, timestamp_extractor=_ValueTime())
    topo.add_source("y", "y-topic", key_serde=serdes.BYTES, value_serde=serdes.BYTES, timestamp_extractor=_ValueTime())
    topo.add_processor("p", Collect, "x", "y")
    sub = topo.build()[0]
    parts = [("x-topic", 0), ("y-topic", 0)]
    task = StreamTask(TaskId(0, 0), sub, topo, input_partitions=parts, application_id="app", config={},
                      collector=None, state_directory=StateDirectory(tmp_path, "app"), thread_cache=None,
                      eos_enabled=False, clock_ms=lambda: 0)
    task.initialize_if_needed()

    def msg(topic, value, broker_ts):
        return Message(topic=topic, partition=0, offset=0, key=None, value=value, timestamp=(1, broker_ts))

    # broker timestamps say y first; the extracted event times say x first
    task.add_records(("x-topic", 0), [msg("x-topic", b"x1@100", 900), msg("x-topic", b"x2@300", 901)])
    task.add_records(("y-topic", 0), [msg("y-topic", b"y1@200", 10), msg("y-topic", b"y2@400", 11)])
    order = [m.value() for m in task.partition_group.drain(4)]
    assert order == [b"x1@100", b"y1@200", b"x2@300", b"y2@400"]
