"""The leader epoch cache: Kafka's ``LeaderEpochFileCache`` (semantics rules 11-13).

One entry per leader epoch, ``(epoch, start_offset)``: the first offset written in that epoch.
Entries strictly increase in both fields. The cache is persisted as ``leader-epoch-checkpoint``
in Kafka's checkpoint text format::

    0                 <- version
    2                 <- number of entries
    0 0               <- "epoch start_offset", one per line
    3 120

Every mutation rewrites the file atomically (write a temporary file, fsync, rename over the
checkpoint, fsync the directory), so a crash leaves either the old or the new contents.
"""

from __future__ import annotations

import logging
import os
import threading
from typing import NamedTuple

from replication.errors import CorruptCheckpointError, InvalidEpochEntryError

log = logging.getLogger(__name__)

CHECKPOINT_FILE_NAME = "leader-epoch-checkpoint"
CHECKPOINT_VERSION = 0
UNDEFINED_EPOCH = -1
UNDEFINED_EPOCH_OFFSET = -1


class EpochEntry(NamedTuple):
    epoch: int
    start_offset: int


def write_checkpoint_atomically(path: str, text: str) -> None:
    """Replace ``path`` with ``text``: tmp file, fsync, rename, fsync the directory."""
    tmp = path + ".tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        data = text.encode("ascii")
        view = memoryview(data)
        while view:
            written = os.write(fd, view)
            view = view[written:]
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    dir_fd = os.open(os.path.dirname(os.path.abspath(path)), os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def read_epoch_checkpoint(path: str) -> list[EpochEntry]:
    """Read and validate a ``leader-epoch-checkpoint`` file. A missing or empty file is empty.

    Raises :class:`CorruptCheckpointError` naming the file and line on a bad version, a wrong
    entry count or a malformed line; entries must also strictly increase in epoch and offset.
    """
    try:
        with open(path, "rb") as f:
            raw = f.read()
    except FileNotFoundError:
        return []
    if not raw:
        return []
    try:
        text = raw.decode("ascii")
    except UnicodeDecodeError as e:
        raise CorruptCheckpointError(
            f"checkpoint file {path} is not ASCII text (byte {e.start})", path=path) from None
    lines = text.split("\n")
    # A well-formed file ends with a newline; tolerate its absence on the last line only.
    if lines and lines[-1] == "":
        lines.pop()

    def corrupt(lineno: int, why: str) -> CorruptCheckpointError:
        return CorruptCheckpointError(f"malformed checkpoint file {path} line {lineno}: {why}",
                                      path=path, line=lineno)

    def parse_int(lineno: int, token: str, what: str) -> int:
        # int() accepts '+1', ' 1', '1_0'; Kafka's parser accepts digits with an optional '-' only.
        body = token[1:] if token.startswith("-") else token
        if not body.isascii() or not body.isdigit():
            raise corrupt(lineno, f"{what} {token!r} is not an integer")
        return int(token)

    if not lines:
        raise corrupt(1, "missing version line")
    version_line = lines[0].strip()
    version = parse_int(1, version_line, "version")
    if version != CHECKPOINT_VERSION:
        raise corrupt(1, f"unrecognised version {version} (expected {CHECKPOINT_VERSION})")
    if len(lines) < 2:
        raise corrupt(2, "missing entry count line")
    count = parse_int(2, lines[1].strip(), "entry count")
    if count < 0:
        raise corrupt(2, f"negative entry count {count}")
    body = lines[2:]
    if len(body) != count:
        raise corrupt(3 + min(len(body), count),
                      f"expected {count} entries but found {len(body)}")
    entries: list[EpochEntry] = []
    for i, line in enumerate(body):
        lineno = i + 3
        parts = line.split()
        if len(parts) != 2:
            raise corrupt(lineno, f"expected 'epoch start_offset', got {line!r}")
        epoch = parse_int(lineno, parts[0], "epoch")
        start = parse_int(lineno, parts[1], "start offset")
        if epoch < 0 or start < 0:
            raise corrupt(lineno, f"negative epoch or start offset in {line!r}")
        if entries and (epoch <= entries[-1].epoch or start < entries[-1].start_offset):
            raise corrupt(lineno, f"entry {epoch} {start} does not follow "
                                  f"{entries[-1].epoch} {entries[-1].start_offset}")
        entries.append(EpochEntry(epoch, start))
    return entries


def format_epoch_checkpoint(entries: list[EpochEntry]) -> str:
    out = [str(CHECKPOINT_VERSION), str(len(entries))]
    out.extend(f"{e.epoch} {e.start_offset}" for e in entries)
    return "\n".join(out) + "\n"


class LeaderEpochFileCache:
    """Kafka's leader epoch cache, persisted in ``path`` (usually ``<log dir>/leader-epoch-checkpoint``).

    Thread-safe: every method takes the cache's lock. Mutations are written through to the file.
    """

    def __init__(self, path: str) -> None:
        self.path = os.fspath(path)
        self._lock = threading.RLock()
        # A sorted list: entries strictly increase in epoch and start offset, and the cache is
        # small (one entry per leader change), so linear scans are cheaper than a tree.
        self._entries: list[EpochEntry] = read_epoch_checkpoint(self.path)

    # -- queries -------------------------------------------------------------------------

    def entries(self) -> list[EpochEntry]:
        with self._lock:
            return list(self._entries)

    def is_empty(self) -> bool:
        with self._lock:
            return not self._entries

    @property
    def latest_entry(self) -> EpochEntry | None:
        with self._lock:
            return self._entries[-1] if self._entries else None

    @property
    def earliest_entry(self) -> EpochEntry | None:
        with self._lock:
            return self._entries[0] if self._entries else None

    @property
    def latest_epoch(self) -> int | None:
        with self._lock:
            return self._entries[-1].epoch if self._entries else None

    @property
    def previous_epoch(self) -> int | None:
        """The epoch before the latest one, or None."""
        with self._lock:
            return self._entries[-2].epoch if len(self._entries) >= 2 else None

    def epoch_entry(self, epoch: int) -> EpochEntry | None:
        with self._lock:
            for e in self._entries:
                if e.epoch == epoch:
                    return e
            return None

    def previous_epoch_of(self, epoch: int) -> int | None:
        """The greatest cached epoch strictly below ``epoch``."""
        with self._lock:
            prev = None
            for e in self._entries:
                if e.epoch >= epoch:
                    break
                prev = e.epoch
            return prev

    def next_epoch_of(self, epoch: int) -> int | None:
        """The smallest cached epoch strictly above ``epoch``."""
        with self._lock:
            for e in self._entries:
                if e.epoch > epoch:
                    return e.epoch
            return None

    def epoch_for_offset(self, offset: int) -> int | None:
        """The epoch whose range contains ``offset``: the last entry starting at or before it."""
        with self._lock:
            found = None
            for e in self._entries:
                if e.start_offset > offset:
                    break
                found = e.epoch
            return found

    def end_offset_for(self, requested_epoch: int, log_end_offset: int) -> tuple[int, int]:
        """OffsetsForLeaderEpoch: ``(epoch, end offset)`` of ``requested_epoch`` (rule 12).

        The end offset is the start offset of the first epoch above the requested one, or the
        log end offset when the requested epoch is the latest. ``(-1, -1)`` when undefined.
        """
        with self._lock:
            if requested_epoch == UNDEFINED_EPOCH:
                result = (UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET)
            elif self._entries and self._entries[-1].epoch == requested_epoch:
                result = (requested_epoch, log_end_offset)
            else:
                floor = None
                higher = None
                for e in self._entries:
                    if e.epoch <= requested_epoch:
                        floor = e
                    else:
                        higher = e
                        break
                if higher is None:
                    result = (UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET)
                elif floor is None:
                    result = (requested_epoch, higher.start_offset)
                else:
                    result = (floor.epoch, higher.start_offset)
            log.debug("end offset for epoch %d (LEO %d) in %s: %s", requested_epoch,
                      log_end_offset, self.path, result)
            return result

    # -- mutations -----------------------------------------------------------------------

    def assign(self, epoch: int, start_offset: int) -> bool:
        """Record that ``epoch`` starts at ``start_offset`` (rule 11). Returns True if it changed.

        A no-op unless the epoch differs from the latest or the offset is below the latest start.
        Tail entries with ``epoch >= epoch`` or ``start >= start_offset`` are removed first so the
        entries keep strictly increasing in both fields.
        """
        if epoch < 0 or start_offset < 0:
            raise InvalidEpochEntryError(
                f"leader epoch cache {self.path}: epoch {epoch} and start offset {start_offset} "
                "must both be >= 0")
        with self._lock:
            if not self._update_needed(epoch, start_offset):
                return False
            removed: list[EpochEntry] = []
            while self._entries and (self._entries[-1].epoch >= epoch
                                     or self._entries[-1].start_offset >= start_offset):
                removed.append(self._entries.pop())
            if len(removed) > 1 or (removed and removed[0].start_offset != start_offset):
                log.warning("leader epoch cache %s: assigning epoch %d at %d removed %s",
                            self.path, epoch, start_offset, list(reversed(removed)))
            self._entries.append(EpochEntry(epoch, start_offset))
            self._write()
            return True

    def _update_needed(self, epoch: int, start_offset: int) -> bool:
        if not self._entries:
            return True
        latest = self._entries[-1]
        return epoch != latest.epoch or start_offset < latest.start_offset

    def truncate_from_end(self, end_offset: int) -> None:
        """Drop entries starting at or after ``end_offset`` (log truncated to ``end_offset``)."""
        with self._lock:
            if end_offset < 0 or not self._entries or self._entries[-1].start_offset < end_offset:
                return
            kept = [e for e in self._entries if e.start_offset < end_offset]
            log.info("leader epoch cache %s: truncated from end to %d, removed %s", self.path,
                     end_offset, self._entries[len(kept):])
            self._entries = kept
            self._write()

    def truncate_from_start(self, start_offset: int) -> None:
        """Log start moved to ``start_offset``: drop entries starting at or before it, then
        re-insert the last dropped epoch at ``start_offset`` (rule 13)."""
        with self._lock:
            if start_offset < 0 or not self._entries or self._entries[0].start_offset >= start_offset:
                return
            n = 0
            while n < len(self._entries) and self._entries[n].start_offset <= start_offset:
                n += 1
            last_removed = self._entries[n - 1]
            self._entries = [EpochEntry(last_removed.epoch, start_offset)] + self._entries[n:]
            log.info("leader epoch cache %s: truncated from start to %d", self.path, start_offset)
            self._write()

    def replace_all(self, entries: list[EpochEntry]) -> None:
        """Replace every entry (a rebuild from the log's batches); written through once."""
        entries = [EpochEntry(int(e), int(o)) for e, o in entries]
        for prev, cur in zip(entries, entries[1:], strict=False):
            if cur.epoch <= prev.epoch or cur.start_offset <= prev.start_offset:
                raise InvalidEpochEntryError(
                    f"leader epoch cache {self.path}: entry {cur} does not follow {prev}")
        with self._lock:
            self._entries = entries
            self._write()

    def clear(self) -> None:
        with self._lock:
            self._entries = []
            self._write()

    def flush(self) -> None:
        """Write the cache to its checkpoint file (durably)."""
        with self._lock:
            self._write()

    def _write(self) -> None:
        write_checkpoint_atomically(self.path, format_epoch_checkpoint(self._entries))

    def __repr__(self) -> str:
        with self._lock:
            return f"LeaderEpochFileCache({self.path!r}, {self._entries})"
