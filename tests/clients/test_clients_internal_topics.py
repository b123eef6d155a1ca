"""InternalTopicManager on every backend's admin client."""

from __future__ import annotations

import threading

import pytest
from _clients_util import create_topic, unique
from confluent_kafka.admin import ConfigResource

from streams.errors import InternalTopicError, InternalTopicPartitionMismatchError
from streams.internal_topics import (
    WINDOW_CHANGELOG_ADDITIONAL_RETENTION_MS,
    InternalTopicManager,
    InternalTopicSpec,
    changelog_topic_config,
    repartition_topic_config,
)


def _configs(admin, topic: str) -> dict[str, str]:
    resource = ConfigResource(ConfigResource.Type.TOPIC, topic)
    return {name: e.value for name, e in admin.describe_configs([resource])[resource].result(15).items()}


def test_make_ready_creates_changelog_and_repartition_topics(admin) -> None:
    app = unique("app")
    specs = {
        f"{app}-counts-changelog": InternalTopicSpec(3, changelog_topic_config()),
        f"{app}-windows-changelog": InternalTopicSpec(3, changelog_topic_config(window_retention_ms=60_000)),
        f"{app}-agg-repartition": InternalTopicSpec(3, repartition_topic_config()),
    }
    manager = InternalTopicManager(admin)
    assert manager.make_ready(specs) == sorted(specs)

    metadata = admin.list_topics(timeout=10)
    assert {t: len(metadata.topics[t].partitions) for t in specs} == {t: 3 for t in specs}
    assert _configs(admin, f"{app}-counts-changelog")["cleanup.policy"] == "compact"
    windows = _configs(admin, f"{app}-windows-changelog")
    assert windows["cleanup.policy"] == "compact,delete"
    assert windows["retention.ms"] == str(60_000 + WINDOW_CHANGELOG_ADDITIONAL_RETENTION_MS)
    assert _configs(admin, f"{app}-agg-repartition")["cleanup.policy"] == "delete"

    assert manager.make_ready(specs) == []  # existing and matching: nothing to do


def test_partition_count_mismatch_names_topic_and_counts(admin) -> None:
    topic = create_topic(admin, partitions=2, prefix="app-store-changelog")
    with pytest.raises(InternalTopicPartitionMismatchError) as raised:
        InternalTopicManager(admin).make_ready({topic: InternalTopicSpec(4, changelog_topic_config())})
    error = raised.value
    assert (error.topic, error.expected_partitions, error.actual_partitions) == (topic, 4, 2)
    assert topic in str(error) and "2 partitions" in str(error) and "needs 4" in str(error)


def test_concurrent_make_ready_races_are_tolerated(admin, backend) -> None:
    specs = {unique("race-changelog"): InternalTopicSpec(2, changelog_topic_config()) for _ in range(3)}
    results: list = []
    errors: list = []
    start = threading.Barrier(3)

    def run() -> None:
        manager = InternalTopicManager(backend.admin())
        start.wait()
        try:
            results.append(manager.make_ready(specs))
        except Exception as exc:  # collected and asserted on below
            errors.append(exc)

    threads = [threading.Thread(target=run) for _ in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert errors == []
    created = sorted(t for r in results for t in r)
    assert created == sorted(specs)  # each topic created by exactly one of the racers
    metadata = admin.list_topics(timeout=10)
    assert all(len(metadata.topics[t].partitions) == 2 for t in specs)


@pytest.mark.parametrize("specs, message", [
    ({"bad name!": InternalTopicSpec(1)}, "illegal topic name 'bad name!'"),
    ({"..": InternalTopicSpec(1)}, "illegal topic name '..'"),
    ({"x" * 250: InternalTopicSpec(1)}, "illegal topic name"),
    ({"": InternalTopicSpec(1)}, "non-empty string"),
    ({"ok-topic": InternalTopicSpec(0)}, "topic 'ok-topic' needs a partition count >= 1, got 0"),
    ({"ok-topic": InternalTopicSpec(-3)}, "partition count >= 1, got -3"),
    ({"ok-topic": InternalTopicSpec(True)}, "partition count >= 1"),
    ({"ok-topic": InternalTopicSpec(1, replication_factor=0)}, "replication factor >= 1"),
    ({"ok-topic": 3}, "must be an InternalTopicSpec, got int"),
    (["ok-topic"], "specs must be a dict"),
])
def test_bad_specs_are_refused_before_any_call(admin, specs, message) -> None:
    with pytest.raises(InternalTopicError, match=message.replace("(", r"\(").replace(")", r"\)")
                       .replace("[", r"\[").replace(".", r"\.").replace("!", "!")):
        InternalTopicManager(admin).make_ready(specs)


def test_negative_window_retention_is_refused() -> None:
    with pytest.raises(InternalTopicError, match="window retention must be >= 0"):
        changelog_topic_config(window_retention_ms=-1)
