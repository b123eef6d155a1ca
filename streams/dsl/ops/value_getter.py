"""How a join reads a table's current value (Kafka's KTableValueGetterSupplier / KTableValueGetter).

A supplier names the stores the getter reads (`store_names`: the join processor is connected to
them, which also puts the table and the join in one sub-topology) and, per task, returns
`getter(context) -> get(key) -> ValueAndTimestamp | None` for a processor connected to those
stores. A materialized table reads its own store; a filter or map_values that is not
materialized computes its value from its parent's getter; a table-table join that is not
materialized computes its result from both sides' getters (the join rule's own getter).
"""

from __future__ import annotations

from typing import Any, Callable, Optional

from state.timestamped import ValueAndTimestamp

__all__ = ["ValueGetterSupplier", "StoreValueGetter", "WindowStoreValueGetter", "SessionStoreValueGetter",
           "MappedValueGetter", "TransformedValueGetter", "JoinValueGetter", "UNKNOWN_TIMESTAMP"]

#: The timestamp of a value read from a store that keeps none (a grouped stream's plain
#: key-value store): any record timestamp is larger, so a join takes the record's.
UNKNOWN_TIMESTAMP = -1

Get = Callable[[Any], Optional[ValueAndTimestamp]]


class ValueGetterSupplier:
    store_names: tuple[str, ...] = ()

    def getter(self, context: Any) -> Get:
        raise NotImplementedError


class StoreValueGetter(ValueGetterSupplier):
    """A materialized table: its key-value store (timestamped, or plain: stamped UNKNOWN_TIMESTAMP)."""

    def __init__(self, store_name: str) -> None:
        self.store_names = (store_name,)

    def getter(self, context: Any) -> Get:
        get = context.get_state_store(self.store_names[0]).get
        vat = ValueAndTimestamp

        def value(key: Any) -> Optional[ValueAndTimestamp]:
            found = get(key)
            if found is None or type(found) is vat:
                return found
            return vat(found, UNKNOWN_TIMESTAMP)
        return value


class WindowStoreValueGetter(ValueGetterSupplier):
    """A time-windowed aggregation's table (keys are Windowed): its timestamped window store
    (Kafka's KStreamWindowAggregate view)."""

    def __init__(self, store_name: str) -> None:
        self.store_names = (store_name,)

    def getter(self, context: Any) -> Get:
        store = context.get_state_store(self.store_names[0])

        def value(windowed: Any) -> Optional[ValueAndTimestamp]:
            return store.fetch(windowed.key, windowed.window.start)
        return value


class SessionStoreValueGetter(ValueGetterSupplier):
    """A session-windowed aggregation's table: its session store, stamped with the session end
    (Kafka's KStreamSessionWindowAggregate view)."""

    def __init__(self, store_name: str) -> None:
        self.store_names = (store_name,)

    def getter(self, context: Any) -> Get:
        store = context.get_state_store(self.store_names[0])

        def value(windowed: Any) -> Optional[ValueAndTimestamp]:
            window = windowed.window
            return ValueAndTimestamp.make(store.fetch_session(windowed.key, window.start, window.end), window.end)
        return value


class MappedValueGetter(ValueGetterSupplier):
    """A filter or map_values that is not materialized: `compute(key, value)` (the operator's
    own, from `compute_factory()`) over the parent's value, keeping its timestamp (Kafka's
    KTableFilter / KTableMapValues views)."""

    def __init__(self, parent: ValueGetterSupplier, compute_factory: Callable[[], Callable[[Any, Any], Any]]) -> None:
        self.parent = parent
        self.compute_factory = compute_factory
        self.store_names = parent.store_names

    def getter(self, context: Any) -> Get:
        parent = self.parent.getter(context)
        compute = self.compute_factory()
        make = ValueAndTimestamp.make

        def value(key: Any) -> Optional[ValueAndTimestamp]:
            found = parent(key)
            if found is None:
                return None
            return make(compute(key, found.value), found.timestamp)
        return value


class TransformedValueGetter(ValueGetterSupplier):
    """A transform_values that is not materialized (Kafka's KTableTransformValuesGetter): a
    transformer of its own per getter, called for a missing key too (with None; the result
    stamped UNKNOWN_TIMESTAMP, None when the transformer gives None), in a record context of its
    own as Kafka's: no input record (record_metadata() None), no headers, the value's timestamp."""

    def __init__(self, parent: ValueGetterSupplier, transformer_supplier: Callable[[], Any], name: str) -> None:
        self.parent = parent
        self.transformer_supplier = transformer_supplier
        self.name = name
        self.store_names = parent.store_names

    def getter(self, context: Any) -> Get:
        from streams.dsl.ops.table import new_transformer

        parent = self.parent.getter(context)
        transform = new_transformer(self.transformer_supplier, context, self.name).transform
        make = ValueAndTimestamp.make

        def value(key: Any) -> Optional[ValueAndTimestamp]:
            found = parent(key)
            timestamp = UNKNOWN_TIMESTAMP if found is None else found.timestamp
            saved = context.metadata, context.headers, context.record_timestamp
            context.metadata, context.headers, context.record_timestamp = None, (), timestamp
            try:
                return make(transform(key, None if found is None else found.value), timestamp)
            finally:
                context.metadata, context.headers, context.record_timestamp = saved
        return value


class JoinValueGetter(ValueGetterSupplier):
    """A table-table join that is not materialized: the join rule's getter over both sides'."""

    def __init__(self, left: ValueGetterSupplier, right: ValueGetterSupplier, joiner: Callable[[Any, Any], Any],
                 join_type: str) -> None:
        self.left = left
        self.right = right
        self.joiner = joiner
        self.join_type = join_type
        self.store_names = tuple(dict.fromkeys(left.store_names + right.store_names))

    def getter(self, context: Any) -> Get:
        from streams.dsl.joins.table_table import TableTableJoinLogic

        logic = TableTableJoinLogic(self.left.getter(context), self.right.getter(context), self.joiner,
                                    _never_forwards, join_type=self.join_type, dropped=None)
        return logic.get


def _never_forwards(key: Any, change: Any, timestamp: int) -> None:
    raise AssertionError("a join value getter never forwards")
