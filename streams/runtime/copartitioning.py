"""Co-partitioning of joined inputs (Kafka's CopartitionedTopicsEnforcer).

What the runtime must call. At start (and on every assignment that re-reads metadata), for each
co-partition group of the topology (the source and repartition topics of one join, or of a
sub-topology that joins them) call `enforce_copartitioning(group, partition_counts=...,
repartition_topics=..., enforced=...)`:
- `partition_counts`: the partition count of every user (non-repartition) topic of the group,
  from the cluster's metadata; a missing topic raises MissingSourceTopicError.
- `repartition_topics`: each repartition topic of the group with the count known so far (from its
  upstream sources), or None; `enforced` names those whose count the user fixed
  (`repartition(num_partitions=)`).
It returns the count every repartition topic of the group must be created with, or raises
CoPartitioningError naming the topics and their counts.

Rules (Kafka's): with at least one user topic in the group, all user topics must have the same
count and the repartition topics take it; when the group has only repartition topics, those
with an enforced count must agree and the others take it, and without any enforced count they
all take the largest known count. A repartition topic whose enforced count differs from the
group's is an error.
"""

from __future__ import annotations

import logging
from typing import Collection, Iterable, Mapping, Optional

from streams.runtime.errors import CoPartitioningError, MissingSourceTopicError

__all__ = ["enforce_copartitioning", "check_copartitioned"]

log = logging.getLogger(__name__)


def _counts(counts: Mapping[str, Optional[int]]) -> str:
    return ", ".join(f"{topic}={counts[topic]}" for topic in sorted(counts))


def _error(message: str, counts: Mapping[str, Optional[int]]) -> CoPartitioningError:
    error = CoPartitioningError(message)
    error.partition_counts = dict(counts)  # for callers and tests: which topics, which counts
    return error


def check_copartitioned(partition_counts: Mapping[str, int]) -> int:
    """The common partition count of joined user topics; CoPartitioningError naming every topic
    and its count when they differ."""
    if not partition_counts:
        raise ValueError("check_copartitioned needs at least one topic")
    distinct = set(partition_counts.values())
    if len(distinct) != 1:
        raise _error(f"Topics not co-partitioned: [{_counts(partition_counts)}]", partition_counts)
    return distinct.pop()


def enforce_copartitioning(group: Iterable[str], *, partition_counts: Mapping[str, int],
                           repartition_topics: Mapping[str, Optional[int]],
                           enforced: Collection[str] = ()) -> dict[str, int]:
    """The partition count of each repartition topic of `group` (see the module docstring)."""
    group = set(group)
    if not group:
        return {}
    # sorted: the first mismatch named is the same on every run (a set has no fixed order)
    repartition = {topic: repartition_topics[topic] for topic in sorted(group) if topic in repartition_topics}
    user_topics = group - repartition.keys()
    user_counts = {}
    for topic in user_topics:
        count = partition_counts.get(topic)
        if count is None:
            raise MissingSourceTopicError(f"Topic not found: {topic} (co-partition group {sorted(group)})")
        user_counts[topic] = count
    if user_counts:
        target = check_copartitioned(user_counts)
    else:
        fixed = {topic: repartition[topic] for topic in repartition if topic in enforced}
        if fixed:
            if None in fixed.values() or len(set(fixed.values())) != 1:
                raise _error(f"Following topics do not have the same number of partitions: [{_counts(fixed)}]",
                             fixed)
            target = next(iter(fixed.values()))
        else:
            known = [count for count in repartition.values() if count is not None and count > 0]
            if not known:
                raise _error(f"Could not validate the copartitioning of topics: {sorted(repartition)}", repartition)
            target = max(known)
    result = {}
    for topic, count in repartition.items():
        if topic in enforced and count != target:
            raise _error(f"Number of partitions [{count}] of repartition topic [{topic}] doesn't match number of "
                         f"partitions [{target}] of the source topic. Co-partition group: "
                         f"[{_counts({**user_counts, **repartition})}]", {**user_counts, **repartition})
        result[topic] = target
    log.debug("co-partition group %s: repartition topics get %d partitions", sorted(group), target)
    return result
