"""The TopologyTestDriver and a real StreamTask run the same code path: the same topology on the
same input gives the same output, store contents and changelog on the driver and on an App over
the embedded cluster (word count: fused stateless nodes, a repartition topic, an aggregate's
bulk path, a sink; cache 0 so every update is forwarded and logged, in input order)."""

from __future__ import annotations

import pytest

from streams import App, AppState, serdes
from streams.testing import TopologyTestDriver

from _runtime_util import Cluster, make_lines, unique, wait_for, wordcount_topology


def _triples(messages, key_of, value_of):
    return [(key_of(m.key()), value_of(m.value()), m.timestamp()[1]) for m in messages]


@pytest.mark.parametrize("guarantee", ["at_least_once", "exactly_once_v2"])
def test_the_driver_and_a_stream_task_give_the_same_output_store_and_changelog(tmp_path, guarantee):
    records, expected = make_lines(300, seed=11, vocabulary=12)
    timestamps = [1_000 + 3 * i for i in range(len(records))]
    config = {"application.id": unique("same-path"), "statestore.cache.max.bytes": 0,
              "processing.guarantee": guarantee}

    lines, out = unique("lines"), unique("counts")
    with TopologyTestDriver(wordcount_topology(lines, out), {**config, "state.dir": str(tmp_path / "driver")}) \
            as driver:
        for (key, value), ts in zip(records, timestamps):
            driver.pipe_raw(lines, key, value, ts)
        driver_out = [(r.key, r.value, r.timestamp) for r in
                      driver.create_output_topic(out, serdes.STRING, serdes.INT64).read_records_to_list()]
        driver_store = {w: driver.get_key_value_store("counts").get(w) for w in expected}
        changelog = [r for r in driver.producer_history() if r.topic.endswith("-counts-changelog")]
        driver_changelog = [(serdes.STRING.deserialize(r.key), serdes.INT64.deserialize(r.value), r.timestamp)
                            for r in changelog]
    assert driver_store == dict(expected)
    assert len(driver_out) == sum(expected.values()) == len(driver_changelog)

    cluster = Cluster({"bootstrap.servers": f"local://{tmp_path}/cluster"})
    app = App(wordcount_topology(lines, out), {**cluster.config, **config, "state.dir": str(tmp_path / "app"),
                                               "commit.interval.ms": 100})
    try:
        cluster.create_topics(1, lines, out)
        cluster.produce(lines, records, timestamps=timestamps)
        app.start()
        assert app.wait_for_state(AppState.RUNNING, timeout=60)
        got_out = cluster.read_all(out, 1, until=lambda got: len(got) >= len(driver_out))
        store = app.store("counts")
        wait_for(lambda: {w: store.get(w) for w in expected} == driver_store, 30, "the app's store")
        got_changelog = cluster.read_all(f"{config['application.id']}-counts-changelog", 1,
                                         until=lambda got: len(got) >= len(driver_changelog))
    finally:
        app.close(timeout=60)
        cluster.close()
    assert _triples(got_out, bytes.decode, serdes.INT64.deserialize) == driver_out
    assert _triples(got_changelog, bytes.decode, serdes.INT64.deserialize) == driver_changelog
