"""Benchmark: a windowed count with suppress, a table aggregation with key changes, a
stream-table join and a stream-stream join, against word count, through the runtime on the
embedded cluster (issues 16 and 17).

    python bench/windowed.py [--records 1000000] [--guarantee at_least_once] [--partitions 2]
                             [--replication-factor 1]
                             [--only wordcount,windowed,table,stream_table,stream_stream]
                             [--profile wordcount|windowed|table|stream_table|stream_stream]

Apps one after the other, each on one stream thread over `--records` input records
written beforehand (not timed), processing time only (records carry event times):

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
- stream_table: clicks keyed by one of 10,000 users `.join(profiles table)` (a cached RocksDB
  store and its changelog, loaded from 10,000 profile records written first, with earlier
  timestamps, so the task reads them first) `.to(...)`: every click finds its profile.
- stream_stream: orders and payments keyed by order id (see make_orders: every order id is
  new, so about 10,000 keys live in each side's store at a time; a payment 0.1-8 s after its
  order, some orders unpaid, some paid twice; 5% of each topic's records up to 1 s out of order;
  the two topics interleave record by record in time order, as a task reads them)
  `orders.join(payments, joiner, JoinWindows.of_time_difference_with_no_grace(10 s))` (two
  RocksDB window stores retaining duplicates and their changelogs) `.to(...)`: every payment
  joins its order.

The two joins run with max.task.idle.ms 200 (Kafka's setting for joins, KIP-353): a task
waits for its other input at start rather than running one input ahead (which would leave
records unjoined: a cheaper workload). After each join run its output topic is read back (not
timed) and the joined results counted against the expected count.

Each run is timed from RUNNING until every input and repartition record is processed, plus the
app's final commit. Printed: records/s of each (input records / seconds; the 10,000 profiles
are not counted) and the ratio of each rate to word count's of the same run (issue 16's
targets: windowed and table each >= 0.5; issue 17's: stream_table >= 0.7, stream_stream >= 0.4), also
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
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from confluent_kafka import OFFSET_BEGINNING, TopicPartition  # noqa: E402
from rich.console import Console  # noqa: E402
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn  # noqa: E402

from bench import app_bench  # noqa: E402
from bench.wordcount import make_lines, topology as wordcount_topology  # noqa: E402
from streams import (BufferConfig, JoinWindows, Materialized, StreamsBuilder, Suppressed,  # noqa: E402
                     TimeWindows, serdes)
from streams.backends import for_config  # noqa: E402

S, I64 = serdes.STRING, serdes.INT64
KEYS = 10_000
GROUPS = 100
WINDOW_MS, GRACE_MS = 60_000, 5_000
START_MS = 1_700_000_000_000
USERS = 10_000  # stream_table: profiles
JOIN_WINDOW_MS = 10_000  # stream_stream
JOIN_CONFIG = {"max.task.idle.ms": 200}  # the join runs' (see the module doc)
RUNS = ("wordcount", "windowed", "table", "stream_table", "stream_stream")


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


def make_profiles() -> list[tuple[bytes, bytes, int]]:
    return [(f"u{i:05d}".encode(), f"name{i}|tier{i % 3}".encode(), START_MS + i) for i in range(USERS)]


def make_clicks(n: int, seed: int = 4) -> list[tuple[bytes, bytes, int]]:
    """(user, page, timestamp): 1 ms apart, after every profile."""
    rng = random.Random(seed)
    users = [f"u{i:05d}".encode() for i in range(USERS)]
    base = START_MS + USERS
    return [(rng.choice(users), f"/page/{rng.randrange(100)}".encode(), base + i) for i in range(n)]


def _jitter(records: list, rng: random.Random) -> list:
    """`records` (time order) with 5% of them written up to 1 s late: each such record moves
    behind the records of the next second, keeping its own timestamp (out of order)."""
    placed = [(t + rng.randint(1, 1000) if rng.random() < 0.05 else t, i) for i, (_, _, t) in enumerate(records)]
    placed.sort()
    return [records[i] for _, i in placed]


def make_orders(n: int, seed: int = 5) -> tuple[list, list]:
    """Orders (order id, "customer|amount", timestamp) 2 ms apart, each id new, and their
    payments (order id, method, timestamp): 94% of orders paid once and 3% twice (a split
    payment), 0.1-8 s after the order, the other 3% never; `n` records in all. Each topic is in
    time order but for 5% of its records, written up to 1 s late (`_jitter`)."""
    rng = random.Random(seed)
    orders, payments = [], []
    i = 0
    while len(orders) + len(payments) < n:
        t = START_MS + 2 * i
        key = f"o{i:07d}".encode()
        orders.append((key, f"c{rng.randrange(100_000)}|{rng.randint(1, 500)}".encode(), t))
        r = rng.random()
        for _ in range(0 if r < 0.03 else 2 if r < 0.06 else 1):
            if len(orders) + len(payments) < n:
                payments.append((key, rng.choice((b"card", b"paypal", b"transfer")), t + rng.randint(100, 8000)))
        i += 1
    payments.sort(key=lambda record: record[2])
    return _jitter(orders, rng), _jitter(payments, rng)


def enrich(page: str, profile: str) -> str:
    return f"{page} by {profile}"


def pay(order: str, method: str) -> str:
    return f"{order} paid by {method}"


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


def stream_table_topology(clicks: str, out: str, profiles: str = "bench-profiles"):
    b = StreamsBuilder()
    table = b.table(profiles, key_serde=S, value_serde=S, store="profiles")
    b.stream(clicks, key_serde=S, value_serde=S).join(table, enrich).to(out, key_serde=S, value_serde=S)
    return b.build()


def stream_stream_topology(orders: str, out: str, payments: str = "bench-payments"):
    b = StreamsBuilder()
    (b.stream(orders, key_serde=S, value_serde=S)
        .join(b.stream(payments, key_serde=S, value_serde=S), pay,
              JoinWindows.of_time_difference_with_no_grace(JOIN_WINDOW_MS))
        .to(out, key_serde=S, value_serde=S))
    return b.build()


def count_records(bootstrap: str, topic: str, partitions: int, expected: int, timeout: float = 60) -> int:
    """The records of `topic` (all partitions), read until `expected` are seen or nothing new
    comes for 3 s (or `timeout` passes)."""
    backend = for_config({"bootstrap.servers": bootstrap})
    consumer = backend.consumer({"group.id": f"bench-count-{topic}", "enable.auto.commit": False})
    try:
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
        seen, deadline, quiet = 0, time.monotonic() + timeout, time.monotonic() + 3
        while seen < expected and time.monotonic() < min(deadline, quiet):
            got = sum(1 for m in consumer.consume(5000, 0.2) if m.error() is None)
            if got:
                seen += got
                quiet = time.monotonic() + 3
        return seen
    finally:
        consumer.close()
        backend.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--guarantee", default="at_least_once")
    parser.add_argument("--partitions", type=int, default=2)
    parser.add_argument("--replication-factor", type=int, default=1)
    parser.add_argument("--only", default=",".join(RUNS))
    parser.add_argument("--profile", choices=RUNS, help="cProfile the stream thread of this run (slower)")
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
        # the joins: their main input here, their other input (written first) in `second`
        orders, payments = make_orders(n)
        inputs |= {"stream_table": ("bench-clicks", make_clicks(n)), "stream_stream": ("bench-orders", orders)}
        second = {"stream_table": ("bench-profiles", make_profiles()), "stream_stream": ("bench-payments", payments)}
        targets |= {"stream_table": USERS + n, "stream_stream": n}
        joined = {"stream_table": n, "stream_stream": len(payments)}  # results expected
        topologies |= {"stream_table": stream_table_topology, "stream_stream": stream_stream_topology}
        app_bench.create_topics(bootstrap, {second[r][0]: args.partitions for r in runs if r in second}, rf)
        app_bench.create_topics(bootstrap, {inputs[r][0]: args.partitions for r in runs}
                                | {f"{r}-out": args.partitions for r in runs}, rf)
        with Progress(*columns, console=console) as progress:
            for run in runs:
                for topic, records in (second[run], inputs[run]) if run in second else (inputs[run],):
                    task = progress.add_task(f"writing {topic}", total=len(records))
                    app_bench.produce(bootstrap, topic, records, lambda k, task=task: progress.advance(task, k))
        console.print(f"{n:,} records per run (word count: {n_words:,} words repartitioned; "
                      f"table: {repartitioned:,} records repartitioned; stream_table: {USERS:,} profiles "
                      f"first; stream_stream: {len(orders):,} orders, {len(payments):,} payments); "
                      f"{args.guarantee}, {args.partitions} partitions")
        rates: dict[str, float] = {}
        cpu_rates: dict[str, float] = {}  # records per CPU second of the process: steadier on a shared machine
        for run in runs:
            if args.profile == run:
                app_bench.profile_stream_thread()
            else:
                app_bench.record_thread_cpu()
            config = {"application.id": f"bench-{run}", "bootstrap.servers": bootstrap,
                      "state.dir": os.path.join(work, f"state-{run}"), "processing.guarantee": args.guarantee,
                      "replication.factor": rf} | (JOIN_CONFIG if run in second else {})
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
            console.print(f"{run:<13}: {secs:6.2f}s  {rates[run]:10,.0f} records/s{ratio}")
            if app_bench.cpu_line():
                console.print(app_bench.cpu_line())
            if run in joined:
                got = count_records(bootstrap, f"{run}-out", args.partitions, joined[run])
                console.print(f"  joined: {got:,} results of {joined[run]:,} expected")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
