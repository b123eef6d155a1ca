"""Typed errors of the connectors (Kafka backend, Spark data sources)."""

from eddy.errors import EddyError


class ConnectorError(EddyError):
    """Base of connector errors."""


class KafkaBackendError(ConnectorError):
    """The Kafka backend was given a bad configuration or could not create a client."""
