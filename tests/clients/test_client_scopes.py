"""streams.client_scopes: an app's client settings reach only the clients they are for.

The lists are checked against the installed librdkafka: each consumer-only property, set on a
producer, draws librdkafka's "is a consumer property" warning, and the other way round; every
client takes each property of every client without one. A name no client knows reaches none (on
Kafka Streams an app's config may carry the app's own settings). No broker is needed:
librdkafka checks a client's configuration when the client is created."""

from __future__ import annotations

import logging
import tempfile

import pytest
from confluent_kafka import Consumer, KafkaException, Producer
from confluent_kafka.admin import AdminClient

from replication.clients.common import ClientConfigError
from streams.backends import for_config
from streams.client_scopes import CONSUMER_ONLY, EVERY_CLIENT, PRODUCER_ONLY, scope_client_settings

NOWHERE = "127.0.0.1:9"  # nothing listens: the clients are only created
#: values tried, in order, until librdkafka takes one for the property
CANDIDATES = ("1000", "10000000", "100000000", "1", "true", "false", True, "earliest", "read_committed", "range",
              "none", "gzip", "consumer", "murmur2_random", "fifo", "all", "app", "file", "any", "use_all_dns_ips",
              "plaintext", "default", "client_credentials", "RS256", "Root")
#: names a Python config cannot set (librdkafka's C callbacks; confluent-kafka's own callbacks
#: take a callable): checked by hand in librdkafka's CONFIGURATION.md and confluent-kafka's docs
UNCHECKED = {"consume_cb", "offset_commit_cb", "rebalance_cb", "dr_cb", "dr_msg_cb", "msg_order_cmp",
             "partitioner_cb", "on_commit", "on_delivery"}
#: the same for properties of every client, and those that need a file, a plugin or Windows
UNCHECKED_EVERY_CLIENT = {
    "background_event_cb", "closesocket_cb", "connect_cb", "default_topic_conf", "error_cb", "interceptors", "log_cb",
    "oauth_cb", "oauthbearer_token_refresh_cb", "opaque", "open_cb", "resolve_cb", "socket_cb",
    "ssl.certificate.verify_cb", "ssl_ca", "ssl_certificate", "ssl_engine_callback_data", "ssl_key", "stats_cb",
    "throttle_cb", "logger", "https.ca.location", "plugin.library.paths", "ssl.keystore.location",
    "ssl.ca.certificate.stores"}  # (Windows only)


class _Warnings(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


def _conf_warnings(make, conf: dict) -> list[str]:
    """librdkafka's CONFWARN lines for a client made with `conf` (make: Producer, Consumer or
    AdminClient)."""
    handler = _Warnings()
    logger = logging.getLogger(f"test-client-scopes-{id(handler)}")
    logger.addHandler(handler)
    logger.propagate = False
    client = make({"bootstrap.servers": NOWHERE, **conf, "logger": logger})
    client.poll(0)  # serves the log queue
    if isinstance(client, Consumer):
        client.close()
    return [m for m in handler.messages if m.startswith("CONFWARN")]


def _accepted_value(make, name: str, base: dict, *others: tuple) -> object:
    """The first candidate value of property `name` that `make` (and each of `others`, (make,
    base) pairs) creates a client with, or None."""
    for value in CANDIDATES:
        try:
            for maker, conf in ((make, base), *others):
                client = maker({"bootstrap.servers": NOWHERE, **conf, name: value})
                if isinstance(client, Consumer):
                    client.close()
        except (KafkaException, ValueError, TypeError):
            continue
        return value
    return None


@pytest.mark.parametrize("names, own, other, other_base, says", [
    (CONSUMER_ONLY, Consumer, Producer, {}, "is a consumer property"),
    (PRODUCER_ONLY, Producer, Consumer, {"group.id": "g"}, "is a producer property"),
], ids=["consumer-only", "producer-only"])
def test_lists_match_the_installed_librdkafka(names, own, other, other_base, says) -> None:
    own_base = {"group.id": "g"} if own is Consumer else {}
    assert UNCHECKED & names
    for name in sorted(names - UNCHECKED):
        value = _accepted_value(own, name, own_base)
        assert value is not None, f"no candidate value for {name}"
        # the one property set draws the warning (an alias's names the property it stands for)
        warnings = _conf_warnings(other, {**other_base, name: value})
        assert any(says in w for w in warnings), (name, warnings)
        # and librdkafka does not warn about it on its own kind of client
        own_warnings = _conf_warnings(own, {**own_base, name: value})
        assert not any("will be ignored" in w for w in own_warnings), (name, own_warnings)


def test_every_client_properties_are_every_clients() -> None:
    """Each property of every client (librdkafka's "*") is taken by a producer, a consumer and an
    admin client without a warning; the three lists do not overlap."""
    assert not EVERY_CLIENT & CONSUMER_ONLY and not EVERY_CLIENT & PRODUCER_ONLY and not CONSUMER_ONLY & PRODUCER_ONLY
    makers = ((Producer, {}), (Consumer, {"group.id": "g"}), (AdminClient, {}))
    assert UNCHECKED_EVERY_CLIENT < EVERY_CLIENT
    for name in sorted(EVERY_CLIENT - UNCHECKED_EVERY_CLIENT):
        value = _accepted_value(Producer, name, {}, *makers[1:])
        assert value is not None, f"no candidate value for {name}"
        for make, base in makers:
            warnings = _conf_warnings(make, {**base, name: value})
            assert not any("will be ignored" in w for w in warnings), (name, make, warnings)


def test_scope_client_settings_moves_each_key_under_its_clients_prefix(caplog) -> None:
    with caplog.at_level(logging.WARNING, logger="streams.client_scopes"):
        scoped = scope_client_settings({
            "session.timeout.ms": 10000, "auto.offset.reset": "latest", "linger.ms": 5, "acks": "1",
            "client.id": "c", "consumer.session.timeout.ms": 6000, "producer.batch.size": 100,
            "my.app.input.topic": "orders", "sesion.timeout.ms": 1, "admin.no.such.property": "x"})
    assert scoped == {
        "consumer.session.timeout.ms": 6000,  # the prefixed setting wins, as Kafka's
        "consumer.auto.offset.reset": "latest", "producer.linger.ms": 5, "producer.acks": "1",
        "client.id": "c", "producer.batch.size": 100,
        "admin.no.such.property": "x"}  # prefixed: the client's own, as given (librdkafka judges it)
    # the app's own setting and the misspelt one reach no client, each named in a warning
    assert [r.getMessage() for r in caplog.records] == [
        "config 'my.app.input.topic', 'sesion.timeout.ms': not a Kafka Streams or client setting, handed to no "
        "client (a client's own setting reaches it under its prefix: consumer., producer. or admin.)"]


def test_kafka_backend_clients_of_an_app_config_get_only_their_settings() -> None:
    backend = for_config({"bootstrap.servers": NOWHERE, "application.id": "app",
                          "session.timeout.ms": 10000, "heartbeat.interval.ms": 1000,
                          "isolation.level": "read_committed", "linger.ms": 5, "acks": "all",
                          "transaction.timeout.ms": 10000, "client.id": "scoped",
                          "consumer.heartbeat.interval.ms": 500, "my.app.input.topic": "orders"})
    producer, consumer, admin = (backend.producer_config(), backend.consumer_config({"group.id": "g"}),
                                 backend.admin_config())
    assert producer["linger.ms"] == 5 and producer["transaction.timeout.ms"] == 10000
    assert "session.timeout.ms" not in producer and "isolation.level" not in producer
    assert consumer["session.timeout.ms"] == 10000 and consumer["isolation.level"] == "read_committed"
    assert consumer["heartbeat.interval.ms"] == 500  # consumer.-prefixed wins over the plain key
    assert "linger.ms" not in consumer and "acks" not in consumer
    assert not set(admin) & (CONSUMER_ONLY | PRODUCER_ONLY)
    assert producer["client.id"] == consumer["client.id"] == admin["client.id"] == "scoped"
    assert not any("my.app.input.topic" in conf for conf in (producer, consumer, admin))
    # librdkafka itself finds nothing to warn about (before: one warning per foreign key and client,
    # and no client at all for the app's own setting: "No such configuration property")
    assert _conf_warnings(Producer, producer) == []
    assert _conf_warnings(Consumer, consumer) == []
    assert _conf_warnings(AdminClient, admin) == []


def test_embedded_backend_consumers_still_get_plain_consumer_settings() -> None:
    with tempfile.TemporaryDirectory() as data:
        backend = for_config({"bootstrap.servers": f"local://{data}", "session.timeout.ms": 7000,
                              "max.poll.interval.ms": 6000})
        try:
            backend.producer().flush(1)  # the consumer settings are not the producer's
            # both settings reached the consumer: the embedded consumer checks one against the other
            with pytest.raises(ClientConfigError, match=r"max.poll.interval.ms.*6000.*session.timeout.ms.*7000"):
                backend.consumer({"group.id": "g"})
        finally:
            backend.close()
