"""Which internal topics a topology needs, with their partition counts and configs.

Kafka Streams' rules (RepartitionTopics, CopartitionedTopicsEnforcer): a repartition topic
gets the count the topology fixed for it (`repartition(num_partitions=)`); else, when a
co-partition group (the inputs of a join or a cogroup) joins it with user topics, theirs; else
the maximum partition count of the source topics of the sub-topology writing to it (resolved
upstream first, since that sub-topology may itself read a repartition topic); a group of
internal topics only is sized last (streams/runtime/copartitioning.py checks every group). A
changelog topic gets the partition count of its sub-topology (the maximum over its source
topics), `cleanup.policy=compact`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Optional

from streams.internal_topics import InternalTopicSpec, changelog_topic_config, repartition_topic_config
from streams.runtime.copartitioning import enforce_copartitioning
from streams.runtime.errors import MissingSourceTopicError
from streams.topology import Subtopology, Topology, changelog_topic_name


@dataclass(frozen=True)
class TopicPlan:
    specs: dict                # decorated internal topic -> InternalTopicSpec
    partitions_of_sub: dict    # sub-topology id -> number of tasks
    source_topics: list        # every decorated source topic (main consumer subscription)


def _changelog_config(builder: Any, additional_retention_ms: Optional[int], defaults: Mapping[str, str]) -> dict:
    real = builder.store_builder() if callable(getattr(builder, "store_builder", None)) else builder
    fn = getattr(real, "changelog_topic_config", None)
    if callable(fn):
        return dict(fn(additional_retention_ms=additional_retention_ms, defaults=defaults))
    return changelog_topic_config(extra={**defaults, **(getattr(real, "log_config", None) or {})})


def _logged(builder: Any) -> bool:
    return bool(getattr(builder, "logging_enabled", True))


def _copartition(topology: Topology, application_id: str, internal: set, counts: dict, enforced: dict, *,
                 with_user_topics: bool) -> None:
    """Size the repartition topics of the co-partition groups that have user topics
    (`with_user_topics`: their count is known before the writers are looked at, which also breaks
    a foreign-key join's cycle, each side writing the topic the other reads), or of the groups
    of internal topics only, in `counts`; CoPartitioningError (naming the topics as the cluster
    knows them, with their counts) when they cannot agree."""
    for group in topology.copartition_groups():
        has_user_topics = any(t not in internal for t in group)
        if has_user_topics is not with_user_topics:
            continue
        named = {topology.decorate_topic(t, application_id): t for t in group}
        sized = enforce_copartitioning(
            named, partition_counts={d: counts[t] for d, t in named.items() if t not in internal},
            repartition_topics={d: counts.get(t) for d, t in named.items() if t in internal},
            enforced=[d for d, t in named.items() if t in enforced])
        for decorated, count in sized.items():
            counts[named[decorated]] = count


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
                         existing_partitions: Mapping[str, int], replication_factor: int = -1,
                         additional_retention_ms: Optional[int] = None,
                         topic_configs: Optional[Mapping[str, str]] = None) -> TopicPlan:
    """`existing_partitions` maps topic -> partition count for the topics that exist;
    `additional_retention_ms`: windowstore.changelog.additional.retention.ms (None: Kafka's
    default), which a windowed store's changelog retains beyond the store; `topic_configs`: the
    app's `topic.`-prefixed configs, over the library's own for every internal topic and under a
    store's logging config (as Kafka's InternalTopicManager). Raises MissingSourceTopicError
    naming the missing external source topics."""
    defaults = dict(topic_configs or {})
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
    enforced = {t: n for t, n in topology.enforced_partitions.items() if t in internal}
    counts.update(enforced)
    _copartition(topology, application_id, internal, counts, enforced, with_user_topics=True)
    _resolve_from_writers(topology, subtopologies, internal, counts, application_id, existing_partitions)
    _copartition(topology, application_id, internal, counts, enforced, with_user_topics=False)
    specs: dict[str, InternalTopicSpec] = {}
    for t in internal:
        if t in counts:
            specs[topology.decorate_topic(t, application_id)] = InternalTopicSpec(
                counts[t], repartition_topic_config(defaults), replication_factor)
    partitions_of_sub = {}
    for s in subtopologies:
        n = max((counts[t] for t in s.source_topics), default=1)
        partitions_of_sub[s.id] = n
        for store in s.store_names:
            builder = topology.store_builder(store)
            if _logged(builder):
                specs[changelog_topic_name(application_id, store)] = InternalTopicSpec(
                    n, _changelog_config(builder, additional_retention_ms, defaults), replication_factor)
    sources = sorted({topology.decorate_topic(t, application_id) for s in subtopologies for t in s.source_topics})
    return TopicPlan(specs, partitions_of_sub, sources)
