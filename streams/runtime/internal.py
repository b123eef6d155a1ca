"""Which internal topics a topology needs, with their partition counts and configs.

Kafka Streams' rules: a repartition topic gets the maximum partition count of the source
topics of the sub-topology writing to it (resolved upstream first, since that sub-topology may
itself read a repartition topic), unless a co-partition group joins it with user topics: then it
gets theirs (a group of internal topics only: the largest of theirs); a changelog topic gets the
partition count of its sub-topology (the maximum over its source topics), `cleanup.policy=compact`.
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


def _copartitioned(topology: Topology, internal: set, counts: Mapping[str, int], *, with_user_topics: bool) -> dict:
    """Kafka's CopartitionedTopicsEnforcer over the topology's co-partition groups: the internal
    topics of a group with user topics take their count (known before the writers are looked at,
    this also breaks the foreign-key join's cycle: each side writes the topic the other reads);
    a group of internal topics only takes the largest count of its members."""
    fixed: dict[str, int] = {}
    for group in topology.copartition_groups():
        user_counts = {t: counts[t] for t in group if t not in internal}
        if not group & internal or bool(user_counts) is not with_user_topics:
            continue
        fixed.update(enforce_copartitioning(group, partition_counts=user_counts,
                                            repartition_topics={t: counts.get(t) for t in group & internal}))
    return fixed


def _resolve_from_writers(topology: Topology, subtopologies: list[Subtopology], internal: set, counts: dict,
                          application_id: str, existing_partitions: Mapping[str, int]) -> None:
    """Each repartition topic not known yet gets the largest count of the source topics of the
    sub-topologies writing it, once they are all known (upstream first); a topic no sub-topology
    writes keeps its existing count. In a cycle of writers (a foreign-key join whose sides both
    read repartition topics) the first topic with a known upstream count takes the largest of
    those, as Kafka's RepartitionTopics does."""
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
            if ups and all(u in counts for u in ups):
                counts[t] = max(counts[u] for u in ups)
            elif not ups and topology.decorate_topic(t, application_id) in existing_partitions:
                counts[t] = existing_partitions[topology.decorate_topic(t, application_id)]
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
    counts: dict[str, int] = {}  # undecorated topic -> partitions
    for s in subtopologies:
        for t in s.source_topics:
            if t not in internal:
                counts[t] = existing_partitions[t]
    counts.update(_copartitioned(topology, internal, counts, with_user_topics=True))
    _resolve_from_writers(topology, subtopologies, internal, counts, application_id, existing_partitions)
    counts.update(_copartitioned(topology, internal, counts, with_user_topics=False))
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
