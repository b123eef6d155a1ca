"""Differential conformance: random seeded scenarios through Kafka Streams' TopologyTestDriver and
Eddy's, output records (key, value, timestamp) and final store contents compared one by one.

All scenarios of a run go through one JVM (a module fixture); ``EDDY_CONFORMANCE_SCENARIOS``
sets how many (default 300), ``EDDY_CONFORMANCE_SEED`` the first seed (default 0). A mismatch
names its seed: ``vocabulary.generate(seed)`` rebuilds the scenario.
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path
from typing import Iterator

import pytest

sys.path.insert(0, str(Path(__file__).parent))

import vocabulary  # noqa: E402

from streams.testing.maven_jars import JarFetchError  # noqa: E402

COUNT = int(os.environ.get("EDDY_CONFORMANCE_SCENARIOS", "300"))
FIRST_SEED = int(os.environ.get("EDDY_CONFORMANCE_SEED", "0"))
SEEDS = list(range(FIRST_SEED, FIRST_SEED + COUNT))


@pytest.fixture(scope="module")
def kafka_streams_results() -> dict[int, dict]:
    from runner import run_kafka_streams

    try:
        return run_kafka_streams([vocabulary.generate(seed) for seed in SEEDS])
    except JarFetchError as exc:
        pytest.skip(f"no Kafka Streams reference: {exc}")


@pytest.fixture(scope="module")
def state_root() -> Iterator[Path]:
    from runner import scratch_dir

    root = scratch_dir("eddy-conformance-state-")
    yield root
    shutil.rmtree(root, ignore_errors=True)


@pytest.mark.parametrize("seed", SEEDS)
def test_eddy_matches_kafka_streams(seed: int, kafka_streams_results: dict[int, dict], state_root: Path) -> None:
    scenario = vocabulary.generate(seed)
    expected = kafka_streams_results[seed]
    assert expected["error"] is None, f"seed {seed}: Kafka Streams failed: {expected['error']}"
    got = vocabulary.run_eddy(scenario, str(state_root / str(seed)))
    assert got["output"] == expected["output"], (
        f"seed {seed}: output differs\n ops {scenario['ops']}\n records {scenario['records']}")
    assert got["store"] == expected["store"], f"seed {seed}: store differs\n ops {scenario['ops']}"


def test_vocabulary_is_deterministic_and_covers_every_operation() -> None:
    assert vocabulary.generate(7) == vocabulary.generate(7)
    used = {step["op"] for seed in SEEDS for step in vocabulary.generate(seed)["ops"]}
    assert used == set(vocabulary.STATELESS_OPS) | set(vocabulary.GROUPINGS) | set(vocabulary.AGGREGATIONS)
