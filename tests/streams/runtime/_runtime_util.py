"""Helpers for the runtime tests (confluent-kafka's API only, so they run on every backend)."""

from __future__ import annotations

import collections
import random
import threading
import time
import uuid
from typing import Any, Callable

from confluent_kafka import OFFSET_BEGINNING, TopicPartition
from confluent_kafka.admin import NewTopic

from state.listener import StateRestoreListener
from streams import AppState, Processor, StreamsBuilder, StreamThreadExceptionResponse, Topology, serdes
from streams.backends import for_config

_pause = threading.Event()  # never set: waited on for short, bounded pauses


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def wait_for(predicate: Callable[[], Any], timeout: float, what: str, step: float = 0.05) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        _pause.wait(step)


def shutdown_on_error(app: Any) -> list:
    """Give `app` an uncaught exception handler that records each error and shuts the client
    down (SHUTDOWN_CLIENT); returns the list it records into."""
    seen: list = []

    def handler(exc: BaseException) -> StreamThreadExceptionResponse:
        seen.append(exc)
        return StreamThreadExceptionResponse.SHUTDOWN_CLIENT
    app.set_uncaught_exception_handler(handler)
    return seen


def running_with_tasks(*apps: Any) -> bool:
    """Every app RUNNING with at least one active task of its own."""
    return all(a.state is AppState.RUNNING for a in apps) and all(a.local_tasks()["active"] for a in apps)


def start_sharing(a: Any, b: Any) -> None:
    """Start `a`, then `b` once `a` runs, and wait until both run with tasks of their own."""
    a.start()
    assert a.wait_for_state(AppState.RUNNING, timeout=60)
    b.start()
    wait_for(lambda: running_with_tasks(a, b), 60, "a and b sharing the tasks")


def embedded_config(tmp_path: Any) -> dict:
    """Client settings of an embedded cluster under `tmp_path` (for tests of the embedded runtime only)."""
    return {"bootstrap.servers": f"local://{tmp_path}/cluster",
            "consumer.session.timeout.ms": 6000, "consumer.heartbeat.interval.ms": 500}


class RestoredCounts(StateRestoreListener):
    """Counts what the restores of an app restored: `batched` as batches are applied (restores
    in progress too), `ended` as restores end."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.batched = 0
        self.ended = 0

    def on_batch_restored(self, tp, store_name, batch_end_offset, num_restored):
        with self.lock:
            self.batched += num_restored

    def on_restore_end(self, tp, store_name, total_restored):
        with self.lock:
            self.ended += total_restored


class Cluster:
    """A backend plus helpers to make topics, write input and read output."""

    def __init__(self, backend_config: dict) -> None:
        self.config = dict(backend_config)
        self.backend = for_config({"bootstrap.servers": backend_config["bootstrap.servers"]})
        self.admin = self.backend.admin()
        self._producer = None

    def create_topics(self, partitions: int, *names: str, replication_factor: int = 1) -> None:
        futures = self.admin.create_topics([NewTopic(n, partitions, replication_factor) for n in names])
        for f in futures.values():
            f.result(30)
        wait_for(lambda: all(n in self.admin.list_topics(timeout=5).topics for n in names), 30, f"topics {names}")

    @property
    def producer(self):
        if self._producer is None:
            self._producer = self.backend.producer({"client.id": "test-input"})
        return self._producer

    def produce(self, topic: str, records: list[tuple[Any, Any]], *, partition: int | None = None,
                timestamps: list[int] | None = None, headers: list | None = None) -> None:
        """Write `records` (with `headers[i]` where given and not None) and wait for every one to
        be acknowledged; a rejected one fails."""
        p = self.producer
        failed: list = []

        def delivered(err, msg) -> None:
            if err is not None:
                failed.append(err)
        for i, (k, v) in enumerate(records):
            kwargs = {}
            if partition is not None:
                kwargs["partition"] = partition
            if timestamps is not None:
                kwargs["timestamp"] = timestamps[i]
            if headers is not None and headers[i] is not None:
                kwargs["headers"] = headers[i]
            p.produce(topic, value=v, key=k, on_delivery=delivered, **kwargs)
            if i % 2000 == 1999:
                p.poll(0)
        assert p.flush(30) == 0
        assert not failed, f"{len(failed)} records to {topic} not acknowledged: {failed[0]}"

    def committed_offset(self, group: str, topic: str, partition: int = 0) -> int:
        """The offset `group` committed for the partition (negative: none)."""
        c = self.backend.consumer({"group.id": group, "enable.auto.commit": False})
        try:
            return c.committed([TopicPartition(topic, partition)], timeout=10)[0].offset
        finally:
            c.close()

    def read_all(self, topic: str, partitions: int, *, until: Callable[[list], bool], timeout: float = 60,
                 read_committed: bool = True) -> list:
        """Read `topic` from the beginning until `until(messages)` holds (or fail)."""
        c = self.backend.consumer({"group.id": unique("reader"), "enable.auto.commit": False,
                                   "isolation.level": "read_committed" if read_committed else "read_uncommitted"})
        try:
            c.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
            got: list = []
            deadline = time.monotonic() + timeout
            while not until(got):
                if time.monotonic() > deadline:
                    raise AssertionError(f"timed out reading {topic}: {len(got)} records")
                for m in c.consume(2000, 0.2):
                    if m.error() is None:
                        got.append(m)
            return got
        finally:
            c.close()

    def close(self) -> None:
        if self._producer is not None:
            self._producer.flush(10)
        self.backend.close()


class Exploding(Processor):
    """Passes records through, and fails on the value "boom"."""

    def init(self, context):
        self.context = context

    def process(self, record):
        if record.value == "boom":
            raise ValueError("bad record")
        self.context.forward(record)


def pass_through_topology(src: str, sink: str, processor: type) -> Topology:
    """source `src` -> `processor` -> sink `sink`, string keys and values."""
    topo = Topology()
    topo.add_source("s", src, key_serde=serdes.STRING, value_serde=serdes.STRING)
    topo.add_processor("p", processor, "s")
    topo.add_sink("k", sink, "p", key_serde=serdes.STRING, value_serde=serdes.STRING)
    return topo


def two_input_topology(a: str, b: str, sink: str) -> Topology:
    """sources `a` and `b` -> Exploding -> sink `sink`, string keys and values: one task reading
    two topics (it idles for max.task.idle.ms while one of them is empty)."""
    topo = Topology()
    topo.add_source("a", a, key_serde=serdes.STRING, value_serde=serdes.STRING)
    topo.add_source("b", b, key_serde=serdes.STRING, value_serde=serdes.STRING)
    topo.add_processor("p", Exploding, "a", "b")
    topo.add_sink("k", sink, "p", key_serde=serdes.STRING, value_serde=serdes.STRING)
    return topo


def wordcount_topology(lines: str, out: str, store: str = "counts"):
    b = StreamsBuilder()
    (b.stream(lines, key_serde=serdes.STRING, value_serde=serdes.STRING)
        .flat_map_values(str.split)
        .group_by(lambda key, word: word, key_serde=serdes.STRING, value_serde=serdes.STRING)
        .count(store=store)
        .to_stream()
        .to(out, key_serde=serdes.STRING, value_serde=serdes.INT64))
    return b.build()


def make_lines(n: int, seed: int, vocabulary: int = 50) -> tuple[list[tuple[bytes, bytes]], collections.Counter]:
    rng = random.Random(seed)
    words = [f"w{i}" for i in range(vocabulary)]
    records, expected = [], collections.Counter()
    for i in range(n):
        line = [rng.choice(words) for _ in range(rng.randint(1, 6))]
        expected.update(line)
        records.append((str(i).encode(), " ".join(line).encode()))
    return records, expected


def last_counts(messages: list) -> dict:
    out = {}
    for m in messages:
        out[m.key().decode()] = serdes.INT64.deserialize(m.value())
    return out


def count_sequences(messages: list) -> dict[str, list[int]]:
    seqs = collections.defaultdict(list)
    for m in messages:
        seqs[m.key().decode()].append(serdes.INT64.deserialize(m.value()))
    return seqs
