import math

import pytest

from streams import serdes
from streams.errors import ConfigError, RecordDeserializationError, SerializationError
from streams.serdes import (DeserializationHandlerResponse, Serde, deserialization_handler_from_config,
                            log_and_continue, log_and_fail)


def test_int64_is_kafka_big_endian():
    assert serdes.INT64.serialize(1) == b"\x00" * 7 + b"\x01"
    assert serdes.INT64.serialize(-1) == b"\xff" * 8
    assert serdes.INT64.serialize(2**63 - 1) == b"\x7f" + b"\xff" * 7
    assert serdes.INT64.deserialize(b"\x00" * 6 + b"\x01\x00") == 256


def test_int32_is_kafka_big_endian():
    assert serdes.INT32.serialize(1) == b"\x00\x00\x00\x01"
    assert serdes.INT32.serialize(-2) == b"\xff\xff\xff\xfe"
    assert serdes.INT32.deserialize(b"\x80\x00\x00\x00") == -(2**31)


def test_float_and_double_ieee754_big_endian():
    assert serdes.FLOAT.serialize(1.0) == b"\x3f\x80\x00\x00"
    assert serdes.DOUBLE.serialize(1.0) == b"\x3f\xf0" + b"\x00" * 6
    assert serdes.FLOAT.deserialize(serdes.FLOAT.serialize(0.5)) == 0.5
    assert serdes.DOUBLE.deserialize(serdes.DOUBLE.serialize(math.pi)) == math.pi


@pytest.mark.parametrize("serde,value", [
    (serdes.BYTES, b"\x00\xffabc"), (serdes.STRING, "héllo wörld ✓"), (serdes.INT32, 123456),
    (serdes.INT64, -(2**40)), (serdes.DOUBLE, -2.5), (serdes.FLOAT, 3.25),
    (serdes.JSON, {"a": [1, 2.5, "x", None, True]}), (serdes.STRING, ""),
])
def test_round_trip(serde, value):
    data = serde.serialize(value)
    assert isinstance(data, bytes)
    assert serde.deserialize(data) == value


@pytest.mark.parametrize("serde", [serdes.BYTES, serdes.STRING, serdes.INT32, serdes.INT64,
                                   serdes.FLOAT, serdes.DOUBLE, serdes.JSON])
def test_none_passes_through(serde):
    assert serde.serialize(None) is None
    assert serde.deserialize(None) is None


def test_string_is_utf8():
    assert serdes.STRING.serialize("é") == b"\xc3\xa9"
    assert serdes.JSON.serialize({"k": 1}) == b'{"k":1}'


@pytest.mark.parametrize("serde,bad", [
    (serdes.INT64, "1"), (serdes.INT64, 2**63), (serdes.INT32, 2**31), (serdes.INT32, 1.5),
    (serdes.FLOAT, "x"), (serdes.FLOAT, 1e300), (serdes.STRING, b"bytes"), (serdes.STRING, 5),
    (serdes.BYTES, "str"), (serdes.JSON, object()), (serdes.STRING, "\ud800"),
])
def test_serialize_bad_input_is_typed(serde, bad):
    with pytest.raises(SerializationError) as err:
        serde.serialize(bad)
    assert serde.name in str(err.value)


@pytest.mark.parametrize("serde,bad", [
    (serdes.INT64, b"\x00\x01"), (serdes.INT32, b"\x00" * 8), (serdes.DOUBLE, b""),
    (serdes.FLOAT, b"\x00" * 3), (serdes.STRING, b"\xff\xfe"), (serdes.JSON, b"{not json"),
])
def test_deserialize_bad_input_is_typed(serde, bad):
    with pytest.raises(SerializationError) as err:
        serde.deserialize(bad)
    assert serde.name in str(err.value)


def test_int_size_error_names_expected_size():
    with pytest.raises(SerializationError, match="size of data received is 2, expected 8"):
        serdes.INT64.deserialize(b"\x00\x01")


def test_user_serde_from_functions():
    upper = Serde.from_functions(lambda s: s.upper().encode(), lambda b: b.decode().lower(), name="upper")
    assert upper.serialize("abc") == b"ABC"
    assert upper.deserialize(b"ABC") == "abc"
    assert upper.serialize(None) is None and upper.deserialize(None) is None
    with pytest.raises(SerializationError, match="'upper' failed to serialize 5"):
        upper.serialize(5)
    with pytest.raises(SerializationError, match="'upper' failed to deserialize"):
        upper.deserialize(b"\xff")


def test_user_serde_must_return_bytes():
    bad = Serde.from_functions(lambda s: s, lambda b: b, name="identity")
    with pytest.raises(SerializationError, match="returned str, expected bytes"):
        bad.serialize("x")
    with pytest.raises(SerializationError, match="two callables"):
        Serde.from_functions("nope", lambda b: b)


def test_subclassed_serde():
    class Reversed(Serde):
        name = "reversed"

        def serialize(self, obj):
            return None if obj is None else obj[::-1].encode()

        def deserialize(self, data):
            return None if data is None else data.decode()[::-1]

    s = Reversed()
    assert s.deserialize(s.serialize("abc")) == "abc"
    assert serdes.resolve_serde(s, "x") is s


def test_serde_by_name_and_config():
    assert serdes.serde_by_name("string") is serdes.STRING
    assert serdes.serde_by_name("LONG") is serdes.INT64
    assert serdes.serde_from_config({"default.key.serde": "INT32"}, "default.key.serde") is serdes.INT32
    assert serdes.serde_from_config({}, "default.key.serde") is None
    with pytest.raises(ConfigError, match="default.key.serde"):
        serdes.serde_from_config({"default.key.serde": "nope"}, "default.key.serde")
    with pytest.raises(ConfigError, match="default.value.serde"):
        serdes.serde_from_config({"default.value.serde": 42}, "default.value.serde")


def test_deserialization_handler_selection():
    assert deserialization_handler_from_config({}) is log_and_fail
    assert deserialization_handler_from_config(
        {"default.deserialization.exception.handler": "log_and_continue"}) is log_and_continue
    assert deserialization_handler_from_config(
        {"default.deserialization.exception.handler":
         "org.apache.kafka.streams.errors.LogAndContinueExceptionHandler"}) is log_and_continue
    custom = lambda err: DeserializationHandlerResponse.CONTINUE  # noqa: E731
    assert deserialization_handler_from_config({"default.deserialization.exception.handler": custom}) is custom
    with pytest.raises(ConfigError, match="default.deserialization.exception.handler"):
        deserialization_handler_from_config({"default.deserialization.exception.handler": "ignore"})
    err = RecordDeserializationError("x", topic="t", partition=0, offset=3)
    assert log_and_fail(err) is DeserializationHandlerResponse.FAIL
    assert log_and_continue(err) is DeserializationHandlerResponse.CONTINUE


from hypothesis import given, settings, strategies as st  # noqa: E402


@settings(max_examples=200, deadline=None)
@given(st.integers(min_value=-(2**63), max_value=2**63 - 1))
def test_int64_round_trip_and_order_of_bytes(n):
    data = serdes.INT64.serialize(n)
    assert len(data) == 8
    assert serdes.INT64.deserialize(data) == n
    assert int.from_bytes(data, "big", signed=True) == n


@settings(max_examples=200, deadline=None)
@given(st.integers(min_value=-(2**31), max_value=2**31 - 1))
def test_int32_round_trip(n):
    assert serdes.INT32.deserialize(serdes.INT32.serialize(n)) == n
    assert serdes.INT32.serialize(n) == n.to_bytes(4, "big", signed=True)


@settings(max_examples=200, deadline=None)
@given(st.text())
def test_string_round_trip(s):
    assert serdes.STRING.deserialize(serdes.STRING.serialize(s)) == s


@settings(max_examples=200, deadline=None)
@given(st.floats(allow_nan=False))
def test_double_round_trip(x):
    assert serdes.DOUBLE.deserialize(serdes.DOUBLE.serialize(x)) == x
