"""max.task.idle.ms (KIP-695): a task with an empty input partition waits while that partition's
lag (from the main consumer's fetches) is unknown or positive; with the lag known to be zero it
waits max.task.idle.ms (0: not at all); -1 never waits. The lag is read from a real consumer of
the embedded cluster."""

from __future__ import annotations

import time

import pytest
from confluent_kafka import Message, TopicPartition

from replication.cluster import LocalCluster
from state.directory import StateDirectory
from state.task_id import TaskId
from streams import Processor, Topology, serdes
from streams.errors import ConfigError
from streams.runtime.config import StreamsConfig
from streams.runtime.partition_group import PartitionGroup
from streams.runtime.task import StreamTask
from streams.runtime.task_manager import fetched_lag

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


def test_a_task_with_an_empty_partition_that_has_lag_does_not_process(tmp_path):
    seen = []

    class Collect(Processor):
        def process(self, record):
            seen.append(record.timestamp)

    topo = Topology()
    topo.add_source("x", "x", key_serde=serdes.BYTES, value_serde=serdes.BYTES)
    topo.add_source("y", "y", key_serde=serdes.BYTES, value_serde=serdes.BYTES)
    topo.add_processor("p", Collect, "x", "y")
    lags = {Y: 4}
    task = StreamTask(TaskId(0, 0), topo.build()[0], topo, input_partitions=[X, Y], application_id="app",
                      config={}, collector=None, state_directory=StateDirectory(tmp_path, "app"), thread_cache=None,
                      eos_enabled=False, clock_ms=lambda: 0, max_task_idle_ms=0, fetched_lag=lags.get)
    task.initialize_if_needed()
    task.complete_restoration() if task.state.value != "RUNNING" else None
    task.add_records(X, [_msg("x", 0, 10), _msg("x", 1, 30)])
    assert task.process(100) == 0 and seen == []  # y may still bring a record before 10
    task.add_records(Y, [_msg("y", 0, 20)])
    assert task.process(1) == 1 and seen == [10]
    assert task.process(100) == 1 and seen == [10, 20]  # y empty again, still lagging: x's 30 waits
    lags[Y] = 0
    assert task.process(100) == 1 and seen == [10, 20, 30]


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
