"""The `eddy_changelog` data source: a topic as rows, batch and streaming (see changelog_core).

    spark.read.format("eddy_changelog")
        .option("bootstrap.servers", "local:///var/lib/eddy")   # or host:port of Kafka
        .option("topic", "wordcount-counts-changelog")
        .option("key_serde", "STRING").option("value_serde", "INT64")
        .option("latest_per_key", "true")                       # the table at the end offsets
        .load()

Options: `bootstrap.servers`, `topic` (required); `key_serde`, `value_serde` (default BYTES);
`store_kind` (window / session: split windowed changelog keys) with `window_size_ms`; `raw`;
`latest_per_key` (batch only); `starting_offsets` earliest|latest (streaming, default earliest);
`kafka.<setting>` passed to the Kafka consumers. One Spark partition per topic partition.
Streaming offsets are `{"<partition>": next offset}`, checkpointed by Spark.
"""

from __future__ import annotations

from typing import Iterator

from pyspark.sql.datasource import DataSource, DataSourceReader, DataSourceStreamReader, InputPartition
from pyspark.sql.pandas.types import from_arrow_schema, to_arrow_schema
from pyspark.sql.types import StructType

from connectors.spark import changelog_core
from connectors.spark.errors import BadOptionError
from connectors.spark.sources import CHANGELOG_SOURCE, _bool_option, _int_option, partition_subset
from state.snapshot import KINDS


def spec_from_options(options: dict) -> changelog_core.ChangelogSpec:
    servers = options.get("bootstrap.servers")
    topic = options.get("topic")
    if not servers or not topic:
        raise BadOptionError("eddy_changelog needs the options 'bootstrap.servers' and 'topic'")
    kind = options.get("store_kind", "key_value")
    if kind not in KINDS:
        raise BadOptionError(f"option 'store_kind' must be one of {KINDS}, got {kind!r}")
    window = options.get("window_size_ms")
    if kind == "window" and window is None:
        raise BadOptionError("option 'window_size_ms' is needed with store_kind=window (a window's end)")
    kafka = tuple(sorted((k[len("kafka."):], v) for k, v in options.items() if k.startswith("kafka.")))
    return changelog_core.ChangelogSpec(
        bootstrap_servers=str(servers), topic=str(topic), key_serde=str(options.get("key_serde", "BYTES")).upper(),
        value_serde=str(options.get("value_serde", "BYTES")).upper(),
        latest_per_key=_bool_option(options, "latest_per_key"), store_kind=kind,
        window_size_ms=_int_option(options, "window_size_ms", 0, 0) or None, raw=_bool_option(options, "raw"),
        kafka_config=kafka)


class RangePartition(InputPartition):
    def __init__(self, prange: changelog_core.PartitionRange) -> None:
        super().__init__(prange.partition)
        self.range = prange


class EddyChangelogDataSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return CHANGELOG_SOURCE

    def schema(self) -> StructType:
        return from_arrow_schema(changelog_core.changelog_schema(spec_from_options(dict(self.options))))

    def reader(self, schema: StructType) -> "EddyChangelogReader":
        return EddyChangelogReader(spec_from_options(dict(self.options)), schema, dict(self.options))

    def streamReader(self, schema: StructType) -> "EddyChangelogStreamReader":
        spec = spec_from_options(dict(self.options))
        if spec.latest_per_key:
            raise BadOptionError("option 'latest_per_key' applies to batch reads, not streaming")
        return EddyChangelogStreamReader(spec, schema, dict(self.options))


def _read(spec: changelog_core.ChangelogSpec, schema: StructType, partition: RangePartition,
          batch_rows: int) -> Iterator:
    yield from changelog_core.partition_batches(spec, partition.range, to_arrow_schema(schema), batch_rows)


class EddyChangelogReader(DataSourceReader):
    def __init__(self, spec: changelog_core.ChangelogSpec, schema: StructType, options: dict) -> None:
        self.spec = spec
        self.schema = schema
        self.batch_rows = _int_option(options, "batch_rows", 65_536)
        self.ranges = changelog_core.plan(spec)  # the end offsets as of planning: one consistent cut
        wanted = partition_subset(options, [r.partition for r in self.ranges])
        if wanted is not None:
            self.ranges = [r for r in self.ranges if r.partition in wanted]

    def partitions(self) -> list[RangePartition]:
        return [RangePartition(r) for r in self.ranges]

    def read(self, partition: RangePartition) -> Iterator:
        yield from _read(self.spec, self.schema, partition, self.batch_rows)


class EddyChangelogStreamReader(DataSourceStreamReader):
    def __init__(self, spec: changelog_core.ChangelogSpec, schema: StructType, options: dict) -> None:
        self.spec = spec
        self.schema = schema
        self.batch_rows = _int_option(options, "batch_rows", 65_536)
        self.starting = str(options.get("starting_offsets", "earliest")).lower()
        if self.starting not in ("earliest", "latest"):
            raise BadOptionError(f"option 'starting_offsets' must be earliest or latest, got {self.starting!r}")

    def initialOffset(self) -> dict:
        ranges = changelog_core.plan(self.spec)
        return {str(r.partition): (r.start if self.starting == "earliest" else r.end) for r in ranges}

    def latestOffset(self, start: dict = None, limit: object = None) -> dict:
        ends = changelog_core.end_offsets(self.spec)
        return {str(p): max(end, int((start or {}).get(str(p), 0))) for p, end in sorted(ends.items())}

    def partitions(self, start: dict, end: dict) -> list[RangePartition]:
        out = []
        for p, stop in sorted(end.items(), key=lambda kv: int(kv[0])):
            begin = int(start.get(p, 0))
            if int(stop) > begin:
                out.append(RangePartition(changelog_core.PartitionRange(int(p), begin, int(stop))))
        return out

    def read(self, partition: RangePartition) -> Iterator:
        yield from _read(self.spec, self.schema, partition, self.batch_rows)

    def commit(self, end: dict) -> None:
        pass  # Spark checkpoints the offsets; the log keeps the records (nothing to acknowledge)
