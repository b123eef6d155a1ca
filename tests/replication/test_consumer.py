"""The embedded Consumer on a real LocalCluster: positions, resets, pause/seek, failover,
read_committed, group rebalances and durable commits."""

from __future__ import annotations

import threading
import time
import uuid

import pytest
from confluent_kafka import OFFSET_BEGINNING, OFFSET_END, OFFSET_INVALID, KafkaError, KafkaException, TopicPartition

from replication.cluster import LocalCluster
from replication.records import encode_batch

FAST = {"replica.fetch.backoff.ms": 20, "replica.socket.timeout.ms": 1000,
        "group.initial.rebalance.delay.ms": 20}
GROUP = {"session.timeout.ms": 3000, "heartbeat.interval.ms": 100}
_pause = threading.Event()


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def wait_for(predicate, timeout: float = 20.0, what: str = "condition"):
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        _pause.wait(0.005)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    with LocalCluster(tmp_path_factory.mktemp("consumer"), num_brokers=3, config=FAST) as c:
        yield c


def fill(cluster, topic: str, partition: int, values, ts0: int = 1000) -> None:
    for i, v in enumerate(values):
        resp = cluster.produce(topic, partition, encode_batch([(None, v, ts0 + i)]), acks=-1)
        assert resp.error == 0


def new_topic(cluster, partitions: int = 1, values=None) -> str:
    topic = unique("t")
    cluster.create_topic(topic, partitions=partitions, replication_factor=3)
    if values is not None:
        fill(cluster, topic, 0, values)
    return topic


def read(consumer, expected: int, timeout: float = 15.0) -> list:
    out: list = []
    deadline = time.monotonic() + timeout
    while len(out) < expected:
        if time.monotonic() > deadline:
            raise AssertionError(f"got {len(out)} of {expected} messages")
        for m in consumer.consume(expected - len(out), 0.2):
            if m.error() is not None and m.error().code() == KafkaError._PARTITION_EOF:
                continue
            assert m.error() is None, m.error()
            out.append(m)
    return out


def end_of_partition(consumer) -> int | None:
    """The offset of the next end-of-partition event (None if none yet); data fails."""
    for m in consumer.consume(10, 0.05):
        assert m.error() is not None and m.error().code() == KafkaError._PARTITION_EOF, m
        return m.offset()
    return None


def first_error(consumer, timeout: float = 10.0) -> KafkaError:
    def error():
        m = consumer.poll(0.1)
        return m.error() if m is not None and m.error() is not None else None
    return wait_for(error, timeout, "an error message")


def test_position_seek_and_cached_watermarks(cluster):
    topic = new_topic(cluster, values=[str(i).encode() for i in range(10)])
    consumer = cluster.consumer({"group.id": unique("g"), "enable.partition.eof": True})
    tp = TopicPartition(topic, 0, OFFSET_BEGINNING)
    consumer.assign([tp])
    assert [m.value() for m in read(consumer, 4)] == [b"0", b"1", b"2", b"3"]
    assert consumer.position([TopicPartition(topic, 0)])[0].offset == 4
    consumer.seek(TopicPartition(topic, 0, 2))
    assert [m.offset() for m in read(consumer, 3)] == [2, 3, 4]
    assert consumer.get_watermark_offsets(TopicPartition(topic, 0), cached=True) == (0, 10)
    consumer.seek(TopicPartition(topic, 0, OFFSET_END))  # resolved by the fetcher, as librdkafka does
    assert wait_for(lambda: end_of_partition(consumer), 10, "the end offset") == 10
    # librdkafka's position is the application's: unset by the seek until a message is consumed
    assert consumer.position([TopicPartition(topic, 0)])[0].offset == OFFSET_INVALID
    fill(cluster, topic, 0, [b"late"])
    assert [(m.offset(), m.value()) for m in read(consumer, 1)] == [(10, b"late")]
    with pytest.raises(KafkaException) as raised:
        consumer.seek(TopicPartition("not-assigned", 0, 1))
    assert raised.value.args[0].code() == KafkaError._UNKNOWN_PARTITION
    consumer.close()


def test_a_waiting_consumer_is_woken_by_new_records(cluster):
    topic = new_topic(cluster)
    consumer = cluster.consumer({"group.id": unique("g"), "fetch.wait.max.ms": 5000})
    consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
    assert consumer.consume(10, 0.2) == []
    threading.Timer(0.1, fill, (cluster, topic, 0, [b"wake"])).start()
    # The long-poll fetch parked in the broker's purgatory completes on the append.
    assert [m.value() for m in read(consumer, 1, timeout=4)] == [b"wake"]
    consumer.close()


def test_pause_and_resume_lose_and_duplicate_nothing(cluster):
    topic = new_topic(cluster, partitions=2)
    fill(cluster, topic, 0, [b"a%d" % i for i in range(5)])
    fill(cluster, topic, 1, [b"b%d" % i for i in range(5)])
    consumer = cluster.consumer({"group.id": unique("g")})
    consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING), TopicPartition(topic, 1, OFFSET_BEGINNING)])
    first = read(consumer, 2)
    consumer.pause([TopicPartition(topic, 0)])
    rest = [m for m in consumer.consume(100, 0.5)]
    fill(cluster, topic, 1, [b"b5"])
    rest += [m for m in consumer.consume(100, 0.5)]
    assert all(m.partition() == 1 for m in rest)  # nothing from the paused partition
    consumer.resume([TopicPartition(topic, 0)])
    seen = first + rest
    need = 11 - len(seen)
    seen += read(consumer, need)
    by_partition = {p: [m.value() for m in seen if m.partition() == p] for p in (0, 1)}
    assert by_partition == {0: [b"a%d" % i for i in range(5)], 1: [b"b%d" % i for i in range(6)]}
    consumer.close()


def test_offsets_for_times(cluster):
    topic = new_topic(cluster, values=[b"v"] * 10)  # timestamps 1000..1009
    consumer = cluster.consumer({"group.id": unique("g")})
    # One partition per call: listed twice, librdkafka asks for the last timestamp only.
    found = [consumer.offsets_for_times([TopicPartition(topic, 0, ts)], timeout=10)[0].offset for ts in (1005, 99999)]
    assert found == [5, OFFSET_END]
    consumer.close()


def test_out_of_range_resets_by_policy(cluster):
    topic = new_topic(cluster, values=[str(i).encode() for i in range(10)])
    admin = cluster.admin()
    assert admin.delete_records([TopicPartition(topic, 0, 6)])[TopicPartition(topic, 0, 6)].result(10).low_watermark == 6

    earliest = cluster.consumer({"group.id": unique("g"), "auto.offset.reset": "earliest"})
    earliest.assign([TopicPartition(topic, 0, 2)])  # below the log start now
    assert [m.offset() for m in read(earliest, 4)] == [6, 7, 8, 9]
    earliest.close()

    latest = cluster.consumer({"group.id": unique("g"), "auto.offset.reset": "latest",
                               "enable.partition.eof": True})
    latest.assign([TopicPartition(topic, 0, 2)])
    assert wait_for(lambda: end_of_partition(latest), 10, "a reset to the end") == 10
    latest.close()

    strict = cluster.consumer({"group.id": unique("g"), "auto.offset.reset": "error"})
    strict.assign([TopicPartition(topic, 0, 2)])
    assert first_error(strict).code() == KafkaError._AUTO_OFFSET_RESET
    # a seek to a valid offset recovers
    strict.seek(TopicPartition(topic, 0, 8))
    assert [m.offset() for m in read(strict, 2)] == [8, 9]
    strict.close()


def test_no_committed_offset_with_reset_error(cluster):
    topic = new_topic(cluster, values=[b"x"])
    consumer = cluster.consumer({"group.id": unique("g"), "auto.offset.reset": "error"})
    consumer.assign([TopicPartition(topic, 0)])
    assert first_error(consumer).code() == KafkaError._AUTO_OFFSET_RESET
    consumer.close()


def test_consumption_continues_on_the_new_leader(tmp_path):
    with LocalCluster(tmp_path / "c", num_brokers=3, config=FAST) as cluster:
        topic = new_topic(cluster, values=[b"%d" % i for i in range(20)])
        consumer = cluster.consumer({"group.id": unique("g")})
        consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
        got = read(consumer, 10)
        old = cluster.leader(topic, 0)
        cluster.crash_broker(old)
        cluster.wait_until(lambda: cluster.leader(topic, 0) not in (-1, old), 20, "a new leader")
        fill(cluster, topic, 0, [b"%d" % i for i in range(20, 25)])
        got += read(consumer, 15)
        assert [m.offset() for m in got] == list(range(25))
        assert [m.value() for m in got] == [b"%d" % i for i in range(25)]
        consumer.close()


def test_a_partition_without_a_leader_does_not_hold_up_the_others(tmp_path):
    """A position that needs a ListOffsets its leader cannot answer (here: no leader at all) is
    retried after a backoff, as Kafka's consumer resets positions asynchronously; meanwhile the
    consumer's other partitions are fetched as usual. The fetcher used to retry the lookup for
    5 s on end, so each fetch of the other partition waited that long."""
    with LocalCluster(tmp_path / "c", num_brokers=3, config=FAST) as cluster:
        topic = unique("t")
        cluster.create_topic(topic, partitions=2, replication_factor=1)
        lost = cluster.leader(topic, 1)
        assert cluster.leader(topic, 0) != lost
        cluster.stop_broker(lost)
        cluster.wait_until(lambda: cluster.leader(topic, 1) == -1, 20, "partition 1 without a leader")
        # fetch.error.backoff.ms 0: the lookup is tried again on every turn of the fetcher (with a
        # backoff, on the first turn after it), so no wait for a backoff is needed to meet it
        consumer = cluster.consumer({"group.id": unique("g"), "fetch.error.backoff.ms": 0})
        consumer.assign([TopicPartition(topic, 1, OFFSET_BEGINNING), TopicPartition(topic, 0, OFFSET_BEGINNING)])
        # ten records, each written once the one before it is read, so each needs a fetch of its
        # own: 50 s at least with a 5 s stall before each fetch
        deadline = time.monotonic() + 20
        for i in range(10):
            fill(cluster, topic, 0, [b"%d" % i])
            [message] = read(consumer, 1, timeout=max(0.0, deadline - time.monotonic()))
            assert (message.partition(), message.offset(), message.value()) == (0, i, b"%d" % i)
        cluster.start_broker(lost)
        cluster.wait_until(lambda: cluster.leader(topic, 1) == lost, 20, "partition 1's leader back")
        fill(cluster, topic, 1, [b"back"])
        [message] = read(consumer, 1)
        assert (message.partition(), message.offset(), message.value()) == (1, 0, b"back")
        consumer.close()


def test_read_committed_skips_aborted_and_control_records(cluster):
    topic = new_topic(cluster)
    producer = cluster.producer({"transactional.id": unique("tx")})
    producer.init_transactions(10)
    for value, commit in ((b"c1", True), (b"a1", False), (b"c2", True)):
        producer.begin_transaction()
        producer.produce(topic, value=value, partition=0)
        producer.flush(10)
        (producer.commit_transaction if commit else producer.abort_transaction)(10)
    committed = cluster.consumer({"group.id": unique("g"), "isolation.level": "read_committed",
                                  "enable.partition.eof": True})
    committed.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
    messages = []
    while True:
        m = committed.poll(5)
        assert m is not None
        if m.error() is not None:
            assert m.error().code() == KafkaError._PARTITION_EOF
            break
        messages.append(m)
    # data at 0, 2, 4; markers at 1, 3, 5 are never returned
    assert [(m.offset(), m.value()) for m in messages] == [(0, b"c1"), (4, b"c2")]
    # the position steps past the trailing commit marker, as librdkafka's does
    assert committed.position([TopicPartition(topic, 0)])[0].offset == 6
    uncommitted = cluster.consumer({"group.id": unique("g"), "isolation.level": "read_uncommitted"})
    uncommitted.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
    assert [m.value() for m in read(uncommitted, 3)] == [b"c1", b"a1", b"c2"]
    committed.close()
    uncommitted.close()


class _Member:
    def __init__(self, cluster, topic, group, strategy):
        self.owned: set[int] = set()
        self.revoked: list[set[int]] = []
        self.cooperative = strategy == "cooperative-sticky"
        self.consumer = cluster.consumer({"group.id": group, "partition.assignment.strategy": strategy, **GROUP})
        self.consumer.subscribe([topic], on_assign=self._assign, on_revoke=self._revoke)

    def _assign(self, consumer, partitions):
        got = {tp.partition for tp in partitions}
        self.owned = self.owned | got if self.cooperative else got

    def _lost(self, consumer, partitions):
        self.lost.append({tp.partition for tp in partitions})
        self.owned -= {tp.partition for tp in partitions}

    def _revoke(self, consumer, partitions):
        gone = {tp.partition for tp in partitions}
        self.revoked.append(gone)
        self.owned -= gone


def _settle(members, partitions):
    def settled():
        for m in members:
            msg = m.consumer.poll(0.01)
            assert msg is None or msg.error() is None, msg.error()
        owned = [p for m in members for p in m.owned]
        assert len(owned) == len(set(owned)), [sorted(m.owned) for m in members]
        sizes = [len(m.owned) for m in members]
        # balanced too: a cooperative rebalance passes through rounds that cover every partition
        # unevenly (a member's revocation lands a round after the newcomer's first share)
        return sorted(owned) == list(range(partitions)) and min(sizes) > 0 and max(sizes) - min(sizes) <= 1
    wait_for(settled, 30, "the group to settle")


@pytest.mark.parametrize("strategy", ["range", "cooperative-sticky"])
def test_three_members_share_partitions_and_cooperative_moves_only_what_it_must(cluster, strategy):
    topic = new_topic(cluster, partitions=6)
    group = unique("g")
    members = [_Member(cluster, topic, group, strategy) for _ in range(2)]
    _settle(members, 6)
    for m in members:
        m.revoked.clear()
    members.append(_Member(cluster, topic, group, strategy))
    _settle(members, 6)
    assert sorted(len(m.owned) for m in members) == [2, 2, 2]
    revoked = [p for m in members for r in m.revoked for p in r]
    if strategy == "cooperative-sticky":
        assert len(revoked) == 2  # exactly the two partitions that moved to the newcomer
    else:
        assert len(revoked) == 6  # eager: everything is revoked, then reassigned
    description = cluster.admin().describe_consumer_groups([group])[group].result(10)
    assert description.partition_assignor == strategy and len(description.members) == 3
    for m in members:
        m.consumer.close()


def test_commits_through_the_consumer_survive_a_full_restart(tmp_path):
    directory = tmp_path / "c"
    group = unique("g")
    with LocalCluster(directory, num_brokers=3, config=FAST) as cluster:
        topic = new_topic(cluster, values=[b"%d" % i for i in range(6)])
        consumer = cluster.consumer({"group.id": group, "enable.auto.commit": False, "auto.offset.reset": "earliest",
                                    **GROUP})
        consumer.subscribe([topic])
        got = read(consumer, 4)
        committed = consumer.commit(message=got[-1], asynchronous=False)
        assert [(tp.partition, tp.offset, tp.error) for tp in committed] == [(0, 4, None)]
        consumer.close()
    with LocalCluster(directory, num_brokers=3, config=FAST) as cluster:
        consumer = cluster.consumer({"group.id": group, **GROUP})
        assert consumer.committed([TopicPartition(topic, 0)], timeout=10)[0].offset == 4
        consumer.subscribe([topic])
        assert [m.value() for m in read(consumer, 2)] == [b"4", b"5"]
        consumer.close()


def test_auto_commit_stores_consumed_positions(cluster):
    topic = new_topic(cluster, values=[b"x"] * 3)
    group = unique("g")
    consumer = cluster.consumer({"group.id": group, "enable.auto.commit": True, "auto.commit.interval.ms": 50})
    consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
    read(consumer, 3)
    wait_for(lambda: consumer.committed([TopicPartition(topic, 0)], timeout=5)[0].offset == 3, 10, "an auto commit")
    consumer.close()


def test_bad_inputs(cluster):
    with pytest.raises(ValueError, match="group.id"):
        cluster.consumer({})
    with pytest.raises(KafkaException, match="auto.offset.reset"):
        cluster.consumer({"group.id": "g", "auto.offset.reset": "sideways"})
    with pytest.raises(KafkaException, match="fetch.wait.max.ms"):
        cluster.consumer({"group.id": "g", "fetch.wait.max.ms": "soon"})
    with pytest.raises(KafkaException, match="partition.assignment.strategy"):
        cluster.consumer({"group.id": "g", "partition.assignment.strategy": "sticky-ish"})
    consumer = cluster.consumer({"group.id": unique("g")})
    with pytest.raises(ValueError, match="num_messages"):
        consumer.consume(-1)
    with pytest.raises(TypeError):
        consumer.subscribe("not-a-list")
    with pytest.raises(KafkaException) as raised:
        consumer.commit(asynchronous=False)
    assert raised.value.args[0].code() == KafkaError._NO_OFFSET
    consumer.close()
    for call in (lambda: consumer.poll(0), lambda: consumer.assignment(), lambda: consumer.committed([])):
        with pytest.raises(RuntimeError, match="Consumer closed"):
            call()


def test_a_member_slow_to_serve_a_rebalance_keeps_its_session(cluster):
    """Heartbeats continue while a rebalance event waits for the application's next poll:
    only max.poll.interval.ms bounds that wait, not session.timeout.ms."""
    topic = new_topic(cluster, partitions=2)
    group = unique("g")
    conf = {"session.timeout.ms": 400, "heartbeat.interval.ms": 50, "max.poll.interval.ms": 20000}
    slow = _Member(cluster, topic, group, "range")
    slow.consumer.close()
    slow.consumer = cluster.consumer({"group.id": group, **conf})
    slow.consumer.subscribe([topic], on_assign=slow._assign, on_revoke=slow._revoke, on_lost=slow._lost)
    slow.lost = []
    _settle([slow], 2)
    member_id = slow.consumer.memberid()
    other = cluster.consumer({"group.id": group, **conf})
    other.subscribe([topic])
    started = time.monotonic()
    # Only `other` polls for three session timeouts; `slow` has a revoke waiting to be served.
    wait_for(lambda: (other.poll(0.02), time.monotonic() - started > 1.2)[1], 10, "three session timeouts")
    wait_for(lambda: (slow.consumer.poll(0.02), other.poll(0.02), len(slow.owned) == 1)[2], 15,
             "the group to settle with both members")
    assert slow.lost == [] and slow.consumer.memberid() == member_id  # never evicted
    slow.consumer.close()
    other.close()
