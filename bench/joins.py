"""Benchmark: a stream-table join and a stream-stream join (10 s window), against word count,
through the runtime on the embedded cluster (issue 17).

    python bench/joins.py [--records 1000000] [--guarantee at_least_once] [--partitions 2]
                          [--replication-factor 1] [--only wordcount,stream_table,stream_stream]
                          [--profile wordcount|stream_table|stream_stream]

Three apps, one after the other, each on one stream thread over `--records` input records
written beforehand (not timed), processing time only (records carry increasing event times):

- word count: bench/wordcount.py's topology and lines, the baseline; its records are lines.
- stream_table: clicks keyed by one of 10,000 users `.join(profiles table)` (a cached RocksDB
  store and its changelog, loaded from 10,000 profile records written first, with earlier
  timestamps, so the task reads them first) `.to(...)`: every click finds its profile.
- stream_stream: orders and payments (half of the records each) keyed by order id, each
  payment 0-5 s after its order, event time advancing 2 ms per order;
  `orders.join(payments, joiner, JoinWindows.of_time_difference_with_no_grace(10 s))` (two
  RocksDB window stores retaining duplicates and their changelogs) `.to(...)`: every payment
  joins its order once.

Each run is timed from RUNNING until every record is processed, plus the app's final commit.
Printed: records/s of each (input records / seconds; the 10,000 profiles are not counted) and
the ratio of the join rates to word count's of the same run (issue 17's targets: stream_table
>= 0.7, stream_stream >= 0.4), with the stream thread's and the process's CPU seconds. Not a
test: nothing is asserted.
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
from streams import JoinWindows, StreamsBuilder, serdes  # noqa: E402

S = serdes.STRING
USERS = 10_000
WINDOW_MS = 10_000
START_MS = 1_700_000_000_000
RUNS = ("wordcount", "stream_table", "stream_stream")


def make_profiles() -> list[tuple[bytes, bytes, int]]:
    return [(f"u{i:05d}".encode(), f"name{i}|tier{i % 3}".encode(), START_MS + i) for i in range(USERS)]


def make_clicks(n: int, seed: int = 4) -> list[tuple[bytes, bytes, int]]:
    """(user, page, timestamp): 1 ms apart, after every profile."""
    rng = random.Random(seed)
    users = [f"u{i:05d}".encode() for i in range(USERS)]
    base = START_MS + USERS
    return [(rng.choice(users), f"/page/{rng.randrange(100)}".encode(), base + i) for i in range(n)]


def make_orders(n: int, seed: int = 5) -> tuple[list, list]:
    """n // 2 orders (order id, "customer|amount", timestamp) 2 ms apart, and their payments
    (order id, method, timestamp) 0-5 s later, in time order."""
    rng = random.Random(seed)
    orders, payments = [], []
    for i in range(n // 2):
        t = START_MS + 2 * i
        key = f"o{i:07d}".encode()
        orders.append((key, f"c{rng.randrange(1000)}|{rng.randint(1, 500)}".encode(), t))
        payments.append((key, rng.choice((b"card", b"paypal", b"transfer")), t + rng.randint(0, 5000)))
    payments.sort(key=lambda record: record[2])
    return orders, payments


def enrich(page: str, profile: str) -> str:
    return f"{page} by {profile}"


def pay(order: str, method: str) -> str:
    return f"{order} paid by {method}"


def stream_table_topology(clicks: str, profiles: str, out: str):
    b = StreamsBuilder()
    table = b.table(profiles, key_serde=S, value_serde=S, store="profiles")
    b.stream(clicks, key_serde=S, value_serde=S).join(table, enrich).to(out, key_serde=S, value_serde=S)
    return b.build()


def stream_stream_topology(orders: str, payments: str, out: str):
    b = StreamsBuilder()
    (b.stream(orders, key_serde=S, value_serde=S)
        .join(b.stream(payments, key_serde=S, value_serde=S), pay, JoinWindows.of_time_difference_with_no_grace(WINDOW_MS))
        .to(out, key_serde=S, value_serde=S))
    return b.build()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--guarantee", default="at_least_once")
    parser.add_argument("--partitions", type=int, default=2)
    parser.add_argument("--replication-factor", type=int, default=1)
    parser.add_argument("--only", default=",".join(RUNS))
    parser.add_argument("--profile", choices=RUNS, help="cProfile the stream thread of this run (slower)")
    args = parser.parse_args()
    logging.basicConfig(level=logging.ERROR)
    runs = args.only.split(",")
    console = Console()
    n, rf = args.records, args.replication_factor
    work = tempfile.mkdtemp(prefix="eddy-bench-joins-")
    columns = (TextColumn("{task.description:<34}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    try:
        bootstrap = f"local://{work}/cluster"
        lines = make_lines(n)
        n_words = sum(len(line.split()) for line in lines)
        orders, payments = make_orders(n)
        inputs = {"wordcount": {"bench-lines": [(None, line) for line in lines]},
                  "stream_table": {"bench-profiles": make_profiles(), "bench-clicks": make_clicks(n)},
                  "stream_stream": {"bench-orders": orders, "bench-payments": payments}}
        targets = {"wordcount": n + n_words, "stream_table": USERS + n, "stream_stream": len(orders) + len(payments)}
        topologies = {
            "wordcount": lambda out: wordcount_topology("bench-lines", out),
            "stream_table": lambda out: stream_table_topology("bench-clicks", "bench-profiles", out),
            "stream_stream": lambda out: stream_stream_topology("bench-orders", "bench-payments", out)}
        app_bench.create_topics(bootstrap, {t: args.partitions for r in runs for t in inputs[r]}
                                | {f"{r}-out": args.partitions for r in runs}, rf)
        with Progress(*columns, console=console) as progress:
            for run in runs:
                for topic, records in inputs[run].items():
                    task = progress.add_task(f"writing {topic}", total=len(records))
                    app_bench.produce(bootstrap, topic, records, lambda k, task=task: progress.advance(task, k))
        console.print(f"{n:,} records per run (word count: {n_words:,} words repartitioned; stream_table: "
                      f"{USERS:,} profiles first; stream_stream: {len(orders):,} orders and {len(payments):,} "
                      f"payments); {args.guarantee}, {args.partitions} partitions")
        rates: dict[str, float] = {}
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
                secs = app_bench.run_app(topologies[run](f"{run}-out"), config, app_bench.processed_at_least(target),
                                         show)
            rates[run] = n / secs
            ratio = (f"  ratio to word count {rates[run] / rates['wordcount']:.3f}"
                     if "wordcount" in rates and run != "wordcount" else "")
            console.print(f"{run:<13}: {secs:6.2f}s  {rates[run]:10,.0f} records/s{ratio}")
            if app_bench.cpu_line():
                console.print(app_bench.cpu_line())
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
