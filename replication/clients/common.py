"""Plumbing shared by the embedded clients (producer, consumer, admin).

- `ClientConfig`: typed reads of a confluent-style configuration dict, with errors that name
  the key (`ClientConfigError`, a `KafkaException` carrying ``KafkaError._INVALID_ARG``, so
  code written against confluent-kafka catches it where it expects to).
- `kafka_error` / `kafka_exception`: confluent error objects from protocol codes.
- `Metadata`: leader lookup through the cluster's in-process controller.
- `call_leader`: send a request to a partition's leader, retrying while leadership moves.

The producer helper imports from here: keep the names stable.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any, Callable, Mapping

from confluent_kafka import KafkaError, KafkaException

from replication.errors import ReplicationError, TransportError
from replication.protocol import Errors, TopicPartition

log = logging.getLogger(__name__)

#: Errors after which asking the (new) leader again can succeed (OFFSET_NOT_AVAILABLE: a new
#: leader's ListOffsets until its high watermark reaches the start of its epoch).
RETRIABLE_LEADER_ERRORS = frozenset({
    Errors.NOT_LEADER_OR_FOLLOWER, Errors.LEADER_NOT_AVAILABLE, Errors.FENCED_LEADER_EPOCH,
    Errors.UNKNOWN_LEADER_EPOCH, Errors.REQUEST_TIMED_OUT, Errors.NOT_ENOUGH_REPLICAS,
    Errors.NOT_ENOUGH_REPLICAS_AFTER_APPEND, Errors.KAFKA_STORAGE_ERROR, Errors.REPLICA_NOT_AVAILABLE,
    Errors.BROKER_NOT_AVAILABLE, Errors.OFFSET_NOT_AVAILABLE,
})

_TRUE = {"true", "1", "yes", "on"}
_FALSE = {"false", "0", "no", "off"}

_idle = threading.Event()  # never set: a bounded wait that is not a busy loop


def now_ms() -> int:
    return int(time.time() * 1000)


def backoff(seconds: float) -> None:
    """Wait a short bounded time between retries."""
    _idle.wait(max(0.0, seconds))


class ClientConfigError(KafkaException, ReplicationError):
    """A bad client configuration value; ``args[0]`` is a ``KafkaError(_INVALID_ARG)``."""

    def __init__(self, message: str) -> None:
        super().__init__(KafkaError(KafkaError._INVALID_ARG, message))


def kafka_error(code: int, reason: str | None = None, *, fatal: bool = False, retriable: bool = False,
                txn_requires_abort: bool = False) -> KafkaError:
    code = int(code)
    if reason is None:
        return KafkaError(code, fatal=fatal, retriable=retriable, txn_requires_abort=txn_requires_abort)
    return KafkaError(code, reason, fatal=fatal, retriable=retriable, txn_requires_abort=txn_requires_abort)


def kafka_exception(code: int, reason: str | None = None, **kwargs: bool) -> KafkaException:
    return KafkaException(kafka_error(code, reason, **kwargs))


class ClientConfig:
    """A confluent-style configuration with typed, validated reads.

    Values may be given as Python values or strings (``"true"``, ``"500"``) as librdkafka
    accepts. Unknown keys are kept and ignored, as a client of one kind ignores another's keys.
    """

    def __init__(self, conf: Mapping[str, Any] | None, kind: str) -> None:
        if conf is None:
            conf = {}
        if not isinstance(conf, Mapping):
            raise TypeError(f"{kind} configuration must be a dict, got {type(conf).__name__}")
        for key in conf:
            if not isinstance(key, str) or not key:
                raise ClientConfigError(f"{kind} configuration keys must be non-empty strings, got {key!r}")
        self.kind = kind
        self.values = dict(conf)

    def __contains__(self, key: str) -> bool:
        return key in self.values

    def raw(self, key: str, default: Any = None) -> Any:
        return self.values.get(key, default)

    def get_str(self, key: str, default: str | None = None) -> str | None:
        value = self.values.get(key, default)
        if value is None:
            return None
        if not isinstance(value, str):
            raise ClientConfigError(f"{self.kind} configuration {key!r} must be a string, got {value!r}")
        return value

    def get_int(self, key: str, default: int, minimum: int | None = None, maximum: int | None = None) -> int:
        value = self.values.get(key, default)
        if isinstance(value, bool):
            raise ClientConfigError(f"{self.kind} configuration {key!r} must be an integer, got {value!r}")
        try:
            number = int(value)
            if isinstance(value, float) and number != value:
                raise ValueError
        except (TypeError, ValueError):
            raise ClientConfigError(
                f"{self.kind} configuration {key!r} must be an integer, got {value!r}") from None
        if minimum is not None and number < minimum or maximum is not None and number > maximum:
            bounds = f"[{minimum if minimum is not None else '-inf'}, {maximum if maximum is not None else 'inf'}]"
            raise ClientConfigError(f"{self.kind} configuration {key!r} = {number} is outside {bounds}")
        return number

    def get_bool(self, key: str, default: bool) -> bool:
        value = self.values.get(key, default)
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.lower() in _TRUE:
            return True
        if isinstance(value, str) and value.lower() in _FALSE:
            return False
        raise ClientConfigError(f"{self.kind} configuration {key!r} must be true or false, got {value!r}")

    def get_choice(self, key: str, default: str, choices: Mapping[str, str] | tuple[str, ...]) -> str:
        """A value out of ``choices``; a mapping translates aliases (``smallest`` -> ``earliest``)."""
        value = self.values.get(key, default)
        if isinstance(value, str):
            lowered = value.lower()
            if isinstance(choices, Mapping):
                if lowered in choices:
                    return choices[lowered]
            elif lowered in choices:
                return lowered
        allowed = sorted(choices)
        raise ClientConfigError(f"{self.kind} configuration {key!r} must be one of {allowed}, got {value!r}")

    def get_callable(self, key: str) -> Callable | None:
        value = self.values.get(key)
        if value is not None and not callable(value):
            raise ClientConfigError(f"{self.kind} configuration {key!r} must be callable, got {value!r}")
        return value


def check_bootstrap(config: ClientConfig, cluster: Any) -> None:
    """Refuse a ``bootstrap.servers`` that names something other than an embedded cluster."""
    servers = config.raw("bootstrap.servers")
    if servers is not None and not (isinstance(servers, str) and servers.startswith("local:")):
        raise ClientConfigError(
            f"{config.kind} configuration 'bootstrap.servers' = {servers!r} does not name an embedded "
            "cluster ('local:///dir' or 'local://')")


class Metadata:
    """Topic and leader metadata read from the cluster's controller (in process, always fresh)."""

    def __init__(self, cluster: Any) -> None:
        self.cluster = cluster

    @property
    def controller(self):
        controller = self.cluster.controller
        if controller is None:
            raise kafka_exception(KafkaError._TRANSPORT, "the embedded cluster is not running")
        return controller

    def topics(self) -> dict[str, Any]:
        with self.controller._lock:
            return dict(self.controller.topics)

    def partition_count(self, topic: str) -> int | None:
        controller = self.controller
        with controller._lock:
            meta = controller.topics.get(topic)
            return len(meta.partitions) if meta is not None else None

    def leader(self, tp: TopicPartition) -> tuple[int, int]:
        """(leader broker id or -1, leader epoch); (-1, -1) for an unknown partition."""
        state = self.controller.partition_state(tp)
        if state is None:
            return -1, -1
        return state.leader, state.leader_epoch


def call_leader(cluster: Any, tp: TopicPartition, make_request: Callable[[int, int], object],
                extract: Callable[[object], tuple[Errors, Any]], timeout_s: float,
                retry_backoff_s: float = 0.02, attempts: int | None = None) -> tuple[Errors, Any]:
    """Send ``make_request(leader, leader_epoch)`` to ``tp``'s leader until it answers with a
    non-retriable result or ``timeout_s`` passes (or, with ``attempts``, after that many tries,
    a try without a leader counting as one). ``extract(response)`` gives (error, value).

    Returns the last (error, value); `Errors.REQUEST_TIMED_OUT` if no leader ever answered.
    """
    metadata = Metadata(cluster)
    deadline = time.monotonic() + timeout_s
    last: tuple[Errors, Any] = (Errors.REQUEST_TIMED_OUT, None)
    tries = 0
    while True:
        tries += 1
        leader, epoch = metadata.leader(tp)
        if leader < 0:
            if metadata.partition_count(tp.topic) is None or tp.partition >= (metadata.partition_count(tp.topic) or 0):
                return Errors.UNKNOWN_TOPIC_OR_PART, None
            last = (Errors.LEADER_NOT_AVAILABLE, None)
        else:
            remaining = deadline - time.monotonic()
            try:
                response = cluster.transport.request(-1, leader, make_request(leader, epoch), max(0.05, remaining))
                last = extract(response)
            except TransportError:
                last = (Errors.NOT_LEADER_OR_FOLLOWER, None)
            except ReplicationError as e:  # the broker refused the request while stopping
                last = (Errors.NOT_LEADER_OR_FOLLOWER, str(e))
            if last[0] not in RETRIABLE_LEADER_ERRORS:
                return last
        if time.monotonic() >= deadline or (attempts is not None and tries >= attempts):
            return last
        backoff(retry_backoff_s)


def cluster_metadata(cluster: Any, topic: str | None = None) -> Any:
    """A `confluent_kafka.admin.ClusterMetadata` of the embedded cluster (what list_topics returns).

    Brokers are reported with host ``localhost`` and port ``9092 + id``: the embedded brokers
    have no sockets, but code written for Kafka expects an address.
    """
    from confluent_kafka.admin import BrokerMetadata, ClusterMetadata, PartitionMetadata, TopicMetadata

    controller = Metadata(cluster).controller
    md = ClusterMetadata()
    md.cluster_id = f"eddy-{cluster.data_dir.name}"
    md.controller_id = min(controller.live_brokers) if controller.live_brokers else -1
    md.orig_broker_id = md.controller_id
    md.orig_broker_name = "local"
    for b in sorted(controller.live_brokers):
        bm = BrokerMetadata()
        bm.id, bm.host, bm.port = b, "localhost", 9092 + b
        md.brokers[b] = bm
    with controller._lock:
        topics = {name: [s.copy() for s in t.partitions] for name, t in controller.topics.items()}
    names = [topic] if topic is not None else sorted(topics)
    for name in names:
        tm = TopicMetadata()
        tm.topic = name
        states = topics.get(name)
        if states is None:
            tm.error = kafka_error(KafkaError.UNKNOWN_TOPIC_OR_PART, "Broker: Unknown topic or partition")
        else:
            for p, state in enumerate(states):
                pm = PartitionMetadata()
                pm.id, pm.leader, pm.replicas, pm.isrs = p, state.leader, list(state.replicas), list(state.isr)
                if state.leader < 0:
                    pm.error = kafka_error(KafkaError.LEADER_NOT_AVAILABLE, "Broker: Leader not available")
                tm.partitions[p] = pm
        md.topics[name] = tm
    return md


def make_topic_partition(topic: str, partition: int, offset: int = -1001, metadata: str | None = None,
                         leader_epoch: int | None = None) -> Any:
    """A `confluent_kafka.TopicPartition` (whose constructor refuses None for metadata)."""
    from confluent_kafka import TopicPartition as ConfluentTopicPartition

    kwargs: dict[str, Any] = {}
    if metadata is not None:
        kwargs["metadata"] = metadata
    if leader_epoch is not None and leader_epoch >= 0:
        kwargs["leader_epoch"] = leader_epoch
    return ConfluentTopicPartition(topic, partition, offset, **kwargs)
