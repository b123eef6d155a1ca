"""Log: Kafka's UnifiedLogTest behaviours ported (append, roll, read bounds, HW, truncation,
follower checks, log start offset, retention, delete_records, config)."""

import os
import random

import pytest

from replication.errors import (
    IllegalStateError, InvalidConfigurationError, InvalidOffsetError, InvalidPartitionError,
    InvalidTopicError, LogClosedError, OffsetOutOfRangeError, OffsetsOutOfOrderError,
    RecordBatchTooLargeError, RecordTooLargeError, UnexpectedAppendOffsetError, CorruptRecordError,
)
from replication.log import FetchIsolation, Log, LogConfig
from replication.records import MemoryRecords, encode_batch


class Clock:
    def __init__(self, now=10_000_000):
        self.now = now

    def __call__(self):
        return self.now


def batch(n=1, ts=1000, base_offset=0, epoch=-1, value=b"v" * 30):
    return encode_batch([(b"k%d" % i, value, ts + i if ts >= 0 else -1) for i in range(n)],
                        base_offset=base_offset, partition_leader_epoch=epoch)


def make_log(tmp_path, config=None, clock=None, name="topic-0", **kw):
    return Log(tmp_path / name, config, clock=clock or Clock(), **kw)


def offsets(records):
    return [r.offset for r in records.records()]


def fill(log, count, n=1, epoch=0, ts=1000):
    for i in range(count):
        log.append_as_leader(batch(n, ts=ts + i), epoch)


# -- leader append ------------------------------------------------------------------------------


def test_empty_log(tmp_path):
    log = make_log(tmp_path)
    assert (log.log_start_offset, log.log_end_offset, log.high_watermark) == (0, 0, 0)
    assert log.read(0).size == 0
    with pytest.raises(OffsetOutOfRangeError):
        log.read(1)
    assert os.path.exists(tmp_path / "topic-0" / "00000000000000000000.log")


def test_leader_append_assigns_offsets_from_leo_and_stamps_epoch(tmp_path):
    log = make_log(tmp_path)
    info = log.append_as_leader(batch(3, base_offset=999, epoch=77), 5)
    assert (info.first_offset, info.last_offset, info.num_messages) == (0, 2, 3)
    info = log.append_as_leader(batch(2) + batch(4), 5)  # two batches in one append
    assert (info.first_offset, info.last_offset) == (3, 8)
    assert log.log_end_offset == 9
    headers = log.read(0, 10_000).batches()
    assert [(h.base_offset, h.partition_leader_epoch) for h in headers] == [(0, 5), (3, 5), (5, 5)]
    assert offsets(log.read(0, 10_000)) == list(range(9))
    assert MemoryRecords(info.records).batches()[0].base_offset == 3
    assert log.leader_epoch_cache.entries() == [(5, 0)]
    log.append_as_leader(batch(1), 7)
    assert log.leader_epoch_cache.entries() == [(5, 0), (7, 9)]


def test_leader_append_validates_crc(tmp_path):
    log = make_log(tmp_path)
    bad = bytearray(batch(2))
    bad[-3] ^= 1
    with pytest.raises(CorruptRecordError):
        log.append_as_leader(bytes(bad), 0)
    assert log.log_end_offset == 0


def test_leader_append_size_limits(tmp_path):
    b = batch(5)
    log = make_log(tmp_path, {"max.message.bytes": len(b) - 1})
    with pytest.raises(RecordTooLargeError):
        log.append_as_leader(b, 0)
    log2 = make_log(tmp_path, {"segment.bytes": len(b) - 1}, name="t-1")
    with pytest.raises(RecordBatchTooLargeError):
        log2.append_as_leader(b, 0)
    assert log.log_end_offset == 0 and log2.log_end_offset == 0


def test_empty_append_changes_nothing(tmp_path):
    log = make_log(tmp_path)
    fill(log, 2)
    info = log.append_as_leader(b"", 0)
    assert info.num_messages == 0 and log.log_end_offset == 2
    info = log.append_as_follower(b"")
    assert log.num_segments == 1 and log.log_end_offset == 2


# -- roll (rule 3) ------------------------------------------------------------------------------


def test_roll_on_segment_bytes(tmp_path):
    size = len(batch(1))
    log = make_log(tmp_path, {"segment.bytes": 3 * size})
    fill(log, 10)
    assert [s.base_offset for s in log.segments] == [0, 3, 6, 9]
    assert all(s.size <= 3 * size for s in log.segments)
    assert offsets(log.read(4, 10_000)) == [4, 5]  # one segment per read
    assert log.recovery_point == 9  # a roll flushes what is below the new segment


def test_roll_on_time_by_batch_timestamps(tmp_path):
    log = make_log(tmp_path, {"segment.ms": 100})
    log.append_as_leader(batch(1, ts=1000), 0)
    log.append_as_leader(batch(1, ts=1100), 0)  # waited exactly segment.ms: no roll
    assert log.num_segments == 1
    log.append_as_leader(batch(1, ts=1101), 0)
    assert [s.base_offset for s in log.segments] == [0, 2]


def test_roll_on_time_uses_the_segments_jitter(tmp_path):
    log = make_log(tmp_path, {"segment.ms": 100, "segment.jitter.ms": 50}, rng=random.Random(7))
    jitter = log.active_segment.roll_jitter_ms
    assert 0 <= jitter < 50
    log.append_as_leader(batch(1, ts=1000), 0)
    log.append_as_leader(batch(1, ts=1000 + 100 - jitter), 0)
    assert log.num_segments == 1
    log.append_as_leader(batch(1, ts=1000 + 101 - jitter), 0)
    assert log.num_segments == 2


def test_roll_on_time_without_timestamps_uses_segment_creation_time(tmp_path):
    clock = Clock()
    log = make_log(tmp_path, {"segment.ms": 100}, clock=clock)
    log.append_as_leader(batch(1, ts=-1), 0)
    clock.now += 100
    log.append_as_leader(batch(1, ts=-1), 0)
    assert log.num_segments == 1
    clock.now += 1
    log.append_as_leader(batch(1, ts=-1), 0)
    assert log.num_segments == 2


def test_roll_when_offset_index_is_full(tmp_path):
    log = make_log(tmp_path, {"segment.index.bytes": 3 * 12, "index.interval.bytes": 0})
    fill(log, 12)
    # 1st batch unindexed, then entries; offset index holds 4 entries, time index is full at 2.
    assert log.num_segments > 1
    for seg in log.segments:
        assert seg.time_index.entries <= 3
    assert offsets(log.read(0, 100_000)) == list(range(log.segments[1].base_offset))


def test_roll_on_relative_offset_overflow(tmp_path):
    log = make_log(tmp_path)
    log.append_as_follower(batch(1, base_offset=0))
    far = 2**31 + 5
    log.append_as_follower(batch(1, base_offset=far))
    assert [s.base_offset for s in log.segments] == [0, far]
    assert log.log_end_offset == far + 1


def test_explicit_roll(tmp_path):
    log = make_log(tmp_path)
    fill(log, 3)
    seg = log.roll()
    assert seg.base_offset == 3 and log.active_segment is seg
    again = log.roll()  # empty active segment at the same base: recreated
    assert again.base_offset == 3 and log.num_segments == 2 and again is not seg
    gap = log.roll(10)  # expected offset above the LEO
    assert gap.base_offset == 10
    with pytest.raises(IllegalStateError):
        log.roll(5)  # below the active segment's base offset
    log.append_as_follower(batch(1, base_offset=10))
    assert log.roll(10).base_offset == 11  # never below the LEO


# -- read (rule 5) ------------------------------------------------------------------------------


def test_read_out_of_range_and_at_leo(tmp_path):
    log = make_log(tmp_path)
    fill(log, 5)
    log.update_high_watermark(5)
    log.maybe_increment_log_start_offset(2)
    with pytest.raises(OffsetOutOfRangeError):
        log.read(1)
    with pytest.raises(OffsetOutOfRangeError):
        log.read(6)
    assert log.read(5).size == 0
    assert offsets(log.read(2))[0] == 2


def test_read_bounded_by_high_watermark_and_last_stable_offset(tmp_path):
    log = make_log(tmp_path)
    fill(log, 10)
    log.update_high_watermark(6)
    assert offsets(log.read(0, 10_000, FetchIsolation.LOG_END)) == list(range(10))
    assert offsets(log.read(0, 10_000, FetchIsolation.HIGH_WATERMARK)) == list(range(6))
    assert log.read(6, 10_000, FetchIsolation.HIGH_WATERMARK).size == 0
    assert log.read(8, 10_000, FetchIsolation.HIGH_WATERMARK).size == 0  # above HW: empty
    assert log.last_stable_offset == 6
    log.first_unstable_offset = 4
    assert log.last_stable_offset == 4
    assert offsets(log.read(0, 10_000, FetchIsolation.TXN_COMMITTED)) == list(range(4))
    log.first_unstable_offset = 8  # above the HW: the HW bounds
    assert log.last_stable_offset == 6
    assert offsets(log.read(2, 10_000, 3)) == [2]  # a plain offset bound


def test_read_bound_inside_a_batch_excludes_that_batch(tmp_path):
    log = make_log(tmp_path)
    log.append_as_leader(batch(3), 0)
    log.append_as_leader(batch(3), 0)
    log.update_high_watermark(4)
    assert offsets(log.read(0, 10_000, FetchIsolation.HIGH_WATERMARK)) == [0, 1, 2]


def test_read_max_bytes_and_min_one_message(tmp_path):
    log = make_log(tmp_path)
    fill(log, 10, n=2)
    size = len(batch(2))
    assert offsets(log.read(0, 3 * size + 5)) == list(range(6))
    assert offsets(log.read(0, 5)) == [0, 1]  # min_one_message by default
    r = log.read(0, 5, min_one_message=False)
    assert r.size == 0 and r.first_entry_incomplete


def test_read_skips_to_next_segment_when_start_is_past_the_last_batch(tmp_path):
    log = make_log(tmp_path)
    log.append_as_follower(batch(2, base_offset=0))
    log.roll(10)  # gap: offsets 2..9 do not exist
    log.append_as_follower(batch(2, base_offset=10))
    assert offsets(log.read(5, 10_000)) == [10, 11]


def test_read_across_many_segments_returns_everything_in_order(tmp_path):
    log = make_log(tmp_path, {"segment.bytes": 500, "index.interval.bytes": 100})
    fill(log, 60, n=2)
    got, off = [], 0
    while off < log.log_end_offset:
        recs = offsets(log.read(off, 300))
        got += recs
        off = recs[-1] + 1
    assert got == list(range(120))
    assert log.num_segments > 5


def test_fetch_offset_by_timestamp(tmp_path):
    log = make_log(tmp_path, {"segment.bytes": 400, "index.interval.bytes": 0})
    for i in range(20):
        log.append_as_leader(batch(2, ts=1000 + 10 * i), 0)  # offsets 2i, 2i+1 at ts, ts+1
    assert log.num_segments > 2
    assert log.fetch_offset_by_timestamp(1000) == (1000, 0)
    assert log.fetch_offset_by_timestamp(1051) == (1051, 11)
    assert log.fetch_offset_by_timestamp(1052) == (1060, 12)
    assert log.fetch_offset_by_timestamp(10**9) is None
    assert log.fetch_offset_by_timestamp(-2) == (-1, 0)
    assert log.fetch_offset_by_timestamp(-1) == (-1, 40)
    assert log.fetch_offset_by_timestamp(-3) == (1191, 39)


# -- high watermark (rule 6) --------------------------------------------------------------------


def test_leader_high_watermark_is_forward_only(tmp_path):
    log = make_log(tmp_path)
    fill(log, 5)
    assert log.maybe_increment_high_watermark(3) == 0
    assert log.high_watermark == 3
    assert log.maybe_increment_high_watermark(2) is None
    assert log.maybe_increment_high_watermark(3) is None
    assert log.high_watermark == 3
    with pytest.raises(InvalidOffsetError):
        log.maybe_increment_high_watermark(6)
    assert log.maybe_increment_high_watermark(5) == 3


def test_update_high_watermark_clamps(tmp_path):
    log = make_log(tmp_path)
    fill(log, 5)
    assert log.update_high_watermark(100) == 5
    log.maybe_increment_log_start_offset(3)
    assert log.update_high_watermark(1) == 3


def test_follower_high_watermark_can_decrease(tmp_path):
    log = make_log(tmp_path)
    fill(log, 5)
    assert log.maybe_update_high_watermark(4) == 4
    assert log.maybe_update_high_watermark(4) is None
    assert log.maybe_update_high_watermark(2) == 2
    assert log.maybe_update_high_watermark(50) == 5  # clamped to the LEO
    assert log.maybe_update_high_watermark(60) is None


# -- truncation (rules 8, 9) --------------------------------------------------------------------


def test_truncate_at_or_above_leo_keeps_data_but_trims_epoch_cache(tmp_path):
    log = make_log(tmp_path)
    fill(log, 5, epoch=1)
    log.leader_epoch_cache.assign(2, 5)  # a new leader epoch with no append yet
    assert not log.truncate_to(5)
    assert log.log_end_offset == 5
    assert log.leader_epoch_cache.entries() == [(1, 0)]
    assert not log.truncate_to(50)


def test_truncate_below_first_segment_truncates_fully(tmp_path):
    log = make_log(tmp_path)
    log.truncate_fully_and_start_at(100)
    fill(log, 5, epoch=3)
    log.update_high_watermark(105)
    assert log.truncate_to(50)
    assert [s.base_offset for s in log.segments] == [50]
    assert (log.log_start_offset, log.log_end_offset, log.high_watermark) == (50, 50, 50)
    assert log.leader_epoch_cache.entries() == []


def test_truncate_within_log_deletes_segments_trims_indexes_and_epochs(tmp_path):
    log = make_log(tmp_path, {"segment.bytes": 5 * len(batch(2)), "index.interval.bytes": 0})
    for i in range(20):
        log.append_as_leader(batch(2), 1 if i < 8 else 2)  # epoch 2 from offset 16
    log.update_high_watermark(40)
    assert log.num_segments == 4
    assert log.truncate_to(13)
    assert log.log_end_offset == 13
    assert [s.base_offset for s in log.segments] == [0, 10]
    assert log.high_watermark == 13
    assert log.leader_epoch_cache.entries() == [(1, 0)]
    active = log.active_segment
    assert active.offset_index.last_offset < 13 and not active.offset_index.is_full()
    # the batch 12..13 was cut whole: the log ends after offset 11, appends continue at 13
    log.append_as_leader(batch(1), 3)
    assert log.leader_epoch_cache.entries() == [(1, 0), (3, 13)]
    assert offsets(log.read(10, 10_000)) == [10, 11, 13]


def test_truncate_to_batch_boundary_then_reappend(tmp_path):
    log = make_log(tmp_path)
    fill(log, 10, epoch=4)
    log.update_high_watermark(10)
    log.truncate_to(6)
    assert offsets(log.read(0, 10_000)) == list(range(6))
    log.append_as_follower(batch(2, base_offset=6, epoch=5))
    assert offsets(log.read(0, 10_000)) == list(range(8))
    assert log.leader_epoch_cache.entries() == [(4, 0), (5, 6)]


def test_truncate_lowers_log_start_offset(tmp_path):
    log = make_log(tmp_path)
    fill(log, 10)
    log.update_high_watermark(10)
    log.maybe_increment_log_start_offset(8)
    log.truncate_to(5)
    assert log.log_start_offset == 5


def test_truncate_fully_and_start_at(tmp_path):
    log = make_log(tmp_path)
    fill(log, 10, epoch=2)
    log.update_high_watermark(7)
    log.truncate_fully_and_start_at(3)
    assert [s.base_offset for s in log.segments] == [3]
    assert (log.log_start_offset, log.log_end_offset, log.high_watermark) == (3, 3, 3)
    assert log.leader_epoch_cache.entries() == []
    assert log.read(3).size == 0
    log.append_as_leader(batch(1), 5)
    assert offsets(log.read(3)) == [3]
    with pytest.raises(InvalidOffsetError):
        log.truncate_to(-1)


# -- follower append (rule 2) -------------------------------------------------------------------


def test_follower_append_keeps_offsets_and_learns_epochs(tmp_path):
    log = make_log(tmp_path)
    log.append_as_follower(batch(2, base_offset=0, epoch=1) + batch(3, base_offset=2, epoch=3))
    log.append_as_follower(batch(1, base_offset=5, epoch=3))
    assert log.log_end_offset == 6
    assert log.leader_epoch_cache.entries() == [(1, 0), (3, 2)]
    assert [h.partition_leader_epoch for h in log.read(0, 10_000).batches()] == [1, 3, 3]


def test_follower_append_rejects_offsets_out_of_order(tmp_path):
    log = make_log(tmp_path)
    with pytest.raises(OffsetsOutOfOrderError):
        log.append_as_follower(batch(2, base_offset=5) + batch(2, base_offset=6))
    with pytest.raises(OffsetsOutOfOrderError):
        log.append_as_follower(batch(1, base_offset=5) + batch(1, base_offset=3))
    assert log.log_end_offset == 0


def test_follower_append_below_leo_is_rejected(tmp_path):
    log = make_log(tmp_path)
    log.append_as_follower(batch(5, base_offset=0))
    with pytest.raises(UnexpectedAppendOffsetError) as e:
        log.append_as_follower(batch(2, base_offset=3))
    assert e.value.first_offset == 3 and e.value.last_offset == 4
    log.append_as_follower(batch(1, base_offset=8))  # a gap is allowed
    assert log.log_end_offset == 9


def test_follower_append_larger_than_segment_is_rejected_but_not_by_max_message(tmp_path):
    b = batch(4, base_offset=0)
    log = make_log(tmp_path, {"segment.bytes": len(b) - 1, "max.message.bytes": 10})
    with pytest.raises(RecordBatchTooLargeError):
        log.append_as_follower(b)
    small = batch(1, base_offset=0)
    log.append_as_follower(small)  # above max.message.bytes: followers do not check it
    assert log.log_end_offset == 1


# -- log start offset, retention, delete_records (rule 7) ---------------------------------------


def test_log_start_offset_increments(tmp_path):
    log = make_log(tmp_path)
    log.append_as_leader(batch(3), 1)
    log.append_as_leader(batch(3), 2)
    log.update_high_watermark(4)
    with pytest.raises(OffsetOutOfRangeError):
        log.maybe_increment_log_start_offset(5)
    assert log.maybe_increment_log_start_offset(4)
    assert not log.maybe_increment_log_start_offset(2)
    assert log.log_start_offset == 4
    assert log.leader_epoch_cache.entries() == [(2, 4)]


def test_retention_by_time_deletes_old_segments_only_below_hw(tmp_path):
    clock = Clock(now=100_000)
    size = len(batch(1))
    log = make_log(tmp_path, {"segment.bytes": 2 * size, "retention.ms": 1000}, clock=clock)
    for i in range(10):
        log.append_as_leader(batch(1, ts=10_000 + i * 1000), 0)  # 5 segments of 2 batches
    assert log.num_segments == 5
    assert log.delete_old_segments(now=100_000) == 0  # HW is 0: nothing is deletable
    log.update_high_watermark(4)
    assert log.delete_old_segments(now=100_000) == 2
    assert log.log_start_offset == 4
    # segment [4,6) has largest timestamp 15000: kept while now - 15000 <= 1000
    log.update_high_watermark(10)
    assert log.delete_old_segments(now=16_000) == 0
    assert log.delete_old_segments(now=16_001) == 1
    assert log.log_start_offset == 6
    with pytest.raises(OffsetOutOfRangeError):
        log.read(5)


def test_retention_rolls_instead_of_deleting_the_active_segment(tmp_path):
    log = make_log(tmp_path, {"retention.ms": 10})
    fill(log, 3, ts=1000)
    log.update_high_watermark(3)
    assert log.delete_old_segments(now=10**9) == 1
    assert [s.base_offset for s in log.segments] == [3]
    assert (log.log_start_offset, log.log_end_offset) == (3, 3)
    fill(log, 1)
    assert log.log_end_offset == 4


def test_retention_by_size(tmp_path):
    size = len(batch(1))
    log = make_log(tmp_path, {"segment.bytes": 2 * size, "retention.bytes": 5 * size,
                              "retention.ms": -1})
    fill(log, 10)
    log.update_high_watermark(10)
    assert log.delete_old_segments(now=0) == 2  # 10 batches, keep >= 5 batches worth
    assert log.size == 6 * size
    assert log.log_start_offset == 4


def test_compact_policy_keeps_old_segments(tmp_path):
    log = make_log(tmp_path, {"segment.bytes": 200, "retention.ms": 1, "cleanup.policy": "compact"})
    fill(log, 10)
    log.update_high_watermark(10)
    n = log.num_segments
    assert log.delete_old_segments(now=10**12) == 0 and log.num_segments == n


def test_delete_records(tmp_path):
    size = len(batch(1))
    log = make_log(tmp_path, {"segment.bytes": 2 * size})
    fill(log, 10)
    log.update_high_watermark(7)
    with pytest.raises(OffsetOutOfRangeError):
        log.delete_records(8)
    assert log.delete_records(5) == 5
    assert [s.base_offset for s in log.segments][0] == 4  # segment [4,6) still holds offset 5
    with pytest.raises(OffsetOutOfRangeError):
        log.read(4)
    assert offsets(log.read(5, 10_000))[0] == 5
    assert log.delete_records(-1) == 7
    assert log.segments[0].base_offset == 6


# -- flush --------------------------------------------------------------------------------------


def test_flush_moves_recovery_point(tmp_path):
    log = make_log(tmp_path)
    fill(log, 5)
    assert log.recovery_point == 0 and log.unflushed_messages == 5
    log.flush()
    assert log.recovery_point == 5
    assert log.active_segment.unflushed_bytes == 0


def test_flush_messages_flushes_automatically(tmp_path):
    log = make_log(tmp_path, {"flush.messages": 3})
    fill(log, 2)
    assert log.recovery_point == 0
    fill(log, 1)
    assert log.recovery_point == 3 and log.active_segment.unflushed_bytes == 0


def test_flush_ms(tmp_path):
    clock = Clock()
    log = make_log(tmp_path, {"flush.ms": 1000}, clock=clock)
    fill(log, 2)
    assert not log.maybe_flush()
    clock.now += 1000
    assert log.maybe_flush()
    assert log.recovery_point == 2


def test_default_leaves_flushing_to_the_os(tmp_path):
    log = make_log(tmp_path)
    fill(log, 50)
    assert log.recovery_point == 0 and log.active_segment.unflushed_bytes > 0


# -- config, names, lifecycle -------------------------------------------------------------------


def test_log_config_defaults_and_parsing():
    c = LogConfig()
    assert c.segment_bytes == 1 << 30 and c.segment_ms == 604_800_000
    assert c.index_interval_bytes == 4096 and c.retention_bytes == -1
    c = LogConfig.from_dict({"segment.bytes": "1024", "cleanup.policy": "compact,delete",
                             "unclean.leader.election.enable": "true", "bootstrap.servers": "x"})
    assert c.segment_bytes == 1024 and c.compact and c.delete
    assert c.unclean_leader_election_enable is True
    assert LogConfig.from_dict(c.to_dict()) == c
    assert c.with_overrides({"retention.ms": 5}).retention_ms == 5


@pytest.mark.parametrize("key,value", [
    ("segment.bytes", 10), ("segment.bytes", "abc"), ("segment.ms", 0),
    ("retention.ms", -2), ("cleanup.policy", "zap"), ("min.cleanable.dirty.ratio", 1.5),
    ("flush.messages", 0), ("segment.index.bytes", 4), ("unclean.leader.election.enable", 1),
    ("message.timestamp.type", "Now"), ("segment.bytes", True),
])
def test_log_config_errors_name_the_key(key, value):
    with pytest.raises(InvalidConfigurationError) as e:
        LogConfig.from_dict({key: value})
    assert e.value.key == key and key in str(e.value)


def test_log_config_strict_rejects_unknown_keys():
    with pytest.raises(InvalidConfigurationError) as e:
        LogConfig.from_dict({"segmnet.bytes": 1}, strict=True)
    assert e.value.key == "segmnet.bytes"


def test_directory_name_must_be_topic_dash_partition(tmp_path):
    with pytest.raises(InvalidPartitionError):
        Log(tmp_path / "nopartition")
    with pytest.raises(InvalidTopicError):
        Log(tmp_path / "bad topic-0")
    log = Log(tmp_path / "my.topic-12")
    assert (log.topic, log.partition) == ("my.topic", 12)


def test_closed_log_rejects_operations(tmp_path):
    log = make_log(tmp_path)
    fill(log, 1)
    log.close()
    log.close()  # idempotent
    with pytest.raises(LogClosedError):
        log.append_as_leader(batch(1), 0)
    with pytest.raises(LogClosedError):
        log.read(0)


def test_reopen_keeps_offsets_hw_and_log_start(tmp_path):
    log = make_log(tmp_path, {"segment.bytes": 300})
    fill(log, 20, epoch=3)
    log.update_high_watermark(15)
    log.maybe_increment_log_start_offset(4)
    log.close()
    log = make_log(tmp_path, {"segment.bytes": 300})
    assert (log.log_start_offset, log.high_watermark, log.log_end_offset) == (4, 15, 20)
    got, off = [], 4
    while off < 20:
        recs = offsets(log.read(off, 10_000))
        got += recs
        off = recs[-1] + 1
    assert got == list(range(4, 20))
    assert log.leader_epoch_cache.entries() == [(3, 4)]
    fill(log, 1, epoch=3)
    assert log.log_end_offset == 21


def test_roll_when_offset_index_fills_before_time_index(tmp_path):
    # Equal timestamps: the time index keeps one entry, so the offset index is what fills.
    log = make_log(tmp_path, {"segment.index.bytes": 60, "index.interval.bytes": 0})
    for _ in range(12):
        log.append_as_leader(batch(1, ts=5000), 0)
    first = log.segments[0]
    assert first.offset_index.entries == 7 and first.time_index.entries == 1
    assert [s.base_offset for s in log.segments] == [0, 8]


def test_append_info_records_are_the_stamped_bytes_written(tmp_path):
    log = make_log(tmp_path)
    fill(log, 2)
    info = log.append_as_leader(batch(2, base_offset=77) + batch(1, base_offset=1), 9)
    assert info.records == log.read(2, 10_000).buffer
    assert [(h.base_offset, h.partition_leader_epoch) for h in MemoryRecords(info.records).batches()] \
        == [(2, 9), (4, 9)]


def test_update_config_applies_to_later_rolls(tmp_path):
    log = make_log(tmp_path)
    fill(log, 3)
    log.update_config({"segment.bytes": len(batch(1))})
    fill(log, 2)
    assert [s.base_offset for s in log.segments] == [0, 3, 4]
