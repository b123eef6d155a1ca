"""Consumer positions and commits conformance: seek, position, pause/resume, offsets_for_times,
offset resets, auto and asynchronous commits, incremental assignment, and the error codes
librdkafka gives for unknown partitions and negative commit offsets."""

from __future__ import annotations

import time

import pytest
from _clients_util import create_topic, unique, wait_for, wait_for_group_coordinator
from confluent_kafka import (
    OFFSET_BEGINNING,
    OFFSET_END,
    OFFSET_INVALID,
    OFFSET_STORED,
    KafkaError,
    KafkaException,
    TopicPartition,
)
from confluent_kafka.admin import OffsetSpec


def produce_singly(producer, topic: str, partition: int, values: list[bytes],
                   timestamps: list[int] | None = None) -> None:
    """One record per batch (flushed one by one): Tansu lists wrong end offsets otherwise."""
    for i, value in enumerate(values):
        kwargs = {"timestamp": timestamps[i]} if timestamps is not None else {}
        producer.produce(topic, value=value, partition=partition, **kwargs)
        assert producer.flush(15) == 0, "the producer did not deliver a record in time"


def read(consumer, expected: int, timeout: float = 15.0) -> list:
    """Exactly ``expected`` data messages (fails on an error message or at the deadline)."""
    out: list = []
    deadline = time.monotonic() + timeout
    while len(out) < expected:
        assert time.monotonic() < deadline, f"got {len(out)} of {expected} messages"
        for m in consumer.consume(expected - len(out), 0.2):
            error = m.error()
            if error is not None and error.code() == KafkaError._PARTITION_EOF:
                continue
            assert error is None, error
            out.append(m)
    return out


def end_of_partition(consumer) -> int | None:
    """The offset of the next end-of-partition event; fails on a data message or an error."""
    for m in consumer.consume(10, 0.1):
        error = m.error()
        assert error is not None, f"a record was delivered: offset {m.offset()}"
        assert error.code() == KafkaError._PARTITION_EOF, f"consume error: {error}"
        return m.offset()
    return None


def error_of(call) -> KafkaError:
    with pytest.raises(KafkaException) as raised:
        call()
    return raised.value.args[0]


def position(consumer, topic: str, partition: int = 0) -> int:
    return consumer.position([TopicPartition(topic, partition)])[0].offset


def serve_callbacks(consumer, seen: list, count: int, what: str) -> None:
    wait_for(lambda: (consumer.poll(0.05), len(seen) >= count)[1], 15, what)


# -- seek, position, pause ---------------------------------------------------------------------


def test_seek_and_position(backend, admin) -> None:
    topic = create_topic(admin, partitions=2)
    producer = backend.producer()
    produce_singly(producer, topic, 0, [str(i).encode() for i in range(10)])
    consumer = backend.consumer({"group.id": unique("g"), "enable.partition.eof": True})
    consumer.assign([TopicPartition(topic, 0, 3)])
    # The position is the application's: unset until a message was consumed.
    assert position(consumer, topic) == OFFSET_INVALID
    assert [m.value() for m in read(consumer, 1)] == [b"3"]
    assert position(consumer, topic) == 4
    consumer.seek(TopicPartition(topic, 0, OFFSET_BEGINNING))
    assert [m.value() for m in read(consumer, 4)] == [b"0", b"1", b"2", b"3"]
    assert position(consumer, topic) == 4
    consumer.seek(TopicPartition(topic, 0, 2))
    assert position(consumer, topic) == OFFSET_INVALID  # a seek unsets it again
    assert [m.offset() for m in read(consumer, 3)] == [2, 3, 4]
    assert position(consumer, topic) == 5
    consumer.seek(TopicPartition(topic, 0, 8))
    assert [m.offset() for m in read(consumer, 2)] == [8, 9]
    assert position(consumer, topic) == 10
    consumer.seek(TopicPartition(topic, 0, OFFSET_BEGINNING))
    assert [m.offset() for m in read(consumer, 1)] == [0]
    consumer.seek(TopicPartition(topic, 0, OFFSET_END))
    # A seek starts end-of-partition reporting afresh: the event shows where the end resolved.
    assert wait_for(lambda: end_of_partition(consumer), 15, "the end of the partition") == 10
    assert position(consumer, topic) == OFFSET_INVALID  # reaching the end consumes nothing
    produce_singly(producer, topic, 0, [b"late"])
    assert [(m.offset(), m.value()) for m in read(consumer, 1)] == [(10, b"late")]
    assert position(consumer, topic) == 11
    # A partition never assigned has no position.
    assert position(consumer, topic, 1) == OFFSET_INVALID
    # A seek needs an assigned partition: librdkafka tells an unknown one from a known one.
    assert error_of(lambda: consumer.seek(TopicPartition(unique("missing"), 0, 1))).code() == \
        KafkaError._UNKNOWN_PARTITION
    assert error_of(lambda: consumer.seek(TopicPartition(topic, 1, 0))).code() == KafkaError._STATE


def test_pause_and_resume_lose_and_duplicate_nothing(backend, admin) -> None:
    topic = create_topic(admin, partitions=2)
    producer = backend.producer()
    produce_singly(producer, topic, 0, [b"a%d" % i for i in range(5)])
    produce_singly(producer, topic, 1, [b"b%d" % i for i in range(5)])
    consumer = backend.consumer({"group.id": unique("g")})
    consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING), TopicPartition(topic, 1, OFFSET_BEGINNING)])
    seen = read(consumer, 2)
    before_pause = position(consumer, topic, 0)
    consumer.pause([TopicPartition(topic, 0)])
    assert position(consumer, topic, 0) == before_pause  # pausing keeps the position
    from_a_before = len([m for m in seen if m.partition() == 0])
    # Everything of partition 1, including what arrives while 0 is paused, and nothing of 0.
    produce_singly(producer, topic, 1, [b"b5"])
    produce_singly(producer, topic, 0, [b"a5"])
    rest = read(consumer, 6 - len([m for m in seen if m.partition() == 1]))
    assert {m.partition() for m in rest} == {1}
    assert consumer.consume(10, 0.3) == []  # still nothing from the paused partition
    consumer.resume([TopicPartition(topic, 0)])
    seen += rest + read(consumer, 6 - from_a_before)
    by_partition = {p: [m.value() for m in seen if m.partition() == p] for p in (0, 1)}
    assert by_partition == {0: [b"a%d" % i for i in range(6)], 1: [b"b%d" % i for i in range(6)]}
    assert position(consumer, topic, 0) == 6 and position(consumer, topic, 1) == 6


# -- offsets_for_times and watermarks ------------------------------------------------------------


def test_offsets_for_times_latest_and_earliest(backend, admin) -> None:
    topic, empty = create_topic(admin), create_topic(admin)
    produce_singly(backend.producer(), topic, 0, [b"v%d" % i for i in range(5)])
    consumer = backend.consumer({"group.id": unique("g")})

    def offset_for(topic: str, timestamp: int) -> int:
        # One partition per call: librdkafka merges duplicate partitions of one request.
        [found] = consumer.offsets_for_times([TopicPartition(topic, 0, timestamp)], timeout=10)
        assert (found.topic, found.partition, found.error) == (topic, 0, None)
        return found.offset

    assert offset_for(topic, -1) == 5
    assert offset_for(topic, -2) == 0
    assert offset_for(empty, -1) == 0
    assert offset_for(empty, -2) == 0


@pytest.mark.needs_faithful_broker(reason="ListOffsets by timestamp answers offset 0")
def test_offsets_for_times_by_timestamp(backend, admin) -> None:
    topic = create_topic(admin)
    base = int(time.time() * 1000) - 60_000
    produce_singly(backend.producer(), topic, 0, [b"v"] * 5, [base + 1000 * i for i in range(5)])
    consumer = backend.consumer({"group.id": unique("g")})
    # One timestamp per call: librdkafka merges a partition listed twice (see the next test).
    found = [consumer.offsets_for_times([TopicPartition(topic, 0, ts)], timeout=10)[0].offset
             for ts in (base - 5000, base + 2000, base + 2500, base + 600_000)]
    assert found == [0, 2, 3, OFFSET_END]


@pytest.mark.needs_faithful_broker(reason="ListOffsets by timestamp answers offset 0")
def test_offsets_for_times_asks_once_per_partition_for_its_last_timestamp(backend, admin) -> None:
    # librdkafka merges the entries of a partition into one (Kafka refuses a ListOffsets naming
    # a partition twice): the last entry's timestamp is asked, and every entry gets its answer.
    topic = create_topic(admin, partitions=2)
    base = int(time.time() * 1000) - 60_000
    produce_singly(backend.producer(), topic, 0, [b"v"] * 5, [base + 1000 * i for i in range(5)])
    consumer = backend.consumer({"group.id": unique("g")})

    def offsets(*entries: tuple[int, int]) -> list[tuple[int, int, object]]:
        found = consumer.offsets_for_times([TopicPartition(topic, p, ts) for p, ts in entries], timeout=10)
        return [(tp.partition, tp.offset, tp.error) for tp in found]

    # base+2500 alone would be offset 3: the last entry of partition 0 (base+1000) decides, offset 1
    assert offsets((0, base + 2500), (1, -1), (0, base + 1000)) == [(0, 1, None), (1, 0, None), (0, 1, None)]
    assert offsets((0, -2), (0, -1)) == [(0, 5, None), (0, 5, None)]
    assert offsets((0, -1), (0, -2)) == [(0, 0, None), (0, 0, None)]
    assert offsets((0, base + 2000), (0, base + 600_000)) == [(0, OFFSET_END, None), (0, OFFSET_END, None)]


def test_admin_list_offsets_cannot_name_a_partition_twice(backend, admin) -> None:
    # The request is a dict keyed by TopicPartition, whose equality ignores the offset field.
    topic = create_topic(admin)
    produce_singly(backend.producer(), topic, 0, [b"v"] * 2)
    request = {TopicPartition(topic, 0): OffsetSpec.earliest(), TopicPartition(topic, 0, 7): OffsetSpec.latest()}
    assert len(request) == 1
    [(tp, future)] = admin.list_offsets(request).items()
    assert (tp.topic, tp.partition, future.result(15).offset) == (topic, 0, 2)


def test_unknown_partitions_have_no_watermarks_or_offsets(backend, admin) -> None:
    topic = create_topic(admin)
    consumer = backend.consumer({"group.id": unique("g")})
    assert consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10) == (0, 0)
    for tp in (TopicPartition(unique("missing"), 0), TopicPartition(topic, 3)):
        error = error_of(lambda tp=tp: consumer.get_watermark_offsets(tp, timeout=5))
        assert error.code() == KafkaError._UNKNOWN_PARTITION, error
        error = error_of(lambda tp=tp: consumer.offsets_for_times([TopicPartition(tp.topic, tp.partition, -1)],
                                                                  timeout=5))
        assert error.code() == KafkaError._UNKNOWN_PARTITION, error


# -- where consumption starts ------------------------------------------------------------------


def test_auto_offset_reset_latest_starts_at_the_end(backend, admin) -> None:
    topic = create_topic(admin)
    producer = backend.producer()
    produce_singly(producer, topic, 0, [b"old0", b"old1", b"old2"])
    group = unique("g")
    wait_for_group_coordinator(admin, group)  # a stored-offset start asks the coordinator once
    consumer = backend.consumer({"group.id": group, "auto.offset.reset": "latest", "enable.partition.eof": True})
    consumer.assign([TopicPartition(topic, 0)])  # no committed offset: the reset policy decides
    assert wait_for(lambda: end_of_partition(consumer), 15, "the end of the partition") == 3
    produce_singly(producer, topic, 0, [b"new3", b"new4"])
    assert [(m.offset(), m.value()) for m in read(consumer, 2)] == [(3, b"new3"), (4, b"new4")]


def test_assignment_reports_the_assigned_offsets(backend, admin) -> None:
    topic = create_topic(admin, partitions=4)
    produce_singly(backend.producer(), topic, 3, [b"x"] * 6)
    consumer = backend.consumer({"group.id": unique("g")})
    consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING), TopicPartition(topic, 1, OFFSET_END),
                     TopicPartition(topic, 2), TopicPartition(topic, 3, 5)])
    expected = [(0, OFFSET_BEGINNING), (1, OFFSET_END), (2, OFFSET_STORED), (3, 5)]

    def reported():
        return sorted((tp.partition, tp.offset) for tp in consumer.assignment())

    assert reported() == expected
    assert [m.offset() for m in read(consumer, 1)] == [5]
    consumer.seek(TopicPartition(topic, 3, 1))  # a seek moves the position, not the assignment
    assert reported() == expected
    assert all(tp.topic == topic for tp in consumer.assignment())


def test_incremental_assign_and_unassign(backend, admin) -> None:
    topic = create_topic(admin, partitions=2)
    producer = backend.producer()
    produce_singly(producer, topic, 0, [b"a0", b"a1"])
    produce_singly(producer, topic, 1, [b"b0", b"b1", b"b2"])
    consumer = backend.consumer({"group.id": unique("g")})
    consumer.incremental_assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
    assert [m.value() for m in read(consumer, 2)] == [b"a0", b"a1"]
    consumer.incremental_assign([TopicPartition(topic, 1, 1)])
    assert sorted((tp.partition, tp.offset) for tp in consumer.assignment()) == [(0, OFFSET_BEGINNING), (1, 1)]
    assert [(m.partition(), m.value()) for m in read(consumer, 2)] == [(1, b"b1"), (1, b"b2")]
    consumer.incremental_unassign([TopicPartition(topic, 0)])
    assert [(tp.partition, tp.offset) for tp in consumer.assignment()] == [(1, 1)]
    produce_singly(producer, topic, 0, [b"a2"])
    produce_singly(producer, topic, 1, [b"b3"])
    assert [(m.partition(), m.value()) for m in read(consumer, 1)] == [(1, b"b3")]
    assert consumer.consume(10, 0.3) == []  # nothing from the unassigned partition
    assert error_of(lambda: consumer.incremental_assign([TopicPartition(topic, 1)])).code() == KafkaError._CONFLICT
    assert error_of(lambda: consumer.incremental_unassign([TopicPartition(topic, 0)])).code() == \
        KafkaError._INVALID_ARG


# -- commits ---------------------------------------------------------------------------------


def test_enable_auto_commit_commits_consumed_positions(backend, admin) -> None:
    topic = create_topic(admin)
    produce_singly(backend.producer(), topic, 0, [b"x"] * 3)
    group = unique("g")
    consumer = backend.consumer({"group.id": group, "enable.auto.commit": True, "auto.commit.interval.ms": 100})
    consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
    read(consumer, 3)
    tp = TopicPartition(topic, 0)
    wait_for(lambda: consumer.committed([tp], timeout=5)[0].offset == 3, 15, "an auto commit of offset 3")
    consumer.close()
    other = backend.consumer({"group.id": group})
    assert other.committed([tp], timeout=10)[0].offset == 3


def test_async_commit_reports_to_on_commit(backend, admin) -> None:
    topic = create_topic(admin)
    produce_singly(backend.producer(), topic, 0, [b"x"] * 4)
    reports: list = []
    consumer = backend.consumer({
        "group.id": unique("g"), "enable.auto.commit": False,
        "on_commit": lambda err, parts: reports.append((err, [(tp.topic, tp.partition, tp.offset) for tp in parts]))})
    assert consumer.commit(offsets=[TopicPartition(topic, 0, 2)], asynchronous=True) is None
    serve_callbacks(consumer, reports, 1, "the on_commit callback")
    assert reports == [(None, [(topic, 0, 2)])]
    assert consumer.committed([TopicPartition(topic, 0)], timeout=10)[0].offset == 2
    # Without offsets the consumed (stored) positions are committed.
    consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
    read(consumer, 4)
    assert consumer.commit(asynchronous=True) is None
    serve_callbacks(consumer, reports, 2, "the second on_commit callback")
    assert reports[1] == (None, [(topic, 0, 4)])
    assert consumer.committed([TopicPartition(topic, 0)], timeout=10)[0].offset == 4


def test_negative_commit_offsets_are_left_out(backend, admin) -> None:
    """librdkafka commits only offsets >= 0; with none left the commit fails with _NO_OFFSET."""
    topic = create_topic(admin, partitions=2)
    reports: list = []
    consumer = backend.consumer({
        "group.id": unique("g"), "enable.auto.commit": False,
        "on_commit": lambda err, parts: reports.append((err, [(tp.partition, tp.offset) for tp in parts]))})
    for offset in (-1, OFFSET_BEGINNING, OFFSET_STORED, OFFSET_INVALID, -1002, -5):
        error = error_of(lambda offset=offset: consumer.commit(offsets=[TopicPartition(topic, 0, offset)],
                                                                asynchronous=False))
        assert error.code() == KafkaError._NO_OFFSET, (offset, error)
    assert error_of(lambda: consumer.commit(offsets=[], asynchronous=False)).code() == KafkaError._NO_OFFSET
    assert error_of(lambda: consumer.commit(asynchronous=False)).code() == KafkaError._NO_OFFSET
    # Mixed: the valid offset is committed, the negative one is returned as given.
    result = consumer.commit(offsets=[TopicPartition(topic, 0, 2), TopicPartition(topic, 1, -1)], asynchronous=False)
    assert [(tp.partition, tp.offset, tp.error) for tp in result] == [(0, 2, None), (1, -1, None)]
    committed = consumer.committed([TopicPartition(topic, 0), TopicPartition(topic, 1)], timeout=10)
    assert [tp.offset for tp in committed] == [2, OFFSET_INVALID]
    # Asynchronously the error goes to on_commit, not to the caller.
    assert consumer.commit(offsets=[TopicPartition(topic, 1, -1)], asynchronous=True) is None
    serve_callbacks(consumer, reports, 1, "on_commit for a negative offset")
    assert consumer.commit(asynchronous=True) is None  # nothing stored
    serve_callbacks(consumer, reports, 2, "on_commit without stored offsets")
    assert [(err.code() if err else None, parts) for err, parts in reports] == [
        (KafkaError._NO_OFFSET, [(1, -1)]), (KafkaError._NO_OFFSET, [])]


def test_store_offsets_and_commit_what_is_stored(backend, admin) -> None:
    topic = create_topic(admin, partitions=2)
    produce_singly(backend.producer(), topic, 0, [b"x"] * 5)
    consumer = backend.consumer({"group.id": unique("g"), "enable.auto.offset.store": False})
    consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
    messages = read(consumer, 5)
    assert error_of(lambda: consumer.commit(asynchronous=False)).code() == KafkaError._NO_OFFSET  # nothing stored
    consumer.store_offsets(message=messages[1])
    assert [(tp.partition, tp.offset) for tp in consumer.commit(asynchronous=False)] == [(0, 2)]
    # Only what was not committed yet is committed again.
    assert error_of(lambda: consumer.commit(asynchronous=False)).code() == KafkaError._NO_OFFSET
    consumer.store_offsets(offsets=[TopicPartition(topic, 0, 4)])
    assert [(tp.partition, tp.offset) for tp in consumer.commit(asynchronous=False)] == [(0, 4)]
    assert consumer.committed([TopicPartition(topic, 0)], timeout=10)[0].offset == 4
    error = error_of(lambda: consumer.store_offsets(offsets=[TopicPartition(topic, 1, 2)]))
    assert error.code() == KafkaError._STATE  # not assigned
    auto = backend.consumer({"group.id": unique("g")})  # enable.auto.offset.store defaults to true
    assert error_of(lambda: auto.store_offsets(offsets=[TopicPartition(topic, 0, 1)])).code() == \
        KafkaError._INVALID_ARG
    auto.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
    read(auto, 5)
    assert [(tp.partition, tp.offset) for tp in auto.commit(asynchronous=False)] == [(0, 5)]
    assert error_of(lambda: auto.commit(asynchronous=False)).code() == KafkaError._NO_OFFSET


def test_commit_to_an_unknown_topic_is_refused(backend, admin) -> None:
    consumer = backend.consumer({"group.id": unique("g")})
    missing = TopicPartition(unique("missing"), 0, 1)
    error = error_of(lambda: consumer.commit(offsets=[missing], asynchronous=False))
    assert error.code() == KafkaError.UNKNOWN_TOPIC_OR_PART
    assert consumer.committed([TopicPartition(missing.topic, 0)], timeout=10)[0].offset == OFFSET_INVALID


@pytest.mark.needs_faithful_broker(reason="OffsetCommit accepts partitions a topic does not have")
def test_commit_to_a_missing_partition_is_refused(backend, admin) -> None:
    topic = create_topic(admin, partitions=2)
    consumer = backend.consumer({"group.id": unique("g")})
    error = error_of(lambda: consumer.commit(offsets=[TopicPartition(topic, 7, 1)], asynchronous=False))
    assert error.code() == KafkaError.UNKNOWN_TOPIC_OR_PART


@pytest.mark.needs_faithful_broker(reason="OffsetCommit metadata is not stored")
def test_commit_metadata_round_trip(backend, admin) -> None:
    topic = create_topic(admin)
    group = unique("g")
    consumer = backend.consumer({"group.id": group})
    consumer.commit(offsets=[TopicPartition(topic, 0, 3, metadata="checkpoint-7")], asynchronous=False)
    [committed] = backend.consumer({"group.id": group}).committed([TopicPartition(topic, 0)], timeout=10)
    assert (committed.offset, committed.metadata) == (3, "checkpoint-7")


# -- admin ----------------------------------------------------------------------------------


@pytest.mark.needs_faithful_broker(reason="delete_records is unsupported")
def test_delete_records_is_refused_on_a_compact_only_topic(backend, admin) -> None:
    compact = create_topic(admin, config={"cleanup.policy": "compact"})
    both = create_topic(admin, config={"cleanup.policy": "compact,delete"})
    producer = backend.producer()
    for topic in (compact, both):
        for i in range(4):
            producer.produce(topic, key=b"k%d" % i, value=b"v", partition=0)
        assert producer.flush(15) == 0
    refused = TopicPartition(compact, 0, 2)
    error = admin.delete_records([refused])[refused].exception(15)
    assert isinstance(error, KafkaException) and error.args[0].code() == KafkaError.POLICY_VIOLATION
    accepted = TopicPartition(both, 0, 2)
    assert admin.delete_records([accepted])[accepted].result(15).low_watermark == 2
    consumer = backend.consumer({"group.id": unique("g")})
    assert consumer.get_watermark_offsets(TopicPartition(compact, 0), timeout=10) == (0, 4)
