"""ChangeSerde's unchecked functions in C (streams/dsl/_change.c) against its Python functions,
the definition: wherever the C function returns, it returns what the Python one returns (same
bytes, same Change); where it raises, the caller falls back to the Python function."""

import random

import pytest

from streams import serdes
from streams.dsl import change as change_mod
from streams.dsl.change import Change, ChangeSerde

pytestmark = pytest.mark.skipif(change_mod._change_c is None, reason="the C accelerator is not built")

INNERS = {"string": serdes.STRING, "bytes": serdes.BYTES, "int64": serdes.INT64, "json": serdes.JSON}


def _value(rng: random.Random, kind: str):
    if rng.random() < 0.3:
        return None
    if kind == "string":
        return "".join(rng.choice("ab\u00e9\u4e2d ") for _ in range(rng.randint(0, 6)))
    if kind == "bytes":
        return bytes(rng.randrange(256) for _ in range(rng.randint(0, 6)))
    if kind == "int64":
        return rng.choice([0, -1, 1, 2**63 - 1, -2**63, rng.randint(-1000, 1000)])
    return rng.choice([{"a": 1}, [1, "x"], "s", 3.5, True])


def _outcome(fn, arg):
    try:
        return ("value", fn(arg))
    except Exception as exc:  # noqa: BLE001 - the outcome is compared, not handled
        return ("error", type(exc))


@pytest.mark.parametrize("kind", sorted(INNERS))
def test_c_serialize_and_deserialize_return_what_python_returns(kind):
    serde = ChangeSerde(INNERS[kind])
    assert serde.serialize_unchecked is not serde.serialize  # the C functions are in use
    rng = random.Random(kind)
    for _ in range(2000):
        change = Change(_value(rng, kind), _value(rng, kind))
        expected = _outcome(serde.serialize, change)
        got = _outcome(serde.serialize_unchecked, change)
        if got[0] == "value":
            assert got == expected, change
            assert type(got[1]) is bytes
        if expected[0] != "value":
            continue
        data = expected[1]
        back = _outcome(serde.deserialize_unchecked, data)
        assert back == ("value", change) and type(back[1]) is Change, (change, data)
        # mutations: truncated, an inner byte changed, another flag, a wrong length prefix
        for mutated in (data[:-1], data[1:], data[:-1] + bytes([rng.randrange(4)]),
                        bytes([rng.randrange(256)]) + data[1:], b"\xff\xff\xff\xff" + data[4:], b"", b"\x02"):
            expected_back = _outcome(serde.deserialize, mutated)
            got_back = _outcome(serde.deserialize_unchecked, mutated)
            if got_back[0] == "value":
                assert got_back == expected_back, mutated
                assert type(got_back[1]) is Change


def test_c_functions_raise_for_what_they_do_not_take():
    """Each case the C functions do not do raises (the caller falls back), never a wrong result."""
    serde = ChangeSerde(serdes.STRING)
    for bad in (("n",), ["n", None], Change(None, None), Change(5, None), Change("n", 5)):
        with pytest.raises((TypeError, ValueError)):
            serde.serialize_unchecked(bad)
    for bad in (b"", b"x\x07", b"\x00\x00\x00\x09ab\x02", b"\xff\x01", bytearray(b"a\x01"), "a\x01"):
        with pytest.raises((TypeError, ValueError)):
            serde.deserialize_unchecked(bad)
    assert serde.serialize_unchecked(None) is None and serde.deserialize_unchecked(None) is None
    # the Python functions: a list is a Change's two values too; a length past the end takes
    # the new value up to the end (the flag byte included: Python's slices) and leaves old empty
    assert serde.serialize(["n", None]) == b"n\x01"
    assert serde.deserialize(b"\x00\x00\x00\x09ab\x02") == Change("ab\x02", "")
