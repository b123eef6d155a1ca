"""Benchmark: word count through the runtime on the embedded cluster, against a plain loop.

    python bench/wordcount.py [--records 1000000] [--guarantees at_least_once,exactly_once_v2]
                              [--partitions 2] [--replication-factor 1] [--profile]

Writes ``--records`` short lines (1-3 words from a 10,000-word vocabulary, seeded) to an input
topic first (not timed), then for each processing guarantee runs the DSL word count
(stream -> flat_map_values -> group_by -> count -> to_stream -> to, with a repartition topic,
a cached RocksDB store and its changelog) on one stream thread. The clock starts when the
app is RUNNING (group join excluded) and stops when every input line and every repartitioned
word has been processed and committed (the app's final commit included).

The baseline, in the same run: a plain Python loop over the same lines doing the same counting
into rocksdict (read the count, add one, write it back) with one WriteBatch per 10,000 lines.
The ratio is runtime rate / plain rate. Each runtime line is followed by the stream thread's
CPU seconds and the whole process's over the run (the embedded broker, producer sender and
fetchers share the GIL with the stream thread; CPU time is steadier than wall time on a shared
machine, but compare runs made at the same time). Not a test: nothing is asserted.
"""

from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import random
import shutil
import sys
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from confluent_kafka.admin import NewTopic  # noqa: E402
from rocksdict import Options, Rdict, WriteBatch  # noqa: E402

from streams import App, AppState, StreamsBuilder, serdes  # noqa: E402
from streams.backends import for_config  # noqa: E402


def make_lines(n: int, seed: int = 1) -> list[bytes]:
    rng = random.Random(seed)
    vocab = [f"w{i:04d}" for i in range(10_000)]
    return [" ".join(rng.choices(vocab, k=rng.randint(1, 3))).encode() for _ in range(n)]


def plain_loop(lines: list[bytes], path: str) -> float:
    """Count words into rocksdict: read, add one, write, one WriteBatch per 10,000 lines."""
    opts = Options()
    opts.create_if_missing(True)
    db = Rdict(path, opts)
    t0 = time.perf_counter()
    for i in range(0, len(lines), 10_000):
        pending: dict[bytes, int] = {}
        for line in lines[i:i + 10_000]:
            for word in line.decode().split():
                key = word.encode()
                count = pending.get(key)
                if count is None:
                    stored = db.get(key)
                    count = 0 if stored is None else int.from_bytes(stored, "big")
                pending[key] = count + 1
        wb = WriteBatch()
        for key, count in pending.items():
            wb.put(key, count.to_bytes(8, "big"))
        db.write(wb)
    db.flush()
    elapsed = time.perf_counter() - t0
    db.close()
    return elapsed


def topology(lines_topic: str, out_topic: str):
    b = StreamsBuilder()
    (b.stream(lines_topic, key_serde=serdes.BYTES, value_serde=serdes.STRING)
        .flat_map_values(str.split)
        .group_by(lambda key, word: word, key_serde=serdes.STRING, value_serde=serdes.STRING)
        .count(store="counts")
        .to_stream()
        .to(out_topic, key_serde=serdes.STRING, value_serde=serdes.INT64))
    return b.build()


def run_app(bootstrap: str, guarantee: str, lines_topic: str, n_lines: int, n_words: int,
            state_dir: str, rf: int, profile: bool) -> float:
    out = f"counts-{guarantee}"
    backend = for_config({"bootstrap.servers": bootstrap})
    try:
        backend.admin().create_topics([NewTopic(out, 2, rf)])[out].result(30)
    finally:
        backend.close()
    config = {"application.id": f"bench-{guarantee}", "bootstrap.servers": bootstrap, "state.dir": state_dir,
              "processing.guarantee": guarantee, "replication.factor": rf}
    app = App(topology(lines_topic, out), config)
    done = threading.Event()
    app.start()
    if not app.wait_for_state(AppState.RUNNING, timeout=120):
        raise SystemExit(f"app not RUNNING: {app.state}")
    thread = app.threads[0]
    t0 = time.perf_counter()
    cpu0 = time.process_time()
    target = n_lines + n_words
    while thread.processed_total < target:
        if not thread.is_alive():
            raise SystemExit("stream thread died")
        done.wait(0.01)
    app.close(timeout=120)  # the final commit is part of the work
    elapsed = time.perf_counter() - t0
    THREAD_CPU["process"] = time.process_time() - cpu0
    return elapsed


# CPU seconds of the last run: the stream thread's own (from RUNNING-ish: thread start) and the
# whole process's (broker, producer sender and fetchers share the GIL with the stream thread).
THREAD_CPU: dict[str, float] = {}


def _record_thread_cpu() -> None:
    import streams.runtime.thread as thread_mod
    original = thread_mod.StreamThread.run

    def timed_run(self):
        try:
            original(self)
        finally:
            THREAD_CPU["stream"] = time.thread_time()
    thread_mod.StreamThread.run = timed_run


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--guarantees", default="at_least_once,exactly_once_v2")
    parser.add_argument("--partitions", type=int, default=2)
    parser.add_argument("--replication-factor", type=int, default=1)
    parser.add_argument("--profile", action="store_true", help="cProfile the stream thread (slower)")
    args = parser.parse_args()

    work = tempfile.mkdtemp(prefix="eddy-bench-wc-")
    try:
        lines = make_lines(args.records)
        n_words = sum(len(line.split()) for line in lines)
        plain_s = plain_loop(lines, os.path.join(work, "plain"))
        plain_rate = len(lines) / plain_s
        print(f"{len(lines):,} lines, {n_words:,} words")
        print(f"plain loop (rocksdict + WriteBatch): {plain_s:6.2f}s  {plain_rate:12,.0f} lines/s")

        bootstrap = f"local://{work}/cluster"
        backend = for_config({"bootstrap.servers": bootstrap})
        try:
            admin = backend.admin()
            lines_topic = "bench-lines"
            admin.create_topics([NewTopic(lines_topic, args.partitions, args.replication_factor)])[lines_topic].result(30)
            producer = backend.producer({"client.id": "bench-input", "linger.ms": 50})
            t0 = time.perf_counter()
            for line in lines:
                while True:
                    try:
                        producer.produce(lines_topic, value=line)
                        break
                    except BufferError:
                        producer.poll(0.05)
            producer.flush(120)
            print(f"input written in {time.perf_counter() - t0:.1f}s (not timed below)")
            if args.profile:
                import streams.runtime.thread as thread_mod
                original = thread_mod.StreamThread.run

                def profiled_run(self):
                    prof = cProfile.Profile()
                    prof.enable()
                    try:
                        original(self)
                    finally:
                        prof.disable()
                        stats = pstats.Stats(prof)
                        stats.sort_stats("tottime").print_stats(25)
                        by_file: dict[str, float] = {}
                        for (filename, _, _), (_, _, tottime, _, _) in stats.stats.items():
                            key = os.path.relpath(filename, ROOT) if filename.startswith(ROOT) else "(builtins/C)"
                            by_file[key] = by_file.get(key, 0.0) + tottime
                        total = sum(by_file.values())
                        print("own time by file (stream thread):")
                        for key, t in sorted(by_file.items(), key=lambda kv: -kv[1])[:15]:
                            print(f"  {t / total * 100:5.1f}%  {key}")
                thread_mod.StreamThread.run = profiled_run
            else:
                _record_thread_cpu()
            for guarantee in args.guarantees.split(","):
                secs = run_app(bootstrap, guarantee, lines_topic, len(lines), n_words,
                               os.path.join(work, f"state-{guarantee}"), args.replication_factor, False)
                rate = len(lines) / secs
                print(f"runtime {guarantee:<16}: {secs:6.2f}s  {rate:12,.0f} lines/s "
                      f"({n_words / secs:,.0f} words/s)  ratio to plain loop {rate / plain_rate:.3f}")
                if "stream" in THREAD_CPU:
                    print(f"  cpu: stream thread {THREAD_CPU['stream']:.2f}s, process {THREAD_CPU['process']:.2f}s")
        finally:
            backend.close()
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
