"""Fixed-key processors (Kafka's FixedKeyProcessor API, KIP-820): what `KStream.process_values`
runs. A fixed-key processor sees each record as a `FixedKeyRecord` and can forward only records
derived from one it was handed (`with_value`, `with_timestamp`, `with_headers`): the key never
changes, so a grouping or join below needs no repartition topic (`KStream.process` may change
keys, and one below it repartitions).

In the topology a fixed-key processor is an ordinary processor node: `FixedKeyProcessorNode`
hands it each Record as a FixedKeyRecord and gives it a context whose `forward` takes
FixedKeyRecords only, so it runs through the same engine path as any processor.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import TYPE_CHECKING, Any, Callable, Optional

from streams.errors import ProcessingError
from streams.processor import (Headers, ProcessingContext, Processor, ProcessorContext, Record, RecordFields,
                               _normalize_headers, checked_timestamp)

if TYPE_CHECKING:  # pragma: no cover
    from streams.processor import Cancellable, PunctuationType, Punctuator, RecordMetadata

__all__ = ["FixedKeyRecord", "FixedKeyProcessor", "FixedKeyProcessorContext", "FixedKeyProcessorSupplier",
           "FixedKeyProcessorNode", "ContextView", "ForwardingDisabledContext"]

_new = object.__new__


class FixedKeyRecord(RecordFields):
    """A record whose key a processor cannot change. Made by the framework only (Kafka's
    package-private constructor); derive the records to forward with the `with_*` methods."""

    __slots__ = ()

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        raise TypeError("FixedKeyRecord is made by the framework: derive a record to forward from the one "
                        "process() was handed (with_value, with_timestamp, with_headers)")

    @classmethod
    def _of(cls, record: Record) -> "FixedKeyRecord":
        rec = _new(cls)
        rec.key = record.key
        rec.value = record.value
        rec.timestamp = record.timestamp
        rec.headers = record.headers
        return rec

    def _copy(self, value: Any, timestamp: int, headers: Headers) -> "FixedKeyRecord":
        rec = _new(FixedKeyRecord)
        rec.key = self.key
        rec.value = value
        rec.timestamp = timestamp
        rec.headers = headers
        return rec

    def with_value(self, value: Any) -> "FixedKeyRecord":
        return self._copy(value, self.timestamp, self.headers)

    def with_timestamp(self, timestamp: int) -> "FixedKeyRecord":
        return self._copy(self.value, checked_timestamp(timestamp), self.headers)

    def with_headers(self, headers: Any) -> "FixedKeyRecord":
        return self._copy(self.value, self.timestamp, _normalize_headers(headers))


FixedKeyRecord._same_kind = FixedKeyRecord


class FixedKeyProcessorContext(ProcessingContext):
    """What a fixed-key processor sees of its task: its `forward` takes FixedKeyRecords."""

    @abstractmethod
    def forward(self, record: FixedKeyRecord, child_name: Optional[str] = None) -> None:
        """Send `record` to all children of the current node, or only to `child_name`."""


class FixedKeyProcessor(ABC):
    """A processor that keeps keys (Kafka's FixedKeyProcessor): implement `process`; `init` and
    `close` are optional."""

    def init(self, context: FixedKeyProcessorContext) -> None:
        self.context = context

    @abstractmethod
    def process(self, record: FixedKeyRecord) -> None: ...

    def close(self) -> None:  # noqa: B027 - an optional hook, empty by default as Kafka's
        pass


FixedKeyProcessorSupplier = Callable[[], FixedKeyProcessor]


class ContextView:
    """The task's processor context as a user's processor or transformer sees it where Kafka
    hands it a narrower context: everything delegated, `forward` left to the subclass."""

    __slots__ = ("_context", "_processor_name")

    def __init__(self, context: ProcessorContext, processor_name: str) -> None:
        self._context = context
        self._processor_name = processor_name

    @property
    def application_id(self) -> str:
        return self._context.application_id

    @property
    def task_id(self) -> Any:
        return self._context.task_id

    @property
    def current_stream_time_ms(self) -> int:
        return self._context.current_stream_time_ms

    @property
    def current_system_time_ms(self) -> int:
        return self._context.current_system_time_ms

    @property
    def app_config(self) -> dict:
        return self._context.app_config

    def schedule(self, interval_ms: int, punctuation_type: "PunctuationType",
                 callback: "Punctuator") -> "Cancellable":
        return self._context.schedule(interval_ms, punctuation_type, callback)

    def get_state_store(self, name: str) -> Any:
        return self._context.get_state_store(name)

    def commit(self) -> None:
        self._context.commit()

    def record_metadata(self) -> Optional["RecordMetadata"]:
        return self._context.record_metadata()

    def __getattr__(self, attr: str) -> Any:  # what else the task's context offers (metrics, ...)
        return getattr(self._context, attr)


class ForwardingDisabledContext(ContextView):
    """Kafka's ForwardingDisabledProcessorContext: what a value transformer (KTable.transform_values)
    is given; it computes a value, the framework forwards it."""

    __slots__ = ()

    def forward(self, record: Any, child_name: Optional[str] = None) -> None:
        raise ProcessingError(f"{self._processor_name}: forward() is not allowed from this context: the "
                              "transformer returns its value and the framework forwards it")


class _FixedKeyContext(ContextView, FixedKeyProcessorContext):
    """The task's processor context as a fixed-key processor sees it."""

    __slots__ = ()

    def forward(self, record: FixedKeyRecord, child_name: Optional[str] = None) -> None:
        if type(record) is not FixedKeyRecord:
            raise ProcessingError(
                f"process_values processor {self._processor_name!r} forwarded {type(record).__name__} {record!r}: "
                "a fixed-key processor forwards FixedKeyRecords, derived from the record it was handed")
        context = self._context
        headers = record.headers
        # Kafka's forward() makes the forwarded record's headers the record context's, which a
        # caching store below keeps with each write (no repartition below a fixed key to hide it)
        previous = getattr(context, "headers", headers)
        forwarded = Record._make(record.key, record.value, record.timestamp, headers)
        if headers is previous:
            context.forward(forwarded, child_name)
            return
        context.headers = headers
        try:
            context.forward(forwarded, child_name)
        finally:
            context.headers = previous


class FixedKeyProcessorNode(Processor):
    """The processor a topology runs for one fixed-key processor (Kafka's ProcessorNode holding a
    FixedKeyProcessor): each Record goes in as a FixedKeyRecord."""

    def __init__(self, processor: Any, name: str) -> None:
        if not callable(getattr(processor, "process", None)):
            raise ProcessingError(f"process_values {name!r}: the supplier returned {processor!r}, "
                                  "which has no process(record) method")
        self.processor = processor
        self.name = name
        inner = processor.process
        of = FixedKeyRecord._of

        def process(record: Record) -> None:
            inner(of(record))
        self.process = process  # type: ignore[method-assign]

    def init(self, context: ProcessorContext) -> None:
        init = getattr(self.processor, "init", None)
        if init is not None:
            init(_FixedKeyContext(context, self.name))

    def process(self, record: Record) -> None:  # replaced per instance in __init__
        self.processor.process(FixedKeyRecord._of(record))

    def close(self) -> None:
        close = getattr(self.processor, "close", None)
        if close is not None:
            close()


def fixed_key_supplier(supplier: Callable[[], Any], name: str) -> Callable[[], Processor]:
    """The topology's processor supplier for a fixed-key processor supplier."""
    def supply() -> Processor:
        processor = supplier()
        if isinstance(processor, Processor):
            raise ProcessingError(f"process_values {name!r}: the supplier returned a Processor ({processor!r}); "
                                  "process_values runs FixedKeyProcessors (KStream.process runs Processors)")
        return FixedKeyProcessorNode(processor, name)
    return supply
