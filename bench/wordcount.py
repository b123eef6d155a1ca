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
machine, but compare runs made at the same time), and on Linux the host's CPU steal during the
run. Not a test: nothing is asserted.
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from rocksdict import Options, Rdict, WriteBatch  # noqa: E402

from bench import app_bench  # noqa: E402
from streams import StreamsBuilder, serdes  # noqa: E402


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


def topology(lines_topic: str, out_topic: str, config: dict | None = None):
    b = StreamsBuilder()
    (b.stream(lines_topic, key_serde=serdes.BYTES, value_serde=serdes.STRING)
        .flat_map_values(str.split)
        .group_by(lambda key, word: word, key_serde=serdes.STRING, value_serde=serdes.STRING)
        .count(store="counts")
        .to_stream()
        .to(out_topic, key_serde=serdes.STRING, value_serde=serdes.INT64))
    return b.build(config)


def app_config(guarantee: str, bootstrap: str, state_dir: str, rf: int) -> dict:
    return {"application.id": f"bench-{guarantee}", "bootstrap.servers": bootstrap, "state.dir": state_dir,
            "processing.guarantee": guarantee, "replication.factor": rf}


def run_wordcount(bootstrap: str, guarantee: str, lines_topic: str, n_lines: int, n_words: int,
                  state_dir: str, rf: int) -> float:
    """The word count app until every line and every repartitioned word is processed (then its
    final commit); the seconds from RUNNING."""
    out = f"counts-{guarantee}"
    app_bench.create_topics(bootstrap, {out: 2}, rf)
    return app_bench.run_app(topology(lines_topic, out), app_config(guarantee, bootstrap, state_dir, rf),
                             app_bench.processed_at_least(n_lines + n_words))


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
        lines_topic = "bench-lines"
        app_bench.create_topics(bootstrap, {lines_topic: args.partitions}, args.replication_factor)
        t0 = time.perf_counter()
        app_bench.produce(bootstrap, lines_topic, ((None, line) for line in lines))
        print(f"input written in {time.perf_counter() - t0:.1f}s (not timed below)")
        if args.profile:
            app_bench.profile_stream_thread()
        else:
            app_bench.record_thread_cpu()
        for guarantee in args.guarantees.split(","):
            secs = run_wordcount(bootstrap, guarantee, lines_topic, len(lines), n_words,
                                 os.path.join(work, f"state-{guarantee}"), args.replication_factor)
            rate = len(lines) / secs
            print(f"runtime {guarantee:<16}: {secs:6.2f}s  {rate:12,.0f} lines/s "
                  f"({n_words / secs:,.0f} words/s)  ratio to plain loop {rate / plain_rate:.3f}")
            if app_bench.cpu_line():
                print(app_bench.cpu_line())
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
