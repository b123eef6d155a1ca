"""Grouped streams and tables and their aggregations (Kafka's KGroupedStreamImpl,
TimeWindowedKStreamImpl, SlidingWindowedKStreamImpl, SessionWindowedKStreamImpl and
KGroupedTableImpl). A grouping whose key changed upstream goes through a repartition topic named
after the aggregation's store, as Kafka's."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Optional

from streams import serdes as _serdes
from streams.dsl import naming as N
from streams.dsl.change import ChangeSerde
from streams.dsl.graph import LazyStoreBuilder, RepartitionNode, StatefulProcessorNode, table_store
from streams.dsl.ktable import KTable
from streams.dsl.materialized import (Materialized, as_materialized, session_store_builder,
                                      window_store_builder)
from streams.dsl.ops.aggregate import AggregateProcessor, count_adder, count_initializer, reduce_adder, reduce_initializer
from streams.dsl.ops.table_count import count_add, count_subtract
from streams.dsl.ops.table import TableAggregateProcessor
from streams.dsl.ops.windowed import WindowAggregateProcessor
from streams.dsl.windows import EmitStrategy, SessionWindows, SlidingWindows, TimeWindows
from streams.errors import TopologyError

if TYPE_CHECKING:  # cogrouped imports this module
    from streams.dsl.cogrouped import CogroupedKStream

__all__ = ["KGroupedStream", "TimeWindowedKStream", "SessionWindowedKStream", "KGroupedTable"]

class KGroupedStream:
    def __init__(self, builder: Any, node: str, key_serde: Any, value_serde: Any,
                 repartition_required: bool, name: Optional[str] = None) -> None:
        self._builder = builder
        self._node = node
        self.key_serde = key_serde
        self.value_serde = value_serde
        self._repartition_required = repartition_required
        self.name = name  # Kafka's Grouped name: the repartition topic's (None: each store's)
        self._named_repartition: Optional[tuple] = None  # (source, key serde, value serde) once made

    def _source(self, store_name: str, queryable: bool = False) -> str:
        """The node the aggregation reads: this one, or a repartition topic's source (Kafka's
        GroupedStreamAggregateBuilder): a topic of its own named after `store_name`, or, for a
        named grouping, the one `<name>-repartition` its first aggregation made (the later ones
        still use up the three names of a repartition, as Kafka's). The topic counts as named by
        the user (not noted) with a grouping name or a `queryable` (named) store, as Kafka's."""
        if not self._repartition_required:
            return self._node
        from streams.dsl.kstream import repartition, repartition_again

        if self._named_repartition is not None:
            repartition_again(self._builder, self.name, True)
            source, self.key_serde, self.value_serde = self._named_repartition
            return source
        made = repartition(self._builder, self._node, self.name or store_name, self.key_serde, self.value_serde,
                           user_named=self.name is not None or queryable)
        if self.name is not None:
            self._named_repartition = made
        source, self.key_serde, self.value_serde = made
        return source

    def _aggregate(self, prefix: str, op: str, store: Any, initializer: Callable[[], Any],
                   adder: Callable[[Any, Any, Any], Any], value_serde: Any, given: Optional[str]) -> KTable:
        mat = as_materialized(store, op)
        graph = self._builder._graph
        name_of_store = N.store_name(graph, mat, prefix)
        name = graph.name_or_new(given, prefix)
        parent = self._source(name_of_store, mat.store_name is not None)
        where = f"store {name_of_store!r}"
        key_serde = N.key_or_default(mat.key_serde or self.key_serde, where)
        value_serde = N.value_or_default(mat.value_serde or value_serde, where)
        caching = mat.caching_enabled
        graph.add(StatefulProcessorNode(
            name, (parent,), lambda: AggregateProcessor(name_of_store, caching, initializer, adder),
            store_builder=table_store(mat, name_of_store, key_serde, value_serde, self._builder.dsl_store_suppliers),
            store_name=name_of_store, deferred_serdes=N.deferred(key_serde, value_serde)))
        return KTable(self._builder, name, key_serde, value_serde, name_of_store if mat.store_name else None,
                      store_name=name_of_store)

    def count(self, store: str | Materialized | None = None, *, name: Optional[str] = None) -> KTable:
        """Count records per key into a KV store (caching and change logging on by default); a record
        with a None value is not counted (Kafka). `name` (Kafka's Named, as for every aggregation
        below) names the processor."""
        name = N.processor_name(name, "count")
        _use_up_a_count_name(self._builder._graph, store)
        return self._aggregate(N.AGGREGATE, "count", store, count_initializer, count_adder, _serdes.INT64, name)

    def reduce(self, reducer: Callable[[Any, Any], Any], store: str | Materialized | None = None, *,
               name: Optional[str] = None) -> KTable:
        """reducer(aggregate, value) per key; the first value is the aggregate (None values skipped)."""
        N.check_fn(reducer, "reduce")
        return self._aggregate(N.REDUCE, "reduce", store, reduce_initializer, reduce_adder(reducer),
                               self.value_serde, N.processor_name(name, "reduce"))

    def aggregate(self, initializer: Callable[[], Any], aggregator: Callable[[Any, Any, Any], Any],
                  store: str | Materialized | None = None, *, name: Optional[str] = None) -> KTable:
        """aggregator(key, value, aggregate) per key from initializer(); the value serde comes from
        `store` (Materialized) or default.value.serde, never from upstream (Kafka)."""
        N.check_fn(initializer, "aggregate initializer")
        N.check_fn(aggregator, "aggregate aggregator")
        return self._aggregate(N.AGGREGATE, "aggregate", store, initializer, aggregator, None,
                               N.processor_name(name, "aggregate"))

    def cogroup(self, aggregator: Callable[[Any, Any, Any], Any]) -> "CogroupedKStream":
        """A CogroupedKStream starting with this stream and `aggregator(key, value, aggregate)`;
        `.cogroup(other_grouped, aggregator)` adds streams, `.aggregate(initializer)` (or
        `.windowed_by(...)`) aggregates them all into one store (Kafka's KGroupedStream.cogroup)."""
        from streams.dsl.cogrouped import CogroupedKStream

        return CogroupedKStream(self._builder).cogroup(self, aggregator)

    def windowed_by(self, windows: Any) -> Any:
        if isinstance(windows, SessionWindows):
            return SessionWindowedKStream(self, windows)
        if isinstance(windows, (TimeWindows, SlidingWindows)):
            return TimeWindowedKStream(self, windows)
        raise TopologyError(f"windowed_by needs TimeWindows, SlidingWindows or SessionWindows, got {windows!r}")


def windowed_store(mat: Materialized, name_of_store: str, windows: Any, key_serde: Any, value_serde: Any,
                   emit_strategy: Optional[EmitStrategy] = None,
                   suppliers: Any = None) -> tuple[LazyStoreBuilder, Any]:
    """The store of a windowed aggregation (a window store of ValueAndTimestamp, or a session
    store for SessionWindows; `emit_strategy` and `suppliers`, the builder's store type, go to
    the store suppliers) and the Windowed key serde of its table; the retention checks fail
    here, at build time, as Kafka's."""
    if isinstance(windows, SessionWindows):
        kind = "session"

        def make(chosen: Any) -> Any:
            return session_store_builder(mat, name_of_store, windows, key_serde, value_serde,
                                         emit_strategy=emit_strategy, suppliers=chosen)
        windowed_key = _serdes.session_windowed(key_serde)
    else:
        kind = "window"

        def make(chosen: Any) -> Any:
            return window_store_builder(mat, name_of_store, windows, key_serde, value_serde, timestamped=True,
                                        emit_strategy=emit_strategy, suppliers=chosen)
        windowed_key = _serdes.time_windowed(key_serde, windows.size())
    make(suppliers)
    return LazyStoreBuilder(name_of_store, kind, make, suppliers), windowed_key


def _use_up_a_count_name(graph: Any, store: Any) -> None:
    """Kafka's count(Materialized) of a grouped, time-windowed or session-windowed stream uses up
    one store-name index when the Materialized has no name ("we used to burn a topology name
    here"); count() without one does not."""
    if store is not None and as_materialized(store, "count").store_name is None:
        graph.new_name(N.AGGREGATE + N.STATE_STORE)


class _WindowedStream:
    def __init__(self, grouped: KGroupedStream, windows: Any) -> None:
        self._grouped = grouped
        self._windows = windows
        self._emit = EmitStrategy.on_window_update()

    def emit_strategy(self, strategy: EmitStrategy) -> "_WindowedStream":
        if not isinstance(strategy, EmitStrategy):
            raise TopologyError(f"emit_strategy needs an EmitStrategy, got {strategy!r}")
        self._emit = strategy
        return self

    def _windowed(self, prefix: str, op: str, store: Any, initializer: Callable[[], Any],
                  aggregator: Callable[[Any, Any, Any], Any], merger: Optional[Callable[..., Any]],
                  value_serde: Any, given: Optional[str]) -> KTable:
        grouped, windows, emit = self._grouped, self._windows, self._emit
        mat = as_materialized(store, op)
        # Final results on window close come from the processor scanning its store (the built-in
        # store suppliers order a window store by window start for it), never from a cache flush.
        # Kafka keeps the cache of time windows (WindowStoreMaterializer: the processor scans it
        # too) but drops that of sliding and session windows (SlidingWindowStoreMaterializer,
        # SessionStoreMaterializer).
        if emit.emits_on_close and not isinstance(windows, TimeWindows):
            mat = mat.with_caching_disabled()
        graph = grouped._builder._graph
        name_of_store = N.store_name(graph, mat, prefix)
        name = graph.name_or_new(given, prefix)
        parent = grouped._source(name_of_store, mat.store_name is not None)
        where = f"store {name_of_store!r}"
        key_serde = N.key_or_default(mat.key_serde or grouped.key_serde, where)
        value_serde = N.value_or_default(mat.value_serde or value_serde, where)
        store_builder, windowed_key = windowed_store(mat, name_of_store, windows, key_serde, value_serde, emit,
                                                     grouped._builder.dsl_store_suppliers)
        caching = mat.caching_enabled
        graph.add(StatefulProcessorNode(
            name, (parent,),
            lambda: WindowAggregateProcessor(windows, name_of_store, caching, initializer, aggregator, merger, emit),
            store_builder=store_builder, store_name=name_of_store, deferred_serdes=N.deferred(key_serde, value_serde)))
        return KTable(grouped._builder, name, windowed_key, value_serde, name_of_store if mat.store_name else None,
                      store_name=name_of_store, windows=windows)


class TimeWindowedKStream(_WindowedStream):
    """Tumbling, hopping (TimeWindows) or sliding (SlidingWindows) window aggregations -> KTable
    keyed by Windowed."""

    def count(self, store: str | Materialized | None = None, *, name: Optional[str] = None) -> KTable:
        name = N.processor_name(name, "count")
        if not isinstance(self._windows, SlidingWindows):  # Kafka's sliding count uses none up
            _use_up_a_count_name(self._grouped._builder._graph, store)
        return self._windowed(N.AGGREGATE, "count", store, count_initializer, count_adder, None, _serdes.INT64,
                              name)

    def reduce(self, reducer: Callable[[Any, Any], Any], store: str | Materialized | None = None, *,
               name: Optional[str] = None) -> KTable:
        N.check_fn(reducer, "reduce")
        return self._windowed(N.REDUCE, "reduce", store, lambda: None,
                              lambda k, v, agg: v if agg is None else reducer(agg, v), None, self._grouped.value_serde,
                              N.processor_name(name, "reduce"))

    def aggregate(self, initializer: Callable[[], Any], aggregator: Callable[[Any, Any, Any], Any],
                  store: str | Materialized | None = None, *, name: Optional[str] = None) -> KTable:
        N.check_fn(initializer, "aggregate initializer")
        N.check_fn(aggregator, "aggregate aggregator")
        return self._windowed(N.AGGREGATE, "aggregate", store, initializer, aggregator, None, None,
                              N.processor_name(name, "aggregate"))


class SessionWindowedKStream(_WindowedStream):
    """Session window aggregations -> KTable keyed by Windowed (merged-away sessions emit tombstones)."""

    def count(self, store: str | Materialized | None = None, *, name: Optional[str] = None) -> KTable:
        name = N.processor_name(name, "count")
        _use_up_a_count_name(self._grouped._builder._graph, store)
        return self._windowed(N.AGGREGATE, "count", store, count_initializer, count_adder,
                              lambda k, a, b: a + b, _serdes.INT64, name)

    def reduce(self, reducer: Callable[[Any, Any], Any], store: str | Materialized | None = None, *,
               name: Optional[str] = None) -> KTable:
        N.check_fn(reducer, "reduce")

        def merge(key: Any, a: Any, b: Any) -> Any:
            return b if a is None else a if b is None else reducer(a, b)
        return self._windowed(N.REDUCE, "reduce", store, lambda: None,
                              lambda k, v, agg: v if agg is None else reducer(agg, v), merge,
                              self._grouped.value_serde, N.processor_name(name, "reduce"))

    def aggregate(self, initializer: Callable[[], Any], aggregator: Callable[[Any, Any, Any], Any],
                  merger: Callable[[Any, Any, Any], Any], store: str | Materialized | None = None, *,
                  name: Optional[str] = None) -> KTable:
        N.check_fn(initializer, "aggregate initializer")
        N.check_fn(aggregator, "aggregate aggregator")
        N.check_fn(merger, "aggregate merger")
        return self._windowed(N.AGGREGATE, "aggregate", store, initializer, aggregator, merger, None,
                              N.processor_name(name, "aggregate"))


class KGroupedTable:
    """A re-keyed table (KTable.group_by): its aggregations read Change(new, old) records from a
    repartition topic (Kafka's ChangedSerializer bytes), subtract the old value, add the new one."""

    def __init__(self, builder: Any, node: str, key_serde: Any, value_serde: Any, name: Optional[str] = None) -> None:
        self._builder = builder
        self._node = node
        self.key_serde = key_serde
        self.value_serde = value_serde
        self.name = name  # Kafka's Grouped name: the repartition topic's (None: each store's)
        self._named_source: Optional[str] = None  # the repartition source a named grouping's first aggregation made

    def _aggregate(self, prefix: str, op: str, store: Any, add: Callable[[Any, Any, Any], Any],
                   subtract: Callable[[Any, Any, Any], Any], value_serde: Any, given: Optional[str]) -> KTable:
        mat = as_materialized(store, op)
        graph = self._builder._graph
        # a generated store name is KTABLE-AGGREGATE-STATE-STORE-<n> for reduce too (Kafka's
        # KGroupedTableImpl.reduce), and so are its repartition and changelog topics
        name_of_store = N.store_name(graph, mat, N.TABLE_AGGREGATE)
        # a name (Kafka's Named) names the repartition's sink and source too: <name>-sink, -source
        sink = graph.suffixed_or_new(given, "-sink", N.SINK, op)
        source = graph.suffixed_or_new(given, "-source", N.SOURCE, op)
        name = graph.name_or_new(given, prefix)
        # Kafka's KGroupedTableImpl: the repartition topic is named after the grouping, else the
        # store; a named grouping's aggregations share the first one's (the names above are
        # used up all the same)
        topic = (self.name or name_of_store) + N.REPARTITION_SUFFIX
        where = f"repartition topic {topic!r}"
        rep_key = N.key_or_default(self.key_serde, where)
        rep_value_inner = N.value_or_default(self.value_serde, where)
        if self._named_source is not None:
            source = self._named_source
        else:
            graph.add(RepartitionNode(source, (self._node,), topic, "", sink, None, rep_key,
                                      ChangeSerde(rep_value_inner), N.deferred(rep_value_inner)))
            if self.name is not None:
                self._named_source = source
        where = f"store {name_of_store!r}"
        key_serde = N.key_or_default(mat.key_serde or self.key_serde, where)
        store_value = N.value_or_default(mat.value_serde or value_serde, where)
        caching = mat.caching_enabled
        builder = table_store(mat, name_of_store, key_serde, store_value, self._builder.dsl_store_suppliers)
        graph.add(StatefulProcessorNode(
            name, (source,), lambda: TableAggregateProcessor(name_of_store, caching, add, subtract),
            store_builder=builder, store_name=name_of_store, deferred_serdes=N.deferred(key_serde, store_value)))
        return KTable(self._builder, name, key_serde, store_value, name_of_store if mat.store_name else None,
                      store_name=name_of_store)

    def count(self, store: str | Materialized | None = None, *, name: Optional[str] = None) -> KTable:
        """`name` (Kafka's Named, as for reduce and aggregate) names the processor, and the
        repartition's sink and source `<name>-sink` and `<name>-source`."""
        return self._aggregate(N.TABLE_AGGREGATE, "count", store, count_add, count_subtract, _serdes.INT64,
                               N.processor_name(name, "count"))

    def reduce(self, adder: Callable[[Any, Any], Any], subtractor: Callable[[Any, Any], Any],
               store: str | Materialized | None = None, *, name: Optional[str] = None) -> KTable:
        """adder(aggregate, value) / subtractor(aggregate, value); the first value is the aggregate."""
        N.check_fn(adder, "reduce adder")
        N.check_fn(subtractor, "reduce subtractor")
        return self._aggregate(N.TABLE_REDUCE, "reduce", store,
                               lambda k, v, agg: v if agg is None else adder(agg, v),
                               lambda k, v, agg: subtractor(agg, v), self.value_serde,
                               N.processor_name(name, "reduce"))

    def aggregate(self, initializer: Callable[[], Any], adder: Callable[[Any, Any, Any], Any],
                  subtractor: Callable[[Any, Any, Any], Any], store: str | Materialized | None = None, *,
                  name: Optional[str] = None) -> KTable:
        """adder(key, value, aggregate) / subtractor(key, value, aggregate) from initializer()."""
        N.check_fn(initializer, "aggregate initializer")
        N.check_fn(adder, "aggregate adder")
        N.check_fn(subtractor, "aggregate subtractor")
        return self._aggregate(N.TABLE_AGGREGATE, "aggregate", store,
                               lambda k, v, agg: adder(k, v, initializer() if agg is None else agg),
                               lambda k, v, agg: subtractor(k, v, agg), None, N.processor_name(name, "aggregate"))
