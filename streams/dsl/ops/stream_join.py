"""Stream joins as operators: stream-stream (Kafka's KStreamKStreamJoinLeftSide / RightSide over
KStreamJoinWindow stores and the shared outer store) and stream-table (Kafka's KStreamKTableJoin
and KStreamGlobalKTableJoin),
wiring the rules of streams/dsl/joins/ to records and stores.

Stream-stream: the join's two side processors (KSTREAM-JOINTHIS-/OUTERTHIS- for the left input,
KSTREAM-JOINOTHER-/OUTEROTHER- for the right) share one StreamStreamJoinLogic per task (Kafka's
shared TimeTracker): each sees the stores Kafka connects to it (the other side's window store and
the outer store), and the logic, built on the first record once both sides are initialised, gets
all three. Each side's KSTREAM-WINDOWED- node (JoinWindowProcessor, Kafka's KStreamJoinWindow)
forwards the record to the side's processor and then stores it in its side's window store,
through the logic. Whatever a side's record causes (its joins, and the held records of
either side whose window closed) goes to that side's child, with the record's headers: each
side's stage is the logic's side itself, routed there (StreamStreamJoinLogic.route).

An inner join of a stream with itself, under topology.optimization single.store.self.join, is one
SelfJoinProcessor over the `this` store instead (Kafka's KStreamKStreamSelfJoin).
"""

from __future__ import annotations

import logging
from typing import Any, Callable, Optional

from state.outer_join_store import OuterJoinStore
from streams.dsl.joins.stream_stream import StreamStreamJoinLogic
from streams.dsl.joins.stream_table import StreamTableJoinLogic
from streams.dsl.ops.value_getter import ValueGetterSupplier
from streams.dsl.ops.windowed import _Counter, late_record_reporter
from streams.dsl.windows import JoinWindows
from streams.engine.stages import Stage, StageOperator
from streams.processor import ProcessorContext

__all__ = ["StreamStreamJoin", "StreamJoinSideProcessor", "SelfJoinProcessor", "StreamTableJoinProcessor",
           "EMIT_INTERVAL_CONFIG", "DEFAULT_EMIT_INTERVAL_MS"]

log = logging.getLogger(__name__)

EMIT_INTERVAL_CONFIG = "__emit.interval.ms.kstreams.outer.join.spurious.results.fix__"
DEFAULT_EMIT_INTERVAL_MS = 1000  # Kafka's internal default (the test driver sets 0)


class _TaskJoin:
    """One task's join: the stores its processors brought, the logic once built, and where its
    results go (the side processing the current record, with that record's headers)."""

    def __init__(self, context: ProcessorContext) -> None:
        self.context = context  # held: keeps id(context) from being reused while this lives
        self.stores: dict[str, Any] = {}
        self.attached = 0  # processors of the join attached in this task (sides, windowed nodes)
        self.logic: Optional[StreamStreamJoinLogic] = None


class StreamStreamJoin:
    """One windowed stream-stream join of the topology: its settings and its per-task state.
    `side(is_left)` is the supplier of a side's processor."""

    def __init__(self, windows: JoinWindows, joiner: Callable[[Any, Any], Any], join_type: str, this_store: str,
                 other_store: str, outer_store: Optional[str], key_serde: Any, this_value_serde: Any,
                 other_value_serde: Any) -> None:
        self.windows = windows
        self.joiner = joiner
        self.join_type = join_type
        self.this_store = this_store
        self.other_store = other_store
        self.outer_store = outer_store
        self.serdes = (key_serde, this_value_serde, other_value_serde)
        self._tasks: dict[int, _TaskJoin] = {}

    def side(self, is_left: bool) -> Callable[[], "StreamJoinSideProcessor"]:
        return lambda: StreamJoinSideProcessor(self, is_left)

    def windowed(self, is_left: bool) -> Callable[[], "JoinWindowProcessor"]:
        return lambda: JoinWindowProcessor(self, is_left)

    def attach(self, context: ProcessorContext, store_names: tuple = ()) -> _TaskJoin:
        """The task's join, with the stores of `store_names` (those connected to the processor
        attaching) added to it."""
        task = self._tasks.get(id(context))
        if task is None or task.context is not context:
            task = self._tasks[id(context)] = _TaskJoin(context)
        for name in store_names:
            task.stores[name] = context.get_state_store(name)
        task.attached += 1
        return task

    def side_stores(self, is_left: bool) -> tuple:
        """What Kafka connects to a side's join processor: the other side's window store and the
        outer store."""
        names = (self.other_store if is_left else self.this_store,)
        return names if self.outer_store is None else names + (self.outer_store,)

    def detach(self, task: _TaskJoin) -> None:
        task.attached -= 1
        if task.attached <= 0 and self._tasks.get(id(task.context)) is task:
            del self._tasks[id(task.context)]

    def logic(self, task: _TaskJoin) -> StreamStreamJoinLogic:
        if task.logic is None:
            context = task.context
            outer = None
            if self.outer_store is not None:
                key_serde, this_value_serde, other_value_serde = self.serdes
                outer = OuterJoinStore(task.stores[self.outer_store], key_serde, this_value_serde, other_value_serde)
            config = getattr(context, "app_config", None) or {}
            task.logic = StreamStreamJoinLogic(
                self.windows, task.stores[self.this_store], task.stores[self.other_store], self.joiner, _unrouted,
                join_type=self.join_type, outer_store=outer, late=late_record_reporter(context),
                emit_interval_ms=int(config.get(EMIT_INTERVAL_CONFIG, DEFAULT_EMIT_INTERVAL_MS)),
                wall_clock=lambda: context.current_system_time_ms, record_metadata=lambda: context.metadata)
        return task.logic


def _unrouted(key: Any, value: Any, timestamp: int) -> None:
    raise AssertionError("a stream-stream join side emitted before its stage was built")


class _JoinPart(StageOperator):
    """A processor of a stream-stream join, attached to its task's join while it lives, with
    the stores connected to it (`store_names`)."""

    def __init__(self, join: StreamStreamJoin, is_left: bool = True) -> None:
        self.join = join
        self.is_left = is_left
        self.task: Optional[_TaskJoin] = None

    def store_names(self) -> tuple:
        return ()

    def init(self, context: ProcessorContext) -> None:
        super().init(context)
        self.task = self.join.attach(context, self.store_names())

    def close(self) -> None:
        if self.task is not None:
            self.join.detach(self.task)
            self.task = None


class StreamJoinSideProcessor(_JoinPart):
    """One side of a stream-stream join (see the module doc)."""

    def store_names(self) -> tuple:
        return self.join.side_stores(self.is_left)

    def stage(self, down: Stage, failed: Callable[[], None]) -> Stage:
        # the logic's side is the stage: its results go to `down` with the record's headers,
        # its errors mark this node (the warnings read the record's metadata when they name it)
        logic = self.join.logic(self.task)
        logic.route(self.is_left, down, failed)
        return logic.side_process(self.is_left)


class JoinWindowProcessor(_JoinPart):
    """A side's KSTREAM-WINDOWED- node (Kafka's KStreamJoinWindow): forwards each record to the
    side's join processor (or the self-join processor) first, then, when the record has a key,
    stores it in the side's window store (StreamStreamJoinLogic.window_put). So a record is
    stored whatever became of its join below: a failure there that the processing exception
    handler lets go (CONTINUE) still leaves it stored, as in Kafka; one that fails the task does
    not."""

    def stage(self, down: Stage, failed: Callable[[], None]) -> Stage:
        task, is_left = self.task, self.is_left
        put: Optional[Callable[[Any, Any, int], None]] = None

        def join_window(key: Any, value: Any, timestamp: int, headers: Any) -> None:
            nonlocal put
            down(key, value, timestamp, headers)
            if key is None:
                return
            try:
                if put is None:  # the join below built the task's logic on this first record
                    put = task.logic.window_put(is_left)
                put(key, value, timestamp)
            except BaseException:
                failed()
                raise
        return join_window


class SelfJoinProcessor(_JoinPart):
    """An inner join of a stream with itself over its one window store (topology.optimization
    single.store.self.join, Kafka's KStreamKStreamSelfJoin): StreamStreamJoinLogic.self_join_process
    over the join's `this` store, which its windowed node keeps Kafka's place for."""

    def store_names(self) -> tuple:
        return (self.join.this_store,)

    def stage(self, down: Stage, failed: Callable[[], None]) -> Stage:
        context, join, task = self.context, self.join, self.task
        store = task.stores[join.this_store]
        # both sides over the one store: only the self-join path runs (the windowed node above
        # stores each record through the same logic's left side)
        logic = task.logic = StreamStreamJoinLogic(
            join.windows, store, store, join.joiner, _unrouted, late=late_record_reporter(context),
            record_metadata=lambda: context.metadata)
        logic.route(True, down, failed)
        return logic.self_join_process()


class StreamTableJoinProcessor(StageOperator):
    """KStream.join / left_join with a KTable (Kafka's KStreamKTableJoin) or, with a
    `key_selector`, a GlobalKTable (KStreamGlobalKTableJoin): each stream record is joined with
    the table's current value, read through the table's value getter (a global table's: its
    global store, read-only); the result keeps the record's key, timestamp and headers."""

    def __init__(self, table: ValueGetterSupplier, joiner: Callable[[Any, Any], Any], left_join: bool,
                 key_selector: Optional[Callable[[Any, Any], Any]] = None) -> None:
        self.table = table
        self.joiner = joiner
        self.left_join = left_join
        self.key_selector = key_selector

    def init(self, context: ProcessorContext) -> None:
        super().init(context)
        self.get = self.table.getter(context)
        self.dropped = getattr(context, "dropped_records_sensor", None) or _Counter()

    def stage(self, down: Stage, failed: Callable[[], None]) -> Stage:
        headers_of: list = [()]

        def forward(key: Any, value: Any, timestamp: int) -> None:
            down(key, value, timestamp, headers_of[0])
        process = StreamTableJoinLogic(self.get, self.joiner, forward, left_join=self.left_join,
                                       dropped=self.dropped, key_selector=self.key_selector).process
        context = self.context
        selects = self.key_selector is not None  # a selected key may be None: dropped, logged

        def stream_table_join(key: Any, value: Any, timestamp: int, headers: Any) -> None:
            headers_of[0] = headers
            try:
                # the record's metadata only for the rule's warning about a record it may drop
                if (key is None or value is None or selects) and (meta := context.metadata) is not None:
                    process(key, value, timestamp, topic=meta[0], partition=meta[1], offset=meta[2])
                else:
                    process(key, value, timestamp)
            except BaseException:
                failed()
                raise
        return stream_table_join
