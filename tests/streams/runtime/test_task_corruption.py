"""TaskManager.handle_corruption at run time (semantics-restore step 14).

Instance A counts words and closes cleanly: its checkpoint says "changelog restored up to X".
Instance B (another state directory, same application) takes the work over and appends to the
changelog. Then the changelog records right past A's checkpoint are deleted (DeleteRecords, as
retention would). When A starts again its checkpoint is out of range (X + 1 < log start): the
task is corrupted, closed dirty, its directory wiped, and it is revived and restored from the log
start. Every key has a newer changelog record past the deleted range, so the restored counts are
complete, and processing goes on with the right totals.
"""

from __future__ import annotations

import collections
import logging

import pytest
from confluent_kafka import TopicPartition

from state import OffsetCheckpoint, StateRestoreListener
from state.task_id import TaskId
from streams import App, AppState, StreamsBuilder, serdes
from streams.dsl import Materialized

from _runtime_util import Cluster, count_sequences, unique, wait_for

pytestmark = pytest.mark.needs_faithful_broker(reason="delete_records is unsupported")

WORDS = [f"w{i}" for i in range(10)]
TASK = TaskId(0, 0)


def topology(source: str, sink: str):
    # no cache: every update reaches the changelog and the output (exact sequences are checkable);
    # compact,delete: Kafka allows DeleteRecords only on topics with the delete policy
    counts = (Materialized.as_("counts").with_caching_disabled()
              .with_logging_enabled({"cleanup.policy": "compact,delete", "retention.ms": "-1"}))
    b = StreamsBuilder()
    (b.stream(source, key_serde=serdes.STRING, value_serde=serdes.STRING)
        .group_by_key()
        .count(store=counts)
        .to_stream()
        .to(sink, key_serde=serdes.STRING, value_serde=serdes.INT64))
    return b.build()


class Restores(StateRestoreListener):
    def __init__(self):
        self.starts = []
        self.ends = []

    def on_restore_start(self, tp, store_name, start_offset, end_offset):
        self.starts.append((tp.topic, tp.partition, store_name, start_offset, end_offset))

    def on_restore_end(self, tp, store_name, total_restored):
        self.ends.append((tp.topic, store_name, total_restored))


class Runner:
    def __init__(self, cluster: Cluster, guarantee: str, tmp_path, partitions: int = 1):
        self.cluster = cluster
        self.partitions = partitions
        self.guarantee = guarantee
        self.tmp_path = tmp_path
        self.app_id = unique("corrupt")
        self.source, self.sink = unique("cin"), unique("cout")
        self.changelog = f"{self.app_id}-counts-changelog"
        self.expected: collections.Counter = collections.Counter()
        cluster.create_topics(partitions, self.source, self.sink)

    def app(self, instance: str, listener=None) -> App:
        app = App(topology(self.source, self.sink), {
            **self.cluster.config, "application.id": self.app_id, "processing.guarantee": self.guarantee,
            "state.dir": str(self.tmp_path / instance), "commit.interval.ms": 100})
        if listener is not None:
            app.set_global_state_restore_listener(listener)
        app.start()
        assert app.wait_for_state(AppState.RUNNING, timeout=60)
        return app

    def feed(self, app: App, times: int) -> None:
        """Each word `times` times, then wait until the store has the new totals."""
        self.produce(times)
        self.wait_store(app)

    def produce(self, times: int) -> None:
        """Word i goes to input partition i % partitions (so to task 0_<that partition>)."""
        for p in range(self.partitions):
            words = WORDS[p::self.partitions]
            self.cluster.produce(self.source, [(w.encode(), b"x") for _ in range(times) for w in words], partition=p)
        self.expected.update(w for _ in range(times) for w in WORDS)

    def wait_store(self, app: App) -> None:
        store = app.store("counts")
        want = dict(self.expected)
        wait_for(lambda: dict(store.all()) == want, 60, f"store counts {want}")

    def checkpoint(self, instance: str, task: TaskId = TASK) -> dict:
        path = self.tmp_path / instance / self.app_id / str(task) / ".checkpoint"
        return OffsetCheckpoint(path).read()

    def delete_below(self, partition: int, offset: int) -> None:
        """DeleteRecords on the changelog: its log start moves to `offset`."""
        [result] = self.cluster.admin.delete_records([TopicPartition(self.changelog, partition, offset)]).values()
        assert result.result(30).low_watermark == offset

    def restart_with_input(self, instance: str, listener) -> None:
        """Input waits for `instance`, which starts, catches up with it and closes cleanly."""
        self.produce(1)
        app = self.app(instance, listener)
        try:
            self.wait_store(app)
            self.feed(app, 1)
        finally:
            assert app.close(timeout=60)

    def log_offsets(self, partition: int = 0) -> tuple[int, int]:
        c = self.cluster.backend.consumer({"group.id": unique("probe")})
        try:
            return c.get_watermark_offsets(TopicPartition(self.changelog, partition), timeout=30, cached=False)
        finally:
            c.close()


@pytest.mark.parametrize("guarantee", ["at_least_once", "exactly_once_v2"])
def test_checkpoint_below_the_log_start_is_corrupted_wiped_and_restored(backend_config, tmp_path, caplog,
                                                                          guarantee):
    caplog.set_level(logging.WARNING, logger="streams.runtime.task_manager")
    cluster = Cluster(backend_config)
    try:
        r = Runner(cluster, guarantee, tmp_path)
        tp = TopicPartition(r.changelog, 0)

        a = r.app("A")
        r.feed(a, 3)
        assert a.close(timeout=60)
        [(cp_tp, x)] = r.checkpoint("A").items()
        assert (cp_tp.topic, cp_tp.partition) == (r.changelog, 0)

        b = r.app("B")  # no state: restores everything, then writes past A's checkpoint
        r.wait_store(b)
        r.feed(b, 1)    # at least 10 changelog records right after X
        r.feed(b, 1)    # a newer record of every key, after those
        assert b.close(timeout=60)
        _, log_end = r.log_offsets()
        assert log_end >= x + 1 + 20

        y = x + 3  # A's next offset (x + 1) and the one after are gone
        r.delete_below(0, y)
        assert r.log_offsets() == (y, log_end)
        assert r.checkpoint("A") == {tp: x}  # A's directory still believes in offset x

        # input waiting for A when it comes back: processed after the revived task restored;
        # corrupted, wiped, revived: restored from the log start, nothing missing
        listener = Restores()
        r.restart_with_input("A", listener)

        assert any("corrupted" in rec.getMessage() and str(TASK) in rec.getMessage() for rec in caplog.records), \
            [rec.getMessage() for rec in caplog.records]
        # the only restore that started is the full one from the log start (the out-of-range
        # checkpoint is detected before any fetch, so no restore from x + 1 ever began)
        assert [(s[3], s[4]) for s in listener.starts if s[0] == r.changelog] == [(y, log_end)]
        assert r.checkpoint("A")[tp] >= log_end - 1  # a fresh checkpoint at (or past) the old tail

        msgs = cluster.read_all(r.sink, 1, until=lambda got: len(got) >= sum(r.expected.values()), timeout=60)
        seqs = count_sequences(msgs)
        assert {k: v[-1] for k, v in seqs.items()} == dict(r.expected) == {w: 7 for w in WORDS}
        for word, seq in seqs.items():
            if guarantee == "exactly_once_v2":
                assert seq == list(range(1, 8)), (word, seq)  # exactly once: no duplicate, no gap
            else:
                assert set(seq) == set(range(1, 8)), (word, seq)  # at least once: nothing missing
    finally:
        cluster.close()


def test_only_the_corrupted_task_is_wiped(backend_config, tmp_path, caplog):
    """Two tasks; only partition 0 of the changelog loses records past A's checkpoint. Task 0_0 is
    wiped and restored from the log start; task 0_1 keeps its state and restores only the tail
    past its checkpoint; both end with the right counts."""
    caplog.set_level(logging.WARNING, logger="streams.runtime.task_manager")
    cluster = Cluster(backend_config)
    try:
        r = Runner(cluster, "at_least_once", tmp_path, partitions=2)
        t0, t1 = TaskId(0, 0), TaskId(0, 1)
        tp0, tp1 = TopicPartition(r.changelog, 0), TopicPartition(r.changelog, 1)
        a = r.app("A")
        r.feed(a, 3)
        assert a.close(timeout=60)
        x0, x1 = r.checkpoint("A", t0)[tp0], r.checkpoint("A", t1)[tp1]

        b = r.app("B")
        r.wait_store(b)
        r.feed(b, 1)
        r.feed(b, 1)
        assert b.close(timeout=60)
        end0, end1 = r.log_offsets(0)[1], r.log_offsets(1)[1]
        assert end0 >= x0 + 1 + 10 and end1 >= x1 + 1 + 10

        y = x0 + 3
        r.delete_below(0, y)
        listener = Restores()
        r.restart_with_input("A", listener)

        corrupted = [rec.getMessage() for rec in caplog.records if "corrupted" in rec.getMessage()]
        assert corrupted and all(str(t0) in m and str(t1) not in m for m in corrupted), corrupted
        starts = sorted((s[1], s[3], s[4]) for s in listener.starts if s[0] == r.changelog)
        # 0_0 from the log start (wiped); 0_1 only the tail past its checkpoint (not wiped)
        assert starts == [(0, y, end0), (1, x1 + 1, end1)]
        msgs = cluster.read_all(r.sink, 2, until=lambda got: len(got) >= sum(r.expected.values()), timeout=60)
        seqs = count_sequences(msgs)
        assert {k: v[-1] for k, v in seqs.items()} == dict(r.expected) == {w: 7 for w in WORDS}
        assert all(set(seq) == set(range(1, 8)) for seq in seqs.values()), seqs
    finally:
        cluster.close()
