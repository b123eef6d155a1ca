"""Kafka's v2 record batch format (magic 2), encoded and decoded a whole batch at a time.

Layout of a batch (big-endian), 61 bytes of header then the records::

    base_offset i64 | batch_length i32 | partition_leader_epoch i32 | magic i8 | crc u32 |
    attributes i16 | last_offset_delta i32 | first_timestamp i64 | max_timestamp i64 |
    producer_id i64 | producer_epoch i16 | base_sequence i32 | records_count i32 | records...

`batch_length` counts the bytes after itself. The CRC-32C covers everything from
`attributes` to the end, so `base_offset` and `partition_leader_epoch` can be restamped on
leader append without recomputing it. Each record is::

    length varint | attributes i8 | timestamp_delta varlong | offset_delta varint |
    key_length varint | key | value_length varint | value | header_count varint |
    (header_key_length varint | header_key | header_value_length varint | header_value)*

Varints are zig-zag encoded as in protobuf. A length of -1 means null.
"""

from __future__ import annotations

import enum
import logging
import os
import struct
import threading
from typing import Any, Iterable, Iterator, Sequence

from crc32c import crc32c

from eddy import messages as _messages
from replication.errors import CorruptRecordError

logger = logging.getLogger(__name__)

# The C accelerator (replication/_records.c, built at install time) replaces the per-record loops
# below; the pure-Python code stays as the fallback and as the reference the tests compare it to.
# EDDY_RECORDS_PURE_PYTHON=1 forces the fallback.
if os.environ.get("EDDY_RECORDS_PURE_PYTHON"):
    _accel = None
    logger.debug("replication.records: pure Python (EDDY_RECORDS_PURE_PYTHON is set)")
else:
    try:
        from replication import _records as _accel
    except ImportError as _e:  # no compiler at install time, or an unbuilt checkout
        _accel = None
        logger.debug("replication.records: pure Python (C accelerator unavailable: %s)", _e)
    else:
        logger.debug("replication.records: C accelerator active")

ACCELERATED: bool = _accel is not None


class _DecodeError(ValueError):
    """Malformed bytes found by the pure-Python decoders: args are (message, position, base_offset).

    Mirrors ``replication._records.DecodeError``; the public functions turn both into
    CorruptRecordError with the caller's source and base position.
    """


_DECODE_ERRORS: tuple = (_DecodeError,) if _accel is None else (_DecodeError, _accel.DecodeError)


def _from_decode_error(e: ValueError, source: str, base_position: int, position: int = -1):
    message, pos, base_offset = e.args
    if pos >= 0:
        position = base_position + pos
    return _corrupt(message, source=source, position=position, base_offset=base_offset)


def _corrupt(message: str, *, source: str = "", position: int = -1, base_offset: int = -1):
    """Build a CorruptRecordError whose message names the source, byte position and offset."""
    where = []
    if source:
        where.append(source)
    if position >= 0:
        where.append(f"position {position}")
    if base_offset >= 0:
        where.append(f"base offset {base_offset}")
    text = f"{message} ({', '.join(where)})" if where else message
    return CorruptRecordError(text, source=source, position=position, base_offset=base_offset)

__all__ = [
    "CorruptRecordError",
    "BATCH_HEADER_SIZE",
    "BatchHeader",
    "ControlType",
    "MemoryRecords",
    "NO_PARTITION_LEADER_EPOCH",
    "NO_PRODUCER_EPOCH",
    "NO_PRODUCER_ID",
    "NO_SEQUENCE",
    "Record",
    "RecordBatch",
    "ACCELERATED",
    "decode_batches",
    "decode_messages",
    "decode_records",
    "encode_batch",
    "encode_control_batch",
    "iter_batch_headers",
    "null_key_indexes",
    "restamp_batches",
    "set_base_offset_and_epoch",
]

MAGIC = 2
BATCH_HEADER_SIZE = 61
LOG_OVERHEAD = 12  # base_offset + batch_length: the prefix not counted by batch_length
NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
NO_SEQUENCE = -1
NO_PARTITION_LEADER_EPOCH = -1
NO_TIMESTAMP = -1

_TRANSACTIONAL_FLAG = 0x10
_CONTROL_FLAG = 0x20
_TIMESTAMP_TYPE_FLAG = 0x08
_COMPRESSION_MASK = 0x07

# base_offset, batch_length, partition_leader_epoch, magic, crc, attributes, last_offset_delta,
# first_timestamp, max_timestamp, producer_id, producer_epoch, base_sequence, records_count
_HEADER = struct.Struct(">qiibIhiqqqhii")
_PREFIX = struct.Struct(">qi")
_OFFSET_AND_LENGTH = struct.Struct(">qi")
_EPOCH = struct.Struct(">i")
_CRC_START = 21  # offset of `attributes` within the batch
_CONTROL_KEY = struct.Struct(">hh")
_CONTROL_VALUE = struct.Struct(">hi")


class ControlType(enum.IntEnum):
    """Control record types written by the transaction coordinator."""

    ABORT = 0
    COMMIT = 1


# --- varints -------------------------------------------------------------------------------

_SMALL_VARINTS = [bytes(((n << 1) ^ (n >> 63),)) for n in range(64)]


def _varint(n: int) -> bytes:
    """Zig-zag varint of a signed 64-bit integer."""
    if 0 <= n < 64:
        return _SMALL_VARINTS[n]
    if not -(1 << 63) <= n < (1 << 63):
        raise ValueError(f"{n} is out of the 64-bit varint range")
    u = ((n << 1) ^ (n >> 63)) & 0xFFFFFFFFFFFFFFFF
    out = bytearray()
    while u >= 0x80:
        out.append((u & 0x7F) | 0x80)
        u >>= 7
    out.append(u)
    return bytes(out)


def _read_varint(buf, pos: int) -> tuple[int, int]:
    """Decode a zig-zag varint at `pos`; returns (value, next position)."""
    b = buf[pos]
    pos += 1
    if b < 0x80:
        return (b >> 1) ^ -(b & 1), pos
    u = b & 0x7F
    shift = 7
    while True:
        b = buf[pos]
        pos += 1
        u |= (b & 0x7F) << shift
        if b < 0x80:
            break
        shift += 7
        if shift > 63:
            raise ValueError("varint is longer than 10 bytes")
    u &= 0xFFFFFFFFFFFFFFFF  # a 10th byte's extra bits are dropped, as Kafka does
    return (u >> 1) ^ -(u & 1), pos


# --- records -------------------------------------------------------------------------------


class _PyRecord:
    """One decoded record with its absolute offset and timestamp."""

    __slots__ = ("offset", "timestamp", "key", "value", "headers")

    def __init__(
        self,
        offset: int,
        timestamp: int,
        key: bytes | None,
        value: bytes | None,
        headers: tuple[tuple[str, bytes | None], ...] = (),
    ) -> None:
        self.offset = offset
        self.timestamp = timestamp
        self.key = key
        self.value = value
        self.headers = headers

    def __repr__(self) -> str:
        return (
            f"Record(offset={self.offset}, timestamp={self.timestamp}, key={self.key!r}, "
            f"value={self.value!r}, headers={self.headers!r})"
        )

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, _PyRecord):
            return NotImplemented
        return (self.offset, self.timestamp, self.key, self.value, self.headers) == (
            other.offset,
            other.timestamp,
            other.key,
            other.value,
            other.headers,
        )

    __hash__ = None  # type: ignore[assignment]

    def __reduce__(self):
        return (type(self), (self.offset, self.timestamp, self.key, self.value, self.headers))


# The C type has the same constructor, attributes, __eq__, __repr__ and pickling.
if _accel is None:
    _PyRecord.__name__ = _PyRecord.__qualname__ = "Record"  # pickles as records.Record
    Record = _PyRecord
else:
    Record = _accel.Record


def _encode_record(
    out: bytearray, offset_delta: int, timestamp_delta: int, key, value, headers
) -> None:
    body = bytearray(b"\x00")
    body += _varint(timestamp_delta)
    body += _varint(offset_delta)
    if key is None:
        body += b"\x01"  # zig-zag of -1
    else:
        body += _varint(len(key))
        body += key
    if value is None:
        body += b"\x01"
    else:
        body += _varint(len(value))
        body += value
    if headers:
        if isinstance(headers, dict):
            headers = list(headers.items())
        body += _varint(len(headers))
        for hkey, hvalue in headers:
            if isinstance(hkey, str):
                hk = hkey.encode("utf-8")
            else:
                hk = bytes(memoryview(hkey))
                try:
                    hk.decode("utf-8")  # keys are read back as str: refuse what cannot be
                except UnicodeDecodeError:
                    raise ValueError(f"header key {hk!r} is not valid UTF-8") from None
            body += _varint(len(hk))
            body += hk
            if hvalue is None:
                body += b"\x01"
            else:
                hv = hvalue.encode("utf-8") if isinstance(hvalue, str) else hvalue
                body += _varint(len(hv))
                body += hv
    else:
        body += b"\x00"
    out += _varint(len(body))
    out += body


def encode_batch(
    records: Sequence[tuple],
    *,
    base_offset: int = 0,
    partition_leader_epoch: int = NO_PARTITION_LEADER_EPOCH,
    producer_id: int = NO_PRODUCER_ID,
    producer_epoch: int = NO_PRODUCER_EPOCH,
    base_sequence: int = NO_SEQUENCE,
    is_transactional: bool = False,
    is_control: bool = False,
    timestamp_type: int = 0,
) -> bytes:
    """Encode `records` as one batch; each record is `(key, value, timestamp[, headers])`.

    Offset deltas run 0..n-1. An empty sequence is rejected: Kafka never writes empty batches
    (outside compaction, which keeps the header of a fully cleaned batch; see `encode_empty_batch`).
    """
    n = len(records)
    if n == 0:
        raise ValueError("a record batch needs at least one record")
    first_ts = records[0][2]
    out, max_ts = _encode_records(records, first_ts, BATCH_HEADER_SIZE)
    attributes = timestamp_type << 3 & _TIMESTAMP_TYPE_FLAG
    if is_transactional:
        attributes |= _TRANSACTIONAL_FLAG
    if is_control:
        attributes |= _CONTROL_FLAG
    _fill_header(
        out,
        base_offset,
        partition_leader_epoch,
        attributes,
        n - 1,
        first_ts,
        max_ts,
        producer_id,
        producer_epoch,
        base_sequence,
        n,
    )
    return bytes(out)


def _py_encode_records(records: Sequence[tuple], first_ts: int, reserve: int = 0) -> tuple[bytearray, int]:
    """Pure-Python `_records.encode_records`: `reserve` zero bytes, then the records section.

    Returns the buffer and the largest timestamp (`first_ts` when there are no records).
    """
    out = bytearray(reserve)
    max_ts = None
    offset_delta = 0
    for r in records:
        if len(r) not in (3, 4):
            raise TypeError(f"record #{offset_delta} must be (key, value, timestamp[, headers])")
        ts = r[2]
        if max_ts is None or ts > max_ts:
            max_ts = ts
        key = r[0]
        value = r[1]
        headers = r[3] if len(r) > 3 else None
        # Fast path: small key/value, no headers; lengths < 64 encode in one byte.
        if not headers and key is not None and value is not None:
            tsd = ts - first_ts
            klen = len(key)
            vlen = len(value)
            body = b"".join(
                (
                    b"\x00",
                    _SMALL_VARINTS[tsd] if 0 <= tsd < 64 else _varint(tsd),
                    _SMALL_VARINTS[offset_delta] if offset_delta < 64 else _varint(offset_delta),
                    _SMALL_VARINTS[klen] if klen < 64 else _varint(klen),
                    key,
                    _SMALL_VARINTS[vlen] if vlen < 64 else _varint(vlen),
                    value,
                    b"\x00",
                )
            )
            out += _varint(len(body))
            out += body
        else:
            _encode_record(out, offset_delta, ts - first_ts, key, value, headers)
        offset_delta += 1
    return out, first_ts if max_ts is None else max_ts


_encode_records = _py_encode_records if _accel is None else _accel.encode_records


def _fill_header(
    out: bytearray,
    base_offset: int,
    partition_leader_epoch: int,
    attributes: int,
    last_offset_delta: int,
    first_ts: int,
    max_ts: int,
    producer_id: int,
    producer_epoch: int,
    base_sequence: int,
    count: int,
) -> None:
    _HEADER.pack_into(
        out,
        0,
        base_offset,
        len(out) - LOG_OVERHEAD,
        partition_leader_epoch,
        MAGIC,
        0,
        attributes,
        last_offset_delta,
        first_ts,
        max_ts,
        producer_id,
        producer_epoch,
        base_sequence,
        count,
    )
    struct.pack_into(">I", out, 17, crc32c(memoryview(out)[_CRC_START:]))


def encode_control_batch(
    control: ControlType,
    *,
    base_offset: int = 0,
    timestamp: int,
    producer_id: int,
    producer_epoch: int,
    partition_leader_epoch: int = NO_PARTITION_LEADER_EPOCH,
    coordinator_epoch: int = 0,
) -> bytes:
    """A transaction marker: one control record whose key holds the marker type."""
    key = _CONTROL_KEY.pack(0, int(control))
    value = _CONTROL_VALUE.pack(0, coordinator_epoch)
    return encode_batch(
        [(key, value, timestamp)],
        base_offset=base_offset,
        partition_leader_epoch=partition_leader_epoch,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        is_transactional=True,
        is_control=True,
    )


def encode_empty_batch(header: "BatchHeader") -> bytes:
    """A batch with `header`'s metadata and no records.

    Compaction keeps such a batch when it removes every record of a batch whose producer
    state must survive (Kafka does the same to retain the last sequence of a producer).
    """
    out = bytearray(BATCH_HEADER_SIZE)
    _fill_header(
        out,
        header.base_offset,
        header.partition_leader_epoch,
        header.attributes,
        header.last_offset_delta,
        header.first_timestamp,
        header.max_timestamp,
        header.producer_id,
        header.producer_epoch,
        header.base_sequence,
        0,
    )
    return bytes(out)


def encode_batch_with_offsets(
    header: "BatchHeader", records: Sequence[Record]
) -> bytes:
    """Re-encode `records` (a subset of a batch, absolute offsets) keeping `header`'s metadata.

    Used by compaction: offsets are preserved, so offset deltas are taken relative to the
    original base offset, and `last_offset_delta` stays the original one as Kafka keeps it.
    """
    if not records:
        return encode_empty_batch(header)
    base = header.base_offset
    first_ts = header.first_timestamp
    out = bytearray(BATCH_HEADER_SIZE)
    max_ts = NO_TIMESTAMP
    for r in records:
        _encode_record(out, r.offset - base, r.timestamp - first_ts, r.key, r.value, r.headers)
        if r.timestamp > max_ts:
            max_ts = r.timestamp
    _fill_header(
        out,
        base,
        header.partition_leader_epoch,
        header.attributes,
        header.last_offset_delta,
        first_ts,
        max_ts,
        header.producer_id,
        header.producer_epoch,
        header.base_sequence,
        len(records),
    )
    return bytes(out)


# --- headers and batches -------------------------------------------------------------------


class BatchHeader:
    """A batch's header fields, decoded without touching its records."""

    __slots__ = (
        "position",
        "base_offset",
        "size",
        "partition_leader_epoch",
        "crc",
        "attributes",
        "last_offset_delta",
        "first_timestamp",
        "max_timestamp",
        "producer_id",
        "producer_epoch",
        "base_sequence",
        "records_count",
    )

    def __init__(self, position: int, fields: tuple) -> None:
        self.position = position
        (
            self.base_offset,
            batch_length,
            self.partition_leader_epoch,
            _magic,
            self.crc,
            self.attributes,
            self.last_offset_delta,
            self.first_timestamp,
            self.max_timestamp,
            self.producer_id,
            self.producer_epoch,
            self.base_sequence,
            self.records_count,
        ) = fields
        self.size = batch_length + LOG_OVERHEAD

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def next_offset(self) -> int:
        return self.base_offset + self.last_offset_delta + 1

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & _TRANSACTIONAL_FLAG)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & _CONTROL_FLAG)

    @property
    def timestamp_type(self) -> int:
        return (self.attributes & _TIMESTAMP_TYPE_FLAG) >> 3

    @property
    def has_producer_id(self) -> bool:
        return self.producer_id >= 0

    @property
    def last_sequence(self) -> int:
        if self.base_sequence < 0:
            return NO_SEQUENCE
        return (self.base_sequence + self.last_offset_delta) & 0x7FFFFFFF

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(base_offset={self.base_offset}, last_offset={self.last_offset}, "
            f"epoch={self.partition_leader_epoch}, size={self.size}, position={self.position}, "
            f"producer_id={self.producer_id}, transactional={self.is_transactional}, "
            f"control={self.is_control})"
        )


class RecordBatch(BatchHeader):
    """A batch header plus the batch's bytes; records are decoded on demand."""

    __slots__ = ("buffer",)

    def __init__(self, position: int, fields: tuple, buffer: bytes) -> None:
        super().__init__(position, fields)
        self.buffer = buffer

    def records(self) -> list[Record]:
        return decode_records(self.buffer, self)

    def control_type(self) -> ControlType | None:
        """The marker type of a control batch, else None."""
        if not self.is_control:
            return None
        recs = self.records()
        if not recs or recs[0].key is None or len(recs[0].key) < 4:
            raise _corrupt(
                "control batch without a valid control record",
                position=self.position,
                base_offset=self.base_offset,
            )
        _version, ctype = _CONTROL_KEY.unpack_from(recs[0].key)
        return ControlType(ctype)


def _header_fields(buf, pos: int, end: int, validate_crc: bool):
    """Validate the batch starting at `pos`; returns (header fields, size).

    Raises _DecodeError(message, pos, base_offset) on a torn, corrupt or unsupported batch.
    """
    if end - pos < LOG_OVERHEAD:
        raise _DecodeError(
            f"torn batch: {end - pos} trailing bytes are less than a batch prefix", pos, -1
        )
    base_offset, batch_length = _OFFSET_AND_LENGTH.unpack_from(buf, pos)
    size = batch_length + LOG_OVERHEAD
    if batch_length < BATCH_HEADER_SIZE - LOG_OVERHEAD:
        raise _DecodeError(
            f"batch length {batch_length} is smaller than a batch header", pos, base_offset
        )
    if pos + size > end:
        raise _DecodeError(
            f"torn batch: {size} bytes declared, {end - pos} present", pos, base_offset
        )
    fields = _HEADER.unpack_from(buf, pos)
    if fields[3] != MAGIC:
        raise _DecodeError(
            f"unsupported magic {fields[3]} (only v2 batches are written by Eddy)", pos, base_offset
        )
    if validate_crc:
        actual = crc32c(memoryview(buf)[pos + _CRC_START : pos + size])
        if actual != fields[4]:
            raise _DecodeError(
                f"CRC mismatch: stored {fields[4]:#010x}, computed {actual:#010x}", pos, base_offset
            )
    if fields[5] & _COMPRESSION_MASK:
        raise _DecodeError(
            f"compressed batches are not supported (codec {fields[5] & _COMPRESSION_MASK})",
            pos,
            base_offset,
        )
    return fields, size


def _check_header(buf, pos: int, end: int, source: str, base_position: int, validate_crc: bool):
    """`_header_fields` raising CorruptRecordError that names `source` and the byte position."""
    try:
        return _header_fields(buf, pos, end, validate_crc)
    except _DecodeError as e:
        raise _from_decode_error(e, source, base_position) from None


def iter_batch_headers(
    buf, *, base_position: int = 0, source: str = "", validate_crc: bool = True
) -> Iterator[BatchHeader]:
    """Walk concatenated batches, yielding headers; raise CorruptRecordError at the first bad one."""
    pos = 0
    end = len(buf)
    while pos < end:
        fields, size = _check_header(buf, pos, end, source, base_position, validate_crc)
        yield BatchHeader(base_position + pos, fields)
        pos += size


def decode_batches(
    buf, *, base_position: int = 0, source: str = "", validate_crc: bool = True
) -> list[RecordBatch]:
    """Split concatenated batches into `RecordBatch` objects (records stay encoded)."""
    out = []
    pos = 0
    end = len(buf)
    data = bytes(buf) if not isinstance(buf, bytes) else buf
    while pos < end:
        fields, size = _check_header(data, pos, end, source, base_position, validate_crc)
        out.append(RecordBatch(base_position + pos, fields, data[pos : pos + size]))
        pos += size
    return out


def decode_records(buf: bytes, header: BatchHeader, source: str = "") -> list[Record]:
    """Decode the records of one batch held in `buf` (which starts at the batch)."""
    try:
        return _decode_records(
            buf, header.base_offset, header.first_timestamp, header.records_count,
            BATCH_HEADER_SIZE, header.size,
        )
    except _DECODE_ERRORS as e:
        raise _from_decode_error(e, source, 0, header.position) from None


def _py_decode_records(
    buf, base_offset: int, first_ts: int, count: int, start: int, end: int
) -> list[Record]:
    """Pure-Python `_records.decode_records`: the `count` records in `buf[start:end]`.

    Raises _DecodeError(message, -1, base_offset) on malformed bytes.
    """
    if not 0 <= start <= end <= len(buf):
        raise _DecodeError(
            f"batch records [{start}, {end}) lie outside a buffer of {len(buf)} bytes", -1, base_offset
        )
    if type(buf) is not bytes or len(buf) != end:
        buf = bytes(memoryview(buf)[:end])  # slices must be bytes, reads must stop at `end`
    out: list[Record] = []
    append = out.append
    pos = start
    try:
        for _ in range(count):
            # length (varint, fast path for one byte)
            b = buf[pos]
            if b < 0x80:
                length = (b >> 1) ^ -(b & 1)
                pos += 1
            else:
                length, pos = _read_varint(buf, pos)
            rec_end = pos + length
            pos += 1  # record attributes, unused
            b = buf[pos]
            if b < 0x80:
                ts_delta = (b >> 1) ^ -(b & 1)
                pos += 1
            else:
                ts_delta, pos = _read_varint(buf, pos)
            b = buf[pos]
            if b < 0x80:
                off_delta = (b >> 1) ^ -(b & 1)
                pos += 1
            else:
                off_delta, pos = _read_varint(buf, pos)
            b = buf[pos]
            if b < 0x80:
                klen = (b >> 1) ^ -(b & 1)
                pos += 1
            else:
                klen, pos = _read_varint(buf, pos)
            if klen < 0:
                key = None
            else:
                key = buf[pos : pos + klen]
                pos += klen
            b = buf[pos]
            if b < 0x80:
                vlen = (b >> 1) ^ -(b & 1)
                pos += 1
            else:
                vlen, pos = _read_varint(buf, pos)
            if vlen < 0:
                value = None
            else:
                value = buf[pos : pos + vlen]
                pos += vlen
            if buf[pos] == 0:
                headers = ()
                pos += 1
            else:
                hcount, pos = _read_varint(buf, pos)
                if hcount < 0:
                    raise ValueError("negative header count")
                hs = []
                for _h in range(hcount):
                    hklen, pos = _read_varint(buf, pos)
                    if hklen < 0:
                        raise ValueError("null header key")
                    hkey = buf[pos : pos + hklen].decode("utf-8")
                    pos += hklen
                    hvlen, pos = _read_varint(buf, pos)
                    if hvlen < 0:
                        hvalue = None
                    else:
                        hvalue = buf[pos : pos + hvlen]
                        pos += hvlen
                    hs.append((hkey, hvalue))
                headers = tuple(hs)
            if pos != rec_end:
                raise ValueError(f"record length {length} does not match its fields")
            append(Record(base_offset + off_delta, first_ts + ts_delta, key, value, headers))
    except (IndexError, ValueError, UnicodeDecodeError) as e:
        raise _DecodeError(f"malformed record #{len(out)} in batch: {e}", -1, base_offset) from None
    if pos != end:
        raise _DecodeError(f"batch has {end - pos} bytes after its {count} records", -1, base_offset)
    return out


_decode_records = _py_decode_records if _accel is None else _accel.decode_records


def null_key_indexes(buf, header: BatchHeader, source: str = "") -> list[int]:
    """Indexes, in batch order, of the records without a key in the batch that `header`
    describes (`header.position` is where it starts in `buf`). The records are validated as
    `decode_records` does, without decoding them: malformed ones raise CorruptRecordError."""
    start = header.position
    try:
        return _null_key_indexes(buf, header.base_offset, header.records_count,
                                 start + BATCH_HEADER_SIZE, start + header.size)
    except _DECODE_ERRORS as e:
        raise _from_decode_error(e, source, 0, header.position) from None


def _py_null_key_indexes(buf, base_offset: int, count: int, start: int, end: int) -> list[int]:
    """Pure-Python `_records.null_key_indexes`."""
    records = _py_decode_records(buf, base_offset, 0, count, start, end)
    return [i for i, record in enumerate(records) if record.key is None]


_null_key_indexes = _py_null_key_indexes if _accel is None else _accel.null_key_indexes


def decode_messages(
    buf,
    topic: str,
    partition: int,
    *,
    min_offset: int = 0,
    aborted: Sequence[tuple[int, int, int]] | None = None,
    validate_crc: bool = True,
    partial_tail: bool = False,
    source: str = "",
    base_position: int = 0,
    message_type: Any = None,
) -> tuple[list, int]:
    """Decode a whole fetch buffer (concatenated batches) into `confluent_kafka.Message` objects.

    The consumer's hot path. Control batches are skipped, records below `min_offset` too, and,
    for read_committed, transactional data batches of an `aborted` range
    `(producer_id, first_offset, last_offset)`. Timestamps are `(1, CreateTime)` or, for a
    LogAppendTime batch, `(2, the batch's max_timestamp)` as Kafka reports them; headers are
    None or a list of `(str, bytes | None)`; `leader_epoch()` is the batch's leader epoch.
    `partial_tail=True` ignores a torn last batch, as a fetch cut at its byte limit ends.

    Returns the messages and the next fetch offset: max(min_offset, next offset of the last
    batch walked, control batches included). Malformed bytes raise CorruptRecordError.
    """
    if message_type is None:
        from confluent_kafka import Message as message_type
    if message_type not in _layout_checked:
        enable_message_layout(message_type)
    try:
        return _decode_messages(
            buf, topic, partition, min_offset, message_type, validate_crc, aborted, partial_tail
        )
    except _DECODE_ERRORS as e:
        raise _from_decode_error(e, source, base_position) from None


# Message types whose layout was probed: type -> True when the C decoder fills them directly.
_layout_checked: dict = {}
_layout_lock = threading.Lock()


def _layout_matches_constructor(message_type: Any) -> bool:
    """Decode sample batches with the layout on; every message must be byte-identical (after the
    object header) to one the constructor builds from its accessors' results, and answer every
    accessor the same."""
    import ctypes  # noqa: PLC0415 - only the check needs it

    size = message_type.__basicsize__
    header = object.__basicsize__
    samples = [
        (encode_batch([(b"k", b"v", 1_700_000_000_000, None), (None, b"v2", 1_700_000_000_005, [("h", b"x")]),
                       (b"", None, 1_699_999_999_000, [("a", None), ("b", b"")])],
                      base_offset=41, partition_leader_epoch=-1), 0),
        (encode_batch([(b"k" * 40, b"v" * 300, 5, None), (b"k2", b"", 7, None)], base_offset=1 << 40,
                      partition_leader_epoch=7, timestamp_type=1), 3),
    ]
    checked = 0
    for buf, partition in samples:
        msgs, _ = _accel.decode_messages(buf, "eddy-layout-check", partition, 0, message_type, True, None, False)
        for m in msgs:
            epoch = m.leader_epoch()
            ref = message_type(m.topic(), m.partition(), m.offset(), m.key(), m.value(), m.headers(), None,
                               m.timestamp(), -1.0, -1 if epoch is None else epoch)
            if ctypes.string_at(id(m) + header, size - header) != ctypes.string_at(id(ref) + header, size - header):
                return False
            for accessor in ("topic", "partition", "offset", "key", "value", "headers", "timestamp",
                             "leader_epoch", "latency", "error"):
                if getattr(m, accessor)() != getattr(ref, accessor)():
                    return False
            if len(m) != len(ref):
                return False
            checked += 1
    return checked == 5


def enable_message_layout(message_type: Any) -> bool:
    """Let the C decoder fill `message_type` objects directly, once their layout is found and
    verified; returns whether it does. Checked once per type, and only confluent_kafka.Message
    itself qualifies (a subclass may do more in its constructor than set the fields)."""
    with _layout_lock:
        if message_type in _layout_checked:
            return _layout_checked[message_type]
        ok = _enable_message_layout(message_type)
        _layout_checked[message_type] = ok
    logger.debug("replication.records: %s messages are %s", getattr(message_type, "__name__", message_type),
                 "filled directly" if ok else "built by their constructor")
    return ok


def _enable_message_layout(message_type: Any) -> bool:
    """Hand the layout eddy.messages verified to the C decoder, and check the decoder with it."""
    ok = False
    if _accel is not None and hasattr(_accel, "set_message_layout"):
        layout = _messages.probed_layout(message_type)
        try:
            if layout is not None:
                _accel.set_message_layout(*_messages.layout_arguments(message_type, layout))
                ok = _layout_matches_constructor(message_type)
        except Exception as e:  # noqa: BLE001 - any surprise means: keep calling the constructor
            logger.debug("replication.records: message layout of %r not usable: %s", message_type, e)
            ok = False
        if not ok:
            _accel.set_message_layout(None)
    return ok


def _py_decode_messages(
    buf,
    topic: str,
    partition: int,
    min_offset: int,
    message_type: Any,
    validate_crc: bool = True,
    aborted: Sequence[tuple[int, int, int]] | None = None,
    partial_tail: bool = False,
) -> tuple[list, int]:
    """Pure-Python `_records.decode_messages` (same arguments, results and errors)."""
    data = buf if type(buf) is bytes else bytes(buf)
    ranges = [tuple(r) for r in aborted] if aborted is not None else ()
    out: list = []
    pos = 0
    end = len(data)
    next_offset = None
    while pos < end:
        if partial_tail:
            if end - pos < LOG_OVERHEAD:
                break
            batch_length = _OFFSET_AND_LENGTH.unpack_from(data, pos)[1]
            if (batch_length >= BATCH_HEADER_SIZE - LOG_OVERHEAD
                    and pos + batch_length + LOG_OVERHEAD > end):
                break
        fields, size = _header_fields(data, pos, end, validate_crc)
        (base_offset, _len, leader_epoch, _magic, _crc, attributes, last_offset_delta, first_ts,
         max_ts, producer_id, _pepoch, _seq, count) = fields
        next_offset = base_offset + last_offset_delta + 1
        skip = bool(attributes & _CONTROL_FLAG) or next_offset <= min_offset
        if not skip and attributes & _TRANSACTIONAL_FLAG:
            skip = any(
                pid == producer_id and first <= base_offset <= last for pid, first, last in ranges
            )
        if not skip:
            try:
                records = _py_decode_records(data[pos : pos + size], base_offset, first_ts, count,
                                             BATCH_HEADER_SIZE, size)
            except _DecodeError as e:
                raise _DecodeError(e.args[0], pos, base_offset) from None
            log_append = attributes & _TIMESTAMP_TYPE_FLAG
            for r in records:
                if r.offset < min_offset:
                    continue
                headers = list(r.headers) if r.headers else None
                ts = (2, max_ts) if log_append else (1, r.timestamp)
                out.append(message_type(topic, partition, r.offset, r.key, r.value, headers, None,
                                        ts, -1.0, leader_epoch))
        pos += size
    if next_offset is None or next_offset < min_offset:
        next_offset = min_offset
    return out, next_offset


_decode_messages = _py_decode_messages if _accel is None else _accel.decode_messages


def set_base_offset_and_epoch(batch: bytes | bytearray, base_offset: int, leader_epoch: int) -> bytes:
    """Stamp one batch's base offset and leader epoch (fields the CRC does not cover)."""
    out = bytearray(batch)
    struct.pack_into(">q", out, 0, base_offset)
    _EPOCH.pack_into(out, 12, leader_epoch)
    return bytes(out)


def restamp_batches(
    buf: bytes | bytearray, first_offset: int, leader_epoch: int, *, source: str = ""
) -> tuple[bytes, list[BatchHeader]]:
    """Assign consecutive offsets from `first_offset` to every batch in `buf` and stamp the epoch.

    This is the leader-append path: one copy of the buffer, header fields rewritten in place.
    Returns the stamped bytes and the batches' (already stamped) headers.
    """
    out = bytearray(buf)
    headers = []
    pos = 0
    end = len(out)
    next_offset = first_offset
    while pos < end:
        fields, size = _check_header(out, pos, end, source, 0, True)
        _PREFIX.pack_into(out, pos, next_offset, size - LOG_OVERHEAD)
        _EPOCH.pack_into(out, pos + 12, leader_epoch)
        h = BatchHeader(pos, fields)
        h.base_offset = next_offset
        h.partition_leader_epoch = leader_epoch
        headers.append(h)
        next_offset += h.last_offset_delta + 1
        pos += size
    return bytes(out), headers


class MemoryRecords:
    """Whole batches in one buffer: what a Produce request carries and a Fetch returns."""

    __slots__ = ("buffer", "_headers", "source")

    def __init__(self, buffer: bytes, headers: list[BatchHeader] | None = None, source: str = "") -> None:
        self.buffer = buffer
        self._headers = headers
        self.source = source

    @classmethod
    def of(cls, batches: Iterable[bytes]) -> "MemoryRecords":
        return cls(b"".join(batches))

    @property
    def size(self) -> int:
        return len(self.buffer)

    def __len__(self) -> int:
        return len(self.buffer)

    def batches(self) -> list[BatchHeader]:
        if self._headers is None:
            self._headers = list(iter_batch_headers(self.buffer, source=self.source))
        return self._headers

    def record_batches(self) -> list[RecordBatch]:
        return decode_batches(self.buffer, source=self.source)

    def records(self) -> list[Record]:
        out: list[Record] = []
        for batch in self.record_batches():
            out.extend(batch.records())
        return out

    def __repr__(self) -> str:
        return f"MemoryRecords({len(self.buffer)} bytes)"


EMPTY = MemoryRecords(b"")
