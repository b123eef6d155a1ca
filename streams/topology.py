"""`Topology`: a graph of source, processor and sink nodes plus the state stores they use.

Nodes may name parents that are added later; the graph is validated as a whole by `build()`
(also run by `describe()` and by the runtimes), which raises `TopologyError` naming the node.
Sub-topologies are the connected components of the graph, where a store shared by two
processors also connects them; each becomes one task per input partition at runtime. A global
store's source and processor (`add_global_store`) form a sub-topology of their own that makes no
tasks: every instance's global thread runs them (`global_subtopology()`), as in Kafka.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Optional, Sequence

from streams import java_order
from streams import serdes as _serdes
from streams.errors import TopologyError
from streams.optimizations import topology_optimizations
from streams.processor import Processor, TimestampExtractor

log = logging.getLogger(__name__)

__all__ = ["Topology", "TopologyDescription", "GlobalStoreDescription", "Subtopology", "SourceSpec",
           "ProcessorSpec", "SinkSpec", "changelog_topic_name", "source_changelogs", "REPARTITION"]

REPARTITION = "repartition"
_OFFSET_RESETS = (None, "earliest", "latest")


def source_changelogs(topology: "Topology", subtopology: "Subtopology") -> dict[str, str]:
    """The sub-topology's stores whose changelog is a source topic, with that topic."""
    reused = topology.source_changelog_topics
    return {store: reused[store] for store in subtopology.store_names if store in reused}


def changelog_topic_name(application_id: str, store_name: str) -> str:
    return f"{application_id}-{store_name}-changelog"


@dataclass
class SourceSpec:
    name: str
    topics: tuple[str, ...]
    key_serde: Any = None
    value_serde: Any = None
    timestamp_extractor: Optional[TimestampExtractor] = None
    offset_reset: Optional[str] = None
    parents: tuple[str, ...] = ()
    kind: str = "source"


@dataclass
class ProcessorSpec:
    name: str
    supplier: Callable[[], Processor]
    parents: tuple[str, ...]
    stores: list[str] = field(default_factory=list)
    kind: str = "processor"


@dataclass
class SinkSpec:
    name: str
    topic: str
    parents: tuple[str, ...]
    key_serde: Any = None
    value_serde: Any = None
    partitioner: Optional[Callable[[str, Any, Any, int], Optional[int]]] = None
    kind: str = "sink"


@dataclass(frozen=True)
class Subtopology:
    """One connected component of a validated topology."""

    id: int
    node_names: tuple[str, ...]                  # in the order the nodes were added
    source_topics: tuple[str, ...]               # undecorated names (internal topics lack the app id)
    sink_topics: tuple[str, ...]
    store_names: tuple[str, ...]
    internal_source_topics: tuple[str, ...]      # repartition topics this sub-topology reads


def _check_name(what: str, name: Any) -> str:
    if not isinstance(name, str) or not name:
        raise TopologyError(f"{what} name must be a non-empty string, got {name!r}")
    return name


class Topology:
    """A processing graph; see the module doc. Build with the `add_*` methods or a StreamsBuilder."""

    def __init__(self) -> None:
        self._nodes: dict[str, SourceSpec | ProcessorSpec | SinkSpec] = {}
        self._stores: dict[str, Any] = {}               # store name -> StoreBuilder
        self._source_of_topic: dict[str, str] = {}      # topic -> source node name
        self._internal_topics: dict[str, str] = {}      # undecorated topic name -> kind
        self._enforced_partitions: dict[str, int] = {}  # internal topic -> the count the user fixed
        self._copartition_sources: list[frozenset[str]] = []  # groups of source node names
        self._deferred_serdes: list[Any] = []          # serdes.ConfigDefaultSerde to bind per app
        # global store name -> (source node, processor node, topic) (Kafka's globalStateBuilders)
        self._global_stores: dict[str, tuple[str, str, str]] = {}
        self._caching_requested: dict[str, bool] = {}  # store name -> caching as built (bind_config)
        # store name -> the source topic that is its changelog (Kafka's connectSourceStoreAndTopic:
        # topology.optimization reuse.ktable.source.topics)
        self._source_changelogs: dict[str, str] = {}
        self.applied_optimizations: frozenset = frozenset()  # what StreamsBuilder.build(config) applied
        #: the generated internal names StreamsBuilder.build() found (Kafka's checkUnprovidedNames text)
        self.unnamed_internal_resources: Optional[str] = None
        self._reported_naming = False  # whether _report_naming warned
        self._reported_optimizations: set[frozenset] = set()  # what _report_optimizations said
        self._reported_store_type = False  # whether _bind_store_types warned
        self._built: Optional[list[Subtopology]] = None
        self._groups: Optional[list[Subtopology]] = None

    # ---- construction ---------------------------------------------------------------------

    def _add_node(self, spec: SourceSpec | ProcessorSpec | SinkSpec) -> None:
        if spec.name in self._nodes:
            raise TopologyError(f"{spec.kind} {spec.name!r}: a node named {spec.name!r} was already added")
        self._nodes[spec.name] = spec
        self._changed()

    def _changed(self) -> None:
        self._built = None
        self._groups = None

    def _check_parents(self, kind: str, name: str, parent_names: Sequence[str]) -> tuple[str, ...]:
        if not parent_names:
            raise TopologyError(f"{kind} {name!r} must have at least one parent")
        parents = tuple(_check_name(f"parent of {kind} {name!r}", p) for p in parent_names)
        if name in parents:
            raise TopologyError(f"{kind} {name!r} cannot be its own parent")
        if len(set(parents)) != len(parents):
            raise TopologyError(f"{kind} {name!r} lists a parent more than once: {list(parents)}")
        return parents

    def add_source(self, name: str, *topics: str, key_serde: Any = None, value_serde: Any = None,
                   timestamp_extractor: Optional[TimestampExtractor] = None,
                   offset_reset: Optional[str] = None) -> "Topology":
        """A source node reading `topics` (one or more), deserializing with the given serdes."""
        _check_name("source", name)
        if not topics:
            raise TopologyError(f"source {name!r} must read at least one topic")
        for topic in topics:
            _check_name(f"topic of source {name!r}", topic)
        if len(set(topics)) != len(topics):
            raise TopologyError(f"source {name!r} lists a topic more than once: {list(topics)}")
        for topic in topics:
            other = self._source_of_topic.get(topic)
            if other is not None:
                raise TopologyError(
                    f"source {name!r}: topic {topic!r} is already read by source {other!r}")
        if offset_reset not in _OFFSET_RESETS:
            raise TopologyError(f"source {name!r}: offset_reset must be 'earliest', 'latest' or None, "
                                f"got {offset_reset!r}")
        if timestamp_extractor is not None and not callable(getattr(timestamp_extractor, "extract", None)):
            raise TopologyError(f"source {name!r}: timestamp_extractor {timestamp_extractor!r} has no extract()")
        key_serde = self._serde(key_serde, f"key_serde of source {name!r}")
        value_serde = self._serde(value_serde, f"value_serde of source {name!r}")
        self._add_node(SourceSpec(name, tuple(topics), key_serde, value_serde, timestamp_extractor, offset_reset))
        for topic in topics:
            self._source_of_topic[topic] = name
        return self

    def add_processor(self, name: str, supplier: Callable[[], Processor], *parent_names: str) -> "Topology":
        """A processor node; `supplier()` must return a new `Processor` each call (one per task)."""
        _check_name("processor", name)
        if isinstance(supplier, Processor) or not callable(supplier):
            raise TopologyError(
                f"processor {name!r}: supplier must be a callable returning a new Processor "
                f"(e.g. the class), got {supplier!r}")
        parents = self._check_parents("processor", name, parent_names)
        self._add_node(ProcessorSpec(name, supplier, parents))
        return self

    def add_sink(self, name: str, topic: str, *parent_names: str, key_serde: Any = None,
                 value_serde: Any = None,
                 partitioner: Optional[Callable[[str, Any, Any, int], Optional[int]]] = None) -> "Topology":
        """A sink node writing to `topic`, or to the topic `topic(key, value, record_context)`
        names per record (Kafka's TopicNameExtractor). `partitioner(topic, key, value,
        num_partitions)` may pick the partition (None = the producer's default, key hash)."""
        _check_name("sink", name)
        if not callable(topic):
            _check_name(f"topic of sink {name!r}", topic)
        if partitioner is not None and not callable(partitioner):
            raise TopologyError(f"sink {name!r}: partitioner must be callable, got {partitioner!r}")
        parents = self._check_parents("sink", name, parent_names)
        key_serde = self._serde(key_serde, f"key_serde of sink {name!r}")
        value_serde = self._serde(value_serde, f"value_serde of sink {name!r}")
        self._add_node(SinkSpec(name, topic, parents, key_serde, value_serde, partitioner))
        return self

    def add_state_store(self, store_builder: Any, *processor_names: str) -> "Topology":
        """Add a store (a `StoreBuilder` from `state.Stores`) and connect it to processors."""
        name = getattr(store_builder, "name", None)
        if not callable(getattr(store_builder, "build", None)):
            raise TopologyError(f"add_state_store needs a StoreBuilder (with .name and .build()), got {store_builder!r}")
        _check_name("state store", name)
        if name in self._global_stores:
            raise TopologyError(f"state store {name!r} was already added as a global store")
        if name in self._stores:
            raise TopologyError(f"state store {name!r} was already added")
        self._stores[name] = store_builder
        self._changed()
        if processor_names:
            for p in processor_names:
                self.connect_processor_and_state_stores(p, name)
        return self

    def add_global_store(self, store_builder: Any, source_name: str, key_serde: Any, value_serde: Any, topic: str,
                         processor_name: str, state_update_supplier: Callable[[], Processor], *,
                         timestamp_extractor: Optional[TimestampExtractor] = None) -> "Topology":
        """A global store (Kafka's addGlobalStore): filled on every instance from all partitions of
        `topic` by the global thread, through the source `source_name` and the processor
        `processor_name` (made by `state_update_supplier()`, which keeps the store up to date).
        The topic is the store's changelog, so the store must have logging disabled. Every
        processor of the topology may read the store (read-only) without being connected to it."""
        name = getattr(store_builder, "name", None)
        if not callable(getattr(store_builder, "build", None)):
            raise TopologyError(f"add_global_store needs a StoreBuilder (with .name and .build()), got {store_builder!r}")
        _check_name("global state store", name)
        _check_name("global store source", source_name)
        _check_name("global store processor", processor_name)
        _check_name(f"topic of global store {name!r}", topic)
        if source_name == processor_name:
            raise TopologyError(f"global store {name!r}: source_name and processor_name must differ, "
                                f"both are {source_name!r}")
        if name in self._stores:
            kind = "global store" if name in self._global_stores else "state store"
            raise TopologyError(f"global store {name!r}: a {kind} named {name!r} was already added")
        if getattr(store_builder, "logging_enabled", False):
            raise TopologyError(f"global store {name!r} must have logging disabled: its topic {topic!r} is its "
                                "changelog (build it with .with_logging_disabled())")
        if isinstance(state_update_supplier, Processor) or not callable(state_update_supplier):
            raise TopologyError(
                f"global store {name!r}: state_update_supplier must be a callable returning a new Processor, "
                f"got {state_update_supplier!r}")
        for node in (source_name, processor_name):
            if node in self._nodes:
                raise TopologyError(f"global store {name!r}: a node named {node!r} was already added")
        self.add_source(source_name, topic, key_serde=key_serde, value_serde=value_serde,
                        timestamp_extractor=timestamp_extractor)
        self._add_node(ProcessorSpec(processor_name, state_update_supplier, (source_name,), [name]))
        self._stores[name] = store_builder
        self._global_stores[name] = (source_name, processor_name, topic)
        self._changed()
        return self

    def connect_source_store_and_topic(self, store_name: str, topic: str) -> "Topology":
        """Make source topic `topic` the changelog of store `store_name` (Kafka's
        connectSourceStoreAndTopic, what reuse.ktable.source.topics does for builder.table): the
        store logs nothing; a task restores it from its input partition, up to the offset its
        application committed there, and checkpoints the offsets it processed."""
        _check_name("state store", store_name)
        _check_name(f"source topic of store {store_name!r}", topic)
        builder = self._stores.get(store_name)
        if builder is None:
            raise TopologyError(f"cannot connect unknown state store {store_name!r} to topic {topic!r}")
        if store_name in self._global_stores:
            raise TopologyError(f"global store {store_name!r} already reads its topic as its changelog")
        if getattr(builder, "logging_enabled", False):
            raise TopologyError(f"store {store_name!r} must have logging disabled: topic {topic!r} is its changelog")
        if topic in self._internal_topics or topic not in self._source_of_topic:
            raise TopologyError(f"store {store_name!r}: {topic!r} is not a source topic of the topology")
        self._source_changelogs[store_name] = topic
        self._changed()
        return self

    @property
    def source_changelog_topics(self) -> dict[str, str]:
        """Store name -> the source topic that is its changelog (connect_source_store_and_topic)."""
        return dict(self._source_changelogs)

    def connect_processor_and_state_stores(self, processor_name: str, *store_names: str) -> "Topology":
        """Give processor `processor_name` access to stores (which may be added later)."""
        _check_name("processor", processor_name)
        if not store_names:
            raise TopologyError(f"processor {processor_name!r}: no state store names given to connect")
        spec = self._nodes.get(processor_name)
        if spec is None:
            raise TopologyError(f"cannot connect state stores to unknown processor {processor_name!r}")
        if not isinstance(spec, ProcessorSpec):
            raise TopologyError(f"cannot connect state stores to {spec.kind} {processor_name!r}; only processors have stores")
        for store in store_names:
            _check_name(f"store connected to processor {processor_name!r}", store)
            if store in self._global_stores:
                raise TopologyError(
                    f"processor {processor_name!r}: global state store {store!r} can be used by any processor "
                    "without being connected; it must not be connected explicitly")
            if store not in spec.stores:
                spec.stores.append(store)
        self._changed()
        return self

    def add_internal_topic(self, name: str, kind: str = REPARTITION, *,
                           num_partitions: Optional[int] = None) -> "Topology":
        """Mark `name` as an internal topic; runtimes prefix it with `<application.id>-`.
        `num_partitions` fixes its partition count (Kafka's enforced count of
        `repartition(Repartitioned.withNumberOfPartitions(n))`); else the runtime derives it."""
        _check_name("internal topic", name)
        if num_partitions is not None:
            if isinstance(num_partitions, bool) or not isinstance(num_partitions, int) or num_partitions < 1:
                raise TopologyError(f"internal topic {name!r}: num_partitions must be an int >= 1, "
                                    f"got {num_partitions!r}")
            self._enforced_partitions[name] = num_partitions
        self._internal_topics[name] = kind
        self._changed()
        return self

    def copartition_sources(self, *source_names: str) -> "Topology":
        """The topics of these source nodes must be co-partitioned (Kafka's copartitionSources:
        the inputs of a join or a cogroup); the runtime checks them, and sizes repartition topics
        among them, at start."""
        if len(source_names) > 1:
            self._copartition_sources.append(frozenset(source_names))
        return self

    def add_deferred_serde(self, serde: Any) -> None:
        """Register a `serdes.ConfigDefaultSerde` the runtime must bind to the app config."""
        self._deferred_serdes.append(serde)

    def bind_config(self, config: Any) -> None:
        """Resolve default serdes the topology fixed before the config was known, and strip the
        caching layers when the config gives the cache no bytes."""
        for serde in self._deferred_serdes:
            serde.bind(config)
        self._bind_store_types(config)
        self._bind_caching(config)
        self._report_optimizations(config)
        self._report_naming(config)

    def _report_naming(self, config: Any) -> None:
        """An app's ensure.explicit.internal.resource.naming cannot reach a topology already built
        (Kafka reads it from the StreamsBuilder's TopologyConfig only): said once, when the
        topology has generated names it would have refused."""
        from streams.dsl.naming import ensure_explicit_naming

        if (self.unnamed_internal_resources is None or self._reported_naming
                or not ensure_explicit_naming(config or {})):
            return
        self._reported_naming = True
        log.warning("config 'ensure.explicit.internal.resource.naming' in the app's config does not check a topology "
                    "already built (as in Kafka Streams): give it to StreamsBuilder(config). %s",
                    self.unnamed_internal_resources)

    def _bind_store_types(self, config: Any) -> None:
        """Kafka's StoreFactory.configure: the DSL stores whose store type the StreamsBuilder's
        config left open take the app's (dsl.store.suppliers.class, RocksDB unless set; see
        streams/dsl/store_suppliers.py), before any is made. The app's own default.dsl.store does
        not reach them (as in Kafka): said once per topology when it would have."""
        from streams.dsl.store_suppliers import app_store_suppliers, unapplied_default_dsl_store

        open_types = [builder for builder in self._stores.values()
                      if callable(getattr(builder, "configure_store_type", None)) and not builder.store_type_fixed]
        if not open_types:
            return
        suppliers = app_store_suppliers(config or {})
        for builder in open_types:
            builder.configure_store_type(suppliers)
        unapplied = unapplied_default_dsl_store(config or {})
        # (only a store a builder's config could have reached: the same config given to both
        # leaves nothing else open)
        if (unapplied is not None and not self._reported_store_type
                and any(not builder.app_only for builder in open_types)):
            self._reported_store_type = True
            log.warning("config 'default.dsl.store' = %r in the app's config does not change the DSL's stores (as "
                        "in Kafka Streams): give it to StreamsBuilder(config), or set 'dsl.store.suppliers.class'",
                        unapplied)

    def _report_optimizations(self, config: Any) -> None:
        """Say which optimizations topology.optimization asks for that this topology was built
        without (StreamsBuilder.build() without the config): accepted, so an app written for
        Kafka Streams runs unchanged, but said out loud, once per topology."""
        missing = topology_optimizations(config or {}) - self.applied_optimizations
        if not missing or missing in self._reported_optimizations:
            return  # said once per topology, not once per task bound to it
        self._reported_optimizations.add(missing)
        log.warning("config 'topology.optimization' asks for %s, but the topology was built without it: pass the "
                    "config to StreamsBuilder.build(config) (Kafka's build(props)); the topology runs as with "
                    "'none' (same results, its own changelog and repartition topics and stores)",
                    ", ".join(sorted(missing)))

    def _bind_caching(self, config: Any) -> None:
        """Kafka's rewriteTopology: with statestore.cache.max.bytes = 0 no store gets a caching
        layer, so the operators forward every update themselves, as they do uncached (a zero-byte
        cache would still drop a tombstone of an absent key and stamp what it evicts with its
        entry's time). A store built with caching gets it back under a config with a cache."""
        from streams.runtime.config import cache_max_bytes  # here: the runtime package imports this module

        no_cache = cache_max_bytes(config or {}) == 0
        for name, builder in self._stores.items():
            if not callable(getattr(builder, "with_caching_disabled", None)):
                continue
            if name not in self._caching_requested:
                self._caching_requested[name] = bool(builder.caching_enabled)
            if self._caching_requested[name]:
                if no_cache:
                    builder.with_caching_disabled()
                else:
                    builder.with_caching_enabled()

    @staticmethod
    def _serde(serde: Any, where: str) -> Any:
        try:
            return _serdes.resolve_serde(serde, where)
        except Exception as exc:
            raise TopologyError(str(exc)) from None

    # ---- queries --------------------------------------------------------------------------

    @property
    def internal_topics(self) -> dict[str, str]:
        return dict(self._internal_topics)

    @property
    def enforced_partitions(self) -> dict[str, int]:
        """Internal topic -> the partition count the topology fixed for it."""
        return dict(self._enforced_partitions)

    def copartition_groups(self) -> list[frozenset[str]]:
        """The (undecorated) topic sets that must be co-partitioned (Kafka's copartitionGroups)."""
        groups = []
        for names in self._copartition_sources:
            topics = set()
            for name in names:
                spec = self._nodes.get(name)
                if not isinstance(spec, SourceSpec):
                    raise TopologyError(f"co-partitioned node {name!r} is not a source")
                topics.update(spec.topics)
            groups.append(frozenset(topics))
        return groups

    def decorate_topic(self, topic: str, application_id: str) -> str:
        """The real topic name: internal topics get the `<application.id>-` prefix."""
        return f"{application_id}-{topic}" if topic in self._internal_topics else topic

    def offset_reset_of(self, topic: str) -> Optional[str]:
        """The reset policy of the source reading `topic` (undecorated): the source's
        `offset_reset`, "earliest" for an internal (repartition) topic, None when the source set
        none (the main consumer's auto.offset.reset applies) or no source reads it."""
        if topic in self._internal_topics:
            return "earliest"
        source = self._nodes.get(self._source_of_topic.get(topic, ""))
        return source.offset_reset if isinstance(source, SourceSpec) else None

    def node(self, name: str) -> SourceSpec | ProcessorSpec | SinkSpec:
        try:
            return self._nodes[name]
        except KeyError:
            raise TopologyError(f"unknown node {name!r}") from None

    def store_builder(self, name: str) -> Any:
        try:
            return self._stores[name]
        except KeyError:
            raise TopologyError(f"unknown state store {name!r}") from None

    @property
    def store_names(self) -> list[str]:
        return list(self._stores)

    @property
    def global_store_names(self) -> list[str]:
        return list(self._global_stores)

    @property
    def global_topics(self) -> dict[str, str]:
        """Topic -> the global store it fills."""
        return {topic: store for store, (_, _, topic) in self._global_stores.items()}

    def is_global_store(self, name: str) -> bool:
        return name in self._global_stores

    def children(self, name: str) -> list[str]:
        """Child node names of `name`, in the order they were added."""
        return [n for n, spec in self._nodes.items() if name in spec.parents]

    # ---- validation and grouping ----------------------------------------------------------

    def build(self) -> list[Subtopology]:
        """Validate the whole graph and return the sub-topologies that run as tasks (cached until
        the next change); global stores' sub-topologies are left out (`global_subtopology()`),
        but count in the numbering, as in Kafka."""
        if self._built is None:
            groups = self._all_groups()
            self._built = [g for g in groups if not self._is_global_group(g)]
        return self._built

    def global_subtopology(self) -> Optional[Subtopology]:
        """All global stores' nodes as one sub-topology (Kafka's global task topology, run by
        the global thread), or None without global stores. Its id is -1 (Kafka's global task
        id is -1_-1)."""
        groups = [g for g in self._all_groups() if self._is_global_group(g)]
        if not groups:
            return None
        return Subtopology(id=-1, node_names=tuple(n for g in groups for n in g.node_names),
                           source_topics=tuple(t for g in groups for t in g.source_topics), sink_topics=(),
                           store_names=tuple(s for g in groups for s in g.store_names), internal_source_topics=())

    def _all_groups(self) -> list[Subtopology]:
        if self._groups is None:
            self._validate()
            self._groups = self._group()
        return self._groups

    def _is_global_group(self, group: Subtopology) -> bool:
        return any(s in self._global_stores for s in group.store_names)

    def _validate(self) -> None:
        if not self._nodes:
            raise TopologyError("topology has no nodes; add at least one source")
        if not any(isinstance(s, SourceSpec) for s in self._nodes.values()):
            raise TopologyError("topology has no source node")
        for name, spec in self._nodes.items():
            for parent in spec.parents:
                pspec = self._nodes.get(parent)
                if pspec is None:
                    raise TopologyError(f"{spec.kind} {name!r} has unknown parent {parent!r}")
                if isinstance(pspec, SinkSpec):
                    raise TopologyError(f"sink {parent!r} cannot have children, but {spec.kind} {name!r} names it as parent")
            if isinstance(spec, ProcessorSpec):
                for store in spec.stores:
                    if store not in self._stores:
                        raise TopologyError(f"processor {name!r} is connected to unknown state store {store!r}")
        self._check_cycles()
        self.copartition_groups()  # every co-partitioned node must be a source
        for store, (source, processor, _topic) in self._global_stores.items():
            for node in (source, processor):
                for child in self.children(node):
                    if child not in (source, processor):
                        raise TopologyError(
                            f"{self._nodes[child].kind} {child!r} cannot read from {node!r}: the nodes of global "
                            f"store {store!r} run in the global thread and have no children besides its processor")
        connected = {s for spec in self._nodes.values() if isinstance(spec, ProcessorSpec) for s in spec.stores}
        for store in self._stores:
            if store not in connected:
                raise TopologyError(f"state store {store!r} is not connected to any processor")

    def _check_cycles(self) -> None:
        WHITE, GREY, BLACK = 0, 1, 2
        color = dict.fromkeys(self._nodes, WHITE)
        for start in self._nodes:
            if color[start] != WHITE:
                continue
            # iterative DFS along parent edges; a GREY parent closes a cycle
            stack: list[tuple[str, Iterable[str]]] = [(start, iter(self._nodes[start].parents))]
            color[start] = GREY
            while stack:
                node, it = stack[-1]
                advanced = False
                for parent in it:
                    if color[parent] == GREY:
                        path = [n for n, _ in stack]
                        cycle = path[path.index(parent):] + [parent]
                        raise TopologyError(
                            f"processor {node!r} is part of a cycle: {' <- '.join(cycle)}")
                    if color[parent] == WHITE:
                        color[parent] = GREY
                        stack.append((parent, iter(self._nodes[parent].parents)))
                        advanced = True
                        break
                if not advanced:
                    color[node] = BLACK
                    stack.pop()

    def _group(self) -> list[Subtopology]:
        parent_of: dict[str, str] = {n: n for n in self._nodes}

        def find(x: str) -> str:
            while parent_of[x] != x:
                parent_of[x] = parent_of[parent_of[x]]
                x = parent_of[x]
            return x

        def union(a: str, b: str) -> None:
            ra, rb = find(a), find(b)
            if ra != rb:
                parent_of[rb] = ra

        store_users: dict[str, str] = {}
        for name, spec in self._nodes.items():
            for p in spec.parents:
                union(name, p)
            if isinstance(spec, ProcessorSpec):
                for store in spec.stores:
                    if store in store_users:
                        union(name, store_users[store])
                    else:
                        store_users[store] = name
        # like Kafka (2.4+, KAFKA-9020): groups are numbered in the order their first node was added
        group_ids: dict[str, int] = {}
        for n in self._nodes:
            root = find(n)
            if root not in group_ids:
                group_ids[root] = len(group_ids)
        members: dict[int, list[str]] = {i: [] for i in range(len(group_ids))}
        for n in self._nodes:
            members[group_ids[find(n)]].append(n)
        result = []
        for gid in range(len(group_ids)):
            names = members[gid]
            sources = [t for n in names if isinstance(self._nodes[n], SourceSpec) for t in self._nodes[n].topics]
            sinks = list(dict.fromkeys(self._nodes[n].topic for n in names if isinstance(self._nodes[n], SinkSpec)
                                       and isinstance(self._nodes[n].topic, str)))
            stores = list(dict.fromkeys(s for n in names if isinstance(self._nodes[n], ProcessorSpec)
                                        for s in self._nodes[n].stores))
            result.append(Subtopology(
                id=gid, node_names=tuple(names), source_topics=tuple(sources), sink_topics=tuple(sinks),
                store_names=tuple(stores),
                internal_source_topics=tuple(t for t in sources if t in self._internal_topics)))
        return result

    # ---- description ----------------------------------------------------------------------

    def describe(self) -> "TopologyDescription":
        """Kafka's TopologyDescription, in Kafka's order: nodes by sub-tree size then name; a
        node's successors and predecessors as InternalTopologyBuilder.describeSubtopology leaves
        them (a TreeSet filled while the sizes grow, visiting the nodes in HashMap order); stores
        and topics in HashSet order (streams/java_order.py)."""
        subs, global_stores = [], []
        for sub in self._all_groups():
            names = list(sub.node_names)
            size, successors, predecessors = _describe_links(names, {n: self._nodes[n].parents for n in names})
            nodes = []
            for n in sorted(names, key=lambda n: (-size[n], n)):
                spec = self._nodes[n]
                nodes.append(NodeDescription(
                    name=n, kind=spec.kind,
                    topics=tuple(_hash_set(spec.topics)) if isinstance(spec, SourceSpec) else (),
                    topic=spec.topic if isinstance(spec, SinkSpec) and isinstance(spec.topic, str) else None,
                    stores=tuple(_hash_set(spec.stores)) if isinstance(spec, ProcessorSpec) else (),
                    successors=tuple(successors[n]),
                    predecessors=tuple(predecessors[n]),
                    extractor=(_extractor_name(spec.topic) if isinstance(spec, SinkSpec)
                               and not isinstance(spec.topic, str) else None)))
            if self._is_global_group(sub):
                global_stores.append(GlobalStoreDescription(sub.id, nodes[0], nodes[1]))
            else:
                subs.append(SubtopologyDescription(sub.id, tuple(nodes)))
        return TopologyDescription(tuple(subs), tuple(global_stores))

    def __repr__(self) -> str:
        return f"Topology(nodes={list(self._nodes)}, stores={list(self._stores)})"


def _describe_links(names: list[str], parents: dict[str, tuple[str, ...]]) -> tuple[dict, dict, dict]:
    """Kafka's describeSubtopology over one sub-topology's nodes (in the order they were added):
    (sub-tree sizes, successors, predecessors), the last two as Kafka's TreeSets end up."""
    size = dict.fromkeys(names, 1)

    def compare(a: str, b: str) -> int:
        if a == b:
            return 0
        if size[a] != size[b]:
            return size[b] - size[a]
        return -1 if a < b else 1
    predecessors = {n: java_order.TreeSet(compare) for n in names}
    successors = {n: java_order.TreeSet(compare) for n in names}

    def grow(n: str, delta: int) -> None:  # Kafka's updateSize
        size[n] += delta
        for p in predecessors[n]:
            grow(p, delta)
    for n in java_order.hash_order(names, java_order.put_capacity(len(names))):
        for p in parents[n]:
            predecessors[n].add(p)
            successors[p].add(n)
            grow(p, size[n])
    return size, successors, predecessors


def _hash_set(names: Iterable[str]) -> list[str]:
    """`new HashSet<>(set)` of a HashSet filled in this order, as Kafka describes stores and topics."""
    names = list(dict.fromkeys(names))
    once = java_order.hash_order(names, java_order.put_capacity(len(names)))
    return java_order.hash_order(once, java_order.copy_capacity(len(names)))


def _extractor_name(extractor: Any) -> str:
    kind = extractor if isinstance(extractor, type) else type(extractor)
    name = getattr(extractor, "__qualname__", None) or kind.__qualname__
    return f"{getattr(extractor, '__module__', kind.__module__)}.{name}"


@dataclass(frozen=True)
class NodeDescription:
    name: str
    kind: str                      # "source" | "processor" | "sink"
    topics: tuple[str, ...]
    topic: Optional[str]
    stores: tuple[str, ...]
    successors: tuple[str, ...]
    predecessors: tuple[str, ...]
    extractor: Optional[str] = None  # a sink's topic name extractor (Kafka: "extractor class")

    def __str__(self) -> str:
        def names(ns: tuple[str, ...]) -> str:
            return ", ".join(ns) if ns else "none"
        if self.kind == "source":
            return f"Source: {self.name} (topics: [{', '.join(self.topics)}])\n      --> {names(self.successors)}"
        if self.kind == "sink" and self.extractor is not None:
            return f"Sink: {self.name} (extractor class: {self.extractor})\n      <-- {names(self.predecessors)}"
        if self.kind == "sink":
            return f"Sink: {self.name} (topic: {self.topic})\n      <-- {names(self.predecessors)}"
        return (f"Processor: {self.name} (stores: [{', '.join(self.stores)}])\n"
                f"      --> {names(self.successors)}\n      <-- {names(self.predecessors)}")


@dataclass(frozen=True)
class SubtopologyDescription:
    id: int
    nodes: tuple[NodeDescription, ...]

    def __str__(self) -> str:
        return f"Sub-topology: {self.id}\n" + "".join(f"    {node}\n" for node in self.nodes) + "\n"


@dataclass(frozen=True)
class GlobalStoreDescription:
    """A global store's sub-topology: its source and its processor (Kafka's GlobalStore)."""

    id: int
    source: NodeDescription
    processor: NodeDescription

    def __str__(self) -> str:
        # Kafka's text: no blank line after a global store, unlike a sub-topology
        return (f"Sub-topology: {self.id} for global store (will not generate tasks)\n"
                f"    {self.source}\n    {self.processor}\n")


@dataclass(frozen=True)
class TopologyDescription:
    subtopologies: tuple[SubtopologyDescription, ...]
    global_stores: tuple[GlobalStoreDescription, ...] = ()

    def __str__(self) -> str:
        # Kafka's exact layout: "Topologies:\n " then "  " before each sub-topology and global
        # store, in id order
        parts = sorted((*self.subtopologies, *self.global_stores), key=lambda d: d.id)
        return "Topologies:\n " + "".join(f"  {part}" for part in parts)
