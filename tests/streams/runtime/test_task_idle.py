"""max.task.idle.ms (KIP-695): a task with an empty input partition waits while that partition's
lag (from the main consumer's fetches) is unknown or positive; with the lag known to be zero it
waits max.task.idle.ms (0: not at all); -1 never waits. The lag is read from a real consumer of
the embedded cluster."""

from __future__ import annotations

import time

import pytest
from confluent_kafka import OFFSET_BEGINNING, Message, TopicPartition

from replication.cluster import LocalCluster
from state.directory import StateDirectory
from state.task_id import TaskId
from streams import App, Processor, StreamsBuilder, Topology, serdes
from streams.errors import ConfigError
from streams.metrics import TASK_GROUP, MetricsRegistry
from streams.runtime.config import StreamsConfig
from streams.runtime.partition_group import PartitionGroup
from streams.runtime.task import StreamTask
from streams.runtime.task_manager import fetched_lag

from streams.runtime.metadata import active_task_metadata

from _runtime_util import Cluster, unique, wait_for

S = serdes.STRING
X, Y = ("x", 0), ("y", 0)


def _msg(topic, offset, ts):
    return Message(topic=topic, partition=0, offset=offset, key=None, value=b"v", timestamp=(1, ts))


def test_ready_to_process_follows_kip_695():
    group = PartitionGroup([X, Y])
    group.add(X, [_msg("x", 0, 5)])
    lags = {Y: None}
    ready = group.ready_to_process
    assert ready(0, -1, lags.get)  # -1: never waits
    assert not ready(0, 0, lags.get)  # lag unknown: wait for the fetch to tell
    lags[Y] = 3
    assert not ready(0, 0, lags.get) and not ready(10**9, 500, lags.get)  # data on its way: wait
    lags[Y] = 0
    assert ready(0, 0, lags.get)  # nothing more there: 0 does not idle
    lags[Y] = 1
    assert not ready(0, 500, lags.get)  # (the deadline set just now is forgotten)
    lags[Y] = 0
    assert not ready(1000, 500, lags.get) and not ready(1499, 500, lags.get)  # idles 500 ms from 1000
    assert ready(1500, 500, lags.get)
    lags[Y] = 2
    assert not ready(1600, 500, lags.get)  # lag again: the idle deadline is forgotten
    lags[Y] = 0
    assert not ready(1700, 500, lags.get) and ready(2200, 500, lags.get)
    group.add(Y, [_msg("y", 0, 6)])
    lags[Y] = None
    assert group.all_buffered() and ready(0, 0, lags.get)  # nothing empty: nothing to wait for
    assert not PartitionGroup([X, Y]).ready_to_process(0, 0, {X: 0, Y: 0}.get)  # nothing buffered


def _task_of_x_and_y(tmp_path, seen: list, **kwargs) -> StreamTask:
    """A running task over partitions X and Y whose processor appends each record's timestamp
    to `seen`; `kwargs` go to StreamTask (clock_ms, max_task_idle_ms, fetched_lag, metrics)."""

    class Collect(Processor):
        def process(self, record):
            seen.append(record.timestamp)

    topo = Topology()
    topo.add_source("x", "x", key_serde=serdes.BYTES, value_serde=serdes.BYTES)
    topo.add_source("y", "y", key_serde=serdes.BYTES, value_serde=serdes.BYTES)
    topo.add_processor("p", Collect, "x", "y")
    task = StreamTask(TaskId(0, 0), topo.build()[0], topo, input_partitions=[X, Y], application_id="app",
                      config={}, collector=None, state_directory=StateDirectory(tmp_path, "app"), thread_cache=None,
                      eos_enabled=False, **kwargs)
    task.initialize_if_needed()
    task.complete_restoration() if task.state.value != "RUNNING" else None
    return task


def test_a_task_with_an_empty_partition_that_has_lag_does_not_process(tmp_path):
    seen: list = []
    lags = {Y: 4}
    task = _task_of_x_and_y(tmp_path, seen, clock_ms=lambda: 0, max_task_idle_ms=0, fetched_lag=lags.get)
    task.add_records(X, [_msg("x", 0, 10), _msg("x", 1, 30)])
    assert task.process(100) == 0 and seen == []  # y may still bring a record before 10
    task.add_records(Y, [_msg("y", 0, 20)])
    assert task.process(1) == 1 and seen == [10]
    assert task.process(100) == 1 and seen == [10, 20]  # y empty again, still lagging: x's 30 waits
    lags[Y] = 0
    assert task.process(100) == 1 and seen == [10, 20, 30]


def test_processing_on_past_the_idle_deadline_is_counted_as_enforced(tmp_path):
    """Kafka's enforced-processing-total: the records a task processes while one of its inputs
    has nothing buffered and its max.task.idle.ms ran out; none while it waits or has records
    on every input."""
    seen: list = []
    registry, clock = MetricsRegistry(), [0]
    task = _task_of_x_and_y(tmp_path, seen, clock_ms=lambda: clock[0], max_task_idle_ms=100,
                            fetched_lag={Y: 0}.get, metrics=registry)

    def enforced() -> int:
        return registry.value("enforced-processing-total", TASK_GROUP, task_id="0_0")

    task.add_records(X, [_msg("x", 0, 10), _msg("x", 1, 30)])
    assert task.process(100) == 0 and enforced() == 0  # y is idle: wait 100 ms
    assert active_task_metadata(task).time_current_idling_started == 0  # (Kafka's TaskMetadata)
    clock[0] = 100
    assert task.process(1) == 1 and seen == [10] and enforced() == 1  # the deadline passed
    assert active_task_metadata(task).time_current_idling_started is None
    task.add_records(Y, [_msg("y", 0, 20)])
    assert task.process(1) == 1 and seen == [10, 20] and enforced() == 1  # both buffered: not enforced
    # y had a record: empty again, it idles 100 ms again from now (Kafka drops a partition's
    # deadline whenever it has records), then the task goes on
    clock[0] = 150
    assert task.process(100) == 0 and enforced() == 1
    clock[0] = 249
    assert task.process(100) == 0 and active_task_metadata(task).time_current_idling_started == 150
    clock[0] = 250
    assert task.process(100) == 1 and seen == [10, 20, 30] and enforced() == 2


def test_the_lag_comes_from_the_consumers_fetches_on_the_embedded_cluster(tmp_path):
    with LocalCluster(tmp_path / "cluster", num_brokers=1) as cluster:
        cluster.create_topic("t", partitions=1, replication_factor=1)
        producer = cluster.producer({"linger.ms": 0})
        for i in range(10):
            producer.produce("t", b"v%d" % i, b"k", partition=0)
        assert producer.flush(30) == 0
        consumer = cluster.consumer({"group.id": "g", "auto.offset.reset": "earliest", "fetch.max.bytes": 1 << 20})
        try:
            assert fetched_lag(consumer, ("t", 0)) is None  # nothing fetched: unknown
            consumer.assign([TopicPartition("t", 0)])
            got = []
            deadline = time.monotonic() + 30
            while len(got) < 4 and time.monotonic() < deadline:
                got += [m for m in consumer.consume(4 - len(got), 0.5) if m.error() is None]
            assert len(got) == 4
            assert fetched_lag(consumer, ("t", 0)) == 6  # high watermark 10, position 4
            while len(got) < 10 and time.monotonic() < deadline:
                got += [m for m in consumer.consume(10, 0.5) if m.error() is None]
            assert fetched_lag(consumer, ("t", 0)) == 0
        finally:
            consumer.close()


@pytest.mark.parametrize("value, ok", [(-1, True), ("0", True), (250, True), (-2, False), ("soon", False)])
def test_max_task_idle_ms_is_parsed_as_kafka_defines_it(value, ok):
    config = {"application.id": "a", "bootstrap.servers": "x", "max.task.idle.ms": value}
    if ok:
        assert StreamsConfig.parse(config).max_task_idle_ms == int(value)
    else:
        with pytest.raises(ConfigError, match="max.task.idle.ms"):
            StreamsConfig.parse(config)


def test_a_partition_nothing_was_delivered_from_lags_from_where_its_consumer_starts(backend_config):
    """The clients report no position until a record is delivered; the lag then counts from the
    committed offset the consumer starts at (else the log start): the records fetched but not
    yet delivered are on their way, not "no lag" (which let a joining task run one input ahead
    on a real broker and miss results)."""
    cluster = Cluster(backend_config)
    consumer = None
    try:
        x, y = unique("idle-x"), unique("idle-y")
        cluster.create_topics(1, x, y)
        cluster.produce(x, [(b"k", b"x%d" % i) for i in range(3)], timestamps=[10, 11, 12])
        cluster.produce(y, [(b"k", b"y%d" % i) for i in range(5)], timestamps=[1, 2, 3, 4, 5])
        consumer = cluster.backend.consumer({"group.id": unique("g"), "auto.offset.reset": "earliest",
                                             "enable.auto.commit": False})
        # explicit offsets: no committed-offset lookup (a new group's coordinator may not be ready)
        consumer.assign([TopicPartition(x, 0, OFFSET_BEGINNING)])
        got: list = []
        wait_for(lambda: got.extend(m for m in consumer.consume(3, 0.2) if m.error() is None) or len(got) == 3,
                 30, "x's records")
        ty = TopicPartition(y, 0)
        consumer.incremental_assign([TopicPartition(y, 0, 2)])  # where a committed offset 2 starts it
        wait_for(lambda: consumer.get_watermark_offsets(ty, cached=True)[1] == 5, 30, "y's high watermark")
        assert consumer.position([ty])[0].offset < 0  # fetched, nothing delivered: no position
        assert fetched_lag(consumer, (y, 0), 2) == 3  # started at its committed offset 2
        assert fetched_lag(consumer, (y, 0)) == 5  # (nothing committed: from the log start)
        assert fetched_lag(consumer, (y, 0), 5) == 0  # (committed at its end: nothing to wait for)
        assert fetched_lag(consumer, (x, 0), 0) == 0  # delivered: the position counts
    finally:
        if consumer is not None:
            consumer.close()
        cluster.close()


def test_a_restarted_task_waits_for_the_records_past_its_committed_offsets(backend_config, tmp_path):
    """x and y merged in one task under max.task.idle.ms 0, restarted with new records on both:
    y's, earlier, come first (its lag counts from its committed offset while nothing of it is
    delivered), however the consumer's fetches of the two partitions interleave; restarted with
    new records on x only: they go through (y has no lag past its committed offset)."""
    x, y, out = unique("merge-x"), unique("merge-y"), unique("merge-out")
    cluster = Cluster(backend_config)
    try:
        cluster.create_topics(1, x, y, out)
        config = {**cluster.config, "application.id": unique("merge-idle"), "state.dir": str(tmp_path),
                  "commit.interval.ms": 100, "max.task.idle.ms": 0}

        def run(expected: int, committed: tuple[int, int]) -> None:
            b = StreamsBuilder()
            b.stream(x, key_serde=S, value_serde=S).merge(b.stream(y, key_serde=S, value_serde=S)).to(
                out, key_serde=S, value_serde=S)
            app = App(b.build(), config)
            app.start()
            try:
                cluster.read_all(out, 1, until=lambda got: len(got) >= expected, timeout=60)
                wait_for(lambda: (cluster.committed_offset(config["application.id"], x),
                                  cluster.committed_offset(config["application.id"], y)) == committed,
                         30, "the inputs' offsets committed")
            finally:
                assert app.close(timeout=60)

        cluster.produce(x, [(b"k", b"a")], timestamps=[100])
        cluster.produce(y, [(b"k", b"b")], timestamps=[50])
        run(2, (1, 1))
        cluster.produce(x, [(b"k", b"c%d" % i) for i in range(3)], timestamps=[300, 301, 302])
        cluster.produce(y, [(b"k", b"e")], timestamps=[200])
        run(6, (4, 2))
        got = cluster.read_all(out, 1, until=lambda got: len(got) >= 6)
        assert [m.value() for m in got[2:]] == [b"e", b"c0", b"c1", b"c2"]
        # nothing new on y: its lag is none from its committed offset, x's record goes through
        # (counted from the log start instead, y would hold the task back for good)
        cluster.produce(x, [(b"k", b"f")], timestamps=[400])
        run(7, (5, 2))
    finally:
        cluster.close()
