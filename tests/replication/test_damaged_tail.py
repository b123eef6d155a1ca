"""Bytes that do not parse after the last batch of a cleanly closed log are cut at open (with a
WARN naming file, position and bytes); a cluster whose start fails stops the brokers it had
started (issue 20, item 5)."""

import logging
import os
import random
import struct

import pytest

from replication.cluster import LocalCluster
from replication.errors import KafkaStorageError
from replication.log import Log
from replication.protocol import Errors
from test_cluster import FAST, batch, records_on, wait_replicated
from test_log_recovery import all_offsets
from test_log_recovery import batch as log_batch


def _damage(kind: str, last_batch: bytes) -> bytes:
    """Bytes appended after the last valid batch."""
    rng = random.Random(kind)
    if kind == "random-bytes":
        return bytes(rng.randrange(256) for _ in range(300))
    if kind == "zeros":
        return bytes(4096)
    if kind == "huge-length":
        return struct.pack(">qi", 1 << 40, 0x7FFFFFF0) + bytes(40)
    if kind == "torn-copy":
        return last_batch[: len(last_batch) // 2]
    if kind == "whole-copy":  # a valid batch whose offsets do not follow
        return last_batch
    if kind == "few-bytes":
        return b"\x00\x01\x02"
    raise AssertionError(kind)


KINDS = ["random-bytes", "zeros", "huge-length", "torn-copy", "whole-copy", "few-bytes"]


def _append_to_active_segment(log_dir, kind) -> tuple[str, int, int]:
    """Damage the active segment of a closed log; (path, valid size, bytes added)."""
    segments = sorted(n for n in os.listdir(log_dir) if n.endswith(".log"))
    path = os.path.join(log_dir, segments[-1])
    with open(path, "rb") as f:
        data = f.read()
    lg_last = _last_batch(data)
    damage = _damage(kind, lg_last)
    with open(path, "ab") as f:
        f.write(damage)
    return path, len(data), len(damage)


def _last_batch(data: bytes) -> bytes:
    pos = last = 0
    while pos < len(data):
        size = struct.unpack_from(">qi", data, pos)[1] + 12
        last, pos = pos, pos + size
    return data[last:pos]


@pytest.mark.parametrize("kind", KINDS)
def test_a_damaged_tail_after_a_clean_close_is_cut_with_a_warning(tmp_path, caplog, kind):
    lg = Log(tmp_path / "t-0", {"segment.bytes": 2000, "index.interval.bytes": 150})
    for i in range(40):
        lg.append_as_leader(log_batch(3, ts=1000 + i), i // 10)
    expected = all_offsets(lg)
    epochs = lg.leader_epoch_cache.entries()
    lg.close()
    path, valid, added = _append_to_active_segment(tmp_path / "t-0", kind)
    with caplog.at_level(logging.WARNING, logger="replication.segment"):
        lg = Log(tmp_path / "t-0", {"segment.bytes": 2000, "index.interval.bytes": 150})
    assert all_offsets(lg) == expected
    assert lg.leader_epoch_cache.entries() == epochs
    assert lg.load_stats["tail_bytes_dropped"] == added
    assert os.path.getsize(path) == valid
    [warning] = [r.getMessage() for r in caplog.records if "dropping" in r.getMessage()]
    assert path in warning and f"dropping {added} bytes from position {valid}" in warning
    info = lg.append_as_leader(log_batch(1), 4)
    assert info.first_offset == expected[-1] + 1
    lg.close()
    assert all_offsets(Log(tmp_path / "t-0")) == expected + [info.first_offset]


def test_a_clean_tail_is_left_alone(tmp_path, caplog):
    lg = Log(tmp_path / "t-0")
    for _ in range(5):
        lg.append_as_leader(log_batch(2), 0)
    lg.close()
    with caplog.at_level(logging.WARNING):
        lg = Log(tmp_path / "t-0")
    assert lg.load_stats["tail_bytes_dropped"] == 0 and not caplog.records
    assert all_offsets(lg) == list(range(10))


def test_garbage_after_a_closed_segment_is_cut_by_rebuilding_it(tmp_path):
    config = {"segment.bytes": 2000, "index.interval.bytes": 150}
    lg = Log(tmp_path / "t-0", config)
    for i in range(40):
        lg.append_as_leader(log_batch(3, ts=1000 + i), 0)
    expected = all_offsets(lg)
    first = lg.segments[0].log_path
    lg.close()
    with open(first, "ab") as f:
        f.write(bytes(100))
    lg = Log(tmp_path / "t-0", config)
    assert all_offsets(lg) == expected
    assert lg.load_stats["rebuilt_indexes"] == [0]


def _cluster_with_records(root, n=20):
    with LocalCluster(root, num_brokers=3, config=FAST) as cluster:
        cluster.create_topic("t", partitions=1, replication_factor=3, config={"min.insync.replicas": "2"})
        acked = []
        for i in range(n):
            value = b"v%d" % i
            assert cluster.produce("t", 0, batch(value), acks=-1).error is Errors.NONE
            acked.append(value)
        wait_replicated(cluster)
    return acked


@pytest.mark.parametrize("kind", ["random-bytes", "zeros", "huge-length", "torn-copy"])
def test_cluster_starts_after_damaged_tails_and_keeps_every_acknowledged_record(tmp_path, kind):
    root = tmp_path / "c"
    acked = _cluster_with_records(root)
    for b in range(3):
        _append_to_active_segment(root / f"broker-{b}" / "t-0", kind)
    with LocalCluster(root, num_brokers=3, config=FAST) as cluster:
        cluster.wait_until(lambda: cluster.leader("t", 0) >= 0, 20, "a leader")
        wait_replicated(cluster)
        for b in range(3):
            assert [v for _, v in records_on(cluster, b)] == acked
        assert cluster.produce("t", 0, batch(b"after"), acks=-1).error is Errors.NONE


def test_a_failed_start_stops_the_brokers_already_started(tmp_path):
    root = tmp_path / "c"
    acked = _cluster_with_records(root)
    # Broker 2's segment file cannot be opened (a directory stands where the file was).
    segment = root / "broker-2" / "t-0" / "00000000000000000000.log"
    saved = segment.read_bytes()
    segment.unlink()
    segment.mkdir()
    cluster = LocalCluster(root, num_brokers=3, config=FAST)
    with pytest.raises(KafkaStorageError, match="broker-2/t-0"):
        cluster.start()
    assert cluster.live_brokers() == []
    assert not any(cluster.transport.is_registered(b) for b in range(3))
    assert not cluster.controller.live_brokers
    cluster.close()  # nothing left to stop: no error
    segment.rmdir()
    segment.write_bytes(saved)
    with cluster:  # the same cluster starts once the damage is repaired
        wait_replicated(cluster)
        assert [v for _, v in records_on(cluster, 2)] == acked
