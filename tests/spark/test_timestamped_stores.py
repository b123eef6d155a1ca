"""A DSL count keeps its result in a timestamped store (KIP-258): its snapshot's manifest names the
serde `value_and_timestamp(INT64)` and `eddy_store` reads plain counts; its changelog is in Kafka's
format (the raw INT64 count, the count's timestamp as the record's), so `eddy_changelog` reads plain
counts with the store's inner serde or its own serde name."""

from __future__ import annotations

import uuid

from _spark_apps import wait_until
from examples.wordcount import build_topology
from state.snapshot import read_snapshot
from streams import App, AppState

from _runtime_util import Cluster


def test_a_dsl_count_store_and_its_changelog_read_as_plain_counts(spark, tmp_path):
    servers = f"local://{tmp_path}/cluster"
    cluster = Cluster({"bootstrap.servers": servers})
    application_id = f"tscount-{uuid.uuid4().hex[:6]}"
    try:
        cluster.create_topics(1, "lines", "counts-out")
        # one partition, in this order: "a" at 1000, "a b" at 500, "b" at 2000. Kafka's rule
        # (max of the record's and the previous count's timestamps): a = 1 at 1000, then 2 at
        # max(500, 1000) = 1000; b = 1 at 500, then 2 at 2000.
        cluster.produce("lines", [(b"1", b"a"), (b"2", b"a b"), (b"3", b"b")], partition=0,
                        timestamps=[1000, 500, 2000])
        app = App(build_topology("lines", "counts-out"), {
            "application.id": application_id, "bootstrap.servers": servers, "state.dir": f"{tmp_path}/state",
            "commit.interval.ms": 100})
        app.start()
        try:
            assert app.wait_for_state(AppState.RUNNING, timeout=90)
            store = app.store("counts")
            wait_until(lambda: store.get("a") == 2 and store.get("b") == 2, 60, "the counts")
            snapshot = app.snapshot("counts", str(tmp_path / "snapshot"))
        finally:
            app.close(timeout=60)
    finally:
        cluster.close()

    assert snapshot.value_serde == read_snapshot(snapshot.path).value_serde == "value_and_timestamp(INT64)"
    rows = spark.read.format("eddy_store").load(snapshot.path).collect()
    assert {r["key"]: r["value"] for r in rows} == {"a": 2, "b": 2}

    for value_serde in ("INT64", "value_and_timestamp(INT64)"):
        latest = (spark.read.format("eddy_changelog").option("bootstrap.servers", servers)
                  .option("topic", f"{application_id}-counts-changelog").option("key_serde", "STRING")
                  .option("value_serde", value_serde).option("latest_per_key", "true").load().collect())
        assert {r["key"]: (r["value"], r["timestamp"]) for r in latest} == {"a": (2, 1000), "b": (2, 2000)}, value_serde
