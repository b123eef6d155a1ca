"""Where input partitions start: the committed offset, else the source's `offset_reset` (Kafka
Streams' per-source reset policy), repartition topics from the earliest offset, other topics by
the main consumer's auto.offset.reset; and the committed-offset lookup that replaces the
client's own (librdkafka#5586) retries a moving coordinator instead of stalling."""

from __future__ import annotations

from typing import Any

import pytest
from confluent_kafka import OFFSET_BEGINNING, OFFSET_END, OFFSET_STORED, KafkaError, KafkaException, TopicPartition

from streams import App, AppState, StreamsBuilder, serdes
from streams.runtime.errors import MissingValidOffsetError
from streams.runtime.offsets import committed_offsets, reset_offset, start_positions

from _runtime_util import Cluster, shutdown_on_error, unique, wait_for

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


def _delete_records_before(cluster: Cluster, topic: str, offset: int) -> None:
    [result] = cluster.admin.delete_records([TopicPartition(topic, 0, offset)]).values()
    result.result(30)


@pytest.mark.needs_faithful_broker(reason="delete_records is unsupported")
@pytest.mark.parametrize("protocol", ["cooperative", "eager"])
@pytest.mark.parametrize("policy", ["latest", "earliest"])
def test_a_committed_offset_out_of_range_moves_by_its_sources_policy(backend_config, tmp_path, policy, protocol,
                                                                     caplog):
    """The group committed offset 3, then the records up to 5 were deleted: on restart the fetch
    at 3 is out of range. The source's policy decides where it goes (Kafka Streams' resetOffsets),
    not the consumer's own auto.offset.reset (earliest, for the app's other source). Under the
    eager protocol (a source of two topics: the range assignor) the partition is assigned again
    with the whole assignment, and the source's other topic goes on where it was."""
    cluster = Cluster(backend_config)
    src, extra, other, out, other_out = (unique(n) for n in ("oor", "oor-extra", "oor-other", "oor-out",
                                                               "oor-other-out"))
    cluster.create_topics(1, src, extra, other, out, other_out)
    b = StreamsBuilder()
    b.stream([src, extra] if protocol == "eager" else src, key_serde=S, value_serde=S, offset_reset=policy).to(out)
    b.stream(other, key_serde=S, value_serde=S).to(other_out)
    topology = b.build()
    config = {**cluster.config, "application.id": unique("oor"), "state.dir": str(tmp_path),
              "commit.interval.ms": 50}
    first = [f"first-{i}" for i in range(3)] + (["extra-0", "extra-1"] if protocol == "eager" else [])
    try:
        app = App(topology, config)
        app.start()
        try:
            assert app.wait_for_state(AppState.RUNNING, timeout=60)
            cluster.produce(src, [(b"k", f"first-{i}".encode()) for i in range(3)])
            if protocol == "eager":
                cluster.produce(extra, [(b"k", b"extra-0"), (b"k", b"extra-1")])
            assert sorted(_values(cluster, out, len(first))) == sorted(first)
        finally:
            assert app.close(timeout=60)
        assert cluster.committed_offset(config["application.id"], src) == 3

        cluster.produce(src, [(b"k", f"kept-{i}".encode()) for i in range(5)])  # offsets 3..7
        _delete_records_before(cluster, src, 5)  # 3 and 4 gone: the committed 3 is out of range
        app = App(topology, config)
        app.start()
        try:
            assert app.wait_for_state(AppState.RUNNING, timeout=60)
            if policy == "latest":
                # the end is read when the fetch fails (the policies differ, so the consumer runs
                # with "error" and the task manager resets): "after" must come later to be past it
                wait_for(lambda: "reset to offset" in caplog.text, 60, "the reset")
                assert f"{src}-0: " in caplog.text and "reset to offset 8 (offset_reset latest)" in caplog.text
            cluster.produce(src, [(b"k", b"after")])
            expected = first + (["kept-2", "kept-3", "kept-4"] if policy == "earliest" else []) + ["after"]
            if protocol == "eager":
                cluster.produce(extra, [(b"k", b"extra-after")])
                expected.append("extra-after")
            got = _values(cluster, out, len(expected))
            assert sorted(got) == sorted(expected)  # nothing skipped, nothing twice
            assert [v for v in got if v.startswith(("first", "kept", "after"))] == [
                v for v in expected if v.startswith(("first", "kept", "after"))]
            assert all(t.is_alive() for t in app.threads)
        finally:
            assert app.close(timeout=60)
    finally:
        cluster.close()


def test_a_partition_without_a_valid_offset_and_without_a_policy_fails_the_app_naming_it(backend_config, tmp_path):
    """main.consumer.auto.offset.reset "error" (Kafka's "none") and no offset_reset on the source:
    nothing committed means no place to start, which Kafka Streams reports as fatal."""
    cluster = Cluster(backend_config)
    strict, latest, out = unique("strict"), unique("latest"), unique("strict-out")
    cluster.create_topics(1, strict, latest, out)
    b = StreamsBuilder()
    b.stream(strict, key_serde=S, value_serde=S).to(out)
    b.stream(latest, key_serde=S, value_serde=S, offset_reset="latest").to(out)
    app = App(b.build(), {**cluster.config, "application.id": unique("strict"), "state.dir": str(tmp_path),
                          "main.consumer.auto.offset.reset": "error"})
    seen = shutdown_on_error(app)
    try:
        cluster.produce(strict, [(b"k", b"v")])
        app.start()
        assert app.wait_for_state(AppState.ERROR, timeout=60)
        assert len(seen) == 1 and isinstance(seen[0], MissingValidOffsetError)
        assert f"{strict}-0" in str(seen[0]) and "'error'" in str(seen[0])
    finally:
        assert app.close(timeout=60)
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
            committed = committed_offsets(consumer, [(topic, p) for p in range(3)])
            assert committed == {(topic, 0): (1, None)}
            got = start_positions(consumer, [TopicPartition(topic, p) for p in range(3)], committed,
                                  {topic: "latest"}, "earliest")
            # committed wins; latest is the partition's end offset, read now
            assert [(tp.partition, tp.offset) for tp in got] == [(0, 1), (1, 3), (2, 4)]
            got = start_positions(consumer, [TopicPartition(topic, 2)], committed, {}, "earliest")
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
