"""A task's processor metadata (Kafka's ProcessorMetadata and TopicPartitionMetadata): named
int64 values processors keep across restarts, committed with the task's input offsets.

Processors read and write it through their context (`processor_metadata_for_key(key)`,
`add_processor_metadata_key_value(key, value)`); a windowed aggregation emitting final results
keeps there the close time of its last emission, under its store's name. The runtime commits it
in the offset metadata string of every input partition it commits (of all of them when it
changed) and, when a task starts, merges what the committed offsets of its partitions carry,
keeping the largest value of each key. The string is Kafka's, so Kafka Streams and Eddy read each
other's: base64 of magic byte 2, the partition time (8 bytes) and the metadata (entry count (4),
then per entry key length (4), UTF-8 key, value (8)); all big-endian.
"""

from __future__ import annotations

import base64
import binascii
import logging
import struct
from typing import Optional

log = logging.getLogger(__name__)

MAGIC = 2  # TopicPartitionMetadata.LATEST_MAGIC_BYTE (1: the partition time alone)
NO_PARTITION_TIME = -1  # Kafka's RecordQueue.UNKNOWN
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")


class ProcessorMetadata:
    """Named int64 values of one task; `needs_commit` is set by `put` until the commit took them."""

    def __init__(self, values: Optional[dict[str, int]] = None) -> None:
        self.values: dict[str, int] = dict(values or {})
        self.needs_commit = False

    def get(self, key: str) -> Optional[int]:
        return self.values.get(key)

    def put(self, key: str, value: int) -> None:
        self.values[key] = value
        self.needs_commit = True

    def update(self, other: "ProcessorMetadata") -> None:
        """Merge `other` in: missing keys added, existing ones raised to the larger value (Kafka)."""
        for key, value in other.values.items():
            mine = self.values.get(key)
            if mine is None or mine < value:
                self.values[key] = value

    def serialize(self) -> bytes:
        if not self.values:
            return b""
        parts = [_I32.pack(len(self.values))]
        for key, value in self.values.items():
            data = key.encode()
            parts += (_I32.pack(len(data)), data, _I64.pack(value))
        return b"".join(parts)

    @classmethod
    def deserialize(cls, data: bytes) -> "ProcessorMetadata":
        values: dict[str, int] = {}
        if data:
            (count,), pos = _I32.unpack_from(data), 4
            for _ in range(count):
                (size,) = _I32.unpack_from(data, pos)
                pos += 4
                if size < 0 or pos + size + 8 > len(data):
                    raise ValueError(f"processor metadata entry runs past the end ({len(data)} bytes)")
                key = data[pos:pos + size].decode()
                pos += size
                values[key] = _I64.unpack_from(data, pos)[0]
                pos += 8
        return cls(values)

    def __repr__(self) -> str:
        return f"ProcessorMetadata({self.values!r})"


def encode_offset_metadata(partition_time: int, metadata: ProcessorMetadata) -> str:
    """Kafka's TopicPartitionMetadata.encode: the offset metadata string of one input partition."""
    return base64.b64encode(bytes((MAGIC,)) + _I64.pack(partition_time) + metadata.serialize()).decode()


def decode_offset_metadata(text: Optional[str]) -> tuple[int, ProcessorMetadata]:
    """Kafka's TopicPartitionMetadata.decode: (partition time, metadata); an empty, foreign or
    malformed string gives NO_PARTITION_TIME (or the time read before the failure) and empty
    metadata, with a WARN, as Kafka."""
    partition_time = NO_PARTITION_TIME
    if not text:
        return partition_time, ProcessorMetadata()
    try:
        data = base64.b64decode(text, validate=True)
        version = data[0]
        if version in (1, MAGIC):
            partition_time = _I64.unpack_from(data, 1)[0]
            return partition_time, ProcessorMetadata.deserialize(data[9:]) if version == MAGIC else ProcessorMetadata()
        log.warning("Unsupported offset metadata version found. Supported version <= %d. Found version %d.",
                    MAGIC, version)
    except (binascii.Error, ValueError, IndexError, struct.error, UnicodeDecodeError):
        log.warning("Unsupported offset metadata found")
    return partition_time, ProcessorMetadata()  # what was read before a failure stays (Kafka)
