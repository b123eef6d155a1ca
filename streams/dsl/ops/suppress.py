"""KTable.suppress as an operator (Kafka's KTableSuppressProcessor): the logic of
streams/dsl/suppressed.py (SuppressProcessorLogic) over the changelogged buffer store of
state/suppress_buffer.py, written once as a stage. Stream time advancing through other records
or punctuations is what releases buffered keys, as in Kafka (no wall-clock emission)."""

from __future__ import annotations

from typing import Any, Callable, Optional

from state.suppress_buffer import BufferedContext

from streams.dsl.change import Change
from streams.dsl.suppressed import Suppressed, SuppressProcessorLogic
from streams.engine.stages import Stage, StageOperator
from streams.errors import ProcessingError
from streams.processor import ProcessorContext

_new_tuple = tuple.__new__


class SuppressProcessor(StageOperator):
    def __init__(self, suppressed: Suppressed, store_name: str, key_serde: Any, value_serde: Any,
                 grace_ms: Optional[int], node_name: str) -> None:
        self.suppressed = suppressed
        self.store_name = store_name
        self.key_serde = key_serde
        self.value_serde = value_serde
        self.grace_ms = grace_ms
        self.node_name = node_name

    def init(self, context: ProcessorContext) -> None:
        super().init(context)
        self.buffer = context.get_state_store(self.store_name)

    def stage(self, down: Stage, failed: Callable[[], None]) -> Stage:
        context = self.context

        def forward(key: Any, new: Any, old: Any, timestamp: int, record_context: Any) -> None:
            """An eviction goes downstream in the buffered update's record context (Kafka's
            KTableSuppressProcessor.emit): its topic, partition and offset, none where it had none."""
            headers = getattr(record_context, "headers", None) or ()
            topic = getattr(record_context, "topic", "")
            releasing, releasing_headers = getattr(context, "metadata", None), getattr(context, "headers", ())
            context.metadata = (topic, record_context.partition, record_context.offset) if topic else None
            context.headers = headers
            try:
                down(key, _new_tuple(Change, (new, old)), timestamp, headers)
            finally:
                context.metadata = releasing
                context.headers = releasing_headers

        logic = SuppressProcessorLogic(self.suppressed, self.buffer, self.key_serde, self.value_serde, forward,
                                       grace_ms=self.grace_ms, node_name=self.node_name)
        process, name = logic.process, self.node_name
        no_metadata = ("", -1, -1)

        def suppress(key: Any, value: Any, timestamp: int, headers: Any) -> None:
            try:
                if type(value) is not Change and not isinstance(value, Change):
                    raise ProcessingError(f"{name} expected a table update (Change), got {value!r}")
                topic, partition, offset = getattr(context, "metadata", None) or no_metadata
                process(key, value[0], value[1], _new_tuple(BufferedContext, (
                    timestamp, offset, topic, partition, tuple(headers) if headers else ())))
            except BaseException:
                failed()
                raise
        return suppress
