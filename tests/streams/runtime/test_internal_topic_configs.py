"""The `topic.` prefix (Kafka's StreamsConfig.TOPIC_PREFIX): configs of every internal topic the
app creates, over the library's own and under a store's logging config; a windowed changelog's
retention.ms is computed unless the store's logging config sets it (Kafka's InternalTopicConfig
rule). It never reaches the clients."""

from __future__ import annotations

import pytest
from confluent_kafka.admin import ConfigResource

from streams import App, AppState, Materialized, StreamsBuilder, TimeWindows, serdes
from streams.backends import client_config
from streams.errors import ConfigError
from streams.runtime.config import StreamsConfig
from streams.runtime.internal import plan_internal_topics

from _runtime_util import Cluster, embedded_config, unique

S = serdes.STRING
DAY = 86_400_000


def topology(source: str):
    b = StreamsBuilder()
    keyed = b.stream(source, key_serde=S, value_serde=S).select_key(lambda k, v: v)
    keyed.group_by_key(key_serde=S, value_serde=S).count(store="counts")
    keyed.group_by_key(key_serde=S, value_serde=S).count(
        store=Materialized.as_("own").with_logging_enabled({"min.insync.replicas": "1", "retention.ms": "77"}))
    keyed.group_by_key(key_serde=S, value_serde=S).windowed_by(TimeWindows.of_size_with_no_grace(1_000)) \
        .count(store="windows")
    return b.build()


def test_every_internal_topic_takes_them_under_the_stores_own():
    t = topology("in")
    topic_configs = {"min.insync.replicas": "2", "retention.ms": "5", "cleanup.policy": "compact,delete"}
    specs = plan_internal_topics(t, t.build(), "app", {"in": 1}, topic_configs=topic_configs).specs
    repartitions = [s.config for name, s in specs.items() if name.endswith("-repartition")]
    assert len(repartitions) == 3 and all(c == {
        "cleanup.policy": "compact,delete", "segment.bytes": "52428800", "retention.ms": "5",
        "min.insync.replicas": "2"} for c in repartitions)
    assert specs["app-counts-changelog"].config == topic_configs
    assert specs["app-own-changelog"].config == {**topic_configs, "min.insync.replicas": "1", "retention.ms": "77"}
    # a windowed changelog's retention is the store's plus the additional, over topic.retention.ms
    assert specs["app-windows-changelog"].config == {**topic_configs, "retention.ms": str(1_000 + DAY)}


def test_parsed_and_kept_from_the_clients():
    config = {"application.id": "a", "bootstrap.servers": "local:///x", "topic.min.insync.replicas": 2,
              "topic.unclean.leader.election.enable": False, "linger.ms": 5}
    assert StreamsConfig.parse(config).internal_topic_configs == {
        "min.insync.replicas": "2", "unclean.leader.election.enable": "false"}
    assert client_config(config) == {"producer.linger.ms": 5}  # a producer setting, for the producers only


@pytest.mark.parametrize("bad", [{"topic.": "1"}, {"topic.retention.ms": [1]}, {"topic.segment.bytes": None}])
def test_a_bad_topic_config_is_named(bad):
    with pytest.raises(ConfigError, match=next(iter(bad))):
        StreamsConfig.parse({"application.id": "a", "bootstrap.servers": "local:///x", **bad})


def test_the_app_creates_its_topics_with_them(tmp_path):
    cluster = Cluster(embedded_config(tmp_path))
    source = unique("topics-in")
    cluster.create_topics(1, source)
    app_id = unique("topics")
    app = App(topology(source), {**cluster.config, "application.id": app_id, "state.dir": str(tmp_path / "state"),
                                 "topic.segment.bytes": 1_048_576, "topic.max.message.bytes": "2000000"})
    app.start()
    try:
        assert app.wait_for_state(AppState.RUNNING, timeout=60)
        names = [f"{app_id}-counts-changelog", f"{app_id}-windows-changelog",
                 next(t for t in cluster.admin.list_topics(timeout=10).topics if t.startswith(app_id)
                      and t.endswith("-repartition"))]
        futures = cluster.admin.describe_configs([ConfigResource("topic", n) for n in names])
        for resource, future in futures.items():
            entries = future.result(30)
            assert entries["segment.bytes"].value == "1048576", resource
            assert entries["max.message.bytes"].value == "2000000", resource
    finally:
        app.close()
