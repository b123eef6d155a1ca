"""Windowed aggregations as operators (Kafka's KStreamWindowAggregate,
KStreamSlidingWindowAggregate and KStreamSessionWindowAggregate), written once as stages over the
operator-independent logic of streams/dsl/window_aggregate.py. Results are Change(new, old) keyed
by Windowed; with caching they come from the store's flush listener (one per window per commit).
Late records are dropped, counted in the task's dropped-records sensor and logged at WARN
(windows.LateRecordReporter)."""

from __future__ import annotations

import logging
from typing import Any, Callable, Optional

from streams.dsl.change import Change
from streams.dsl.ops.table import attach_tuple_forwarder
from streams.dsl.window_aggregate import (SessionWindowAggregateLogic, SlidingWindowAggregateLogic,
                                          TimeWindowAggregateLogic)
from streams.dsl.windows import EmitStrategy, LateRecordReporter, SessionWindows, SlidingWindows
from streams.engine.stages import Stage, StageOperator
from streams.processor import ProcessorContext

log = logging.getLogger(__name__)

EMIT_INTERVAL_CONFIG = "__emit.interval.ms.kstreams.windowed.aggregation__"
DEFAULT_EMIT_INTERVAL_MS = 1000  # Kafka's internal default

_new_tuple = tuple.__new__


class _Counter:
    """A dropped-records count for contexts without a metrics registry."""

    count = 0


def late_record_reporter(context: ProcessorContext) -> LateRecordReporter:
    sensor = getattr(context, "dropped_records_sensor", None) or _Counter()
    return LateRecordReporter(sensor, context.task_id, logger=log)


class WindowAggregateProcessor(StageOperator):
    """One windowed aggregation: `windows` picks the logic (time, sliding or session windows);
    `merger` is for sessions only. Records with a None key are dropped and counted (Kafka)."""

    def __init__(self, windows: Any, store_name: str, caching: bool, initializer: Callable[[], Any],
                 aggregator: Callable[[Any, Any, Any], Any], merger: Optional[Callable[[Any, Any, Any], Any]] = None,
                 emit_strategy: Optional[EmitStrategy] = None) -> None:
        self.windows = windows
        self.store_name = store_name
        self.caching = caching
        self.initializer = initializer
        self.aggregator = aggregator
        self.merger = merger
        self.emit_strategy = emit_strategy

    def init(self, context: ProcessorContext) -> None:
        super().init(context)
        store = context.get_state_store(self.store_name)
        self.late = late_record_reporter(context)
        on_close = self.emit_strategy is not None and self.emit_strategy.emits_on_close
        # on_window_close forwards final results itself; otherwise a caching store forwards on flush
        self.forward_on_update = on_close or attach_tuple_forwarder(self, store, self.caching)
        self.store = store

    def stage(self, down: Stage, failed: Callable[[], None]) -> Stage:
        context = self.context
        forward_on_update = self.forward_on_update
        headers_of: list = [()]

        def forward(windowed: Any, new: Any, old: Any, timestamp: int) -> None:
            if forward_on_update:
                down(windowed, _new_tuple(Change, (new, old)), timestamp, headers_of[0])

        windows, store = self.windows, self.store
        common = dict(late=self.late, send_old_values=True)
        config = getattr(context, "app_config", None) or {}
        emit = dict(emit_strategy=self.emit_strategy,
                    emit_interval_ms=int(config.get(EMIT_INTERVAL_CONFIG, DEFAULT_EMIT_INTERVAL_MS)),
                    wall_clock=lambda: context.current_system_time_ms)
        if isinstance(windows, SessionWindows):
            logic: Any = SessionWindowAggregateLogic(windows, store, self.initializer, self.aggregator, self.merger,
                                                     forward, **common, **emit)
        elif isinstance(windows, SlidingWindows):
            logic = SlidingWindowAggregateLogic(windows, store, self.initializer, self.aggregator, forward, **common)
        else:
            logic = TimeWindowAggregateLogic(windows, store, self.initializer, self.aggregator, forward,
                                             **common, **emit)
        process, late = logic.process, self.late

        def window_aggregate(key: Any, value: Any, timestamp: int, headers: Any) -> None:
            meta = context.metadata if hasattr(context, "metadata") else None
            topic, partition, offset = meta if meta is not None else ("", -1, -1)
            if key is None:
                late.sensor.count += 1
                log.warning("windowed aggregation: skipping a record with a None key. topic=[%s] partition=[%d] "
                            "offset=[%d]", topic, partition, offset)
                return
            try:
                headers_of[0] = headers
                process(key, value, timestamp, topic=topic, partition=partition, offset=offset)
            except BaseException:
                failed()
                raise
        return window_aggregate
