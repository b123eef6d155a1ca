"""The nodes of a task's processor graph: processor, source and sink nodes, and the protocol of
the record collector sinks send through."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Iterable, Optional, Protocol

from streams import serdes as _serdes
from streams.errors import SerializationError, ProcessingError
from streams.processor import Processor, Record, RecordContext

if TYPE_CHECKING:
    from streams.engine.context import ProcessorContextImpl


class RecordCollector(Protocol):
    """Where sinks (and the change-logging layer, via the state manager) send records."""

    def send(self, topic: str, key: bytes | None, value: bytes | None, *, partition: int | None,
             timestamp: int, headers: Any = None) -> None: ...

    def partitions_for(self, topic: str) -> int:
        """Number of partitions of `topic` (used only by sinks with a custom partitioner)."""
        ...


class ProcessorNode:
    """A processor instance in a task, with its children in the order they were added."""

    __slots__ = ("name", "processor", "children", "children_by_name", "store_names", "process", "only_child",
                 "parent_count")

    def __init__(self, name: str, processor: Optional[Processor], store_names: Iterable[str] = ()) -> None:
        self.name = name
        self.processor = processor
        self.children: list[ProcessorNode] = []
        self.children_by_name: dict[str, ProcessorNode] = {}
        self.only_child: Optional[ProcessorNode] = None  # set when there is exactly one (forward's fast path)
        self.parent_count = 0  # a node with several parents is never fused (streams/engine/fusion.py)
        self.store_names = frozenset(store_names)
        if processor is not None:
            self.process = processor.process  # bound once: forward calls it directly

    def add_child(self, child: "ProcessorNode") -> None:
        self.children.append(child)
        self.children_by_name[child.name] = child
        self.only_child = child if len(self.children) == 1 else None
        child.parent_count += 1

    def init(self, context: "ProcessorContextImpl") -> None:
        if self.processor is not None:
            self.processor.init(context)

    def close(self) -> None:
        if self.processor is not None:
            self.processor.close()

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.name!r})"


class SourceNode(ProcessorNode):
    __slots__ = ("topics", "key_serde", "value_serde", "key_deserialize", "value_deserialize",
                 "key_deserialize_unchecked", "value_deserialize_unchecked", "timestamp_extractor", "context")

    def __init__(self, name: str, topics: tuple[str, ...], key_serde: Any, value_serde: Any,
                 timestamp_extractor: Any) -> None:
        super().__init__(name, None)
        self.topics = topics
        self.key_serde = key_serde
        self.value_serde = value_serde
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
    """Serializes a record and sends it to its topic: one implementation (`stage`), which the
    record path (`process`) and fused chains both use; the collector may offer a direct stage
    for the same work (`sink_stage`, the embedded producer's queues) behind that one seam."""

    __slots__ = ("topic", "key_serialize", "value_serialize", "key_serialize_unchecked", "value_serialize_unchecked",
                 "partitioner", "collector", "record_context")

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
        self.record_context: Callable[[], Any] = _no_record_context
        sink = self._sink(_no_failure_mark)

        def process(record: Record) -> None:
            sink(record.key, record.value, record.timestamp, record.headers)
        self.process = process

    def stage(self, failed: Callable[[], None], drop_null_keys: bool = False) -> Callable[[Any, Any, int, Any], None]:
        """The sink as a fused stage: `stage(key, value, timestamp, headers)` does what
        `process(Record(key, value, timestamp, headers))` does; `failed()` is called on any error
        (it names this sink as the failing node). `drop_null_keys`: the stage also does the
        work of a null-key filter right before the sink (records with a None key are dropped).
        The collector's accelerated stage (`sink_stage`) stands in for it where it is offered; it
        hands every case it does not run itself to this stage (a None key: the drop is here)."""
        sink = self._sink(failed, drop_null_keys)
        key_unchecked, value_unchecked = self.key_serialize_unchecked, self.value_serialize_unchecked
        make_direct = getattr(self.collector, "sink_stage", None)
        if callable(self.topic):  # a topic per record: no per-topic direct stage
            return sink
        if make_direct is None or self.partitioner is not None or key_unchecked is None or value_unchecked is None:
            return sink
        direct = make_direct(self.topic, key_unchecked, value_unchecked, sink, failed)
        return direct or sink

    def _sender(self) -> Optional[Callable[[Any, Any, int, Any], None]]:
        """The collector's per-topic sender, `sender(key_bytes, value_bytes, timestamp,
        headers)`: one positional call per record, where the collector offers it (the runtime's)
        and this sink names one topic and keeps the default partitioning; else None."""
        make_sender = getattr(self.collector, "sender", None)
        if make_sender is None or callable(self.topic) or self.partitioner is not None:
            return None
        return make_sender(self.topic)

    def _to_topic(self) -> Callable[[Any, Any, Any, Any, int, Any], None]:
        """`send(key, value, key_bytes, value_bytes, timestamp, headers)` through the collector's
        `send` (with this sink's partitioner), where it offers no `_sender`."""
        topic, collector, partitioner = self.topic, self.collector, self.partitioner
        if collector is None:
            raise ProcessingError(f"sink {self.name!r} has no record collector to send to")
        if callable(topic):
            return self._to_extracted_topic()
        if partitioner is not None:
            send = collector.send

            def to_partition(key: Any, value: Any, key_bytes: Any, value_bytes: Any, timestamp: int,
                             headers: Any) -> None:
                partition = partitioner(topic, key, value, collector.partitions_for(topic))
                send(topic, key_bytes, value_bytes, partition=partition, timestamp=timestamp, headers=headers)
            return to_partition
        send = collector.send

        def to_send(key: Any, value: Any, key_bytes: Any, value_bytes: Any, timestamp: int, headers: Any) -> None:
            send(topic, key_bytes, value_bytes, partition=None, timestamp=timestamp, headers=headers)
        return to_send

    def _to_extracted_topic(self) -> Callable[[Any, Any, Any, Any, int, Any], None]:
        """Kafka's TopicNameExtractor: `extractor(key, value, record_context)` names the topic
        of each record (a RecordContext: the input record's topic, partition and offset, the
        written record's timestamp and headers, as Kafka's SinkNode builds it)."""
        extractor, collector, partitioner, name = self.topic, self.collector, self.partitioner, self.name
        send, node = collector.send, self

        def to_extracted(key: Any, value: Any, key_bytes: Any, value_bytes: Any, timestamp: int,
                         headers: Any) -> None:
            where = node.record_context()
            topic = extractor(key, value, RecordContext(*(_NO_SOURCE if where is None else where), timestamp,
                                                        tuple(headers) if headers else ()))
            if not isinstance(topic, str) or not topic:
                raise ProcessingError(f"sink {name!r}: the topic name extractor returned {topic!r}, not a topic name")
            partition = None if partitioner is None else partitioner(topic, key, value,
                                                                     collector.partitions_for(topic))
            send(topic, key_bytes, value_bytes, partition=partition, timestamp=timestamp, headers=headers)
        return to_extracted

    def _sink(self, failed: Callable[[], None], drop_null_keys: bool = False) -> Callable[[Any, Any, int, Any], None]:
        """The sink's work for one record: serialize (the serdes' C serializers first where they
        have them; on any error their own calls decide, result or error) and send."""
        name, topic = self.name, self.topic
        key_serialize, value_serialize = self.key_serialize, self.value_serialize
        key_unchecked, value_unchecked = self.key_serialize_unchecked, self.value_serialize_unchecked
        unchecked = key_unchecked is not None and value_unchecked is not None
        sender = self._sender() if self.collector is not None else None
        to_topic = self._to_topic() if self.collector is not None and sender is None else None

        def checked(key: Any, value: Any) -> tuple:
            try:
                return key_serialize(key), value_serialize(value)
            except SerializationError as exc:
                raise SerializationError(
                    f"sink {name!r} could not serialize a record for topic {topic!r}: {exc}") from exc

        def sink(key: Any, value: Any, timestamp: int, headers: Any) -> None:
            if key is None and drop_null_keys:
                return
            try:
                if unchecked:
                    try:
                        key_bytes = None if key is None else key_unchecked(key)
                        value_bytes = None if value is None else value_unchecked(value)
                    except Exception:
                        key_bytes, value_bytes = checked(key, value)
                else:
                    key_bytes, value_bytes = checked(key, value)
                if sender is not None:
                    sender(key_bytes, value_bytes, timestamp, list(headers) if headers else None)
                elif to_topic is None:
                    raise ProcessingError(f"sink {name!r} has no record collector to send to")
                else:
                    to_topic(key, value, key_bytes, value_bytes, timestamp, list(headers) if headers else None)
            except BaseException:
                failed()
                raise
        return sink

    def add_child(self, child: ProcessorNode) -> None:  # pragma: no cover - Topology forbids it
        raise ProcessingError(f"sink {self.name!r} cannot have children")


def _no_record_context() -> Any:
    return None


_NO_SOURCE = (None, -1, -1)  # a RecordContext's topic, partition and offset outside of a record (Kafka's)


def _no_failure_mark() -> None:
    """As a node the sink is already the current node when it fails (forward set it)."""
