"""The TopologyTestDriver validates its config exactly as the App does (StreamsConfig.parse),
and the state-store cache size comes from the same keys and defaults."""

import pytest

from eddy.errors import EddyError
from streams import App, StreamsBuilder, serdes
from streams.errors import ConfigError
from streams.optimizations import topology_optimizations
from streams.runtime.config import StreamsConfig
from streams.testing import TopologyTestDriver

S = serdes.STRING
I64 = serdes.INT64
MIB = 1024 * 1024


def per_key_count():
    """Counts the words of each record per key; no repartition, one cached store."""
    b = StreamsBuilder()
    (b.stream("in", key_serde=S, value_serde=S)
        .flat_map_values(str.split)
        .group_by_key()
        .count(store="per-key")
        .to_stream()
        .to("out", value_serde=I64))
    return b.build()


def app_error(config: dict, tmp_path) -> ConfigError:
    with pytest.raises(ConfigError) as info:
        App(per_key_count(), {"bootstrap.servers": f"local://{tmp_path}/cluster", "state.dir": str(tmp_path),
                              "application.id": "cfg", **config})
    return info.value


def driver_error(config: dict) -> ConfigError:
    with pytest.raises(ConfigError) as info:
        TopologyTestDriver(per_key_count(), {"application.id": "cfg", **config})
    return info.value


@pytest.mark.parametrize("bad,names", [
    ({"processing.guarantee": "maybe"}, "processing.guarantee"),
    ({"processing.guarantee": "exactly_once"}, "exactly_once_v2"),   # v1 is refused, not treated as EOS
    ({"commit.interval.ms": -5}, "commit.interval.ms"),
    ({"statestore.cache.max.bytes": "x"}, "statestore.cache.max.bytes"),
    ({"statestore.cache.max.bytes": -1}, "statestore.cache.max.bytes"),
    ({"cache.max.bytes.buffering": "lots"}, "cache.max.bytes.buffering"),
    ({"application.id": "has space"}, "application.id"),
    ({"state.dir": 42}, "state.dir"),
    ({"topology.optimization": "al"}, "unknown optimization 'al'"),
    ({"topology.optimization": "all,merge.repartition.topics"}, "'all' cannot be combined"),
    ({"topology.optimization": "none, reuse.ktable.source.topics"}, "'none' cannot be combined"),
    ({"topology.optimization": True}, "topology.optimization"),
    ({"rocksdb.config.setter": 42}, "'rocksdb.config.setter' must be a class"),
    ({"rocksdb.config.setter": "no_such_module_for_eddy.Setter"}, "cannot import module 'no_such_module_for_eddy'"),
    ({"rocksdb.config.setter": "json.dumps"}, "names a function, not a class"),
    ({"rocksdb.config.setter": dict}, "class builtins.dict has no set_config"),
    ({"windowstore.changelog.additional.retention.ms": -1}, "windowstore.changelog.additional.retention.ms"),
    ({"deserialization.exception.handler": "ignore"}, "config 'deserialization.exception.handler': unknown"),
    ({"default.deserialization.exception.handler": "ignore"}, "config 'default.deserialization.exception.handler'"),
    ({"production.exception.handler": 42}, "config 'production.exception.handler' must be"),
    ({"default.production.exception.handler": "retry"}, "config 'default.production.exception.handler' must"),
    ({"processing.exception.handler": "skip"}, "config 'processing.exception.handler': unknown handler"),
])
def test_driver_rejects_bad_config_like_the_app(bad, names, tmp_path):
    from_driver = driver_error(bad)
    from_app = app_error(bad, tmp_path)
    assert isinstance(from_driver, EddyError)  # typed, not a bare ValueError
    assert type(from_driver) is type(from_app)
    assert str(from_driver) == str(from_app)
    assert names in str(from_driver)


def test_driver_config_must_be_a_mapping():
    with pytest.raises(ConfigError, match="TopologyTestDriver config must be a dict, got list"):
        TopologyTestDriver(per_key_count(), [("application.id", "x")])


def test_driver_needs_no_bootstrap_servers_but_checks_a_given_one():
    with TopologyTestDriver(per_key_count()) as driver:
        assert driver.streams_config.bootstrap_servers == ""
        assert driver.application_id == "topology-test-driver"
    with pytest.raises(ConfigError, match="bootstrap.servers"):
        TopologyTestDriver(per_key_count(), {"bootstrap.servers": "  "})


def test_app_still_requires_bootstrap_servers(tmp_path):
    with pytest.raises(ConfigError, match="'bootstrap.servers' is required"):
        App(per_key_count(), {"application.id": "cfg", "state.dir": str(tmp_path)})
    with pytest.raises(ConfigError, match="'bootstrap.servers' is required"):
        StreamsConfig.parse({"application.id": "cfg"})


def test_exactly_once_v2_is_eos_in_the_driver():
    with TopologyTestDriver(per_key_count(), {"processing.guarantee": "exactly_once_v2"}) as driver:
        assert driver.streams_config.eos_enabled
        assert all(m.eos_enabled for m in driver._managers)
    with TopologyTestDriver(per_key_count(), {"processing.guarantee": "at_least_once"}) as driver:
        assert not any(m.eos_enabled for m in driver._managers)


# ---- statestore.cache.max.bytes: default and the deprecated cache.max.bytes.buffering ------------

@pytest.mark.parametrize("config,expected", [
    ({}, 10 * MIB),                                                              # Kafka's default
    ({"cache.max.bytes.buffering": 12345}, 12345),                               # deprecated key
    ({"cache.max.bytes.buffering": "777"}, 777),                                 # as a string
    ({"statestore.cache.max.bytes": 42, "cache.max.bytes.buffering": 12345}, 42),  # the new key wins
    ({"statestore.cache.max.bytes": 0}, 0),
])
def test_cache_max_bytes_default_and_fallback(config, expected):
    parsed = StreamsConfig.parse({"application.id": "cfg", "bootstrap.servers": "local:///x", **config})
    assert parsed.cache_max_bytes == expected
    with TopologyTestDriver(per_key_count(), config) as driver:
        assert driver.streams_config.cache_max_bytes == expected
        assert driver._thread_cache.max_bytes == expected


@pytest.mark.parametrize("config,expected", [
    ({}, [("x", 3), ("y", 1)]),                                    # default cache: one update per record
    ({"cache.max.bytes.buffering": 0}, [("x", 1), ("x", 2), ("x", 3), ("y", 1)]),  # no room: every update
    ({"statestore.cache.max.bytes": 0, "cache.max.bytes.buffering": 10 * MIB},
     [("x", 1), ("x", 2), ("x", 3), ("y", 1)]),
])
def test_driver_honours_the_cache_size_keys(config, expected):
    with TopologyTestDriver(per_key_count(), config) as driver:
        inp = driver.create_input_topic("in", S, S)
        inp.pipe_input("x", "a b c", timestamp=10)
        inp.pipe_input("y", "d", timestamp=20)
        assert driver.create_output_topic("out", S, I64).read_key_values_to_list() == expected


# ---- statestore.cache.max.bytes = 0 strips the caching layers (Kafka's rewriteTopology) -----------

def table_to_stream():
    b = StreamsBuilder()
    b.table("t", key_serde=S, value_serde=S, store="t-store").to_stream().to("out", key_serde=S, value_serde=S)
    return b.build()


@pytest.mark.parametrize("cache,expected", [
    # no cache: the table source forwards every update, a delete of an absent key as (k, None)
    (0, [("a", "x", 1), ("b", None, 2), ("a", None, 3)]),
    # a cache: the caching store drops an update with neither a new nor an old value (Kafka's
    # CachingKeyValueStore writes down and forwards only when one of them is there)
    (10 * MIB, [("a", "x", 1), ("a", None, 3)]),
])
def test_a_zero_cache_means_no_caching_layer(cache, expected):
    with TopologyTestDriver(table_to_stream(), {"statestore.cache.max.bytes": cache}) as driver:
        inp = driver.create_input_topic("t", S, S)
        inp.pipe_input("a", "x", timestamp=1)
        inp.pipe_input("b", None, timestamp=2)
        inp.pipe_input("a", None, timestamp=3)
        assert [(r.key, r.value, r.timestamp) for r in
                driver.create_output_topic("out", S, S).read_records_to_list()] == expected
        layer, layers = driver.get_state_store("t-store"), []
        while layer is not None:
            layers.append(type(layer).__name__)
            layer = getattr(layer, "wrapped", None)
        assert ("CachingKeyValueStore" in layers) is (cache > 0), layers


def test_a_topology_run_without_cache_gets_its_caching_back_with_one():
    topology = table_to_stream()
    for cache, cached in ((0, False), (10 * MIB, True), (0, False)):
        with TopologyTestDriver(topology, {"statestore.cache.max.bytes": cache}) as driver:
            assert topology.store_builder("t-store").caching_enabled is cached
            driver.create_input_topic("t", S, S).pipe_input("b", None, timestamp=2)
            assert len(driver.create_output_topic("out", S, S).read_records_to_list()) == (0 if cached else 1)


def test_a_store_built_without_caching_stays_without_under_any_cache():
    from streams import Materialized

    b = StreamsBuilder()
    b.table("t", key_serde=S, value_serde=S, store=Materialized.as_("t-store").with_caching_disabled()) \
        .to_stream().to("out", key_serde=S, value_serde=S)
    topology = b.build()
    for cache in (0, 10 * MIB):
        with TopologyTestDriver(topology, {"statestore.cache.max.bytes": cache}):
            assert topology.store_builder("t-store").caching_enabled is False


def test_the_driver_emits_final_window_results_without_a_wall_clock_throttle():
    from streams import EmitStrategy, TimeWindows

    b = StreamsBuilder()
    (b.stream("in", key_serde=S, value_serde=S).group_by_key()
        .windowed_by(TimeWindows.of_size_and_grace(1000, 50)).emit_strategy(EmitStrategy.on_window_close())
        .count(store="counts").to_stream().to("out", key_serde=serdes.time_windowed(S, 1000), value_serde=I64))
    with TopologyTestDriver(b.build()) as driver:
        inp = driver.create_input_topic("in", S, S)
        inp.pipe_input("c", "v", timestamp=524)
        # stream time 1087 passes [0, 1000)'s end + grace (1050): its final result goes out now,
        # stamped with its aggregate's timestamp (Kafka's driver sets the emit interval to 0; with
        # the App's 1000 ms the first scan, at 524, would have held this one back)
        inp.pipe_input("d", "v", timestamp=1087)
        out = driver.create_output_topic("out", serdes.time_windowed(S, 1000), I64).read_records_to_list()
        assert [(r.key.key, r.key.window.start, r.value, r.timestamp) for r in out] == [("c", 0, 1, 524)]
    with TopologyTestDriver(b.build(), {"__emit.interval.ms.kstreams.windowed.aggregation__": 1000}) as driver:
        inp = driver.create_input_topic("in", S, S)
        inp.pipe_input("c", "v", timestamp=524)
        inp.pipe_input("d", "v", timestamp=1087)
        assert driver.create_output_topic("out", serdes.time_windowed(S, 1000), I64).read_records_to_list() == []


@pytest.mark.parametrize("value,expected", [
    (None, frozenset()),
    ("none", frozenset()),
    ("all", {"reuse.ktable.source.topics", "merge.repartition.topics", "single.store.self.join"}),
    ("merge.repartition.topics, reuse.ktable.source.topics", {"merge.repartition.topics",
                                                              "reuse.ktable.source.topics"}),
])
@pytest.mark.parametrize("built_with_config", [False, True])
def test_topology_optimization_is_parsed_as_kafka_does_and_what_is_not_applied_said(value, expected,
                                                                                    built_with_config, caplog):
    raw = {"application.id": "cfg"} | ({} if value is None else {"topology.optimization": value})
    parsed = StreamsConfig.parse(raw, require_bootstrap_servers=False)
    assert parsed.application_id == "cfg"
    assert topology_optimizations(raw) == expected
    b = StreamsBuilder()
    b.table("t", key_serde=S, value_serde=S).to_stream().to("out", key_serde=S, value_serde=S)
    topology = b.build(raw) if built_with_config else b.build()
    built = {"reuse.ktable.source.topics", "merge.repartition.topics", "single.store.self.join"}
    assert topology.applied_optimizations == (expected & built if built_with_config else frozenset())
    with caplog.at_level("WARNING", logger="streams.topology"):
        with TopologyTestDriver(topology, raw):
            pass
    warned = [r.getMessage() for r in caplog.records if "topology.optimization" in r.getMessage()]
    # accepted (a Kafka Streams app runs unchanged), but what the topology does not apply is said
    not_applied = expected - topology.applied_optimizations
    assert bool(warned) == bool(not_applied)
    assert all(any(name in w for w in warned) for name in not_applied)
    if not_applied & built:
        assert any("StreamsBuilder.build(config)" in w for w in warned)
    assert not any(name in w for w in warned for name in built) or not built_with_config
