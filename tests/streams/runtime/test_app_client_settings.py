"""An app's client settings end to end, on both backends: unprefixed consumer and producer
settings reach only their own clients (librdkafka logs a CONFWARN for another kind's setting on
each client it is given to), and the app's own setting in its config reaches no client
(librdkafka refuses to create a client given a name it does not know), so the app runs as it
would on Kafka Streams, with one warning naming that setting (streams.client_scopes)."""

from __future__ import annotations

import logging

from streams import App, AppState, StreamsBuilder, serdes

from _runtime_util import Cluster, unique

S = serdes.STRING


def test_plain_client_settings_and_the_apps_own_run_without_client_warnings(backend_config, tmp_path, caplog):
    source, sink = unique("settings-in"), unique("settings-out")
    cluster = Cluster(backend_config)
    client_logger = logging.getLogger(unique("librdkafka"))  # confluent-kafka's `logger`: every client's
    config = {**cluster.config, "application.id": unique("settings"), "state.dir": str(tmp_path),
              "commit.interval.ms": 100, "logger": client_logger,
              "max.poll.interval.ms": 60000, "fetch.wait.max.ms": 100,  # the consumers' settings
              "linger.ms": 5, "acks": "all",  # the producers'
              "my.app.output.topic": sink}  # the app's own
    try:
        cluster.create_topics(1, source, sink)
        b = StreamsBuilder()
        b.stream(source, key_serde=S, value_serde=S).map_values(str.upper).to(
            config["my.app.output.topic"], key_serde=S, value_serde=S)
        with caplog.at_level(logging.WARNING, logger="streams.client_scopes"):
            app = App(b.build(), config)
            app.start()
        try:
            assert app.wait_for_state(AppState.RUNNING, timeout=60), app.state
            cluster.produce(source, [(b"k", b"v")])
            got = cluster.read_all(sink, 1, until=lambda msgs: len(msgs) == 1)
            assert got[0].value() == b"V"
        finally:
            assert app.close(timeout=60)
        librdkafka = [r.getMessage() for r in caplog.records if r.name == client_logger.name]
        assert not [line for line in librdkafka if "CONFWARN" in line], librdkafka
        assert "'my.app.output.topic': not a Kafka Streams or client setting, handed to no client" in caplog.text
    finally:
        cluster.close()
