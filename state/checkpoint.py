"""Kafka's `.checkpoint` file: the last applied changelog offset of each store of a task.

Format (Kafka's `OffsetCheckpoint`, byte for byte)::

    0                          <- version, only 0 exists
    2                          <- number of entries
    app-store-changelog 3 41234
    app-win-changelog 3 -4     <- OFFSET_UNKNOWN sentinel

Reading is strict: every deviation raises `CheckpointError` naming the file and the line, so a
damaged file can never turn into a silently wrong restore offset. The one tolerance Kafka has is
kept: an entry with an invalid negative offset (other than -4) is skipped with a warning and the
expected count drops by one.

Keys are `confluent_kafka.TopicPartition(topic, partition)`. TopicPartition hashes and compares on
(topic, partition) only, so it is a sound dict key; the offset attribute of a key is ignored.
"""

from __future__ import annotations

import logging
import os
import re
import threading
from pathlib import Path
from typing import Mapping

from confluent_kafka import TopicPartition

from state.errors import CheckpointError

logger = logging.getLogger(__name__)

CHECKPOINT_FILE_NAME = ".checkpoint"
VERSION = 0
OFFSET_UNKNOWN = -4

_INT32_MAX = 2**31 - 1
_INT64_MAX = 2**63 - 1
_INT64_MIN = -(2**63)
# Java's Integer/Long.parseLong grammar: optional sign, ASCII digits only (Python's int() would
# also take underscores, surrounding blanks and non-ASCII digits).
_INT_RE = re.compile(r"[+-]?[0-9]+\Z")
# Java's readLine ends a line at \n, \r or \r\n; Java's "\\s+" is ASCII whitespace only.
_LINE_SPLIT_RE = re.compile(r"\r\n|\r|\n")
_FIELD_SPLIT_RE = re.compile(r"[ \t\n\x0b\f\r]+")
# Kafka's legal topic names; anything else cannot have come from a real changelog and is refused.
_TOPIC_RE = re.compile(r"[a-zA-Z0-9._-]{1,249}\Z")
# A checkpoint holds one line per store of one task: 64 MiB is far beyond anything legitimate and
# keeps a hostile file from exhausting memory.
MAX_FILE_BYTES = 64 * 1024 * 1024


def is_valid_offset(offset: int) -> bool:
    return offset >= 0 or offset == OFFSET_UNKNOWN


class OffsetCheckpoint:
    """Reads and writes one `.checkpoint` file. Thread-safe for a single instance."""

    def __init__(self, path: str | os.PathLike) -> None:
        self.path = Path(path)
        self._tmp_path = self.path.with_name(self.path.name + ".tmp")
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"OffsetCheckpoint({str(self.path)!r})"

    # ------------------------------------------------------------------ write

    def write(self, offsets: Mapping[TopicPartition, int]) -> None:
        """Atomically replace the file with `offsets`; an empty map deletes the file."""
        if not offsets:
            self.delete()
            return
        lines = [str(VERSION), str(len(offsets))]
        entries = []
        for tp, offset in offsets.items():
            topic, partition = _key_parts(tp, self.path)
            if isinstance(offset, bool) or not isinstance(offset, int):
                raise CheckpointError(
                    f"{self.path}: offset for {topic}-{partition} must be an int, got {offset!r}"
                )
            if not is_valid_offset(offset) or offset > _INT64_MAX:
                raise CheckpointError(
                    f"{self.path}: invalid offset {offset} for {topic}-{partition} "
                    f"(must be >= 0 or {OFFSET_UNKNOWN})"
                )
            entries.append((topic, partition, offset))
        entries.sort()
        lines.extend(f"{t} {p} {o}" for t, p, o in entries)
        data = ("\n".join(lines) + "\n").encode("utf-8")
        with self._lock:
            fd = os.open(self._tmp_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            try:
                view = memoryview(data)
                while view:
                    n = os.write(fd, view)
                    view = view[n:]
                os.fsync(fd)
            finally:
                os.close(fd)
            os.replace(self._tmp_path, self.path)
            _fsync_dir(self.path.parent)

    # ------------------------------------------------------------------- read

    def read(self) -> dict[TopicPartition, int]:
        """The offsets in the file; {} when the file does not exist."""
        with self._lock:
            try:
                with open(self.path, "rb") as f:
                    raw = f.read(MAX_FILE_BYTES + 1)
            except FileNotFoundError:
                return {}
            except OSError as e:
                raise CheckpointError(f"{self.path}: cannot read checkpoint: {e}") from e
        if len(raw) > MAX_FILE_BYTES:
            raise CheckpointError(f"{self.path}: file larger than {MAX_FILE_BYTES} bytes")
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as e:
            raise CheckpointError(f"{self.path}: not valid UTF-8 at byte {e.start}") from None
        return self._parse(text)

    def _parse(self, text: str) -> dict[TopicPartition, int]:
        lines = _LINE_SPLIT_RE.split(text)
        if lines and lines[-1] == "":
            # Text ending with a newline: the last "line" is not a line (readLine semantics).
            lines.pop()
        if not lines:
            raise CheckpointError(f"{self.path}: file is empty (expected the version on line 1)")
        version = self._parse_header_int(lines, 0, "version")
        if version != VERSION:
            raise CheckpointError(
                f"{self.path}: line 1: unknown checkpoint version {version} (only {VERSION} exists)"
            )
        if len(lines) < 2:
            raise CheckpointError(f"{self.path}: file ended before the entry count on line 2")
        expected = self._parse_header_int(lines, 1, "entry count")
        if expected < 0:
            raise CheckpointError(f"{self.path}: line 2: negative entry count {expected}")

        offsets: dict[TopicPartition, int] = {}
        for index in range(2, len(lines)):
            line = lines[index]
            lineno = index + 1
            pieces = _java_split(line)
            if len(pieces) != 3:
                raise CheckpointError(
                    f"{self.path}: line {lineno}: malformed entry {_show(line)} "
                    f"(expected 'topic partition offset', got {len(pieces)} fields)"
                )
            topic, partition_s, offset_s = pieces
            if not _TOPIC_RE.match(topic):
                raise CheckpointError(
                    f"{self.path}: line {lineno}: illegal topic name {_show(topic)} in {_show(line)}"
                )
            partition = _parse_int(partition_s)
            if partition is None or not 0 <= partition <= _INT32_MAX:
                raise CheckpointError(
                    f"{self.path}: line {lineno}: bad partition {_show(partition_s)} in {_show(line)}"
                )
            offset = _parse_int(offset_s)
            if offset is None or not _INT64_MIN <= offset <= _INT64_MAX:
                raise CheckpointError(
                    f"{self.path}: line {lineno}: bad offset {_show(offset_s)} in {_show(line)}"
                )
            tp = TopicPartition(topic, partition)
            if tp in offsets:
                raise CheckpointError(
                    f"{self.path}: line {lineno}: duplicate entry for {topic}-{partition}"
                )
            if is_valid_offset(offset):
                offsets[tp] = offset
            else:
                logger.warning(
                    "%s: line %d: skipping invalid offset %d for %s-%d",
                    self.path, lineno, offset, topic, partition,
                )
                expected -= 1
        if len(offsets) != expected:
            raise CheckpointError(
                f"{self.path}: expected {expected} valid entries but found {len(offsets)}"
            )
        return offsets

    def _parse_header_int(self, lines: list[str], index: int, what: str) -> int:
        value = _parse_int(lines[index])
        if value is None or not -(2**31) <= value <= _INT32_MAX:
            raise CheckpointError(
                f"{self.path}: line {index + 1}: bad {what} {_show(lines[index])}"
            )
        return value

    # ----------------------------------------------------------------- delete

    def delete(self) -> None:
        """Remove the file if it exists, durably (under EOS a resurrected checkpoint would let
        uncommitted writes survive a crash)."""
        with self._lock:
            try:
                os.unlink(self.path)
            except FileNotFoundError:
                return
            _fsync_dir(self.path.parent)


def _key_parts(tp, path: Path) -> tuple[str, int]:
    if isinstance(tp, TopicPartition):
        topic, partition = tp.topic, tp.partition
    elif isinstance(tp, tuple) and len(tp) == 2:
        topic, partition = tp
    else:
        raise CheckpointError(f"{path}: checkpoint key must be a TopicPartition, got {tp!r}")
    if not isinstance(topic, str) or not _TOPIC_RE.match(topic):
        raise CheckpointError(f"{path}: illegal topic name {topic!r}")
    if isinstance(partition, bool) or not isinstance(partition, int) or not 0 <= partition <= _INT32_MAX:
        raise CheckpointError(f"{path}: illegal partition {partition!r} for topic {topic}")
    return topic, partition


def _java_split(line: str) -> list[str]:
    # Java's String.split keeps a leading empty field and drops trailing ones.
    pieces = _FIELD_SPLIT_RE.split(line)
    while pieces and pieces[-1] == "":
        pieces.pop()
    return pieces


def _parse_int(s: str) -> int | None:
    if len(s) > 25 or not _INT_RE.match(s):
        return None
    return int(s)


def _show(s: str, limit: int = 80) -> str:
    return repr(s if len(s) <= limit else s[:limit] + "...")


def _fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
