"""Windowed aggregations as operators (Kafka's KStreamWindowAggregate,
KStreamSlidingWindowAggregate and KStreamSessionWindowAggregate), written once as stages over the
operator-independent logic of streams/dsl/window_aggregate.py. Results are Change(new, old) keyed
by Windowed; with caching they come from the store's flush listener (one per window per commit;
sessions stamped with their end, Kafka's SessionCacheFlushListener). Late records are dropped,
counted in the task's dropped-records sensor and logged at WARN (windows.LateRecordReporter).

Under on_window_close the close time of the last emission is kept in the task's processor
metadata under the store's name (Kafka's processorMetadataForKey / addProcessorMetadataKeyValue),
which the runtime commits with the input offsets: a restarted task, with or without its local
state, neither repeats nor skips a final result.

A count over a caching window store also offers the engine's bulk capability `key_bytes_run`
(streams/engine/accelerated.py): the logic's `counting_run` over serialized keys."""

from __future__ import annotations

import logging
from typing import Any, Callable, Optional

from streams.dsl.change import Change
from streams.dsl.ops.table import attach_tuple_forwarder
from state.typed import find_caching_layer
from streams.dsl.window_aggregate import (NO_TIMESTAMP, SessionWindowAggregateLogic, SlidingWindowAggregateLogic,
                                          TimeWindowAggregateLogic, WindowUpdates)
from streams.dsl.windows import EmitStrategy, LateRecordReporter, SessionWindows, SlidingWindows
from streams.engine.stages import Stage, StageOperator, marking_failures
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


def _session_end(windowed: Any, timestamp: int) -> int:
    return windowed.window.end


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
        on_close = self.on_close = self.emit_strategy is not None and self.emit_strategy.emits_on_close
        # on_window_close forwards final results itself; otherwise a caching store forwards on flush
        if isinstance(self.windows, SessionWindows):
            self.forward_on_update = on_close or attach_tuple_forwarder(self, store, self.caching, _session_end)
        else:
            self.forward_on_update = on_close or self._forward_flushed(store)
        self.store = store
        self.last_emit_window_close_time = NO_TIMESTAMP
        self.record_close_time: Optional[Callable[[int], None]] = None
        if on_close:
            metadata_for_key = getattr(context, "processor_metadata_for_key", None)
            if metadata_for_key is not None:
                last = metadata_for_key(self.store_name)
                if last is not None:
                    self.last_emit_window_close_time = last
                add = context.add_processor_metadata_key_value
                name = self.store_name
                self.record_close_time = lambda close_time: add(name, close_time)

    def _forward_flushed(self, store: Any) -> bool:
        """attach_tuple_forwarder for a window store of ValueAndTimestamp, decoding the flushed
        bytes here (WindowUpdates.flushed) rather than through the typed store's listener."""
        caching = find_caching_layer(store) if self.caching else None
        decode = WindowUpdates(store).flushed() if caching is not None else None
        if caching is None or decode is None or getattr(self.context, "scoped", None) is None:
            return attach_tuple_forwarder(self, store, self.caching)
        to_children = self._to_children()
        context = self.context

        def on_flush(windowed: Any, new: Optional[bytes], old: Optional[bytes], timestamp: int) -> None:
            # in the entry's record context, set by the caching store
            key, new_value, old_value = decode(windowed, new, old)
            to_children(key, _new_tuple(Change, (new_value, old_value)), timestamp, context.headers)
        return caching.set_flush_listener(context.scoped(on_flush)) is False

    def logic(self, forward: Any) -> Any:
        """The aggregation's logic for this task, forwarding to `forward` (None: the cache does)."""
        config = getattr(self.context, "app_config", None) or {}
        context = self.context
        options = dict(late=self.late, send_old_values=True, emit_strategy=self.emit_strategy,
                       emit_interval_ms=int(config.get(EMIT_INTERVAL_CONFIG, DEFAULT_EMIT_INTERVAL_MS)),
                       wall_clock=lambda: context.current_system_time_ms,
                       last_emit_window_close_time=self.last_emit_window_close_time,
                       on_final_results_emitted=self.record_close_time)
        windows, store = self.windows, self.store
        if isinstance(windows, SessionWindows):
            return SessionWindowAggregateLogic(windows, store, self.initializer, self.aggregator, self.merger,
                                               forward, **options)
        if isinstance(windows, SlidingWindows):
            return SlidingWindowAggregateLogic(windows, store, self.initializer, self.aggregator, forward, **options)
        return TimeWindowAggregateLogic(windows, store, self.initializer, self.aggregator, forward, **options)

    def stage(self, down: Stage, failed: Callable[[], None]) -> Stage:
        context = self.context
        headers_of: list = [()]
        # Kafka's session aggregation forwards an update as a new Record, without headers; its
        # final results (on window close) and every other windowed aggregation's forwards keep
        # the headers of the record being processed
        keep_headers = self.on_close or not isinstance(self.windows, SessionWindows)

        def forward(windowed: Any, new: Any, old: Any, timestamp: int) -> None:
            down(windowed, _new_tuple(Change, (new, old)), timestamp, headers_of[0])

        logic = self.logic(forward if self.forward_on_update else None)
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
                if keep_headers:
                    headers_of[0] = headers
                process(key, value, timestamp, topic=topic, partition=partition, offset=offset)
            except BaseException:
                failed()
                raise

        counting = getattr(logic, "counting_run", None)
        run = counting() if counting is not None else None
        if run is not None:
            window_aggregate.key_bytes_run = (  # type: ignore[attr-defined]
                logic.updates.key_serde, marking_failures(run, failed))
        return window_aggregate
