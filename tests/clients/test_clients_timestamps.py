"""A record produced with timestamp=0 is stamped when produce() is called (librdkafka's
behaviour), not when its batch is sent, however long linger.ms keeps it queued."""

from __future__ import annotations

import threading
import time

from _clients_util import create_topic, drain, unique
from confluent_kafka import OFFSET_BEGINNING, TopicPartition


def test_timestamp_zero_is_the_time_of_produce_not_of_sending(backend, admin) -> None:
    topic = create_topic(admin)
    producer = backend.producer({"linger.ms": 4000})
    before = {}
    # the clock moves on while the records linger in the queue (the time passing is the subject)
    for value in (b"first", b"second", b"third"):
        before[value] = int(time.time() * 1000)
        producer.produce(topic, value=value, partition=0)
        threading.Event().wait(0.6)
    assert producer.flush(15) == 0
    consumer = backend.consumer({"group.id": unique("g"), "enable.partition.eof": True})
    tp = TopicPartition(topic, 0, OFFSET_BEGINNING)
    consumer.assign([tp])
    stamped = {m.value(): m.timestamp()[1] for m in drain(consumer, [tp])}
    for value, at in before.items():
        assert stamped[value] >= at, (value, at, stamped)  # not an earlier moment of the queue
