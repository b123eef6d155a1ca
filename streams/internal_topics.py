"""Creation and validation of internal topics (changelogs and repartition topics).

Written only against confluent-kafka's ``AdminClient`` API, so the same manager
works on the Kafka backend and on the embedded cluster's admin client.
"""

from __future__ import annotations

import logging
import re
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Mapping

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import NewTopic

from state.stores import WINDOW_CHANGELOG_ADDITIONAL_RETENTION_MS
from streams.errors import InternalTopicError, InternalTopicPartitionMismatchError

logger = logging.getLogger(__name__)

#: Kafka Streams' extra retention for windowed changelogs beyond the store's retention.

_LEGAL_TOPIC = re.compile(r"^[a-zA-Z0-9._-]+$")
_MAX_TOPIC_LENGTH = 249

# Errors after which creating the topic again can succeed.
_RETRIABLE_CREATE = frozenset({
    KafkaError._TIMED_OUT, KafkaError.REQUEST_TIMED_OUT, KafkaError.NOT_CONTROLLER,
    KafkaError.LEADER_NOT_AVAILABLE, KafkaError._TRANSPORT, KafkaError.COORDINATOR_NOT_AVAILABLE,
    KafkaError.NETWORK_EXCEPTION, KafkaError.BROKER_NOT_AVAILABLE,
})


def changelog_topic_config(window_retention_ms: int | None = None,
                           extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The config of a changelog topic: compacted; for window stores also deleted after retention."""
    if window_retention_ms is None:
        config = {"cleanup.policy": "compact"}
    else:
        if window_retention_ms < 0:
            raise InternalTopicError(f"window retention must be >= 0 ms, got {window_retention_ms}")
        config = {"cleanup.policy": "compact,delete",
                  "retention.ms": str(window_retention_ms + WINDOW_CHANGELOG_ADDITIONAL_RETENTION_MS)}
    config.update(extra or {})
    return config


def repartition_topic_config(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The config of a repartition topic: deleted by policy, never retained by time
    (the runtime purges consumed records with delete_records, as Kafka Streams does)."""
    config = {"cleanup.policy": "delete", "segment.bytes": "52428800", "retention.ms": "-1"}
    config.update(extra or {})
    return config


@dataclass(frozen=True)
class InternalTopicSpec:
    """What an internal topic must look like. ``replication_factor=-1`` uses the broker default."""

    partitions: int
    config: Mapping[str, str] = field(default_factory=dict)
    replication_factor: int = -1


def validate_topic_name(topic: Any) -> None:
    """Raise `InternalTopicError` unless ``topic`` is a legal Kafka topic name."""
    if not isinstance(topic, str) or not topic:
        raise InternalTopicError(f"topic name must be a non-empty string, got {topic!r}", None)
    if topic in (".", "..") or len(topic) > _MAX_TOPIC_LENGTH or not _LEGAL_TOPIC.match(topic):
        raise InternalTopicError(
            f"illegal topic name {topic!r}: use 1-{_MAX_TOPIC_LENGTH} characters of "
            "[a-zA-Z0-9._-], not '.' or '..'", topic)


class InternalTopicManager:
    """Makes internal topics exist with the partition counts and configs a topology needs."""

    def __init__(self, admin: Any, *, timeout_s: float = 30.0, request_timeout_s: float = 10.0) -> None:
        self._admin = admin
        self._timeout_s = timeout_s
        self._request_timeout_s = request_timeout_s
        self._wakeup = threading.Event()  # only ever waited on, for a short backoff

    def make_ready(self, specs: Mapping[str, InternalTopicSpec]) -> list[str]:
        """Create the missing topics and validate the existing ones; return the created names.

        Raises `InternalTopicPartitionMismatchError` when an existing topic has another
        partition count, `InternalTopicError` when a topic cannot be created or does not
        show up in metadata before the deadline.
        """
        self._check_specs(specs)
        if not specs:
            return []
        deadline = time.monotonic() + self._timeout_s
        existing = self._partition_counts(deadline)
        for topic, spec in specs.items():
            if topic in existing:
                self._check_count(topic, spec, existing[topic])
        missing = {t: s for t, s in specs.items() if t not in existing}
        created = self._create(missing, deadline)
        self._await_metadata(specs, deadline)
        if created:
            logger.info("created internal topics %s", sorted(created))
        return sorted(created)

    # -- steps ----------------------------------------------------------------------

    @staticmethod
    def _check_specs(specs: Any) -> None:
        if not isinstance(specs, Mapping):
            raise InternalTopicError(f"specs must be a dict of topic -> InternalTopicSpec, "
                                     f"got {type(specs).__name__}")
        for topic, spec in specs.items():
            validate_topic_name(topic)
            if not isinstance(spec, InternalTopicSpec):
                raise InternalTopicError(f"spec for topic {topic!r} must be an InternalTopicSpec, "
                                         f"got {type(spec).__name__}", topic)
            if isinstance(spec.partitions, bool) or not isinstance(spec.partitions, int) or spec.partitions < 1:
                raise InternalTopicError(f"topic {topic!r} needs a partition count >= 1, "
                                         f"got {spec.partitions!r}", topic)
            rf = spec.replication_factor
            if isinstance(rf, bool) or not isinstance(rf, int) or (rf < 1 and rf != -1):
                raise InternalTopicError(f"topic {topic!r} needs a replication factor >= 1 "
                                         f"(or -1 for the broker default), got {rf!r}", topic)

    @staticmethod
    def _check_count(topic: str, spec: InternalTopicSpec, actual: int) -> None:
        if actual != spec.partitions:
            raise InternalTopicPartitionMismatchError(topic, spec.partitions, actual)

    def _partition_counts(self, deadline: float) -> dict[str, int]:
        last: Exception | None = None
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise InternalTopicError(f"could not read topic metadata before the deadline ({last})")
            try:
                metadata = self._admin.list_topics(timeout=min(self._request_timeout_s, remaining))
            except KafkaException as exc:
                last = exc
                self._wakeup.wait(0.1)
                continue
            return {name: len(t.partitions) for name, t in metadata.topics.items()
                    if t.error is None or t.error.code() == KafkaError.NO_ERROR}

    def _create(self, missing: Mapping[str, InternalTopicSpec], deadline: float) -> set[str]:
        created: set[str] = set()
        pending = dict(missing)
        while pending:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise InternalTopicError(f"internal topics {sorted(pending)} were not created before "
                                         "the deadline", next(iter(pending)))
            new_topics = [NewTopic(topic, num_partitions=spec.partitions,
                                   replication_factor=spec.replication_factor,
                                   config={k: str(v) for k, v in spec.config.items()})
                          for topic, spec in pending.items()]
            futures = self._admin.create_topics(
                new_topics, request_timeout=min(self._request_timeout_s, remaining))
            retry: dict[str, InternalTopicSpec] = {}
            for topic, future in futures.items():
                try:
                    future.result()
                    created.add(topic)
                except KafkaException as exc:
                    error = exc.args[0]
                    code = error.code()
                    if code == KafkaError.TOPIC_ALREADY_EXISTS:
                        # Another instance won the race (or a deletion is still in progress):
                        # its partition count is checked against metadata below.
                        continue
                    if code in _RETRIABLE_CREATE or error.retriable():
                        retry[topic] = pending[topic]
                        continue
                    raise InternalTopicError(f"cannot create internal topic {topic!r}: "
                                             f"{error.name()}: {error.str()}", topic) from exc
            pending = retry
            if pending:
                self._wakeup.wait(0.1)
        return created

    def _await_metadata(self, specs: Mapping[str, InternalTopicSpec], deadline: float) -> None:
        """Wait until every topic is in metadata with a leader for each partition."""
        while True:
            remaining = deadline - time.monotonic()
            try:
                metadata = self._admin.list_topics(timeout=max(0.1, min(self._request_timeout_s, remaining)))
            except KafkaException:
                metadata = None
            not_ready = []
            for topic, spec in specs.items():
                info = metadata.topics.get(topic) if metadata is not None else None
                if info is None or (info.error is not None and info.error.code() != KafkaError.NO_ERROR):
                    not_ready.append(topic)
                    continue
                if len(info.partitions) != spec.partitions and len(info.partitions) > 0:
                    self._check_count(topic, spec, len(info.partitions))
                if len(info.partitions) == 0 or any(p.leader < 0 for p in info.partitions.values()):
                    not_ready.append(topic)
            if not not_ready:
                return
            if time.monotonic() >= deadline:
                raise InternalTopicError(f"internal topics {sorted(not_ready)} did not appear in metadata "
                                         f"with a leader for every partition within {self._timeout_s}s",
                                         not_ready[0])
            self._wakeup.wait(0.05)
