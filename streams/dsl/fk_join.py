"""The foreign-key table-table join in the DSL (Kafka's KTableImpl.doJoinOnForeignKey).

Entry point, called by `KTable.join` / `KTable.left_join` when `foreign_key_extractor` is given:

    fk_join(this, other, joiner, foreign_key_extractor, *, left_join: bool, store=None) -> KTable

`this` is the left table (primary key K, value V), `other` the right one (keyed by the foreign
key), `foreign_key_extractor(value) -> foreign key`, `joiner(left_value, right_value)`, `left_join`
picks the left join (a left row without a right value, or with a None foreign key, joins with
None), `store` a name or a Materialized for the result: a named store materializes it
(queryable, old values downstream); a nameless Materialized only gives the result's serdes, as
Kafka's Materialized.with(...).

What it records, in Kafka's order and with Kafka's generated names (so `Topology.describe()` and
the internal topics read as Kafka's):
  left table -> KTABLE-FK-JOIN-SUBSCRIPTION-REGISTRATION-<n> (the send processor)
    -> KTABLE-SINK-<n> -> internal topic KTABLE-FK-JOIN-SUBSCRIPTION-REGISTRATION-<n>-topic
       (keyed by the foreign key: co-partitioned with the right table's source topic)
    -> KTABLE-SOURCE-<n> -> KTABLE-FK-JOIN-SUBSCRIPTION-PROCESSOR-<n> (receive, with the store
       KTABLE-FK-JOIN-SUBSCRIPTION-STATE-STORE-<n>) -> KTABLE-FK-JOIN-SUBSCRIPTION-PROCESSOR-<n>
       (the subscription join, reading the right table's store)
  right table -> KTABLE-FK-JOIN-SUBSCRIPTION-PROCESSOR-<n> (the foreign-table join, reading the
       subscription store)
  both joins -> KTABLE-SINK-<n> -> internal topic KTABLE-FK-JOIN-SUBSCRIPTION-RESPONSE-<n>-topic
       (partitioned back to the left record's partition: co-partitioned with the left table)
    -> KTABLE-SOURCE-<n> -> KTABLE-FK-JOIN-SUBSCRIPTION-RESPONSE-RESOLVER-PROCESSOR-<n> (reading
       the left table's store) -> KTABLE-FK-JOIN-OUTPUT-<n> (the result table; its store is the
       given one or KTABLE-FK-JOIN-OUTPUT-STATE-STORE-<n>, made only when asked for or needed)

Both tables are read by key through their value getters (streams/dsl/ops/value_getter.py): a
table's store (a source, an aggregation, a materialized filter/map_values, another join's
result, whose store is then made), or a filter/map_values without a store computed over its
parent's getter, as Kafka. Serdes: the foreign key's is the right
table's key serde, the hash uses the left table's value serde, the result's value serde comes
from `store=` (then `default.value.serde`), each falling back to the config's defaults.
"""

from __future__ import annotations

from typing import Any, Callable, Optional

from streams.dsl import naming as N
from streams.dsl.graph import (InternalTopicNode, LazyStoreBuilder, table_store, ProcessorGraphNode, ProcessorWithStoresNode,
                               StatefulProcessorNode)
from streams.dsl.joins.foreign_key import (CombinedKeySchema, SubscriptionResponseWrapperSerde,
                                           SubscriptionWrapperSerde, subscription_store_builder)
from streams.dsl.ktable import KTable
from streams.dsl.materialized import Materialized, as_materialized
from streams.dsl.ops.fk_join import (ForeignTableJoinProcessor, ResponseJoinProcessor, SubscriptionJoinProcessor,
                                     SubscriptionReceiveProcessor, SubscriptionSendProcessor, response_partitioner)
from streams.errors import TopologyError
from streams.processor import StreamPartitioner

__all__ = ["fk_join"]


def _key_only(partitioner: Optional[StreamPartitioner]) -> Optional[StreamPartitioner]:
    """A table's partitioner as the join's sink calls it: by key alone (Kafka passes a null
    value: the wrapper the sink writes is not the table's value)."""
    if partitioner is None:
        return None

    def by_key(topic: str, key: Any, _wrapper: Any, num_partitions: int) -> Optional[int]:
        return partitioner(topic, key, None, num_partitions)
    return by_key


def fk_join(this: KTable, other: KTable, joiner: Callable[[Any, Any], Any],
            foreign_key_extractor: Callable[[Any], Any], *, left_join: bool,
            store: str | Materialized | None = None, name: Optional[str] = None,
            partitioner: Optional[StreamPartitioner] = None,
            other_partitioner: Optional[StreamPartitioner] = None) -> KTable:
    """See the module doc. `name` (Kafka's TableJoined.as) names the join's processors, topics
    and subscription store `<name>-<part>`, as Kafka's suffixes (every generated name still used up).
    `partitioner` and `other_partitioner` (Kafka's TableJoined.with) partition the response and
    the subscription topics as this table's and the other table's topics are (see KTable.join)."""
    op = "KTable.left_join" if left_join else "KTable.join"
    name = N.processor_name(name, op)
    if not isinstance(other, KTable) or other._builder is not this._builder:
        raise TopologyError(f"{op} with a foreign_key_extractor needs a KTable of the same StreamsBuilder, "
                            f"got {other!r}")
    N.check_fn(joiner, f"{op} joiner")
    N.check_fn(foreign_key_extractor, f"{op} foreign_key_extractor")
    for what, fn in (("partitioner", partitioner), ("other_partitioner", other_partitioner)):
        if fn is not None:
            N.check_fn(fn, f"{op} {what}")
    mat = as_materialized(store, op)
    # both sides send old values: the left's tell the send processor which subscription to delete,
    # the right's are Kafka's (identical values need no fan-out)
    other._enable_send_old_values()
    this._enable_send_old_values()
    # both tables are read by key through their value getters (Kafka's valueGetterSupplier): a
    # table's store, or an unmaterialized filter/map_values computed over its parent's
    left_getter, right_getter = this._value_getter_supplier(op), other._value_getter_supplier(op)

    graph = this._builder._graph

    def new(prefix: str, suffix: str) -> str:  # Kafka's NamedInternal.suffixWithOrElseGet
        return graph.suffixed_or_new(name, suffix, prefix, op)
    subscription_topic = new(N.FK_SUBSCRIPTION_REGISTRATION, "-subscription-registration") + N.FK_TOPIC_SUFFIX
    send_name = new(N.FK_SUBSCRIPTION_REGISTRATION, "-subscription-registration-processor")
    subscription_sink = new(N.TABLE_SINK, "-subscription-registration-sink")
    subscription_source = new(N.TABLE_SOURCE, "-subscription-registration-source")
    subscription_store = new(N.FK_SUBSCRIPTION_STATE_STORE, "-subscription-store")
    receive_name = new(N.FK_SUBSCRIPTION_PROCESSOR, "-subscription-receive")
    subscription_join_name = new(N.FK_SUBSCRIPTION_PROCESSOR, "-subscription-join-foreign")
    foreign_join_name = new(N.FK_SUBSCRIPTION_PROCESSOR, "-foreign-join-subscription")
    response_topic = new(N.FK_SUBSCRIPTION_RESPONSE, "-subscription-response") + N.FK_TOPIC_SUFFIX
    response_sink = new(N.TABLE_SINK, "-subscription-response-sink")
    response_source = new(N.TABLE_SOURCE, "-subscription-response-source")
    resolver_name = new(N.FK_RESPONSE_RESOLVER, "-subscription-response-resolver")
    output_name = new(N.FK_JOIN_OUTPUT, "-result")
    # without a store name Kafka generates one even when the result stays unmaterialized (the
    # index is used up); a named store uses none (MaterializedInternal)
    name_of_store = N.store_name(graph, mat, N.FK_JOIN_OUTPUT)

    where = f"foreign-key join {output_name}"
    primary_key_serde = N.key_or_default(this.key_serde, f"{where} (left key)")
    left_value_serde = N.value_or_default(this.value_serde, f"{where} (left value)")
    foreign_key_serde = N.key_or_default(other.key_serde, f"{where} (right key)")
    foreign_value_serde = N.value_or_default(other.value_serde, f"{where} (right value)")
    subscription_serde = SubscriptionWrapperSerde(primary_key_serde)
    response_serde = SubscriptionResponseWrapperSerde(foreign_value_serde)
    key_schema = CombinedKeySchema(foreign_key_serde, primary_key_serde)

    graph.add(ProcessorGraphNode(send_name, (this.name,), lambda: SubscriptionSendProcessor(
        foreign_key_extractor, foreign_key_serde, left_value_serde, left_join=left_join)))
    graph.add(InternalTopicNode(
        subscription_source, (send_name,), subscription_topic, subscription_sink, foreign_key_serde,
        subscription_serde, _key_only(other_partitioner), copartition_with=other.name,
        deferred_serdes=N.deferred(primary_key_serde, left_value_serde)))
    # the app's store type only, as Kafka's SubscriptionStoreFactory (neither the join's
    # Materialized nor the builder's config)
    subscription_builder = LazyStoreBuilder(subscription_store, "key_value", lambda suppliers: subscription_store_builder(
        subscription_store, primary_key_serde, suppliers=suppliers), app_only=True)
    graph.add(StatefulProcessorNode(receive_name, (subscription_source,),
                                    lambda: SubscriptionReceiveProcessor(subscription_store, key_schema),
                                    store_builder=subscription_builder, store_name=subscription_store))
    graph.add(ProcessorWithStoresNode(subscription_join_name, (receive_name,),
                                      lambda: SubscriptionJoinProcessor(right_getter), right_getter.store_names))
    graph.add(ProcessorWithStoresNode(foreign_join_name, (other.name,),
                                      lambda: ForeignTableJoinProcessor(subscription_store, key_schema),
                                      (subscription_store,)))
    graph.add(InternalTopicNode(
        response_source, (subscription_join_name, foreign_join_name), response_topic, response_sink,
        primary_key_serde, response_serde,
        response_partitioner if partitioner is None else _key_only(partitioner), copartition_with=this.name,
        deferred_serdes=N.deferred(foreign_value_serde)))
    graph.add(ProcessorWithStoresNode(resolver_name, (response_source,), lambda: ResponseJoinProcessor(
        left_getter, left_value_serde, joiner, left_join=left_join), left_getter.store_names))

    result_store_where = f"table store {name_of_store!r}"
    store_key = N.key_or_default(mat.key_serde or this.key_serde, result_store_where)
    store_value = N.value_or_default(mat.value_serde, result_store_where)
    result_builder = table_store(mat, name_of_store, store_key, store_value, this._builder.dsl_store_suppliers)
    # Kafka's KTableSource as the result, a source table: materialized when its store is named (it
    # is then queryable) or a later operation forces it (old values, a read by key), else every
    # result forwarded as Change(value, None); asked when the topology is written
    table = KTable(this._builder, output_name, mat.key_serde or this.key_serde, mat.value_serde, mat.store_name,
                   store_name=name_of_store, source=True)
    graph.add(StatefulProcessorNode(output_name, (resolver_name,), lambda: table.source_processor(mat),
                                    store_builder=result_builder, store_name=name_of_store,
                                    deferred_serdes=N.deferred(store_key, store_value),
                                    store_wanted=table.source_materialized))
    return table

