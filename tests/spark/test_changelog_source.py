"""eddy_changelog on a real SparkSession, reading the running App's embedded cluster."""

from __future__ import annotations

import pytest

from _spark_apps import STORES, WINDOW_MS, expected_from, make_records, wait_until
from connectors.spark import changelog_core


def _replicated(app) -> int:
    """Once every kv_str change (one per input record) is below the cluster's readable end."""
    spec = changelog_core.ChangelogSpec(app.servers, app.changelog("kv_str"))
    return wait_until(lambda: (n := sum(changelog_core.end_offsets(spec).values())) == len(app.sent) and n,
                      60, "the changelog to be replicated")


def _changelog(spark, app, store, **options):
    key_serde, value_serde = STORES[store][1].name, STORES[store][2].name
    reader = (spark.read.format("eddy_changelog").option("bootstrap.servers", app.servers)
              .option("topic", app.changelog(store)).option("key_serde", key_serde).option("value_serde", value_serde))
    for k, v in options.items():
        reader = reader.option(k, v)
    return reader.load()


def test_batch_read_has_every_record_in_offset_order(spark, running_app):
    with running_app.lock:
        running_app.wait_processed()
        total = _replicated(running_app)
        rows = _changelog(spark, running_app, "kv_str").collect()
    schema = {f.name: f.dataType.simpleString() for f in _changelog(spark, running_app, "kv_str").schema}
    assert schema == {"key": "string", "value": "string", "partition": "int", "offset": "bigint",
                      "timestamp": "bigint"}
    assert len(rows) == total
    by_partition: dict = {}
    for r in rows:
        by_partition.setdefault(r["partition"], []).append(r["offset"])
    assert sorted(by_partition) == [0, 1]
    for offsets in by_partition.values():
        # at least once: no transactions, so the offsets are dense and read in order
        assert offsets == list(range(len(offsets)))


def test_latest_per_key_equals_the_store(spark, running_app):
    with running_app.lock:
        running_app.wait_processed()
        want = expected_from(running_app.sent)["kv_str"]
        got = _changelog(spark, running_app, "kv_str", latest_per_key="true").collect()
    table = {r["key"]: r["value"] for r in got}
    assert table == want
    assert len(got) == len(table)  # one row per key


def test_window_changelog_keys_split_into_windows(spark, running_app):
    with running_app.lock:
        running_app.wait_processed()
        want = expected_from(running_app.sent)["win"]
        got = _changelog(spark, running_app, "win", latest_per_key="true", store_kind="window",
                         window_size_ms=str(WINDOW_MS)).collect()
    assert {(r["key"], r["window_start"], r["window_end"]): r["value"] for r in got} == want


def test_streaming_reads_only_new_records_on_the_second_run(spark, running_app, tmp_path):
    checkpoint = str(tmp_path / "checkpoint")
    out = str(tmp_path / "out")

    def run_once(table: str) -> int:
        stream = (spark.readStream.format("eddy_changelog").option("bootstrap.servers", running_app.servers)
                  .option("topic", running_app.changelog("kv_str")).option("key_serde", "STRING")
                  .option("value_serde", "STRING").load())
        query = (stream.writeStream.format("parquet").option("path", out).option("checkpointLocation", checkpoint)
                 .outputMode("append").start())
        try:
            query.processAllAvailable()
        finally:
            query.stop()
        return spark.read.parquet(out).count()

    with running_app.lock:
        running_app.wait_processed()
        before = _replicated(running_app)
        first = run_once("eddy_stream_first")
        assert first == before
        running_app.produce(make_records(200, seed=99, start_ts=1_900_000_000_000))
        running_app.wait_processed()
        after = _replicated(running_app)
        total = run_once("eddy_stream_second")
    second = total - first
    assert second == after - before == 200  # only what was written since the first run
    rows = spark.read.parquet(out).select("partition", "offset").collect()
    assert len(rows) == len(set(rows))  # no record twice


def test_latest_per_key_is_batch_only(spark, running_app):
    with pytest.raises(Exception, match="BadOptionError"):
        (spark.readStream.format("eddy_changelog").option("bootstrap.servers", running_app.servers)
         .option("topic", running_app.changelog("kv_str")).option("latest_per_key", "true").load()
         .writeStream.format("memory").queryName("never").start().processAllAvailable())
