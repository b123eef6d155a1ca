"""processing.exception.handler on the embedded runtime: records arrive in runs (the routes that
take many records at once), a failing record is dropped at its node, every other is aggregated,
and the app keeps running."""

from __future__ import annotations

from streams import App, AppState, Materialized, StreamsBuilder, serdes

from _runtime_util import Cluster, embedded_config, unique, wait_for

S, I64 = serdes.STRING, serdes.INT64


def add(key: str, value: str, total: int) -> int:
    if value.startswith("bad"):
        raise ValueError(f"cannot add {value!r}")
    return total + int(value)


def test_failing_records_are_dropped_and_the_rest_counted(tmp_path):
    cluster = Cluster(embedded_config(tmp_path))
    source = unique("handler-in")
    cluster.create_topics(1, source)
    values = [("bad" if i % 7 == 3 else str(i)) for i in range(2_000)]
    cluster.produce(source, [(f"k{i % 5}".encode(), v.encode()) for i, v in enumerate(values)])
    expected = {f"k{k}": sum(int(v) for i, v in enumerate(values) if i % 5 == k and v != "bad") for k in range(5)}
    b = StreamsBuilder()
    (b.stream(source, key_serde=S, value_serde=S).group_by_key()
        .aggregate(lambda: 0, add, store=Materialized.as_("sums").with_value_serde(I64)))
    app = App(b.build(), {**cluster.config, "application.id": unique("handler"), "state.dir": str(tmp_path / "s"),
                          "commit.interval.ms": 100, "processing.exception.handler": "log_and_continue"})
    app.start()
    try:
        assert app.wait_for_state(AppState.RUNNING, timeout=60)
        store = app.store("sums")
        wait_for(lambda: {k: store.get(k) for k in expected} == expected, 60, "every good value added")
        assert app.state is AppState.RUNNING
        assert sum(m.value for m in app.metrics() if m.name == "dropped-records-total") == values.count("bad")
    finally:
        app.close()
