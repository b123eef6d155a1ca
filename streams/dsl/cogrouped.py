"""Cogrouped streams (Kafka's CogroupedKStreamImpl, TimeWindowedCogroupedKStreamImpl,
SlidingWindowedCogroupedKStreamImpl, SessionWindowedCogroupedKStreamImpl and
CogroupedStreamAggregateBuilder): several grouped streams, each with its own aggregator, kept in
one store as one table.

`grouped.cogroup(aggregator).cogroup(other, other_aggregator)...aggregate(initializer)` builds,
in Kafka's naming order: the store (`COGROUPKSTREAM-AGGREGATE-STATE-STORE-<n>` unless named);
a repartition topic for each grouped stream whose key changed, named after the store
(`<store>-repartition`, its nodes `<topic>-filter`/`-sink`/`-source`); one
`COGROUPKSTREAM-AGGREGATE-<n>` processor per stream, all connected to the store; and the
`COGROUPKSTREAM-MERGE-<n>` node the resulting KTable reads (old values on). The topics the
aggregate processors read form one co-partition group, checked (and its repartition topics
sized) when the application starts.

Kafka cannot build a cogroup with two re-keyed streams when their repartition topics are not
named (both would be `<store>-repartition`); here the first keeps that name and each later one
is `<store>-cogroup-<i>-repartition`, `i` its 0-based position in the cogroup.

The key serde is the store's (`Materialized`), else the first cogrouped stream's, else
`default.key.serde`; the value serde is the store's, else `default.value.serde` (never upstream,
as every aggregate of a new value type).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any, Callable, Optional

from streams.dsl import naming as N
from streams.dsl.graph import ProcessorGraphNode, ProcessorWithStoresNode, StatefulProcessorNode, table_store
from streams.dsl.grouped import KGroupedStream, windowed_store
from streams.dsl.ktable import KTable
from streams.dsl.materialized import Materialized, as_materialized
from streams.dsl.ops.cogroup import CogroupMergeProcessor, cogroup_aggregate_operator
from streams.dsl.windows import SessionWindows, SlidingWindows, TimeWindows
from streams.errors import TopologyError
from streams.topology import Topology

__all__ = ["CogroupedKStream", "TimeWindowedCogroupedKStream", "SessionWindowedCogroupedKStream"]

Aggregator = Callable[[Any, Any, Any], Any]


@dataclass
class CogroupMergeNode(ProcessorGraphNode):
    """The merge node after the cogroup's aggregate processors (its parents); it also declares
    the topics those processors read as one co-partition group (Kafka's ensureCopartitionWith)."""

    def write(self, topology: Topology) -> None:
        super().write(topology)
        topology.copartition_sources(*_upstream_sources(topology, self.parents))


def _upstream_sources(topology: Topology, names: tuple[str, ...]) -> list[str]:
    """The source nodes the named nodes read from, within their sub-topology."""
    sources: list[str] = []
    seen: set[str] = set()
    stack = list(names)
    while stack:
        name = stack.pop()
        if name in seen:
            continue
        seen.add(name)
        spec = topology.node(name)
        if spec.kind == "source":
            sources.append(name)
        else:
            stack.extend(spec.parents)
    return sorted(sources)


class CogroupedKStream:
    """Grouped streams and their aggregators (Kafka's CogroupedKStream): `cogroup` adds one,
    `windowed_by` windows them, `aggregate` builds the table."""

    def __init__(self, builder: Any) -> None:
        self._builder = builder
        self._aggregators: dict[KGroupedStream, Aggregator] = {}  # in cogroup order (by identity)
        self._repartitioned: dict[KGroupedStream, str] = {}     # re-keyed stream -> its repartition source

    def cogroup(self, grouped: KGroupedStream, aggregator: Aggregator) -> "CogroupedKStream":
        """Add `grouped`, aggregated by `aggregator(key, value, aggregate)`; cogrouping the same
        grouped stream again replaces its aggregator (Kafka)."""
        if not isinstance(grouped, KGroupedStream):
            raise TopologyError(f"cogroup needs a KGroupedStream, got {grouped!r}")
        if grouped._builder is not self._builder:
            raise TopologyError("cogroup: the grouped stream belongs to another StreamsBuilder")
        N.check_fn(aggregator, "cogroup aggregator")
        self._aggregators[grouped] = aggregator
        return self

    def windowed_by(self, windows: Any) -> Any:
        if isinstance(windows, SessionWindows):
            return SessionWindowedCogroupedKStream(self, windows)
        if isinstance(windows, (TimeWindows, SlidingWindows)):
            return TimeWindowedCogroupedKStream(self, windows)
        raise TopologyError(f"cogroup windowed_by needs TimeWindows, SlidingWindows or SessionWindows, "
                            f"got {windows!r}")

    def aggregate(self, initializer: Callable[[], Any], store: str | Materialized | None = None, *,
                  name: Optional[str] = None) -> KTable:
        """The table of every key's aggregate, from `initializer()`, updated by each cogrouped
        stream's aggregator; a record with a None key or value is skipped and counted in
        dropped-records (Kafka's KStreamAggregate). `name` (Kafka's Named, as for the windowed
        forms) names the processors: `<name>-cogroup-agg-<i>` for each stream's, `<name>-cogroup-merge`."""
        return self._build(initializer, store, None, None, name)

    # ---- building ---------------------------------------------------------------------------

    def _parent(self, position: int, grouped: KGroupedStream, store_name: str, queryable: bool) -> str:
        """The node `grouped`'s aggregate processor reads: the grouped stream, or a repartition
        topic's source when its key changed. Kafka allocates (burns) the three names of a
        repartition even when this cogroup already made it (a second aggregate). The topic counts
        as named by the user with a grouping name or a `queryable` (named) store, as Kafka's."""
        if not grouped._repartition_required:
            return grouped._node
        from streams.dsl.kstream import repartition, repartition_again

        first = not any(g._repartition_required for g in list(self._aggregators)[:position])
        # Kafka's CogroupedStreamAggregateBuilder: the grouping's name, else the store's
        prefix = grouped.name or (store_name if first else f"{store_name}-cogroup-{position}")
        user_named = grouped.name is not None or queryable
        made = self._repartitioned.get(grouped)
        if made is not None:
            repartition_again(self._builder, prefix, user_named)
            return made
        source, _, _ = repartition(self._builder, grouped._node, prefix, grouped.key_serde, grouped.value_serde,
                                   user_named=user_named)
        self._repartitioned[grouped] = source
        return source

    def _build(self, initializer: Callable[[], Any], store: Any, windows: Any,
               merger: Optional[Aggregator], given: Optional[str]) -> KTable:
        N.check_fn(initializer, "cogroup aggregate initializer")
        given = N.processor_name(given, "cogroup aggregate")
        mat = as_materialized(store, "cogroup aggregate")
        graph = self._builder._graph
        name_of_store = N.store_name(graph, mat, N.COGROUP_AGGREGATE)
        streams = list(self._aggregators.items())
        parents = [self._parent(i, grouped, name_of_store, mat.store_name is not None)
                   for i, (grouped, _) in enumerate(streams)]
        where = f"store {name_of_store!r}"
        first_key = next((g.key_serde for g, _ in streams if g.key_serde is not None), None)
        key_serde = N.key_or_default(mat.key_serde or first_key, where)
        value_serde = N.value_or_default(mat.value_serde, where)
        if windows is None:
            store_builder: Any = table_store(mat, name_of_store, key_serde, value_serde,
                                             self._builder.dsl_store_suppliers)
            table_key = key_serde
        else:
            store_builder, table_key = windowed_store(mat, name_of_store, windows, key_serde, value_serde,
                                                      suppliers=self._builder.dsl_store_suppliers)
        caching = mat.caching_enabled
        names = []
        for i, (parent, (_, aggregator)) in enumerate(zip(parents, streams)):
            name = graph.suffixed_or_new(given, f"-cogroup-agg-{i}", N.COGROUP_AGGREGATE, "cogroup aggregate")
            supplier = functools.partial(cogroup_aggregate_operator, windows, name_of_store, caching, initializer,
                                         aggregator, merger)
            if not names:  # the first processor brings the store; the others connect to it
                graph.add(StatefulProcessorNode(name, (parent,), supplier, store_builder=store_builder,
                                                store_name=name_of_store,
                                                deferred_serdes=N.deferred(key_serde, value_serde)))
            else:
                graph.add(ProcessorWithStoresNode(name, (parent,), supplier, (name_of_store,)))
            names.append(name)
        merge = graph.suffixed_or_new(given, "-cogroup-merge", N.COGROUP_MERGE, "cogroup aggregate")
        graph.add(CogroupMergeNode(merge, tuple(names), CogroupMergeProcessor))
        return KTable(self._builder, merge, table_key, value_serde, name_of_store if mat.store_name else None,
                      store_name=name_of_store, windows=windows)


class TimeWindowedCogroupedKStream:
    """Cogrouped streams in tumbling, hopping (TimeWindows) or sliding (SlidingWindows) windows:
    `aggregate(initializer, store=None)` -> KTable keyed by Windowed (Kafka's
    TimeWindowedCogroupedKStream; results are emitted on every window update)."""

    def __init__(self, cogrouped: CogroupedKStream, windows: Any) -> None:
        self._cogrouped = cogrouped
        self._windows = windows

    def aggregate(self, initializer: Callable[[], Any], store: str | Materialized | None = None, *,
                  name: Optional[str] = None) -> KTable:
        return self._cogrouped._build(initializer, store, self._windows, None, name)


class SessionWindowedCogroupedKStream:
    """Cogrouped streams in session windows: `aggregate(initializer, merger, store=None)` ->
    KTable keyed by Windowed; `merger(key, agg1, agg2)` combines merged sessions (Kafka's
    SessionWindowedCogroupedKStream)."""

    def __init__(self, cogrouped: CogroupedKStream, windows: SessionWindows) -> None:
        self._cogrouped = cogrouped
        self._windows = windows

    def aggregate(self, initializer: Callable[[], Any], merger: Aggregator,
                  store: str | Materialized | None = None, *, name: Optional[str] = None) -> KTable:
        N.check_fn(merger, "cogroup aggregate merger")
        return self._cogrouped._build(initializer, store, self._windows, merger, name)
