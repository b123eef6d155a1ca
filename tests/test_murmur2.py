"""Kafka's murmur2 key hash (eddy.murmur2), checked against Kafka's own test vectors, in both
the Python code and its C accelerator (eddy._murmur2, when built)."""

import random

import pytest

from eddy import murmur2 as module

IMPLEMENTATIONS = [("python", module.py_murmur2, module.py_murmur2_partition)]
try:
    from eddy import _murmur2
    IMPLEMENTATIONS.append(("c", _murmur2.murmur2, _murmur2.murmur2_partition))
except ImportError:  # pragma: no cover - the accelerator is optional
    pass


@pytest.fixture(params=IMPLEMENTATIONS, ids=[name for name, *_ in IMPLEMENTATIONS])
def impl(request):
    return request.param[1:]


@pytest.mark.parametrize("data, expected", [
    # Kafka's UtilsTest.testMurmur2
    (b"21", -973932308),
    (b"foobar", -790332482),
    (b"a-little-bit-long-string", -985981536),
    (b"a-little-bit-longer-string", -1486304829),
    (b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8", -58897971),
    (b"abc", 479470107),
])
def test_murmur2_matches_kafka(impl, data, expected):
    murmur2, _ = impl
    assert murmur2(data) == expected


def test_partition_is_to_positive_modulo(impl):
    _, murmur2_partition = impl
    assert murmur2_partition(b"21", 7) == (-973932308 & 0x7FFFFFFF) % 7
    assert all(0 <= murmur2_partition(bytes([i]), 7) < 7 for i in range(256))


def test_the_accelerator_agrees_with_the_python_code():
    if len(IMPLEMENTATIONS) < 2:
        pytest.skip("eddy._murmur2 not built")
    rng = random.Random(5)
    for _ in range(2000):
        data = rng.randbytes(rng.randint(0, 40))
        n = rng.randint(1, 50)
        assert _murmur2.murmur2(data) == module.py_murmur2(data)
        assert _murmur2.murmur2_partition(data, n) == module.py_murmur2_partition(data, n)
    assert module.murmur2 is _murmur2.murmur2  # the package uses it
    with pytest.raises(ValueError, match="num_partitions must be positive"):
        _murmur2.murmur2_partition(b"k", 0)
    with pytest.raises(TypeError):
        _murmur2.murmur2("not bytes")
