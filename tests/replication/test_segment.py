"""LogSegment: Kafka's LogSegmentTest behaviours ported (read, index, truncate, roll, recover)."""

import logging
import os

import pytest

from replication.errors import CorruptRecordError, LogSegmentOffsetOverflowError
from replication.records import MemoryRecords, encode_batch
from replication.segment import LogSegment, log_file_name, offset_from_file_name


class Clock:
    def __init__(self, now=1_000_000):
        self.now = now

    def __call__(self):
        return self.now


def batch(offset, n=1, ts=1000, value=b"v" * 20, epoch=0):
    return encode_batch([(b"k%d" % i, value, ts + i) for i in range(n)], base_offset=offset,
                        partition_leader_epoch=epoch)


def segment(tmp_path, base=40, interval=0, max_index_size=10 * 1024 * 1024, clock=None, **kw):
    return LogSegment(str(tmp_path), base, index_interval_bytes=interval,
                      max_index_size=max_index_size, clock=clock, **kw)


def offsets(data):
    return [r.offset for r in MemoryRecords(data).records()]


def test_file_names(tmp_path):
    seg = segment(tmp_path, base=42)
    assert os.path.basename(seg.log_path) == "00000000000000000042.log"
    assert os.path.exists(tmp_path / "00000000000000000042.index")
    assert os.path.exists(tmp_path / "00000000000000000042.timeindex")
    assert log_file_name(7) == "00000000000000000007"
    assert offset_from_file_name("00000000000000000042.log.swap") == 42


def test_read_on_empty_segment_returns_none(tmp_path):
    seg = segment(tmp_path)
    assert seg.read(40, 300) is None
    assert seg.next_offset == 40


def test_read_before_first_offset_returns_first_batch(tmp_path):
    seg = segment(tmp_path)
    data = batch(50, 2)
    seg.append(data)
    r = seg.read(41, 300)
    assert r.position == 0 and r.data == data


def test_read_after_last_offset_returns_none(tmp_path):
    seg = segment(tmp_path)
    seg.append(batch(50, 2))
    assert seg.read(52, 200) is None
    assert seg.read(500, 200) is None


def test_read_from_mid_batch_returns_the_whole_batch(tmp_path):
    seg = segment(tmp_path)
    b1, b2 = batch(50, 3), batch(53, 3)
    seg.append(b1 + b2)
    r = seg.read(54, 10_000)
    assert r.position == len(b1) and r.data == b2


def test_read_returns_only_whole_batches_within_max_size(tmp_path):
    seg = segment(tmp_path)
    bs = [batch(40 + 2 * i, 2) for i in range(5)]
    for b in bs:
        seg.append(b)
    size = len(bs[0])
    r = seg.read(40, 2 * size + size // 2)
    assert r.data == bs[0] + bs[1]
    assert offsets(r.data) == [40, 41, 42, 43]


def test_read_respects_max_position(tmp_path):
    seg = segment(tmp_path)
    bs = [batch(40 + i, 1) for i in range(4)]
    seg.append(b"".join(bs))
    r = seg.read(40, 10_000, max_position=2 * len(bs[0]))
    assert offsets(r.data) == [40, 41]
    assert seg.read(42, 10_000, max_position=2 * len(bs[0])).data == b""


def test_min_one_message_and_first_entry_incomplete(tmp_path):
    seg = segment(tmp_path)
    b = batch(40, 5)
    seg.append(b)
    r = seg.read(40, 10)
    assert r.data == b"" and r.first_entry_incomplete
    r = seg.read(40, 10, min_one_message=True)
    assert r.data == b and not r.first_entry_incomplete
    assert seg.read(40, 0).data == b""


def test_index_is_sparse_by_index_interval_bytes(tmp_path):
    seg = segment(tmp_path, interval=300)
    bs = [batch(40 + i, 1) for i in range(60)]
    size = len(bs[0])
    for b in bs:
        seg.append(b)
    idx = seg.offset_index
    assert 0 < idx.entries < 60
    positions = [idx.entry(i)[1] for i in range(idx.entries)]
    gaps = [b - a for a, b in zip([0] + positions, positions)]
    assert all(g > 300 for g in gaps)
    assert all(g <= 300 + size for g in gaps)
    for off in range(40, 100):  # every offset still found through the sparse index
        assert offsets(seg.read(off, size).data) == [off]


def test_first_batch_is_never_indexed_and_every_other_with_zero_interval(tmp_path):
    seg = segment(tmp_path, interval=0)
    for i in range(5):
        seg.append(batch(40 + i * 3, 3))
    idx = seg.offset_index
    # An entry maps a batch's *last* offset to its position.
    assert [idx.entry(i)[0] for i in range(idx.entries)] == [45, 48, 51, 54]


def test_bulk_append_indexes_each_batch(tmp_path):
    seg = segment(tmp_path, interval=0)
    seg.append(b"".join(batch(40 + i, 1) for i in range(10)))
    assert seg.offset_index.entries == 9
    assert seg.next_offset == 50


def test_translate_offset(tmp_path):
    seg = segment(tmp_path, interval=0)
    bs = [batch(40 + 2 * i, 2) for i in range(4)]
    for b in bs:
        seg.append(b)
    size = len(bs[0])
    assert seg.translate_offset(43) == (43, size, size)
    assert seg.translate_offset(44) == (45, 2 * size, size)
    assert seg.translate_offset(48) is None


def test_append_outside_relative_range_raises(tmp_path):
    seg = segment(tmp_path)
    with pytest.raises(LogSegmentOffsetOverflowError):
        seg.append(batch(39))
    with pytest.raises(LogSegmentOffsetOverflowError):
        seg.append(batch(40 + 2**31))


def test_truncate_to_drops_batches_and_index_entries(tmp_path):
    seg = segment(tmp_path, interval=0)
    bs = [batch(40 + 2 * i, 2, ts=1000 + i * 10) for i in range(10)]
    for b in bs:
        seg.append(b)
    dropped = seg.truncate_to(50)  # the batch 50-51 and later
    assert dropped == 5 * len(bs[0])
    assert seg.size == 5 * len(bs[0])
    assert seg.next_offset == 50
    assert seg.read(50, 10_000) is None
    assert offsets(seg.read(40, 10_000).data) == list(range(40, 50))
    assert seg.offset_index.last_offset < 50
    assert seg.time_index.last_entry[1] < 50
    assert seg.max_timestamp_so_far == 1041
    seg.append(batch(50, 1, ts=5))  # append continues after truncation
    assert seg.next_offset == 51


def test_truncate_to_mid_batch_drops_the_whole_batch(tmp_path):
    seg = segment(tmp_path)
    b1, b2 = batch(40, 3), batch(43, 3)
    seg.append(b1 + b2)
    assert seg.truncate_to(44) == len(b2)
    assert seg.next_offset == 43


def test_truncate_full_segment_resizes_indexes_and_resets_creation_time(tmp_path):
    clock = Clock()
    seg = segment(tmp_path, interval=0, max_index_size=3 * 8, clock=clock)
    for i in range(5):
        seg.append(batch(40 + i))
    assert seg.offset_index.is_full()
    seg.on_become_inactive()
    clock.now += 500
    seg.truncate_to(40)
    assert seg.size == 0
    assert not seg.offset_index.is_full() and not seg.time_index.is_full()
    assert seg.created_ms == clock.now
    assert not seg.should_roll(100, -1, 40, clock.now, 1000, 10)


def test_should_roll_on_size(tmp_path):
    seg = segment(tmp_path)
    b = batch(40)
    seg.append(b)
    assert not seg.should_roll(100, 1000, 41, 0, len(b) + 100, 10**9)
    assert seg.should_roll(101, 1000, 41, 0, len(b) + 100, 10**9)


def test_should_roll_on_time_by_batch_timestamps_with_jitter(tmp_path):
    seg = segment(tmp_path, roll_jitter_ms=30)
    seg.append(batch(40, ts=1000))
    # waited = incoming max timestamp - first batch's max timestamp; limit segment.ms - jitter
    assert not seg.should_roll(10, 1000 + 70, 41, 0, 10**9, 100)
    assert seg.should_roll(10, 1000 + 71, 41, 0, 10**9, 100)


def test_should_roll_on_wall_clock_when_batches_have_no_timestamp(tmp_path):
    clock = Clock()
    seg = segment(tmp_path, clock=clock)
    seg.append(batch(40, ts=-1))
    assert not seg.should_roll(10, -1, 41, clock.now + 100, 10**9, 100)
    assert seg.should_roll(10, -1, 41, clock.now + 101, 10**9, 100)


def test_empty_segment_never_rolls_on_time(tmp_path):
    clock = Clock()
    seg = segment(tmp_path, clock=clock)
    assert not seg.should_roll(10, 10**12, 41, clock.now + 10**9, 10**9, 100)


def test_should_roll_on_full_indexes_and_offset_overflow(tmp_path):
    seg = segment(tmp_path, interval=0, max_index_size=2 * 12)  # time index: full at 1 entry
    seg.append(batch(40, ts=10))
    assert not seg.should_roll(10, 10, 41, 0, 10**9, 10**9)
    seg.append(batch(41, ts=20))
    assert seg.time_index.is_full()
    assert seg.should_roll(10, 20, 42, 0, 10**9, 10**9)
    seg2 = segment(tmp_path, base=1000)
    seg2.append(batch(1000))
    assert not seg2.should_roll(10, 1000, 1000 + 2**31 - 1, 0, 10**9, 10**9)
    assert seg2.should_roll(10, 1000, 1000 + 2**31, 0, 10**9, 10**9)


def test_recover_rebuilds_identical_indexes(tmp_path):
    seg = segment(tmp_path, interval=100)
    for i in range(30):
        seg.append(batch(40 + 2 * i, 2, ts=100 * i))
    want_idx = [seg.offset_index.entry(i) for i in range(seg.offset_index.entries)]
    want_time = [seg.time_index.entry(i) for i in range(seg.time_index.entries)]
    assert seg.recover() == 0
    assert [seg.offset_index.entry(i) for i in range(seg.offset_index.entries)] == want_idx
    got_time = [seg.time_index.entry(i) for i in range(seg.time_index.entries)]
    assert got_time[: len(want_time)] == want_time
    assert got_time[-1] == (2901, 99)  # final entry: max timestamp and its offset
    assert seg.next_offset == 100


def test_recover_truncates_torn_tail(tmp_path, caplog):
    seg = segment(tmp_path)
    b1, b2 = batch(40, 2), batch(42, 2)
    seg.append(b1 + b2)
    seg.log_file.truncate(len(b1) + len(b2) - 7)
    with caplog.at_level(logging.WARNING, logger="replication.segment"):
        assert seg.recover() == len(b2) - 7
    assert seg.size == len(b1) and seg.next_offset == 42
    assert "truncated %d invalid bytes" % (len(b2) - 7) in caplog.text


def test_recover_truncates_at_a_bad_crc(tmp_path):
    seg = segment(tmp_path)
    bs = [batch(40 + i) for i in range(5)]
    seg.append(b"".join(bs))
    path = seg.log_path
    seg.close()
    raw = bytearray(open(path, "rb").read())
    raw[2 * len(bs[0]) + 70] ^= 0x10  # a record byte of the third batch
    open(path, "wb").write(raw)
    seg = segment(tmp_path)
    assert seg.recover() == 3 * len(bs[0])
    assert seg.next_offset == 42


def test_recover_rejects_offsets_going_backwards(tmp_path):
    seg = segment(tmp_path)
    seg.append(batch(45))
    seg.log_file.append(batch(44))  # bypass the append checks
    assert seg.recover() == len(batch(44))
    assert seg.next_offset == 46


def test_batches_raises_corrupt_on_torn_data(tmp_path):
    seg = segment(tmp_path)
    seg.append(batch(40))
    seg.log_file.append(b"\x00" * 5)
    with pytest.raises(CorruptRecordError) as e:
        list(seg.batches())
    assert e.value.position == len(batch(40))


def test_find_offset_by_timestamp(tmp_path):
    seg = segment(tmp_path, interval=0)
    for i in range(10):
        seg.append(batch(40 + 3 * i, 3, ts=1000 + 100 * i))  # records at ts, ts+1, ts+2
    assert seg.find_offset_by_timestamp(0) == (1000, 40)
    assert seg.find_offset_by_timestamp(1101) == (1101, 44)
    assert seg.find_offset_by_timestamp(1103) == (1200, 46)
    assert seg.find_offset_by_timestamp(1100, starting_offset=45) == (1102, 45)
    assert seg.find_offset_by_timestamp(5000) is None


def test_close_and_reopen_keeps_max_timestamp_and_next_offset(tmp_path):
    seg = segment(tmp_path, interval=10**6)
    seg.append(batch(40, 2, ts=500))
    seg.append(batch(42, 2, ts=900))
    seg.append(batch(44, 1, ts=700))
    seg.close()
    again = segment(tmp_path, interval=10**6)
    assert again.largest_timestamp == 901
    assert again.next_offset == 45
    again.sanity_check()


def test_largest_timestamp_falls_back_to_mtime(tmp_path):
    seg = segment(tmp_path)
    seg.append(batch(40, ts=-1))
    assert abs(seg.largest_timestamp - os.stat(seg.log_path).st_mtime * 1000) < 2


def test_crash_loses_unflushed_bytes(tmp_path):
    seg = segment(tmp_path)
    b1, b2 = batch(40), batch(41)
    seg.append(b1)
    seg.flush()
    assert seg.unflushed_bytes == 0
    seg.append(b2)
    assert seg.unflushed_bytes == len(b2)
    seg.crash()
    again = segment(tmp_path)
    assert again.size == len(b1) and again.next_offset == 41


def test_change_file_suffixes(tmp_path):
    seg = segment(tmp_path, suffix=".cleaned")
    seg.append(batch(40))
    seg.change_file_suffixes(".cleaned", ".swap")
    assert seg.log_path.endswith(".log.swap")
    assert os.path.exists(str(tmp_path / "00000000000000000040.timeindex.swap"))
    seg.change_file_suffixes(".swap", "")
    assert os.path.exists(str(tmp_path / "00000000000000000040.log"))
    assert seg.read(40, 1000).data == batch(40)
    with pytest.raises(ValueError):
        seg.change_file_suffixes(".swap", "")
