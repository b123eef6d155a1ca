"""Rebalances between App instances in one process while input flows: nothing is lost and,
under exactly_once_v2, nothing is processed twice. Standbys take over without a full restore."""

from __future__ import annotations

import threading

import pytest

from state.listener import StandbyUpdateListener, SuspendReason
from streams import App, AppState
from state.task_id import TaskId
from streams.runtime.errors import RuntimeStateError
from streams.runtime.standby import StandbyState

from _runtime_util import (Cluster, RestoredCounts, count_sequences, last_counts, make_lines, running_with_tasks,
                           start_sharing, unique, wait_for, wordcount_topology)

_pause = threading.Event()

# Tasks that move restore their stores from the changelog; on a broker whose ListOffsets
# answers a wrong end offset the restore stops early (embedded always; Kafka when faithful).
pytestmark = pytest.mark.needs_faithful_broker(
    reason="ListOffsets latest end offsets are wrong unless the last batch holds one record, "
           "so migrated tasks restore only part of their changelog; aborted data is visible")


class _Feeder(threading.Thread):
    """Writes the input in small chunks, so rebalances happen while input flows."""

    def __init__(self, cluster: Cluster, topic: str, records: list, chunk: int = 40) -> None:
        super().__init__(daemon=True)
        self.cluster, self.topic, self.records, self.chunk = cluster, topic, records, chunk
        self.error = None
        self.sent = 0

    def run(self) -> None:
        try:
            producer = self.cluster.backend.producer({"client.id": "feeder"})
            for i in range(0, len(self.records), self.chunk):
                for k, v in self.records[i:i + self.chunk]:
                    producer.produce(self.topic, value=v, key=k)
                producer.flush(30)
                self.sent = i + self.chunk
                _pause.wait(0.02)
        except Exception as exc:  # noqa: BLE001 - reported by the test
            self.error = exc


@pytest.mark.parametrize("guarantee", ["at_least_once", "exactly_once_v2"])
def test_rebalance_between_three_instances_while_input_flows(backend_config, tmp_path, guarantee):
    cluster = Cluster(backend_config)
    lines, out = unique("lines"), unique("counts")
    cluster.create_topics(4, lines, out)
    records, expected = make_lines(2400, seed=7, vocabulary=60)
    app_id = unique("reb")
    topo = wordcount_topology(lines, out)

    def new_app(name: str) -> App:
        return App(topo, {**cluster.config, "application.id": app_id, "state.dir": str(tmp_path / name),
                          "processing.guarantee": guarantee, "commit.interval.ms": 100})

    feeder = _Feeder(cluster, lines, records)
    apps = []
    try:
        a = new_app("a")
        apps.append(a)
        a.start()
        assert a.wait_for_state(AppState.RUNNING, timeout=60)
        feeder.start()
        b = new_app("b")
        apps.append(b)
        b.start()
        wait_for(lambda: running_with_tasks(a, b), 60, "a and b sharing the tasks")
        c = new_app("c")
        apps.append(c)
        c.start()
        wait_for(lambda: running_with_tasks(a, b, c), 60, "a, b and c sharing the tasks")
        assert b.close(timeout=60)  # b leaves: its tasks move to a and c
        wait_for(lambda: running_with_tasks(a, c), 60, "a and c sharing the tasks")
        feeder.join(60)
        assert feeder.error is None and not feeder.is_alive()
        msgs = cluster.read_all(out, 4, until=lambda got: all(last_counts(got).get(w, 0) >= n
                                                               for w, n in expected.items()), timeout=90)
    finally:
        for app in apps:
            app.close(timeout=60)
        cluster.close()
    final = last_counts(msgs)
    if guarantee == "exactly_once_v2":
        assert final == dict(expected)
        for word, seq in count_sequences(msgs).items():
            assert seq == sorted(set(seq)), (word, seq)
    else:
        assert all(final[w] >= n for w, n in expected.items())  # at least once: nothing lost


def _standbys_caught_up(cluster: Cluster, app: App, task_ids: list) -> bool:
    """`app` keeps a running standby of every task in `task_ids` (not empty), each at the end of
    its non-empty changelogs."""
    if not task_ids:
        return False
    tm = app.threads[0].task_manager
    probe = cluster.backend.consumer({"group.id": unique("probe")})
    try:
        for task_id in task_ids:
            standby = tm.standbys.get(task_id)
            if standby is None or standby.state is not StandbyState.RUNNING or standby.manager is None:
                return False
            offsets = standby.manager.changelog_offsets()
            if not offsets:
                return False
            for tp, next_offset in offsets.items():
                _, high = probe.get_watermark_offsets(tp, timeout=5, cached=False)
                if high is None or high <= 0 or next_offset < high:
                    return False
        return True
    finally:
        probe.close()


def test_standby_takes_over_without_full_restore(backend_config, tmp_path):
    cluster = Cluster(backend_config)
    lines, out = unique("lines"), unique("counts")
    cluster.create_topics(2, lines, out)
    records, expected = make_lines(1500, seed=9, vocabulary=300)
    app_id = unique("sb")
    topo = wordcount_topology(lines, out)

    def new_app(name: str, listener=None) -> App:
        app = App(topo, {**cluster.config, "application.id": app_id, "state.dir": str(tmp_path / name),
                         "num.standby.replicas": 1, "commit.interval.ms": 100})
        if listener is not None:
            app.set_global_state_restore_listener(listener)
        return app

    restored_a, restored_b = RestoredCounts(), RestoredCounts()
    a, b = new_app("a", restored_a), new_app("b", restored_b)
    try:
        start_sharing(a, b)
        cluster.produce(lines, records)

        def stateful(app):
            return sorted(t for t in app.local_tasks()["active"] if t.subtopology == 1)

        sa, sb = a.store("counts"), b.store("counts")
        wait_for(lambda: all((sa.get(w) or sb.get(w)) == n for w, n in expected.items()), 60,
                 "every word counted")
        # once the counts are committed (output written), the standbys catch up with the changelogs
        cluster.read_all(out, 2, until=lambda got: last_counts(got) == dict(expected))

        def roles():
            """(x, y, y's restores) once x owns stateful tasks and y keeps caught-up standbys of
            all of them; checked in one go, as tasks may still move between the two."""
            for x, y, restored in ((a, b, restored_b), (b, a, restored_a)):
                if _standbys_caught_up(cluster, y, stateful(x)):
                    return x, y, restored
            return None

        x, y, restored_y = wait_for(roles, 30, "standbys of the stateful tasks caught up on the other instance")
        changelog_total = len(expected)  # at least one changelog record per word
        before = restored_y.ended
        assert x.close(timeout=60)
        wait_for(lambda: y.state is AppState.RUNNING and len(y.local_tasks()["active"]) == 4, 60,
                 "the remaining instance running every task")
        store = y.store("counts")
        wait_for(lambda: all(store.get(w) == n for w, n in expected.items()), 60, "every count served")
        # the promoted standbys were up to date: far less was replayed than the changelogs hold
        assert restored_y.ended - before < changelog_total
    finally:
        a.close(timeout=60)
        b.close(timeout=60)
        cluster.close()


def test_standbys_placed_exactly_num_standby_replicas_times_on_other_instances(backend_config, tmp_path):
    cluster = Cluster(backend_config)
    lines, out = unique("lines"), unique("counts")
    cluster.create_topics(2, lines, out)
    app_id = unique("place")
    topo = wordcount_topology(lines, out)
    apps = [App(topo, {**cluster.config, "application.id": app_id, "state.dir": str(tmp_path / name),
                       "num.standby.replicas": 1, "commit.interval.ms": 100}) for name in "abc"]
    stateful = {TaskId(1, 0), TaskId(1, 1)}

    def placed() -> bool:
        tasks = [app.local_tasks() for app in apps]
        owners = [t for ts in tasks for t in ts["active"] if t in stateful]
        if sorted(owners, key=str) != sorted(stateful, key=str):
            return False
        for task in stateful:
            holders = [i for i, ts in enumerate(tasks) if task in ts["standby"]]
            owner = next(i for i, ts in enumerate(tasks) if task in ts["active"])
            if len(holders) != 1 or owner in holders:
                return False
        return all(app.state is AppState.RUNNING for app in apps)

    try:
        for app in apps:
            app.start()
        wait_for(placed, 60, "one standby of each stateful task, never on its owner")
        assert apps[0].close(timeout=60)  # an instance leaves: placement follows the new membership
        apps = apps[1:]
        wait_for(placed, 60, "one standby of each stateful task among the remaining instances")
    finally:
        for app in apps:
            app.close(timeout=60)
        cluster.close()


class _StandbyUpdates(StandbyUpdateListener):
    """What App.set_standby_update_listener reports, per (changelog partition, store)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.started: dict = {}
        self.loaded: dict = {}
        self.suspended: dict = {}

    def on_update_start(self, tp, store_name, start_offset):
        with self.lock:
            self.started[(tp.topic, tp.partition, store_name)] = start_offset

    def on_batch_loaded(self, tp, store_name, batch_end_offset, num_loaded):
        with self.lock:
            key = (tp.topic, tp.partition, store_name)
            self.loaded[key] = self.loaded.get(key, 0) + num_loaded

    def on_update_suspended(self, tp, store_name, store_offset, reason):
        with self.lock:
            self.suspended[(tp.topic, tp.partition, store_name)] = reason


def test_the_standby_update_listener_follows_standbys_until_promoted(backend_config, tmp_path):
    cluster = Cluster(backend_config)
    lines, out = unique("lines"), unique("counts")
    cluster.create_topics(2, lines, out)
    records, expected = make_lines(600, seed=13, vocabulary=80)
    app_id = unique("sbl")
    topo = wordcount_topology(lines, out)
    apps, updates = [], {}
    for name in "ab":
        app = App(topo, {**cluster.config, "application.id": app_id, "state.dir": str(tmp_path / name),
                         "num.standby.replicas": 1, "commit.interval.ms": 100})
        updates[app] = _StandbyUpdates()
        app.set_standby_update_listener(updates[app])
        apps.append(app)
    a, b = apps
    try:
        a.start()
        with pytest.raises(RuntimeStateError, match="only allowed before start"):
            a.set_standby_update_listener(updates[a])
        wait_for(lambda: running_with_tasks(a), 60, "a running")
        b.start()
        cluster.produce(lines, records)
        wait_for(lambda: running_with_tasks(a, b), 60, "a and b sharing the tasks")
        cluster.read_all(out, 2, until=lambda got: last_counts(got) == dict(expected))

        def followed(app: App) -> list:
            """The changelog partitions of `app`'s standbys of the two stateful tasks, once each
            was started and loaded (else [])."""
            standbys = {task_id: standby for task_id, standby in list(app.threads[0].task_manager.standbys.items())
                        if task_id.subtopology == 1 and standby.manager is not None}
            changelogs = [tp for standby in standbys.values() for tp in standby.manager.changelog_offsets()]
            seen = updates[app]
            with seen.lock:
                done = [tp for tp in changelogs if seen.loaded.get((tp.topic, tp.partition, "counts"), 0) > 0
                        and (tp.topic, tp.partition, "counts") in seen.started]
            return changelogs if len(standbys) == 2 and len(done) == len(changelogs) == 2 else []

        def roles():
            """(owner of the stateful tasks, the other, its followed changelogs), once they are so."""
            for x, y in ((a, b), (b, a)):
                changelogs = followed(y)
                if changelogs:
                    return x, y, changelogs
            return None
        x, y, changelogs = wait_for(roles, 60, "one instance's standbys of both stateful tasks started and loaded")
        assert x.close(timeout=60)
        wait_for(lambda: y.state is AppState.RUNNING and len(y.local_tasks()["active"]) == 4, 60,
                 "the other instance running every task")
        seen = updates[y]
        with seen.lock:
            assert {seen.suspended.get((tp.topic, tp.partition, "counts")) for tp in changelogs} == {
                SuspendReason.PROMOTED}
    finally:
        for app in apps:
            app.close(timeout=60)
        cluster.close()
