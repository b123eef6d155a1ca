"""GlobalKTable (Kafka's GlobalKTableImpl) and the stream-global-table join.

A GlobalKTable is made by `StreamsBuilder.global_table(topic, ...)`: every instance keeps all
partitions of the topic in a global store (the global thread fills it; see
streams/runtime/global_thread.py). It has no operations of its own: streams join it with
`KStream.join(global_table, key_selector, joiner)` / `left_join(...)`, which dispatch to
`stream_global_join` here. No co-partitioning is needed: the lookup key comes from
`key_selector(key, value)` and every instance holds the whole table.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Optional

from streams.dsl import naming as N
from streams.dsl.graph import StreamGlobalTableJoinNode
from streams.dsl.ops.stream_join import StreamTableJoinProcessor
from streams.dsl.ops.value_getter import StoreValueGetter
from streams.errors import TopologyError

if TYPE_CHECKING:
    from streams.dsl.kstream import KStream, StreamsBuilder

__all__ = ["GlobalKTable", "stream_global_join"]


class GlobalKTable:
    """A table replicated in full on every instance. `store_name` names its global store (the
    generated `<topic>-STATE-STORE-<n>` unless a store was given); `queryable_store_name` is the
    name given by `store=`, None otherwise (Kafka's queryableStoreName); both can be queried with
    `app.store(name)` and the driver's store accessors."""

    def __init__(self, builder: "StreamsBuilder", store_name: str, queryable_store_name: Optional[str],
                 key_serde: Any, value_serde: Any) -> None:
        self._builder = builder
        self.store_name = store_name
        self.queryable_store_name = queryable_store_name
        self.key_serde = key_serde
        self.value_serde = value_serde

    def __repr__(self) -> str:
        return f"GlobalKTable(store={self.store_name!r})"


def stream_global_join(stream: "KStream", global_table: GlobalKTable, key_selector: Callable[[Any, Any], Any],
                       joiner: Callable[[Any, Any], Any], *, left: bool, name: Optional[str] = None) -> "KStream":
    """`stream` joined with `global_table` (Kafka's KStreamImpl.globalTableJoin): for each record,
    the global table's value of `key_selector(key, value)`; an inner join emits
    `joiner(value, table_value)` only when there is one, a left join always (None when absent).
    The result keeps the stream's key and timestamp; its value serde is unknown (from the
    config's default downstream), as in Kafka. The node is named KSTREAM-LEFTJOIN- for both
    joins, as Kafka names it, unless `name` (Kafka's Named) names it."""
    from streams.dsl.kstream import KStream

    op = "left_join" if left else "join"
    if not isinstance(stream, KStream):
        raise TopologyError(f"{op}: expected a KStream to join, got {stream!r}")
    if not isinstance(global_table, GlobalKTable) or global_table._builder is not stream._builder:
        raise TopologyError(f"{op} needs a GlobalKTable of the same StreamsBuilder, got {global_table!r}")
    N.check_fn(key_selector, f"{op} (key_selector)")
    N.check_fn(joiner, f"{op} (joiner)")
    graph = stream._builder._graph
    name = graph.name_or_new(name, N.LEFTJOIN)
    table = StoreValueGetter(global_table.store_name)  # every processor may read a global store
    graph.add(StreamGlobalTableJoinNode(name, (stream.name,), lambda: StreamTableJoinProcessor(
        table, joiner, left, key_selector=key_selector), relaxed_null_key_join=left))
    return KStream(stream._builder, name, stream.key_serde, None, stream._repartition_required)
