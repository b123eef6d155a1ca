"""The read-only store views' queries (state/readonly.py: what app.store(name) and the
TopologyTestDriver give), each of Kafka's ReadOnlyKeyValueStore / ReadOnlyWindowStore /
ReadOnlySessionStore queries, backward and over key ranges too, on DSL stores in RocksDB and in
memory. Expected results by hand from Kafka's orders (RocksDB: by key, then time, within a
segment; in memory: by time, then key)."""

from __future__ import annotations

import pytest

from streams import Materialized, StreamsBuilder, serdes
from streams.dsl import SessionWindows, TimeWindows, Window, Windowed
from streams.testing import TopologyTestDriver

S, I64 = serdes.STRING, serdes.INT64
RECORDS = [("b", "x", 0), ("a", "x", 5), ("a", "x", 12), ("c", "x", 14), ("ab", "x", 3)]


def _materialized(name: str, in_memory: bool) -> Materialized:
    m = Materialized.as_(name).with_value_serde(I64)
    return m.with_in_memory_store() if in_memory else m


def _driver(in_memory: bool) -> TopologyTestDriver:
    b = StreamsBuilder()
    grouped = b.stream("in", key_serde=S, value_serde=S).group_by_key()
    grouped.count(store=_materialized("counts", in_memory))
    grouped.windowed_by(TimeWindows.of_size_and_grace(10, 100)).count(store=_materialized("windows", in_memory))
    grouped.windowed_by(SessionWindows.of_inactivity_gap_and_grace(3, 100)).count(
        store=_materialized("sessions", in_memory))
    driver = TopologyTestDriver(b.build(), {"application.id": "q", "statestore.cache.max.bytes": 0})
    inp = driver.create_input_topic("in", S, S)
    for key, value, ts in RECORDS:
        inp.pipe_input(key, value, timestamp=ts)
    return driver


def w(key: str, start: int, end: int, value: int) -> tuple:
    return Windowed(key, Window(start, end)), value


@pytest.mark.parametrize("in_memory", [False, True], ids=["rocksdb", "memory"])
def test_every_query_of_the_read_only_views(in_memory):
    with _driver(in_memory) as driver:
        kv = driver.get_key_value_store("counts")
        assert list(kv.range("a", "b")) == [("a", 2), ("ab", 1), ("b", 1)]
        assert list(kv.reverse_range(None, "ab")) == [("ab", 1), ("a", 2)]
        assert list(kv.prefix_scan("a")) == [("a", 2), ("ab", 1)]

        windows = driver.get_window_store("windows")  # [0, 10): b@0, a@5, ab@3; [10, 20): a@12, c@14
        assert list(windows.backward_fetch("a", 0, 20)) == [(10, 1), (0, 1)]
        by_key = [w("a", 0, 10, 1), w("a", 10, 20, 1), w("ab", 0, 10, 1), w("b", 0, 10, 1), w("c", 10, 20, 1)]
        by_time = [w("a", 0, 10, 1), w("ab", 0, 10, 1), w("b", 0, 10, 1), w("a", 10, 20, 1), w("c", 10, 20, 1)]
        expected = by_time if in_memory else by_key  # one segment on RocksDB: by key, then start
        assert list(windows.backward_fetch_all(0, 20)) == expected[::-1]
        in_range = [row for row in expected if row[0].key <= "ab"]
        assert list(windows.backward_fetch_range(None, "ab", 0, 20)) == in_range[::-1]

        sessions = driver.get_session_store("sessions")  # a: [5,5] and [12,12]; ab [3,3]; b [0,0]; c [14,14]
        assert list(sessions.backward_fetch("a")) == [w("a", 12, 12, 1), w("a", 5, 5, 1)]
        assert list(sessions.backward_find_sessions("a", 0, 10)) == [w("a", 5, 5, 1)]
        if in_memory:  # by end, then key, then start
            everything = [w("b", 0, 0, 1), w("ab", 3, 3, 1), w("a", 5, 5, 1), w("a", 12, 12, 1), w("c", 14, 14, 1)]
        else:  # by key, then end, then start
            everything = [w("a", 5, 5, 1), w("a", 12, 12, 1), w("ab", 3, 3, 1), w("b", 0, 0, 1), w("c", 14, 14, 1)]
        assert list(sessions.find_sessions_range(None, None, 0, 100)) == everything
        in_range = [row for row in everything if "ab" <= row[0].key <= "b" and row[0].window.end >= 1]
        assert list(sessions.backward_find_sessions_range("ab", "b", 1, 100)) == in_range[::-1]
        assert list(sessions.backward_fetch_range("a", "ab")) == [row for row in everything
                                                                   if row[0].key in ("a", "ab")][::-1]
