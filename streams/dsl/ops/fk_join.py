"""Foreign-key table-table join operators (Kafka's SubscriptionSendProcessorSupplier,
SubscriptionReceiveProcessorSupplier, SubscriptionJoinProcessorSupplier,
ForeignTableJoinProcessorSupplier, ResponseJoinProcessorSupplier and the unmaterialized
KTableSource of the result): each wires one logic class of streams/dsl/joins/foreign_key.py to
its records and stores, as a stage. The rules live there; these only route.

Stores: the subscription store (receive and foreign-table join), the right table's store (read
by the subscription join) and the left table's store (read by the response join), all
timestamped key-value stores whose `get` returns a ValueAndTimestamp or None.
"""

from __future__ import annotations

from typing import Any, Callable

from streams.dsl.change import Change
from streams.dsl.joins.foreign_key import (CombinedKeySchema, ForeignTableJoinLogic, ResponseJoinLogic,
                                           SubscriptionJoinLogic, SubscriptionReceiveLogic, SubscriptionSendLogic)
from streams.engine.stages import Stage, StageOperator
from streams.errors import ProcessingError
from streams.processor import ProcessorContext

__all__ = ["SubscriptionSendProcessor", "SubscriptionReceiveProcessor", "SubscriptionJoinProcessor",
           "ForeignTableJoinProcessor", "ResponseJoinProcessor", "ResultTableProcessor", "response_partitioner"]

_new_tuple = tuple.__new__


def response_partitioner(topic: str, key: Any, response: Any, num_partitions: int) -> Any:
    """The response topic's partitioner: back to the left record's partition, which the
    subscription carried (None: the default partitioner, for wrappers without it)."""
    return response.primary_partition


def _change(value: Any, op: str) -> Change:
    if type(value) is not Change and not isinstance(value, Change):
        raise ProcessingError(f"{op} expected a table update (Change), got {value!r}")
    return value


def _stage(process: Callable[..., None], headers_box: list, failed: Callable[[], None], op: str,
           changes: bool) -> Stage:
    """One stage calling `process(key, value, timestamp)` with the record's headers kept for the
    logic's forwards (which carry no headers: Kafka forwards the input record, headers and all)."""
    def fk_join_stage(key: Any, value: Any, timestamp: int, headers: Any) -> None:
        try:
            headers_box[0] = headers
            process(key, _change(value, op) if changes else value, timestamp)
        except BaseException:
            failed()
            raise
    return fk_join_stage


class _FkJoinOperator(StageOperator):
    def _forward(self, down: Stage) -> tuple[list, Callable[[Any, Any, int], None]]:
        box: list = [()]

        def forward(key: Any, value: Any, timestamp: int) -> None:
            down(key, value, timestamp, box[0])
        return box, forward


class SubscriptionSendProcessor(_FkJoinOperator):
    """Left table updates -> subscriptions keyed by the foreign key. The primary partition is the
    task's: the left table's sub-topology reads co-partitioned topics, so it is the partition of
    the record (also when a cache flush forwards it, where Kafka uses the cached record's)."""

    def __init__(self, foreign_key_extractor: Callable[[Any], Any], foreign_key_serde: Any, value_serde: Any, *,
                 left_join: bool) -> None:
        self.foreign_key_extractor = foreign_key_extractor
        self.foreign_key_serde = foreign_key_serde
        self.value_serde = value_serde
        self.left_join = left_join

    def stage(self, down: Stage, failed: Callable[[], None]) -> Stage:
        box, forward = self._forward(down)
        logic = SubscriptionSendLogic(self.foreign_key_extractor, self.foreign_key_serde, self.value_serde, forward,
                                      left_join=self.left_join, dropped=self.context.dropped_records_sensor)
        partition = self.context.task_id.partition
        logic_process = logic.process

        def process(key: Any, change: Change, timestamp: int) -> None:
            logic_process(key, change, timestamp, partition)
        return _stage(process, box, failed, "the foreign-key join's subscription", True)


class SubscriptionReceiveProcessor(_FkJoinOperator):
    """Subscriptions -> the subscription store, and Change(new, old) of the subscription keyed by
    CombinedKey to the subscription join."""

    def __init__(self, store_name: str, key_schema: CombinedKeySchema) -> None:
        self.store_name = store_name
        self.key_schema = key_schema

    def init(self, context: ProcessorContext) -> None:
        super().init(context)
        self.store = context.get_state_store(self.store_name)

    def stage(self, down: Stage, failed: Callable[[], None]) -> Stage:
        box, forward = self._forward(down)
        logic = SubscriptionReceiveLogic(self.store, self.key_schema, forward,
                                         dropped=self.context.dropped_records_sensor)
        return _stage(logic.process, box, failed, "", False)


class SubscriptionJoinProcessor(_FkJoinOperator):
    """A received subscription meets the right table (read from `right_store_name`): a response."""

    def __init__(self, right_store_name: str) -> None:
        self.right_store_name = right_store_name

    def init(self, context: ProcessorContext) -> None:
        super().init(context)
        self.right = context.get_state_store(self.right_store_name)

    def stage(self, down: Stage, failed: Callable[[], None]) -> Stage:
        box, forward = self._forward(down)
        logic = SubscriptionJoinLogic(self.right.get, forward)
        return _stage(logic.process, box, failed, "the foreign-key join's subscription join", True)


class ForeignTableJoinProcessor(_FkJoinOperator):
    """Right table updates -> a response to every subscriber of the key."""

    def __init__(self, store_name: str, key_schema: CombinedKeySchema) -> None:
        self.store_name = store_name
        self.key_schema = key_schema

    def init(self, context: ProcessorContext) -> None:
        super().init(context)
        self.store = context.get_state_store(self.store_name)

    def stage(self, down: Stage, failed: Callable[[], None]) -> Stage:
        box, forward = self._forward(down)
        logic = ForeignTableJoinLogic(self.store, self.key_schema, forward,
                                      dropped=self.context.dropped_records_sensor)
        return _stage(logic.process, box, failed, "the foreign-key join's right table", True)


class ResponseJoinProcessor(_FkJoinOperator):
    """Responses -> join results (stale ones dropped by the left value's hash), the left table
    read from `left_store_name`."""

    def __init__(self, left_store_name: str, value_serde: Any, joiner: Callable[[Any, Any], Any], *,
                 left_join: bool) -> None:
        self.left_store_name = left_store_name
        self.value_serde = value_serde
        self.joiner = joiner
        self.left_join = left_join

    def init(self, context: ProcessorContext) -> None:
        super().init(context)
        self.left = context.get_state_store(self.left_store_name)

    def stage(self, down: Stage, failed: Callable[[], None]) -> Stage:
        box, forward = self._forward(down)
        logic = ResponseJoinLogic(self.left.get, self.value_serde, self.joiner, forward, left_join=self.left_join,
                                  dropped=self.context.dropped_records_sensor)
        return _stage(logic.process, box, failed, "", False)


class ResultTableProcessor(StageOperator):
    """The join's result table when it has no store (Kafka's KTableSource unmaterialized):
    Change(value, None), no old value to give."""

    def stage(self, down: Stage, failed: Callable[[], None]) -> Stage:
        def result(key: Any, value: Any, timestamp: int, headers: Any) -> None:
            try:
                down(key, _new_tuple(Change, (value, None)), timestamp, headers)
            except BaseException:
                failed()
                raise
        return result
