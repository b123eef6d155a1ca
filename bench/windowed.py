"""Benchmark: a windowed count with suppress and a table aggregation with key changes, against
word count, through the runtime on the embedded cluster (issue 16).

    python bench/windowed.py [--records 1000000] [--guarantee at_least_once] [--partitions 2]
                             [--replication-factor 1] [--only wordcount,windowed,table]
                             [--profile windowed|table|wordcount]

Three apps, one after the other, each on one stream thread over `--records` input records
written beforehand (not timed), processing time only (records carry increasing event times):

- word count: bench/wordcount.py's topology and lines, the baseline; its records are lines.
- windowed: records keyed by one of 10,000 keys, event time advancing 1 ms per record with 10%
  of the records up to 2 s out of order and 0.1% later than the grace (dropped);
  `group_by_key().windowed_by(TimeWindows.of_size_and_grace(60 s, 5 s)).count()` (a cached
  RocksDB window store and its changelog) `.suppress(until_window_closes(unbounded()))`, the
  final counts written out. No repartition.
- table: updates of 10,000 users' group (one of 100; 1% tombstones), `builder.table(...)`
  (source store uncached, so every update regroups; a cached one would dedup most of them away
  and leave little for the aggregate to do) `.group_by(group, user).count()` (adder and
  subtractor, a cached timestamped store and its changelog) through the repartition topic, the
  counts written out. An update moving a user sends two repartition records (the old group's
  subtraction, the new group's addition); all are processed.

Each run is timed from RUNNING until every input and repartition record is processed, plus the
app's final commit. Printed: records/s of each (input records / seconds) and the ratio of the
windowed and table rates to word count's of the same run (issue 16's target: each >= 0.5), also
by the process's CPU seconds (steadier than wall time on a shared machine), with the stream
thread's and the process's CPU seconds. Not a test: nothing is asserted.
"""

from __future__ import annotations

import argparse
import logging
import os
import random
import shutil
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from rich.console import Console  # noqa: E402
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn  # noqa: E402

from bench import app_bench  # noqa: E402
from bench.wordcount import make_lines, topology as wordcount_topology  # noqa: E402
from streams import (BufferConfig, Materialized, StreamsBuilder, Suppressed, TimeWindows,  # noqa: E402
                     serdes)

S, I64 = serdes.STRING, serdes.INT64
KEYS = 10_000
GROUPS = 100
WINDOW_MS, GRACE_MS = 60_000, 5_000
START_MS = 1_700_000_000_000


def make_events(n: int, seed: int = 2) -> list[tuple[bytes, bytes, int]]:
    """(key, value, timestamp): 1 ms apart, 10% up to 2 s back, 0.1% past the grace."""
    rng = random.Random(seed)
    keys = [f"k{i:04d}".encode() for i in range(KEYS)]
    out = []
    for i in range(n):
        t = START_MS + i
        r = rng.random()
        if r < 0.001:
            t -= WINDOW_MS + GRACE_MS
        elif r < 0.1:
            t -= rng.randint(0, 2000)
        out.append((rng.choice(keys), b"v", t))
    return out


def make_updates(n: int, seed: int = 3) -> tuple[list[tuple[bytes, bytes | None]], int]:
    """(user, group or None) updates, and how many repartition records they make (Kafka's
    KTableRepartitionMap: one when the group stays, two when it changes, none for a tombstone
    of an absent user)."""
    rng = random.Random(seed)
    users = [f"u{i:05d}".encode() for i in range(KEYS)]
    groups = [f"g{i:03d}".encode() for i in range(GROUPS)]
    table: dict[bytes, bytes] = {}
    out, repartitioned = [], 0
    for _ in range(n):
        user = rng.choice(users)
        group = None if rng.random() < 0.01 else rng.choice(groups)
        old = table.get(user)
        if group is None:
            table.pop(user, None)
            repartitioned += old is not None
        else:
            table[user] = group
            repartitioned += 1 if old is None or old == group else 2
        out.append((user, group))
    return out, repartitioned


def windowed_topology(events_topic: str, out: str):
    b = StreamsBuilder()
    (b.stream(events_topic, key_serde=S, value_serde=S)
        .group_by_key()
        .windowed_by(TimeWindows.of_size_and_grace(WINDOW_MS, GRACE_MS))
        .count(store="window-counts")
        .suppress(Suppressed.until_window_closes(BufferConfig.unbounded()))
        .to_stream()
        .to(out, key_serde=serdes.time_windowed(S, WINDOW_MS), value_serde=I64))
    return b.build()


def table_topology(updates_topic: str, out: str):
    b = StreamsBuilder()
    (b.table(updates_topic, key_serde=S, value_serde=S, store=Materialized.as_("users").with_caching_disabled())
        .group_by(lambda user, group: (group, user), key_serde=S, value_serde=S)
        .count(store="users-per-group")
        .to_stream()
        .to(out, key_serde=S, value_serde=I64))
    return b.build()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--guarantee", default="at_least_once")
    parser.add_argument("--partitions", type=int, default=2)
    parser.add_argument("--replication-factor", type=int, default=1)
    parser.add_argument("--only", default="wordcount,windowed,table")
    parser.add_argument("--profile", choices=("wordcount", "windowed", "table"),
                        help="cProfile the stream thread of this run (slower)")
    args = parser.parse_args()
    logging.basicConfig(level=logging.ERROR)  # late records are dropped by design: no WARN per window
    runs = args.only.split(",")
    console = Console()
    n, rf = args.records, args.replication_factor
    work = tempfile.mkdtemp(prefix="eddy-bench-windowed-")
    columns = (TextColumn("{task.description:<34}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    try:
        bootstrap = f"local://{work}/cluster"
        lines = make_lines(n)
        n_words = sum(len(line.split()) for line in lines)
        events = make_events(n)
        updates, repartitioned = make_updates(n)
        inputs = {"wordcount": ("bench-lines", [(None, line) for line in lines]),
                  "windowed": ("bench-events", events), "table": ("bench-updates", updates)}
        targets = {"wordcount": n + n_words, "windowed": n, "table": n + repartitioned}
        topologies = {"wordcount": wordcount_topology, "windowed": windowed_topology, "table": table_topology}
        app_bench.create_topics(bootstrap, {inputs[r][0]: args.partitions for r in runs}
                                | {f"{r}-out": args.partitions for r in runs}, rf)
        with Progress(*columns, console=console) as progress:
            for run in runs:
                topic, records = inputs[run]
                task = progress.add_task(f"writing {topic}", total=len(records))
                app_bench.produce(bootstrap, topic, records, lambda k, task=task: progress.advance(task, k))
        console.print(f"{n:,} records per run (word count: {n_words:,} words repartitioned; "
                      f"table: {repartitioned:,} records repartitioned); {args.guarantee}, "
                      f"{args.partitions} partitions")
        rates: dict[str, float] = {}
        cpu_rates: dict[str, float] = {}  # records per CPU second of the process: steadier on a shared machine
        for run in runs:
            if args.profile == run:
                app_bench.profile_stream_thread()
            else:
                app_bench.record_thread_cpu()
            config = {"application.id": f"bench-{run}", "bootstrap.servers": bootstrap,
                      "state.dir": os.path.join(work, f"state-{run}"), "processing.guarantee": args.guarantee,
                      "replication.factor": rf}
            target = targets[run]
            with Progress(*columns, console=console, transient=True) as progress:
                task = progress.add_task(f"{run}: records processed", total=target)

                def show(app, task=task, progress=progress):
                    progress.update(task, completed=sum(t.processed_total for t in app.threads))
                secs = app_bench.run_app(topologies[run](inputs[run][0], f"{run}-out"), config,
                                         app_bench.processed_at_least(target), show)
            rates[run] = n / secs
            cpu_rates[run] = n / app_bench.THREAD_CPU["process"]
            ratio = ""
            if "wordcount" in rates and run != "wordcount":
                ratio = (f"  ratio to word count {rates[run] / rates['wordcount']:.3f} "
                         f"(by process CPU: {cpu_rates[run] / cpu_rates['wordcount']:.3f})")
            console.print(f"{run:<10}: {secs:6.2f}s  {rates[run]:10,.0f} records/s{ratio}")
            if app_bench.cpu_line():
                console.print(app_bench.cpu_line())
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
