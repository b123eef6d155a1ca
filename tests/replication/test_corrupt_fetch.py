"""A corrupt batch on the leader (one bit flipped in a closed segment file) is surfaced, not
swallowed (issue 20, item 3): the consumer delivers the records before it, then an error
message naming topic, partition and offset, and stops there until seeked; a follower fetching
it logs an ERROR naming the partition and marks the error in its fetch state."""

from __future__ import annotations

import logging
import threading
import time

from confluent_kafka import KafkaError, TopicPartition

from corruption import flip_bit_in_batch
from replication.cluster import LocalCluster
from replication.records import encode_batch

FAST = {"replica.fetch.backoff.ms": 20, "replica.socket.timeout.ms": 1000}
_pause = threading.Event()


def _wait(predicate, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while not (value := predicate()):
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        _pause.wait(0.01)
    return value


def _fill(cluster, topic: str, count: int) -> None:
    for i in range(count):
        resp = cluster.produce(topic, 0, encode_batch([(None, b"v%03d" % i, 1000 + i)]), acks=-1)
        assert resp.error == 0


def test_consumer_gets_the_records_before_a_corrupt_batch_then_an_error(tmp_path):
    with LocalCluster(tmp_path / "c", num_brokers=1, config=FAST) as cluster:
        cluster.create_topic("t", replication_factor=1, config={"segment.bytes": 400})
        _fill(cluster, "t", 30)
        log = cluster.partition_on(cluster.leader("t", 0), "t", 0).log
        assert len(log.segments) > 3
        path, _position = flip_bit_in_batch(log, 7)
        consumer = cluster.consumer({"group.id": "g", "enable.auto.commit": False})
        consumer.assign([TopicPartition("t", 0, 0)])
        got: list = []

        def until_error():
            got.extend(consumer.consume(100, 0.1))
            return any(m.error() is not None for m in got)

        _wait(until_error, 15, "the corrupt batch's error")
        values = [m.value() for m in got if m.error() is None]
        errors = [m for m in got if m.error() is not None]
        assert values == [b"v%03d" % i for i in range(7)]
        assert len(errors) == 1 and got[-1] is errors[0]
        error = errors[0]
        assert error.error().code() == KafkaError._BAD_MSG
        assert (error.topic(), error.partition(), error.offset()) == ("t", 0, 7)
        assert "t [0]" in error.error().str() and "offset 7" in error.error().str()
        assert consumer.position([TopicPartition("t", 0)])[0].offset == 7
        # stopped at the bad batch, not spinning nor skipping it
        assert consumer.consume(10, 0.3) == []
        consumer.seek(TopicPartition("t", 0, 8))
        after = _wait(lambda: consumer.consume(100, 0.1), 15, "records after the seek")
        assert after[0].offset() == 8 and after[0].value() == b"v008"
        consumer.close()
        assert path.endswith(".log")


def test_corrupt_batch_first_in_the_fetch_moves_the_position_to_it(tmp_path):
    with LocalCluster(tmp_path / "c", num_brokers=1, config=FAST) as cluster:
        cluster.create_topic("t", replication_factor=1, config={"segment.bytes": 400})
        _fill(cluster, "t", 20)
        flip_bit_in_batch(cluster.partition_on(cluster.leader("t", 0), "t", 0).log, 0)
        consumer = cluster.consumer({"group.id": "g", "enable.auto.commit": False})
        consumer.assign([TopicPartition("t", 0, 0)])
        first = _wait(lambda: consumer.consume(10, 0.1), 15, "the error")
        assert [m.error().code() for m in first] == [KafkaError._BAD_MSG]
        assert first[0].offset() == 0
        assert consumer.position([TopicPartition("t", 0)])[0].offset == 0
        consumer.close()


def test_follower_fetching_a_corrupt_batch_logs_and_marks_the_error(tmp_path, caplog):
    with LocalCluster(tmp_path / "c", num_brokers=2, config=FAST) as cluster:
        cluster.create_topic("t", replication_factor=2, config={"segment.bytes": 400})
        leader = cluster.leader("t", 0)
        follower = 1 - leader
        cluster.stop_broker(follower)
        _fill_acks1(cluster, "t", 30)
        flip_bit_in_batch(cluster.partition_on(leader, "t", 0).log, 12)
        with caplog.at_level(logging.ERROR, logger="replication.fetcher"):
            cluster.start_broker(follower)
            fetcher_state = _wait(lambda: _follower_error(cluster, follower), 20, "the follower's fetch error")
        assert "offset 12" in fetcher_state.error
        assert cluster.log_end_offset(follower, "t", 0) == 12  # the good batches before it were appended
        assert any("t-0" in r.getMessage() or "'t', 0" in r.getMessage() or "t [0]" in r.getMessage()
                   for r in caplog.records if r.levelno >= logging.ERROR)


def _fill_acks1(cluster, topic: str, count: int) -> None:
    for i in range(count):
        resp = cluster.produce(topic, 0, encode_batch([(None, b"v%03d" % i, 1000 + i)]), acks=1)
        assert resp.error == 0


def _follower_error(cluster, broker: int):
    from replication.protocol import TopicPartition as TP

    fetcher = cluster._broker(broker).fetcher_manager.fetcher_for(TP("t", 0))
    state = fetcher.fetch_state(TP("t", 0)) if fetcher is not None else None
    return state if state is not None and state.error else None
