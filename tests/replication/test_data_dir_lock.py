"""One embedded cluster per data directory (Kafka's log directory lock): a second cluster on a
directory in use, in this process or another, fails to start with a clear error and writes
nothing; the first keeps every acknowledged record; a crashed holder leaves the directory free."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from replication.cluster import LOCK_FILE, LocalCluster
from replication.errors import DataDirInUseError
from replication.protocol import Errors

from test_cluster import FAST, batch, wait_replicated

REPO = Path(__file__).resolve().parents[2]

# A cluster in another process: writes one acknowledged record, says so, and runs until killed.
HOLDER = """
import json, sys, threading
sys.path.insert(0, {repo!r})
sys.path.insert(0, {tests!r})
from replication.cluster import LocalCluster
from test_cluster import FAST, batch
cluster = LocalCluster({data_dir!r}, num_brokers=3, config=FAST).start()
cluster.create_topic("t", partitions=1, replication_factor=3)
response = cluster.produce("t", 0, batch(b"from-the-holder"), acks=-1)
print(json.dumps({{"error": response.error.name}}), flush=True)
threading.Event().wait()
"""


def _values(cluster: LocalCluster) -> list[bytes]:
    return [r.value for r in cluster.fetch("t", 0, 0).records.records()]


def test_a_second_cluster_on_a_directory_in_use_in_this_process_fails_and_writes_nothing(tmp_path):
    data_dir = tmp_path / "cluster"
    with LocalCluster(data_dir, num_brokers=3, config=FAST) as first:
        first.create_topic("t", partitions=1, replication_factor=3)
        assert first.produce("t", 0, batch(b"acked"), acks=-1).error is Errors.NONE
        before = {p: p.stat().st_mtime_ns for p in data_dir.rglob("*") if p.is_file()}
        second = LocalCluster(data_dir, num_brokers=3, config=FAST)
        with pytest.raises(DataDirInUseError, match=f"another embedded cluster.*{data_dir}"):
            second.start()
        second.close()  # a failed start leaves nothing to stop, and must not drop the first's lock
        assert {p: p.stat().st_mtime_ns for p in data_dir.rglob("*") if p.is_file() and p in before} == before
        with pytest.raises(DataDirInUseError):
            LocalCluster(data_dir, num_brokers=3, config=FAST).start()
        wait_replicated(first)
        assert _values(first) == [b"acked"]
    # closed: the directory is free, and what was acknowledged is there
    with LocalCluster(data_dir, num_brokers=3, config=FAST) as again:
        wait_replicated(again)
        assert _values(again) == [b"acked"]


def test_a_cluster_in_another_process_holds_the_directory_until_it_dies(tmp_path):
    data_dir = tmp_path / "cluster"
    script = HOLDER.format(repo=str(REPO), tests=str(Path(__file__).parent), data_dir=str(data_dir))
    holder = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        line = holder.stdout.readline()  # the holder's acknowledgement (EOF if it failed)
        assert line, holder.stderr.read().decode(errors="replace")[-2000:]
        assert json.loads(line) == {"error": "NONE"}
        with pytest.raises(DataDirInUseError, match=str(data_dir)) as refused:
            LocalCluster(data_dir, num_brokers=3, config=FAST).start()
        assert f"pid {holder.pid} " in str(refused.value)  # the error names the holder
    finally:
        holder.send_signal(signal.SIGKILL)  # a crash: the operating system releases the lock
        holder.wait(30)
        holder.stdout.close()
        holder.stderr.close()
    assert (data_dir / LOCK_FILE).exists()
    with LocalCluster(data_dir, num_brokers=3, config=FAST) as cluster:
        wait_replicated(cluster)
        assert _values(cluster) == [b"from-the-holder"]
