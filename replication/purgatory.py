"""Kafka's purgatory: operations that wait for a condition or a deadline.

A parked fetch (rule 21) or an acks=all produce (rule 20) is a `DelayedOperation` watched
under one or more keys (its partitions). Whoever changes a partition (a leader append, a high
watermark move, a leader change) calls `check_and_complete(key)`, which tries the watchers of
that key at once on the caller's thread: completion is driven by the event, never by polling.
One reaper thread per purgatory expires operations whose deadline passed.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import threading
import time
from typing import Hashable, Iterable

log = logging.getLogger(__name__)


class DelayedOperation:
    """Subclasses implement `try_complete` (return True after calling `force_complete`),
    `on_complete` (send the response) and optionally `on_expiration`."""

    __slots__ = ("deadline", "_completed", "_lock", "keys")

    def __init__(self, timeout_ms: float) -> None:
        self.deadline = time.monotonic() + max(0.0, timeout_ms) / 1000.0
        self._completed = False
        self._lock = threading.Lock()
        self.keys: tuple = ()

    @property
    def is_completed(self) -> bool:
        return self._completed

    def force_complete(self) -> bool:
        """Complete once; returns True only for the caller that completed it."""
        with self._lock:
            if self._completed:
                return False
            self._completed = True
        self.on_complete()
        return True

    def try_complete(self) -> bool:
        raise NotImplementedError

    def on_complete(self) -> None:
        raise NotImplementedError

    def on_expiration(self) -> None:
        pass


class DelayedOperationPurgatory:
    """Watches delayed operations by key and expires them at their deadline."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._watchers: dict[Hashable, list[DelayedOperation]] = {}
        self._lock = threading.Lock()
        self._heap: list[tuple[float, int, DelayedOperation]] = []
        self._seq = itertools.count()
        self._cond = threading.Condition(self._lock)
        self._closed = False
        self._reaper = threading.Thread(target=self._expire_loop, name=f"purgatory-{name}", daemon=True)
        self._reaper.start()

    def try_complete_else_watch(self, op: DelayedOperation, keys: Iterable[Hashable]) -> bool:
        """Complete `op` now if it can, else park it under `keys`; True if completed now."""
        if op.try_complete():
            return True
        keys = tuple(keys)
        op.keys = keys
        with self._lock:
            if self._closed:
                closed = True
            else:
                closed = False
                for key in keys:
                    self._watchers.setdefault(key, []).append(op)
                heapq.heappush(self._heap, (op.deadline, next(self._seq), op))
                if self._heap[0][2] is op:
                    self._cond.notify()
        if closed:
            op.force_complete()
            return True
        # A change that raced with parking would have found no watcher: try once more.
        if op.try_complete():
            return True
        return False

    def check_and_complete(self, key: Hashable) -> int:
        """Try every operation watching `key`; returns how many completed."""
        with self._lock:
            ops = self._watchers.get(key)
            if not ops:
                return 0
            ops = list(ops)
        completed = 0
        for op in ops:
            if op.is_completed or op.try_complete():
                completed += 1
        if completed:
            self._purge(key)
        return completed

    def _purge(self, key: Hashable) -> None:
        with self._lock:
            ops = self._watchers.get(key)
            if ops is None:
                return
            remaining = [op for op in ops if not op.is_completed]
            if remaining:
                self._watchers[key] = remaining
            else:
                del self._watchers[key]

    def watched(self, key: Hashable) -> int:
        with self._lock:
            return sum(1 for op in self._watchers.get(key, ()) if not op.is_completed)

    def _expire_loop(self) -> None:
        while True:
            with self._lock:
                while not self._closed:
                    while self._heap and self._heap[0][2].is_completed:
                        heapq.heappop(self._heap)
                    if self._heap and self._heap[0][0] <= time.monotonic():
                        break
                    timeout = self._heap[0][0] - time.monotonic() if self._heap else None
                    self._cond.wait(timeout)
                if self._closed:
                    return
                _, _, op = heapq.heappop(self._heap)
            try:
                if op.force_complete():
                    op.on_expiration()
            except Exception:
                log.exception("expiring a delayed operation in %s failed", self.name)
            for key in op.keys:
                self._purge(key)

    def shutdown(self) -> None:
        """Complete every parked operation (their responses go out) and stop the reaper."""
        with self._lock:
            self._closed = True
            ops = [op for _, _, op in self._heap]
            self._heap.clear()
            self._watchers.clear()
            self._cond.notify_all()
        for op in ops:
            try:
                op.force_complete()
            except Exception:
                log.exception("completing a delayed operation on shutdown failed")
        self._reaper.join(timeout=5)
