"""A wrong leader-epoch-checkpoint is cross-checked with the batch headers at load and rebuilt;
a truncation below the high watermark repeated in a loop is a named error (issue 20, item 4)."""

import json
import logging

import pytest

from replication.epoch import CHECKPOINT_FILE_NAME, EpochEntry, format_epoch_checkpoint
from replication.cluster import LocalCluster
from replication.errors import TruncationLoopError
from replication.log import Log
from replication.protocol import Errors
from test_cluster import FAST, batch, records_on, wait_replicated
from test_log_recovery import batch as log_batch

EPOCHS = [EpochEntry(0, 0), EpochEntry(1, 6), EpochEntry(3, 12)]


def _log_with_epochs(path):
    """A cleanly closed log: epoch 0 writes offsets 0-5, epoch 1 6-11, epoch 3 12-17."""
    lg = Log(path)
    for epoch in (0, 0, 1, 1, 3, 3):
        lg.append_as_leader(log_batch(3), epoch)
    assert lg.leader_epoch_cache.entries() == EPOCHS
    lg.close()
    return path


def _write_checkpoint(path, entries):
    (path / CHECKPOINT_FILE_NAME).write_text(format_epoch_checkpoint(entries))


@pytest.mark.parametrize("bad", [
    pytest.param([EpochEntry(0, 0)], id="epoch-0-covers-everything"),
    pytest.param([EpochEntry(0, 0), EpochEntry(1, 6), EpochEntry(99, 12)], id="future-epoch"),
    pytest.param([EpochEntry(0, 0), EpochEntry(1, 6), EpochEntry(3, 9)], id="late-start-inside-epoch"),
    pytest.param([EpochEntry(0, 0), EpochEntry(3, 12)], id="missing-middle-epoch"),
    pytest.param([], id="empty"),
])
def test_a_wrong_checkpoint_is_rebuilt_from_the_batches_with_a_warning(tmp_path, caplog, bad):
    path = _log_with_epochs(tmp_path / "t-0")
    _write_checkpoint(path, bad)
    with caplog.at_level(logging.WARNING, logger="replication.log"):
        lg = Log(path)
    assert lg.leader_epoch_cache.entries() == EPOCHS
    assert lg.load_stats["epoch_cache_rebuilt"]
    warned = [r.getMessage() for r in caplog.records if "disagrees" in r.getMessage()]
    assert len(warned) == 1 and str(path / CHECKPOINT_FILE_NAME) in warned[0]
    lg.close()
    assert Log(path).leader_epoch_cache.entries() == EPOCHS  # the rebuilt cache was written


def test_a_correct_checkpoint_is_kept_without_a_scan(tmp_path, caplog):
    path = _log_with_epochs(tmp_path / "t-0")
    with caplog.at_level(logging.WARNING, logger="replication.log"):
        lg = Log(path)
    assert lg.leader_epoch_cache.entries() == EPOCHS
    assert not lg.load_stats["epoch_cache_rebuilt"] and not caplog.records


def test_a_log_start_inside_an_epoch_is_consistent(tmp_path):
    lg = Log(_log_with_epochs(tmp_path / "t-0"))
    lg.maybe_increment_high_watermark(lg.log_end_offset)
    lg.delete_records(8)  # inside epoch 1's second batch
    lg.close()
    lg = Log(tmp_path / "t-0")
    assert lg.leader_epoch_cache.entries() == [EpochEntry(1, 8), EpochEntry(3, 12)]
    assert not lg.load_stats["epoch_cache_rebuilt"]


def test_the_same_truncation_below_the_high_watermark_in_a_loop_is_a_named_error(tmp_path, caplog):
    lg = Log(_log_with_epochs(tmp_path / "t-0"))
    lg.maybe_increment_high_watermark(lg.log_end_offset)
    refetched = lg.read(6, 1 << 20).buffer
    with caplog.at_level(logging.ERROR, logger="replication.log"):
        for _ in range(2):
            assert lg.truncate_to(6)
            lg.append_as_follower(refetched)  # the follower fetches the committed records again
            lg.maybe_update_high_watermark(18)
        for _ in range(2):
            with pytest.raises(TruncationLoopError, match=r"offset 6, below the high watermark 18.*"
                                                          r"leader-epoch-checkpoint"):
                lg.truncate_to(6)
    assert lg.log_end_offset == 18  # refused: nothing more was cut
    assert len([r for r in caplog.records if r.levelno == logging.ERROR]) == 1  # logged once
    assert lg.truncate_to(9)  # another offset is a new truncation, not the loop


def _cluster_with_history(path):
    """Records acknowledged across several leader epochs; the cluster closed cleanly."""
    acked = []
    with LocalCluster(path, num_brokers=3, config=FAST) as cluster:
        cluster.create_topic("t", partitions=1, replication_factor=3, config={"min.insync.replicas": "2"})
        for round_ in range(3):
            for i in range(5):
                value = b"r%d-%d" % (round_, i)
                assert cluster.produce("t", 0, batch(value), acks=-1).error is Errors.NONE
                acked.append(value)
            wait_replicated(cluster)
            leader = cluster.leader("t", 0)
            cluster.stop_broker(leader)  # a new leader epoch
            cluster.start_broker(leader)
            wait_replicated(cluster)
    return acked


@pytest.mark.parametrize("where", ["next-leader", "every-replica"])
@pytest.mark.parametrize("kind", ["epoch-0-covers-everything", "future-epoch"])
def test_cluster_heals_after_a_wrong_checkpoint(tmp_path, caplog, kind, where):
    root = tmp_path / "c"
    acked = _cluster_with_history(root)
    meta = json.loads((root / "cluster-metadata.json").read_text())
    state = meta["topics"][0]["partitions"][0]
    assert state["leader_epoch"] >= 3
    # The last broker stopped is the ISR left in the metadata: it leads after the restart.
    damaged = state["isr"] if where == "next-leader" else [0, 1, 2]
    for b in damaged:
        path = root / f"broker-{b}" / "t-0"
        if kind == "epoch-0-covers-everything":
            bad = [EpochEntry(0, 0)]
        else:
            bad = [EpochEntry(0, 0), EpochEntry(state["leader_epoch"] + 50, 7)]
        _write_checkpoint(path, bad)
    with caplog.at_level(logging.WARNING, logger="replication.log"):
        with LocalCluster(root, num_brokers=3, config=FAST) as cluster:
            cluster.wait_until(lambda: cluster.leader("t", 0) >= 0, 20, "a leader")
            wait_replicated(cluster)
            assert sorted(cluster.isr("t", 0)) == [0, 1, 2]
            assert cluster.produce("t", 0, batch(b"after"), acks=-1).error is Errors.NONE
            wait_replicated(cluster)
            for b in range(3):
                assert [v for _, v in records_on(cluster, b)] == acked + [b"after"]
    warned = {r.getMessage().split(" disagrees")[0] for r in caplog.records if "disagrees" in r.getMessage()}
    # One warning per damaged replica, naming its checkpoint file.
    assert sorted(warned) == sorted(f"leader epoch checkpoint {root / f'broker-{b}' / 't-0' / CHECKPOINT_FILE_NAME}"
                                    for b in damaged)
    assert not [r for r in caplog.records if "TruncationLoopError" in r.getMessage()]
