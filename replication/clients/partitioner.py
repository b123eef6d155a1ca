"""Partitioners with librdkafka's names, hashing exactly as Kafka's clients do.

- ``murmur2_random`` (the default here, as Kafka's Java client): murmur2 of the key bytes,
  ``toPositive(hash) % partitions``; a null key gets a random partition, kept for
  ``sticky.partitioning.linger.ms`` as librdkafka's sticky partitioning does.
- ``murmur2``: the same, a null key hashes as empty bytes.
- ``consistent_random`` / ``consistent``: CRC-32 of the key (librdkafka's default family).
- ``fnv1a_random`` / ``fnv1a``: 32-bit FNV-1a of the key.
- ``random``: a random partition for every record.
"""

from __future__ import annotations

import random
import time
import zlib
from typing import Callable

from eddy.murmur2 import murmur2, murmur2_partition

__all__ = ["PARTITIONERS", "fnv1a", "make_partitioner", "murmur2", "murmur2_partition"]

PARTITIONERS = ("murmur2_random", "murmur2", "consistent_random", "consistent", "fnv1a_random",
                "fnv1a", "random")

#: Keys whose murmur2 a partitioner remembers (short keys only: the cache stays small; a
#: long key's hash costs little next to the rest of its record).
_CACHE_MAX = 65536
_CACHE_KEY_MAX = 64

_MASK = 0xFFFFFFFF


def fnv1a(data: bytes) -> int:
    h = 0x811C9DC5
    for b in data:
        h = ((h ^ b) * 0x01000193) & _MASK
    return h


Partitioner = Callable[[bytes | None, int], int]


def make_partitioner(name: str, sticky_linger_ms: int = 10,
                     rng: random.Random | None = None) -> Partitioner:
    """A function ``(key bytes or None, partition count) -> partition`` for a librdkafka name."""
    rnd = rng or random.Random()
    randrange = rnd.randrange
    sticky = [0.0, -1, 0]  # deadline, partition, for partition count

    def random_partition(n: int) -> int:
        if sticky_linger_ms <= 0:
            return randrange(n)
        now = time.monotonic()
        if now >= sticky[0] or sticky[2] != n:
            sticky[0] = now + sticky_linger_ms / 1000.0
            sticky[1] = randrange(n)
            sticky[2] = n
        return sticky[1]

    hashes: dict[bytes, int] = {}  # key -> positive murmur2, computed once per distinct key

    def positive_murmur2(key: bytes) -> int:
        h = hashes.get(key)
        if h is None:
            h = murmur2(key) & 0x7FFFFFFF
            if len(key) <= _CACHE_KEY_MAX:
                if len(hashes) >= _CACHE_MAX:
                    hashes.clear()
                hashes[key] = h
        return h

    if name == "murmur2_random":
        return lambda key, n: random_partition(n) if key is None else positive_murmur2(key) % n
    if name == "murmur2":
        return lambda key, n: positive_murmur2(key or b"") % n
    if name == "consistent_random":
        return lambda key, n: random_partition(n) if not key else zlib.crc32(key) % n
    if name == "consistent":
        return lambda key, n: zlib.crc32(key or b"") % n
    if name == "fnv1a_random":
        return lambda key, n: random_partition(n) if not key else fnv1a(key) % n
    if name == "fnv1a":
        return lambda key, n: fnv1a(key or b"") % n
    if name == "random":
        return lambda key, n: randrange(n)
    raise ValueError(f"unknown partitioner {name!r} (known: {', '.join(PARTITIONERS)})")
