"""An idempotent producer goes on after a batch that failed without being written (KIP-360).

Both triggers the fault campaign found (issue 20, item 2): a delivery timeout while the
partition is below ``min.insync.replicas``, and one record over the topic's
``max.message.bytes``. librdkafka resets the partition's sequence (or bumps the epoch) and the
next messages are written; a producer that kept the failed batch's sequence numbers would
have every later message refused as OUT_OF_ORDER_SEQUENCE_NUMBER.
"""

from __future__ import annotations

import pytest
from confluent_kafka import KafkaError, TopicPartition
from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource

from tests.clients._clients_util import create_topic, drain, unique, wait_for

IDEMPOTENT = {"enable.idempotence": True, "linger.ms": 0, "retry.backoff.ms": 50}


def _produce_one(producer, topic: str, value: bytes, timeout: float = 20.0):
    reports: list = []
    producer.produce(topic, value=value, partition=0, on_delivery=lambda err, msg: reports.append((err, msg)))
    assert producer.flush(timeout) == 0, f"{value[:10]!r}... not reported within {timeout}s"
    assert len(reports) == 1
    return reports[0]


def _read_values(backend, topic: str, count: int) -> list[tuple[int, bytes]]:
    consumer = backend.consumer({"group.id": unique("g"), "enable.partition.eof": True})
    consumer.assign([TopicPartition(topic, 0, 0)])
    return [(m.offset(), m.value()) for m in drain(consumer, expected=count)]


def _set_min_insync(admin, topic: str, value: int) -> None:
    resource = ConfigResource(ConfigResource.Type.TOPIC, topic, incremental_configs=[
        ConfigEntry("min.insync.replicas", str(value), incremental_operation=AlterConfigOpType.SET)])
    admin.incremental_alter_configs([resource])[resource].result(15)
    wait_for(lambda: _topic_config(admin, topic, "min.insync.replicas") == str(value), 15,
             f"min.insync.replicas={value} on {topic}")


def _topic_config(admin, topic: str, name: str) -> str | None:
    resource = ConfigResource(ConfigResource.Type.TOPIC, topic)
    entry = admin.describe_configs([resource])[resource].result(15).get(name)
    return entry.value if entry is not None else None


@pytest.mark.needs_faithful_broker(reason="Tansu does not enforce min.insync.replicas")
def test_idempotent_producer_recovers_from_a_delivery_timeout_below_min_isr(backend, admin) -> None:
    # Trigger 1: one replica against min.insync.replicas=2 refuses every acks=all write
    # (NOT_ENOUGH_REPLICAS) until the batch's delivery timeout fails it.
    if len(admin.list_topics(timeout=15).brokers) < 2:
        # Kafka caps min.insync.replicas at the partition's replica count (effectiveMinIsr), so
        # a one-broker cluster never refuses an acks=all write for it.
        pytest.skip("needs a cluster of two or more brokers to go below min.insync.replicas")
    topic = create_topic(admin, prefix="below-min-isr")
    producer = backend.producer({**IDEMPOTENT, "message.timeout.ms": 1500})
    err, msg = _produce_one(producer, topic, b"a0")
    assert err is None and msg.offset() == 0
    _set_min_insync(admin, topic, 2)
    err, _msg = _produce_one(producer, topic, b"refused")
    assert err is not None, "a write below min.insync.replicas was acknowledged"
    assert not err.fatal(), f"nothing can have been written, yet the error is fatal: {err}"
    _set_min_insync(admin, topic, 1)
    # The partition is healthy again: later messages are written, in order.
    for offset, value in ((1, b"a1"), (2, b"a2")):
        err, msg = _produce_one(producer, topic, value)
        assert err is None, f"{value!r} after the healed partition failed: {err}"
        assert msg.offset() == offset
    assert _read_values(backend, topic, 3) == [(0, b"a0"), (1, b"a1"), (2, b"a2")]


@pytest.mark.needs_faithful_broker(reason="Tansu does not enforce max.message.bytes")
def test_idempotent_producer_recovers_from_a_refused_oversized_record(backend, admin) -> None:
    # Trigger 2: one record over the topic's max.message.bytes, between good ones.
    producer = backend.producer({**IDEMPOTENT, "message.timeout.ms": 1500})
    topic = create_topic(admin, config={"max.message.bytes": "2000"}, prefix="too-large")
    err, msg = _produce_one(producer, topic, b"b1")
    assert err is None and msg.offset() == 0
    err, _msg = _produce_one(producer, topic, b"x" * 20000)
    assert err is not None and err.code() == KafkaError.MSG_SIZE_TOO_LARGE, err
    assert not err.fatal()
    for offset, value in ((1, b"b2"), (2, b"b3")):
        err, msg = _produce_one(producer, topic, value)
        assert err is None, f"{value!r} after the refused record failed: {err}"
        assert msg.offset() == offset
    assert _read_values(backend, topic, 3) == [(0, b"b1"), (1, b"b2"), (2, b"b3")]
    producer.flush(5)
