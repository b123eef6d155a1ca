"""Helpers for the client conformance suite (written against confluent-kafka's API only)."""

from __future__ import annotations

import threading
import time
import uuid
from typing import Any, Callable, Iterable

from confluent_kafka import ConsumerGroupTopicPartitions, KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import NewTopic

#: Group timings every backend honours; Tansu delays joins by half the session timeout.
GROUP_CONF = {"session.timeout.ms": 6000, "heartbeat.interval.ms": 500}

_pause = threading.Event()  # never set: waited on for short, bounded pauses between polls


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


def wait_for(predicate: Callable[[], Any], timeout: float, what: str, step: float = 0.02) -> Any:
    """Poll ``predicate`` until it returns a truthy value; fail naming ``what`` at the deadline."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        _pause.wait(step)


def create_topic(admin: Any, partitions: int = 1, config: dict | None = None, prefix: str = "t",
                 name: str | None = None) -> str:
    topic = name or unique(prefix)
    admin.create_topics([NewTopic(topic, partitions, 1, config=config or {})])[topic].result(15)
    wait_for(lambda: topic in admin.list_topics(timeout=5).topics, 15, f"topic {topic} in metadata")
    return topic


def wait_for_group_coordinator(admin: Any, group: str, timeout: float = 30.0) -> None:
    """Wait until `group`'s coordinator answers: an offsets listing of the group succeeds.

    A consumer assigned partitions without explicit offsets asks the coordinator once for the
    committed ones. On a fresh broker that is still loading its offsets topic the answer can be
    NOT_COORDINATOR, and librdkafka does not ask again: the partitions are never fetched
    (confluentinc/librdkafka#5586, open). The runtime assigns explicit offsets or joins a group,
    so only such a test meets it."""
    def answered() -> bool:
        try:
            admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)])[group].result(5)
            return True
        except KafkaException:
            return False
    wait_for(answered, timeout, f"the coordinator of group {group}")


def drain(consumer: Any, partitions: Iterable[TopicPartition] | None = None, expected: int | None = None,
          timeout: float = 15.0) -> list:
    """Consume until ``expected`` messages arrived, or until PARTITION_EOF on every partition
    of ``partitions`` (consumer needs ``enable.partition.eof``). Returns the data messages."""
    waiting_eof = {(tp.topic, tp.partition) for tp in partitions} if partitions is not None else set()
    out: list = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if expected is not None and len(out) >= expected:
            return out
        if expected is None and partitions is not None and not waiting_eof:
            return out
        for msg in consumer.consume(500, 0.2):
            error = msg.error()
            if error is None:
                out.append(msg)
                waiting_eof.add((msg.topic(), msg.partition()))
            elif error.code() == KafkaError._PARTITION_EOF:
                waiting_eof.discard((msg.topic(), msg.partition()))
            else:
                raise AssertionError(f"consume error: {error}")
    raise AssertionError(f"drain timed out with {len(out)} messages "
                         f"(expected {expected}, partitions without EOF: {sorted(waiting_eof)})")


def produce_all(producer: Any, topic: str, records: Iterable[tuple], timeout: float = 15.0) -> list:
    """Produce (key, value[, partition]) records; return (err, partition, offset, key) per record."""
    reports: list = []

    def on_delivery(err, msg):
        reports.append((err, msg.partition(), msg.offset(), msg.key(), msg.value()))

    count = 0
    for record in records:
        key, value, *rest = record
        kwargs = {"partition": rest[0]} if rest else {}
        producer.produce(topic, key=key, value=value, on_delivery=on_delivery, **kwargs)
        count += 1
        producer.poll(0)
    assert producer.flush(timeout) == 0, "producer did not deliver everything before the timeout"
    assert len(reports) == count
    return reports


def murmur2(data: bytes) -> int:
    """Kafka's Java ``Utils.murmur2`` (seed 0x9747b28c), as a signed 32-bit int."""
    m = 0x5BD1E995
    r = 24
    length = len(data)
    h = (0x9747B28C ^ length) & 0xFFFFFFFF
    n4 = length // 4
    for i in range(n4):
        k = int.from_bytes(data[i * 4:i * 4 + 4], "little")
        k = (k * m) & 0xFFFFFFFF
        k ^= k >> r
        k = (k * m) & 0xFFFFFFFF
        h = (h * m) & 0xFFFFFFFF
        h ^= k
    tail = data[n4 * 4:]
    if len(tail) >= 3:
        h ^= tail[2] << 16
    if len(tail) >= 2:
        h ^= tail[1] << 8
    if len(tail) >= 1:
        h ^= tail[0]
        h = (h * m) & 0xFFFFFFFF
    h ^= h >> 13
    h = (h * m) & 0xFFFFFFFF
    h ^= h >> 15
    return h - (1 << 32) if h & 0x80000000 else h


def kafka_partition(key: bytes, num_partitions: int) -> int:
    """The partition Kafka's default partitioner picks for a non-null key."""
    return (murmur2(key) & 0x7FFFFFFF) % num_partitions
