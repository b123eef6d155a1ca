"""Randomized broker faults under acks=all with min.insync.replicas=2 (pull replication)."""

import pytest

from fault_workload import check_fault_outcome, run_fault_workload
from replication.cluster import LocalCluster

CONFIG = {
    "replica.fetch.backoff.ms": 20,
    "replica.socket.timeout.ms": 1000,
    "replica.lag.time.max.ms": 2000,
    "replica.fetch.wait.max.ms": 100,
}


@pytest.mark.parametrize("seed", [11, 23, 37])
def test_random_faults_lose_no_acknowledged_record(tmp_path, seed):
    with LocalCluster(tmp_path / "c", num_brokers=3, config=CONFIG) as cluster:
        outcome = run_fault_workload(cluster, seed, steps=24, acks_per_step=30)
    check_fault_outcome(outcome)
