"""windowstore.changelog.additional.retention.ms: a windowed store's changelog keeps records this
much longer than the store (Kafka's InternalTopicManager adds it when it creates the topic;
default 1 day). It was accepted and ignored: the topics always got the default."""

from __future__ import annotations

import pytest
from confluent_kafka.admin import ConfigResource

from state.stores import Stores
from streams import (App, AppState, BufferConfig, JoinWindows, Materialized, SessionWindows, StreamsBuilder, Suppressed,
                     TimeWindows, serdes)
from streams.errors import ConfigError
from streams.runtime.config import StreamsConfig
from streams.runtime.internal import plan_internal_topics

from _runtime_util import Cluster, embedded_config, unique

S, I64 = serdes.STRING, serdes.INT64
KEY = "windowstore.changelog.additional.retention.ms"
DAY = 86_400_000


def topology(source: str, other: str):
    b = StreamsBuilder()
    grouped = b.stream(source, key_serde=S, value_serde=S).group_by_key()
    (grouped.windowed_by(TimeWindows.of_size_and_grace(1_000, 500)).count(store="tumbling")
        .suppress(Suppressed.until_window_closes(BufferConfig.unbounded()).with_name("final")))
    grouped.windowed_by(SessionWindows.of_inactivity_gap_and_grace(2_000, 0)).count(store="sessions")
    grouped.windowed_by(TimeWindows.of_size_with_no_grace(1_000)).count(
        store=Materialized.as_("own-retention").with_logging_enabled({"retention.ms": "123456"}))
    grouped.count(store="counts")
    left = b.stream(other, key_serde=S, value_serde=S)
    left.join(grouped.count(store="joined-counts").to_stream(), lambda a, c: f"{a}{c}",
              JoinWindows.of_time_difference_with_no_grace(3_000), other_value_serde=I64)
    return b.build()


def changelog_configs(plan) -> dict:
    return {name: spec.config for name, spec in plan.specs.items() if name.endswith("-changelog")}


def retention_of(configs: dict, store: str):
    return configs[f"app-{store}-changelog"].get("retention.ms")


@pytest.mark.parametrize("extra", [None, 0, 5_000])
def test_the_plan_adds_it_to_every_windowed_changelog(extra):
    t = topology("in", "other")
    configs = changelog_configs(plan_internal_topics(t, t.build(), "app", {"in": 1, "other": 1},
                                                     additional_retention_ms=extra))
    added = DAY if extra is None else extra
    assert retention_of(configs, "tumbling") == str(1_500 + added)  # size + grace
    assert retention_of(configs, "sessions") == str(2_000 + added)  # gap + grace
    assert retention_of(configs, "own-retention") == "123456"  # the store's logging config wins
    assert retention_of(configs, "counts") is None  # a key-value store's changelog is compacted only
    assert configs["app-final-store-changelog"] == {"cleanup.policy": "compact"}  # the suppress buffer's
    joins = [c for name, c in configs.items() if "JOIN" in name]
    assert len(joins) == 2 and all(c["retention.ms"] == str(2 * 3_000 + added) for c in joins)


def test_a_stores_own_additional_retention_wins():
    builder = Stores.window_store_builder(Stores.persistent_window_store("w", 1_000, 100, False), S, I64)
    builder.with_additional_changelog_retention(7)
    assert builder.changelog_topic_config(additional_retention_ms=5_000)["retention.ms"] == "1007"


@pytest.mark.parametrize("bad", [-1, "soon", 1.5])
def test_a_bad_value_is_refused(bad):
    with pytest.raises(ConfigError, match=KEY):
        StreamsConfig.parse({"application.id": "a", "bootstrap.servers": "local:///x", KEY: bad})


def test_the_app_creates_the_changelog_with_it(tmp_path):
    cluster = Cluster(embedded_config(tmp_path))
    source = unique("retention-in")
    cluster.create_topics(1, source)
    b = StreamsBuilder()
    b.stream(source, key_serde=S, value_serde=S).group_by_key().windowed_by(
        TimeWindows.of_size_and_grace(1_000, 500)).count(store="tumbling")
    app_id = unique("retention")
    app = App(b.build(), {**cluster.config, "application.id": app_id, "state.dir": str(tmp_path / "state"),
                          KEY: 5_000})
    app.start()
    try:
        assert app.wait_for_state(AppState.RUNNING, timeout=60)
        topic = f"{app_id}-tumbling-changelog"
        [future] = cluster.admin.describe_configs([ConfigResource("topic", topic)]).values()
        entries = future.result(30)
        assert entries["retention.ms"].value == str(1_500 + 5_000)
        assert entries["cleanup.policy"].value == "compact,delete"
    finally:
        app.close()
