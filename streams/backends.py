"""The backend contract: one place that turns a configuration into client factories.

``for_config(config)`` picks the backend by ``bootstrap.servers``: ``local:///dir``
(or ``local://`` for a temporary directory) is the embedded replicated log, anything
else is Kafka. Every backend hands out clients with confluent-kafka's Python API.
"""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
import threading
from typing import Any, Mapping, Protocol, runtime_checkable

from streams import unsupported_configs as _unsupported
from streams.client_scopes import CLIENT_PREFIXES, scope_client_settings
from streams.errors import BackendError

logger = logging.getLogger(__name__)

LOCAL_SCHEME = "local://"

#: Kafka Streams' own keys (StreamsConfig), never a client's setting, with or without a client's
#: prefix (streams.runtime.config.StreamsConfig.consumer_overrides filters prefixed ones with it).
STREAMS_CONFIG_KEYS = frozenset({
    "application.id", "state.dir", "processing.guarantee",
    "commit.interval.ms", "num.stream.threads", "num.standby.replicas",
    "statestore.cache.max.bytes", "cache.max.bytes.buffering", "poll.ms",
    "default.key.serde", "default.value.serde", "default.timestamp.extractor",
    "default.deserialization.exception.handler", "default.production.exception.handler",
    "deserialization.exception.handler", "production.exception.handler",  # their Kafka 4.0 names
    "replication.factor", "topology.optimization", "max.task.idle.ms",
    "buffered.records.per.partition", "input.buffer.max.bytes", "state.cleanup.delay.ms",
    "windowstore.changelog.additional.retention.ms", "task.timeout.ms", "rocksdb.config.setter",
    "repartition.purge.interval.ms", "processing.exception.handler",
    "default.dsl.store", "dsl.store.suppliers.class", "ensure.explicit.internal.resource.naming",
    "application.server",
    # the stream threads' poll size (streams.runtime.config.max_poll_records), not a client's
    "max.poll.records", "consumer.max.poll.records",
}) | _unsupported.KEYS  # and the settings Eddy does not implement (streams/unsupported_configs.py)

#: The keys of an app config not handed to the clients as their base: Kafka Streams' own, and
#: bootstrap.servers, which names the backend (that sets it on its clients itself). Under a
#: consumer's prefix bootstrap.servers is a client setting like any other.
STREAMS_ONLY_KEYS = STREAMS_CONFIG_KEYS | {"bootstrap.servers"}


@runtime_checkable
class Backend(Protocol):
    """Client factories for one log. The clients follow confluent-kafka's Python API."""

    @property
    def bootstrap_servers(self) -> str: ...

    def producer(self, conf: Mapping[str, Any] | None = None) -> Any:
        """A `confluent_kafka.Producer` (or an object with its API)."""

    def consumer(self, conf: Mapping[str, Any] | None = None) -> Any:
        """A `confluent_kafka.Consumer` (or an object with its API)."""

    def admin(self, conf: Mapping[str, Any] | None = None) -> Any:
        """A `confluent_kafka.admin.AdminClient` (or an object with its API)."""

    def close(self) -> None:
        """Release what the backend holds; clients handed out are closed by their owners."""


#: Kafka Streams' prefix of the configs of the internal topics it creates (never a client's)
TOPIC_PREFIX = "topic."


def client_config(config: Mapping[str, Any]) -> dict[str, Any]:
    """The client settings in an app config (streams-only keys and `topic.` ones dropped), each
    consumer-only or producer-only one under its client's prefix, a name no client knows dropped
    with a warning (streams.client_scopes)."""
    return scope_client_settings({k: v for k, v in config.items()
                                  if k not in STREAMS_ONLY_KEYS and not k.startswith(TOPIC_PREFIX)})


def for_config(config: Mapping[str, Any]) -> Backend:
    """The backend named by ``config["bootstrap.servers"]``.

    Client settings in ``config`` (Kafka Streams' own keys left out; ``producer.``,
    ``consumer.`` and ``admin.`` prefixes target one client; an unprefixed setting reaches the
    clients it is for, a name no client knows none: streams.client_scopes) become the clients'
    base configuration; a ``conf`` given to a factory wins over them.
    """
    if not isinstance(config, Mapping):
        raise BackendError(f"backend configuration must be a dict, got {type(config).__name__}")
    servers = config.get("bootstrap.servers")
    if servers is None:
        raise BackendError("configuration has no 'bootstrap.servers': set it to 'host:port' for "
                           "Kafka or 'local:///path/to/dir' for the embedded cluster")
    if not isinstance(servers, str) or not servers.strip():
        raise BackendError(f"'bootstrap.servers' must be a non-empty string, got {servers!r}")
    servers = servers.strip()
    if servers.startswith("local:"):
        return _local_backend(servers, client_config(config))
    from connectors.kafka import KafkaBackend  # noqa: PLC0415 - keeps streams light without Kafka

    return KafkaBackend(servers, client_config(config))


# -- the embedded cluster ---------------------------------------------------------


def _local_data_dir(servers: str) -> str | None:
    """The directory of a ``local://`` address; None for ``local://`` (a temporary one)."""
    if not servers.startswith(LOCAL_SCHEME):
        raise BackendError(f"bad embedded cluster address {servers!r}: expected 'local:///path/to/dir' "
                           "or 'local://'")
    rest = servers[len(LOCAL_SCHEME):]
    if rest == "":
        return None
    if not rest.startswith("/"):
        raise BackendError(f"bad embedded cluster address {servers!r}: the path must be absolute "
                           f"('local:///{rest}' means /{rest})")
    return os.path.realpath(rest)


class _SharedCluster:
    """One embedded cluster per directory per process, closed when its last backend closes."""

    def __init__(self, key: str | None, cluster: Any, temp_dir: str | None) -> None:
        self.key = key
        self.cluster = cluster
        self.temp_dir = temp_dir
        self.users = 0


_clusters_lock = threading.Lock()
_clusters: dict[str | None, _SharedCluster] = {}


#: The same client defaults as the Kafka backend's, so an app behaves alike on both.
_LOCAL_DEFAULTS: dict[str, dict[str, Any]] = {
    "producer": {"partitioner": "murmur2_random", "enable.idempotence": True, "acks": "all"},
    "consumer": {"enable.auto.commit": False, "auto.offset.reset": "earliest"},
    "admin": {},
}


class LocalBackend:
    """Client factories on an embedded `replication.LocalCluster` shared within the process."""

    def __init__(self, servers: str, shared: _SharedCluster, base_config: Mapping[str, Any]) -> None:
        self._servers = servers
        self._shared = shared
        self._base = {k: v for k, v in base_config.items() if not k.startswith(CLIENT_PREFIXES)}
        self._per_client = {prefix[:-1]: {k[len(prefix):]: v for k, v in base_config.items() if k.startswith(prefix)}
                            for prefix in CLIENT_PREFIXES}
        self._closed = False

    @property
    def bootstrap_servers(self) -> str:
        return self._servers

    @property
    def cluster(self) -> Any:
        """The `replication.LocalCluster` behind this backend."""
        return self._shared.cluster

    def _conf(self, kind: str, conf: Mapping[str, Any] | None) -> dict[str, Any]:
        if self._closed:
            raise BackendError(f"cannot create a {kind}: the embedded backend {self._servers} is closed")
        if conf is not None and not isinstance(conf, Mapping):
            raise BackendError(f"{kind} configuration must be a dict, got {type(conf).__name__}")
        return {**_LOCAL_DEFAULTS[kind], **self._base, **self._per_client[kind], **(conf or {}),
                "bootstrap.servers": self._servers}

    def producer(self, conf: Mapping[str, Any] | None = None) -> Any:
        return self._shared.cluster.producer(self._conf("producer", conf))

    def consumer(self, conf: Mapping[str, Any] | None = None) -> Any:
        return self._shared.cluster.consumer(self._conf("consumer", conf))

    def admin(self, conf: Mapping[str, Any] | None = None) -> Any:
        return self._shared.cluster.admin(self._conf("admin", conf))

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        with _clusters_lock:
            self._shared.users -= 1
            if self._shared.users > 0:
                return
            _clusters.pop(self._shared.key, None)
        try:
            self._shared.cluster.close()
        finally:
            if self._shared.temp_dir is not None:
                shutil.rmtree(self._shared.temp_dir, ignore_errors=True)

    def __enter__(self) -> "LocalBackend":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"LocalBackend({self._servers!r})"


def _local_backend(servers: str, base_config: Mapping[str, Any]) -> LocalBackend:
    data_dir = _local_data_dir(servers)
    try:
        from replication import LocalCluster  # noqa: PLC0415 - the embedded cluster is optional here
    except ImportError as exc:
        raise BackendError(f"the embedded backend is unavailable for {servers!r}: "
                           f"replication.LocalCluster cannot be imported ({exc})") from exc
    with _clusters_lock:
        shared = _clusters.get(data_dir)
        if shared is None:
            temp_dir = None
            if data_dir is None:
                temp_dir = tempfile.mkdtemp(prefix="eddy-local-")
            directory = temp_dir or data_dir
            os.makedirs(directory, exist_ok=True)
            cluster = LocalCluster(directory)
            try:
                cluster.start()
            except BaseException:
                if temp_dir is not None:
                    shutil.rmtree(temp_dir, ignore_errors=True)
                raise
            shared = _SharedCluster(data_dir, cluster, temp_dir)
            _clusters[data_dir] = shared
            logger.info("started embedded cluster in %s", directory)
        shared.users += 1
    return LocalBackend(servers, shared, base_config)
