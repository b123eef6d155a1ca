"""processing.exception.handler (Kafka's ProcessingExceptionHandler, KIP-1033): what happens when a
processor raises while processing a record or punctuating.

Kafka asks the handler at the boundary of the node whose processor raised (ProcessorNode.process):
the innermost node, with the record that node was given. CONTINUE drops that node's processing of
the record (counted in dropped-records) and everything else goes on: the parent's code after its
forward, its other children, the next records. FAIL stops the task as without a handler; the
nodes around it do not ask again. A punctuator that raises is asked about with no record.

Without a handler, or with the default log_and_fail, the engine builds no boundary at all: a
failure takes the one path it always took (the route names the failing node). With another
handler every processor node's process and every fused stage of one gets a boundary (`guard_stage`,
`guard_process`), and so does a stage's bulk run over a stretch of records (its `key_bytes_run`,
streams/engine/accelerated.py): a failure at one record of the run is asked about with that
record, and on CONTINUE the run goes on after it.
"""

from __future__ import annotations

import enum
import logging
from typing import TYPE_CHECKING, Any, Callable, Mapping, NamedTuple, Optional

from eddy.errors import EddyError
from state.errors import InvalidStoreArgumentError
from streams.config_names import handler_named
from streams.errors import InvalidRecordError, ProcessingError, SerializationError
from streams.processor import Record

if TYPE_CHECKING:
    from streams.engine.task_engine import TaskEngine

log = logging.getLogger(__name__)

PROCESSING_HANDLER_CONFIG = "processing.exception.handler"


class ProcessingHandlerResponse(enum.Enum):
    CONTINUE = "continue"
    FAIL = "fail"


class ErrorHandlerContext(NamedTuple):
    """What the handler learns about a failure (Kafka's ErrorHandlerContext): the input record's
    topic, partition and offset (None, None, -1 in a wall-clock punctuation), its headers, the
    failing node, the task and the timestamp of the record (or of the punctuation)."""

    topic: Optional[str]
    partition: Optional[int]
    offset: int
    headers: Any
    processor_node_id: str
    task_id: Any
    timestamp: int


class ProcessingHandlerError(ProcessingError):
    """The processing exception handler itself raised, or answered something that is not a
    ProcessingHandlerResponse; names the node and the record."""


ProcessingHandler = Callable[[ErrorHandlerContext, Optional[Record], Exception], ProcessingHandlerResponse]


def log_and_fail(context: ErrorHandlerContext, record: Optional[Record], exception: Exception
                 ) -> ProcessingHandlerResponse:
    """Kafka's default: log the failure and stop."""
    log.error("processing failed in %s, stopping: %r", context.processor_node_id, exception)
    return ProcessingHandlerResponse.FAIL


def log_and_continue(context: ErrorHandlerContext, record: Optional[Record], exception: Exception
                     ) -> ProcessingHandlerResponse:
    """Log the failure and drop the record at the failing node."""
    log.warning("processing failed in %s (task %s, topic %s partition %s offset %s), dropping the record: %r",
                context.processor_node_id, context.task_id, context.topic, context.partition, context.offset,
                exception)
    return ProcessingHandlerResponse.CONTINUE


_HANDLERS: dict[str, ProcessingHandler] = {
    "log_and_fail": log_and_fail,
    "log_and_continue": log_and_continue,
    "org.apache.kafka.streams.errors.logandfailprocessingexceptionhandler": log_and_fail,
    "org.apache.kafka.streams.errors.logandcontinueprocessingexceptionhandler": log_and_continue,
}


def processing_handler_from_config(config: Optional[Mapping[str, Any]]) -> Optional[ProcessingHandler]:
    """The handler `processing.exception.handler` names: "log_and_fail" (the default),
    "log_and_continue" (or Kafka's class names of the two), or a callable
    `handler(context, record, exception) -> ProcessingHandlerResponse`. None for the default:
    failing is what the engine does without a handler."""
    value = (config or {}).get(PROCESSING_HANDLER_CONFIG)
    if value is None:
        return None
    handler = handler_named(PROCESSING_HANDLER_CONFIG, value, _HANDLERS)
    return None if handler is log_and_fail else handler


# What a node never handles: a failure a node inside it already answered FAIL about (marked), and
# Eddy's own errors but those a record causes (Kafka rethrows TaskMigrated and TaskCorrupted: the
# task's errors, not a record's; Eddy's task, state and delivery errors are of that kind).
_FAILED_MARK = "_eddy_processing_failed"
_RECORD_ERRORS = (InvalidRecordError, SerializationError, InvalidStoreArgumentError)


def _handles(exc: BaseException) -> bool:
    if not isinstance(exc, Exception) or getattr(exc, _FAILED_MARK, False):
        return False
    return not isinstance(exc, EddyError) or type(exc) is ProcessingError or isinstance(exc, _RECORD_ERRORS)


class ProcessingFailures:
    """One task engine's handler and the answers it gives (see the module doc)."""

    def __init__(self, engine: "TaskEngine", handler: ProcessingHandler) -> None:
        self.engine = engine
        self.handler = handler

    def handled(self, node_name: str, exc: BaseException, record: Optional[Record], timestamp: int) -> bool:
        """Whether `exc`, raised at node `node_name` processing `record` (None: punctuating), is
        dropped there (CONTINUE, counted); False (and marked, so the nodes around do not ask
        again) to let it go on."""
        if not _handles(exc):
            return False
        engine = self.engine
        ctx = engine.context
        metadata = ctx.metadata
        topic, partition, offset = metadata if metadata is not None else (None, None, -1)
        headers = record.headers if record is not None else ctx.headers
        context = ErrorHandlerContext(topic, partition, offset, headers, node_name, engine.task_id, timestamp)
        where = (f"task {engine.task_id}, processor {node_name}, topic {topic}, partition {partition}, "
                 f"offset {offset}")
        try:
            response = self.handler(context, record, exc)  # type: ignore[arg-type]
        except Exception as handler_exc:
            raise ProcessingHandlerError(f"the processing exception handler failed on a failure at {where} "
                                         f"({exc!r}): {handler_exc!r}") from handler_exc
        if response is ProcessingHandlerResponse.CONTINUE:
            engine.dropped_records_sensor.record()
            return True
        if response is not ProcessingHandlerResponse.FAIL:
            raise ProcessingHandlerError(f"the processing exception handler returned {response!r} for a failure at "
                                         f"{where}; expected a ProcessingHandlerResponse") from exc
        try:
            setattr(exc, _FAILED_MARK, True)
        except (AttributeError, TypeError):  # an exception without attributes: asked again outside, same answer
            pass
        return False

    def guard_stage(self, node_name: str, stage: Callable[[Any, Any, int, Any], None]
                    ) -> Callable[[Any, Any, int, Any], None]:
        """`stage` with node `node_name`'s boundary: a failure inside it not already answered
        is asked about with the record the node was given."""
        ctx = self.engine.context
        handled = self.handled
        new = object.__new__

        def guarded(key: Any, value: Any, timestamp: int, headers: Any) -> None:
            current = ctx.current_node
            try:
                stage(key, value, timestamp, headers)
            except Exception as exc:
                record = new(Record)
                record.key, record.value, record.timestamp, record.headers = key, value, timestamp, headers
                if not handled(node_name, exc, record, timestamp):
                    raise
                ctx.current_node = current  # the chain goes on as if the node had returned
        bulk = getattr(stage, "key_bytes_run", None)
        if bulk is not None:  # the stage's bulk key run keeps its route, with the same boundary
            guarded.key_bytes_run = (bulk[0], self._guard_run(node_name, bulk[1]), *bulk[2:])  # type: ignore[attr-defined]
        return guarded

    def _guard_run(self, node_name: str, run: Callable[[list, list, Any, list], None]
                   ) -> Callable[[list, list, Any, list], None]:
        """A stage's bulk run over a stretch of source records with the node's boundary: a
        failure at record i (the run says how many it finished: `updates_done`) is asked about
        with that source record, and on CONTINUE the run goes on from i + 1."""
        engine = self.engine
        ctx = engine.context
        handled = self.handled

        def guarded_run(keys: list, timestamps: list, clock: Any, messages: list) -> None:
            start, n = 0, len(keys)
            current = ctx.current_node
            while start < n:
                try:
                    if start:
                        run(keys[start:], timestamps[start:], clock, messages[start:])
                    else:
                        run(keys, timestamps, clock, messages)
                    return
                except Exception as exc:
                    i = start + getattr(exc, "updates_done", 0)
                    if not _handles(exc) or not i < n:
                        raise
                    message = messages[i]
                    source = engine.sources_by_topic[message.topic()]
                    record = Record(source.key_deserialize(keys[i]), source.value_deserialize(message.value()),
                                    timestamps[i])
                    metadata = ctx.metadata
                    ctx.metadata = (message.topic(), message.partition(), message.offset())
                    try:
                        if not handled(node_name, exc, record, timestamps[i]):
                            raise
                    finally:
                        ctx.metadata = metadata
                    ctx.current_node = current
                    start = i + 1
        return guarded_run

    def guard_process(self, node_name: str, process: Callable[[Record], None]) -> Callable[[Record], None]:
        """A node's `process(record)` with the node's boundary (see guard_stage)."""
        ctx = self.engine.context
        handled = self.handled

        def guarded(record: Record) -> None:
            current = ctx.current_node
            try:
                process(record)
            except Exception as exc:
                if not handled(node_name, exc, record, record.timestamp):
                    raise
                ctx.current_node = current
        return guarded
