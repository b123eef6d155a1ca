"""serdes.time_windowed / session_windowed: Kafka's bytes (WindowKeySchema.toBinary with no sequence
number; SessionKeySchema.toBinary = key + end + start), round trips and bad input."""

import datetime

import pytest

from streams import serdes
from streams.dsl import Window, Windowed
from streams.errors import SerializationError


def test_time_windowed_bytes_match_kafka():
    serde = serdes.time_windowed(serdes.STRING, 10)
    data = serde.serialize(Windowed("a", Window(10, 20)))
    # "a" then 8-byte big-endian start (10); the end is not written
    assert data == b"a" + b"\x00\x00\x00\x00\x00\x00\x00\x0a"
    assert serde.deserialize(data) == Windowed("a", Window(10, 20))


def test_time_windowed_end_comes_from_window_size():
    serde = serdes.time_windowed(serdes.INT64, datetime.timedelta(seconds=5))
    data = (7).to_bytes(8, "big") + (1_700_000_000_000).to_bytes(8, "big")
    assert serde.deserialize(data) == Windowed(7, Window(1_700_000_000_000, 1_700_000_005_000))
    # overflow of start + size is capped at Long.MAX_VALUE, as Kafka's timeWindowForSize
    top = ((1 << 63) - 3).to_bytes(8, "big")
    assert serde.deserialize((1).to_bytes(8, "big") + top).window.end == (1 << 63) - 1


def test_session_windowed_bytes_match_kafka():
    serde = serdes.session_windowed(serdes.STRING)
    data = serde.serialize(Windowed("a", Window(5, 10)))
    # SessionKeySchema.toBinary: key, then putLong(end), then putLong(start)
    assert data == b"a" + (10).to_bytes(8, "big") + (5).to_bytes(8, "big")
    assert serde.deserialize(data) == Windowed("a", Window(5, 10))


@pytest.mark.parametrize("key", ["", "user-1", "ünïcode"])
def test_round_trips(key):
    for start, end in [(0, 0), (0, 100), (1_600_000_000_000, 1_600_000_000_500)]:
        s = serdes.session_windowed(serdes.STRING)
        assert s.deserialize(s.serialize(Windowed(key, Window(start, end)))) == Windowed(key, Window(start, end))
    t = serdes.time_windowed(serdes.JSON, 500)
    w = Windowed({"k": key}, Window(1000, 1500))
    assert t.deserialize(t.serialize(w)) == w


def test_none_passes_through():
    assert serdes.time_windowed(serdes.STRING, 1).serialize(None) is None
    assert serdes.session_windowed(serdes.STRING).deserialize(None) is None


def test_bad_input():
    with pytest.raises(SerializationError, match="Windowed"):
        serdes.time_windowed(serdes.STRING, 10).serialize("not-windowed")
    with pytest.raises(SerializationError, match="too short"):
        serdes.time_windowed(serdes.STRING, 10).deserialize(b"abc")
    with pytest.raises(SerializationError, match="too short"):
        serdes.session_windowed(serdes.STRING).deserialize(b"x" * 15)
    with pytest.raises(SerializationError, match="window_size"):
        serdes.time_windowed(serdes.STRING, None)
    with pytest.raises(SerializationError, match="window_size"):
        serdes.time_windowed(serdes.STRING, 0)
    with pytest.raises(SerializationError, match="key inside the window"):
        serdes.session_windowed(None)
    with pytest.raises(SerializationError, match="not a serde"):
        serdes.session_windowed(42)
