"""The Kafka backend: confluent-kafka clients with the runtime's defaults."""

from __future__ import annotations

import logging
from typing import Any, Mapping

from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient

from connectors.errors import KafkaBackendError

logger = logging.getLogger(__name__)

#: Producer defaults. Kafka's Java partitioner (murmur2 on the key bytes, random for
#: null keys) so keyed records land where any Kafka client would put them; idempotence
#: (implies acks=all) so retries never duplicate; linger.ms as Kafka Streams sets it.
PRODUCER_DEFAULTS: dict[str, Any] = {
    "partitioner": "murmur2_random",
    "enable.idempotence": True,
    "acks": "all",
    "linger.ms": 100,
}

#: Consumer defaults as Kafka Streams sets them: the runtime commits explicitly and
#: starts from the beginning of a partition without a committed offset. And fetching as
#: Kafka's consumer does, again as soon as a partition's fetched records are taken: once a
#: partition's prefetch queue is past queued.min.messages, librdkafka looks again only after
#: fetch.queue.backoff.ms (1 s by default), so a stream thread that drains its queue in a
#: fraction of that sat idle for the rest (word count on one broker: 19,400 lines/s with the
#: default, 31,200 with 10 ms; bench/wordcount_kafka.py).
CONSUMER_DEFAULTS: dict[str, Any] = {
    "enable.auto.commit": False,
    "auto.offset.reset": "earliest",
    "fetch.queue.backoff.ms": 10,
}

ADMIN_DEFAULTS: dict[str, Any] = {}


class PollingConsumer(Consumer):
    """confluent-kafka's Consumer whose `consume(num_messages, timeout)` returns as soon as any
    record (or event) is there, as Kafka's `poll(timeout)` and the embedded consumer do.
    librdkafka's batch consume waits until `num_messages` have arrived or `timeout` has passed:
    a stream thread asking for 5,000 records would sit out its whole poll.ms whenever fewer are
    fetched, which on a real broker is most loops once its repartition records come back one
    fetch at a time."""

    def consume(self, num_messages: int = 1, timeout: float = -1) -> list:
        if num_messages <= 1 or timeout == 0:
            return super().consume(num_messages, timeout)
        messages = super().consume(num_messages, 0)  # what is queued already, without waiting
        if messages:
            return messages
        first = super().consume(1, timeout)  # waits for one at most `timeout`
        if not first:
            return first
        return first + super().consume(num_messages - 1, 0)  # and what came with it


_CLIENT_PREFIXES = ("producer.", "consumer.", "admin.")


def _check_conf(conf: Any, what: str) -> dict[str, Any]:
    if conf is None:
        return {}
    if not isinstance(conf, Mapping):
        raise KafkaBackendError(f"{what} configuration must be a dict, got {type(conf).__name__}")
    bad = [key for key in conf if not isinstance(key, str) or not key]
    if bad:
        raise KafkaBackendError(f"{what} configuration keys must be non-empty strings, got {bad!r}")
    return dict(conf)


class KafkaBackend:
    """Builds confluent-kafka clients for one Kafka cluster.

    ``base_config`` holds settings shared by every client (security, ``client.id``, ...);
    keys prefixed ``producer.``, ``consumer.`` or ``admin.`` apply to that client only
    (prefix stripped). Precedence, lowest first: the runtime defaults, shared
    ``base_config``, prefixed ``base_config``, the ``conf`` given to the factory; an
    explicit setting always wins.
    """

    def __init__(self, bootstrap_servers: str, base_config: Mapping[str, Any] | None = None) -> None:
        if not isinstance(bootstrap_servers, str) or not bootstrap_servers.strip():
            raise KafkaBackendError(f"bootstrap.servers must be a non-empty 'host:port[,...]' string, "
                                    f"got {bootstrap_servers!r}")
        if bootstrap_servers.startswith("local:"):
            raise KafkaBackendError(f"bootstrap.servers {bootstrap_servers!r} names the embedded "
                                    "cluster, not Kafka: use streams.backends.for_config")
        base = _check_conf(base_config, "base")
        self._bootstrap_servers = bootstrap_servers.strip()
        self._shared = {k: v for k, v in base.items() if not k.startswith(_CLIENT_PREFIXES)}
        self._shared.pop("bootstrap.servers", None)
        self._per_client: dict[str, dict[str, Any]] = {p[:-1]: {} for p in _CLIENT_PREFIXES}
        for key, value in base.items():
            for prefix in _CLIENT_PREFIXES:
                if key.startswith(prefix):
                    self._per_client[prefix[:-1]][key[len(prefix):]] = value
        self._closed = False

    @property
    def bootstrap_servers(self) -> str:
        return self._bootstrap_servers

    def _merged(self, kind: str, defaults: Mapping[str, Any], conf: Any) -> dict[str, Any]:
        if self._closed:
            raise KafkaBackendError(f"cannot create a {kind}: the Kafka backend for "
                                    f"{self._bootstrap_servers} is closed")
        explicit = _check_conf(conf, kind)
        return {"bootstrap.servers": self._bootstrap_servers, **defaults, **self._shared,
                **self._per_client[kind], **explicit}

    def producer_config(self, conf: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """The configuration `producer` would use for ``conf``."""
        return self._merged("producer", PRODUCER_DEFAULTS, conf)

    def consumer_config(self, conf: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """The configuration `consumer` would use for ``conf``."""
        return self._merged("consumer", CONSUMER_DEFAULTS, conf)

    def admin_config(self, conf: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """The configuration `admin` would use for ``conf``."""
        return self._merged("admin", ADMIN_DEFAULTS, conf)

    def producer(self, conf: Mapping[str, Any] | None = None) -> Producer:
        return Producer(self.producer_config(conf))

    def consumer(self, conf: Mapping[str, Any] | None = None) -> Consumer:
        return PollingConsumer(self.consumer_config(conf))

    def admin(self, conf: Mapping[str, Any] | None = None) -> AdminClient:
        return AdminClient(self.admin_config(conf))

    def close(self) -> None:
        """Refuse further clients; clients already created stay the caller's to close."""
        self._closed = True

    def __enter__(self) -> "KafkaBackend":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"KafkaBackend({self._bootstrap_servers!r})"
