"""The task engine: one sub-topology instantiated for one task.

`TaskEngine` builds the task's source, processor and sink nodes, the processor context, the
task's state stores and its two punctuation queues. Callers feed it raw input records of one
partition at a time in the order they chose (the real task picks by timestamp across its
partitions; the TopologyTestDriver takes them as piped, one at a time), then ask it to punctuate
and to flush. Everything that decides *what* a record does - deserialization and its handler,
timestamp extraction, stream time, forwarding, punctuation, error wrapping - lives here, so both
runtimes behave identically; both feed consumed messages to `process_messages`, which takes the
accelerated route (streams/engine/accelerated.py) where it applies and the Python route
(`process_rows`) otherwise. The engine owns stream time: it is raised here (and by the
accelerated route on the engine's behalf, record by record); stores and processors only read it.

How a runtime drives it (TopologyTestDriver does exactly this, per task)::

    engine = TaskEngine(topology, subtopology, task_id=TaskId(sub.id, p), application_id=app_id,
                        config=config, collector=collector, clock_ms=clock, state_context=manager)
    register_state_stores(manager, engine.build_stores().values())   # state.manager: lock + init
    engine.init_processors()
    # loop:
    engine.process_messages(topic, partition, messages)
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

import logging
from typing import Any, Callable, Iterable, Mapping, Optional

from confluent_kafka import Message

from eddy.messages import message_rows
from streams import serdes as _serdes
from streams.engine.accelerated import UNKNOWN_TIME, AcceleratedRoute
from streams.engine.context import ProcessorContextImpl
from streams.engine.fusion import FusedChains
from streams.engine.nodes import ProcessorNode, RecordCollector, SinkNode, SourceNode
from streams.engine.processing_errors import ProcessingFailures, ProcessingHandlerError, processing_handler_from_config
from streams.engine.processor_metadata import ProcessorMetadata
from streams.engine.punctuation import PunctuationQueue, PunctuationSchedule
from streams.engine.stages import StageOperator
from streams.metrics import (MetricsRegistry, task_dropped_records_sensor, task_enforced_processing_sensor,
                             task_process_sensor)
from streams.errors import (ConfigError, DeserializationHandlerError, InvalidTimestampError,
                            RecordDeserializationError, SerializationError, StreamsError, ProcessingError)
from streams.processor import (Cancellable, ConsumerRecord, FailOnInvalidTimestamp, PunctuationType, Record,
                               default_timestamp_extractor)
from streams.topology import ProcessorSpec, SinkSpec, SourceSpec, Subtopology, Topology

log = logging.getLogger(__name__)

_new_record = object.__new__  # Record._make inlined on the hot path (fields already validated)

def _serde_or_default(serde: Any, config: Mapping[str, Any], key: str, where: str) -> Any:
    if serde is not None:
        return serde
    default = _serdes.serde_from_config(config, key)
    if default is None:
        raise ConfigError(f"{where} has no serde and config {key!r} is not set; pass one or set the default")
    return default


def raw_message(topic: str, partition: int, offset: int, key: bytes | None, value: bytes | None, timestamp: int,
                headers: Any = None) -> Message:
    """One raw record as the consumed message the routes take (the TopologyTestDriver's input)."""
    return Message(topic, partition, offset, key, value, list(headers) if headers else None, None,
                   (0 if timestamp < 0 else 1, timestamp), -1.0, -1)


def _cache_flusher(store: Any) -> Optional[Callable[[], None]]:
    """The function that writes `store`'s cache down, or None if it has no cache layer."""
    layer = store
    while layer is not None:
        if callable(getattr(layer, "flush_cache", None)):
            return layer.flush_cache
        layer = getattr(layer, "wrapped", None)
    return None


class _PartitionProcessors(dict):
    """A dict making its missing entries with `make(key)`."""

    def __init__(self, make: Callable[[Any], Any]) -> None:
        super().__init__()
        self._make = make

    def __missing__(self, key: Any) -> Any:
        value = self[key] = self._make(key)
        return value


class TaskEngine:
    """One sub-topology instantiated for one task (see the module doc)."""

    def __init__(self, topology: Topology, subtopology: Subtopology, *, task_id: Any,
                 application_id: str, config: Mapping[str, Any], collector: RecordCollector,
                 clock_ms: Callable[[], int], state_context: Any = None, metrics: Any = None,
                 thread_id: str = "main", global_stores: Optional[Mapping[str, Any]] = None,
                 global_task: bool = False) -> None:
        """`global_stores`: the instance's global stores by name, which every processor may
        read (`context.get_state_store`), filled by the global thread. `global_task`: the global
        stores' engine, which, as Kafka's GlobalStateUpdateTask, neither gives sources without an
        extractor default.timestamp.extractor's (updates keep their records' timestamps) nor asks
        processing.exception.handler (a global processor's failure fails)."""
        self.topology = topology
        self.global_stores: Mapping[str, Any] = global_stores if global_stores is not None else {}
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
        # Kafka's task sensors: operators count dropped records (late, None keys) on one, the
        # routes count processed records on the other; a runtime passes its registry to share
        self.metrics = metrics if metrics is not None else MetricsRegistry()
        self.thread_id = thread_id
        self.dropped_records_sensor = task_dropped_records_sensor(self.metrics, thread_id, task_id)
        self.process_sensor = task_process_sensor(self.metrics, thread_id, task_id)
        self.enforced_processing_sensor = task_enforced_processing_sensor(self.metrics, thread_id, task_id)
        # named values processors keep across restarts, committed with the input offsets
        self.processor_metadata = ProcessorMetadata()
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
        # a task's own instance, as Kafka makes one per task (None: the record timestamp rule)
        self._config_extractor = None if global_task else default_timestamp_extractor(self.config)
        self._cache_flushers: Optional[list[Callable[[], None]]] = None
        # processing.exception.handler's boundaries, None for the default (fail: no boundary at all)
        handler = None if global_task else processing_handler_from_config(self.config)
        self.processing_failures = ProcessingFailures(self, handler) if handler is not None else None
        self.chains = FusedChains(self.context, self.processing_failures)
        self.accelerated = AcceleratedRoute(self)
        #: `(topic, partition) -> process(messages) -> count`, found on first use (the runtime's
        #: runs are often a record or two long: nothing is looked up again per run)
        self.partition_processors = _PartitionProcessors(self._partition_processor)
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
                    self._extractor_of(spec))
                for t in topics:
                    self.sources_by_topic[t] = node
            elif isinstance(spec, SinkSpec):
                node = SinkNode(
                    name, topo.decorate_topic(spec.topic, app) if isinstance(spec.topic, str) else spec.topic,
                    _serde_or_default(spec.key_serde, cfg, _serdes.DEFAULT_KEY_SERDE_CONFIG, f"sink {name!r}"),
                    _serde_or_default(spec.value_serde, cfg, _serdes.DEFAULT_VALUE_SERDE_CONFIG, f"sink {name!r}"),
                    spec.partitioner, self.collector)
                node.record_context = self.context.record_metadata
                self.sinks.append(node)
            else:
                assert isinstance(spec, ProcessorSpec)
                processor = spec.supplier()
                if not callable(getattr(processor, "process", None)):
                    raise ProcessingError(
                        f"processor {name!r}: supplier returned {processor!r}, which has no process(record)")
                node = ProcessorNode(name, processor, spec.stores)
                if spec.stores and not isinstance(processor, StageOperator):
                    # a Processor API node's store writes without a timestamp get its record's
                    # (the DSL's operators give every write its timestamp)
                    node.process = self.context.in_record_context(node.process)
                if self.processing_failures is not None:
                    node.process = self.processing_failures.guard_process(name, node.process)
            self.nodes[name] = node
        for name in self.subtopology.node_names:
            for parent in topo.node(name).parents:
                self.nodes[parent].add_child(self.nodes[name])

    # ---- lifecycle ------------------------------------------------------------------------

    def build_stores(self) -> dict[str, Any]:
        """Build (not open) the task's stores from the topology's store builders; a write that
        gives no timestamp is stamped by the context (`ProcessorContextImpl.write_timestamp`)."""
        for store_name in self.subtopology.store_names:
            if store_name not in self.stores:
                self.stores[store_name] = self.topology.store_builder(store_name).build()
        for store in self.stores.values():  # also those handed over (a promoted standby's)
            set_supplier = getattr(store, "set_timestamp_supplier", None)
            if set_supplier is not None:
                set_supplier(self.context.write_timestamp)
            set_record_context = getattr(store, "set_record_context", None)
            if set_record_context is not None:
                set_record_context(self.context)
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
                raise ProcessingError(
                    f"task {self.task_id}: processor {node.name!r} failed in init(): {exc!r}") from exc
        ctx.current_node = None
        self._initialized = True

    # ---- processing -----------------------------------------------------------------------

    def process(self, topic: str, partition: int, offset: int, key: bytes | None, value: bytes | None,
                timestamp: int, headers: Any = None) -> bool:
        """Process one raw input record as a consumed message (the TopologyTestDriver's way in:
        the same routes as a task's). Returns False if it was skipped (handler or timestamp)."""
        return self.process_messages(topic, partition, [raw_message(
            topic, partition, offset, key, value, timestamp, headers)]) == 1

    def advance_stream_time(self, timestamp: int) -> None:
        """Raise the stream time to `timestamp` (never lowers it). The engine owns stream time:
        its routes raise it record by record, and a store running a bulk update for the engine
        (`update_many(..., clock=engine)`) asks for it here; stores only read it."""
        if timestamp > self.stream_time:
            self.stream_time = timestamp

    def _extractor_of(self, spec: SourceSpec) -> Any:
        """The source's extractor, else default.timestamp.extractor's; None for the record
        timestamp rule (FailOnInvalidTimestamp, which a repartition topic's source names: the
        routes apply that rule themselves)."""
        extractor = spec.timestamp_extractor if spec.timestamp_extractor is not None else self._config_extractor
        return None if type(extractor) is FailOnInvalidTimestamp else extractor

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
        """Process a run of raw input records of one partition, in order, on the Python route:
        `rows` yields `(key_bytes, value_bytes, timestamp, headers, offset)`. Returns how many
        were processed (not skipped)."""
        return self.process_rows(self._source(topic), topic, partition, rows)

    def process_messages(self, topic: str, partition: int, messages: list) -> int:
        """Process consumed messages of one partition, in offset order: the accelerated route
        where it applies (streams/engine/accelerated.py), else the Python route; the same effects."""
        return self.partition_processors[(topic, partition)](messages)

    def _partition_processor(self, tp: tuple[str, int]) -> Callable[[list], int]:
        """`process_messages` of one partition, with its source and route found once."""
        topic, partition = tp
        source = self.sources_by_topic.get(topic) or self._source(topic)
        route = self.accelerated.processor(source, topic, partition)
        sensor = self.process_sensor
        process_rows = self.process_rows

        def process(messages: list) -> int:
            if route is None:
                done = process_rows(source, topic, partition, message_rows(messages))
            else:
                done = route(messages)
            sensor.count += done
            return done
        return process

    def _source(self, topic: str) -> SourceNode:
        source = self.sources_by_topic.get(topic)
        if source is None:
            raise ProcessingError(f"task {self.task_id} has no source node for topic {topic!r}")
        return source

    def process_rows(self, source: SourceNode, topic: str, partition: int, rows: Iterable[tuple]) -> int:
        """The Python route: the per-record loop (deserialize, extract the timestamp, raise the
        partition and stream time, run the source's children with the record's metadata set)."""
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
            fused = self.chains.entry(first)
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
                ctx.headers = hdrs
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
                    self.raise_process_error(exc, source, topic, partition, offset)
                done += 1
        finally:
            ctx.current_node = None
            ctx.metadata = None
            ctx.headers = ()
            if partition_time != start_partition_time:
                self.partition_times[tp] = partition_time
        return done

    def raise_process_error(self, exc: Exception, source: SourceNode, topic: str, partition: int,
                            offset: int) -> None:
        """Raise `exc` as a ProcessingError naming the task, the failing node and the record (the
        processing exception handler's own failure as it is: it names them already)."""
        if isinstance(exc, ProcessingHandlerError):
            raise exc
        ctx = self.context
        failed = ctx.current_node.name if ctx.current_node is not None else source.name
        raise ProcessingError(
            f"exception caught in process: task_id={self.task_id}, processor={failed}, topic={topic}, "
            f"partition={partition}, offset={offset}: {exc!r}") from exc

    def _deserialization_failed(self, exc: SerializationError, source: SourceNode, topic: str, partition: int,
                                offset: int, key: Any, value: Any) -> None:
        """Ask the deserialization handler: return to skip the record, else raise."""
        err = RecordDeserializationError(
            f"deserialization failed for a record from topic {topic!r} partition {partition} "
            f"offset {offset} (source {source.name!r}, task {self.task_id}): {exc}",
            topic=topic, partition=partition, offset=offset, key=key, value=value)
        where = f"topic {topic!r} partition {partition} offset {offset} (source {source.name!r}, task {self.task_id})"
        try:
            response = self.deserialization_handler(err)
        except Exception as handler_exc:
            raise DeserializationHandlerError(
                f"the deserialization exception handler failed on the record from {where}: {handler_exc!r}",
                topic=topic, partition=partition, offset=offset) from handler_exc
        if response is _serdes.DeserializationHandlerResponse.CONTINUE:
            # Kafka's RecordDeserializer: a skipped record is a dropped record
            log.warning("Skipping record due to deserialization error. %s: %s", where, exc)
            self.dropped_records_sensor.record()
            return
        if response is not _serdes.DeserializationHandlerResponse.FAIL:
            raise DeserializationHandlerError(
                f"the deserialization exception handler returned {response!r} for the record from {where}; "
                "expected a DeserializationHandlerResponse", topic=topic, partition=partition, offset=offset) from err
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
            raise ProcessingError(f"unknown punctuation type {punctuation_type!r}")
        return sched

    def _punctuate(self, sched: PunctuationSchedule, now: int) -> None:
        ctx = self.context
        prev_node, prev_meta, prev_timestamp = ctx.current_node, ctx.metadata, ctx.record_timestamp
        prev_headers = ctx.headers
        # a punctuation's record context: its time, no record metadata, no headers (Kafka's
        # StreamTask.punctuate)
        ctx.current_node, ctx.metadata, ctx.record_timestamp, ctx.headers = sched.node, None, now, ()
        try:
            sched.callback(now)
        except Exception as exc:
            failures = self.processing_failures
            if failures is not None and failures.handled(sched.node.name, exc, None, now):
                return  # Kafka's StreamTask.punctuate: dropped, the schedule goes on
            if isinstance(exc, StreamsError):
                raise
            failed = ctx.current_node.name if ctx.current_node is not None else sched.node.name
            raise ProcessingError(
                f"exception caught while punctuating: task_id={self.task_id}, processor={failed}, "
                f"timestamp={now}: {exc!r}") from exc
        finally:
            ctx.current_node, ctx.metadata, ctx.record_timestamp = prev_node, prev_meta, prev_timestamp
            ctx.headers = prev_headers

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
            raise ProcessingError(f"task {self.task_id}: errors while closing: {first_error!r}") from first_error
