"""Benchmark: the embedded clients against a real 3-broker LocalCluster.

    python bench/clients.py [--records 1000000] [--value-size 100] [--phases produce] [--profile]

Phases (functions ``phase_<name>(ctx)``, run in order, each adds its figures to ``ctx.results``):

* ``produce``: one `Producer` (acks=all, default linger/batching) produces ``--records`` records
  of ``--value-size`` bytes (null keys) to a topic with one partition and replication factor 3,
  then flushes; records/s from the first produce() to the end of the flush. The baseline in
  the same run: `Log.append_as_leader` of the same number of records, encoded in batches of
  the size the producer sends (``batch.num.messages``, ``batch.size``), into a fresh standalone log; the ratio is
  producer rate / log append rate. Target: >= 200,000 records/s.

A consume phase is added next to it (``phase_consume``) using the topic ``ctx.topic`` the produce
phase filled. Not a test: nothing is asserted.
"""

from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass, field

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from replication.cluster import LocalCluster  # noqa: E402
from replication.log import Log  # noqa: E402
from replication.records import encode_batch  # noqa: E402

TOPIC = "bench"
PRODUCER_BATCH = 10000  # librdkafka's batch.num.messages default
PRODUCER_BATCH_BYTES = 1000000  # librdkafka's batch.size default


def producer_batch_records(value_size: int) -> int:
    """Records per batch the producer sends by default (its size estimate is value + 16 bytes)."""
    return min(PRODUCER_BATCH, -(-PRODUCER_BATCH_BYTES // (value_size + 16)))


@dataclass
class Context:
    records: int
    value_size: int
    work_dir: str
    cluster: LocalCluster
    topic: str = TOPIC
    results: dict[str, float] = field(default_factory=dict)


def log_append_rate(work_dir: str, records: int, value_size: int, batch: int) -> float:
    """Records/s of `Log.append_as_leader` alone, batches encoded before the clock starts."""
    value = b"x" * value_size
    ts = int(time.time() * 1000)
    batches = []
    left = records
    while left > 0:
        n = min(batch, left)
        batches.append(encode_batch([(None, value, ts)] * n))
        left -= n
    path = os.path.join(work_dir, "baseline-0")
    lg = Log(path)
    start = time.perf_counter()
    for b in batches:
        lg.append_as_leader(b, 0)
    lg.flush()
    elapsed = time.perf_counter() - start
    lg.close()
    shutil.rmtree(path, ignore_errors=True)
    return records / elapsed


def phase_produce(ctx: Context) -> None:
    ctx.cluster.create_topic(ctx.topic, partitions=1, replication_factor=3)
    producer = ctx.cluster.producer({"acks": "all", "queue.buffering.max.messages": 200000})
    value = b"x" * ctx.value_size
    produce = producer.produce
    poll = producer.poll
    topic = ctx.topic
    start = time.perf_counter()
    for _ in range(ctx.records):
        while True:
            try:
                produce(topic, value, partition=0)
                break
            except BufferError:  # queue full: wait for delivery reports
                poll(0.01)
    left = producer.flush(300)
    elapsed = time.perf_counter() - start
    producer.close()
    if left:
        print(f"produce: {left} records not delivered", file=sys.stderr)
    hw = ctx.cluster.high_watermark(ctx.topic, 0)
    rate = ctx.records / elapsed
    per_batch = producer_batch_records(ctx.value_size)
    base = log_append_rate(ctx.work_dir, ctx.records, ctx.value_size, per_batch)
    ctx.results.update({"produce_records_per_s": rate, "log_append_records_per_s": base,
                        "produce_ratio": rate / base})
    print(f"produce      {rate:12,.0f} records/s  ({elapsed:.2f} s, high watermark {hw:,})")
    print(f"log append   {base:12,.0f} records/s  (Log.append_as_leader, batches of {per_batch})")
    print(f"ratio        {rate / base:12.3f}")


def log_read_rate(lg: Log, topic: str, end: int) -> float:
    """Records/s of the leader's own log read path: `Log.read` of 1 MiB chunks decoded into
    `confluent_kafka.Message` objects by `decode_messages` (what a fetch does, minus the client)."""
    from replication.records import decode_messages

    start = time.perf_counter()
    offset = lg.log_start_offset
    count = 0
    while offset < end:
        chunk = lg.read(offset, 1 << 20, end)
        messages, offset = decode_messages(chunk.buffer, topic, 0, min_offset=offset, partial_tail=True)
        count += len(messages)
    return count / (time.perf_counter() - start)


def phase_consume(ctx: Context) -> None:
    """One `Consumer` reads the whole partition with consume(1000); records/s from assign() to
    the last record. Baseline: the leader log's own read+decode rate in the same run."""
    from confluent_kafka import OFFSET_BEGINNING, TopicPartition

    cluster = ctx.cluster
    if ctx.topic not in cluster.topics():
        cluster.create_topic(ctx.topic, partitions=1, replication_factor=3)
    end = cluster.high_watermark(ctx.topic, 0)
    if end < ctx.records:  # consume alone: fill the partition straight through the leader
        value = b"x" * ctx.value_size
        ts = int(time.time() * 1000)
        left = ctx.records - end
        while left > 0:
            n = min(5000, left)
            cluster.produce(ctx.topic, 0, encode_batch([(None, value, ts)] * n), acks=-1)
            left -= n
        end = cluster.high_watermark(ctx.topic, 0)
    consumer = cluster.consumer({"group.id": "bench-consume", "enable.auto.commit": False})
    consume = consumer.consume
    start = time.perf_counter()
    consumer.assign([TopicPartition(ctx.topic, 0, OFFSET_BEGINNING)])
    count = 0
    while count < end:
        count += len(consume(1000, 5.0))
    elapsed = time.perf_counter() - start
    consumer.close()
    rate = count / elapsed
    leader = cluster.leader(ctx.topic, 0)
    base = log_read_rate(cluster.partition_on(leader, ctx.topic, 0).log, ctx.topic, end)
    ctx.results.update({"consume_records_per_s": rate, "log_read_records_per_s": base,
                        "consume_ratio": rate / base})
    print(f"consume      {rate:12,.0f} records/s  ({elapsed:.2f} s, {count:,} records, consume(1000))")
    print(f"log read     {base:12,.0f} records/s  (Log.read 1 MiB + decode_messages)")
    print(f"ratio        {rate / base:12.3f}")


PHASES = {"produce": phase_produce, "consume": phase_consume}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--value-size", type=int, default=100)
    parser.add_argument("--phases", default=",".join(PHASES), help="comma-separated: " + ", ".join(PHASES))
    parser.add_argument("--profile", action="store_true")
    args = parser.parse_args()
    work_dir = tempfile.mkdtemp(prefix="eddy-bench-clients-")
    try:
        with LocalCluster(os.path.join(work_dir, "cluster"), num_brokers=3) as cluster:
            ctx = Context(args.records, args.value_size, work_dir, cluster)
            print(f"{args.records:,} records of {args.value_size} bytes, 1 partition, RF=3, acks=all")
            for name in args.phases.split(","):
                phase = PHASES[name.strip()]
                if args.profile:
                    prof = cProfile.Profile()
                    prof.runcall(phase, ctx)
                    pstats.Stats(prof).sort_stats("cumulative").print_stats(25)
                else:
                    phase(ctx)
    finally:
        shutil.rmtree(work_dir, ignore_errors=True)


if __name__ == "__main__":
    main()
