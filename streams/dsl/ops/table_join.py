"""Primary-key table-table joins as operators (Kafka's KTableKTableInnerJoin / LeftJoin / RightJoin /
OuterJoin processors and KTableKTableJoinMerger), wiring streams/dsl/joins/table_table.py.

KTABLE-JOINTHIS- takes the left table's updates and looks the right table up through its value
getter; KTABLE-JOINOTHER- the reverse. Both forward Change(new, old) to KTABLE-MERGE-, which
stores the result when the join is materialized (`store=`) and forwards it: on every update, or,
with a caching store, when the cache flushes (Kafka's TimestampedTupleForwarder).
"""

from __future__ import annotations

from typing import Any, Callable

from streams.dsl.joins.table_table import TableTableJoinLogic
from streams.dsl.ops.table import OptionallyMaterialized, _check_change
from streams.dsl.ops.value_getter import ValueGetterSupplier
from streams.dsl.ops.windowed import _Counter
from streams.engine.stages import Stage, StageOperator
from streams.processor import ProcessorContext

__all__ = ["TableJoinSideProcessor", "TableJoinMergeProcessor"]


def _unused_getter(key: Any) -> Any:
    raise AssertionError("a table join side never looks its own table up")


class TableJoinSideProcessor(StageOperator):
    """One side of a table-table join: the side's updates joined with the other table's value."""

    def __init__(self, is_left: bool, other: ValueGetterSupplier, joiner: Callable[[Any, Any], Any], join_type: str,
                 send_old_values: Callable[[], bool]) -> None:
        self.is_left = is_left
        self.other = other
        self.joiner = joiner
        self.join_type = join_type
        self.send_old_values = send_old_values

    def init(self, context: ProcessorContext) -> None:
        super().init(context)
        self.other_get = self.other.getter(context)
        self.dropped = getattr(context, "dropped_records_sensor", None) or _Counter()

    def stage(self, down: Stage, failed: Callable[[], None]) -> Stage:
        headers_of: list = [()]

        def forward(key: Any, change: Any, timestamp: int) -> None:
            down(key, change, timestamp, headers_of[0])
        left, right = (_unused_getter, self.other_get) if self.is_left else (self.other_get, _unused_getter)
        logic = TableTableJoinLogic(left, right, self.joiner, forward, join_type=self.join_type, dropped=self.dropped,
                                    send_old_values=self.send_old_values())
        process = logic.process_left if self.is_left else logic.process_right
        op = "KTable.join"

        def table_join(key: Any, value: Any, timestamp: int, headers: Any) -> None:
            headers_of[0] = headers
            try:
                process(key, _check_change(value, op), timestamp)
            except BaseException:
                failed()
                raise
        return table_join


class TableJoinMergeProcessor(OptionallyMaterialized):
    """KTABLE-MERGE-: both sides' results, stored in the join's store when materialized."""

    def stage(self, down: Stage, failed: Callable[[], None]) -> Stage:
        if self.store is None:
            return down  # Kafka's merger without a store: a pass-through
        headers_of: list = [()]
        forward_on_update = self.forward_on_update

        def forward(key: Any, change: Any, timestamp: int) -> None:
            if forward_on_update:
                down(key, change, timestamp, headers_of[0])
        # the rule's merger step (store, then forward) with the join's store; the sides that
        # computed the change had no store
        logic = TableTableJoinLogic(_unused_getter, _unused_getter, None, forward, dropped=None,  # type: ignore[arg-type]
                                    send_old_values=self.send_old_values(), store=self.store)
        result = logic._result
        op = "KTable.join"

        def table_join_merge(key: Any, value: Any, timestamp: int, headers: Any) -> None:
            headers_of[0] = headers
            try:
                change = _check_change(value, op)
                result(key, change.new_value, change.old_value, timestamp)
            except BaseException:
                failed()
                raise
        return table_join_merge
