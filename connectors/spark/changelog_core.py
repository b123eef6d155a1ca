"""Changelog (or any topic) reads as Arrow batches, from the embedded cluster or from Kafka.

Rows: `key`, `value` (decoded like a store's, a timestamped store's raw values as its inner
serde's: Kafka's changelog format; window and session changelog keys split into
`window_start`/`window_end` with `store_kind`), `partition` (int), `offset`, `timestamp`
(epoch ms). One range per topic partition, `[start, end)`, read_committed: `end` is the last
stable offset, so every transaction below it is decided and aborted ones are left out.

Embedded cluster (`local:///dir`). The cluster runs inside the application's process, while
Spark reads in its own worker processes, so the log is read from its files, never by opening a
second cluster on the directory (that would recover, truncate and write the same logs). The
files are safe to read while the cluster runs: `cluster-metadata.json` is replaced atomically;
segments are append-only, and only complete batches are read (a torn tail batch is where the
log ends for the reader); a segment deleted or swapped by retention or the cleaner stays readable
through an open file, and a listing that lost a file is taken again. The readable end is the
high watermark as the files show it: the smallest log end among the in-sync replicas (what every
in-sync replica holds is committed), then lowered to the first offset of a transaction still open
there (the last stable offset). Transactions aborted below it are found from the control batches.

Kafka: confluent-kafka consumers inside the workers, `isolation.level=read_committed`, ends from
`get_watermark_offsets` (the last stable offset for a read_committed consumer).

`latest_per_key`: each partition's table as of its end offset, tombstones dropped (keys are
partitioned, so the latest record of a key is in one partition).
"""

from __future__ import annotations

import dataclasses
import json
import mmap
import os
import struct
import time
import uuid
from typing import Any, Iterator, Optional

import pyarrow as pa

from connectors.spark import arrow_core
from connectors.spark.errors import BadOptionError, ChangelogReadError, TopicNotFoundError

LOCAL_SCHEME = "local://"
METADATA_FILE = "cluster-metadata.json"
STATE_FILE = "log-state-checkpoint"
#: How long a Kafka read may go without a record before it fails (the range is known to exist).
KAFKA_STALL_S = 60.0

_PREFIX = struct.Struct(">qi")  # base_offset, batch_length
_LOG_OVERHEAD = 12
_HEADER_SIZE = 61
_ATTRS = struct.Struct(">h")
_LAST_DELTA = struct.Struct(">i")
_PID = struct.Struct(">q")
_TRANSACTIONAL = 0x10
_CONTROL = 0x20


@dataclasses.dataclass(frozen=True)
class ChangelogSpec:
    """What to read; picklable (Spark ships it to the workers)."""

    bootstrap_servers: str
    topic: str
    key_serde: str = "BYTES"
    value_serde: str = "BYTES"
    latest_per_key: bool = False
    store_kind: str = "key_value"
    window_size_ms: Optional[int] = None
    raw: bool = False
    kafka_config: tuple = ()  # extra (key, value) client settings for Kafka

    def __post_init__(self) -> None:
        # a timestamped store's changelog holds the raw values (Kafka's format, the timestamp is
        # the record's): its store's serde `value_and_timestamp(X)` reads it as X
        object.__setattr__(self, "value_serde", arrow_core.inner_serde(self.value_serde))

    @property
    def local_dir(self) -> Optional[str]:
        servers = self.bootstrap_servers.strip()
        if not servers.startswith("local:"):
            return None
        rest = servers[len(LOCAL_SCHEME):] if servers.startswith(LOCAL_SCHEME) else ""
        if not rest.startswith("/"):
            raise BadOptionError(f"bootstrap.servers {servers!r}: an embedded cluster is read by its directory, "
                                 "'local:///path/to/dir'")
        return os.path.realpath(rest)


@dataclasses.dataclass(frozen=True)
class PartitionRange:
    partition: int
    start: int
    end: int


def changelog_schema(spec: ChangelogSpec, json_type: Optional[pa.DataType] = None) -> pa.Schema:
    extra = [pa.field("partition", pa.int32(), nullable=False), pa.field("offset", pa.int64(), nullable=False),
             pa.field("timestamp", pa.int64(), nullable=False)]
    return arrow_core.default_schema(spec.key_serde, spec.value_serde, spec.store_kind, raw=spec.raw,
                                     json_type=json_type, extra=extra)


def plan(spec: ChangelogSpec, starts: Optional[dict[int, int]] = None) -> list[PartitionRange]:
    """`[start, end)` per partition: from `starts` (default: the log start) to the end now."""
    bounds = _source(spec).bounds()
    out = []
    for p, (low, high) in sorted(bounds.items()):
        start = low if starts is None or p not in starts else max(low, starts[p])
        out.append(PartitionRange(p, start, max(start, high)))
    return out


def end_offsets(spec: ChangelogSpec) -> dict[int, int]:
    return {p: high for p, (_low, high) in _source(spec).bounds().items()}


def partition_batches(spec: ChangelogSpec, prange: PartitionRange, schema: pa.Schema,
                      batch_rows: int = arrow_core.DEFAULT_BATCH_ROWS) -> Iterator[pa.RecordBatch]:
    """The records of one partition range as record batches of `schema`."""
    if prange.start >= prange.end:
        return
    messages = _source(spec).messages(prange)
    if spec.latest_per_key:
        yield from _latest_batches(spec, prange.partition, messages, schema, batch_rows)
        return
    keys: list = []
    values: list = []
    offsets: list = []
    stamps: list = []
    for chunk in messages:
        for m in chunk:
            keys.append(m.key())
            values.append(m.value())
            offsets.append(m.offset())
            stamps.append(m.timestamp()[1])
        if len(keys) >= batch_rows:
            yield _batch(spec, prange.partition, keys, values, offsets, stamps, schema)
            keys, values, offsets, stamps = [], [], [], []
    if keys:
        yield _batch(spec, prange.partition, keys, values, offsets, stamps, schema)


def _latest_batches(spec, partition, messages, schema, batch_rows) -> Iterator[pa.RecordBatch]:
    latest: dict = {}
    for chunk in messages:
        for m in chunk:
            key = m.key()
            if key is None:
                continue  # a changelog record always has a key; others cannot form a table
            latest[key] = (m.value(), m.offset(), m.timestamp()[1])
    rows = [(k, v, o, t) for k, (v, o, t) in latest.items() if v is not None]
    rows.sort(key=lambda r: r[2])
    for i in range(0, len(rows), batch_rows):
        part = rows[i:i + batch_rows]
        yield _batch(spec, partition, [r[0] for r in part], [r[1] for r in part], [r[2] for r in part],
                     [r[3] for r in part], schema)


def _batch(spec, partition, keys, values, offsets, stamps, schema) -> pa.RecordBatch:
    if any(k is None for k in keys):
        keys = [b"" if k is None else k for k in keys]  # the key column is non-null
    extra = {"partition": pa.array([partition] * len(keys), pa.int32()),
             "offset": pa.array(offsets, pa.int64()), "timestamp": pa.array(stamps, pa.int64())}
    return arrow_core.stored_batch(pa.array(keys, pa.binary()), pa.array(values, pa.binary()), schema,
                                   key_serde=spec.key_serde, value_serde=spec.value_serde, kind=spec.store_kind,
                                   window_size_ms=spec.window_size_ms, stored=False, extra=extra)


def _source(spec: ChangelogSpec) -> Any:
    local = spec.local_dir
    return _LocalLog(local, spec.topic) if local is not None else _KafkaLog(spec)


# ------------------------------------------------------------------------------ embedded
class _Batch:
    __slots__ = ("base", "next", "pid", "txn", "control", "position", "size", "file")

    def __init__(self, base, next_offset, pid, txn, control, position, size, file=None) -> None:
        self.base, self.next, self.pid, self.txn, self.control = base, next_offset, pid, txn, control
        self.position, self.size = position, size
        self.file = file  # the segment's open file when the walk holds them, else None


class _LocalLog:
    """Reads a topic of an embedded cluster from its files (see the module doc)."""

    def __init__(self, data_dir: str, topic: str) -> None:
        self.data_dir = data_dir
        self.topic = topic
        path = os.path.join(data_dir, METADATA_FILE)
        try:
            with open(path, encoding="utf-8") as fh:
                doc = json.load(fh)
        except FileNotFoundError:
            raise ChangelogReadError(f"{data_dir} is not an embedded cluster directory (no {METADATA_FILE})") from None
        except (OSError, ValueError) as exc:
            raise ChangelogReadError(f"{path}: unreadable cluster metadata: {exc}") from None
        topics = {t["name"]: t for t in doc.get("topics", [])}
        if topic not in topics:
            raise TopicNotFoundError(f"topic {topic!r} does not exist in the embedded cluster at {data_dir} "
                                     f"(it has {sorted(n for n in topics if not n.startswith('__'))})")
        self.partitions = topics[topic]["partitions"]

    def _replica_dirs(self, p: int) -> tuple[Optional[str], list[str]]:
        state = self.partitions[p]
        dirs = {}
        for b in state.get("replicas", []):
            d = os.path.join(self.data_dir, f"broker-{b}", f"{self.topic}-{p}")
            if os.path.isdir(d):
                dirs[b] = d
        if not dirs:
            raise ChangelogReadError(f"{self.topic}-{p}: no replica directory under {self.data_dir}")
        leader = state.get("leader", -1)
        isr = [dirs[b] for b in state.get("isr", []) if b in dirs] or list(dirs.values())
        main = dirs.get(leader) or isr[0]
        return main, isr

    def bounds(self) -> dict[int, tuple[int, int]]:
        out = {}
        for p in range(len(self.partitions)):
            main, isr = self._replica_dirs(p)
            batches, log_start = _walk(main)
            end = batches[-1].next if batches else log_start
            for other in isr:
                if other != main:
                    end = min(end, _log_end(other))
            out[p] = (log_start, _stable_end(batches, end))
        return out

    def messages(self, prange: PartitionRange) -> Iterator[list]:
        main, _isr = self._replica_dirs(prange.partition)
        yield from _read_messages(main, self.topic, prange)


def _read_messages(log_dir: str, topic: str, prange: PartitionRange) -> Iterator[list]:
    """The messages of `[prange.start, prange.end)` in `log_dir`, a list per segment. The bytes
    are read from the files the walk opened: the cleaner swaps a segment by renaming a new file
    under the old name, and retention deletes files, so a read by name could meet a file the
    walk's positions do not describe."""
    from replication.records import decode_messages

    held: list = []
    try:
        batches, _start = _walk(log_dir, hold=held)
        aborted = _aborted(batches, prange.end)
        for seg_batches in _by_segment(batches, prange.start, prange.end):
            first, last = seg_batches[0], seg_batches[-1]
            data = os.pread(first.file.fileno(), last.position + last.size - first.position, first.position)
            msgs, _next = decode_messages(data, topic, prange.partition, min_offset=prange.start,
                                          aborted=aborted, source=first.file.name)
            yield [m for m in msgs if m.offset() < prange.end]
    finally:
        for fh in held:
            fh.close()


def _segments(log_dir: str) -> list[tuple[int, str]]:
    out = []
    for name in os.listdir(log_dir):
        if name.endswith(".log") and name[:-4].isdigit():
            out.append((int(name[:-4]), os.path.join(log_dir, name)))
    return sorted(out)


def _log_start(log_dir: str) -> int:
    try:
        with open(os.path.join(log_dir, STATE_FILE), encoding="ascii") as fh:
            for line in fh.read().split("\n")[1:]:
                parts = line.split()
                if len(parts) == 2 and parts[0] == "log_start_offset":
                    return int(parts[1])
    except (OSError, ValueError):
        pass
    return 0


def _walk(log_dir: str, only_last: bool = False, hold: Optional[list] = None) -> tuple[list[_Batch], int]:
    """Every complete batch of the log (headers only), and its start offset. A segment that
    vanishes while listed (retention, the cleaner's swap) makes the walk start again. With
    `hold`, each segment's file stays open (appended to `hold`, the caller closes them) and
    its batches name it, so that their bytes can be read as walked."""
    for _attempt in range(5):
        try:
            segments = _segments(log_dir)
            if only_last:
                segments = segments[-1:]
            batches: list[_Batch] = []
            for _base, path in segments:
                fh = open(path, "rb")
                if hold is not None:
                    hold.append(fh)
                try:
                    size = os.fstat(fh.fileno()).st_size
                    if size == 0:
                        continue
                    # mapped, not read: only the batch headers are touched (the length is fixed
                    # at mapping time; what is appended later is the next walk's)
                    with mmap.mmap(fh.fileno(), size, access=mmap.ACCESS_READ) as data:
                        found = _headers(data, path)
                finally:
                    if hold is None:
                        fh.close()
                if hold is not None:
                    for b in found:
                        b.file = fh
                batches += found
            log_start = max(_log_start(log_dir), segments[0][0] if segments else 0)
            return [b for b in batches if b.next > log_start], log_start
        except FileNotFoundError:
            if hold is not None:
                for fh in hold:
                    fh.close()
                hold.clear()
    raise ChangelogReadError(f"{log_dir}: segments kept changing while being listed")


def _headers(data: "bytes | mmap.mmap", path: str) -> list[_Batch]:
    out = []
    pos, end = 0, len(data)
    unpack_prefix = _PREFIX.unpack_from
    while pos + _HEADER_SIZE <= end:
        base, length = unpack_prefix(data, pos)
        size = _LOG_OVERHEAD + length
        if length <= 0 or pos + size > end:
            break  # a torn tail (a batch still being written) or preallocated zeros: the end
        attrs = _ATTRS.unpack_from(data, pos + 21)[0]
        next_offset = base + _LAST_DELTA.unpack_from(data, pos + 23)[0] + 1
        out.append(_Batch(base, next_offset, _PID.unpack_from(data, pos + 43)[0], bool(attrs & _TRANSACTIONAL),
                          _control_type(data, pos, size, path) if attrs & _CONTROL else None, pos, size))
        pos += size
    return out


def _control_type(data: bytes, pos: int, size: int, path: str) -> int:
    from replication.records import decode_records, iter_batch_headers

    chunk = data[pos:pos + size]
    header = next(iter_batch_headers(chunk, source=path))
    records = decode_records(chunk, header, source=path)
    key = records[0].key if records else None
    return struct.unpack(">hh", key[:4])[1] if key and len(key) >= 4 else -1


def _log_end(log_dir: str) -> int:
    batches, log_start = _walk(log_dir, only_last=True)
    return batches[-1].next if batches else log_start


def _stable_end(batches: list[_Batch], end: int) -> int:
    """`end` lowered to the first offset of a transaction still open there."""
    open_txns: dict[int, int] = {}
    for b in batches:
        if b.base >= end:
            break
        if b.control is not None:
            open_txns.pop(b.pid, None)
        elif b.txn:
            open_txns.setdefault(b.pid, b.base)
    return min([end, *open_txns.values()])


def _aborted(batches: list[_Batch], end: int) -> list[tuple[int, int, int]]:
    """(producer id, first offset, last offset) of every transaction aborted below `end`."""
    open_txns: dict[int, int] = {}
    out = []
    for b in batches:
        if b.base >= end:
            break
        if b.control is not None:
            first = open_txns.pop(b.pid, None)
            if first is not None and b.control == 0:  # 0: ABORT, 1: COMMIT
                out.append((b.pid, first, b.base))
        elif b.txn:
            open_txns.setdefault(b.pid, b.base)
    return out


def _by_segment(batches: list[_Batch], start: int, end: int) -> Iterator[list[_Batch]]:
    """The held batches overlapping `[start, end)`, in runs of one segment file each."""
    group: list[_Batch] = []
    for b in batches:
        if b.next <= start:
            continue
        if b.base >= end:
            break
        if group and b.file is not group[-1].file:
            yield group
            group = []
        group.append(b)
    if group:
        yield group


# ------------------------------------------------------------------------------ Kafka
class _KafkaLog:
    def __init__(self, spec: ChangelogSpec) -> None:
        self.spec = spec

    def _consumer(self) -> Any:
        # a consume returns what is fetched at once (Kafka's poll) rather than waiting out its
        # timeout for a full batch: each partition's tail (and a small partition) costs no wait
        from connectors.kafka.backend import PollingConsumer

        return PollingConsumer({"bootstrap.servers": self.spec.bootstrap_servers,
                                "group.id": f"eddy-spark-{uuid.uuid4().hex}",
                                "enable.auto.commit": False, "isolation.level": "read_committed",
                                "enable.partition.eof": False, **dict(self.spec.kafka_config)})

    def bounds(self) -> dict[int, tuple[int, int]]:
        from confluent_kafka import TopicPartition

        consumer = self._consumer()
        try:
            metadata = consumer.list_topics(self.spec.topic, timeout=30)
            topic = metadata.topics.get(self.spec.topic)
            if topic is None or topic.error is not None or not topic.partitions:
                raise TopicNotFoundError(f"topic {self.spec.topic!r} does not exist on {self.spec.bootstrap_servers}"
                                         + (f" ({topic.error})" if topic is not None and topic.error else ""))
            return {p: consumer.get_watermark_offsets(TopicPartition(self.spec.topic, p), timeout=30)
                    for p in sorted(topic.partitions)}
        finally:
            consumer.close()

    def messages(self, prange: PartitionRange) -> Iterator[list]:
        from confluent_kafka import TopicPartition

        consumer = self._consumer()
        try:
            tp = TopicPartition(self.spec.topic, prange.partition, prange.start)
            consumer.assign([tp])
            last_progress = time.monotonic()
            while True:
                msgs = consumer.consume(10_000, 0.5)
                good = []
                for m in msgs:
                    if m.error() is not None:
                        raise ChangelogReadError(f"{self.spec.topic}-{prange.partition}: {m.error()}")
                    if m.offset() < prange.end:
                        good.append(m)
                if good:
                    last_progress = time.monotonic()
                    yield good
                position = consumer.position([TopicPartition(self.spec.topic, prange.partition)])[0].offset
                if position >= prange.end or (msgs and msgs[-1].offset() >= prange.end - 1):
                    return
                if time.monotonic() - last_progress > KAFKA_STALL_S:
                    raise ChangelogReadError(f"{self.spec.topic}-{prange.partition}: no progress towards offset "
                                             f"{prange.end} for {KAFKA_STALL_S}s (at {position})")
        finally:
            consumer.close()
