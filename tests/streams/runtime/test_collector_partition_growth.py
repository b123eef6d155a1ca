"""A sink topic that grows: after its metadata refresh, the record collector routes keyed
records by the new partition count (Kafka's murmur2 over it), as a Kafka producer does; before
the refresh interval it keeps the count it knows. On both backends: the embedded producer's
queue view and a Kafka producer without one take different routes through the collector (Tansu
cannot add partitions)."""

from __future__ import annotations

import uuid

import pytest
from confluent_kafka import OFFSET_BEGINNING, TopicPartition
from confluent_kafka.admin import NewPartitions, NewTopic

from eddy.murmur2 import murmur2_partition
from streams.backends import for_config
from streams.runtime.collector import RecordCollector

from _runtime_util import wait_for

KEYS = [f"key-{i}".encode() for i in range(60)]


def _placements(backend, topic: str, partitions: int, value: bytes) -> dict[bytes, int]:
    consumer = backend.consumer({"group.id": "reader", "enable.auto.commit": False})
    try:
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
        placed: dict[bytes, int] = {}

        def read() -> bool:
            for m in consumer.consume(500, 0.2):
                if m.error() is None and m.value() == value:
                    placed[m.key()] = m.partition()
            return len(placed) == len(KEYS)
        wait_for(read, 30, f"every key of round {value!r}")
        return placed
    finally:
        consumer.close()


def _send_round(collector: RecordCollector, topic: str, value: bytes) -> None:
    sink_send = collector.sender(topic)
    for i, key in enumerate(KEYS):
        if i % 2:
            sink_send(key, value, 1, None)  # a sink's sender
        else:
            collector.send(topic, key, value, partition=None, timestamp=1)  # the generic path
    collector.flush()


@pytest.mark.needs_faithful_broker(reason="Tansu cannot add partitions")
def test_keyed_records_follow_a_grown_topic_after_the_refresh_interval(backend_config):
    backend = for_config(backend_config)
    topic = f"out-{uuid.uuid4().hex[:8]}"  # the Kafka broker is the session's
    try:
        admin = backend.admin()
        admin.create_topics([NewTopic(topic, 2, 1)])[topic].result(30)
        producer = backend.producer()
        collector = RecordCollector(producer, murmur2_partitioning=True, metadata_refresh_ms=0)
        slow = RecordCollector(backend.producer(), murmur2_partitioning=True, metadata_refresh_ms=3_600_000)

        _send_round(collector, topic, b"r1")
        _send_round(slow, topic, b"s1")
        assert _placements(backend, topic, 2, b"r1") == {k: murmur2_partition(k, 2) for k in KEYS}

        admin.create_partitions([NewPartitions(topic, 4)])[topic].result(30)
        wait_for(lambda: len(producer.list_topics(topic, timeout=5).topics[topic].partitions) == 4, 30,
                 "the producer sees 4 partitions")
        collector.refresh_partition_counts()
        slow.refresh_partition_counts()  # within its interval: nothing re-read
        _send_round(collector, topic, b"r2")
        _send_round(slow, topic, b"s2")
        after = _placements(backend, topic, 4, b"r2")
        assert after == {k: murmur2_partition(k, 4) for k in KEYS}
        assert set(after.values()) == {0, 1, 2, 3}
        assert _placements(backend, topic, 4, b"s2") == {k: murmur2_partition(k, 2) for k in KEYS}
    finally:
        backend.close()
