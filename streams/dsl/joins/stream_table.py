"""Stream-table and stream-global-table join logic (Kafka's KStreamKTableJoinProcessor, used by both
KStreamKTableJoin and KStreamGlobalKTableJoin).

What the operator must call. One `StreamTableJoinLogic` per task (per instance for a global table
join). The stream's processor calls `process(key, value, timestamp, topic=, partition=, offset=)`
per record; the table side triggers nothing (its source only updates its store). `value_getter`
returns the table's current `ValueAndTimestamp` (or None) for a key: for a KTable the table
store's (or its value getter's) `get`, for a GlobalKTable the global store's `get`. `key_selector`
is the global-table join's `key_selector(key, value)`; for a KTable join it is None (the stream key
is the table key). Results go to `forward(key, joined_value, timestamp)`: the stream record's key
and timestamp. `dropped` is the task's dropped-records sensor.

Semantics (Kafka 3.x, KAFKA-19208 included):
- A record with a None value is dropped and counted.
- The join key is the stream key (KTable) or key_selector(key, value) (GlobalKTable). When it is
  None, an inner join drops and counts the record; a left join forwards joiner(value, None).
- Otherwise the table's current value (None after a tombstone) is looked up: an inner join
  forwards joiner(value, table_value) only when there is one, a left join always.
"""

from __future__ import annotations

import logging
from typing import Any, Callable, Optional

from state.timestamped import ValueAndTimestamp

__all__ = ["StreamTableJoinLogic"]

log = logging.getLogger(__name__)


class StreamTableJoinLogic:
    """A stream joined with the current state of a table (or global table)."""

    def __init__(self, value_getter: Callable[[Any], Optional[ValueAndTimestamp]],
                 joiner: Callable[[Any, Any], Any], forward: Callable[[Any, Any, int], None], *,
                 left_join: bool, dropped: Any, key_selector: Optional[Callable[[Any, Any], Any]] = None) -> None:
        self.value_getter = value_getter
        self.joiner = joiner
        self.forward = forward
        self.left_join = left_join
        self.dropped = dropped
        self.key_selector = key_selector

    def process(self, key: Any, value: Any, timestamp: int, *, topic: str = "", partition: int = -1,
                offset: int = -1) -> None:
        if value is None:
            self._drop(topic, partition, offset)
            return
        # the selector sees no None value: those are dropped above, as Kafka drops them
        mapped_key = key if self.key_selector is None else self.key_selector(key, value)
        if mapped_key is None:
            if self.left_join:
                self.forward(key, self.joiner(value, None), timestamp)
            else:
                self._drop(topic, partition, offset)
            return
        current = self.value_getter(mapped_key)
        table_value = None if current is None else current.value
        if table_value is not None or self.left_join:
            self.forward(key, self.joiner(value, table_value), timestamp)

    def _drop(self, topic: str, partition: int, offset: int) -> None:
        log.warning("Skipping record due to null join key or value. topic=[%s] partition=[%d] offset=[%d]",
                    topic, partition, offset)
        self.dropped.count += 1
