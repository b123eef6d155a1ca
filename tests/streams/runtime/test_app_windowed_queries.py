"""Interactive queries of window and session stores on the running app (Kafka's
ReadOnlyWindowStore / ReadOnlySessionStore over the local tasks)."""

from __future__ import annotations

import pytest

from eddy.murmur2 import murmur2_partition
from state import Stores
from state.errors import InvalidStateStoreError, InvalidStoreArgumentError
from streams import App, AppState, Processor, Topology, serdes

from _runtime_util import Cluster, unique, wait_for


class Recorder(Processor):
    """Puts each record in a 1-second tumbling window and in a session [ts, ts]."""

    def init(self, context):
        self.windows = context.get_state_store("windows")
        self.sessions = context.get_state_store("sessions")

    def process(self, record):
        start = record.timestamp - record.timestamp % 1000
        self.windows.put(record.key, record.value, start)
        self.sessions.put(record.key, record.timestamp, record.timestamp, record.value)


def _recording(src: str, recorder: type) -> Topology:
    """`src` through `recorder` (processor "p") with its window and session stores."""
    topo = Topology()
    topo.add_source("s", src, key_serde=serdes.STRING, value_serde=serdes.STRING)
    topo.add_processor("p", recorder, "s")
    topo.add_state_store(Stores.window_store_builder(
        Stores.persistent_window_store("windows", 3_600_000, 1000), serdes.STRING, serdes.STRING), "p")
    topo.add_state_store(Stores.session_store_builder(
        Stores.persistent_session_store("sessions", 3_600_000), serdes.STRING, serdes.STRING), "p")
    return topo


class LatestRecorder(Recorder):
    """Recorder, and each key's latest value in a key-value store."""

    def init(self, context):
        super().init(context)
        self.latest = context.get_state_store("latest")

    def process(self, record):
        super().process(record)
        self.latest.put(record.key, record.value)


def test_a_key_written_to_another_partition_than_the_default_partitioners_is_found(backend_config, tmp_path):
    """Kafka's composite stores ask every local store for a key: one written to a partition of
    its producer's choosing is found in that partition's task, not only in the task murmur2
    names (which, asked first, does not have it)."""
    cluster = Cluster(backend_config)
    src = unique("placed")
    cluster.create_topics(2, src)
    topo = _recording(src, LatestRecorder)
    topo.add_state_store(Stores.key_value_store_builder(
        Stores.persistent_key_value_store("latest"), serdes.STRING, serdes.STRING), "p")
    app = App(topo, {**cluster.config, "application.id": unique("iq"), "state.dir": str(tmp_path)})
    keys = ["a", "b", "c", "d"]
    try:
        app.start()
        assert app.wait_for_state(AppState.RUNNING, timeout=60)
        for i, key in enumerate(keys):  # each in the partition murmur2 does not name
            cluster.produce(src, [(key.encode(), f"{key}1".encode())], timestamps=[1_000 + i],
                            partition=1 - murmur2_partition(key.encode(), 2))
        latest, windows, sessions = app.store("latest"), app.store("windows"), app.store("sessions")
        wait_for(lambda: len(list(latest.all())) == len(keys), 30, "every key stored")
        for i, key in enumerate(keys):
            assert latest.get(key) == f"{key}1"
            assert windows.fetch(key, 1_000) == f"{key}1"
            assert list(windows.fetch(key, 0, 10_000)) == [(1_000, f"{key}1")]
            assert [v for _, v in windows.backward_fetch(key, 0, 10_000)] == [f"{key}1"]
            assert [v for _, v in sessions.fetch(key)] == [f"{key}1"]
            assert sessions.fetch_session(key, 1_000 + i, 1_000 + i) == f"{key}1"
        assert latest.get("absent") is None and list(sessions.fetch("absent")) == []
        with pytest.raises(InvalidStoreArgumentError, match="must not be None"):  # at the call, as Kafka's
            windows.fetch(None, 0, 10_000)
    finally:
        assert app.close(timeout=60)
        cluster.close()


def test_window_and_session_stores_are_queryable(backend_config, tmp_path):
    cluster = Cluster(backend_config)
    src = unique("events")
    cluster.create_topics(2, src)
    topo = _recording(src, Recorder)
    app = App(topo, {**cluster.config, "application.id": unique("iq"), "state.dir": str(tmp_path)})
    records = [(b"a", b"a1"), (b"b", b"b1"), (b"a", b"a2")]
    try:
        app.start()
        assert app.wait_for_state(AppState.RUNNING, timeout=60)
        cluster.produce(src, records, timestamps=[1_000, 1_500, 2_500])
        windows, sessions = app.store("windows"), app.store("sessions")
        wait_for(lambda: len(list(windows.all())) == 3, 30, "three windows stored")
        assert list(windows.fetch("a", 0, 10_000)) == [(1_000, "a1"), (2_000, "a2")]
        assert windows.fetch("b", 1_000) == "b1" and windows.fetch("b", 2_000) is None
        assert sorted(v for _, v in windows.fetch_all(0, 10_000)) == ["a1", "a2", "b1"]
        assert [v for _, v in sessions.fetch("a")] == ["a1", "a2"]
        assert sessions.fetch_session("b", 1_500, 1_500) == "b1"
        assert [v for _, v in sessions.find_sessions("a", 2_000, 3_000)] == ["a2"]
        with pytest.raises(InvalidStateStoreError, match="unknown state store"):
            app.store("nope")
    finally:
        assert app.close(timeout=60)
        cluster.close()
