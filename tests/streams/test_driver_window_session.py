"""Window and session stores used from processors through TopologyTestDriver."""

import pytest

from state.stores import Stores
from streams import Processor, Topology, serdes
from streams.errors import StoreAccessError
from streams.testing import TopologyTestDriver

S = serdes.STRING
I64 = serdes.INT64
WINDOW_MS = 100


class WindowedCounter(Processor):
    def init(self, context):
        self.windows = context.get_state_store("windows")
        self.sessions = context.get_state_store("sessions")

    def process(self, record):
        start = record.timestamp - record.timestamp % WINDOW_MS
        with self.windows.fetch(record.key, start, start) as it:
            current = [v for _, v in it]
        self.windows.put(record.key, (current[0] if current else 0) + 1, start, record.timestamp)
        self.sessions.put(record.key, record.timestamp, record.timestamp, 1, record.timestamp)


def topology():
    t = Topology()
    t.add_source("src", "in", key_serde=S, value_serde=S)
    t.add_processor("wc", WindowedCounter, "src")
    t.add_state_store(Stores.window_store_builder(
        Stores.persistent_window_store("windows", retention_ms=10_000, window_size_ms=WINDOW_MS),
        key_serde=S, value_serde=I64), "wc")
    t.add_state_store(Stores.session_store_builder(
        Stores.in_memory_session_store("sessions", retention_ms=10_000), key_serde=S, value_serde=I64), "wc")
    return t


def test_window_and_session_stores_through_driver():
    with TopologyTestDriver(topology(), {"application.id": "win"}) as driver:
        inp = driver.create_input_topic("in", S, S)
        for ts in (10, 50, 120, 130, 150):
            inp.pipe_input("k", "v", timestamp=ts)
        windows = driver.get_window_store("windows")
        with windows.fetch("k", 0, 1000) as it:
            assert list(it) == [(0, 2), (100, 3)]  # (window start, value), as Kafka's WindowStoreIterator
        sessions = driver.get_session_store("sessions")
        with sessions.find_sessions("k", 0, 1000) as it:
            assert len(list(it)) == 5
        with pytest.raises(StoreAccessError, match="'windows' is a window store, not a key_value store"):
            driver.get_key_value_store("windows")
        with pytest.raises(StoreAccessError, match="'sessions' is a session store, not a window store"):
            driver.get_window_store("sessions")
        assert len(driver.producer_history("win-windows-changelog")) == 5


def test_timestamped_window_store_view_shows_value_and_timestamp():
    from state.timestamped import ValueAndTimestamp
    from streams import StreamsBuilder, TimeWindows

    b = StreamsBuilder()
    b.stream("in", key_serde=S, value_serde=S).group_by_key().windowed_by(
        TimeWindows.of_size_and_grace(100, 1000)).count(store="counts")  # retention 1100: nothing expires
    with TopologyTestDriver(b.build(), {"application.id": "win"}) as driver:
        inp = driver.create_input_topic("in", S, S)
        for ts in (30, 10, 120):  # window [0, 100) keeps its largest record timestamp: 30 (Kafka's KIP-258)
            inp.pipe_input("k", "v", timestamp=ts)
        store = driver.get_timestamped_window_store("counts")
        with store.all() as it:
            assert [(w.key, w.window.start, vat) for w, vat in it] == [
                ("k", 0, ValueAndTimestamp(2, 30)), ("k", 100, ValueAndTimestamp(1, 120))]
        assert store.fetch("k", 0) == ValueAndTimestamp(2, 30)
        assert driver.get_window_store("counts").fetch("k", 0) == 2  # the plain view
        with pytest.raises(StoreAccessError, match="unknown state store 'missing'"):
            driver.get_timestamped_window_store("missing")
