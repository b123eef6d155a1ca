"""Transaction conformance: isolation, offsets in transactions, fencing, timeouts."""

from __future__ import annotations

import pytest
from _clients_util import create_topic, drain, unique, wait_for
from confluent_kafka import OFFSET_BEGINNING, KafkaError, KafkaException, TopicPartition


def _read(backend, topic: str, isolation: str) -> list[bytes]:
    """Everything a fresh consumer with ``isolation`` reads up to the end of partition 0."""
    consumer = backend.consumer({"group.id": unique("g"), "isolation.level": isolation,
                                 "enable.partition.eof": True})
    tp = TopicPartition(topic, 0, OFFSET_BEGINNING)
    consumer.assign([tp])
    try:
        return [m.value() for m in drain(consumer, [tp])]
    finally:
        consumer.close()


def _transactional(backend, **conf):
    producer = backend.producer({"transactional.id": unique("tx"), **conf})
    producer.init_transactions(15)
    return producer


def _commit_one(producer, topic: str, value: bytes) -> None:
    producer.begin_transaction()
    producer.produce(topic, value=value)
    producer.commit_transaction(15)


def test_read_committed_hides_open_transactions(backend, admin) -> None:
    topic = create_topic(admin)
    producer = _transactional(backend)
    _commit_one(producer, topic, b"committed-1")
    producer.begin_transaction()
    producer.produce(topic, value=b"open")
    assert producer.flush(10) == 0  # on the broker, inside the open transaction

    assert _read(backend, topic, "read_committed") == [b"committed-1"]
    assert _read(backend, topic, "read_uncommitted") == [b"committed-1", b"open"]
    producer.commit_transaction(15)
    assert _read(backend, topic, "read_committed") == [b"committed-1", b"open"]


@pytest.mark.needs_faithful_broker(reason="aborted transactional data is visible to read_committed")
def test_read_committed_hides_aborted_transactions(backend, admin) -> None:
    topic = create_topic(admin)
    producer = _transactional(backend)
    _commit_one(producer, topic, b"c1")
    producer.begin_transaction()
    producer.produce(topic, value=b"aborted")
    assert producer.flush(10) == 0  # written, so abort must hide it rather than drop it
    producer.abort_transaction(15)
    _commit_one(producer, topic, b"c2")

    assert _read(backend, topic, "read_uncommitted") == [b"c1", b"aborted", b"c2"]
    assert _read(backend, topic, "read_committed") == [b"c1", b"c2"]


def test_position_steps_past_a_marker_before_any_record_is_delivered(backend, admin) -> None:
    """A consumer starting at a transaction's commit marker (its group committed the offset after
    the transaction's last record) gets no record, yet position() moves past the marker once it
    is fetched, as librdkafka reports; a partition never written keeps no position. (A task's
    max.task.idle.ms reads this: such a partition has no lag, it is not "position unknown".)"""
    topic = create_topic(admin, partitions=2)
    producer = _transactional(backend)
    producer.begin_transaction()
    producer.produce(topic, value=b"only", partition=0)
    producer.commit_transaction(15)  # partition 0: the record at 0, the marker at 1
    group = unique("g")
    committer = backend.consumer({"group.id": group})
    committer.commit(offsets=[TopicPartition(topic, 0, 1)], asynchronous=False)
    committer.close()
    consumer = backend.consumer({"group.id": group, "isolation.level": "read_committed",
                                 "auto.offset.reset": "earliest", "enable.auto.commit": False})
    tps = [TopicPartition(topic, 0), TopicPartition(topic, 1)]
    consumer.assign(tps)
    assert [tp.offset for tp in consumer.position(tps)] == [-1001, -1001]  # nothing fetched yet

    def fetched() -> bool:
        assert [m for m in consumer.consume(10, 0.05) if m.error() is None] == []
        return consumer.get_watermark_offsets(tps[0], cached=True)[1] == 2

    wait_for(fetched, 15, "partition 0's high watermark from a fetch")
    wait_for(lambda: consumer.position(tps)[0].offset == 2, 15, "the position past the marker")
    assert consumer.position(tps)[1].offset == -1001  # nothing there: still no position


def test_send_offsets_to_transaction_commits_only_with_the_transaction(backend, admin) -> None:
    source = create_topic(admin, prefix="src")
    sink = create_topic(admin, prefix="sink")
    group = unique("g")
    consumer = backend.consumer({"group.id": group, "enable.auto.commit": False})
    consumer.assign([TopicPartition(source, 0, OFFSET_BEGINNING)])
    producer = _transactional(backend)

    producer.begin_transaction()
    producer.produce(sink, value=b"x")
    producer.send_offsets_to_transaction([TopicPartition(source, 0, 5)], consumer.consumer_group_metadata(), 10)
    producer.abort_transaction(15)
    assert consumer.committed([TopicPartition(source, 0)], timeout=10)[0].offset < 0  # nothing committed

    producer.begin_transaction()
    producer.produce(sink, value=b"y")
    producer.send_offsets_to_transaction([TopicPartition(source, 0, 7)], consumer.consumer_group_metadata(), 10)
    # Offsets sent inside an open transaction are not committed yet. (A read_committed consumer asks
    # for stable offsets only, which Kafka answers UNSTABLE_OFFSET_COMMIT, retried, until the end
    # of the transaction: ask as read_uncommitted.)
    probe = backend.consumer({"group.id": group, "isolation.level": "read_uncommitted"})
    assert probe.committed([TopicPartition(source, 0)], timeout=10)[0].offset < 0
    producer.commit_transaction(15)
    assert consumer.committed([TopicPartition(source, 0)], timeout=10)[0].offset == 7


def test_zombie_producer_is_fenced(backend, admin) -> None:
    topic = create_topic(admin)
    transactional_id = unique("tx")
    zombie = backend.producer({"transactional.id": transactional_id})
    zombie.init_transactions(15)
    _commit_one(zombie, topic, b"before")

    successor = backend.producer({"transactional.id": transactional_id})
    successor.init_transactions(15)  # bumps the epoch: the first instance is now a zombie

    zombie.begin_transaction()
    zombie.produce(topic, value=b"zombie")
    with pytest.raises(KafkaException) as raised:
        zombie.commit_transaction(15)
    error = raised.value.args[0]
    assert error.code() in (KafkaError.PRODUCER_FENCED, KafkaError._FENCED, KafkaError.INVALID_PRODUCER_EPOCH)

    _commit_one(successor, topic, b"after")
    assert _read(backend, topic, "read_committed") == [b"before", b"after"]


@pytest.mark.needs_faithful_broker(reason="aborted transactional data is visible to read_committed")
def test_zombies_open_transaction_never_becomes_visible(backend, admin) -> None:
    topic = create_topic(admin)
    transactional_id = unique("tx")
    zombie = backend.producer({"transactional.id": transactional_id})
    zombie.init_transactions(15)
    zombie.begin_transaction()
    zombie.produce(topic, value=b"zombie-open")
    assert zombie.flush(10) == 0

    successor = backend.producer({"transactional.id": transactional_id})
    successor.init_transactions(15)  # aborts the zombie's open transaction
    _commit_one(successor, topic, b"after")
    assert _read(backend, topic, "read_committed") == [b"after"]


@pytest.mark.needs_faithful_broker(reason="transaction.timeout.ms is not enforced")
def test_hung_transaction_is_aborted_after_its_timeout(backend, admin) -> None:
    topic = create_topic(admin)
    hung = _transactional(backend, **{"transaction.timeout.ms": 2000})
    hung.begin_transaction()
    hung.produce(topic, value=b"hung")
    assert hung.flush(10) == 0
    other = _transactional(backend)
    _commit_one(other, topic, b"later")

    # The coordinator aborts the hung transaction, which unblocks read_committed readers
    # (the last stable offset moves past it) without ever showing its data.
    wait_for(lambda: _read(backend, topic, "read_committed") == [b"later"], 60,
             "the hung transaction to be aborted")
    with pytest.raises(KafkaException):
        hung.commit_transaction(15)


def test_transactional_api_misuse_is_refused_like_confluent(backend, admin) -> None:
    producer = _transactional(backend)
    with pytest.raises(KafkaException) as twice:
        producer.init_transactions(15)  # once per producer
    assert twice.value.args[0].code() == KafkaError._STATE
    producer.begin_transaction()
    with pytest.raises(TypeError):
        producer.send_offsets_to_transaction([TopicPartition(create_topic(admin), 0, 1)], "a-group-name", 10)
    producer.abort_transaction(15)
