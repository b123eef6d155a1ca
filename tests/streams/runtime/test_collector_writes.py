"""What the record collector writes, on both backends: each of its three send paths (`send`, a
sink's `sender`, a changelog's `partition_sender`) writes the key, value, partition, timestamp
and headers it is given, and `send`'s delivery reports give the last written offset. On a real
Kafka broker this checks the order of produce()'s positional arguments, which the collector
relies on."""

from __future__ import annotations

import uuid

from confluent_kafka import OFFSET_BEGINNING, TopicPartition
from confluent_kafka.admin import NewTopic

from eddy.murmur2 import murmur2_partition
from streams.backends import for_config
from streams.runtime.collector import RecordCollector

from _runtime_util import wait_for

PARTITIONS = 3
RECORDS = [  # key, value, timestamp, headers
    (b"k1", b"v1", 1_700_000_000_001, None),
    (b"k2", None, 1_700_000_000_002, [("trace", b"a"), ("trace", b"b")]),
    (b"k3", b"v3", 1_700_000_000_003, [("h", b"")]),
    (b"k4", b"v4", 1_700_000_000_004, None),
]


def _read(backend, topic: str, expected: int) -> list[tuple]:
    """(partition, key, value, timestamp, headers) of every record of `topic`, by offset within
    each partition."""
    consumer = backend.consumer({"group.id": f"reader-{topic}", "enable.auto.commit": False})
    try:
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(PARTITIONS)])
        got: list = []

        def read() -> bool:
            for m in consumer.consume(500, 0.2):
                if m.error() is None:
                    got.append((m.partition(), m.offset(), m.key(), m.value(), m.timestamp()[1],
                                [(k, bytes(v)) for k, v in (m.headers() or [])] or None))
            return len(got) >= expected
        wait_for(read, 30, f"{expected} records of {topic}")
        return [(p, k, v, t, h) for p, _o, k, v, t, h in sorted(got, key=lambda r: (r[0], r[1]))]
    finally:
        consumer.close()


def test_each_send_path_writes_what_it_is_given(backend_config):
    backend = for_config(backend_config)
    run = uuid.uuid4().hex[:8]  # the Kafka broker is the session's
    topics = {name: f"writes-{name}-{run}" for name in ("send", "sender", "partition")}
    try:
        admin = backend.admin()
        for future in admin.create_topics([NewTopic(t, PARTITIONS, 1) for t in topics.values()]).values():
            future.result(30)
        producer = backend.producer({"linger.ms": 1})
        collector = RecordCollector(producer, murmur2_partitioning=True)
        sink_send = collector.sender(topics["sender"])
        changelog_send = collector.partition_sender(topics["partition"], 2)
        for key, value, timestamp, headers in RECORDS:
            collector.send(topics["send"], key, value, partition=1, timestamp=timestamp, headers=headers)
            sink_send(key, value, timestamp, headers)
            changelog_send(key, value, timestamp, headers)
        collector.flush()

        expected = [(key, value, timestamp, headers) for key, value, timestamp, headers in RECORDS]
        assert _read(backend, topics["send"], len(RECORDS)) == [(1, *r) for r in expected]
        assert _read(backend, topics["partition"], len(RECORDS)) == [(2, *r) for r in expected]
        by_key = sorted(expected, key=lambda r: (murmur2_partition(r[0], PARTITIONS), r[2]))
        assert _read(backend, topics["sender"], len(RECORDS)) == [
            (murmur2_partition(r[0], PARTITIONS), *r) for r in by_key]
        # send's and the changelog's delivery reports: the last offset written to each partition
        assert collector.offset_of(topics["send"], 1) == len(RECORDS) - 1
        assert collector.offset_of(topics["partition"], 2) == len(RECORDS) - 1
        assert collector.offset_of(topics["sender"], 0) is None  # a sink's reports say failures only
    finally:
        backend.close()
