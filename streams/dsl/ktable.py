"""KTable (Kafka's KTableImpl): a changelog of Change(new, old) between table nodes. Each node
that produces a table keeps a `send old values` flag: downstream operations that need old values
(group_by, suppress) switch it on, up the chain of filters and value mappers, as Kafka's
enableSendingOldValues does."""

from __future__ import annotations

from typing import Any, Callable, Optional

from streams import serdes as _serdes
from streams.dsl import naming as N
from streams.dsl.graph import LazyStoreBuilder, ProcessorGraphNode, StatefulProcessorNode
from streams.dsl.materialized import Materialized, as_materialized, key_value_store_builder
from streams.dsl.ops.suppress import SuppressProcessor
from streams.dsl.ops.table import (TableFilterProcessor, TableMapValuesProcessor, TableSelectProcessor,
                                   ToStreamProcessor)
from streams.dsl.suppressed import Suppressed
from streams.dsl.windows import window_close_delay_ms
from streams.errors import TopologyError

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
        self._source = source  # builder.table / KStream.to_table: materialized (in Kafka's sense) when named
        # aggregations and suppressions always carry old values; sources, filters and mappers on request
        self._send_old = [old_values and not source]

    @property
    def name(self) -> str:
        return self._node

    def source_caching(self, mat: Materialized) -> bool:
        """Whether a source table (builder.table, KStream.to_table) forwards through its store's
        cache, asked when its processor is made (after the whole DSL is built). Kafka
        materializes a source only when its store is named or a downstream operation forces it
        (group_by, suppress); an unmaterialized source has no store and forwards every record,
        a delete of an absent key too. Eddy's source always keeps its store, and forwards every
        update itself unless it is materialized in Kafka's sense."""
        return mat.caching_enabled and (self._queryable is not None or self._send_old[0])

    @property
    def queryable_store_name(self) -> Optional[str]:
        return self._queryable

    def _enable_send_old_values(self, force: bool = True) -> bool:
        """Kafka's KTableImpl.enableSendingOldValues(forceMaterialization): switch old values on
        here and upstream; without `force` a source that is not materialized in Kafka's sense (its
        store unnamed and not forced yet) refuses, and so does every unmaterialized node below it.
        A materialized node in Kafka reads its old values from its own store; Eddy's compute them
        from their parent's, so there the parent is asked with force (sources always keep a store
        here, so that only switches flags)."""
        if self._send_old[0]:
            return True
        parent = self._parent
        if parent is None:
            if self._source and not force and self._queryable is None:
                return False
        elif self._queryable is not None:
            parent._enable_send_old_values(True)
        elif not parent._enable_send_old_values(force):
            return False
        self._send_old[0] = True
        return True

    def _value_node(self, prefix: str, make: Callable[..., Any], store: Any, value_serde: Any, op: str) -> "KTable":
        graph = self._builder._graph
        name = graph.new_name(prefix)
        flag = [False]
        if store is None:
            graph.add(ProcessorGraphNode(name, (self._node,), lambda: make(None, False, lambda: flag[0])))
            table = KTable(self._builder, name, self.key_serde, value_serde, None, parent=self, old_values=False,
                           windows=self._windows)
        else:
            mat = as_materialized(store, op)
            name_of_store = N.store_name(graph, mat, prefix)
            where = f"table store {name_of_store!r}"
            store_key = N.key_or_default(mat.key_serde or self.key_serde, where)
            store_value = N.value_or_default(mat.value_serde or value_serde, where)
            caching = mat.caching_enabled
            builder = LazyStoreBuilder(name_of_store, "key_value", lambda: key_value_store_builder(
                mat, name_of_store, store_key, store_value, timestamped=True))
            graph.add(StatefulProcessorNode(name, (self._node,), lambda: make(name_of_store, caching, lambda: flag[0]),
                                            store_builder=builder, store_name=name_of_store,
                                            deferred_serdes=N.deferred(store_key, store_value)))
            table = KTable(self._builder, name, mat.key_serde or self.key_serde, mat.value_serde or value_serde,
                           name_of_store, store_name=name_of_store, parent=self, old_values=False,
                           windows=self._windows)
        table._send_old = flag
        return table

    def _filter(self, predicate: Callable[[Any, Any], bool], negate: bool, store: Any, op: str) -> "KTable":
        N.check_fn(predicate, op)
        table = self._value_node(N.TABLE_FILTER,
                                 lambda s, c, old: TableFilterProcessor(predicate, negate, s, c, old),
                                 store, self.value_serde, op)
        # Kafka's KTableFilter asks its parent for old values as it is built, without forcing a
        # materialization, so that it need not forward a tombstone of a key it never forwarded
        if self._enable_send_old_values(force=False):
            table._send_old[0] = True
        return table

    def filter(self, predicate: Callable[[Any, Any], bool], store: str | Materialized | None = None) -> "KTable":
        """Keys whose value fails the predicate are deleted (a tombstone downstream, once: a key
        that was not in the filtered table gets none)."""
        return self._filter(predicate, False, store, "KTable.filter")

    def filter_not(self, predicate: Callable[[Any, Any], bool], store: str | Materialized | None = None) -> "KTable":
        return self._filter(predicate, True, store, "KTable.filter_not")

    def map_values(self, value_mapper: Callable[[Any], Any], store: str | Materialized | None = None) -> "KTable":
        N.check_fn(value_mapper, "KTable.map_values")
        return self._value_node(N.TABLE_MAPVALUES, lambda s, c, old: TableMapValuesProcessor(value_mapper, s, c, old),
                                store, None, "KTable.map_values")

    def to_stream(self, key_value_mapper: Optional[Callable[[Any, Any], Any]] = None) -> Any:
        """The table's updates as a stream of new values (tombstones as None); with a mapper the
        key becomes key_value_mapper(key, value) and a later grouping repartitions."""
        from streams.dsl.kstream import KStream

        if key_value_mapper is not None:
            N.check_fn(key_value_mapper, "KTable.to_stream")
        graph = self._builder._graph
        name = graph.new_name(N.TABLE_TOSTREAM)
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

    # TEMPORARY (branch fkjoin): only the foreign-key dispatch of join/left_join, so the FK join
    # can be tested before the sjoin branch's KTable.join/left_join land; the lead keeps theirs
    # and its call of fk_join when foreign_key_extractor is given
    def join(self, other: "KTable", joiner: Callable[[Any, Any], Any], store: str | Materialized | None = None, *,
             foreign_key_extractor: Optional[Callable[[Any], Any]] = None) -> "KTable":
        return self._fk_join_only(other, joiner, store, foreign_key_extractor, left_join=False)

    def left_join(self, other: "KTable", joiner: Callable[[Any, Any], Any], store: str | Materialized | None = None,
                  *, foreign_key_extractor: Optional[Callable[[Any], Any]] = None) -> "KTable":
        return self._fk_join_only(other, joiner, store, foreign_key_extractor, left_join=True)

    def _fk_join_only(self, other: "KTable", joiner: Any, store: Any, foreign_key_extractor: Any, *,
                      left_join: bool) -> "KTable":
        from streams.dsl.fk_join import fk_join

        if foreign_key_extractor is None:
            raise TopologyError("the primary-key table-table join is not on this branch (fkjoin)")
        return fk_join(self, other, joiner, foreign_key_extractor, left_join=left_join, store=store)

    def group_by(self, mapper: Callable[[Any, Any], tuple], *, key_serde: Any = None,
                 value_serde: Any = None) -> Any:
        """Re-key the table: mapper(key, value) -> (new_key, new_value); the grouped table's
        aggregations subtract the old value and add the new one. A None new key skips the record."""
        from streams.dsl.grouped import KGroupedTable

        N.check_fn(mapper, "KTable.group_by")
        self._enable_send_old_values()
        graph = self._builder._graph
        name = graph.new_name(N.TABLE_SELECT)
        graph.add(ProcessorGraphNode(name, (self._node,), lambda: TableSelectProcessor(mapper)))
        return KGroupedTable(self._builder, name, _serdes.resolve_serde(key_serde, "KTable.group_by key_serde"),
                             _serdes.resolve_serde(value_serde, "KTable.group_by value_serde"))
