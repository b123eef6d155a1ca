"""The operator-independent part of windowed aggregations (Kafka's KStreamWindowAggregate,
KStreamSlidingWindowAggregate and KStreamSessionWindowAggregate): which windows a record updates,
what is stored, what is forwarded with which timestamp, which records are too late, and when a
window's final result is emitted under `EmitStrategy.on_window_close()`.

An operator owns one instance per task, hands it the task's typed store, and calls
`process(key, value, timestamp, ...)` per record. Results go to
`forward(windowed_key, new_value, old_value, timestamp)`.
`old_value` is filled only with `send_old_values`, as Kafka. With caching the operator passes
`forward=None`: updates are then forwarded by the cache's flush listener (Kafka's tuple
forwarder), which lets a count work at the bytes level (`TimeWindowAggregateLogic.counting_run`).

Stream time here is the processor's observed stream time (the largest record timestamp it has
seen), as Kafka's processors keep it. A window closes once stream time passes its end by the
close delay (streams.dsl.windows.window_close_delay_ms: the grace, plus the gap for sessions).

Under on_window_close the close time of the last emission is what keeps a final result from
being emitted twice: the operator hands the one it recovered in `last_emit_window_close_time`
and is told each new one through `on_final_results_emitted` (Kafka keeps it in the task's
processor metadata, committed with the input offsets).
"""

from __future__ import annotations

import logging
from typing import Any, Callable, Optional

from state.timestamped import TIMESTAMPED_INT64, ValueAndTimestamp, ValueAndTimestampSerde
from state.window import Window, Windowed
from streams import serdes as _serdes
from streams.dsl.windows import (EmitStrategy, EmitThrottle, LateRecordReporter, SessionWindows, SlidingWindows,
                                 TimeWindows, window_close_delay_ms)

__all__ = ["WindowAggregateLogic", "TimeWindowAggregateLogic", "SessionWindowAggregateLogic",
           "SlidingWindowAggregateLogic", "WindowUpdates", "NO_TIMESTAMP"]

log = logging.getLogger(__name__)
# a flushed window's Windowed without NamedTuple's Python-level __new__ (WindowUpdates.flushed)
_new_tuple = tuple.__new__

NO_TIMESTAMP = -1
Forward = Callable[[Windowed, Any, Any, int], None]


def _no_forward(windowed: Windowed, new: Any, old: Any, timestamp: int) -> None:
    """The forward of a logic whose updates a caching store forwards (final results never pass here)."""


class WindowUpdates:
    """Read-modify-write of single windows in a typed window store of ValueAndTimestamp.

    `update(key, start, timestamp, fn, *args)` stores `fn(old, timestamp, *args)` (a
    ValueAndTimestamp; one with a None value deletes the window, as Kafka's
    ValueAndTimestamp.make) for the window of `key` starting at `start` and returns (new, old),
    `old` None when the window is absent. Over a caching layer (its `update_many`, also offered
    as `update_many` here for work at the bytes level) that is one pass through the cache;
    otherwise a fetch and a put (`put_aggregate`)."""

    def __init__(self, store: Any) -> None:
        self.store = store
        below = getattr(store, "wrapped", None)
        key_serde, value_serde = getattr(store, "key_serde", None), getattr(store, "value_serde", None)
        many = getattr(below, "update_many", None)
        self.update_many: Optional[Callable[..., Any]] = (
            many if callable(many) and key_serde is not None and value_serde is not None else None)
        self.key_serde, self.value_serde = key_serde, value_serde
        if self.update_many is not None:
            self._key_unchecked = _serdes.unchecked_serializer(key_serde) or key_serde.serialize
            self._serialize, self._deserialize = value_serde.serialize, value_serde.deserialize
            self.update = self._update_bytes
        else:
            self.update = self._update_typed

    def key_bytes(self, key: Any) -> bytes:
        """`key` serialized as the store does it (its key serde's C serializer where it has one;
        on any error the store's own call decides, bytes or its typed error)."""
        try:
            data = self._key_unchecked(key)
        except Exception:
            data = None
        return data if type(data) is bytes else self.store.serdes.key_to_bytes(key)

    def put_aggregate(self, key: Any, start: int, new: ValueAndTimestamp, timestamp: int) -> None:
        """Store a window's new aggregate for a record at `timestamp`: a None value deletes the
        window, with the record's timestamp (Kafka's ValueAndTimestamp.make and record context)."""
        if new.value is None:
            self.store.put(key, None, start, timestamp)
        else:
            self.store.put(key, new, start, new.timestamp)

    def _update_typed(self, key: Any, start: int, timestamp: int, fn: Callable[..., Any], *args: Any) -> tuple:
        old = self.store.fetch(key, start)
        new = fn(old, timestamp, *args)
        self.put_aggregate(key, start, new, timestamp)
        return new, old

    def _update_bytes(self, key: Any, start: int, timestamp: int, fn: Callable[..., Any], *args: Any) -> tuple:
        serialize, deserialize = self._serialize, self._deserialize
        result: list = [None, None]

        def on_bytes(old_bytes: Optional[bytes], t: int) -> tuple:
            old = None if old_bytes is None else deserialize(old_bytes)
            new = fn(old, t, *args)
            result[0], result[1] = new, old
            # a deleted window's entry keeps the record's timestamp (Kafka's cache entry context)
            return (None, t) if new.value is None else (serialize(new), new.timestamp)
        self.update_many((self.key_bytes(key),), (start,), on_bytes, (timestamp,))
        return result[0], result[1]

    def flushed(self) -> Optional[Callable[[Any, Optional[bytes], Optional[bytes]], tuple]]:
        """`decode(windowed, new_bytes, old_bytes) -> (typed Windowed, new value, old value)`, for
        what the caching layer hands its flush listener (plain values, their timestamps dropped);
        None for a store without serdes."""
        key_serde, value_serde = self.key_serde, self.value_serde
        if key_serde is None or value_serde is None:
            return None
        key_unchecked = _serdes.unchecked_deserializer(key_serde)
        key_de = key_serde.deserialize
        if isinstance(value_serde, ValueAndTimestampSerde) and value_serde.inner is _serdes.INT64:
            unpack = TIMESTAMPED_INT64.unpack

            def value_of(data: Optional[bytes]) -> Any:
                if data is None:
                    return None
                try:
                    return unpack(data)[1]
                except Exception:  # an odd size: the serde decides
                    return value_serde.deserialize(data).value
        else:
            def value_of(data: Optional[bytes]) -> Any:
                return None if data is None else value_serde.deserialize(data).value

        def decode(windowed: Any, new: Optional[bytes], old: Optional[bytes]) -> tuple:
            key = windowed.key
            try:
                key = key_unchecked(key) if key_unchecked is not None else key_de(key)
            except Exception:
                key = key_de(key)
            return _new_tuple(Windowed, (key, windowed.window)), value_of(new), value_of(old)
        return decode

    def counting(self, initializer: Callable[[], Any], adder: Callable[..., Any]) -> Optional[Callable[..., tuple]]:
        """The bytes form of `_aggregate` (the typed rule of TimeWindowAggregateLogic) for a count:
        when the adder adds a constant (`constant_increment`) and the store holds timestamped
        INT64, `fn(old_bytes, timestamp) -> (new_bytes, timestamp)` does at the bytes level what
        the typed rule does; None otherwise. Any odd value goes through the typed rule."""
        increment = getattr(adder, "constant_increment", None)
        serde = self.value_serde
        if (increment is None or self.update_many is None or not isinstance(serde, ValueAndTimestampSerde)
                or serde.inner is not _serdes.INT64):
            return None
        pack, unpack = TIMESTAMPED_INT64.pack, TIMESTAMPED_INT64.unpack
        serialize, deserialize = serde.serialize, serde.deserialize

        def count(old: Optional[bytes], t: int) -> tuple:
            try:
                if old is None:
                    return pack(t, initializer() + increment), t
                old_t, old_count = unpack(old)
                new_t = old_t if old_t > t else t
                return pack(new_t, old_count + increment), new_t
            except Exception:  # an odd size or an overflow: the serdes decide
                vat = None if old is None else deserialize(old)
                new = ValueAndTimestamp((initializer() if vat is None else vat.value) + increment,
                                        t if vat is None else max(t, vat.timestamp))
                return serialize(new), new.timestamp
        # what the caching store's update_many needs to do a cached window's hot case itself
        count.int64_increment = increment == 1  # type: ignore[attr-defined]
        count.timestamped = True  # type: ignore[attr-defined]
        return count


class WindowAggregateLogic:
    """What the three windowed aggregations share (Kafka's AbstractKStreamTimeWindowAggregateProcessor):
    their parts, the observed stream time and its close time, and the bookkeeping of final
    results under on_window_close (the emit interval, the close time of the last emission).
    Subclasses say which stored windows a close time makes final (`_emit_bounds`)."""

    def __init__(self, windows: Any, store: Any, initializer: Callable[[], Any],
                 aggregator: Callable[[Any, Any, Any], Any], forward: Forward, *,
                 late: LateRecordReporter, send_old_values: bool = False,
                 emit_strategy: Optional[EmitStrategy] = None, emit_interval_ms: int = 0,
                 wall_clock: Optional[Callable[[], int]] = None,
                 last_emit_window_close_time: int = NO_TIMESTAMP,
                 on_final_results_emitted: Optional[Callable[[int], None]] = None) -> None:
        self.windows = windows
        self.store = store
        self.initializer = initializer
        self.aggregator = aggregator
        # None: updates are not forwarded here (a caching store forwards them when it flushes)
        self.forwards_updates = forward is not None
        self.forward = forward if forward is not None else _no_forward
        self.late = late
        self.send_old_values = send_old_values
        self.emit_on_close = emit_strategy is not None and emit_strategy.emits_on_close
        self.throttle = EmitThrottle(emit_interval_ms, wall_clock)
        self.close_delay_ms = window_close_delay_ms(windows)
        self.observed_stream_time = NO_TIMESTAMP
        self.last_emit_window_close_time = last_emit_window_close_time
        self.on_final_results_emitted = on_final_results_emitted
        self.initial: Any = None  # the initializer's value of the last new window

    def _close_time(self, timestamp: int) -> int:
        """Observe `timestamp`; the close time: windows ending at or before it are closed."""
        if timestamp > self.observed_stream_time:
            self.observed_stream_time = timestamp
        return self.observed_stream_time - self.close_delay_ms

    def _emit_bounds(self, close_time: int, last: int) -> Optional[tuple[int, int]]:
        """The inclusive range of stored windows (by start; sessions: by end) that `close_time`
        makes final beyond what `last` did, or None when there is none to fetch."""
        raise NotImplementedError

    def _due(self, close_time: int) -> Optional[tuple[int, int]]:
        """Whether final results are due now (Kafka's shouldEmitFinal: the emit interval first,
        then a close time past the last emission's) and which stored windows they are."""
        if not self.emit_on_close or not self.throttle.ready():
            return None
        last = self.last_emit_window_close_time
        if last != NO_TIMESTAMP and last >= close_time:
            return None
        return self._emit_bounds(close_time, last)

    def _maybe_forward_final_results(self, close_time: int) -> None:
        """Kafka's maybeForwardFinalResult, after a record's puts: the windows that `close_time`
        closed since the last emission, from the store as it is now (with the cache, if any), in
        its order. A window the store no longer returns (past its retention) is never emitted."""
        bounds = self._due(close_time)
        if bounds is not None:
            self._forward_final_windows(close_time, bounds)

    def _emitted(self, close_time: int) -> None:
        self.last_emit_window_close_time = close_time
        if self.on_final_results_emitted is not None:
            self.on_final_results_emitted(close_time)

    def _forward_final_windows(self, close_time: int, bounds: tuple[int, int]) -> int:
        """Forward each stored window of `bounds` (Kafka's fetchAndEmit), and record the
        emission; how many were forwarded."""
        emitted = 0
        forward, final_result = self.forward, self._final_result
        with self._final_windows(bounds) as it:
            for windowed, stored in it:
                value, timestamp = final_result(windowed, stored)
                forward(windowed, value, None, timestamp)
                emitted += 1
        self._emitted(close_time)
        return emitted

    def _final_windows(self, bounds: tuple[int, int]) -> Any:
        """The stored windows starting within `bounds` (a store iterator)."""
        return self.store.fetch_all(bounds[0], bounds[1])

    def _final_result(self, windowed: Windowed, vat: ValueAndTimestamp) -> tuple:
        """(value, timestamp) of a final result: the aggregate with its timestamp."""
        return vat.value, vat.timestamp

    def _aggregate(self, old: Optional[ValueAndTimestamp], timestamp: int, key: Any, value: Any) -> ValueAndTimestamp:
        """Kafka's rule for a window's new aggregate: the aggregator over the old aggregate (the
        initializer's for a new window, kept in `initial` as the old value to forward), stamped
        with the largest record timestamp it holds (KIP-258). A None aggregate deletes the window."""
        if old is None:
            initial = self.initial = self.initializer()
            return ValueAndTimestamp(self.aggregator(key, value, initial), timestamp)
        return ValueAndTimestamp(self.aggregator(key, value, old.value),
                                 old.timestamp if old.timestamp > timestamp else timestamp)


class TimeWindowAggregateLogic(WindowAggregateLogic):
    """Tumbling and hopping window aggregation over a typed window store of ValueAndTimestamp."""

    def __init__(self, windows: TimeWindows, store: Any, initializer: Callable[[], Any],
                 aggregator: Callable[[Any, Any, Any], Any], forward: Forward, **options: Any) -> None:
        super().__init__(windows, store, initializer, aggregator, forward, **options)
        self.updates = WindowUpdates(store)
        # a count whose updates the cache forwards: done at the bytes level
        self._count = (self.updates.counting(initializer, aggregator)
                       if not self.forwards_updates and not self.emit_on_close else None)

    def process(self, key: Any, value: Any, timestamp: int, *, topic: str = "", partition: int = -1,
                offset: int = -1) -> None:
        """Aggregate one record (a None key is the caller's to drop and count, as Kafka)."""
        close_time = self._close_time(timestamp)
        bounds = self.windows.window_bounds(timestamp)
        count = self._count
        if count is not None:
            key_bytes, update_many = self.updates.key_bytes(key), self.updates.update_many
        update, forward, send_old, aggregate = self.updates.update, self.forward, self.send_old_values, self._aggregate
        forwarding = self.forwards_updates and not self.emit_on_close
        for start, end in bounds:
            if end > close_time:
                if count is not None:
                    update_many((key_bytes,), (start,), count, (timestamp,))
                    continue
                new, old = update(key, start, timestamp, aggregate, key, value)
                if forwarding:  # a new window's old value is the initializer's (Kafka)
                    forward(Windowed(key, Window(start, end)), new.value,
                            (self.initial if old is None else old.value) if send_old else None, new.timestamp)
            else:
                self.late.report(key, timestamp, Window(start, end), close_time, self.observed_stream_time,
                                 topic, partition, offset)
        if self.emit_on_close:
            self._maybe_forward_final_results(close_time)

    def counting_run(self) -> Optional[Callable[[list, list, Any, list], None]]:
        """For a count whose updates a caching store forwards (`forward=None`): `run(keys,
        timestamps, clock, messages)` is `process` for each serialized key and timestamp in
        order, messages[i] the key's consumed message (its record context; values play no part
        in a count), the store updated by one `update_many`; None when that does not apply. A
        late record is reported with its key deserialized."""
        count = self._count
        if count is None:
            return None
        update_many = self.updates.update_many
        key_of = self.updates.key_serde.deserialize
        bounds_of = self.windows.window_bounds

        def run(keys: list, timestamps: list, clock: Any, messages: list) -> None:
            run_keys, run_starts, run_times, run_messages = [], [], [], []
            observed = self.observed_stream_time
            delay = self.close_delay_ms
            for i in range(len(keys)):
                t = timestamps[i]
                if t > observed:
                    observed = self.observed_stream_time = t
                close_time = observed - delay
                for start, end in bounds_of(t):
                    if end > close_time:
                        run_keys.append(keys[i])
                        run_starts.append(start)
                        run_times.append(t)
                        run_messages.append(messages[i])
                    else:
                        message = messages[i]
                        self.late.report(key_of(keys[i]), t, Window(start, end), close_time, observed,
                                         message.topic(), message.partition(), message.offset())
            update_many(run_keys, run_starts, count, run_times, clock, run_messages)
        return run

    def _emit_bounds(self, close_time: int, last: int) -> Optional[tuple[int, int]]:
        size = self.windows.size_ms
        upper = close_time - size  # starts <= upper: end <= close time
        if upper < 0:
            return None
        lower = 0 if last == NO_TIMESTAMP else max(0, last - size) + 1
        # Kafka's shouldRangeFetch: no window starts in (lower - 1, upper]: nothing new (the
        # last emission's close time is then kept)
        if last != NO_TIMESTAMP and self.windows.window_bounds(upper) == self.windows.window_bounds(lower - 1):
            return None
        return lower, upper


class SessionWindowAggregateLogic(WindowAggregateLogic):
    """Session window aggregation over a typed session store (Kafka's KStreamSessionWindowAggregate):
    a record merges every session of its key within the inactivity gap; each merged-away session
    is removed and forwarded as a tombstone (timestamp: its end), the merged session is stored and
    forwarded with its end as timestamp. A session is late once its end < stream time - grace -
    gap (KAFKA-12718)."""

    def __init__(self, windows: SessionWindows, store: Any, initializer: Callable[[], Any],
                 aggregator: Callable[[Any, Any, Any], Any], merger: Callable[[Any, Any, Any], Any],
                 forward: Forward, **options: Any) -> None:
        super().__init__(windows, store, initializer, aggregator, forward, **options)
        self.merger = merger

    def process(self, key: Any, value: Any, timestamp: int, *, topic: str = "", partition: int = -1,
                offset: int = -1) -> None:
        close_time = self._close_time(timestamp)
        gap = self.windows.gap_ms
        new_window = Window(timestamp, timestamp)
        start, end = timestamp, timestamp
        agg = self.initializer()
        merged = []
        with self.store.find_sessions(key, max(0, timestamp - gap), timestamp + gap) as it:
            for session, session_agg in it:
                merged.append((session, session_agg))
                agg = self.merger(key, agg, session_agg)
                if session.window.start < start:
                    start = session.window.start
                if session.window.end > end:
                    end = session.window.end
        merged_window = Window(start, end)
        if end < close_time:
            self.late.report(key, timestamp, merged_window, close_time, self.observed_stream_time,
                             topic, partition, offset)
        else:
            self._update(key, value, timestamp, agg, merged, merged_window, new_window)
        if self.emit_on_close:
            self._maybe_forward_final_results(close_time)

    def _update(self, key: Any, value: Any, timestamp: int, agg: Any, merged: list, merged_window: Window,
                new_window: Window) -> None:
        # the store's writes carry the record's timestamp (their changelog records' and cache
        # entries', as Kafka's context.timestamp()); forwards carry the session's end
        start, end = merged_window
        if merged_window != new_window:
            for session, session_agg in merged:
                self.store.remove(key, session.window.start, session.window.end, timestamp)
                if not self.emit_on_close:
                    self.forward(session, None, session_agg if self.send_old_values else None, session.window.end)
        agg = self.aggregator(key, value, agg)
        self.store.put(key, start, end, agg, timestamp)
        if not self.emit_on_close:
            self.forward(Windowed(key, merged_window), agg, None, end)

    def _emit_bounds(self, close_time: int, last: int) -> Optional[tuple[int, int]]:
        upper = close_time - 1  # session ends are inclusive: end < close time
        lower = max(0, last)
        return None if upper < 0 or upper < lower else (lower, upper)

    def _final_windows(self, bounds: tuple[int, int]) -> Any:
        # Kafka's time-ordered session store: by end, then start, then key; none held back by
        # the retention
        return self.store.fetch_ended_sessions(bounds[0], bounds[1])

    def _final_result(self, session: Windowed, agg: Any) -> tuple:
        return agg, session.window.end


class SlidingWindowAggregateLogic(WindowAggregateLogic):
    """Sliding window aggregation over a typed window store of ValueAndTimestamp (Kafka's
    KStreamSlidingWindowAggregate, reverse-iterator form, as over RocksDB): each record updates
    the windows that contain it, creates its left window [t - d, t], its right window
    [t + 1, t + 1 + d] when a later record falls in it, and the previous record's right window
    when this record falls in it.
    Records earlier than d share the window [0, d]. Windows are [start, start + d], ends inclusive;
    a window is closed once its end < stream time - grace."""

    def __init__(self, windows: SlidingWindows, store: Any, initializer: Callable[[], Any],
                 aggregator: Callable[[Any, Any, Any], Any], forward: Forward, **options: Any) -> None:
        super().__init__(windows, store, initializer, aggregator, forward, **options)
        self.updates = WindowUpdates(store)
        self.diff = windows.time_difference_ms
        self._where: tuple = ("", -1, -1)

    def process(self, key: Any, value: Any, timestamp: int, *, topic: str = "", partition: int = -1,
                offset: int = -1) -> None:
        """Aggregate one record; a None value is dropped and counted here, before it is observed
        in the stream time, as Kafka does for sliding windows (a None key is the caller's)."""
        if value is None:
            self.late.sensor.count += 1
            log.warning("sliding windowed aggregation: skipping a record with a None value. topic=[%s] "
                        "partition=[%d] offset=[%d]", topic, partition, offset)
            return
        self._where = (topic, partition, offset)
        close_time = self._close_time(timestamp)
        diff = self.diff
        if timestamp + diff < close_time:
            self.late.report(key, timestamp, Window(timestamp, timestamp + diff), close_time,
                             self.observed_stream_time, topic, partition, offset)
            return
        if timestamp < diff:  # Kafka emits no final results after an early record
            self._process_early(key, value, timestamp, close_time)
            return
        self._process_reverse(key, value, timestamp, close_time)
        if self.emit_on_close:
            self._maybe_forward_final_results(close_time)

    def _emit_bounds(self, close_time: int, last: int) -> Optional[tuple[int, int]]:
        upper = close_time - self.diff - 1  # ends are inclusive: start + d < close time
        if upper < 0:
            return None
        return (0 if last == NO_TIMESTAMP else max(0, last - self.diff)), upper

    def _existing(self, key: Any, time_from: int, time_to: int, reverse: bool = False) -> Any:
        """The key's windows in [time_from, time_to], an iterator to use in a `with` block and
        write through while it is open, as Kafka does: a cached store reads each cached window
        when the iteration reaches it (state.cache.range_reads), so what was written before
        decides the cache's LRU order, and windows not reached are not read."""
        fetch = self.store.backward_fetch_range if reverse else self.store.fetch_range
        return fetch(key, key, time_from, time_to)

    def _process_reverse(self, key: Any, value: Any, t: int, close_time: int) -> None:
        """Kafka's processReverse: the key's windows from the latest start down, updating those
        that contain t, until the first that ends before t (whose aggregate seeds t's left window);
        then the windows t lacks are created. Nothing is created when t's left window exists and
        already holds a record at t or later."""
        diff = self.diff
        starts = set()
        left_agg = right_agg = None
        left_created = right_created = False
        previous = None
        with self._existing(key, max(0, t - 2 * diff), t + 1, reverse=True) as windows:
            for windowed, vat in windows:
                start = windowed.window.start
                starts.add(start)
                end = start + diff
                if start == t + 1:
                    right_created = True
                elif end > t:  # a window containing t; the first one met (latest start) seeds t's right window
                    if right_agg is None:
                        right_agg = vat
                    self._update(windowed.window, vat, key, value, close_time, t)
                elif end == t:
                    left_created = True
                    self._update(windowed.window, vat, key, value, close_time, t)
                    if vat.timestamp >= t:
                        return
                    previous = vat.timestamp
                else:
                    left_agg = vat
                    previous = vat.timestamp
                    break
        self._create_windows(key, value, t, close_time, starts, right_agg, left_agg, left_created,
                             right_created, previous)

    def _process_early(self, key: Any, value: Any, t: int, close_time: int) -> None:
        """0 <= t < d: the record goes into [0, d] (no negative starts), as Kafka's processEarly."""
        diff = self.diff
        combined = None
        right_agg = None
        right_created = False
        starts = set()
        previous = None
        with self._existing(key, 0, t + 1) as windows:
            for windowed, vat in windows:
                start = windowed.window.start
                starts.add(start)
                if start == 0:
                    combined = (windowed, vat)
                    if vat.timestamp < t:
                        previous = vat.timestamp
                elif start <= t:
                    right_agg = vat
                    self._update(windowed.window, vat, key, value, close_time, t)
                elif start == t + 1:
                    right_created = True
                else:  # pragma: no cover - the fetch bounds exclude it
                    raise AssertionError(f"unexpected sliding window start {start} for a record at {t}")
        if right_agg is None and combined is not None and combined[1].timestamp > t:
            right_agg = combined[1]
        if not right_created and right_agg is not None and right_agg.timestamp > t:
            self._create_right_window(key, t, right_agg)
        if previous is not None and previous + 1 not in starts:
            self._update(Window(previous + 1, previous + 1 + diff), ValueAndTimestamp.make(self.initializer(), t),
                         key, value, close_time, t)
        if combined is None:
            self._update(Window(0, diff), ValueAndTimestamp.make(self.initializer(), t), key, value, close_time, t)
        else:
            self._update(combined[0].window, combined[1], key, value, close_time, t)

    def _create_windows(self, key: Any, value: Any, t: int, close_time: int, starts: set, right_agg: Any,
                        left_agg: Any, left_created: bool, right_created: bool, previous: Optional[int]) -> None:
        diff = self.diff
        if previous is not None:
            previous_right_start = previous + 1
            if previous_right_start not in starts and previous_right_start + diff >= t:
                self._update(Window(previous_right_start, previous_right_start + diff),
                             ValueAndTimestamp.make(self.initializer(), t), key, value, close_time, t)
        if not left_created:
            if previous is not None and t - diff <= previous:  # the left window holds the previous record
                initial = ValueAndTimestamp.make(left_agg.value, t)
            else:
                initial = ValueAndTimestamp.make(self.initializer(), t)
            self._update(Window(t - diff, t), initial, key, value, close_time, t)
        if not right_created and right_agg is not None and right_agg.timestamp > t:
            self._create_right_window(key, t, right_agg)

    def _create_right_window(self, key: Any, t: int, right_agg: ValueAndTimestamp) -> None:
        window = Window(t + 1, t + 1 + self.diff)
        self.store.put(key, right_agg, window.start, right_agg.timestamp)
        if not self.emit_on_close:
            self.forward(Windowed(key, window), right_agg.value, None, right_agg.timestamp)

    def _update(self, window: Window, vat: Optional[ValueAndTimestamp], key: Any, value: Any,
                close_time: int, t: int) -> None:
        """Kafka's updateWindowAndForward: `vat` is the window's aggregate so far (None: empty)."""
        if window.end >= close_time:
            new = self._aggregate(vat, t, key, value)
            self.updates.put_aggregate(key, window.start, new, t)
            if not self.emit_on_close:
                self.forward(Windowed(key, window), new.value,
                             (None if vat is None else vat.value) if self.send_old_values else None, new.timestamp)
        else:
            topic, partition, offset = self._where
            self.late.report(key, t, window, close_time, self.observed_stream_time, topic, partition, offset)
