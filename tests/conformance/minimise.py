"""Shrink a mismatching conformance scenario to a small one that still mismatches.

    python tests/conformance/minimise.py SEED [SEED...]

Each round builds every one-step reduction of the current scenario (drop a record, drop a half
of the records, drop an operation, also one of a join's other side, reset a timestamp to its
predecessor's), runs them all through
Kafka Streams in one JVM and through Eddy, and keeps the smallest that still mismatches in the
same part (output or store) without failing on either side; it stops when none does. Prints the
minimal scenario as JSON (feed it to ``vocabulary.run_eddy`` and ``runner.run_kafka_streams``).
"""

from __future__ import annotations

import copy
import json
import logging
import shutil
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(0, str(Path(__file__).parents[2]))

import runner  # noqa: E402
import vocabulary  # noqa: E402


def _candidates(scenario: dict) -> list[dict]:
    records, ops = scenario["records"], scenario["ops"]
    out = []
    n = len(records)
    if n > 1:
        for lo, hi in ((0, n // 2), (n // 2, n)):
            out.append(records[:lo] + records[hi:])
        out.extend(records[:i] + records[i + 1:] for i in range(n))
    shapes = [dict(scenario, records=r) for r in out]
    for i in range(len(ops)):  # an op may be droppable (the JVM or Eddy rejects what is not)
        shapes.append(dict(scenario, ops=ops[:i] + ops[i + 1:]))
        side = ops[i].get("other")
        for j in range(len(side["ops"]) if side else 0):  # and so may one of a join's other side
            step = dict(ops[i], other=dict(side, ops=side["ops"][:j] + side["ops"][j + 1:]))
            shapes.append(dict(scenario, ops=ops[:i] + [step] + ops[i + 1:]))
    for i in range(1, n):
        if records[i][2] != records[i - 1][2]:
            r = copy.deepcopy(records)
            r[i][2] = r[i - 1][2]
            shapes.append(dict(scenario, records=r))
    return shapes


def _size(s: dict) -> tuple:
    return (len(s["records"]) + len(s["ops"]), sum(r[2] for r in s["records"]))


def _mismatch(scenario: dict, expected: dict, work: Path) -> str | None:
    if expected.get("error"):
        return None
    try:
        got = runner.run_eddy(scenario, work)
    except Exception:
        return None
    if got["output"] != expected["output"]:
        return "output"
    if got["store"] != expected["store"]:
        return "store"
    return None


def minimise(seed: int, work: Path) -> dict:
    scenario = vocabulary.generate(seed)
    expected = runner.run_kafka_streams([scenario])[seed]
    part = _mismatch(scenario, expected, work)
    if part is None:
        raise SystemExit(f"seed {seed} does not mismatch")
    while True:
        shapes = _candidates(scenario)
        for i, s in enumerate(shapes):
            s["seed"] = 1_000_000 + i
        results = runner.run_kafka_streams(shapes)
        smaller = [s for s in shapes if _mismatch(s, results[s["seed"]], work) == part]
        if not smaller:
            scenario["seed"] = seed
            return scenario
        scenario = min(smaller, key=_size)


if __name__ == "__main__":
    logging.disable(logging.WARNING)
    scratch = runner.scratch_dir("eddy-minimise-")
    try:
        for arg in sys.argv[1:]:
            small = minimise(int(arg), scratch)
            expected = runner.run_kafka_streams([small])[small["seed"]]
            got = runner.run_eddy(small, scratch)
            print(json.dumps(small))
            print(" eddy ", json.dumps(got))
            print(" kafka", json.dumps({k: expected[k] for k in ("output", "store")}))
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
