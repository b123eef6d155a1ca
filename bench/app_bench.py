"""What the runtime benchmarks share: input topics on a cluster, an app run timed from RUNNING
until a condition holds (the app's final commit included), and the stream thread's CPU time or
its profile.

Used by bench/wordcount.py and bench/windowed.py; not a benchmark itself.
"""

from __future__ import annotations

import cProfile
import gc
import os
import pstats
import threading
import time
from typing import Any, Callable, Iterable, Optional

from confluent_kafka import TopicPartition
from confluent_kafka.admin import NewTopic

from streams import App, AppState
from streams.backends import for_config

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# CPU seconds of the last run: the stream thread's own (from its start) and the whole process's
# from RUNNING (broker, producer sender and fetchers share the GIL with the stream thread); with
# "steal", the share of the host's CPU time its hypervisor took during the run.
THREAD_CPU: dict[str, float] = {}


def host_cpu_times() -> Optional[tuple[int, int]]:
    """(steal, total) jiffies of all CPUs from /proc/stat, or None where there is none. On a
    virtual machine, steal is time a vCPU was ready but the hypervisor ran something else: it
    stretches wall clock without showing in any CPU time, so it tells which runs' wall-clock
    rates to distrust."""
    try:
        with open("/proc/stat") as f:
            fields = f.readline().split()
    except OSError:
        return None
    if len(fields) < 9 or fields[0] != "cpu":
        return None
    times = [int(x) for x in fields[1:9]]  # user nice system idle iowait irq softirq steal
    return times[7], sum(times)


def create_topics(bootstrap: str, topics: dict[str, int], replication_factor: int) -> None:
    """Create `topics` (name -> partitions) and wait for them."""
    backend = for_config({"bootstrap.servers": bootstrap})
    try:
        admin = backend.admin()  # held until the futures are done: confluent-kafka's fails them when destroyed
        futures = admin.create_topics([NewTopic(t, n, replication_factor) for t, n in topics.items()])
        for future in futures.values():
            future.result(30)
    finally:
        backend.close()


def produce(bootstrap: str, topic: str, records: Iterable[tuple], on_sent: Optional[Callable[[int], None]] = None,
            ) -> None:
    """Write `records` ((key, value) or (key, value, timestamp), bytes) to `topic`; `on_sent(n)`
    is called every 10,000 records (a progress bar)."""
    backend = for_config({"bootstrap.servers": bootstrap})
    try:
        producer = backend.producer({"client.id": "bench-input", "linger.ms": 50})
        produce_one = producer.produce
        sent = 0
        for record in records:
            kwargs = {} if len(record) < 3 else {"timestamp": record[2]}
            while True:
                try:
                    produce_one(topic, key=record[0], value=record[1], **kwargs)
                    break
                except BufferError:
                    producer.poll(0.05)
            sent += 1
            if on_sent is not None and sent % 10_000 == 0:
                on_sent(10_000)
        if producer.flush(120):
            raise SystemExit(f"could not write {topic} within 120s")
        if on_sent is not None and sent % 10_000:
            on_sent(sent % 10_000)
    finally:
        backend.close()


def records_in(consumer: Any, topic: str, partitions: int) -> int:
    """How many records `topic` holds, read by `consumer`: the sum of its partitions' end
    offsets (for a new topic without transactions, from which nothing was deleted)."""
    return sum(consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=30)[1] for p in range(partitions))


def run_app(topology: Any, config: dict, done: Callable[[App], bool],
            on_progress: Optional[Callable[[App], None]] = None, *, time_close: bool = True,
            deadline_s: Optional[float] = None) -> float:
    """Run `topology` until `done(app)` holds, then close the app; the seconds from RUNNING to
    closed (its final commit is part of the work), or only to `done` without `time_close`.
    `on_progress(app)` is called while waiting; past `deadline_s` (None: no deadline), or when a
    stream thread died or the app stopped, the run fails."""
    app = App(topology, config)
    pause = threading.Event()
    app.start()
    try:
        if not app.wait_for_state(AppState.RUNNING, timeout=120):
            raise SystemExit(f"app not RUNNING: {app.state}")
        t0 = time.perf_counter()
        cpu0 = time.process_time()
        host0 = host_cpu_times()
        deadline = None if deadline_s is None else time.monotonic() + deadline_s
        while not done(app):
            if not all(thread.is_alive() for thread in app.threads):
                raise SystemExit("a stream thread died")
            if app.state in (AppState.ERROR, AppState.PENDING_ERROR, AppState.NOT_RUNNING):
                raise SystemExit(f"the app stopped: {app.state}")
            if deadline is not None and time.monotonic() > deadline:
                raise SystemExit(f"the run did not finish in {deadline_s:.0f}s")
            if on_progress is not None:
                on_progress(app)
            pause.wait(0.01)
        elapsed = time.perf_counter() - t0
    finally:
        app.close(timeout=120)
    if time_close:
        elapsed = time.perf_counter() - t0
    THREAD_CPU["process"] = time.process_time() - cpu0
    host1 = host_cpu_times()
    THREAD_CPU.pop("steal", None)
    if host0 is not None and host1 is not None and host1[1] > host0[1]:
        THREAD_CPU["steal"] = (host1[0] - host0[0]) / (host1[1] - host0[1])
    return elapsed


def processed_at_least(target: int) -> Callable[[App], bool]:
    """`done` for `run_app`: the stream threads processed `target` records (input and repartitioned)."""
    def done(app: App) -> bool:
        return sum(thread.processed_total for thread in app.threads) >= target
    return done


def record_thread_cpu(gc_seconds: bool = os.environ.get("BENCH_GC_SECONDS") == "1") -> None:
    """From now on, a stream thread records its CPU seconds in THREAD_CPU["stream"] when it ends,
    and the process's cyclic collections during its run in THREAD_CPU["gc_collections"] (a
    count per generation, read from gc.get_stats: nothing runs per collection). With
    `gc_seconds` (BENCH_GC_SECONDS=1) it also times the thread's own collections into
    THREAD_CPU["stream_gc"] through gc.callbacks: a Python call at each start and stop of every
    collection, which costs a run that allocates much (the table's: ~2% of its thread) time of
    its own, so it is off unless asked for."""
    import streams.runtime.thread as thread_mod
    original = getattr(thread_mod.StreamThread.run, "__wrapped_run__", thread_mod.StreamThread.run)

    def timed_run(self):
        me = threading.get_ident()
        gc_time = [0.0, 0.0]  # total, start of the current collection
        collections_before = [g["collections"] for g in gc.get_stats()]

        def on_gc(phase: str, _info: dict) -> None:
            if threading.get_ident() == me:
                if phase == "start":
                    gc_time[1] = time.thread_time()
                else:
                    gc_time[0] += time.thread_time() - gc_time[1]
        if gc_seconds:
            gc.callbacks.append(on_gc)
        try:
            original(self)
        finally:
            if gc_seconds:
                gc.callbacks.remove(on_gc)
                THREAD_CPU["stream_gc"] = gc_time[0]
            else:
                THREAD_CPU.pop("stream_gc", None)
            THREAD_CPU["stream"] = time.thread_time()
            THREAD_CPU["gc_collections"] = tuple(g["collections"] - before for g, before
                                                 in zip(gc.get_stats(), collections_before))
    timed_run.__wrapped_run__ = original  # type: ignore[attr-defined]
    thread_mod.StreamThread.run = timed_run


def profile_stream_thread(top: int = int(os.environ.get("BENCH_TOP", "25"))) -> None:
    """From now on, a stream thread runs under cProfile and prints its top functions (by own
    time; the environment variable BENCH_SORT picks another pstats order, e.g. cumulative,
    BENCH_TOP how many) and its own time per file when it ends."""
    import streams.runtime.thread as thread_mod
    original = getattr(thread_mod.StreamThread.run, "__wrapped_run__", thread_mod.StreamThread.run)

    def profiled_run(self):
        prof = cProfile.Profile()
        prof.enable()
        try:
            original(self)
        finally:
            prof.disable()
            stats = pstats.Stats(prof)
            stats.sort_stats(os.environ.get("BENCH_SORT", "tottime")).print_stats(top)
            by_file: dict[str, float] = {}
            for (filename, _, _), (_, _, tottime, _, _) in stats.stats.items():
                key = os.path.relpath(filename, ROOT) if filename.startswith(ROOT) else "(builtins/C)"
                by_file[key] = by_file.get(key, 0.0) + tottime
            total = sum(by_file.values()) or 1.0
            print("own time by file (stream thread):")
            for key, t in sorted(by_file.items(), key=lambda kv: -kv[1])[:15]:
                print(f"  {t / total * 100:5.1f}%  {key}")
    profiled_run.__wrapped_run__ = original  # type: ignore[attr-defined]
    thread_mod.StreamThread.run = profiled_run


def cpu_line() -> str:
    """The CPU seconds of the last run, for printing under its rate."""
    if "stream" not in THREAD_CPU:
        return ""
    steal = THREAD_CPU.get("steal")
    collections = THREAD_CPU.get("gc_collections")
    gc_part = ("" if collections is None else "; cyclic GC collections (process) " + "/".join(f"{c:,}" for c in collections))
    if "stream_gc" in THREAD_CPU:
        gc_part += f", the thread's {THREAD_CPU['stream_gc']:.2f}s"
    return (f"  cpu: stream thread {THREAD_CPU['stream']:.2f}s, process {THREAD_CPU['process']:.2f}s{gc_part}"
            + ("" if steal is None else f"; host steal {steal:.1%}"))
