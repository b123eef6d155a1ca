"""Benchmark: restoring a RocksDB store from its changelog on the embedded cluster.

    python bench/restore.py [--records 1000000] [--overwrites 0.3] [--repeat N] [--profile] [--no-bulk]
        [--bulk-write-buffer-mb N] [--bulk-write-buffers N] [--timestamped]

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
   options. The ratio is restore rate / baseline (a). Target: >= 0.5. The restore itself runs
   the store's bulk loading mode, which the baselines do not: a restore of at least 100k
   records starts with the store reopened with a vector memtable, 12 write buffers of 4 MiB,
   two flush threads and automatic compactions off (`state.rocksdb_kv.BULK_LOAD_*`), and when
   the reader completes the changelog the store flushes and reopens in normal mode. Both
   switches are inside the restore's measured time (their share is printed).

Printed besides the rates: the CPU time of the restore's two GIL-sharing threads (restore +
consumer fetcher) against the baseline's one (steadier than rates on a shared machine), and the
whole process's CPU during the restore, RocksDB's flush threads included (bulk loading moves the
memtable sort from the GIL-holding insert to the flush thread). ``--repeat N`` restores N times
on the same changelog and prints min/median/max of restore, baseline (a) and their ratio.

``--timestamped`` restores a timestamped store instead (a DSL table's or aggregate's): the changelog
is in Kafka's format (raw 100-byte values, each record with its own timestamp) and the state
manager's record converter puts the 8-byte timestamp back in front of every value; the baselines
ingest the same stored values (timestamp + value).

The restored store is checked against the latest value of every key (outside the clock).
``--profile`` runs the restore under cProfile and prints where the time goes (by function and
by file). Not a test: only the content check is asserted.
"""

from __future__ import annotations

import argparse
import cProfile
import collections
import gc
import io
import json
import os
import pstats
import random
import shutil
import statistics
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from confluent_kafka import TopicPartition  # noqa: E402
from confluent_kafka.admin import NewTopic  # noqa: E402
from rocksdict import Options, Rdict, WriteBatch, WriteOptions  # noqa: E402

from state.directory import StateDirectory  # noqa: E402
from state.logging_store import ChangeLoggingKeyValueStore, ChangeLoggingTimestampedKeyValueStore  # noqa: E402
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
FIRST_TIMESTAMP = 1_700_000_000_000  # --timestamped: record i has timestamp FIRST_TIMESTAMP + i


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


def stored_records(records: list, timestamped: bool) -> list[tuple[bytes, bytes]]:
    """What the store holds for each changelog record: the value, or (timestamped) the record's
    timestamp (8 bytes, big-endian) + the value."""
    if not timestamped:
        return records
    return [(k, (FIRST_TIMESTAMP + i).to_bytes(8, "big") + v) for i, (k, v) in enumerate(records)]


def produce(backend, records: list, timestamped: bool = False) -> float:
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
    last = len(records) - 1
    for i, (k, v) in enumerate(records):
        while True:
            try:
                if timestamped:
                    p(TOPIC, v, k, partition=0, on_delivery=delivered if i == last else None,
                      timestamp=FIRST_TIMESTAMP + i)
                else:
                    p(TOPIC, v, k, partition=0, on_delivery=delivered if i == last else None)
                break
            except BufferError:  # the queue is full: wait for deliveries to make room
                producer.poll(0.05)
    left = producer.flush(600)
    elapsed = time.perf_counter() - start
    if left or errors:
        raise SystemExit(f"produce failed: {left} undelivered, errors {errors[:3]}")
    return len(records) / elapsed


def thread_cpu_seconds(thread: threading.Thread | None) -> float:
    """CPU time of another thread so far (Linux /proc; 0.0 where unavailable)."""
    if thread is None or thread.native_id is None:
        return 0.0
    try:
        with open(f"/proc/self/task/{thread.native_id}/stat") as fh:
            fields = fh.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime + stime
    except (OSError, ValueError, IndexError):
        return 0.0


def threads_cpu() -> dict[str, float]:
    """CPU seconds so far of every thread of this process, summed by thread name (Linux /proc:
    Python threads by their Python name, RocksDB's native ones as rocksdb:low / rocksdb:high)."""
    totals: dict[str, float] = collections.defaultdict(float)
    tick = os.sysconf("SC_CLK_TCK")
    python_names = {t.native_id: t.name.rstrip("0123456789-_ ") for t in threading.enumerate()}
    for tid in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{tid}/stat") as fh:
                head, tail = fh.read().rsplit(")", 1)
        except OSError:
            continue
        fields = tail.split()
        name = python_names.get(int(tid)) or head.split("(", 1)[1].rstrip("0123456789-_ ")
        totals[name] += (int(fields[11]) + int(fields[12])) / tick
    return totals


def fetcher_thread() -> threading.Thread | None:
    return next((t for t in threading.enumerate() if t.name.startswith("consumer-fetcher-")), None)


def restore(backend, state_dir: str, consumer_conf: dict,
            timestamped: bool = False) -> tuple[float, int, ProcessorStateManager, float, float]:
    """Restore the changelog into an empty store; returns (records/s, records restored, manager,
    CPU seconds of the restore thread plus the consumer's fetcher thread, CPU seconds of the
    whole process: RocksDB's flush and compaction threads and the brokers' included)."""
    directory = StateDirectory(state_dir, APP)
    manager = ProcessorStateManager(TASK, TaskType.ACTIVE, False, directory)
    logging_layer = ChangeLoggingTimestampedKeyValueStore if timestamped else ChangeLoggingKeyValueStore
    register_state_stores(manager, [logging_layer(RocksDBKeyValueStore(STORE))])
    consumer = backend.consumer({**restore_consumer_config(False), "client.id": f"{APP}-restore", **consumer_conf})
    reader = StoreChangelogReader(consumer, eos_enabled=False, admin=backend.admin({}), progress_bar=False)
    tp = TopicPartition(TOPIC, 0)
    fetcher = fetcher_thread()
    cpu_start = time.thread_time() + thread_cpu_seconds(fetcher)
    process_cpu_start = time.process_time()
    threads_start = threads_cpu()
    start = time.perf_counter()
    reader.register(tp, manager)
    restore_step = reader.restore
    completed = reader.all_changelogs_completed
    while not completed():
        restore_step()
    elapsed = time.perf_counter() - start
    cpu = time.thread_time() + thread_cpu_seconds(fetcher) - cpu_start
    process_cpu = time.process_time() - process_cpu_start
    threads_end = threads_cpu()
    by_thread = {name: threads_end[name] - threads_start.get(name, 0.0) for name in threads_end}
    restored = reader.total_restored(tp)
    reader.unregister([tp])
    consumer.close()
    return restored / elapsed, restored, manager, cpu, process_cpu, by_thread


def consume_only(backend, end: int) -> float:
    """records/s of the restore consumer alone: consume(1000) from the start to `end`, records
    dropped (the fetch + decode + hand-over part of the restore)."""
    consumer = backend.consumer({**restore_consumer_config(False), "client.id": f"{APP}-consume-only"})
    start = time.perf_counter()
    consumer.assign([TopicPartition(TOPIC, 0, 0)])
    consume = consumer.consume
    count = 0
    while count < end:
        msgs = consume(1000, 1.0)
        count += len(msgs)
        if msgs and msgs[-1].error() is not None:  # the end-of-partition event
            count -= 1
    elapsed = time.perf_counter() - start
    consumer.close()
    return count / elapsed


def decode_only(backend, end: int) -> float:
    """records/s of the leader's log read + `decode_messages` (C) into confluent_kafka.Message
    objects, 1 MiB at a time: what each fetch costs the consumer's fetcher thread, without the
    request/response path."""
    from replication.records import decode_messages

    cluster = backend.cluster
    lg = cluster.partition_on(cluster.leader(TOPIC, 0), TOPIC, 0).log
    start = time.perf_counter()
    offset = lg.log_start_offset
    count = 0
    while offset < end:
        chunk = lg.read(offset, 1 << 20, end)
        messages, offset = decode_messages(chunk.buffer, TOPIC, 0, min_offset=offset, partial_tail=True)
        count += len(messages)
    return count / (time.perf_counter() - start)


def store_only(state_dir: str, records: list) -> float:
    """records/s of `RocksDBKeyValueStore.restore_batch` alone on 1,000-record lists, bulk
    loading included (the store part of the restore, without the consumer and the reader)."""
    store = RocksDBKeyValueStore(STORE)
    store.open(os.path.join(state_dir, "store-only"))
    chunks = [records[i:i + 1000] for i in range(0, len(records), 1000)]
    start = time.perf_counter()
    for chunk in chunks:
        store.restore_batch(chunk)
    store.end_bulk_loading()  # as the reader does at completion
    elapsed = time.perf_counter() - start
    store.close()
    return len(records) / elapsed


def baseline(path: str, records: list, options: Options | None) -> tuple[float, float]:
    """records/s of rocksdict ingestion with 1,000-record WriteBatches, WAL off, and the CPU
    seconds it took the ingesting thread."""
    if options is None:
        options = Options(raw_mode=True)
        options.create_if_missing(True)
    db = Rdict(path, options)
    wo = WriteOptions()
    wo.disable_wal = True
    cpu_start = time.thread_time()
    start = time.perf_counter()
    for i in range(0, len(records), BASELINE_BATCH):
        batch = WriteBatch(raw_mode=True)
        put = batch.put
        for k, v in records[i:i + BASELINE_BATCH]:
            put(k, v)
        db.write(batch, wo)
    elapsed = time.perf_counter() - start
    cpu = time.thread_time() - cpu_start
    db.close()
    Rdict.destroy(path)
    return len(records) / elapsed, cpu


def time_mode_switches(store_class) -> dict:
    """Wrap the store's bulk-loading switches (flush, close, reopen) to report their time."""
    totals = {}
    for what, name in (("start bulk loading", "_start_bulk_loading"), ("end bulk loading", "_end_bulk_loading")):
        original = getattr(store_class, name)
        totals[what] = entry = [0, 0.0]

        def timed(self, *args, _original=original, _entry=entry):
            start = time.perf_counter()
            try:
                return _original(self, *args)
            finally:
                _entry[0] += 1
                _entry[1] += time.perf_counter() - start
        setattr(store_class, name, timed)
    return totals


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
    parser.add_argument("--consumer-conf", default="{}",
                        help="JSON dict of extra restore consumer settings, e.g. '{\"queued.min.messages\": 5000}'")
    parser.add_argument("--no-gc", action="store_true", help="run the restore with the cyclic GC disabled")
    parser.add_argument("--bulk-write-buffer-mb", type=int, default=None,
                        help="override state.rocksdb_kv.BULK_LOAD_WRITE_BUFFER_SIZE (MiB)")
    parser.add_argument("--bulk-write-buffers", type=int, default=None,
                        help="override state.rocksdb_kv.BULK_LOAD_MAX_WRITE_BUFFERS")
    parser.add_argument("--bulk-background-jobs", type=int, default=None,
                        help="override state.rocksdb_kv.BULK_LOAD_MAX_BACKGROUND_JOBS")
    parser.add_argument("--repeat", type=int, default=1,
                        help="restore (and run baseline (a)) this many times on the same changelog; min/median/max")
    parser.add_argument("--no-bulk", action="store_true", help="restore without bulk loading mode")
    parser.add_argument("--timestamped", action="store_true",
                        help="restore a timestamped store (Kafka's changelog format, the record converter)")
    args = parser.parse_args()
    import state.rocksdb_kv as kv
    if args.bulk_write_buffer_mb is not None:
        kv.BULK_LOAD_WRITE_BUFFER_SIZE = args.bulk_write_buffer_mb * kv.MiB
    if args.bulk_write_buffers is not None:
        kv.BULK_LOAD_MAX_WRITE_BUFFERS = args.bulk_write_buffers
    if args.bulk_background_jobs is not None:
        kv.BULK_LOAD_MAX_BACKGROUND_JOBS = args.bulk_background_jobs
    if args.no_bulk:
        kv.BULK_LOAD_MIN_RECORDS = 1 << 62
    switches = time_mode_switches(kv.RocksDBKeyValueStore)
    consumer_conf = json.loads(args.consumer_conf)
    work_dir = tempfile.mkdtemp(prefix="eddy-bench-restore-")
    backend = for_config({"bootstrap.servers": f"local://{os.path.join(work_dir, 'cluster')}"})
    try:
        records = make_records(args.records, args.overwrites)
        distinct = len(dict(records))
        print(f"{len(records):,} changelog records ({KEY_SIZE}-byte keys, {VALUE_SIZE}-byte values, "
              f"{args.overwrites:.0%} overwrites -> {distinct:,} keys), 1 partition, RF=3"
              + (", a timestamped store (Kafka's changelog format)" if args.timestamped else ""))
        rate = produce(backend, records, args.timestamped)
        print(f"produce            {rate:12,.0f} records/s  (embedded Producer, acks=all, linger.ms=20)")
        # The benchmark's own million tuples must not be on the heap during the restore: the
        # cyclic GC would walk them on every collection the consumer's allocations trigger.
        del records
        gc.collect()

        profiler = cProfile.Profile() if args.profile else None
        if args.no_gc:
            gc.disable()
        if profiler is not None:
            profiler.enable()
        restore_rate, restored, manager, restore_cpu, process_cpu, by_thread = restore(backend, os.path.join(work_dir, "state"),
                                                               consumer_conf, args.timestamped)
        if profiler is not None:
            profiler.disable()
        gc.enable()
        restore_switches = {what: tuple(entry) for what, entry in switches.items()}
        consumer_rate = consume_only(backend, restored)
        decode_rate = decode_only(backend, restored)
        # deterministic: the same records, as the store holds them
        records = stored_records(make_records(args.records, args.overwrites), args.timestamped)
        latest = dict(records)
        store = manager.get_store(STORE)
        with store.all() as it:
            contents = dict(it)
        assert restored == len(records), (restored, len(records))
        assert contents == latest, "restored store differs from the changelog's latest values"
        close_state_manager(manager, dirty=False)

        fair, fair_cpu = baseline(os.path.join(work_dir, "baseline-store-options"), records, rocksdb_options())
        default, _ = baseline(os.path.join(work_dir, "baseline-default-options"), records, None)
        print(f"restore            {restore_rate:12,.0f} records/s  (StoreChangelogReader -> RocksDBKeyValueStore, "
              f"{restored:,} records)")
        print(f"rocksdict (store options)   {fair:12,.0f} records/s  (WriteBatch of {BASELINE_BATCH}, WAL off)")
        print(f"rocksdict (default options) {default:12,.0f} records/s  (WriteBatch of {BASELINE_BATCH}, WAL off)")
        store_rate = store_only(os.path.join(work_dir, "parts"), records)
        print(f"  consumer alone            {consumer_rate:12,.0f} records/s  (restore consumer, consume(1000), "
              "records dropped)")
        from replication import records as records_module
        from confluent_kafka import Message
        filled = getattr(records_module, "_layout_checked", {}).get(Message, False)
        print(f"  log read + decode alone   {decode_rate:12,.0f} records/s  (leader Log.read 1 MiB + "
              f"decode_messages, no client; Messages {'filled via their layout' if filled else 'constructed'})")
        print(f"  restore_batch alone       {store_rate:12,.0f} records/s  (RocksDBKeyValueStore.restore_batch, "
              "1,000-record lists)")
        for what, (count, seconds) in restore_switches.items():
            if count:
                print(f"  {what:26s}{seconds:12.3f} s   ({count}x, inside the restore's time)")
        print(f"ratio vs store options      {restore_rate / fair:12.3f}   (target >= 0.5)")
        if restore_cpu > 0:
            # CPU time hardly depends on what else the machine runs, unlike the rates above: the
            # restore's two GIL-sharing threads against the baseline's one.
            print(f"  by CPU time               {fair_cpu / restore_cpu:12.3f}   (restore {restore_cpu / restored * 1e6:.2f} "
                  f"us/record in the restore + fetcher threads, baseline (a) {fair_cpu / restored * 1e6:.2f})")
        print(f"  process CPU               {process_cpu / restored * 1e6:12.2f}   us/record during the restore, every "
              "thread (RocksDB's flushes, the brokers)")
        busiest = sorted(by_thread.items(), key=lambda item: -item[1])[:8]
        # (a thread that ended before the restore did is missing: RocksDB ends a flush thread
        # when its pool shrinks, which building a store's options does)
        print("    by thread: " + ", ".join(f"{name} {seconds / restored * 1e6:.2f}" for name, seconds in busiest
                                          if seconds > 0))
        print(f"ratio vs default options    {restore_rate / default:12.3f}")
        print(f"vs 160,000 records/s        {restore_rate / 160_000:12.2f}x  (target 5x)")

        if args.repeat > 1:
            rounds = [(restore_rate, fair)]
            for i in range(1, args.repeat):
                rate, count, manager, _, _, _ = restore(backend, os.path.join(work_dir, f"state-{i}"), consumer_conf,
                                                        args.timestamped)
                store = manager.get_store(STORE)
                with store.all() as it:
                    assert count == len(records) and dict(it) == latest, "restored store differs"
                close_state_manager(manager, dirty=False)
                base, _ = baseline(os.path.join(work_dir, f"baseline-{i}"), records, rocksdb_options())
                rounds.append((rate, base))
                print(f"round {i + 1}: restore {rate:,.0f} records/s, rocksdict (store options) {base:,.0f}, "
                      f"ratio {rate / base:.3f}")
            for name, values in (("restore", [r for r, _ in rounds]), ("rocksdict (store options)", [b for _, b in rounds]),
                                 ("ratio", [r / b for r, b in rounds])):
                values.sort()
                fmt = "{:,.3f}" if name == "ratio" else "{:,.0f}"
                print(f"{name:26s} min {fmt.format(values[0])}  median {fmt.format(statistics.median(values))}  "
                      f"max {fmt.format(values[-1])}  ({len(values)} rounds)")

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
