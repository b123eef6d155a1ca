"""One log segment: Kafka's LogSegment (rules 3, 4, 10).

Files, named by the segment's base offset (the first offset it may hold)::

    <20-digit base>.log         whole record batches, back to back
    <20-digit base>.index       sparse offset index   (replication.index.OffsetIndex)
    <20-digit base>.timeindex   sparse time index     (replication.index.TimeIndex)

An optional suffix (``.cleaned``, ``.swap``) follows the extension; the log cleaner writes
``.cleaned`` segments that `Log.replace_segments` swaps in.

The segment stores bytes as they come: an append is one ``pwrite`` of already-encoded batches,
and a read is one ``pread`` of a contiguous range of whole batches. Only headers are parsed
(never records), except by recovery, which also checks every batch's CRC.
"""

from __future__ import annotations

import logging
import os
import struct
import time
from typing import Callable, Iterator, NamedTuple

from replication.errors import (
    CorruptIndexError, CorruptRecordError, InvalidConfigurationError, LogSegmentOffsetOverflowError,
)
from replication.index import INT32_MAX, NO_TIMESTAMP, DurableFile, OffsetIndex, TimeIndex
from replication.records import (
    BATCH_HEADER_SIZE, BatchHeader, decode_records, iter_batch_headers,
)

log = logging.getLogger(__name__)

__all__ = [
    "LogSegment", "OffsetPosition", "SegmentRead", "log_file_name", "offset_from_file_name",
    "LOG_SUFFIX", "INDEX_SUFFIX", "TIME_INDEX_SUFFIX", "CLEANED_SUFFIX", "SWAP_SUFFIX",
    "DELETED_SUFFIX",
]

LOG_SUFFIX = ".log"
INDEX_SUFFIX = ".index"
TIME_INDEX_SUFFIX = ".timeindex"
CLEANED_SUFFIX = ".cleaned"
SWAP_SUFFIX = ".swap"
DELETED_SUFFIX = ".deleted"

LOG_OVERHEAD = 12  # base_offset i64 + batch_length i32: not counted by batch_length
_PREFIX = struct.Struct(">qi")
# base_offset, batch_length, partition_leader_epoch, magic, crc, attributes, last_offset_delta,
# first_timestamp, max_timestamp: the header fields a scan needs, without the CRC check.
_SCAN = struct.Struct(">qiibIhiqq")
_SCAN_CHUNK = 16 * 1024
_RECOVERY_CHUNK = 8 * 1024 * 1024


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


def log_file_name(base_offset: int) -> str:
    return f"{base_offset:020d}"


def offset_from_file_name(name: str) -> int:
    """Base offset from ``00000000000000000042.log[.suffix]``."""
    return int(os.path.basename(name).split(".", 1)[0])


class OffsetPosition(NamedTuple):
    """A batch located in a segment: its last offset, byte position and size."""

    last_offset: int
    position: int
    size: int


class SegmentRead(NamedTuple):
    """What `LogSegment.read` returns: whole batches starting at ``position``."""

    position: int
    data: bytes
    first_entry_incomplete: bool  # the first batch was larger than max_size allowed


class LogSegment:
    """One segment of a log. Not thread-safe: the owning `Log` serialises access."""

    def __init__(
        self,
        dir: str,
        base_offset: int,
        *,
        index_interval_bytes: int = 4096,
        max_index_size: int = 10 * 1024 * 1024,
        roll_jitter_ms: int = 0,
        suffix: str = "",
        clock: Callable[[], int] | None = None,
    ) -> None:
        if base_offset < 0:
            raise InvalidConfigurationError(f"segment base offset {base_offset} is negative")
        self.dir = dir
        self.base_offset = base_offset
        self.index_interval_bytes = index_interval_bytes
        self.max_index_size = max_index_size
        self.roll_jitter_ms = roll_jitter_ms
        self.suffix = suffix
        self._clock = clock or _now_ms
        stem = os.path.join(dir, log_file_name(base_offset))
        log_path = stem + LOG_SUFFIX + suffix
        index_path = stem + INDEX_SUFFIX + suffix
        time_index_path = stem + TIME_INDEX_SUFFIX + suffix
        #: True if an index file did not exist when the segment was opened (it must be rebuilt).
        self.index_files_created = not (os.path.exists(index_path) and os.path.exists(time_index_path))
        self._file = DurableFile(log_path)
        self.offset_index = OffsetIndex(index_path, base_offset, max_index_size)
        self.time_index = TimeIndex(time_index_path, base_offset, max_index_size)
        self.created_ms = self._clock()
        self._bytes_since_last_index_entry = 0
        self._rolling_based_timestamp: int | None = None
        self._next_offset: int | None = None if self._file.size else base_offset
        # The time index's last entry is the max timestamp so far for a segment closed cleanly
        # (close/roll write it); recovery recomputes it otherwise.
        self._max_timestamp, self._offset_of_max_timestamp = self.time_index.last_entry

    # -- properties -------------------------------------------------------------------------

    @property
    def size(self) -> int:
        return self._file.size

    @property
    def log_path(self) -> str:
        return self._file.path

    @property
    def log_file(self) -> DurableFile:
        return self._file

    @property
    def closed(self) -> bool:
        return self._file.closed

    @property
    def next_offset(self) -> int:
        """The offset after the segment's last batch (its base offset if empty)."""
        if self._next_offset is None:
            self._next_offset = self._read_next_offset()
        return self._next_offset

    @property
    def max_timestamp_so_far(self) -> int:
        return self._max_timestamp

    @property
    def offset_of_max_timestamp_so_far(self) -> int:
        return self._offset_of_max_timestamp

    @property
    def largest_timestamp(self) -> int:
        """The largest batch timestamp, or the file's modification time if no batch has one."""
        if self._max_timestamp >= 0:
            return self._max_timestamp
        return os.stat(self._file.path).st_mtime_ns // 1_000_000

    def __repr__(self) -> str:
        return f"LogSegment(base_offset={self.base_offset}, size={self.size}, path={self.log_path!r})"

    # -- append -----------------------------------------------------------------------------

    def append(self, data, headers: list[BatchHeader] | None = None) -> None:
        """Append whole batches with one write, then add index entries (rule 4).

        ``data`` is bytes-like, or a list of bytes-like pieces written with one ``pwritev``
        (then ``headers`` are required). ``headers`` are the batches' headers with positions
        relative to the start of ``data`` (as `iter_batch_headers` gives them); parsed here when
        omitted. Offsets must not precede the segment's base nor exceed it by more than
        ``2**31 - 1``.
        """
        if isinstance(data, list):
            if headers is None:
                data = b"".join(data)
        if headers is None:
            headers = list(iter_batch_headers(data, source=self.log_path))
        if not headers:
            return
        first = headers[0]
        last = headers[-1]
        if first.base_offset < self.base_offset or last.last_offset - self.base_offset > INT32_MAX:
            raise LogSegmentOffsetOverflowError(
                f"offsets {first.base_offset}..{last.last_offset} cannot be stored in segment "
                f"{self.log_path} with base offset {self.base_offset}")
        if isinstance(data, list):
            position = self._file.append_parts(data, last.position + last.size)
        else:
            position = self._file.append(data)
        if position == 0:
            self._rolling_based_timestamp = first.max_timestamp
        interval = self.index_interval_bytes
        since = self._bytes_since_last_index_entry
        max_ts = self._max_timestamp
        for h in headers:
            if h.max_timestamp > max_ts:
                max_ts = self._max_timestamp = h.max_timestamp
                self._offset_of_max_timestamp = h.last_offset
            if since > interval:
                if not self.offset_index.is_full():
                    self.offset_index.append(h.last_offset, position + h.position)
                self.time_index.maybe_append(max_ts, self._offset_of_max_timestamp)
                since = 0
            since += h.size
        self._bytes_since_last_index_entry = since
        self._next_offset = last.base_offset + last.last_offset_delta + 1

    # -- roll -------------------------------------------------------------------------------

    def time_waited_for_roll(self, now_ms: int, max_timestamp_in_messages: int) -> int:
        """How long this segment has been filling: by batch timestamps if the first batch has
        one, else by wall clock since the segment was created (rule 3)."""
        if self._rolling_based_timestamp is None and self.size > 0:
            first = next(self._scan(0, self.size), None)
            if first is not None:
                self._rolling_based_timestamp = first[4]
        ts = self._rolling_based_timestamp
        if ts is not None and ts >= 0:
            return max_timestamp_in_messages - ts
        return now_ms - self.created_ms

    def can_convert_to_relative_offset(self, offset: int) -> bool:
        return 0 <= offset - self.base_offset <= INT32_MAX

    def should_roll(self, messages_size: int, max_timestamp_in_messages: int,
                    max_offset_in_messages: int, now_ms: int, segment_bytes: int,
                    segment_ms: int) -> bool:
        """Rule 3: size, time (with this segment's jitter), full indexes, offset overflow."""
        size = self._file.size
        if size > segment_bytes - messages_size:
            return True
        if size > 0 and (self.time_waited_for_roll(now_ms, max_timestamp_in_messages)
                         > segment_ms - self.roll_jitter_ms):
            return True
        return (self.offset_index.is_full() or self.time_index.is_full()
                or not self.can_convert_to_relative_offset(max_offset_in_messages))

    def on_become_inactive(self) -> None:
        """Called on roll: record the final max timestamp and fix the indexes' size."""
        if self._max_timestamp >= 0:
            self.time_index.maybe_append(self._max_timestamp, self._offset_of_max_timestamp,
                                         skip_full_check=True)
        self.offset_index.trim_to_valid_size()
        self.time_index.trim_to_valid_size()

    def resize_indexes(self, max_index_size: int) -> None:
        self.offset_index.resize(max_index_size)
        self.time_index.resize(max_index_size)

    # -- scanning and reading ---------------------------------------------------------------

    def _scan(self, position: int, end: int) -> Iterator[tuple[int, int, int, int, int]]:
        """Yield ``(position, size, base_offset, last_offset, max_timestamp)`` per batch from
        ``position`` without reading record bodies or checking CRCs."""
        read = self._file.read
        unpack = _SCAN.unpack_from
        while position < end:
            buf = read(position, min(_SCAN_CHUNK, end - position))
            n = len(buf)
            p = 0
            while p + BATCH_HEADER_SIZE <= n:
                base, length, _e, _m, _c, _a, last_delta, _ft, max_ts = unpack(buf, p)
                size = length + LOG_OVERHEAD
                if size < BATCH_HEADER_SIZE or position + p + size > end:
                    raise CorruptRecordError(
                        f"batch at position {position + p} of {self.log_path} declares {size} "
                        f"bytes, {end - position - p} present", self.log_path, position + p, base)
                yield position + p, size, base, base + last_delta, max_ts
                p += size
            if p == 0:
                raise CorruptRecordError(
                    f"torn batch header at position {position} of {self.log_path} "
                    f"({n} bytes left)", self.log_path, position, -1)
            position += p

    def batches(self, start_position: int = 0, end_position: int | None = None, *,
                validate_crc: bool = False) -> Iterator[BatchHeader]:
        """Batch headers from ``start_position``; reads large chunks, never decodes records.

        Raises CorruptRecordError (naming the file and position) at a torn or corrupt batch.
        """
        end = self._file.size if end_position is None else end_position
        pos = start_position
        path = self._file.path
        chunk_size = _RECOVERY_CHUNK if validate_crc else _SCAN_CHUNK * 4
        while pos < end:
            chunk = self._file.read(pos, min(chunk_size, end - pos))
            n = len(chunk)
            p = 0
            while p + LOG_OVERHEAD <= n:
                size = _PREFIX.unpack_from(chunk, p)[1] + LOG_OVERHEAD
                if size < BATCH_HEADER_SIZE or p + size > n:
                    break
                p += size
            if p == 0:
                # One batch bigger than the chunk, or a torn/corrupt batch: read exactly it
                # (iter_batch_headers then names what is wrong).
                if n >= LOG_OVERHEAD:
                    size = _PREFIX.unpack_from(chunk, 0)[1] + LOG_OVERHEAD
                    if BATCH_HEADER_SIZE <= size <= end - pos:
                        chunk = self._file.read(pos, size)
                        p = size
                if p == 0:
                    yield from iter_batch_headers(chunk, base_position=pos, source=path,
                                                  validate_crc=validate_crc)
                    raise CorruptRecordError(  # pragma: no cover - iter_batch_headers raised
                        f"unreadable batch at position {pos} of {path}", path, pos, -1)
            yield from iter_batch_headers(memoryview(chunk)[:p], base_position=pos, source=path,
                                          validate_crc=validate_crc)
            pos += p

    def read_bytes(self, position: int, size: int) -> bytes:
        return self._file.read(position, size)

    def translate_offset(self, offset: int, starting_position: int = 0) -> OffsetPosition | None:
        """The first batch whose last offset is >= ``offset`` (None if there is none)."""
        _, position = self.offset_index.lookup(offset)
        if position < starting_position:
            position = starting_position
        for pos, size, _base, last, _ts in self._scan(position, self._file.size):
            if last >= offset:
                return OffsetPosition(last, pos, size)
        return None

    def read(self, start_offset: int, max_size: int, max_position: int | None = None,
             min_one_message: bool = False) -> SegmentRead | None:
        """Whole batches from the batch holding ``start_offset``, at most ``max_size`` bytes
        (at least one batch if ``min_one_message``) and ending at or before ``max_position``.

        None if no batch in this segment reaches ``start_offset``.
        """
        if max_size < 0:
            raise ValueError(f"invalid max_size {max_size} for segment {self.log_path}")
        found = self.translate_offset(start_offset)
        if found is None:
            return None
        start = found.position
        adjusted = max(max_size, found.size) if min_one_message else max_size
        incomplete = adjusted < found.size
        limit = self._file.size if max_position is None else max_position
        fetch_size = min(limit - start, adjusted)
        if fetch_size <= 0 or incomplete:
            return SegmentRead(start, b"", incomplete)
        if fetch_size < limit - start:
            # Cut by max_size: end on an indexed batch boundary if there is one past the first
            # batch, so the bytes read are exactly whole batches and need no trimming copy.
            boundary = self.offset_index.floor_position(start + fetch_size)
            if boundary > start:
                fetch_size = boundary - start
        data = self._file.read(start, fetch_size)
        # Keep whole batches only: walk the length prefixes (no per-record work).
        n = len(data)
        p = 0
        unpack = _PREFIX.unpack_from
        while p + LOG_OVERHEAD <= n:
            size = unpack(data, p)[1] + LOG_OVERHEAD
            if p + size > n:
                break
            p += size
        if p != n:
            data = data[:p]
        return SegmentRead(start, data, False)

    def _read_next_offset(self) -> int:
        """Offset after the last batch: scan from the last index entry to the end."""
        nxt = self.base_offset
        for _pos, _size, _base, last, _ts in self._scan(self.offset_index.last_position,
                                                          self._file.size):
            nxt = last + 1
        return nxt

    def find_offset_by_timestamp(self, timestamp: int, starting_offset: int = 0
                                 ) -> tuple[int, int] | None:
        """``(timestamp, offset)`` of the first record with timestamp >= ``timestamp`` and
        offset >= ``starting_offset``, or None."""
        _, ts_offset = self.time_index.lookup(timestamp)
        _, position = self.offset_index.lookup(max(ts_offset, starting_offset))
        for pos, size, _base, last, max_ts in self._scan(position, self._file.size):
            if max_ts >= timestamp and last >= starting_offset:
                buf = self._file.read(pos, size)
                header = next(iter_batch_headers(buf, base_position=pos, source=self.log_path,
                                                 validate_crc=False))
                for rec in decode_records(buf, header, self.log_path):
                    if rec.timestamp >= timestamp and rec.offset >= starting_offset:
                        return rec.timestamp, rec.offset
        return None

    # -- truncation and recovery ------------------------------------------------------------

    def truncate_to(self, offset: int) -> int:
        """Drop every batch from the one holding ``offset`` on (rule 10). Returns bytes dropped."""
        found = self.translate_offset(offset)
        self.offset_index.truncate_to(offset)
        self.time_index.truncate_to(offset)
        # Give the indexes their room back so an emptied segment is not rolled as "full".
        self.resize_indexes(self.max_index_size)
        if found is None:
            truncated = 0
        else:
            truncated = self._file.size - found.position
            self._file.truncate(found.position)
        if self._file.size == 0:
            self.created_ms = self._clock()
            self._rolling_based_timestamp = None
            self._next_offset = self.base_offset
        else:
            self._next_offset = None
        self._bytes_since_last_index_entry = 0
        if self._max_timestamp >= 0:
            self._load_largest_timestamp()
        return truncated

    def _load_largest_timestamp(self) -> None:
        """Max timestamp = the last time index entry, or a later batch's if larger."""
        ts, offset = self.time_index.last_entry
        _, position = self.offset_index.lookup(offset)
        for _pos, _size, _base, last, max_ts in self._scan(position, self._file.size):
            if max_ts > ts:
                ts, offset = max_ts, last
        self._max_timestamp, self._offset_of_max_timestamp = ts, offset

    def recover(self, epoch_cache=None) -> int:
        """Rebuild both indexes from the batches, checking each one; cut the file at the first
        invalid batch. Returns the number of bytes truncated.

        A batch is invalid if it is torn, fails its CRC, has offsets below the segment base or
        below the previous batch's, or cannot be expressed relative to the base. The leader
        epoch cache, when given, learns every epoch increase from the batches (Kafka does too).
        """
        self.offset_index.reset()
        self.time_index.reset()
        self.resize_indexes(self.max_index_size)
        valid = 0
        last_index_entry = 0
        max_ts, offset_of_max_ts = NO_TIMESTAMP, self.base_offset
        next_offset = self.base_offset
        interval = self.index_interval_bytes
        latest_epoch = epoch_cache.latest_epoch if epoch_cache is not None else None
        path = self._file.path
        try:
            for h in self.batches(0, validate_crc=True):
                last = h.base_offset + h.last_offset_delta
                if h.base_offset < next_offset or last < h.base_offset:
                    raise CorruptRecordError(
                        f"batch offsets {h.base_offset}..{last} at position {h.position} of "
                        f"{path} do not follow the previous next offset {next_offset}",
                        path, h.position, h.base_offset)
                if last - self.base_offset > INT32_MAX:
                    raise CorruptRecordError(
                        f"batch last offset {last} at position {h.position} of {path} "
                        f"overflows the segment base {self.base_offset}", path, h.position,
                        h.base_offset)
                if h.max_timestamp > max_ts:
                    max_ts, offset_of_max_ts = h.max_timestamp, last
                if valid - last_index_entry > interval:
                    self.offset_index.append(last, valid)
                    self.time_index.maybe_append(max_ts, offset_of_max_ts)
                    last_index_entry = valid
                valid += h.size
                next_offset = last + 1
                epoch = h.partition_leader_epoch
                if epoch_cache is not None and epoch >= 0 and (latest_epoch is None
                                                               or epoch > latest_epoch):
                    epoch_cache.assign(epoch, h.base_offset)
                    latest_epoch = epoch
        except CorruptRecordError as e:
            log.warning("found an invalid batch in log segment %s at byte %d: %s", path,
                        valid, e)
        truncated = self._file.size - valid
        if truncated > 0:
            log.warning("recovery of %s truncated %d invalid bytes at position %d "
                        "(next offset %d)", path, truncated, valid, next_offset)
            self._file.truncate(valid)
        self._max_timestamp, self._offset_of_max_timestamp = max_ts, offset_of_max_ts
        self.time_index.maybe_append(max_ts, offset_of_max_ts, skip_full_check=True)
        self._next_offset = next_offset
        self._bytes_since_last_index_entry = valid - last_index_entry
        self._rolling_based_timestamp = None
        self.index_files_created = False
        return truncated

    def check_tail(self) -> int:
        """Cut what does not parse after the last valid batch; returns the bytes dropped.

        One scan from the last offset index entry to the end, checking each batch (torn, CRC,
        offsets that do not follow). A cleanly closed segment is never recovered on open, so
        this is what catches garbage written after its last batch (a torn write the OS kept,
        a stray copy of a batch, zeros from a preallocated file). An index entry that does not
        point at its batch is not trusted: the scan then starts at the segment's beginning.
        """
        idx = self.offset_index
        start = idx.last_position if idx.entries else 0
        valid, next_offset, error = self._valid_prefix(start, idx.last_offset if start else None)
        if error is not None and valid == start and start > 0:
            valid, next_offset, error = self._valid_prefix(0, None)
        if error is None:
            return 0
        dropped = self._file.size - valid
        log.warning("log segment %s: dropping %d bytes from position %d, after the last valid "
                    "batch (next offset %d): %s", self._file.path, dropped, valid, next_offset, error)
        self._file.truncate(valid)
        self._file.fsync()
        self._next_offset = None
        return dropped

    def _valid_prefix(self, start: int, first_last_offset: int | None
                      ) -> tuple[int, int, CorruptRecordError | None]:
        """(end position, next offset) of the valid batches from ``start``, and the error that
        ended them (None: valid to the end). ``first_last_offset``: what the first batch's last
        offset must be (an index entry's offset)."""
        valid = start
        next_offset = self.base_offset
        path = self._file.path
        try:
            for h in self.batches(start, validate_crc=True):
                last = h.last_offset
                if (h.base_offset < next_offset or last < h.base_offset
                        or last - self.base_offset > INT32_MAX
                        or (valid == start and first_last_offset is not None and last != first_last_offset)):
                    raise CorruptRecordError(
                        f"batch offsets {h.base_offset}..{last} at position {h.position} of {path} "
                        f"do not follow offset {next_offset - 1}", path, h.position, h.base_offset)
                valid = h.position + h.size
                next_offset = last + 1
        except CorruptRecordError as e:
            return valid, next_offset, e
        return valid, next_offset, None

    def sanity_check(self) -> None:
        """Raise CorruptIndexError if an index file is inconsistent with the log (rebuild it)."""
        idx = self.offset_index
        idx.sanity_check(log_size=self._file.size)
        # Spot-check the first and last entries against the batches they point at (an entry maps
        # a batch's last offset to its position): cheap, and catches stale or foreign indexes.
        for n in {0, idx.entries - 1} if idx.entries else ():
            offset, position = idx.entry(n)
            try:
                found = next(self._scan(position, self._file.size), None)
            except CorruptRecordError:
                found = None
            if found is None or found[3] != offset:
                raise CorruptIndexError(
                    f"corrupt index {idx.path}: entry {n} ({offset} -> {position}) does not point "
                    "at the batch ending at that offset")
        self.time_index.sanity_check(next_offset=self.next_offset)

    # -- durability and lifecycle -----------------------------------------------------------

    def flush(self) -> None:
        """fsync the log, then both indexes."""
        self._file.fsync()
        self.offset_index.flush()
        self.time_index.flush()

    @property
    def unflushed_bytes(self) -> int:
        return self._file.size - self._file.synced_size

    def close(self) -> None:
        """Close without fsync; the final time index entry is written like Kafka does."""
        if self._file.closed:
            return
        if self._max_timestamp >= 0:
            self.time_index.maybe_append(self._max_timestamp, self._offset_of_max_timestamp,
                                         skip_full_check=True)
        self.offset_index.close()
        self.time_index.close()
        self._file.close()

    def crash(self) -> None:
        """Power-cut simulation: every file loses its bytes not covered by an fsync."""
        self._file.crash()
        self.offset_index.crash()
        self.time_index.crash()

    def delete(self) -> None:
        """Close and remove the three files."""
        self._file.delete()
        self.offset_index.delete()
        self.time_index.delete()

    def change_file_suffixes(self, old_suffix: str, new_suffix: str) -> None:
        """Rename the three files from ``<name>old_suffix`` to ``<name>new_suffix``."""
        for f in (self._file, self.offset_index.file, self.time_index.file):
            if not f.path.endswith(old_suffix):
                raise ValueError(f"{f.path} does not end with {old_suffix!r}")
            f.rename(f.path[: len(f.path) - len(old_suffix)] + new_suffix)
        self.suffix = new_suffix

    def has_suffix(self, suffix: str) -> bool:
        return self.suffix == suffix
