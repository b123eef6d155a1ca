"""Which stores the DSL makes (Kafka's DslStoreSuppliers, KIP-954): `StreamsBuilder(config)`'s
default.dsl.store or dsl.store.suppliers.class, the app's dsl.store.suppliers.class,
Materialized.with_store_type, in Kafka's order of precedence (streams/dsl/store_suppliers.py),
on the TopologyTestDriver. A store's type is read from the store itself (`persistent`); the
results must not change with it."""

from __future__ import annotations

import logging

import pytest

from state.stores import Stores
from streams import (JoinWindows, Materialized, SessionWindows, SlidingWindows, StreamsBuilder, TimeWindows,
                     serdes)
from streams.dsl.store_suppliers import (BuiltInDslStoreSuppliers, DslStoreSuppliers, InMemoryDslStoreSuppliers,
                                         RocksDBDslStoreSuppliers)
from streams.dsl.windows import EmitStrategy
from streams.errors import ConfigError, TopologyError
from streams.testing import TopologyTestDriver

S, I64 = serdes.STRING, serdes.INT64
KAFKA_IN_MEMORY = "org.apache.kafka.streams.state.BuiltInDslStoreSuppliers$InMemoryDslStoreSuppliers"
JOIN_STORES = ("KSTREAM-JOINTHIS-0000000011-store", "KSTREAM-OUTEROTHER-0000000012-store",
               "KSTREAM-OUTERSHARED-0000000011-store")
SUBSCRIPTION = "KTABLE-FK-JOIN-SUBSCRIPTION-STATE-STORE-0000000021"
DSL_STORES = ("counts", "windowed", "sessions", "users", *JOIN_STORES, "groups", "joined")


def topology(builder_config=None, counts_store="counts"):
    """Every kind of DSL store: a count, a windowed and a session count, a table source, a
    stream-stream left join (two window stores and the shared outer store), a foreign-key join
    (its subscription store and its result)."""
    b = StreamsBuilder(builder_config)
    clicks = b.stream("clicks", key_serde=S, value_serde=S)
    grouped = clicks.group_by_key()
    grouped.count(store=counts_store).to_stream().to("counts-out", value_serde=I64)
    grouped.windowed_by(TimeWindows.of_size_with_no_grace(1000)).count(store="windowed")
    grouped.windowed_by(SessionWindows.of_inactivity_gap_with_no_grace(1000)).count(store="sessions")
    users = b.table("users", key_serde=S, value_serde=S, store="users")
    views = b.stream("views", key_serde=S, value_serde=S)
    clicks.left_join(views, lambda c, v: f"{c}+{v}", JoinWindows.of_time_difference_with_no_grace(100)).to(
        "joined-out", value_serde=S)
    groups = b.table("groups", key_serde=S, value_serde=S, store="groups")
    (users.join(groups, lambda user, group: f"{user}@{group}", Materialized.as_("joined").with_value_serde(S),
                foreign_key_extractor=lambda group_id: group_id)
        .to_stream().to("users-out", value_serde=S))
    return b.build()


def run(driver):
    """The same records through every store; what came out."""
    driver.create_input_topic("groups", S, S).pipe_input("g1", "admins", timestamp=1)
    driver.create_input_topic("users", S, S).pipe_input("ann", "g1", timestamp=2)
    clicks = driver.create_input_topic("clicks", S, S)
    clicks.pipe_input("ann", "c1", timestamp=10)
    driver.create_input_topic("views", S, S).pipe_input("ann", "v1", timestamp=20)
    clicks.pipe_input("ann", "c2", timestamp=30)
    return (driver.create_output_topic("counts-out", S, I64).read_key_values_to_list(),
            driver.create_output_topic("joined-out", S, S).read_key_values_to_list(),
            driver.create_output_topic("users-out", S, S).read_key_values_to_list())


# (a left join's unjoined click would come out only once its window closed: c1 found v1 first)
EXPECTED = ([("ann", 1), ("ann", 2)], [("ann", "c1+v1"), ("ann", "c2+v1")], [("ann", "g1@admins")])


def persistence(driver, names=DSL_STORES + (SUBSCRIPTION,)) -> dict:
    return {name: driver.get_state_store(name).persistent for name in names}


def config(**extra):
    return {"application.id": "dsl-stores", **extra}


def test_by_default_every_dsl_store_is_rocksdb():
    with TopologyTestDriver(topology(), config()) as driver:
        assert run(driver) == EXPECTED
        assert set(persistence(driver).values()) == {True}


def test_the_builders_default_dsl_store_makes_its_stores_in_memory_but_not_the_subscription_store():
    with TopologyTestDriver(topology({"default.dsl.store": "in_memory"}), config()) as driver:
        assert run(driver) == EXPECTED
        # Kafka's SubscriptionStoreFactory takes only the app's dsl.store.suppliers.class
        assert persistence(driver) == {**dict.fromkeys(DSL_STORES, False), SUBSCRIPTION: True}


@pytest.mark.parametrize("suppliers", [KAFKA_IN_MEMORY, InMemoryDslStoreSuppliers,
                                       "streams.dsl.store_suppliers.InMemoryDslStoreSuppliers"])
def test_the_apps_dsl_store_suppliers_class_makes_every_dsl_store_in_memory(suppliers):
    with TopologyTestDriver(topology(), config(**{"dsl.store.suppliers.class": suppliers})) as driver:
        assert run(driver) == EXPECTED
        assert set(persistence(driver).values()) == {False}


def test_the_apps_own_default_dsl_store_does_not_change_the_stores_and_says_so(caplog):
    """As in Kafka Streams 4.1: only StoreFactory.configure reads the app's config, and it reads
    dsl.store.suppliers.class alone."""
    with caplog.at_level(logging.WARNING, logger="streams.topology"):
        with TopologyTestDriver(topology(), config(**{"default.dsl.store": "in_memory"})) as driver:
            assert run(driver) == EXPECTED
            assert set(persistence(driver).values()) == {True}
    warnings = [r for r in caplog.records if "default.dsl.store" in r.getMessage()]
    assert len(warnings) == 1 and "StreamsBuilder(config)" in warnings[0].getMessage()


def test_the_builders_dsl_store_suppliers_class_wins_over_its_default_dsl_store():
    builder_config = {"default.dsl.store": "in_memory", "dsl.store.suppliers.class": RocksDBDslStoreSuppliers}
    with TopologyTestDriver(topology(builder_config), config()) as driver:
        assert set(persistence(driver).values()) == {True}


def test_the_builders_choice_wins_over_the_apps():
    app = config(**{"dsl.store.suppliers.class": KAFKA_IN_MEMORY})
    with TopologyTestDriver(topology({"default.dsl.store": "rocksDB"}), app) as driver:
        assert run(driver) == EXPECTED
        assert persistence(driver) == {**dict.fromkeys(DSL_STORES, True), SUBSCRIPTION: False}


@pytest.mark.parametrize("store", [
    Materialized.as_("counts").with_store_type("rocksDB"),
    Materialized.as_("counts").with_store_type(RocksDBDslStoreSuppliers),
    Materialized.as_(Stores.persistent_key_value_store("counts")),
])
def test_a_materialized_store_type_or_supplier_wins_over_every_config(store):
    app = config(**{"dsl.store.suppliers.class": KAFKA_IN_MEMORY})
    with TopologyTestDriver(topology({"default.dsl.store": "in_memory"}, counts_store=store), app) as driver:
        assert run(driver) == EXPECTED
        assert driver.get_state_store("counts").persistent
        assert not driver.get_state_store("windowed").persistent


def test_with_in_memory_store_wins_over_the_apps_rocksdb():
    b = StreamsBuilder()
    b.stream("in", key_serde=S, value_serde=S).group_by_key().count(
        store=Materialized.as_("counts").with_in_memory_store()).to_stream().to("out", value_serde=I64)
    with TopologyTestDriver(b.build(), config(**{"dsl.store.suppliers.class": RocksDBDslStoreSuppliers})) as driver:
        driver.create_input_topic("in", S, S).pipe_input("k", "v")
        assert driver.create_output_topic("out", S, I64).read_key_values_to_list() == [("k", 1)]
        assert not driver.get_state_store("counts").persistent


class Recording(InMemoryDslStoreSuppliers):
    """In-memory stores, noting what it was asked for and the config it was configured with."""

    asked: list = []
    configured: list = []

    def configure(self, configs):
        Recording.configured.append(configs.get("application.id"))

    def key_value_store(self, params):
        Recording.asked.append(("key_value", params))
        return super().key_value_store(params)

    def window_store(self, params):
        Recording.asked.append(("window", params))
        return super().window_store(params)

    def session_store(self, params):
        Recording.asked.append(("session", params))
        return super().session_store(params)


def test_a_users_suppliers_class_gets_kafkas_parameters_for_each_store():
    Recording.asked, Recording.configured = [], []
    b = StreamsBuilder()
    grouped = b.stream("in", key_serde=S, value_serde=S).group_by_key()
    grouped.windowed_by(TimeWindows.of_size_and_grace(1000, 200)).emit_strategy(
        EmitStrategy.on_window_close()).count(store="closed")
    grouped.windowed_by(SlidingWindows.of_time_difference_and_grace(100, 50)).count(store="sliding")
    grouped.windowed_by(SessionWindows.of_inactivity_gap_and_grace(300, 20)).count(store="sessions")
    grouped.count(store="counts")
    b.stream("in", key_serde=S, value_serde=S).join(
        b.stream("other", key_serde=S, value_serde=S), lambda a, o: a, JoinWindows.of_time_difference_and_grace(40, 5),
        store="j").to("out", value_serde=S)
    with TopologyTestDriver(b.build(), config(**{"dsl.store.suppliers.class": Recording})) as driver:
        driver.create_input_topic("in", S, S).pipe_input("k", "v", timestamp=5)
        assert not driver.get_state_store("sliding").persistent
    by_name = {params.name: (kind, params) for kind, params in Recording.asked}
    kind, closed = by_name["closed"]
    assert kind == "window" and (closed.retention_period_ms, closed.window_size_ms) == (1200, 1000)
    assert closed.emit_strategy.emits_on_close and not closed.is_sliding_window and not closed.retain_duplicates
    kind, sliding = by_name["sliding"]
    assert kind == "window" and sliding.is_sliding_window and (sliding.retention_period_ms, sliding.window_size_ms) == (
        250, 100)
    kind, sessions = by_name["sessions"]
    assert kind == "session" and sessions.retention_period_ms == 320
    assert by_name["counts"] == ("key_value", by_name["counts"][1]) and by_name["counts"][1].is_timestamped
    kind, join_side = by_name["j-this-join-store"]
    assert kind == "window" and join_side.retain_duplicates and (join_side.window_size_ms,
                                                                 join_side.retention_period_ms) == (80, 85)
    assert set(Recording.configured) == {"dsl-stores"}


# ---- bad input


@pytest.mark.parametrize("bad", [{"default.dsl.store": "memory"}, {"default.dsl.store": "ROCKSDB"},
                                 {"dsl.store.suppliers.class": "no.such.module.Suppliers"},
                                 {"dsl.store.suppliers.class": "state.stores.Stores"},
                                 {"dsl.store.suppliers.class": BuiltInDslStoreSuppliers.IN_MEMORY}])
def test_a_bad_value_is_a_config_error_naming_the_key(bad):
    (key, value), = bad.items()
    with pytest.raises(ConfigError, match=f"config '{key}'"):
        StreamsBuilder(bad)
    with pytest.raises(ConfigError, match=f"config '{key}'"):
        TopologyTestDriver(topology(), config(**bad))


def test_a_bad_store_type_is_a_topology_error():
    with pytest.raises(TopologyError, match="store type must be 'rocksDB' or 'in_memory', got 'memory'"):
        Materialized.as_("x").with_store_type("memory")
    with pytest.raises(TopologyError, match="store type must be"):
        Materialized.as_("x").with_store_type(42)


class WrongKind(DslStoreSuppliers):
    def key_value_store(self, params):
        return Stores.in_memory_session_store(params.name, 1000)


class Failing(DslStoreSuppliers):
    def configure(self, configs):
        raise RuntimeError("no config for me")


def test_suppliers_that_give_the_wrong_store_or_fail_are_named():
    with pytest.raises(TopologyError, match="WrongKind.key_value_store must return a key-value store supplier "
                                            "named 'counts'"):
        TopologyTestDriver(topology(), config(**{"dsl.store.suppliers.class": WrongKind}))
    with pytest.raises(ConfigError, match="Failing failed to instantiate or configure: RuntimeError"):
        StreamsBuilder({"dsl.store.suppliers.class": Failing})


def test_a_store_made_when_the_topology_was_built_takes_the_apps_store_type():
    """reuse.ktable.source.topics makes the table's store builder at build(config), before any
    app config: the app's store type still reaches it, and the builder keeps its logging off."""
    b = StreamsBuilder()
    b.table("users", key_serde=S, value_serde=S, store="users").to_stream().to("out", value_serde=S)
    topology_ = b.build({"topology.optimization": "reuse.ktable.source.topics"})
    with TopologyTestDriver(topology_, config(**{"dsl.store.suppliers.class": KAFKA_IN_MEMORY})) as driver:
        driver.create_input_topic("users", S, S).pipe_input("ann", "g1")
        assert driver.create_output_topic("out", S, S).read_key_values_to_list() == [("ann", "g1")]
        store = driver.get_state_store("users")
        assert not store.persistent and store.get("ann").value == "g1"
    assert not topology_.store_builder("users").logging_enabled


def test_the_same_config_given_to_builder_and_app_says_nothing(caplog):
    """As a Kafka Streams app passes its props to TopologyConfig and KafkaStreams alike: every
    store but the subscription store is in memory, and no warning (the subscription store takes
    only dsl.store.suppliers.class, in Kafka too)."""
    same = {"default.dsl.store": "in_memory"}
    with caplog.at_level(logging.WARNING, logger="streams.topology"):
        with TopologyTestDriver(topology(same), config(**same)) as driver:
            assert run(driver) == EXPECTED
            assert persistence(driver) == {**dict.fromkeys(DSL_STORES, False), SUBSCRIPTION: True}
    assert "default.dsl.store" not in caplog.text
