"""dsl.store.suppliers.class on the embedded runtime: the app's DSL stores are in memory (no
RocksDB directory for them), and a restart rebuilds them from their changelogs, so the counts go
on from where they were."""

from __future__ import annotations

from streams import App, AppState, StreamsBuilder, TimeWindows, serdes
from streams.dsl.windows import Windowed

from _runtime_util import Cluster, embedded_config, unique, wait_for

S, I64 = serdes.STRING, serdes.INT64
KAFKA_IN_MEMORY = "org.apache.kafka.streams.state.BuiltInDslStoreSuppliers$InMemoryDslStoreSuppliers"


def topology(source: str, out: str):
    b = StreamsBuilder()
    grouped = b.stream(source, key_serde=S, value_serde=S).group_by_key()
    grouped.count(store="counts").to_stream().to(out, value_serde=I64)
    grouped.windowed_by(TimeWindows.of_size_with_no_grace(10_000)).count(store="windowed")
    return b.build()


def window_count(app: App, key: str) -> int | None:
    found = [count for windowed, count in app.store("windowed").fetch_all(0, 20_000)
             if isinstance(windowed, Windowed) and windowed.key == key]
    return found[0] if found else None


def run_once(source: str, out: str, config: dict, app_id: str, tmp_path, expected: int) -> None:
    """Start the app, wait for k's count to be `expected` in both stores, check that neither has a
    RocksDB directory, close it."""
    app = App(topology(source, out), config)
    app.start()
    try:
        assert app.wait_for_state(AppState.RUNNING, timeout=60)
        wait_for(lambda: app.store("counts").get("k") == expected, 60, f"k counted {expected} times")
        assert app.store("counts").get("j") == 1
        wait_for(lambda: window_count(app, "k") == expected, 30, "the windowed count")
        task_dir = tmp_path / "state" / app_id / "0_0"
        assert not (task_dir / "rocksdb" / "counts").exists()
        assert not (task_dir / "rocksdb" / "windowed").exists()
    finally:
        app.close()


def test_in_memory_dsl_stores_restore_across_a_restart(tmp_path):
    source, out = unique("dsl-type-in"), unique("dsl-type-out")
    cluster = Cluster(embedded_config(tmp_path))
    cluster.create_topics(1, source, out)
    app_id = unique("dsl-type")
    config = {**cluster.config, "application.id": app_id, "state.dir": str(tmp_path / "state"),
              "commit.interval.ms": 100, "dsl.store.suppliers.class": KAFKA_IN_MEMORY}
    cluster.produce(source, [(b"k", b"a"), (b"k", b"b"), (b"j", b"c")], timestamps=[1000, 2000, 3000])
    run_once(source, out, config, app_id, tmp_path, expected=2)
    cluster.produce(source, [(b"k", b"d"), (b"k", b"e")], timestamps=[4000, 5000])
    run_once(source, out, config, app_id, tmp_path, expected=4)
    # the second run went on from the restored count (counting from scratch would go back to 1)
    counts = [I64.deserialize(m.value()) for m in cluster.read_all(
        out, 1, until=lambda got: bool(got) and I64.deserialize(got[-1].value()) == 4) if m.key() == b"k"]
    assert counts == sorted(set(counts)) and counts[-1] == 4


def test_switching_the_store_type_between_runs_loses_nothing(tmp_path):
    """RocksDB, then in memory, then RocksDB again, over one state directory: each run's stores
    start from what the changelogs hold (an in-memory store has no checkpoint; the RocksDB store
    of the third run finds its directory from the first with no checkpoint for it, and restores
    over it), so every run's counts go on from the previous one's."""
    source, out = unique("dsl-switch-in"), unique("dsl-switch-out")
    cluster = Cluster(embedded_config(tmp_path))
    cluster.create_topics(1, source, out)
    app_id = unique("dsl-switch")
    rocksdb = {**cluster.config, "application.id": app_id, "state.dir": str(tmp_path / "state"),
               "commit.interval.ms": 100}
    in_memory = {**rocksdb, "dsl.store.suppliers.class": KAFKA_IN_MEMORY}
    counts = {}
    for config in (rocksdb, in_memory, rocksdb):
        cluster.produce(source, [(b"k", b"a"), (b"j", b"b")], timestamps=[1000, 1000])
        counts = {"k": counts.get("k", 0) + 1, "j": counts.get("j", 0) + 1}
        app = App(topology(source, out), config)
        app.start()
        try:
            assert app.wait_for_state(AppState.RUNNING, timeout=60)
            wait_for(lambda app=app, expected=dict(counts): all(
                app.store("counts").get(key) == n for key, n in expected.items()), 60, f"counts {counts}")
        finally:
            app.close()
