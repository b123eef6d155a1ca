"""A real App with stores of every serde and kind, fed by a producer the tests control."""

from __future__ import annotations

import collections
import os
import sys
import threading
import time
import uuid

from state.stores import Stores
from streams import App, AppState, Processor, Topology, serdes

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "streams", "runtime"))
from _runtime_util import Cluster, wait_for  # noqa: E402

WINDOW_MS = 1000
PARTITIONS = 2

# store -> (kind, key serde, value serde, persistent)
STORES = {
    "kv_str": ("key_value", serdes.STRING, serdes.STRING, True),
    "kv_i32_dbl": ("key_value", serdes.INT32, serdes.DOUBLE, True),
    "kv_i64_flt": ("key_value", serdes.INT64, serdes.FLOAT, True),
    "kv_json": ("key_value", serdes.BYTES, serdes.JSON, True),
    "mem_count": ("key_value", serdes.STRING, serdes.INT64, False),
    "win": ("window", serdes.STRING, serdes.INT64, True),
    "mem_win": ("window", serdes.STRING, serdes.INT64, False),
    "sess": ("session", serdes.STRING, serdes.STRING, True),
}


def word_index(word: str) -> int:
    return int(word[5:])


def expected_from(records: list[tuple[str, int, int]]) -> dict[str, dict]:
    """What each store holds after `(word, n, timestamp)` records, as the tests read it back."""
    out: dict[str, dict] = {name: {} for name in STORES}
    counts: collections.Counter = collections.Counter()
    for word, n, ts in records:
        counts[word] += 1
        c = counts[word]
        out["kv_str"][word] = f"{word}:{n}"
        out["kv_i32_dbl"][word_index(word)] = n / 4
        out["kv_i64_flt"][-word_index(word) * 10_000_000_000] = float(n % 8) / 2
        out["kv_json"][word.encode()] = {"word": word, "n": n, "tags": [word[:1], "x"]}
        out["mem_count"][word] = c
        start = ts // WINDOW_MS * WINDOW_MS
        for w in ("win", "mem_win"):
            out[w][(word, start, start + WINDOW_MS)] = out[w].get((word, start, start + WINDOW_MS), 0) + n
        out["sess"][(word, ts, ts)] = str(n)
    return out


class AllStores(Processor):
    def init(self, context):
        self.context = context
        self.s = {name: context.get_state_store(name) for name in STORES}

    def process(self, record):
        word, n, ts = record.key, record.value, record.timestamp
        s = self.s
        s["kv_str"].put(word, f"{word}:{n}")
        s["kv_i32_dbl"].put(word_index(word), n / 4)
        s["kv_i64_flt"].put(-word_index(word) * 10_000_000_000, float(n % 8) / 2)
        s["kv_json"].put(word.encode(), {"word": word, "n": n, "tags": [word[:1], "x"]})
        s["mem_count"].put(word, (s["mem_count"].get(word) or 0) + 1)
        start = ts // WINDOW_MS * WINDOW_MS
        for w in ("win", "mem_win"):
            old = next(iter(s[w].fetch(word, start, start)), None)
            s[w].put(word, (old[1] if old else 0) + n, start)
        s["sess"].put(word, ts, ts, str(n))


def topology(source: str) -> Topology:
    t = Topology()
    t.add_source("src", source, key_serde=serdes.STRING, value_serde=serdes.INT64)
    t.add_processor("all", AllStores, "src")
    for name, (kind, ks, vs, persistent) in STORES.items():
        if kind == "key_value":
            supplier = (Stores.persistent_key_value_store if persistent else Stores.in_memory_key_value_store)(name)
            builder = Stores.key_value_store_builder(supplier, ks, vs)
        elif kind == "window":
            supplier = (Stores.persistent_window_store if persistent else Stores.in_memory_window_store)(
                name, 10_000_000, WINDOW_MS)
            builder = Stores.window_store_builder(supplier, ks, vs)
        else:
            builder = Stores.session_store_builder(Stores.persistent_session_store(name, 10_000_000), ks, vs)
        t.add_state_store(builder, "all")
    return t


def make_records(n: int, seed: int, start_ts: int = 1_700_000_000_000) -> list[tuple[str, int, int]]:
    import random

    rng = random.Random(seed)
    words = [f"{chr(97 + i % 26)}word{i}" for i in range(40)]
    return [(rng.choice(words), rng.randint(0, 1000), start_ts + i * 37) for i in range(n)]


class RunningApp:
    """An App on the embedded cluster in `directory`, with its input topic."""

    def __init__(self, directory: str, extra_config: dict | None = None) -> None:
        self.servers = f"local://{directory}/cluster"
        self.cluster = Cluster({"bootstrap.servers": self.servers})
        self.source = "words"
        self.application_id = f"sparkapp-{uuid.uuid4().hex[:6]}"
        self.cluster.create_topics(PARTITIONS, self.source)
        self.app = App(topology(self.source), {
            "bootstrap.servers": self.servers, "application.id": self.application_id,
            "state.dir": f"{directory}/state", "commit.interval.ms": 200, **(extra_config or {})})
        self.sent: list = []
        self.lock = threading.RLock()

    def start(self) -> "RunningApp":
        self.app.start()
        assert self.app.wait_for_state(AppState.RUNNING, timeout=90)
        return self

    def produce(self, records: list[tuple[str, int, int]]) -> None:
        with self.lock:
            self.cluster.produce(self.source, [(w.encode(), serdes.INT64.serialize(n)) for w, n, _ in records],
                                 timestamps=[ts for _, _, ts in records])
            self.sent += records

    def wait_processed(self, timeout: float = 90) -> None:
        """Until the store kv_str holds the last value of every word sent."""
        view = self.app.store("kv_str")
        want = expected_from(self.sent)["kv_str"]
        wait_for(lambda: all(view.get(k) == v for k, v in want.items()), timeout, "the app to process the input")

    def changelog(self, store: str) -> str:
        return f"{self.application_id}-{store}-changelog"

    def close(self) -> None:
        try:
            self.app.close(timeout=60)
        finally:
            self.cluster.close()


def wait_until(predicate, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        threading.Event().wait(0.05)
