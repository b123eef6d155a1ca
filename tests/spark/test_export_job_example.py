"""examples/export_job.py runs end to end (on the test session's SparkSession)."""

from __future__ import annotations

import pyarrow.parquet as pq

from examples import export_job


def test_export_job_runs_and_checks_itself(spark, tmp_path, capsys):
    assert export_job.main(["--data-dir", str(tmp_path / "job"), "--lines", "800"], spark=spark) == 0
    out = capsys.readouterr().out
    assert "OK: snapshot holds" in out
    top = pq.read_table(str(tmp_path / "job" / "top-words")).to_pylist()
    assert top and all(r["word"].startswith(r["letter"]) and r["updates"] >= 1 for r in top)
    # the most frequent word of the generated text tops its letter
    assert max(top, key=lambda r: r["count"])["word"] == "the"
