"""Micro-benchmark of the KV store hot path: get+put pairs (the count processor's pattern) through
typed -> caching -> change logging -> RocksDB (or in-memory with --memory), with a store flush
(cache write-down + RocksDB flush, as on commit) every --flush-every ops and a flush listener.

    python bench/kv_hot_path.py [--ops 1000000] [--words 5000] [--cache-bytes 0] [--memory] [--profile]

Keys follow a Zipf-like distribution over --words distinct words (seeded). Reports wall time and
the calling thread's CPU time (steadier on a shared machine). Not a test: only the final counts
are checked.
"""
import argparse, os, pathlib, random, shutil, struct, sys, tempfile, time

sys.path.insert(0, os.environ.get("EDDY_ROOT", os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
from state.stores import Stores
from state.cache import ThreadCache
from state.task_id import TaskId


class StrSerde:
    @staticmethod
    def serialize(o):
        return None if o is None else o.encode()
    @staticmethod
    def deserialize(d):
        return None if d is None else d.decode()


_pack = struct.Struct(">q").pack
_unpack = struct.Struct(">q").unpack
class LongSerde:
    @staticmethod
    def serialize(o):
        return None if o is None else _pack(o)
    @staticmethod
    def deserialize(d):
        return None if d is None else _unpack(d)[0]


class Ctx:
    def __init__(self, task_dir, config):
        self.application_id = "bench"
        self.task_id = TaskId(0, 0)
        self.task_dir = task_dir
        self.config = config
        self.sent = 0
    def store_dir(self, name):
        return self.task_dir / "rocksdb" / name
    def register(self, store, cb, *, logged):
        pass
    def log_change(self, store_name, key, value, timestamp, headers=None):
        self.sent += 1


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ops", type=int, default=1_000_000)
    ap.add_argument("--words", type=int, default=5000)
    ap.add_argument("--flush-every", type=int, default=10_000)
    ap.add_argument("--cache-bytes", type=int, default=10 * 1024 * 1024)
    ap.add_argument("--memory", action="store_true")
    ap.add_argument("--no-logging", action="store_true")
    ap.add_argument("--profile", action="store_true")
    a = ap.parse_args()
    rnd = random.Random(42)
    words = [f"w{i:05d}{'x' * (i % 7)}" for i in range(a.words)]
    # Zipf-ish distribution (natural-language word frequencies)
    weights = [1.0 / (i + 1) for i in range(a.words)]
    keys = rnd.choices(words, weights, k=a.ops)
    tmp = pathlib.Path(tempfile.mkdtemp(prefix="kvb"))
    try:
        sup = Stores.in_memory_key_value_store("counts") if a.memory else Stores.persistent_key_value_store("counts")
        b = Stores.key_value_store_builder(sup, StrSerde(), LongSerde()).with_caching_enabled()
        b = b.with_logging_disabled() if a.no_logging else b.with_logging_enabled()
        b.with_cache(ThreadCache(a.cache_bytes))
        store = b.build()
        ctx = Ctx(tmp / "0_0", {"statestore.cache.max.bytes": a.cache_bytes})
        store.init(ctx)
        forwarded = [0]
        def listener(k, new, old, ts):
            forwarded[0] += 1
        store.set_flush_listener(listener)
        get, put, flush = store.get, store.put, store.flush
        fe = a.flush_every
        def run():
            ts = 0
            for i, k in enumerate(keys):
                old = get(k)
                put(k, 1 if old is None else old + 1, ts)
                ts += 1
                if i % fe == fe - 1:
                    flush()
            flush()
        t0 = time.perf_counter(); c0 = time.thread_time()
        if a.profile:
            import cProfile, pstats
            pr = cProfile.Profile(); pr.enable(); run(); pr.disable()
            pstats.Stats(pr).sort_stats("tottime").print_stats(18)
        else:
            run()
        dt = time.perf_counter() - t0; ct = time.thread_time() - c0
        total = sum(store.get(w) or 0 for w in words)
        assert total == a.ops, (total, a.ops)
        print(f"{a.ops} pairs: wall {dt:.3f}s = {a.ops/dt:,.0f}/s, thread cpu {ct:.3f}s = {a.ops/ct:,.0f}/s; forwarded={forwarded[0]} logged={ctx.sent}")
        store.close()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
