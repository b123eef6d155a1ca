"""Micro-benchmark of a cached store whose cache cannot hold its writes (a starved cache: the
thread's budget taken, Kafka's rule evicting the writer's own entries), against the same store
uncached, measured in the same run.

    python bench/cache_starved.py [--records 200000] [--keys 100] [--only count,table]

In bench/windowed.py's default table run the source table's entries fill the thread's cache and
the aggregation behind it is starved: each of its updates reads the store (a miss), is written
into the cache and at once evicted alone (written down, logged, forwarded). Here a cache of a
few bytes (`statestore.cache.max.bytes`) starves every store the same way, on the
TopologyTestDriver (the production path, without a broker's timing), over RocksDB stores:

- count: `group_by_key().count()` over `--keys` keys (a stream aggregation);
- table: `table(...).group_by(...).count()` of users moving between `--keys` groups (the
  table aggregation of bench/windowed.py: the source table starved too).

The baseline is the same topology with caching disabled on its stores, which does the same store
reads and writes and forwards every update, with no cache in between. The driver commits after
every record (as Kafka's), so a RocksDB store's pending writes go down at once in both. Printed: CPU seconds of
each, the ratio starved / uncached (what the cache's layers cost when they cannot help), and
whether the two emitted the same records (they must). Not a test: nothing else is asserted.
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

from streams import Materialized, StreamsBuilder, serdes  # noqa: E402
from streams.testing import TopologyTestDriver  # noqa: E402

S = serdes.STRING
STARVED_CACHE_BYTES = 8  # smaller than any entry: every write is evicted alone at once


def topology(kind: str, cached: bool):
    def store(name: str) -> Materialized:
        return Materialized.as_(name) if cached else Materialized.as_(name).with_caching_disabled()

    builder = StreamsBuilder()
    if kind == "count":
        counted = builder.stream("in", key_serde=S, value_serde=S).group_by_key().count(store("counts"))
    else:
        counted = builder.table("in", key_serde=S, value_serde=S, store=store("users")).group_by(
            lambda user, group: (group, user), key_serde=S, value_serde=S).count(store("counts"))
    counted.to_stream().to("out", key_serde=S, value_serde=serdes.LONG)
    return builder.build()


def run(kind: str, cached: bool, records: list) -> tuple[float, list]:
    """CPU seconds of piping `records` through, and what came out."""
    config = {"application.id": "bench-cache-starved", "statestore.cache.max.bytes": STARVED_CACHE_BYTES}
    with TopologyTestDriver(topology(kind, cached), config) as driver:
        topic = driver.create_input_topic("in", S, S)
        out = driver.create_output_topic("out", S, serdes.LONG)
        started = time.process_time()
        for key, value, timestamp in records:
            topic.pipe_input(key, value, timestamp)
        spent = time.process_time() - started
        return spent, out.read_key_values_to_list()


def make_records(kind: str, n: int, keys: int) -> list:
    rng = random.Random(1)
    if kind == "count":
        return [(f"k{rng.randrange(keys)}", "v", i) for i in range(n)]
    users = max(keys * 10, 1)
    return [(f"u{rng.randrange(users)}", f"g{rng.randrange(keys)}", i) for i in range(n)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--keys", type=int, default=100)
    parser.add_argument("--only", default="count,table")
    args = parser.parse_args()
    logging.disable(logging.WARNING)
    print(f"{args.records:,} records over {args.keys} keys; CPU seconds, starved cache "
          f"({STARVED_CACHE_BYTES} bytes) and uncached, RocksDB stores")
    for kind in args.only.split(","):
        records = make_records(kind, args.records, args.keys)
        starved, starved_out = run(kind, True, records)
        uncached, uncached_out = run(kind, False, records)
        same = "same output" if starved_out == uncached_out else "OUTPUTS DIFFER"
        print(f"{kind:<6} starved {starved:6.2f}  uncached {uncached:6.2f}  ratio {starved / uncached:5.2f}  "
              f"({len(starved_out):,} records out, {same})")


if __name__ == "__main__":
    main()
