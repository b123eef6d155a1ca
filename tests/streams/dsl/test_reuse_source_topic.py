"""reuse.ktable.source.topics in the topology and the state manager: which stores take their
source topic as changelog, where a restore stops. (The restore itself
runs on both backends in tests/streams/runtime/test_source_topic_changelog.py.)"""

from __future__ import annotations

import pytest
from confluent_kafka import TopicPartition

from state.directory import StateDirectory
from state.errors import StateError
from state.manager import ProcessorStateManager, TaskType, close_state_manager, register_state_stores
from state.stores import Stores
from state.task_id import TaskId
from streams import Materialized, StreamsBuilder, Topology, serdes
from streams.errors import TopologyError
from streams.topology import source_changelogs

S = serdes.STRING
ALL = {"topology.optimization": "all"}


def _builder(store: str | Materialized = "regions") -> StreamsBuilder:
    b = StreamsBuilder()
    b.table("users", key_serde=S, value_serde=S, store=store).to_stream().to("out", key_serde=S, value_serde=S)
    b.stream("clicks", key_serde=S, value_serde=S).to_table(store="latest-click").to_stream().to("out2")
    return b


def test_build_with_the_optimization_makes_the_source_topic_the_changelog_of_builder_table_stores_only():
    b = _builder()
    plain = b.build()
    assert plain.source_changelog_topics == {} and plain.applied_optimizations == frozenset()
    assert plain.store_builder("regions").logging_enabled
    optimized = b.build(ALL)
    # to_table's store keeps its changelog topic (Kafka reuses builder.table topics only)
    assert optimized.source_changelog_topics == {"regions": "users"}
    assert optimized.applied_optimizations == {"reuse.ktable.source.topics", "merge.repartition.topics",
                                              "single.store.self.join"}
    assert not optimized.store_builder("regions").logging_enabled
    assert optimized.store_builder("latest-click").logging_enabled
    # the descriptions are Kafka's, which show no changelog topics either way
    assert str(optimized.describe()) == str(plain.describe())
    [sub] = [s for s in optimized.build() if "regions" in s.store_names]
    assert source_changelogs(optimized, sub) == {"regions": "users"}
    # built again without it: the store logs again, with the log config it was given
    assert _builder().build({"topology.optimization": "merge.repartition.topics"}).source_changelog_topics == {}
    again = b.build()
    assert again.source_changelog_topics == {} and again.store_builder("regions").logging_enabled


def test_a_log_config_asked_for_comes_back_when_built_without_the_optimization():
    mat = Materialized.as_("regions").with_logging_enabled({"segment.bytes": "1048576"})
    b = _builder(mat)
    assert not b.build(ALL).store_builder("regions").logging_enabled
    builder = b.build().store_builder("regions")
    assert builder.logging_enabled and builder.log_config == {"segment.bytes": "1048576"}


def test_connect_source_store_and_topic_refuses_what_cannot_be_a_source_changelog():
    t = Topology()
    t.add_source("src", "users")
    t.add_processor("p", lambda: None, "src")
    t.add_state_store(Stores.key_value_store_builder(Stores.in_memory_key_value_store("logged"), S, S), "p")
    t.add_state_store(Stores.key_value_store_builder(Stores.in_memory_key_value_store("quiet"), S, S)
                      .with_logging_disabled(), "p")
    t.add_internal_topic("rep")
    with pytest.raises(TopologyError, match="unknown state store 'nope'"):
        t.connect_source_store_and_topic("nope", "users")
    with pytest.raises(TopologyError, match="'logged' must have logging disabled"):
        t.connect_source_store_and_topic("logged", "users")
    with pytest.raises(TopologyError, match="'other' is not a source topic"):
        t.connect_source_store_and_topic("quiet", "other")
    with pytest.raises(TopologyError, match="'rep' is not a source topic"):
        t.connect_source_store_and_topic("quiet", "rep")
    t.connect_source_store_and_topic("quiet", "users")
    assert t.source_changelog_topics == {"quiet": "users"}


def _manager(sd, task_type):
    return ProcessorStateManager(TaskId(0, 1), task_type, False, sd, changelog_topics={"s": "app-s-changelog"},
                                 source_changelogs={"t": "users"})


def _stores():
    table = Stores.timestamped_key_value_store_builder(Stores.persistent_key_value_store("t"), S, S)
    logged = Stores.key_value_store_builder(Stores.persistent_key_value_store("s"), S, S)
    return [table.with_logging_disabled().build(), logged.build()]


def test_the_manager_restores_a_source_changelog_up_to_its_limit(tmp_path):
    sd = StateDirectory(tmp_path, "app")
    source, logged = TopicPartition("users", 1), TopicPartition("app-s-changelog", 1)
    try:
        standby = _manager(sd, TaskType.STANDBY)
        register_state_stores(standby, _stores())
        assert set(standby.changelog_partitions()) == {source, logged}
        assert standby.source_changelog_partitions() == [source]
        assert standby.restore_limit(source) == 0  # a standby follows it up to the commit too
        close_state_manager(standby, dirty=False)

        active = _manager(sd, TaskType.ACTIVE)
        register_state_stores(active, _stores())
        assert set(active.changelog_partitions()) == {source, logged}
        assert active.restore_limit(logged) is None
        assert active.restore_limit(source) == 0  # no limit known: nothing past a commit is restored
        active.set_restore_limits({source: 7})
        assert active.restore_limit(source) == 7
        with pytest.raises(StateError, match="not a changelog"):
            active.set_restore_limits({TopicPartition("other", 1): 3})
        # the source topic's raw values are stamped on restore (the store keeps timestamped ones)
        assert active.needs_record_timestamps(source)
        # a value that begins with its own record timestamp is a user's value here, not Eddy's old
        # prefixed changelog format (which a logged store's restore refuses)
        own_stamp = (2_000).to_bytes(8, "big") + b"rest"
        active.restore(source, [(b"\x00\x00\x00\x01u", b"\x00\x00\x00\x02r1"), (b"k2", own_stamp)], 4,
                       [1_000, 2_000])
        assert active.store_offset(source) == 4
        raw = active.get_store("t").wrapped
        while getattr(raw, "wrapped", None) is not None:
            raw = raw.wrapped
        assert raw.get(b"k2") == (2_000).to_bytes(8, "big") + own_stamp
        # at a checkpoint the source changelog's offset is what the task processed
        active.source_offsets = lambda: {source: 9, TopicPartition("clicks", 1): 5}
        assert active.checkpoint(force=True)
        assert active.store_offset(source) == 9
        close_state_manager(active, dirty=False)
    finally:
        sd.close()


def test_a_store_that_logs_cannot_take_its_source_topic_as_changelog(tmp_path):
    sd = StateDirectory(tmp_path, "app")
    try:
        manager = ProcessorStateManager(TaskId(0, 1), TaskType.ACTIVE, False, sd, source_changelogs={"t": "users"})
        table = Stores.timestamped_key_value_store_builder(Stores.persistent_key_value_store("t"), S, S)
        with pytest.raises(StateError, match="'t' logs its changes, but its changelog is its source topic 'users'"):
            register_state_stores(manager, [table.build()])
    finally:
        sd.close()
