/* Kafka's murmur2 key hash (Utils.murmur2), shared by the C accelerators that pick a key's
 * partition (eddy/_murmur2.c, streams/runtime/_sink.c): one copy, so the partition a sink picks
 * in C can never drift from eddy.murmur2.murmur2_partition. Header-only (static inline): each
 * extension is built from its own .c file (setup.py) and no shared library is needed. */
#ifndef EDDY_MURMUR2_H
#define EDDY_MURMUR2_H

#include <stdint.h>
#include <stddef.h>

static inline int32_t eddy_murmur2(const uint8_t *data, size_t length)
{
    const uint32_t m = 0x5bd1e995u;
    uint32_t h = 0x9747b28cu ^ (uint32_t)length;
    size_t n4 = length & ~(size_t)3;
    for (size_t i = 0; i < n4; i += 4) {
        uint32_t k = (uint32_t)data[i] | ((uint32_t)data[i + 1] << 8) | ((uint32_t)data[i + 2] << 16) |
                     ((uint32_t)data[i + 3] << 24);
        k *= m;
        k ^= k >> 24;
        k *= m;
        h *= m;
        h ^= k;
    }
    switch (length & 3) {
    case 3:
        h ^= (uint32_t)data[n4 + 2] << 16;
        /* fall through */
    case 2:
        h ^= (uint32_t)data[n4 + 1] << 8;
        /* fall through */
    case 1:
        h ^= (uint32_t)data[n4];
        h *= m;
    }
    h ^= h >> 13;
    h *= m;
    h ^= h >> 15;
    return (int32_t)h;
}

/* The partition Kafka's default partitioner picks for a non-null key: toPositive(murmur2) % n
 * (n > 0; the caller checks). */
static inline size_t eddy_murmur2_partition(const uint8_t *data, size_t length, size_t n)
{
    return (size_t)((uint32_t)eddy_murmur2(data, length) & 0x7fffffffu) % n;
}

#endif /* EDDY_MURMUR2_H */
