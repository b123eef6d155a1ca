"""The operator-independent part of windowed aggregations (Kafka's KStreamWindowAggregate and
KStreamSessionWindowAggregate): which windows a record updates, what is stored, what is
forwarded with which timestamp, which records are too late, and when a window's final result is
emitted under `EmitStrategy.on_window_close()`.

An operator owns one instance per task, hands it the task's typed store, and calls
`process(key, value, timestamp, ...)` per record. Results go to
`forward(windowed_key, new_value, old_value, timestamp)`; with caching the operator passes a
no-op there and forwards from the cache's flush listener instead (Kafka's tuple forwarder).
`old_value` is filled only with `send_old_values`, as Kafka.

Stream time here is the processor's observed stream time (the largest record timestamp it has
seen), as Kafka's processors keep it.
"""

from __future__ import annotations

from typing import Any, Callable, Optional

from state.timestamped import ValueAndTimestamp
from state.window import MAX_TIMESTAMP, Window, Windowed
from streams.dsl.windows import EmitStrategy, LateRecordReporter, SessionWindows, SlidingWindows, TimeWindows

__all__ = ["TimeWindowAggregateLogic", "SessionWindowAggregateLogic", "SlidingWindowAggregateLogic"]

NO_TIMESTAMP = -1
Forward = Callable[[Windowed, Any, Any, int], None]


class _EmitThrottle:
    """Kafka's emit interval for on_window_close (internal config, 1000 ms in an App, 0 in tests):
    at most one final-results scan per interval of wall clock."""

    def __init__(self, interval_ms: int, clock: Optional[Callable[[], int]]) -> None:
        self.interval_ms = interval_ms
        self.clock = clock
        self.next_time_to_emit = 0

    def ready(self) -> bool:
        if self.interval_ms <= 0 or self.clock is None:
            return True
        now = self.clock()
        if now < self.next_time_to_emit:
            return False
        self.next_time_to_emit = now + self.interval_ms
        return True


def _store_retention(store: Any) -> Optional[int]:
    inner = store.inner_most() if hasattr(store, "inner_most") else store
    return getattr(inner, "retention_ms", None)


class TimeWindowAggregateLogic:
    """Tumbling and hopping window aggregation over a typed window store of ValueAndTimestamp."""

    def __init__(self, windows: TimeWindows, store: Any, initializer: Callable[[], Any],
                 aggregator: Callable[[Any, Any, Any], Any], forward: Forward, *,
                 late: LateRecordReporter, send_old_values: bool = False,
                 emit_strategy: Optional[EmitStrategy] = None, emit_interval_ms: int = 0,
                 wall_clock: Optional[Callable[[], int]] = None,
                 last_emit_window_close_time: int = NO_TIMESTAMP) -> None:
        self.windows = windows
        self.store = store
        self.initializer = initializer
        self.aggregator = aggregator
        self.forward = forward
        self.late = late
        self.send_old_values = send_old_values
        self.emit_on_close = emit_strategy is not None and emit_strategy.emits_on_close
        self.throttle = _EmitThrottle(emit_interval_ms, wall_clock)
        self._retention = _store_retention(store)
        self.observed_stream_time = NO_TIMESTAMP
        # Kafka keeps this in the task's processor metadata (committed with the offsets), so a
        # restarted task does not emit a final result twice; the operator persists and restores it.
        self.last_emit_window_close_time = last_emit_window_close_time

    def process(self, key: Any, value: Any, timestamp: int, *, topic: str = "", partition: int = -1,
                offset: int = -1) -> None:
        """Aggregate one record (a None key is the caller's to drop and count, as Kafka)."""
        if timestamp > self.observed_stream_time:
            self.observed_stream_time = timestamp
        close_time = self.observed_stream_time - self.windows.grace_ms
        matched = self.windows.windows_for(timestamp)
        if self.emit_on_close:
            # Before this record's put: the put may move the store's retention past windows that
            # close now (Kafka emits after the put); what is emitted is the same, since a record
            # never updates a closed window. A throttled scan is forced when the put would expire
            # a window not emitted yet.
            retention = self._retention
            last = self.last_emit_window_close_time
            next_lower = 0 if last == NO_TIMESTAMP else max(0, last - self.windows.size_ms) + 1
            force = retention is None or next_lower <= max(matched) - retention
            self.emit_final_results(close_time, force=force)
        store = self.store
        for start, window in matched.items():
            if window.end > close_time:
                old = store.fetch(key, start)
                if old is None:
                    old_agg = self.initializer()
                    new_ts = timestamp
                else:
                    old_agg = old.value
                    new_ts = old.timestamp if old.timestamp > timestamp else timestamp
                new_agg = self.aggregator(key, value, old_agg)
                store.put(key, ValueAndTimestamp(new_agg, new_ts), start, new_ts)
                if not self.emit_on_close:
                    self.forward(Windowed(key, window), new_agg, old_agg if self.send_old_values else None, new_ts)
            else:
                self.late.report(key, timestamp, window, close_time, self.observed_stream_time,
                                 topic, partition, offset)

    def emit_final_results(self, close_time: int, *, force: bool = False) -> int:
        """Forward each window that closed since the last emission (end <= close time), once, with
        its aggregate's timestamp (Kafka's fetchAndEmit). Returns how many were forwarded."""
        last = self.last_emit_window_close_time
        if last != NO_TIMESTAMP and last >= close_time:
            return 0
        if not self.throttle.ready() and not force:
            return 0
        size = self.windows.size_ms
        upper = close_time - size  # starts <= upper: end <= close time
        if upper < 0:
            return 0
        lower = 0 if last == NO_TIMESTAMP else max(0, last - size) + 1
        if upper < lower:
            return 0
        emitted = 0
        with self.store.fetch_all(lower, upper) as it:
            for windowed, vat in it:
                self.forward(windowed, vat.value, None, vat.timestamp)
                emitted += 1
        self.last_emit_window_close_time = close_time
        return emitted


class SessionWindowAggregateLogic:
    """Session window aggregation over a typed session store (Kafka's KStreamSessionWindowAggregate):
    a record merges every session of its key within the inactivity gap; each merged-away session
    is removed and forwarded as a tombstone (timestamp: its end), the merged session is stored and
    forwarded with its end as timestamp."""

    def __init__(self, windows: SessionWindows, store: Any, initializer: Callable[[], Any],
                 aggregator: Callable[[Any, Any, Any], Any], merger: Callable[[Any, Any, Any], Any],
                 forward: Forward, *, late: LateRecordReporter, send_old_values: bool = False,
                 emit_strategy: Optional[EmitStrategy] = None, emit_interval_ms: int = 0,
                 wall_clock: Optional[Callable[[], int]] = None,
                 last_emit_window_close_time: int = NO_TIMESTAMP) -> None:
        self.windows = windows
        self.store = store
        self.initializer = initializer
        self.aggregator = aggregator
        self.merger = merger
        self.forward = forward
        self.late = late
        self.send_old_values = send_old_values
        self.emit_on_close = emit_strategy is not None and emit_strategy.emits_on_close
        self.throttle = _EmitThrottle(emit_interval_ms, wall_clock)
        self._retention = _store_retention(store)
        self.observed_stream_time = NO_TIMESTAMP
        self.last_emit_window_close_time = last_emit_window_close_time

    def process(self, key: Any, value: Any, timestamp: int, *, topic: str = "", partition: int = -1,
                offset: int = -1) -> None:
        if timestamp > self.observed_stream_time:
            self.observed_stream_time = timestamp
        close_time = self.observed_stream_time - self.windows.grace_ms
        gap = self.windows.gap_ms
        closed = None
        if self.emit_on_close:
            # Kafka emits after the put; the closed sessions are collected before it (the put may
            # move the store's retention past them) and the ones this record merges away are
            # left out below, which is what a scan after the put would find.
            last = self.last_emit_window_close_time
            retention = self._retention
            force = retention is None or max(0, last) <= timestamp + gap - retention
            closed = self._closed_sessions(close_time, force)
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
        if end < close_time:  # Kafka: a session is late once its end < stream time - grace
            self.late.report(key, timestamp, merged_window, close_time, self.observed_stream_time,
                             topic, partition, offset)
        else:
            self._update(key, value, agg, merged, merged_window, new_window)
            if closed and merged_window != new_window:
                gone = {session for session, _ in merged}
                closed = [pair for pair in closed if pair[0] not in gone]
        if closed is not None:
            for session, session_agg in closed:
                self.forward(session, session_agg, None, session.window.end)
            self.last_emit_window_close_time = close_time

    def _update(self, key: Any, value: Any, agg: Any, merged: list, merged_window: Window,
                new_window: Window) -> None:
        start, end = merged_window
        if merged_window != new_window:
            for session, session_agg in merged:
                self.store.remove(key, session.window.start, session.window.end)
                if not self.emit_on_close:
                    self.forward(session, None, session_agg if self.send_old_values else None, session.window.end)
        agg = self.aggregator(key, value, agg)
        self.store.put(key, start, end, agg, end)
        if not self.emit_on_close:
            self.forward(Windowed(key, merged_window), agg, None, end)

    def _closed_sessions(self, close_time: int, force: bool) -> Optional[list]:
        """Sessions that ended since the last emission (end < close time; Kafka: ends are
        inclusive, so the bound is close time - 1) in end order, or None when no scan is due."""
        last = self.last_emit_window_close_time
        if last != NO_TIMESTAMP and last >= close_time:
            return None
        if not self.throttle.ready() and not force:
            return None
        upper = close_time - 1
        lower = max(0, last)
        if upper < 0 or upper < lower:
            return None
        closed = []
        with self.store.find_sessions_range(None, None, lower, MAX_TIMESTAMP) as it:
            for session, agg in it:
                if session.window.end <= upper:
                    closed.append((session, agg))
        closed.sort(key=lambda pair: pair[0].window.end)  # Kafka's store is ordered by end time
        return closed


class SlidingWindowAggregateLogic:
    """Sliding window aggregation over a typed window store of ValueAndTimestamp (Kafka's
    KStreamSlidingWindowAggregate, forward-iterator form): each record updates the windows that
    contain it, creates its left window [t - d, t], its right window [t + 1, t + 1 + d] when a
    later record falls in it, and the previous record's right window when this record falls in it.
    Records earlier than d share the window [0, d]. Windows are [start, start + d], ends inclusive;
    a window is closed once its end < stream time - grace."""

    def __init__(self, windows: SlidingWindows, store: Any, initializer: Callable[[], Any],
                 aggregator: Callable[[Any, Any, Any], Any], forward: Forward, *,
                 late: LateRecordReporter, send_old_values: bool = False) -> None:
        self.windows = windows
        self.diff = windows.time_difference_ms
        self.store = store
        self.initializer = initializer
        self.aggregator = aggregator
        self.forward = forward
        self.late = late
        self.send_old_values = send_old_values
        self.observed_stream_time = NO_TIMESTAMP
        self._where: tuple = ("", -1, -1)

    def process(self, key: Any, value: Any, timestamp: int, *, topic: str = "", partition: int = -1,
                offset: int = -1) -> None:
        """Aggregate one record; a None value is dropped and counted here, as Kafka does for
        sliding windows (a None key is the caller's)."""
        self._where = (topic, partition, offset)
        if timestamp > self.observed_stream_time:
            self.observed_stream_time = timestamp
        close_time = self.observed_stream_time - self.windows.grace_ms
        diff = self.diff
        if value is None or timestamp + 1 + diff <= close_time:
            self.late.report(key, timestamp, Window(max(0, timestamp - diff), timestamp), close_time,
                             self.observed_stream_time, topic, partition, offset)
            return
        if timestamp < diff:
            self._process_early(key, value, timestamp, close_time)
        else:
            self._process_in_order(key, value, timestamp, close_time)

    def _existing(self, key: Any, time_from: int, time_to: int) -> list:
        with self.store.fetch_range(key, key, time_from, time_to) as it:
            return list(it)

    def _process_in_order(self, key: Any, value: Any, t: int, close_time: int) -> None:
        diff = self.diff
        starts = set()
        left_agg = right_agg = None
        left_created = right_created = False
        previous = None
        for windowed, vat in self._existing(key, max(0, t - 2 * diff), t + 1):
            start = windowed.window.start
            starts.add(start)
            end = start + diff
            if end < t:
                left_agg = vat
                previous = vat.timestamp
            elif end == t:
                left_created = True
                if vat.timestamp < t:
                    previous = vat.timestamp
                self._update(windowed.window, vat, key, value, close_time, t)
            elif start <= t:  # end > t: a window containing t
                right_agg = vat
                self._update(windowed.window, vat, key, value, close_time, t)
            elif start == t + 1:
                right_created = True
            else:  # pragma: no cover - the fetch bounds exclude it
                raise AssertionError(f"unexpected sliding window start {start} for a record at {t}")
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
        for windowed, vat in self._existing(key, 0, t + 1):
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
            self._update(Window(previous + 1, previous + 1 + diff), ValueAndTimestamp(self.initializer(), t),
                         key, value, close_time, t)
        if combined is None:
            self._update(Window(0, diff), ValueAndTimestamp(self.initializer(), t), key, value, close_time, t)
        else:
            self._update(combined[0].window, combined[1], key, value, close_time, t)

    def _create_windows(self, key: Any, value: Any, t: int, close_time: int, starts: set, right_agg: Any,
                        left_agg: Any, left_created: bool, right_created: bool, previous: Optional[int]) -> None:
        diff = self.diff
        if previous is not None:
            previous_right_start = previous + 1
            if previous_right_start not in starts and previous_right_start + diff >= t:
                self._update(Window(previous_right_start, previous_right_start + diff),
                             ValueAndTimestamp(self.initializer(), t), key, value, close_time, t)
        if not left_created:
            if previous is not None and t - diff <= previous:  # the left window holds the previous record
                initial = ValueAndTimestamp(left_agg.value, t)
            else:
                initial = ValueAndTimestamp(self.initializer(), t)
            self._update(Window(t - diff, t), initial, key, value, close_time, t)
        if not right_created and right_agg is not None and right_agg.timestamp > t:
            self._create_right_window(key, t, right_agg)

    def _create_right_window(self, key: Any, t: int, right_agg: ValueAndTimestamp) -> None:
        window = Window(t + 1, t + 1 + self.diff)
        self.store.put(key, right_agg, window.start, right_agg.timestamp)
        self.forward(Windowed(key, window), right_agg.value, None, right_agg.timestamp)

    def _update(self, window: Window, vat: Optional[ValueAndTimestamp], key: Any, value: Any,
                close_time: int, t: int) -> None:
        if window.end >= close_time:
            old_agg = None if vat is None else vat.value
            new_agg = self.aggregator(key, value, old_agg)
            new_ts = t if old_agg is None else max(t, vat.timestamp)
            self.store.put(key, ValueAndTimestamp(new_agg, new_ts), window.start, new_ts)
            self.forward(Windowed(key, window), new_agg, old_agg if self.send_old_values else None, new_ts)
        else:
            topic, partition, offset = self._where
            self.late.report(key, t, window, close_time, self.observed_stream_time, topic, partition, offset)
