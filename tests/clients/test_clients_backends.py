"""streams.backends.for_config and the Kafka backend's defaults."""

from __future__ import annotations

import pytest
from _clients_util import create_topic, drain, produce_all, unique, wait_for, wait_for_group_coordinator
from confluent_kafka import OFFSET_STORED, KafkaError, TopicPartition

from connectors.errors import KafkaBackendError
from connectors.kafka import KafkaBackend
from streams.errors import BackendError
from streams.backends import Backend, for_config


def test_for_config_picks_kafka_for_host_port(kafka_bootstrap_servers) -> None:
    backend = for_config({"bootstrap.servers": kafka_bootstrap_servers, "application.id": "app",
                          "state.dir": "/tmp/x", "processing.guarantee": "exactly_once_v2",
                          "client.id": "eddy-test", "producer.linger.ms": 7, "consumer.fetch.min.bytes": 2})
    assert isinstance(backend, KafkaBackend) and isinstance(backend, Backend)
    assert backend.bootstrap_servers == kafka_bootstrap_servers
    producer_conf = backend.producer_config({"acks": "1"})
    # streams-only keys stay out of the clients; prefixed keys reach only their client
    assert "application.id" not in producer_conf and "state.dir" not in producer_conf
    assert producer_conf["client.id"] == "eddy-test" and producer_conf["linger.ms"] == 7
    assert producer_conf["acks"] == "1"  # explicit wins over the default "all"
    assert producer_conf["partitioner"] == "murmur2_random" and producer_conf["enable.idempotence"] is True
    assert "fetch.min.bytes" not in producer_conf
    assert backend.consumer_config()["fetch.min.bytes"] == 2
    # fetching again promptly once a partition's queue is drained (librdkafka waits 1 s), unless set
    assert backend.consumer_config()["fetch.queue.backoff.ms"] == 10
    assert backend.consumer_config({"fetch.queue.backoff.ms": 500})["fetch.queue.backoff.ms"] == 500
    # every factory builds a working client with those settings
    metadata = backend.admin().list_topics(timeout=10)
    assert metadata.brokers
    backend.producer().flush(1)
    backend.consumer({"group.id": unique("g")}).close()


def test_kafka_consumer_defaults_start_at_earliest_and_explicit_wins(backend, admin) -> None:
    topic = create_topic(admin)
    produce_all(backend.producer(), topic, [(None, b"old")] * 3)
    groups = unique("g"), unique("g")
    for group in groups:  # OFFSET_STORED asks the coordinator once (see wait_for_group_coordinator)
        wait_for_group_coordinator(admin, group)
    default = backend.consumer({"group.id": groups[0], "enable.partition.eof": True})
    tp = TopicPartition(topic, 0, OFFSET_STORED)
    default.assign([tp])
    assert [m.value() for m in drain(default, [tp])] == [b"old"] * 3
    strict = backend.consumer({"group.id": groups[1], "auto.offset.reset": "error"})
    strict.assign([tp])

    def reset_error():
        msg = strict.poll(0.2)
        return msg.error() if msg is not None and msg.error() is not None else None

    assert wait_for(reset_error, 15, "the auto.offset.reset=error failure").code() == KafkaError._AUTO_OFFSET_RESET


def test_closed_kafka_backend_refuses_new_clients(kafka_bootstrap_servers) -> None:
    backend = KafkaBackend(kafka_bootstrap_servers)
    backend.close()
    for factory in (backend.producer, backend.consumer, backend.admin):
        with pytest.raises(KafkaBackendError, match="closed"):
            factory({})


@pytest.mark.parametrize("servers", ["", "   ", None, 9092, "local:///tmp/x"])
def test_kafka_backend_refuses_bad_bootstrap_servers(servers) -> None:
    with pytest.raises(KafkaBackendError, match="bootstrap.servers"):
        KafkaBackend(servers)


def test_kafka_backend_refuses_bad_conf() -> None:
    backend = KafkaBackend("127.0.0.1:9")
    with pytest.raises(KafkaBackendError, match="producer configuration must be a dict, got list"):
        backend.producer(["acks"])
    with pytest.raises(KafkaBackendError, match="base configuration must be a dict"):
        KafkaBackend("127.0.0.1:9", "acks=all")


@pytest.mark.parametrize("config, message", [
    ("bootstrap.servers=x", "must be a dict, got str"),
    ({}, "no 'bootstrap.servers'"),
    ({"bootstrap.servers": ""}, "non-empty string"),
    ({"bootstrap.servers": 9092}, "non-empty string"),
    ({"bootstrap.servers": "local://relative/dir"}, "the path must be absolute"),
    ({"bootstrap.servers": "local:/tmp/x"}, "expected 'local:///path/to/dir'"),
])
def test_for_config_refuses_bad_configs(config, message) -> None:
    with pytest.raises(BackendError, match=message):
        for_config(config)


def test_for_config_local_selects_the_embedded_backend_or_says_it_is_unavailable(tmp_path) -> None:
    try:
        from replication import LocalCluster  # noqa: F401
    except ImportError:
        with pytest.raises(BackendError, match="embedded backend is unavailable"):
            for_config({"bootstrap.servers": f"local://{tmp_path}"})
        return
    backend = for_config({"bootstrap.servers": f"local://{tmp_path}"})
    try:
        assert isinstance(backend, Backend)
        assert backend.bootstrap_servers == f"local://{tmp_path}"
    finally:
        backend.close()
