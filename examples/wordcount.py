"""Word count, the README's main job: `python -m examples.wordcount`.

By default everything runs on the embedded cluster (3 brokers, internal topics replicated 3
times, RocksDB stores, exactly_once_v2), with its data under the directory printed first. The
run is deterministic: the directory is reset, a seeded generator writes the input, and the
counts are checked against a plain count of the same text.

1. generate text into the input topic `lines`;
2. run word count (StreamsBuilder DSL) until every line is counted; print the top words;
3. close, start again on the same state directory: the stores restore from their checkpoint
   (nothing to replay); print what the restore did;
4. close, wipe the local state, start again: a full restore from the changelog; print it.

`--bootstrap-servers host:port` runs the same on a Kafka cluster instead (topics get a
per-run suffix there, since such a cluster keeps its data between runs).
"""

from __future__ import annotations

import argparse
import collections
import logging
import os
import random
import shutil
import sys
import tempfile
import threading
import time
import uuid
from typing import Any

from confluent_kafka.admin import NewTopic

from state.listener import StateRestoreListener
from streams import App, AppState, StreamsBuilder, serdes
from streams.backends import for_config
from examples._common import embedded_bootstrap, fresh_data_dir

VOCABULARY = ("the stream flows past the mill and the eddy turns the water back on itself while the "
              "river keeps its course under stone bridges through quiet towns toward a distant sea "
              "where tides return what rivers give").split()


SYLLABLES = "ka lo mi ra se tu vin dor pel quo zan bri".split()


def vocabulary(size: int, seed: int) -> list[str]:
    """The base words first (the most frequent), then made-up words for a long tail."""
    rng = random.Random(seed)
    words = list(dict.fromkeys(VOCABULARY))
    seen = set(words)
    while len(words) < size:
        word = "".join(rng.choice(SYLLABLES) for _ in range(rng.randint(2, 4)))
        if word not in seen:
            seen.add(word)
            words.append(word)
    return words


def generate_lines(n: int, seed: int, vocabulary_size: int = 5000) -> list[str]:
    """Deterministic text: words drawn with a Zipf-like skew so the top words are clear."""
    words = vocabulary(vocabulary_size, seed)
    rng = random.Random(seed)
    weights = [1.0 / (i + 1) for i in range(len(words))]
    return [" ".join(rng.choices(words, weights, k=rng.randint(3, 9))) for _ in range(n)]


class RestoreReport(StateRestoreListener):
    """Collects what each changelog partition restore did."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.partitions: dict[str, dict[str, Any]] = {}

    def on_restore_start(self, tp, store_name, start_offset, end_offset) -> None:
        with self.lock:
            self.partitions[f"{tp.topic}-{tp.partition}"] = {
                "store": store_name, "start": start_offset, "end": end_offset, "restored": 0,
                "t0": time.perf_counter(), "seconds": 0.0}

    def on_batch_restored(self, tp, store_name, batch_end_offset, num_restored) -> None:
        pass

    def on_restore_end(self, tp, store_name, total_restored) -> None:
        with self.lock:
            p = self.partitions[f"{tp.topic}-{tp.partition}"]
            p["restored"] = total_restored
            p["seconds"] = time.perf_counter() - p["t0"]

    def print(self, title: str) -> int:
        print(f"\n{title}")
        total = 0
        for name, p in sorted(self.partitions.items()):
            rate = p["restored"] / p["seconds"] if p["seconds"] > 0 and p["restored"] else 0.0
            print(f"  {name}: {p['restored']:>6} records restored from offset {p['start']} "
                  f"(changelog end {p['end']}) in {p['seconds'] * 1000:7.1f} ms"
                  + (f", {rate:,.0f} records/s" if rate else ""))
            total += p["restored"]
        print(f"  total: {total} records restored")
        return total


def build_topology(lines_topic: str, output_topic: str):
    builder = StreamsBuilder()
    (builder.stream(lines_topic, key_serde=serdes.STRING, value_serde=serdes.STRING)
        .flat_map_values(str.split)
        .group_by(lambda key, word: word, key_serde=serdes.STRING, value_serde=serdes.STRING)
        .count(store="counts")
        .to_stream()
        .to(output_topic, key_serde=serdes.STRING, value_serde=serdes.INT64))
    return builder.build()


def wait_until(predicate, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    pause = threading.Event()
    while not predicate():
        if time.monotonic() > deadline:
            raise SystemExit(f"word count: timed out after {timeout_s:.0f}s waiting for {what}")
        pause.wait(0.05)


def run_app(topology, config: dict, expected: collections.Counter, report: RestoreReport | None,
            timeout_s: float) -> tuple[dict, float]:
    app = App(topology, config)
    if report is not None:
        app.set_global_state_restore_listener(report)
    t0 = time.perf_counter()
    app.start()
    try:
        if not app.wait_for_state(AppState.RUNNING, timeout=timeout_s):
            raise SystemExit(f"word count: the app did not reach RUNNING within {timeout_s:.0f}s ({app.state.value})")
        store = app.store("counts")
        words = list(expected)

        def counted() -> bool:
            return all(store.get(w) == expected[w] for w in words)

        wait_until(counted, timeout_s, "every line to be counted")
        counts = dict(store.all())
        return counts, time.perf_counter() - t0
    finally:
        app.close(timeout=60)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", default=os.path.join(tempfile.gettempdir(), "eddy-wordcount"),
                        help="where the embedded cluster and the state live (reset at start)")
    parser.add_argument("--bootstrap-servers", default=None,
                        help="run on this Kafka cluster instead of the embedded one")
    parser.add_argument("--lines", type=int, default=20_000)
    parser.add_argument("--partitions", type=int, default=3)
    parser.add_argument("--replication-factor", type=int, default=None,
                        help="of the topics (default 3 embedded, 1 on Kafka)")
    parser.add_argument("--guarantee", default="exactly_once_v2", choices=["exactly_once_v2", "at_least_once"])
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--timeout", type=float, default=50.0)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")

    data_dir = fresh_data_dir(args.data_dir)
    if args.bootstrap_servers:
        bootstrap = args.bootstrap_servers
        suffix = "-" + uuid.uuid4().hex[:8]  # a real cluster keeps topics between runs
        rf = args.replication_factor or 1
    else:
        bootstrap = embedded_bootstrap(data_dir)
        suffix = ""
        rf = args.replication_factor or 3
    app_id = "wordcount" + suffix
    lines_topic, output_topic = "lines" + suffix, "word-counts" + suffix
    state_dir = os.path.join(data_dir, "state")
    print(f"word count on {bootstrap} ({args.guarantee}, replication factor {rf})")
    print(f"data directory: {data_dir}")

    started = time.perf_counter()
    backend = for_config({"bootstrap.servers": bootstrap})
    try:
        admin = backend.admin()
        for _topic, future in admin.create_topics([NewTopic(t, args.partitions, rf) for t in (lines_topic, output_topic)]).items():
            future.result()
        lines = generate_lines(args.lines, args.seed)
        expected = collections.Counter(word for line in lines for word in line.split())
        producer = backend.producer({"client.id": "wordcount-generator"})
        for i, line in enumerate(lines):
            while True:
                try:
                    producer.produce(lines_topic, value=line.encode(), key=str(i).encode())
                    break
                except BufferError:  # the producer's queue is full: let deliveries drain it
                    producer.poll(0.05)
        deadline = time.monotonic() + 60
        while producer.flush(1) and time.monotonic() < deadline:
            pass
        if producer.flush(0):
            raise SystemExit("word count: could not write the input within 60s")
        print(f"generated {len(lines):,} lines, {sum(expected.values()):,} words, "
              f"{len(expected)} distinct, into topic {lines_topic!r} ({args.partitions} partitions)")

        config = {
            "application.id": app_id,
            "bootstrap.servers": bootstrap,
            "state.dir": state_dir,
            "processing.guarantee": args.guarantee,
            "replication.factor": rf,
            "consumer.session.timeout.ms": 6000,
        }
        topology = build_topology(lines_topic, output_topic)

        # 1. count
        counts, seconds = run_app(topology, config, expected, None, args.timeout)
        if counts != dict(expected):
            print("MISMATCH between the store and the expected counts", file=sys.stderr)
            return 1
        print(f"\ncounted every line in {seconds:.1f}s (start, group join and processing); top words:")
        for word, n in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[:10]:
            print(f"  {word:<10} {n:>7,}")

        # 2. restart from the checkpoint
        report = RestoreReport()
        counts2, _ = run_app(topology, config, expected, report, args.timeout)
        restored_ckpt = report.print("restart with the state directory kept (restore from the checkpoint):")

        # 3. restart with the local state wiped: a full restore from the changelog
        shutil.rmtree(os.path.join(state_dir, app_id), ignore_errors=True)
        report_full = RestoreReport()
        counts3, _ = run_app(topology, config, expected, report_full, args.timeout)
        restored_full = report_full.print("restart with the state directory wiped (full restore from the changelog):")
    finally:
        backend.close()

    ok = counts2 == dict(expected) and counts3 == dict(expected) and restored_full >= len(expected)
    print(f"\nsummary: {len(lines):,} lines, {sum(expected.values()):,} words, {len(expected)} distinct words; "
          f"counts match after every restart: {'yes' if ok else 'NO'}; checkpoint restart replayed "
          f"{restored_ckpt} records, wiped restart replayed {restored_full}; "
          f"total {time.perf_counter() - started:.1f}s")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
