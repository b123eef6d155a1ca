"""Log compaction: equivalence, tombstones and delete horizons, transactions, the cleanable
range, crash safety at every step, the cleaner checkpoint and the background thread."""

from __future__ import annotations

import os
import random
import threading

import pytest

from replication.cleaner import (
    CLEANER_CHECKPOINT_FILE, DELETE_HORIZON_FLAG, LogCleaner, delete_horizon_ms,
    group_segments_by_size, read_cleaner_checkpoint, write_cleaner_checkpoint,
)
from replication.errors import (
    CleaningAbortedError, CorruptCheckpointError, InvalidConfigurationError, ReplicationError,
)
from replication.log import Log
from replication.records import (
    ControlType, decode_batches, encode_batch, encode_control_batch,
)

T0 = 1_700_000_000_000
RETENTION = 10_000


class Crash(Exception):
    """A simulated crash raised from a fault hook."""


def open_log(path, **overrides) -> Log:
    config = {"cleanup.policy": "compact", "segment.bytes": 1024, "segment.ms": 10**12,
              "delete.retention.ms": RETENTION, "index.interval.bytes": 128}
    config.update(overrides)
    return Log(str(path), config, clock=lambda: T0)


def append(log: Log, items, ts: int = T0, **batch) -> None:
    log.append_as_leader(encode_batch([(k, v, ts) for k, v in items], **batch), 0, now=ts)


def read_batches(log: Log):
    out = []
    offset = log.log_start_offset
    while offset < log.log_end_offset:
        data = log.read(offset, 1 << 20)
        batches = decode_batches(data.buffer)
        assert batches, f"read at {offset} returned nothing below the LEO {log.log_end_offset}"
        out.extend(batches)
        offset = batches[-1].next_offset
    return out


def read_all(log: Log) -> list[tuple[int, bytes | None, bytes | None]]:
    """Every (offset, key, value) of non-control records, checking offsets strictly increase."""
    out = []
    last = -1
    for b in read_batches(log):
        assert b.base_offset > last
        for r in b.records():
            assert r.offset > last, "offsets must strictly increase"
            last = r.offset
            if not b.is_control:
                out.append((r.offset, r.key, r.value))
    return out


def latest(records, drop_tombstones: bool = False) -> dict:
    m = {}
    for _o, k, v in records:
        m[k] = v
    if drop_tombstones:
        m = {k: v for k, v in m.items() if v is not None}
    return m


def random_log(path, seed: int, n_records: int = 600, keys: int = 40, **overrides) -> Log:
    rng = random.Random(seed)
    log = open_log(path, **overrides)
    written = 0
    while written < n_records:
        n = rng.randint(1, 6)
        items = []
        for _ in range(n):
            k = b"k%03d" % rng.randrange(keys)
            v = None if rng.random() < 0.15 else b"v%d-" % written + b"x" * rng.randrange(30)
            items.append((k, v))
            written += 1
        append(log, items)
    return log


def segment_bytes(seg) -> bytes:
    return seg.read_bytes(0, seg.size)


# -- equivalence --------------------------------------------------------------------------------

@pytest.mark.parametrize("seed", range(6))
def test_compaction_equivalence(tmp_path, seed):
    log = random_log(tmp_path / "topic-0", seed)
    assert log.num_segments > 5
    before = read_all(log)
    before_set = set(before)
    active = log.active_segment
    active_base, active_data = active.base_offset, segment_bytes(active)

    stats = LogCleaner().clean(log, now_ms=T0)
    assert stats.groups >= 1 and stats.records_retained < stats.records_read
    after = read_all(log)

    # the latest value (tombstones included: first pass keeps them) of every key is unchanged
    assert latest(after) == latest(before)
    # offsets preserved: each surviving record is an original record at its original offset
    assert set(after) <= before_set
    assert len(after) < len(before)
    # the active segment is untouched, and every record in it survives
    assert log.active_segment.base_offset == active_base
    assert segment_bytes(log.active_segment) == active_data
    assert [r for r in before if r[0] >= active_base] == [r for r in after if r[0] >= active_base]
    # in the cleaned range every key appears once
    cleaned_keys = [k for o, k, _v in after if o < stats.first_uncleanable_offset]
    assert len(cleaned_keys) == len(set(cleaned_keys))
    assert stats.first_uncleanable_offset == active_base

    # after the delete horizon, tombstones in the cleaned range are gone, values are the same
    stats2 = LogCleaner().clean(log, now_ms=T0 + RETENTION)
    after2 = read_all(log)
    assert latest(after2, drop_tombstones=True) == latest(before, drop_tombstones=True)
    assert set(after2) <= before_set
    assert not [r for r in after2 if r[0] < active_base and r[2] is None]
    assert stats2.tombstones_removed == sum(1 for r in after if r[0] < active_base and r[2] is None)

    # the result survives a clean reopen
    log.close()
    reopened = open_log(tmp_path / "topic-0")
    assert read_all(reopened) == after2
    reopened.close()


def test_incremental_cleaning_uses_the_checkpoint(tmp_path):
    log = random_log(tmp_path / "topic-3", seed=11)
    cleaner = LogCleaner()
    first = cleaner.clean(log, now_ms=T0)
    checkpoint = read_cleaner_checkpoint(str(tmp_path / CLEANER_CHECKPOINT_FILE))
    assert checkpoint == {("topic", 3): first.first_uncleanable_offset}
    assert first.first_dirty_offset == 0

    rng = random.Random(5)
    for i in range(100):
        append(log, [(b"k%03d" % rng.randrange(40), b"late-%d" % i)])
    before = read_all(log)
    second = cleaner.clean(log, now_ms=T0)
    assert second.first_dirty_offset == first.first_uncleanable_offset
    assert second.first_uncleanable_offset == log.active_segment.base_offset
    after = read_all(log)
    assert latest(after) == latest(before)
    assert set(after) <= set(before)


def test_cleaning_twice_changes_nothing(tmp_path):
    log = random_log(tmp_path / "topic-0", seed=3)
    cleaner = LogCleaner()
    cleaner.clean(log, now_ms=T0)
    once = read_all(log)
    cleaner.clean(log, now_ms=T0 + 1)
    assert read_all(log) == once


def test_small_cleaned_segments_are_grouped(tmp_path):
    log = open_log(tmp_path / "topic-0")
    for i in range(200):
        append(log, [(b"same-key", b"value-%04d" % i + b"." * 40)])
    n_before = log.num_segments
    assert n_before > 10
    LogCleaner().clean(log, now_ms=T0)
    # one key: every closed segment is nearly empty after cleaning, so a few groups remain
    LogCleaner().clean(log, now_ms=T0)
    assert log.num_segments <= 3
    assert latest(read_all(log)) == {b"same-key": b"value-0199" + b"." * 40}


def test_group_segments_by_size():
    class S:
        def __init__(self, base, size, nxt):
            self.base_offset, self.size, self.next_offset = base, size, nxt

    segs = [S(0, 400, 10), S(10, 400, 20), S(20, 400, 30), S(30, 100, 40), S(40, 900, 50)]
    groups = group_segments_by_size(segs, 1000)
    assert [[s.base_offset for s in g] for g in groups] == [[0, 10], [20, 30], [40]]
    far = [S(0, 1, 5), S(2**31, 1, 2**31 + 5)]
    assert len(group_segments_by_size(far, 1000)) == 2


def test_records_without_key_are_removed(tmp_path):
    # A compacted topic refuses keyless records; this one got its record while it was not
    # compacted yet (cleanup.policy changed afterwards).
    log = open_log(tmp_path / "topic-0", **{"cleanup.policy": "delete"})
    append(log, [(None, b"no key"), (b"k", b"v")])
    log.update_config(dict(log.config.to_dict(), **{"cleanup.policy": "compact"}))
    log.roll()
    append(log, [(b"other", b"x")])
    LogCleaner().clean(log, now_ms=T0)
    assert [(k, v) for _o, k, v in read_all(log)] == [(b"k", b"v"), (b"other", b"x")]


def test_headers_and_batch_metadata_are_preserved(tmp_path):
    log = open_log(tmp_path / "topic-0")
    log.append_as_leader(encode_batch(
        [(b"a", b"1", T0, [("h", b"x")]), (b"b", b"2", T0 + 5, [("h2", None)]),
         (b"a", b"3", T0 + 9)], producer_id=42, producer_epoch=3, base_sequence=7), 4)
    log.roll()
    append(log, [(b"c", b"9")])
    LogCleaner().clean(log, now_ms=T0)
    batch = read_batches(log)[0]
    assert (batch.base_offset, batch.last_offset_delta) == (0, 2)
    assert (batch.producer_id, batch.producer_epoch, batch.base_sequence) == (42, 3, 7)
    assert batch.partition_leader_epoch == 4
    recs = batch.records()
    assert [(r.offset, r.key, r.value, r.timestamp, r.headers) for r in recs] == [
        (1, b"b", b"2", T0 + 5, (("h2", None),)), (2, b"a", b"3", T0 + 9, ())]


def test_last_batch_of_a_producer_is_kept_empty(tmp_path):
    log = open_log(tmp_path / "topic-0")
    append(log, [(b"k", b"old")], producer_id=5, producer_epoch=0, base_sequence=0)
    append(log, [(b"k", b"new")])  # no producer id
    log.roll()
    append(log, [(b"z", b"1")])
    LogCleaner().clean(log, now_ms=T0)
    batches = read_batches(log)
    assert [(b.base_offset, b.records_count, b.producer_id) for b in batches] == [
        (0, 0, 5), (1, 1, -1), (2, 1, -1)]
    assert read_all(log) == [(1, b"k", b"new"), (2, b"z", b"1")]


# -- tombstones ---------------------------------------------------------------------------------

def test_tombstone_retained_until_delete_horizon(tmp_path):
    log = open_log(tmp_path / "topic-0")
    append(log, [(b"k", b"v1"), (b"j", b"v")])
    log.roll()
    append(log, [(b"k", None)])
    log.roll()
    append(log, [(b"active", b"a")])
    cleaner = LogCleaner()

    cleaner.clean(log, now_ms=T0)  # first pass: v1 goes, the tombstone stays and gets a horizon
    assert read_all(log) == [(1, b"j", b"v"), (2, b"k", None), (3, b"active", b"a")]
    tomb_batch = [b for b in read_batches(log) if b.base_offset == 2][0]
    assert tomb_batch.attributes & DELETE_HORIZON_FLAG
    assert delete_horizon_ms(tomb_batch) == T0 + RETENTION
    assert tomb_batch.records()[0].timestamp == T0  # record timestamps stay exact
    assert cleaner.needs_cleaning(log, T0 + RETENTION - 1) is False
    assert cleaner.needs_cleaning(log, T0 + RETENTION) is True

    cleaner.clean(log, now_ms=T0 + RETENTION - 1)  # before the horizon: still there
    assert (2, b"k", None) in read_all(log)
    stats = cleaner.clean(log, now_ms=T0 + RETENTION)
    assert stats.tombstones_removed == 1
    assert read_all(log) == [(1, b"j", b"v"), (3, b"active", b"a")]
    assert cleaner.needs_cleaning(log, T0 + 10 * RETENTION) is False


def test_new_cleaner_learns_pending_horizons_from_the_log(tmp_path):
    log = open_log(tmp_path / "topic-0", **{"min.cleanable.dirty.ratio": 0.99})
    append(log, [(b"k", b"v")])
    log.roll()
    append(log, [(b"k", None)])
    log.roll()
    append(log, [(b"a", b"x")])
    LogCleaner().clean(log, now_ms=T0)
    log.close()
    log = open_log(tmp_path / "topic-0", **{"min.cleanable.dirty.ratio": 0.99})
    fresh = LogCleaner()  # e.g. after a broker restart: nothing in memory
    assert fresh.needs_cleaning(log, T0 + RETENTION - 1) is False
    assert fresh.needs_cleaning(log, T0 + RETENTION) is True


def test_horizon_is_set_on_the_pass_that_first_keeps_the_tombstone(tmp_path):
    log = open_log(tmp_path / "topic-0")
    append(log, [(b"k", b"v")])
    log.roll()
    append(log, [(b"a", b"x")])
    LogCleaner().clean(log, now_ms=T0)  # nothing to delete: no horizon anywhere
    assert not any(b.attributes & DELETE_HORIZON_FLAG for b in read_batches(log))
    append(log, [(b"k", None)])  # the tombstone arrives late and is first cleaned at T0+500
    log.roll()
    append(log, [(b"b", b"y")])
    cleaner = LogCleaner()
    cleaner.clean(log, now_ms=T0 + 500)
    assert (2, b"k", None) in read_all(log)
    cleaner.clean(log, now_ms=T0 + RETENTION)  # horizon is T0 + 500 + RETENTION
    assert (2, b"k", None) in read_all(log)
    cleaner.clean(log, now_ms=T0 + 500 + RETENTION)
    assert read_all(log) == [(1, b"a", b"x"), (3, b"b", b"y")]


def test_tombstone_in_active_segment_is_never_touched(tmp_path):
    log = open_log(tmp_path / "topic-0")
    append(log, [(b"k", b"v")])
    log.roll()
    append(log, [(b"k", None)])
    LogCleaner().clean(log, now_ms=T0 + 10 * RETENTION)
    # the value is below the tombstone's offset but the tombstone is in the active segment,
    # beyond the cleanable range, so neither is removed
    assert read_all(log) == [(0, b"k", b"v"), (1, b"k", None)]


# -- the cleanable range --------------------------------------------------------------------

def test_min_compaction_lag_protects_recent_segments(tmp_path):
    log = open_log(tmp_path / "topic-0", **{"min.compaction.lag.ms": 5_000})
    append(log, [(b"k", b"old")], ts=T0)
    log.roll()
    append(log, [(b"k", b"mid")], ts=T0 + 1_000)
    log.roll()
    append(log, [(b"k", b"new")], ts=T0 + 8_000)
    log.roll()
    append(log, [(b"x", b"active")], ts=T0 + 9_000)
    stats = LogCleaner().clean(log, now_ms=T0 + 9_000)
    # only segments whose newest record is older than now - lag (T0+4000) are cleanable
    assert stats.first_uncleanable_offset == 2
    assert [v for _o, _k, v in read_all(log)] == [b"mid", b"new", b"active"]


def test_open_transaction_bounds_the_cleanable_range(tmp_path):
    log = open_log(tmp_path / "topic-0")
    append(log, [(b"k", b"1")])
    log.roll()
    append(log, [(b"k", b"2")])
    append(log, [(b"k", b"txn")], producer_id=9, producer_epoch=0, base_sequence=0,
           is_transactional=True)
    log.roll()
    append(log, [(b"k", b"3")])
    log.roll()
    append(log, [(b"a", b"active")])
    stats = LogCleaner().clean(log, now_ms=T0)
    # the range ends at the segment holding the open transaction's first batch, so the map
    # knows only offset 0 and nothing is removed, though k was overwritten later
    assert stats.first_uncleanable_offset == 1
    assert [v for _o, _k, v in read_all(log)] == [b"1", b"2", b"txn", b"3", b"active"]
    marker(log, ControlType.COMMIT, 9)
    log.roll()
    append(log, [(b"a", b"active2")])
    LogCleaner().clean(log, now_ms=T0)
    assert [v for _o, _k, v in read_all(log)] == [b"3", b"active", b"active2"]


def test_log_first_unstable_offset_bounds_the_range(tmp_path):
    log = open_log(tmp_path / "topic-0")
    for v in (b"1", b"2", b"3"):
        append(log, [(b"k", v)])
        log.roll()
    log.first_unstable_offset = 1
    stats = LogCleaner().clean(log, now_ms=T0)
    assert stats.first_uncleanable_offset == 1
    assert [v for _o, _k, v in read_all(log)] == [b"1", b"2", b"3"]


def test_offset_map_limit_cleans_in_several_passes(tmp_path):
    log = random_log(tmp_path / "topic-0", seed=8, keys=100, n_records=300)
    before = read_all(log)
    # room for ~40 keys: each pass maps as many dirty segments as fit
    cleaner = LogCleaner({"log.cleaner.dedupe.buffer.size": 40 * 24,
                          "log.cleaner.io.buffer.load.factor": 1.0})
    ends = []
    for _ in range(50):
        stats = cleaner.clean(log, now_ms=T0)
        ends.append(stats.first_uncleanable_offset)
        if stats.first_uncleanable_offset == log.active_segment.base_offset:
            break
    assert len(ends) > 1 and ends == sorted(ends)
    after = read_all(log)
    assert latest(after) == latest(before)
    assert set(after) <= set(before)


# -- transactions -------------------------------------------------------------------------------

def marker(log: Log, ctype: ControlType, pid: int, ts: int = T0) -> None:
    log.append_as_leader(encode_control_batch(ctype, timestamp=ts, producer_id=pid,
                                              producer_epoch=0), 0, now=ts)


def txn(log: Log, pid: int, items, seq: int) -> None:
    append(log, items, producer_id=pid, producer_epoch=0, base_sequence=seq, is_transactional=True)


def test_transactions(tmp_path):
    log = open_log(tmp_path / "topic-0")
    txn(log, 7, [(b"k1", b"a"), (b"k2", b"a")], 0)      # 0-1  committed
    marker(log, ControlType.COMMIT, 7)                   # 2
    txn(log, 8, [(b"k1", b"aborted"), (b"k9", b"aborted")], 0)  # 3-4  aborted
    marker(log, ControlType.ABORT, 8)                    # 5
    txn(log, 8, [(b"k3", b"x")], 2)                      # 6    committed
    marker(log, ControlType.COMMIT, 8)                   # 7
    append(log, [(b"k1", b"c")])                         # 8
    txn(log, 7, [(b"k5", b"gone")], 2)                   # 9    committed, then superseded
    marker(log, ControlType.COMMIT, 7)                   # 10
    txn(log, 7, [(b"k5", b"final")], 3)                  # 11
    marker(log, ControlType.COMMIT, 7)                   # 12
    log.roll()
    append(log, [(b"z", b"active")])                     # 13
    cleaner = LogCleaner()
    stats = cleaner.clean(log, now_ms=T0)
    assert stats.aborted_records_removed == 2
    assert read_all(log) == [(1, b"k2", b"a"), (6, b"k3", b"x"), (8, b"k1", b"c"),
                             (11, b"k5", b"final"), (13, b"z", b"active")]
    markers = {b.base_offset: b for b in read_batches(log) if b.is_control}
    # markers of transactions with data left are kept as they are; the others get a horizon
    assert set(markers) == {2, 5, 7, 10, 12}
    assert not markers[2].attributes & DELETE_HORIZON_FLAG
    assert markers[5].attributes & DELETE_HORIZON_FLAG
    assert markers[10].attributes & DELETE_HORIZON_FLAG
    assert markers[5].control_type() is ControlType.ABORT

    stats = cleaner.clean(log, now_ms=T0 + RETENTION)
    assert stats.markers_removed == 2
    markers = {b.base_offset for b in read_batches(log) if b.is_control}
    assert markers == {2, 7, 12}
    assert read_all(log)[-1] == (13, b"z", b"active")


def test_aborted_last_batch_of_producer_keeps_its_marker(tmp_path):
    log = open_log(tmp_path / "topic-0")
    txn(log, 4, [(b"k", b"aborted")], 0)
    marker(log, ControlType.ABORT, 4)
    log.roll()
    append(log, [(b"a", b"b")])
    cleaner = LogCleaner()
    cleaner.clean(log, now_ms=T0)
    cleaner.clean(log, now_ms=T0 + 2 * RETENTION)
    batches = read_batches(log)
    # the producer's last batch survives empty (its sequence is kept), and so does its marker
    assert [(b.base_offset, b.records_count, b.is_control) for b in batches] == [
        (0, 0, False), (1, 1, True), (2, 1, False)]


# -- crash safety -------------------------------------------------------------------------------

STEPS = ["scanned", "offset_map_built", "group_written", "before_swap", "after_swap",
         "before_checkpoint", "after_checkpoint"]


def crash_case_log(path) -> Log:
    log = random_log(path, seed=21, n_records=500, keys=25)
    log.flush()  # everything durable: a power cut may only lose what the cleaner did
    return log


def check_equivalent(log: Log, before) -> None:
    after = read_all(log)
    assert latest(after, drop_tombstones=True) == latest(before, drop_tombstones=True)
    assert set(after) <= set(before)


@pytest.mark.parametrize("step,occurrence", [(s, 1) for s in STEPS] + [
    ("group_written", 2), ("before_swap", 3), ("after_swap", 2)])
def test_crash_at_each_step_then_reopen(tmp_path, step, occurrence):
    path = tmp_path / "topic-0"
    log = crash_case_log(path)
    before = read_all(log)
    seen = {"n": 0}

    def hook(s: str) -> None:
        if s == step:
            seen["n"] += 1
            if seen["n"] == occurrence:
                log.crash()
                raise Crash(s)

    with pytest.raises(Crash):
        LogCleaner(fault_hook=hook).clean(log, now_ms=T0)
    reopened = open_log(path)
    assert not [n for n in os.listdir(path) if n.endswith((".cleaned", ".swap"))]
    check_equivalent(reopened, before)
    # a later pass completes the job
    LogCleaner().clean(reopened, now_ms=T0)
    check_equivalent(reopened, before)
    active_base = reopened.active_segment.base_offset
    keys = [k for o, k, _v in read_all(reopened) if o < active_base]
    assert len(keys) == len(set(keys))
    reopened.close()


@pytest.mark.parametrize("rename_call", range(1, 7))
def test_crash_inside_segment_swap_then_reopen(tmp_path, monkeypatch, rename_call):
    """A power cut between any two renames of replace_segments (3 files .cleaned -> .swap, then
    3 files .swap -> live): a crash point cannot be produced for real, so os.replace raises."""
    path = tmp_path / "topic-0"
    log = crash_case_log(path)
    before = read_all(log)
    real_replace = os.replace
    state = {"armed": False, "calls": 0}

    def replace(src, dst, *a, **kw):
        if state["armed"]:
            state["calls"] += 1
            if state["calls"] == rename_call:
                log.crash()
                raise Crash(f"rename {src} -> {dst}")
        return real_replace(src, dst, *a, **kw)

    def hook(s: str) -> None:
        if s == "before_swap":
            state["armed"] = True

    monkeypatch.setattr(os, "replace", replace)
    with pytest.raises(Crash):
        LogCleaner(fault_hook=hook).clean(log, now_ms=T0)
    monkeypatch.setattr(os, "replace", real_replace)
    reopened = open_log(path)
    assert not [n for n in os.listdir(path) if n.endswith((".cleaned", ".swap"))]
    check_equivalent(reopened, before)
    LogCleaner().clean(reopened, now_ms=T0)
    check_equivalent(reopened, before)
    reopened.close()


def test_concurrent_pass_on_the_same_log_is_refused(tmp_path):
    log = random_log(tmp_path / "topic-0", seed=2)
    cleaner = LogCleaner()
    errors = []

    def hook(s: str) -> None:
        if s == "offset_map_built" and not errors:
            with pytest.raises(CleaningAbortedError, match="already being cleaned") as ei:
                cleaner.clean(log, now_ms=T0)
            errors.append(ei.value)

    cleaner.fault_hook = hook
    before = read_all(log)
    cleaner.clean(log, now_ms=T0)
    assert errors and isinstance(errors[0], ReplicationError)
    assert latest(read_all(log)) == latest(before)


def test_truncation_during_cleaning_aborts_the_pass(tmp_path):
    path = tmp_path / "topic-0"
    log = random_log(path, seed=2)
    target = log.segments[2].base_offset

    def hook(s: str) -> None:
        if s == "group_written":
            log.truncate_to(target)

    with pytest.raises(CleaningAbortedError):
        LogCleaner(fault_hook=hook).clean(log, now_ms=T0)
    assert not [n for n in os.listdir(path) if n.endswith((".cleaned", ".swap"))]
    assert log.log_end_offset == target
    assert all(o < target for o, _k, _v in read_all(log))


# -- the cleaner checkpoint ---------------------------------------------------------------------

def test_cleaner_checkpoint_format(tmp_path):
    path = str(tmp_path / CLEANER_CHECKPOINT_FILE)
    write_cleaner_checkpoint(path, {("b", 1): 20, ("a", 0): 5})
    with open(path) as f:
        assert f.read() == "0\n2\na 0 5\nb 1 20\n"
    assert read_cleaner_checkpoint(path) == {("a", 0): 5, ("b", 1): 20}


@pytest.mark.parametrize("content,line", [
    ("1\n0\n", 1), ("0\nx\n", 2), ("0\n2\na 0 1\n", 4), ("0\n1\na 0\n", 3), ("0\n1\na x 1\n", 3),
])
def test_corrupt_cleaner_checkpoint(tmp_path, content, line):
    path = str(tmp_path / CLEANER_CHECKPOINT_FILE)
    with open(path, "w") as f:
        f.write(content)
    with pytest.raises(CorruptCheckpointError) as ei:
        read_cleaner_checkpoint(path)
    assert ei.value.line == line and path in str(ei.value)


def test_corrupt_cleaner_checkpoint_only_costs_a_full_pass(tmp_path, caplog):
    log = random_log(tmp_path / "topic-0", seed=4)
    with open(tmp_path / CLEANER_CHECKPOINT_FILE, "w") as f:
        f.write("garbage\n")
    before = read_all(log)
    stats = LogCleaner().clean(log, now_ms=T0)
    assert stats.first_dirty_offset == 0
    assert "corrupt cleaner checkpoint" in caplog.text
    assert latest(read_all(log)) == latest(before)
    assert read_cleaner_checkpoint(str(tmp_path / CLEANER_CHECKPOINT_FILE)) == {
        ("topic", 0): stats.first_uncleanable_offset}


def test_stale_checkpoint_beyond_the_log_is_ignored(tmp_path):
    log = random_log(tmp_path / "topic-0", seed=4)
    write_cleaner_checkpoint(str(tmp_path / CLEANER_CHECKPOINT_FILE), {("topic", 0): 10**9})
    stats = LogCleaner().clean(log, now_ms=T0)
    assert stats.first_dirty_offset == 0


@pytest.mark.parametrize("config", [
    {"log.cleaner.backoff.ms": -1}, {"log.cleaner.dedupe.buffer.size": 0},
    {"log.cleaner.io.buffer.load.factor": 0},
])
def test_bad_cleaner_config(config):
    with pytest.raises(InvalidConfigurationError):
        LogCleaner(config)


def test_delete_policy_log_is_not_cleaned(tmp_path):
    log = open_log(tmp_path / "topic-0", **{"cleanup.policy": "delete"})
    for i in range(50):
        append(log, [(b"k", b"v%d" % i + b"." * 50)])
    assert LogCleaner().needs_cleaning(log, T0) is False


# -- background thread --------------------------------------------------------------------------

def wait_for(predicate, timeout: float = 10.0) -> bool:
    done = threading.Event()
    deadline = timeout
    step = 0.01
    while deadline > 0:
        if predicate():
            return True
        done.wait(step)
        deadline -= step
    return predicate()


def test_background_cleaner_compacts_dirty_logs(tmp_path):
    log = random_log(tmp_path / "topic-0", seed=9)
    before = read_all(log)
    cleaner = LogCleaner({"log.cleaner.backoff.ms": 20})
    assert cleaner.needs_cleaning(log, T0)
    cleaner.add_log(log)
    cleaner.start()
    try:
        assert wait_for(lambda: cleaner.passes >= 1)
    finally:
        cleaner.shutdown()
    assert cleaner.last_error is None
    assert cleaner.needs_cleaning(log, cleaner.clock_ms()) is False
    after = read_all(log)
    assert latest(after) == latest(before)
    assert len(after) < len(before)


@pytest.mark.parametrize("seed", range(5))
def test_rebuilt_batch_equals_a_fresh_encoding(seed):
    """The cleaner's byte-copy rebuild of a batch is byte-identical to re-encoding its records."""
    from replication.cleaner import rebuild_batch
    from replication.records import encode_batch_with_offsets

    rng = random.Random(seed)
    recs = [(b"k%d" % rng.randrange(50), None if rng.random() < 0.2 else b"x" * rng.randrange(300),
             T0 + rng.randrange(-50, 5000), [("h", b"v")] if rng.random() < 0.3 else None)
            for _ in range(rng.randint(1, 150))]
    raw = encode_batch(recs, base_offset=1000, producer_id=3, producer_epoch=1, base_sequence=9,
                       partition_leader_epoch=2)
    h = decode_batches(raw)[0]
    records = h.records()
    kept = sorted(rng.sample(range(len(records)), rng.randint(1, len(records))))
    subset = [records[i] for i in kept]
    rebuilt = rebuild_batch(raw, h, kept, max(r.timestamp for r in subset))
    assert rebuilt == encode_batch_with_offsets(h, subset)
    assert decode_batches(rebuilt)[0].records() == subset


@pytest.mark.parametrize("call", range(1, 16))
def test_crash_while_swapping_a_multi_segment_group(tmp_path, monkeypatch, call):
    """Groups of three small segments that clean to nothing: a power cut at any rename or
    unlink of the swap leaves, after recovery, a log with the same latest values."""
    path = tmp_path / "topic-0"
    log = open_log(path, **{"segment.bytes": 400})
    for i in range(6):
        append(log, [(b"k", b"old-%d" % i), (b"j%d" % i, b"x")])
        log.roll()
    append(log, [(b"k", b"latest")])
    log.roll()
    append(log, [(b"a", b"active")])
    log.flush()
    before = read_all(log)
    real = {"replace": os.replace, "unlink": os.unlink}
    state = {"armed": False, "calls": 0}

    def counting(name):
        def fn(*a, **kw):
            if state["armed"]:
                state["calls"] += 1
                if state["calls"] == call:
                    state["armed"] = False
                    log.crash()
                    raise Crash(f"{name} {a[0]}")
            return real[name](*a, **kw)
        return fn

    def hook(s: str) -> None:
        if s == "before_swap":
            state["armed"] = True
        elif s == "after_swap":
            state["armed"] = False

    monkeypatch.setattr(os, "replace", counting("replace"))
    monkeypatch.setattr(os, "unlink", counting("unlink"))
    try:
        LogCleaner(fault_hook=hook).clean(log, now_ms=T0)
        crashed = False
    except Crash:
        crashed = True
    monkeypatch.setattr(os, "replace", real["replace"])
    monkeypatch.setattr(os, "unlink", real["unlink"])
    assert crashed, "every file operation of the first group's swap is a crash point"
    reopened = open_log(path, **{"segment.bytes": 400})
    check_equivalent(reopened, before)
    LogCleaner().clean(reopened, now_ms=T0)
    check_equivalent(reopened, before)
    assert latest(read_all(reopened))[b"k"] == b"latest"
    reopened.close()
