"""Exactly-once end to end: a run killed at a random point (threads and producers abandoned,
nothing committed or aborted; on the embedded cluster a broker crashed too) and restarted
produces exactly the expected counts: nothing processed twice, nothing missing."""

from __future__ import annotations

import random
import threading

import pytest

from streams import App, AppState
from streams.runtime import SimulatedCrash

from _runtime_util import Cluster, count_sequences, last_counts, make_lines, unique, wait_for, wordcount_topology

POINTS = ("after_process", "before_commit", "after_commit")


@pytest.mark.needs_faithful_broker(reason="aborted transactional data is visible to read_committed consumers")
@pytest.mark.parametrize("seed", [11, 12, 13, 14])
def test_crash_at_random_point_then_restart_counts_exactly(backend_config, tmp_path, seed):
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
    topo = wordcount_topology(lines, out)

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
        msgs = cluster.read_all(out, 2, until=lambda got: last_counts(got) == dict(expected))
        for word, seq in count_sequences(msgs).items():
            # committed output only ever grows: a record processed twice would show up as a
            # repeated or too-high count, a lost one as a final count below the expected
            assert seq == sorted(set(seq)), (word, seq)
            assert seq[-1] == expected[word]
    finally:
        cluster.close()
