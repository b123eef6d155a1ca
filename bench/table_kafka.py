"""Benchmark: bench/windowed.py's table aggregation against its word count, in Eddy and in Kafka
Streams, on one real Kafka broker: what each framework's own ratio is.

    python bench/table_kafka.py [--records 1000000] [--partitions 2] [--commit-interval-ms 1000]
                                [--bootstrap-servers HOST:PORT] [--skip-kafka-streams]

Issue 16 asks the table aggregation for at least 0.5 of word count's records/s. This script
puts that target next to Kafka Streams: the same two workloads (bench/windowed.py's word count
lines and its default table design: 250,000 users each updated once per round, in 4 random
rounds, `builder.table(...).group_by(group, user).count()`, caching on, the 10 MiB default
cache), the same broker, and each framework's own ratio table / word count. The broker is
`--bootstrap-servers`, else `KAFKA_BOOTSTRAP_SERVERS`, else a local Apache Kafka broker started
as the integration tests start it. Kafka Streams (the broker's version) runs
bench/kafka_streams/TableVsWordCount.java, compiled against jars fetched from Maven Central.

Every run: one stream thread, at-least-once, `--commit-interval-ms` (the same for all: the
table's last updates wait in the source table's cache for a commit, so Kafka's 30 s default
would time the wait), timed from RUNNING until the work is done. Word count is done when every
line and every repartitioned word is processed (Eddy: its thread's processed records; Kafka
Streams: a peek right before the count); the table when its count store (100 groups, read
through interactive queries every 10 ms) holds every group's expected final count. Not a test:
nothing is asserted, but a run that does not reach the expected counts fails.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from confluent_kafka import Producer  # noqa: E402

from bench.wordcount import make_lines  # noqa: E402
from bench.windowed import make_updates, table_topology, wordcount_topology  # noqa: E402
from bench.wordcount_kafka import broker, create_topic  # noqa: E402
from streams import App, AppState  # noqa: E402

DEADLINE_S = 1800


def produce(bootstrap: str, topic: str, records: list[tuple[bytes | None, bytes | None]]) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "batch.size": 1_000_000,
                         "compression.type": "none"})
    failures: list = []

    def on_delivery(err, msg) -> None:
        if err is not None:
            failures.append(err)

    for i, (key, value) in enumerate(records):
        while True:
            try:
                producer.produce(topic, key=key, value=value, on_delivery=on_delivery)
                break
            except BufferError:
                producer.poll(0.05)
        if i % 10_000 == 9_999:
            producer.poll(0)
    if producer.flush(120) or failures:
        raise SystemExit(f"could not write {topic}: {failures[:3]} (unflushed: {len(producer)})")


def final_counts(updates: list[tuple[bytes, bytes | None]]) -> dict[str, int]:
    """The table aggregation's final state: users per group after the last update of each."""
    table: dict[bytes, bytes] = {}
    for user, group in updates:
        if group is None:
            table.pop(user, None)
        else:
            table[user] = group
    return {group.decode(): n for group, n in collections.Counter(table.values()).items()}


def run_eddy(bootstrap: str, mode: str, input_topic: str, work: str, commit_ms: int, n: int,
             words: int, expected: dict[str, int]) -> float:
    """Seconds from RUNNING until the work is done (see the module doc)."""
    suffix = uuid.uuid4().hex[:8]
    output = f"eddy-{mode}-out-{suffix}"
    create_topic(bootstrap, output, 1)
    topology = (wordcount_topology if mode == "wordcount" else table_topology)(input_topic, output)
    app = App(topology, {"application.id": f"eddy-{mode}-{suffix}", "bootstrap.servers": bootstrap,
                         "state.dir": os.path.join(work, f"eddy-{mode}"), "processing.guarantee": "at_least_once",
                         "commit.interval.ms": commit_ms, "replication.factor": 1})
    pause = threading.Event()
    app.start()
    try:
        if not app.wait_for_state(AppState.RUNNING, timeout=120):
            raise SystemExit(f"Eddy's {mode} app not RUNNING: {app.state}")
        t0 = time.perf_counter()
        deadline = time.monotonic() + DEADLINE_S

        def done() -> bool:
            if mode == "wordcount":
                return sum(t.processed_total for t in app.threads) >= n + words
            got = {key: count for key, count in app.store("users-per-group").all() if count}
            return got == expected
        while not done():
            if app.state in (AppState.ERROR, AppState.PENDING_ERROR, AppState.NOT_RUNNING):
                raise SystemExit(f"Eddy's {mode} app stopped: {app.state}")
            if time.monotonic() > deadline:
                raise SystemExit(f"Eddy's {mode} run did not finish")
            pause.wait(0.01)
        return time.perf_counter() - t0
    finally:
        app.close(timeout=120)


def run_kafka_streams(bootstrap: str, mode: str, input_topic: str, work: str, commit_ms: int, words: int,
                      expected: dict[str, int]) -> float:
    from streams.testing.maven_jars import STREAMS_ARTIFACTS, class_path, compile_java, fetch_jars

    jars = fetch_jars("streams", STREAMS_ARTIFACTS)
    classes = compile_java([Path(ROOT) / "bench" / "kafka_streams" / "TableVsWordCount.java"], jars)
    suffix = uuid.uuid4().hex[:8]
    output = f"kstreams-{mode}-out-{suffix}"
    create_topic(bootstrap, output, 1)
    if mode == "wordcount":
        expectation = str(words)
    else:
        expectation = os.path.join(work, "expected-counts.txt")
        with open(expectation, "w") as f:
            f.writelines(f"{group} {count}\n" for group, count in sorted(expected.items()))
    cmd = ["java", "-Xmx2g", "-cp", f"{classes}:{class_path(jars)}", "TableVsWordCount", mode, bootstrap,
           input_topic, output, f"kstreams-{mode}-{suffix}", os.path.join(work, f"kstreams-{mode}"),
           str(commit_ms), expectation]
    finished = subprocess.run(cmd, capture_output=True, text=True, timeout=DEADLINE_S + 120)
    result_lines = [line for line in finished.stdout.splitlines() if line.startswith("{")]
    if finished.returncode != 0 or not result_lines:
        raise SystemExit(f"Kafka Streams' {mode} run failed (exit {finished.returncode}):\n"
                         f"{finished.stdout[-2000:]}\n{finished.stderr[-3000:]}")
    result = json.loads(result_lines[-1])
    return result["done"] - result["running"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--partitions", type=int, default=2)
    parser.add_argument("--commit-interval-ms", type=int, default=1000)
    parser.add_argument("--bootstrap-servers", default=os.environ.get("KAFKA_BOOTSTRAP_SERVERS") or None)
    parser.add_argument("--skip-kafka-streams", action="store_true")
    args = parser.parse_args()
    n = args.records
    lines = make_lines(n)
    words = sum(len(line.split()) for line in lines)
    updates, _ = make_updates(n, "default")
    expected = final_counts(updates)
    work = tempfile.mkdtemp(prefix="eddy-bench-table-kafka-")
    try:
        with broker(args.bootstrap_servers, "kafka") as (bootstrap, description):
            print(f"broker: {description}")
            topics = {"wordcount": f"table-kafka-lines-{uuid.uuid4().hex[:8]}",
                      "table": f"table-kafka-updates-{uuid.uuid4().hex[:8]}"}
            for mode, records in (("wordcount", [(None, line) for line in lines]),
                                  ("table", [(user, group) for user, group in updates])):
                create_topic(bootstrap, topics[mode], args.partitions)
                produce(bootstrap, topics[mode], records)
            print(f"{n:,} records per run (word count: {words:,} words; table: {len(expected)} groups at the end), "
                  f"{args.partitions} partitions, commit.interval.ms {args.commit_interval_ms}")
            frameworks = [("Eddy", lambda mode: run_eddy(bootstrap, mode, topics[mode], work,
                                                         args.commit_interval_ms, n, words, expected))]
            if not args.skip_kafka_streams:
                frameworks.append(("Kafka Streams", lambda mode: run_kafka_streams(
                    bootstrap, mode, topics[mode], work, args.commit_interval_ms, words, expected)))
            for name, run in frameworks:
                rates = {}
                for mode in ("wordcount", "table"):
                    seconds = run(mode)
                    rates[mode] = n / seconds
                    print(f"{name:<13} {mode:<9}: {seconds:7.2f}s {rates[mode]:10,.0f} records/s", flush=True)
                print(f"{name:<13} ratio table / word count: {rates['table'] / rates['wordcount']:.3f}", flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
