"""A compacted topic refuses a record without a key, and the batch it came in.

Kafka's broker checks every record appended to a topic whose cleanup.policy holds ``compact``
(LogValidator.validateKey): one null key fails the whole batch with INVALID_RECORD, which
librdkafka reports to the delivery callback of every message of that batch, as a permanent
(not retriable, not fatal) error. Nothing of the batch is written; the partition goes on.
"""

from __future__ import annotations

import pytest
from confluent_kafka import KafkaError, TopicPartition

from tests.clients._clients_util import create_topic, drain, unique

#: One batch per flush: nothing leaves the queue before flush() while lingering this long.
ONE_BATCH = {"linger.ms": 5000}


def _produce_batch(producer, topic: str, keys: list[bytes | None]) -> list:
    reports: list = []
    for i, key in enumerate(keys):
        producer.produce(topic, key=key, value=b"v%d" % i, partition=0,
                         on_delivery=lambda err, msg: reports.append((err, msg.key())))
    assert producer.flush(20) == 0
    assert len(reports) == len(keys)
    return reports


def _log(backend, topic: str, count: int) -> list[tuple[int, bytes | None]]:
    consumer = backend.consumer({"group.id": unique("g"), "enable.partition.eof": True})
    consumer.assign([TopicPartition(topic, 0, 0)])
    return [(m.offset(), m.key()) for m in drain(consumer, [TopicPartition(topic, 0)], expected=count)]


@pytest.mark.needs_faithful_broker(reason="Tansu accepts null keys on compacted topics")
@pytest.mark.parametrize("policy", ["compact", "compact,delete"])
@pytest.mark.parametrize("idempotent", [False, True], ids=["plain", "idempotent"])
def test_a_null_key_fails_its_whole_batch_on_a_compacted_topic(backend, admin, policy, idempotent) -> None:
    topic = create_topic(admin, config={"cleanup.policy": policy}, prefix="null-key")
    producer = backend.producer({**ONE_BATCH, "enable.idempotence": idempotent})
    [(err, _)] = _produce_batch(producer, topic, [b"k0"])
    assert err is None
    # k1 and k2 share the batch of the keyless record: all three fail alike.
    for err, key in _produce_batch(producer, topic, [b"k1", None, b"k2"]):
        assert err is not None, f"{key!r} was written with a keyless record in its batch"
        assert err.code() == KafkaError.INVALID_RECORD, err
        assert not err.fatal() and not err.retriable() and not err.txn_requires_abort(), err
    # Permanent for that batch only: the producer goes on (an idempotent one with no sequence gap).
    [(err, _)] = _produce_batch(producer, topic, [b"k3"])
    assert err is None, err
    assert _log(backend, topic, 2) == [(0, b"k0"), (1, b"k3")]


def test_a_deleting_topic_takes_a_null_key(backend, admin) -> None:
    topic = create_topic(admin, config={"cleanup.policy": "delete"}, prefix="null-key-delete")
    producer = backend.producer(ONE_BATCH)
    assert [err for err, _ in _produce_batch(producer, topic, [b"k1", None, b"k2"])] == [None] * 3
    assert _log(backend, topic, 3) == [(0, b"k1"), (1, None), (2, b"k2")]
