"""Timestamped key-value stores (Kafka's 8-byte timestamp + value format) and the read-only IQ views."""

import datetime

import pytest

from state.errors import InvalidStateStoreError, InvalidStoreArgumentError
from state.readonly import (
    ReadOnlyKeyValueView,
    ReadOnlySessionView,
    ReadOnlyWindowView,
    read_only_view,
    time_ms,
)
from state.stores import Stores
from state.timestamped import ValueAndTimestamp, ValueAndTimestampSerde, raw_timestamp, raw_value
from state.window import Window, Windowed
from streams import serdes

from recording_context import RecordingContext


def build(builder, tmp_path, task="0_1"):
    store = builder.build()
    ctx = RecordingContext(tmp_path / task)
    store.init(ctx)
    return store, ctx


def test_value_and_timestamp_bytes():
    serde = ValueAndTimestampSerde(serdes.STRING)
    data = serde.serialize(ValueAndTimestamp("hi", 5))
    assert data == b"\x00\x00\x00\x00\x00\x00\x00\x05hi"  # Kafka: putLong(timestamp).put(raw value)
    assert serde.deserialize(data) == ValueAndTimestamp("hi", 5)
    assert raw_value(data) == b"hi" and raw_timestamp(data) == 5
    assert serde.serialize(None) is None and serde.deserialize(None) is None
    assert ValueAndTimestamp.make(None, 3) is None
    assert ValueAndTimestamp.get_value_or_null(ValueAndTimestamp("x", 1)) == "x"
    with pytest.raises(InvalidStoreArgumentError, match="ValueAndTimestamp"):
        serde.serialize("plain")


@pytest.mark.parametrize("in_memory", [True, False])
def test_timestamped_store_round_trip_and_changelog(tmp_path, in_memory):
    supplier = (Stores.in_memory_key_value_store("t") if in_memory else Stores.persistent_key_value_store("t"))
    store, ctx = build(Stores.timestamped_key_value_store_builder(supplier, serdes.STRING, serdes.INT64), tmp_path)
    store.put("a", ValueAndTimestamp(7, 100))
    assert store.get("a") == ValueAndTimestamp(7, 100)
    # logged in Kafka's format: the raw value, with the value's timestamp as the record timestamp
    assert ctx.logged_changes == [("t", b"a", (7).to_bytes(8, "big"), 100)]
    store.put("a", None)
    assert store.get("a") is None
    with pytest.raises(InvalidStoreArgumentError):
        store.put("b", 3)
    store.close()


def kv_stores(tmp_path):
    a, _ = build(Stores.timestamped_key_value_store_builder(
        Stores.in_memory_key_value_store("kv"), serdes.STRING, serdes.INT64), tmp_path, "0_0")
    b, _ = build(Stores.timestamped_key_value_store_builder(
        Stores.in_memory_key_value_store("kv"), serdes.STRING, serdes.INT64), tmp_path, "0_1")
    a.put("x", ValueAndTimestamp(1, 10))
    a.put("z", ValueAndTimestamp(3, 30))
    b.put("y", ValueAndTimestamp(2, 20))
    return a, b


def test_key_value_view_over_two_tasks(tmp_path):
    a, b = kv_stores(tmp_path)
    view = read_only_view([a, b])
    assert isinstance(view, ReadOnlyKeyValueView) and view.name == "kv"
    assert view.get("y") == 2 and view.get("x") == 1 and view.get("nope") is None
    assert list(view.all()) == [("x", 1), ("z", 3), ("y", 2)]  # per store, as Kafka's composite store
    assert list(view.range("x", "y")) == [("x", 1), ("y", 2)]
    assert view.approximate_num_entries() == 3
    ts_view = ReadOnlyKeyValueView([a, b], timestamped=True)
    assert ts_view.get("z") == ValueAndTimestamp(3, 30)
    assert not hasattr(view, "put") and not hasattr(view, "delete")
    a.close()
    with pytest.raises(InvalidStateStoreError, match="not available"):
        view.get("x")
    with pytest.raises(InvalidStoreArgumentError):
        ReadOnlyKeyValueView([b]).get(None)
    b.close()


def test_window_view(tmp_path):
    store, _ = build(Stores.window_store_builder(
        Stores.in_memory_window_store("w", retention_ms=1000, window_size_ms=10), serdes.STRING, serdes.INT64),
        tmp_path)
    store.put("a", 1, 0)
    store.put("a", 2, 10)
    store.put("b", 5, 10)
    view = read_only_view(store)
    assert isinstance(view, ReadOnlyWindowView)
    assert list(view.fetch("a", 0, 10)) == [(0, 1), (10, 2)]
    assert list(view.fetch("a", 5, 10)) == [(10, 2)]  # bounds are window starts
    assert view.fetch("a", 10) == 2 and view.fetch("a", 20) is None
    assert list(view.fetch_all(10, 10)) == [(Windowed("a", Window(10, 20)), 2), (Windowed("b", Window(10, 20)), 5)]
    assert list(view.all()) == [(Windowed("a", Window(0, 10)), 1), (Windowed("a", Window(10, 20)), 2),
                                (Windowed("b", Window(10, 20)), 5)]
    epoch = datetime.datetime(1970, 1, 1, tzinfo=datetime.timezone.utc)
    assert list(view.fetch("a", epoch, epoch + datetime.timedelta(milliseconds=10))) == [(0, 1), (10, 2)]
    store.close()


def test_session_view(tmp_path):
    store, _ = build(Stores.session_store_builder(
        Stores.in_memory_session_store("s", retention_ms=1000), serdes.STRING, serdes.INT64), tmp_path)
    store.put("a", 0, 5, 2)
    store.put("a", 20, 30, 3)
    store.put("b", 1, 1, 1)
    view = read_only_view(store)
    assert isinstance(view, ReadOnlySessionView)
    assert list(view.fetch("a")) == [(Windowed("a", Window(0, 5)), 2), (Windowed("a", Window(20, 30)), 3)]
    # end >= 6 and start <= 25: only [20,30]
    assert list(view.find_sessions("a", 6, 25)) == [(Windowed("a", Window(20, 30)), 3)]
    # end >= 5 and start <= 19: only [0,5]
    assert list(view.find_sessions("a", 5, 19)) == [(Windowed("a", Window(0, 5)), 2)]
    assert view.fetch_session("b", 1, 1) == 1
    assert len(list(view.all())) == 3
    store.close()


def test_time_arguments():
    assert time_ms(5, "t") == 5
    assert time_ms(datetime.timedelta(seconds=2), "t") == 2000
    assert time_ms(datetime.datetime(1970, 1, 1, 0, 0, 1, tzinfo=datetime.timezone.utc), "t") == 1000
    with pytest.raises(InvalidStoreArgumentError, match="timezone"):
        time_ms(datetime.datetime(2020, 1, 1), "t")
    with pytest.raises(InvalidStoreArgumentError, match="t must be"):
        time_ms("5", "t")


def test_not_queryable():
    with pytest.raises(InvalidStateStoreError):
        read_only_view([])
    with pytest.raises(InvalidStateStoreError, match="cannot be queried"):
        read_only_view(object(), "x")


def test_timestamped_window_store_view_unwraps(tmp_path):
    from streams.dsl import Materialized, TimeWindows
    from streams.dsl.materialized import window_store_builder

    builder = window_store_builder(Materialized.as_("tw").with_in_memory_store().with_caching_disabled(), "gen",
                                   TimeWindows.of_size_with_no_grace(10), serdes.STRING, serdes.INT64,
                                   timestamped=True)
    store, ctx = build(builder, tmp_path)
    store.put("a", ValueAndTimestamp(4, 7), 0)
    # the changelog record is Kafka's timestamped format: the raw value, the value's timestamp
    assert ctx.logged_changes[0][2:] == ((4).to_bytes(8, "big"), 7)
    assert list(store.fetch("a", 0, 0)) == [(0, ValueAndTimestamp(4, 7))]
    view = read_only_view(store)
    assert list(view.fetch("a", 0, 10)) == [(0, 4)]
    assert view.fetch("a", 0) == 4
    assert list(view.all()) == [(Windowed("a", Window(0, 10)), 4)]
    assert list(read_only_view(store, timestamped=True).fetch("a", 0, 10)) == [(0, ValueAndTimestamp(4, 7))]
    store.close()
