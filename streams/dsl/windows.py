"""Window specifications of the DSL (Kafka's TimeWindows, SlidingWindows, SessionWindows,
JoinWindows and EmitStrategy) and the Window / Windowed value types.

Durations are an `int` (milliseconds) or a `datetime.timedelta`. Invalid arguments raise
`InvalidWindowsError` naming the argument, with Kafka's rule in the message. The specs are
immutable values: every builder method returns a new one.

Window boundaries (Kafka's): tumbling and hopping windows are [start, end); sliding windows span
[start, start + time difference] with both ends inclusive; session windows [first, last] inclusive.
`Window` and `Windowed` are defined once, in state/window.py (the stores yield them), and
re-exported here.
"""

from __future__ import annotations

import datetime
from typing import Any, Callable, Optional

from state.window import Window, Windowed
from streams.errors import TopologyError

__all__ = [
    "InvalidWindowsError", "TimeWindows", "SlidingWindows", "SessionWindows", "JoinWindows",
    "EmitStrategy", "Window", "Windowed", "duration_ms", "LateRecordReporter", "window_closed", "EmitThrottle",
    "window_close_delay_ms",
]

MAX_TIME_MS = (1 << 63) - 1


class InvalidWindowsError(TopologyError, ValueError):
    """A window specification with an invalid argument (Kafka's IllegalArgumentException)."""


def duration_ms(value: Any, what: str) -> int:
    """`value` (int milliseconds or timedelta) as int milliseconds; a typed error names `what`."""
    if isinstance(value, datetime.timedelta):
        # timedelta keeps microseconds; Kafka's Duration.toMillis truncates toward zero likewise
        return (value.days * 86_400_000) + (value.seconds * 1000) + int(value.microseconds / 1000)
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidWindowsError(
            f"{what} must be an int (milliseconds) or a datetime.timedelta, got {type(value).__name__} {value!r}"
        )
    return value


def _non_negative(value: Any, what: str, message: str) -> int:
    ms = duration_ms(value, what)
    if ms < 0:
        raise InvalidWindowsError(f"{message} ({what}={ms} ms)")
    return ms


class _Spec:
    """Value semantics for the immutable window specs."""

    __slots__ = ()

    def _fields(self) -> tuple:
        return tuple(getattr(self, name) for name in self.__slots__)

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self) and other._fields() == self._fields()

    def __hash__(self) -> int:
        return hash((type(self).__name__, self._fields()))

    def __repr__(self) -> str:
        args = ", ".join(f"{name}={getattr(self, name)!r}" for name in self.__slots__)
        return f"{type(self).__name__}({args})"

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"{type(self).__name__} is immutable; use its builder methods")

    def _init(self, **fields: Any) -> None:
        for name, value in fields.items():
            object.__setattr__(self, name, value)


class TimeWindows(_Spec):
    """Fixed-size windows: tumbling (advance == size) or hopping (advance < size), [start, end)."""

    __slots__ = ("size_ms", "advance_ms", "grace_ms")

    def __init__(self, size_ms: int, advance_ms: int, grace_ms: int) -> None:
        self._init(size_ms=size_ms, advance_ms=advance_ms, grace_ms=grace_ms)

    @classmethod
    def of_size_with_no_grace(cls, size: Any) -> "TimeWindows":
        return cls.of_size_and_grace(size, 0)

    @classmethod
    def of_size_and_grace(cls, size: Any, grace: Any) -> "TimeWindows":
        size_ms = duration_ms(size, "size")
        if size_ms <= 0:
            raise InvalidWindowsError(f"Window size (size) must be larger than zero, got {size_ms} ms")
        grace_ms = _non_negative(grace, "grace", "Grace period must not be negative")
        return cls(size_ms, size_ms, grace_ms)

    def advance_by(self, advance: Any) -> "TimeWindows":
        """Hopping windows that start every `advance` (0 < advance <= size)."""
        advance_ms = duration_ms(advance, "advance")
        if advance_ms <= 0 or advance_ms > self.size_ms:
            raise InvalidWindowsError(
                "Window advancement interval (advance) should be more than zero and less than window "
                f"duration which is {self.size_ms} ms, but given advancement interval is: {advance_ms} ms"
            )
        return TimeWindows(self.size_ms, advance_ms, self.grace_ms)

    def size(self) -> int:
        return self.size_ms

    def grace_period_ms(self) -> int:
        return self.grace_ms

    @property
    def is_tumbling(self) -> bool:
        return self.advance_ms == self.size_ms

    def windows_for(self, timestamp: int) -> dict[int, Window]:
        """The windows a record at `timestamp` belongs to, by start (Kafka's TimeWindows.windowsFor):
        every window [start, start + size) with start a multiple of advance and
        timestamp - size < start <= timestamp, start >= 0."""
        return {start: Window(start, end) for start, end in self.window_bounds(timestamp)}

    def window_bounds(self, timestamp: int) -> list[tuple[int, int]]:
        """`windows_for(timestamp)` as (start, end) pairs in start order (the per-record form)."""
        size, advance = self.size_ms, self.advance_ms
        if advance == size and timestamp >= 0:  # tumbling: one window
            start = timestamp - timestamp % size
            end = start + size
            return [(start, end if end <= MAX_TIME_MS else MAX_TIME_MS)]
        start = max(0, timestamp - size + advance) // advance * advance
        bounds = []
        while start <= timestamp:
            end = start + size
            bounds.append((start, end if end <= MAX_TIME_MS else MAX_TIME_MS))
            start += advance
        return bounds


class SlidingWindows(_Spec):
    """Windows of a fixed time difference that slide with each record; [start, start + diff] inclusive."""

    __slots__ = ("time_difference_ms", "grace_ms")

    def __init__(self, time_difference_ms: int, grace_ms: int) -> None:
        self._init(time_difference_ms=time_difference_ms, grace_ms=grace_ms)

    @classmethod
    def of_time_difference_with_no_grace(cls, time_difference: Any) -> "SlidingWindows":
        return cls.of_time_difference_and_grace(time_difference, 0)

    @classmethod
    def of_time_difference_and_grace(cls, time_difference: Any, grace: Any) -> "SlidingWindows":
        diff = _non_negative(time_difference, "time_difference", "Window time difference must not be negative")
        grace_ms = _non_negative(grace, "grace", "Window grace period must not be negative")
        return cls(diff, grace_ms)

    def size(self) -> int:
        return self.time_difference_ms

    def grace_period_ms(self) -> int:
        return self.grace_ms


class SessionWindows(_Spec):
    """Sessions of activity separated by an inactivity gap; [first, last] inclusive."""

    __slots__ = ("gap_ms", "grace_ms")

    def __init__(self, gap_ms: int, grace_ms: int) -> None:
        self._init(gap_ms=gap_ms, grace_ms=grace_ms)

    @classmethod
    def of_inactivity_gap_with_no_grace(cls, gap: Any) -> "SessionWindows":
        return cls.of_inactivity_gap_and_grace(gap, 0)

    @classmethod
    def of_inactivity_gap_and_grace(cls, gap: Any, grace: Any) -> "SessionWindows":
        gap_ms = duration_ms(gap, "gap")
        if gap_ms <= 0:
            raise InvalidWindowsError(f"Gap time (gap) cannot be zero or negative, got {gap_ms} ms")
        grace_ms = _non_negative(grace, "grace", "Grace period must not be negative")
        return cls(gap_ms, grace_ms)

    def inactivity_gap(self) -> int:
        return self.gap_ms

    def grace_period_ms(self) -> int:
        return self.grace_ms


class JoinWindows(_Spec):
    """Stream-stream join windows: a record at t joins other records in [t - before, t + after]."""

    __slots__ = ("before_ms", "after_ms", "grace_ms")

    def __init__(self, before_ms: int, after_ms: int, grace_ms: int) -> None:
        if before_ms + after_ms < 0:
            raise InvalidWindowsError(
                "Window interval (ie, before + after) must not be negative, "
                f"got before={before_ms} ms, after={after_ms} ms"
            )
        if grace_ms < 0:
            raise InvalidWindowsError(f"Grace period (grace) must not be negative, got {grace_ms} ms")
        self._init(before_ms=before_ms, after_ms=after_ms, grace_ms=grace_ms)

    @classmethod
    def of_time_difference_with_no_grace(cls, time_difference: Any) -> "JoinWindows":
        return cls.of_time_difference_and_grace(time_difference, 0)

    @classmethod
    def of_time_difference_and_grace(cls, time_difference: Any, grace: Any) -> "JoinWindows":
        diff = duration_ms(time_difference, "time_difference")
        return cls(diff, diff, duration_ms(grace, "grace"))

    def before(self, time_difference: Any) -> "JoinWindows":
        """Join with records up to `time_difference` earlier (may be negative if after covers it)."""
        return JoinWindows(duration_ms(time_difference, "before"), self.after_ms, self.grace_ms)

    def after(self, time_difference: Any) -> "JoinWindows":
        """Join with records up to `time_difference` later (may be negative if before covers it)."""
        return JoinWindows(self.before_ms, duration_ms(time_difference, "after"), self.grace_ms)

    def size(self) -> int:
        return self.before_ms + self.after_ms

    def grace_period_ms(self) -> int:
        return self.grace_ms


class EmitStrategy(_Spec):
    """When a windowed aggregation emits (KIP-825): on every update (default) or once on close."""

    __slots__ = ("type",)
    ON_WINDOW_UPDATE = "ON_WINDOW_UPDATE"
    ON_WINDOW_CLOSE = "ON_WINDOW_CLOSE"

    def __init__(self, type: str) -> None:  # noqa: A002 - Kafka's name
        if type not in (self.ON_WINDOW_UPDATE, self.ON_WINDOW_CLOSE):
            raise InvalidWindowsError(f"unknown emit strategy type {type!r}")
        self._init(type=type)

    @classmethod
    def on_window_update(cls) -> "EmitStrategy":
        return cls(cls.ON_WINDOW_UPDATE)

    @classmethod
    def on_window_close(cls) -> "EmitStrategy":
        return cls(cls.ON_WINDOW_CLOSE)

    @property
    def emits_on_close(self) -> bool:
        return self.type == self.ON_WINDOW_CLOSE


def window_close_delay_ms(windows: Any) -> int:
    """How far stream time must pass a window's end before the window closes (Kafka's window
    close time and the grace its suppression finds, GraphGraceSearchUtil): the grace period, and
    for session windows the inactivity gap plus the grace (KAFKA-12718: a session may still be
    extended by a record up to a gap after its end)."""
    if isinstance(windows, SessionWindows):
        return windows.gap_ms + windows.grace_ms
    return windows.grace_ms


class EmitThrottle:
    """Kafka's emit interval for results held back until their window closes (the internal
    configs `__emit.interval.ms.kstreams.windowed.aggregation__` and
    `__emit.interval.ms.kstreams.outer.join.spurious.results.fix__`: 1000 ms in an App, 0 in the
    TopologyTestDriver): `ready()` is True at most once per interval of wall clock, and always
    with an interval of 0 or no clock."""

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
        # from now, not from the previous slot: a clock jump does not make every call ready (Kafka)
        self.next_time_to_emit = now + self.interval_ms
        return True


class LateRecordReporter:
    """Counts and logs records dropped for arriving after their window closed (window end + grace
    <= stream time): every drop increments `sensor.count` (dropped-records); the WARN is logged
    once per task and window, remembering the last `max_remembered` windows per task."""

    def __init__(self, sensor: Any, task_id: Any, *, logger: Any = None, max_remembered: int = 10_000) -> None:
        import logging
        from collections import OrderedDict

        self.sensor = sensor
        self.task_id = task_id
        self.log = logger or logging.getLogger(__name__)
        self._logged: "OrderedDict[tuple, None]" = OrderedDict()
        self._max = max_remembered

    def report(self, key: Any, timestamp: int, window: Window, close_time: int, stream_time: int,
               topic: str = "", partition: int = -1, offset: int = -1) -> None:
        self.sensor.count += 1
        marker = (window.start, window.end)
        if marker in self._logged:
            return
        self._logged[marker] = None
        if len(self._logged) > self._max:
            self._logged.popitem(last=False)
        self.log.warning(
            "task %s: skipping record for expired window. key=[%r] topic=[%s] partition=[%d] offset=[%d] "
            "timestamp=[%d] window=[%d,%d) expiration=[%d] streamTime=[%d]",
            self.task_id, key, topic, partition, offset, timestamp, window.start, window.end, close_time, stream_time)


def window_closed(window_end: int, grace_ms: int, stream_time: int) -> bool:
    """Kafka's rule for time windows: a window is closed once window end + grace <= stream time."""
    return window_end + grace_ms <= stream_time
