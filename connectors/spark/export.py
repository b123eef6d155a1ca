"""Export a store snapshot or a changelog to Parquet, CSV or Delta.

Through Spark when pyspark is installed (`engine="spark"`, the default when it imports), else
through pyarrow alone (`engine="pyarrow"`): both read with the same Arrow core. Delta is always
written by the `deltalake` package (there is no Delta release for Spark 4.3). The output is a
directory: Spark's part files, or one `part-<partition>` file per shard / topic partition.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import shutil
import time
from typing import Any, Callable, Iterator, Optional

import pyarrow as pa

from connectors.spark import arrow_core
from connectors.spark.errors import BadOptionError
from state.snapshot import read_snapshot

log = logging.getLogger(__name__)

FORMATS = ("parquet", "csv", "delta")
ENGINES = ("auto", "spark", "pyarrow")


@dataclasses.dataclass(frozen=True)
class ExportSummary:
    rows: int
    bytes: int
    seconds: float
    engine: str
    format: str
    path: str

    def describe(self) -> str:
        rate = self.rows / self.seconds if self.seconds > 0 else 0.0
        return (f"exported {self.rows:,} rows ({self.bytes:,} bytes of {self.format}) to {self.path} "
                f"in {self.seconds:.2f}s via {self.engine} ({rate:,.0f} rows/s)")


def spark_available() -> bool:
    try:
        import pyspark  # noqa: F401
    except ImportError:
        return False
    return True


def _check(fmt: str, engine: str) -> str:
    if fmt not in FORMATS:
        raise BadOptionError(f"format must be one of {FORMATS}, got {fmt!r}")
    if engine not in ENGINES:
        raise BadOptionError(f"engine must be one of {ENGINES}, got {engine!r}")
    if fmt == "delta" or engine == "pyarrow" or (engine == "auto" and not spark_available()):
        return "pyarrow"
    return "spark"


def _dir_bytes(path: str) -> int:
    total = 0
    for root, _dirs, files in os.walk(path):
        for name in files:
            total += os.path.getsize(os.path.join(root, name))
    return total


def _prepare(to: str, overwrite: bool) -> None:
    if os.path.exists(to):
        if not overwrite:
            raise BadOptionError(f"output {to} exists (pass overwrite to replace it)")
        shutil.rmtree(to) if os.path.isdir(to) else os.remove(to)


# ------------------------------------------------------------------------------ writers
def write_parts(parts: list[tuple[str, pa.Schema, Callable[[], Iterator[pa.RecordBatch]]]], to: str, fmt: str,
                progress: Optional[Callable[[int], None]] = None) -> int:
    """Write `(name, schema, batches)` parts into directory `to`; returns the rows written."""
    rows = 0
    if fmt == "delta":
        from deltalake import write_deltalake

        for index, (_name, schema, batches) in enumerate(parts):
            counted = _counting(batches(), progress)
            reader = pa.RecordBatchReader.from_batches(schema, counted)
            write_deltalake(to, reader, mode="overwrite" if index == 0 else "append")
            rows += counted.rows
        return rows
    os.makedirs(to, exist_ok=True)
    for name, schema, batches in parts:
        path = os.path.join(to, f"part-{name}.{fmt}")
        if fmt == "parquet":
            import pyarrow.parquet as pq

            writer = pq.ParquetWriter(path, schema)
        else:
            import pyarrow.csv as pcsv

            if any(pa.types.is_nested(f.type) for f in schema):
                raise BadOptionError("CSV cannot hold nested columns (a JSON struct value): use parquet or delta")
            writer = pcsv.CSVWriter(path, schema)
        try:
            for batch in batches():
                writer.write_batch(batch)
                rows += batch.num_rows
                if progress is not None:
                    progress(batch.num_rows)
        finally:
            writer.close()
    return rows


class _counting:
    def __init__(self, batches: Iterator[pa.RecordBatch], progress: Optional[Callable[[int], None]]) -> None:
        self.batches = batches
        self.progress = progress
        self.rows = 0

    def __iter__(self) -> Iterator[pa.RecordBatch]:
        for batch in self.batches:
            self.rows += batch.num_rows
            if self.progress is not None:
                self.progress(batch.num_rows)
            yield batch


# ------------------------------------------------------------------------------ exports
def export_snapshot(snapshot_dir: str, to: str, fmt: str = "parquet", *, engine: str = "auto", raw: bool = False,
                    overwrite: bool = False, spark: Any = None,
                    progress: Optional[Callable[[int], None]] = None) -> ExportSummary:
    """Export every shard of the snapshot at `snapshot_dir` into directory `to`."""
    chosen = _check(fmt, engine)
    snapshot = read_snapshot(snapshot_dir)
    _prepare(to, overwrite)
    start = time.perf_counter()
    if chosen == "spark":
        from connectors.spark import register

        session = spark or _session()
        register(session)
        df = session.read.format("eddy_store").option("raw", str(raw).lower()).load(snapshot.path)
        _spark_write(df, fmt, to)
        rows = _spark_rows(to, fmt, df)
    else:
        schema = arrow_core.snapshot_schema(snapshot, raw=raw)
        parts = [(f"{s.partition:05d}", schema,
                  lambda s=s: arrow_core.shard_batches(snapshot, s, schema)) for s in snapshot.shards]
        rows = write_parts(parts, to, fmt, progress)
    return ExportSummary(rows, _dir_bytes(to), time.perf_counter() - start, chosen, fmt, to)


def export_changelog(bootstrap_servers: str, topic: str, to: str, fmt: str = "parquet", *, engine: str = "auto",
                     key_serde: str = "BYTES", value_serde: str = "BYTES", latest_per_key: bool = False,
                     overwrite: bool = False, spark: Any = None,
                     progress: Optional[Callable[[int], None]] = None) -> ExportSummary:
    """Export a changelog (or any topic) into directory `to` (its table with `latest_per_key`)."""
    from connectors.spark import changelog_core

    chosen = _check(fmt, engine)
    source = changelog_core.ChangelogSpec(bootstrap_servers, topic, key_serde.upper(), value_serde.upper(),
                                          latest_per_key=latest_per_key)
    plan = changelog_core.plan(source)
    _prepare(to, overwrite)
    start = time.perf_counter()
    if chosen == "spark":
        from connectors.spark import register

        session = spark or _session()
        register(session)
        df = (session.read.format("eddy_changelog").option("bootstrap.servers", bootstrap_servers)
              .option("topic", topic).option("key_serde", key_serde).option("value_serde", value_serde)
              .option("latest_per_key", str(latest_per_key).lower()).load())
        _spark_write(df, fmt, to)
        rows = _spark_rows(to, fmt, df)
    else:
        schema = changelog_core.changelog_schema(source)
        parts = [(f"{p.partition:05d}", schema, lambda p=p: changelog_core.partition_batches(source, p, schema))
                 for p in plan]
        rows = write_parts(parts, to, fmt, progress)
    return ExportSummary(rows, _dir_bytes(to), time.perf_counter() - start, chosen, fmt, to)


def _spark_write(df: Any, fmt: str, to: str) -> None:
    writer = df.write.mode("overwrite").format(fmt)
    if fmt == "csv":
        writer = writer.option("header", "true")  # as the pyarrow path writes it
    writer.save(to)


def _spark_rows(to: str, fmt: str, df: Any) -> int:
    if fmt == "parquet":
        import pyarrow.parquet as pq

        return sum(pq.ParquetFile(os.path.join(root, f)).metadata.num_rows
                   for root, _d, files in os.walk(to) for f in files if f.endswith(".parquet"))
    return df.count()


def _session() -> Any:
    from pyspark.sql import SparkSession

    return (SparkSession.builder.master("local[*]").appName("eddy-export")
            .config("spark.ui.enabled", "false").getOrCreate())
