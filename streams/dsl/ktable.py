"""KTable (Kafka's KTableImpl): a changelog of Change(new, old) between table nodes. Each node
that produces a table keeps a `send old values` flag: downstream operations that need old values
(group_by, suppress) switch it on, up the chain of filters and value mappers, as Kafka's
enableSendingOldValues does."""

from __future__ import annotations

from typing import Any, Callable, Iterable, Optional

from streams import serdes as _serdes
from streams.dsl import naming as N
from streams.dsl.graph import (ProcessorGraphNode, ProcessorWithStoresNode, StatefulProcessorNode, TableTableJoinNode,
                               table_store)
from streams.dsl.joins.table_table import INNER, LEFT, OUTER
from streams.dsl.materialized import Materialized, as_materialized
from streams.dsl.ops.suppress import SuppressProcessor
from streams.dsl.ops.table_join import TableJoinMergeProcessor, TableJoinSideProcessor
from streams.dsl.ops.value_getter import (JoinValueGetter, MappedValueGetter, SessionStoreValueGetter, StoreValueGetter,
                                          TransformedValueGetter, ValueGetterSupplier, WindowStoreValueGetter)
from streams.dsl.ops.table import (TableFilterProcessor, TableMapValuesProcessor, TableSelectProcessor,
                                   TableSourceProcessor, TableTransformValuesProcessor, ToStreamProcessor)
from streams.dsl.suppressed import Suppressed
from streams.dsl.windows import SessionWindows, window_close_delay_ms
from streams.errors import TopologyError
from streams.processor import StreamPartitioner

__all__ = ["KTable"]


class KTable:
    """A changelog stream, optionally materialized; `to_stream()` emits its updates."""

    def __init__(self, builder: Any, node: str, key_serde: Any, value_serde: Any,
                 queryable_store_name: Optional[str], *, store_name: Optional[str] = None,
                 windows: Any = None, parent: Optional["KTable"] = None, old_values: bool = True,
                 source: bool = False) -> None:
        self._builder = builder
        self._node = node
        self.key_serde = key_serde
        self.value_serde = value_serde
        self._queryable = queryable_store_name
        self.store_name = store_name
        # the windows of a windowed aggregation's table, kept through filters and mappers (suppress
        # needs their grace)
        self._windows = windows
        self._parent = parent
        self._source = source  # a KTableSource (builder.table, to_table, a foreign-key join's result)
        self._read_by_key = False  # a source a join reads through its store: materialized (Kafka's materialize())
        # aggregations and suppressions always carry old values; sources, filters and mappers on request
        self._send_old = [old_values and not source]
        # how a join reads this table's current value (see _value_getter_supplier)
        self._getter: Optional[ValueGetterSupplier] = None
        # an unmaterialized table operation's getter for `op` (its own computation over this
        # table's parent's getter)
        self._getter_factory: Optional[Callable[[str], ValueGetterSupplier]] = None
        self._join_parents: tuple = ()

    @property
    def name(self) -> str:
        return self._node

    @property
    def queryable_store_name(self) -> Optional[str]:
        return self._queryable

    def source_materialized(self) -> bool:
        """Whether a source table (builder.table, KStream.to_table, a foreign-key join's result)
        keeps its store, asked when the topology is written (after the whole DSL is built): Kafka
        materializes a source only when its store is named or a downstream operation forces it
        (group_by, suppress, a join reading it by key, KTableSource.materialize()). An unmaterialized source has no store (nor
        changelog) and forwards every record as Change(new, None), a delete of an absent key too."""
        return self._queryable is not None or self._send_old[0] or self._read_by_key

    def source_caching(self, mat: Materialized) -> bool:
        """Whether a source table forwards through its store's cache: only a materialized one has
        a store (source_materialized)."""
        return mat.caching_enabled and self.source_materialized()

    def source_processor(self, mat: Materialized) -> TableSourceProcessor:
        """A source table's processor (builder.table, to_table, a foreign-key join's result), made
        once the whole DSL is built: with its store only when materialized in Kafka's sense."""
        return TableSourceProcessor(self.store_name, self.source_caching(mat), self.source_materialized())

    def _enable_send_old_values(self, force: bool = True) -> bool:
        """Kafka's KTableImpl.enableSendingOldValues(forceMaterialization): switch old values on
        here and upstream; without `force` a source that is not materialized in Kafka's sense (its
        store unnamed and not forced yet) refuses, and so does every unmaterialized node below it.
        A materialized filter/map_values reads its old values from its own store and asks its
        parent nothing (Kafka's KTableFilter / KTableMapValues): a filter above it that was not
        asked keeps forwarding tombstones of keys it never forwarded. A table-table join's result
        asks both its sides with force (Kafka's KTableKTableJoinMerger)."""
        if self._send_old[0]:
            return True
        parent = self._parent
        if self._join_parents:
            for side in self._join_parents:
                side._enable_send_old_values(True)
        elif parent is None:
            if self._source and not force and self._queryable is None and not self._read_by_key:
                return False
        elif self._queryable is None and not parent._enable_send_old_values(force):
            return False
        self._send_old[0] = True
        return True

    def _value_getter_supplier(self, op: str) -> ValueGetterSupplier:
        """How a join reads this table (Kafka's KTableImpl.valueGetterSupplier): its store when
        materialized, else its operation over its parent's getter."""
        if self._getter is not None:
            return self._getter
        if self.store_name is not None:
            if self._source:
                self._read_by_key = True  # Kafka's KTableSource.materialize()
            if isinstance(self._windows, SessionWindows):
                return SessionStoreValueGetter(self.store_name)
            if self._windows is not None:
                return WindowStoreValueGetter(self.store_name)
            return StoreValueGetter(self.store_name)
        if self._getter_factory is not None:
            return self._getter_factory(op)
        raise TopologyError(f"{op}: the table {self._node} cannot be read by a join (a suppressed table keeps no "
                            "value to look up); materialize it first, e.g. .filter(lambda k, v: True, store=...)")

    def _value_node(self, prefix: str, make: Callable[..., Any], store: Any, value_serde: Any, op: str,
                    given: Optional[str] = None, connected: tuple = (), burns_store_name: bool = True,
                    getter: Optional[Callable[["KTable", str], ValueGetterSupplier]] = None) -> "KTable":
        """A table whose values `make(store_name, caching, send_old_values)`'s operator computes
        from this one's; unmaterialized, joins read it through `getter(table, op)` when given,
        else by the operator's `compute` over this table's getter."""
        graph = self._builder._graph
        mat = None if store is None else as_materialized(store, op)
        if mat is not None and mat.store_name is None and burns_store_name:
            # Kafka's filter / map_values: a Materialized without a name gives serdes only (no
            # store: it is not queryable); its generated store name still uses an index, before
            # the processor's (and it is not noted as unnamed: Kafka's MaterializedInternal is made
            # without the builder there; transform_values' is made without a name provider: none)
            N.store_name(graph, mat, prefix, implicit=False)
        name = graph.name_or_new(N.processor_name(given, op), prefix)
        flag = [False]
        if mat is None or mat.store_name is None:
            graph.add(ProcessorWithStoresNode(name, (self._node,), lambda: make(None, False, lambda: flag[0]),
                                              connected))
            key_serde = self.key_serde if mat is None else mat.key_serde or self.key_serde
            value_serde = value_serde if mat is None else mat.value_serde or value_serde
            table = KTable(self._builder, name, key_serde, value_serde, None, parent=self, old_values=False,
                           windows=self._windows)
            if getter is None:  # the operator's computation over this table's getter
                compute = lambda: make(None, False, lambda: False).compute  # noqa: E731
                table._getter_factory = lambda op: MappedValueGetter(self._value_getter_supplier(op), compute)
            else:
                table._getter_factory = lambda op: getter(table, op)
        else:
            name_of_store = mat.store_name
            where = f"table store {name_of_store!r}"
            store_key = N.key_or_default(mat.key_serde or self.key_serde, where)
            store_value = N.value_or_default(mat.value_serde or value_serde, where)
            caching = mat.caching_enabled
            builder = table_store(mat, name_of_store, store_key, store_value, self._builder.dsl_store_suppliers)
            graph.add(StatefulProcessorNode(name, (self._node,), lambda: make(name_of_store, caching, lambda: flag[0]),
                                            store_builder=builder, store_name=name_of_store,
                                            deferred_serdes=N.deferred(store_key, store_value),
                                            store_names=connected))
            table = KTable(self._builder, name, mat.key_serde or self.key_serde, mat.value_serde or value_serde,
                           name_of_store, store_name=name_of_store, parent=self, old_values=False,
                           windows=self._windows)
        table._send_old = flag
        return table

    def _filter(self, predicate: Callable[[Any, Any], bool], negate: bool, store: Any, op: str,
                name: Optional[str]) -> "KTable":
        N.check_fn(predicate, op)
        table = self._value_node(N.TABLE_FILTER,
                                 lambda s, c, old: TableFilterProcessor(predicate, negate, s, c, old),
                                 store, self.value_serde, op, name)
        # Kafka's KTableFilter asks its parent for old values as it is built, without forcing a
        # materialization, so that it need not forward a tombstone of a key it never forwarded
        if self._enable_send_old_values(force=False):
            table._send_old[0] = True
        return table

    def filter(self, predicate: Callable[[Any, Any], bool], store: str | Materialized | None = None, *,
               name: Optional[str] = None) -> "KTable":
        """Keys whose value fails the predicate are deleted (a tombstone downstream, once: a key
        that was not in the filtered table gets none). `name` (Kafka's Named, as for the
        operations below) names the processor."""
        return self._filter(predicate, False, store, "KTable.filter", name)

    def filter_not(self, predicate: Callable[[Any, Any], bool], store: str | Materialized | None = None, *,
                   name: Optional[str] = None) -> "KTable":
        return self._filter(predicate, True, store, "KTable.filter_not", name)

    def map_values(self, value_mapper: Callable[[Any], Any], store: str | Materialized | None = None, *,
                   name: Optional[str] = None) -> "KTable":
        N.check_fn(value_mapper, "KTable.map_values")
        return self._value_node(N.TABLE_MAPVALUES, lambda s, c, old: TableMapValuesProcessor(value_mapper, s, c, old),
                                store, None, "KTable.map_values", name)

    def transform_values(self, transformer_supplier: Callable[[], Any], store: str | Materialized | None = None, *,
                         stores: Iterable[str] = (), name: Optional[str] = None) -> "KTable":
        """Kafka's KTable.transformValues: each task's transformer (`transformer_supplier()`, with
        `init(context)`, `transform(key, value)` and `close()`, Kafka's ValueTransformerWithKey)
        gives each key's new value; it is called for a tombstone's None too, and reads the stores
        `stores` (builder.add_state_store) through its context, which refuses forward. Materialized
        in `store` when that names one; `name` (Kafka's Named) names the processor."""
        N.check_fn(transformer_supplier, "KTable.transform_values")
        names = (stores,) if isinstance(stores, str) else tuple(stores)
        # a transformer needs the task's context: an unmaterialized one's getter makes its own
        return self._value_node(
            N.TABLE_TRANSFORMVALUES, lambda s, c, old: TableTransformValuesProcessor(transformer_supplier, s, c, old),
            store, None, "KTable.transform_values", name, names, burns_store_name=False,
            getter=lambda table, op: TransformedValueGetter(self._value_getter_supplier(op), transformer_supplier,
                                                            table.name))

    def to_stream(self, key_value_mapper: Optional[Callable[[Any, Any], Any]] = None, *,
                  name: Optional[str] = None) -> Any:
        """The table's updates as a stream of new values (tombstones as None); with a mapper the
        key becomes key_value_mapper(key, value) and a later grouping repartitions."""
        from streams.dsl.kstream import KStream

        if key_value_mapper is not None:
            N.check_fn(key_value_mapper, "KTable.to_stream")
        graph = self._builder._graph
        name = graph.name_or_new(N.processor_name(name, "KTable.to_stream"), N.TABLE_TOSTREAM)
        graph.add(ProcessorGraphNode(name, (self._node,), lambda: ToStreamProcessor(key_value_mapper)))
        mapped = key_value_mapper is not None
        return KStream(self._builder, name, None if mapped else self.key_serde, self.value_serde, mapped)

    def suppress(self, suppressed: Suppressed) -> "KTable":
        """Hold updates back (Kafka's KTable.suppress): until_window_closes emits one final result
        per window; until_time_limit a key's latest value once the limit passed. The buffer is a
        changelogged store (`<name>-store` when named)."""
        from state.suppress_buffer import SuppressionBufferBuilder

        if not isinstance(suppressed, Suppressed):
            raise TopologyError(f"KTable.suppress needs a Suppressed, got {suppressed!r}")
        grace = None
        if suppressed.is_final_results:
            if self._windows is None:
                raise TopologyError("Suppressed.until_window_closes applies to windowed tables only "
                                    "(the result of a windowed aggregation)")
            grace = window_close_delay_ms(self._windows)  # sessions: gap + grace (Kafka)
        graph = self._builder._graph
        name = suppressed.name or graph.new_name(N.TABLE_SUPPRESS)
        # Kafka: a named suppression's buffer is `<name>-store`, else a generated store name
        name_of_store = (suppressed.store_name(name) if suppressed.name
                         else graph.new_name(N.TABLE_SUPPRESS + N.STATE_STORE))
        config = suppressed.buffer_config
        if not suppressed.name and config.logging_enabled:  # Kafka notes the changelog only
            graph.implicit(changelog=name_of_store + "-changelog")
        buffer_builder = SuppressionBufferBuilder(name_of_store)
        buffer_builder = (buffer_builder.with_logging_enabled(config.log_config) if config.logging_enabled
                          else buffer_builder.with_logging_disabled())
        key_serde = N.key_or_default(self.key_serde, f"suppression buffer {name_of_store!r}")
        value_serde = N.value_or_default(self.value_serde, f"suppression buffer {name_of_store!r}")
        self._enable_send_old_values()
        graph.add(StatefulProcessorNode(
            name, (self._node,), lambda: SuppressProcessor(suppressed, name_of_store, key_serde, value_serde, grace, name),
            store_builder=buffer_builder, store_name=name_of_store, deferred_serdes=N.deferred(key_serde, value_serde)))
        return KTable(self._builder, name, self.key_serde, self.value_serde, None, windows=self._windows)

    def group_by(self, mapper: Callable[[Any, Any], tuple], *, key_serde: Any = None,
                 value_serde: Any = None, name: Optional[str] = None) -> Any:
        """Re-key the table: mapper(key, value) -> (new_key, new_value); the grouped table's
        aggregations subtract the old value and add the new one. A None new key skips the record.
        `name` (Kafka's Grouped.as) names the selector and the repartition topic
        `<name>-repartition`, which every aggregation of the grouped table then shares."""
        from streams.dsl.grouped import KGroupedTable
        from streams.dsl.kstream import repartition_name

        N.check_fn(mapper, "KTable.group_by")
        grouped_name = repartition_name(name, "KTable.group_by")
        self._enable_send_old_values()
        graph = self._builder._graph
        node = graph.name_or_new(grouped_name, N.TABLE_SELECT)
        graph.add(ProcessorGraphNode(node, (self._node,), lambda: TableSelectProcessor(mapper)))
        return KGroupedTable(self._builder, node, _serdes.resolve_serde(key_serde, "KTable.group_by key_serde"),
                             _serdes.resolve_serde(value_serde, "KTable.group_by value_serde"), grouped_name)

    # ---- joins ------------------------------------------------------------------------------

    def join(self, other: "KTable", joiner: Optional[Callable[[Any, Any], Any]] = None,
             store: str | Materialized | None = None, *,
             foreign_key_extractor: Optional[Callable[[Any], Any]] = None, name: Optional[str] = None,
             partitioner: Optional[StreamPartitioner] = None,
             other_partitioner: Optional[StreamPartitioner] = None) -> "KTable":
        """Inner primary-key join: joiner(value, other_value) for keys both tables hold (Kafka's
        KTableKTableInnerJoin); with `foreign_key_extractor` the foreign-key join. `name` (Kafka's
        Named) names a primary-key join's processors: `<name>` (the merge), `<name>-join-this`
        and `<name>-join-other`; a foreign-key join's (Kafka's TableJoined.as) its processors,
        topics and subscription store, `<name>-subscription-registration-topic` and so on.

        A foreign-key join's `partitioner` and `other_partitioner` (Kafka's TableJoined.with)
        say how this table's and the other table's topics are partitioned, when not by the
        default partitioner: `partitioner(topic, key, None, num_partitions) -> partition or None`
        (None: the default), as `to()`'s. The other's routes each subscription to the partition
        holding its foreign key; this one's routes each response back (by default to the
        partition the left record came from)."""
        if foreign_key_extractor is not None:
            return self._fk_join(other, joiner, foreign_key_extractor, False, store, name, partitioner,
                                 other_partitioner)
        self._check_no_partitioners("KTable.join", partitioner, other_partitioner)
        return self._table_join("KTable.join", INNER, other, joiner, store, name)

    def left_join(self, other: "KTable", joiner: Optional[Callable[[Any, Any], Any]] = None,
                  store: str | Materialized | None = None, *,
                  foreign_key_extractor: Optional[Callable[[Any], Any]] = None,
                  name: Optional[str] = None, partitioner: Optional[StreamPartitioner] = None,
                  other_partitioner: Optional[StreamPartitioner] = None) -> "KTable":
        """Every key of this table, joined with the other's value or None (Kafka's
        KTableKTableLeftJoin); `name`, `partitioner` and `other_partitioner` as join's."""
        if foreign_key_extractor is not None:
            return self._fk_join(other, joiner, foreign_key_extractor, True, store, name, partitioner,
                                 other_partitioner)
        self._check_no_partitioners("KTable.left_join", partitioner, other_partitioner)
        return self._table_join("KTable.left_join", LEFT, other, joiner, store, name)

    @staticmethod
    def _check_no_partitioners(op: str, partitioner: Any, other_partitioner: Any) -> None:
        """Partitioners are a foreign-key join's (Kafka's TableJoined): a primary-key join of two
        co-partitioned tables sends nothing anywhere."""
        if partitioner is not None or other_partitioner is not None:
            raise TopologyError(f"{op}: partitioner and other_partitioner apply to a foreign-key join only "
                                "(give foreign_key_extractor)")

    def outer_join(self, other: "KTable", joiner: Optional[Callable[[Any, Any], Any]] = None,
                   store: str | Materialized | None = None, *, name: Optional[str] = None) -> "KTable":
        """Every key of either table; the missing side is None (Kafka's KTableKTableOuterJoin);
        `name` as join's."""
        return self._table_join("KTable.outer_join", OUTER, other, joiner, store, name)

    def _check_join(self, op: str, other: Any, joiner: Any) -> None:
        if not isinstance(other, KTable):
            raise TopologyError(f"{op} needs a KTable to join with, got {type(other).__name__}")
        if other._builder is not self._builder:
            raise TopologyError(f"{op}: both tables must come from the same StreamsBuilder")
        if joiner is None:
            raise TopologyError(f"{op} needs a joiner(value, other_value)")
        N.check_fn(joiner, op)

    def _fk_join(self, other: Any, joiner: Any, extractor: Any, left: bool, store: Any,
                 name: Optional[str], partitioner: Any, other_partitioner: Any) -> "KTable":
        """The foreign-key join's own module builds and checks it (branch fkjoin)."""
        from streams.dsl.fk_join import fk_join

        return fk_join(self, other, joiner, extractor, left_join=left, store=store, name=name,
                       partitioner=partitioner, other_partitioner=other_partitioner)

    def _table_join(self, op: str, join_type: str, other: Any, joiner: Any, store: Any,
                    given: Optional[str] = None) -> "KTable":
        """Kafka's KTableImpl.doJoin: names (store, merge, this, other) in Kafka's order; left and
        outer joins need old values from the left table, outer joins from the right one too."""
        self._check_join(op, other, joiner)
        given = N.processor_name(given, op)
        graph = self._builder._graph
        mat = None if store is None else as_materialized(store, op)
        name_of_store = None if mat is None else N.store_name(graph, mat, N.TABLE_MERGE)
        merge = graph.name_or_new(given, N.TABLE_MERGE)
        if join_type != INNER:
            self._enable_send_old_values()
        if join_type == OUTER:
            other._enable_send_old_values()
        join_this = graph.suffixed_or_new(given, "-join-this", N.TABLE_JOINTHIS, op)
        join_other = graph.suffixed_or_new(given, "-join-other", N.TABLE_JOINOTHER, op)
        this_getter = self._value_getter_supplier(op)
        other_getter = other._value_getter_supplier(op)
        flag = [False]

        def send_old() -> bool:
            return flag[0]
        store_builder, deferred, caching = None, (), False
        key_serde, value_serde = self.key_serde, None
        if mat is not None:
            key_serde = mat.key_serde or self.key_serde
            value_serde = mat.value_serde
            where = f"table store {name_of_store!r}"
            store_key = N.key_or_default(key_serde, where)
            store_value = N.value_or_default(value_serde, where)
            caching = mat.caching_enabled
            store_builder = table_store(mat, name_of_store, store_key, store_value, self._builder.dsl_store_suppliers)
            deferred = N.deferred(store_key, store_value)
        graph.add(TableTableJoinNode(
            merge, (self._node, other._node), join_this=join_this, join_other=join_other,
            this_supplier=lambda: TableJoinSideProcessor(True, other_getter, joiner, join_type, send_old),
            other_supplier=lambda: TableJoinSideProcessor(False, this_getter, joiner, join_type, send_old),
            merge_supplier=lambda: TableJoinMergeProcessor(name_of_store, caching, send_old),
            this_store_names=this_getter.store_names, other_store_names=other_getter.store_names,
            store_builder=store_builder, deferred_serdes=deferred))
        table = KTable(self._builder, merge, key_serde, value_serde, name_of_store, store_name=name_of_store,
                       old_values=False)
        table._send_old = flag
        table._join_parents = (self, other)
        if name_of_store is None:
            table._getter = JoinValueGetter(this_getter, other_getter, joiner, join_type)
        return table
