"""Benchmark: a RocksDB store's point lookups with and without the memtable bloom filter
(state.rocksdb_kv.MEMTABLE_BLOOM_RATIO), same run, the store's own options otherwise.

    python bench/rocksdb_point_lookup.py [--keys 250000] [--rounds 4] [--batch 50000] [--repeat 3]

The pattern is a table source's under bench/windowed.py's default table design: `--keys` keys,
each rewritten once per round, every round in its own random order; each batch of `--batch`
keys is first read one get at a time (timed), then written in one WriteBatch (not timed), as a
cache flush writes them. So a get mostly finds its key in an older memtable or a level-0 file,
past memtables that do not hold it. Runs alternate between the two options `--repeat` times;
printed: microseconds per get for each (the best of its runs) and their ratio. Not a test.
"""

from __future__ import annotations

import argparse
import os
import pathlib
import random
import shutil
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from rocksdict import WriteBatch  # noqa: E402
from rich.console import Console  # noqa: E402

from state.rocksdb_kv import _open_rdict, _write_options, rocksdb_options  # noqa: E402


def run(order: list[bytes], batch: int, bloom: bool) -> float:
    """Microseconds per get over `order`, on a new store (with or without the memtable bloom)."""
    work = tempfile.mkdtemp(prefix="eddy-bench-lookup-")
    try:
        options = rocksdb_options()
        if not bloom:
            options.set_memtable_prefix_bloom_ratio(0.0)
        db = _open_rdict(pathlib.Path(work), options)
        db.set_write_options(_write_options())
        get, value = db.get, b"\x00" * 8 + b"g042"  # a timestamped value, as the table keeps it
        elapsed = 0.0
        for i in range(0, len(order), batch):
            chunk = order[i:i + batch]
            started = time.perf_counter()
            for key in chunk:
                get(key)
            elapsed += time.perf_counter() - started
            writes = WriteBatch(raw_mode=True)
            for key in chunk:
                writes.put(key, value)
            db.write(writes)
        db.close()
        return elapsed / len(order) * 1e6
    finally:
        shutil.rmtree(work, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keys", type=int, default=250_000)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--batch", type=int, default=50_000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    rng = random.Random(1)
    keys = [f"u{i:06d}".encode() for i in range(args.keys)]
    order: list[bytes] = []
    for _ in range(args.rounds):
        round_ = keys[:]
        rng.shuffle(round_)
        order += round_
    console = Console()
    best = {False: float("inf"), True: float("inf")}
    for _ in range(args.repeat):
        for bloom in (False, True):
            best[bloom] = min(best[bloom], run(order, args.batch, bloom))
    console.print(f"{len(order):,} gets over {args.keys:,} keys in {args.rounds} rounds")
    console.print(f"without the memtable bloom: {best[False]:.2f} us per get")
    console.print(f"with it:                    {best[True]:.2f} us per get  ratio {best[True] / best[False]:.3f}")


if __name__ == "__main__":
    main()
