"""StreamsBuilder and KStream (Kafka's StreamsBuilder and KStreamImpl): every operation records
a typed graph node (streams/dsl/graph.py) whose operator lives in streams/dsl/ops/."""

from __future__ import annotations

import logging
import re
from typing import TYPE_CHECKING, Any, Callable, Iterable, Mapping, NamedTuple, Optional

from streams import serdes as _serdes
from streams.dsl import naming as N
from streams.dsl.branched import Branched
from streams.dsl.graph import (KEY_CHANGING, MERGING, OPAQUE, VALUE_CHANGING, GlobalTableSourceNode, Graph,
                               LazyStoreBuilder, ProcessorGraphNode, ProcessorWithStoresNode, RepartitionNode,
                               StateStoreNode, StatefulProcessorNode, StreamSinkNode, StreamSourceNode,
                               StreamStreamJoinNode, StreamTableJoinNode, TableSourceNode, table_store)
from streams.dsl.joins.stream_stream import INNER as _INNER, LEFT as _LEFT, OUTER as _OUTER
from streams.dsl.joins.stream_stream import join_window_store_builder, outer_join_store_builder
from streams.dsl.materialized import Materialized, as_materialized
from streams.dsl.printed import Printed
from streams.dsl.ops.stateless import (BranchProcessor, FilterProcessor, FlatMapProcessor, FlatMapValuesProcessor,
                                       KeySelectProcessor, MapProcessor, MapValuesProcessor, NullKeyFilterProcessor,
                                       PassThroughProcessor, PeekProcessor)
from streams.dsl.ops.stream_join import SelfJoinProcessor, StreamStreamJoin, StreamTableJoinProcessor
from streams.dsl.ops.table import TableSourceProcessor
from streams.dsl.store_suppliers import builder_store_suppliers
from streams.dsl.windows import JoinWindows
from streams.errors import InternalTopicError, TopologyError
from streams.fixed_key import fixed_key_supplier
from streams.internal_topics import validate_topic_name
from streams.optimizations import (MERGE_REPARTITION_TOPICS, REUSE_KTABLE_SOURCE_TOPICS, SINGLE_STORE_SELF_JOIN,
                                  topology_optimizations)
from streams.processor import StreamPartitioner, TimestampExtractor
from streams.topology import Topology

if TYPE_CHECKING:  # imported lazily at run time: ktable and grouped import this module
    from streams.dsl.global_table import GlobalKTable
    from streams.dsl.grouped import KGroupedStream
    from streams.dsl.ktable import KTable

__all__ = ["StreamsBuilder", "KStream"]

log = logging.getLogger(__name__)
_check_fn = N.check_fn


_GENERATED_PREFIX = re.compile(r"KSTREAM.*-[0-9]{10}")


def repartition_name(name: Optional[str], op: str) -> Optional[str]:
    """The name a user gives an operation that names a repartition topic `<name>-repartition`
    (Kafka's Grouped.as, StreamJoined / Joined.withName, Named of to_table), checked: a
    TopologyError naming `op` unless it can name that topic."""
    if name is None:
        return None
    if not isinstance(name, str) or not name:
        raise TopologyError(f"{op}: name must be a non-empty string, got {name!r}")
    try:
        validate_topic_name(name + N.REPARTITION_SUFFIX)
    except InternalTopicError as exc:
        raise TopologyError(f"{op}: name {name!r} cannot name a topic ({exc})") from None
    return name


def _repartition_topic(prefix: str) -> str:
    return prefix if prefix.endswith(N.REPARTITION_SUFFIX) else prefix + N.REPARTITION_SUFFIX


def repartition(builder: "StreamsBuilder", parent: str, topic_prefix: str, key_serde: Any, value_serde: Any, *,
                num_partitions: Optional[int] = None, optimizable: bool = True,
                user_named: bool = False) -> tuple[str, Any, Any]:
    """Null-key filter -> sink to `<prefix>-repartition` | source from it (Kafka's
    createRepartitionedSource). Three generated names are always allocated (sink, filter,
    source, Kafka's order); they name the nodes when the prefix is itself a generated name
    (`KSTREAM...-<10 digits>`), else the nodes are `<topic>-sink`, `-filter` and `-source`.
    `num_partitions` fixes the topic's partition count; `optimizable=False` keeps the topic out of
    merge.repartition.topics (KStream.repartition's). A topic the user did not name (`user_named`,
    Kafka's isRepartitionTopicNameProvidedByUser) is noted as unnamed. Returns (source name, key
    serde, value serde)."""
    graph = builder._graph
    topic = _repartition_topic(topic_prefix)
    if not user_named:
        graph.implicit(repartition=topic)
    sink = graph.new_name(N.SINK)
    filt = graph.new_name(N.FILTER)
    source = graph.new_name(N.SOURCE)
    if not _GENERATED_PREFIX.fullmatch(topic_prefix):
        sink, filt, source = topic + "-sink", topic + "-filter", topic + "-source"
    where = f"repartition topic {topic!r}"
    key_serde = N.key_or_default(key_serde, where)
    value_serde = N.value_or_default(value_serde, where)
    graph.add(RepartitionNode(source, (parent,), topic, filt, sink, NullKeyFilterProcessor, key_serde, value_serde,
                              num_partitions=num_partitions, optimizable=optimizable))
    return source, key_serde, value_serde


def repartition_again(builder: "StreamsBuilder", topic_prefix: str, user_named: bool) -> None:
    """What Kafka does when it makes a repartition it then drops for one already made (a second
    aggregation of a named grouping, a cogroup's second aggregate, a stream joined again): the
    three names are used up, and a topic the user did not name is noted as unnamed again."""
    graph = builder._graph
    if not user_named:
        graph.implicit(repartition=_repartition_topic(topic_prefix))
    for prefix in (N.SINK, N.FILTER, N.SOURCE):
        graph.new_name(prefix)


class StreamsBuilder:
    """Entry point of the DSL: `stream(...)` then operations, then `build()` -> Topology.
    `config` (Kafka's StreamsBuilder(TopologyConfig)): its `dsl.store.suppliers.class` or
    `default.dsl.store` chooses the stores of the DSL operations that follow
    (streams/dsl/store_suppliers.py); with `ensure.explicit.internal.resource.naming` true,
    build() refuses a topology with a generated internal topic or store name (KIP-1111);
    ConfigError for a bad value."""

    def __init__(self, config: Optional[Mapping[str, Any]] = None) -> None:
        self._graph = Graph()
        self._source_topics: dict[str, str] = {}
        #: the DslStoreSuppliers config chose, None to leave it to the app's config
        self.dsl_store_suppliers = builder_store_suppliers(config)
        self.ensure_explicit_naming = N.ensure_explicit_naming(config or {})

    def stream(self, topics: str | Iterable[str], *, key_serde: Any = None, value_serde: Any = None,
               timestamp_extractor: Optional[TimestampExtractor] = None,
               offset_reset: Optional[str] = None, name: Optional[str] = None) -> "KStream":
        """A stream of `topics`. `offset_reset` ("earliest" or "latest") is where a partition
        the application has no committed offset for starts (Kafka's Consumed.withOffsetResetPolicy);
        None: the main consumer's auto.offset.reset, "earliest" unless configured. `name`
        (Kafka's Consumed.as) names the source node."""
        name = N.processor_name(name, "stream")
        topic_list = [topics] if isinstance(topics, str) else list(topics)
        if not topic_list:
            raise TopologyError("stream() needs at least one topic")
        for t in topic_list:
            if not isinstance(t, str) or not t:
                raise TopologyError(f"stream(): topic names must be non-empty strings, got {t!r}")
        key_serde = _serdes.resolve_serde(key_serde, f"stream({topic_list}) key_serde")
        value_serde = _serdes.resolve_serde(value_serde, f"stream({topic_list}) value_serde")
        name = self._graph.name_or_new(name, N.SOURCE)  # allocated even when an earlier source is reused (Kafka)
        source = StreamSourceNode(name, (), tuple(topic_list), key_serde, value_serde, timestamp_extractor,
                                  offset_reset)
        earlier = self._earlier_source(source)
        if earlier is not None:
            return KStream(self, earlier.name, key_serde, value_serde)
        for t in topic_list:
            self._source_topics[t] = name
        self._graph.add(source)
        return KStream(self, name, key_serde, value_serde)

    def _earlier_source(self, source: StreamSourceNode) -> Optional[StreamSourceNode]:
        """The stream source of the same topics `source` repeats (Kafka's
        mergeDuplicateSourceNodes: one source node, both streams read it), None for new topics,
        or TopologyError when the topics overlap another source's, or repeat them with another
        reading of the records (Kafka would read them as the first stream does, silently)."""
        readers = {self._source_topics.get(t) for t in source.topics}
        if readers == {None}:
            return None
        earlier = next((n for n in self._graph.nodes if n.name in readers), None)
        if (len(readers) != 1 or not isinstance(earlier, StreamSourceNode)
                or set(earlier.topics) != set(source.topics)):
            taken = sorted(t for t in source.topics if self._source_topics.get(t) is not None)
            raise TopologyError(f"stream({list(source.topics)}): topic {taken[0]!r} is already read by "
                                f"{self._source_topics[taken[0]]}; a topic can be read again only as a stream of "
                                "exactly the same topics")
        for what in ("offset_reset", "timestamp_extractor", "key_serde", "value_serde"):
            mine, theirs = getattr(source, what), getattr(earlier, what)
            if mine is not theirs and mine != theirs:
                raise TopologyError(f"stream({list(source.topics)}): these topics are already read by "
                                    f"{earlier.name} with {what} {theirs!r}, not {mine!r}: a stream read again "
                                    "must read its records the same way")
        return earlier

    def table(self, topic: str, *, key_serde: Any = None, value_serde: Any = None,
              store: str | Materialized | None = None, name: Optional[str] = None) -> "KTable":
        """A table of `topic`'s latest value per key, materialized in a timestamped key-value
        store (Kafka's KTableSource); the store is named by `store` or generated. `name`
        (Kafka's Consumed.as) names the table's processor, and its source node `<name>-source`."""
        src = self._table_source("table", topic, key_serde, value_serde, as_materialized(store, "table"), name)
        mat, name_of_store = src.mat, src.store_name
        table = _ktable().KTable(self, src.name, mat.key_serde or src.key_serde, mat.value_serde or src.value_serde,
                                 name_of_store if mat.store_name else None, store_name=name_of_store, source=True)
        self._graph.add(TableSourceNode(src.name, (), topic, src.source, src.key_serde, src.value_serde,
                                        lambda: table.source_processor(mat),
                                        src.builder, src.deferred, store_wanted=table.source_materialized))
        return table

    def global_table(self, topic: str, *, key_serde: Any = None, value_serde: Any = None,
                     store: str | Materialized | None = None, name: Optional[str] = None) -> "GlobalKTable":
        """A table of the latest value per key of ALL partitions of `topic`, kept on every
        instance by the global thread in a timestamped key-value store (Kafka's globalTable:
        a global store whose changelog is the topic itself, so logging is always off). Caching is
        as the Materialized says (on by default, as Kafka's): the global thread's cache (Kafka's
        share of statestore.cache.max.bytes), the test driver's one cache in the driver; other
        threads' reads cache nothing. `name` as table's."""
        mat = as_materialized(store, "global_table").with_logging_disabled()
        src = self._table_source("global_table", topic, key_serde, value_serde, mat, name)
        name_of_store = src.store_name
        self._graph.add(GlobalTableSourceNode(src.name, (), topic, src.source, src.key_serde, src.value_serde,
                                              lambda: TableSourceProcessor(name_of_store, False), src.builder,
                                              src.deferred))
        return _global_table().GlobalKTable(self, name_of_store, mat.store_name, mat.key_serde or src.key_serde,
                                            mat.value_serde or src.value_serde)

    def _table_source(self, op: str, topic: str, key_serde: Any, value_serde: Any,
                      mat: Materialized, given: Optional[str] = None) -> "_TableSource":
        """The names, serdes and store builder of a table source, allocated in Kafka's order
        (store name if generated, source, table source)."""
        given = N.processor_name(given, op)
        if not isinstance(topic, str) or not topic:
            raise TopologyError(f"{op}() needs a topic name, got {topic!r}")
        if topic in self._source_topics:
            raise TopologyError(f"{op}(): topic {topic!r} is already read by {self._source_topics[topic]}")
        graph = self._graph
        # Kafka's globalTable turns logging off before its store name is noted
        name_of_store = N.store_name(graph, mat if op == "table" else mat.with_logging_disabled(), f"{topic}-")
        source = graph.suffixed_or_new(given, "-source", N.SOURCE, op)
        name = graph.name_or_new(given, N.TABLE_SOURCE)
        self._source_topics[topic] = source
        key_serde = _serdes.resolve_serde(key_serde, f"{op}({topic!r}) key_serde")
        value_serde = _serdes.resolve_serde(value_serde, f"{op}({topic!r}) value_serde")
        where = f"table store {name_of_store!r}"
        store_key = N.key_or_default(mat.key_serde or key_serde, where)
        store_value = N.value_or_default(mat.value_serde or value_serde, where)
        builder = table_store(mat, name_of_store, store_key, store_value, self.dsl_store_suppliers)
        return _TableSource(mat, name_of_store, source, name, key_serde, value_serde, builder,
                            N.deferred(store_key, store_value))

    def add_state_store(self, store_builder: Any) -> "StreamsBuilder":
        """A store for KStream.process(..., stores=[name])."""
        if not callable(getattr(store_builder, "build", None)) or not isinstance(getattr(store_builder, "name", None),
                                                                                 str):
            raise TopologyError(f"add_state_store needs a StoreBuilder (with .name and .build()), got {store_builder!r}")
        self._graph.add(StateStoreNode(store_builder.name, (), store_builder))
        return self

    def build(self, config: Optional[Mapping[str, Any]] = None) -> Topology:
        """A new, validated Topology for the operations recorded so far. With `config` (Kafka's
        build(props)), its topology.optimization applies: reuse.ktable.source.topics makes each
        builder.table topic its store's changelog (no changelog topic; a task restores the store
        from its input partition up to the offset committed there); merge.repartition.topics
        makes the repartitions below a key change one (streams/dsl/repartition_merge.py);
        single.store.self.join joins a stream with itself (an inner join) over one window store."""
        requested = topology_optimizations(config or {})
        reuse = REUSE_KTABLE_SOURCE_TOPICS in requested
        self_join = SINGLE_STORE_SELF_JOIN in requested
        for node in self._graph.nodes:
            if type(node) is TableSourceNode:
                node.reuse_source_topic = reuse
        topology = self._graph.to_topology(merge_repartitions=MERGE_REPARTITION_TOPICS in requested,
                                           self_join=self_join)
        topology.applied_optimizations = requested
        topology.build()
        # Kafka's checkUnprovidedNames, once the topology is written
        unnamed = N.unnamed_resources(self._graph)
        topology.unnamed_internal_resources = unnamed
        if unnamed is not None:
            if self.ensure_explicit_naming:
                raise TopologyError(unnamed)
            log.warning("Explicit naming for internal resources is currently disabled. If you want to enforce "
                        "user-defined names for all internal resources, set %s to true. Note: Changing internal "
                        "resource names may require a full streams application reset for an already deployed "
                        "application. Consult the documentation on naming operators for more details. %s",
                        N.ENSURE_EXPLICIT_NAMING, unnamed)
        return topology


class _TableSource(NamedTuple):
    mat: Materialized
    store_name: str
    source: str
    name: str
    key_serde: Any
    value_serde: Any
    builder: LazyStoreBuilder
    deferred: tuple


class KStream:
    """A record stream. Operations return new streams; nothing runs until the topology does."""

    def __init__(self, builder: StreamsBuilder, node: str, key_serde: Any, value_serde: Any,
                 repartition_required: bool = False) -> None:
        self._builder = builder
        self._node = node
        self.key_serde = key_serde
        self.value_serde = value_serde
        self._repartition_required = repartition_required
        self._join_repartition: Optional[tuple[str, "KStream"]] = None  # (name, repartitioned stream)

    @property
    def name(self) -> str:
        return self._node

    def _add(self, prefix: str, supplier: Callable[[], Any], *, key_serde: Any, value_serde: Any,
             repartition_required: Optional[bool] = None, role: str = "", name: Optional[str] = None) -> "KStream":
        """A processor after this stream, named `name` or generated from `prefix`."""
        graph = self._builder._graph
        name = graph.name_or_new(name, prefix)
        parent = self._node
        graph.add(ProcessorGraphNode(name, (parent,), supplier)).role = role
        return KStream(self._builder, name, key_serde, value_serde,
                       self._repartition_required if repartition_required is None else repartition_required)

    def map_values(self, fn: Callable[[Any], Any], *, name: Optional[str] = None) -> "KStream":
        """New value = fn(value); the key is kept (no repartition). `name` (Kafka's Named, as for
        every operation below that takes one) names the processor."""
        _check_fn(fn, "map_values")
        return self._add(N.MAPVALUES, lambda: MapValuesProcessor(fn), key_serde=self.key_serde, value_serde=None,
                         role=VALUE_CHANGING, name=N.processor_name(name, "map_values"))

    def flat_map_values(self, fn: Callable[[Any], Iterable[Any]], *, name: Optional[str] = None) -> "KStream":
        """One output record per item of fn(value), all with the input's key and timestamp."""
        _check_fn(fn, "flat_map_values")
        return self._add(N.FLATMAPVALUES, lambda: FlatMapValuesProcessor(fn), key_serde=self.key_serde,
                         value_serde=None, role=VALUE_CHANGING, name=N.processor_name(name, "flat_map_values"))

    def filter(self, predicate: Callable[[Any, Any], bool], *, name: Optional[str] = None) -> "KStream":
        _check_fn(predicate, "filter")
        return self._add(N.FILTER, lambda: FilterProcessor(predicate), key_serde=self.key_serde,
                         value_serde=self.value_serde, name=N.processor_name(name, "filter"))

    def filter_not(self, predicate: Callable[[Any, Any], bool], *, name: Optional[str] = None) -> "KStream":
        _check_fn(predicate, "filter_not")
        return self._add(N.FILTER, lambda: FilterProcessor(predicate, negate=True), key_serde=self.key_serde,
                         value_serde=self.value_serde, name=N.processor_name(name, "filter_not"))

    def peek(self, action: Callable[[Any, Any], None], *, name: Optional[str] = None) -> "KStream":
        _check_fn(action, "peek")
        return self._add(N.PEEK, lambda: PeekProcessor(action), key_serde=self.key_serde,
                         value_serde=self.value_serde, name=N.processor_name(name, "peek"))

    def foreach(self, action: Callable[[Any, Any], None], *, name: Optional[str] = None) -> None:
        """Terminal: call action(key, value) for every record."""
        _check_fn(action, "foreach")
        self._add(N.FOREACH, lambda: PeekProcessor(action, forward=False), key_serde=None, value_serde=None,
                  name=N.processor_name(name, "foreach"))

    def print(self, printed: Optional[Printed] = None) -> None:
        """Terminal: each record as a line `[label]: key, value` on standard output or in a file
        (Kafka's print(Printed)); see streams.dsl.printed."""
        if printed is None:
            printed = Printed.to_sys_out()
        if not isinstance(printed, Printed):
            raise TopologyError(f"print needs a Printed (Printed.to_sys_out() or Printed.to_file(path)), "
                                f"got {printed!r}")
        # Kafka labels the lines with the printed stream's name, not the printer's
        stream_name = self._node
        self._add(N.PRINTER, lambda: printed.processor(stream_name), key_serde=None, value_serde=None,
                  name=printed.processor_name)

    def select_key(self, fn: Callable[[Any, Any], Any], *, name: Optional[str] = None) -> "KStream":
        """New key = fn(key, value); a later grouping repartitions."""
        _check_fn(fn, "select_key")
        return self._add(N.KEY_SELECT, lambda: KeySelectProcessor(fn), key_serde=None,
                         value_serde=self.value_serde, repartition_required=True, role=KEY_CHANGING,
                         name=N.processor_name(name, "select_key"))

    def to(self, topic: str, *, key_serde: Any = None, value_serde: Any = None,
           partitioner: Optional[StreamPartitioner] = None,
           name: Optional[str] = None) -> None:
        """Terminal: write to `topic`, or to the topic `topic(key, value, record_context)` names
        for each record (Kafka's TopicNameExtractor); serdes default to the stream's, then to the
        config's. `name` (Kafka's Produced.as) names the sink."""
        name = N.processor_name(name, "to")
        if not callable(topic) and (not isinstance(topic, str) or not topic):
            raise TopologyError(f"to() needs a topic name or a topic name extractor, got {topic!r}")
        ks = _serdes.resolve_serde(key_serde, f"to({topic!r}) key_serde") or self.key_serde
        vs = _serdes.resolve_serde(value_serde, f"to({topic!r}) value_serde") or self.value_serde
        graph = self._builder._graph
        name = graph.name_or_new(name, N.SINK)
        parent = self._node
        graph.add(StreamSinkNode(name, (parent,), topic, ks, vs, partitioner))

    def map(self, mapper: Callable[[Any, Any], tuple], *, name: Optional[str] = None) -> "KStream":
        """(key, value) -> mapper(key, value) = (new_key, new_value); a later grouping repartitions."""
        _check_fn(mapper, "map")
        return self._add(N.MAP, lambda: MapProcessor(mapper), key_serde=None, value_serde=None,
                         repartition_required=True, role=KEY_CHANGING, name=N.processor_name(name, "map"))

    def flat_map(self, mapper: Callable[[Any, Any], Iterable[tuple]], *, name: Optional[str] = None) -> "KStream":
        """One record per (new_key, new_value) pair of mapper(key, value); a later grouping repartitions."""
        _check_fn(mapper, "flat_map")
        return self._add(N.FLATMAP, lambda: FlatMapProcessor(mapper), key_serde=None, value_serde=None,
                         repartition_required=True, role=KEY_CHANGING, name=N.processor_name(name, "flat_map"))

    def merge(self, other: "KStream", *, name: Optional[str] = None) -> "KStream":
        """Both streams' records in one stream (Kafka's KSTREAM-MERGE-)."""
        if not isinstance(other, KStream) or other._builder is not self._builder:
            raise TopologyError(f"merge needs a KStream of the same StreamsBuilder, got {other!r}")
        graph = self._builder._graph
        name = graph.name_or_new(N.processor_name(name, "merge"), N.MERGE)
        graph.add(ProcessorGraphNode(name, (self._node, other._node), PassThroughProcessor)).role = MERGING
        same = self.key_serde is other.key_serde and self.value_serde is other.value_serde
        return KStream(self._builder, name, self.key_serde if same else None, self.value_serde if same else None,
                       self._repartition_required or other._repartition_required)

    def split(self, name: Optional[str] = None) -> "BranchedKStream":
        """Kafka's split(): `.branch(predicate, Branched...)`..., then `.default_branch()` or
        `.no_default_branch()` -> dict of branch streams."""
        if name is not None and (not isinstance(name, str) or not name):
            raise TopologyError(f"split: name must be a non-empty string, got {name!r}")
        return BranchedKStream(self, name)

    def repartition(self, *, key_serde: Any = None, value_serde: Any = None, name: Optional[str] = None,
                    num_partitions: Optional[int] = None) -> "KStream":
        """Through the internal topic `<application.id>-<name>-repartition` (generated name without
        `name`), keyed by murmur2 of the serialized key (Kafka's KStream.repartition); with
        `num_partitions` the topic has that many partitions and the sub-topology reading it that
        many tasks, else as many as the sub-topology writing it has."""
        if num_partitions is not None and (isinstance(num_partitions, bool) or not isinstance(num_partitions, int)
                                           or num_partitions < 1):
            raise TopologyError(f"repartition: num_partitions must be an int >= 1, got {num_partitions!r}")
        repartition_name(name, "repartition")
        graph = self._builder._graph
        prefix = name if name is not None else graph.new_name(N.REPARTITION)
        ks = _serdes.resolve_serde(key_serde, "repartition key_serde") or self.key_serde
        vs = _serdes.resolve_serde(value_serde, "repartition value_serde") or self.value_serde
        source, ks, vs = repartition(self._builder, self._node, prefix, ks, vs, num_partitions=num_partitions,
                                     optimizable=False, user_named=name is not None)
        return KStream(self._builder, source, ks, vs)

    def process(self, processor_supplier: Callable[[], Any], *, stores: Iterable[str] = (),
                name: Optional[str] = None) -> "KStream":
        """A Processor API processor inside the DSL, connected to `stores` (builder.add_state_store);
        what it forwards is the new stream, whose key may have changed (a later grouping repartitions).
        `name` (Kafka's Named) names the processor."""
        _check_fn(processor_supplier, "process")
        return self._user_processor(N.PROCESSOR, processor_supplier, stores, N.processor_name(name, "process"),
                                    keeps_key=False)

    def process_values(self, processor_supplier: Callable[[], Any], *, stores: Iterable[str] = (),
                       name: Optional[str] = None) -> "KStream":
        """A fixed-key processor (streams.fixed_key, Kafka's processValues): it sees FixedKeyRecords
        and forwards records derived from them, so keys stay as they are and nothing below needs a
        repartition for it; connected to `stores`. `name` (Kafka's Named) names the processor."""
        _check_fn(processor_supplier, "process_values")
        return self._user_processor(N.PROCESSVALUES, processor_supplier, stores,
                                    N.processor_name(name, "process_values"), keeps_key=True)

    def _user_processor(self, prefix: str, supplier: Callable[[], Any], stores: Iterable[str],
                        given: Optional[str], keeps_key: bool) -> "KStream":
        names = (stores,) if isinstance(stores, str) else tuple(stores)
        graph = self._builder._graph
        # a given name uses up no index (Kafka's process/processValues read Named as it is)
        name = given if given is not None else graph.new_name(prefix)
        if keeps_key:
            # Kafka's processValues: the stream keeps its key serde and whether it needs a
            # repartition; not a key or value change for merge.repartition.topics (Kafka's default)
            graph.add(ProcessorWithStoresNode(name, (self._node,), fixed_key_supplier(supplier, name), names))
            return KStream(self._builder, name, self.key_serde, None, self._repartition_required)
        graph.add(ProcessorWithStoresNode(name, (self._node,), supplier, names)).role = OPAQUE
        return KStream(self._builder, name, None, None, True)

    def to_table(self, *, store: str | Materialized | None = None, name: Optional[str] = None) -> "KTable":
        """The stream as a changelog: each record is the key's latest value (None deletes).
        `name` (Kafka's Named) names the processor and, after a key change, the repartition
        topic `<name>-repartition`."""
        mat = as_materialized(store, "to_table")
        given = repartition_name(name, "to_table")
        graph = self._builder._graph
        name = graph.name_or_new(given, N.TO_KTABLE)
        name_of_store = N.store_name(graph, mat, N.TO_KTABLE)
        parent, ks, vs = self._node, self.key_serde, self.value_serde
        if self._repartition_required:
            # named after the processor, not the store (Kafka's toTable): a store name given by
            # the user leaves the topic KSTREAM-TOTABLE-<n>-repartition, its nodes generated
            parent, ks, vs = repartition(self._builder, parent, name, mat.key_serde or ks,
                                         mat.value_serde or vs, user_named=given is not None)
        where = f"table store {name_of_store!r}"
        store_key = N.key_or_default(mat.key_serde or ks, where)
        store_value = N.value_or_default(mat.value_serde or vs, where)
        builder = table_store(mat, name_of_store, store_key, store_value, self._builder.dsl_store_suppliers)
        table = _ktable().KTable(self._builder, name, mat.key_serde or ks, mat.value_serde or vs,
                                 name_of_store if mat.store_name else None, store_name=name_of_store, source=True)
        graph.add(StatefulProcessorNode(name, (parent,), lambda: table.source_processor(mat),
                                        store_builder=builder, store_name=name_of_store,
                                        deferred_serdes=N.deferred(store_key, store_value),
                                        store_wanted=table.source_materialized))
        return table

    def group_by(self, fn: Callable[[Any, Any], Any], *, key_serde: Any = None,
                 value_serde: Any = None, name: Optional[str] = None) -> "KGroupedStream":
        """Group by a new key fn(key, value); aggregations repartition through an internal topic.
        `name` (Kafka's Grouped.as) names the key selector and the repartition topic
        `<name>-repartition`, which every aggregation of this grouped stream then shares; without
        it each aggregation has its own, named after its store."""
        _check_fn(fn, "group_by")
        name = repartition_name(name, "group_by")
        selected = self._add(N.KEY_SELECT, lambda: KeySelectProcessor(fn), key_serde=None,
                             value_serde=self.value_serde, repartition_required=True, role=KEY_CHANGING, name=name)
        return _grouped().KGroupedStream(self._builder, selected._node,
                              _serdes.resolve_serde(key_serde, "group_by key_serde"),
                              _serdes.resolve_serde(value_serde, "group_by value_serde") or self.value_serde,
                              repartition_required=True, name=name)

    def group_by_key(self, *, key_serde: Any = None, value_serde: Any = None,
                     name: Optional[str] = None) -> "KGroupedStream":
        """Group by the current key; repartitions only if an upstream operation changed the key
        (`name`: the repartition topic's, as group_by's)."""
        return _grouped().KGroupedStream(self._builder, self._node,
                              _serdes.resolve_serde(key_serde, "group_by_key key_serde") or self.key_serde,
                              _serdes.resolve_serde(value_serde, "group_by_key value_serde") or self.value_serde,
                              repartition_required=self._repartition_required,
                              name=repartition_name(name, "group_by_key"))

    # ---- joins ------------------------------------------------------------------------------

    def join(self, other: Any, joiner: Any = None, windows: Any = None, *, other_value_serde: Any = None,
             store: str | Materialized | None = None, key_selector: Any = None,
             name: Optional[str] = None) -> "KStream":
        """Inner join: `join(other_stream, joiner, JoinWindows)`, `join(table, joiner)` or
        `join(global_table, key_selector, joiner)`; joiner(value, other_value). `name` (Kafka's
        StreamJoined.withName / Joined.as) names the join's processors and repartition topics."""
        return self._join("join", _INNER, other, joiner, windows, other_value_serde, store, key_selector, name)

    def left_join(self, other: Any, joiner: Any = None, windows: Any = None, *, other_value_serde: Any = None,
                  store: str | Materialized | None = None, key_selector: Any = None,
                  name: Optional[str] = None) -> "KStream":
        """Left join: every record of this stream, joined with None when nothing matches (a
        stream-stream left join emits those only once their window closed); `name` as join's."""
        return self._join("left_join", _LEFT, other, joiner, windows, other_value_serde, store, key_selector, name)

    def outer_join(self, other: Any, joiner: Any = None, windows: Any = None, *, other_value_serde: Any = None,
                   store: str | Materialized | None = None, name: Optional[str] = None) -> "KStream":
        """Outer stream-stream join: unmatched records of either side, once their window closed;
        `name` as join's."""
        if not isinstance(other, KStream):
            raise TopologyError(f"outer_join joins two KStreams (with JoinWindows), got {type(other).__name__}")
        return self._join("outer_join", _OUTER, other, joiner, windows, other_value_serde, store, None, name)

    def _join(self, op: str, join_type: str, other: Any, joiner: Any, windows: Any, other_value_serde: Any,
              store: Any, key_selector: Any, name: Optional[str] = None) -> "KStream":
        """Dispatch on what is joined (Kafka's overloads): a GlobalKTable, a KTable or a KStream."""
        if _is_global_table(other):
            if key_selector is None:  # join(global_table, key_selector, joiner): the positional form
                key_selector, joiner, windows = joiner, windows, None
            if windows is not None or other_value_serde is not None or store is not None:
                raise TopologyError(f"{op} with a GlobalKTable takes (global_table, key_selector, joiner) only "
                                    "(and name=)")
            from streams.dsl.global_table import stream_global_join  # it checks its arguments

            return stream_global_join(self, other, key_selector=key_selector, joiner=joiner, left=join_type == _LEFT,
                                      name=N.processor_name(name, op))
        if key_selector is not None:
            raise TopologyError(f"{op}: key_selector= is for a join with a GlobalKTable, not a {type(other).__name__}")
        if isinstance(other, _ktable().KTable):
            if other._builder is not self._builder:
                raise TopologyError(f"{op}: the stream and the table must come from the same StreamsBuilder")
            if windows is not None or other_value_serde is not None or store is not None:
                raise TopologyError(f"{op} with a KTable takes (table, joiner) only: no windows, other_value_serde "
                                    "or store")
            self._check_joiner(op, joiner)
            return self._stream_table_join(op, other, joiner, join_type == _LEFT, repartition_name(name, op))
        if isinstance(other, KStream):
            if other._builder is not self._builder:
                raise TopologyError(f"{op}: both streams must come from the same StreamsBuilder")
            self._check_joiner(op, joiner)
            if windows is None:
                raise TopologyError(f"{op} of two KStreams needs windows: a JoinWindows, e.g. "
                                    "JoinWindows.of_time_difference_with_no_grace(ms)")
            if not isinstance(windows, JoinWindows):
                raise TopologyError(f"{op} of two KStreams needs a JoinWindows, got {type(windows).__name__}")
            if repartition_name(name, op) is not None:  # and its longest topic: <name>-right-repartition
                repartition_name(name + "-right", op)
            return self._stream_stream_join(op, join_type, other, joiner, windows, other_value_serde, store, name)
        raise TopologyError(f"{op} needs a KStream, a KTable or a GlobalKTable to join with, got {type(other).__name__}")

    @staticmethod
    def _check_joiner(op: str, joiner: Any) -> None:
        if joiner is None:
            raise TopologyError(f"{op} needs a joiner(value, other_value)")
        _check_fn(joiner, f"{op} joiner")

    def _repartition_for_join(self, name: str, key_serde: Any, value_serde: Any,
                              user_named: bool = False) -> "KStream":
        """Kafka's repartitionForJoin: through `<name>-repartition`; a stream repartitioned for a
        join before under the same name reuses that topic (the names are still allocated, as
        Kafka's counter is)."""
        cached = self._join_repartition
        if cached is not None and cached[0] == name:
            repartition_again(self._builder, name, user_named)
            return cached[1]
        ks = key_serde or self.key_serde
        vs = value_serde or self.value_serde
        source, ks, vs = repartition(self._builder, self._node, name, ks, vs, user_named=user_named)
        stream = KStream(self._builder, source, ks, vs)
        self._join_repartition = (name, stream)
        return stream

    def _stream_stream_join(self, op: str, join_type: str, other: "KStream", joiner: Any, windows: JoinWindows,
                            other_value_serde: Any, store: Any, join_name: Optional[str] = None) -> "KStream":
        """Kafka's KStreamImpl.doJoin + KStreamImplJoin.join: repartition topics first (named
        after the node before each key change, or `<join_name>-left` / `-right`), then the
        windowed nodes, the two join sides, the merge (named `<join_name>-this-windowed`, ...,
        `-merge` when named: StreamJoined.withName; every generated name still used up), and the
        window stores (`<join side>-store`, the generated side names even for a named join, or
        `<store>-this-join-store` ... when `store=` names them, as StreamJoined.withStoreName)."""
        mat = None if store is None else as_materialized(store, op)
        if mat is not None and (mat.key_serde is not None or mat.value_serde is not None
                                or mat.store_supplier is not None):
            raise TopologyError(f"{op}: store= names the join's window stores (and may make them in-memory or "
                                "unlogged); their serdes are the streams' (other_value_serde= for the other side)")
        other_vs = _serdes.resolve_serde(other_value_serde, f"{op} other_value_serde")
        named = join_name is not None
        if self._repartition_required:
            this = self._repartition_for_join(join_name + "-left" if named else self._node, None, None, named)
        else:
            this = self
        if other._repartition_required:
            other = other._repartition_for_join(join_name + "-right" if named else other._node, None, other_vs, named)
        graph = self._builder._graph
        left_outer, right_outer = join_type != _INNER, join_type == _OUTER

        def suffixed(suffix: str) -> Optional[str]:
            return join_name + suffix if named else None
        this_windowed = graph.name_or_new(suffixed("-this-windowed"), N.WINDOWED)
        other_windowed = graph.name_or_new(suffixed("-other-windowed"), N.WINDOWED)
        # the stores are named after the generated side names, a named join's too
        join_this_generated = graph.new_name(N.OUTERTHIS if right_outer else N.JOINTHIS)
        join_other_generated = graph.new_name(N.OUTEROTHER if left_outer else N.JOINOTHER)
        join_this = suffixed("-outer-this-join" if right_outer else "-this-join") or join_this_generated
        join_other = suffixed("-outer-other-join" if left_outer else "-other-join") or join_other_generated
        merge = graph.name_or_new(suffixed("-merge"), N.MERGE)
        base = None if mat is None else mat.store_name
        if base is None:
            this_store, other_store = join_this_generated + N.STORE_SUFFIX, join_other_generated + N.STORE_SUFFIX
            prefix = N.OUTERTHIS if right_outer else N.JOINTHIS
            outer_store = N.OUTERSHARED + join_this_generated[len(prefix):] + N.STORE_SUFFIX
        else:
            this_store = base + ("-outer-this-join" if right_outer else "-this-join") + N.STORE_SUFFIX
            other_store = base + ("-outer-other-join" if left_outer else "-other-join") + N.STORE_SUFFIX
            outer_store = base + ("-outer-shared-join" if right_outer else "-left-shared-join") + N.STORE_SUFFIX
        if not left_outer:
            outer_store = None
        where = f"{op} store {this_store!r}"
        key_serde = N.key_or_default(this.key_serde or other.key_serde, where)
        this_vs = N.value_or_default(this.value_serde, where)
        other_vs = N.value_or_default(other_vs or other.value_serde, f"{op} store {other_store!r}")
        # Kafka's StreamJoined: its own store type, else the builder's config, else the app's
        fixed = (mat.store_type if mat is not None else None) or self._builder.dsl_store_suppliers
        logging_enabled = mat is None or mat.logging_enabled
        log_config = None if mat is None else mat.log_config
        if base is None:  # Kafka's KStreamImplJoin notes generated join store names
            for generated in (this_store, other_store, outer_store):
                if generated is not None:
                    graph.implicit_store(generated, logging_enabled)
        stores = dict(logging_enabled=logging_enabled, log_config=log_config)

        def window_store(name: str, value_serde: Any) -> LazyStoreBuilder:
            return LazyStoreBuilder(name, "window", lambda suppliers: join_window_store_builder(
                name, windows, key_serde, value_serde, suppliers=suppliers, **stores), fixed)
        shared = StreamStreamJoin(windows, joiner, join_type, this_store, other_store, outer_store, key_serde,
                                  this_vs, other_vs)
        outer_builder = None if outer_store is None else LazyStoreBuilder(
            outer_store, "key_value", lambda suppliers: outer_join_store_builder(
                outer_store, suppliers=suppliers, **stores), fixed)
        graph.add(StreamStreamJoinNode(
            merge, (this._node, other._node), this_windowed=this_windowed, other_windowed=other_windowed,
            join_this=join_this, join_other=join_other, this_supplier=shared.side(True),
            other_supplier=shared.side(False), windowed_supplier=shared.windowed,
            merge_supplier=PassThroughProcessor, this_store=window_store(this_store, this_vs),
            other_store=window_store(other_store, other_vs), outer_store=outer_builder,
            deferred_serdes=N.deferred(key_serde, this_vs, other_vs), relaxed_null_key_join=left_outer,
            self_join_supplier=None if left_outer else lambda: SelfJoinProcessor(shared)))
        return KStream(self._builder, merge, this.key_serde, None)

    def _stream_table_join(self, op: str, table: Any, joiner: Any, left: bool,
                           join_name: Optional[str] = None) -> "KStream":
        """Kafka's KStreamImpl.join(KTable) / doStreamTableJoin: the stream is repartitioned
        first when its key changed (`<join_name>-repartition` when named: Joined.as); the join
        reads the table through its value getter."""
        named = join_name is not None
        if self._repartition_required:
            this = self._repartition_for_join(join_name if named else self._node, None, None, named)
        else:
            this = self
        graph = self._builder._graph
        name = graph.name_or_new(join_name, N.LEFTJOIN if left else N.JOIN)
        getter = table._value_getter_supplier(op)
        graph.add(StreamTableJoinNode(name, (this._node,), lambda: StreamTableJoinProcessor(getter, joiner, left),
                                      table._node, getter.store_names, relaxed_null_key_join=left))
        return KStream(self._builder, name, this.key_serde, None)


def _is_global_table(obj: Any) -> bool:
    from streams.dsl.global_table import GlobalKTable  # imported here: it imports the DSL

    return isinstance(obj, GlobalKTable)


class BranchedKStream:
    """Kafka's BranchedKStream: the branches of one split, in order; the first predicate a
    record matches picks its branch. The result's keys start with the splitter's name, the one
    given or the generated KSTREAM-BRANCH-<n> (Kafka's getBranchChildName)."""

    def __init__(self, stream: KStream, name: Optional[str]) -> None:
        self._stream = stream
        graph = stream._builder._graph
        generated = graph.new_name(N.BRANCH)  # used up by a given name too (Kafka's orElseGenerateWithPrefix)
        self._splitter = name if name is not None else generated
        self._predicates: list = []
        self._children: list = []
        self._default: Optional[str] = None
        self._branches: dict = {}
        self._done = False
        predicates, children = self._predicates, self._children
        default = self
        graph.add(ProcessorGraphNode(self._splitter, (stream._node,),
                                     lambda: BranchProcessor(list(predicates), list(children), default._default)))

    def _child(self, branched: Branched, position: int) -> KStream:
        if self._done:
            raise TopologyError("split: this split already ended (default_branch or no_default_branch)")
        if not isinstance(branched, Branched):
            raise TopologyError(f"split: branch options must be a Branched, got {branched!r}")
        stream = self._stream
        child = self._splitter + (branched.name if branched.name is not None else str(position))
        # Kafka allocates a generated name per branch too (unused: the child keeps its own), so
        # the names generated after a split are Kafka's
        stream._builder._graph.new_name(child)
        stream._builder._graph.add(ProcessorGraphNode(child, (self._splitter,), PassThroughProcessor))
        return KStream(stream._builder, child, stream.key_serde, stream.value_serde, stream._repartition_required)

    def branch(self, predicate: Callable[[Any, Any], bool], branched: Optional[Branched] = None) -> "BranchedKStream":
        _check_fn(predicate, "split().branch")
        branched = branched or Branched()
        position = len(self._predicates) + 1
        child = self._child(branched, position)
        self._predicates.append(predicate)
        self._children.append(child._node)
        branched.add_to(self._branches, self._splitter, position, child)
        return self

    def default_branch(self, branched: Optional[Branched] = None) -> dict:
        branched = branched or Branched()
        child = self._child(branched, 0)
        self._default = child._node
        branched.add_to(self._branches, self._splitter, 0, child)
        self._done = True
        return self._branches

    def no_default_branch(self) -> dict:
        self._done = True
        return self._branches


def _ktable() -> Any:
    from streams.dsl import ktable
    return ktable


def _global_table() -> Any:
    from streams.dsl import global_table
    return global_table


def _grouped() -> Any:
    from streams.dsl import grouped
    return grouped
