"""Benchmark: restoring a RocksDB store from its changelog on the embedded cluster.

    python bench/restore.py [--records 1000000] [--overwrites 0.3] [--profile]

1. A changelog topic (compacted, one partition, replication factor 3) on an embedded 3-broker
   cluster (`streams.backends.for_config("local://...")`) gets ``--records`` records: 16-byte
   keys, 100-byte values, ``--overwrites`` of them rewriting an earlier key. They are produced
   with the embedded `Producer` (acks=all, linger and batching on).
2. Restore: an empty task directory, a `ProcessorStateManager` with a logged
   `RocksDBKeyValueStore`, and the real `StoreChangelogReader` on a restore consumer from the
   backend (`restore_consumer_config`, end offsets from the admin client), looped until the
   changelog is COMPLETED. records/s from `register` to completion.
3. Baselines in the same run, same records already in memory: rocksdict ingestion with
   1,000-record `WriteBatch`es, WAL off, (a) with the store's own options
   (`state.rocksdb_kv.rocksdb_options()`, the fair comparison) and (b) with rocksdict's default
   options. The ratio is restore rate / baseline (a). Target: >= 0.5.

The restored store is checked against the latest value of every key (outside the clock).
``--profile`` runs the restore under cProfile and prints where the time goes (by function and
by file). Not a test: only the content check is asserted.
"""

from __future__ import annotations

import argparse
import cProfile
import collections
import io
import os
import pstats
import random
import shutil
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from confluent_kafka import TopicPartition  # noqa: E402
from confluent_kafka.admin import NewTopic  # noqa: E402
from rocksdict import Options, Rdict, WriteBatch, WriteOptions  # noqa: E402

from state.directory import StateDirectory  # noqa: E402
from state.logging_store import ChangeLoggingKeyValueStore  # noqa: E402
from state.manager import ProcessorStateManager, TaskType, close_state_manager, register_state_stores  # noqa: E402
from state.restore import StoreChangelogReader, restore_consumer_config  # noqa: E402
from state.rocksdb_kv import RocksDBKeyValueStore, rocksdb_options  # noqa: E402
from state.task_id import TaskId  # noqa: E402
from streams.backends import for_config  # noqa: E402

APP = "bench-restore"
STORE = "store"
TOPIC = f"{APP}-{STORE}-changelog"
TASK = TaskId(0, 0)
KEY_SIZE = 16
VALUE_SIZE = 100
BASELINE_BATCH = 1000


def make_records(n: int, overwrite_fraction: float, seed: int = 7) -> list[tuple[bytes, bytes]]:
    """n (key, value) pairs: 16-byte keys, 100-byte values, `overwrite_fraction` of them reusing
    an earlier key (chosen uniformly among the keys written so far)."""
    rng = random.Random(seed)
    records = []
    distinct = 0
    for i in range(n):
        if distinct and rng.random() < overwrite_fraction:
            key_id = rng.randrange(distinct)
        else:
            key_id = distinct
            distinct += 1
        key = b"k%015d" % key_id
        value = (b"value-%d-" % i).ljust(VALUE_SIZE, b"x")
        records.append((key, value))
    return records


def produce(backend, records: list) -> float:
    """Produce the records to partition 0 of TOPIC; returns records/s (produce to flush)."""
    admin = backend.admin({})
    for f in admin.create_topics([NewTopic(TOPIC, 1, 3, config={"cleanup.policy": "compact"})]).values():
        f.result(60)
    producer = backend.producer({"acks": "all", "linger.ms": 20, "batch.num.messages": 10000,
                                 "queue.buffering.max.messages": 500000})
    errors = []

    def delivered(err, _msg):
        if err is not None:
            errors.append(err)

    start = time.perf_counter()
    p = producer.produce
    for i, (k, v) in enumerate(records):
        try:
            p(TOPIC, v, k, partition=0, on_delivery=delivered if i == len(records) - 1 else None)
        except BufferError:
            producer.poll(0.05)
            p(TOPIC, v, k, partition=0)
    left = producer.flush(600)
    elapsed = time.perf_counter() - start
    if left or errors:
        raise SystemExit(f"produce failed: {left} undelivered, errors {errors[:3]}")
    return len(records) / elapsed


def restore(backend, state_dir: str) -> tuple[float, int, ProcessorStateManager]:
    """Restore the changelog into an empty store; returns (records/s, records restored, manager)."""
    directory = StateDirectory(state_dir, APP)
    manager = ProcessorStateManager(TASK, TaskType.ACTIVE, False, directory)
    register_state_stores(manager, [ChangeLoggingKeyValueStore(RocksDBKeyValueStore(STORE))])
    consumer = backend.consumer({**restore_consumer_config(False), "client.id": f"{APP}-restore"})
    reader = StoreChangelogReader(consumer, eos_enabled=False, admin=backend.admin({}), progress_bar=False)
    tp = TopicPartition(TOPIC, 0)
    start = time.perf_counter()
    reader.register(tp, manager)
    restore_step = reader.restore
    completed = reader.all_changelogs_completed
    while not completed():
        restore_step()
    elapsed = time.perf_counter() - start
    restored = reader.total_restored(tp)
    reader.unregister([tp])
    consumer.close()
    return restored / elapsed, restored, manager


def baseline(path: str, records: list, options: Options | None) -> float:
    """records/s of rocksdict ingestion with 1,000-record WriteBatches, WAL off."""
    if options is None:
        options = Options(raw_mode=True)
        options.create_if_missing(True)
    db = Rdict(path, options)
    wo = WriteOptions()
    wo.disable_wal = True
    start = time.perf_counter()
    for i in range(0, len(records), BASELINE_BATCH):
        batch = WriteBatch(raw_mode=True)
        put = batch.put
        for k, v in records[i:i + BASELINE_BATCH]:
            put(k, v)
        db.write(batch, wo)
    elapsed = time.perf_counter() - start
    db.close()
    Rdict.destroy(path)
    return len(records) / elapsed


def by_file(stats: pstats.Stats, top: int = 12) -> str:
    """Own time (tottime) aggregated by source file."""
    totals: dict[str, float] = collections.defaultdict(float)
    for (filename, _line, _name), (_cc, _nc, tt, _ct, _callers) in stats.stats.items():
        totals[filename] += tt
    total = sum(totals.values()) or 1.0
    lines = [f"  {t:7.3f} s {100 * t / total:5.1f}%  {f}" for f, t in
             sorted(totals.items(), key=lambda item: -item[1])[:top]]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--overwrites", type=float, default=0.3)
    parser.add_argument("--profile", action="store_true", help="run the restore under cProfile")
    args = parser.parse_args()
    work_dir = tempfile.mkdtemp(prefix="eddy-bench-restore-")
    backend = for_config({"bootstrap.servers": f"local://{os.path.join(work_dir, 'cluster')}"})
    try:
        records = make_records(args.records, args.overwrites)
        latest = dict(records)
        print(f"{len(records):,} changelog records ({KEY_SIZE}-byte keys, {VALUE_SIZE}-byte values, "
              f"{args.overwrites:.0%} overwrites -> {len(latest):,} keys), 1 partition, RF=3")
        rate = produce(backend, records)
        print(f"produce            {rate:12,.0f} records/s  (embedded Producer, acks=all, linger.ms=20)")

        profiler = cProfile.Profile() if args.profile else None
        if profiler is not None:
            profiler.enable()
        restore_rate, restored, manager = restore(backend, os.path.join(work_dir, "state"))
        if profiler is not None:
            profiler.disable()
        store = manager.get_store(STORE)
        with store.all() as it:
            contents = dict(it)
        assert restored == len(records), (restored, len(records))
        assert contents == latest, "restored store differs from the changelog's latest values"
        close_state_manager(manager, dirty=False)

        fair = baseline(os.path.join(work_dir, "baseline-store-options"), records, rocksdb_options())
        default = baseline(os.path.join(work_dir, "baseline-default-options"), records, None)
        print(f"restore            {restore_rate:12,.0f} records/s  (StoreChangelogReader -> RocksDBKeyValueStore, "
              f"{restored:,} records)")
        print(f"rocksdict (store options)   {fair:12,.0f} records/s  (WriteBatch of {BASELINE_BATCH}, WAL off)")
        print(f"rocksdict (default options) {default:12,.0f} records/s  (WriteBatch of {BASELINE_BATCH}, WAL off)")
        print(f"ratio vs store options      {restore_rate / fair:12.3f}   (target >= 0.5)")
        print(f"ratio vs default options    {restore_rate / default:12.3f}")
        print(f"vs 160,000 records/s        {restore_rate / 160_000:12.2f}x  (target 5x)")

        if profiler is not None:
            out = io.StringIO()
            stats = pstats.Stats(profiler, stream=out)
            stats.sort_stats("tottime").print_stats(20)
            stats.sort_stats("cumulative").print_stats(25)
            print(out.getvalue())
            print("own time by file:")
            print(by_file(stats))
    finally:
        backend.close()
        shutil.rmtree(work_dir, ignore_errors=True)


if __name__ == "__main__":
    main()
