"""Cogrouped aggregations (Kafka's CogroupedStreamAggregateBuilder): one aggregate operator per
cogrouped stream, every one of them over the same store, each with its own aggregator, and a
merge node after them that forwards their table updates (Kafka's KTablePassThrough).

The per-stream operator is the one of the grouped stream's own aggregation, so a cogroup follows
every rule of it (None keys and values, timestamps, caching, late records): `AggregateProcessor`
(Kafka's KStreamAggregate) without windows, `WindowAggregateProcessor` (KStreamWindowAggregate,
KStreamSlidingWindowAggregate, KStreamSessionWindowAggregate) with them, always emitting on
window update as Kafka's cogroup does. A caching store forwards from its flush listener; the
operators share the store, so the listener is the last one installed, which forwards to the same
merge node as any of them would.
"""

from __future__ import annotations

from typing import Any, Callable, Optional

from streams.dsl.ops.aggregate import AggregateProcessor
from streams.dsl.ops.stateless import PassThroughProcessor
from streams.dsl.ops.windowed import WindowAggregateProcessor
from streams.dsl.windows import EmitStrategy
from streams.engine.stages import StageOperator

__all__ = ["cogroup_aggregate_operator", "CogroupMergeProcessor"]


def cogroup_aggregate_operator(windows: Any, store_name: str, caching: bool, initializer: Callable[[], Any],
                               aggregator: Callable[[Any, Any, Any], Any],
                               merger: Optional[Callable[[Any, Any, Any], Any]] = None) -> StageOperator:
    """The aggregate operator of one cogrouped stream (`windows` None: a key-value aggregate)."""
    if windows is None:
        return AggregateProcessor(store_name, caching, initializer, aggregator)
    return WindowAggregateProcessor(windows, store_name, caching, initializer, aggregator, merger,
                                    EmitStrategy.on_window_update())


class CogroupMergeProcessor(PassThroughProcessor):
    """COGROUPKSTREAM-MERGE-: every aggregate operator's Change(new, old), as they come."""
