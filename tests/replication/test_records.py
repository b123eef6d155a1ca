"""Kafka v2 record batch encoding: round trips, byte-exact header fields, and bad inputs."""

import struct

import pytest
from crc32c import crc32c
from hypothesis import given, settings, strategies as st

from replication.errors import CorruptRecordError
from replication.records import (
    BATCH_HEADER_SIZE,
    ControlType,
    MemoryRecords,
    Record,
    decode_batches,
    encode_batch,
    encode_batch_with_offsets,
    encode_control_batch,
    iter_batch_headers,
    restamp_batches,
    set_base_offset_and_epoch,
)

optional_bytes = st.one_of(st.none(), st.binary(max_size=300))
header = st.tuples(st.text(max_size=10), optional_bytes)
record = st.tuples(
    optional_bytes,
    optional_bytes,
    st.integers(min_value=0, max_value=2**40),
    st.lists(header, max_size=3),
)


@settings(max_examples=200, deadline=None)
@given(records=st.lists(record, min_size=1, max_size=40), base=st.integers(0, 2**50),
       epoch=st.integers(-1, 2**31 - 1))
def test_round_trip_preserves_every_field(records, base, epoch):
    buf = encode_batch(records, base_offset=base, partition_leader_epoch=epoch)
    [batch] = decode_batches(buf)
    assert batch.base_offset == base
    assert batch.partition_leader_epoch == epoch
    assert batch.last_offset == base + len(records) - 1
    assert batch.records_count == len(records)
    assert batch.size == len(buf)
    assert batch.max_timestamp == max(r[2] for r in records)
    decoded = batch.records()
    assert [r.offset for r in decoded] == list(range(base, base + len(records)))
    for (key, value, ts, headers), got in zip(records, decoded):
        assert (got.key, got.value, got.timestamp) == (key, value, ts)
        assert got.headers == tuple(headers)


def test_header_layout_is_kafkas():
    buf = encode_batch([(b"k", b"v", 1000)], base_offset=7, partition_leader_epoch=2,
                       producer_id=42, producer_epoch=3, base_sequence=9, is_transactional=True)
    base, length, epoch, magic, crc, attrs = struct.unpack_from(">qiibIh", buf)
    assert (base, length, epoch, magic) == (7, len(buf) - 12, 2, 2)
    assert crc == crc32c(buf[21:])
    assert attrs & 0x10 and not attrs & 0x20
    pid, pepoch, seq, count = struct.unpack_from(">qhii", buf, 43)
    assert (pid, pepoch, seq, count) == (42, 3, 9, 1)
    assert len(buf) > BATCH_HEADER_SIZE


def test_restamp_changes_offsets_and_epoch_without_breaking_crc():
    a = encode_batch([(b"a", b"1", 1), (b"b", b"2", 2)])
    b = encode_batch([(b"c", b"3", 3)])
    stamped, headers = restamp_batches(a + b, 100, 5)
    batches = decode_batches(stamped)  # validates CRCs
    assert [h.base_offset for h in headers] == [100, 102]
    assert [x.base_offset for x in batches] == [100, 102]
    assert all(x.partition_leader_epoch == 5 for x in batches)
    assert [r.offset for x in batches for r in x.records()] == [100, 101, 102]
    single = set_base_offset_and_epoch(b, 9, 1)
    assert decode_batches(single)[0].records()[0].offset == 9


def test_control_batch_carries_marker_type():
    buf = encode_control_batch(ControlType.ABORT, base_offset=3, timestamp=10,
                               producer_id=1, producer_epoch=0)
    [batch] = decode_batches(buf)
    assert batch.is_control and batch.is_transactional
    assert batch.control_type() is ControlType.ABORT
    assert decode_batches(encode_batch([(b"k", b"v", 1)]))[0].control_type() is None


def test_compaction_reencode_keeps_offsets_and_header():
    buf = encode_batch([(b"a", b"1", 10), (b"b", b"2", 11), (b"a", b"3", 12)], base_offset=50,
                       producer_id=8, producer_epoch=1, base_sequence=0)
    [batch] = decode_batches(buf)
    kept = [r for r in batch.records() if r.offset != 50]
    [cleaned] = decode_batches(encode_batch_with_offsets(batch, kept))
    assert cleaned.last_offset == 52 and cleaned.producer_id == 8
    assert [(r.offset, r.value) for r in cleaned.records()] == [(51, b"2"), (52, b"3")]
    [empty] = decode_batches(encode_batch_with_offsets(batch, []))
    assert empty.records() == [] and empty.last_offset == 52


def test_memory_records_splits_batches():
    mr = MemoryRecords.of([encode_batch([(b"k", b"v", 1)], base_offset=i) for i in range(3)])
    assert [h.base_offset for h in mr.batches()] == [0, 1, 2]
    assert [r.offset for r in mr.records()] == [0, 1, 2]
    assert Record(0, 1, b"k", b"v") == mr.records()[0]


def test_empty_batch_is_rejected():
    with pytest.raises(ValueError):
        encode_batch([])


def test_bit_flip_is_reported_with_source_position_and_offset():
    good = encode_batch([(b"k", b"v" * 50, 1)], base_offset=4)
    bad = bytearray(good + good)
    bad[len(good) + 70] ^= 0x01
    with pytest.raises(CorruptRecordError) as info:
        decode_batches(bytes(bad), source="00000000000000000000.log", base_position=1000)
    err = info.value
    assert err.position == 1000 + len(good) and err.base_offset == 4
    assert "00000000000000000000.log" in str(err) and "CRC" in str(err)


@pytest.mark.parametrize("cut", [1, 11, 12, 40, 61, -1])
def test_torn_tail_is_detected(cut):
    good = encode_batch([(b"k", b"v", 1)])
    torn = good + good[:cut]
    with pytest.raises(CorruptRecordError, match="torn|smaller"):
        list(iter_batch_headers(torn, source="seg.log"))
    # the whole batch before the tear is still readable on its own
    assert len(list(iter_batch_headers(good))) == 1


def test_bad_magic_and_bad_length_are_named():
    good = bytearray(encode_batch([(b"k", b"v", 1)]))
    wrong_magic = bytearray(good)
    wrong_magic[16] = 1
    with pytest.raises(CorruptRecordError, match="magic 1"):
        decode_batches(bytes(wrong_magic), validate_crc=False)
    short = bytearray(good)
    struct.pack_into(">i", short, 8, 10)
    with pytest.raises(CorruptRecordError, match="smaller than a batch header"):
        decode_batches(bytes(short))


def test_malformed_record_inside_valid_crc_is_reported():
    good = bytearray(encode_batch([(b"key", b"value", 1)]))
    struct.pack_into(">i", good, 57, 2)  # claim two records where there is one
    good[17:21] = struct.pack(">I", crc32c(bytes(good[21:])))
    [batch] = decode_batches(bytes(good))
    with pytest.raises(CorruptRecordError, match="malformed record"):
        batch.records()
