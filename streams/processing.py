"""The processing core shared by the real StreamTask and TopologyTestDriver.

`TaskEngine` instantiates one sub-topology for one task: source, processor and sink nodes, the
processor context, the task's state stores and its two punctuation queues. Callers feed it raw
(bytes) input records one at a time in the order they chose (the real task picks by timestamp
across its partitions; the driver takes them as piped), then ask it to punctuate and to flush.
Everything that decides *what* a record does - deserialization and its handler, timestamp
extraction, stream time, forwarding, punctuation, error wrapping - lives here so both runtimes
behave identically.

How a runtime drives it (TopologyTestDriver does exactly this, per task)::

    engine = TaskEngine(topology, subtopology, task_id=TaskId(sub.id, p), application_id=app_id,
                        config=config, collector=collector, clock_ms=clock, state_context=manager)
    register_state_stores(manager, engine.build_stores().values())   # state.manager: lock + init
    engine.init_processors()
    # loop:
    engine.process(topic, partition, offset, key_bytes, value_bytes, timestamp, headers)
    engine.maybe_punctuate_stream_time()
    engine.maybe_punctuate_system_time()          # on the thread's wall-clock schedule
    # commit (commit.interval.ms, or engine.context.commit_requested), as Kafka's prepare/postCommit:
    engine.flush_cache(); producer flush; commit offsets; manager.checkpoint()  # (flushes stores
    # itself when it writes a checkpoint; never engine.flush() per commit: RocksDB flushes memtables)
    # shutdown:
    engine.close(close_stores=False); close_state_manager(manager, dirty=False)

`engine.sources_by_topic` maps the (decorated) input topics to source nodes; internal topics are
named `<application.id>-<name>` (`Topology.decorate_topic`). The collector needs
`send(topic, key, value, *, partition, timestamp, headers)`, `partitions_for(topic)` (only for
sinks with a partitioner) and, for the state manager, `offsets()`.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import operator
from typing import Any, Callable, Iterable, Mapping, Optional, Protocol

from confluent_kafka import Message
from replication.records import message_layout_function
from streams import serdes as _serdes
from streams.errors import (ConfigError, InvalidTimestampError, RecordDeserializationError,
                            SerializationError, StoreAccessError, StreamsError, StreamsException,
                            UnknownProcessorError)
from streams.processor import (Cancellable, ConsumerRecord, FailOnInvalidTimestamp, Processor,
                               ProcessorContext, PunctuationType, Record, RecordMetadata)
from streams.topology import ProcessorSpec, SinkSpec, SourceSpec, Subtopology, Topology

log = logging.getLogger(__name__)

__all__ = ["RecordCollector", "ProcessorNode", "SourceNode", "SinkNode", "ProcessorContextImpl",
           "PunctuationSchedule", "PunctuationQueue", "TaskEngine", "UNKNOWN_TIME"]

UNKNOWN_TIME = -1  # Kafka's RecordQueue.UNKNOWN: no record seen yet

_new_record = object.__new__  # Record._make inlined on the hot path (fields already validated)
# Consumed messages (confluent_kafka.Message, from either backend) to what process_batch takes:
# one C pass each, reading the type's verified field layout (None without it: the methods).
_message_rows = message_layout_function("message_rows")
_keyed_run = message_layout_function("keyed_run")
_dispatch_run = message_layout_function("dispatch_run")
_TS_MS = operator.itemgetter(1)  # Message.timestamp() is (type, ms)
_OFFSET = Message.offset


def message_rows(messages: list) -> Iterable[tuple]:
    """The rows `(key, value, timestamp, headers, offset)` of consumed messages."""
    rows = _message_rows(messages) if _message_rows is not None else None
    if rows is None:
        rows = zip(map(Message.key, messages), map(Message.value, messages),
                   map(_TS_MS, map(Message.timestamp, messages)), map(Message.headers, messages),
                   map(_OFFSET, messages))
    return rows


class RecordCollector(Protocol):
    """Where sinks (and the change-logging layer, via the state manager) send records."""

    def send(self, topic: str, key: bytes | None, value: bytes | None, *, partition: int | None,
             timestamp: int, headers: Any = None) -> None: ...

    def partitions_for(self, topic: str) -> int:
        """Number of partitions of `topic` (used only by sinks with a custom partitioner)."""
        ...


# ---- nodes --------------------------------------------------------------------------------

class ProcessorNode:
    """A processor instance in a task, with its children in the order they were added."""

    __slots__ = ("name", "processor", "children", "children_by_name", "store_names", "process", "only_child")

    def __init__(self, name: str, processor: Optional[Processor], store_names: Iterable[str] = ()) -> None:
        self.name = name
        self.processor = processor
        self.children: list[ProcessorNode] = []
        self.children_by_name: dict[str, ProcessorNode] = {}
        self.only_child: Optional[ProcessorNode] = None  # set when there is exactly one (forward's fast path)
        self.store_names = frozenset(store_names)
        if processor is not None:
            self.process = processor.process  # bound once: forward calls it directly

    def add_child(self, child: "ProcessorNode") -> None:
        self.children.append(child)
        self.children_by_name[child.name] = child
        self.only_child = child if len(self.children) == 1 else None

    def init(self, context: "ProcessorContextImpl") -> None:
        if self.processor is not None:
            self.processor.init(context)

    def close(self) -> None:
        if self.processor is not None:
            self.processor.close()

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.name!r})"


class SourceNode(ProcessorNode):
    __slots__ = ("topics", "key_serde", "key_deserialize", "value_deserialize", "key_deserialize_unchecked",
                 "value_deserialize_unchecked", "timestamp_extractor", "context")

    def __init__(self, name: str, topics: tuple[str, ...], key_serde: Any, value_serde: Any,
                 timestamp_extractor: Any) -> None:
        super().__init__(name, None)
        self.topics = topics
        self.key_serde = key_serde
        self.key_deserialize = key_serde.deserialize
        self.value_deserialize = value_serde.deserialize
        self.key_deserialize_unchecked = _serdes.unchecked_deserializer(key_serde)
        self.value_deserialize_unchecked = _serdes.unchecked_deserializer(value_serde)
        self.timestamp_extractor = timestamp_extractor
        self.context: Optional[ProcessorContextImpl] = None
        self.process = self._process

    def init(self, context: "ProcessorContextImpl") -> None:
        self.context = context

    def _process(self, record: Record) -> None:
        self.context.forward(record)


class SinkNode(ProcessorNode):
    __slots__ = ("topic", "key_serialize", "value_serialize", "key_serialize_unchecked", "value_serialize_unchecked",
                 "partitioner", "collector", "send")

    def __init__(self, name: str, topic: str, key_serde: Any, value_serde: Any,
                 partitioner: Any, collector: RecordCollector) -> None:
        super().__init__(name, None)
        self.topic = topic
        self.key_serialize = key_serde.serialize
        self.value_serialize = value_serde.serialize
        self.key_serialize_unchecked = _serdes.unchecked_serializer(key_serde)
        self.value_serialize_unchecked = _serdes.unchecked_serializer(value_serde)
        self.partitioner = partitioner
        self.collector = collector
        self.send = collector.send if collector is not None else None
        self.process = self._process if partitioner is not None or collector is None else self._sender()

    def _sender(self) -> Callable[[Record], None]:
        """`_process` without a partitioner, as a closure over what it reads (once per record)."""
        name, topic = self.name, self.topic
        key_serialize, value_serialize, send = self.key_serialize, self.value_serialize, self.send
        make_sender = getattr(self.collector, "sender", None)
        if make_sender is not None:  # the runtime's collector: one positional call per record
            to_topic = make_sender(topic)

            def process_fast(record: Record) -> None:
                try:
                    key = key_serialize(record.key)
                    value = value_serialize(record.value)
                except SerializationError as exc:
                    raise SerializationError(
                        f"sink {name!r} could not serialize a record for topic {topic!r}: {exc}") from exc
                headers = record.headers
                to_topic(key, value, record.timestamp, list(headers) if headers else None)
            return process_fast

        def process(record: Record) -> None:
            try:
                key = key_serialize(record.key)
                value = value_serialize(record.value)
            except SerializationError as exc:
                raise SerializationError(
                    f"sink {name!r} could not serialize a record for topic {topic!r}: {exc}") from exc
            headers = record.headers
            send(topic, key, value, partition=None, timestamp=record.timestamp,
                 headers=list(headers) if headers else None)
        return process

    def stage(self, failed: Callable[[], None], drop_null_keys: bool = False) -> Callable[[Any, Any, int, Any], None]:
        """The sink as a fused stage: `stage(key, value, timestamp, headers)` does what
        `process(Record(key, value, timestamp, headers))` does; `failed()` is called on any error
        (it names this sink as the failing node). `drop_null_keys`: the stage also does the
        work of a null-key filter right before the sink (records with a None key are dropped)."""
        if self.partitioner is not None or self.collector is None:
            process = self.process

            def via_record(key: Any, value: Any, timestamp: int, headers: Any) -> None:
                if key is None and drop_null_keys:
                    return
                rec = _new_record(Record)
                rec.key = key
                rec.value = value
                rec.timestamp = timestamp
                rec.headers = headers
                try:
                    process(rec)
                except BaseException:
                    failed()
                    raise
            return via_record
        name, topic = self.name, self.topic
        key_serialize, value_serialize = self.key_serialize, self.value_serialize
        make_sender = getattr(self.collector, "sender", None)
        if make_sender is not None:
            to_topic = make_sender(topic)
        else:
            send = self.send

            def to_topic(key: Any, value: Any, timestamp: int, headers: Any) -> None:
                send(topic, key, value, partition=None, timestamp=timestamp, headers=headers)

        key_unchecked, value_unchecked = self.key_serialize_unchecked, self.value_serialize_unchecked
        if key_unchecked is not None and value_unchecked is not None:
            def sink_stage_unchecked(key: Any, value: Any, timestamp: int, headers: Any) -> None:
                if key is None and drop_null_keys:
                    return
                try:
                    try:  # C serializers; on any error the serdes' own calls decide (result or error)
                        key_bytes = None if key is None else key_unchecked(key)
                        value_bytes = None if value is None else value_unchecked(value)
                    except Exception:
                        try:
                            key_bytes = key_serialize(key)
                            value_bytes = value_serialize(value)
                        except SerializationError as exc:
                            raise SerializationError(
                                f"sink {name!r} could not serialize a record for topic {topic!r}: {exc}") from exc
                    to_topic(key_bytes, value_bytes, timestamp, list(headers) if headers else None)
                except BaseException:
                    failed()
                    raise
            make_direct = getattr(self.collector, "sink_stage", None)
            direct = None if make_direct is None else make_direct(
                topic, key_unchecked, value_unchecked, sink_stage_unchecked, failed, drop_null_keys)
            return direct or sink_stage_unchecked

        def sink_stage(key: Any, value: Any, timestamp: int, headers: Any) -> None:
            if key is None and drop_null_keys:
                return
            try:
                try:
                    key = key_serialize(key)
                    value = value_serialize(value)
                except SerializationError as exc:
                    raise SerializationError(
                        f"sink {name!r} could not serialize a record for topic {topic!r}: {exc}") from exc
                to_topic(key, value, timestamp, list(headers) if headers else None)
            except BaseException:
                failed()
                raise
        return sink_stage

    def add_child(self, child: ProcessorNode) -> None:  # pragma: no cover - Topology forbids it
        raise StreamsException(f"sink {self.name!r} cannot have children")

    def _process(self, record: Record) -> None:
        try:
            key = self.key_serialize(record.key)
            value = self.value_serialize(record.value)
        except SerializationError as exc:
            raise SerializationError(
                f"sink {self.name!r} could not serialize a record for topic {self.topic!r}: {exc}") from exc
        headers = record.headers
        if self.partitioner is None:
            self.send(self.topic, key, value, partition=None, timestamp=record.timestamp,
                      headers=list(headers) if headers else None)
        else:
            partition = self.partitioner(self.topic, record.key, record.value,
                                         self.collector.partitions_for(self.topic))
            self.send(self.topic, key, value, partition=partition, timestamp=record.timestamp,
                      headers=list(headers) if headers else None)


# ---- punctuation ----------------------------------------------------------------------------

class PunctuationSchedule(Cancellable):
    __slots__ = ("node", "interval_ms", "callback", "timestamp", "cancelled")

    def __init__(self, node: ProcessorNode, timestamp: int, interval_ms: int, callback: Callable[[int], None]) -> None:
        self.node = node
        self.timestamp = timestamp
        self.interval_ms = interval_ms
        self.callback = callback
        self.cancelled = False

    def cancel(self) -> None:
        self.cancelled = True

    def advance(self, now: int) -> None:
        """Move to the next due time after `now`, skipping missed intervals (Kafka's next())."""
        nxt = self.timestamp + self.interval_ms
        if now >= nxt:
            missed = (now - self.timestamp) // self.interval_ms
            nxt = self.timestamp + (missed + 1) * self.interval_ms
        self.timestamp = nxt


class PunctuationQueue:
    """Schedules ordered by due time (ties in scheduling order)."""

    def __init__(self) -> None:
        self._heap: list[tuple[int, int, PunctuationSchedule]] = []
        self._seq = itertools.count()

    def schedule(self, sched: PunctuationSchedule) -> None:
        heapq.heappush(self._heap, (sched.timestamp, next(self._seq), sched))

    def next_due(self) -> int | None:
        while self._heap and self._heap[0][2].cancelled:
            heapq.heappop(self._heap)
        return self._heap[0][0] if self._heap else None

    def may_punctuate(self, now: int, punctuate: Callable[[PunctuationSchedule, int], None]) -> bool:
        """Fire every schedule due at `now` once (each re-armed after its callback)."""
        heap = self._heap
        fired = False
        while heap and heap[0][0] <= now:
            _, _, sched = heapq.heappop(heap)
            if sched.cancelled:
                continue
            punctuate(sched, now)
            if not sched.cancelled:  # the callback may cancel its own schedule
                sched.advance(now)
                heapq.heappush(heap, (sched.timestamp, next(self._seq), sched))
            fired = True
        return fired

    def __len__(self) -> int:
        return sum(1 for _, _, s in self._heap if not s.cancelled)


# ---- context --------------------------------------------------------------------------------

class ProcessorContextImpl(ProcessorContext):
    """The context every processor of one task shares; tracks the current node and record."""

    def __init__(self, engine: "TaskEngine") -> None:
        self._engine = engine
        self.current_node: Optional[ProcessorNode] = None
        # (topic, partition, offset) of the input record as a plain tuple (cheap per record);
        # None in punctuations and cache flushes
        self.metadata: Optional[tuple[str, int, int]] = None
        self.commit_requested = False

    @property
    def application_id(self) -> str:
        return self._engine.application_id

    @property
    def task_id(self) -> Any:
        return self._engine.task_id

    @property
    def app_config(self) -> dict:
        return self._engine.config

    @property
    def current_stream_time_ms(self) -> int:
        return self._engine.stream_time

    @property
    def current_system_time_ms(self) -> int:
        return self._engine.clock_ms()

    def forward(self, record: Record, child_name: str | None = None) -> None:
        node = self.current_node
        if node is None:
            raise StreamsException("forward() called outside of process(), a punctuation or a store flush")
        if child_name is None:
            only = node.only_child
            if only is not None:
                self.current_node = only
                only.process(record)
            else:
                for child in node.children:
                    self.current_node = child
                    child.process(record)
        else:
            child = node.children_by_name.get(child_name)
            if child is None:
                raise UnknownProcessorError(
                    f"processor {node.name!r} has no child named {child_name!r}; "
                    f"children are {[c.name for c in node.children]}")
            self.current_node = child
            child.process(record)
        # not restored in a finally: after an exception current_node names the failing node
        self.current_node = node

    def node_forward(self) -> Callable[..., None]:
        """`forward` for the current node, for a processor to keep from init(): with exactly one
        child it calls that child directly while this node is current (the per-record case) and
        falls back to `forward` otherwise, so it behaves exactly like `forward`."""
        node = self.current_node
        generic = self.forward
        only = node.only_child if node is not None else None
        if only is None:
            return generic
        child_process = only.process
        ctx = self
        if isinstance(only, SinkNode):
            # a sink never reads the context: current_node moves to it only if it fails (so
            # errors name it, as with `forward`)
            def forward_to_sink(record: Record, child_name: str | None = None) -> None:
                if child_name is None and ctx.current_node is node:
                    try:
                        child_process(record)
                    except BaseException:
                        ctx.current_node = only
                        raise
                else:
                    generic(record, child_name)
            return forward_to_sink

        engine = self._engine
        if engine.can_fuse(only):
            # the child and the nodes after it run as one fused chain (see fused_entry), built at
            # the first forward: processors are initialised parent first, and a stage may need
            # its processor initialised
            entry: Any = None

            def forward_fused(record: Record, child_name: str | None = None) -> None:
                nonlocal entry
                if child_name is None and ctx.current_node is node:
                    if entry is None:
                        entry = engine.fused_entry(only)
                    ctx.current_node = only
                    entry(record.key, record.value, record.timestamp, record.headers)
                    # not restored in a finally: after an exception current_node names the failing node
                    ctx.current_node = node
                else:
                    generic(record, child_name)
            return forward_fused

        def forward(record: Record, child_name: str | None = None) -> None:
            if child_name is None and ctx.current_node is node:
                ctx.current_node = only
                child_process(record)
                # not restored in a finally: after an exception current_node names the failing node
                ctx.current_node = node
            else:
                generic(record, child_name)
        return forward

    def schedule(self, interval_ms: int, punctuation_type: PunctuationType,
                 callback: Callable[[int], None]) -> Cancellable:
        if isinstance(interval_ms, bool) or not isinstance(interval_ms, int) or interval_ms < 1:
            raise StreamsException(f"punctuation interval must be a positive int of ms, got {interval_ms!r}")
        if not callable(callback):
            raise StreamsException(f"punctuation callback must be callable, got {callback!r}")
        node = self.current_node
        if node is None:
            raise StreamsException("schedule() must be called from a processor (init, process or punctuate)")
        return self._engine.schedule(node, interval_ms, punctuation_type, callback)

    def get_state_store(self, name: str) -> Any:
        node = self.current_node
        if node is None:
            raise StoreAccessError(f"get_state_store({name!r}) called outside of a processor")
        if name not in node.store_names:
            if name in self._engine.stores:
                raise StoreAccessError(
                    f"processor {node.name!r} has no access to state store {name!r}: the store is not "
                    f"connected to it (add_state_store(builder, {node.name!r}) or "
                    "connect_processor_and_state_stores)")
            raise StoreAccessError(f"processor {node.name!r}: unknown state store {name!r}")
        return self._engine.stores[name]

    def commit(self) -> None:
        self.commit_requested = True

    def record_metadata(self) -> RecordMetadata | None:
        meta = self.metadata
        return None if meta is None else RecordMetadata._make(meta)

    def run_as(self, node: ProcessorNode, fn: Callable[..., Any], *args: Any) -> Any:
        """Run `fn` as if inside `node` with no input record (punctuations, cache flush listeners)."""
        prev_node, prev_meta = self.current_node, self.metadata
        self.current_node, self.metadata = node, None
        try:
            return fn(*args)
        finally:
            self.current_node, self.metadata = prev_node, prev_meta

    def scoped(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        """Wrap `fn` to run as the current node later (used by cache flush listeners)."""
        node = self.current_node
        if node is None:
            raise StreamsException("scoped() must be called from a processor")
        ctx = self

        def call(*args: Any) -> Any:  # run_as inlined: once per flushed cache entry
            prev_node, prev_meta = ctx.current_node, ctx.metadata
            ctx.current_node = node
            ctx.metadata = None
            try:
                return fn(*args)
            finally:
                ctx.current_node = prev_node
                ctx.metadata = prev_meta
        return call


# ---- the task engine ------------------------------------------------------------------------

def _serde_or_default(serde: Any, config: Mapping[str, Any], key: str, where: str) -> Any:
    if serde is not None:
        return serde
    default = _serdes.serde_from_config(config, key)
    if default is None:
        raise ConfigError(f"{where} has no serde and config {key!r} is not set; pass one or set the default")
    return default


def _cache_flusher(store: Any) -> Optional[Callable[[], None]]:
    """The function that writes `store`'s cache down, or None if it has no cache layer."""
    layer = store
    while layer is not None:
        if callable(getattr(layer, "flush_cache", None)):
            return layer.flush_cache
        layer = getattr(layer, "wrapped", None)
    return None


class TaskEngine:
    """One sub-topology instantiated for one task (see the module doc)."""

    def __init__(self, topology: Topology, subtopology: Subtopology, *, task_id: Any,
                 application_id: str, config: Mapping[str, Any], collector: RecordCollector,
                 clock_ms: Callable[[], int], state_context: Any = None) -> None:
        self.topology = topology
        self.subtopology = subtopology
        self.task_id = task_id
        self.application_id = application_id
        self.config = dict(config)
        self.collector = collector
        self.clock_ms = clock_ms
        self.state_context = state_context
        self.stream_time = UNKNOWN_TIME
        self.partition_times: dict[tuple[str, int], int] = {}
        self.deserialization_handler = _serdes.deserialization_handler_from_config(config)
        self.context = ProcessorContextImpl(self)
        self.stream_time_queue = PunctuationQueue()
        self.wall_clock_queue = PunctuationQueue()
        self.stores: dict[str, Any] = {}
        self.nodes: dict[str, ProcessorNode] = {}
        self.sources_by_topic: dict[str, SourceNode] = {}
        self.sinks: list[SinkNode] = []
        self._initialized = False
        self._closed = False
        self._default_extractor = FailOnInvalidTimestamp()
        self._cache_flushers: Optional[list[Callable[[], None]]] = None
        self._fused: dict[str, Optional[Callable[[Any, Any, int, Any], None]]] = {}
        topology.bind_config(self.config)
        self._build_nodes()

    def _build_nodes(self) -> None:
        topo, cfg, app = self.topology, self.config, self.application_id
        for name in self.subtopology.node_names:
            spec = topo.node(name)
            if isinstance(spec, SourceSpec):
                topics = tuple(topo.decorate_topic(t, app) for t in spec.topics)
                node: ProcessorNode = SourceNode(
                    name, topics,
                    _serde_or_default(spec.key_serde, cfg, _serdes.DEFAULT_KEY_SERDE_CONFIG, f"source {name!r}"),
                    _serde_or_default(spec.value_serde, cfg, _serdes.DEFAULT_VALUE_SERDE_CONFIG, f"source {name!r}"),
                    spec.timestamp_extractor)
                for t in topics:
                    self.sources_by_topic[t] = node
            elif isinstance(spec, SinkSpec):
                node = SinkNode(
                    name, topo.decorate_topic(spec.topic, app),
                    _serde_or_default(spec.key_serde, cfg, _serdes.DEFAULT_KEY_SERDE_CONFIG, f"sink {name!r}"),
                    _serde_or_default(spec.value_serde, cfg, _serdes.DEFAULT_VALUE_SERDE_CONFIG, f"sink {name!r}"),
                    spec.partitioner, self.collector)
                self.sinks.append(node)
            else:
                assert isinstance(spec, ProcessorSpec)
                processor = spec.supplier()
                if not callable(getattr(processor, "process", None)):
                    raise StreamsException(
                        f"processor {name!r}: supplier returned {processor!r}, which has no process(record)")
                node = ProcessorNode(name, processor, spec.stores)
            self.nodes[name] = node
        for name in self.subtopology.node_names:
            for parent in topo.node(name).parents:
                self.nodes[parent].add_child(self.nodes[name])

    # ---- lifecycle ------------------------------------------------------------------------

    def build_stores(self) -> dict[str, Any]:
        """Build (not open) the task's stores from the topology's store builders."""
        for store_name in self.subtopology.store_names:
            if store_name not in self.stores:
                self.stores[store_name] = self.topology.store_builder(store_name).build()
        return self.stores

    def init_stores(self) -> None:
        """Build and open the stores on `state_context` (they register there for restore).
        Runtimes with a ProcessorStateManager use `build_stores()` and register them themselves."""
        for store in self.build_stores().values():
            store.init(self.state_context)

    def init_processors(self) -> None:
        """Call every node's init(context), in the order nodes were added (sources first)."""
        ctx = self.context
        for node in self.nodes.values():
            ctx.current_node = node
            try:
                node.init(ctx)
            except StreamsError:
                raise
            except Exception as exc:
                raise StreamsException(
                    f"task {self.task_id}: processor {node.name!r} failed in init(): {exc!r}") from exc
        ctx.current_node = None
        self._initialized = True

    def initialize(self) -> None:
        self.init_stores()
        self.init_processors()

    # ---- fused chains ---------------------------------------------------------------------

    def fused_entry(self, head: ProcessorNode) -> Optional[Callable[[Any, Any, int, Any], None]]:
        """`head` and the nodes after it as one function `entry(key, value, timestamp, headers)`,
        or None when `head` cannot start a chain.

        A processor takes part when it has at most one child and a `fuse(down, failed)` method
        returning a stage `stage(key, value, timestamp, headers)` that does exactly what its
        `process` does, calling `down(...)` (None without a child) where `process` forwards
        (the stateless DSL processors, and a cached count: no context use, no Record objects
        between them); `fuse` returns None to decline. The chain ends at a sink
        (serializing and sending directly) or at the first node that cannot be fused, which is
        called through `process(Record)` as `forward` would, with that node current.

        Call it with `context.current_node` = `head` (as `forward` sets it); on return it is
        `head` again. A stage that fails sets the failing node current before the exception
        leaves it (only the innermost failing stage does: it finds `head` still current), so
        errors name the failing node exactly as with `forward`."""
        cache = self._fused
        if head.name in cache:
            return cache[head.name]
        entry = self._stage(head, head) if self.can_fuse(head) else None
        cache[head.name] = entry
        return entry

    @staticmethod
    def can_fuse(node: ProcessorNode) -> bool:
        """Whether `node` may start a fused chain: a sink, or a processor with a `fuse` method
        and at most one child (its `fuse` may still decline, returning None)."""
        if isinstance(node, SinkNode):
            return True
        return (node.processor is not None and len(node.children) <= 1
                and callable(getattr(node.processor, "fuse", None)))

    def _failed_marker(self, node: ProcessorNode, head: ProcessorNode) -> Callable[[], None]:
        ctx = self.context

        def failed() -> None:
            if ctx.current_node is head:
                ctx.current_node = node
        return failed

    def _stage(self, node: ProcessorNode, head: ProcessorNode) -> Callable[[Any, Any, int, Any], None]:
        ctx = self.context
        failed = self._failed_marker(node, head)

        if isinstance(node, SinkNode):
            return node.stage(failed)
        if self.can_fuse(node):
            only = node.only_child
            if isinstance(only, SinkNode) and getattr(node.processor, "null_key_filter", False):
                # the filter's whole work (drop None keys; it cannot fail) done by the sink's stage
                return only.stage(self._failed_marker(only, head), drop_null_keys=True)
            stage = node.processor.fuse(self._stage(only, head) if only is not None else None, failed)
            if stage is not None:
                return stage
        process = node.process
        new = _new_record

        def enter(key: Any, value: Any, timestamp: int, headers: Any) -> None:
            rec = new(Record)
            rec.key = key
            rec.value = value
            rec.timestamp = timestamp
            rec.headers = headers
            ctx.current_node = node
            process(rec)
            # not restored in a finally: after an exception current_node names the failing node
            ctx.current_node = head
        return enter

    # ---- processing -----------------------------------------------------------------------

    def process(self, topic: str, partition: int, offset: int, key: bytes | None, value: bytes | None,
                timestamp: int, headers: Any = None) -> bool:
        """Process one raw input record. Returns False if it was skipped (handler or timestamp)."""
        return self.process_batch(topic, partition, ((key, value, timestamp, headers, offset),)) == 1

    def has_custom_timestamp_extractor(self) -> bool:
        return any(source.timestamp_extractor is not None for source in self.sources_by_topic.values())

    def extracted_timestamp(self, topic: str, partition: int, key: Optional[bytes], value: Optional[bytes],
                            timestamp: int, headers: Any, offset: int) -> int:
        """The timestamp the source's extractor gives a raw record (for ordering partitions by
        their head record, as Kafka's RecordQueue does); the record's own timestamp when the
        source has no extractor or the record cannot be deserialized (processing reports that)."""
        source = self.sources_by_topic.get(topic)
        extractor = None if source is None else source.timestamp_extractor
        if extractor is None:
            return timestamp
        try:
            k = source.key_deserialize(key)
            v = source.value_deserialize(value)
            hdrs = () if headers is None else tuple(headers)
            return extractor.extract(ConsumerRecord(topic, partition, offset, k, v, timestamp, hdrs),
                                     self.partition_times.get((topic, partition), UNKNOWN_TIME))
        except Exception:  # noqa: BLE001 - processing the record raises or skips it properly
            return timestamp

    def process_batch(self, topic: str, partition: int, rows: Iterable[tuple]) -> int:
        """Process a run of raw input records of one partition, in order: `rows` yields
        `(key_bytes, value_bytes, timestamp, headers, offset)`. Returns how many were processed
        (not skipped). Exactly `process()` per row, with the per-run work done once."""
        source = self.sources_by_topic.get(topic)
        if source is None:
            raise StreamsException(f"task {self.task_id} has no source node for topic {topic!r}")
        run = self._key_bytes_run(source)
        if run is not None:
            return self._process_key_bytes_run(source, topic, partition, rows, run, source.children[0])
        return self._process_rows(source, topic, partition, rows)

    def process_messages(self, topic: str, partition: int, messages: list) -> int:
        """process_batch over consumed messages of one partition, in offset order: the same
        effects, with rows built at C speed, and none built at all for the messages a count of
        raw keys takes (`_process_keyed_messages`)."""
        source = self.sources_by_topic.get(topic)
        if source is not None and _keyed_run is not None:
            run = self._key_bytes_run(source)
            if run is not None:
                return self._process_keyed_messages(source, topic, partition, messages, run, source.children[0])
        if (source is not None and _dispatch_run is not None and len(source.children) == 1
                and source.timestamp_extractor is None and source.key_deserialize_unchecked is not None
                and source.value_deserialize_unchecked is not None):
            fused = self.fused_entry(source.children[0])
            if fused is not None:
                return self._process_fused_messages(source, topic, partition, messages, fused)
        return self.process_batch(topic, partition, message_rows(messages))

    def _process_fused_messages(self, source: SourceNode, topic: str, partition: int, messages: list,
                                fused: Callable[[Any, Any, int, Any], None]) -> int:
        """_process_rows over messages when the source's only child starts a fused chain: the
        common record (no headers, a timestamp, a key and value its C deserializers take) goes
        through C `dispatch_run`, which does what the per-record loop does for it; any other
        record goes through the per-record loop alone, in order."""
        tp = (topic, partition)
        times = [self.partition_times.get(tp, UNKNOWN_TIME)]
        start_time = times[0]
        ctx = self.context
        first = source.children[0]
        n = len(messages)
        start = 0
        done = 0
        try:
            while start < n:
                try:
                    stop = _dispatch_run(messages, start, source.key_deserialize_unchecked,
                                         source.value_deserialize_unchecked, fused, ctx, first, self,
                                         topic, partition, times)
                except (RecordDeserializationError, InvalidTimestampError):
                    raise
                except Exception as exc:
                    metadata = ctx.metadata  # set by dispatch_run before it calls the chain
                    self._raise_process_error(exc, ctx, source, topic, partition,
                                              metadata[2] if metadata else -1)
                if stop is None:  # the layout went away: the rows way
                    return done + self._process_rows(source, topic, partition, message_rows(messages[start:]))
                done += stop - start
                if stop >= n:
                    break
                # the per-record loop reads the partition time from the engine: hand it over
                if times[0] != start_time:
                    self.partition_times[tp] = start_time = times[0]
                done += self._process_rows(source, topic, partition, message_rows(messages[stop:stop + 1]))
                times[0] = start_time = self.partition_times.get(tp, UNKNOWN_TIME)
                start = stop + 1
        finally:
            ctx.current_node = None
            ctx.metadata = None
            if times[0] != start_time:
                self.partition_times[tp] = times[0]
        return done

    def _key_bytes_run(self, source: SourceNode) -> Optional[Callable[[list, list, Any], None]]:
        """The `run(keys, timestamps, clock)` of the source's only child when it counts runs of
        serialized keys (a cached count whose store key serde is the source's and whose bytes
        round-trip, so checking a key by deserializing it is all its serde does); else None."""
        children = source.children
        if (len(children) == 1 and source.timestamp_extractor is None
                and source.key_deserialize_unchecked is not None and source.value_deserialize_unchecked is not None):
            run = getattr(self.fused_entry(children[0]), "key_bytes_run", None)
            if run is not None and run[0] is source.key_serde and _serdes.round_trips(run[0]):
                return run[1]
        return None

    def _count_key_bytes(self, run: Callable[[list, list, Any], None], first: ProcessorNode, source: SourceNode,
                         topic: str, partition: int, keys: list, timestamps: list,
                         offset_at: Callable[[int], int]) -> int:
        """`run` over checked keys; an error names the offset of the record being counted
        (`offset_at(i)` of the i-th key). Raises the partition's time to the run's newest."""
        ctx = self.context
        ctx.current_node = first
        ctx.metadata = None
        try:
            run(keys, timestamps, self)
        except (RecordDeserializationError, InvalidTimestampError):
            raise
        except Exception as exc:
            self._raise_process_error(exc, ctx, source, topic, partition,
                                      offset_at(getattr(exc, "updates_done", 0)))
        finally:
            newest = max(timestamps)
            tp = (topic, partition)
            if newest > self.partition_times.get(tp, UNKNOWN_TIME):
                self.partition_times[tp] = newest
        return len(keys)

    def _process_keyed_messages(self, source: SourceNode, topic: str, partition: int, messages: list,
                                run: Callable[[list, list, Any], None], first: ProcessorNode) -> int:
        """_process_key_bytes_run over messages: the keys of each stretch of messages the bulk
        path takes come straight from the messages (C `keyed_run`); a message it does not take
        goes through the per-record loop alone, in order."""
        key_check = source.key_deserialize_unchecked
        value_check = source.value_deserialize_unchecked
        n = len(messages)
        start = 0
        done = 0
        try:
            while start < n:
                taken = _keyed_run(messages, start, key_check, value_check)
                if taken is None:  # the layout went away: the rows way
                    return done + self._process_key_bytes_run(source, topic, partition,
                                                              list(message_rows(messages[start:])), run, first)
                keys, timestamps, stop = taken
                if keys:
                    base = start
                    done += self._count_key_bytes(run, first, source, topic, partition, keys, timestamps,
                                                  lambda i: _OFFSET(messages[base + i]))
                if stop >= n:
                    break
                done += self._process_rows(source, topic, partition, message_rows(messages[stop:stop + 1]))
                start = stop + 1
        finally:
            self.context.current_node = None
            self.context.metadata = None
        return done

    def _process_key_bytes_run(self, source: SourceNode, topic: str, partition: int, rows: Iterable[tuple],
                               run: Callable[[list, list, Any], None], first: ProcessorNode) -> int:
        """process_batch when the source's only child takes runs of serialized keys (a cached
        count whose store key serde is the source's, a serde whose bytes round-trip): each row's
        key and value are checked by deserializing them, and the raw key bytes of the good rows
        go to `run` in one call. A row the bulk path does not take (a None key, a record that
        does not deserialize, a negative timestamp) goes through the per-record loop alone, right
        after the rows before it were counted, so every effect happens in the per-record order.
        The stream time is raised record by record (`run` gets this engine as its clock)."""
        key_check = source.key_deserialize_unchecked
        value_check = source.value_deserialize_unchecked
        rows = rows if type(rows) is list else list(rows)
        ctx = self.context
        keys: list = []
        timestamps: list = []
        start = 0  # rows[start:] from here on are the ones in keys/timestamps
        done = 0

        def count_pending() -> int:
            if not keys:
                return 0
            base = start
            return self._count_key_bytes(run, first, source, topic, partition, keys, timestamps,
                                         lambda i: rows[base + i][4])

        try:
            for i, (key, value, timestamp, _headers, _offset) in enumerate(rows):
                if key is not None and timestamp >= 0:
                    try:
                        key_check(key)
                        if value is not None:
                            value_check(value)
                    except Exception:  # noqa: BLE001 - the per-record loop decides (skip or raise)
                        pass
                    else:
                        keys.append(key)
                        timestamps.append(timestamp)
                        continue
                done += count_pending()
                keys.clear()
                timestamps.clear()
                done += self._process_rows(source, topic, partition, (rows[i],))
                start = i + 1
            done += count_pending()
        finally:
            ctx.current_node = None
            ctx.metadata = None
        return done

    def _process_rows(self, source: SourceNode, topic: str, partition: int, rows: Iterable[tuple]) -> int:
        """process_batch's per-record loop."""
        key_deserialize = source.key_deserialize
        value_deserialize = source.value_deserialize
        key_unchecked = source.key_deserialize_unchecked
        value_unchecked = source.value_deserialize_unchecked
        unchecked = key_unchecked is not None and value_unchecked is not None
        extractor = source.timestamp_extractor
        tp = (topic, partition)
        partition_time = start_partition_time = self.partition_times.get(tp, UNKNOWN_TIME)
        stream_time = self.stream_time
        ctx = self.context
        # the source forwards to its children: done here directly (no source.process call)
        children = source.children
        fused = None
        if len(children) == 1:
            first = children[0]
            dispatch = first.process
            fused = self.fused_entry(first)
        else:
            first = source

            def dispatch(record: Record) -> None:
                for child in children:
                    ctx.current_node = child
                    child.process(record)
        new = _new_record
        done = 0
        try:
            for key, value, timestamp, headers, offset in rows:
                try:
                    if unchecked:
                        try:  # C deserializers; on any error the serdes' own calls decide
                            k = None if key is None else key_unchecked(key)
                            v = None if value is None else value_unchecked(value)
                        except Exception:
                            k = key_deserialize(key)
                            v = value_deserialize(value)
                    else:
                        k = key_deserialize(key)
                        v = value_deserialize(value)
                except SerializationError as exc:
                    self._deserialization_failed(exc, source, topic, partition, offset, key, value)
                    continue
                if headers is None:
                    hdrs: tuple = ()
                elif type(headers) is tuple:
                    hdrs = headers
                else:
                    hdrs = tuple(headers)
                if extractor is None:
                    if timestamp < 0:
                        self._default_extractor.extract(
                            ConsumerRecord(topic, partition, offset, k, v, timestamp, hdrs), partition_time)
                    ts = timestamp
                else:
                    ts = extractor.extract(ConsumerRecord(topic, partition, offset, k, v, timestamp, hdrs),
                                           partition_time)
                    if ts < 0:
                        log.warning("skipping record from %s-%d offset %d: extracted timestamp %d is negative",
                                    topic, partition, offset, ts)
                        continue
                if ts > partition_time:
                    partition_time = ts  # only this method reads it: stored once, at the end
                if ts > stream_time:
                    self.stream_time = stream_time = ts
                ctx.metadata = (topic, partition, offset)
                try:
                    ctx.current_node = first
                    if fused is not None:
                        fused(k, v, ts, hdrs)
                    else:
                        record = new(Record)
                        record.key = k
                        record.value = v
                        record.timestamp = ts
                        record.headers = hdrs
                        dispatch(record)
                except (RecordDeserializationError, InvalidTimestampError):
                    raise
                except Exception as exc:
                    self._raise_process_error(exc, ctx, source, topic, partition, offset)
                done += 1
        finally:
            ctx.current_node = None
            ctx.metadata = None
            if partition_time != start_partition_time:
                self.partition_times[tp] = partition_time
        return done

    def _raise_process_error(self, exc: Exception, ctx: "ProcessorContextImpl", source: SourceNode, topic: str,
                             partition: int, offset: int) -> None:
        failed = ctx.current_node.name if ctx.current_node is not None else source.name
        raise StreamsException(
            f"exception caught in process: task_id={self.task_id}, processor={failed}, topic={topic}, "
            f"partition={partition}, offset={offset}: {exc!r}") from exc

    def _deserialization_failed(self, exc: SerializationError, source: SourceNode, topic: str, partition: int,
                                offset: int, key: Any, value: Any) -> None:
        """Ask the deserialization handler: return to skip the record, else raise."""
        err = RecordDeserializationError(
            f"deserialization failed for a record from topic {topic!r} partition {partition} "
            f"offset {offset} (source {source.name!r}, task {self.task_id}): {exc}",
            topic=topic, partition=partition, offset=offset, key=key, value=value)
        response = self.deserialization_handler(err)
        if response is _serdes.DeserializationHandlerResponse.CONTINUE:
            return
        if response is not _serdes.DeserializationHandlerResponse.FAIL:
            raise StreamsException(
                f"deserialization handler returned {response!r}; expected a DeserializationHandlerResponse") from err
        raise err from exc

    def schedule(self, node: ProcessorNode, interval_ms: int, punctuation_type: PunctuationType,
                 callback: Callable[[int], None]) -> Cancellable:
        if punctuation_type is PunctuationType.STREAM_TIME:
            # aligned to 0: fires as soon as there is stream time (Kafka's behaviour)
            sched = PunctuationSchedule(node, 0, interval_ms, callback)
            self.stream_time_queue.schedule(sched)
        elif punctuation_type is PunctuationType.WALL_CLOCK_TIME:
            sched = PunctuationSchedule(node, self.clock_ms() + interval_ms, interval_ms, callback)
            self.wall_clock_queue.schedule(sched)
        else:
            raise StreamsException(f"unknown punctuation type {punctuation_type!r}")
        return sched

    def _punctuate(self, sched: PunctuationSchedule, now: int) -> None:
        ctx = self.context
        prev_node, prev_meta = ctx.current_node, ctx.metadata
        ctx.current_node, ctx.metadata = sched.node, None
        try:
            sched.callback(now)
        except StreamsError:
            raise
        except Exception as exc:
            failed = ctx.current_node.name if ctx.current_node is not None else sched.node.name
            raise StreamsException(
                f"exception caught while punctuating: task_id={self.task_id}, processor={failed}, "
                f"timestamp={now}: {exc!r}") from exc
        finally:
            ctx.current_node, ctx.metadata = prev_node, prev_meta

    def maybe_punctuate_stream_time(self) -> bool:
        if self.stream_time == UNKNOWN_TIME:
            return False
        return self.stream_time_queue.may_punctuate(self.stream_time, self._punctuate)

    def maybe_punctuate_system_time(self) -> bool:
        return self.wall_clock_queue.may_punctuate(self.clock_ms(), self._punctuate)

    def flush(self) -> None:
        """Flush stores fully, outermost layer first (caches write down and forward downstream,
        then the inner stores persist). Checkpointing does this; a plain commit needs only
        `flush_cache()`."""
        for store in self.stores.values():
            store.flush()

    def flush_cache(self) -> None:
        """Write the caches of the task's stores down (forwarding evicted/flushed entries) without
        flushing the inner stores - what Kafka's commit does (`stateMgr.flushCache()`); a full
        store flush happens only when a checkpoint is written."""
        flushers = self._cache_flushers
        if flushers is None:
            flushers = self._cache_flushers = [f for f in map(_cache_flusher, self.stores.values()) if f]
        for fn in flushers:
            fn()

    def close(self, *, close_stores: bool = True) -> None:
        """Close processors, then (unless a state manager owns them) stores; idempotent."""
        if self._closed:
            return
        self._closed = True
        ctx = self.context
        first_error: Optional[BaseException] = None
        if self._initialized:
            for node in self.nodes.values():
                ctx.current_node = node
                try:
                    node.close()
                except Exception as exc:  # keep closing the rest, report the first
                    log.exception("task %s: processor %r failed in close()", self.task_id, node.name)
                    first_error = first_error or exc
            ctx.current_node = None
        if close_stores:
            for store in self.stores.values():
                try:
                    if getattr(store, "is_open", True):
                        store.close()
                except Exception as exc:
                    log.exception("task %s: store %r failed in close()", self.task_id, getattr(store, "name", store))
                    first_error = first_error or exc
        if first_error is not None:
            raise StreamsException(f"task {self.task_id}: errors while closing: {first_error!r}") from first_error
