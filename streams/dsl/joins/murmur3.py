"""MurmurHash3 x64 128-bit, bit-for-bit as Kafka Streams' Murmur3.hash128 (taken by Kafka from Hive):
the foreign-key join hashes the serialized left value with it to recognise stale responses.

`hash128(data, seed=DEFAULT_SEED)` returns Kafka's `long[2]` as a tuple of two signed 64-bit ints,
so the values compare with Java's and serialize with `>qq` as Kafka's ByteBuffer.putLong does.
"""

from __future__ import annotations

import struct

__all__ = ["hash128", "DEFAULT_SEED"]

DEFAULT_SEED = 104729  # Kafka's Murmur3.DEFAULT_SEED
_MASK = (1 << 64) - 1
_C1 = 0x87C37B91114253D5
_C2 = 0x4CF5AD432745937F
_BLOCK = struct.Struct("<QQ")


def _rotl(x: int, r: int) -> int:
    return ((x << r) | (x >> (64 - r))) & _MASK


def _fmix(h: int) -> int:
    h ^= h >> 33
    h = (h * 0xFF51AFD7ED558CCD) & _MASK
    h ^= h >> 33
    h = (h * 0xC4CEB9FE1A85EC53) & _MASK
    h ^= h >> 33
    return h


def _signed(x: int) -> int:
    return x - (1 << 64) if x >= 1 << 63 else x


def hash128(data: bytes, seed: int = DEFAULT_SEED) -> tuple[int, int]:
    """Kafka's Murmur3.hash128(data, 0, len(data), seed) as two signed 64-bit ints."""
    length = len(data)
    # Java widens the int seed to a long (sign-extended)
    h1 = h2 = seed & _MASK
    c1, c2, mask = _C1, _C2, _MASK
    nblocks = length >> 4
    unpack = _BLOCK.unpack_from
    for i in range(nblocks):
        k1, k2 = unpack(data, i << 4)
        k1 = (k1 * c1) & mask
        k1 = ((k1 << 31) | (k1 >> 33)) & mask
        k1 = (k1 * c2) & mask
        h1 ^= k1
        h1 = ((h1 << 27) | (h1 >> 37)) & mask
        h1 = (h1 + h2) & mask
        h1 = (h1 * 5 + 0x52DCE729) & mask
        k2 = (k2 * c2) & mask
        k2 = ((k2 << 33) | (k2 >> 31)) & mask
        k2 = (k2 * c1) & mask
        h2 ^= k2
        h2 = ((h2 << 31) | (h2 >> 33)) & mask
        h2 = (h2 + h1) & mask
        h2 = (h2 * 5 + 0x38495AB5) & mask
    tail = data[nblocks << 4:]
    rest = len(tail)
    if rest > 8:
        k2 = int.from_bytes(tail[8:], "little")
        k2 = (k2 * c2) & mask
        k2 = _rotl(k2, 33)
        k2 = (k2 * c1) & mask
        h2 ^= k2
    if rest > 0:
        k1 = int.from_bytes(tail[:8], "little")
        k1 = (k1 * c1) & mask
        k1 = _rotl(k1, 31)
        k1 = (k1 * c2) & mask
        h1 ^= k1
    h1 ^= length
    h2 ^= length
    h1 = (h1 + h2) & mask
    h2 = (h2 + h1) & mask
    h1 = _fmix(h1)
    h2 = _fmix(h2)
    h1 = (h1 + h2) & mask
    h2 = (h2 + h1) & mask
    return _signed(h1), _signed(h2)
