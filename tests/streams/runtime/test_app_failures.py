"""Failures the runtime must survive or report: a fenced transactional producer (revived without
losing or duplicating output) and a processor exception (uncaught exception handler, ERROR)."""

from __future__ import annotations

import threading

import pytest

from streams import App, AppState, Processor, StreamThreadExceptionResponse, Topology, serdes
from streams.errors import DeserializationHandlerError

from _runtime_util import (Cluster, Exploding, count_sequences, last_counts, make_lines, pass_through_topology,
                           shutdown_on_error, unique, wait_for, wordcount_topology)


@pytest.mark.needs_faithful_broker(reason="aborted transactional data is visible to read_committed consumers")
def test_fenced_producer_tasks_revived_exactly_once(backend_config, tmp_path):
    cluster = Cluster(backend_config)
    lines, out = unique("lines"), unique("counts")
    cluster.create_topics(2, lines, out)
    records, expected = make_lines(1500, seed=5, vocabulary=40)
    app = App(wordcount_topology(lines, out), {
        **cluster.config, "application.id": unique("fence"), "state.dir": str(tmp_path),
        "processing.guarantee": "exactly_once_v2", "commit.interval.ms": 50})
    try:
        cluster.produce(lines, records[:700])
        app.start()
        assert app.wait_for_state(AppState.RUNNING, timeout=60)
        store = app.store("counts")
        wait_for(lambda: (store.get("w0") or 0) > 0, 30, "some processing")
        # a second producer with the app thread's transactional.id fences the thread's producer
        intruder = cluster.backend.producer({"transactional.id": app.threads[0].transactional_id})
        intruder.init_transactions(30)
        cluster.produce(lines, records[700:])
        wait_for(lambda: all(store.get(w) == n for w, n in expected.items()), 60, "exact counts after fencing")
        msgs = cluster.read_all(out, 2, until=lambda got: last_counts(got) == dict(expected))
        for word, seq in count_sequences(msgs).items():
            assert seq == sorted(set(seq)), (word, seq)
        assert app.threads[0].is_alive()
    finally:
        app.close(timeout=60)
        cluster.close()


def _pass_through_app(cluster: Cluster, processor: type, tmp_path) -> tuple[App, str, str]:
    """source -> `processor` -> sink on fresh one-partition topics; (app, source, sink)."""
    src, sink = unique("in"), unique("out")
    cluster.create_topics(1, src, sink)
    return App(pass_through_topology(src, sink, processor), {**cluster.config, "application.id": unique("err"), "state.dir": str(tmp_path)}), src, sink


def test_processor_error_goes_to_the_handler_and_the_app_ends_in_error(backend_config, tmp_path):
    cluster = Cluster(backend_config)
    app, src, _sink = _pass_through_app(cluster, Exploding, tmp_path)
    states = []
    done = threading.Event()

    def on_state(new, old):
        states.append(new)
        if new is AppState.ERROR:
            done.set()

    seen = shutdown_on_error(app)
    app.set_state_listener(on_state)
    try:
        cluster.produce(src, [(b"a", b"fine"), (b"b", b"boom")])
        app.start()
        assert app.wait_for_state(AppState.ERROR, timeout=60)
        assert len(seen) == 1 and "processor=p" in str(seen[0]) and "bad record" in str(seen[0])
        assert AppState.PENDING_ERROR in states and states[-1] is AppState.ERROR
    finally:
        assert app.close(timeout=60)
        cluster.close()
    assert app.state is AppState.NOT_RUNNING


def test_a_failing_deserialization_handler_ends_the_app_in_error_naming_the_record(backend_config, tmp_path):
    cluster = Cluster(backend_config)
    src, sink = unique("in"), unique("out")
    cluster.create_topics(1, src, sink)
    topology = Topology()
    topology.add_source("s", src, key_serde=serdes.STRING, value_serde=serdes.INT64)
    topology.add_sink("o", sink, "s", key_serde=serdes.STRING, value_serde=serdes.INT64)

    def broken_handler(error):
        raise RuntimeError("handler bug")

    app = App(topology, {**cluster.config, "application.id": unique("deser"), "state.dir": str(tmp_path),
                         "default.deserialization.exception.handler": broken_handler})
    seen = shutdown_on_error(app)
    try:
        cluster.produce(src, [(b"a", serdes.INT64.serialize(1)), (b"b", b"not an int64")])
        app.start()
        assert app.wait_for_state(AppState.ERROR, timeout=60)
        assert len(seen) == 1
        error = seen[0]
        while error is not None and not isinstance(error, DeserializationHandlerError):
            error = error.__cause__
        assert error is not None, repr(seen[0])
        assert (error.topic, error.partition, error.offset) == (src, 0, 1)
        assert f"topic {src!r} partition 0 offset 1" in str(error) and "handler bug" in str(error)
    finally:
        assert app.close(timeout=60)
        cluster.close()


class ExplodingOnce(Processor):
    """Fails on the first "boom" it meets in the whole process, then passes everything."""

    exploded = threading.Event()

    def init(self, context):
        self.context = context

    def process(self, record):
        if record.value == "boom" and not ExplodingOnce.exploded.is_set():
            ExplodingOnce.exploded.set()
            raise ValueError("bad record")
        self.context.forward(record)


def test_replace_thread_keeps_the_app_running_and_reprocesses_the_failed_record(backend_config, tmp_path):
    cluster = Cluster(backend_config)
    app, src, sink = _pass_through_app(cluster, ExplodingOnce, tmp_path)
    seen = []
    ExplodingOnce.exploded.clear()
    app.set_uncaught_exception_handler(lambda exc: seen.append(exc) or StreamThreadExceptionResponse.REPLACE_THREAD)
    records = [(b"a", b"fine"), (b"b", b"boom"), (b"c", b"after")]
    try:
        cluster.produce(src, records)
        app.start()
        first = app.threads[0]
        msgs = cluster.read_all(sink, 1, until=lambda got: {m.value() for m in got} >= {b"fine", b"boom", b"after"})
        assert len(seen) == 1 and "bad record" in str(seen[0])
        assert not first.is_alive() and app.threads[0] is not first and app.threads[0].is_alive()
        assert app.state in (AppState.RUNNING, AppState.REBALANCING)
        assert b"boom" in {m.value() for m in msgs}  # the failed record was processed again, not skipped
    finally:
        assert app.close(timeout=60)
        cluster.close()
    assert app.state is AppState.NOT_RUNNING
