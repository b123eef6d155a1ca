"""App.snapshot on a running App: consistent shards while input keeps arriving, periodic snapshots."""

from __future__ import annotations

import itertools
import os
import threading

import pytest

from _spark_apps import RunningApp, make_records, wait_until
from connectors.spark import arrow_core, changelog_core
from state.errors import InvalidStateStoreError
from state.snapshot import MANIFEST_NAME, SnapshotError, read_snapshot


def _shard_contents(snap, shard) -> dict:
    db = arrow_core.open_shard(snap.shard_path(shard))
    try:
        return {k: v for k, v in db.items() if not k.startswith(arrow_core.META_PREFIX)}
    finally:
        db.close()


def _changelog_table(servers: str, topic: str, partition: int, last_offset: int) -> dict:
    """The changelog partition's table up to and including `last_offset`, as stored bytes."""
    spec = changelog_core.ChangelogSpec(servers, topic, latest_per_key=True, raw=True)
    schema = changelog_core.changelog_schema(spec)
    prange = changelog_core.PartitionRange(partition, 0, last_offset + 1)
    table = {}
    for batch in changelog_core.partition_batches(spec, prange, schema):
        for row in batch.to_pylist():
            table[row["key"]] = row["value"]
    return table


@pytest.mark.parametrize("store", ["kv_str", "mem_count"])
def test_snapshot_offsets_match_contents_while_the_app_writes(running_app, tmp_path, store):
    """Input keeps arriving during the snapshots; each shard equals its changelog up to the
    offset its manifest entry records (no shard from another moment)."""
    stop = threading.Event()
    batches = iter(make_records(20_000, seed=11, start_ts=1_800_000_000_000)[i:i + 200]
                   for i in range(0, 20_000, 200))

    def feed():
        for batch in batches:
            if stop.is_set():
                return
            running_app.produce(batch)

    feeder = threading.Thread(target=feed, daemon=True)
    feeder.start()
    try:
        taken = []
        for i in range(3):
            seen = len(running_app.sent)
            wait_until(lambda seen=seen: len(running_app.sent) > seen, 30, "more input")
            taken.append(running_app.app.snapshot(store, str(tmp_path / f"s{i}")))
    finally:
        stop.set()
        feeder.join(60)
    moved = False
    for snap in taken:
        assert read_snapshot(snap.path) == snap
        for shard in snap.shards:
            assert shard.changelog_topic == running_app.changelog(store)
            assert shard.changelog_offset is not None
            contents = _shard_contents(snap, shard)
            assert contents == _changelog_table(running_app.servers, shard.changelog_topic, shard.partition,
                                                shard.changelog_offset)
    for a, b in itertools.pairwise(taken):
        moved |= any(sa.changelog_offset != sb.changelog_offset for sa, sb in zip(a.shards, b.shards, strict=True))
    assert moved, "the app wrote between the snapshots"


def test_snapshot_bad_requests(running_app, tmp_path):
    with pytest.raises(InvalidStateStoreError, match="nope"):
        running_app.app.snapshot("nope")
    busy = tmp_path / "busy"
    busy.mkdir()
    (busy / "x").write_text("x")
    with pytest.raises(SnapshotError, match="not an empty directory"):
        running_app.app.snapshot("kv_str", str(busy))


def test_periodic_snapshots_keep_the_last_n(tmp_path):
    app = RunningApp(str(tmp_path), {"snapshot.interval.ms": 200, "snapshot.keep": 2,
                                     "snapshot.stores": "kv_str,win", "snapshot.dir": str(tmp_path / "snaps")})
    app.start()
    try:
        app.produce(make_records(300, seed=3))
        app.wait_processed()
        snaps = tmp_path / "snaps"

        def complete(prefix):
            return sorted(p for p in os.listdir(snaps) if p.startswith(prefix)
                          and os.path.exists(snaps / p / MANIFEST_NAME)) if snaps.exists() else []

        # several rounds have run once a snapshot newer than the processed input exists twice over
        first = wait_until(lambda: complete("kv_str-"), 30, "a first periodic snapshot")[0]
        wait_until(lambda: complete("kv_str-") and complete("kv_str-")[0] > first and len(complete("win-")) >= 2,
                   60, "older snapshots to be replaced")
        assert len(complete("kv_str-")) <= 3  # keep 2, plus one being written at most
        assert not any(p.startswith("sess-") for p in os.listdir(snaps))
        newest = read_snapshot(snaps / complete("win-")[-1])
        assert newest.store == "win" and newest.store_kind == "window"
    finally:
        app.close()
    remaining = [p for p in os.listdir(snaps) if p.startswith("kv_str-")]
    assert 1 <= len(remaining) <= 2


@pytest.mark.parametrize("config, named", [({"snapshot.keep": 0}, "snapshot.keep"),
                                           ({"snapshot.interval.ms": "soon"}, "snapshot.interval.ms"),
                                           ({"snapshot.stores": "kv_str,nope"}, "nope")])
def test_bad_snapshot_config_is_refused_at_creation(config, named):
    from _spark_apps import topology
    from streams import App
    from streams.errors import ConfigError

    with pytest.raises(ConfigError, match=named):
        App(topology("words"), {"bootstrap.servers": "local://", "application.id": "bad-config", **config})
