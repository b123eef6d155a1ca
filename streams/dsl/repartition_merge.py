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

Which key change a repartition R belongs to is Kafka's rule (getKeyChangingParentNode): the
nearest step above R that changes keys or values (select_key, map, flat_map, a grouping's key
selection; map_values, flat_map_values), searched as Kafka's findParentNodeMatching searches,
must change keys; every other step in between (a filter, a split, a join with a global table,
...) is walked through and runs after the merged repartition. A value change in between leaves R
as it is. A `merge()` below key changes takes their repartitions over when all of them lie below
it (Kafka's maybeUpdateKeyChangingRepartitionNodeMap): the merged repartition then comes right
after the merge.

Where Eddy and Kafka differ (each of Eddy's choices leaves a topology that is always correct):
- A `process()` step stops the search as a value change does. Kafka 4.1 walks through one without
  stores (the merged topic is then partitioned by the keys before process() changed them: wrong
  groups) and fails to build ("Found a null keyChangingChild node") for two groupings below it.
- A `process_values()` step keeps keys and is walked through, as Kafka walks through it (the
  merged repartition comes before it, which its fixed keys make right). Kafka 4.1 fails to build
  ("Found a null keyChangingChild node") when two groupings lie below one; Eddy merges them.
- The serdes given to the R of one K must agree (those left to the default agree with any);
  Kafka uses the first serde it finds, which the other groupings then read with. Repartitions
  given different serdes are left as they are, with a warning.
"""

from __future__ import annotations

import copy
import logging
from typing import Callable, Optional

from streams import serdes as _serdes
from streams.dsl.graph import KEY_CHANGING, MERGING, OPAQUE, VALUE_CHANGING, GraphNode, RepartitionNode

log = logging.getLogger(__name__)

__all__ = ["merge_repartition_topics"]


def merge_repartition_topics(nodes: list[GraphNode]) -> list[GraphNode]:
    """`nodes` (in the order they were recorded, parents first) rewritten as the module doc
    says. The nodes given are not changed: those the rewrite changes are copies."""
    by_name = {node.name: node for node in nodes}
    owned: dict[str, list[RepartitionNode]] = {}  # K -> its repartitions, in recorded order
    for node in nodes:
        if isinstance(node, RepartitionNode) and node.optimizable:
            changer = _key_changer_of(node, by_name)
            if changer is not None:
                owned.setdefault(changer, []).append(node)
    _merges_take_over(nodes, owned, by_name)
    merged: dict[str, RepartitionNode] = {}  # K -> M
    reparent: dict[str, str] = {}  # a removed R -> what its readers read instead
    under_merged: dict[str, str] = {}  # a step under K that leads to an R -> K
    for changer, repartitions in owned.items():
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
        for repartition in repartitions:
            child = _find_upward(repartition, lambda n, k=changer: k in n.parents, by_name)
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


def _find_upward(start: GraphNode, matches: Callable[[GraphNode], bool],
                 by_name: dict[str, GraphNode]) -> Optional[GraphNode]:
    """Kafka's findParentNodeMatching, its search order kept: `start` itself, else the first of
    its parents that matches, else (no parent matching) what the search above its last parent
    found. Each node's answer is computed once (merges make diamonds, which Kafka's recursion
    searches once per path)."""
    known: dict[str, Optional[GraphNode]] = {}

    def search(node: GraphNode) -> Optional[GraphNode]:
        if node.name in known:
            return known[node.name]
        found = node if matches(node) else None
        if found is None:
            for name in node.parents:
                parent = by_name.get(name)
                if parent is None:
                    continue
                if matches(parent):
                    found = parent
                    break
                found = search(parent)
        known[node.name] = found
        return found
    return search(start)


def _key_changer_of(repartition: RepartitionNode, by_name: dict[str, GraphNode]) -> Optional[str]:
    """The key-changing step K a repartition belongs to (Kafka's getKeyChangingParentNode): the
    nearest step above that changes keys or values must be K; None when it changes values only
    (or is a process()) or there is none."""
    changing = _find_upward(repartition, lambda n: n.role in (KEY_CHANGING, VALUE_CHANGING, OPAQUE), by_name)
    keyed = _find_upward(repartition, lambda n: n.role == KEY_CHANGING, by_name)
    return keyed.name if changing is not None and changing is keyed else None


def _merges_take_over(nodes: list[GraphNode], owned: dict[str, list[RepartitionNode]],
                      by_name: dict[str, GraphNode]) -> None:
    """Kafka's maybeUpdateKeyChangingRepartitionNodeMap, in place: a merge below a key change
    whose repartitions all lie below the merge takes them over (their merged repartition then
    comes right after the merge)."""
    taken: dict[str, list[str]] = {}  # merge -> the key changers it takes over
    for merge in nodes:
        if merge.role != MERGING:
            continue
        for changer, repartitions in owned.items():
            below = all(_find_upward(r, lambda n, m=merge.name: m in n.parents, by_name) is not None
                        for r in repartitions)
            if below and _find_upward(merge, lambda n, k=changer: k in n.parents, by_name) is not None:
                taken.setdefault(merge.name, []).append(changer)
    given_up: set[str] = set()
    for merge, changers in taken.items():
        repartitions = owned.get(merge, [])
        for changer in changers:
            repartitions += [r for r in owned[changer] if r not in repartitions]
            given_up.add(changer)
        owned[merge] = repartitions
    for changer in given_up:
        owned.pop(changer, None)


def _common_serde(serdes: list) -> object:
    """The serde the repartitions share: the one given (all that are given must be the same
    object), else the first stand-in for the config's default; None when two given differ."""
    given = [serde for serde in serdes if not isinstance(serde, _serdes.ConfigDefaultSerde)]
    if not given:
        return serdes[0]
    if any(serde is not given[0] for serde in given[1:]):
        return None
    return given[0]
