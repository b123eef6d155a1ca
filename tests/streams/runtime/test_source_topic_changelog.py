"""topology.optimization reuse.ktable.source.topics (StreamsBuilder.build(config)): a table's
source topic is its store's changelog. No changelog topic is made for it; a task restores the
store from its input partition only up to the offset the application committed there (what
follows is processed, so that the table forwards the right old values), and a clean restart
restores nothing (the checkpoint holds the processed offsets)."""

from __future__ import annotations

import shutil
import threading
from collections import Counter

import pytest

from state.listener import StateRestoreListener
from streams import App, AppState, StreamsBuilder, serdes

from _runtime_util import Cluster, shutdown_on_error, unique, wait_for

S, I64 = serdes.STRING, serdes.INT64
PARTITIONS = 2


class _Restores(StateRestoreListener):
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.starts: dict = {}  # (store, partition) -> (start offset, end offset)
        self.totals: dict = {}  # (store, partition) -> records restored

    def on_restore_start(self, tp, store_name, start_offset, end_offset):
        with self.lock:
            self.starts[(store_name, tp.partition)] = (start_offset, end_offset)

    def on_restore_end(self, tp, store_name, total_restored):
        with self.lock:
            self.totals[(store_name, tp.partition)] = total_restored


def _topology(users: str, out: str, optimize: bool):
    b = StreamsBuilder()
    (b.table(users, key_serde=S, value_serde=S, store="regions")
     .group_by(lambda user, region: (region, user), key_serde=S, value_serde=S)
     .count(store="per-region")
     .to_stream().to(out, key_serde=S, value_serde=I64))
    return b.build({"topology.optimization": "all"} if optimize else None)


def _expected(regions: dict[str, str]) -> Counter:
    return Counter(regions.values())


def _counts_match(app: App, expected: Counter, all_regions: set[str]) -> bool:
    store = app.store("per-region")
    return all((store.get(r) or 0) == expected.get(r, 0) for r in all_regions)


def _run(config: dict, topology, listener=None) -> App:
    app = App(topology, config)
    if listener is not None:
        app.set_global_state_restore_listener(listener)
    shutdown_on_error(app)
    app.start()
    assert app.wait_for_state(AppState.RUNNING, timeout=60)
    return app


@pytest.mark.parametrize("guarantee", ["at_least_once", "exactly_once_v2"])
def test_a_table_restores_from_its_source_topic_up_to_the_committed_offset(backend_config, tmp_path, guarantee):
    cluster = Cluster(backend_config)
    users, out = unique("users"), unique("per-region")
    cluster.create_topics(PARTITIONS, users, out)
    app_id, state_dir = unique("reuse"), tmp_path / "state"
    config = {**cluster.config, "application.id": app_id, "state.dir": str(state_dir),
              "processing.guarantee": guarantee, "commit.interval.ms": 100}
    topology = _topology(users, out, optimize=True)
    assert topology.source_changelog_topics == {"regions": users}
    regions = {f"u{i}": f"r{i % 3}" for i in range(12)}
    all_regions = {"r0", "r1", "r2", "r3"}
    try:
        cluster.produce(users, [(u.encode(), r.encode()) for u, r in regions.items()])
        app = _run(config, topology)
        try:
            wait_for(lambda: _counts_match(app, _expected(regions), all_regions), 60, "first counts")
        finally:
            assert app.close(timeout=60)
        topics = cluster.admin.list_topics(timeout=10).topics
        assert f"{app_id}-per-region-changelog" in topics
        assert f"{app_id}-regions-changelog" not in topics  # the source topic serves
        committed = {p: cluster.committed_offset(app_id, users, p) for p in range(PARTITIONS)}
        assert sum(committed.values()) == len(regions)

        # while the app is down: users move (the table must subtract them from their old
        # region), and the local state is lost, so the table restores from the source topic
        moves = {f"u{i}": "r3" for i in range(0, 12, 2)}
        cluster.produce(users, [(u.encode(), r.encode()) for u, r in moves.items()])
        regions.update(moves)
        shutil.rmtree(state_dir)
        listener = _Restores()
        app = _run(config, topology, listener)
        try:
            wait_for(lambda: _counts_match(app, _expected(regions), all_regions), 60, "counts after the moves")
            # restored up to the committed offsets only; the moves after them were processed
            for p in range(PARTITIONS):
                if committed[p] > 0:
                    assert listener.starts[("regions", p)] == (0, committed[p])
                    assert listener.totals[("regions", p)] == committed[p]
        finally:
            assert app.close(timeout=60)

        # a clean restart: the checkpoint holds the processed offsets, nothing is restored
        listener = _Restores()
        app = _run(config, topology, listener)
        try:
            assert _counts_match(app, _expected(regions), all_regions)
            assert all(total == 0 for (store, _), total in listener.totals.items() if store == "regions")
            for p in range(PARTITIONS):
                start, end = listener.starts.get(("regions", p), (0, 0))
                assert start == end == cluster.committed_offset(app_id, users, p)
        finally:
            assert app.close(timeout=60)
    finally:
        cluster.close()


def test_without_the_optimization_the_table_keeps_its_changelog_topic(backend_config, tmp_path):
    cluster = Cluster(backend_config)
    users, out = unique("users"), unique("per-region")
    cluster.create_topics(PARTITIONS, users, out)
    app_id = unique("plain")
    config = {**cluster.config, "application.id": app_id, "state.dir": str(tmp_path / "state"),
              "commit.interval.ms": 100}
    topology = _topology(users, out, optimize=False)
    assert topology.source_changelog_topics == {}
    try:
        cluster.produce(users, [(b"u1", b"r1"), (b"u2", b"r1")])
        app = _run(config, topology)
        try:
            wait_for(lambda: _counts_match(app, Counter({"r1": 2}), {"r1"}), 60, "counts")
        finally:
            assert app.close(timeout=60)
        assert f"{app_id}-regions-changelog" in cluster.admin.list_topics(timeout=10).topics
    finally:
        cluster.close()
