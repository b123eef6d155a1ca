"""A task's input buffer: one record queue per input partition, drained in timestamp order.

Kafka's PartitionGroup: the next record comes from the partition whose head record has the
lowest timestamp. Whether a task with some partitions empty may process at all is
`ready_to_process` (max.task.idle.ms, KIP-695). Records are the consumer's `Message` objects,
kept as they came.
"""

from __future__ import annotations

import collections
from typing import Any, Callable, Iterable, Iterator, Optional

from confluent_kafka import Message

from eddy.messages import payload_bytes

_TIMESTAMP = Message.timestamp


class PartitionGroup:
    def __init__(self, partitions: Iterable[tuple[str, int]]) -> None:
        self.queues: dict[tuple[str, int], collections.deque] = {tp: collections.deque() for tp in partitions}
        self.buffered = 0
        #: `(partition, message) -> timestamp` when a source has its own timestamp extractor:
        #: partitions are then ordered by the extracted timestamp of their head, as Kafka's
        #: RecordQueue does (None: the message's own timestamp).
        self.head_timestamp: Callable[[tuple[str, int], Any], int] | None = None
        self._heads: dict[tuple[str, int], tuple[Any, int]] = {}
        # max.task.idle.ms > 0: when each empty partition known to have no lag stops holding
        # the task back (wall-clock ms)
        self._idle_deadlines: dict[tuple[str, int], int] = {}

    def all_buffered(self) -> bool:
        """Every partition has buffered records (always true for a one-partition task with any)."""
        return all(self.queues.values())

    def forget_idle_deadlines(self) -> None:
        """Every partition has records: none is idling. What ready_to_process does for a partition
        with records (Kafka calls it for every record), for a caller that skips it then: a
        partition that empties again idles max.task.idle.ms again from then."""
        if self._idle_deadlines:
            self._idle_deadlines.clear()

    def ready_to_process(self, now_ms: int, max_task_idle_ms: int,
                         fetched_lag: Callable[[tuple[str, int]], Optional[int]]) -> bool:
        """Kafka's PartitionGroup.readyToProcess (KIP-695), for a group with records buffered:
        -1 never waits. Otherwise an empty partition holds the task back while its lag
        (`fetched_lag(tp)`: records on the broker past the consumer's position, None when not
        known yet) is unknown or positive: data that orders before the buffered records may be
        on its way. An empty partition known to have no lag holds it back for
        `max_task_idle_ms` from when it was first seen so (0: not at all)."""
        if max_task_idle_ms < 0:
            return True
        deadlines = self._idle_deadlines
        queued = False
        for tp, q in self.queues.items():
            if q:
                deadlines.pop(tp, None)
                queued = True
                continue
            lag = fetched_lag(tp)
            if lag is None or lag > 0:
                deadlines.pop(tp, None)
                return False
            deadline = deadlines.get(tp)
            if deadline is None:
                deadline = deadlines[tp] = now_ms + max_task_idle_ms
            if now_ms < deadline:
                return False
        return queued

    def _head_ts(self, tp: tuple[str, int], message: Any) -> int:
        extract = self.head_timestamp
        if extract is None:
            return _TIMESTAMP(message)[1]
        cached = self._heads.get(tp)
        if cached is not None and cached[0] is message:
            return cached[1]
        ts = extract(tp, message)
        self._heads[tp] = (message, ts)
        return ts

    def add(self, tp: tuple[str, int], messages: list) -> int:
        """Buffer `messages` of `tp`; returns how many `tp` now holds."""
        q = self.queues[tp]
        q.extend(messages)
        self.buffered += len(messages)
        return len(q)

    def clear(self) -> None:
        for q in self.queues.values():
            q.clear()
        self.buffered = 0
        self._heads.clear()
        self._idle_deadlines.clear()

    def buffered_partitions(self) -> int:
        """How many partitions have records buffered."""
        return sum(1 for q in self.queues.values() if q)

    def buffered_in(self, tp: tuple[str, int]) -> int:
        return len(self.queues[tp])

    def buffered_bytes(self) -> tuple[int, int]:
        """`(total, largest)`: the key and value bytes of the buffered records. Reads every one
        of them; safe from another thread (each queue is copied in one step first)."""
        total = largest = 0
        for q in self.queues.values():
            if q:
                size, big = payload_bytes(list(q))
                total += size
                largest = big if big > largest else largest
        return total, largest

    def runs(self, max_records: int, stop_when_empty: bool = False) -> Iterator[tuple[tuple[str, int], list]]:
        """Yield `(partition, messages)` runs, up to `max_records` messages in all, in timestamp
        order across partitions. With one partition buffered (the common case) this is a single
        run taken at C speed. `stop_when_empty`: of several buffered partitions, stop when one
        runs empty (the caller asks `ready_to_process` again before going on)."""
        nonempty = [(tp, q) for tp, q in self.queues.items() if q]
        if not nonempty:
            return
        if len(nonempty) == 1:
            tp, q = nonempty[0]
            if len(q) <= max_records:
                run = list(q)
                q.clear()
            else:
                popleft = q.popleft
                run = [popleft() for _ in range(max_records)]
            self.buffered -= len(run)
            yield tp, run
            return
        # Kafka's choice, record by record: the head with the lowest timestamp, the first
        # partition (in `queues` order) on a tie. The other heads do not move while one
        # partition's records are taken, so its run goes on while its head still wins against
        # the best of the others; each head's timestamp is read once (None: the queue is empty),
        # records being added between calls only, never while the caller holds a run.
        emitted = 0
        ordered = [(tp, q) for tp, q in self.queues.items()]
        head_ts = self._head_ts if self.head_timestamp is not None else None
        stamps: list = [None if not q else _TIMESTAMP(q[0])[1] if head_ts is None else head_ts(tp, q[0])
                        for tp, q in ordered]
        count = len(ordered)
        while emitted < max_records:
            best = other = -1
            best_ts = other_ts = 0
            for i in range(count):
                ts = stamps[i]
                if ts is None:
                    continue
                if best < 0 or ts < best_ts:
                    best, best_ts, other, other_ts = i, ts, best, best_ts
                elif other < 0 or ts < other_ts:
                    other, other_ts = i, ts
            if best < 0:
                break
            tp, q = ordered[best]
            if not q:  # cleared while the caller had a run (the task closed): nothing is left
                break
            run = [q.popleft()]
            emitted += 1
            popleft = q.popleft
            append = run.append
            next_ts = None  # the new head's timestamp, once read
            while q and emitted < max_records:
                if other >= 0:
                    head = q[0]
                    ts = _TIMESTAMP(head)[1] if head_ts is None else head_ts(tp, head)
                    if ts > other_ts or (ts == other_ts and best > other):
                        next_ts = ts
                        break
                append(popleft())
                emitted += 1
            if next_ts is None and q:
                next_ts = _TIMESTAMP(q[0])[1] if head_ts is None else head_ts(tp, q[0])
            stamps[best] = next_ts
            self.buffered -= len(run)
            yield tp, run
            if stop_when_empty and not q:
                break

    def drain(self, max_records: int) -> Iterator[Any]:
        """Yield up to `max_records` messages in timestamp order across partitions."""
        nonempty = [q for q in self.queues.values() if q]
        if not nonempty:
            return
        if len(nonempty) == 1:  # the common case: take a run from one partition at C speed
            q = nonempty[0]
            n = min(max_records, len(q))
            self.buffered -= n
            popleft = q.popleft
            for _ in range(n):
                yield popleft()
            return
        emitted = 0
        while emitted < max_records:
            best = None
            best_ts = 0
            for tp, q in self.queues.items():
                if q:
                    ts = self._head_ts(tp, q[0])
                    if best is None or ts < best_ts:
                        best, best_ts = q, ts
            if best is None:
                return
            self.buffered -= 1
            emitted += 1
            yield best.popleft()
