"""Push vs pull replication: commit latency and follower high-watermark visibility.

For 1, 10, 100 and 1000 partitions (RF 3, 3 brokers, acks=all) a client sends single-record
produce requests at a fixed total rate, round-robin over the partitions, without waiting for
answers (requests overlap). Measured, in the same run for each partition count:

- commit latency: request sent -> acks=all answer, i.e. leader append -> high watermark
  covers the offset (plus the in-process hop); p50 and p99;
- follower HW visibility: the leader's high watermark advances -> the partition's first
  follower knows that high watermark (or a later one); p50 and p99.

Modes: pull (one fetcher per leader, long poll 500 ms, min bytes 1), push with 1 pusher and
push with 4 pushers per broker. Push runs wait until every follower is in push first.

    python bench/push_vs_pull.py [--rate 200] [--seconds 3] [--partitions 1,10,100,1000]
"""

from __future__ import annotations

import argparse
import collections
import os
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from replication.cluster import LocalCluster  # noqa: E402
from replication.protocol import Errors, ProduceRequest, TopicPartition  # noqa: E402
from replication.records import encode_batch  # noqa: E402

TOPIC = "bench"
VALUE = b"x" * 100


def percentile(samples: list[float], q: float) -> float:
    if not samples:
        return float("nan")
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


class FollowerHwWatch:
    """Per partition: when the leader's HW advanced, and when a follower first knew it."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.advances: dict[TopicPartition, collections.deque] = collections.defaultdict(collections.deque)
        self.delays: list[float] = []
        self.recording = False

    def install_leader(self, partition) -> None:
        tp = partition.tp

        def on_hw(_partition, hw, _tp=tp):
            if self.recording:
                with self.lock:
                    self.advances[_tp].append((hw, time.perf_counter()))

        partition.hw_listeners.append(on_hw)

    def install_follower(self, tp: TopicPartition, log) -> None:
        original = log.maybe_update_high_watermark

        def wrapped(hw, _orig=original, _tp=tp, _log=log):
            result = _orig(hw)
            now = time.perf_counter()
            known = _log.high_watermark
            with self.lock:
                pending = self.advances.get(_tp)
                while pending and pending[0][0] <= known:
                    self.delays.append(now - pending.popleft()[1])
            return result

        log.maybe_update_high_watermark = wrapped


def run(mode: str, pushers: int, partitions: int, rate: float, seconds: float) -> dict:
    config = {
        "num.replica.fetchers": 1,
        "replica.fetch.wait.max.ms": 500,
        "replica.fetch.min.bytes": 1,
        "replica.lag.time.max.ms": 30000,
        "push.max.threads": pushers,
        "segment.bytes": 8 * 1024 * 1024,
        "segment.index.bytes": 64 * 1024,
    }
    with tempfile.TemporaryDirectory(prefix="eddy-push-bench-") as d, \
            LocalCluster(d, num_brokers=3, replication="push" if mode.startswith("push") else "pull",
                         config=config) as cluster:
        cluster.create_topic(TOPIC, partitions=partitions, replication_factor=3)
        single = encode_batch([(None, VALUE, 1)])
        for p in range(partitions):
            assert cluster.produce(TOPIC, p, single, acks=-1).error is Errors.NONE
        # Measure the steady state: every follower holds the warm-up record first (its first
        # append of a partition writes the leader-epoch checkpoint, an fsync per partition).
        def warmed_up():
            return all(cluster.log_end_offset(b, TOPIC, p) >= 1
                       for p in range(partitions) for b in cluster.replicas(TOPIC, p))
        cluster.wait_until(warmed_up, 120, "every replica holds the warm-up record")
        if mode.startswith("push"):
            def all_pushing():
                return sum(b.push.metrics()["PushPartitionsCount"] for b in cluster.brokers.values()) \
                    == 2 * partitions
            cluster.wait_until(all_pushing, 60, "every follower in push")
        leaders = {p: cluster.leader(TOPIC, p) for p in range(partitions)}
        watch = FollowerHwWatch()
        for p in range(partitions):
            tp = TopicPartition(TOPIC, p)
            follower = next(b for b in cluster.replicas(TOPIC, p) if b != leaders[p])
            watch.install_follower(tp, cluster.partition_on(follower, TOPIC, p).log)
            watch.install_leader(cluster.partition_on(leaders[p], TOPIC, p))
        watch.recording = True
        latencies: list[float] = []
        errors: list[object] = []
        outstanding = [0]
        done = threading.Condition()
        total = int(rate * seconds)
        transport = cluster.transport

        def send(i: int) -> None:
            p = i % partitions
            tp = TopicPartition(TOPIC, p)
            t0 = time.perf_counter()

            def callback(response, error, tp=tp, t0=t0):
                t1 = time.perf_counter()
                if error is not None or response[tp].error is not Errors.NONE:
                    errors.append(error or response[tp].error)
                else:
                    latencies.append(t1 - t0)
                with done:
                    outstanding[0] -= 1
                    done.notify_all()

            with done:
                outstanding[0] += 1
            transport.send_async(-1, leaders[p], ProduceRequest(-1, 30000, {tp: single}), callback)

        start = time.perf_counter()
        for i in range(total):
            target = start + i / rate
            delay = target - time.perf_counter()
            if delay > 0:
                time.sleep(delay)
            send(i)
        achieved = total / (time.perf_counter() - start)
        with done:
            done.wait_for(lambda: outstanding[0] == 0, timeout=30)
        # Followers learn the last HW on a later push / fetch response: give them a moment.
        deadline = time.monotonic() + 1.5
        while time.monotonic() < deadline and any(watch.advances.values()):
            time.sleep(0.01)
        return {
            "mode": mode, "partitions": partitions, "rate": achieved, "n": len(latencies), "errors": len(errors),
            "p50": percentile(latencies, 0.5) * 1000, "p99": percentile(latencies, 0.99) * 1000,
            "hw_p50": percentile(watch.delays, 0.5) * 1000, "hw_p99": percentile(watch.delays, 0.99) * 1000,
        }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rate", type=float, default=200.0, help="total produce requests per second")
    ap.add_argument("--seconds", type=float, default=3.0)
    ap.add_argument("--partitions", default="1,10,100,1000")
    args = ap.parse_args()
    modes = [("pull", 1), ("push-1", 1), ("push-4", 4)]
    rows = []
    print(f"rate {args.rate:.0f} req/s for {args.seconds:.0f}s per run, RF 3, acks=all, 100-byte records")
    print(f"{'partitions':>10} {'mode':>7} {'req/s':>7} {'p50 ms':>8} {'p99 ms':>8} "
          f"{'fHW p50':>8} {'fHW p99':>8} {'err':>4}")
    for n in [int(x) for x in args.partitions.split(",")]:
        by_mode = {}
        for mode, pushers in modes:
            r = run(mode, pushers, n, args.rate, args.seconds)
            by_mode[mode] = r
            rows.append(r)
            print(f"{n:>10} {mode:>7} {r['rate']:>7.0f} {r['p50']:>8.2f} {r['p99']:>8.2f} "
                  f"{r['hw_p50']:>8.2f} {r['hw_p99']:>8.2f} {r['errors']:>4}", flush=True)
        pull = by_mode["pull"]["p99"]
        best = min(by_mode["push-1"]["p99"], by_mode["push-4"]["p99"])
        print(f"{'':>10} push/pull p99: 1 pusher {by_mode['push-1']['p99'] / pull:.3f}x, "
              f"4 pushers {by_mode['push-4']['p99'] / pull:.3f}x (best {best / pull:.3f}x)", flush=True)


if __name__ == "__main__":
    main()
