"""Run cached conformance scenarios under many cache sizes against Kafka Streams.

    python tests/conformance/sweep_caches.py FIRST_SEED COUNT [--sizes N] [--only-global]

Takes the cached scenarios among seeds FIRST_SEED to FIRST_SEED + COUNT - 1 (odd seeds: see
``vocabulary.generate``), optionally only those that join a global table, and gives each `--sizes`
cache sizes drawn from 16 to 1,499 bytes (a few entries: where Kafka's entry sizes decide what
is evicted, and when). Every variant runs through Kafka Streams (one JVM) and through Eddy; their
outputs and stores are compared. Prints each mismatch (seed, cache size, the part that differs)
and a summary; exits 1 on any mismatch. A variant that fails on either side is counted apart. Not
a test: a tool for campaigns beside the test suite (its seeds and cache sizes are the
scenario's own, so a finding replays with ``vocabulary.run_eddy``).
"""

from __future__ import annotations

import argparse
import random
import shutil
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(0, str(Path(__file__).parents[2]))

import runner  # noqa: E402
import vocabulary  # noqa: E402

SMALLEST, LARGEST = 16, 1_499
SEED_STRIDE = 1_000  # a variant's seed: the base seed times this, plus its index (unique per run)


def _joins_a_global_table(scenario: dict) -> bool:
    return any(step.get("op") == "global_join" for step in scenario["ops"])


def variants(first: int, count: int, sizes: int, only_global: bool) -> list[dict]:
    """The swept scenarios: each cached base scenario with `sizes` cache sizes of its own."""
    out = []
    for seed in range(first, first + count):
        base = vocabulary.generate(seed)
        if not base["cache_max_bytes"] or (only_global and not _joins_a_global_table(base)):
            continue
        rng = random.Random(f"sweep-{seed}")
        for i in range(sizes):
            out.append(dict(base, seed=seed * SEED_STRIDE + i, base_seed=seed,
                            cache_max_bytes=rng.randint(SMALLEST, LARGEST)))
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("first", type=int)
    parser.add_argument("count", type=int)
    parser.add_argument("--sizes", type=int, default=20)
    parser.add_argument("--only-global", action="store_true", help="only scenarios joining a global table")
    args = parser.parse_args()
    swept = variants(args.first, args.count, args.sizes, args.only_global)
    if not swept:
        print("no cached scenario among those seeds")
        return 0
    expected = runner.run_kafka_streams(swept)
    work = runner.scratch_dir("eddy-sweep-")
    try:
        mismatches, failed = _compare(swept, expected, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(f"{len(swept)} variants of {len({s['base_seed'] for s in swept})} scenarios "
          f"(seeds {args.first} to {args.first + args.count - 1}): {mismatches} mismatching, "
          f"{failed} failing on both sides")
    return 1 if mismatches else 0


def _compare(swept: list[dict], expected: dict[int, dict], work: Path) -> tuple[int, int]:
    """Each variant through Eddy against Kafka Streams' result: (mismatching, failing on both
    sides), each mismatch printed."""
    mismatches = failed = 0
    for scenario in swept:
        kafka = expected[scenario["seed"]]
        try:
            got = runner.run_eddy(scenario, work)
        except Exception as exc:  # noqa: BLE001 - counted and shown, the sweep goes on
            got = {"error": repr(exc)}
        if kafka.get("error") or got.get("error"):
            if bool(kafka.get("error")) != bool(got.get("error")):
                mismatches += 1
                print(f"seed {scenario['base_seed']} cache {scenario['cache_max_bytes']}: one side failed "
                      f"(Kafka Streams: {kafka.get('error')}; Eddy: {got.get('error')})")
            else:
                failed += 1
            continue
        for part in ("output", "store"):
            if got[part] != kafka[part]:
                mismatches += 1
                print(f"seed {scenario['base_seed']} cache {scenario['cache_max_bytes']}: {part} differs")
                break
    return mismatches, failed


if __name__ == "__main__":
    sys.exit(main())
