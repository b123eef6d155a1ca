"""Leader epoch cache: behaviours of Kafka's LeaderEpochFileCacheTest (rules 11-13) plus the
``leader-epoch-checkpoint`` file format."""

from __future__ import annotations

import os
import threading

import pytest

from replication.epoch import (
    CHECKPOINT_FILE_NAME, EpochEntry, LeaderEpochFileCache, read_epoch_checkpoint,
)
from replication.errors import CorruptCheckpointError, InvalidEpochEntryError, ReplicationError

UNDEF = (-1, -1)


@pytest.fixture
def path(tmp_path):
    return str(tmp_path / CHECKPOINT_FILE_NAME)


@pytest.fixture
def cache(path):
    return LeaderEpochFileCache(path)


def E(*pairs):
    return [EpochEntry(e, o) for e, o in pairs]


# -- assign ----------------------------------------------------------------------------------

def test_assign_records_epoch_and_end_offset_is_leo(cache):
    cache.assign(2, 10)
    assert cache.latest_epoch == 2
    assert cache.end_offset_for(2, 11) == (2, 11)


def test_assign_same_epoch_higher_offset_is_noop(cache):
    assert cache.assign(2, 9) is True
    assert cache.assign(2, 10) is False
    assert cache.entries() == E((2, 9))


def test_assign_same_epoch_same_offset_is_noop(cache):
    cache.assign(2, 6)
    assert cache.assign(2, 6) is False
    assert cache.entries() == E((2, 6))


def test_assign_same_epoch_lower_offset_replaces_entry(cache):
    cache.assign(1, 11)
    assert cache.assign(1, 5) is True
    assert cache.entries() == E((1, 5))


def test_assign_lower_start_offset_removes_tail_entries(cache):
    cache.assign(2, 6)
    cache.assign(3, 8)
    cache.assign(4, 11)
    # a new epoch starting below earlier starts wipes every entry at or after that offset
    cache.assign(5, 7)
    assert cache.entries() == E((2, 6), (5, 7))


def test_assign_lower_epoch_removes_higher_epochs(cache):
    cache.assign(2, 6)
    cache.assign(5, 10)
    cache.assign(3, 12)
    assert cache.entries() == E((2, 6), (3, 12))


def test_assign_enforces_monotonic_start_offsets(cache):
    cache.assign(2, 6)
    cache.assign(3, 5)
    assert cache.entries() == E((3, 5))


def test_assign_new_epoch_at_same_offset_replaces(cache):
    cache.assign(2, 6)
    cache.assign(3, 6)
    assert cache.entries() == E((3, 6))


@pytest.mark.parametrize("epoch,offset", [(-1, 0), (0, -1), (-5, -5)])
def test_assign_negative_raises(cache, epoch, offset):
    with pytest.raises(InvalidEpochEntryError) as ei:
        cache.assign(epoch, offset)
    assert isinstance(ei.value, ReplicationError)
    assert str(epoch) in str(ei.value)
    assert cache.entries() == []


def test_tracks_epochs_as_leaders_change_many_times(cache):
    for epoch, offset in [(1, 0), (2, 3), (3, 7), (4, 20)]:
        cache.assign(epoch, offset)
    assert cache.latest_epoch == 4
    assert cache.end_offset_for(1, 25) == (1, 3)
    assert cache.end_offset_for(2, 25) == (2, 7)
    assert cache.end_offset_for(3, 25) == (3, 20)
    assert cache.end_offset_for(4, 25) == (4, 25)


def test_follower_receiving_many_batches_of_one_epoch_keeps_first_offset(cache):
    for offset in range(0, 50, 5):
        cache.assign(1, offset)
    for offset in range(50, 100, 5):
        cache.assign(2, offset)
    assert cache.entries() == E((1, 0), (2, 50))


# -- end_offset_for (rule 12) ----------------------------------------------------------------

def test_end_offset_for_undefined_epoch(cache):
    cache.assign(2, 5)
    assert cache.end_offset_for(-1, 10) == UNDEF


def test_end_offset_for_empty_cache(cache):
    assert cache.end_offset_for(0, 0) == UNDEF
    assert cache.end_offset_for(7, 0) == UNDEF
    assert cache.end_offset_for(-1, 0) == UNDEF


def test_end_offset_for_latest_epoch_is_leo(cache):
    cache.assign(2, 5)
    cache.assign(3, 6)
    cache.assign(4, 7)
    assert cache.end_offset_for(4, 11) == (4, 11)


def test_end_offset_for_epoch_above_latest_is_undefined(cache):
    cache.assign(2, 100)
    assert cache.end_offset_for(3, 100) == UNDEF


def test_end_offset_for_epoch_below_first_gives_first_start(cache):
    cache.assign(5, 256)
    cache.assign(6, 300)
    assert cache.end_offset_for(4, 400) == (4, 256)
    assert cache.end_offset_for(0, 400) == (0, 256)


def test_end_offset_for_previous_epoch_is_next_start(cache):
    cache.assign(2, 5)
    cache.assign(3, 100)
    assert cache.end_offset_for(2, 150) == (2, 100)


def test_end_offset_for_missing_epoch_uses_floor_and_next(cache):
    cache.assign(0, 10)
    cache.assign(2, 13)
    cache.assign(4, 17)
    assert cache.end_offset_for(1, 20) == (0, 13)
    assert cache.end_offset_for(3, 20) == (2, 17)
    assert cache.end_offset_for(5, 20) == UNDEF


def test_epochs_need_not_start_at_zero(cache):
    cache.assign(2, 6)
    assert cache.end_offset_for(2, 7) == (2, 7)
    assert cache.end_offset_for(1, 7) == (1, 6)


# -- queries ---------------------------------------------------------------------------------

def test_empty_cache_queries(cache):
    assert cache.latest_epoch is None
    assert cache.latest_entry is None
    assert cache.earliest_entry is None
    assert cache.previous_epoch is None
    assert cache.epoch_for_offset(0) is None


def test_latest_earliest_previous(cache):
    cache.assign(2, 6)
    assert cache.previous_epoch is None
    cache.assign(3, 8)
    cache.assign(7, 11)
    assert cache.latest_entry == EpochEntry(7, 11)
    assert cache.earliest_entry == EpochEntry(2, 6)
    assert cache.previous_epoch == 3
    assert cache.previous_epoch_of(7) == 3
    assert cache.previous_epoch_of(3) == 2
    assert cache.previous_epoch_of(2) is None
    assert cache.next_epoch_of(2) == 3
    assert cache.next_epoch_of(5) == 7
    assert cache.next_epoch_of(7) is None
    assert cache.epoch_entry(3) == EpochEntry(3, 8)
    assert cache.epoch_entry(4) is None


def test_epoch_for_offset(cache):
    cache.assign(0, 0)
    cache.assign(1, 5)
    cache.assign(3, 10)
    assert cache.epoch_for_offset(0) == 0
    assert cache.epoch_for_offset(4) == 0
    assert cache.epoch_for_offset(5) == 1
    assert cache.epoch_for_offset(9) == 1
    assert cache.epoch_for_offset(10) == 3
    assert cache.epoch_for_offset(1000) == 3


def test_epoch_for_offset_before_first_entry(cache):
    cache.assign(2, 10)
    assert cache.epoch_for_offset(9) is None
    assert cache.epoch_for_offset(10) == 2


# -- truncation (rule 13) --------------------------------------------------------------------

@pytest.fixture
def three(cache):
    cache.assign(2, 6)
    cache.assign(3, 8)
    cache.assign(4, 11)
    return cache


def test_truncate_from_end_drops_entries_on_boundary(three):
    three.truncate_from_end(11)
    assert three.entries() == E((2, 6), (3, 8))


def test_truncate_from_end_between_entries(three):
    three.truncate_from_end(9)
    assert three.entries() == E((2, 6), (3, 8))
    three.truncate_from_end(8)
    assert three.entries() == E((2, 6))


def test_truncate_from_end_beyond_last_is_noop(three):
    three.truncate_from_end(12)
    assert three.entries() == E((2, 6), (3, 8), (4, 11))


def test_truncate_from_end_before_all_clears(three):
    three.truncate_from_end(0)
    assert three.entries() == []


def test_truncate_from_end_undefined_is_noop(three):
    three.truncate_from_end(-1)
    assert three.entries() == E((2, 6), (3, 8), (4, 11))


def test_truncate_from_start_on_boundary_keeps_entry(three):
    three.truncate_from_start(8)
    assert three.entries() == E((3, 8), (4, 11))


def test_truncate_from_start_between_entries_reinserts_at_start(three):
    three.truncate_from_start(9)
    assert three.entries() == E((3, 9), (4, 11))


def test_truncate_from_start_before_first_is_noop(three):
    three.truncate_from_start(1)
    assert three.entries() == E((2, 6), (3, 8), (4, 11))


def test_truncate_from_start_at_first_offset_is_noop(three):
    three.truncate_from_start(6)
    assert three.entries() == E((2, 6), (3, 8), (4, 11))


def test_truncate_from_start_at_latest_keeps_latest(three):
    three.truncate_from_start(11)
    assert three.entries() == E((4, 11))


def test_truncate_from_start_past_latest_moves_latest(three):
    three.truncate_from_start(15)
    assert three.entries() == E((4, 15))


def test_truncate_from_start_persists(three, path):
    three.truncate_from_start(9)
    assert LeaderEpochFileCache(path).entries() == E((3, 9), (4, 11))


def test_truncation_on_empty_cache(cache, path):
    cache.truncate_from_end(7)
    cache.truncate_from_start(7)
    assert cache.entries() == []


def test_clear(three, path):
    three.clear()
    assert three.entries() == []
    assert three.latest_epoch is None
    assert LeaderEpochFileCache(path).entries() == []
    three.assign(5, 20)
    assert three.entries() == E((5, 20))


# -- persistence -----------------------------------------------------------------------------

def test_persistence_round_trip_in_kafka_format(three, path):
    with open(path) as f:
        assert f.read() == "0\n3\n2 6\n3 8\n4 11\n"
    reopened = LeaderEpochFileCache(path)
    assert reopened.entries() == E((2, 6), (3, 8), (4, 11))
    assert reopened.end_offset_for(3, 20) == (3, 11)


def test_every_mutation_is_written_through(cache, path):
    cache.assign(1, 0)
    assert read_epoch_checkpoint(path) == E((1, 0))
    cache.assign(2, 5)
    assert read_epoch_checkpoint(path) == E((1, 0), (2, 5))
    cache.truncate_from_end(5)
    assert read_epoch_checkpoint(path) == E((1, 0))


def test_no_temporary_file_left_behind(three, path):
    three.flush()
    assert sorted(os.listdir(os.path.dirname(path))) == [CHECKPOINT_FILE_NAME]


def test_missing_and_empty_files_are_empty(path):
    assert LeaderEpochFileCache(path).entries() == []
    open(path, "w").close()
    assert LeaderEpochFileCache(path).entries() == []


def test_empty_cache_written_and_read(cache, path):
    cache.flush()
    with open(path) as f:
        assert f.read() == "0\n0\n"
    assert LeaderEpochFileCache(path).entries() == []


def test_flush_overwrites_a_stale_file(cache, path):
    cache.assign(3, 30)
    with open(path, "w") as f:
        f.write("0\n1\n9 99\n")
    cache.flush()
    assert read_epoch_checkpoint(path) == E((3, 30))


def test_reads_file_without_final_newline(path):
    with open(path, "w") as f:
        f.write("0\n2\n1 0\n4 10")
    assert LeaderEpochFileCache(path).entries() == E((1, 0), (4, 10))


@pytest.mark.parametrize("content,line,fragment", [
    ("1\n0\n", 1, "version"),
    ("x\n0\n", 1, "version"),
    ("0\n", 2, "count"),
    ("0\nabc\n", 2, "count"),
    ("0\n-1\n", 2, "count"),
    ("0\n2\n1 0\n", 4, "expected 2 entries but found 1"),
    ("0\n1\n1 0\n2 5\n", 4, "expected 1 entries but found 2"),
    ("0\n1\n1\n", 3, "epoch start_offset"),
    ("0\n1\n1 2 3\n", 3, "epoch start_offset"),
    ("0\n1\none 2\n", 3, "epoch"),
    ("0\n1\n1 +2\n", 3, "start offset"),
    ("0\n1\n-1 2\n", 3, "negative"),
    ("0\n2\n3 0\n2 5\n", 4, "does not follow"),
    ("0\n2\n1 5\n2 4\n", 4, "does not follow"),
    ("0\n1\n\n", 3, "epoch start_offset"),
])
def test_corrupt_checkpoint_is_rejected_naming_file_and_line(path, content, line, fragment):
    with open(path, "w") as f:
        f.write(content)
    with pytest.raises(CorruptCheckpointError) as ei:
        LeaderEpochFileCache(path)
    err = ei.value
    assert isinstance(err, ReplicationError)
    assert err.path == path and path in str(err)
    assert err.line == line and f"line {line}" in str(err)
    assert fragment in str(err)


def test_non_ascii_checkpoint_is_rejected(path):
    with open(path, "wb") as f:
        f.write(b"0\n1\n\xff 1\n")
    with pytest.raises(CorruptCheckpointError) as ei:
        LeaderEpochFileCache(path)
    assert path in str(ei.value)


# -- concurrency -----------------------------------------------------------------------------

def test_concurrent_assign_and_reads_keep_entries_monotonic(tmp_path):
    cache = LeaderEpochFileCache(str(tmp_path / CHECKPOINT_FILE_NAME))
    errors: list[BaseException] = []

    def writer(base: int) -> None:
        try:
            for i in range(30):
                cache.assign(base + i, (base + i) * 10)
        except BaseException as e:  # pragma: no cover - reported below
            errors.append(e)

    def reader() -> None:
        try:
            for _ in range(200):
                entries = cache.entries()
                for a, b in zip(entries, entries[1:]):
                    assert a.epoch < b.epoch and a.start_offset < b.start_offset
        except BaseException as e:
            errors.append(e)

    threads = [threading.Thread(target=writer, args=(b,)) for b in (0, 15)]
    threads.append(threading.Thread(target=reader))
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    entries = cache.entries()
    for a, b in zip(entries, entries[1:]):
        assert a.epoch < b.epoch and a.start_offset < b.start_offset
    assert read_epoch_checkpoint(cache.path) == entries
