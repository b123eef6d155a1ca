"""Window stores, segmented by time with retention (Kafka's RocksDBWindowStore / InMemoryWindowStore).

Layout. One RocksDB instance per store, with each record keyed
`segment id (8 bytes BE) + key + window start (8 bytes BE) + sequence number (4 bytes BE)`,
where segment id = window start // segment interval and the interval is
max(retention / 2, 60 s) like Kafka. Dropping expired segments is one `delete_range` over their
prefixes. Kafka instead opens one RocksDB per segment; a single instance was chosen because
(1) memory is bounded per store rather than per segment (each RocksDB has its own memtables:
3 x 16 MiB), (2) a restored changelog batch spanning several segments is still ONE WriteBatch,
and (3) there are no segment directories to open, list or delete. The cost is that disk space of
dropped segments comes back on compaction rather than immediately.
The in-memory store uses the same keys on the in-memory sorted store, and reads across keys in
Kafka's in-memory order (by start, then key: each segment's windows sorted as they are read).
`TimeOrderedWindowStore` keys its records `segment id + window start + key + sequence number`
instead (Kafka's time-ordered store, for final results on window close): scans by start, then key.

Changelog key = the stored key without the segment prefix: Kafka's WindowKeySchema
(`key + 8-byte BE window start + 4-byte BE sequence number`); restore decodes it.
With `retain_duplicates`, each put gets the next sequence number (so equal keys and windows are
all kept) and a None value is ignored, as in Kafka; otherwise the sequence number is 0 and a put
overwrites.

Retention. `observed_stream_time` is the largest window start seen (puts and restores). Segments
older than segment_id(observed - retention) are dropped; a put into an expired segment is skipped
(logged at debug); fetches never return windows starting at or before observed - retention.
The observed stream time is persisted (in a metadata key) on flush and recovered on open.
"""

from __future__ import annotations

import logging
import pathlib
import struct
from abc import abstractmethod
from functools import partial
from typing import Any, Callable, Iterator, Mapping, NamedTuple, Optional

from state.errors import InvalidStoreArgumentError, StateError, StoreClosedError
from state.memory_kv import InMemoryKeyValueStore
from state.rocksdb_kv import RocksDBKeyValueStore, key_after
from state.store import KeyValueIterator, StateStore, StoreContext, check_key, check_value

log = logging.getLogger(__name__)

try:  # the C form of fetch_values' loop over a RocksDB engine, and of the plain store's put and fetch
    from state._window import fetch_window as _fetch_window_c, put_window as _put_window_c, scan_key as _scan_key_c
except ImportError:  # pragma: no cover - the accelerator is optional
    _scan_key_c = _put_window_c = _fetch_window_c = None

_I64 = struct.Struct(">q")
_I32 = struct.Struct(">i")
_pack_i64 = _I64.pack
_pack_window_suffix = struct.Struct(">qi").pack  # window start + sequence number, one C call
TIMESTAMP_SIZE = 8
SEQNUM_SIZE = 4
SEGMENT_PREFIX_SIZE = 8
MAX_TIMESTAMP = (1 << 63) - 1
# Metadata lives after every segment (segment ids are non-negative, so their first byte is < 0x80).
META_PREFIX = b"\xff" * SEGMENT_PREFIX_SIZE
META_OBSERVED_STREAM_TIME = META_PREFIX + b"observed_stream_time"


class Window(NamedTuple):
    """A window's bounds in ms (the one definition; streams.dsl re-exports it). Time windows are
    [start, end); sliding and session windows include both ends."""

    start: int
    end: int


class Windowed(NamedTuple):
    """A key with the window (or session) it belongs to; equal and hashable by value."""

    key: Any
    window: Window

    def __str__(self) -> str:
        # Kafka's Windowed.toString
        return f"[{self.key}@{self.window.start}/{self.window.end}]"


# ------------------------------------------------------------------------------ key schemas
def window_changelog_key(key: bytes, window_start: int, seqnum: int) -> bytes:
    """Kafka's WindowKeySchema.toStoreKeyBinary: key + 8-byte BE start + 4-byte BE seqnum."""
    return key + _pack_window_suffix(window_start, seqnum)


def decode_window_changelog_key(data: bytes) -> tuple[bytes, int, int]:
    """(key, window_start, seqnum) of a window changelog key."""
    if len(data) < TIMESTAMP_SIZE + SEQNUM_SIZE:
        raise StateError(f"window changelog key too short ({len(data)} bytes): {data!r}")
    n = len(data) - TIMESTAMP_SIZE - SEQNUM_SIZE
    return data[:n], _I64.unpack_from(data, n)[0], _I32.unpack_from(data, n + TIMESTAMP_SIZE)[0]


def check_timestamp(store_name: str, what: str, value) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise InvalidStoreArgumentError(
            f"state store {store_name!r}: {what} must be a non-negative int, got {value!r}"
        )
    return value


# ------------------------------------------------------------------------------ segments
class SegmentedBytesStore(StateStore):
    """Segment bookkeeping and retention shared by window and session stores.

    Subclasses set `_time_suffix` (bytes from the segment timestamp to the end of a changelog key). The engine is a RocksDB or
    in-memory bytes key-value store used privately (it is not registered with the context).
    """

    layout = "segmented-v1"
    #: a write at or before observed stream time - retention is skipped whatever its segment
    #: (Kafka's in-memory stores); else only a write into a dropped segment (its RocksDB ones)
    expires_by_time = False

    def __init__(self, name: str, *, retention_ms: int, segment_interval_ms: int, persistent: bool) -> None:
        if not name or not isinstance(name, str):
            raise StateError(f"store name must be a non-empty string, got {name!r}")
        check_timestamp(name, "retention_ms", retention_ms)
        if not isinstance(segment_interval_ms, int) or segment_interval_ms <= 0:
            raise InvalidStoreArgumentError(
                f"state store {name!r}: segment_interval_ms must be a positive int, got {segment_interval_ms!r}"
            )
        self.name = name
        self.persistent = persistent
        self.retention_ms = retention_ms
        self.segment_interval_ms = segment_interval_ms
        self._engine = RocksDBKeyValueStore(name, pending_writes=False) if persistent else InMemoryKeyValueStore(name)
        self._engine.layout = self.layout
        # fetch_values' C loop reads the engine's iterator directly (RocksDB only)
        self._scan_iterator = getattr(self._engine, "scan_iterator", None) if _scan_key_c is not None else None
        self.observed_stream_time = -1
        self._min_live_segment = 0
        self._max_segment = -1
        self.expired_records = 0

    # ------------------------------------------------------------------ lifecycle
    def init(self, context: StoreContext) -> None:
        self.open(context.store_dir(self.name) if self.persistent else None, getattr(context, "config", None))
        context.register(self, self.restore_batch, logged=False)

    def open(self, path=None, configs: Optional[Mapping[str, Any]] = None) -> None:
        """`configs`: the app's config (a persistent store's rocksdb.config.setter, see
        RocksDBKeyValueStore.open)."""
        if self.persistent:
            if path is None:
                raise StateError(f"state store {self.name!r}: a persistent store needs a directory")
            self._engine.open(pathlib.Path(path), configs)
        else:
            self._engine.open()
        meta = self._engine.get(META_OBSERVED_STREAM_TIME)
        self.observed_stream_time = _I64.unpack(meta)[0] if meta is not None else -1
        self._min_live_segment = 0
        last = next(self._engine.raw_range(None, META_PREFIX, reverse=True), None)
        self._max_segment = _I64.unpack_from(last[0])[0] if last is not None else -1
        self._drop_expired_segments()

    @property
    def is_open(self) -> bool:
        return self._engine.is_open

    def open_probe(self) -> Any:
        """An object named as this store whose plain `is_open` attribute is this store's (a
        hot path tests it without a property call): the engine."""
        return self._engine

    def _check(self) -> None:
        if not self._engine.is_open:
            raise StoreClosedError(f"state store {self.name!r} is not open")

    def flush(self) -> None:
        self._check()
        if self.observed_stream_time >= 0:
            self._engine.put(META_OBSERVED_STREAM_TIME, _I64.pack(self.observed_stream_time))
        self._engine.flush()

    def close(self, dirty: bool = False) -> None:
        if self._engine.is_open and self.persistent and self.observed_stream_time >= 0:
            self._engine.put(META_OBSERVED_STREAM_TIME, _I64.pack(self.observed_stream_time))
        self._engine.close()

    # ------------------------------------------------------------------ segments
    def segment_id(self, timestamp: int) -> int:
        return timestamp // self.segment_interval_ms

    def _segment_prefix(self, segment_id: int) -> bytes:
        return _I64.pack(segment_id)

    def _drop_expired_segments(self) -> None:
        if self.observed_stream_time < 0:
            return
        min_live = self.segment_id(max(self.observed_stream_time - self.retention_ms, 0))
        if min_live > self._min_live_segment:
            self._engine.delete_range(self._segment_prefix(self._min_live_segment), self._segment_prefix(min_live))
            log.debug("state store %s: dropped segments [%d, %d)", self.name, self._min_live_segment, min_live)
            self._min_live_segment = min_live

    @property
    def min_live_segment(self) -> int:
        return self._min_live_segment

    def live_segment_ids(self) -> list[int]:
        """Segment ids that currently hold data (for tests and tools)."""
        self._check()
        ids = []
        seg = self._min_live_segment
        while seg <= self._max_segment:
            prefix = self._segment_prefix(seg)
            first = next(self._engine.raw_range(prefix, self._segment_prefix(seg + 1)), None)
            if first is not None:
                ids.append(seg)
            seg += 1
        return ids

    def actual_from(self, time_from: int) -> int:
        """The earliest time a fetch from `time_from` may return: nothing at or before the
        store's observed stream time minus its retention (a caching layer above asks too)."""
        return max(time_from, self.observed_stream_time - self.retention_ms + 1)

    def _segments(self, time_from: int, time_to: int, reverse: bool) -> range:
        low = max(self.segment_id(time_from), self._min_live_segment)
        high = min(self.segment_id(time_to), self._max_segment)
        return range(high, low - 1, -1) if reverse else range(low, high + 1)

    def _observe(self, segment_time: int) -> int:
        """Observe the time of a write (dropping the segments it expires); its segment, or -1
        (counted) if that has expired."""
        interval = self.segment_interval_ms
        if segment_time > self.observed_stream_time:
            self.observed_stream_time = segment_time
            # most records move time within the live segments: nothing to drop
            if (segment_time - self.retention_ms) // interval > self._min_live_segment:
                self._drop_expired_segments()
        seg = segment_time // interval
        if seg < self._min_live_segment or (self.expires_by_time
                                            and segment_time <= self.observed_stream_time - self.retention_ms):
            self.expired_records += 1
            log.debug("state store %s: skipping record for expired time %d (segment %d)", self.name, segment_time, seg)
            return -1
        return seg

    def _write(self, segment_time: int, changelog_key: bytes, value: Optional[bytes]) -> bool:
        """Observe the time and store the record if its segment is live; False if expired."""
        seg = self._observe(segment_time)
        if seg < 0:
            return False
        if seg > self._max_segment:
            self._max_segment = seg
        self._engine.put(_pack_i64(seg) + changelog_key, value)
        return True

    def _get(self, segment_time: int, changelog_key: bytes) -> Optional[bytes]:
        seg = self.segment_id(segment_time)
        if seg < self._min_live_segment:
            return None
        return self._engine.get(self._segment_prefix(seg) + changelog_key)

    # ------------------------------------------------------------------ restore
    # Bytes after the segment timestamp's start in a changelog key (window: ts + seq; session: end + start).
    _time_suffix = TIMESTAMP_SIZE + SEQNUM_SIZE
    # `rekey(changelog_key, at) -> stored key` (`at`: where the segment timestamp starts) for a
    # layout that does not store the changelog key as it is; None: stored as it is
    _restored_key: Optional[Callable[[bytes, int], bytes]] = None

    def restore_batch(self, records: list) -> None:
        """Re-key restored changelog records into their segments; one engine batch."""
        self._check()
        unpack = _I64.unpack_from
        suffix = self._time_suffix
        interval = self.segment_interval_ms
        prefixes: dict[int, bytes] = {}
        batch = []
        append = batch.append
        max_time = -1
        rekey = self._restored_key
        try:
            for key, value in records:
                at = len(key) - suffix
                t = unpack(key, at)[0]
                if t > max_time:
                    max_time = t
                seg = t // interval
                prefix = prefixes.get(seg)
                if prefix is None:
                    prefix = prefixes[seg] = _I64.pack(seg)
                append((prefix + key if rekey is None else prefix + rekey(key, at), value))
        except (struct.error, TypeError) as exc:
            bad = next((k for k, _ in records if not isinstance(k, bytes) or len(k) < suffix), None)
            raise StateError(
                f"state store {self.name!r}: malformed changelog key {bad!r} in restored batch "
                f"(expected key + {suffix} bytes of timestamps): {exc}"
            ) from exc
        if not batch:
            return
        if prefixes:
            self._max_segment = max(self._max_segment, max(prefixes))
        # Records of already-expired segments are written and then dropped with their segment.
        self._engine.restore_batch(batch)
        if max_time > self.observed_stream_time:
            self.observed_stream_time = max_time
        min_live = self._min_live_segment
        expired = [s for s in prefixes if s < min_live]
        self._drop_expired_segments()
        for seg in expired:  # below the previous low mark: delete_range above did not cover them
            self._engine.delete_range(_I64.pack(seg), _I64.pack(seg + 1))

    def approximate_num_entries(self) -> int:
        return self._engine.approximate_num_entries()

    def num_open_iterators(self) -> int:
        return self._engine.num_open_iterators()


# ------------------------------------------------------------------------------ window stores
class WindowStore(StateStore):
    """Window store interface (bytes at inner layers, typed at the typed layer).

    `fetch(key, time_from, time_to)` iterates (window_start, value) for one key;
    `fetch(key, window_start)` returns one value; `fetch_range`, `fetch_all` and `all` iterate
    (Windowed(key, Window(start, end)), value). Time bounds are inclusive window starts.
    Iterators must be exhausted or closed.
    """

    window_size_ms: int
    retain_duplicates: bool

    @abstractmethod
    def put(self, key, value, window_start_timestamp: int, timestamp: Optional[int] = None):
        ...

    @abstractmethod
    def fetch(self, key, time_from: int, time_to: Optional[int] = None):
        ...

    @abstractmethod
    def backward_fetch(self, key, time_from: int, time_to: int) -> KeyValueIterator:
        ...

    @abstractmethod
    def fetch_range(self, key_from, key_to, time_from: int, time_to: int) -> KeyValueIterator:
        ...

    @abstractmethod
    def backward_fetch_range(self, key_from, key_to, time_from: int, time_to: int) -> KeyValueIterator:
        ...

    @abstractmethod
    def fetch_all(self, time_from: int, time_to: int) -> KeyValueIterator:
        ...

    @abstractmethod
    def backward_fetch_all(self, time_from: int, time_to: int) -> KeyValueIterator:
        ...

    @abstractmethod
    def all(self) -> KeyValueIterator:
        ...

    @abstractmethod
    def backward_all(self) -> KeyValueIterator:
        ...


_WINDOW_SUFFIX = TIMESTAMP_SIZE + SEQNUM_SIZE


class SegmentedWindowStore(SegmentedBytesStore, WindowStore):
    layout = "window-v1"
    # a record's key within its segment: the changelog key (key first)
    _stored_key = staticmethod(window_changelog_key)

    def __init__(self, name: str, *, retention_ms: int, window_size_ms: int, segment_interval_ms: int,
                 retain_duplicates: bool = False, persistent: bool) -> None:
        super().__init__(name, retention_ms=retention_ms, segment_interval_ms=segment_interval_ms,
                         persistent=persistent)
        # 0 is valid (Kafka): sliding windows of time difference 0 and join windows of 0 are [t, t]
        if not isinstance(window_size_ms, int) or isinstance(window_size_ms, bool) or window_size_ms < 0:
            raise InvalidStoreArgumentError(
                f"state store {name!r}: window_size_ms must be a non-negative int, got {window_size_ms!r}"
            )
        self.window_size_ms = window_size_ms
        self.retain_duplicates = retain_duplicates
        self._seqnum = 0
        cls = type(self)
        if (_put_window_c is not None and self._scan_iterator is not None and self._restored_key is None
                and cls._write is SegmentedBytesStore._write and cls.actual_from is SegmentedBytesStore.actual_from
                and cls.put_for_changelog is SegmentedWindowStore.put_for_changelog
                and cls.fetch_values is SegmentedWindowStore.fetch_values):
            # A plain key-first store on RocksDB (a join's, every record): put_for_changelog and
            # fetch_values in C (state/_window.c). The C form takes the common case (a live
            # segment, nothing to drop, an open engine, plain arguments) and hands every other
            # to the Python method below, which holds the rules; a parity test keeps them equal.
            # (the engine, its scan iterator, the interval, the retention and retain_duplicates
            # are fixed for the store's life)
            self.put_for_changelog = partial(_put_window_c, SegmentedWindowStore.put_for_changelog, self,
                                             self._engine, segment_interval_ms, self.retention_ms, retain_duplicates)
            self.fetch_values = partial(_fetch_window_c, SegmentedWindowStore.fetch_values, self, self._engine,
                                        self._scan_iterator, segment_interval_ms, self.retention_ms)

    def put(self, key: bytes, value: Optional[bytes], window_start_timestamp: int,
            timestamp: Optional[int] = None) -> Optional[int]:
        """Store the value; returns the sequence number used, or None if the put stored nothing
        (None value with retain_duplicates)."""
        if self.put_for_changelog(key, value, window_start_timestamp) is None or (
                value is None and self.retain_duplicates):
            return None
        return self._seqnum if self.retain_duplicates else 0

    def put_for_changelog(self, key: bytes, value: Optional[bytes], window_start_timestamp: int) -> Optional[bytes]:
        """Store the value as `put` does; returns the record's changelog key
        (`window_changelog_key`: what a change-logging layer logs). A put into an expired segment
        is skipped (and counted) but still returns its key: Kafka logs it all the same. So does
        a None value with retain_duplicates, which deletes nothing (no record has its sequence
        number): Kafka's change logging logs it under the next one, and its in-memory store
        observes its time (its RocksDB store skips the put)."""
        # every write of a window store passes here (a join's every record, a cache's write
        # down): the checks call the validators only for an argument about to fail them
        if not self._engine.is_open:
            self._check()
        if type(key) is not bytes:
            check_key(self.name, key)
        if value is not None and type(value) is not bytes:
            check_value(self.name, value)
        if type(window_start_timestamp) is not int or window_start_timestamp < 0:
            check_timestamp(self.name, "window_start_timestamp", window_start_timestamp)
        if self.retain_duplicates:
            seqnum = self._seqnum = (self._seqnum + 1) & 0x7FFFFFFF
            if value is None:
                if not self.persistent:
                    self._observe(window_start_timestamp)
                return key + _pack_window_suffix(window_start_timestamp, seqnum)
        else:
            seqnum = 0
        changelog_key = key + _pack_window_suffix(window_start_timestamp, seqnum)
        restored_key = self._restored_key  # a layout that does not store the changelog key as it is
        self._write(window_start_timestamp,
                    changelog_key if restored_key is None else restored_key(changelog_key, len(key)), value)
        return changelog_key

    def _check_range(self, time_from, time_to) -> None:
        if type(time_from) is not int or time_from < 0:
            check_timestamp(self.name, "time_from", time_from)
        if type(time_to) is not int or time_to < 0:
            check_timestamp(self.name, "time_to", time_to)

    def fetch(self, key: bytes, time_from: int, time_to: Optional[int] = None):
        self._check()
        if type(key) is not bytes:
            check_key(self.name, key)
        if time_to is None:
            window_start = check_timestamp(self.name, "window_start", time_from)
            if window_start < self.actual_from(0):
                return None
            if not self.retain_duplicates:
                return self._get(window_start, self._stored_key(key, window_start, 0))
            with self._fetch_key(key, window_start, window_start, False) as it:
                first = next(it, None)
            return first[1] if first is not None else None
        self._check_range(time_from, time_to)
        return self._fetch_key(key, time_from, time_to, False)

    def backward_fetch(self, key: bytes, time_from: int, time_to: int) -> KeyValueIterator:
        self._check()
        check_key(self.name, key)
        self._check_range(time_from, time_to)
        return self._fetch_key(key, time_from, time_to, True)

    def fetch_values(self, key: bytes, time_from: int, time_to: int) -> list:
        """`fetch(key, time_from, time_to)` read at once: a list of (window start, value) in
        time order, no iterator to close (for a layer above that decodes as it goes)."""
        if not self._engine.is_open:
            self._check()
        if type(key) is not bytes:
            check_key(self.name, key)
        if type(time_from) is not int or time_from < 0 or type(time_to) is not int or time_to < 0:
            self._check_range(time_from, time_to)
        # nothing starts after the observed stream time: the scan ends there
        time_from = self.actual_from(time_from)
        if time_to > self.observed_stream_time:
            time_to = self.observed_stream_time
        if time_from > time_to:
            return []
        interval = self.segment_interval_ms
        first = time_from // interval
        if first < self._min_live_segment:
            first = self._min_live_segment
        last = time_to // interval
        scan_iterator = self._scan_iterator
        if scan_iterator is not None:  # RocksDB and the C loop: the same records (a parity test)
            return _scan_key_c(scan_iterator(), key, first, last, time_from, time_to)
        unpack = _I64.unpack_from
        low = key + _pack_window_suffix(time_from, 0)
        high = key_after(key + _pack_window_suffix(time_to, 0x7FFFFFFF))  # the scan's exclusive end
        scan = self._engine.scan
        found: list = []
        for seg in range(first, last + 1):
            prefix = self._key_first_bounds(seg)[0]
            ts_at = len(prefix) + len(key)
            total = ts_at + _WINDOW_SUFFIX
            # same length and within the bounds => same key
            found += [(unpack(k, ts_at)[0], v) for k, v in scan(prefix + low, prefix + high) if len(k) == total]
        return found

    def _fetch_key(self, key: bytes, time_from: int, time_to: int, reverse: bool) -> KeyValueIterator:
        # tracked, so closing the store invalidates it
        return self._engine.track(self._fetch_key_gen(key, self.actual_from(time_from), time_to, reverse))

    # Where the key-first records of a segment are: from the segment's prefix to the next's (a
    # time-ordered store keeps its key index in a part of the segment: see TimeOrderedWindowStore)
    def _key_first_bounds(self, seg: int) -> tuple[bytes, bytes]:
        return self._segment_prefix(seg), self._segment_prefix(seg + 1)

    def _fetch_key_gen(self, key: bytes, time_from: int, time_to: int, reverse: bool) -> Iterator:
        # one key's records in a time range: read at once (one engine scan per segment), so no
        # RocksDB iterator stays open
        found = self.fetch_values(key, time_from, time_to)
        if reverse:
            found.reverse()
        return iter(found)

    def _windows_gen(self, key_from: Optional[bytes], key_to: Optional[bytes], time_from: int,
                     time_to: int, reverse: bool, key_range: bool = False) -> Iterator:
        if time_from > time_to:
            return
        size = self.window_size_ms
        unpack = _I64.unpack_from
        raw_range = self._engine.raw_range
        for seg in self._segments(time_from, time_to, reverse):
            prefix, end = self._key_first_bounds(seg)
            at = len(prefix)
            lower = prefix + key_from if key_from is not None else prefix
            upper = key_after(prefix + key_to + b"\xff" * _WINDOW_SUFFIX) if key_to is not None else end
            for k, v in raw_range(lower, upper, reverse):
                n = len(k) - _WINDOW_SUFFIX
                start = unpack(k, n)[0]
                if start < time_from or start > time_to:
                    continue
                user_key = k[at:n]
                if (key_from is not None and user_key < key_from) or (key_to is not None and user_key > key_to):
                    continue
                yield Windowed(user_key, Window(start, start + size)), v

    def _windows(self, key_from, key_to, time_from, time_to, reverse, key_range: bool = False) -> KeyValueIterator:
        """The windows of keys from `key_from` to `key_to` (None: open) starting within the time
        bounds; `key_range`: asked as a key range (fetch_range), not as all keys (fetch_all, all)."""
        self._check()
        if key_from is not None:
            check_key(self.name, key_from, "key_from")
        if key_to is not None:
            check_key(self.name, key_to, "key_to")
        self._check_range(time_from, time_to)
        if key_from is not None and key_to is not None and key_from > key_to:
            log.warning("state store %s: fetch_range with key_from > key_to returns no entries", self.name)
            return KeyValueIterator(iter(()), self.name)
        return self._engine.track(self._windows_gen(key_from, key_to, self.actual_from(time_from), time_to, reverse,
                                                    key_range))

    def fetch_range(self, key_from, key_to, time_from: int, time_to: int) -> KeyValueIterator:
        return self._windows(key_from, key_to, time_from, time_to, False, True)

    def backward_fetch_range(self, key_from, key_to, time_from: int, time_to: int) -> KeyValueIterator:
        return self._windows(key_from, key_to, time_from, time_to, True, True)

    def fetch_all(self, time_from: int, time_to: int) -> KeyValueIterator:
        return self._windows(None, None, time_from, time_to, False)

    def backward_fetch_all(self, time_from: int, time_to: int) -> KeyValueIterator:
        return self._windows(None, None, time_from, time_to, True)

    def all(self) -> KeyValueIterator:
        return self._windows(None, None, 0, MAX_TIMESTAMP, False)

    def backward_all(self) -> KeyValueIterator:
        return self._windows(None, None, 0, MAX_TIMESTAMP, True)


def in_segment_order(items: Iterator, segment_of: Callable[[Any], int], order: Callable[[Any], Any],
                     reverse: bool) -> Iterator:
    """`items`, which come segment by segment, with each segment's items sorted by `order`
    (stably: items of one order keep theirs; descending with `reverse`): Kafka's in-memory
    stores' order for a layout whose segments hold the items of consecutive times."""
    batch: list = []
    current = None
    for item in items:
        seg = segment_of(item)
        if seg != current:
            batch.sort(key=order, reverse=reverse)
            yield from batch
            batch, current = [], seg
        batch.append(item)
    batch.sort(key=order, reverse=reverse)
    yield from batch


class RocksDBWindowStore(SegmentedWindowStore):
    def __init__(self, name: str, *, retention_ms: int, window_size_ms: int, segment_interval_ms: int,
                 retain_duplicates: bool = False) -> None:
        super().__init__(name, retention_ms=retention_ms, window_size_ms=window_size_ms,
                         segment_interval_ms=segment_interval_ms, retain_duplicates=retain_duplicates,
                         persistent=True)


class InMemoryWindowStore(SegmentedWindowStore):
    """Kafka's InMemoryWindowStore: the segmented key-first layout, read in Kafka's in-memory
    order (its windows are a map of starts, each a map of keys): a key's windows by start, and
    a read across keys (a key range, fetch_all, all; backward too) by start, then key (each
    segment's windows sorted so as they are read). Retention as Kafka's: reads return windows
    starting after observed stream time - retention, and a put of a window starting at or before
    it is skipped (counted, logged at debug) whatever segment it falls in."""

    def __init__(self, name: str, *, retention_ms: int, window_size_ms: int, segment_interval_ms: int,
                 retain_duplicates: bool = False) -> None:
        super().__init__(name, retention_ms=retention_ms, window_size_ms=window_size_ms,
                         segment_interval_ms=segment_interval_ms, retain_duplicates=retain_duplicates,
                         persistent=False)

    expires_by_time = True

    def _windows_gen(self, key_from: Optional[bytes], key_to: Optional[bytes], time_from: int,
                     time_to: int, reverse: bool, key_range: bool = False) -> Iterator:
        if key_from is not None and key_from == key_to:
            return self._one_key_windows(key_from, time_from, time_to, reverse)
        interval = self.segment_interval_ms
        return in_segment_order(super()._windows_gen(key_from, key_to, time_from, time_to, reverse, key_range),
                                lambda item: item[0].window.start // interval,
                                lambda item: (item[0].window.start, item[0].key), reverse)

    def _one_key_windows(self, key: bytes, time_from: int, time_to: int, reverse: bool) -> Iterator:
        """One key's windows in start order, each found and read when the iteration asks for it,
        as Kafka's iterator opens a start's map of keys when it gets to that start: a window
        written meanwhile ahead of it is met as written (a sliding window aggregation updates a
        key's windows while it walks them, and a cache's eviction can write the next one down)."""
        if time_from > time_to:
            return
        size = self.window_size_ms
        unpack = _I64.unpack_from
        live_range = self._engine.live_range
        for seg in self._segments(time_from, time_to, reverse):
            prefix = self._key_first_bounds(seg)[0]
            at = len(prefix) + len(key)
            total = at + _WINDOW_SUFFIX
            low = prefix + key + _pack_window_suffix(time_from, 0)
            high = key_after(prefix + key + _pack_window_suffix(time_to, 0x7FFFFFFF))
            for k, v in live_range(low, high, reverse):
                if len(k) == total:  # same length and within the bounds: the key itself
                    start = unpack(k, at)[0]
                    yield Windowed(key, Window(start, start + size)), v


# ------------------------------------------------------------------------------ time-ordered window stores
# the part of a time-ordered store's segment holding its key index (start bytes are below 0x80)
_INDEX_MARK = b"\x80"
_INDEX_END = b"\x81"


def time_first_key(key: bytes, window_start: int, seqnum: int) -> bytes:
    """Kafka's TimeFirstWindowKeySchema: 8-byte BE start + key + 4-byte BE seqnum."""
    return _I64.pack(window_start) + key + _I32.pack(seqnum)


def _time_first_of_changelog_key(changelog_key: bytes, at: int) -> bytes:
    """A changelog key (key + start + seqnum, the start at `at`) as a time-first key."""
    return changelog_key[at:at + TIMESTAMP_SIZE] + changelog_key[:at] + changelog_key[at + TIMESTAMP_SIZE:]


class TimeOrderedWindowStore(SegmentedWindowStore):
    """A window store ordered by window start, then key (Kafka's RocksDBTimeOrderedWindowStore,
    which the DSL gives windowed aggregations emitting final results on window close): within a
    segment each record is keyed `start + key + sequence number`, so the windows that closed are
    one range scan (`fetch_all`), in (start, key) order.

    Reads of keys: `with_index` (Kafka's indexed store, for sliding windows, which read their
    key's windows for every record) keeps a copy of each record under its changelog key (key
    first) after a 0x80 byte in its segment (no start's first byte is that high), and reads keys
    there; without it (time windows, which read single windows) a read of keys scans the time
    range, as Kafka's store without index does.

    Retention as Kafka's time-first schema: reads return windows starting at or after observed
    stream time - retention (the plain store: after it). In memory, as Kafka's in-memory store
    (which the DSL uses in memory whatever the emit strategy): after it. The changelog is the
    plain store's."""

    layout = "window-time-ordered-v1"
    time_ordered = True  # what a caching layer above merges its cache by
    _stored_key = staticmethod(time_first_key)
    _restored_key = staticmethod(_time_first_of_changelog_key)

    def __init__(self, name: str, *, retention_ms: int, window_size_ms: int, segment_interval_ms: int,
                 retain_duplicates: bool = False, persistent: bool, with_index: bool = False) -> None:
        super().__init__(name, retention_ms=retention_ms, window_size_ms=window_size_ms,
                         segment_interval_ms=segment_interval_ms, retain_duplicates=retain_duplicates,
                         persistent=persistent)
        self.with_index = with_index
        self.expires_by_time = not persistent  # in memory, Kafka's InMemoryWindowStore
        self._scan_iterator = None  # the C loop reads key-first records at a segment's prefix
        if with_index:
            self.layout = "window-time-ordered-indexed-v1"
            self._engine.layout = self.layout

    def actual_from(self, time_from: int) -> int:
        if not self.persistent:
            # in memory, Kafka's DSL store is its InMemoryWindowStore whatever the emit strategy:
            # the plain store's retention (a window closing as it expires is not emitted there)
            return super().actual_from(time_from)
        return max(time_from, self.observed_stream_time - self.retention_ms)

    def _key_first_bounds(self, seg: int) -> tuple[bytes, bytes]:
        prefix = self._segment_prefix(seg)
        return prefix + _INDEX_MARK, prefix + _INDEX_END

    def _write(self, segment_time: int, stored_key: bytes, value: Optional[bytes]) -> bool:
        written = super()._write(segment_time, stored_key, value)
        if written and self.with_index:
            # the index entry: the changelog key (key + start + sequence number) of the record
            index_key = stored_key[TIMESTAMP_SIZE:-SEQNUM_SIZE] + stored_key[:TIMESTAMP_SIZE] + stored_key[-SEQNUM_SIZE:]
            self._engine.put(self._key_first_bounds(segment_time // self.segment_interval_ms)[0] + index_key, value)
        return written

    def restore_batch(self, records: list) -> None:
        super().restore_batch(records)
        if not self.with_index or not records:
            return
        # the records of live segments (the others were dropped with their segments) in the index
        suffix, interval, min_live = self._time_suffix, self.segment_interval_ms, self._min_live_segment
        unpack = _I64.unpack_from
        index = []
        for key, value in records:
            seg = unpack(key, len(key) - suffix)[0] // interval
            if seg >= min_live:
                index.append((self._key_first_bounds(seg)[0] + key, value))
        self._engine.restore_batch(index)

    def _scan(self, time_from: int, time_to: int, reverse: bool) -> Iterator[tuple[bytes, int, bytes]]:
        """(stored key, segment prefix included; start; value) of the windows starting within
        [time_from, time_to], in (start, key, sequence number) order."""
        if time_from > time_to:
            return
        unpack = _I64.unpack_from
        raw_range = self._engine.raw_range
        low = _I64.pack(time_from)
        high = _I64.pack(time_to + 1) if time_to < MAX_TIMESTAMP else _INDEX_MARK
        for seg in self._segments(time_from, time_to, reverse):
            prefix = self._segment_prefix(seg)
            for k, v in raw_range(prefix + low, prefix + high, reverse):
                yield k, unpack(k, SEGMENT_PREFIX_SIZE)[0], v

    def fetch_values(self, key: bytes, time_from: int, time_to: int) -> list:
        if self.with_index:  # the index part, key first
            return super().fetch_values(key, time_from, time_to)
        self._check()
        check_key(self.name, key)
        self._check_range(time_from, time_to)
        return list(self._fetch_key_gen(key, self.actual_from(time_from), time_to, False))

    def _fetch_key_gen(self, key: bytes, time_from: int, time_to: int, reverse: bool) -> Iterator:
        if self.with_index:
            yield from super()._fetch_key_gen(key, time_from, time_to, reverse)
            return
        total = SEGMENT_PREFIX_SIZE + TIMESTAMP_SIZE + len(key) + SEQNUM_SIZE
        at = SEGMENT_PREFIX_SIZE + TIMESTAMP_SIZE
        for k, start, v in self._scan(time_from, time_to, reverse):
            if len(k) == total and k[at:at + len(key)] == key:
                yield start, v

    def _windows_gen(self, key_from: Optional[bytes], key_to: Optional[bytes], time_from: int,
                     time_to: int, reverse: bool, key_range: bool = False) -> Iterator:
        # a key range, open bounds too, through the index (by key, then start), as Kafka's
        # indexed RocksDB store reads (AbstractRocksDBTimeOrderedSegmentedBytesStore.fetch); all
        # keys (fetch_all, all) by start, then key, as it reads them; in memory by start, then
        # key, as its in-memory store
        if self.with_index and self.persistent and key_range:
            yield from super()._windows_gen(key_from, key_to, time_from, time_to, reverse)  # by key
            return
        size = self.window_size_ms
        at = SEGMENT_PREFIX_SIZE + TIMESTAMP_SIZE
        for k, start, v in self._scan(time_from, time_to, reverse):
            user_key = k[at:-SEQNUM_SIZE]
            if (key_from is not None and user_key < key_from) or (key_to is not None and user_key > key_to):
                continue
            yield Windowed(user_key, Window(start, start + size)), v
