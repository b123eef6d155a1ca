"""Word count end to end on each backend: counts, interactive queries, output, restore."""

from __future__ import annotations

import shutil
import threading

import pytest
from confluent_kafka import TopicPartition

from state.errors import InvalidStateStoreError
from state.listener import StateRestoreListener
from streams import App, AppState

from _runtime_util import Cluster, count_sequences, last_counts, make_lines, unique, wait_for, wordcount_topology


@pytest.fixture
def cluster(backend_config):
    c = Cluster(backend_config)
    yield c
    c.close()


def _config(cluster: Cluster, app_id: str, state_dir, guarantee: str, **extra) -> dict:
    return {**cluster.config, "application.id": app_id, "state.dir": str(state_dir),
            "processing.guarantee": guarantee, "commit.interval.ms": 100, **extra}


def _wait_counts(app: App, expected: dict, timeout: float = 60) -> None:
    store = app.store("counts")
    wait_for(lambda: all(store.get(w) == n for w, n in expected.items()), timeout,
             f"store counts of {len(expected)} words")


@pytest.mark.parametrize("guarantee", ["at_least_once", "exactly_once_v2"])
def test_wordcount_counts_queries_and_output(cluster, tmp_path, guarantee):
    lines, out = unique("lines"), unique("counts")
    cluster.create_topics(2, lines, out)
    records, expected = make_lines(600, seed=1)
    cluster.produce(lines, records)
    states = []
    # two stream threads under exactly-once: one transactional producer each
    threads = 2 if guarantee == "exactly_once_v2" else 1
    app = App(wordcount_topology(lines, out), _config(cluster, unique("wc"), tmp_path / "s", guarantee,
                                                      **{"num.stream.threads": threads}))
    app.set_state_listener(lambda new, old: states.append(new))
    app.start()
    try:
        assert app.wait_for_state(AppState.RUNNING, timeout=60)
        assert len(app.threads) == threads
        _wait_counts(app, expected)
        store = app.store("counts")
        assert dict(store.all()) == dict(expected)
        assert dict(store.range("w1", "w2")) == {w: n for w, n in expected.items() if "w1" <= w <= "w2"}
        assert store.get("never-seen") is None
        msgs = cluster.read_all(out, 2, until=lambda got: last_counts(got) == dict(expected))
        if guarantee == "exactly_once_v2":
            # every count emitted once per commit, always growing: nothing processed twice
            for word, seq in count_sequences(msgs).items():
                assert seq == sorted(set(seq)), (word, seq)
    finally:
        assert app.close(timeout=60)
    assert states[0] is AppState.REBALANCING and AppState.RUNNING in states
    assert states[-2:] == [AppState.PENDING_SHUTDOWN, AppState.NOT_RUNNING]
    with pytest.raises(InvalidStateStoreError, match="NOT_RUNNING"):
        app.store("counts").get("w1")


class _Listener(StateRestoreListener):
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.starts: dict = {}
        self.ends: dict = {}

    def on_restore_start(self, tp, store_name, start_offset, end_offset):
        with self.lock:
            self.starts[tp.partition] = (start_offset, end_offset)

    def on_restore_end(self, tp, store_name, total_restored):
        with self.lock:
            self.ends[tp.partition] = total_restored


def _committed(cluster: Cluster, group: str, topic: str, partitions: int) -> dict:
    c = cluster.backend.consumer({"group.id": group, "enable.auto.commit": False})
    try:
        return {tp.partition: tp.offset for tp in c.committed([TopicPartition(topic, p) for p in range(partitions)], timeout=10)}
    finally:
        c.close()


def _end_offsets(cluster: Cluster, topic: str, partitions: int) -> dict:
    c = cluster.backend.consumer({"group.id": unique("probe"), "enable.auto.commit": False})
    try:
        return {p: c.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in range(partitions)}
    finally:
        c.close()


@pytest.mark.needs_faithful_broker(reason="ListOffsets latest end offsets are wrong unless the last batch "
                                          "holds one record: a checkpointed restore looks out of range")
def test_restore_after_restart_tail_then_full(cluster, tmp_path):
    """State kept: only the changelog tail written after the last checkpoint is restored.
    State wiped: everything is restored from the start of the changelog."""
    lines, out = unique("lines"), unique("counts")
    cluster.create_topics(2, lines, out)
    app_id, state_dir = unique("wc"), tmp_path / "state"
    conf = _config(cluster, app_id, state_dir, "at_least_once")
    topo = wordcount_topology(lines, out)
    batch1, expected1 = make_lines(300, seed=2)
    batch2, expected2 = make_lines(300, seed=3, vocabulary=80)
    total = expected1 + expected2

    cluster.produce(lines, batch1)
    app = App(topo, conf)
    app.start()
    _wait_counts(app, expected1)
    assert app.close(timeout=60)  # clean: checkpoint at the changelog end

    app = App(topo, conf)
    app.start()
    cluster.produce(lines, batch2)
    _wait_counts(app, total)
    try:
        wait_for(lambda: sum(_committed(cluster, app_id, lines, 2).values()) == len(batch1) + len(batch2),
                 30, "input offsets committed")
        # the counting sub-topology reads the repartition topic: its commit (after the cache flush
        # wrote the changelog) must cover every word too, or the crash leaves the second run's
        # counts to be reprocessed from the repartition topic instead of restored
        repartition = f"{app_id}-counts-repartition"
        wait_for(lambda: _committed(cluster, app_id, repartition, 2) == _end_offsets(cluster, repartition, 2),
                 30, "repartition offsets committed")
    finally:
        app.crash()  # no checkpoint past the first run's

    listener = _Listener()
    app = App(topo, conf)
    app.set_global_state_restore_listener(listener)
    app.start()
    try:
        _wait_counts(app, total)
        assert dict(app.store("counts").all()) == dict(total)
    finally:
        assert app.close(timeout=60)
    assert listener.starts and set(listener.ends) == set(listener.starts)
    for p, (start, end) in listener.starts.items():
        assert start > 0, f"partition {p} restored from the beginning despite a checkpoint"
        assert listener.ends[p] <= end - start
    assert sum(listener.ends.values()) > 0  # the second run's writes were replayed

    shutil.rmtree(state_dir / app_id)
    full = _Listener()
    app = App(topo, conf)
    app.set_global_state_restore_listener(full)
    app.start()
    try:
        _wait_counts(app, total)
    finally:
        assert app.close(timeout=60)
    assert all(start == 0 for start, _ in full.starts.values())
    assert sum(full.ends.values()) >= len(total)
    assert sum(full.ends.values()) > sum(listener.ends.values())

