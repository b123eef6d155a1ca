"""Commit latency and acks=all throughput of the embedded cluster (pull replication).

For 1, 10 and 100 partitions, RF=3 with acks=all is measured against RF=1 with acks=1 in
the same run:

- commit latency: one client sends single-record batches round-robin over the partitions and
  times each request; an acks=all answer comes when the high watermark covers the append, so
  this is append -> HW latency as a producer sees it (p50/p99);
- throughput: several client threads keep requests of 100 x 100-byte records in flight.

    python bench/replication.py [--latency-requests N] [--throughput-records N]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from replication.cluster import LocalCluster  # noqa: E402
from replication.protocol import Errors  # noqa: E402
from replication.records import encode_batch  # noqa: E402

VALUE = b"x" * 100


def percentile(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def measure(partitions: int, rf: int, acks: int, latency_requests: int, throughput_records: int,
            threads: int) -> dict:
    with tempfile.TemporaryDirectory(prefix="eddy-bench-") as d, \
            LocalCluster(d, num_brokers=3, config={"replica.fetch.wait.max.ms": 500}) as cluster:
        cluster.create_topic("bench", partitions=partitions, replication_factor=rf)
        single = encode_batch([(None, VALUE, 1)])
        # warm up: every partition has a leader and followers fetching
        for p in range(partitions):
            assert cluster.produce("bench", p, single, acks=acks).error is Errors.NONE
        latencies = []
        for i in range(latency_requests):
            p = i % partitions
            t0 = time.perf_counter()
            resp = cluster.produce("bench", p, single, acks=acks)
            latencies.append(time.perf_counter() - t0)
            assert resp.error is Errors.NONE, resp
        batch = encode_batch([(None, VALUE, 1)] * 100)
        per_thread = throughput_records // 100 // threads
        errors = []

        def worker(k: int) -> None:
            for i in range(per_thread):
                resp = cluster.produce("bench", (k + i * threads) % partitions, batch, acks=acks)
                if resp.error is not Errors.NONE:
                    errors.append(resp.error)

        workers = [threading.Thread(target=worker, args=(k,)) for k in range(threads)]
        t0 = time.perf_counter()
        for w in workers:
            w.start()
        for w in workers:
            w.join()
        elapsed = time.perf_counter() - t0
        assert not errors, errors[:3]
        return {
            "p50_ms": statistics.median(latencies) * 1000,
            "p99_ms": percentile(latencies, 0.99) * 1000,
            "records_per_s": per_thread * threads * 100 / elapsed,
        }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--latency-requests", type=int, default=2000)
    parser.add_argument("--throughput-records", type=int, default=200_000)
    parser.add_argument("--threads", type=int, default=8)
    args = parser.parse_args()
    print(f"{'partitions':>10} {'setup':>16} {'p50 ms':>8} {'p99 ms':>8} {'records/s':>11}")
    for partitions in (1, 10, 100):
        rows = {}
        for label, rf, acks in (("RF3 acks=all", 3, -1), ("RF1 acks=1", 1, 1)):
            rows[label] = r = measure(partitions, rf, acks, args.latency_requests, args.throughput_records,
                                      args.threads)
            print(f"{partitions:>10} {label:>16} {r['p50_ms']:>8.3f} {r['p99_ms']:>8.3f} {r['records_per_s']:>11,.0f}")
        a, b = rows["RF3 acks=all"], rows["RF1 acks=1"]
        print(f"{partitions:>10} {'ratio all/1':>16} {a['p50_ms'] / b['p50_ms']:>8.2f} "
              f"{a['p99_ms'] / b['p99_ms']:>8.2f} {a['records_per_s'] / b['records_per_s']:>11.2f}")


if __name__ == "__main__":
    main()
