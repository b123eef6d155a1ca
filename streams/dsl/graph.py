"""The DSL's logical graph: nodes recorded by StreamsBuilder/KStream/KTable, replayed into a Topology.

Keeping the graph separate from the Topology lets `build()` run more than once and leaves room for
graph rewrites (repartition merging, key-changing optimizations) when the full DSL lands.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Optional

from streams.topology import Topology


@dataclass
class GraphNode:
    """One DSL step. `write(topology)` adds its topology node(s), stores and internal topics."""

    name: str
    parents: tuple[str, ...]
    write: Callable[[Topology], None]
    kind: str = "processor"
    attrs: dict[str, Any] = field(default_factory=dict)


class Graph:
    def __init__(self) -> None:
        self.nodes: list[GraphNode] = []
        self._index = 0

    def next_index(self) -> int:
        index = self._index
        self._index += 1
        return index

    def new_name(self, prefix: str) -> str:
        """Kafka's generated names: prefix + 10-digit global index (e.g. KSTREAM-SOURCE-0000000000)."""
        return f"{prefix}{self.next_index():010d}"

    def add(self, node: GraphNode) -> GraphNode:
        self.nodes.append(node)
        return node

    def to_topology(self, topology: Optional[Topology] = None) -> Topology:
        topology = topology if topology is not None else Topology()
        for node in self.nodes:
            node.write(topology)
        return topology
