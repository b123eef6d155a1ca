"""topology.optimization `merge.repartition.topics` (Kafka's
InternalStreamsBuilder.mergeRepartitionTopics): the repartitions a key-changing step needs
downstream become one repartition right after that step.

Without it, every grouping, join or to_table below a key change has its own repartition topic:
`s = stream.select_key(f); s.group_by_key().count(); s.group_by_key().reduce(g)` writes each
record twice, through two topics. With it, Kafka's rewrite of the graph:

- For each key-changing step K, the optimizable repartitions R below it (a grouping's, a join's,
  to_table's, never KStream.repartition's) are found.
- One new repartition M is placed under K. It takes the first R's topic name and, as Kafka, the
  first key and value serdes given (a serde left to the config's default is Kafka's null serde);
  its nodes are named after that topic (`<topic>-sink`, `-filter`, `-source`).
- The step below K that leads to each R now reads M instead of K, so what lay between K and R
  runs after the repartition. Each R is removed, and what read R reads R's parent.

Eddy's rule is stricter than Kafka's in two ways, each leaving the repartitions as they are
(the topology is then what it is without the optimization, which is always correct):
- Between K and R only steps that pass records through unchanged may lie: filter, peek, a split's
  branching. Kafka also walks through steps that are neither key- nor value-changing, such as a
  `process()` step, whose output keys the merged topic would then partition by the wrong key.
  A `merge()` of streams is not walked through either; Kafka handles that case in its own way.
- The serdes given to the R of one K must agree (those left to the default agree with any).
  Kafka uses the first serde it finds, which the other groupings then read with.
"""

from __future__ import annotations

import copy
import logging
from typing import Optional

from streams import serdes as _serdes
from streams.dsl.graph import KEY_CHANGING, PASSES_THROUGH, GraphNode, RepartitionNode

log = logging.getLogger(__name__)

__all__ = ["merge_repartition_topics"]


def merge_repartition_topics(nodes: list[GraphNode]) -> list[GraphNode]:
    """`nodes` (in the order they were recorded, parents first) rewritten as the module doc
    says. The nodes given are not changed: those the rewrite changes are copies."""
    by_name = {node.name: node for node in nodes}
    below: dict[str, list[tuple[RepartitionNode, GraphNode]]] = {}  # K -> [(R, the step under K leading to R)]
    for node in nodes:
        if isinstance(node, RepartitionNode) and node.optimizable:
            found = _key_changer_above(node, by_name)
            if found is not None:
                below.setdefault(found[0], []).append((node, found[1]))
    merged: dict[str, RepartitionNode] = {}  # K -> M
    reparent: dict[str, str] = {}  # a removed R -> what its readers read instead
    under_merged: dict[str, str] = {}  # a step under K that leads to an R -> K
    for changer, found in below.items():
        repartitions = [r for r, _child in found]
        key_serde = _common_serde([r.key_serde for r in repartitions])
        value_serde = _common_serde([r.value_serde for r in repartitions])
        if key_serde is None or value_serde is None:
            log.warning("topology.optimization merge.repartition.topics: the repartition topics %s below %s "
                        "are given different serdes; they are left as they are",
                        [r.topic for r in repartitions], changer)
            continue
        first = repartitions[0]
        topic = first.topic
        merged[changer] = RepartitionNode(f"{topic}-source", (changer,), topic, f"{topic}-filter", f"{topic}-sink",
                                          first.filter_supplier, key_serde, value_serde, optimizable=True)
        for repartition, child in found:
            if child is repartition:
                reparent[repartition.name] = merged[changer].name
            else:
                reparent[repartition.name] = repartition.parents[0]
                under_merged[child.name] = changer
    if not merged:
        return list(nodes)
    out: list[GraphNode] = []
    for node in nodes:
        if node.name in reparent:
            continue
        parents = tuple(reparent.get(p, p) for p in node.parents)
        changer = under_merged.get(node.name)
        if changer is not None:
            parents = tuple(merged[changer].name if p == changer else p for p in parents)
        if parents != node.parents:
            node = copy.copy(node)
            node.parents = parents
        out.append(node)
        if node.name in merged:
            out.append(merged[node.name])
    return out


def _key_changer_above(repartition: RepartitionNode,
                       by_name: dict[str, GraphNode]) -> Optional[tuple[str, GraphNode]]:
    """(K, the step under K on the way) when `repartition` reads a key-changing step K through
    steps that pass records through only, each with one parent; else None."""
    child: GraphNode = repartition
    while len(child.parents) == 1:
        parent = by_name.get(child.parents[0])
        if parent is None:
            return None
        if parent.role == KEY_CHANGING:
            return parent.name, child
        if parent.role != PASSES_THROUGH:
            return None
        child = parent
    return None


def _common_serde(serdes: list) -> object:
    """The serde the repartitions share: the one given (all that are given must be the same
    object), else the first stand-in for the config's default; None when two given differ."""
    given = [serde for serde in serdes if not isinstance(serde, _serdes.ConfigDefaultSerde)]
    if not given:
        return serdes[0]
    if any(serde is not given[0] for serde in given[1:]):
        return None
    return given[0]
