"""Kafka's murmur2 key hash (eddy.murmur2), checked against Kafka's own test vectors."""

import pytest

from eddy.murmur2 import murmur2, murmur2_partition


@pytest.mark.parametrize("data, expected", [
    # Kafka's UtilsTest.testMurmur2
    (b"21", -973932308),
    (b"foobar", -790332482),
    (b"a-little-bit-long-string", -985981536),
    (b"a-little-bit-longer-string", -1486304829),
    (b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8", -58897971),
    (b"abc", 479470107),
])
def test_murmur2_matches_kafka(data, expected):
    assert murmur2(data) == expected


def test_partition_is_to_positive_modulo():
    assert murmur2_partition(b"21", 7) == (-973932308 & 0x7FFFFFFF) % 7
    assert all(0 <= murmur2_partition(bytes([i]), 7) < 7 for i in range(256))
