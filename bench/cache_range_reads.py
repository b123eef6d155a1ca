"""Micro-benchmark of the record cache's range reads (state/cache/range_reads.py) on the DSL's
readers of them: a session-window count (a find_sessions per record) and a sliding-window count
(a key's window fetch per record), each on a RocksDB and an in-memory store, a tumbling-window
count emitting on window close (a fetch of the closed windows per emission), and a processor's
key-value prefix scans, cached against the same with caching disabled, measured in the same run.

    python bench/cache_range_reads.py [--records 5000] [--keys 500] [--only session,sliding,close,prefix]

Records 3 ms apart (plus up to 20 ms of jitter) over `--keys` keys, through the
TopologyTestDriver; session gap 50 ms, sliding windows of 100 ms, grace 1 s, so nearly every
record starts or updates windows of its own. The default 10 MiB cache keeps every window, so a
cached read passes every cached entry in its range: for a RocksDB store one key's windows in a
segment or two; for an in-memory store every key's (Kafka's in-memory cache keys lead with the
time). close: windows of 100 ms, grace 1 s, so an emission about every 33 records, each
reading the windows that closed: on RocksDB Kafka's time-first cache ranges, in memory the whole
cache (Kafka's CachingWindowStore.fetchAll reads every cached entry). prefix: a Processor API processor puts each record under `key/n` (n: the record's number,
so the store grows to `--records` keys, all cached) and reads its key's entries with
`prefix_scan(key + "/")`. The baseline is the store without a cache, which reads the store
alone. Printed: CPU seconds of each and the ratio cached / uncached. Not a test: nothing is
asserted.
"""

from __future__ import annotations

import argparse
import logging
import os
import random
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from state.stores import Stores  # noqa: E402
from streams import (EmitStrategy, Materialized, Processor, SessionWindows, SlidingWindows,  # noqa: E402
                     StreamsBuilder, TimeWindows, Topology, serdes)
from streams.testing import TopologyTestDriver  # noqa: E402

S = serdes.STRING
RETENTION_MS = 100_000


class PrefixReader(Processor):
    """Puts each record under `key/n` and reads its key's entries by prefix."""

    def init(self, context):
        self.store = context.get_state_store("c")
        self.n = 0

    def process(self, record):
        self.n += 1
        self.store.put(f"{record.key}/{self.n:08d}", record.value)
        with self.store.prefix_scan(f"{record.key}/") as entries:
            for _ in entries:
                pass


def prefix_topology(persistent: bool, cached: bool) -> Topology:
    supplier = (Stores.persistent_key_value_store if persistent else Stores.in_memory_key_value_store)("c")
    builder = Stores.key_value_store_builder(supplier, S, S)
    t = Topology()
    t.add_source("src", "in", key_serde=S, value_serde=S)
    t.add_processor("read", PrefixReader, "src")
    t.add_state_store(builder.with_caching_enabled() if cached else builder, "read")
    return t


def run(kind: str, persistent: bool, cached: bool, records: list) -> float:
    """CPU seconds of piping `records` through the count (or the prefix reader)."""
    if kind == "prefix":
        return timed(prefix_topology(persistent, cached), records)
    builder = StreamsBuilder()
    grouped = builder.stream("in", key_serde=S, value_serde=S).group_by_key()
    if kind == "session":
        windowed = grouped.windowed_by(SessionWindows.of_inactivity_gap_and_grace(50, 1000))
        supplier = (Stores.persistent_session_store if persistent else Stores.in_memory_session_store)("c", RETENTION_MS)
    elif kind == "sliding":
        windowed = grouped.windowed_by(SlidingWindows.of_time_difference_and_grace(100, 1000))
        supplier = (Stores.persistent_window_store if persistent else Stores.in_memory_window_store)(
            "c", RETENTION_MS, 100, False)
    else:  # close: the DSL's own store (time-ordered on RocksDB), read by each emission
        windowed = grouped.windowed_by(TimeWindows.of_size_and_grace(100, 1000)).emit_strategy(
            EmitStrategy.on_window_close())
        supplier = None
    materialized = (Materialized.as_(supplier) if supplier is not None
                    else Materialized.as_("c") if persistent else Materialized.as_("c").with_in_memory_store())
    windowed.count(materialized if cached else materialized.with_caching_disabled())
    return timed(builder.build(), records)


def timed(topology: Topology, records: list) -> float:
    with TopologyTestDriver(topology, {"application.id": "bench-range-reads"}) as driver:
        topic = driver.create_input_topic("in", S, S)
        started = time.process_time()
        for key, value, timestamp in records:
            topic.pipe_input(key, value, timestamp)
        return time.process_time() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=5000)
    parser.add_argument("--keys", type=int, default=500)
    parser.add_argument("--only", default="session,sliding,close,prefix")
    args = parser.parse_args()
    logging.disable(logging.WARNING)  # late records are dropped by design
    rng = random.Random(1)
    records = [(f"k{rng.randrange(args.keys)}", "v", 1000 + i * 3 + rng.randrange(20)) for i in range(args.records)]
    print(f"{args.records:,} records over {args.keys} keys; CPU seconds, cached (10 MiB) and uncached")
    for kind in args.only.split(","):
        for persistent in (True, False):
            cached = run(kind, persistent, True, records)
            uncached = run(kind, persistent, False, records)
            store = "RocksDB" if persistent else "in memory"
            print(f"{kind:<8} {store:<10} cached {cached:6.2f}  uncached {uncached:6.2f}  "
                  f"ratio {cached / uncached:5.2f}")


if __name__ == "__main__":
    main()
