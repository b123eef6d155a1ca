"""Where input partitions start: the committed offset, else the source's `offset_reset` (Kafka
Streams' per-source reset policy), repartition topics from the earliest offset, other topics by
the main consumer's auto.offset.reset; and the committed-offset lookup that replaces the
client's own (librdkafka#5586) retries a moving coordinator instead of stalling."""

from __future__ import annotations

from typing import Any

import pytest
from confluent_kafka import OFFSET_BEGINNING, OFFSET_END, OFFSET_STORED, KafkaError, KafkaException, TopicPartition

from streams import App, AppState, StreamsBuilder, serdes
from streams.runtime.offsets import committed_offsets, reset_offset, start_positions

from _runtime_util import Cluster, unique

S = serdes.STRING


def _values(cluster: Cluster, topic: str, n: int) -> list[str]:
    msgs = cluster.read_all(topic, 1, until=lambda got: len(got) >= n)
    return [m.value().decode() for m in msgs]


def test_a_source_with_offset_reset_latest_skips_what_came_before_then_resumes_from_its_commit(
        backend_config, tmp_path):
    cluster = Cluster(backend_config)
    late, early, late_out, early_out = (unique(n) for n in ("late", "early", "late-out", "early-out"))
    cluster.create_topics(1, late, early, late_out, early_out)
    b = StreamsBuilder()
    b.stream(late, key_serde=S, value_serde=S, offset_reset="latest").to(late_out)
    b.stream(early, key_serde=S, value_serde=S).to(early_out)
    topology = b.build()
    config = {**cluster.config, "application.id": unique("reset"), "state.dir": str(tmp_path),
              "commit.interval.ms": 50}
    before = [(b"k", f"before-{i}".encode()) for i in range(5)]
    try:
        cluster.produce(late, before)
        cluster.produce(early, before)
        app = App(topology, config)
        app.start()
        try:
            assert app.wait_for_state(AppState.RUNNING, timeout=60)
            # the source without a policy reads from the earliest offset (Kafka Streams' default)
            assert _values(cluster, early_out, 5) == [f"before-{i}" for i in range(5)]
            cluster.produce(late, [(b"k", f"after-{i}".encode()) for i in range(3)])
            assert _values(cluster, late_out, 3) == ["after-0", "after-1", "after-2"]
        finally:
            assert app.close(timeout=60)

        # restarted: the committed offset wins over the policy, nothing written meanwhile is skipped
        cluster.produce(late, [(b"k", b"while-down")])
        app = App(topology, config)
        app.start()
        try:
            assert app.wait_for_state(AppState.RUNNING, timeout=60)
            assert _values(cluster, late_out, 4) == ["after-0", "after-1", "after-2", "while-down"]
        finally:
            assert app.close(timeout=60)
    finally:
        cluster.close()


def test_reset_policies_of_sources_repartition_topics_and_the_main_consumer(tmp_path):
    b = StreamsBuilder()
    b.stream("latest-in", key_serde=S, value_serde=S, offset_reset="latest").to("out")
    (b.stream("plain-in", key_serde=S, value_serde=S)
        .group_by(lambda k, v: v, key_serde=S, value_serde=S).count().to_stream().to("counts"))
    topology = b.build()
    internal = [t for t in topology.internal_topics if t.endswith("-repartition")]
    assert len(internal) == 1
    assert topology.offset_reset_of("latest-in") == "latest"
    assert topology.offset_reset_of("plain-in") is None
    assert topology.offset_reset_of(internal[0]) == "earliest"
    assert topology.offset_reset_of("not-a-source") is None

    assert reset_offset("earliest") == reset_offset("smallest") == OFFSET_BEGINNING
    assert reset_offset("latest") == reset_offset("largest") == OFFSET_END
    assert reset_offset("error") == reset_offset(None) == OFFSET_STORED


def test_start_positions_take_the_committed_offset_else_the_policy(tmp_path):
    config = {"bootstrap.servers": f"local://{tmp_path}/cluster"}
    cluster = Cluster(config)
    topic, group = unique("pos"), unique("pos-group")
    cluster.create_topics(3, topic)
    try:
        for p in range(3):
            cluster.produce(topic, [(b"k", b"v")] * (p + 2), partition=p)
        committer = cluster.backend.consumer({"group.id": group, "enable.auto.commit": False})
        try:
            committer.commit(offsets=[TopicPartition(topic, 0, 1)], asynchronous=False)
        finally:
            committer.close()
        consumer = cluster.backend.consumer({"group.id": group, "enable.auto.commit": False})
        try:
            got = start_positions(consumer, [TopicPartition(topic, p) for p in range(3)],
                                  {topic: "latest"}, "earliest")
            # committed wins; latest is the partition's end offset, read now
            assert [(tp.partition, tp.offset) for tp in got] == [(0, 1), (1, 3), (2, 4)]
            got = start_positions(consumer, [TopicPartition(topic, 2)], {}, "earliest")
            assert [(tp.partition, tp.offset) for tp in got] == [(2, OFFSET_BEGINNING)]
        finally:
            consumer.close()
    finally:
        cluster.close()


class _CoordinatorMoving:
    """A consumer whose committed-offset lookups first meet `errors` (a coordinator that moved or
    is loading: a broker state no test can bring about on demand), then answer."""

    def __init__(self, errors: list[int], answer: list[TopicPartition]) -> None:
        self.errors = list(errors)
        self.answer = answer
        self.calls = 0

    def committed(self, partitions: list[TopicPartition], timeout: float) -> Any:
        self.calls += 1
        if self.errors:
            raise KafkaException(KafkaError(self.errors.pop(0)))
        return self.answer


def test_the_committed_offset_lookup_asks_a_moving_coordinator_again():
    consumer = _CoordinatorMoving([KafkaError.NOT_COORDINATOR, KafkaError.COORDINATOR_LOAD_IN_PROGRESS],
                                  [TopicPartition("t", 0, 7), TopicPartition("t", 1, -1001)])
    assert committed_offsets(consumer, [("t", 0), ("t", 1)]) == {("t", 0): (7, None)}
    assert consumer.calls == 3


def test_the_committed_offset_lookup_fails_loudly_on_other_errors_and_past_its_deadline():
    denied = _CoordinatorMoving([KafkaError.GROUP_AUTHORIZATION_FAILED], [])
    with pytest.raises(KafkaException) as info:
        committed_offsets(denied, [("t", 0)])
    assert info.value.args[0].code() == KafkaError.GROUP_AUTHORIZATION_FAILED
    assert denied.calls == 1

    stuck = _CoordinatorMoving([KafkaError.NOT_COORDINATOR] * 100, [])
    with pytest.raises(KafkaException) as info:
        committed_offsets(stuck, [("t", 0)], timeout_s=0.5)
    assert info.value.args[0].code() == KafkaError.NOT_COORDINATOR
    assert 1 < stuck.calls < 100
