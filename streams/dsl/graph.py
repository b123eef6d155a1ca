"""The DSL's logical graph: typed nodes recorded by StreamsBuilder/KStream/KTable, replayed into a
Topology (Kafka's GraphNode family: StreamSourceNode, ProcessorGraphNode, StatefulProcessorNode,
OptimizableRepartitionNode, StreamSinkNode).

Keeping the graph separate from the Topology lets `build()` run more than once and leaves room for
graph rewrites (repartition merging, key-changing optimizations): each node says what it is, so a
rewrite can look at the graph. A new kind of step (a table source, a join, a suppression) is a new
node class with its own `write`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Optional

from streams import serdes as _serdes
from streams.dsl.naming import processor_name
from streams.dsl.ops.stateless import PassThroughProcessor
from streams.processor import FailOnInvalidTimestamp
from streams.topology import Topology


@dataclass
class GraphNode:
    """One DSL step: `write(topology)` adds its topology node(s), stores and internal topics."""

    name: str
    parents: tuple[str, ...]
    #: a join that lets None-key records through (Kafka's NULL_KEY_RELAXED_JOIN label: stream-stream
    #: left/outer joins, stream-table and stream-global-table left joins, KIP-962)
    relaxed_null_key_join = False
    #: what the step does to records, for topology.optimization's merge.repartition.topics:
    #: KEY_CHANGING (Kafka's isKeyChangingOperation: select_key, map, flat_map, group_by's key
    #: selection), VALUE_CHANGING (its isValueChangingOperation: map_values, flat_map_values),
    #: OPAQUE (process(): it may change keys and values as it likes), MERGING (KStream.merge's
    #: node); "" for every other step
    role = ""

    def write(self, topology: Topology) -> None:
        raise NotImplementedError


REPARTITION_TIMESTAMPS = FailOnInvalidTimestamp()  # a repartition topic's source's extractor

KEY_CHANGING, VALUE_CHANGING, OPAQUE, MERGING = "key-changing", "value-changing", "opaque", "merging"


def _defer(topology: Topology, *serdes: Any) -> None:
    """Serdes standing for the config's defaults are bound when the app config is known."""
    for serde in serdes:
        if isinstance(serde, _serdes.ConfigDefaultSerde):
            topology.add_deferred_serde(serde)


@dataclass
class StreamSourceNode(GraphNode):
    topics: tuple[str, ...] = ()
    key_serde: Any = None
    value_serde: Any = None
    timestamp_extractor: Any = None
    offset_reset: Optional[str] = None

    def write(self, topology: Topology) -> None:
        topology.add_source(self.name, *self.topics, key_serde=self.key_serde, value_serde=self.value_serde,
                            timestamp_extractor=self.timestamp_extractor, offset_reset=self.offset_reset)


@dataclass
class ProcessorGraphNode(GraphNode):
    supplier: Callable[[], Any] = None  # type: ignore[assignment]

    def write(self, topology: Topology) -> None:
        topology.add_processor(self.name, self.supplier, *self.parents)


@dataclass
class StreamGlobalTableJoinNode(ProcessorGraphNode):
    """A stream-global-table join (Kafka's StreamTableJoinNode without stores: every processor may
    read a global store)."""

    relaxed_null_key_join: bool = False  # a left join


@dataclass
class ProcessorWithStoresNode(ProcessorGraphNode):
    """A processor connected to stores it does not own (`store_names`: builder.add_state_store's
    for KStream.process / process_values and KTable.transform_values, another step's)."""

    store_names: tuple = ()

    def write(self, topology: Topology) -> None:
        super().write(topology)
        self._connect(topology)

    def _connect(self, topology: Topology) -> None:
        if self.store_names:
            topology.connect_processor_and_state_stores(self.name, *self.store_names)


@dataclass
class StatefulProcessorNode(ProcessorWithStoresNode):
    """A processor with the store it owns (the store's builder, added with the processor), and
    connected to `store_names` too if any."""

    store_builder: Any = None
    store_name: str = ""
    deferred_serdes: tuple = ()
    #: asked when the topology is written: whether the store is made at all (a source table's
    #: is only when materialized in Kafka's sense); None: always
    store_wanted: Optional[Callable[[], bool]] = None

    def write(self, topology: Topology) -> None:
        ProcessorGraphNode.write(self, topology)
        if self.store_wanted is None or self.store_wanted():
            _defer(topology, *self.deferred_serdes)  # the store's serdes: none needed without it
            topology.add_state_store(self.store_builder, self.name)
        self._connect(topology)  # after its own store, as Kafka lists them


@dataclass
class RepartitionNode(GraphNode):
    """Null-key filter -> sink to the internal `topic` | source reading it (the node's name).
    Without a filter (a grouped table's repartition: its select step already skips None keys)
    the sink reads the parent directly."""

    topic: str = ""
    filter_name: str = ""
    sink_name: str = ""
    filter_supplier: Optional[Callable[[], Any]] = None
    key_serde: Any = None
    value_serde: Any = None
    deferred_serdes: tuple = ()
    num_partitions: Optional[int] = None  # fixed by repartition(num_partitions=)
    #: Kafka's OptimizableRepartitionNode (a grouping's, a join's, to_table's): merge.repartition.topics
    #: may replace it by one repartition right after the key-changing step; KStream.repartition's is not
    optimizable: bool = False
    #: set by Graph.to_topology: a join downstream takes None keys, so the filter passes them
    keeps_null_keys: bool = False

    def write(self, topology: Topology) -> None:
        topology.add_internal_topic(self.topic, num_partitions=self.num_partitions)
        _defer(topology, self.key_serde, self.value_serde, *self.deferred_serdes)
        parent = self.parents
        if self.filter_supplier is not None:
            supplier = PassThroughProcessor if self.keeps_null_keys else self.filter_supplier
            topology.add_processor(self.filter_name, supplier, *self.parents)
            parent = (self.filter_name,)
        topology.add_sink(self.sink_name, self.topic, *parent, key_serde=self.key_serde,
                          value_serde=self.value_serde)
        # Kafka's repartition sources name FailOnInvalidTimestamp: default.timestamp.extractor
        # never re-extracts what the upstream task already chose
        topology.add_source(self.name, self.topic, key_serde=self.key_serde, value_serde=self.value_serde,
                            timestamp_extractor=REPARTITION_TIMESTAMPS)


@dataclass
class TableSourceNode(GraphNode):
    """builder.table: a source of the topic | the table source processor with its store (Kafka's
    TableSourceNode: KSTREAM-SOURCE- then KTABLE-SOURCE-)."""

    topic: str = ""
    source_name: str = ""
    key_serde: Any = None
    value_serde: Any = None
    supplier: Callable[[], Any] = None  # type: ignore[assignment]
    store_builder: Any = None
    deferred_serdes: tuple = ()
    # topology.optimization reuse.ktable.source.topics (set by StreamsBuilder.build(config)): the
    # topic is the store's changelog (Kafka's shouldReuseSourceTopicForChangelog)
    reuse_source_topic: bool = False
    # the store's logging as asked for, while reuse_source_topic has turned it off (a later build
    # without the optimization gives it back)
    logging_asked: Optional[tuple] = None
    #: as StatefulProcessorNode's: builder.table's store is made only when the table is
    #: materialized in Kafka's sense (a global table's always is)
    store_wanted: Optional[Callable[[], bool]] = None

    def write(self, topology: Topology) -> None:
        topology.add_source(self.source_name, self.topic, key_serde=self.key_serde, value_serde=self.value_serde)
        topology.add_processor(self.name, self.supplier, self.source_name)
        if self.store_wanted is not None and not self.store_wanted():
            return
        _defer(topology, *self.deferred_serdes)
        builder = self.store_builder
        if self.reuse_source_topic:
            if self.logging_asked is None:
                self.logging_asked = (builder.logging_enabled, builder.log_config)
            builder.with_logging_disabled()
        elif self.logging_asked is not None:
            enabled, log_config = self.logging_asked
            if enabled:
                builder.with_logging_enabled(log_config)
            self.logging_asked = None
        topology.add_state_store(builder, self.name)
        if self.reuse_source_topic:
            topology.connect_source_store_and_topic(builder.name, self.topic)


@dataclass
class GlobalTableSourceNode(TableSourceNode):
    """builder.global_table: the same parts, as a global store (Kafka's TableSourceNode with
    isGlobalKTable: addGlobalStore)."""

    def write(self, topology: Topology) -> None:
        _defer(topology, *self.deferred_serdes)
        topology.add_global_store(self.store_builder, self.source_name, self.key_serde, self.value_serde,
                                  self.topic, self.name, self.supplier)


@dataclass
class StateStoreNode(GraphNode):
    """builder.add_state_store(store_builder): a store with no processor yet."""

    store_builder: Any = None

    def write(self, topology: Topology) -> None:
        topology.add_state_store(self.store_builder)


class CachingSwitch:
    """The caching switch of a store builder that makes its real builder on first use
    (`store_builder()`): Topology.bind_config turns caching off under a zero-byte cache."""

    def store_builder(self) -> Any:  # pragma: no cover - provided by the class using it
        raise NotImplementedError

    @property
    def caching_enabled(self) -> bool:
        return self.store_builder().caching_enabled

    def with_caching_enabled(self) -> Any:
        self.store_builder().with_caching_enabled()
        return self

    def with_caching_disabled(self) -> Any:
        self.store_builder().with_caching_disabled()
        return self


class LazyStoreBuilder(CachingSwitch):
    """A StoreBuilder for a DSL store made on first use (`make(suppliers)` -> the real builder),
    so describing or validating a DSL topology needs no store code. `suppliers`: the
    DslStoreSuppliers its StreamsBuilder's config chose, or None for the app's
    (`configure_store_type`, which Topology.bind_config calls), as Kafka's StoreFactory.
    `app_only`: a store no builder's config reaches (Kafka's SubscriptionStoreFactory)."""

    def __init__(self, name: str, kind: str, make: Callable[[Any], Any], suppliers: Any = None, *,
                 app_only: bool = False) -> None:
        self.name = name
        self.kind = kind
        self._make = make
        self._builder: Any = None
        self._fixed = suppliers
        self._configured: Any = None
        self.app_only = app_only

    @property
    def store_type_fixed(self) -> bool:
        """Whether the builder's config chose the store type (the app's cannot change it)."""
        return self._fixed is not None

    def configure_store_type(self, suppliers: Any) -> None:
        """The app's store type (store_suppliers.app_store_suppliers), for a store the builder's
        config left open. A builder made before (by a topology built with an optimization) keeps
        its settings and takes the new store supplier."""
        if self._fixed is not None or type(suppliers) is type(self._configured):
            return
        self._configured = suppliers
        if self._builder is not None:
            self._builder.supplier = self._make(suppliers).supplier

    def store_builder(self) -> Any:
        if self._builder is None:
            self._builder = self._make(self._fixed or self._configured)
        return self._builder

    @property
    def logging_enabled(self) -> bool:
        return self.store_builder().logging_enabled

    @property
    def log_config(self) -> dict:
        return self.store_builder().log_config

    def with_logging_disabled(self) -> "LazyStoreBuilder":
        self.store_builder().with_logging_disabled()
        return self

    def with_logging_enabled(self, config: Optional[dict] = None) -> "LazyStoreBuilder":
        self.store_builder().with_logging_enabled(config)
        return self

    def build(self) -> Any:
        return self.store_builder().build()


def table_store(mat: Any, name: str, key_serde: Any, value_serde: Any, suppliers: Any) -> LazyStoreBuilder:
    """The lazy builder of a DSL table's timestamped key-value store (`mat`'s, with its serdes
    over the given ones; KIP-258: a table keeps its values' timestamps); `suppliers`: the store
    type its StreamsBuilder's config chose, or None."""
    from streams.dsl.materialized import key_value_store_builder  # it imports the store code

    return LazyStoreBuilder(name, "key_value", lambda chosen: key_value_store_builder(
        mat, name, key_serde, value_serde, timestamped=True, suppliers=chosen), suppliers)


@dataclass
class StreamSinkNode(GraphNode):
    topic: str = ""
    key_serde: Any = None
    value_serde: Any = None
    partitioner: Any = None

    def write(self, topology: Topology) -> None:
        topology.add_sink(self.name, self.topic, *self.parents, key_serde=self.key_serde,
                          value_serde=self.value_serde, partitioner=self.partitioner)


def _upstream_sources(topology: Topology, name: str) -> list[str]:
    """The source nodes `name` descends from (Kafka's subTopologySourceNodes of a table)."""
    found, seen, todo = [], set(), [name]
    while todo:
        node = todo.pop()
        if node in seen:
            continue
        seen.add(node)
        spec = topology.node(node)
        if spec.kind == "source":
            found.append(node)
        todo.extend(spec.parents)
    return sorted(found)


@dataclass
class InternalTopicNode(GraphNode):
    """Sink `sink_name` (the parents, `partitioner`) to the internal `topic` | source reading it
    (the node's name), co-partitioned with the sources `copartition_with` descends from (Kafka's
    copartitionSources): the foreign-key join's subscription and response topics."""

    topic: str = ""
    sink_name: str = ""
    key_serde: Any = None
    value_serde: Any = None
    partitioner: Any = None
    copartition_with: str = ""
    deferred_serdes: tuple = ()

    def write(self, topology: Topology) -> None:
        topology.add_internal_topic(self.topic)
        _defer(topology, self.key_serde, self.value_serde, *self.deferred_serdes)
        topology.add_sink(self.sink_name, self.topic, *self.parents, key_serde=self.key_serde,
                          value_serde=self.value_serde, partitioner=self.partitioner)
        topology.add_source(self.name, self.topic, key_serde=self.key_serde, value_serde=self.value_serde)
        if self.copartition_with:
            topology.copartition_sources(self.name, *_upstream_sources(topology, self.copartition_with))


def _sources_of(topology: Topology, names: tuple[str, ...]) -> list[str]:
    """The source nodes the joined nodes descend from (a join's co-partition group)."""
    return list(dict.fromkeys(s for name in names for s in _upstream_sources(topology, name)))


@dataclass
class StreamStreamJoinNode(GraphNode):
    """A windowed stream-stream join (Kafka's StreamStreamJoinNode plus its two
    WindowedStreamProcessorNodes): parents (this, other) -> KSTREAM-WINDOWED- each -> the join
    side processors -> KSTREAM-MERGE- (the node's name). Each window store is connected to its
    side's windowed node and to the other side's join processor, the outer store (left/outer
    joins) to both join processors; both inputs form a co-partition group. As a self-join
    (`self_join`): this side's windowed node -> the self-join processor (the node's name), one store."""

    this_windowed: str = ""
    other_windowed: str = ""
    join_this: str = ""
    join_other: str = ""
    this_supplier: Callable[[], Any] = None  # type: ignore[assignment]
    other_supplier: Callable[[], Any] = None  # type: ignore[assignment]
    #: windowed_supplier(is_left): the supplier of a side's windowed node
    windowed_supplier: Callable[[bool], Callable[[], Any]] = None  # type: ignore[assignment]
    merge_supplier: Callable[[], Any] = None  # type: ignore[assignment]
    this_store: Any = None
    other_store: Any = None
    outer_store: Any = None
    deferred_serdes: tuple = ()
    relaxed_null_key_join: bool = False  # a left or outer join
    #: the processor of an inner join of a stream with itself over the `this` store alone
    self_join_supplier: Optional[Callable[[], Any]] = None
    #: topology.optimization single.store.self.join (set by StreamsBuilder.build(config)): written as
    #: Kafka's rewriteSingleStoreSelfJoin leaves it: the windowed node, then the self-join
    #: processor under the node's name, one store
    self_join: bool = False

    def can_self_join(self) -> bool:
        """Kafka's rule, for inner joins (a left or outer join's unmatched and None-key results
        are not the self-join processor's): both sides read the same node."""
        return self.self_join_supplier is not None and self.parents[0] == self.parents[1]

    def write(self, topology: Topology) -> None:
        _defer(topology, *self.deferred_serdes)
        this_parent, other_parent = self.parents
        if self.self_join:
            topology.add_processor(self.this_windowed, self.windowed_supplier(True), this_parent)
            topology.add_processor(self.name, self.self_join_supplier, self.this_windowed)
            topology.add_state_store(self.this_store, self.this_windowed, self.name)
            topology.copartition_sources(*_sources_of(topology, self.parents))
            return
        topology.add_processor(self.this_windowed, self.windowed_supplier(True), this_parent)
        topology.add_processor(self.other_windowed, self.windowed_supplier(False), other_parent)
        topology.add_processor(self.join_this, self.this_supplier, self.this_windowed)
        topology.add_processor(self.join_other, self.other_supplier, self.other_windowed)
        topology.add_processor(self.name, self.merge_supplier, self.join_this, self.join_other)
        topology.add_state_store(self.this_store, self.this_windowed, self.join_other)
        topology.add_state_store(self.other_store, self.other_windowed, self.join_this)
        if self.outer_store is not None:
            topology.add_state_store(self.outer_store, self.join_this, self.join_other)
        topology.copartition_sources(*_sources_of(topology, self.parents))


@dataclass
class StreamTableJoinNode(GraphNode):
    """A stream-table join (Kafka's StreamTableJoinNode): the join processor reads the stream
    (its only parent) and is connected to the stores of the table's value getter; the stream's
    and the table's sources form a co-partition group."""

    supplier: Callable[[], Any] = None  # type: ignore[assignment]
    table_node: str = ""
    store_names: tuple = ()
    relaxed_null_key_join: bool = False  # a left join

    def write(self, topology: Topology) -> None:
        topology.add_processor(self.name, self.supplier, *self.parents)
        if self.store_names:
            topology.connect_processor_and_state_stores(self.name, *self.store_names)
        topology.copartition_sources(*_sources_of(topology, self.parents + (self.table_node,)))


@dataclass
class TableTableJoinNode(GraphNode):
    """A primary-key table-table join (Kafka's KTableKTableJoinNode): parents (this, other) ->
    KTABLE-JOINTHIS- / KTABLE-JOINOTHER- (each connected to the other table's value getter
    stores) -> KTABLE-MERGE- (the node's name, holding the store when materialized); both
    tables' sources form a co-partition group."""

    join_this: str = ""
    join_other: str = ""
    this_supplier: Callable[[], Any] = None  # type: ignore[assignment]
    other_supplier: Callable[[], Any] = None  # type: ignore[assignment]
    merge_supplier: Callable[[], Any] = None  # type: ignore[assignment]
    this_store_names: tuple = ()
    other_store_names: tuple = ()
    store_builder: Any = None
    deferred_serdes: tuple = ()

    def write(self, topology: Topology) -> None:
        _defer(topology, *self.deferred_serdes)
        this_parent, other_parent = self.parents
        topology.add_processor(self.join_this, self.this_supplier, this_parent)
        topology.add_processor(self.join_other, self.other_supplier, other_parent)
        topology.add_processor(self.name, self.merge_supplier, self.join_this, self.join_other)
        if self.other_store_names:
            topology.connect_processor_and_state_stores(self.join_this, *self.other_store_names)
        if self.this_store_names:
            topology.connect_processor_and_state_stores(self.join_other, *self.this_store_names)
        if self.store_builder is not None:
            topology.add_state_store(self.store_builder, self.name)
        topology.copartition_sources(*_sources_of(topology, self.parents))


@dataclass
class Graph:
    nodes: list[GraphNode] = field(default_factory=list)
    _index: int = 0
    #: the internal resources whose names the DSL generated, as (changelog topic, store,
    #: repartition topic), each possibly None, in the order the operations made them (Kafka's
    #: InternalTopologyBuilder.implicitInternalNames; streams/dsl/naming.py: unnamed_resources)
    implicit_names: list[tuple] = field(default_factory=list)

    def implicit(self, *, changelog: Optional[str] = None, store: Optional[str] = None,
                 repartition: Optional[str] = None) -> None:
        """Note generated names of internal resources (Kafka's addImplicitInternalNames)."""
        self.implicit_names.append((changelog, store, repartition))

    def implicit_store(self, store: str, logged: bool) -> None:
        """Note a generated store name, and its changelog's when the store is `logged`."""
        self.implicit(store=store, changelog=store + "-changelog" if logged else None)

    def name_or_new(self, name: Optional[str], prefix: str) -> str:
        """`name`, else a new generated one; a given name still uses up the index (Kafka's
        NamedInternal.orElseGenerateWithPrefix)."""
        generated = self.new_name(prefix)
        return generated if name is None else name

    def suffixed_or_new(self, name: Optional[str], suffix: str, prefix: str, op: str) -> str:
        """`name + suffix` (checked by Kafka's name rules, naming `op`), else a new generated name;
        the index is used up either way (Kafka's NamedInternal.suffixWithOrElseGet)."""
        return self.name_or_new(None if name is None else processor_name(name + suffix, op), prefix)

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

    def to_topology(self, topology: Optional[Topology] = None, *, merge_repartitions: bool = False,
                    self_join: bool = False) -> Topology:
        """The recorded steps written into `topology` (a new one by default); with
        `merge_repartitions`, as merge.repartition.topics rewrites them (the recorded steps stay
        as they are, so that another build may differ); with `self_join`, each inner join whose
        two sides then read one node joins over one store (single.store.self.join, which Kafka
        applies after merging the repartitions: a key-changed stream joined with itself under
        two join names has two repartitions until they are merged)."""
        topology = topology if topology is not None else Topology()
        nodes = self.nodes
        if merge_repartitions:
            from streams.dsl.repartition_merge import merge_repartition_topics

            nodes = merge_repartition_topics(nodes)
        for node in nodes:
            if type(node) is StreamStreamJoinNode:
                node.self_join = self_join and node.can_self_join()
        relaxed = _upstream_of_relaxed_joins(nodes)
        for node in nodes:
            if isinstance(node, RepartitionNode):
                node.keeps_null_keys = node.name in relaxed
            node.write(topology)
        return topology


def _upstream_of_relaxed_joins(nodes: list[GraphNode]) -> set[str]:
    """The nodes with a None-key relaxed join downstream (Kafka's
    NodesWithRelaxedNullKeyJoinDownstream): a repartition among them keeps its None-key records,
    the others drop them (InternalStreamsBuilder.rewriteRepartitionNodes)."""
    by_name = {node.name: node for node in nodes}
    found: set[str] = set()
    todo = [parent for node in nodes if node.relaxed_null_key_join for parent in node.parents]
    while todo:
        name = todo.pop()
        if name not in found:
            found.add(name)
            upstream = by_name.get(name)
            if upstream is not None:
                todo.extend(upstream.parents)
    return found
