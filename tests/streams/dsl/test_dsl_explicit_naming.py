"""ensure.explicit.internal.resource.naming (KIP-1111, Kafka 4.1): the internal topics and stores
whose names the DSL generated, listed as Kafka's InternalTopologyBuilder.checkUnprovidedNames
lists them (changelog topics, then stores, then repartition topics, each in the order the
operations made them), a TopologyError from build() when the StreamsBuilder's config asks for
explicit names, else a warning. Which names count follows Kafka's call sites: a Materialized
without a name (aggregations, builder.table, global_table without a changelog, to_table, table
joins and foreign-key joins), a repartition topic neither its grouping nor its store names, a
stream-stream join's stores, a suppression's changelog; a KTable filter's unnamed Materialized
does not count, nor a grouped table's repartition topic. The conformance run compares these
lists with Kafka Streams' for every scenario."""

from __future__ import annotations

import logging

import pytest

from streams import App, JoinWindows, Materialized, StreamsBuilder, Suppressed, BufferConfig, TimeWindows, serdes
from streams.errors import ConfigError, TopologyError
from streams.testing import TopologyTestDriver

S, I64 = serdes.STRING, serdes.INT64
ENSURE = {"ensure.explicit.internal.resource.naming": True}


def word_count(builder: StreamsBuilder, *, store=None, name=None) -> StreamsBuilder:
    (builder.stream("lines", key_serde=S, value_serde=S)
        .flat_map_values(str.split)
        .group_by(lambda k, w: w, key_serde=S, value_serde=S, name=name)
        .count(store=store)
        .to_stream().to("counts", value_serde=I64))
    return builder


def test_an_unnamed_count_after_a_key_change_is_refused_with_kafkas_list():
    with pytest.raises(TopologyError) as err:
        word_count(StreamsBuilder(ENSURE)).build()
    assert str(err.value) == (
        "Following changelog topic(s) has not been named: KSTREAM-AGGREGATE-STATE-STORE-0000000003-changelog\n"
        "Following state store(s) has not been named: KSTREAM-AGGREGATE-STATE-STORE-0000000003\n"
        "Following repartition topic(s) has not been named: KSTREAM-AGGREGATE-STATE-STORE-0000000003-repartition\n")


def test_a_named_store_names_its_repartition_topic_too():
    """Kafka counts a repartition topic as named when its aggregation's store is (queryable)."""
    word_count(StreamsBuilder(ENSURE), store="counts").build()
    word_count(StreamsBuilder(ENSURE), store=Materialized.as_("counts"), name="words").build()


def test_a_named_grouping_alone_leaves_the_store_unnamed():
    with pytest.raises(TopologyError) as err:
        word_count(StreamsBuilder(ENSURE), name="words").build()
    assert "repartition topic" not in str(err.value)
    assert "state store(s) has not been named: KSTREAM-AGGREGATE-STATE-STORE-0000000003" in str(err.value)


def test_every_kind_of_generated_name_in_kafkas_order():
    """Indexes: users' store 0, source 1, table source 2; regions' store 3, source 4, processor 5;
    the filter's store name 6 (used up, not counted), filter 7; clicks 8, views 9; the join's
    windowed nodes 10 and 11, its sides 12 and 13, merge 14, sink 15; the windowed count 16; the
    suppression 17 and its store 18."""
    b = StreamsBuilder(ENSURE)
    users = b.table("users", key_serde=S, value_serde=S)  # store and changelog
    b.global_table("regions", key_serde=S, value_serde=S)  # a store, never a changelog
    users.filter(lambda k, v: True, store=Materialized.with_serdes(S, S))  # not counted (Kafka)
    clicks = b.stream("clicks", key_serde=S, value_serde=S)
    clicks.join(b.stream("views", key_serde=S, value_serde=S), lambda c, v: c,
                JoinWindows.of_time_difference_with_no_grace(10)).to("joined", value_serde=S)
    (clicks.group_by_key().windowed_by(TimeWindows.of_size_with_no_grace(10)).count(store="windowed")
        .suppress(Suppressed.until_window_closes(BufferConfig.unbounded())))  # its changelog only
    users.group_by(lambda k, v: (v, k), key_serde=S, value_serde=S).count(store="per-group")  # not its topic
    with pytest.raises(TopologyError) as err:
        b.build()
    assert str(err.value) == (
        "Following changelog topic(s) has not been named: users-STATE-STORE-0000000000-changelog, "
        "KSTREAM-JOINTHIS-0000000012-store-changelog, KSTREAM-JOINOTHER-0000000013-store-changelog, "
        "KTABLE-SUPPRESS-STATE-STORE-0000000018-changelog\n"
        "Following state store(s) has not been named: users-STATE-STORE-0000000000, "
        "regions-STATE-STORE-0000000003, KSTREAM-JOINTHIS-0000000012-store, KSTREAM-JOINOTHER-0000000013-store\n")


def test_without_the_setting_the_list_is_a_warning(caplog):
    with caplog.at_level(logging.WARNING, logger="streams.dsl.kstream"):
        topology = word_count(StreamsBuilder()).build()
    assert "Explicit naming for internal resources is currently disabled" in caplog.text
    assert "KSTREAM-AGGREGATE-STATE-STORE-0000000003-repartition" in caplog.text
    assert topology.unnamed_internal_resources is not None
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="streams.dsl.kstream"):
        assert word_count(StreamsBuilder(), store="counts").build().unnamed_internal_resources is None
    assert "Explicit naming" not in caplog.text


def test_the_apps_setting_is_accepted_and_says_it_cannot_check_a_built_topology(caplog, tmp_path):
    """As Kafka's: only the builder's TopologyConfig reads it."""
    config = {"application.id": "naming", "ensure.explicit.internal.resource.naming": "true"}
    with caplog.at_level(logging.WARNING, logger="streams.topology"):
        with TopologyTestDriver(word_count(StreamsBuilder()).build(), config) as driver:
            driver.create_input_topic("lines", S, S).pipe_input("k", "a a")
            assert driver.create_output_topic("counts", S, I64).read_key_values_to_list()[-1] == ("a", 2)
    assert "does not check a topology already built" in caplog.text
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="streams.topology"):
        TopologyTestDriver(word_count(StreamsBuilder(), store="counts").build(), config).close()
    assert "does not check" not in caplog.text


@pytest.mark.parametrize("bad", ["yes", 1, "maybe"])
def test_a_bad_value_is_a_config_error(bad, tmp_path):
    key = "ensure.explicit.internal.resource.naming"
    with pytest.raises(ConfigError, match=f"config '{key}' must be true or false"):
        StreamsBuilder({key: bad})
    with pytest.raises(ConfigError, match=f"config '{key}' must be true or false"):
        App(word_count(StreamsBuilder(), store="c").build(),
            {"application.id": "n", "bootstrap.servers": f"local://{tmp_path}/c", "state.dir": str(tmp_path), key: bad})
