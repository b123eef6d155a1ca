"""Benchmark: bench/windowed.py's table aggregation and stream-stream join against its word
count, in Eddy and in Kafka Streams, on one real Kafka broker: what each framework's own ratio is.

    python bench/dsl_kafka.py [--records 1000000] [--only table,stream_stream] [--partitions 2]
                              [--commit-interval-ms 1000] [--bootstrap-servers HOST:PORT]
                              [--skip-kafka-streams] [--table-design uncached-hot|spread|cached-hot]
                              [--cache-max-bytes N]

Issues 16 and 17 ask the table aggregation for at least 0.5 of word count's records/s and the
stream-stream join for 0.4. This script puts those targets next to Kafka Streams: the same
workloads as bench/windowed.py (its word count lines; its table design, `--table-design`, over
`builder.table(...).group_by(group, user).count()`: `spread`, 250,000 users each updated once
per round, in 4 random rounds, caching on, the 10 MiB default cache, or `uncached-hot`, 10,000
users updated at random, the source table's store uncached, or `cached-hot`, that input with
caching on; its orders
and payments joined within 10 s, max.task.idle.ms 200), the same broker, and each framework's own ratio to its own word
count. The broker is
`--bootstrap-servers`, else `KAFKA_BOOTSTRAP_SERVERS`, else a local Apache Kafka broker started
as the integration tests start it. Kafka Streams (the broker's version) runs
bench/kafka_streams/DslWorkloads.java, compiled against jars fetched from Maven Central.

Every run: one stream thread, at-least-once, `--cache-max-bytes` (statestore.cache.max.bytes,
Kafka's 10 MiB default unless given), `--commit-interval-ms` (the same for all: the
table's last updates wait in the source table's cache for a commit, so Kafka's 30 s default
would time the wait), timed from RUNNING until the work is done. Word count is done when every
line and every repartitioned word is processed (Eddy: its thread's processed records; Kafka
Streams: a peek right before the count); the table when its count store (100 groups, read
through interactive queries every 10 ms) holds every group's expected final count; the join
when every input record has gone through it (a peek on each side before it, in both; the
results, counted by a peek after it, are printed). With the table's rate: the counts written out
(the records in its output topic), which show how many of the aggregation's updates its cache
merged away in that run: the work done differs with them. Not a test: nothing
is asserted, but a run that does not reach the expected results fails.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import uuid
from pathlib import Path

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from confluent_kafka import Consumer  # noqa: E402

from bench import app_bench  # noqa: E402
from bench.wordcount import make_lines  # noqa: E402
from bench.windowed import (JOIN_CONFIG, JOIN_WINDOW_MS, TABLE_DESIGNS, final_counts, make_orders,  # noqa: E402
                            make_updates, pay, table_topology, wordcount_topology)
from bench.wordcount_kafka import broker, create_topic  # noqa: E402
from streams import App, JoinWindows, StreamsBuilder, serdes  # noqa: E402

DEADLINE_S = 1800


def stream_stream_topology(orders: str, payments: str, out: str, counts: list) -> object:
    """windowed.py's join, as DslWorkloads.java runs it: a peek on each side before it counting
    the input records into `counts[0]`, one after it counting the results into `counts[1]`."""
    def processed(key: str, value: str) -> None:
        counts[0] += 1

    def joined(key: str, value: str) -> None:
        counts[1] += 1
    b = StreamsBuilder()
    S = serdes.STRING
    (b.stream(orders, key_serde=S, value_serde=S)
        .peek(processed)
        .join(b.stream(payments, key_serde=S, value_serde=S).peek(processed), pay,
              JoinWindows.of_time_difference_with_no_grace(JOIN_WINDOW_MS))
        .peek(joined)
        .to(out, key_serde=S, value_serde=S))
    return b.build()


def run_eddy(bootstrap: str, mode: str, input_topic: str, work: str, commit_ms: int, n: int,
             target: int, expected: dict[str, int], design: str = "spread",
             cache_max_bytes: int | None = None) -> tuple[float, int, str]:
    """(seconds from RUNNING until the work is done (see the module doc), the join's results,
    the output topic); `target`: word count's words, the join's input records."""
    suffix = uuid.uuid4().hex[:8]
    output = f"eddy-{mode}-out-{suffix}"
    create_topic(bootstrap, output, 1)
    counts = [0, 0]
    if mode == "stream_stream":
        topology = stream_stream_topology(*input_topic.split(","), output, counts)
    else:
        topology = (wordcount_topology(input_topic, output) if mode == "wordcount"
                    else table_topology(input_topic, output, design))
    config = {"application.id": f"eddy-{mode}-{suffix}", "bootstrap.servers": bootstrap,
              "state.dir": os.path.join(work, f"eddy-{mode}"), "processing.guarantee": "at_least_once",
              "commit.interval.ms": commit_ms, "replication.factor": 1} | (JOIN_CONFIG if mode == "stream_stream" else {})
    if cache_max_bytes is not None:
        config["statestore.cache.max.bytes"] = cache_max_bytes

    def done(app: App) -> bool:
        if mode == "wordcount":
            return sum(t.processed_total for t in app.threads) >= n + target
        if mode == "stream_stream":
            return counts[0] >= target
        got = {key: count for key, count in app.store("users-per-group").all() if count}
        return got == expected
    secs = app_bench.run_app(topology, config, done, time_close=False, deadline_s=DEADLINE_S)
    return secs, counts[1], output


def run_kafka_streams(bootstrap: str, mode: str, input_topic: str, work: str, commit_ms: int, target: int,
                      expected: dict[str, int], design: str = "spread",
                      cache_max_bytes: int | None = None) -> tuple[float, int, str]:
    from streams.testing.maven_jars import STREAMS_ARTIFACTS, class_path, compile_java, fetch_jars

    jars = fetch_jars("streams", STREAMS_ARTIFACTS)
    classes = compile_java([Path(ROOT) / "bench" / "kafka_streams" / "DslWorkloads.java"], jars)
    suffix = uuid.uuid4().hex[:8]
    output = f"kstreams-{mode}-out-{suffix}"
    create_topic(bootstrap, output, 1)
    if mode != "table":
        expectation = str(target)
    else:
        expectation = os.path.join(work, "expected-counts.txt")
        with open(expectation, "w") as f:
            f.writelines(f"{group} {count}\n" for group, count in sorted(expected.items()))
    cmd = ["java", "-Xmx2g", "-cp", f"{classes}:{class_path(jars)}", "DslWorkloads", mode, bootstrap,
           input_topic, output, f"kstreams-{mode}-{suffix}", os.path.join(work, f"kstreams-{mode}"),
           str(commit_ms), expectation, design] + ([] if cache_max_bytes is None else [str(cache_max_bytes)])
    finished = subprocess.run(cmd, capture_output=True, text=True, timeout=DEADLINE_S + 120)
    result_lines = [line for line in finished.stdout.splitlines() if line.startswith("{")]
    if finished.returncode != 0 or not result_lines:
        raise SystemExit(f"Kafka Streams' {mode} run failed (exit {finished.returncode}):\n"
                         f"{finished.stdout[-2000:]}\n{finished.stderr[-3000:]}")
    result = json.loads(result_lines[-1])
    return result["done"] - result["running"], result["joined"], output


def written_out(bootstrap: str, output: str) -> int:
    """The records in a run's output topic (one partition, see run_eddy)."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"dsl-kafka-{uuid.uuid4().hex[:8]}"})
    try:
        return app_bench.records_in(consumer, output, 1)
    finally:
        consumer.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--only", default="table,stream_stream", help="the workloads beside word count")
    parser.add_argument("--partitions", type=int, default=2)
    parser.add_argument("--commit-interval-ms", type=int, default=1000)
    parser.add_argument("--bootstrap-servers", default=os.environ.get("KAFKA_BOOTSTRAP_SERVERS") or None)
    parser.add_argument("--skip-kafka-streams", action="store_true")
    parser.add_argument("--table-design", choices=TABLE_DESIGNS, default="spread",
                        help="the table run's input and source store (bench/windowed.py's designs)")
    parser.add_argument("--cache-max-bytes", type=int, default=None,
                        help="statestore.cache.max.bytes of every run (Kafka's default when not given)")
    args = parser.parse_args()
    modes = ["wordcount"] + [mode for mode in args.only.split(",") if mode in ("table", "stream_stream")]
    n = args.records
    lines = make_lines(n)
    words = sum(len(line.split()) for line in lines)
    updates, _ = make_updates(n, args.table_design)
    expected = final_counts(updates)
    orders, payments = make_orders(n)
    # what each run waits for (see the module doc), and its input: (topic, records) in writing order
    targets = {"wordcount": words, "table": 0, "stream_stream": n}
    tag = uuid.uuid4().hex[:8]
    inputs = {"wordcount": [(f"dsl-kafka-lines-{tag}", [(None, line) for line in lines])],
              "table": [(f"dsl-kafka-updates-{tag}", updates)],
              "stream_stream": [(f"dsl-kafka-payments-{tag}", payments), (f"dsl-kafka-orders-{tag}", orders)]}
    work = tempfile.mkdtemp(prefix="eddy-bench-dsl-kafka-")
    try:
        with broker(args.bootstrap_servers, "kafka") as (bootstrap, description):
            print(f"broker: {description}", flush=True)
            for mode in modes:
                for topic, records in inputs[mode]:
                    create_topic(bootstrap, topic, args.partitions)
                    app_bench.produce(bootstrap, topic, records)
            # the join reads "orders,payments"
            topics = {mode: ",".join(topic for topic, _ in reversed(inputs[mode])) for mode in modes}
            print(f"{n:,} records per run (word count: {words:,} words; table ({args.table_design}): "
                  f"{len(expected)} groups at the end; "
                  f"stream_stream: {len(orders):,} orders, {len(payments):,} payments), {args.partitions} partitions, "
                  f"commit.interval.ms {args.commit_interval_ms}, statestore.cache.max.bytes "
                  f"{'default' if args.cache_max_bytes is None else args.cache_max_bytes}")
            frameworks = [("Eddy", lambda mode: run_eddy(bootstrap, mode, topics[mode], work, args.commit_interval_ms,
                                                         n, targets[mode], expected, args.table_design,
                                                         args.cache_max_bytes))]
            if not args.skip_kafka_streams:
                frameworks.append(("Kafka Streams", lambda mode: run_kafka_streams(
                    bootstrap, mode, topics[mode], work, args.commit_interval_ms, targets[mode], expected,
                    args.table_design, args.cache_max_bytes)))
            for name, run in frameworks:
                rates = {}
                for mode in modes:
                    seconds, joined, output = run(mode)
                    rates[mode] = n / seconds
                    ratio = "" if mode == "wordcount" else f"  ratio to word count {rates[mode] / rates['wordcount']:.3f}"
                    results = f" ({joined:,} of {len(payments):,} payments joined)" if mode == "stream_stream" else ""
                    if mode == "table":  # how much of the aggregation's work its cache saved
                        results = f" ({written_out(bootstrap, output):,} counts written out)"
                    print(f"{name:<13} {mode:<13}: {seconds:7.2f}s {rates[mode]:10,.0f} records/s{ratio}{results}",
                          flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
