"""topology.optimization reuse.ktable.source.topics (StreamsBuilder.build(config)): a table's
source topic is its store's changelog. No changelog topic is made for it; a task restores the
store from its input partition only up to the offset the application committed there (what
follows is processed, so that the table forwards the right old values), and a clean restart
restores nothing (the checkpoint holds the processed offsets). A standby follows the topic up to
the committed offset too."""

from __future__ import annotations

import shutil
import threading
from collections import Counter

import pytest
from confluent_kafka import TopicPartition

from state.listener import StateRestoreListener
from streams import App, AppState, StreamsBuilder, serdes
from streams.runtime.standby import StandbyState

from _runtime_util import Cluster, shutdown_on_error, start_sharing, unique, wait_for

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


def _standby_at_commit(cluster: Cluster, app_id: str, app: App, task_ids: list, users: str) -> bool:
    """`app` keeps a running standby of every task in `task_ids` (not empty) whose source
    changelog has reached the offset the group committed on that partition."""
    if not task_ids:
        return False
    tm = app.threads[0].task_manager
    for task_id in task_ids:
        standby = tm.standbys.get(task_id)
        if standby is None or standby.state is not StandbyState.RUNNING or standby.manager is None:
            return False
        [source] = standby.manager.source_changelog_partitions()
        committed = cluster.committed_offset(app_id, users, source.partition)
        if committed <= 0 or standby.manager.changelog_offsets()[source] != committed:
            return False
    return True


def test_a_standby_follows_the_source_topic_up_to_the_committed_offset(backend_config, tmp_path):
    """A standby applies the source topic up to what the group committed there, no further (the
    records after it are not processed yet), and keeps up as the commits move: the promoted
    standby restores nothing of the table."""
    cluster = Cluster(backend_config)
    users, out = unique("users"), unique("per-region")
    cluster.create_topics(PARTITIONS, users, out)
    app_id = unique("reuse-sb")
    topology = _topology(users, out, optimize=True)
    regions = {f"u{i}": f"r{i % 3}" for i in range(20)}
    all_regions = {"r0", "r1", "r2", "r3"}

    def new_app(name: str, listener) -> App:
        app = App(topology, {**cluster.config, "application.id": app_id, "state.dir": str(tmp_path / name),
                             "num.standby.replicas": 1, "commit.interval.ms": 100})
        app.set_global_state_restore_listener(listener)
        shutdown_on_error(app)
        return app

    restored_a, restored_b = _Restores(), _Restores()
    a, b = new_app("a", restored_a), new_app("b", restored_b)
    try:
        start_sharing(a, b)
        cluster.produce(users, [(u.encode(), r.encode()) for u, r in regions.items()])

        def counted(app_x, app_y):
            sx, sy = app_x.store("per-region"), app_y.store("per-region")
            return all(((sx.get(r) or 0) or (sy.get(r) or 0)) == n for r, n in _expected(regions).items())
        wait_for(lambda: counted(a, b), 60, "every region counted")
        moves = {f"u{i}": "r3" for i in range(0, 20, 2)}
        cluster.produce(users, [(u.encode(), r.encode()) for u, r in moves.items()])
        regions.update(moves)
        wait_for(lambda: counted(a, b), 60, "the moves counted")

        def table_tasks(app):
            return sorted(t for t in app.local_tasks()["active"] if t.subtopology == 0)

        def roles():
            for x, y, restored in ((a, b, restored_b), (b, a, restored_a)):
                if _standby_at_commit(cluster, app_id, y, table_tasks(x), users):
                    return x, y, restored
            return None
        x, y, restored_y = wait_for(roles, 60, "standbys of the table tasks at the committed offsets")
        assert x.close(timeout=60)
        wait_for(lambda: y.state is AppState.RUNNING and len(y.local_tasks()["active"]) == 2 * PARTITIONS, 60,
                 "the remaining instance running every task")
        wait_for(lambda: _counts_match(y, _expected(regions), all_regions), 60, "every count served")
        # the promoted standbys were at the committed offsets: nothing of the table to restore
        with restored_y.lock:
            table_restores = {k: v for k, v in restored_y.totals.items() if k[0] == "regions"}
        assert table_restores and all(total == 0 for total in table_restores.values())
    finally:
        a.close(timeout=60)
        b.close(timeout=60)
        cluster.close()


@pytest.mark.parametrize("guarantee", ["at_least_once", "exactly_once_v2"])
def test_a_snapshot_of_the_table_records_its_source_topic_and_the_offsets_processed(backend_config, tmp_path,
                                                                                     guarantee):
    """app.snapshot of a store whose changelog is its source topic: each shard names that topic
    and the offset of the last record the task processed (what the shard holds; under exactly
    once no checkpoint has recorded it)."""
    cluster = Cluster(backend_config)
    users, out = unique("users"), unique("per-region")
    cluster.create_topics(PARTITIONS, users, out)
    config = {**cluster.config, "application.id": unique("reuse-snap"), "state.dir": str(tmp_path / "state"),
              "commit.interval.ms": 100, "processing.guarantee": guarantee}
    regions = {f"u{i}": f"r{i % 3}" for i in range(12)}
    try:
        cluster.produce(users, [(u.encode(), r.encode()) for u, r in regions.items()])
        app = _run(config, _topology(users, out, optimize=True))
        try:
            wait_for(lambda: _counts_match(app, _expected(regions), {"r0", "r1", "r2"}), 60, "counts")
            snap = app.snapshot("regions", str(tmp_path / "snap"))
            probe = cluster.backend.consumer({"group.id": unique("probe")})
            try:
                ends = {p: probe.get_watermark_offsets(TopicPartition(users, p), timeout=10)[1]
                        for p in range(PARTITIONS)}
            finally:
                probe.close()
            assert sorted(shard.partition for shard in snap.shards) == list(range(PARTITIONS))
            for shard in snap.shards:
                assert shard.changelog_topic == users
                assert shard.changelog_offset == ends[shard.partition] - 1
        finally:
            assert app.close(timeout=60)
    finally:
        cluster.close()
