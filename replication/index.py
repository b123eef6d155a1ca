"""Segment indexes: Kafka's OffsetIndex and TimeIndex (rules 4 and 10), and `DurableFile`.

Both indexes are sparse, fixed-size-entry files keyed by offsets *relative* to the segment's
base offset:

* ``.index``:     ``relative_offset i32 | position i32`` (8 bytes), big-endian;
* ``.timeindex``: ``timestamp i64 | relative_offset i32`` (12 bytes), big-endian.

Unlike Kafka we do not preallocate and mmap the files: the entries live in two in-memory
arrays (searched with ``bisect``) and the file holds exactly ``entries * entry_size`` bytes.
New entries are buffered and written in bulk on ``flush()``/``close()``; an unflushed segment's
indexes are rebuilt by recovery anyway. ``max_entries`` (from ``segment.index.bytes``) is a
logical limit: a full index makes the segment roll (rule 3), ``trim_to_valid_size()`` on roll
makes it "full" at its current size, and ``resize()`` gives the room back (rule 10).

`DurableFile` is the raw file both segments and indexes write through. It tracks the size that
was last fsynced so that :meth:`DurableFile.crash` can simulate a power cut: every byte not
covered by an fsync is lost.
"""

from __future__ import annotations

import logging
import operator
import os
import struct
import sys
from array import array
from bisect import bisect_left, bisect_right
from itertools import islice

from replication.errors import CorruptIndexError, InvalidConfigurationError, KafkaStorageError

log = logging.getLogger(__name__)

__all__ = ["DurableFile", "OffsetIndex", "TimeIndex", "INT32_MAX"]

INT32_MAX = 2**31 - 1
NO_TIMESTAMP = -1

_OFFSET_ENTRY = struct.Struct(">ii")
_TIME_ENTRY = struct.Struct(">qi")


class DurableFile:
    """A file opened once (one fd), written at its end with ``pwrite``, read with ``pread``.

    ``size`` is the logical length (never re-stat'ed); ``synced_size`` is the length covered by
    the last fsync. Truncation lowers both, so a simulated crash never resurrects cut bytes.
    """

    __slots__ = ("path", "fd", "size", "synced_size")

    def __init__(self, path: str, *, create: bool = True) -> None:
        self.path = path
        flags = os.O_RDWR | (os.O_CREAT if create else 0)
        try:
            self.fd = os.open(path, flags, 0o644)
            self.size = os.fstat(self.fd).st_size
        except OSError as e:
            raise KafkaStorageError(f"cannot open {path}: {e}") from e
        # What exists when we open it is taken as durable: it survived whatever came before.
        self.synced_size = self.size

    @property
    def closed(self) -> bool:
        return self.fd < 0

    def append(self, data) -> int:
        """Write ``data`` at the end; returns the position it was written at."""
        pos = self.size
        n = len(data)
        try:
            written = os.pwrite(self.fd, data, pos)
            while written < n:  # regular files rarely write short, but it is allowed
                written += os.pwrite(self.fd, memoryview(data)[written:], pos + written)
        except OSError as e:
            raise KafkaStorageError(f"write to {self.path} at {pos} failed: {e}") from e
        self.size = pos + n
        return pos

    def append_parts(self, parts, n: int) -> int:
        """Write the buffers in ``parts`` (``n`` bytes in all) at the end with one ``pwritev``
        (no joining copy); returns the position they were written at."""
        pos = self.size
        try:
            written = os.pwritev(self.fd, parts, pos)
            if written < n:  # short write: finish the rest the simple way
                rest = memoryview(b"".join(parts))[written:]
                while written < n:
                    k = os.pwrite(self.fd, rest, pos + written)
                    rest = rest[k:]
                    written += k
        except OSError as e:
            raise KafkaStorageError(f"write to {self.path} at {pos} failed: {e}") from e
        self.size = pos + n
        return pos

    def read(self, position: int, size: int) -> bytes:
        try:
            return os.pread(self.fd, size, position)
        except OSError as e:
            raise KafkaStorageError(f"read of {self.path} at {position} failed: {e}") from e

    def truncate(self, size: int) -> None:
        if size >= self.size:
            return
        try:
            os.ftruncate(self.fd, size)
        except OSError as e:
            raise KafkaStorageError(f"truncate of {self.path} to {size} failed: {e}") from e
        self.size = size
        if self.synced_size > size:
            self.synced_size = size

    def fsync(self) -> None:
        if self.synced_size == self.size:
            return
        try:
            os.fdatasync(self.fd)
        except OSError as e:
            raise KafkaStorageError(f"fsync of {self.path} failed: {e}") from e
        self.synced_size = self.size

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def crash(self) -> None:
        """Power-cut simulation: drop every byte not covered by an fsync, then close."""
        if self.fd >= 0:
            if self.size > self.synced_size:
                os.ftruncate(self.fd, self.synced_size)
                self.size = self.synced_size
            os.close(self.fd)
            self.fd = -1

    def rename(self, new_path: str) -> None:
        os.replace(self.path, new_path)
        self.path = new_path

    def delete(self) -> None:
        self.close()
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass


class _Index:
    """Shared machinery: a key array (searched), a value array, a pending write buffer."""

    ENTRY_SIZE = 0
    _entry: struct.Struct

    def __init__(self, path: str, base_offset: int, max_index_size: int) -> None:
        if max_index_size < self.ENTRY_SIZE:
            raise InvalidConfigurationError(
                f"segment.index.bytes {max_index_size} is smaller than one index entry "
                f"({self.ENTRY_SIZE} bytes)", key="segment.index.bytes")
        self.base_offset = base_offset
        self._file = DurableFile(path)
        self.max_entries = max_index_size // self.ENTRY_SIZE
        self._written = 0  # entries already in the file
        self._corrupt_reason = ""
        self._load()
        self.max_entries = max(self.max_entries, len(self))

    # -- file ------------------------------------------------------------------------------

    @property
    def path(self) -> str:
        return self._file.path

    @property
    def file(self) -> DurableFile:
        return self._file

    def _load(self) -> None:
        raise NotImplementedError

    def _pending_bytes(self) -> bytes:
        raise NotImplementedError

    def _write_pending(self) -> None:
        if self._written < len(self):
            self._file.append(self._pending_bytes())
            self._written = len(self)

    def flush(self) -> None:
        """Write buffered entries and fsync."""
        self._write_pending()
        self._file.fsync()

    def close(self) -> None:
        if not self._file.closed:
            self._write_pending()
            self._file.close()

    def crash(self) -> None:
        self._file.crash()

    def delete(self) -> None:
        self._file.delete()

    def rename(self, new_path: str) -> None:
        self._file.rename(new_path)

    # -- entries ---------------------------------------------------------------------------

    def __len__(self) -> int:  # overridden
        raise NotImplementedError

    @property
    def entries(self) -> int:
        return len(self)

    def is_full(self) -> bool:
        return len(self) >= self.max_entries

    def resize(self, max_index_size: int) -> None:
        """Set the capacity from a size in bytes (never below the current entries)."""
        self.max_entries = max(max_index_size // self.ENTRY_SIZE, len(self))

    def trim_to_valid_size(self) -> None:
        """Capacity = current entries (done when the segment becomes inactive)."""
        self._write_pending()
        self.max_entries = len(self)

    def _truncate_entries(self, n: int) -> None:
        raise NotImplementedError

    def _set_entries(self, n: int) -> None:
        if n >= len(self):
            return
        self._truncate_entries(n)
        if self._written > n:
            self._file.truncate(n * self.ENTRY_SIZE)
            self._written = n

    def reset(self) -> None:
        """Drop every entry (recovery rebuilds from scratch)."""
        self._set_entries(0)
        self._file.truncate(0)
        self._written = 0

    def sanity_check(self) -> None:
        """Raise CorruptIndexError if the file was not a whole number of valid entries."""
        if self._corrupt_reason:
            raise CorruptIndexError(f"corrupt index {self.path}: {self._corrupt_reason}")


class OffsetIndex(_Index):
    """Offset -> file position. ``lookup(o)`` is the greatest entry <= o, else (base, 0)."""

    ENTRY_SIZE = 8
    _entry = _OFFSET_ENTRY

    def _load(self) -> None:
        self._rel = array("i")
        self._pos = array("i")
        size = self._file.size
        if size % self.ENTRY_SIZE:
            self._corrupt_reason = f"size {size} is not a multiple of {self.ENTRY_SIZE}"
            return
        if size:
            raw = self._file.read(0, size)
            flat = array("i", raw)
            if flat.itemsize != 4:  # pragma: no cover - exotic platforms
                raise CorruptIndexError("platform int is not 32 bits")
            if sys.byteorder == "little":
                flat.byteswap()
            self._rel = flat[0::2]
            self._pos = flat[1::2]
            self._written = len(self._rel)
            rel = self._rel
            if rel[0] < 0 or not all(map(operator.lt, rel, islice(rel, 1, None))):
                self._corrupt_reason = "relative offsets are not strictly increasing from >= 0"
            elif self._pos[0] < 0 or not all(map(operator.lt, self._pos, islice(self._pos, 1, None))):
                self._corrupt_reason = "positions are not strictly increasing"

    def __len__(self) -> int:
        return len(self._rel)

    def _pending_bytes(self) -> bytes:
        pack = _OFFSET_ENTRY.pack
        rel, pos = self._rel, self._pos
        return b"".join(pack(rel[i], pos[i]) for i in range(self._written, len(rel)))

    def _truncate_entries(self, n: int) -> None:
        del self._rel[n:]
        del self._pos[n:]

    @property
    def last_offset(self) -> int:
        """Offset of the last entry, or the base offset if empty."""
        return self.base_offset + self._rel[-1] if self._rel else self.base_offset

    @property
    def last_position(self) -> int:
        return self._pos[-1] if self._pos else 0

    def entry(self, n: int) -> tuple[int, int]:
        return self.base_offset + self._rel[n], self._pos[n]

    def append(self, offset: int, position: int) -> None:
        """Add an entry; offsets and positions must increase strictly."""
        rel = offset - self.base_offset
        if self._rel and (rel <= self._rel[-1] or position <= self._pos[-1]):
            raise CorruptIndexError(
                f"index {self.path}: entry ({offset}, {position}) does not follow "
                f"({self.last_offset}, {self._pos[-1]})")
        if rel < 0 or rel > INT32_MAX:
            raise CorruptIndexError(
                f"index {self.path}: offset {offset} is not within int32 of base {self.base_offset}")
        if len(self._rel) >= self.max_entries:
            raise CorruptIndexError(f"index {self.path} is full ({self.max_entries} entries)")
        self._rel.append(rel)
        self._pos.append(position)

    def lookup(self, target_offset: int) -> tuple[int, int]:
        """(offset, position) of the greatest entry with offset <= target, else (base, 0)."""
        i = bisect_right(self._rel, target_offset - self.base_offset) - 1
        if i < 0:
            return self.base_offset, 0
        return self.base_offset + self._rel[i], self._pos[i]

    def floor_position(self, position: int) -> int:
        """The greatest indexed batch position <= ``position`` (0 if none): a batch boundary."""
        i = bisect_right(self._pos, position) - 1
        return self._pos[i] if i >= 0 else 0

    def truncate_to(self, offset: int) -> None:
        """Rule 10: no entry <= offset -> drop all; exact entry -> drop from it; else keep <=."""
        # Keeping exactly the entries below the target is the three cases at once.
        self._set_entries(bisect_left(self._rel, offset - self.base_offset))

    def truncate_to_position(self, position: int) -> None:
        """Drop entries pointing at or beyond ``position`` (the log was cut there)."""
        self._set_entries(bisect_right(self._pos, position - 1))

    def sanity_check(self, log_size: int | None = None) -> None:
        super().sanity_check()
        if log_size is not None and self._pos and self._pos[-1] >= log_size:
            raise CorruptIndexError(
                f"corrupt index {self.path}: last entry points at position {self._pos[-1]} "
                f"but the log has {log_size} bytes")


class TimeIndex(_Index):
    """Timestamp -> offset. Timestamps strictly increase; ``lookup(t)`` is the greatest entry
    with timestamp <= t, else (-1, base). Full at ``max_entries - 1`` (one slot is kept for the
    final entry written when the segment becomes inactive)."""

    ENTRY_SIZE = 12
    _entry = _TIME_ENTRY

    def _load(self) -> None:
        self._ts = array("q")
        self._rel = array("i")
        size = self._file.size
        if size % self.ENTRY_SIZE:
            self._corrupt_reason = f"size {size} is not a multiple of {self.ENTRY_SIZE}"
            return
        if size:
            raw = self._file.read(0, size)
            ts, rel = self._ts, self._rel
            for t, r in _TIME_ENTRY.iter_unpack(raw):
                ts.append(t)
                rel.append(r)
            self._written = len(ts)
            if rel[0] < 0 or not all(map(operator.le, rel, islice(rel, 1, None))):
                self._corrupt_reason = "relative offsets decrease or are negative"
            elif not all(map(operator.lt, ts, islice(ts, 1, None))):
                self._corrupt_reason = "timestamps are not strictly increasing"

    def __len__(self) -> int:
        return len(self._ts)

    def _pending_bytes(self) -> bytes:
        pack = _TIME_ENTRY.pack
        ts, rel = self._ts, self._rel
        return b"".join(pack(ts[i], rel[i]) for i in range(self._written, len(ts)))

    def _truncate_entries(self, n: int) -> None:
        del self._ts[n:]
        del self._rel[n:]

    def is_full(self) -> bool:
        return len(self._ts) >= self.max_entries - 1

    @property
    def last_entry(self) -> tuple[int, int]:
        """(timestamp, offset) of the last entry, or (-1, base) if empty."""
        if not self._ts:
            return NO_TIMESTAMP, self.base_offset
        return self._ts[-1], self.base_offset + self._rel[-1]

    def entry(self, n: int) -> tuple[int, int]:
        return self._ts[n], self.base_offset + self._rel[n]

    def maybe_append(self, timestamp: int, offset: int, skip_full_check: bool = False) -> bool:
        """Add (timestamp, offset) if the timestamp is above the last entry's. Returns True if added."""
        if not skip_full_check and self.is_full():
            return False
        rel = offset - self.base_offset
        if self._ts:
            if rel < self._rel[-1]:
                raise CorruptIndexError(
                    f"time index {self.path}: offset {offset} is below the last entry's "
                    f"{self.base_offset + self._rel[-1]}")
            if timestamp <= self._ts[-1]:
                return False
        if timestamp < 0:
            return False
        if rel < 0 or rel > INT32_MAX:
            raise CorruptIndexError(
                f"time index {self.path}: offset {offset} is not within int32 of base {self.base_offset}")
        if len(self._ts) >= self.max_entries:
            # skip_full_check may use the reserved slot; past it the file would exceed its size.
            self.max_entries = len(self._ts) + 1
        self._ts.append(timestamp)
        self._rel.append(rel)
        return True

    def lookup(self, target_timestamp: int) -> tuple[int, int]:
        i = bisect_right(self._ts, target_timestamp) - 1
        if i < 0:
            return NO_TIMESTAMP, self.base_offset
        return self._ts[i], self.base_offset + self._rel[i]

    def truncate_to(self, offset: int) -> None:
        """Rule 10, on the offsets: keep entries with offset < target (and == target dropped)."""
        # Keeping exactly the entries below the target is the three cases at once.
        self._set_entries(bisect_left(self._rel, offset - self.base_offset))

    def sanity_check(self, next_offset: int | None = None) -> None:
        super().sanity_check()
        if next_offset is not None and self._rel and self.base_offset + self._rel[-1] >= next_offset:
            raise CorruptIndexError(
                f"corrupt time index {self.path}: last entry offset "
                f"{self.base_offset + self._rel[-1]} is beyond the segment's last offset")
