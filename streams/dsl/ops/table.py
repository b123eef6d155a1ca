"""Table operators over a changelog of Change(new, old), each written once as a stage: Kafka's
KTableSource (builder.table, KStream.to_table), KTableFilter, KTableMapValues, KTableToStream,
KTableRepartitionMap (KTable.group_by) and KTableAggregate / KTableReduce (KGroupedTable).

A materialized table node keeps ValueAndTimestamp in a timestamped key-value store; with caching
it forwards from the cache's flush listener (Kafka's TimestampedTupleForwarder), else on every
update."""

from __future__ import annotations

import logging
import struct
from typing import Any, Callable, Optional

from state.timestamped import TIMESTAMPED_INT64, TimestampedKeyValueStore, ValueAndTimestamp, ValueAndTimestampSerde
from state.typed import find_caching_layer
from streams import serdes as _serdes
from streams.dsl import change as _change
from streams.dsl.change import Change
from streams.dsl.ops.table_count import TableCountBytes, count_add, count_subtract, takes_changes
from streams.engine.stages import Stage, StageOperator, drop, marking_failures
from streams.errors import ProcessingError
from streams.processor import ProcessorContext

try:  # forward_flushed's INT64 value decoding (streams/dsl/_change.c), None without the accelerator
    from streams.dsl._change import INT64_VALUE as _INT64_VALUE
except ImportError:  # pragma: no cover - the accelerator is optional
    _INT64_VALUE = None

log = logging.getLogger(__name__)

_new_tuple = tuple.__new__
_STAMP = struct.Struct(">q")  # the 8-byte timestamp in front of a timestamped value


def _plain(value: Any) -> Any:
    return value.value if isinstance(value, ValueAndTimestamp) else value


def attach_tuple_forwarder(operator: StageOperator, store: Any, caching: bool,
                           stamp: Optional[Callable[[Any, int], int]] = None) -> bool:
    """Kafka's TimestampedTupleForwarder: with a caching store, downstream gets Change(new, old)
    from the cache's flush listener and the operator must not forward itself (returns False);
    otherwise the operator forwards on every update (returns True). The flushed entry's timestamp
    goes downstream (the new aggregate's: operators put with it), or `stamp(key, timestamp)`
    (sessions: their end, Kafka's SessionCacheFlushListener), with the headers of the entry's
    record context (the caching store sets it while it flushes the entry)."""
    if not caching:
        return True
    context = operator.context
    scoped = getattr(context, "scoped", None)
    set_listener = getattr(store, "set_flush_listener", None)
    if scoped is None or set_listener is None:
        return True
    to_children = operator._to_children()
    caching_layer = find_caching_layer(store) if stamp is None else None
    access = TimestampedAccess(store) if caching_layer is not None else None
    if access is not None and access.value_of is not None:
        # the flushed bytes decoded here, to the plain values the typed listener's
        # ValueAndTimestamp would give (no ValueAndTimestamp made per entry)
        key_of, value_of = access.key_of, access.value_of
        # the loop below in C (streams/dsl/_change.c) where the serdes have unchecked functions:
        # it stops at a change it cannot decode, which the Python loop forwards (value or error)
        # (an INT64 value, without an unchecked deserializer, decoded there by _INT64_VALUE)
        value_de = access.inner_de if access.inner_de is not None else access.int64_de
        run = _change.forward_flushed if access.key_de_unchecked is not None and value_de is not None else None
        run_args = (access.key_de_unchecked, value_de, Change, to_children, context)

        def on_flush_many(changes: list) -> None:  # the caching store's batch form, scoped once
            # each change forwarded in its own record context (CachingStore.forward_in_contexts)
            i, n = 0, len(changes)
            if run is not None and type(changes) is not list:
                changes = list(changes)
            writer = context.metadata, context.headers
            try:
                while i < n:
                    if run is not None:
                        i = run(changes, i, *run_args)
                        if i >= n:
                            return
                    key, new_value, timestamp, old_value, context.metadata, headers = changes[i]
                    context.headers = headers
                    to_children(key_of(key), _new_tuple(Change, (
                        None if new_value is None else value_of(new_value),
                        None if old_value is None else value_of(old_value))), timestamp, headers)
                    i += 1
            finally:
                context.metadata, context.headers = writer

        def on_flush_bytes(key: bytes, new_value: Optional[bytes], old_value: Optional[bytes],
                           timestamp: int) -> None:  # in the entry's record context, set by the store
            on_flush_many(((key, new_value, timestamp, old_value, context.metadata, context.headers),))
        listener = scoped(on_flush_bytes)
        listener.flush_many = scoped(on_flush_many)
        return caching_layer.set_flush_listener(listener) is False

    if stamp is None:
        def on_flush(key: Any, new_value: Any, old_value: Any, timestamp: int) -> None:
            to_children(key, _new_tuple(Change, (_plain(new_value), _plain(old_value))), timestamp, context.headers)
    else:
        def on_flush(key: Any, new_value: Any, old_value: Any, timestamp: int) -> None:
            to_children(key, _new_tuple(Change, (_plain(new_value), _plain(old_value))), stamp(key, timestamp),
                        context.headers)
    return set_listener(scoped(on_flush)) is False


class TimestampedAccess:
    """A timestamped key-value store's reads and writes as (value, timestamp) pairs, the hot
    path of the table operators: below its typed layer where it can (the store's key serde's C
    serializer and the inner value serde's C functions applied here around the 8-byte
    timestamp, a timestamped INT64 (un)packed directly: no ValueAndTimestamp made), else
    through it. `get(key) -> (handle, value, timestamp)` (value None when absent) and
    `put(handle, value, timestamp)` (value None deletes); `replace(key, value, timestamp)` is
    put(get(key)[0], value, timestamp) returning the timestamp read (None when absent), the value
    read unused (a caching store's `replace`: one call). Below the typed layer `key_of(bytes)`
    and `value_of(bytes)` decode a stored key and value (the plain value of its
    ValueAndTimestamp); else `value_of` is None."""

    def __init__(self, store: Any) -> None:  # noqa: C901 - per-record closures, each in one frame on purpose
        self.store = store
        self.value_of: Optional[Callable[[bytes], Any]] = None
        # below the typed layer: the key serde's and the inner value serde's unchecked
        # deserializers where they have them (else None)
        self.key_de_unchecked: Optional[Callable[[bytes], Any]] = None
        self.inner_de: Optional[Callable[[bytes], Any]] = None
        self.int64_de: Any = None  # _change.forward_flushed's INT64 decoding, for an INT64 inner serde
        key_serde = getattr(store, "key_serde", None)
        vat_serde = getattr(store, "value_serde", None)
        inner = getattr(store, "inner_value_serde", None)
        below = getattr(store, "wrapped", None)
        if (not isinstance(store, TimestampedKeyValueStore) or key_serde is None or inner is None
                or not isinstance(vat_serde, ValueAndTimestampSerde) or below is None):
            self.get, self.put, self.replace = self._typed_get, self._typed_put, self._typed_replace
            return
        key_unchecked = _serdes.unchecked_serializer(key_serde) or key_serde.serialize
        key_to_bytes = store.serdes.key_to_bytes
        reader = below
        while getattr(reader, "reads_from", None) is not None:  # a layer that only logs: read below it
            reader = reader.reads_from
        below_get, below_put = reader.get, below.put
        serialize, deserialize = vat_serde.serialize, vat_serde.deserialize
        fixed = TIMESTAMPED_INT64 if inner is _serdes.INT64 else None
        inner_ser = _serdes.unchecked_serializer(inner)
        inner_de = _serdes.unchecked_deserializer(inner)
        key_de = key_serde.deserialize
        key_de_unchecked = _serdes.unchecked_deserializer(key_serde) or key_de
        pack_stamp, unpack_stamp = _STAMP.pack, _STAMP.unpack_from

        def value_of(data: bytes) -> Any:
            """The plain value of stored bytes: ValueAndTimestampSerde.deserialize(data).value."""
            if fixed is not None and len(data) == 16:
                return fixed.unpack(data)[1]
            if inner_de is not None and len(data) >= 8:
                try:
                    return inner_de(data[8:])
                except Exception:  # the serde's own call: its value or its error
                    pass
            return deserialize(data).value

        def key_of(data: bytes) -> Any:
            try:
                return key_de_unchecked(data)
            except Exception:
                return key_de(data)

        def key_bytes_of(key: Any) -> bytes:
            try:
                key_bytes = key_unchecked(key)
            except Exception:
                key_bytes = None
            if type(key_bytes) is not bytes:
                key_bytes = key_to_bytes(key)  # the typed store's result or its error
            return key_bytes

        def get(key: Any) -> tuple:
            key_bytes = key_bytes_of(key)
            data = below_get(key_bytes)
            if data is None:
                return key_bytes, None, None
            if fixed is not None and len(data) == 16:
                timestamp, value = fixed.unpack(data)
                return key_bytes, value, timestamp
            if inner_de is not None and len(data) >= 8:
                try:
                    return key_bytes, inner_de(data[8:]), unpack_stamp(data)[0]
                except Exception:  # the serde's own call below: its value or its error
                    pass
            vat = deserialize(data)
            return key_bytes, vat.value, vat.timestamp

        def encode(value: Any, timestamp: int) -> Optional[bytes]:
            if value is None:
                return None
            data = None
            try:
                if fixed is not None and type(value) is int:
                    data = fixed.pack(timestamp, value)
                elif inner_ser is not None:
                    raw = inner_ser(value)
                    if type(raw) is bytes:
                        data = pack_stamp(timestamp) + raw
            except Exception:  # out of range, not the serde's type: the serde's own call and error
                data = None
            if data is None:
                data = serialize(ValueAndTimestamp(value, timestamp))
            return data

        def put(key_bytes: bytes, value: Any, timestamp: int) -> None:
            below_put(key_bytes, encode(value, timestamp), timestamp)

        below_replace = getattr(below, "replace", None)
        if below_replace is not None:
            def replace(key: Any, value: Any, timestamp: int) -> Optional[int]:
                old = below_replace(key_bytes_of(key), encode(value, timestamp), timestamp)
                return None if old is None else unpack_stamp(old)[0]
        else:
            def replace(key: Any, value: Any, timestamp: int) -> Optional[int]:
                key_bytes, _old, old_timestamp = get(key)
                put(key_bytes, value, timestamp)
                return old_timestamp
        self.get, self.put, self.replace = get, put, replace
        self.key_of, self.value_of = key_of, value_of
        self.key_de_unchecked = _serdes.unchecked_deserializer(key_serde)
        self.inner_de = inner_de
        self.int64_de = _INT64_VALUE if fixed is not None else None

    def _typed_get(self, key: Any) -> tuple:
        vat = self.store.get(key)
        return (key, None, None) if vat is None else (key, vat.value, vat.timestamp)

    def _typed_put(self, key: Any, value: Any, timestamp: int) -> None:
        self.store.put(key, None if value is None else ValueAndTimestamp(value, timestamp), timestamp)

    def _typed_replace(self, key: Any, value: Any, timestamp: int) -> Optional[int]:
        key, _old, old_timestamp = self._typed_get(key)
        self._typed_put(key, value, timestamp)
        return old_timestamp


def aggregate_change(key: Any, new: Any, old: Any, agg: Any, agg_timestamp: Optional[int], timestamp: int,
                     add: Callable[[Any, Any, Any], Any], subtract: Callable[[Any, Any, Any], Any]) -> tuple:
    """Kafka's KTableAggregate rule for one Change(new, old) of a group: the subtractor removes
    the old value from the aggregate first (when both are there), then the adder adds the new one
    (`add` starts from None when there is no aggregate: the initializer's, or reduce's first value).
    Returns (new aggregate, its timestamp): max(record, previous aggregate) when the previous
    aggregate took part (KIP-258), else the record's."""
    new_timestamp = timestamp
    result = agg
    if old is not None and agg is not None:
        result = subtract(key, old, agg)
        new_timestamp = agg_timestamp if agg_timestamp > timestamp else timestamp
    if new is not None:
        result = add(key, new, result)
        if agg is not None:
            new_timestamp = agg_timestamp if agg_timestamp > timestamp else timestamp
    return result, new_timestamp


def _check_change(value: Any, op: str) -> Change:
    if type(value) is not Change and not isinstance(value, Change):
        raise ProcessingError(f"{op} expected a table update (Change), got {value!r}")
    return value


def _skip_none_key(where: str, dropped: Any) -> None:
    """A table source drops a record with a None key, counted in dropped-records and logged (Kafka)."""
    log.warning("table source %s: skipping a record with a None key", where)
    if dropped is not None:
        dropped.count += 1


class TableSourceProcessor(StageOperator):
    """builder.table / KStream.to_table (Kafka's KTableSource): puts each record into the
    timestamped store and forwards Change(new, old); a None key is dropped, counted in
    dropped-records and logged (Kafka), a None value deletes the key."""

    def __init__(self, store_name: str, caching: bool, materialized: bool = True) -> None:
        self.store_name = store_name
        self.caching = caching
        self.materialized = materialized  # False: no store (Kafka's unmaterialized KTableSource)

    def init(self, context: ProcessorContext) -> None:
        super().init(context)
        self.dropped = getattr(context, "dropped_records_sensor", None)
        if not self.materialized:
            self.store = None
            return
        self.store = context.get_state_store(self.store_name)
        self.forward_on_update = attach_tuple_forwarder(self, self.store, self.caching)

    def stage(self, down: Stage, failed: Callable[[], None]) -> Stage:
        if self.store is None:
            return self._unmaterialized_stage(down, failed)
        name, forward_on_update = self.store_name, self.forward_on_update
        store = self.store
        access = TimestampedAccess(store)
        get, put, replace = access.get, access.put, access.replace
        dropped = self.dropped
        context = self.context

        def out_of_order(old_timestamp: int, timestamp: int) -> None:
            """Kafka's WARN for an update older than the table's value (applied all the same)."""
            meta = getattr(context, "metadata", None)  # (topic, partition, offset) of the record
            where = ("topic=[%s] partition=[%d] offset=[%d]" % meta if meta is not None
                     else "Topic, partition and offset not known")
            log.warning("Detected out-of-order KTable update for %s, old timestamp=[%d] new timestamp=[%d]. %s.",
                        name, old_timestamp, timestamp, where)

        def table_source(key: Any, value: Any, timestamp: int, headers: Any) -> None:
            if key is None:
                _skip_none_key(name, dropped)
                return
            try:
                if down is drop:  # no downstream (a global table): no Change to build
                    # the old value's timestamp only for the WARN, and not while the global task
                    # bootstraps: Kafka restores a global table's store without its processor
                    if not context.bootstrapping:
                        old = store.get(key)
                        if old is not None and timestamp < old.timestamp:
                            out_of_order(old.timestamp, timestamp)
                    store.put(key, None if value is None else ValueAndTimestamp(value, timestamp), timestamp)
                    return
                if not forward_on_update:  # the cache's flush forwards: the read is for its timestamp
                    old_timestamp = replace(key, value, timestamp)
                    if old_timestamp is not None and timestamp < old_timestamp:
                        out_of_order(old_timestamp, timestamp)
                    return
                handle, old, old_timestamp = get(key)
                if old_timestamp is not None and timestamp < old_timestamp:
                    out_of_order(old_timestamp, timestamp)
                put(handle, value, timestamp)
                down(key, _new_tuple(Change, (value, old)), timestamp, headers)
            except BaseException:
                failed()
                raise
        return table_source

    def _unmaterialized_stage(self, down: Stage, failed: Callable[[], None]) -> Stage:
        """Kafka's KTableSource without a store: every record forwarded as Change(new, None)."""
        dropped, name = self.dropped, self.store_name

        def table_source(key: Any, value: Any, timestamp: int, headers: Any) -> None:
            if key is None:
                _skip_none_key(name, dropped)
                return
            try:
                down(key, _new_tuple(Change, (value, None)), timestamp, headers)
            except BaseException:
                failed()
                raise
        return table_source


class OptionallyMaterialized(StageOperator):
    """A table node with its own timestamped store when materialized (`store_name`), forwarding
    on every update or, with a caching store, from the cache's flush listener
    (`forward_on_update` says which); `send_old_values()` says whether downstream wants old
    values."""

    def __init__(self, store_name: Optional[str], caching: bool, send_old_values: Callable[[], bool]) -> None:
        self.store_name = store_name
        self.caching = caching
        self.send_old_values = send_old_values

    def init(self, context: ProcessorContext) -> None:
        super().init(context)
        self.store = None if self.store_name is None else context.get_state_store(self.store_name)
        self.forward_on_update = (True if self.store is None
                                  else attach_tuple_forwarder(self, self.store, self.caching))


class _TableValueOperator(OptionallyMaterialized):
    """A table node computing its value from the parent's: optionally materialized. Its old
    value is its own store's when materialized, else computed from the parent's (Kafka's
    KTableFilter / KTableMapValues computeOldValue)."""

    def __init__(self, compute: Callable[[Any, Any], Any], store_name: Optional[str], caching: bool,
                 send_old_values: Callable[[], bool]) -> None:
        super().__init__(store_name, caching, send_old_values)
        self.compute = compute

    def stage(self, down: Stage, failed: Callable[[], None]) -> Stage:
        compute, store, forward_on_update = self.compute, self.store, self.forward_on_update
        send_old = self.send_old_values()
        skip_empty = self.skip_when_both_none
        op = type(self).__name__

        def table_value(key: Any, value: Any, timestamp: int, headers: Any) -> None:
            try:
                change = _check_change(value, op)
                new = compute(key, change.new_value)
                if not send_old:
                    old = None
                elif store is None:
                    old = compute(key, change.old_value)
                else:
                    old = _plain(store.get(key))
                if skip_empty and send_old and new is None and old is None:
                    return  # Kafka: nothing changed downstream
                if store is not None:
                    store.put(key, None if new is None else ValueAndTimestamp(new, timestamp), timestamp)
                if forward_on_update:
                    down(key, _new_tuple(Change, (new, old)), timestamp, headers)
            except BaseException:
                failed()
                raise
        return table_value


class TableFilterProcessor(_TableValueOperator):
    """KTable.filter / filter_not (Kafka's KTableFilter): a value failing the predicate becomes
    a tombstone."""

    skip_when_both_none = True

    def __init__(self, predicate: Callable[[Any, Any], bool], negate: bool, store_name: Optional[str],
                 caching: bool, send_old_values: Callable[[], bool]) -> None:
        def compute(key: Any, value: Any) -> Any:
            if value is None:
                return None
            return value if bool(predicate(key, value)) is not negate else None
        super().__init__(compute, store_name, caching, send_old_values)


class TableMapValuesProcessor(_TableValueOperator):
    """KTable.map_values (Kafka's KTableMapValues): a tombstone stays a tombstone."""

    skip_when_both_none = False

    def __init__(self, mapper: Callable[[Any], Any], store_name: Optional[str], caching: bool,
                 send_old_values: Callable[[], bool]) -> None:
        def compute(key: Any, value: Any) -> Any:
            return None if value is None else mapper(value)
        super().__init__(compute, store_name, caching, send_old_values)


class TableTransformValuesProcessor(_TableValueOperator):
    """KTable.transform_values (Kafka's KTableTransformValues): each task's own transformer
    (`transformer_supplier()`, given a context that refuses forward) computes
    `transform(key, value)` for the new value and, when downstream wants old values and the
    table has no store, for the old one; it is called for a tombstone's None too."""

    skip_when_both_none = False

    def __init__(self, transformer_supplier: Callable[[], Any], store_name: Optional[str], caching: bool,
                 send_old_values: Callable[[], bool]) -> None:
        super().__init__(None, store_name, caching, send_old_values)  # type: ignore[arg-type]
        self.transformer_supplier = transformer_supplier
        self.transformer: Any = None

    def init(self, context: ProcessorContext) -> None:
        super().init(context)
        node = getattr(context, "current_node", None)  # the node being initialised: this one
        self.transformer = new_transformer(self.transformer_supplier, context, getattr(node, "name", "?"))
        self.compute = self.transformer.transform

    def close(self) -> None:
        close = getattr(self.transformer, "close", None)
        if close is not None:
            close()


def new_transformer(supplier: Callable[[], Any], context: ProcessorContext, name: str) -> Any:
    """A value transformer for one task (or one getter), initialised with a context that refuses
    forward (Kafka's ForwardingDisabledProcessorContext)."""
    from streams.fixed_key import ForwardingDisabledContext

    transformer = supplier()
    if not callable(getattr(transformer, "transform", None)):
        raise ProcessingError(f"KTable.transform_values {name!r}: the supplier returned {transformer!r}, which has "
                              "no transform(key, value) method")
    init = getattr(transformer, "init", None)
    if init is not None:
        init(ForwardingDisabledContext(context, name))
    return transformer


class ToStreamProcessor(StageOperator):
    """KTable.to_stream (Kafka's KTableToStream): the new value, with the key optionally mapped
    by key_value_mapper(key, new_value)."""

    def __init__(self, mapper: Optional[Callable[[Any, Any], Any]] = None) -> None:
        self.mapper = mapper

    def stage(self, down: Stage, failed: Callable[[], None]) -> Stage:
        mapper = self.mapper

        def to_stream(key: Any, value: Any, timestamp: int, headers: Any) -> None:
            try:
                if type(value) is not Change and not isinstance(value, Change):
                    raise ProcessingError(f"KTable.to_stream expected a table update (Change), got {value!r}")
                new = value.new_value
                down(key if mapper is None else mapper(key, new), new, timestamp, headers)
            except BaseException:
                failed()
                raise
        return to_stream


class TableSelectProcessor(StageOperator):
    """KTable.group_by (Kafka's KTableRepartitionMap): maps the old and the new value to (new key,
    value). Under one key both go in one Change(new, old) (KIP-904: the subtractor runs before the
    adder); under different keys the old pair goes first as Change(None, old), then the new pair
    as Change(new, None). A pair with a None key or value is skipped."""

    def __init__(self, mapper: Callable[[Any, Any], Any]) -> None:
        self.mapper = mapper

    def stage(self, down: Stage, failed: Callable[[], None]) -> Stage:
        mapper = self.mapper

        def select(key: Any, value: Any, timestamp: int, headers: Any) -> None:
            try:
                if type(value) is not Change:
                    value = _check_change(value, "KTable.group_by")
                new, old = value
                new_pair = None if new is None else mapper(key, new)
                old_pair = None if old is None else mapper(key, old)
                new_ok = new_pair is not None and new_pair[0] is not None and new_pair[1] is not None
                if old_pair is not None and old_pair[0] is not None and old_pair[1] is not None:
                    if new_ok and new_pair[0] == old_pair[0]:
                        down(new_pair[0], _new_tuple(Change, (new_pair[1], old_pair[1])), timestamp, headers)
                        return
                    down(old_pair[0], _new_tuple(Change, (None, old_pair[1])), timestamp, headers)
                if new_ok:
                    down(new_pair[0], _new_tuple(Change, (new_pair[1], None)), timestamp, headers)
            except BaseException:
                failed()
                raise
        return select


class TableAggregateProcessor(StageOperator):
    """KGroupedTable.aggregate / reduce / count (Kafka's KTableAggregate and KTableReduce): the
    subtractor removes the old value first, then the adder adds the new one; the store holds
    ValueAndTimestamp and downstream gets Change(new aggregate, old aggregate).

    `add(key, value, aggregate_or_None)` and `subtract(key, value, aggregate)` are the adapted
    user functions (reduce starts from the value itself, aggregate from the initializer).

    A count (streams/dsl/ops/table_count.py's adder and subtractor) over a caching store of INT64
    counts also offers the engine's bulk capability `key_bytes_run = (key_serde, run,
    takes_changes)`: `run(keys, timestamps, clock, messages)` is the stage for each serialized
    key of a run of records whose values are Change bytes `takes_changes` accepts the source's
    serde for, messages[i] the key's consumed record (its flag byte and record context)."""

    def __init__(self, store_name: str, caching: bool, add: Callable[[Any, Any, Any], Any],
                 subtract: Callable[[Any, Any, Any], Any]) -> None:
        self.store_name = store_name
        self.caching = caching
        self.add = add
        self.subtract = subtract

    def init(self, context: ProcessorContext) -> None:
        super().init(context)
        self.store = context.get_state_store(self.store_name)
        self.forward_on_update = attach_tuple_forwarder(self, self.store, self.caching)
        # the count in bulk only where the cache's flush forwards (its flush listener decodes
        # the bytes it writes as it decodes the typed layer's)
        self._count_bytes = (TableCountBytes.of(self.store) if not self.forward_on_update
                             and self.add is count_add and self.subtract is count_subtract else None)

    def stage(self, down: Stage, failed: Callable[[], None]) -> Stage:
        add, subtract, forward_on_update = self.add, self.subtract, self.forward_on_update
        access = TimestampedAccess(self.store)
        get, put = access.get, access.put

        def table_aggregate(key: Any, value: Any, timestamp: int, headers: Any) -> None:
            try:
                if key is None:
                    raise ProcessingError("a grouped table aggregation got a record with a None key")
                if type(value) is not Change:
                    value = _check_change(value, "KGroupedTable aggregation")
                handle, old_agg, old_timestamp = get(key)
                agg, new_ts = aggregate_change(key, value[0], value[1], old_agg, old_timestamp, timestamp, add,
                                               subtract)
                # a deleted aggregate's entry keeps the record's timestamp (Kafka's record context);
                # downstream still gets the aggregate's (uncached: Kafka's forward)
                put(handle, agg, timestamp if agg is None else new_ts)
                if forward_on_update:
                    down(key, _new_tuple(Change, (agg, old_agg)), new_ts, headers)
            except BaseException:
                failed()
                raise

        count_bytes = self._count_bytes
        if count_bytes is not None:
            table_aggregate.key_bytes_run = (  # type: ignore[attr-defined]
                count_bytes.key_serde, marking_failures(count_bytes.run, failed), takes_changes)
        return table_aggregate
