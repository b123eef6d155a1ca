"""Log compaction (``cleanup.policy=compact``), as Kafka's LogCleaner does it.

One pass over a log (:meth:`LogCleaner.clean`):

1. **Scan** the headers of every segment (control batches are decoded: they are tiny) to learn
   each transaction's outcome, the first offset of a still-open transaction, and the last data
   batch of every producer.
2. **Choose the range.** The cleanable range is ``[log start, first uncleanable offset)`` where the
   first uncleanable offset is the least of: the active segment's base offset, the first offset
   of an open transaction (Kafka's first unstable offset), and the base offset of the first dirty
   segment holding a record newer than ``now - min.compaction.lag.ms``. It always ends on a segment
   boundary. The *dirty* part starts at the cleaner checkpoint (``cleaner-offset-checkpoint``).
3. **Offset map:** the latest offset of every key in the dirty part (records of aborted
   transactions and control records never enter it).
4. **Rewrite** the closed segments of the range in groups (consecutive segments whose total size
   fits ``segment.bytes``), keeping per batch only the records that are the latest of their key;
   offsets, batch base offsets and producer id/epoch/sequence are preserved. Each group becomes
   one ``.cleaned`` segment, swapped in by :meth:`Log.replace_segments` (crash-safe: ``.cleaned``
   -> ``.swap`` -> live, finished or rolled back by recovery on open).
5. Advance the checkpoint to the first uncleanable offset.

Tombstones and transaction markers follow KIP-534's *delete horizon*: the first pass that keeps a
tombstone (or the marker of a transaction with no data left) stamps the batch with
``delete horizon = now + delete.retention.ms`` (attribute bit ``0x40``; the batch's first-timestamp
field then holds the horizon and record timestamps stay exact). A later pass at or after the
horizon removes those tombstones and markers. So a consumer that reads the log from the start
within ``delete.retention.ms`` of a tombstone being compacted always sees the delete.

Transactions: records of aborted transactions are removed (they are invisible to every
consumer after the abort). A marker is kept while any batch of its transaction is left in the log
and is removed after its horizon otherwise. The last data batch of each producer is kept, emptied
if need be, so its producer id, epoch and last sequence survive compaction (as in Kafka).
Records without a key cannot be compacted and are removed, as Kafka does.
"""

from __future__ import annotations

import logging
import os
import struct
import threading
import time
import weakref
from dataclasses import dataclass, field
from typing import Callable, Iterable

from crc32c import crc32c

from replication.errors import CleaningAbortedError, CorruptRecordError, KafkaStorageError
from replication.records import (
    BATCH_HEADER_SIZE, BatchHeader, ControlType, NO_PRODUCER_ID, Record, decode_records,
    encode_batch_with_offsets, iter_batch_headers,
)

log = logging.getLogger(__name__)

DELETE_HORIZON_FLAG = 0x40  # Kafka's DefaultRecordBatch DELETE_HORIZON_FLAG_MASK (KIP-534)
CLEANER_CHECKPOINT_FILE = "cleaner-offset-checkpoint"
_CONTROL_TYPE_KEY_SIZE = 4

DEFAULTS = {
    "delete.retention.ms": 86_400_000,
    "min.compaction.lag.ms": 0,
    "min.cleanable.dirty.ratio": 0.5,
    "segment.bytes": 1 << 30,
    "log.cleaner.backoff.ms": 15_000,
    "log.cleaner.dedupe.buffer.size": 128 * 1024 * 1024,
    "cleanup.policy": "delete",
}
# Kafka's SkeinOffsetMap spends 24 bytes per entry (16-byte hash + 8-byte offset).
_BYTES_PER_MAP_ENTRY = 24


def delete_horizon_ms(header: BatchHeader) -> int | None:
    """The batch's delete horizon (KIP-534) if it has one."""
    if header.attributes & DELETE_HORIZON_FLAG:
        return header.first_timestamp
    return None


class _HeaderView:
    """The header fields `encode_batch_with_offsets` reads, with overrides (delete horizon)."""

    __slots__ = ("base_offset", "partition_leader_epoch", "attributes", "last_offset_delta",
                 "first_timestamp", "max_timestamp", "producer_id", "producer_epoch",
                 "base_sequence", "position")

    def __init__(self, h: BatchHeader, *, attributes: int, first_timestamp: int) -> None:
        self.base_offset = h.base_offset
        self.partition_leader_epoch = h.partition_leader_epoch
        self.attributes = attributes
        self.last_offset_delta = h.last_offset_delta
        self.first_timestamp = first_timestamp
        self.max_timestamp = h.max_timestamp
        self.producer_id = h.producer_id
        self.producer_epoch = h.producer_epoch
        self.base_sequence = h.base_sequence
        self.position = h.position


# --- the scan: transactions and producers ----------------------------------------------------

TxnKey = tuple[int, int]  # (producer id, offset of the transaction's first batch or its marker)


@dataclass
class TxnState:
    """What the scan learned about transactions and producers, for the whole log."""

    batch_txn: dict[int, TxnKey] = field(default_factory=dict)   # data batch base -> txn
    aborted: set[TxnKey] = field(default_factory=set)
    marker_txn: dict[int, TxnKey] = field(default_factory=dict)  # marker offset -> txn
    open_txns: dict[int, int] = field(default_factory=dict)      # producer id -> first offset
    last_data_batch: dict[int, int] = field(default_factory=dict)  # producer id -> base offset

    @property
    def first_unstable_offset(self) -> int | None:
        return min(self.open_txns.values()) if self.open_txns else None

    def observe(self, h: BatchHeader, buf, pos: int, source: str) -> None:
        pid = h.producer_id
        if h.is_control:
            ctype = _control_type(buf, pos, h, source)
            start = self.open_txns.pop(pid, None)
            # A marker with no data before it (all of it below the log start) is its own txn.
            key = (pid, start if start is not None else h.base_offset)
            self.marker_txn[h.base_offset] = key
            if ctype == ControlType.ABORT:
                self.aborted.add(key)
            return
        if pid != NO_PRODUCER_ID:
            self.last_data_batch[pid] = h.base_offset
        if h.is_transactional:
            start = self.open_txns.setdefault(pid, h.base_offset)
            self.batch_txn[h.base_offset] = (pid, start)


def _control_type(buf, pos: int, h: BatchHeader, source: str) -> ControlType | None:
    recs = decode_records(bytes(buf[pos:pos + h.size]), h, source)
    if not recs or recs[0].key is None or len(recs[0].key) < _CONTROL_TYPE_KEY_SIZE:
        return None
    ctype = int.from_bytes(recs[0].key[2:4], "big", signed=True)
    try:
        return ControlType(ctype)
    except ValueError:
        return None


# --- the rewrite ---------------------------------------------------------------------------


@dataclass
class CleanerStats:
    segments_cleaned: int = 0
    groups: int = 0
    bytes_read: int = 0
    bytes_written: int = 0
    records_read: int = 0
    records_retained: int = 0
    tombstones_removed: int = 0
    markers_removed: int = 0
    aborted_records_removed: int = 0
    map_entries: int = 0
    first_dirty_offset: int = 0
    first_uncleanable_offset: int = 0
    # the earliest delete horizon still pending in the log after this pass (None if none)
    next_delete_horizon_ms: int | None = None

    def note_horizon(self, horizon: int) -> None:
        if self.next_delete_horizon_ms is None or horizon < self.next_delete_horizon_ms:
            self.next_delete_horizon_ms = horizon


class BatchFilter:
    """Decides, batch by batch in offset order, what a cleaned segment keeps."""

    def __init__(self, offset_map: dict[bytes, int], txns: TxnState, now_ms: int,
                 delete_retention_ms: int, stats: CleanerStats) -> None:
        self.offset_map = offset_map
        self.txns = txns
        self.now_ms = now_ms
        self.new_horizon = now_ms + delete_retention_ms
        self.stats = stats
        # transactions with at least one batch still in the log (decided so far)
        self.txns_with_data: set[TxnKey] = set()

    def filter(self, buf, pos: int, h: BatchHeader, source: str) -> bytes | None:
        """The bytes to keep for the batch at ``buf[pos:pos+h.size]``, or None to drop it."""
        stats = self.stats
        horizon = delete_horizon_ms(h)
        if h.is_control:
            return self._filter_marker(buf, pos, h, horizon)
        txn = self.txns.batch_txn.get(h.base_offset) if h.is_transactional else None
        is_last_of_producer = (h.producer_id != NO_PRODUCER_ID
                               and self.txns.last_data_batch.get(h.producer_id) == h.base_offset)
        stats.records_read += h.records_count
        if txn is not None and txn in self.txns.aborted:
            stats.aborted_records_removed += h.records_count
            records: list[Record] = []
            all_kept = h.records_count == 0
        else:
            batch = bytes(buf[pos:pos + h.size])
            original = decode_records(batch, h, source)
            records = []
            kept = []
            omap = self.offset_map
            discard_tombstones = horizon is not None and self.now_ms >= horizon
            for i, r in enumerate(original):
                key = r.key
                if key is None:
                    continue
                latest = omap.get(key)
                if latest is not None and r.offset < latest:
                    continue
                if r.value is None and discard_tombstones:
                    stats.tombstones_removed += 1
                    continue
                records.append(r)
                kept.append(i)
            all_kept = len(records) == len(original)
        stats.records_retained += len(records)
        if not records and not is_last_of_producer:
            return None
        if txn is not None:
            self.txns_with_data.add(txn)
        has_tombstone = any(r.value is None for r in records)
        if has_tombstone and horizon is None:
            stats.note_horizon(self.new_horizon)
            return encode_batch_with_offsets(
                _HeaderView(h, attributes=h.attributes | DELETE_HORIZON_FLAG,
                            first_timestamp=self.new_horizon), records)
        if has_tombstone:
            stats.note_horizon(horizon)
        if all_kept:
            return bytes(buf[pos:pos + h.size])
        if horizon is not None and not has_tombstone:
            # No tombstone left: drop the horizon so record timestamps are relative to the first one.
            first_ts = min((r.timestamp for r in records), default=h.max_timestamp)
            return encode_batch_with_offsets(
                _HeaderView(h, attributes=h.attributes & ~DELETE_HORIZON_FLAG,
                            first_timestamp=first_ts), records)
        if not records:
            return encode_batch_with_offsets(h, records)
        # Same base offset and first timestamp: each kept record's bytes are unchanged.
        return rebuild_batch(batch, h, kept, max(r.timestamp for r in records))

    def _filter_marker(self, buf, pos: int, h: BatchHeader, horizon: int | None) -> bytes | None:
        txn = self.txns.marker_txn.get(h.base_offset)
        original = bytes(buf[pos:pos + h.size])
        if txn is not None and txn in self.txns_with_data:
            return original  # data of this transaction is still in the log: the marker stays
        if horizon is None:
            stats_h = self.new_horizon
            self.stats.note_horizon(stats_h)
            records = decode_records(original, h)
            return encode_batch_with_offsets(
                _HeaderView(h, attributes=h.attributes | DELETE_HORIZON_FLAG,
                            first_timestamp=stats_h), records)
        if self.now_ms >= horizon:
            self.stats.markers_removed += 1
            return None
        self.stats.note_horizon(horizon)
        return original


_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")
_U32 = struct.Struct(">I")


def record_spans(batch: bytes, h: BatchHeader) -> list[tuple[int, int]]:
    """``(start, end)`` byte span of each record of a batch (``batch`` starts at the batch)."""
    spans = []
    pos = BATCH_HEADER_SIZE
    for _ in range(h.records_count):
        # the record's length, a zig-zag varint
        shift = 0
        u = 0
        p = pos
        while True:
            b = batch[p]
            p += 1
            u |= (b & 0x7F) << shift
            if b < 0x80:
                break
            shift += 7
        length = (u >> 1) ^ -(u & 1)
        end = p + length
        spans.append((pos, end))
        pos = end
    if pos != h.size:
        raise CorruptRecordError(f"records of batch at offset {h.base_offset} end at byte {pos}, "
                                 f"not at the batch end {h.size}", base_offset=h.base_offset)
    return spans


def rebuild_batch(batch: bytes, h: BatchHeader, kept: list[int], max_timestamp: int) -> bytes:
    """The batch with only the records at indexes ``kept``, copied byte for byte: base offset,
    first timestamp, last offset delta, producer fields and attributes are kept, so the records'
    offset and timestamp deltas stay valid. Length, max timestamp, count and CRC are rewritten."""
    spans = record_spans(batch, h)
    out = bytearray(batch[:BATCH_HEADER_SIZE])
    for i in kept:
        start, end = spans[i]
        out += batch[start:end]
    _I32.pack_into(out, 8, len(out) - 12)          # batch_length
    _I64.pack_into(out, 35, max_timestamp)         # max_timestamp
    _I32.pack_into(out, 57, len(kept))             # records_count
    _U32.pack_into(out, 17, crc32c(memoryview(out)[21:]))
    return bytes(out)


def iter_buffer_batches(buf, source: str) -> Iterable[tuple[int, BatchHeader]]:
    """``(position in buf, header)`` for each batch of a segment's bytes."""
    for h in iter_batch_headers(buf, source=source):
        yield h.position, h


# --- reading segments ------------------------------------------------------------------------

_READ_CHUNK = 4 << 20
_WRITE_CHUNK = 1 << 20


def iter_segment_batches(segment, end_position: int, chunk: int = _READ_CHUNK):
    """Yield ``(buffer, position in buffer, header)`` for each batch of ``segment`` below
    ``end_position``, reading whole batches in chunks of about ``chunk`` bytes.

    Headers are CRC-checked; a corrupt batch raises CorruptRecordError naming the segment file.
    """
    source = getattr(segment, "log_path", "") or repr(segment)
    pos = 0
    while pos < end_position:
        buf = segment.read_bytes(pos, min(chunk, end_position - pos))
        off = 0
        n = len(buf)
        while off + 12 <= n:
            size = int.from_bytes(buf[off + 8:off + 12], "big", signed=True) + 12
            if size < BATCH_HEADER_SIZE or off + size > n:
                break
            off += size
        if off == 0:
            # A batch larger than the chunk (or a corrupt one: let the parser name it).
            size = int.from_bytes(buf[8:12], "big", signed=True) + 12 if n >= 12 else 0
            if size >= BATCH_HEADER_SIZE and pos + size <= end_position:
                buf = segment.read_bytes(pos, size)
                off = len(buf)
            if off == 0 or off < size:
                for _ in iter_batch_headers(buf, base_position=pos, source=source):
                    pass  # raises CorruptRecordError at the bad batch
                raise _corrupt_tail(source, pos)
        whole = buf[:off] if off < n else buf
        for h in iter_batch_headers(whole, base_position=pos, source=source):
            yield whole, h.position - pos, h
        pos += off


def _corrupt_tail(source: str, pos: int):
    from replication.errors import CorruptRecordError
    return CorruptRecordError(f"torn batch in {source} at position {pos}", source=source,
                              position=pos)


# --- the cleaner checkpoint ------------------------------------------------------------------

def read_cleaner_checkpoint(path: str) -> dict[tuple[str, int], int]:
    """Read Kafka's ``cleaner-offset-checkpoint`` (version 0, count, ``topic partition offset``)."""
    from replication.errors import CorruptCheckpointError
    try:
        with open(path, "rb") as f:
            text = f.read().decode("ascii", errors="replace")
    except FileNotFoundError:
        return {}
    if not text:
        return {}
    lines = text.split("\n")
    if lines[-1] == "":
        lines.pop()

    def corrupt(line: int, why: str):
        return CorruptCheckpointError(f"malformed checkpoint file {path} line {line}: {why}",
                                      path=path, line=line)

    if not lines or lines[0].strip() != "0":
        raise corrupt(1, f"unrecognised version {lines[0]!r}" if lines else "empty")
    if len(lines) < 2 or not lines[1].strip().isdigit():
        raise corrupt(2, "bad entry count")
    count = int(lines[1])
    if len(lines) - 2 != count:
        raise corrupt(3 + min(count, len(lines) - 2),
                      f"expected {count} entries but found {len(lines) - 2}")
    out = {}
    for i, line in enumerate(lines[2:], start=3):
        parts = line.split()
        if (len(parts) != 3 or not parts[1].isascii() or not parts[1].isdigit()
                or not parts[2].isascii() or not parts[2].isdigit()):
            raise corrupt(i, f"expected 'topic partition offset', got {line!r}")
        out[(parts[0], int(parts[1]))] = int(parts[2])
    return out


def write_cleaner_checkpoint(path: str, offsets: dict[tuple[str, int], int]) -> None:
    from replication.epoch import write_checkpoint_atomically
    lines = ["0", str(len(offsets))]
    lines.extend(f"{t} {p} {o}" for (t, p), o in sorted(offsets.items()))
    write_checkpoint_atomically(path, "\n".join(lines) + "\n")


# --- the cleaner ----------------------------------------------------------------------------


def _conf(log_config, attr: str, key: str):
    value = getattr(log_config, attr, None)
    if value is None and hasattr(log_config, "get"):
        value = log_config.get(key)
    return DEFAULTS[key] if value is None else value


def is_compacted(log_) -> bool:
    """True if the log's ``cleanup.policy`` includes ``compact``."""
    policy = _conf(log_.config, "cleanup_policy", "cleanup.policy")
    if isinstance(policy, str):
        policy = [p.strip() for p in policy.split(",")]
    return "compact" in policy


class LogCleaner:
    """Compacts logs with ``cleanup.policy=compact``.

    ``clean(log, now_ms)`` runs one synchronous pass; ``start()`` runs passes in a background
    thread over the logs given to :meth:`add_log`, every ``log.cleaner.backoff.ms``, for logs
    whose dirty ratio reaches ``min.cleanable.dirty.ratio`` or whose tombstones have passed their
    delete horizon.

    ``fault_hook(step)`` (tests) is called at each step of a pass: ``"scanned"``,
    ``"offset_map_built"``, ``"group_written"``, ``"before_swap"``, ``"after_swap"``,
    ``"before_checkpoint"``, ``"after_checkpoint"``; raising there simulates a crash.
    """

    def __init__(self, config: dict | None = None, *,
                 fault_hook: Callable[[str], None] | None = None,
                 clock_ms: Callable[[], int] | None = None) -> None:
        config = dict(config or {})
        self.backoff_ms = int(config.get("log.cleaner.backoff.ms",
                                         DEFAULTS["log.cleaner.backoff.ms"]))
        dedupe = int(config.get("log.cleaner.dedupe.buffer.size",
                                DEFAULTS["log.cleaner.dedupe.buffer.size"]))
        load = float(config.get("log.cleaner.io.buffer.load.factor", 0.9))
        if self.backoff_ms < 0 or dedupe <= 0 or not 0 < load <= 1:
            from replication.errors import InvalidConfigurationError
            raise InvalidConfigurationError(
                f"bad log cleaner config: backoff {self.backoff_ms}, dedupe buffer {dedupe}, "
                f"load factor {load}", key="log.cleaner")
        self.max_map_entries = max(1, int(dedupe / _BYTES_PER_MAP_ENTRY * load))
        self.fault_hook = fault_hook
        self.clock_ms = clock_ms or (lambda: int(time.time() * 1000))
        self._logs: list = []
        # log -> earliest delete horizon still pending in it (None: none); learnt by a pass, or
        # by one header scan the first time the background thread looks at a log.
        self._next_horizon: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
        self._in_progress: set[int] = set()
        self._checkpoint_lock = threading.Lock()
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None
        self._logs_lock = threading.Lock()
        self.passes = 0
        self.last_error: BaseException | None = None

    # -- background thread -------------------------------------------------------------------

    def add_log(self, log_) -> None:
        with self._logs_lock:
            if all(l is not log_ for l in self._logs):
                self._logs.append(log_)
        self._wake.set()

    def remove_log(self, log_) -> None:
        with self._logs_lock:
            self._logs = [l for l in self._logs if l is not log_]

    def start(self) -> None:
        if self._thread is not None:
            return
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="log-cleaner", daemon=True)
        self._thread.start()

    def shutdown(self, timeout: float | None = 30.0) -> None:
        """Stop the thread; a pass in progress is abandoned between two segment groups."""
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout)
            self._thread = None

    def wakeup(self) -> None:
        self._wake.set()

    def _run(self) -> None:
        while not self._stop.is_set():
            with self._logs_lock:
                logs = list(self._logs)
            for lg in logs:
                if self._stop.is_set():
                    break
                try:
                    now = self.clock_ms()
                    if self.needs_cleaning(lg, now):
                        self.clean(lg, now)
                except CleaningAbortedError:
                    pass
                except Exception as e:  # keep cleaning other logs; Kafka marks the dir offline
                    self.last_error = e
                    log.exception("log cleaner failed on %s", getattr(lg, "dir", lg))
            self._wake.wait(self.backoff_ms / 1000)
            self._wake.clear()

    # -- choosing logs -------------------------------------------------------------------------

    def _checkpoint_path(self, log_) -> str:
        return os.path.join(os.path.dirname(os.path.abspath(log_.dir)), CLEANER_CHECKPOINT_FILE)

    def _tp(self, log_) -> tuple[str, int]:
        from replication.names import parse_partition_dir_name
        return parse_partition_dir_name(os.path.basename(os.path.abspath(log_.dir)))

    def _read_checkpoints(self, log_) -> dict[tuple[str, int], int]:
        from replication.errors import CorruptCheckpointError
        path = self._checkpoint_path(log_)
        try:
            return read_cleaner_checkpoint(path)
        except CorruptCheckpointError as e:
            # Only an optimisation: without it the next pass maps the whole log again.
            log.warning("ignoring corrupt cleaner checkpoint: %s", e)
            return {}

    def first_dirty_offset(self, log_, log_start: int, active_base: int) -> int:
        offset = self._read_checkpoints(log_).get(self._tp(log_))
        if offset is None or offset < log_start or offset > active_base:
            return log_start
        return offset

    def needs_cleaning(self, log_, now_ms: int) -> bool:
        if getattr(log_, "closed", False) or not is_compacted(log_):
            return False
        with log_.lock:
            segments = log_.segments
            log_start = log_.log_start_offset
        closed = segments[:-1]
        if not closed:
            return False
        if log_ not in self._next_horizon:
            self._next_horizon[log_] = self._scan_delete_horizon(closed)
        horizon = self._next_horizon.get(log_)
        if horizon is not None and now_ms >= horizon:
            return True
        first_dirty = self.first_dirty_offset(log_, log_start, segments[-1].base_offset)
        total = sum(s.size for s in closed)
        dirty = sum(s.size for s in closed if s.base_offset >= first_dirty)
        ratio = _conf(log_.config, "min_cleanable_dirty_ratio", "min.cleanable.dirty.ratio")
        return total > 0 and dirty > 0 and dirty / total >= ratio

    @staticmethod
    def _scan_delete_horizon(segments: list) -> int | None:
        """The earliest delete horizon stamped on a batch of ``segments`` (headers only)."""
        earliest = None
        try:
            for seg in segments:
                for h in seg.batches():
                    if h.attributes & DELETE_HORIZON_FLAG:
                        if earliest is None or h.first_timestamp < earliest:
                            earliest = h.first_timestamp
        except (KafkaStorageError, CorruptRecordError):
            return None  # the log changed under us; the next pass learns it
        return earliest

    # -- one pass ----------------------------------------------------------------------------

    def _hook(self, step: str) -> None:
        if self.fault_hook is not None:
            self.fault_hook(step)

    def clean(self, log_, now_ms: int | None = None) -> CleanerStats:
        """One compaction pass over ``log_``; returns what it did.

        Raises CleaningAbortedError (nothing lost; groups already swapped in stay cleaned, the
        others untouched) if the log was truncated,
        had segments deleted or was closed during the pass, or is being cleaned by another
        thread of this cleaner.
        """
        key = id(log_)
        with self._logs_lock:
            if key in self._in_progress:
                raise CleaningAbortedError(f"log {log_.dir} is already being cleaned")
            self._in_progress.add(key)
        try:
            return self._clean_pass(log_, now_ms)
        finally:
            with self._logs_lock:
                self._in_progress.discard(key)

    def _clean_pass(self, log_, now_ms: int | None) -> CleanerStats:
        now_ms = self.clock_ms() if now_ms is None else now_ms
        cfg = log_.config
        delete_retention_ms = int(_conf(cfg, "delete_retention_ms", "delete.retention.ms"))
        min_lag_ms = int(_conf(cfg, "min_compaction_lag_ms", "min.compaction.lag.ms"))
        segment_bytes = int(_conf(cfg, "segment_bytes", "segment.bytes"))
        stats = CleanerStats()
        with log_.lock:
            segments = log_.segments
            log_start = log_.log_start_offset
            log_unstable = log_.first_unstable_offset
            active = segments[-1]
            active_size = active.size
        stats.first_dirty_offset = self.first_dirty_offset(log_, log_start, active.base_offset)

        try:
            return self._clean(log_, now_ms, stats, segments, log_start, log_unstable, active,
                               active_size, delete_retention_ms, min_lag_ms, segment_bytes)
        except (KafkaStorageError, CorruptRecordError) as e:
            # A concurrent truncation or retention deleted or cut what we were reading.
            with log_.lock:
                now_segments = [] if log_.closed else log_.segments
                changed = (log_.closed or any(s.closed for s in segments)
                           or [id(s) for s in now_segments[:len(segments) - 1]]
                           != [id(s) for s in segments[:-1]]
                           or (now_segments and now_segments[-1] is active
                               and active.size < active_size))
            if changed:
                raise CleaningAbortedError(f"log {log_.dir} changed during cleaning: {e}") from e
            raise

    def _clean(self, log_, now_ms, stats, segments, log_start, log_unstable, active, active_size,
               delete_retention_ms, min_lag_ms, segment_bytes) -> CleanerStats:
        closed = segments[:-1]
        first_dirty = stats.first_dirty_offset
        # 1. scan
        txns = TxnState()
        for seg in segments:
            end = active_size if seg is active else seg.size
            for buf, pos, h in iter_segment_batches(seg, end):
                stats.bytes_read += h.size
                txns.observe(h, buf, pos, seg.log_path)
        self._hook("scanned")

        # 2. the cleanable range
        uncleanable = active.base_offset
        for bound in (txns.first_unstable_offset, log_unstable):
            if bound is not None:
                uncleanable = min(uncleanable, bound)
        if min_lag_ms > 0:
            for seg in closed:
                if seg.next_offset > first_dirty and seg.largest_timestamp > now_ms - min_lag_ms:
                    uncleanable = min(uncleanable, seg.base_offset)
                    break
        # the range ends on a segment boundary: the last closed segment wholly below it
        cleanable = []
        for seg in closed:
            if seg.next_offset > uncleanable:
                break
            cleanable.append(seg)

        # 3. the offset map over the dirty segments
        offset_map, map_end = self._build_offset_map(cleanable, first_dirty, txns)
        stats.map_entries = len(offset_map)
        self._hook("offset_map_built")
        cleanable = [s for s in cleanable if s.next_offset <= map_end]
        stats.first_uncleanable_offset = map_end
        if not cleanable:
            return stats

        # 4. rewrite, group by group
        flt = BatchFilter(offset_map, txns, now_ms, delete_retention_ms, stats)
        # The offset map is only valid for the log it was built from: if any segment of the
        # range was deleted or cut (truncation, retention) the pass must stop, or records could
        # be dropped for a newer value that no longer exists (Kafka aborts cleaning on truncate).
        guard = [(seg, seg.size) for seg in cleanable]
        for group in group_segments_by_size(cleanable, segment_bytes):
            if self._stop.is_set() and self._thread is not None:
                raise CleaningAbortedError("cleaner shutting down")
            self._clean_group(log_, group, flt, stats, guard)
            # the group is now one cleaned segment: guard it instead of the replaced ones
            replaced = {id(s) for s in group}
            guard = [(s, n) for s, n in guard if id(s) not in replaced]
        stats.segments_cleaned = len(cleanable)

        # 5. checkpoint
        self._hook("before_checkpoint")
        with self._checkpoint_lock:
            offsets = self._read_checkpoints(log_)
            offsets[self._tp(log_)] = map_end
            write_cleaner_checkpoint(self._checkpoint_path(log_), offsets)
        self._hook("after_checkpoint")
        if stats.next_delete_horizon_ms is None:
            self._next_horizon[log_] = None
        else:
            self._next_horizon[log_] = stats.next_delete_horizon_ms
        self.passes += 1
        log.info("cleaned %s: %d segments in %d groups, %d/%d records kept, %d tombstones and "
                 "%d markers removed, %d -> %d bytes, dirty [%d, %d)", log_.dir,
                 stats.segments_cleaned, stats.groups, stats.records_retained,
                 stats.records_read, stats.tombstones_removed, stats.markers_removed,
                 sum(s.size for s in cleanable), stats.bytes_written, first_dirty, map_end)
        return stats

    def _build_offset_map(self, cleanable: list, first_dirty: int, txns: "TxnState") -> tuple[dict[bytes, int], int]:
        """Key -> last offset over the dirty segments of `cleanable` (committed data only), and the
        offset the map covers up to (less than the range when the map fills up)."""
        offset_map: dict[bytes, int] = {}
        map_end = first_dirty
        for seg in cleanable:
            if seg.next_offset <= first_dirty:
                continue
            if offset_map and len(offset_map) >= self.max_map_entries:
                break  # map full: this pass cleans up to here (Kafka does the same)
            for buf, pos, h in iter_segment_batches(seg, seg.size):
                if h.is_control or h.records_count == 0:
                    continue
                txn = txns.batch_txn.get(h.base_offset) if h.is_transactional else None
                if txn is not None and txn in txns.aborted:
                    continue
                for r in decode_records(bytes(buf[pos:pos + h.size]), h, seg.log_path):
                    if r.key is not None:
                        offset_map[r.key] = r.offset
            map_end = seg.next_offset
        return offset_map, map_end

    def _clean_group(self, log_, group: list, flt: BatchFilter, stats: CleanerStats,
                     guard: list) -> None:
        cleaned = log_.new_cleaned_segment(group[0].base_offset)
        # "idle": not handed to replace_segments; "swapping": inside it; "done": swapped in.
        state = "idle"
        try:
            pending: list[bytes] = []
            pending_size = 0
            for seg in group:
                for buf, pos, h in iter_segment_batches(seg, seg.size):
                    out = flt.filter(buf, pos, h, seg.log_path)
                    if out is None:
                        continue
                    pending.append(out)
                    pending_size += len(out)
                    if pending_size >= _WRITE_CHUNK:
                        cleaned.append(b"".join(pending))
                        stats.bytes_written += pending_size
                        pending, pending_size = [], 0
            if pending:
                cleaned.append(b"".join(pending))
                stats.bytes_written += pending_size
            self._hook("group_written")
            with log_.lock:
                if log_.closed:
                    raise CleaningAbortedError(f"log {log_.dir} was closed during cleaning")
                current = {id(s) for s in log_.segments[:-1]}
                if any(id(seg) not in current or seg.size != size for seg, size in guard):
                    raise CleaningAbortedError(
                        f"segments of {log_.dir} changed during cleaning (truncation or retention)")
                self._hook("before_swap")
                state = "swapping"
                log_.replace_segments([cleaned], group)
                state = "done"
            stats.groups += 1
            self._hook("after_swap")
        finally:
            if state != "done":
                if log_.closed:
                    # The log crashed or closed under us: leave the files as a crash would (their
                    # unsynced bytes lost); recovery on open deletes .cleaned and settles .swap.
                    cleaned.crash()
                elif state == "idle":
                    _discard_segment(cleaned)
                else:
                    # replace_segments failed part-way (an I/O error): some files may already be
                    # .swap and old segments deleted, so deleting ours could lose data. Leave
                    # them for recovery when the log is next opened.
                    log.error("swap of cleaned segment %s into %s failed part-way; the log must "
                              "be reopened to recover", cleaned.log_path, log_.dir)


def _discard_segment(segment) -> None:
    try:
        segment.delete()
    except Exception:  # the .cleaned files are also removed by recovery on open
        log.warning("could not delete cleaned segment %r", segment, exc_info=True)


def group_segments_by_size(segments: list, max_size: int) -> list[list]:
    """Kafka's groupSegmentsBySize: consecutive segments whose total size fits ``max_size`` and
    whose offsets fit an Int32 relative to the group's base."""
    groups: list[list] = []
    i = 0
    while i < len(segments):
        group = [segments[i]]
        size = segments[i].size
        i += 1
        while i < len(segments):
            nxt = segments[i]
            if size + nxt.size > max_size:
                break
            if nxt.next_offset - 1 - group[0].base_offset > 2**31 - 1:
                break
            group.append(nxt)
            size += nxt.size
            i += 1
        groups.append(group)
    return groups
