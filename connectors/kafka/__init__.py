"""The Kafka backend: confluent-kafka clients behind `streams.backends.for_config`."""

from connectors.kafka.backend import (
    ADMIN_DEFAULTS,
    CONSUMER_DEFAULTS,
    PRODUCER_DEFAULTS,
    KafkaBackend,
)

__all__ = ["KafkaBackend", "PRODUCER_DEFAULTS", "CONSUMER_DEFAULTS", "ADMIN_DEFAULTS"]
