"""Materialized options and the store builders of windowed/session aggregations (Kafka's defaults:
retention = size + grace, sliding 2 x difference + grace, session gap + grace; changelog
cleanup.policy=compact,delete with retention.ms = retention + 1 day)."""

import datetime

import pytest

from state.stores import Stores
from streams import serdes
from streams.dsl import BuiltInDslStoreSuppliers, Materialized, SessionWindows, SlidingWindows, TimeWindows
from streams.dsl.materialized import (
    as_materialized,
    key_value_store_builder,
    session_store_builder,
    window_store_builder,
)
from streams.errors import TopologyError

DAY = 86_400_000


def test_options():
    m = (Materialized.as_("counts").with_key_serde(serdes.STRING).with_value_serde(serdes.INT64)
         .with_caching_disabled().with_logging_enabled({"segment.ms": "1000"}).with_in_memory_store()
         .with_retention(datetime.timedelta(minutes=1)))
    assert (m.store_name, m.key_serde, m.value_serde) == ("counts", serdes.STRING, serdes.INT64)
    assert not m.caching_enabled and m.logging_enabled and m.log_config == {"segment.ms": "1000"}
    assert m.store_type is BuiltInDslStoreSuppliers.IN_MEMORY and m.retention_ms == 60_000
    assert m.with_logging_disabled().logging_enabled is False
    assert as_materialized("x", "count").store_name == "x"
    with pytest.raises(TopologyError, match="negative"):
        Materialized.as_("x").with_retention(-1)
    with pytest.raises(TopologyError, match="store must be"):
        as_materialized(42, "count")
    with pytest.raises(TopologyError, match="dict"):
        Materialized().with_logging_enabled(["x"])


def test_tumbling_window_store_defaults():
    b = window_store_builder(Materialized(), "KSTREAM-AGGREGATE-STATE-STORE-0000000001",
                             TimeWindows.of_size_and_grace(100, 20), serdes.STRING, serdes.INT64)
    assert b.supplier.retention_ms == 120 and b.supplier.window_size_ms == 100 and b.supplier.persistent
    assert b.caching_enabled and b.logging_enabled  # the DSL caches by default
    assert b.changelog_topic_config() == {"cleanup.policy": "compact,delete", "retention.ms": str(120 + DAY)}
    assert b.key_serde is serdes.STRING and b.value_serde is serdes.INT64


def test_hopping_and_explicit_retention_and_in_memory():
    m = Materialized.as_("w").with_retention(1000).with_in_memory_store().with_value_serde(serdes.JSON)
    b = window_store_builder(m, "gen", TimeWindows.of_size_with_no_grace(100).advance_by(10), serdes.STRING,
                             serdes.INT64)
    assert b.name == "w" and not b.supplier.persistent and b.supplier.retention_ms == 1000
    assert b.value_serde is serdes.JSON  # Materialized's serde wins
    assert b.changelog_topic_config()["retention.ms"] == str(1000 + DAY)
    # the app's windowstore.changelog.additional.retention.ms (the topic plan passes it)
    assert b.changelog_topic_config(additional_retention_ms=5)["retention.ms"] == "1005"
    with pytest.raises(TopologyError, match=r"window size plus the grace period. Got size=\[100\], grace=\[5\], "
                                            r"retention=\[99\]"):
        window_store_builder(Materialized.as_("w").with_retention(99), "gen", TimeWindows.of_size_and_grace(100, 5))


def test_sliding_window_store():
    b = window_store_builder(Materialized.as_("s"), "gen", SlidingWindows.of_time_difference_and_grace(10, 3))
    assert b.supplier.window_size_ms == 10 and b.supplier.retention_ms == 23
    with pytest.raises(TopologyError, match="2 \\* time difference"):
        window_store_builder(Materialized.as_("s").with_retention(22), "gen",
                             SlidingWindows.of_time_difference_and_grace(10, 3))


def test_session_store():
    b = session_store_builder(Materialized.as_("sess").with_logging_disabled().with_caching_disabled(), "gen",
                              SessionWindows.of_inactivity_gap_and_grace(50, 7))
    assert b.supplier.retention_ms == 57 and not b.logging_enabled and not b.caching_enabled
    with pytest.raises(TopologyError, match="inactivity gap plus the grace period"):
        session_store_builder(Materialized.as_("sess").with_retention(56), "gen",
                              SessionWindows.of_inactivity_gap_and_grace(50, 7))
    with pytest.raises(TopologyError, match="SessionWindows"):
        session_store_builder(Materialized(), "gen", TimeWindows.of_size_with_no_grace(5))


def test_supplier_from_materialized_is_used_and_kind_checked():
    supplier = Stores.in_memory_window_store("mine", retention_ms=10_000, window_size_ms=100)
    b = window_store_builder(Materialized.as_(supplier), "gen", TimeWindows.of_size_with_no_grace(100))
    assert b.supplier is supplier
    with pytest.raises(TopologyError, match="session store supplier"):
        session_store_builder(Materialized.as_(supplier), "gen", SessionWindows.of_inactivity_gap_with_no_grace(5))
    with pytest.raises(TopologyError, match="key-value store supplier"):
        key_value_store_builder(Materialized.as_(supplier), "gen")


def test_key_value_builder(tmp_path):
    b = key_value_store_builder(Materialized.as_("kv").with_in_memory_store(), "gen", serdes.STRING, serdes.INT64,
                                timestamped=True)
    assert b.timestamped and b.name == "kv" and b.changelog_topic_config() == {"cleanup.policy": "compact"}


def test_sliding_windows_of_zero_difference_get_a_store():
    b = window_store_builder(Materialized.as_("z"), "gen", SlidingWindows.of_time_difference_and_grace(0, 4))
    assert b.supplier.window_size_ms == 0 and b.supplier.retention_ms == 4
