"""The Arrow core shared by the Spark data sources and the pyarrow-only export: store snapshot
shards (and changelog records) as `pyarrow.RecordBatch`es of a given schema.

The target schema decides each column's type; the manifest's serdes say how the bytes decode.
Decoding is vectorised (one Arrow cast or one numpy conversion per batch column), so the per-
record Python work is the RocksDB scan itself. rocksdict is imported where a shard is opened:
Spark pickles readers to its workers, so they hold only paths.

Columns: `key`, `value` for key-value stores; window and session stores add `window_start` and
`window_end` (epoch milliseconds; a window's end is its start + the window size, a session's
end is its last record's time). With `raw=True` key and value stay binary.
"""

from __future__ import annotations

import array
import itertools
import struct
import sys
from typing import Any, Iterator, Optional, Sequence

import pyarrow as pa
import pyarrow.compute as pc

from connectors.spark.errors import KeyRangeError, ValueDecodeError
from state.snapshot import KNOWN_SERDES, ShardSnapshot, Snapshot, UnknownSerdeError

DEFAULT_BATCH_ROWS = 65_536
JSON_SAMPLE_ROWS = 1000

SEGMENT_PREFIX_SIZE = 8  # state.window: segment id, 8 bytes big-endian
META_PREFIX = b"\xff" * SEGMENT_PREFIX_SIZE  # state.window keeps its metadata after every segment

_SCALAR_TYPES = {
    "BYTES": pa.binary(), "STRING": pa.string(), "INT32": pa.int32(), "INT64": pa.int64(),
    "FLOAT": pa.float32(), "DOUBLE": pa.float64(),
}
# size and the `array` typecode of each fixed-width serde (big-endian on the wire)
_FIXED = {"INT32": (4, "i"), "INT64": (8, "q"), "FLOAT": (4, "f"), "DOUBLE": (8, "d")}
_SWAP = sys.byteorder == "little"
_PACK = {"INT32": struct.Struct(">i").pack, "INT64": struct.Struct(">q").pack,
         "FLOAT": struct.Struct(">f").pack, "DOUBLE": struct.Struct(">d").pack}


_TIMESTAMPED = "value_and_timestamp("
_TIMESTAMP_SIZE = 8  # state.timestamped: an 8-byte big-endian timestamp before the value


def inner_serde(name: str) -> str:
    """The serde of the value inside a timestamped store's `value_and_timestamp(<serde>)` bytes
    (the prefix in any case: changelog options are upper-cased)."""
    if name[:len(_TIMESTAMPED)].lower() == _TIMESTAMPED and name.endswith(")"):
        return name[len(_TIMESTAMPED):-1]
    return name


def check_serde(name: str, what: str) -> None:
    name = inner_serde(name)
    if name not in KNOWN_SERDES:
        raise UnknownSerdeError(f"{what} serde {name!r} is not one a reader can decode ({', '.join(KNOWN_SERDES)}); "
                                "read the raw bytes instead (option raw=true)")


def serde_arrow_type(name: str, what: str, json_type: Optional[pa.DataType] = None) -> pa.DataType:
    """The Arrow type a serde's values decode to (JSON: `json_type`, or its text as a string)."""
    check_serde(name, what)
    name = inner_serde(name)
    if name == "JSON":
        return json_type if json_type is not None else pa.string()
    return _SCALAR_TYPES[name]


def default_schema(key_serde: str, value_serde: str, kind: str = "key_value", *, raw: bool = False,
                   json_type: Optional[pa.DataType] = None,
                   extra: Sequence[pa.Field] = ()) -> pa.Schema:
    """The schema of a store (or changelog) read: keys never null, values nullable."""
    key_type = pa.binary() if raw else serde_arrow_type(key_serde, "key")
    value_type = pa.binary() if raw else serde_arrow_type(value_serde, "value", json_type)
    fields = [pa.field("key", key_type, nullable=False)]
    if kind in ("window", "session"):
        fields += [pa.field("window_start", pa.int64(), nullable=False),
                   pa.field("window_end", pa.int64(), nullable=False)]
    fields.append(pa.field("value", value_type, nullable=True))
    fields += list(extra)
    return pa.schema(fields)


def snapshot_schema(snapshot: Snapshot, *, raw: bool = False, infer_json: bool = True) -> pa.Schema:
    """`default_schema` for a snapshot; a JSON value type is inferred from a sample of its rows."""
    json_type = None
    if not raw and inner_serde(snapshot.value_serde) == "JSON" and infer_json:
        json_type = infer_json_type(_sample_values(snapshot))
    return default_schema(snapshot.key_serde, snapshot.value_serde, snapshot.store_kind, raw=raw, json_type=json_type)


# ------------------------------------------------------------------------------ decoding
def decode_column(data: pa.Array, serde: str, target: pa.DataType, what: str) -> pa.Array:
    """Decode a binary column of serialized values into `target` (binary: kept as is)."""
    if target == pa.binary():
        return data
    check_serde(serde, what)
    if serde != inner_serde(serde):  # a timestamped store's value: the timestamp goes
        # per value in Python: pc.binary_slice fails on some sliced binary arrays (pyarrow 26)
        data = pa.array([None if v is None else v[_TIMESTAMP_SIZE:] for v in data.to_pylist()], pa.binary())
        serde = inner_serde(serde)
    if serde == "JSON":
        return _decode_json(data, target, what)
    if serde == "STRING":
        try:
            out = data.cast(pa.string())
        except pa.ArrowInvalid as exc:
            raise ValueDecodeError(f"{what}: STRING serde: {exc}") from None
    elif serde in _FIXED:
        out = _decode_fixed(data, serde, what)
    else:  # BYTES into something else
        raise ValueDecodeError(f"{what}: BYTES serde values cannot be read as {target}")
    if out.type != target:
        try:
            out = out.cast(target)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
            raise ValueDecodeError(f"{what}: {serde} values cannot be read as {target}: {exc}") from None
    return out


def _decode_fixed(data: pa.Array, serde: str, what: str) -> pa.Array:
    size, code = _FIXED[serde]
    n = len(data)
    if n == 0:
        return pa.array([], type=_SCALAR_TYPES[serde])
    nulls = data.null_count
    if nulls:
        filled = data.fill_null(b"\x00" * size)
    else:
        filled = data
    lengths = pc.binary_length(filled)
    bounds = pc.min_max(lengths)
    if bounds["min"].as_py() != size or bounds["max"].as_py() != size:
        raise ValueDecodeError(f"{what}: {serde} serde needs {size}-byte values, found lengths "
                               f"{bounds['min'].as_py()}..{bounds['max'].as_py()}")
    # every value has `size` bytes, back to back in the data buffer from the first offset on
    start = _first_offset(filled)
    values = array.array(code)
    values.frombytes(memoryview(filled.buffers()[2])[start:start + n * size])
    if _SWAP:
        values.byteswap()
    validity = data.buffers()[0] if nulls else None
    if validity is not None and data.offset:
        validity = pc.is_valid(data).buffers()[1]
    return pa.Array.from_buffers(_SCALAR_TYPES[serde], n, [validity, pa.py_buffer(values)], null_count=nulls)


def _first_offset(data: pa.Array) -> int:
    offsets = data.buffers()[1]
    return int.from_bytes(memoryview(offsets)[data.offset * 4:data.offset * 4 + 4], sys.byteorder, signed=True)


def _decode_json(data: pa.Array, target: pa.DataType, what: str) -> pa.Array:
    import orjson

    texts = data.to_pylist()
    if target == pa.string():
        try:
            return data.cast(pa.string())
        except pa.ArrowInvalid as exc:
            raise ValueDecodeError(f"{what}: JSON serde: {exc}") from None
    try:
        parsed = [None if t is None else orjson.loads(t) for t in texts]
    except orjson.JSONDecodeError as exc:
        raise ValueDecodeError(f"{what}: JSON serde: {exc}") from None
    try:
        return pa.array(parsed, type=target)
    except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError) as exc:
        raise ValueDecodeError(f"{what}: JSON values do not fit {target}: {exc}") from None


def infer_json_type(samples: list) -> Optional[pa.DataType]:
    """An Arrow type for JSON values from a sample (None: nothing to infer from, read as text)."""
    import orjson

    parsed = [orjson.loads(s) for s in samples if s is not None]
    if not parsed:
        return None
    try:
        inferred = pa.array(parsed).type
    except (pa.ArrowInvalid, pa.ArrowTypeError):
        return None  # mixed shapes: keep the text
    return _spark_compatible(inferred)


def _spark_compatible(t: pa.DataType) -> pa.DataType:
    if pa.types.is_struct(t):
        return pa.struct([pa.field(f.name, _spark_compatible(f.type), True) for f in t])
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        return pa.list_(_spark_compatible(t.value_type))
    if pa.types.is_null(t) or pa.types.is_large_string(t):
        return pa.string()
    return t


# ------------------------------------------------------------------------------ shards
def open_shard(path: str) -> Any:
    """A read-only raw-mode handle on a snapshot shard (a checkpoint is immutable)."""
    from rocksdict import AccessType, Options, Rdict

    return Rdict(path, Options(raw_mode=True), access_type=AccessType.read_only())


def encode_key(value: Any, serde: str) -> bytes:
    """A key bound in the store's byte order (the way the store serialized its keys)."""
    if isinstance(value, bytes):
        return value
    if serde in ("STRING", "JSON") and isinstance(value, str):
        return value.encode() if serde == "STRING" else __import__("orjson").dumps(value)
    if serde in _PACK:
        try:
            return _PACK[serde](int(value) if serde in ("INT32", "INT64") else float(value))
        except (ValueError, struct.error) as exc:
            raise KeyRangeError(f"key bound {value!r} is not a {serde}: {exc}") from None
    raise KeyRangeError(f"key bound {value!r} cannot be encoded with the {serde} serde; give bytes")


def split_points(snapshot: Snapshot, shard: ShardSnapshot, max_rows: int) -> list[bytes]:
    """Keys that cut a shard into stored-key ranges of about `max_rows` entries, from its SST
    files' first keys and entry counts (no scan); empty when the shard needs no split."""
    db = open_shard(snapshot.shard_path(shard))
    try:
        files = sorted(db.live_files(), key=lambda f: f["start_key"])
    finally:
        db.close()
    if sum(f["num_entries"] for f in files) <= max_rows:
        return []
    points, rows = [], 0
    for f in files:
        if rows and rows + f["num_entries"] > max_rows and f["start_key"] < META_PREFIX \
                and (not points or f["start_key"] > points[-1]):
            points.append(f["start_key"])
            rows = 0
        rows += f["num_entries"]
    return points


def shard_batches(snapshot: Snapshot, shard: ShardSnapshot, schema: pa.Schema, *,
                  key_from: Optional[bytes] = None, key_to: Optional[bytes] = None,
                  batch_rows: int = DEFAULT_BATCH_ROWS, lower: Optional[bytes] = None,
                  upper: Optional[bytes] = None) -> Iterator[pa.RecordBatch]:
    """The shard's entries as record batches of `schema` (key range only for key-value stores:
    [key_from, key_to], in the serialized keys' byte order), within the stored-key split
    [lower, upper) when given (see `split_points`)."""
    from rocksdict import ReadOptions

    kind = snapshot.store_kind
    if kind != "key_value" and (key_from is not None or key_to is not None):
        raise KeyRangeError(f"store {snapshot.store!r} is a {kind} store: key ranges apply to key-value stores")
    start = max((k for k in (key_from, lower) if k is not None), default=None)
    stops = [k for k in (None if key_to is None else key_to + b"\x00", upper,
                         META_PREFIX if kind != "key_value" else None) if k is not None]
    stop = min(stops) if stops else None
    if start is not None and stop is not None and start >= stop:
        return
    db = open_shard(snapshot.shard_path(shard))
    try:
        read_opts = ReadOptions()
        read_opts.fill_cache(False)
        if stop is not None:
            read_opts.set_iterate_upper_bound(stop)
        items = db.items(from_key=start, read_opt=read_opts) if start is not None else db.items(read_opt=read_opts)
        islice = itertools.islice
        while True:
            chunk = list(islice(items, batch_rows))
            if not chunk:
                break
            keys, values = zip(*chunk, strict=True)
            yield entries_batch(snapshot, keys, values, schema)
        del items
    finally:
        db.close()


def entries_batch(snapshot: Snapshot, keys: Sequence[bytes], values: Sequence[Optional[bytes]],
                  schema: pa.Schema) -> pa.RecordBatch:
    """One batch of stored (key bytes, value bytes) pairs decoded into `schema`."""
    return stored_batch(pa.array(keys, pa.binary()), pa.array(values, pa.binary()), schema,
                        key_serde=snapshot.key_serde, value_serde=snapshot.value_serde,
                        kind=snapshot.store_kind, window_size_ms=snapshot.window_size_ms)


def stored_batch(keys: pa.Array, values: pa.Array, schema: pa.Schema, *, key_serde: str, value_serde: str,
                 kind: str, window_size_ms: Optional[int] = None, stored: bool = True,
                 extra: Optional[dict] = None) -> pa.RecordBatch:
    """Decode binary keys and values into `schema`. Window and session keys are split first:
    `stored` keys carry the 8-byte segment prefix (state.window's layout), changelog keys not."""
    columns = {}
    if kind in ("window", "session"):
        skip = SEGMENT_PREFIX_SIZE if stored else 0
        if kind == "window":  # key + start (8) + seqnum (4)
            key_part = pc.binary_slice(keys, skip, -12)
            start = _int64_at(keys, -12)
            end = pc.add(start, window_size_ms or 0)
        else:  # key + end (8) + start (8)
            key_part = pc.binary_slice(keys, skip, -16)
            end = _int64_at(keys, -16)
            start = _int64_at(keys, -8)
        columns["window_start"] = start
        columns["window_end"] = end
        keys = key_part.cast(pa.binary()) if key_part.type != pa.binary() else key_part
    columns["key"] = decode_column(keys, key_serde, schema.field("key").type, "key")
    columns["value"] = decode_column(values, value_serde, schema.field("value").type, "value")
    if extra:
        columns.update(extra)
    arrays = []
    for field in schema:
        column = columns.get(field.name)
        if column is None:
            raise ValueDecodeError(f"no column {field.name!r} in this source (it has {sorted(columns)})")
        if column.type != field.type:
            column = column.cast(field.type)
        arrays.append(column)
    return pa.RecordBatch.from_arrays(arrays, schema=schema)


def _int64_at(keys: pa.Array, start: int) -> pa.Array:
    """The big-endian int64 at byte `start` (negative: from the end) of every key."""
    part = pc.binary_slice(keys, start, start + 8 if start + 8 != 0 else None)
    return _decode_fixed(part.cast(pa.binary()), "INT64", "window time")


def _sample_values(snapshot: Snapshot, rows: int = JSON_SAMPLE_ROWS) -> list:
    out: list = []
    skip = _TIMESTAMP_SIZE if inner_serde(snapshot.value_serde) != snapshot.value_serde else 0
    for shard in snapshot.shards:
        db = open_shard(snapshot.shard_path(shard))
        try:
            for key, value in db.items():
                if key.startswith(META_PREFIX):
                    break
                out.append(value[skip:] if value is not None else None)
                if len(out) >= rows:
                    return out
        finally:
            db.close()
    return out
