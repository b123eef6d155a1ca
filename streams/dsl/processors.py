"""Processors behind the DSL operations (one class per operation, as in Kafka's KStream* classes)."""

from __future__ import annotations

import logging
import struct
from typing import Any, Callable, NamedTuple, Optional

from state.caching import CachingKeyValueStore
from state.typed import TypedKeyValueStore

from streams import serdes as _serdes
from streams.errors import StreamsException
from streams.processor import Processor, ProcessorContext, Record

log = logging.getLogger(__name__)

# Record copies are built inline on the per-record paths below (Record.with_key/with_value
# without the method call): same fields, no validation needed.
_new = object.__new__
_new_tuple = tuple.__new__  # Change(...) without NamedTuple's Python-level __new__


class Change(NamedTuple):
    """A table update flowing between KTable nodes: the new value and the previous one."""

    new_value: Any
    old_value: Any


# A stage of a fused chain (TaskEngine.fused_entry): stage(key, value, timestamp, headers).
Stage = Callable[[Any, Any, int, Any], None]


class _Forwarding(Processor):
    def init(self, context: ProcessorContext) -> None:
        self.context = context
        # a forward bound to this node (fast path to a single child) when the context offers one
        node_forward = getattr(context, "node_forward", None)
        self.forward = node_forward() if node_forward is not None else context.forward


class MapValuesProcessor(_Forwarding):
    def __init__(self, fn: Callable[[Any], Any]) -> None:
        self.fn = fn

    def process(self, record: Record) -> None:
        self.forward(record.with_value(self.fn(record.value)))

    def fuse(self, down: Optional[Stage], failed: Callable[[], None]) -> Optional[Stage]:
        if down is None:  # no child: nothing to fuse with
            return None
        fn = self.fn

        def map_values(key: Any, value: Any, timestamp: int, headers: Any) -> None:
            try:
                down(key, fn(value), timestamp, headers)
            except BaseException:
                failed()
                raise
        return map_values


class FlatMapValuesProcessor(_Forwarding):
    def __init__(self, fn: Callable[[Any], Any]) -> None:
        self.fn = fn

    def process(self, record: Record) -> None:
        forward, with_value = self.forward, record.with_value
        for value in self.fn(record.value):
            forward(with_value(value))

    def fuse(self, down: Optional[Stage], failed: Callable[[], None]) -> Optional[Stage]:
        if down is None:  # no child: nothing to fuse with
            return None
        fn = self.fn
        with_values_from = getattr(down, "with_values_from", None)
        if with_values_from is not None:  # the next stage loops over fn's values itself: one call less each
            return with_values_from(fn, failed)

        def flat_map_values(key: Any, value: Any, timestamp: int, headers: Any) -> None:
            try:
                for v in fn(value):
                    down(key, v, timestamp, headers)
            except BaseException:
                failed()
                raise
        return flat_map_values


class FilterProcessor(_Forwarding):
    def __init__(self, predicate: Callable[[Any, Any], bool], negate: bool = False) -> None:
        self.predicate = predicate
        self.negate = negate

    def process(self, record: Record) -> None:
        if bool(self.predicate(record.key, record.value)) is not self.negate:
            self.forward(record)

    def fuse(self, down: Optional[Stage], failed: Callable[[], None]) -> Optional[Stage]:
        if down is None:  # no child: nothing to fuse with
            return None
        predicate, negate = self.predicate, self.negate

        def filter_(key: Any, value: Any, timestamp: int, headers: Any) -> None:
            try:
                if bool(predicate(key, value)) is not negate:
                    down(key, value, timestamp, headers)
            except BaseException:
                failed()
                raise
        return filter_


class PeekProcessor(_Forwarding):
    def __init__(self, action: Callable[[Any, Any], None], forward: bool = True) -> None:
        self.action = action
        self.forwards = forward

    def process(self, record: Record) -> None:
        self.action(record.key, record.value)
        if self.forwards:
            self.forward(record)

    def fuse(self, down: Optional[Stage], failed: Callable[[], None]) -> Optional[Stage]:
        if down is None:  # no child: nothing to fuse with
            return None
        action, forwards = self.action, self.forwards

        def peek(key: Any, value: Any, timestamp: int, headers: Any) -> None:
            try:
                action(key, value)
                if forwards:
                    down(key, value, timestamp, headers)
            except BaseException:
                failed()
                raise
        return peek


class KeySelectProcessor(_Forwarding):
    def __init__(self, fn: Callable[[Any, Any], Any]) -> None:
        self.fn = fn

    def process(self, record: Record) -> None:
        self.forward(record.with_key(self.fn(record.key, record.value)))

    def fuse(self, down: Optional[Stage], failed: Callable[[], None]) -> Optional[Stage]:
        if down is None:  # no child: nothing to fuse with
            return None
        fn = self.fn
        with_key_selector = getattr(down, "with_key_selector", None)
        if with_key_selector is not None:  # the next stage selects the key itself: one call less
            return with_key_selector(fn, failed)

        def key_select(key: Any, value: Any, timestamp: int, headers: Any) -> None:
            try:
                down(fn(key, value), value, timestamp, headers)
            except BaseException:
                failed()
                raise
        return key_select


class NullKeyFilterProcessor(_Forwarding):
    """Drops null-key records before a repartition topic (they cannot be grouped)."""

    null_key_filter = True  # a fused chain lets the sink after it drop the None keys itself

    def process(self, record: Record) -> None:
        if record.key is not None:
            self.forward(record)

    def fuse(self, down: Optional[Stage], failed: Callable[[], None]) -> Optional[Stage]:
        if down is None:  # no child: nothing to fuse with
            return None
        def null_key_filter(key: Any, value: Any, timestamp: int, headers: Any) -> None:
            if key is not None:  # only `down` can fail here, and it names itself
                down(key, value, timestamp, headers)
        return null_key_filter


class CountProcessor(_Forwarding):
    """KGroupedStream.count(): increments a per-key count in a KV store.

    With caching, downstream sees the count when the cache flushes or evicts the key (one record
    per key per commit); without caching, on every update. Records with a None key are dropped.
    """

    def __init__(self, store_name: str, caching: bool) -> None:
        self.store_name = store_name
        self.caching = caching

    def init(self, context: ProcessorContext) -> None:
        super().init(context)
        store = context.get_state_store(self.store_name)
        self.store = store
        self.get = store.get
        self.put = store.put
        self.forward_on_update = True
        self._update = None
        self._fast: Optional[_CachedCount] = None
        if self.caching:
            set_listener = getattr(store, "set_flush_listener", None)
            scoped = getattr(context, "scoped", None)
            fast = _CachedCount.of(store) if scoped is not None else None
            if fast is not None:
                # typed -> caching: count and listen at the bytes level, the serdes applied here
                fast.attach_forwarding(self.forward, scoped)
                self.forward_on_update = False
                self._update = fast.counter
                self._fast = fast
            elif set_listener is not None and scoped is not None:
                attached = set_listener(scoped(self._on_flush))
                # a store without a cache layer says so by returning False
                self.forward_on_update = attached is False

    def fuse(self, down: Optional[Stage], failed: Callable[[], None]) -> Optional[Stage]:
        """With the cache feeding downstream, counting needs no context: fused (a record's
        only effect is the store update; flushes forward through the listener's own scope)."""
        fast = self._fast
        if fast is None:
            return None
        get, put, name = self.get, self.put, self.store_name
        key_bytes_of, update, add_one = fast.key_unchecked, fast.update, fast.add_one

        def count(key: Any, value: Any, timestamp: int, headers: Any) -> None:
            if key is None:
                log.debug("count %s: dropping a record with a None key", name)
                return
            try:
                try:
                    key_bytes = key_bytes_of(key)
                except Exception:
                    key_bytes = None
                if key_bytes is not None:
                    update(key_bytes, add_one, timestamp)  # _CachedCount.counter, inlined
                else:  # through the typed store: the same count, or its own error
                    old = get(key)
                    put(key, 1 if old is None else old + 1, timestamp)
            except BaseException:
                failed()
                raise

        update_many = fast.inner.update_many

        def count_key_bytes(keys: list, timestamps: list, clock: Any) -> None:
            try:
                update_many(keys, add_one, timestamps, clock)
            except BaseException:
                failed()
                raise
        # For a caller holding the serialized keys of a run of non-None keys: `run(keys,
        # timestamps, clock)` is `count(key, ...)` for each, in order (the value and headers
        # play no part in a count). See TaskEngine.process_batch.
        count.key_bytes_run = (fast.key_serde, count_key_bytes)  # type: ignore[attr-defined]
        return count

    def _on_flush(self, key: Any, new_value: Any, old_value: Any, timestamp: int) -> None:
        rec = _new(Record)  # Record._make and Change(...) inlined: once per flushed entry
        rec.key = key
        rec.value = _new_tuple(Change, (new_value, old_value))
        rec.timestamp = timestamp
        rec.headers = ()
        self.forward(rec)

    def process(self, record: Record) -> None:
        key = record.key
        if key is None:
            log.debug("count %s: dropping a record with a None key", self.store_name)
            return
        update = self._update
        if update is not None and update(key, record.timestamp):
            return
        old = self.get(key)
        new = 1 if old is None else old + 1
        self.put(key, new, record.timestamp)
        if self.forward_on_update:
            self.forward(Record._make(key, Change(new, old), record.timestamp, record.headers))


_INT64 = struct.Struct(">q")


class _CachedCount:
    """A count's store access over the plain typed -> caching stack (`of(store)`, else None):
    `counter(key, timestamp)` adds one with the caching layer's `update` (one read-modify-write)
    and `attach_forwarding(forward, scoped)` installs the count's flush listener on the caching
    layer, the typed layer's serdes applied here (C-level where the serde offers it). `counter` returns False,
    having done nothing, when the key does not serialize, so the caller's store.get/put raises
    the typed layer's own error."""

    @classmethod
    def of(cls, store: Any) -> Optional["_CachedCount"]:
        if type(store) is not TypedKeyValueStore:
            return None
        inner = store.wrapped
        if (not isinstance(inner, CachingKeyValueStore) or store.key_serde is None
                or store.value_serde is None):
            return None
        return cls(store, inner)

    def __init__(self, store: TypedKeyValueStore, inner: CachingKeyValueStore) -> None:
        self.inner = inner
        key_serde, value_serde = store.key_serde, store.value_serde
        self.key_serde, self.value_serde = key_serde, value_serde
        key_serialize = key_serde.serialize
        key_unchecked = _serdes.unchecked_serializer(key_serde) or key_serialize
        value_serialize = value_serde.serialize
        value_deserialize = value_serde.deserialize
        update = inner.update
        one = value_serialize(1)

        if value_serde is _serdes.INT64:
            pack, unpack = _INT64.pack, _INT64.unpack

            def add_one(old: Optional[bytes]) -> bytes:
                if old is None:
                    return one
                try:  # INT64's own format; any oddity (size, overflow) goes through the serde
                    return pack(unpack(old)[0] + 1)
                except Exception:
                    return value_serialize(value_deserialize(old) + 1)
            add_one.int64_increment = True  # the caching layer may do the first line itself
        else:
            def add_one(old: Optional[bytes]) -> bytes:
                return one if old is None else value_serialize(value_deserialize(old) + 1)

        def counter(key: Any, timestamp: int) -> bool:
            try:
                key_bytes = key_unchecked(key)
            except Exception:
                if key_unchecked is key_serialize:
                    return False
                try:
                    key_bytes = key_serialize(key)
                except Exception:
                    return False
            if key_bytes is None:
                return False
            update(key_bytes, add_one, timestamp)
            return True
        self.counter = counter
        self.key_unchecked, self.update, self.add_one = key_unchecked, update, add_one

    def attach_forwarding(self, forward: Callable[[Record], None],
                          scoped: Callable[[Callable[..., Any]], Callable[..., Any]]) -> None:
        """The count's flush listener (CountProcessor._on_flush over the typed listener) as one
        function: decode the bytes, `forward` the Change, run by `scoped` as the count node."""
        key_deserialize = self.key_serde.deserialize
        key_of = _serdes.unchecked_deserializer(self.key_serde) or key_deserialize
        value_deserialize = self.value_serde.deserialize
        if self.value_serde is _serdes.INT64:
            unpack = _INT64.unpack

            def on_flush(key: bytes, new: Optional[bytes], old: Optional[bytes], timestamp: int) -> None:
                try:  # C-level decoding; on any error the serdes' own calls decide
                    key = key_of(key)
                    new = None if new is None else unpack(new)[0]
                    old = None if old is None else unpack(old)[0]
                except Exception:
                    key = key_deserialize(key) if type(key) is bytes else key
                    new = None if new is None or type(new) is int else value_deserialize(new)
                    old = None if old is None or type(old) is int else value_deserialize(old)
                rec = _new(Record)
                rec.key = key
                rec.value = _new_tuple(Change, (new, old))
                rec.timestamp = timestamp
                rec.headers = ()
                forward(rec)
        else:
            def on_flush(key: bytes, new: Optional[bytes], old: Optional[bytes], timestamp: int) -> None:
                try:
                    key = key_of(key)
                except Exception:
                    key = key_deserialize(key)
                rec = _new(Record)
                rec.key = key
                rec.value = _new_tuple(Change, (None if new is None else value_deserialize(new),
                                                None if old is None else value_deserialize(old)))
                rec.timestamp = timestamp
                rec.headers = ()
                forward(rec)
        self.inner.set_flush_listener(scoped(on_flush))


class ToStreamProcessor(_Forwarding):
    def process(self, record: Record) -> None:
        value = record.value
        if type(value) is not Change and not isinstance(value, Change):
            raise StreamsException(f"KTable.to_stream expected a table update (Change), got {value!r}")
        self.forward(record.with_value(value.new_value))

    def fuse(self, down: Optional[Stage], failed: Callable[[], None]) -> Optional[Stage]:
        if down is None:  # no child: nothing to fuse with
            return None
        def to_stream(key: Any, value: Any, timestamp: int, headers: Any) -> None:
            try:
                if type(value) is not Change and not isinstance(value, Change):
                    raise StreamsException(f"KTable.to_stream expected a table update (Change), got {value!r}")
                down(key, value.new_value, timestamp, headers)
            except BaseException:
                failed()
                raise
        return to_stream
