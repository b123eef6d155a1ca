"""default.timestamp.extractor (Kafka's StreamsConfig.DEFAULT_TIMESTAMP_EXTRACTOR_CLASS_CONFIG):
the extractor of every source without its own, one instance per task; never a repartition
topic's source (Kafka's name FailOnInvalidTimestamp) nor a global store's updates. Expected
outputs worked out by hand from the values' times."""

from __future__ import annotations

import pytest

from streams import App, AppState, StreamsBuilder, TimeWindows, serdes
from streams.errors import ConfigError
from streams.processor import (FailOnInvalidTimestamp, TimestampExtractor, WallclockTimestampExtractor,
                               default_timestamp_extractor)
from streams.testing import TopologyTestDriver

from _runtime_util import Cluster, embedded_config, unique

S, I64 = serdes.STRING, serdes.INT64
KEY = "default.timestamp.extractor"
RECORD_TS = 1_000  # every input's own timestamp: the extracted one differs


class ValueTime(TimestampExtractor):
    """The time after '@' in the value ("a@5" -> 5); records every call."""

    calls: list = []

    def extract(self, record, partition_time):
        ValueTime.calls.append((record.topic, record.value))
        return int(record.value.split("@")[1])


@pytest.fixture(autouse=True)
def no_calls():
    ValueTime.calls = []


def windowed_counts(source_extractor=None):
    b = StreamsBuilder()
    (b.stream("in", key_serde=S, value_serde=S, timestamp_extractor=source_extractor)
        .group_by_key()
        .windowed_by(TimeWindows.of_size_with_no_grace(10))
        .count(store="counts")
        .to_stream()
        .map(lambda windowed, count: (f"{windowed.key}@{windowed.window.start}", count))
        .to("out", key_serde=S, value_serde=I64))
    return b.build()


def run(topology, config, inputs, topic="in"):
    with TopologyTestDriver(topology, {"application.id": "ts", **config}) as driver:
        pipe = driver.create_input_topic(topic, S, S)
        for key, value in inputs:
            pipe.pipe_input(key, value, timestamp=RECORD_TS)
        return [(r.key, r.value, r.timestamp) for r in driver.create_output_topic("out", S, I64).read_records_to_list()]


INPUTS = [("k", "a@5"), ("k", "b@7"), ("k", "c@15"), ("k", "d@3")]
# windows of 10 ms, no grace: a@5 and b@7 in [0,10), c@15 in [10,20) moves stream time to 15,
# which closes [0,10): d@3 is late and dropped
BY_VALUE_TIME = [("k@0", 1, 5), ("k@0", 2, 7), ("k@10", 1, 15)]


@pytest.mark.parametrize("value", [ValueTime, ValueTime(), f"{__name__}.ValueTime", f"{__name__}:ValueTime"],
                         ids=["class", "instance", "dotted name", "colon name"])
def test_sources_without_their_own_take_the_configured_extractor(value):
    assert run(windowed_counts(), {KEY: value}, INPUTS) == BY_VALUE_TIME
    assert [v for _, v in ValueTime.calls] == ["a@5", "b@7", "c@15", "d@3"]


def test_unset_the_records_own_timestamps_count():
    assert run(windowed_counts(), {}, INPUTS) == [("k@1000", n, RECORD_TS) for n in (1, 2, 3, 4)]


def test_a_source_with_its_own_extractor_keeps_it():
    assert run(windowed_counts(FailOnInvalidTimestamp()), {KEY: ValueTime}, INPUTS) == \
        [("k@1000", n, RECORD_TS) for n in (1, 2, 3, 4)]
    assert ValueTime.calls == []


def test_a_repartition_topics_records_keep_the_time_extracted_upstream():
    """The key change sends the records through a repartition topic; its source does not
    extract again (the values there no longer hold a time: extracting would fail)."""
    b = StreamsBuilder()
    (b.stream("in", key_serde=S, value_serde=S)
        .map(lambda key, value: (value[0], "no time here"))
        .group_by_key(key_serde=S, value_serde=S)
        .windowed_by(TimeWindows.of_size_with_no_grace(10))
        .count()
        .to_stream()
        .map(lambda windowed, count: (f"{windowed.key}@{windowed.window.start}", count))
        .to("out", key_serde=S, value_serde=I64))
    inputs = [("x", "a@5"), ("x", "a@8"), ("x", "b@12")]
    assert run(b.build(), {KEY: ValueTime}, inputs) == [("a@0", 1, 5), ("a@0", 2, 8), ("b@10", 1, 12)]
    assert [topic for topic, _ in ValueTime.calls] == ["in"] * 3


def test_global_store_updates_keep_their_records_timestamps():
    b = StreamsBuilder()
    regions = b.global_table("regions", key_serde=S, value_serde=S, store="regions")
    (b.stream("in", key_serde=S, value_serde=S)
        .join(regions, lambda key, value: key, lambda value, region: f"{value} in {region}")
        .map_values(lambda value: len(value))
        .to("out", key_serde=S, value_serde=I64))
    with TopologyTestDriver(b.build(), {"application.id": "ts", KEY: ValueTime}) as driver:
        driver.create_input_topic("regions", S, S).pipe_input("k", "north", timestamp=RECORD_TS)
        driver.create_input_topic("in", S, S).pipe_input("k", "a@5", timestamp=RECORD_TS)
        out = driver.create_output_topic("out", S, I64).read_records_to_list()
        assert [(r.key, r.value, r.timestamp) for r in out] == [("k", len("a@5 in north"), 5)]
        assert driver.get_timestamped_key_value_store("regions").get("k").timestamp == RECORD_TS
    assert ValueTime.calls == [("in", "a@5")]  # never "north", which holds no time


def test_resolution():
    assert default_timestamp_extractor({}) is None
    assert default_timestamp_extractor({KEY: FailOnInvalidTimestamp}) is None  # the sources' own rule
    kafka_name = "org.apache.kafka.streams.processor.WallclockTimestampExtractor"
    assert type(default_timestamp_extractor({KEY: kafka_name})) is WallclockTimestampExtractor
    one = ValueTime()
    assert default_timestamp_extractor({KEY: one}) is one
    made = [default_timestamp_extractor({KEY: ValueTime}) for _ in range(2)]
    assert all(type(e) is ValueTime for e in made) and made[0] is not made[1]  # one per task


class NoDefaultConstructor(TimestampExtractor):
    def __init__(self, zone):
        self.zone = zone

    def extract(self, record, partition_time):
        return record.timestamp


@pytest.mark.parametrize("value,says", [
    (42, "must be a TimestampExtractor"),
    ("no_such_module_for_eddy.Extractor", "cannot import module 'no_such_module_for_eddy'"),
    ("json.JSONDecoder", "class json.decoder.JSONDecoder has no extract"),
    (NoDefaultConstructor, "cannot make a NoDefaultConstructor"),
])
def test_a_bad_extractor_config_is_refused_by_app_and_driver(value, says, tmp_path):
    for make in (lambda: TopologyTestDriver(windowed_counts(), {"application.id": "ts", KEY: value}),
                 lambda: App(windowed_counts(), {**embedded_config(tmp_path), "application.id": "ts",
                                                 "state.dir": str(tmp_path), KEY: value})):
        with pytest.raises(ConfigError, match=KEY) as info:
            make()
        assert says in str(info.value)


def test_the_app_counts_by_the_extracted_time(tmp_path):
    source, out = unique("ts-in"), unique("ts-out")
    cluster = Cluster(embedded_config(tmp_path))
    cluster.create_topics(1, source, out)
    cluster.produce(source, [(k.encode(), v.encode()) for k, v in INPUTS], timestamps=[RECORD_TS] * len(INPUTS))
    b = StreamsBuilder()
    (b.stream(source, key_serde=S, value_serde=S)
        .group_by_key()
        .windowed_by(TimeWindows.of_size_with_no_grace(10))
        .count(store="counts")
        .to_stream()
        .map(lambda windowed, count: (f"{windowed.key}@{windowed.window.start}", count))
        .to(out, key_serde=S, value_serde=I64))
    app = App(b.build(), {**cluster.config, "application.id": unique("ts"), "state.dir": str(tmp_path / "state"),
                          "commit.interval.ms": 100, KEY: ValueTime})
    app.start()
    try:
        assert app.wait_for_state(AppState.RUNNING, timeout=60)
        # the cache may merge a window's updates: the last count of each window is what is certain
        msgs = cluster.read_all(out, 1, timeout=60, until=lambda got: {
            (m.key().decode(), I64.deserialize(m.value())) for m in got} >= {("k@0", 2), ("k@10", 1)})
        last = {m.key().decode(): (I64.deserialize(m.value()), m.timestamp()[1]) for m in msgs}
        assert last == {"k@0": (2, 7), "k@10": (1, 15)}
    finally:
        app.close()
