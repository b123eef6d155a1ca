"""Kafka Streams settings Eddy does not implement: one that would change what the app does is a
ConfigError unless it asks for Kafka's default (which Eddy has), from App and driver alike; one
that only tunes what Eddy lacks is accepted with a warning. None reaches the clients (librdkafka
refuses a key it does not know)."""

import logging

import pytest

from streams import App, StreamsBuilder, serdes
from streams.backends import client_config
from streams.errors import ConfigError
from streams.runtime.config import StreamsConfig
from streams.testing import TopologyTestDriver


def topology():
    b = StreamsBuilder()
    b.stream("in", key_serde=serdes.STRING, value_serde=serdes.STRING).to("out")
    return b.build()


@pytest.mark.parametrize("key,value", [
    ("processor.wrapper.class", "com.example.Wrapper"),
    ("default.client.supplier", "com.example.Clients"),
    ("group.protocol", "streams"),
    ("task.assignor.class", "com.example.Assignor"),
])
def test_a_setting_that_would_change_the_app_is_refused(key, value, tmp_path):
    for make in (lambda: TopologyTestDriver(topology(), {"application.id": "u", key: value}),
                 lambda: App(topology(), {"application.id": "u", "bootstrap.servers": f"local://{tmp_path}/c",
                                          "state.dir": str(tmp_path), key: value})):
        with pytest.raises(ConfigError, match=f"config '{key}' = .* is not supported by Eddy"):
            make()


@pytest.mark.parametrize("key,value", [
    ("group.protocol", "CLASSIC"),
])
def test_kafkas_default_is_accepted(key, value):
    with TopologyTestDriver(topology(), {"application.id": "u", key: value}) as driver:
        driver.create_input_topic("in", serdes.STRING, serdes.STRING).pipe_input("k", "v")
        assert driver.create_output_topic("out", serdes.STRING, serdes.STRING).read_key_values_to_list() == [("k", "v")]


def test_a_tuning_setting_is_accepted_with_a_warning(caplog):
    config = {"application.id": "u", "bootstrap.servers": "local:///x",
              "acceptable.recovery.lag": 10_000, "rack.aware.assignment.strategy": "min_traffic"}
    with caplog.at_level(logging.WARNING, logger="streams.runtime.config"):
        StreamsConfig.parse(config)
    for key in ("acceptable.recovery.lag", "rack.aware.assignment.strategy"):
        assert f"config {key!r} is a Kafka Streams setting Eddy does not implement" in caplog.text


def test_none_reaches_the_clients():
    config = {"bootstrap.servers": "localhost:9092", "processing.exception.handler": "x", "default.dsl.store": "x",
              "group.protocol": "classic", "rack.aware.assignment.tags": "zone", "window.size.ms": 5,
              "log.summary.interval.ms": 1, "application.server": "host:8080", "client.id": "mine"}
    assert client_config(config) == {"client.id": "mine"}
