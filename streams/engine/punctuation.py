"""Punctuation: a processor's scheduled callbacks and the queues that fire them when due."""

from __future__ import annotations

import heapq
import itertools
from typing import Callable

from streams.engine.nodes import ProcessorNode
from streams.processor import Cancellable


class PunctuationSchedule(Cancellable):
    __slots__ = ("node", "interval_ms", "callback", "timestamp", "cancelled")

    def __init__(self, node: ProcessorNode, timestamp: int, interval_ms: int, callback: Callable[[int], None]) -> None:
        self.node = node
        self.timestamp = timestamp
        self.interval_ms = interval_ms
        self.callback = callback
        self.cancelled = False

    def cancel(self) -> None:
        self.cancelled = True

    def advance(self, now: int) -> None:
        """Move to the next due time after `now`, skipping missed intervals (Kafka's next())."""
        nxt = self.timestamp + self.interval_ms
        if now >= nxt:
            missed = (now - self.timestamp) // self.interval_ms
            nxt = self.timestamp + (missed + 1) * self.interval_ms
        self.timestamp = nxt


class PunctuationQueue:
    """Schedules ordered by due time (ties in scheduling order)."""

    def __init__(self) -> None:
        self._heap: list[tuple[int, int, PunctuationSchedule]] = []
        self._seq = itertools.count()

    def schedule(self, sched: PunctuationSchedule) -> None:
        heapq.heappush(self._heap, (sched.timestamp, next(self._seq), sched))

    def may_punctuate(self, now: int, punctuate: Callable[[PunctuationSchedule, int], None]) -> bool:
        """Fire every schedule due at `now` once (each re-armed after its callback)."""
        heap = self._heap
        fired = False
        while heap and heap[0][0] <= now:
            _, _, sched = heapq.heappop(heap)
            if sched.cancelled:
                continue
            punctuate(sched, now)
            if not sched.cancelled:  # the callback may cancel its own schedule
                sched.advance(now)
                heapq.heappush(heap, (sched.timestamp, next(self._seq), sched))
            fired = True
        return fired

    def __len__(self) -> int:
        return sum(1 for _, _, s in self._heap if not s.cancelled)
