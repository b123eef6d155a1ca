"""Kafka's murmur2 key hash, shared by the embedded producer's partitioner and the streams
runtime's key routing, so both place a key exactly where Kafka's default partitioner does."""

from __future__ import annotations

import os
import struct

__all__ = ["murmur2", "murmur2_partition"]

_M = 0x5BD1E995
_SEED = 0x9747B28C
_MASK = 0xFFFFFFFF
_U32 = struct.Struct("<I")


def murmur2(data: bytes) -> int:
    """Kafka's ``Utils.murmur2`` as a signed 32-bit int (``murmur2(b"21") == -973932308``)."""
    length = len(data)
    h = (_SEED ^ length) & _MASK
    n4 = length & ~3
    if n4:
        for (k,) in _U32.iter_unpack(memoryview(data)[:n4]):
            k = (k * _M) & _MASK
            k ^= k >> 24
            k = (k * _M) & _MASK
            h = ((h * _M) & _MASK) ^ k
    rest = length & 3
    if rest == 3:
        h ^= data[n4 + 2] << 16
    if rest >= 2:
        h ^= data[n4 + 1] << 8
    if rest >= 1:
        h ^= data[n4]
        h = (h * _M) & _MASK
    h ^= h >> 13
    h = (h * _M) & _MASK
    h ^= h >> 15
    return h - 0x100000000 if h & 0x80000000 else h


def murmur2_partition(key: bytes, num_partitions: int) -> int:
    """The partition Kafka's default partitioner picks for a non-null key (``toPositive % n``)."""
    return (murmur2(key) & 0x7FFFFFFF) % num_partitions


py_murmur2, py_murmur2_partition = murmur2, murmur2_partition
if not os.environ.get("EDDY_RECORDS_PURE_PYTHON"):  # the same switch as replication/records.py
    try:
        from eddy._murmur2 import murmur2, murmur2_partition  # noqa: F811 - the C versions
    except ImportError:  # no compiler at install time: the Python versions above
        pass
