"""Exactly-once end to end: a run killed at a random point (threads and producers abandoned,
nothing committed or aborted; on the embedded cluster a broker crashed too) and restarted
produces exactly the expected counts: nothing processed twice, nothing missing, with the count's
store cached or not (uncached, its RocksDB store's pending writes are all it has). And a broker
crashing while the app runs its transactions changes nothing in the output either."""

from __future__ import annotations

import random
import threading

import pytest

from streams import App, AppState
from streams.dsl import Materialized
from streams.runtime import SimulatedCrash

from _runtime_util import (Cluster, count_sequences, embedded_config, last_counts, make_lines, unique, wait_for,
                           wordcount_topology)

POINTS = ("after_process", "before_commit", "after_commit")


@pytest.mark.needs_faithful_broker(reason="aborted transactional data is visible to read_committed consumers")
@pytest.mark.parametrize("seed,cached", [(11, True), (12, True), (13, True), (14, True), (15, False), (16, False)])
def test_crash_at_random_point_then_restart_counts_exactly(backend_config, tmp_path, seed, cached):
    rng = random.Random(seed)
    embedded = backend_config["bootstrap.servers"].startswith("local:")
    rf = 3 if embedded else 1
    cluster = Cluster(backend_config)
    lines, out = unique("lines"), unique("counts")
    cluster.create_topics(2, lines, out, replication_factor=rf)
    records, expected = make_lines(1200, seed=seed, vocabulary=40)
    half = len(records) // 2
    config = {**cluster.config, "application.id": unique("eos"), "state.dir": str(tmp_path / "state"),
              "processing.guarantee": "exactly_once_v2", "commit.interval.ms": 50, "replication.factor": rf}
    topo = wordcount_topology(lines, out, "counts" if cached else Materialized.as_("counts").with_caching_disabled())

    point, after = rng.choice(POINTS), rng.randint(1, 5)
    hits = {"n": 0}
    crashed = threading.Event()

    def injector(thread, where):
        if where == point:
            hits["n"] += 1
            if hits["n"] >= after:
                crashed.set()
                raise SimulatedCrash(f"{where} #{hits['n']}")

    try:
        cluster.produce(lines, records[:half])
        app = App(topo, config)
        app.set_fault_injector(injector)
        app.start()
        cluster.produce(lines, records[half:])
        try:
            wait_for(lambda: crashed.is_set() or all(not t.is_alive() for t in app.threads), 30,
                     f"a crash at {point} #{after}")
        except AssertionError:
            pass  # processing finished before the chosen point came round: crash now instead
        app.crash()
        assert app.state is AppState.NOT_RUNNING

        if embedded:
            local = cluster.backend.cluster
            victim = rng.choice(local.live_brokers())
            local.crash_broker(victim)

        app = App(topo, config)
        app.start()
        try:
            if embedded:
                local.start_broker(victim)
            store = app.store("counts")
            wait_for(lambda: all(store.get(w) == n for w, n in expected.items()), 60, "exact counts after restart")
        finally:
            assert app.close(timeout=60)
        _assert_exactly_once_output(cluster, out, expected)
    finally:
        cluster.close()


def _assert_exactly_once_output(cluster: Cluster, out: str, expected: dict) -> None:
    """Committed output only ever grows: a record processed twice would show up as a repeated
    or too-high count, a lost one as a final count below the expected."""
    msgs = cluster.read_all(out, 2, until=lambda got: last_counts(got) == dict(expected))
    for word, seq in count_sequences(msgs).items():
        assert seq == sorted(set(seq)), (word, seq)
        assert seq[-1] == expected[word]


@pytest.mark.parametrize("seed", [21, 22])
def test_broker_crash_while_processing_exactly_once(tmp_path, seed):
    """A broker of the embedded cluster crashes (unflushed bytes lost) while the app is in the
    middle of its transactions, and comes back later: the app rides through the leader changes
    and the output is exact, nothing twice, nothing missing."""
    rng = random.Random(seed)
    cluster = Cluster({"bootstrap.servers": f"local://{tmp_path}/cluster",
                       "consumer.session.timeout.ms": 6000, "consumer.heartbeat.interval.ms": 500})
    lines, out = unique("lines"), unique("counts")
    cluster.create_topics(2, lines, out, replication_factor=3)
    records, expected = make_lines(1500, seed=seed, vocabulary=40)
    config = {**cluster.config, "application.id": unique("eos-broker"), "state.dir": str(tmp_path / "state"),
              "processing.guarantee": "exactly_once_v2", "commit.interval.ms": 50, "replication.factor": 3}
    local = cluster.backend.cluster
    app = App(wordcount_topology(lines, out), config)
    try:
        try:
            app.start()
            assert app.wait_for_state(AppState.RUNNING, timeout=60)
            cluster.produce(lines, records[:500])
            store = app.store("counts")
            wait_for(lambda: sum(store.get(w) or 0 for w in expected) > 0, 30, "processing under way")
            victim = rng.choice(local.live_brokers())
            local.crash_broker(victim)
            cluster.produce(lines, records[500:1000])
            local.start_broker(victim)
            cluster.produce(lines, records[1000:])
            wait_for(lambda: all(store.get(w) == n for w, n in expected.items()), 90, "exact counts")
            assert app.state is AppState.RUNNING
        finally:
            assert app.close(timeout=60)
        _assert_exactly_once_output(cluster, out, expected)
    finally:
        cluster.close()


@pytest.mark.parametrize("setting,expected", [({}, 10_000), ({"producer.transaction.timeout.ms": 30_000}, 30_000),
                                              ({"transaction.timeout.ms": 20_000}, 20_000)])
def test_the_transactional_producer_times_out_as_kafka_streams_does_unless_set(tmp_path, setting, expected):
    """Kafka Streams' transaction.timeout.ms under exactly-once is 10 s (the client's default is
    60 s): a lost instance's open transaction holds read_committed readers that long. A setting,
    for every client or the producer's own, wins."""
    cluster = Cluster(embedded_config(tmp_path))
    lines, out = unique("lines"), unique("counts")
    cluster.create_topics(1, lines, out)
    app = App(wordcount_topology(lines, out), {**cluster.config, "application.id": unique("eos-timeout"),
                                               "state.dir": str(tmp_path / "state"),
                                               "processing.guarantee": "exactly_once_v2", **setting})
    app.start()
    try:
        assert app.wait_for_state(AppState.RUNNING, timeout=60)
        assert [t.producer._txn_timeout_ms for t in app.threads] == [expected]  # what the producer runs with
    finally:
        assert app.close(timeout=60)
        cluster.close()
