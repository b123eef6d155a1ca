"""Benchmark: the memory input.buffer.max.bytes saves while a task cannot process, on the
embedded cluster.

    python bench/input_buffer.py [--records 3000] [--record-bytes 100000] [--bound-mib 32]

A task reads two topics; one holds `--records` records of `--record-bytes` each, the other
nothing, so the task idles (max.task.idle.ms 8 s) while its consumer fetches the first topic.
buffered.records.per.partition (10,000 by default) does not stop that: the records pile up in
the task's buffer. Measured: the most key and value bytes the thread buffered while the task
idled (sampled every 20 ms), with the bound at `--bound-mib` against a baseline run, in the same
process, with a bound no run reaches. Printed: both peaks and their ratio. Not a test: nothing is
asserted.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from bench import app_bench  # noqa: E402
from streams import App, AppState, StreamsBuilder, serdes  # noqa: E402

IDLE_MS = 8000
B = serdes.BYTES


def _topology(a: str, b: str, sink: str):
    """One task reading both topics: `a` merged with `b`, written to `sink`."""
    builder = StreamsBuilder()
    builder.stream(a, key_serde=B, value_serde=B).merge(builder.stream(b, key_serde=B, value_serde=B)).to(
        sink, key_serde=B, value_serde=B)
    return builder.build()


def peak_buffered(bootstrap: str, work: str, run: str, bound: int, topics: tuple[str, str, str]) -> int:
    """The most bytes the thread buffered while its task idled, with input.buffer.max.bytes `bound`."""
    app = App(_topology(*topics), {"application.id": f"bench-input-buffer-{run}", "bootstrap.servers": bootstrap,
                                   "state.dir": os.path.join(work, f"state-{run}"), "max.task.idle.ms": IDLE_MS,
                                   "input.buffer.max.bytes": bound})
    app.start()
    try:
        if not app.wait_for_state(AppState.RUNNING, timeout=120):
            raise RuntimeError(f"{run}: the app did not reach RUNNING")
        tm = app.threads[0].task_manager
        peak, end = 0, time.monotonic() + IDLE_MS / 1000 * 0.8  # inside the idle time
        while time.monotonic() < end:
            peak = max(peak, tm.buffered_bytes()[0])
            time.sleep(0.02)  # a sampling period, not a synchronisation
        return peak
    finally:
        app.close(timeout=60)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=3000)
    parser.add_argument("--record-bytes", type=int, default=100_000)
    parser.add_argument("--bound-mib", type=int, default=32)
    args = parser.parse_args()
    work = tempfile.mkdtemp(prefix="eddy-bench-input-buffer-")
    try:
        bootstrap = f"local://{work}/cluster"
        topics = ("bench-full", "bench-empty", "bench-out")
        app_bench.create_topics(bootstrap, {t: 1 for t in topics}, 1)
        app_bench.produce(bootstrap, topics[0], [(b"k", b"x" * args.record_bytes)] * args.records)
        total = args.records * args.record_bytes
        baseline = peak_buffered(bootstrap, work, "baseline", 4 * total, topics)
        bounded = peak_buffered(bootstrap, work, "bounded", args.bound_mib * 1024 * 1024, topics)
        print(f"{args.records:,} records of {args.record_bytes:,} bytes ({total / 1e6:,.1f} MB) while the task idles")
        print(f"peak buffered, no bound reached:       {baseline / 1e6:10,.1f} MB")
        print(f"peak buffered, bound {args.bound_mib} MiB:            {bounded / 1e6:10,.1f} MB"
              f"  ratio to the baseline {bounded / baseline:.3f}")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
