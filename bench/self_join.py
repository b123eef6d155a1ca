"""Benchmark: an inner stream-stream self-join with topology.optimization single.store.self.join
(one window store, Kafka's KStreamKStreamSelfJoin) against the same join without it (two stores,
the baseline), through the runtime on the embedded cluster.

    python bench/self_join.py [--records 200000] [--rounds 2] [--partitions 2]

Input, written beforehand (not timed): records keyed by one of 10,000 keys, 1 ms apart, 5% of them
up to 1 s out of order; `stream.join(stream, joiner, JoinWindows.of_time_difference_with_no_grace(5 s))`
written out. Each record joins itself and the records of its key within 5 s both ways (about 1 in
10 s per key: a few results per record). The two forms alternate (`--rounds` pairs, each on its
own app id and output topic), each timed from RUNNING until every input record is processed, its
final commit included. Printed: records/s of each run, the self-join's ratio to the baseline of
its round, and the results each wrote (the two forms must write as many). Not a test: nothing is
asserted.
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

from bench import app_bench  # noqa: E402
from bench.windowed import count_records  # noqa: E402
from streams import JoinWindows, StreamsBuilder, serdes  # noqa: E402

S = serdes.STRING
KEYS = 10_000
START_MS = 1_700_000_000_000
WINDOW_MS = 5_000


def make_records(n: int, seed: int = 7) -> list[tuple[bytes, bytes, int]]:
    rng = random.Random(seed)
    keys = [f"k{i:05d}".encode() for i in range(KEYS)]
    out = []
    for i in range(n):
        t = START_MS + i - (rng.randint(0, 1000) if rng.random() < 0.05 else 0)
        out.append((rng.choice(keys), f"v{i}".encode(), t))
    return out


def topology(events: str, out: str, config: dict):
    b = StreamsBuilder()
    s = b.stream(events, key_serde=S, value_serde=S)
    s.join(s, lambda a, c: a + "+" + c, JoinWindows.of_time_difference_with_no_grace(WINDOW_MS)).to(
        out, key_serde=S, value_serde=S)
    return b.build(config)


def expected_results(records: list[tuple[bytes, bytes, int]]) -> int:
    """What either form writes: per key, every ordered pair within the window (itself included)."""
    by_key: dict[bytes, list[int]] = {}
    for key, _, t in records:
        by_key.setdefault(key, []).append(t)
    return sum(1 for times in by_key.values() for a in times for b in times if abs(a - b) <= WINDOW_MS)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--partitions", type=int, default=2)
    args = parser.parse_args()
    logging.basicConfig(level=logging.ERROR)
    console = Console()
    n = args.records
    work = tempfile.mkdtemp(prefix="eddy-bench-self-join-")
    try:
        bootstrap = f"local://{work}/cluster"
        records = make_records(n)
        expected = expected_results(records)
        forms = {"two stores": {}, "self-join": {"topology.optimization": "single.store.self.join"}}
        outs = [f"out-{form.replace(' ', '-')}-{r}" for r in range(args.rounds) for form in forms]
        app_bench.create_topics(bootstrap, {"events": args.partitions} | {o: args.partitions for o in outs}, 1)
        app_bench.produce(bootstrap, "events", records)
        console.print(f"{n:,} records, {KEYS:,} keys, window {WINDOW_MS} ms: {expected:,} join results expected; "
                      f"{args.partitions} partitions, at least once")
        for r in range(args.rounds):
            rates = {}
            for form, extra in forms.items():
                app_bench.record_thread_cpu()
                out = f"out-{form.replace(' ', '-')}-{r}"
                config = {"application.id": f"bench-self-join-{r}-{form.replace(' ', '-')}",
                          "bootstrap.servers": bootstrap, "state.dir": os.path.join(work, f"state-{r}-{form}"),
                          "max.task.idle.ms": 0} | extra
                secs = app_bench.run_app(topology("events", out, config), config, app_bench.processed_at_least(n))
                rates[form] = n / secs
                got = count_records(bootstrap, out, args.partitions, expected)
                ratio = (f"  ratio to two stores {rates[form] / rates['two stores']:.3f}"
                         if form != "two stores" else "")
                console.print(f"round {r + 1} {form:<10}: {secs:6.2f}s {rates[form]:9,.0f} records/s{ratio}; "
                              f"{got:,} results written")
                console.print(app_bench.cpu_line())
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
