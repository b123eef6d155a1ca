"""The stream-global-table join operator (Kafka's KStreamGlobalKTableJoin): each stream record
looks up `key_selector(key, value)` in the global store, read-only, through the join rules of
streams/dsl/joins/stream_table.py (StreamTableJoinLogic, shared with the stream-table join). The
result keeps the stream record's key, timestamp and headers."""

from __future__ import annotations

from typing import Any, Callable

from streams.dsl.joins.stream_table import StreamTableJoinLogic
from streams.engine.stages import Stage, StageOperator
from streams.processor import ProcessorContext


class GlobalTableJoinProcessor(StageOperator):
    def __init__(self, store_name: str, key_selector: Callable[[Any, Any], Any], joiner: Callable[[Any, Any], Any],
                 left_join: bool) -> None:
        self.store_name = store_name
        self.key_selector = key_selector
        self.joiner = joiner
        self.left_join = left_join

    def init(self, context: ProcessorContext) -> None:
        super().init(context)
        # the global store, read-only (every processor may read a global store unconnected)
        self.lookup = context.get_state_store(self.store_name).get
        self.dropped = context.dropped_records_sensor

    def stage(self, down: Stage, failed: Callable[[], None]) -> Stage:
        ctx = self.context
        headers_of_record: Any = ()

        def forward(key: Any, value: Any, timestamp: int) -> None:
            down(key, value, timestamp, headers_of_record)

        process = StreamTableJoinLogic(self.lookup, self.joiner, forward, left_join=self.left_join,
                                       dropped=self.dropped, key_selector=self.key_selector).process

        def global_join(key: Any, value: Any, timestamp: int, headers: Any) -> None:
            nonlocal headers_of_record
            headers_of_record = headers
            try:
                meta = ctx.metadata  # (topic, partition, offset) of the input record: for the drop log
                if meta is None:
                    process(key, value, timestamp)
                else:
                    process(key, value, timestamp, topic=meta[0], partition=meta[1], offset=meta[2])
            except BaseException:
                failed()
                raise
        return global_join
