"""Typed (outermost) store wrappers: apply key/value serdes around the bytes stores.

A serde is any object with `serialize(obj) -> bytes | None` and `deserialize(bytes | None) -> obj`
(duck-typed; state/ never imports streams/). A serde of None means bytes pass through unchanged.
Range bounds are serialized with the key serde, so ranges follow the serialized bytes' order.
"""

from __future__ import annotations

from functools import partial
from typing import Any, Callable, Iterable, Iterator, Optional

from state.errors import InvalidStoreArgumentError, StoreClosedError
from state.store import KeyValueIterator, KeyValueStore, WrappedStateStore

try:  # a typed window store's put and fetch_values in C (state/_window.c)
    from state._window import typed_fetch as _typed_fetch_c, typed_put as _typed_put_c
except ImportError:  # pragma: no cover - the accelerator is optional
    _typed_put_c = _typed_fetch_c = None


class _Serdes:
    """Serialize/deserialize helpers bound to one store (errors name the store)."""

    def __init__(self, store_name: str, key_serde, value_serde) -> None:
        for what, serde in (("key_serde", key_serde), ("value_serde", value_serde)):
            if serde is not None and not (hasattr(serde, "serialize") and hasattr(serde, "deserialize")):
                raise InvalidStoreArgumentError(
                    f"state store {store_name!r}: {what} must have serialize() and deserialize(), "
                    f"got {type(serde).__name__}"
                )
        self.store_name = store_name
        self.key_serde = key_serde
        self.value_serde = value_serde

    def key_to_bytes(self, key, what: str = "key") -> bytes:
        if key is None:
            raise InvalidStoreArgumentError(f"state store {self.store_name!r}: {what} must not be None")
        serde = self.key_serde
        if serde is None:
            return key
        try:
            data = serde.serialize(key)
        except Exception as exc:
            raise InvalidStoreArgumentError(
                f"state store {self.store_name!r}: cannot serialize {what} {key!r}: {exc}"
            ) from exc
        if data is None:
            raise InvalidStoreArgumentError(
                f"state store {self.store_name!r}: {what} {key!r} serialized to None"
            )
        return data

    def bound_to_bytes(self, key, what: str) -> Optional[bytes]:
        return None if key is None else self.key_to_bytes(key, what)

    def value_to_bytes(self, value) -> Optional[bytes]:
        if value is None:
            return None
        serde = self.value_serde
        if serde is None:
            return value
        try:
            return serde.serialize(value)
        except Exception as exc:
            raise InvalidStoreArgumentError(
                f"state store {self.store_name!r}: cannot serialize value {value!r}: {exc}"
            ) from exc

    def key_from_bytes(self, data: Optional[bytes]):
        serde = self.key_serde
        return data if serde is None or data is None else serde.deserialize(data)

    def value_from_bytes(self, data: Optional[bytes]):
        serde = self.value_serde
        return data if serde is None or data is None else serde.deserialize(data)

    def typed_pairs(self, inner: KeyValueIterator) -> Iterator:
        kd = self.key_from_bytes if self.key_serde is not None else None
        vd = self.value_from_bytes if self.value_serde is not None else None
        try:
            if kd is None and vd is None:
                yield from inner
            else:
                for k, v in inner:
                    yield (kd(k) if kd else k, vd(v) if vd else v)
        finally:
            inner.close()


def find_caching_layer(store):
    """The first wrapped store that has `set_flush_listener` (the caching layer), or None."""
    current = getattr(store, "wrapped", None)
    while current is not None:
        if hasattr(current, "set_flush_listener") and not isinstance(current, _TypedBase):
            return current
        current = getattr(current, "wrapped", None)
    return None


class _TypedBase(WrappedStateStore):
    def __init__(self, wrapped, key_serde=None, value_serde=None) -> None:
        super().__init__(wrapped)
        self.serdes = _Serdes(wrapped.name, key_serde, value_serde)

    @property
    def key_serde(self):
        return self.serdes.key_serde

    @property
    def value_serde(self):
        return self.serdes.value_serde


_NO_KEY = object()


class TypedKeyValueStore(_TypedBase, KeyValueStore):
    """The key-value store users and processors see: typed keys and values.

    get and put are the processors' hot path (read, update, write back the same key): the
    serialized form of the last key is remembered, so the put after a get does not serialize the
    key again. Only keys of immutable exact types (str, bytes, int) are remembered, and a hit
    needs the very same key object, so a remembered key cannot have changed since. The memo is
    one (key, bytes) tuple swapped atomically, so a reader on another thread cannot tear it.
    """

    def __init__(self, wrapped, key_serde=None, value_serde=None) -> None:
        super().__init__(wrapped, key_serde, value_serde)
        self._memo: tuple = (_NO_KEY, None)
        self._value_serialize = value_serde.serialize if value_serde is not None else None
        self._value_deserialize = value_serde.deserialize if value_serde is not None else None

    def _key_bytes(self, key) -> bytes:
        """key_to_bytes, remembering the result for an immutable key (see the class docstring)."""
        serde = self.serdes.key_serde
        if key is None or serde is None:
            data = self.serdes.key_to_bytes(key)  # the error for None; bytes pass through
        else:
            try:
                data = serde.serialize(key)
            except Exception as exc:
                raise InvalidStoreArgumentError(
                    f"state store {self.name!r}: cannot serialize key {key!r}: {exc}"
                ) from exc
            if data is None:
                raise InvalidStoreArgumentError(f"state store {self.name!r}: key {key!r} serialized to None")
        kind = type(key)
        if kind is str or kind is bytes or kind is int:
            self._memo = (key, data)
        return data

    def get(self, key):
        memo = self._memo
        data = self.wrapped.get(memo[1] if key is memo[0] else self._key_bytes(key))
        if data is None:
            return None
        deserialize = self._value_deserialize
        return data if deserialize is None else deserialize(data)

    def put(self, key, value, timestamp: Optional[int] = None) -> None:
        memo = self._memo
        key_bytes = memo[1] if key is memo[0] else self._key_bytes(key)
        serialize = self._value_serialize
        if value is not None and serialize is not None:
            try:
                value = serialize(value)
            except Exception as exc:
                raise InvalidStoreArgumentError(
                    f"state store {self.name!r}: cannot serialize value {value!r}: {exc}"
                ) from exc
        self.wrapped.put(key_bytes, value, timestamp)

    def put_if_absent(self, key, value, timestamp: Optional[int] = None):
        s = self.serdes
        return s.value_from_bytes(self.wrapped.put_if_absent(s.key_to_bytes(key), s.value_to_bytes(value), timestamp))

    def put_all(self, entries: Iterable[tuple], timestamp: Optional[int] = None) -> None:
        s = self.serdes
        self.wrapped.put_all([(s.key_to_bytes(k), s.value_to_bytes(v)) for k, v in entries], timestamp)

    def delete(self, key, timestamp: Optional[int] = None):
        s = self.serdes
        return s.value_from_bytes(self.wrapped.delete(s.key_to_bytes(key), timestamp))

    def _typed(self, inner: KeyValueIterator) -> KeyValueIterator:
        return KeyValueIterator(self.serdes.typed_pairs(inner), self.name)

    def range(self, key_from, key_to) -> KeyValueIterator:
        s = self.serdes
        return self._typed(self.wrapped.range(s.bound_to_bytes(key_from, "key_from"), s.bound_to_bytes(key_to, "key_to")))

    def reverse_range(self, key_from, key_to) -> KeyValueIterator:
        s = self.serdes
        return self._typed(
            self.wrapped.reverse_range(s.bound_to_bytes(key_from, "key_from"), s.bound_to_bytes(key_to, "key_to"))
        )

    def prefix_scan(self, prefix, prefix_serde=None) -> KeyValueIterator:
        """Keys whose serialized form starts with `prefix` serialized by `prefix_serde` (default: key serde)."""
        if prefix is None:
            raise InvalidStoreArgumentError(f"state store {self.name!r}: prefix must not be None")
        if prefix_serde is not None:
            data = prefix_serde.serialize(prefix)
        else:
            data = self.serdes.key_to_bytes(prefix, "prefix")
        return self._typed(self.wrapped.prefix_scan(data))

    def all(self) -> KeyValueIterator:
        return self._typed(self.wrapped.all())

    def reverse_all(self) -> KeyValueIterator:
        return self._typed(self.wrapped.reverse_all())

    def approximate_num_entries(self) -> int:
        return self.wrapped.approximate_num_entries()

    def set_flush_listener(self, listener: Optional[Callable[[Any, Any, Any, int], None]]) -> bool:
        """Install `listener(key, new_value, old_value, timestamp)` (typed) on the caching layer.

        Returns False (like Kafka's setFlushListener) when the store has no caching layer.
        """
        caching = find_caching_layer(self)
        if caching is None:
            return False
        if listener is None:
            return caching.set_flush_listener(None)
        s = self.serdes
        kd = s.key_serde.deserialize if s.key_serde is not None else None
        vd = s.value_serde.deserialize if s.value_serde is not None else None
        if kd is None and vd is None:
            return caching.set_flush_listener(listener)

        # Called for every entry written down: the serde calls are inlined (a key written down is
        # never None).
        def typed_listener(key: bytes, new: Optional[bytes], old: Optional[bytes], timestamp: int) -> None:
            if kd is not None:
                key = kd(key)
            if vd is not None:
                if new is not None:
                    new = vd(new)
                if old is not None:
                    old = vd(old)
            listener(key, new, old, timestamp)

        return caching.set_flush_listener(typed_listener)


def _typed_windowed(serdes: _Serdes, inner: KeyValueIterator) -> Iterator:
    """(Windowed(bytes key, window), bytes value) -> typed key and value."""
    from state.window import Windowed

    kd = serdes.key_from_bytes
    vd = serdes.value_from_bytes
    try:
        for windowed, value in inner:
            yield Windowed(kd(windowed.key), windowed.window), vd(value)
    finally:
        inner.close()


def _typed_timed(serdes: _Serdes, inner: KeyValueIterator) -> Iterator:
    vd = serdes.value_from_bytes
    try:
        for ts, value in inner:
            yield ts, vd(value)
    finally:
        inner.close()


class TimedFetch:
    """What a typed window store's `fetch(key, time_from, time_to)` returns when the bytes store
    read the range at once: (window start, value) pairs, each value decoded when reached. A
    KeyValueIterator in all but the class: a context manager, closed when exhausted or by
    close(); closing the store invalidates it (the next next() raises StoreClosedError)."""

    __slots__ = ("_found", "_at", "_codec")

    def __init__(self, found: list, codec: tuple) -> None:
        self._found: Optional[list] = found
        self._at = 0  # the next record's index; -1 once invalidated
        # (decode, checked, probe): the value serde's C form where it has one (None for bytes),
        # its own deserialize (the error for what `decode` refuses), and the store whose plain
        # is_open attribute says whether the bytes store is open (it has the store's name)
        self._codec = codec

    def __iter__(self) -> "TimedFetch":
        return self

    def __next__(self) -> tuple:
        found = self._found
        if found is not None:
            at = self._at
            decode, checked, probe = self._codec
            if at < len(found) and probe.is_open:
                self._at = at + 1
                window_start, data = found[at]
                if decode is None:
                    return window_start, data
                try:
                    return window_start, decode(data)
                except Exception:
                    return window_start, checked(data)
            self._found = None
            if at < len(found):  # the store closed while this was open
                self._at = -1
        if self._at < 0:
            raise StoreClosedError(
                f"iterator of state store {self._codec[2].name!r} was invalidated: the store was closed")
        raise StopIteration

    def close(self) -> None:
        self._found = None

    def invalidate(self) -> None:
        if self._found is not None:
            self._found = None
            self._at = -1

    @property
    def is_open(self) -> bool:
        return self._found is not None

    def __enter__(self) -> "TimedFetch":
        return self

    def __exit__(self, *exc) -> None:
        self._found = None


def _window_reader(store: Any) -> Any:
    """The bytes window store that single-key fetches may read directly (`fetch_values`):
    below the layers that only log writes (`reads_from`); None when a layer between reads
    otherwise (a cache) or the store offers no `fetch_values`."""
    while getattr(store, "reads_from", None) is not None:
        store = store.reads_from
    if callable(getattr(store, "fetch_values", None)) and callable(getattr(store, "open_probe", None)):
        return store
    return None


class TypedWindowStore(_TypedBase):
    """The window store users and processors see (see state.window.WindowStore for semantics).

    put and single-key fetch are a stream-stream join's path for every record: each serde is
    applied once, through its C form where it offers one (`serialize_unchecked` /
    `deserialize_unchecked`, see streams.serdes.unchecked_serializer) with the checked form
    raising the error for anything that refuses; a fetch with no cache below reads its range at
    once from the bytes store (`fetch_values`) and decodes each value when reached (TimedFetch)."""

    def __init__(self, wrapped, key_serde=None, value_serde=None) -> None:
        super().__init__(wrapped, key_serde, value_serde)
        self.window_size_ms = wrapped.window_size_ms
        self.retain_duplicates = wrapped.retain_duplicates
        s = self.serdes
        self._key_bytes = getattr(key_serde, "serialize_unchecked", None) or s.key_to_bytes
        self._value_bytes = getattr(value_serde, "serialize_unchecked", None) or s.value_to_bytes
        self._reader = None  # see _window_reader; found at init
        self._codec: tuple = ()  # TimedFetch's
        self._read_values = None  # the reader's fetch_values
        self._decode = None  # the value serde's C form (or its checked form; None: bytes)

    def init(self, context) -> None:
        super().init(context)
        reader = self._reader = _window_reader(self.wrapped)
        self._read_values = self._decode = None
        if reader is not None:
            value_serde = self.serdes.value_serde
            checked = value_serde.deserialize if value_serde is not None else None
            decode = getattr(value_serde, "deserialize_unchecked", None) or checked
            self._codec = (decode, checked, reader.open_probe())
            self._read_values = reader.fetch_values
            self._decode = decode
            cls = type(self)
            if (_typed_put_c is not None and cls.put is TypedWindowStore.put
                    and cls.fetch_values is TypedWindowStore.fetch_values):
                # a join's every record: put and fetch_values in C (state/_window.c), which hands
                # anything a serde's C form refuses to the methods below (a parity test)
                self.put = partial(_typed_put_c, TypedWindowStore.put, self, self._key_bytes, self._value_bytes,
                                   self.wrapped.put)
                self.fetch_values = partial(_typed_fetch_c, TypedWindowStore.fetch_values, self, self._key_bytes,
                                            reader.fetch_values, decode)

    def put(self, key, value, window_start_timestamp: int, timestamp: Optional[int] = None) -> None:
        try:
            key_bytes = self._key_bytes(key)
        except Exception:
            key_bytes = self.serdes.key_to_bytes(key)  # the typed error
        if value is not None:
            try:
                value = self._value_bytes(value)
            except Exception:
                value = self.serdes.value_to_bytes(value)
        self.wrapped.put(key_bytes, value, window_start_timestamp, timestamp)

    def fetch(self, key, time_from: int, time_to: Optional[int] = None):
        s = self.serdes
        if time_to is None:
            return s.value_from_bytes(self.wrapped.fetch(s.key_to_bytes(key), time_from, time_to))
        try:
            key_bytes = self._key_bytes(key)
        except Exception:
            key_bytes = s.key_to_bytes(key)
        reader = self._reader
        if reader is None:
            return KeyValueIterator(_typed_timed(s, self.wrapped.fetch(key_bytes, time_from, time_to)), self.name)
        return TimedFetch(reader.fetch_values(key_bytes, time_from, time_to), self._codec)

    def fetch_values(self, key, time_from: int, time_to: int) -> list:
        """`fetch(key, time_from, time_to)` read and decoded at once: a list of (window start,
        value) in time order, no iterator to close (a stream-stream join's every record). A
        value that does not decode raises here, before any is returned."""
        try:
            key_bytes = self._key_bytes(key)
        except Exception:
            key_bytes = self.serdes.key_to_bytes(key)
        read_values = self._read_values
        if read_values is None:
            with self.fetch(key, time_from, time_to) as it:
                return list(it)
        found = read_values(key_bytes, time_from, time_to)
        decode = self._decode
        if decode is None or not found:
            return found
        try:
            return [(window_start, decode(data)) for window_start, data in found]
        except Exception:
            # the checked form's error for the value the C form refused (TimedFetch's rule)
            return list(TimedFetch(found, self._codec))

    def backward_fetch(self, key, time_from: int, time_to: int) -> KeyValueIterator:
        s = self.serdes
        return KeyValueIterator(_typed_timed(s, self.wrapped.backward_fetch(s.key_to_bytes(key), time_from, time_to)), self.name)

    def _windowed(self, inner: KeyValueIterator) -> KeyValueIterator:
        return KeyValueIterator(_typed_windowed(self.serdes, inner), self.name)

    def fetch_range(self, key_from, key_to, time_from: int, time_to: int) -> KeyValueIterator:
        s = self.serdes
        return self._windowed(self.wrapped.fetch_range(
            s.bound_to_bytes(key_from, "key_from"), s.bound_to_bytes(key_to, "key_to"), time_from, time_to))

    def backward_fetch_range(self, key_from, key_to, time_from: int, time_to: int) -> KeyValueIterator:
        s = self.serdes
        return self._windowed(self.wrapped.backward_fetch_range(
            s.bound_to_bytes(key_from, "key_from"), s.bound_to_bytes(key_to, "key_to"), time_from, time_to))

    def fetch_all(self, time_from: int, time_to: int) -> KeyValueIterator:
        return self._windowed(self.wrapped.fetch_all(time_from, time_to))

    def backward_fetch_all(self, time_from: int, time_to: int) -> KeyValueIterator:
        return self._windowed(self.wrapped.backward_fetch_all(time_from, time_to))

    def all(self) -> KeyValueIterator:
        return self._windowed(self.wrapped.all())

    def backward_all(self) -> KeyValueIterator:
        return self._windowed(self.wrapped.backward_all())

    def set_flush_listener(self, listener) -> bool:
        """`listener(Windowed(key, window), new, old, timestamp)` (typed) on the caching layer;
        False when there is none (or it cannot dedup: retain_duplicates), so the caller forwards."""
        return _set_windowed_flush_listener(self, listener)


class TypedSessionStore(_TypedBase):
    """The session store users and processors see (see state.session.SessionStore for semantics)."""

    def put(self, key, session_start: int, session_end: int, value, timestamp: Optional[int] = None) -> None:
        s = self.serdes
        self.wrapped.put(s.key_to_bytes(key), session_start, session_end, s.value_to_bytes(value), timestamp)

    def remove(self, key, session_start: int, session_end: int, timestamp: Optional[int] = None) -> None:
        self.wrapped.remove(self.serdes.key_to_bytes(key), session_start, session_end, timestamp)

    def fetch_session(self, key, session_start: int, session_end: int):
        s = self.serdes
        return s.value_from_bytes(self.wrapped.fetch_session(s.key_to_bytes(key), session_start, session_end))

    def _windowed(self, inner: KeyValueIterator) -> KeyValueIterator:
        return KeyValueIterator(_typed_windowed(self.serdes, inner), self.name)

    def find_sessions(self, key, earliest_session_end_time: int, latest_session_start_time: int) -> KeyValueIterator:
        return self._windowed(self.wrapped.find_sessions(
            self.serdes.key_to_bytes(key), earliest_session_end_time, latest_session_start_time))

    def backward_find_sessions(self, key, earliest_session_end_time: int,
                               latest_session_start_time: int) -> KeyValueIterator:
        return self._windowed(self.wrapped.backward_find_sessions(
            self.serdes.key_to_bytes(key), earliest_session_end_time, latest_session_start_time))

    def find_sessions_range(self, key_from, key_to, earliest_session_end_time: int,
                            latest_session_start_time: int) -> KeyValueIterator:
        s = self.serdes
        return self._windowed(self.wrapped.find_sessions_range(
            s.bound_to_bytes(key_from, "key_from"), s.bound_to_bytes(key_to, "key_to"),
            earliest_session_end_time, latest_session_start_time))

    def backward_find_sessions_range(self, key_from, key_to, earliest_session_end_time: int,
                                     latest_session_start_time: int) -> KeyValueIterator:
        s = self.serdes
        return self._windowed(self.wrapped.backward_find_sessions_range(
            s.bound_to_bytes(key_from, "key_from"), s.bound_to_bytes(key_to, "key_to"),
            earliest_session_end_time, latest_session_start_time))

    def fetch_ended_sessions(self, earliest_session_end_time: int, latest_session_end_time: int) -> KeyValueIterator:
        return self._windowed(self.wrapped.fetch_ended_sessions(earliest_session_end_time, latest_session_end_time))

    def fetch(self, key) -> KeyValueIterator:
        return self._windowed(self.wrapped.fetch(self.serdes.key_to_bytes(key)))

    def backward_fetch(self, key) -> KeyValueIterator:
        return self._windowed(self.wrapped.backward_fetch(self.serdes.key_to_bytes(key)))

    def fetch_range(self, key_from, key_to) -> KeyValueIterator:
        s = self.serdes
        return self._windowed(self.wrapped.fetch_range(
            s.bound_to_bytes(key_from, "key_from"), s.bound_to_bytes(key_to, "key_to")))

    def backward_fetch_range(self, key_from, key_to) -> KeyValueIterator:
        s = self.serdes
        return self._windowed(self.wrapped.backward_fetch_range(
            s.bound_to_bytes(key_from, "key_from"), s.bound_to_bytes(key_to, "key_to")))

    def all(self) -> KeyValueIterator:
        return self._windowed(self.wrapped.all())

    def set_flush_listener(self, listener) -> bool:
        """`listener(Windowed(key, window), new, old, timestamp)` (typed) on the caching layer;
        False when there is none (or it cannot dedup: retain_duplicates), so the caller forwards."""
        return _set_windowed_flush_listener(self, listener)


def _set_windowed_flush_listener(store: _TypedBase, listener) -> bool:
    from state.window import Windowed

    caching = find_caching_layer(store)
    if caching is None:
        return False
    if listener is None:
        return caching.set_flush_listener(None)
    s = store.serdes

    def typed_listener(windowed, new: Optional[bytes], old: Optional[bytes], timestamp: int) -> None:
        listener(Windowed(s.key_from_bytes(windowed.key), windowed.window), s.value_from_bytes(new),
                 s.value_from_bytes(old), timestamp)

    return caching.set_flush_listener(typed_listener)
