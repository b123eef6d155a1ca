"""PySpark 4 Python data sources: `eddy_store` (a store snapshot) and `eddy_changelog` (a topic).

    connectors.spark.register(spark)
    spark.read.format("eddy_store").load("/path/to/snapshot")
    spark.read.format("eddy_changelog").option("bootstrap.servers", "local:///dir")
         .option("topic", "app-counts-changelog").load()

Both produce Arrow record batches (connectors.spark.arrow_core) whose schema is Spark's own
conversion of the read schema, so they match it exactly. Readers are pickled to the workers:
they hold paths, names and options only; rocksdict and the Kafka client are imported in read().

`eddy_store` options: `raw` (key and value as binary), `key_from` / `key_to` (a key range of a
key-value store, in the key serde's byte order), `partitions` (e.g. "0,2"), `batch_rows`,
`max_rows_per_partition` (a larger shard is split by key range at its SST files' boundaries).
A user schema (`.schema(...)`) decides the types, e.g. a struct for JSON values.
"""

from __future__ import annotations

from typing import Iterable, Iterator, Optional

from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    EqualTo,
    Filter,
    GreaterThan,
    GreaterThanOrEqual,
    InputPartition,
    LessThan,
    LessThanOrEqual,
    StringStartsWith,
)
from pyspark.sql.pandas.types import from_arrow_schema, to_arrow_schema
from pyspark.sql.types import StructType

from connectors.spark import arrow_core
from connectors.spark.errors import BadOptionError
from state.snapshot import ShardSnapshot, Snapshot, read_snapshot

STORE_SOURCE = "eddy_store"
CHANGELOG_SOURCE = "eddy_changelog"


def _bool_option(options: dict, name: str, default: bool = False) -> bool:
    value = options.get(name)
    if value is None:
        return default
    text = str(value).strip().lower()
    if text in ("true", "1", "yes"):
        return True
    if text in ("false", "0", "no"):
        return False
    raise BadOptionError(f"option {name!r} must be true or false, got {value!r}")


def _int_option(options: dict, name: str, default: int, minimum: int = 1) -> int:
    value = options.get(name)
    if value is None:
        return default
    try:
        number = int(str(value).strip())
    except ValueError:
        number = minimum - 1
    if number < minimum:
        raise BadOptionError(f"option {name!r} must be an int >= {minimum}, got {value!r}")
    return number


def partition_subset(options: dict, available: list[int]) -> Optional[set[int]]:
    """The `partitions` option ("0,2") as a set, checked against `available`; None if unset."""
    value = options.get("partitions")
    if value is None or not str(value).strip():
        return None
    try:
        wanted = {int(p) for p in str(value).split(",") if p.strip()}
    except ValueError:
        raise BadOptionError(f"option 'partitions' must be comma-separated ints, got {value!r}") from None
    missing = sorted(wanted - set(available))
    if missing:
        raise BadOptionError(f"option 'partitions': {missing} not among the partitions {sorted(available)}")
    return wanted


#: A shard with more entries than this (RocksDB's count from its files) is read by several
#: Spark partitions, split by key range (option max_rows_per_partition).
DEFAULT_MAX_ROWS_PER_PARTITION = 2_000_000


class StorePartition(InputPartition):
    def __init__(self, shard: ShardSnapshot, lower: Optional[bytes] = None, upper: Optional[bytes] = None) -> None:
        super().__init__(shard.partition)
        self.shard = shard
        self.lower = lower
        self.upper = upper


class EddyStoreDataSource(DataSource):
    """`spark.read.format("eddy_store").load(snapshot_dir)`: one Spark partition per shard."""

    @classmethod
    def name(cls) -> str:
        return STORE_SOURCE

    def _snapshot(self) -> Snapshot:
        path = self.options.get("path")
        if not path:
            raise BadOptionError("eddy_store needs the snapshot directory: .load(path)")
        return read_snapshot(path)

    def schema(self) -> StructType:
        snapshot = self._snapshot()
        return from_arrow_schema(arrow_core.snapshot_schema(snapshot, raw=_bool_option(self.options, "raw")))

    def reader(self, schema: StructType) -> "EddyStoreReader":
        # Spark refuses a reader with pushFilters unless spark.sql.python.filterPushdown.enabled
        # is set, so filter pushdown is a separate reader, taken with option pushdown=true.
        cls = EddyStorePushdownReader if _bool_option(self.options, "pushdown") else EddyStoreReader
        return cls(self._snapshot(), schema, dict(self.options))


class EddyStoreReader(DataSourceReader):
    def __init__(self, snapshot: Snapshot, schema: StructType, options: dict) -> None:
        self.snapshot = snapshot
        self.schema = schema
        wanted = partition_subset(options, [s.partition for s in snapshot.shards])
        self.shards = [s for s in snapshot.shards if wanted is None or s.partition in wanted]
        self.batch_rows = _int_option(options, "batch_rows", arrow_core.DEFAULT_BATCH_ROWS)
        self.max_rows = _int_option(options, "max_rows_per_partition", DEFAULT_MAX_ROWS_PER_PARTITION)
        self.key_from = self._bound(options.get("key_from"))
        self.key_to = self._bound(options.get("key_to"))
        arrow_core.check_serde(snapshot.key_serde, "key") if self.key_from or self.key_to else None

    def _bound(self, value: Optional[str]) -> Optional[bytes]:
        return None if value is None else arrow_core.encode_key(value, self.snapshot.key_serde)

    lower: Optional[bytes] = None  # stored-key bounds [lower, upper) from pushed filters
    upper: Optional[bytes] = None

    def partitions(self) -> list[StorePartition]:
        out = []
        for shard in self.shards:
            points = arrow_core.split_points(self.snapshot, shard, self.max_rows)
            bounds = [None, *points, None]
            for lo, hi in zip(bounds, bounds[1:], strict=False):
                lo = max((b for b in (lo, self.lower) if b is not None), default=None)
                hi = min((b for b in (hi, self.upper) if b is not None), default=None)
                if lo is None or hi is None or lo < hi:
                    out.append(StorePartition(shard, lo, hi))
        return out

    def read(self, partition: StorePartition) -> Iterator:
        target = to_arrow_schema(self.schema)
        yield from arrow_core.shard_batches(self.snapshot, partition.shard, target, key_from=self.key_from,
                                            key_to=self.key_to, batch_rows=self.batch_rows,
                                            lower=partition.lower, upper=partition.upper)


class EddyStorePushdownReader(EddyStoreReader):
    """EddyStoreReader that turns comparisons of `key` into a key range (option pushdown=true,
    with spark.sql.python.filterPushdown.enabled). Only for STRING and BYTES keys of key-value
    stores read decoded: their bytes sort like their values (UTF-8 keeps code point order),
    which the fixed-width signed and floating serdes do not."""

    def pushFilters(self, filters: list[Filter]) -> Iterable[Filter]:
        remaining = []
        snap = self.snapshot
        usable = snap.store_kind == "key_value" and snap.key_serde in ("STRING", "BYTES") \
            and self.schema["key"].dataType.typeName() in ("string", "binary")
        for f in filters:
            bounds = _key_bounds(f) if usable and getattr(f, "attribute", None) == ("key",) else None
            if bounds is None:
                remaining.append(f)
                continue
            lower, upper = bounds
            if lower is not None and (self.lower is None or lower > self.lower):
                self.lower = lower
            if upper is not None and (self.upper is None or upper < self.upper):
                self.upper = upper
        return remaining


def _key_bounds(f: Filter) -> Optional[tuple[Optional[bytes], Optional[bytes]]]:
    """[lower, upper) of stored keys a filter on `key` keeps; None if it cannot be a range."""
    value = getattr(f, "value", None)
    if isinstance(value, str):
        value = value.encode()
    elif isinstance(value, bytearray):
        value = bytes(value)
    if not isinstance(value, bytes):
        return None
    after = value + b"\x00"  # the smallest key greater than `value`
    if isinstance(f, EqualTo):
        return value, after
    if isinstance(f, GreaterThan):
        return after, None
    if isinstance(f, GreaterThanOrEqual):
        return value, None
    if isinstance(f, LessThan):
        return None, value
    if isinstance(f, LessThanOrEqual):
        return None, after
    if isinstance(f, StringStartsWith):
        from state.rocksdb_kv import prefix_upper_bound

        return value, prefix_upper_bound(value)
    return None
