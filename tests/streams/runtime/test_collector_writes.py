"""What the record collector writes, on both backends: each of its three send paths (`send`, a
sink's `sender`, a changelog's `partition_sender`) writes the key, value, partition, timestamp
and headers it is given, and `send`'s delivery reports give the last written offset. On a real
Kafka broker this checks the order of produce()'s positional arguments, which the collector
relies on."""

from __future__ import annotations

import time

from eddy.murmur2 import murmur2_partition
from streams.runtime.collector import RecordCollector

from _runtime_util import Cluster, unique

PARTITIONS = 3
# Recent timestamps: the tests' own broker keeps records of any age (streams/testing/local_kafka.py),
# but an external one (KAFKA_BOOTSTRAP_SERVERS) may keep the default 7-day retention and delete
# older records at its next retention check, between a test's write and its read.
NOW = int(time.time() * 1000)
RECORDS = [  # key, value, timestamp, headers
    (b"k1", b"v1", NOW + 1, None),
    (b"k2", None, NOW + 2, [("trace", b"a"), ("trace", b"b")]),
    (b"k3", b"v3", NOW + 3, [("h", b"")]),
    (b"k4", b"v4", NOW + 4, None),
]


def _written(cluster: Cluster, topic: str) -> list[tuple]:
    """(partition, key, value, timestamp, headers) of every record of `topic`, by offset within
    each partition."""
    messages = cluster.read_all(topic, PARTITIONS, until=lambda got: len(got) >= len(RECORDS), timeout=30)
    messages.sort(key=lambda m: (m.partition(), m.offset()))
    return [(m.partition(), m.key(), m.value(), m.timestamp()[1],
             [(k, bytes(v)) for k, v in (m.headers() or [])] or None) for m in messages]


def test_each_send_path_writes_what_it_is_given(backend_config):
    cluster = Cluster(backend_config)
    topics = {name: unique(f"writes-{name}") for name in ("send", "sender", "partition")}
    try:
        cluster.create_topics(PARTITIONS, *topics.values())
        collector = RecordCollector(cluster.backend.producer({"linger.ms": 1}), murmur2_partitioning=True)
        sink_send = collector.sender(topics["sender"])
        changelog_send = collector.partition_sender(topics["partition"], 2)
        for key, value, timestamp, headers in RECORDS:
            collector.send(topics["send"], key, value, partition=1, timestamp=timestamp, headers=headers)
            sink_send(key, value, timestamp, headers)
            changelog_send(key, value, timestamp, headers)
        collector.flush()

        assert _written(cluster, topics["send"]) == [(1, *r) for r in RECORDS]
        assert _written(cluster, topics["partition"]) == [(2, *r) for r in RECORDS]
        by_partition = sorted(RECORDS, key=lambda r: (murmur2_partition(r[0], PARTITIONS), r[2]))
        assert _written(cluster, topics["sender"]) == [(murmur2_partition(r[0], PARTITIONS), *r) for r in by_partition]
        # send's and the changelog's delivery reports: the last offset written to each partition;
        # a sink's reports say failures only, on every partition it wrote to
        assert collector.offset_of(topics["send"], 1) == len(RECORDS) - 1
        assert collector.offset_of(topics["partition"], 2) == len(RECORDS) - 1
        assert {murmur2_partition(r[0], PARTITIONS) for r in RECORDS} == {0, 1, 2}
        assert all(collector.offset_of(topics["sender"], p) is None for p in range(PARTITIONS))
    finally:
        cluster.close()


def test_a_full_producer_queue_waits_for_room_and_loses_nothing(backend_config):
    """produce() refuses a record while the producer's queue is full (BufferError): the collector
    serves delivery reports until there is room and sends it then, with its headers."""
    cluster = Cluster(backend_config)
    topic = unique("writes-full")
    try:
        cluster.create_topics(PARTITIONS, topic)
        producer = cluster.backend.producer({"queue.buffering.max.messages": 3, "linger.ms": 5})
        collector = RecordCollector(producer, murmur2_partitioning=True)
        sink_send = collector.sender(topic)
        for i in range(30):
            sink_send(b"k%d" % i, b"v%d" % i, NOW + i, [("i", b"%d" % i)] if i % 2 else None)
        collector.flush()
        messages = cluster.read_all(topic, PARTITIONS, until=lambda got: len(got) >= 30, timeout=30)
        assert sorted((m.value(), m.timestamp()[1], m.headers()) for m in messages) == sorted(
            (b"v%d" % i, NOW + i, [("i", b"%d" % i)] if i % 2 else None) for i in range(30))
    finally:
        cluster.close()
