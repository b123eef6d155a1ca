"""Real damage to a replica's files, for the corruption tests and the fault campaign."""

from __future__ import annotations

import os

from replication.records import iter_batch_headers


def flip_bit_in_batch(log, offset: int, *, bit: int = 0) -> tuple[str, int]:
    """Flip one bit inside the last record of the batch holding ``offset`` in a closed
    segment of ``log`` (the bytes a CRC covers), on disk; returns (file, byte position)."""
    for segment in log.segments[:-1]:
        with open(segment.log_path, "rb") as f:
            data = f.read()
        for header in iter_batch_headers(data, validate_crc=False):
            if header.base_offset <= offset <= header.last_offset:
                position = header.position + header.size - 2  # in the last record's value
                with open(segment.log_path, "r+b") as f:
                    f.seek(position)
                    byte = f.read(1)[0]
                    f.seek(position)
                    f.write(bytes([byte ^ (1 << bit)]))
                    f.flush()
                    os.fsync(f.fileno())
                return str(segment.log_path), position
    raise AssertionError(f"offset {offset} is not in a closed segment of {log}")
