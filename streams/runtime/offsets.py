"""Where a task's input partitions start: the group's committed offset, else the reset policy of
the partition's topic (Kafka Streams' per-source `offset_reset`; repartition topics always from
the earliest offset; other topics by the main consumer's `auto.offset.reset`). The same policy
moves a partition whose committed offset is out of range (its records deleted): when the topics'
policies differ, the main consumer runs with auto.offset.reset "error" (Kafka Streams sets "none")
and the task manager resets the partition itself (`reset_target`).

The stream thread assigns these offsets explicitly instead of letting the client look up the
committed ones itself. librdkafka leaves a partition assigned without an offset unfetched for
good when its OffsetFetch meets a stale coordinator (confluentinc/librdkafka#5586: a silent
stall after the coordinator moves, e.g. in a rolling restart); `committed_offsets` retries that
case until its deadline and then fails loudly."""

from __future__ import annotations

import logging
import time
from typing import Any, Iterable, Optional

from confluent_kafka import OFFSET_BEGINNING, OFFSET_END, OFFSET_STORED, KafkaError, KafkaException, TopicPartition

log = logging.getLogger(__name__)

# the consumer's auto.offset.reset values, librdkafka's aliases included
_EARLIEST = frozenset({"earliest", "smallest", "beginning"})
_LATEST = frozenset({"latest", "largest", "end"})

# coordinator errors a committed-offset lookup meets while the group's coordinator moves or loads
RETRIABLE_COORDINATOR_ERRORS = frozenset({
    KafkaError.NOT_COORDINATOR, KafkaError.COORDINATOR_NOT_AVAILABLE, KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
    KafkaError._WAIT_COORD, KafkaError._TIMED_OUT, KafkaError._TRANSPORT, KafkaError.REQUEST_TIMED_OUT,
})

# an offset commit's errors that a later try may not meet (Kafka's retriable ones for OffsetCommit)
RETRIABLE_COMMIT_ERRORS = RETRIABLE_COORDINATOR_ERRORS | frozenset({
    KafkaError.NOT_ENOUGH_REPLICAS, KafkaError.NOT_ENOUGH_REPLICAS_AFTER_APPEND,
})

# Kafka Streams' main consumer auto.offset.reset unless the app sets main.consumer.auto.offset.reset
DEFAULT_RESET_POLICY = "earliest"

# Kafka's default.api.timeout.ms: how long a committed-offset lookup keeps trying
COMMITTED_TIMEOUT_S = 60.0


def reset_policies(topology: Any, subtopologies: Iterable[Any], application_id: str,
                   default_policy: str) -> dict[str, str]:
    """Each source topic's policy (by its real, decorated name): Topology.offset_reset_of, else
    `default_policy`."""
    return {topology.decorate_topic(topic, application_id): topology.offset_reset_of(topic) or default_policy
            for sub in subtopologies for topic in sub.source_topics}


def consumer_reset_policy(policies: dict[str, str], default_policy: str) -> str:
    """The main consumer's auto.offset.reset: the one policy all topics share, else "error" (the
    task manager then applies each topic's own)."""
    return default_policy if all(p == default_policy for p in policies.values()) else "error"


def reset_target(consumer: Any, topic: str, partition: int, policy: Optional[str]) -> int:
    """The offset a partition with no valid position resets to under `policy` ("latest": its end
    offset, read now); OFFSET_STORED when the policy is neither earliest nor latest."""
    offset = reset_offset(policy)
    if offset == OFFSET_END:
        offset = consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=30, cached=False)[1]
    return offset


def reset_offset(policy: Optional[str]) -> int:
    """The logical offset a policy starts from: OFFSET_BEGINNING, OFFSET_END, or OFFSET_STORED for
    any other value (the consumer's own auto.offset.reset then decides, e.g. `error`)."""
    if policy in _EARLIEST:
        return OFFSET_BEGINNING
    if policy in _LATEST:
        return OFFSET_END
    return OFFSET_STORED


def committed_offsets(consumer: Any, tps: list[tuple[str, int]], timeout_s: float = COMMITTED_TIMEOUT_S
                      ) -> dict[tuple[str, int], tuple[int, Optional[str]]]:
    """The offsets and offset metadata `consumer`'s group committed for `tps` (only those
    committed). A coordinator that moved, is loading or is not known yet is asked again until
    `timeout_s`; then, or on any other error, the client's KafkaException is raised."""
    if not tps:
        return {}
    deadline = time.monotonic() + timeout_s
    backoff = 0.1
    while True:
        remaining = deadline - time.monotonic()
        try:
            got = consumer.committed([TopicPartition(t, p) for t, p in tps], timeout=max(1.0, min(30.0, remaining)))
        except KafkaException as exc:
            err = exc.args[0] if exc.args else None
            code = err.code() if isinstance(err, KafkaError) else None
            if code not in RETRIABLE_COORDINATOR_ERRORS or time.monotonic() + backoff >= deadline:
                raise
            log.info("committed offsets of %s not read (%s): asking again in %.1fs", tps, err, backoff)
            time.sleep(backoff)  # a client retry backoff, not a synchronisation
            backoff = min(backoff * 2, 1.0)
            continue
        return {(tp.topic, tp.partition): (tp.offset, tp.metadata) for tp in got
                if tp.offset is not None and tp.offset >= 0}


def start_positions(consumer: Any, partitions: Iterable[TopicPartition],
                    committed: dict[tuple[str, int], tuple[int, Optional[str]]], policies: dict[str, str],
                    default_policy: Optional[str]) -> list[TopicPartition]:
    """`partitions` with the offset each starts from: the `committed` one (committed_offsets'
    answer), else its topic's reset policy (`policies`, else `default_policy`). "latest" is
    resolved to the partition's end offset now (the last stable one under read_committed), so
    that where the partition started is known before its first record arrives (max.task.idle.ms
    measures lag from it)."""
    out = []
    for tp in partitions:
        found = committed.get((tp.topic, tp.partition))
        offset = found[0] if found is not None else reset_target(
            consumer, tp.topic, tp.partition, policies.get(tp.topic, default_policy))
        out.append(TopicPartition(tp.topic, tp.partition, offset))
    return out
