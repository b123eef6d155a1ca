"""rocksdb.config.setter through the runtime and the TopologyTestDriver: every persistent store
of the topology (key-value, window, session) opens RocksDB with the setter's options, each
instance is closed with its store, and in-memory stores never see it."""

from __future__ import annotations

import itertools
import pathlib

from state import RocksDBConfigSetter
from state.stores import Stores
from streams import App, AppState, Materialized, SessionWindows, StreamsBuilder, TimeWindows, serdes
from streams.testing import TopologyTestDriver

from _runtime_util import Cluster, embedded_config, unique, wait_for

S, I64 = serdes.STRING, serdes.INT64
WRITE_BUFFER = 5 * 1024 * 1024 + 8192


class SmallBuffers(RocksDBConfigSetter):
    calls: list = []
    made = itertools.count()

    def __init__(self):
        self.serial = next(SmallBuffers.made)  # not id(): a closed instance's may be reused

    def set_config(self, store_name, options, configs):
        options.set_write_buffer_size(WRITE_BUFFER)
        SmallBuffers.calls.append(("set_config", store_name, configs["application.id"], self.serial))

    def close(self, store_name, options):
        SmallBuffers.calls.append(("close", store_name, None, self.serial))


def topology(source: str, out: str):
    b = StreamsBuilder()
    grouped = b.stream(source, key_serde=S, value_serde=S).group_by_key()
    grouped.count(store="counts").to_stream().to(out, value_serde=I64)
    grouped.windowed_by(TimeWindows.of_size_with_no_grace(1000)).count(store="windowed")
    grouped.windowed_by(SessionWindows.of_inactivity_gap_with_no_grace(1000)).count(store="sessions")
    grouped.count(store=Materialized.as_(Stores.in_memory_key_value_store("in-memory")))
    return b.build()


PERSISTENT = {"counts", "windowed", "sessions"}


def paired(calls: list) -> dict:
    """store name -> its calls' names, checking that each instance closes once, after its set_config."""
    opened: dict = {}
    by_store: dict = {}
    for call, store, _app, instance in calls:
        by_store.setdefault(store, []).append(call)
        if call == "set_config":
            assert instance not in opened
            opened[instance] = store
        else:
            assert opened.pop(instance) == store
    assert not opened, f"instances never closed: {opened}"
    return by_store


def write_buffer_of(store_dir: pathlib.Path) -> int:
    newest = max(store_dir.glob("OPTIONS-*"), key=lambda p: int(p.name.split("-")[1]))
    lines = newest.read_text().split('[CFOptions "default"]', 1)[1].splitlines()
    return int(next(line for line in lines if line.strip().startswith("write_buffer_size=")).split("=")[1])


def test_the_driver_configures_every_persistent_store():
    SmallBuffers.calls = []
    with TopologyTestDriver(topology("in", "out"), {"application.id": "setter",
                                                    "rocksdb.config.setter": SmallBuffers}) as driver:
        inp = driver.create_input_topic("in", S, S)
        inp.pipe_input("k", "v", timestamp=10)
        assert driver.create_output_topic("out", S, I64).read_key_values_to_list() == [("k", 1)]
        assert {name for call, name, app, _ in SmallBuffers.calls if call == "set_config"} == PERSISTENT
        assert {app for _, _, app, _ in SmallBuffers.calls if app is not None} == {"setter"}
    assert paired(SmallBuffers.calls) == {name: ["set_config", "close"] for name in PERSISTENT}


def test_the_app_opens_its_stores_with_the_setters_options(tmp_path):
    SmallBuffers.calls = []
    source, out = unique("setter-in"), unique("setter-out")
    cluster = Cluster(embedded_config(tmp_path))
    cluster.create_topics(1, source, out)
    cluster.produce(source, [(b"k", b"a"), (b"k", b"b")], timestamps=[1000, 1001])
    app_id = unique("setter")
    app = App(topology(source, out), {**cluster.config, "application.id": app_id, "state.dir": str(tmp_path / "state"),
                                      "commit.interval.ms": 100, "rocksdb.config.setter": SmallBuffers})
    app.start()
    try:
        assert app.wait_for_state(AppState.RUNNING, timeout=60)
        # the cache may merge the two updates: the last count written out is 2
        cluster.read_all(out, 1, until=lambda got: bool(got) and I64.deserialize(got[-1].value()) == 2, timeout=60)
        wait_for(lambda: app.store("counts").get("k") == 2, 30, "the count in the store")
        task_dir = tmp_path / "state" / app_id / "0_0" / "rocksdb"
        for name in PERSISTENT:
            assert write_buffer_of(task_dir / name) == WRITE_BUFFER
        assert not (task_dir / "in-memory").exists()
    finally:
        app.close()
    assert paired(SmallBuffers.calls) == {name: ["set_config", "close"] for name in PERSISTENT}
