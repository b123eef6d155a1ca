"""Processor API on the real runtime: WALL_CLOCK_TIME punctuation fires from the stream thread's
loop (without new input), and `ProcessorContext.commit()` makes the thread commit at once
instead of waiting for commit.interval.ms."""

from __future__ import annotations

import time

import pytest

from state.stores import Stores
from streams import App, AppState, Processor, PunctuationType, Record, Topology, serdes

from _runtime_util import Cluster, unique, wait_for

TICK_MS = 50


class CountAndTick(Processor):
    """Counts input records in a store; every TICK_MS of wall-clock time forwards ("tick", count)
    with the punctuation time as the record's timestamp."""

    def init(self, context):
        self.context = context
        self.store = context.get_state_store("seen")
        context.schedule(TICK_MS, PunctuationType.WALL_CLOCK_TIME, self.tick)

    def process(self, record):
        self.store.put("n", (self.store.get("n") or 0) + 1)

    def tick(self, now):
        self.context.forward(Record("tick", self.store.get("n") or 0, now))


def tick_topology(source: str, sink: str) -> Topology:
    t = Topology()
    t.add_source("src", source, key_serde=serdes.STRING, value_serde=serdes.STRING)
    t.add_processor("count", CountAndTick, "src")
    t.add_state_store(Stores.key_value_store_builder(Stores.persistent_key_value_store("seen"),
                                                     serdes.STRING, serdes.INT64), "count")
    t.add_sink("out", sink, "count", key_serde=serdes.STRING, value_serde=serdes.INT64)
    return t


def test_wall_clock_punctuation_fires_on_the_runtime(backend_config, tmp_path):
    source, sink = unique("wc-in"), unique("wc-out")
    cluster = Cluster(backend_config)
    try:
        cluster.create_topics(1, source, sink)
        # event time far in the past: only the wall clock can drive these punctuations
        cluster.produce(source, [(b"k", b"v%d" % i) for i in range(5)], timestamps=[1000 + i for i in range(5)])
        start_ms = int(time.time() * 1000)
        app = App(tick_topology(source, sink), {**cluster.config, "application.id": unique("tick"),
                                                "state.dir": str(tmp_path), "commit.interval.ms": 100})
        app.start()
        try:
            assert app.wait_for_state(AppState.RUNNING, timeout=60)
            # several ticks after the 5 records were counted: they keep coming without new input
            msgs = cluster.read_all(
                sink, 1, timeout=60,
                until=lambda got: sum(1 for m in got if serdes.INT64.deserialize(m.value()) == 5) >= 3)
        finally:
            assert app.close(timeout=60)
        end_ms = int(time.time() * 1000)
        ticks = [(m.key().decode(), serdes.INT64.deserialize(m.value()), m.timestamp()[1]) for m in msgs]
        assert {k for k, _, _ in ticks} == {"tick"}
        counts = [n for _, n, _ in ticks]
        assert counts == sorted(counts) and set(counts) <= {0, 1, 2, 3, 4, 5}
        stamps = [ts for _, _, ts in ticks]
        # punctuation time is the wall clock (not the records' event time) and moves forward
        assert all(start_ms <= ts <= end_ms for ts in stamps)
        assert all(a < b for a, b in zip(stamps, stamps[1:]))
    finally:
        cluster.close()


class CommitOnDemand(Processor):
    """Forwards every record; asks for a commit when it sees the value "commit"."""

    def init(self, context):
        self.context = context

    def process(self, record):
        self.context.forward(record)
        if record.value == "commit":
            self.context.commit()


def commit_topology(source: str, sink: str) -> Topology:
    t = Topology()
    t.add_source("src", source, key_serde=serdes.STRING, value_serde=serdes.STRING)
    t.add_processor("p", CommitOnDemand, "src")
    t.add_sink("out", sink, "p", key_serde=serdes.STRING, value_serde=serdes.STRING)
    return t


@pytest.mark.parametrize("guarantee", ["at_least_once", "exactly_once_v2"])
def test_context_commit_requests_an_early_commit(backend_config, tmp_path, guarantee):
    source, sink = unique("cm-in"), unique("cm-out")
    app_id = unique("commit")
    cluster = Cluster(backend_config)
    try:
        cluster.create_topics(1, source, sink)
        app = App(commit_topology(source, sink), {
            **cluster.config, "application.id": app_id, "state.dir": str(tmp_path),
            "processing.guarantee": guarantee,
            "commit.interval.ms": 600_000})  # never reached in this test
        app.start()
        try:
            assert app.wait_for_state(AppState.RUNNING, timeout=60)
            cluster.produce(source, [(b"k", b"a"), (b"k", b"b")])
            # processed and sent (under EOS inside the still open transaction) ...
            cluster.read_all(sink, 1, until=lambda got: len(got) >= 2, timeout=60, read_committed=False)
            # ... but with a 10 minute commit interval nothing is committed yet
            assert cluster.committed_offset(app_id, source) < 0
            cluster.produce(source, [(b"k", b"commit"), (b"k", b"after")])
            # the processor's commit() makes the thread commit right after that record's batch
            wait_for(lambda: cluster.committed_offset(app_id, source) >= 3, 30, "the requested commit")
            msgs = cluster.read_all(sink, 1, until=lambda got: len(got) >= 3, timeout=30)
            assert [m.value() for m in msgs][:3] == [b"a", b"b", b"commit"]
        finally:
            assert app.close(timeout=60)
    finally:
        cluster.close()
