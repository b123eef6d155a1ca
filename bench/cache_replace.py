"""Micro-benchmark of the thread cache on the table source's pattern: what one
CachingKeyValueStore.replace (the source table's read of the old value and write of the new)
costs when the keys do not fit the cache, against a bare OrderedDict LRU doing the same reads
and writes, measured in the same run.

    python bench/cache_replace.py [--users 250000] [--rounds 4] [--cache-bytes 10485760] [--rocksdb]

The keys are bench/windowed.py's default table design: every user once per round, each round in
its own random order, so nearly every read misses and nearly every write evicts (the cache holds
about half the users). The store under the cache is in memory (or RocksDB with --rocksdb), with
no changelog, and its flush listener does nothing: what is left is the cache's own work (lookup,
the clean entry a miss reads in, the dirty write, evictions, and the write-down of the dirty
entries an eviction flushes) plus the store's reads and writes.

The baseline is the floor of that bookkeeping in Python: an OrderedDict holding as many entries,
a miss read from a dict, each write moved to the newest end, the eldest popped once it is full.
The ratio (cache / baseline) is what the cache's data structures and accounting cost over it.
Not a test: nothing is asserted but the final contents.
"""

from __future__ import annotations

import argparse
import collections
import os
import pathlib
import random
import shutil
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from state.cache import ThreadCache  # noqa: E402
from state.stores import Stores  # noqa: E402
from state.task_id import TaskId  # noqa: E402
from state.typed import find_caching_layer  # noqa: E402

VALUE = b"\0\0\0\0\0\0\0\x01g001"  # a timestamped group, as the source table stores it


class _Bytes:
    serialize = staticmethod(lambda data: data)
    deserialize = staticmethod(lambda data: data)


class _Context:
    """What a store's init reads of its processor context."""

    application_id = "bench"
    task_id = TaskId(0, 0)

    def __init__(self, task_dir: pathlib.Path) -> None:
        self.task_dir = task_dir
        self.config: dict = {}

    def store_dir(self, name: str) -> pathlib.Path:
        return self.task_dir / "rocksdb" / name

    def register(self, store, callback, *, logged) -> None:
        pass


def make_keys(users: int, rounds: int, seed: int = 1) -> list[bytes]:
    rng = random.Random(seed)
    keys = [f"u{i:06d}".encode() for i in range(users)]
    order: list[bytes] = []
    for _ in range(rounds):
        shuffled = keys[:]
        rng.shuffle(shuffled)
        order += shuffled
    return order


def run_cache(keys: list[bytes], cache_bytes: int, rocksdb: bool, tmp: pathlib.Path) -> tuple[float, int]:
    """Thread CPU seconds of one replace per key, and how many entries the cache held at the end."""
    supplier = (Stores.persistent_key_value_store("users") if rocksdb
                else Stores.in_memory_key_value_store("users"))
    cache = ThreadCache(cache_bytes)
    builder = Stores.key_value_store_builder(supplier, _Bytes(), _Bytes()).with_caching_enabled()
    builder.with_logging_disabled().with_cache(cache)
    store = builder.build()
    store.init(_Context(tmp / "0_0"))
    store.set_flush_listener(lambda key, new, old, timestamp: None)
    replace = find_caching_layer(store).replace
    start = time.thread_time()
    for timestamp, key in enumerate(keys):
        replace(key, VALUE, timestamp)
    seconds = time.thread_time() - start
    held = len(cache)  # entries held: the one store's
    store.flush()
    assert all(store.get(key) == VALUE for key in keys[:1000]), "a write was lost"
    store.close()
    return seconds, held


def run_baseline(keys: list[bytes], capacity: int) -> float:
    """Thread CPU seconds of the bare LRU doing the same reads and writes."""
    lru: collections.OrderedDict = collections.OrderedDict()
    below: dict = {}
    start = time.thread_time()
    for key in keys:
        old = lru.get(key)
        if old is None:
            old = below.get(key)
        lru[key] = VALUE
        lru.move_to_end(key)
        if len(lru) > capacity:
            eldest, value = lru.popitem(last=False)
            below[eldest] = value
    return time.thread_time() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--users", type=int, default=250_000)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--cache-bytes", type=int, default=10 * 1024 * 1024)
    parser.add_argument("--rocksdb", action="store_true", help="RocksDB under the cache (default: in memory)")
    args = parser.parse_args()
    keys = make_keys(args.users, args.rounds)
    tmp = pathlib.Path(tempfile.mkdtemp(prefix="cache-replace-"))
    try:
        cache_s, held = run_cache(keys, args.cache_bytes, args.rocksdb, tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    base_s = run_baseline(keys, held)
    n = len(keys)
    print(f"{n:,} replaces over {args.users:,} users ({'RocksDB' if args.rocksdb else 'in memory'} below), "
          f"the cache holding {held:,} entries")
    print(f"  thread cache  : {cache_s:6.2f} s  {cache_s / n * 1e6:6.2f} us a replace")
    print(f"  bare LRU      : {base_s:6.2f} s  {base_s / n * 1e6:6.2f} us a replace")
    print(f"  ratio (cache / bare LRU): {cache_s / base_s:.2f}")


if __name__ == "__main__":
    main()
