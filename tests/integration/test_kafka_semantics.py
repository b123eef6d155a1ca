"""Kafka behaviours Eddy depends on, shown on the session's broker: log compaction of a
changelog-configured topic and static group membership (KIP-345).

The other such behaviours have their tests where their users are: read_committed hiding aborted
data and transaction.timeout.ms (tests/clients/test_clients_transactions.py), delete_records
purging repartition topics (tests/streams/runtime/test_repartition_purge.py), cooperative
rebalancing (tests/clients/test_clients_groups.py), offsets_for_times
(tests/clients/test_clients_positions.py).
"""

from __future__ import annotations

import threading
import time
import uuid

import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

pytestmark = [pytest.mark.integration,
              pytest.mark.needs_faithful_broker(reason="compaction never runs; static members are not kept")]

_pause = threading.Event()  # never set: bounded waits between polls


def _wait_for(predicate, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        _pause.wait(0.05)


def _topic(bootstrap: str, partitions: int = 1, config: dict | None = None) -> str:
    name = f"sem-{uuid.uuid4().hex[:10]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})  # kept alive until the future resolves
    admin.create_topics([NewTopic(name, partitions, 1, config=config or {})])[name].result(15)
    return name


def _read_all(bootstrap: str, topic: str) -> list[tuple[bytes, bytes | None]]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"r-{uuid.uuid4().hex[:8]}",
                         "enable.partition.eof": True, "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, 0, 0)])
    out = []
    try:
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            if msg.error() is not None:
                assert msg.error().code() == KafkaError._PARTITION_EOF, msg.error()
                return out
            out.append((msg.key(), msg.value()))
        raise AssertionError(f"no end of partition reading {topic}")
    finally:
        consumer.close()


def test_compacted_changelog_keeps_the_latest_value_of_every_key(kafka_bootstrap_servers: str) -> None:
    bootstrap = kafka_bootstrap_servers
    # A changelog's policy (Eddy creates changelogs compact), with segments small and short-lived
    # enough for the cleaner to run within the test.
    topic = _topic(bootstrap, config={"cleanup.policy": "compact", "segment.ms": "100",
                                      "min.cleanable.dirty.ratio": "0.01", "min.compaction.lag.ms": "0",
                                      "delete.retention.ms": "100"})
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    expected: dict[bytes, bytes] = {}
    for i in range(3000):
        key = b"k%02d" % (i % 40)
        if i % 7 == 3:
            producer.produce(topic, key=key, value=None)
            expected.pop(key, None)
        else:
            producer.produce(topic, key=key, value=b"v%d" % i)
            expected[key] = b"v%d" % i
    assert producer.flush(30) == 0
    written = 3000
    rolls = 0

    def compacted() -> bool:
        # The active segment is never cleaned: an append after segment.ms rolls it.
        nonlocal rolls, written
        rolls += 1
        producer.produce(topic, key=b"roll", value=b"%d" % rolls)
        producer.flush(10)
        written += 1
        return len(_read_all(bootstrap, topic)) < written // 2

    _wait_for(compacted, 90, "the broker's log cleaner compacting the topic")
    records = _read_all(bootstrap, topic)
    latest: dict[bytes, bytes | None] = {}
    for key, value in records:
        latest[key] = value
    assert {k: v for k, v in latest.items() if v is not None and k != b"roll"} == expected
    # compaction keeps order: the surviving offsets hold each key's last write
    assert len(records) < written // 2


class _Member:
    """A static group member that records its rebalance callbacks."""

    def __init__(self, bootstrap: str, topic: str, group: str, instance_id: str) -> None:
        self.owned: set[int] = set()
        self.callbacks: list[str] = []
        self.consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                                  "group.instance.id": instance_id, "session.timeout.ms": 10000,
                                  "heartbeat.interval.ms": 500, "partition.assignment.strategy": "range",
                                  "enable.auto.commit": False})
        self.consumer.subscribe([topic], on_assign=self._assign, on_revoke=self._revoke)

    def _assign(self, _consumer, partitions) -> None:
        self.callbacks.append("assign")
        self.owned = {tp.partition for tp in partitions}

    def _revoke(self, _consumer, partitions) -> None:
        self.callbacks.append("revoke")
        self.owned -= {tp.partition for tp in partitions}

    def poll(self) -> None:
        self.consumer.poll(0.05)


def test_static_member_restarted_within_the_session_timeout_gets_its_partitions_back_without_a_rebalance(
        kafka_bootstrap_servers: str) -> None:
    topic = _topic(kafka_bootstrap_servers, partitions=4)
    group = f"static-{uuid.uuid4().hex[:8]}"
    a = _Member(kafka_bootstrap_servers, topic, group, "instance-a")
    b = _Member(kafka_bootstrap_servers, topic, group, "instance-b")
    a2 = None
    try:
        def settled() -> bool:
            a.poll()
            b.poll()
            return bool(a.owned) and bool(b.owned) and a.owned | b.owned == {0, 1, 2, 3}

        _wait_for(settled, 60, "two static members sharing the partitions")
        owned_by_a, b_callbacks = set(a.owned), len(b.callbacks)
        a.consumer.close()  # a static member leaves no LeaveGroup behind: the group keeps its place
        a2 = _Member(kafka_bootstrap_servers, topic, group, "instance-a")

        def a2_back() -> bool:
            a2.poll()
            b.poll()
            return a2.owned == owned_by_a

        _wait_for(a2_back, 30, "the restarted static member getting its partitions back")
        for _ in range(20):  # b keeps polling: a rebalance would reach its callbacks now
            b.poll()
        assert len(b.callbacks) == b_callbacks, b.callbacks
    finally:
        for member in (a2, b):
            if member is not None:
                member.consumer.close()
