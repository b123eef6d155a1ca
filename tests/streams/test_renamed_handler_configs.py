"""Kafka 4.0's names of the exception handler configs (KIP-1056): deserialization.exception.handler
and production.exception.handler. The new name wins over the deprecated default.* one (a warning
when both are set); neither is handed to the clients; errors name the key that was set
(tests/streams/test_driver_config.py, App and driver alike)."""

import logging

from streams import StreamsBuilder, serdes
from streams.backends import client_config
from streams.runtime.collector import production_handler_from_config
from streams.serdes import deserialization_handler_from_config, log_and_continue, log_and_fail
from streams.testing import TopologyTestDriver

NEW_DESER, OLD_DESER = "deserialization.exception.handler", "default.deserialization.exception.handler"
NEW_PROD, OLD_PROD = "production.exception.handler", "default.production.exception.handler"


def test_the_new_deserialization_name_wins(caplog):
    assert deserialization_handler_from_config({NEW_DESER: "log_and_continue"}) is log_and_continue
    assert deserialization_handler_from_config({OLD_DESER: "log_and_continue"}) is log_and_continue
    with caplog.at_level(logging.WARNING, logger="streams.config_names"):
        assert deserialization_handler_from_config({NEW_DESER: "log_and_fail", OLD_DESER: "log_and_continue"}) \
            is log_and_fail
    assert f"{OLD_DESER!r} is ignored" in caplog.text


def test_the_new_production_name_wins(caplog):
    assert production_handler_from_config({NEW_PROD: "continue"})(None, None) == "continue"
    assert production_handler_from_config({OLD_PROD: "continue"})(None, None) == "continue"
    assert production_handler_from_config({})(None, None) == "fail"
    with caplog.at_level(logging.WARNING, logger="streams.config_names"):
        assert production_handler_from_config({NEW_PROD: "fail", OLD_PROD: "continue"})(None, None) == "fail"
    assert f"{OLD_PROD!r} is ignored" in caplog.text


def test_neither_name_reaches_the_clients():
    given = {"bootstrap.servers": "localhost:9092", NEW_DESER: "log_and_continue", NEW_PROD: "continue",
             OLD_DESER: "log_and_fail", OLD_PROD: "fail", "linger.ms": 5}
    assert client_config(given) == {"producer.linger.ms": 5}


def test_the_driver_skips_a_bad_record_under_the_new_name():
    b = StreamsBuilder()
    b.stream("in", key_serde=serdes.STRING, value_serde=serdes.INT64).map_values(lambda v: v + 1) \
        .to("out", key_serde=serdes.STRING, value_serde=serdes.INT64)
    with TopologyTestDriver(b.build(), {"application.id": "h", NEW_DESER: "log_and_continue"}) as driver:
        raw = driver.create_input_topic("in", serdes.STRING, serdes.BYTES)
        raw.pipe_input("k", b"\x01")  # not 8 bytes: not an INT64
        raw.pipe_input("k", serdes.INT64.serialize(41))
        assert driver.create_output_topic("out", serdes.STRING, serdes.INT64).read_key_values_to_list() == [("k", 42)]
