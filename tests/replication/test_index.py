"""OffsetIndex / TimeIndex / DurableFile (Kafka's OffsetIndexTest, TimeIndexTest behaviours)."""

import os
import struct

import pytest

from replication.errors import CorruptIndexError, InvalidConfigurationError
from replication.index import DurableFile, OffsetIndex, TimeIndex

BASE = 45


def offset_index(tmp_path, entries=30, base=BASE):
    return OffsetIndex(str(tmp_path / f"{base:020d}.index"), base, entries * 8)


def time_index(tmp_path, entries=30, base=BASE):
    return TimeIndex(str(tmp_path / f"{base:020d}.timeindex"), base, entries * 12)


def test_lookup_on_empty_index_returns_base_and_zero(tmp_path):
    idx = offset_index(tmp_path)
    assert idx.lookup(BASE) == (BASE, 0)
    assert idx.lookup(BASE + 500) == (BASE, 0)
    assert idx.last_offset == BASE


def test_lookup_returns_greatest_entry_at_or_below_target(tmp_path):
    idx = offset_index(tmp_path)
    pairs = [(BASE + 2 * i + 1, 10 * i + 7) for i in range(20)]
    for off, pos in pairs:
        idx.append(off, pos)
    assert idx.lookup(BASE) == (BASE, 0)  # below the first entry
    for off, pos in pairs:
        assert idx.lookup(off) == (off, pos)
        assert idx.lookup(off + 1) == (off, pos)
    assert idx.lookup(BASE + 10_000) == pairs[-1]


def test_entries_are_relative_offsets_big_endian_on_disk(tmp_path):
    idx = offset_index(tmp_path)
    idx.append(BASE + 3, 100)
    idx.append(BASE + 9, 250)
    idx.flush()
    raw = open(idx.path, "rb").read()
    assert raw == struct.pack(">iiii", 3, 100, 9, 250)
    idx.close()
    again = offset_index(tmp_path)
    again.sanity_check(log_size=1000)
    assert again.entries == 2 and again.lookup(BASE + 10) == (BASE + 9, 250)


def test_append_must_increase(tmp_path):
    idx = offset_index(tmp_path)
    idx.append(BASE + 5, 100)
    with pytest.raises(CorruptIndexError):
        idx.append(BASE + 5, 200)
    with pytest.raises(CorruptIndexError):
        idx.append(BASE + 6, 100)
    with pytest.raises(CorruptIndexError):
        offset_index(tmp_path, base=10).append(9, 0)


def test_full_index_detection_trim_and_resize(tmp_path):
    idx = offset_index(tmp_path, entries=3)
    for i in range(3):
        assert not idx.is_full()
        idx.append(BASE + i, i * 10)
    assert idx.is_full()
    with pytest.raises(CorruptIndexError):
        idx.append(BASE + 3, 30)
    idx.truncate_to(BASE + 1)
    assert not idx.is_full()
    idx.trim_to_valid_size()  # on roll: capacity becomes the current size
    assert idx.is_full() and idx.max_entries == 1
    idx.resize(3 * 8)
    assert not idx.is_full() and idx.max_entries == 3


def test_truncate_to_three_cases(tmp_path):
    idx = offset_index(tmp_path)
    for i in range(1, 10):
        idx.append(BASE + 2 * i, 100 * i)  # offsets 47, 49, ..., 63
    idx.truncate_to(BASE + 7)  # between entries: keep those <= 7
    assert idx.entries == 3 and idx.last_offset == BASE + 6
    idx.truncate_to(BASE + 6)  # exact entry: drop from it
    assert idx.entries == 2 and idx.last_offset == BASE + 4
    idx.truncate_to(BASE + 1)  # nothing <= 1: drop all
    assert idx.entries == 0 and idx.lookup(BASE + 100) == (BASE, 0)


def test_truncate_shrinks_the_flushed_file(tmp_path):
    idx = offset_index(tmp_path)
    for i in range(5):
        idx.append(BASE + i, i * 8)
    idx.flush()
    idx.truncate_to(BASE + 2)
    idx.append(BASE + 3, 1000)
    idx.close()
    assert os.path.getsize(idx.path) == 3 * 8
    again = offset_index(tmp_path)
    assert [again.entry(i) for i in range(3)] == [(BASE, 0), (BASE + 1, 8), (BASE + 3, 1000)]


def test_corrupt_offset_index_fails_sanity_check(tmp_path):
    path = tmp_path / f"{BASE:020d}.index"
    path.write_bytes(struct.pack(">ii", 5, 10) + b"\x00\x01")
    with pytest.raises(CorruptIndexError, match="multiple of 8"):
        offset_index(tmp_path).sanity_check()
    path.write_bytes(struct.pack(">iiii", 5, 10, 3, 20))
    with pytest.raises(CorruptIndexError, match="increasing"):
        offset_index(tmp_path).sanity_check()
    path.write_bytes(struct.pack(">iiii", 1, 10, 3, 2000))
    with pytest.raises(CorruptIndexError, match="position 2000"):
        offset_index(tmp_path).sanity_check(log_size=1500)


def test_bad_index_size_config_names_key(tmp_path):
    with pytest.raises(InvalidConfigurationError) as e:
        OffsetIndex(str(tmp_path / "x.index"), 0, 4)
    assert e.value.key == "segment.index.bytes"


def test_time_index_appends_only_increasing_timestamps(tmp_path):
    idx = time_index(tmp_path)
    assert idx.lookup(100) == (-1, BASE)
    assert idx.maybe_append(100, BASE + 1)
    assert not idx.maybe_append(100, BASE + 2)  # same timestamp: not added
    assert not idx.maybe_append(90, BASE + 3)
    assert idx.maybe_append(150, BASE + 4)
    assert idx.entries == 2
    assert idx.lookup(99) == (-1, BASE)
    assert idx.lookup(100) == (100, BASE + 1)
    assert idx.lookup(149) == (100, BASE + 1)
    assert idx.lookup(10**12) == (150, BASE + 4)
    assert idx.last_entry == (150, BASE + 4)
    with pytest.raises(CorruptIndexError):
        idx.maybe_append(200, BASE + 2)  # offset going backwards


def test_time_index_is_full_one_entry_early_and_final_entry_skips_check(tmp_path):
    idx = time_index(tmp_path, entries=3)
    assert idx.maybe_append(10, BASE)
    assert idx.maybe_append(20, BASE + 1)
    assert idx.is_full()  # entries >= max - 1
    assert not idx.maybe_append(30, BASE + 2)
    assert idx.maybe_append(30, BASE + 2, skip_full_check=True)
    assert idx.entries == 3


def test_time_index_truncate_and_reload(tmp_path):
    idx = time_index(tmp_path)
    for i in range(1, 6):
        idx.maybe_append(i * 100, BASE + i * 10)
    idx.truncate_to(BASE + 30)  # exact: drop it and later
    assert idx.last_entry == (200, BASE + 20)
    idx.truncate_to(BASE + 15)
    assert idx.last_entry == (100, BASE + 10)
    idx.close()
    again = time_index(tmp_path)
    again.sanity_check(next_offset=BASE + 11)
    assert again.last_entry == (100, BASE + 10)
    with pytest.raises(CorruptIndexError):
        again.sanity_check(next_offset=BASE + 5)


def test_corrupt_time_index_fails_sanity_check(tmp_path):
    path = tmp_path / f"{BASE:020d}.timeindex"
    path.write_bytes(struct.pack(">qiqi", 100, 1, 50, 2))
    with pytest.raises(CorruptIndexError, match="timestamps"):
        time_index(tmp_path).sanity_check()
    path.write_bytes(b"\x00" * 13)
    with pytest.raises(CorruptIndexError, match="multiple of 12"):
        time_index(tmp_path).sanity_check()


def test_durable_file_crash_drops_unsynced_bytes(tmp_path):
    f = DurableFile(str(tmp_path / "f"))
    assert f.append(b"abc") == 0
    f.fsync()
    assert f.append(b"defg") == 3
    assert f.read(0, 10) == b"abcdefg"
    f.crash()
    assert (tmp_path / "f").read_bytes() == b"abc"


def test_durable_file_truncate_lowers_synced_size(tmp_path):
    f = DurableFile(str(tmp_path / "f"))
    f.append(b"0123456789")
    f.fsync()
    f.truncate(4)
    f.append(b"xy")  # not synced
    f.crash()
    assert (tmp_path / "f").read_bytes() == b"0123"


def test_unflushed_index_entries_are_lost_on_crash(tmp_path):
    idx = offset_index(tmp_path)
    idx.append(BASE + 1, 10)
    idx.flush()
    idx.append(BASE + 2, 20)
    idx.crash()
    assert offset_index(tmp_path).entries == 1
