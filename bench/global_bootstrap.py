"""Benchmark: a GlobalKTable's bootstrap on the embedded cluster, against a raw restore loop.

    python bench/global_bootstrap.py [--records 300000] [--keys 50000] [--partitions 3]

Writes ``--records`` string records over ``--keys`` keys (seeded) to a global topic first (not
timed), then times `App.start()` of a topology holding only `global_table(topic)`: start()
returns once the global thread has read every partition to its end into the RocksDB store (the
bootstrap goes through the table source processor: deserialize, read the old value, write).

The baseline, in the same run: what Kafka does for a DSL global table, a raw restore: a consumer
assigned every partition reads it to its end and puts the raw bytes into rocksdict, one
WriteBatch per consumed batch. The ratio is bootstrap rate / raw rate. Not a test: nothing is
asserted; compare runs made at the same time on a shared machine.
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

from confluent_kafka import OFFSET_BEGINNING, TopicPartition  # noqa: E402
from confluent_kafka.admin import NewTopic  # noqa: E402
from rocksdict import Options, Rdict, WriteBatch  # noqa: E402

from streams import App, StreamsBuilder, serdes  # noqa: E402
from streams.backends import for_config  # noqa: E402


def raw_restore(backend, topic: str, partitions: int, path: str) -> tuple[float, int]:
    """Read every partition to its end into rocksdict as raw bytes (one WriteBatch per batch)."""
    opts = Options()
    opts.create_if_missing(True)
    db = Rdict(path, opts)
    consumer = backend.consumer({"group.id": "bench-raw", "enable.auto.commit": False,
                                 "enable.partition.eof": True})
    t0 = time.perf_counter()
    tps = [TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)]
    ends = {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=30)[1] for p in range(partitions)}
    consumer.assign(tps)
    done, n = set(p for p, end in ends.items() if end == 0), 0
    while len(done) < partitions:
        batch = WriteBatch()
        for m in consumer.consume(1000, 1.0):
            if m.error() is not None:
                continue
            if m.key() is not None:
                if m.value() is None:
                    batch.delete(m.key())
                else:
                    batch.put(m.key(), m.value())
                n += 1
            if m.offset() + 1 >= ends[m.partition()]:
                done.add(m.partition())
        db.write(batch)
    db.flush()
    elapsed = time.perf_counter() - t0
    consumer.close()
    db.close()
    return elapsed, n


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=300_000)
    parser.add_argument("--keys", type=int, default=50_000)
    parser.add_argument("--partitions", type=int, default=3)
    args = parser.parse_args()
    work = tempfile.mkdtemp(prefix="eddy-bench-global-")
    try:
        bootstrap = f"local://{work}/cluster"
        backend = for_config({"bootstrap.servers": bootstrap})
        try:
            topic = "bench-global"
            backend.admin().create_topics([NewTopic(topic, args.partitions, 1)])[topic].result(30)
            producer = backend.producer({"client.id": "bench-input", "linger.ms": 50})
            rng = random.Random(1)
            for i in range(args.records):
                while True:
                    try:
                        producer.produce(topic, key=f"k{rng.randrange(args.keys)}".encode(), value=f"v{i}".encode())
                        break
                    except BufferError:
                        producer.poll(0.05)
            producer.flush(120)
            raw_s, n = raw_restore(backend, topic, args.partitions, os.path.join(work, "raw"))
            raw_rate = n / raw_s
            print(f"{args.records:,} records over {args.keys:,} keys, {args.partitions} partitions")
            print(f"raw restore (consumer + rocksdict WriteBatch): {raw_s:6.2f}s  {raw_rate:12,.0f} records/s")
        finally:
            backend.close()
        b = StreamsBuilder()
        b.global_table(topic, key_serde=serdes.STRING, value_serde=serdes.STRING, store="global")
        app = App(b.build(), {"application.id": "bench-global", "bootstrap.servers": bootstrap,
                              "state.dir": os.path.join(work, "state")})
        t0 = time.perf_counter()
        app.start()
        secs = time.perf_counter() - t0
        app.close(timeout=120)
        rate = args.records / secs
        print(f"global table bootstrap (App.start):            {secs:6.2f}s  {rate:12,.0f} records/s  "
              f"ratio to raw restore {rate / raw_rate:.3f}")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
