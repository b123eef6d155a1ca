"""The nodes of a task's processor graph: processor, source and sink nodes, and the protocol of
the record collector sinks send through."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Iterable, Optional, Protocol

from streams import serdes as _serdes
from streams.errors import SerializationError, StreamsException
from streams.processor import Processor, Record

if TYPE_CHECKING:
    from streams.engine.context import ProcessorContextImpl

_new_record = object.__new__  # Record._make inlined on the hot path (fields already validated)


class RecordCollector(Protocol):
    """Where sinks (and the change-logging layer, via the state manager) send records."""

    def send(self, topic: str, key: bytes | None, value: bytes | None, *, partition: int | None,
             timestamp: int, headers: Any = None) -> None: ...

    def partitions_for(self, topic: str) -> int:
        """Number of partitions of `topic` (used only by sinks with a custom partitioner)."""
        ...


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
