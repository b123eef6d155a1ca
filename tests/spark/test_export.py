"""The export job and CLI: Parquet, CSV and Delta, through Spark and through pyarrow alone."""

from __future__ import annotations

import os
import subprocess
import sys

import pyarrow.parquet as pq
import pytest

from connectors.spark.export import export_changelog, export_snapshot

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "connectors.spark", "export", *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=300)


def test_cli_pyarrow_parquet_csv_and_delta(snapshots, tmp_path):
    taken, expected = snapshots
    want = expected["kv_i32_dbl"]
    out = tmp_path / "parquet"
    done = _cli("--snapshot", taken["kv_i32_dbl"].path, "--to", str(out), "--format", "parquet", "--engine", "pyarrow")
    assert done.returncode == 0, done.stderr
    assert f"exported {len(want):,} rows" in done.stdout and "via pyarrow" in done.stdout
    table = pq.read_table(str(out))
    assert dict(zip(table["key"].to_pylist(), table["value"].to_pylist(), strict=True)) == want
    assert str(table.schema.field("key").type) == "int32"

    csv_out = tmp_path / "csv"
    assert _cli("--snapshot", taken["kv_str"].path, "--to", str(csv_out), "--format", "csv",
                "--engine", "pyarrow").returncode == 0
    import pyarrow.csv as pcsv
    import pyarrow as pa

    rows = pa.concat_tables([pcsv.read_csv(str(csv_out / f)) for f in sorted(os.listdir(csv_out))])
    assert dict(zip(rows["key"].to_pylist(), rows["value"].to_pylist(), strict=True)) == expected["kv_str"]

    delta_out = tmp_path / "delta"
    done = _cli("--snapshot", taken["win"].path, "--to", str(delta_out), "--format", "delta")
    assert done.returncode == 0, done.stderr
    from deltalake import DeltaTable

    got = DeltaTable(str(delta_out)).to_pyarrow_table().to_pylist()
    assert {(r["key"], r["window_start"], r["window_end"]): r["value"] for r in got} == expected["win"]


def test_cli_errors_are_named(tmp_path, running_app):
    done = _cli("--snapshot", str(tmp_path), "--to", str(tmp_path / "o"))
    assert done.returncode == 1 and "NotASnapshotError" in done.stderr
    done = _cli("--changelog", "nope", "--bootstrap-servers", running_app.servers, "--to", str(tmp_path / "o"),
                "--engine", "pyarrow")
    assert done.returncode == 1 and "TopicNotFoundError" in done.stderr


def test_spark_and_pyarrow_paths_write_the_same_rows(spark, snapshots, tmp_path):
    taken, _ = snapshots
    via_spark = export_snapshot(taken["kv_json"].path, str(tmp_path / "s"), engine="spark", spark=spark)
    via_arrow = export_snapshot(taken["kv_json"].path, str(tmp_path / "a"), engine="pyarrow")
    assert via_spark.engine == "spark" and via_arrow.engine == "pyarrow"
    assert via_spark.rows == via_arrow.rows > 0

    def rows(path):
        table = pq.read_table(path)
        return sorted(table.to_pylist(), key=lambda r: r["key"])

    assert rows(str(tmp_path / "s")) == rows(str(tmp_path / "a"))


def test_changelog_export_latest_per_key(running_app, tmp_path):
    with running_app.lock:
        running_app.wait_processed()
        from _spark_apps import expected_from

        want = expected_from(running_app.sent)["mem_count"]
        summary = export_changelog(running_app.servers, running_app.changelog("mem_count"), str(tmp_path / "t"),
                                   engine="pyarrow", key_serde="STRING", value_serde="INT64", latest_per_key=True)
    table = pq.read_table(str(tmp_path / "t"))
    assert summary.rows == len(want)
    assert dict(zip(table["key"].to_pylist(), table["value"].to_pylist(), strict=True)) == want


def test_existing_output_needs_overwrite(snapshots, tmp_path):
    from connectors.spark.errors import BadOptionError

    taken, _ = snapshots
    (tmp_path / "o").mkdir()
    with pytest.raises(BadOptionError, match="exists"):
        export_snapshot(taken["kv_str"].path, str(tmp_path / "o"), engine="pyarrow")
    assert export_snapshot(taken["kv_str"].path, str(tmp_path / "o"), engine="pyarrow", overwrite=True).rows > 0
