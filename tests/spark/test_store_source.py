"""eddy_store on a real SparkSession: every serde and store kind round-trips from a running App."""

from __future__ import annotations

import pyarrow as pa
import pytest

from _spark_apps import PARTITIONS, STORES
from connectors.spark import arrow_core
from state.snapshot import read_snapshot


def _rows(spark, snapshot, **options):
    reader = spark.read.format("eddy_store")
    for k, v in options.items():
        reader = reader.option(k, v)
    return reader.load(snapshot.path)


def _as_expected(name: str, rows: list) -> dict:
    kind = STORES[name][0]
    if kind == "key_value":
        if name == "kv_json":
            return {r["key"]: r["value"].asDict(recursive=True) for r in rows}
        return {r["key"]: r["value"] for r in rows}
    if kind == "window":
        return {(r["key"], r["window_start"], r["window_end"]): r["value"] for r in rows}
    return {(r["key"], r["window_start"], r["window_end"]): r["value"] for r in rows}


@pytest.mark.parametrize("name", sorted(STORES))
def test_every_store_round_trips_through_spark(spark, snapshots, name):
    taken, expected = snapshots
    snap = taken[name]
    assert read_snapshot(snap.path).store_kind == STORES[name][0]
    assert len(snap.shards) == PARTITIONS
    df = _rows(spark, snap)
    got = _as_expected(name, df.collect())
    want = expected[name]
    if name == "kv_json":
        want = {k: {**v} for k, v in want.items()}
    if name == "kv_i64_flt":  # FLOAT: values were chosen exactly representable
        assert set(got) == set(want) and all(abs(got[k] - want[k]) == 0 for k in want)
    else:
        assert got == want


def test_schema_types_and_nullability(spark, snapshots):
    taken, _ = snapshots
    fields = {f.name: (f.dataType.simpleString(), f.nullable) for f in _rows(spark, taken["kv_i32_dbl"]).schema}
    assert fields == {"key": ("int", False), "value": ("double", True)}
    fields = {f.name: (f.dataType.simpleString(), f.nullable) for f in _rows(spark, taken["win"]).schema}
    assert fields == {"key": ("string", False), "window_start": ("bigint", False), "window_end": ("bigint", False),
                      "value": ("bigint", True)}
    json_type = dict((f.name, f.dataType.simpleString()) for f in _rows(spark, taken["kv_json"]).schema)["value"]
    assert json_type == "struct<word:string,n:bigint,tags:array<string>>"  # inferred from a sample


def test_batches_match_sparks_own_arrow_schema(snapshots):
    """What read() yields equals Spark's conversion of the schema exactly (binary, int32, nulls)."""
    from pyspark.sql.pandas.types import from_arrow_schema, to_arrow_schema

    taken, _ = snapshots
    for name in ("kv_i32_dbl", "kv_str", "win", "sess"):
        snap = taken[name]
        target = to_arrow_schema(from_arrow_schema(arrow_core.snapshot_schema(snap)))
        for batch in arrow_core.shard_batches(snap, snap.shards[0], target):
            assert batch.schema.equals(target, check_metadata=True)
    raw = to_arrow_schema(from_arrow_schema(arrow_core.snapshot_schema(taken["kv_str"], raw=True)))
    assert raw.field("key").type == pa.binary() and not raw.field("key").nullable


def test_raw_partitions_and_key_range_options(spark, snapshots):
    taken, expected = snapshots
    snap = taken["kv_str"]
    raw = _rows(spark, snap, raw="true").collect()
    assert {r["key"] for r in raw} == {k.encode() for k in expected["kv_str"]}
    assert all(isinstance(r["value"], (bytes, bytearray)) for r in raw)
    one = _rows(spark, snap, partitions="1").collect()
    on_shard = {r[0] for r in arrow_core.shard_batches(snap, snap.shards[1], arrow_core.snapshot_schema(snap))
                .__next__().to_pylist() for r in [tuple(r.values())]}
    assert {r["key"] for r in one} == on_shard and 0 < len(one) < len(expected["kv_str"])
    keys = sorted(expected["kv_str"])
    lo, hi = keys[3], keys[10]
    ranged = _rows(spark, snap, key_from=lo, key_to=hi).collect()
    assert sorted(r["key"] for r in ranged) == [k for k in keys if lo <= k <= hi]


def test_user_schema_decides_json_struct(spark, snapshots):
    taken, expected = snapshots
    df = (spark.read.format("eddy_store").schema("key binary not null, value struct<word:string, n:int>")
          .load(taken["kv_json"].path))
    got = {r["key"]: (r["value"]["word"], r["value"]["n"]) for r in df.collect()}
    assert got == {k: (v["word"], v["n"]) for k, v in expected["kv_json"].items()}


def test_large_shard_is_split_by_key_range(spark, tmp_path):
    """A shard over max_rows_per_partition is read by several Spark partitions, every entry once."""
    from state.rocksdb_kv import RocksDBKeyValueStore
    from state.snapshot import ShardSnapshot, Snapshot, capture_shard, write_manifest

    dest = tmp_path / "snap"
    dest.mkdir()
    store = RocksDBKeyValueStore("big")
    store.open(tmp_path / "store")
    # three SST files: a fourth would reach RocksDB's compaction trigger (4 sorted runs), and a
    # background compaction could merge them before the capture
    for flush in range(3):
        for i in range(500):
            n = flush * 500 + i
            store.put(b"key%06d" % n, n.to_bytes(8, "big", signed=True))
        store.flush()
    capture_shard(store, dest / "0_0")()
    store.close()
    snap = Snapshot(path=str(dest), application_id="t", store="big", store_kind="key_value", key_serde="STRING",
                    value_serde="INT64", raw_mode=True, created_ms=0,
                    shards=(ShardSnapshot(task_id="0_0", partition=0, directory="0_0"),))
    write_manifest(snap)
    whole = spark.read.format("eddy_store").load(str(dest))
    split = spark.read.format("eddy_store").option("max_rows_per_partition", "600").load(str(dest))
    assert whole.rdd.getNumPartitions() == 1
    assert split.rdd.getNumPartitions() == 3  # one SST file of 500 entries each
    rows = split.collect()
    assert len(rows) == 1500 == len({r["key"] for r in rows})
    assert sorted((r["key"], r["value"]) for r in rows) == sorted((r["key"], r["value"]) for r in whole.collect())


def test_key_filters_pushed_down_as_a_key_range(spark, snapshots):
    from pyspark.sql.datasource import EqualTo, GreaterThan, GreaterThanOrEqual, LessThan, StringStartsWith

    from connectors.spark.sources import EddyStoreDataSource, EddyStorePushdownReader

    taken, expected = snapshots
    snap = taken["kv_str"]
    source = EddyStoreDataSource({"path": snap.path, "pushdown": "true"})
    keys = sorted(expected["kv_str"])

    def read(filters):
        reader = source.reader(source.schema())
        assert isinstance(reader, EddyStorePushdownReader)
        left = list(reader.pushFilters(filters))
        rows = [r for p in reader.partitions() for b in reader.read(p) for r in b.to_pylist()]
        return left, sorted(r["key"] for r in rows)

    on_value = GreaterThan(("value",), "x")
    left, got = read([GreaterThanOrEqual(("key",), keys[2]), LessThan(("key",), keys[9]), on_value])
    assert left == [on_value]  # only the key comparisons are taken
    assert got == keys[2:9]
    assert read([EqualTo(("key",), keys[5])])[1] == [keys[5]]
    assert read([EqualTo(("key",), "no-such-key")])[1] == []
    assert read([StringStartsWith(("key",), "b")])[1] == [k for k in keys if k.startswith("b")]
    int_source = EddyStoreDataSource({"path": taken["kv_i32_dbl"].path, "pushdown": "true"})
    reader = int_source.reader(int_source.schema())
    kept = [GreaterThan(("key",), 3)]
    assert list(reader.pushFilters(kept)) == kept  # INT32 bytes do not sort like the ints

    spark.conf.set("spark.sql.python.filterPushdown.enabled", "true")
    try:
        df = spark.read.format("eddy_store").option("pushdown", "true").load(snap.path)
        rows = df.where((df.key >= keys[2]) & (df.key < keys[9])).collect()
        assert sorted(r["key"] for r in rows) == keys[2:9]
    finally:
        spark.conf.unset("spark.sql.python.filterPushdown.enabled")
    with pytest.raises(Exception, match="filterPushdown"):
        spark.read.format("eddy_store").option("pushdown", "true").load(snap.path).collect()
