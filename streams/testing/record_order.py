"""The order in which the TopologyTestDriver processes the records a topology produced to topics
it reads itself (repartition and other internal topics, or any source topic).

Kafka's TopologyTestDriver runs the whole topology as one task, so those records wait in its one
PartitionGroup: a FIFO queue per topic, and a java.util.PriorityQueue of the non-empty queues
ordered by the timestamp of their head record. The next record comes from the queue at the top;
a queue that still holds records afterwards is offered again. Ties are broken by the heap's own
sift order, which this module follows step for step (a queue offered back after a poll goes
behind a queue already waiting at the same timestamp): with records of one timestamp in two
topics, the topics take turns.
"""

from __future__ import annotations

import collections
from typing import Any

__all__ = ["TaskQueues"]


class TaskQueues:
    """Records (anything with `.topic` and `.timestamp`) queued per topic, taken in the order of
    Kafka's PartitionGroup.nextRecord."""

    def __init__(self) -> None:
        self._queues: dict[str, collections.deque] = {}
        # java.util.PriorityQueue's array: [head timestamp, queue] per non-empty queue
        self._heap: list[list] = []

    def __bool__(self) -> bool:
        return bool(self._heap)

    def add(self, record: Any) -> None:
        """Queue `record` behind the others of its topic (PartitionGroup.addRawRecords: a queue
        that was empty is offered to the heap)."""
        queue = self._queues.get(record.topic)
        if queue is None:
            queue = self._queues[record.topic] = collections.deque()
        queue.append(record)
        if len(queue) == 1:
            self._offer([record.timestamp, queue])

    def pop(self) -> Any:
        """The next record (PartitionGroup.nextRecord); the heap must not be empty."""
        heap = self._heap
        top = heap[0]
        last = heap.pop()
        if heap:
            self._sift_down(last)
        queue = top[1]
        record = queue.popleft()
        if queue:
            self._offer([queue[0].timestamp, queue])
        return record

    def clear(self) -> None:
        self._queues.clear()
        self._heap.clear()

    def _offer(self, entry: list) -> None:
        """PriorityQueue.offer: siftUp from the end, stopping at a parent that is not larger."""
        heap = self._heap
        heap.append(entry)
        k = len(heap) - 1
        ts = entry[0]
        while k > 0:
            parent = (k - 1) >> 1
            if ts >= heap[parent][0]:
                break
            heap[k] = heap[parent]
            k = parent
        heap[k] = entry

    def _sift_down(self, entry: list) -> None:
        """PriorityQueue.poll's siftDown of the last element from the root: the smaller child
        moves up (the left one on a tie), until the element is not larger than it."""
        heap = self._heap
        n = len(heap)
        half = n >> 1
        k = 0
        ts = entry[0]
        while k < half:
            child = 2 * k + 1
            smaller = heap[child]
            right = child + 1
            if right < n and smaller[0] > heap[right][0]:
                child = right
                smaller = heap[right]
            if ts <= smaller[0]:
                break
            heap[k] = smaller
            k = child
        heap[k] = entry
