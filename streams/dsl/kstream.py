"""StreamsBuilder, KStream, KGroupedStream and KTable: the word-count subset of the DSL."""

from __future__ import annotations

from typing import Any, Callable, Iterable, Optional

from streams import serdes as _serdes
from streams.dsl.graph import (Graph, ProcessorGraphNode, RepartitionNode, StatefulProcessorNode, StreamSinkNode,
                               StreamSourceNode)
from streams.dsl.materialized import Materialized, as_materialized
from streams.dsl.ops.aggregate import AggregateProcessor, count_adder, count_initializer
from streams.dsl.ops.stateless import (FilterProcessor, FlatMapValuesProcessor, KeySelectProcessor,
                                       MapValuesProcessor, NullKeyFilterProcessor, PeekProcessor)
from streams.dsl.ops.table import ToStreamProcessor
from streams.errors import TopologyError
from streams.processor import TimestampExtractor
from streams.topology import Topology

__all__ = ["StreamsBuilder", "KStream", "KGroupedStream", "KTable"]

SOURCE = "KSTREAM-SOURCE-"
SINK = "KSTREAM-SINK-"
MAPVALUES = "KSTREAM-MAPVALUES-"
FLATMAPVALUES = "KSTREAM-FLATMAPVALUES-"
FILTER = "KSTREAM-FILTER-"
PEEK = "KSTREAM-PEEK-"
FOREACH = "KSTREAM-FOREACH-"
KEY_SELECT = "KSTREAM-KEY-SELECT-"
AGGREGATE = "KSTREAM-AGGREGATE-"
AGGREGATE_STORE = "KSTREAM-AGGREGATE-STATE-STORE-"
TOSTREAM = "KTABLE-TOSTREAM-"
REPARTITION_SUFFIX = "-repartition"


def _check_fn(fn: Any, op: str) -> None:
    if not callable(fn):
        raise TopologyError(f"{op} needs a callable, got {fn!r}")


class StreamsBuilder:
    """Entry point of the DSL: `stream(...)` then operations, then `build()` -> Topology."""

    def __init__(self) -> None:
        self._graph = Graph()
        self._source_topics: dict[str, str] = {}

    def stream(self, topics: str | Iterable[str], *, key_serde: Any = None, value_serde: Any = None,
               timestamp_extractor: Optional[TimestampExtractor] = None,
               offset_reset: Optional[str] = None) -> "KStream":
        topic_list = [topics] if isinstance(topics, str) else list(topics)
        if not topic_list:
            raise TopologyError("stream() needs at least one topic")
        for t in topic_list:
            if not isinstance(t, str) or not t:
                raise TopologyError(f"stream(): topic names must be non-empty strings, got {t!r}")
            if t in self._source_topics:
                raise TopologyError(f"stream(): topic {t!r} is already read by {self._source_topics[t]}")
        name = self._graph.new_name(SOURCE)
        for t in topic_list:
            self._source_topics[t] = name
        key_serde = _serdes.resolve_serde(key_serde, f"stream({topic_list}) key_serde")
        value_serde = _serdes.resolve_serde(value_serde, f"stream({topic_list}) value_serde")
        self._graph.add(StreamSourceNode(name, (), tuple(topic_list), key_serde, value_serde, timestamp_extractor,
                                         offset_reset))
        return KStream(self, name, key_serde, value_serde)

    def build(self) -> Topology:
        """A new, validated Topology for the operations recorded so far."""
        topology = self._graph.to_topology()
        topology.build()
        return topology


class KStream:
    """A record stream. Operations return new streams; nothing runs until the topology does."""

    def __init__(self, builder: StreamsBuilder, node: str, key_serde: Any, value_serde: Any,
                 repartition_required: bool = False) -> None:
        self._builder = builder
        self._node = node
        self.key_serde = key_serde
        self.value_serde = value_serde
        self._repartition_required = repartition_required

    @property
    def name(self) -> str:
        return self._node

    def _add(self, prefix: str, supplier: Callable[[], Any], *, key_serde: Any, value_serde: Any,
             repartition_required: Optional[bool] = None) -> "KStream":
        graph = self._builder._graph
        name = graph.new_name(prefix)
        parent = self._node
        graph.add(ProcessorGraphNode(name, (parent,), supplier))
        return KStream(self._builder, name, key_serde, value_serde,
                       self._repartition_required if repartition_required is None else repartition_required)

    def map_values(self, fn: Callable[[Any], Any]) -> "KStream":
        """New value = fn(value); the key is kept (no repartition)."""
        _check_fn(fn, "map_values")
        return self._add(MAPVALUES, lambda: MapValuesProcessor(fn), key_serde=self.key_serde, value_serde=None)

    def flat_map_values(self, fn: Callable[[Any], Iterable[Any]]) -> "KStream":
        """One output record per item of fn(value), all with the input's key and timestamp."""
        _check_fn(fn, "flat_map_values")
        return self._add(FLATMAPVALUES, lambda: FlatMapValuesProcessor(fn), key_serde=self.key_serde,
                         value_serde=None)

    def filter(self, predicate: Callable[[Any, Any], bool]) -> "KStream":
        _check_fn(predicate, "filter")
        return self._add(FILTER, lambda: FilterProcessor(predicate), key_serde=self.key_serde,
                         value_serde=self.value_serde)

    def filter_not(self, predicate: Callable[[Any, Any], bool]) -> "KStream":
        _check_fn(predicate, "filter_not")
        return self._add(FILTER, lambda: FilterProcessor(predicate, negate=True), key_serde=self.key_serde,
                         value_serde=self.value_serde)

    def peek(self, action: Callable[[Any, Any], None]) -> "KStream":
        _check_fn(action, "peek")
        return self._add(PEEK, lambda: PeekProcessor(action), key_serde=self.key_serde,
                         value_serde=self.value_serde)

    def foreach(self, action: Callable[[Any, Any], None]) -> None:
        """Terminal: call action(key, value) for every record."""
        _check_fn(action, "foreach")
        self._add(FOREACH, lambda: PeekProcessor(action, forward=False), key_serde=None, value_serde=None)

    def select_key(self, fn: Callable[[Any, Any], Any]) -> "KStream":
        """New key = fn(key, value); a later grouping repartitions."""
        _check_fn(fn, "select_key")
        return self._add(KEY_SELECT, lambda: KeySelectProcessor(fn), key_serde=None,
                         value_serde=self.value_serde, repartition_required=True)

    def to(self, topic: str, *, key_serde: Any = None, value_serde: Any = None,
           partitioner: Optional[Callable[[str, Any, Any, int], Optional[int]]] = None) -> None:
        """Terminal: write to `topic` (serdes default to the stream's, then to the config's)."""
        if not isinstance(topic, str) or not topic:
            raise TopologyError(f"to() needs a topic name, got {topic!r}")
        ks = _serdes.resolve_serde(key_serde, f"to({topic!r}) key_serde") or self.key_serde
        vs = _serdes.resolve_serde(value_serde, f"to({topic!r}) value_serde") or self.value_serde
        graph = self._builder._graph
        name = graph.new_name(SINK)
        parent = self._node
        graph.add(StreamSinkNode(name, (parent,), topic, ks, vs, partitioner))

    def group_by(self, fn: Callable[[Any, Any], Any], *, key_serde: Any = None,
                 value_serde: Any = None) -> "KGroupedStream":
        """Group by a new key fn(key, value); aggregations repartition through an internal topic."""
        _check_fn(fn, "group_by")
        selected = self._add(KEY_SELECT, lambda: KeySelectProcessor(fn), key_serde=None,
                             value_serde=self.value_serde, repartition_required=True)
        return KGroupedStream(self._builder, selected._node,
                              _serdes.resolve_serde(key_serde, "group_by key_serde"),
                              _serdes.resolve_serde(value_serde, "group_by value_serde") or self.value_serde,
                              repartition_required=True)

    def group_by_key(self, *, key_serde: Any = None, value_serde: Any = None) -> "KGroupedStream":
        """Group by the current key; repartitions only if an upstream operation changed the key."""
        return KGroupedStream(self._builder, self._node,
                              _serdes.resolve_serde(key_serde, "group_by_key key_serde") or self.key_serde,
                              _serdes.resolve_serde(value_serde, "group_by_key value_serde") or self.value_serde,
                              repartition_required=self._repartition_required)


class KGroupedStream:
    def __init__(self, builder: StreamsBuilder, node: str, key_serde: Any, value_serde: Any,
                 repartition_required: bool) -> None:
        self._builder = builder
        self._node = node
        self.key_serde = key_serde
        self.value_serde = value_serde
        self._repartition_required = repartition_required

    def _repartition(self, topic_prefix: str) -> str:
        """Null-key filter -> sink to `<prefix>-repartition` | source from it. Returns the source name.

        Names are allocated in Kafka's order (sink, filter, source) so describe() matches Kafka's."""
        graph = self._builder._graph
        sink = graph.new_name(SINK)
        filt = graph.new_name(FILTER)
        source = graph.new_name(SOURCE)
        topic = topic_prefix + REPARTITION_SUFFIX
        parent = self._node
        key_serde, value_serde = self.key_serde, self.value_serde
        where = f"repartition topic {topic!r}"
        if key_serde is None:
            key_serde = _serdes.ConfigDefaultSerde(_serdes.DEFAULT_KEY_SERDE_CONFIG, where)
        if value_serde is None:
            value_serde = _serdes.ConfigDefaultSerde(_serdes.DEFAULT_VALUE_SERDE_CONFIG, where)
        graph.add(RepartitionNode(source, (parent,), topic, filt, sink, NullKeyFilterProcessor, key_serde, value_serde))
        self.key_serde, self.value_serde = key_serde, value_serde
        return source

    def count(self, store: str | Materialized | None = None) -> "KTable":
        """Count records per key into a KV store (caching and change logging on by default)."""
        mat = as_materialized(store, "count")
        graph = self._builder._graph
        store_name = mat.store_name or graph.new_name(AGGREGATE_STORE)
        agg = graph.new_name(AGGREGATE)
        parent = self._node
        if self._repartition_required:
            parent = self._repartition(store_name)
        key_serde = mat.key_serde or self.key_serde
        if key_serde is None:
            key_serde = _serdes.ConfigDefaultSerde(_serdes.DEFAULT_KEY_SERDE_CONFIG, f"store {store_name!r}")
        value_serde = mat.value_serde or _serdes.INT64
        caching = mat.caching_enabled
        graph.add(StatefulProcessorNode(
            agg, (parent,), lambda: AggregateProcessor(store_name, caching, count_initializer, count_adder),
            store_builder=_MaterializedStoreBuilder(mat, store_name, key_serde, value_serde), store_name=store_name,
            deferred_serdes=(key_serde,)))
        return KTable(self._builder, agg, key_serde, value_serde, store_name)


class _MaterializedStoreBuilder:
    """A StoreBuilder for a DSL store; the real `state.Stores` builder is created on first build()
    so describing or validating a DSL topology needs no store code."""

    def __init__(self, mat: Materialized, store_name: str, key_serde: Any, value_serde: Any) -> None:
        self.name = store_name
        self.kind = "key_value"
        self.materialized = mat
        self.key_serde = key_serde
        self.value_serde = value_serde
        self.logging_enabled = mat.logging_enabled
        self.caching_enabled = mat.caching_enabled
        self.log_config = dict(mat.log_config or {})
        self._builder: Any = None

    def store_builder(self) -> Any:
        if self._builder is None:
            from state.stores import Stores

            mat = self.materialized
            supplier = mat.store_supplier
            if supplier is None:
                supplier = (Stores.in_memory_key_value_store(self.name) if mat.in_memory
                            else Stores.persistent_key_value_store(self.name))
            builder = Stores.key_value_store_builder(supplier, key_serde=self.key_serde,
                                                     value_serde=self.value_serde)
            builder = builder.with_caching_enabled() if mat.caching_enabled else builder.with_caching_disabled()
            builder = (builder.with_logging_enabled(mat.log_config) if mat.logging_enabled
                       else builder.with_logging_disabled())
            self._builder = builder
        return self._builder

    def build(self) -> Any:
        return self.store_builder().build()


class KTable:
    """A changelog stream materialized in a store; `to_stream()` emits its updates."""

    def __init__(self, builder: StreamsBuilder, node: str, key_serde: Any, value_serde: Any,
                 store_name: Optional[str]) -> None:
        self._builder = builder
        self._node = node
        self.key_serde = key_serde
        self.value_serde = value_serde
        self.store_name = store_name

    @property
    def queryable_store_name(self) -> Optional[str]:
        return self.store_name

    def to_stream(self) -> KStream:
        graph = self._builder._graph
        name = graph.new_name(TOSTREAM)
        parent = self._node
        graph.add(ProcessorGraphNode(name, (parent,), ToStreamProcessor))
        return KStream(self._builder, name, self.key_serde, self.value_serde)
