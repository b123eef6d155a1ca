"""Foreign-key table-table join operators (Kafka's SubscriptionSendProcessorSupplier,
SubscriptionReceiveProcessorSupplier, SubscriptionJoinProcessorSupplier,
ForeignTableJoinProcessorSupplier, ResponseJoinProcessorSupplier and the unmaterialized
KTableSource of the result): each wires one logic class of streams/dsl/joins/foreign_key.py to
its records and stores, as a stage. The rules live there; these only route.

Stores: the subscription store (receive and foreign-table join); the right table (read by the
subscription join) and the left table (read by the response join) are read through their value
getters (streams/dsl/ops/value_getter.py), which return a ValueAndTimestamp or None.
"""

from __future__ import annotations

from typing import Any, Callable

from streams.dsl.change import Change
from streams.dsl.joins.foreign_key import (CombinedKeySchema, ForeignTableJoinLogic, ResponseJoinLogic,
                                           SubscriptionJoinLogic, SubscriptionReceiveLogic, SubscriptionSendLogic)
from streams.dsl.ops.value_getter import ValueGetterSupplier
from streams.engine.stages import Stage, StageOperator
from streams.errors import ProcessingError
from streams.processor import ProcessorContext

__all__ = ["SubscriptionSendProcessor", "SubscriptionReceiveProcessor", "SubscriptionJoinProcessor",
           "ForeignTableJoinProcessor", "ResponseJoinProcessor", "response_partitioner"]

_new_tuple = tuple.__new__


def response_partitioner(topic: str, key: Any, response: Any, num_partitions: int) -> Any:
    """The response topic's partitioner: back to the left record's partition, which the
    subscription carried (None: the default partitioner, for wrappers without it)."""
    return response.primary_partition


class _FkJoinOperator(StageOperator):
    """Runs one logic object per task: `_process(forward)` builds it and returns its `process`;
    its forwards carry the input record's headers (Kafka forwards the input record, headers and
    all). With `changes`, the input must be a table update (Change), named by `what`."""

    changes = False
    what = ""

    def _process(self, forward: Callable[[Any, Any, int], None]) -> Callable[[Any, Any, int], None]:
        raise NotImplementedError

    def stage(self, down: Stage, failed: Callable[[], None]) -> Stage:
        headers_box: list = [()]

        def forward(key: Any, value: Any, timestamp: int) -> None:
            down(key, value, timestamp, headers_box[0])
        process, changes, what = self._process(forward), self.changes, self.what

        def fk_join_stage(key: Any, value: Any, timestamp: int, headers: Any) -> None:
            try:
                if changes and type(value) is not Change and not isinstance(value, Change):
                    raise ProcessingError(f"{what} expected a table update (Change), got {value!r}")
                headers_box[0] = headers
                process(key, value, timestamp)
            except BaseException:
                failed()
                raise
        return fk_join_stage


class SubscriptionSendProcessor(_FkJoinOperator):
    """Left table updates -> subscriptions keyed by the foreign key. The primary partition is the
    task's: the left table's sub-topology reads co-partitioned topics, so it is the partition of
    the record (also when a cache flush forwards it, where Kafka uses the cached record's)."""

    changes = True
    what = "the foreign-key join's left table"

    def __init__(self, foreign_key_extractor: Callable[[Any], Any], foreign_key_serde: Any, value_serde: Any, *,
                 left_join: bool) -> None:
        self.foreign_key_extractor = foreign_key_extractor
        self.foreign_key_serde = foreign_key_serde
        self.value_serde = value_serde
        self.left_join = left_join

    def _process(self, forward: Callable[[Any, Any, int], None]) -> Callable[[Any, Any, int], None]:
        logic = SubscriptionSendLogic(self.foreign_key_extractor, self.foreign_key_serde, self.value_serde, forward,
                                      left_join=self.left_join, dropped=self.context.dropped_records_sensor)
        send, partition = logic.process, self.context.task_id.partition

        def process(key: Any, change: Change, timestamp: int) -> None:
            send(key, change, timestamp, partition)
        return process


class _SubscriptionStoreOperator(_FkJoinOperator):
    """An operator of the subscription store: `logic(store, key_schema, forward, dropped=...)`."""

    logic: Any = None

    def __init__(self, store_name: str, key_schema: CombinedKeySchema) -> None:
        self.store_name = store_name
        self.key_schema = key_schema

    def init(self, context: ProcessorContext) -> None:
        super().init(context)
        self.store = context.get_state_store(self.store_name)

    def _process(self, forward: Callable[[Any, Any, int], None]) -> Callable[[Any, Any, int], None]:
        return self.logic(self.store, self.key_schema, forward, dropped=self.context.dropped_records_sensor).process


class SubscriptionReceiveProcessor(_SubscriptionStoreOperator):
    """Subscriptions -> the subscription store, and Change(new, old) of the subscription keyed by
    CombinedKey to the subscription join."""

    logic = SubscriptionReceiveLogic


class ForeignTableJoinProcessor(_SubscriptionStoreOperator):
    """Right table updates -> a response to every subscriber of the key."""

    logic = ForeignTableJoinLogic
    changes = True
    what = "the foreign-key join's right table"


class SubscriptionJoinProcessor(_FkJoinOperator):
    """A received subscription meets the right table (read through its value getter): a response."""

    changes = True
    what = "the foreign-key join's subscription join"

    def __init__(self, right: ValueGetterSupplier) -> None:
        self.right = right

    def init(self, context: ProcessorContext) -> None:
        super().init(context)
        self.right_get = self.right.getter(context)

    def _process(self, forward: Callable[[Any, Any, int], None]) -> Callable[[Any, Any, int], None]:
        return SubscriptionJoinLogic(self.right_get, forward).process


class ResponseJoinProcessor(_FkJoinOperator):
    """Responses -> join results (stale ones dropped by the left value's hash), the left table
    read through its value getter."""

    def __init__(self, left: ValueGetterSupplier, value_serde: Any, joiner: Callable[[Any, Any], Any], *,
                 left_join: bool) -> None:
        self.left = left
        self.value_serde = value_serde
        self.joiner = joiner
        self.left_join = left_join

    def init(self, context: ProcessorContext) -> None:
        super().init(context)
        self.left_get = self.left.getter(context)

    def _process(self, forward: Callable[[Any, Any, int], None]) -> Callable[[Any, Any, int], None]:
        return ResponseJoinLogic(self.left_get, self.value_serde, self.joiner, forward, left_join=self.left_join,
                                 dropped=self.context.dropped_records_sensor).process
