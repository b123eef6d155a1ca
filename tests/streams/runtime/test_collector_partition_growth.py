"""A sink topic that grows: after its metadata refresh, the record collector routes keyed
records by the new partition count (Kafka's murmur2 over it), as a Kafka producer does; before
the refresh interval it keeps the count it knows. On both backends: the embedded producer's
queue view and a Kafka producer without one take different routes through the collector (Tansu
cannot add partitions)."""

from __future__ import annotations

import pytest
from confluent_kafka.admin import NewPartitions

from eddy.murmur2 import murmur2_partition
from streams.runtime.collector import RecordCollector

from _runtime_util import Cluster, unique, wait_for

KEYS = [f"key-{i}".encode() for i in range(60)]


def _placements(cluster: Cluster, topic: str, partitions: int, value: bytes) -> dict[bytes, int]:
    """Where each key's record of round `value` went."""
    def round_of(messages: list) -> list:
        return [m for m in messages if m.value() == value]
    messages = cluster.read_all(topic, partitions, until=lambda got: len(round_of(got)) >= len(KEYS), timeout=30)
    return {m.key(): m.partition() for m in round_of(messages)}


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
    cluster = Cluster(backend_config)
    topic = unique("out")  # the Kafka broker is the session's
    try:
        cluster.create_topics(2, topic)
        producer = cluster.backend.producer()
        collector = RecordCollector(producer, murmur2_partitioning=True, metadata_refresh_ms=0)
        slow = RecordCollector(cluster.backend.producer(), murmur2_partitioning=True, metadata_refresh_ms=3_600_000)

        _send_round(collector, topic, b"r1")
        _send_round(slow, topic, b"s1")
        assert _placements(cluster, topic, 2, b"r1") == {k: murmur2_partition(k, 2) for k in KEYS}

        cluster.admin.create_partitions([NewPartitions(topic, 4)])[topic].result(30)
        wait_for(lambda: len(producer.list_topics(topic, timeout=5).topics[topic].partitions) == 4, 30,
                 "the producer sees 4 partitions")
        collector.refresh_partition_counts()
        slow.refresh_partition_counts()  # within its interval: nothing re-read
        _send_round(collector, topic, b"r2")
        _send_round(slow, topic, b"s2")
        after = _placements(cluster, topic, 4, b"r2")
        assert after == {k: murmur2_partition(k, 4) for k in KEYS}
        assert set(after.values()) == {0, 1, 2, 3}
        assert _placements(cluster, topic, 4, b"s2") == {k: murmur2_partition(k, 2) for k in KEYS}
    finally:
        cluster.close()
