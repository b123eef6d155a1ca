"""Each bad input gets its named error, from the Arrow core and through Spark."""

from __future__ import annotations

import dataclasses
import json
import shutil

import pytest

from connectors.spark import arrow_core, changelog_core
from connectors.spark.errors import BadOptionError, KeyRangeError, TopicNotFoundError
from state.snapshot import (
    MANIFEST_NAME,
    NotASnapshotError,
    SnapshotManifestCorruptError,
    SnapshotManifestMissingError,
    StoreNotRawModeError,
    UnknownSerdeError,
    read_snapshot,
    write_manifest,
)


@pytest.fixture
def copy(snapshots, tmp_path):
    """A copy of the kv_str snapshot to damage."""
    taken, _ = snapshots
    dest = tmp_path / "copy"
    shutil.copytree(taken["kv_str"].path, dest)
    return dest


def _spark_error(spark, path, error: type, **options):
    reader = spark.read.format("eddy_store")
    for k, v in options.items():
        reader = reader.option(k, v)
    with pytest.raises(Exception) as info:
        reader.load(str(path)).collect()
    assert error.__name__ in str(info.value)


def test_missing_manifest(spark, copy):
    (copy / MANIFEST_NAME).unlink()
    with pytest.raises(SnapshotManifestMissingError, match="interrupted"):
        read_snapshot(copy)
    _spark_error(spark, copy, SnapshotManifestMissingError)


@pytest.mark.parametrize("damage", ["not json {", json.dumps({"format_version": 1}), json.dumps([1, 2]),
                                    "format_version"])
def test_corrupt_manifest(copy, damage):
    path = copy / MANIFEST_NAME
    if damage == "format_version":
        body = json.loads(path.read_text())
        body["format_version"] = 99
        damage = json.dumps(body)
    path.write_text(damage)
    with pytest.raises(SnapshotManifestCorruptError, match=MANIFEST_NAME):
        read_snapshot(copy)


def test_manifest_naming_a_missing_shard(copy):
    snap = read_snapshot(copy)
    shutil.rmtree(copy / snap.shards[0].directory)
    with pytest.raises(SnapshotManifestCorruptError, match=snap.shards[0].directory):
        read_snapshot(copy)


def test_not_a_snapshot(spark, tmp_path, snapshots):
    with pytest.raises(NotASnapshotError, match="no such directory"):
        read_snapshot(tmp_path / "absent")
    (tmp_path / "empty").mkdir()
    with pytest.raises(NotASnapshotError, match="no snapshot files"):
        read_snapshot(tmp_path / "empty")
    taken, _ = snapshots
    shard = taken["kv_str"]
    with pytest.raises(NotASnapshotError, match="a RocksDB directory"):
        read_snapshot(shard.shard_path(shard.shards[0]))
    _spark_error(spark, tmp_path / "empty", NotASnapshotError)


def test_store_not_in_raw_mode(copy):
    from rocksdict import Options, Rdict

    snap = read_snapshot(copy)
    shard_dir = copy / snap.shards[0].directory
    shutil.rmtree(shard_dir)
    db = Rdict(str(shard_dir), Options(raw_mode=False))
    db["a"] = {"pickled": 1}
    db.close()
    with pytest.raises(StoreNotRawModeError, match="raw"):
        read_snapshot(copy)
    write_manifest(dataclasses.replace(snap, raw_mode=False))
    with pytest.raises(StoreNotRawModeError, match="kv_str"):
        read_snapshot(copy)


def test_unknown_serde(spark, copy):
    snap = read_snapshot(copy)
    write_manifest(dataclasses.replace(snap, value_serde="com.example.AvroSerde"))
    damaged = read_snapshot(copy)
    with pytest.raises(UnknownSerdeError, match="com.example.AvroSerde"):
        arrow_core.snapshot_schema(damaged)
    _spark_error(spark, copy, UnknownSerdeError)
    raw = spark.read.format("eddy_store").option("raw", "true").load(str(copy)).count()
    assert raw == sum(1 for s in damaged.shards for b in arrow_core.shard_batches(
        damaged, s, arrow_core.snapshot_schema(damaged, raw=True)) for _ in range(b.num_rows))


def test_bad_options(spark, snapshots):
    taken, _ = snapshots
    _spark_error(spark, taken["kv_str"].path, BadOptionError, partitions="7")
    _spark_error(spark, taken["kv_str"].path, BadOptionError, raw="maybe")
    _spark_error(spark, taken["win"].path, KeyRangeError, key_from="a")
    _spark_error(spark, taken["kv_i32_dbl"].path, KeyRangeError, key_from="not-a-number")


def test_missing_topic(spark, running_app):
    spec = changelog_core.ChangelogSpec(running_app.servers, "no-such-topic")
    with pytest.raises(TopicNotFoundError, match="no-such-topic"):
        changelog_core.plan(spec)
    with pytest.raises(Exception) as info:
        (spark.read.format("eddy_changelog").option("bootstrap.servers", running_app.servers)
         .option("topic", "no-such-topic").load().collect())
    assert "TopicNotFoundError" in str(info.value)
