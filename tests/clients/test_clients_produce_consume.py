"""Producer and consumer conformance: ordering, partitioning, idempotence, commits, bad inputs."""

from __future__ import annotations

import json
import threading

import pytest
from _clients_util import create_topic, drain, kafka_partition, produce_all, unique, wait_for, wait_for_group_coordinator
from confluent_kafka import OFFSET_BEGINNING, OFFSET_STORED, KafkaError, KafkaException, TopicPartition


def test_order_is_kept_per_partition(backend, admin) -> None:
    topic = create_topic(admin, partitions=3)
    producer = backend.producer({"linger.ms": 5})
    records = [(None, f"{p}:{i}".encode(), p) for i in range(200) for p in range(3)]
    reports = produce_all(producer, topic, records)
    assert all(err is None for err, *_ in reports)

    consumer = backend.consumer({"group.id": unique("g"), "enable.partition.eof": True})
    tps = [TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(3)]
    consumer.assign(tps)
    messages = drain(consumer, tps)
    assert len(messages) == 600
    for p in range(3):
        in_partition = [m for m in messages if m.partition() == p]
        assert [m.value() for m in in_partition] == [f"{p}:{i}".encode() for i in range(200)]
        assert [m.offset() for m in in_partition] == list(range(200))
        assert all(m.topic() == topic for m in in_partition)


def test_consume_returns_the_records_there_without_waiting_for_a_full_batch(backend, admin) -> None:
    """Kafka's poll contract: consume(num_messages, timeout) returns once any record is there,
    not when num_messages have come or the timeout has passed (librdkafka's batch consume does
    the latter; the Kafka backend's consumer does the former). Each call below may wait 120 s;
    it must answer within 30 (a deadline, not a measurement: a call that waits for its batch
    answers after 120 s)."""
    topic = create_topic(admin)
    producer = backend.producer()
    assert all(err is None for err, *_ in produce_all(producer, topic, [(None, b"v%d" % i) for i in range(10)]))
    consumer = backend.consumer({"group.id": unique("g")})
    consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
    got: list = []

    def consume_once() -> list:
        answered: list = []
        threading.Thread(target=lambda: answered.append(consumer.consume(5000, 120)), daemon=True).start()
        wait_for(lambda: answered, 30, f"consume(5000, 120) to answer with {len(got)} of 10 records read")
        return answered[0]
    while len(got) < 10:
        messages = consume_once()
        assert messages, "consume answered nothing before its timeout"
        got += [m.value() for m in messages if m.error() is None]
    assert got == [b"v%d" % i for i in range(10)]


def test_keyed_records_land_on_kafkas_murmur2_partition(backend, admin) -> None:
    partitions = 7
    topic = create_topic(admin, partitions=partitions)
    # The backend's default partitioner, no explicit setting: it must be Kafka's.
    producer = backend.producer()
    keys = [f"key-{i}".encode() for i in range(300)] + [b"", b"a", b"ab", b"abc", bytes(range(256))]
    reports = produce_all(producer, topic, [(k, b"v") for k in keys])
    assert all(err is None for err, *_ in reports)
    placed = {key: partition for _, partition, _, key, _ in reports}
    expected = {key: kafka_partition(key, partitions) for key in keys}
    assert placed == expected
    assert len(set(placed.values())) == partitions  # the keys do spread


def test_idempotent_retries_create_no_duplicates(backend, admin) -> None:
    if backend.pause is None:
        pytest.skip(f"{backend.description}: the broker cannot be paused from this process")
    topic = create_topic(admin)
    stats: list = []
    producer = backend.producer({
        "enable.idempotence": True, "linger.ms": 5, "message.timeout.ms": 60000,
        "retry.backoff.ms": 10, "statistics.interval.ms": 100,
        "stats_cb": lambda s: stats.append(json.loads(s)), **backend.stall_conf})
    first = produce_all(producer, topic, [(None, str(i).encode()) for i in range(100)])

    def request_timed_out() -> bool:
        producer.poll(0.05)
        return bool(stats) and sum(b.get("req_timeouts", 0) for b in stats[-1]["brokers"].values()) > 0

    reports: list = []
    with backend.pause():
        for i in range(100, 200):
            producer.produce(topic, value=str(i).encode(),
                             on_delivery=lambda err, msg: reports.append((err, msg.offset())))
        # The batch is in flight while the broker is stopped: the client times it out and
        # will send it again, though the broker still holds (and will append) the first copy.
        wait_for(request_timed_out, 20, "the produce request to time out")
    assert producer.flush(30) == 0
    assert [err for err, _ in reports] == [None] * 100
    assert all(err is None for err, *_ in first)

    consumer = backend.consumer({"group.id": unique("g"), "enable.partition.eof": True})
    tp = TopicPartition(topic, 0, OFFSET_BEGINNING)
    consumer.assign([tp])
    values = [int(m.value()) for m in drain(consumer, [tp])]
    assert values == list(range(200))


def test_commits_survive_consumer_restart(backend, admin) -> None:
    topic = create_topic(admin, partitions=2)
    group = unique("g")
    produce_all(backend.producer(), topic, [(None, f"{p}-{i}".encode(), p) for i in range(10) for p in range(2)])
    conf = {"group.id": group, "enable.auto.commit": False, "auto.offset.reset": "earliest"}

    wait_for_group_coordinator(admin, group)  # OFFSET_STORED asks the coordinator once
    consumer = backend.consumer(conf)
    consumer.assign([TopicPartition(topic, p, OFFSET_STORED) for p in range(2)])
    seen = drain(consumer, expected=20)
    consumer.commit(offsets=[TopicPartition(topic, 0, 4), TopicPartition(topic, 1, 7)], asynchronous=False)
    consumer.close()
    assert len(seen) == 20

    restarted = backend.consumer(conf)
    committed = restarted.committed([TopicPartition(topic, 0), TopicPartition(topic, 1)], timeout=10)
    assert [(tp.partition, tp.offset) for tp in committed] == [(0, 4), (1, 7)]
    restarted.assign([TopicPartition(topic, p, OFFSET_STORED) for p in range(2)])
    resumed = drain(restarted, expected=6 + 3)
    firsts = {p: min(m.offset() for m in resumed if m.partition() == p) for p in range(2)}
    assert firsts == {0: 4, 1: 7}
    assert sorted(m.value() for m in resumed if m.partition() == 0) == [f"0-{i}".encode() for i in range(4, 10)]


def test_message_commit_stores_the_next_offset(backend, admin) -> None:
    topic = create_topic(admin)
    group = unique("g")
    produce_all(backend.producer(), topic, [(None, b"x")] * 5)
    consumer = backend.consumer({"group.id": group, "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
    third = drain(consumer, expected=3)[2]
    consumer.commit(message=third, asynchronous=False)
    assert consumer.committed([TopicPartition(topic, 0)], timeout=10)[0].offset == third.offset() + 1


# -- bad inputs: the errors a confluent-kafka user sees ------------------------------------


@pytest.mark.parametrize("limit", [3, 50])
def test_a_full_queue_refuses_the_next_record_and_keeps_the_accepted_ones(backend, admin, limit) -> None:
    """queue.buffering.max.messages: produce() raises BufferError("Queue full") at the limit,
    as librdkafka does, even while every record lingers; what was accepted is delivered."""
    topic = create_topic(admin, partitions=3)
    producer = backend.producer({"queue.buffering.max.messages": limit, "linger.ms": 60000})
    reports: list = []
    accepted = 0
    with pytest.raises(BufferError, match="Queue full"):
        for i in range(limit * 10):
            producer.produce(topic, key=str(i).encode(), value=str(i).encode(),
                             on_delivery=lambda err, msg: reports.append((err, msg.value())))
            accepted += 1
    assert accepted == limit
    assert producer.flush(15) == 0
    assert sorted(int(v) for err, v in reports if err is None) == list(range(limit))
    producer.produce(topic, value=b"room again")  # flushed: the queue takes records again
    assert producer.flush(15) == 0


def test_produce_to_unknown_topic_fails_delivery(backend) -> None:
    producer = backend.producer({"allow.auto.create.topics": False, "topic.metadata.propagation.max.ms": 1000,
                                 "message.timeout.ms": 10000})
    errors: list = []
    producer.produce(unique("missing"), value=b"x", on_delivery=lambda err, msg: errors.append(err))
    assert producer.flush(15) == 0
    assert len(errors) == 1 and errors[0] is not None
    assert errors[0].code() == KafkaError.UNKNOWN_TOPIC_OR_PART


def test_subscribe_to_unknown_topic_reports_an_error(backend) -> None:
    consumer = backend.consumer({"group.id": unique("g"), **_group_conf()})
    consumer.subscribe([unique("missing")])

    def error_seen():
        msg = consumer.poll(0.2)
        return msg.error() if msg is not None and msg.error() is not None else None

    error = wait_for(error_seen, 15, "an unknown-topic error from poll")
    assert error.code() == KafkaError.UNKNOWN_TOPIC_OR_PART


def _produce_error(producer, topic: str, partition: int) -> KafkaError:
    """The error of producing to ``partition``: raised by produce() or reported on delivery
    (librdkafka does either, depending on whether it already holds the topic's metadata)."""
    errors: list = []
    try:
        producer.produce(topic, value=b"x", partition=partition, on_delivery=lambda err, msg: errors.append(err))
    except KafkaException as exc:
        return exc.args[0]
    assert producer.flush(10) == 0
    assert len(errors) == 1 and errors[0] is not None, f"partition {partition} was accepted"
    return errors[0]


def test_negative_partition_is_rejected(backend, admin) -> None:
    topic = create_topic(admin, partitions=2)
    for partition in (-2, -5, -100):
        assert _produce_error(backend.producer(), topic, partition).code() == KafkaError._UNKNOWN_PARTITION
    producer = backend.producer()
    producer.list_topics(topic, timeout=10)  # with metadata in hand the client refuses at once
    with pytest.raises(KafkaException) as raised:
        producer.produce(topic, value=b"x", partition=-2)
    assert raised.value.args[0].code() == KafkaError._UNKNOWN_PARTITION


def test_partition_beyond_the_topic_is_rejected(backend, admin) -> None:
    topic = create_topic(admin, partitions=2)
    producer = backend.producer()
    producer.list_topics(topic, timeout=10)  # the client knows the partition count
    with pytest.raises(KafkaException) as raised:
        producer.produce(topic, value=b"x", partition=2)
    assert raised.value.args[0].code() == KafkaError._UNKNOWN_PARTITION


def test_consume_after_close_raises(backend) -> None:
    consumer = backend.consumer({"group.id": unique("g")})
    consumer.close()
    with pytest.raises(RuntimeError, match="closed"):
        consumer.poll(0.1)
    with pytest.raises(RuntimeError, match="closed"):
        consumer.consume(1, 0.1)
    with pytest.raises(RuntimeError, match="closed"):
        consumer.commit(asynchronous=False)


def test_transactional_call_without_init_fails(backend) -> None:
    producer = backend.producer({"transactional.id": unique("tx")})
    with pytest.raises(KafkaException) as raised:
        producer.begin_transaction()
    assert raised.value.args[0].code() == KafkaError._STATE


def test_transactional_call_without_transactional_id_fails(backend) -> None:
    producer = backend.producer()
    with pytest.raises(KafkaException) as raised:
        producer.init_transactions(5)
    assert raised.value.args[0].code() == KafkaError._NOT_CONFIGURED
    with pytest.raises(KafkaException) as raised:
        producer.begin_transaction()
    assert raised.value.args[0].code() == KafkaError._NOT_CONFIGURED


def _group_conf() -> dict:
    from _clients_util import GROUP_CONF

    return dict(GROUP_CONF)
