"""Table-table (primary-key) join logic (Kafka's KTableKTableInnerJoin / LeftJoin / RightJoin /
OuterJoin processors, their value getters, and KTableKTableJoinMerger).

What the operator must call. One `TableTableJoinLogic` per task. The left table's update
processor calls `process_left(key, Change(new, old), timestamp)`, the right one's
`process_right(...)`, after the upstream table stored the update (each side looks the other side
up through its value getter). `left_getter` / `right_getter` return the upstream tables' current
`ValueAndTimestamp` (or None). With `send_old_values` (a downstream node needs old values; the
operator must then also enable old values on both parents, as Kafka) old results are computed
from the upstream old values. With `store` (a timestamped key-value store, from `store=`), each
result is stored (None deletes) before it is forwarded; with caching on that store the operator
passes a no-op `forward` and forwards from the cache's flush listener. Results go to
`forward(key, Change(new, old), timestamp)`. `get(key)` is the join's value getter for downstream
joins and IQ. `dropped` is the task's dropped-records sensor.

Semantics (Kafka's):
- A None key is dropped and counted.
- The result timestamp is the larger of the update's and the other side's current timestamps
  (only the update's when the other side has no value).
- inner: nothing when the other side has no value; otherwise new = joiner(new, other) (None for a
  tombstone), old = joiner(old, other).
- left, left side: nothing when both the other side and the update are empty; new/old joined
  with the other side's value or None. left, right side: nothing without a left value; new =
  joiner(left, right_new) (a right tombstone gives joiner(left, None)), old = joiner(left, right_old).
- outer: like left on both sides; a result is computed when either side has a value.
"""

from __future__ import annotations

import logging
from typing import Any, Callable, Optional

from state.timestamped import ValueAndTimestamp
from streams.dsl.change import Change
from streams.errors import TopologyError

__all__ = ["TableTableJoinLogic", "INNER", "LEFT", "OUTER"]

log = logging.getLogger(__name__)

INNER, LEFT, OUTER = "inner", "left", "outer"
UNKNOWN = -1
Getter = Callable[[Any], Optional[ValueAndTimestamp]]


class TableTableJoinLogic:
    """Both sides of one primary-key table-table join in one task, and the join's value getter."""

    def __init__(self, left_getter: Getter, right_getter: Getter, joiner: Callable[[Any, Any], Any],
                 forward: Callable[[Any, Change, int], None], *, join_type: str = INNER, dropped: Any,
                 send_old_values: bool = False, store: Any = None) -> None:
        if join_type not in (INNER, LEFT, OUTER):
            raise TopologyError(f"table-table join type must be one of inner, left, outer; got {join_type!r}")
        self.left_getter = left_getter
        self.right_getter = right_getter
        self.joiner = joiner
        self.forward = forward
        self.join_type = join_type
        self.dropped = dropped
        self.send_old_values = send_old_values
        self.store = store

    # ------------------------------------------------------------------ processors
    def process_left(self, key: Any, change: Change, timestamp: int) -> None:
        if self._skip(key):
            return
        other = self.right_getter(key)
        other_value = None if other is None else other.value
        join = self.joiner
        new_value, old_value = change.new_value, change.old_value
        send_old = self.send_old_values
        if other_value is None:
            if self.join_type == INNER or (new_value is None and old_value is None):
                return
            ts = timestamp
        else:
            ts = timestamp if timestamp > other.timestamp else other.timestamp
        if self.join_type == OUTER:
            # a result wherever either side has a value (Kafka's KTableKTableOuterJoin)
            new = join(new_value, other_value) if (other_value is not None or new_value is not None) else None
            old = (join(old_value, other_value) if send_old and (other_value is not None or old_value is not None)
                   else None)
        else:
            new = join(new_value, other_value) if new_value is not None else None
            old = join(old_value, other_value) if send_old and old_value is not None else None
        self._result(key, new, old, ts)

    def process_right(self, key: Any, change: Change, timestamp: int) -> None:
        if self._skip(key):
            return
        other = self.left_getter(key)
        other_value = None if other is None else other.value
        join = self.joiner
        new_value, old_value = change.new_value, change.old_value
        send_old = self.send_old_values
        join_type = self.join_type
        if other_value is None:
            if join_type != OUTER or (new_value is None and old_value is None):
                return
            ts = timestamp
        else:
            ts = timestamp if timestamp > other.timestamp else other.timestamp
        if join_type == INNER:
            new = join(other_value, new_value) if new_value is not None else None
            old = join(other_value, old_value) if send_old and old_value is not None else None
        elif join_type == LEFT:
            # Kafka's KTableKTableRightJoin: the left value is there, so a right tombstone is
            # joiner(left, None)
            new = join(other_value, new_value)
            old = join(other_value, old_value) if send_old else None
        else:
            new = join(other_value, new_value) if (other_value is not None or new_value is not None) else None
            old = (join(other_value, old_value) if send_old and (other_value is not None or old_value is not None)
                   else None)
        self._result(key, new, old, ts)

    def _skip(self, key: Any) -> bool:
        if key is None:
            log.warning("Skipping record due to null key.")
            self.dropped.count += 1
            return True
        return False

    def _result(self, key: Any, new: Any, old: Any, timestamp: int) -> None:
        """Kafka's KTableKTableJoinMerger: store the result when materialized, then forward."""
        if self.store is not None:
            self.store.put(key, ValueAndTimestamp.make(new, timestamp), timestamp)
        self.forward(key, Change(new, old if self.send_old_values else None), timestamp)

    # ------------------------------------------------------------------ value getter
    def get(self, key: Any) -> Optional[ValueAndTimestamp]:
        """The join's current result for `key` (the store's when materialized, else computed from
        both sides as Kafka's KTableKTable*JoinValueGetter); a joiner's None is no result (None,
        as ValueAndTimestamp.make gives)."""
        if self.store is not None:
            return self.store.get(key)
        left = self.left_getter(key)
        left_value = None if left is None else left.value
        if left_value is None and self.join_type != OUTER:
            return None
        right = self.right_getter(key)
        right_value = None if right is None else right.value
        make = ValueAndTimestamp.make
        if right_value is None:
            if self.join_type == INNER or left_value is None:
                return None
            return make(self.joiner(left_value, None), left.timestamp)
        if left_value is None:
            return make(self.joiner(None, right_value), right.timestamp)
        return make(self.joiner(left_value, right_value), max(left.timestamp, right.timestamp))
