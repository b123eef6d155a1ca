"""The fault campaign of issue 20 for as long as asked, with a table of runs and anomalies.

Runs, in turn and with a new seed each time: a nemesis run under pull replication, one under
push, an exactly_once_v2 word count SIGKILLed at random points, the same for issue 16's stateful
DSL operators (window counts suppressed until close, session counts, a grouped table count)
under exactly_once_v2 and under at_least_once, and under exactly_once_v2 with two instances on
a real Apache Kafka broker started for the run (one killed at a time), and one case of the
corruption matrix (see tests/faults/campaign.py for what each checks). Stops
starting runs when the time is up; prints every run (seed, what it did, anomalies) and a
summary per kind. A run with anomalies keeps its work directory (its path printed with them).

    python bench/faults.py --minutes 30
    python bench/faults.py --seed 101 --only writes-pull      # replay one run
    python bench/faults.py --seed 7 --only eos-dsl --runs 1
"""

from __future__ import annotations

import argparse
import collections
import itertools
import logging
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
for extra in (ROOT, ROOT / "tests" / "replication", ROOT / "tests" / "faults"):
    sys.path.insert(0, str(extra))

from rich.console import Console  # noqa: E402
from rich.progress import BarColumn, Progress, TextColumn, TimeRemainingColumn  # noqa: E402
from rich.table import Table  # noqa: E402

from campaign import (CORRUPTION_CASES, RunReport, run_alos_dsl, run_corruption, run_eos, run_eos_dsl,  # noqa: E402
                      run_writes)

KINDS = ("writes-pull", "writes-push", "eos", "eos-dsl", "eos-dsl-pair", "alos-dsl", "corruption")


def one_run(kind: str, seed: int, workdir: Path) -> RunReport:
    if kind == "writes-pull":
        return run_writes(seed, "pull", workdir, steps=24)
    if kind == "writes-push":
        return run_writes(seed, "push", workdir, steps=24)
    if kind == "eos":
        return run_eos(seed, workdir, kills=4)
    if kind == "eos-dsl":
        return run_eos_dsl(seed, workdir, kills=4)
    if kind == "eos-dsl-pair":  # two instances need a real broker: one, started for the run
        from streams.testing.kafka_fixture import local_apache_kafka

        with local_apache_kafka(workdir / "kafka") as broker:
            return run_eos_dsl(seed, workdir, kills=4, kafka=broker.bootstrap_servers)
    if kind == "alos-dsl":
        return run_alos_dsl(seed, workdir, kills=4)
    cases = sorted(CORRUPTION_CASES)
    return run_corruption(cases[seed % len(cases)], seed, workdir)


def run_safely(kind: str, seed: int) -> tuple[RunReport, Path | None]:
    """The run's report, and its work directory when it found anomalies (kept, with the
    instances' stderr files and the brokers' data, for a look; else deleted)."""
    workdir = Path(tempfile.mkdtemp(prefix=f"eddy-faults-{kind}-{seed}-"))
    started = time.monotonic()
    report = None
    try:
        report = one_run(kind, seed, workdir)
    except Exception as e:  # a run that blows up is an anomaly of its own, with its seed
        family = "writes" if kind.startswith("writes") else kind
        report = RunReport(family, seed, kind, [f"run-failed: {type(e).__name__}: {e}"],
                           seconds=time.monotonic() - started)
    finally:
        if report is None or not report.anomalies:
            shutil.rmtree(workdir, ignore_errors=True)
    return report, workdir if report.anomalies else None


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--minutes", type=float, default=5.0, help="start runs until this much time has passed")
    ap.add_argument("--seed", type=int, default=1000, help="first seed (each run takes the next)")
    ap.add_argument("--only", default=",".join(KINDS), help=f"comma-separated kinds out of {', '.join(KINDS)}")
    ap.add_argument("--runs", type=int, default=0, help="stop after this many runs (0: only the time limit)")
    args = ap.parse_args()
    kinds = [k.strip() for k in args.only.split(",") if k.strip()]
    unknown = [k for k in kinds if k not in KINDS]
    if unknown:
        ap.error(f"unknown kinds {unknown}; choose from {list(KINDS)}")
    logging.basicConfig(level=logging.CRITICAL)  # brokers log expected faults loudly

    console = Console()
    deadline = time.monotonic() + args.minutes * 60
    reports: list[RunReport] = []
    seeds = itertools.count(args.seed)
    with Progress(TextColumn("{task.description}"), BarColumn(), TimeRemainingColumn(), console=console,
                  transient=True) as progress:
        task = progress.add_task("campaign", total=args.minutes * 60)
        for kind in itertools.cycle(kinds):
            if time.monotonic() >= deadline or (args.runs and len(reports) >= args.runs):
                break
            seed = next(seeds)
            progress.update(task, description=f"{kind} seed {seed} ({len(reports)} runs done)")
            report, kept = run_safely(kind, seed)
            reports.append(report)
            progress.update(task, completed=min(args.minutes * 60, args.minutes * 60 - (deadline - time.monotonic())))
            if report.anomalies:
                progress.console.print(f"[red]seed {seed} {kind}[/red]: {report.anomalies[:3]} (kept {kept})")

    runs = Table(title=f"fault campaign: {len(reports)} runs in {args.minutes:g} min")
    for column in ("kind", "detail", "seed", "acked", "seconds", "anomalies"):
        runs.add_column(column, overflow="fold")
    for r in reports:
        runs.add_row(r.kind, r.detail, str(r.seed), str(r.acked), f"{r.seconds:.1f}",
                     "[green]none[/green]" if not r.anomalies else "[red]" + "; ".join(r.anomalies[:3]) + "[/red]")
    console.print(runs)

    summary = Table(title="anomalies per kind of run")
    for column in ("kind", "runs", "acked writes", "runs with anomalies", "anomaly kinds"):
        summary.add_column(column, overflow="fold")
    by_kind: dict[str, list[RunReport]] = collections.defaultdict(list)
    for r in reports:
        by_kind[f"{r.kind} {r.detail}" if r.kind == "writes" else r.kind].append(r)
    for name, rs in sorted(by_kind.items()):
        kinds_seen = collections.Counter(a.split(":")[0] for r in rs for a in r.anomalies)
        summary.add_row(name, str(len(rs)), str(sum(r.acked for r in rs if r.kind == "writes")),
                        str(sum(1 for r in rs if r.anomalies)),
                        ", ".join(f"{k} x{n}" for k, n in kinds_seen.most_common()) or "none")
    console.print(summary)
    return 1 if any(r.anomalies for r in reports) else 0


if __name__ == "__main__":
    sys.exit(main())
