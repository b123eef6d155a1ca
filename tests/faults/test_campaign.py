"""The fault campaign in the suite: a few seeded runs of each kind (bench/faults.py runs more).

Each run prints its seed; a failure names the seed and the anomalies (replay one with
``python bench/faults.py --seed N --only writes-pull`` and the like)."""

from __future__ import annotations

import pytest

from campaign import CORRUPTION_CASES, run_alos_dsl, run_corruption, run_eos, run_eos_dsl, run_writes
from streams.testing.kafka_fixture import skip_if_unfaithful


def _check(report) -> None:
    print(f"campaign run: {report.describe()} ({report.seconds:.1f}s, actions {report.actions})")
    assert not report.anomalies, f"seed {report.seed} ({report.kind} {report.detail}): {report.anomalies}"


@pytest.mark.parametrize("mode,seed", [("pull", 101), ("push", 202)])
def test_nemesis_keeps_every_acknowledged_write(tmp_path, mode, seed):
    report = run_writes(seed, mode, tmp_path)
    assert report.acked > 0
    _check(report)


def test_exactly_once_app_killed_at_random_points_counts_exactly(tmp_path):
    _check(run_eos(303, tmp_path, kills=3))


def test_exactly_once_dsl_app_killed_at_random_points_emits_each_final_result_once(tmp_path):
    _check(run_eos_dsl(505, tmp_path, kills=3))


@pytest.mark.needs_faithful_broker(reason="aborted transactional data is visible to read_committed consumers "
                                          "on Tansu (see tests/integration/test_apps_on_kafka.py)")
def test_exactly_once_dsl_app_pair_on_kafka_killed_at_random_points_emits_each_final_result_once(
        kafka_broker, tmp_path, request):
    """Two instances on a real broker (the embedded cluster is one process's), one killed at a time."""
    skip_if_unfaithful(request.node, kafka_broker)
    _check(run_eos_dsl(707, tmp_path, kills=3, kafka=kafka_broker.bootstrap_servers))


def test_at_least_once_dsl_app_killed_at_random_points_loses_nothing(tmp_path):
    _check(run_alos_dsl(606, tmp_path, kills=3))


@pytest.mark.parametrize("case", sorted(CORRUPTION_CASES))
def test_corruption_matrix(tmp_path, case):
    _check(run_corruption(case, 404, tmp_path))
