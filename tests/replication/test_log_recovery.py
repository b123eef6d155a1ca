"""Log recovery on open: torn tails, corrupt batches, corrupt or missing indexes, the recovery
point, the crash simulation, and interrupted segment swaps (the cleaner's protocol)."""

import logging
import os
import random
import shutil

import pytest

from replication.log import STATE_CHECKPOINT_FILE, Log
from replication.records import MemoryRecords, encode_batch


def batch(n=1, ts=1000, base_offset=0, epoch=-1, value=b"v" * 30):
    return encode_batch([(b"k%d" % i, value, ts + i) for i in range(n)], base_offset=base_offset,
                        partition_leader_epoch=epoch)


def all_offsets(log, start=None):
    got, off = [], log.log_start_offset if start is None else start
    while off < log.log_end_offset:
        r = log.read(off, 1 << 20)
        recs = [rec.offset for rec in r.records()]
        if not recs:
            break
        got += [o for o in recs if o >= off]
        off = recs[-1] + 1
    return got


def copy_dir(src, dst):
    """Copy a log directory (plain os calls: much cheaper than shutil on slow file systems)."""
    os.makedirs(dst)
    for name in os.listdir(src):
        fd = os.open(os.path.join(src, name), os.O_RDONLY)
        data = os.read(fd, 1 << 24)
        os.close(fd)
        fd = os.open(os.path.join(dst, name), os.O_WRONLY | os.O_CREAT, 0o644)
        os.write(fd, data)
        os.close(fd)


def check_lookups(log):
    """Every offset is found through the (rebuilt) indexes, in the right batch."""
    for seg in log.segments:
        idx = seg.offset_index
        for i in range(idx.entries):
            off, pos = idx.entry(i)
            assert pos < seg.size
            h = MemoryRecords(seg.read_bytes(pos, 61 + 4096)[:61]).buffer
            assert int.from_bytes(h[:8], "big") <= off
    for off in range(log.log_start_offset, log.log_end_offset):
        r = log.read(off, 1)
        first = r.batches()[0]
        assert first.base_offset <= off <= first.last_offset


CONFIG = {"segment.bytes": 2000, "index.interval.bytes": 150}


@pytest.fixture(scope="module")
def template(tmp_path_factory):
    """A log of 3-record batches; flushed up to a recovery point in the middle, then more
    batches written but not fsynced; files closed without a clean shutdown mark."""
    root = tmp_path_factory.mktemp("template")
    log = Log(root / "t-0", CONFIG)
    rng = random.Random(3)
    layout = []  # (segment base, position, size, base offset, last offset)
    for i in range(60):
        info = log.append_as_leader(batch(rng.randint(1, 5), ts=1000 + i), i // 20)
        if i == 29:
            log.flush()
            recovery_point = log.recovery_point  # what the checkpoint file says
    for seg in log.segments:
        for h in seg.batches():
            layout.append((seg.base_offset, h.position, h.size, h.base_offset, h.last_offset))
    for seg in log.segments:
        seg.close()  # files written (index entries too) but no clean shutdown checkpoint
    assert recovery_point > 0 and len(log.segments) > 4
    return root / "t-0", layout, recovery_point, info.last_offset + 1


def test_torn_tail_property_over_many_cut_points(template, tmp_path):
    src, layout, recovery_point, leo = template
    rng = random.Random(20240601)
    unflushed = [b for b in layout if b[4] >= recovery_point]
    layout[-1][0]
    cuts = []
    for _ in range(120):  # random bytes of the last batch
        b = layout[-1]
        cuts.append((b[0], b[1] + rng.randrange(b[2])))
    for _ in range(60):  # random bytes anywhere in the unflushed region
        b = rng.choice(unflushed)
        cuts.append((b[0], b[1] + rng.randrange(b[2])))
    for n, (seg_base, cut) in enumerate(cuts):
        d = tmp_path / f"c{n}" / "t-0"
        copy_dir(src, d)
        with open(d / f"{seg_base:020d}.log", "r+b") as f:
            f.truncate(cut)
        log = Log(d, CONFIG)
        survivors = [b for b in layout if (b[0], b[1] + b[2]) <= (seg_base, cut)
                     and b[0] <= seg_base]
        expected_leo = survivors[-1][4] + 1
        assert log.log_end_offset == expected_leo, (seg_base, cut)
        assert all_offsets(log) == list(range(expected_leo))
        assert log.active_segment.base_offset == seg_base
        assert log.load_stats["bytes_truncated"] >= 1
        assert min(log.load_stats["recovered_segments"]) <= max(
            b[0] for b in layout if b[3] <= recovery_point)
        if n % 10 == 0:
            check_lookups(log)
            log.append_as_leader(batch(2), 9)  # the log goes on after recovery
            assert log.log_end_offset == expected_leo + 2
        log.crash()  # no fsync needed: the copy is thrown away
        shutil.rmtree(d.parent)


def test_cut_in_an_earlier_unflushed_segment_drops_later_segments(template, tmp_path):
    src, layout, recovery_point, leo = template
    d = tmp_path / "t-0"
    copy_dir(src, d)
    last_seg = layout[-1][0]
    # a batch in an unflushed segment that is not the last one, not its first batch
    b = [x for x in layout if x[3] > recovery_point and x[0] < last_seg and x[1] > 0][0]
    with open(d / f"{b[0]:020d}.log", "r+b") as f:
        f.truncate(b[1] + 5)
    log = Log(d, CONFIG)
    assert log.log_end_offset == b[3]
    assert [s.base_offset for s in log.segments][-1] == b[0]
    assert not (d / f"{last_seg:020d}.log").exists()
    assert all_offsets(log) == list(range(b[3]))
    entries = log.leader_epoch_cache.entries()
    assert entries and all(e.start_offset < log.log_end_offset for e in entries)
    check_lookups(log)


def test_bit_flip_in_unflushed_segment_truncates_from_the_bad_batch(template, tmp_path, caplog):
    src, layout, recovery_point, leo = template
    d = tmp_path / "t-0"
    copy_dir(src, d)
    seg_base = layout[-1][0]
    in_seg = [x for x in layout if x[0] == seg_base]
    victim = in_seg[len(in_seg) // 2]
    path = d / f"{seg_base:020d}.log"
    raw = bytearray(path.read_bytes())
    raw[victim[1] + victim[2] - 3] ^= 0x04  # inside its records: the CRC catches it
    path.write_bytes(raw)
    dropped = len(raw) - victim[1]
    with caplog.at_level(logging.WARNING):
        log = Log(d, CONFIG)
    assert log.log_end_offset == victim[3]
    assert all_offsets(log) == list(range(victim[3]))
    assert f"truncated {dropped} invalid bytes" in caplog.text
    assert "CRC" in caplog.text


def test_clean_reopen_scans_nothing(tmp_path):
    log = Log(tmp_path / "t-0", CONFIG)
    for _i in range(40):
        log.append_as_leader(batch(3), 0)
    log.close()
    again = Log(tmp_path / "t-0", CONFIG)
    assert again.load_stats["recovered_segments"] == []
    assert again.load_stats["rebuilt_indexes"] == []
    assert again.load_stats["clean_shutdown"]
    assert again.log_end_offset == 120 and all_offsets(again) == list(range(120))


def test_crash_recovers_only_from_the_recovery_point(tmp_path):
    log = Log(tmp_path / "t-0", CONFIG)
    for _i in range(40):
        log.append_as_leader(batch(3), 0)
    rp_segment = log.active_segment.base_offset
    log.flush()
    flushed = log.log_end_offset
    for _i in range(20):
        log.append_as_leader(batch(3), 1)
    assert log.num_segments > 3
    log.crash()
    again = Log(tmp_path / "t-0", CONFIG)
    # Segments rolled after the flush were flushed by the roll itself; recovery starts at the
    # segment holding the last recovery point and scans only from there.
    assert min(again.load_stats["recovered_segments"]) >= rp_segment
    assert again.log_end_offset >= flushed
    assert all_offsets(again) == list(range(again.log_end_offset))


def test_crash_loses_unflushed_appends_and_their_epochs(tmp_path):
    log = Log(tmp_path / "t-0")
    log.append_as_leader(batch(5), 1)
    log.flush()
    log.append_as_leader(batch(5), 2)  # unflushed; the epoch cache entry (2, 5) is durable
    assert log.leader_epoch_cache.entries() == [(1, 0), (2, 5)]
    log.crash()
    again = Log(tmp_path / "t-0")
    assert again.log_end_offset == 5
    assert again.leader_epoch_cache.entries() == [(1, 0)]
    assert all_offsets(again) == list(range(5))


def test_high_watermark_is_clamped_after_crash(tmp_path):
    log = Log(tmp_path / "t-0")
    log.append_as_leader(batch(5), 1)
    log.flush()
    log.append_as_leader(batch(5), 1)
    log.update_high_watermark(10)
    log.write_checkpoint()
    log.crash()
    again = Log(tmp_path / "t-0")
    assert again.high_watermark == 5 == again.log_end_offset


@pytest.mark.parametrize("damage", ["garbage", "partial", "beyond", "missing_time", "missing_both"])
def test_corrupt_or_missing_index_files_are_rebuilt(tmp_path, damage):
    log = Log(tmp_path / "t-0", {"index.interval.bytes": 100, "segment.bytes": 3000})
    for i in range(60):
        log.append_as_leader(batch(2, ts=1000 + i), 0)
    log.close()
    first = tmp_path / "t-0" / "00000000000000000000"
    idx, tidx = first.with_suffix(".index"), first.with_suffix(".timeindex")
    if damage == "garbage":
        idx.write_bytes(os.urandom(8 * 5))
    elif damage == "partial":
        idx.write_bytes(idx.read_bytes()[:-3])
    elif damage == "beyond":
        idx.write_bytes(idx.read_bytes() + (10_000).to_bytes(4, "big") + (10**6).to_bytes(4, "big"))
    elif damage == "missing_time":
        tidx.unlink()
    else:
        idx.unlink()
        tidx.unlink()
    log = Log(tmp_path / "t-0", {"index.interval.bytes": 100, "segment.bytes": 3000})
    assert 0 in log.load_stats["rebuilt_indexes"] or damage == "garbage" and \
        log.segments[0].offset_index.entries > 0
    assert log.log_end_offset == 120
    check_lookups(log)
    assert log.fetch_offset_by_timestamp(1010) == (1010, 19)  # batch 9: offsets 18, 19


def test_random_index_garbage_never_breaks_reads(tmp_path):
    log = Log(tmp_path / "t-0", {"index.interval.bytes": 100, "segment.bytes": 3000})
    for _i in range(60):
        log.append_as_leader(batch(2), 0)
    log.close()
    (tmp_path / "t-0" / "00000000000000000000.index").write_bytes(
        b"".join(i.to_bytes(4, "big") + (i * 7).to_bytes(4, "big") for i in range(0, 40, 3)))
    log = Log(tmp_path / "t-0", {"index.interval.bytes": 100, "segment.bytes": 3000})
    assert log.load_stats["rebuilt_indexes"] == [0]
    check_lookups(log)


# -- interrupted swaps (log cleaner) ------------------------------------------------------------


def _compacted_log(tmp_path):
    size = len(batch(2))
    log = Log(tmp_path / "t-0", {"segment.bytes": 3 * size, "cleanup.policy": "compact"})
    for i in range(12):
        log.append_as_leader(batch(2, ts=1000 + i), 0)
    return log


def _cleaned_from(log, olds, keep_every=2):
    """A cleaned segment holding every other batch of `olds` (offsets preserved)."""
    new = log.new_cleaned_segment(olds[0].base_offset)
    for s in olds:
        for i, h in enumerate(s.batches()):
            if i % keep_every == 0:
                new.append(s.read_bytes(h.position, h.size))
    return new


def test_replace_segments_swaps_and_survives_reopen(tmp_path):
    log = _compacted_log(tmp_path)
    olds = log.segments[:2]
    new = _cleaned_from(log, olds)
    expected = [o for o in all_offsets(log) if o >= 12] 
    kept = [o for s in [new] for h in s.batches() for o in range(h.base_offset, h.last_offset + 1)]
    log.replace_segments([new], olds)
    assert all_offsets(log) == kept + expected
    assert not [n for n in os.listdir(tmp_path / "t-0") if n.endswith((".cleaned", ".swap"))]
    log.close()
    again = Log(tmp_path / "t-0")
    assert all_offsets(again) == kept + expected
    assert again.load_stats["recovered_segments"] == []


def test_crash_before_swap_rolls_back(tmp_path):
    log = _compacted_log(tmp_path)
    before = all_offsets(log)
    new = _cleaned_from(log, log.segments[:2])
    new.flush()
    new.close()
    log.close()  # crash point: the .cleaned files exist, nothing renamed yet
    again = Log(tmp_path / "t-0")
    assert all_offsets(again) == before
    assert not [n for n in os.listdir(tmp_path / "t-0") if n.endswith(".cleaned")]


def test_crash_with_some_swaps_and_lower_cleaned_rolls_back(tmp_path):
    log = _compacted_log(tmp_path)
    before = all_offsets(log)
    segs = log.segments
    low = _cleaned_from(log, segs[:1])
    high = _cleaned_from(log, segs[1:2])
    for s in (low, high):
        s.flush()
    high.change_file_suffixes(".cleaned", ".swap")  # renamed highest first, then crash
    for s in (low, high):
        s.close()
    log.close()
    again = Log(tmp_path / "t-0")
    assert again.load_stats["swaps_rolled_back"] == [high.base_offset]
    assert all_offsets(again) == before
    assert not [n for n in os.listdir(tmp_path / "t-0") if n.endswith((".cleaned", ".swap"))]


def test_crash_after_all_swaps_renamed_completes_the_swap(tmp_path):
    log = _compacted_log(tmp_path)
    olds = log.segments[:2]
    new = _cleaned_from(log, olds)
    kept = [o for h in new.batches() for o in range(h.base_offset, h.last_offset + 1)]
    rest = [o for o in all_offsets(log) if o >= log.segments[2].base_offset]
    new.flush()
    new.change_file_suffixes(".cleaned", ".swap")
    new.close()
    log.close()  # crash point: swap files exist, old segments not yet deleted
    again = Log(tmp_path / "t-0")
    assert again.load_stats["swaps_completed"] == [0]
    assert all_offsets(again) == kept + rest
    assert [s.base_offset for s in again.segments][0] == 0
    assert not [n for n in os.listdir(tmp_path / "t-0") if n.endswith(".swap")]


def test_malformed_state_checkpoint_means_full_recovery(tmp_path):
    log = Log(tmp_path / "t-0", CONFIG)
    for _i in range(30):
        log.append_as_leader(batch(3), 0)
    log.close()
    (tmp_path / "t-0" / STATE_CHECKPOINT_FILE).write_text("0\nrecovery_point x\n")
    again = Log(tmp_path / "t-0", CONFIG)
    assert again.load_stats["recovered_segments"] == [s.base_offset for s in again.segments]
    assert all_offsets(again) == list(range(90))
