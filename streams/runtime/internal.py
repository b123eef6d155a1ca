"""Which internal topics a topology needs, with their partition counts and configs.

Kafka Streams' rules: a repartition topic gets the maximum partition count of the source
topics of the sub-topology writing to it (resolved upstream first, since that sub-topology may
itself read a repartition topic), unless it is in a co-partition group (the inputs of a join):
the group's user topics must have one partition count (else CoPartitioningError naming them)
and its repartition topics take it (Kafka's CopartitionedTopicsEnforcer, in
streams/runtime/copartitioning.py); a changelog topic gets the partition count of its
sub-topology (the maximum over its source topics), `cleanup.policy=compact`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from streams.internal_topics import InternalTopicSpec, changelog_topic_config, repartition_topic_config
from streams.runtime.copartitioning import enforce_copartitioning
from streams.runtime.errors import MissingSourceTopicError
from streams.topology import Subtopology, Topology, changelog_topic_name


@dataclass(frozen=True)
class TopicPlan:
    specs: dict                # decorated internal topic -> InternalTopicSpec
    partitions_of_sub: dict    # sub-topology id -> number of tasks
    source_topics: list        # every decorated source topic (main consumer subscription)


def _changelog_config(builder: Any) -> dict:
    real = builder.store_builder() if callable(getattr(builder, "store_builder", None)) else builder
    fn = getattr(real, "changelog_topic_config", None)
    if callable(fn):
        return dict(fn())
    return changelog_topic_config(extra=getattr(real, "log_config", None) or {})


def _logged(builder: Any) -> bool:
    return bool(getattr(builder, "logging_enabled", True))


def _resolve_repartition_counts(topology: Topology, subtopologies: list[Subtopology], application_id: str,
                                existing_partitions: Mapping[str, int], internal: set,
                                known: dict[str, int]) -> dict[str, int]:
    """Every topic's partition count: `known` ones as given, a repartition topic from the
    sub-topologies writing it (the largest count of their sources), upstream first; one with no
    writer keeps the count it exists with. In a cycle of writers (a foreign-key join whose
    sides both read repartition topics) the first topic with a known upstream count takes the
    largest of those, as Kafka's RepartitionTopics does."""
    counts = dict(known)
    writers: dict[str, list[Subtopology]] = {}
    for s in subtopologies:
        for t in s.sink_topics:
            if t in internal:
                writers.setdefault(t, []).append(s)

    def upstream(t: str) -> list[str]:
        return [u for s in writers.get(t, []) for u in s.source_topics]

    pending = sorted(t for t in internal if t not in counts
                     and (t in writers or any(t in s.source_topics for s in subtopologies)))
    while pending:
        progressed = False
        for t in list(pending):
            ups = upstream(t)
            decorated = topology.decorate_topic(t, application_id)
            if ups and all(u in counts for u in ups):
                counts[t] = max(counts[u] for u in ups)
            elif not ups and decorated in existing_partitions:
                counts[t] = existing_partitions[decorated]
            else:
                continue
            pending.remove(t)
            progressed = True
        if not progressed:
            partial = next((t for t in pending if any(u in counts for u in upstream(t))), None)
            if partial is None:
                raise MissingSourceTopicError(
                    f"cannot determine the partition count of internal topics {sorted(pending)}")
            counts[partial] = max(counts[u] for u in upstream(partial) if u in counts)
            pending.remove(partial)
    return counts


def plan_internal_topics(topology: Topology, subtopologies: list[Subtopology], application_id: str,
                         existing_partitions: Mapping[str, int], replication_factor: int = -1) -> TopicPlan:
    """`existing_partitions` maps topic -> partition count for the topics that exist. Raises
    MissingSourceTopicError naming the missing external source topics."""
    internal = set(topology.internal_topics)
    missing = sorted({t for s in subtopologies for t in s.source_topics
                      if t not in internal and t not in existing_partitions})
    if missing:
        raise MissingSourceTopicError(
            f"source topics {missing} do not exist; create them before starting the application "
            f"{application_id!r}")
    user_counts: dict[str, int] = {}  # undecorated topic -> partitions
    for s in subtopologies:
        for t in s.source_topics:
            if t not in internal:
                user_counts[t] = existing_partitions[t]
    groups = topology.copartition_groups()
    # a group with user topics: they must agree, and its repartition topics take their count,
    # known before any writer is looked at (which also breaks a foreign-key join's cycle)
    fixed: dict[str, int] = {}  # repartition topics whose count their co-partition group sets
    for group in groups:
        if group - internal:
            fixed.update(enforce_copartitioning(group, partition_counts=user_counts,
                                                repartition_topics=dict.fromkeys(group & internal)))
    for _ in range(len(internal) + 1):
        counts = _resolve_repartition_counts(topology, subtopologies, application_id, existing_partitions,
                                             internal, {**user_counts, **fixed})
        # a group of repartition topics only: they all take the largest of their counts
        enforced = dict(fixed)
        for group in groups:
            if group <= internal:
                enforced.update(enforce_copartitioning(
                    group, partition_counts={}, repartition_topics={t: counts.get(t) for t in group}))
        if enforced == fixed:
            break
        # what is written downstream of a topic that took its group's count is resolved again
        # (a fixed count stays fixed, so this settles within a few rounds)
        fixed = enforced
    specs: dict[str, InternalTopicSpec] = {}
    for t in internal:
        if t in counts:
            specs[topology.decorate_topic(t, application_id)] = InternalTopicSpec(
                counts[t], repartition_topic_config(), replication_factor)
    partitions_of_sub = {}
    for s in subtopologies:
        n = max((counts[t] for t in s.source_topics), default=1)
        partitions_of_sub[s.id] = n
        for store in s.store_names:
            builder = topology.store_builder(store)
            if _logged(builder):
                specs[changelog_topic_name(application_id, store)] = InternalTopicSpec(
                    n, _changelog_config(builder), replication_factor)
    sources = sorted({topology.decorate_topic(t, application_id) for s in subtopologies for t in s.source_topics})
    return TopicPlan(specs, partitions_of_sub, sources)
