"""Word count on a real Kafka broker: Eddy next to Quix Streams 3.28.1 and Kafka Streams, same run.

    python bench/wordcount_kafka.py [--lines N] [--partitions P] [--bootstrap-servers HOST:PORT]
                                    [--broker kafka|tansu] [--profile FILE] [--skip-quix]
                                    [--skip-kafka-streams]

The broker is `--bootstrap-servers`, else `KAFKA_BOOTSTRAP_SERVERS`, else one started locally as
the integration tests start it: a real Apache Kafka broker from Maven Central jars
(streams.testing.kafka_fixture.local_apache_kafka; `--broker tansu` for the Tansu broker instead).
N text lines (seeded, Zipf-skewed words from a 5,000-word vocabulary, 3-9 words a line) are
produced once to an input topic. Each framework then runs the same stateful job, one process,
one thread, from the beginning of that topic with its own group: split lines into words,
re-key by word (a repartition topic), count per word in RocksDB state with a changelog,
at-least-once, write the counts to its own output topic.

Measured: processing time only, from the first line processed to the last word counted (the
group join and topic setup before, and the final commit after, are excluded). Both sides take
the first mark in their split function and the last when every word has been counted (Eddy:
its stream thread has processed every line and every repartitioned word; Quix: its count
function has run once per word). Eddy's counts are checked against a plain count of the input.
Quix Streams runs in its own virtualenv under bench/.work/ (created on first use; it pins
confluent-kafka < 2.13) as the subprocess bench/quix_wordcount.py. Kafka Streams (at the broker's
version) runs bench/kafka_streams/WordCount.java, compiled with javac against jars fetched from
Maven Central as the test broker's are; it marks the first split and the moment its last word
reaches the count (a peek right before count), and its store's counts are checked.

Each framework keeps its defaults where they differ by design: Eddy, like Kafka Streams,
caches the count store (statestore.cache.max.bytes 10 MB) so it writes one output and
changelog record per word and commit, while Quix writes one per word occurrence. Both commit
every 5 s (Quix's default; `--commit-interval`).
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import cProfile
import itertools
import json
import os
import pstats
import random
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import uuid

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

from confluent_kafka import Producer  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

from streams import App, AppState, StreamsBuilder, serdes  # noqa: E402

WORK_DIR = os.path.join(REPO, "bench", ".work")
QUIX_VENV = os.path.join(WORK_DIR, "quix-venv")
QUIX_VERSION = "3.28.1"
QUIX_SCRIPT = os.path.join(REPO, "bench", "quix_wordcount.py")
SYLLABLES = "ka lo mi ra se tu vin dor pel quo zan bri".split()


# -- input ------------------------------------------------------------------------------------


def generate_lines(n: int, seed: int = 7, vocabulary_size: int = 5000) -> list[str]:
    rng = random.Random(seed)
    words: list[str] = []
    seen = set()
    while len(words) < vocabulary_size:
        word = "".join(rng.choice(SYLLABLES) for _ in range(rng.randint(2, 4)))
        if word not in seen:
            seen.add(word)
            words.append(word)
    cum_weights = list(itertools.accumulate(1.0 / (i + 1) for i in range(len(words))))
    return [" ".join(rng.choices(words, cum_weights=cum_weights, k=rng.randint(3, 9))) for _ in range(n)]


def produce_input(bootstrap: str, topic: str, lines: list[str]) -> float:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "batch.size": 1_000_000,
                         "compression.type": "none", "partitioner": "murmur2_random"})
    failures = []

    def on_delivery(err, msg) -> None:
        if err is not None:
            failures.append(err)

    t0 = time.perf_counter()
    for i, line in enumerate(lines):
        while True:
            try:
                producer.produce(topic, key=str(i).encode(), value=line.encode(), on_delivery=on_delivery)
                break
            except BufferError:
                producer.poll(0.05)
        if i % 10_000 == 9_999:
            producer.poll(0)
    if producer.flush(120) or failures:
        raise SystemExit(f"could not write the input: {failures[:3]} (unflushed: {len(producer)})")
    return time.perf_counter() - t0


# -- Eddy ------------------------------------------------------------------------------------


def create_topic(bootstrap: str, topic: str, partitions: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})  # kept alive until the result is in
    # Explicit retention: Quix's group_by copies it from the source topic's described config,
    # and Tansu describes only the configs a topic was created with.
    config = {"retention.ms": "-1", "retention.bytes": "-1"}
    admin.create_topics([NewTopic(topic, partitions, 1, config=config)])[topic].result(30)


def run_eddy(bootstrap: str, input_topic: str, partitions: int, lines: int, words: int,
             expected: dict, work: str, commit_interval_s: float, profile: str | None,
             cache_max_bytes: int) -> dict:
    marks: dict = {"first": None}

    def split(line: str) -> list[str]:
        if marks["first"] is None:
            marks["first"] = time.time()
        return line.split()

    suffix = uuid.uuid4().hex[:8]
    output_topic = f"eddy-counts-{suffix}"
    builder = StreamsBuilder()
    (builder.stream(input_topic, key_serde=serdes.STRING, value_serde=serdes.STRING)
        .flat_map_values(split)
        .group_by(lambda key, word: word, key_serde=serdes.STRING, value_serde=serdes.STRING)
        .count(store="counts")
        .to_stream()
        .to(output_topic, key_serde=serdes.STRING, value_serde=serdes.INT64))
    create_topic(bootstrap, output_topic, partitions)
    app = App(builder.build(), {
        "application.id": f"eddy-wordcount-{suffix}",
        "bootstrap.servers": bootstrap,
        "state.dir": os.path.join(work, "eddy-state"),
        "processing.guarantee": "at_least_once",
        "commit.interval.ms": int(commit_interval_s * 1000),
        "replication.factor": 1,
        "consumer.session.timeout.ms": 6000,
        "statestore.cache.max.bytes": cache_max_bytes,
    })
    profiler = cProfile.Profile() if profile else None
    target = lines + words  # records the stream thread processes: lines, then repartitioned words
    pause = threading.Event()
    app.start()
    try:
        thread = app.threads[0]
        if profiler is not None:
            # Profile the stream thread itself (cProfile hooks the thread that enables it).
            original = thread._run_once

            def profiled_run_once() -> None:
                profiler.enable()
                try:
                    original()
                finally:
                    profiler.disable()

            thread._run_once = profiled_run_once
        deadline = time.monotonic() + 900
        while thread.processed_total < target:
            if app.state in (AppState.ERROR, AppState.NOT_RUNNING, AppState.PENDING_ERROR):
                raise SystemExit(f"Eddy stopped early ({app.state.value})")
            if time.monotonic() > deadline:
                raise SystemExit(f"Eddy did not finish: {thread.processed_total}/{target} records processed")
            pause.wait(0.005)
        last = time.time()
        counts = dict(app.store("counts").all())
    finally:
        app.close(timeout=120)
    if counts != expected:
        wrong = sum(1 for w in expected if counts.get(w) != expected[w])
        raise SystemExit(f"Eddy's counts are wrong for {wrong} of {len(expected)} words")
    if profiler is not None:
        profiler.dump_stats(profile)
        stats = pstats.Stats(profiler)
        stats.sort_stats("tottime").print_stats(25)
    return {"first": marks["first"], "last": last}


# -- Quix Streams ----------------------------------------------------------------------------


def quix_python() -> str:
    python = os.path.join(QUIX_VENV, "bin", "python")
    probe = [python, "-c", "import quixstreams; print(quixstreams.__version__)"]
    if os.path.exists(python):
        found = subprocess.run(probe, capture_output=True, text=True)
        if found.returncode == 0 and found.stdout.strip() == QUIX_VERSION:
            return python
    print(f"creating {QUIX_VENV} with quixstreams=={QUIX_VERSION} ...", flush=True)
    subprocess.run(["python3", "-m", "venv", QUIX_VENV], check=True)
    subprocess.run([python, "-m", "pip", "install", "-q", f"quixstreams=={QUIX_VERSION}"], check=True)
    return python


def run_quix(python: str, bootstrap: str, input_topic: str, words: int, work: str,
             commit_interval_s: float) -> dict:
    suffix = uuid.uuid4().hex[:8]
    cmd = [python, QUIX_SCRIPT, "--bootstrap-servers", bootstrap, "--input", input_topic,
           "--output", f"quix-counts-{suffix}", "--group", f"quix-wordcount-{suffix}",
           "--state-dir", os.path.join(work, "quix-state"), "--words", str(words),
           "--commit-interval", str(commit_interval_s)]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=1800)
    result_lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode != 0 or not result_lines:
        raise SystemExit(f"Quix Streams failed (exit {done.returncode}):\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}")
    result = json.loads(result_lines[-1])
    if result["counted"] < words:
        raise SystemExit(f"Quix Streams counted {result['counted']} of {words} words")
    return result


# -- Kafka Streams ---------------------------------------------------------------------------


def run_kafka_streams(bootstrap: str, input_topic: str, partitions: int, words: int, expected: dict,
                      work: str, commit_interval_s: float) -> dict:
    from pathlib import Path

    from streams.testing.maven_jars import STREAMS_ARTIFACTS, class_path, compile_java, fetch_jars

    jars = fetch_jars("streams", STREAMS_ARTIFACTS)
    classes = compile_java([Path(REPO) / "bench" / "kafka_streams" / "WordCount.java"], jars)
    suffix = uuid.uuid4().hex[:8]
    output_topic = f"kstreams-counts-{suffix}"
    create_topic(bootstrap, output_topic, partitions)
    cmd = ["java", "-Xmx1g", "-cp", f"{classes}:{class_path(jars)}", "WordCount", bootstrap, input_topic,
           output_topic, f"kstreams-wordcount-{suffix}", os.path.join(work, "kstreams-state"), str(words),
           str(int(commit_interval_s * 1000))]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=1800)
    result_lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode != 0 or not result_lines:
        raise SystemExit(f"Kafka Streams failed (exit {done.returncode}):\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}")
    result = json.loads(result_lines[-1])
    if (result["counted"], result["distinct"], result["total"]) != (words, len(expected), words):
        raise SystemExit(f"Kafka Streams' counts are wrong: {result}")
    return result


# -- main ------------------------------------------------------------------------------------


@contextlib.contextmanager
def broker(bootstrap: str | None, kind: str):
    if bootstrap:
        yield bootstrap, f"the broker at {bootstrap}"
        return
    from streams.testing.kafka_fixture import local_apache_kafka, local_tansu_broker

    with (local_tansu_broker() if kind == "tansu" else local_apache_kafka()) as b:
        yield b.bootstrap_servers, f"{b.description}, started locally on {b.bootstrap_servers}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lines", type=int, default=200_000)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--commit-interval", type=float, default=5.0, help="seconds, both frameworks")
    parser.add_argument("--bootstrap-servers", default=os.environ.get("KAFKA_BOOTSTRAP_SERVERS") or None)
    parser.add_argument("--profile", default=None, help="cProfile Eddy's stream thread into this file")
    parser.add_argument("--broker", choices=("kafka", "tansu"), default="kafka",
                        help="the local broker to start when no bootstrap servers are given")
    parser.add_argument("--skip-quix", action="store_true")
    parser.add_argument("--skip-kafka-streams", action="store_true")
    parser.add_argument("--eddy-cache-bytes", type=int, default=10 * 1024 * 1024,
                        help="Eddy's statestore.cache.max.bytes (0: one output record per word occurrence, as Quix)")
    args = parser.parse_args(argv)

    os.makedirs(WORK_DIR, exist_ok=True)
    work = tempfile.mkdtemp(prefix="wordcount-kafka-", dir=WORK_DIR)
    try:
        python = None if args.skip_quix else quix_python()
        lines = generate_lines(args.lines)
        expected = dict(collections.Counter(w for line in lines for w in line.split()))
        words = sum(expected.values())
        with broker(args.bootstrap_servers, args.broker) as (bootstrap, description):
            print(f"broker: {description}")
            input_topic = f"wordcount-lines-{uuid.uuid4().hex[:8]}"
            create_topic(bootstrap, input_topic, args.partitions)
            seconds = produce_input(bootstrap, input_topic, lines)
            print(f"input: {args.lines:,} lines ({words:,} words, {len(expected):,} distinct) in "
                  f"{input_topic!r}, {args.partitions} partitions, produced in {seconds:.1f}s")

            eddy = run_eddy(bootstrap, input_topic, args.partitions, args.lines, words, expected, work,
                            args.commit_interval, args.profile, args.eddy_cache_bytes)
            eddy_s = eddy["last"] - eddy["first"]
            cache = "" if args.eddy_cache_bytes else ", no cache"
            print(f"Eddy{cache}:         {args.lines / eddy_s:>10,.0f} lines/s  {words / eddy_s:>10,.0f} words/s  "
                  f"({eddy_s:.2f}s processing; counts checked)", flush=True)
            if python is not None:
                quix = run_quix(python, bootstrap, input_topic, words, work, args.commit_interval)
                quix_s = quix["last"] - quix["first"]
                print(f"Quix Streams: {args.lines / quix_s:>10,.0f} lines/s  {words / quix_s:>10,.0f} words/s  "
                      f"({quix_s:.2f}s processing)", flush=True)
            if not args.skip_kafka_streams:
                kstreams = run_kafka_streams(bootstrap, input_topic, args.partitions, words, expected, work,
                                             args.commit_interval)
                kstreams_s = kstreams["last"] - kstreams["first"]
                print(f"Kafka Streams: {args.lines / kstreams_s:>9,.0f} lines/s  {words / kstreams_s:>10,.0f} words/s  "
                      f"({kstreams_s:.2f}s processing; counts checked)")
            if python is not None:
                print(f"ratio Eddy / Quix Streams: {quix_s / eddy_s:.2f}x (target >= 2x)")
            if not args.skip_kafka_streams:
                print(f"ratio Eddy / Kafka Streams: {kstreams_s / eddy_s:.2f}x")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
