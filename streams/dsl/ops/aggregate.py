"""Aggregations of a grouped stream (Kafka's KStreamAggregate): aggregate with an initializer and
an adder; count() is aggregate with `count_initializer` and `count_adder`, reduce() with
`reduce_initializer` and `reduce_adder`."""

from __future__ import annotations

import logging
import struct
from typing import Any, Callable, Optional

from state.timestamped import TIMESTAMP_SIZE, TimestampedKeyValueStore, ValueAndTimestamp
from streams import serdes as _serdes
from streams.dsl.change import Change
from streams.engine.stages import Stage, StageOperator, marking_failures
from streams.processor import ProcessorContext

log = logging.getLogger(__name__)

_new_tuple = tuple.__new__  # Change(...) without NamedTuple's Python-level __new__


def count_initializer() -> int:
    return 0


def count_adder(key: Any, value: Any, aggregate: int) -> int:
    return aggregate + 1


# The adder's capability the aggregate asks for: it adds this constant, whatever the key and the
# value, so a run of keys is all it needs (the bulk capability below), and over INT64 bytes the
# caching layer may add it itself.
count_adder.constant_increment = 1  # type: ignore[attr-defined]

NO_AGGREGATE = object()  # reduce's "no aggregate yet": its initializer's value, never forwarded


def reduce_initializer() -> Any:
    return NO_AGGREGATE


def reduce_adder(reducer: Callable[[Any, Any], Any]) -> Callable[[Any, Any, Any], Any]:
    """Kafka's KStreamReduce as an aggregate: the first value is the aggregate as is."""
    def add(key: Any, value: Any, aggregate: Any) -> Any:
        return value if aggregate is NO_AGGREGATE else reducer(aggregate, value)
    return add


class AggregateProcessor(StageOperator):
    """KGroupedStream.aggregate() (and count(), as aggregate with `count_initializer` and
    `count_adder`, as Kafka's GroupedStreamAggregateBuilder builds it): the per-key aggregate
    `adder(key, value, old or initializer())` in a timestamped KV store, stamped with
    max(record timestamp, previous aggregate's timestamp) (Kafka's KIP-258 stores), which is
    also the timestamp the result is forwarded with. A record with a None key or a None
    value is skipped, counted in dropped-records and logged at WARN (Kafka's KStreamAggregate and
    KStreamReduce), on every route: the bulk run below only ever gets records with a value.

    With caching, downstream sees the aggregate when the cache flushes or evicts the key (one
    record per key per commit); without caching, on every update, as Change(new, old), where a
    new key's old value is the initializer's value the aggregate started from (Kafka: a table
    grouping the aggregates subtracts it, a suppression buffer counts its bytes).

    Over a typed store whose next layer updates bytes in place (a caching layer's `update` and
    `update_many`) and an adder with a `constant_increment`, the update is done at the bytes
    level, and the stage offers the bulk capability `key_bytes_run = (key_serde, run)`: `run(keys,
    timestamps, clock, messages)` is the stage for each serialized non-None key of a record with a
    non-None value, in order, messages[i] the key's consumed message (its record context; the
    value plays no further part)."""

    def __init__(self, store_name: str, caching: bool, initializer: Callable[[], Any],
                 adder: Callable[[Any, Any, Any], Any]) -> None:
        self.store_name = store_name
        self.caching = caching
        self.initializer = initializer
        self.adder = adder

    def init(self, context: ProcessorContext) -> None:
        super().init(context)
        store = context.get_state_store(self.store_name)
        self.store = store
        self.dropped = getattr(context, "dropped_records_sensor", None)
        self.forward_on_update = True
        self._bulk: Optional[_BytesIncrement] = None
        if not self.caching:
            return
        scoped = getattr(context, "scoped", None)
        set_listener = getattr(store, "set_flush_listener", None)
        if scoped is None or set_listener is None:
            return
        to_children = self._to_children()
        increment = getattr(self.adder, "constant_increment", None)
        bulk = _BytesIncrement.of(store, increment) if increment is not None else None
        if bulk is not None:
            # the typed layer's serdes applied here, at the bytes level
            bulk.attach_forwarding(to_children, context)
            self.forward_on_update = False
            self._bulk = bulk
            return

        def on_flush(key: Any, new_value: Any, old_value: Any, timestamp: int) -> None:
            # in the entry's record context, set by the caching store
            to_children(key, _new_tuple(Change, (None if new_value is None else new_value.value,
                                                 None if old_value is None else old_value.value)), timestamp,
                        context.headers)
        # a store without a cache layer says so by returning False
        self.forward_on_update = set_listener(scoped(on_flush)) is False

    def stage(self, down: Stage, failed: Callable[[], None]) -> Stage:
        store = self.store
        get, put = store.get, store.put
        initializer, adder = self.initializer, self.adder
        forward_on_update = self.forward_on_update
        skip = self._skipper()

        def aggregate(key: Any, value: Any, timestamp: int, headers: Any) -> None:
            if key is None or value is None:
                skip()
                return
            try:
                old = get(key)
                if old is None:
                    # a new key's aggregate starts from the initializer's value, which is also the
                    # old value forwarded with it (Kafka's KStreamAggregate; KStreamReduce's is None)
                    old = initializer()
                    new = adder(key, value, old)
                    if old is NO_AGGREGATE:
                        old = None
                else:
                    if old.timestamp > timestamp:  # KIP-258: the newest timestamp the aggregate has seen
                        timestamp = old.timestamp
                    old = old.value
                    new = adder(key, value, old)
                put(key, _new_tuple(ValueAndTimestamp, (new, timestamp)), timestamp)
                if forward_on_update:
                    down(key, _new_tuple(Change, (new, old)), timestamp, headers)
            except BaseException:
                failed()
                raise

        bulk = self._bulk
        if bulk is None:
            return aggregate
        key_bytes_of, update, add = bulk.key_unchecked, bulk.update, bulk.add

        def aggregate_bytes(key: Any, value: Any, timestamp: int, headers: Any) -> None:
            if key is None or value is None:
                skip()
                return
            try:
                key_bytes = key_bytes_of(key)
            except Exception:
                key_bytes = None
            if key_bytes is None:  # through the typed store: the same update, or its own error
                aggregate(key, value, timestamp, headers)
                return
            try:
                update(key_bytes, add, timestamp)
            except BaseException:
                failed()
                raise

        update_many = bulk.update_many

        def run(keys: list, timestamps: list, clock: Any, messages: list) -> None:
            update_many(keys, add, timestamps, clock, messages)
        aggregate_bytes.key_bytes_run = (bulk.key_serde, marking_failures(run, failed))  # type: ignore[attr-defined]
        return aggregate_bytes

    def _skipper(self) -> Callable[[], None]:
        """Skip a record with a None key or value: Kafka's WARN and a dropped-records count."""
        dropped, name, context = self.dropped, self.store_name, self.context

        def skip() -> None:
            metadata = getattr(context, "metadata", None) or ("?", -1, -1)
            log.warning("Skipping record due to null key or value. store=[%s] topic=[%s] partition=[%d] offset=[%d]",
                        name, metadata[0], metadata[1], metadata[2])
            if dropped is not None:
                dropped.count += 1
        return skip


_INT64 = struct.Struct(">q")
_STAMP = TIMESTAMP_SIZE
_INT64_SERDE = _serdes.INT64


def add_to_stamped(old: bytes, timestamp: int, increment: Any, serde: Any = _INT64_SERDE) -> tuple[bytes, int]:
    """A timestamped store's aggregate (8-byte timestamp + value in `serde`'s bytes) with
    `increment` added, stamped max(its own, the record's) timestamps (KIP-258: the newest the
    aggregate has seen): (bytes, that timestamp). For INT64 its own format first; any oddity
    (size, overflow) goes through the serde, its value or its error."""
    stamp = _INT64.unpack_from(old)[0]
    if stamp > timestamp:
        timestamp = stamp
    if serde is _INT64_SERDE:
        try:
            return _INT64.pack(timestamp) + _INT64.pack(_INT64.unpack(old[_STAMP:])[0] + increment), timestamp
        except Exception:
            pass
    return _INT64.pack(timestamp) + serde.serialize(serde.deserialize(old[_STAMP:]) + increment), timestamp


class _BytesIncrement:
    """An aggregate adding a constant, done at the bytes level on the layer below a timestamped
    store (`of(store, increment)`, else None): `update(key_bytes, add, timestamp)` is one
    read-modify-write of the serialized aggregate (8-byte timestamp + value, the timestamp
    max(stored, record)), `update_many` the same for a run of keys, and
    `attach_forwarding(down, context)` installs the flush listener, the typed layer's serdes
    applied here (C-level where the serde offers it)."""

    @classmethod
    def of(cls, store: Any, increment: int) -> Optional["_BytesIncrement"]:
        if (not isinstance(store, TimestampedKeyValueStore) or store.key_serde is None
                or store.inner_value_serde is None):
            return None
        below = store.wrapped
        if not all(callable(getattr(below, m, None)) for m in ("update", "update_many", "set_flush_listener")):
            return None
        return cls(store, below, increment)

    def __init__(self, store: TimestampedKeyValueStore, below: Any, increment: int) -> None:
        self.below = below
        key_serde, value_serde = store.key_serde, store.inner_value_serde
        self.key_serde, self.value_serde = key_serde, value_serde
        self.key_unchecked = _serdes.unchecked_serializer(key_serde) or key_serde.serialize
        self.update, self.update_many = below.update, below.update_many
        first = value_serde.serialize(increment)
        pack_stamp = _INT64.pack

        def add(old: Optional[bytes], timestamp: int) -> tuple[bytes, int]:
            if old is None:
                return pack_stamp(timestamp) + first, timestamp
            return add_to_stamped(old, timestamp, increment, value_serde)
        # the layer below may add one to a timestamped big-endian int64 itself (see update_many)
        add.int64_increment = value_serde is _serdes.INT64 and increment == 1  # type: ignore[attr-defined]
        add.timestamped = True  # type: ignore[attr-defined]
        self.add = add

    def attach_forwarding(self, down: Stage, context: Any) -> None:
        """The flush listener: decode the bytes, emit the Change to `down` with the headers of
        the entry's record context (the caching store sets it), run by `context.scoped` as the
        aggregate's node."""
        key_deserialize = self.key_serde.deserialize
        key_of = _serdes.unchecked_deserializer(self.key_serde) or key_deserialize
        value_deserialize = self.value_serde.deserialize
        # values are 8-byte timestamp + value; the entry's timestamp is the aggregate's
        if self.value_serde is _serdes.INT64:
            unpack_from = _INT64.unpack_from

            def on_flush(key: bytes, new: Optional[bytes], old: Optional[bytes], timestamp: int) -> None:
                try:  # C-level decoding; on any error the serdes' own calls decide
                    key = key_of(key)
                    new = None if new is None else unpack_from(new, _STAMP)[0]
                    old = None if old is None else unpack_from(old, _STAMP)[0]
                except Exception:
                    key = key_deserialize(key) if type(key) is bytes else key
                    new = None if new is None or type(new) is int else value_deserialize(new[_STAMP:])
                    old = None if old is None or type(old) is int else value_deserialize(old[_STAMP:])
                down(key, _new_tuple(Change, (new, old)), timestamp, context.headers)
        else:
            def on_flush(key: bytes, new: Optional[bytes], old: Optional[bytes], timestamp: int) -> None:
                try:
                    key = key_of(key)
                except Exception:
                    key = key_deserialize(key)
                down(key, _new_tuple(Change, (None if new is None else value_deserialize(new[_STAMP:]),
                                              None if old is None else value_deserialize(old[_STAMP:]))),
                     timestamp, context.headers)
        self.below.set_flush_listener(context.scoped(on_flush))
