"""The C record codec (replication/_records.c) against the pure-Python reference in records.py.

Both implementations must give identical bytes, Records and Messages, raise on the same malformed
inputs, and the C one must never crash the interpreter on hostile bytes.
"""

from __future__ import annotations

import os
import pickle
import struct
import subprocess
import sys

import pytest
from confluent_kafka import Message
from crc32c import crc32c
from hypothesis import HealthCheck, given, settings, strategies as st

from replication import records
from replication.errors import CorruptRecordError
from replication.records import (
    BATCH_HEADER_SIZE,
    ControlType,
    decode_batches,
    decode_messages,
    encode_batch,
    encode_control_batch,
)

_records = pytest.importorskip(
    "replication._records", reason="C accelerator not built (python setup.py build_ext --inplace)"
)
if not records.ACCELERATED:
    pytest.skip("EDDY_RECORDS_PURE_PYTHON is set: records.py runs without the accelerator",
                allow_module_level=True)

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
FAST = settings(deadline=None, max_examples=150, suppress_health_check=[HealthCheck.too_slow])

PY = (records._py_encode_records, records._py_decode_records, records._py_decode_messages)
C = (_records.encode_records, _records.decode_records, _records.decode_messages)


@pytest.fixture(params=["python", "c"])
def impl(request, monkeypatch):
    """Route the public functions of records.py through one implementation."""
    enc, dec, msgs = PY if request.param == "python" else C
    monkeypatch.setattr(records, "_encode_records", enc)
    monkeypatch.setattr(records, "_decode_records", dec)
    monkeypatch.setattr(records, "_decode_messages", msgs)
    return request.param


# --- strategies ----------------------------------------------------------------------------

optional_bytes = st.one_of(st.none(), st.binary(max_size=200))
header_value = st.one_of(st.none(), st.binary(max_size=50), st.text(max_size=10))
header_key = st.one_of(st.text(max_size=10), st.text(max_size=10).map(str.encode))
headers = st.one_of(
    st.none(),
    st.lists(st.tuples(header_key, header_value), max_size=4),
    st.dictionaries(st.text(max_size=8), header_value, max_size=3),
)
INT64 = st.integers(-(2**63), 2**63 - 1)
# deltas between any two stay inside 64 bits (wider ones are rejected, see the bad-input test)
timestamp = st.one_of(st.integers(0, 2**41), st.integers(-(2**61), 2**61), st.just(-1))
record = st.one_of(
    st.tuples(optional_bytes, optional_bytes, timestamp),
    st.tuples(optional_bytes, optional_bytes, timestamp, headers),
)


def _expected_headers(h):
    if not h:
        return ()
    items = h.items() if isinstance(h, dict) else h
    return tuple(
        (k if isinstance(k, str) else k.decode("utf-8"), v.encode() if isinstance(v, str) else v)
        for k, v in items
    )


def _message_fields(m: Message) -> tuple:
    return (m.topic(), m.partition(), m.offset(), m.key(), m.value(), m.headers(), m.error(),
            m.timestamp(), m.latency(), m.leader_epoch())


def _outcome(fn, *args, **kwargs):
    """("ok", result) or ("error", kind): decode errors of either implementation count as one kind."""
    try:
        result = fn(*args, **kwargs)
    except records._DECODE_ERRORS:
        return ("error", "decode")
    except Exception as e:  # noqa: BLE001 - any other exception must match too
        return ("error", type(e).__name__)
    if isinstance(result, tuple) and result and isinstance(result[0], list):
        return ("ok", ([_message_fields(m) for m in result[0]], result[1]))
    return ("ok", result)


# --- CRC-32C -------------------------------------------------------------------------------


@FAST
@given(data=st.binary(max_size=3000), split=st.integers(0, 3000), start=st.integers(0, 2**32 - 1))
def test_crc32c_matches_the_crc32c_package(data, split, start):
    assert _records.crc32c(data) == crc32c(data)
    assert _records.crc32c(data, start) == crc32c(data, start)
    split = min(split, len(data))
    assert _records.crc32c(data[split:], _records.crc32c(data[:split])) == crc32c(data)


def test_crc32c_of_large_unaligned_buffers():
    data = os.urandom(200_001)
    for offset in range(8):
        view = memoryview(data)[offset:]
        assert _records.crc32c(view) == crc32c(bytes(view))


# --- encode ----------------------------------------------------------------------------------


@FAST
@given(recs=st.lists(record, min_size=1, max_size=30), reserve=st.sampled_from([0, 61]))
def test_encode_records_is_byte_identical(recs, reserve):
    first_ts = recs[0][2]
    c_out = _records.encode_records(recs, first_ts, reserve)
    py_out = records._py_encode_records(recs, first_ts, reserve)
    assert c_out == py_out
    assert c_out[1] == max(r[2] for r in recs)
    assert bytes(c_out[0][:reserve]) == bytes(reserve)


@FAST
@given(recs=st.lists(record, min_size=1, max_size=30), base=st.integers(0, 2**62))
def test_encode_batch_is_byte_identical_and_round_trips(recs, base):
    outs = {}
    for name, (enc, _dec, _msgs) in (("py", PY), ("c", C)):
        saved = records._encode_records
        records._encode_records = enc
        try:
            outs[name] = encode_batch(recs, base_offset=base, producer_id=7, producer_epoch=1)
        finally:
            records._encode_records = saved
    assert outs["py"] == outs["c"]
    [batch] = decode_batches(outs["c"])
    got = batch.records()
    assert [(r.offset, r.key, r.value, r.timestamp, r.headers) for r in got] == [
        (base + i, r[0], r[1], r[2], _expected_headers(r[3] if len(r) > 3 else None))
        for i, r in enumerate(recs)
    ]


def test_encode_accepts_lists_bytearrays_and_memoryviews():
    recs = [[bytearray(b"k"), memoryview(b"value"), 5, [[b"h", bytearray(b"x")]]], (b"", b"", 6)]
    assert _records.encode_records(recs, 5) == records._py_encode_records(recs, 5)


@pytest.mark.parametrize(
    "bad, error",
    [
        ([("k", b"v", 1)], TypeError),  # str key
        ([(b"k", 5, 1)], TypeError),  # int value
        ([(b"k", b"v")], TypeError),  # missing timestamp
        ([(b"k", b"v", 1, None, 9)], TypeError),  # too many fields
        ([(b"k", b"v", 1.5)], TypeError),  # float timestamp
        ([(b"k", b"v", 1, [("h",)])], TypeError),  # header without value
        ([(b"k", b"v", 1, [(None, b"x")])], TypeError),  # null header key
        ([(b"k", b"v", 1, [(5, b"x")])], TypeError),  # int header key
        ([(b"k", b"v", 2**63 - 1)], ValueError),  # timestamp delta past 64 bits (first_ts negative)
        ([(b"k", b"v", 2**64)], OverflowError),  # timestamp past 64 bits
        ([(b"k", b"v", 1, [(b"\xff", b"x")])], ValueError),  # header key not UTF-8
    ],
)
def test_encode_rejects_bad_records_with_a_typed_error(bad, error):
    with pytest.raises(error):
        _records.encode_records(bad, -10)
    with pytest.raises((TypeError, ValueError, OverflowError)):
        records._py_encode_records(bad, -10)


# --- decode to Record ------------------------------------------------------------------------


@FAST
@given(recs=st.lists(record, min_size=1, max_size=30), base=st.sampled_from([0, 5, 2**40, 2**63 - 3]))
def test_decode_records_is_identical(recs, base):
    buf = encode_batch(recs, base_offset=base)
    [h] = decode_batches(buf)
    args = (buf, base, h.first_timestamp, h.records_count, BATCH_HEADER_SIZE, h.size)
    c_recs = _records.decode_records(*args)
    assert c_recs == records._py_decode_records(*args)
    # offsets past 2**63 - 1 are exact Python ints in both, never wrapped
    assert [r.offset for r in c_recs] == list(range(base, base + len(recs)))
    assert [r.timestamp for r in c_recs] == [r[2] for r in recs]


@FAST
@given(recs=st.lists(record, min_size=1, max_size=30), lead=st.binary(max_size=20))
def test_null_key_indexes_are_identical_and_name_every_keyless_record(recs, lead):
    # The batch sits after other bytes, as a later batch of one append does.
    buf = lead + encode_batch(recs, base_offset=3)
    [h] = decode_batches(buf[len(lead):], base_position=len(lead))
    args = (buf, 3, h.records_count, len(lead) + BATCH_HEADER_SIZE, len(lead) + h.size)
    expected = [i for i, r in enumerate(recs) if r[0] is None]
    assert _records.null_key_indexes(*args) == records._py_null_key_indexes(*args) == expected


def test_null_key_indexes_through_the_public_api_name_a_malformed_batch(impl, monkeypatch):
    monkeypatch.setattr(records, "_null_key_indexes",
                        _records.null_key_indexes if impl == "c" else records._py_null_key_indexes)
    first = encode_batch([(b"k", b"v", 1)])
    bad = bytearray(encode_batch([(None, b"v", 1), (b"k", b"w", 1)], base_offset=40))
    struct.pack_into(">i", bad, 57, 3)  # claim three records where there are two
    buf = first + bytes(bad)
    headers = list(records.iter_batch_headers(buf, validate_crc=False))
    assert records.null_key_indexes(buf, headers[0]) == []
    with pytest.raises(CorruptRecordError, match=r"malformed record #2") as info:
        records.null_key_indexes(buf, headers[1], source="append")
    assert (info.value.position, info.value.base_offset) == (len(first), 40)
    with pytest.raises(_records.DecodeError, match="outside a buffer"):
        _records.null_key_indexes(b"x" * 50, 0, 1, 10, 100)


def test_record_type_behaves_like_the_python_class():
    c = _records.Record(3, 10, b"k", None, (("h", b"v"),))
    py = records._PyRecord(3, 10, b"k", None, (("h", b"v"),))
    assert repr(c) == repr(py) == "Record(offset=3, timestamp=10, key=b'k', value=None, headers=(('h', b'v'),))"
    assert c == _records.Record(offset=3, timestamp=10, key=b"k", value=None, headers=(("h", b"v"),))
    assert c != _records.Record(4, 10, b"k", None, (("h", b"v"),))
    assert _records.Record(1, 2, None, b"v").headers == () == records._PyRecord(1, 2, None, b"v").headers
    assert (c == 5) is False and (c != 5) is True
    for r in (c, py):
        with pytest.raises(TypeError):
            hash(r)
        assert pickle.loads(pickle.dumps(r)) == r
    c.offset = 99
    assert c.offset == 99
    with pytest.raises(TypeError):
        _records.Record(1, 2, b"k")  # value is required, as in the Python class
    assert records.Record is _records.Record


def test_decode_records_through_the_public_api(impl):
    buf = encode_batch([(b"a", b"1", 5, [("x", None)]), (None, b"2", 4)], base_offset=10)
    [batch] = decode_batches(buf)
    assert batch.records() == [records.Record(10, 5, b"a", b"1", (("x", None),)),
                               records.Record(11, 4, None, b"2")]


def test_malformed_record_error_names_source_position_and_offset(impl):
    good = bytearray(encode_batch([(b"key", b"value", 1)], base_offset=77))
    struct.pack_into(">i", good, 57, 2)  # claim two records where there is one
    good[17:21] = struct.pack(">I", crc32c(bytes(good[21:])))
    [batch] = decode_batches(bytes(good), base_position=500)
    with pytest.raises(CorruptRecordError, match=r"malformed record #1 in batch") as info:
        records.decode_records(batch.buffer, batch, source="seg.log")
    assert (info.value.position, info.value.base_offset, info.value.source) == (500, 77, "seg.log")
    assert "seg.log, position 500, base offset 77" in str(info.value)


def test_trailing_bytes_after_the_records_are_an_error(impl):
    good = encode_batch([(b"k", b"v", 1)])
    [batch] = decode_batches(good)
    padded = good + b"\x00\x00"
    with pytest.raises(CorruptRecordError, match="2 bytes after its 1 records"):
        records.decode_records(padded, _Header(batch, size=len(padded)))


class _Header:
    """A header view overriding some fields (as the cleaner's _HeaderView does)."""

    def __init__(self, h, **overrides):
        self._h, self._o = h, overrides

    def __getattr__(self, name):
        return self._o[name] if name in self._o else getattr(self._h, name)


# --- decode to Message -----------------------------------------------------------------------


def _fetch_buffer():
    """Data, a committed and an aborted transaction, markers, LogAppendTime and headers."""
    parts = [
        encode_batch([(b"a", b"0", 100), (b"b", b"1", 100, [("h", b"x"), ("n", None)])],
                     base_offset=0, partition_leader_epoch=2),
        encode_batch([(b"t1", b"committed", 110)], base_offset=2, producer_id=5, producer_epoch=0,
                     is_transactional=True, partition_leader_epoch=2),
        encode_control_batch(ControlType.COMMIT, base_offset=3, timestamp=111, producer_id=5,
                             producer_epoch=0, partition_leader_epoch=2),
        encode_batch([(b"t2", b"aborted", 120), (None, None, 121)], base_offset=4, producer_id=6,
                     producer_epoch=0, is_transactional=True, partition_leader_epoch=3),
        encode_control_batch(ControlType.ABORT, base_offset=6, timestamp=122, producer_id=6,
                             producer_epoch=0, partition_leader_epoch=3),
        encode_batch([(b"c", b"7", 130), (b"d", b"8", 131)], base_offset=7, timestamp_type=1,
                     partition_leader_epoch=3),
    ]
    return b"".join(parts), parts


def test_decode_messages_builds_what_a_kafka_consumer_reports(impl):
    buf, _ = _fetch_buffer()
    msgs, next_offset = decode_messages(buf, "orders", 4)
    assert next_offset == 9
    assert [_message_fields(m) for m in msgs] == [
        ("orders", 4, 0, b"a", b"0", None, None, (1, 100), None, 2),
        ("orders", 4, 1, b"b", b"1", [("h", b"x"), ("n", None)], None, (1, 100), None, 2),
        ("orders", 4, 2, b"t1", b"committed", None, None, (1, 110), None, 2),
        ("orders", 4, 4, b"t2", b"aborted", None, None, (1, 120), None, 3),
        ("orders", 4, 5, None, None, None, None, (1, 121), None, 3),
        # LogAppendTime: every record carries the batch's max timestamp, type 2
        ("orders", 4, 7, b"c", b"7", None, None, (2, 131), None, 3),
        ("orders", 4, 8, b"d", b"8", None, None, (2, 131), None, 3),
    ]
    assert all(isinstance(m, Message) for m in msgs)


def test_decode_messages_read_committed_skips_aborted_batches(impl):
    buf, _ = _fetch_buffer()
    msgs, next_offset = decode_messages(buf, "t", 0, aborted=[(6, 4, 6)])
    assert [m.offset() for m in msgs] == [0, 1, 2, 7, 8]
    assert next_offset == 9
    # another producer's abort range, or a range not covering the batch, removes nothing
    msgs, _ = decode_messages(buf, "t", 0, aborted=[(5, 4, 6), (6, 0, 3)])
    assert [m.offset() for m in msgs] == [0, 1, 2, 4, 5, 7, 8]


@pytest.mark.parametrize("min_offset, offsets, next_offset", [
    (1, [1, 2, 4, 5, 7, 8], 9), (3, [4, 5, 7, 8], 9), (8, [8], 9), (9, [], 9), (50, [], 50),
])
def test_decode_messages_skips_records_below_min_offset(impl, min_offset, offsets, next_offset):
    buf, _ = _fetch_buffer()
    msgs, nxt = decode_messages(buf, "t", 0, min_offset=min_offset)
    assert [m.offset() for m in msgs] == offsets
    assert nxt == next_offset


def test_decode_messages_of_nothing_or_only_markers(impl):
    assert decode_messages(b"", "t", 0, min_offset=12) == ([], 12)
    marker = encode_control_batch(ControlType.COMMIT, base_offset=20, timestamp=1, producer_id=1,
                                  producer_epoch=0)
    assert decode_messages(marker, "t", 0, min_offset=20) == ([], 21)


def test_decode_messages_errors_name_source_position_and_offset(impl):
    buf, parts = _fetch_buffer()
    bad = bytearray(buf)
    second = len(parts[0])
    bad[second + 70] ^= 0x40
    with pytest.raises(CorruptRecordError, match="CRC mismatch") as info:
        decode_messages(bytes(bad), "t", 0, source="fetch t-0", base_position=1000)
    assert (info.value.position, info.value.base_offset) == (1000 + second, 2)
    assert "fetch t-0, position" in str(info.value)
    # without CRC validation the flipped byte shows up in the record itself
    msgs, _ = decode_messages(bytes(bad), "t", 0, validate_crc=False)
    assert len(msgs) == 7


def test_decode_messages_partial_tail(impl):
    buf, parts = _fetch_buffer()
    for cut in (1, 11, 12, 30, len(parts[-1]) - 1):
        torn = buf[: len(buf) - cut]
        with pytest.raises(CorruptRecordError, match="torn batch"):
            decode_messages(torn, "t", 0)
        msgs, next_offset = decode_messages(torn, "t", 0, partial_tail=True)
        assert [m.offset() for m in msgs] == [0, 1, 2, 4, 5]
        assert next_offset == 7


def test_decode_messages_rejects_compressed_and_bad_magic(impl):
    good = bytearray(encode_batch([(b"k", b"v", 1)], base_offset=3))
    comp = bytearray(good)
    comp[22] |= 0x02  # snappy
    comp[17:21] = struct.pack(">I", crc32c(bytes(comp[21:])))
    with pytest.raises(CorruptRecordError, match=r"compressed batches are not supported \(codec 2\)"):
        decode_messages(bytes(comp), "t", 0)
    magic = bytearray(good)
    magic[16] = 1
    with pytest.raises(CorruptRecordError, match="unsupported magic 1"):
        decode_messages(bytes(magic), "t", 0, validate_crc=False)


def test_decode_messages_checks_its_arguments():
    with pytest.raises(TypeError, match="aborted"):
        _records.decode_messages(b"", "t", 0, 0, Message, True, [(1, 2)])
    with pytest.raises(TypeError):
        _records.decode_messages("not bytes", "t", 0, 0, Message)


@FAST
@given(batches=st.lists(st.tuples(st.lists(record, min_size=1, max_size=8), st.booleans(),
                                  st.integers(-1, 5)), min_size=1, max_size=5),
       min_offset=st.integers(0, 40), aborted_pid=st.integers(0, 3))
def test_decode_messages_is_identical(batches, min_offset, aborted_pid):
    parts, base = [], 0
    for i, (recs, log_append, epoch) in enumerate(batches):
        txn = i % 2 == 1
        parts.append(encode_batch(recs, base_offset=base, timestamp_type=int(log_append),
                                  partition_leader_epoch=epoch, producer_id=i % 4 if txn else -1,
                                  producer_epoch=0 if txn else -1, is_transactional=txn))
        base += len(recs) + 3  # gaps, as compaction or markers leave
    buf = b"".join(parts)
    aborted = [(aborted_pid, 0, base // 2)]
    c = _outcome(_records.decode_messages, buf, "t", 1, min_offset, Message, True, aborted)
    py = _outcome(records._py_decode_messages, buf, "t", 1, min_offset, Message, True, aborted)
    assert c == py
    assert c[0] == "ok"


# --- hostile bytes ---------------------------------------------------------------------------


def _sample_batches():
    return [
        encode_batch([(b"k", b"v" * 20, 5, [("h", b"x"), ("k2", None)]), (None, b"", 4), (b"z", None, 9)],
                     base_offset=3),
        encode_batch([(b"a" * 200, b"b" * 300, 2**40, {"x": b"y"})], base_offset=2**40),
    ]


mutation = st.lists(st.tuples(st.integers(0, 10_000), st.integers(0, 255)), min_size=1, max_size=6)


@settings(deadline=None, max_examples=400, suppress_health_check=[HealthCheck.too_slow])
@given(which=st.integers(0, 1), flips=mutation, cut=st.integers(0, 50),
       count_delta=st.integers(-2, 2))
def test_mutated_records_fail_alike(which, flips, cut, count_delta):
    buf = bytearray(_sample_batches()[which])
    for pos, byte in flips:
        buf[BATCH_HEADER_SIZE + pos % (len(buf) - BATCH_HEADER_SIZE)] = byte
    end = len(buf) - cut if cut < len(buf) - BATCH_HEADER_SIZE else len(buf)
    [h] = decode_batches(bytes(_sample_batches()[which]))
    args = (bytes(buf), h.base_offset, h.first_timestamp, h.records_count + count_delta,
            BATCH_HEADER_SIZE, end)
    assert _outcome(_records.decode_records, *args) == _outcome(records._py_decode_records, *args)
    no_ts = args[:2] + args[3:]  # null_key_indexes validates the same records
    assert _outcome(_records.null_key_indexes, *no_ts) == _outcome(records._py_null_key_indexes, *no_ts)


@settings(deadline=None, max_examples=400, suppress_health_check=[HealthCheck.too_slow])
@given(flips=mutation, cut=st.integers(0, 80), fix_crc=st.booleans(),
       min_offset=st.integers(0, 5), partial_tail=st.booleans())
def test_mutated_fetch_buffers_fail_alike(flips, cut, fix_crc, min_offset, partial_tail):
    batches = [bytearray(b) for b in _sample_batches()]
    buf = bytearray(b"".join(batches))
    for pos, byte in flips:
        buf[pos % len(buf)] = byte
    if fix_crc:  # let mutations reach the record parser
        start = 0
        for b in batches:
            if start + 61 <= len(buf):
                buf[start + 17:start + 21] = struct.pack(">I", crc32c(bytes(buf[start + 21:start + len(b)])))
            start += len(b)
    data = bytes(buf[: len(buf) - cut])
    for validate in (True, False):
        c = _outcome(_records.decode_messages, data, "t", 0, min_offset, Message, validate, None,
                     partial_tail)
        py = _outcome(records._py_decode_messages, data, "t", 0, min_offset, Message, validate,
                      None, partial_tail)
        assert c == py


@settings(deadline=None, max_examples=300)
@given(data=st.binary(max_size=400), count=st.integers(-5, 50), start=st.integers(0, 100),
       base=INT64, first_ts=INT64)
def test_random_bytes_never_crash(data, count, start, base, first_ts):
    end = len(data)
    start = min(start, end)
    c = _outcome(_records.decode_records, data, base, first_ts, count, start, end)
    py = _outcome(records._py_decode_records, data, base, first_ts, count, start, end)
    assert c == py
    prefix = struct.pack(">qiibIhiqqqhii", base % 2**63, len(data) + 49, 0, 2, 0, 0, 0, first_ts,
                         first_ts, -1, -1, -1, count)
    for buf in (data, prefix + data):
        assert (_outcome(_records.decode_messages, buf, "t", 0, 0, Message, False)
                == _outcome(records._py_decode_messages, buf, "t", 0, 0, Message, False))


def test_decode_records_rejects_a_range_outside_the_buffer():
    for start, end in ((-1, 10), (10, 5), (0, 100)):
        with pytest.raises(_records.DecodeError, match="outside a buffer"):
            _records.decode_records(b"x" * 50, 0, 0, 1, start, end)
        with pytest.raises(records._DecodeError, match="outside a buffer"):
            records._py_decode_records(b"x" * 50, 0, 0, 1, start, end)


def test_huge_declared_lengths_and_counts_do_not_allocate():
    # 2**31 - 1 records claimed in a 70-byte batch; a key length of 2**62
    rec = bytes([0x40, 0]) + b"\x00\x00" + b"\xfe\xff\xff\xff\xff\xff\xff\xff\x7f"
    with pytest.raises(_records.DecodeError, match="malformed record #0"):
        _records.decode_records(rec, 0, 0, 2**31 - 1, 0, len(rec))
    assert issubclass(_records.DecodeError, ValueError)


# --- fallback ----------------------------------------------------------------------------------


def test_pure_python_mode_is_selectable_and_works():
    code = (
        "from replication import records as r\n"
        "assert not r.ACCELERATED and r.Record is r._PyRecord\n"
        "b = r.encode_batch([(b'k', b'v', 3, [('h', None)])], base_offset=4)\n"
        "assert r.decode_batches(b)[0].records() == [r.Record(4, 3, b'k', b'v', (('h', None),))]\n"
        "m, n = r.decode_messages(b, 't', 0)\n"
        "assert (m[0].offset(), m[0].headers(), n) == (4, [('h', None)], 5)\n"
        "print('ok')\n"
    )
    env = dict(os.environ, EDDY_RECORDS_PURE_PYTHON="1")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ok"


def test_accelerator_is_active_when_built():
    assert records.ACCELERATED is True
    assert records._encode_records is _records.encode_records


def test_encode_survives_python_callbacks_that_mutate_its_inputs():
    class EvilTimestamp:
        def __index__(self):
            recs.clear()  # drops the list's references to every record while C encodes them
            return 7

    class EvilHeaders(list):
        def __bool__(self):
            self.clear()
            return True

    recs = [(b"k" * 100, b"a", 5), (bytes(50), b"b", EvilTimestamp(), EvilHeaders([("h", b"x")])),
            (b"z", b"c", 6)]
    out, max_ts = _records.encode_records(recs, 5, BATCH_HEADER_SIZE)
    assert recs == [] and max_ts == 7
    got = _records.decode_records(bytes(out), 0, 5, 3, BATCH_HEADER_SIZE, len(out))
    assert [(r.key, r.value, r.timestamp, r.headers) for r in got] == [
        (b"k" * 100, b"a", 5, ()), (bytes(50), b"b", 7, ()), (b"z", b"c", 6, ())]
