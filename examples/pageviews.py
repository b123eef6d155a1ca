"""Page views per user in hopping windows, and users per region: `python -m examples.pageviews`.

Runs on the embedded cluster by default (its data under the directory printed first, reset at
start), deterministic (a seeded generator), and checks what it computed against a plain Python
reference of Kafka's rules:

1. `pageviews` (key user, value page, event timestamps, some out of order, a few too late):
   views per user in 60 s windows advancing by 30 s with 10 s of grace, counted in a window
   store and suppressed until each window closes, so `pageviews-per-user-window` gets exactly
   one final count per user and window. Records later than window end + grace are dropped and
   counted in the `dropped-records-total` metric.
2. `user-regions` (key user, value region, users moving between regions): a table grouped by
   region and counted with an adder and a subtractor, so a user who moves leaves the old
   region's count; `users-per-region` is queryable (`app.store`).
3. Half-way the app is closed and its local state wiped: the second instance restores the
   window store, the suppression buffer and the tables from their changelogs and goes on, and
   still every window gives exactly one final count.
"""

from __future__ import annotations

import argparse
import collections
import logging
import os
import random
import shutil
import sys
import tempfile
import threading
import time
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, TopicPartition
from confluent_kafka.admin import NewTopic

from streams import (App, AppState, BufferConfig, StreamsBuilder, Suppressed, TimeWindows, serdes)
from streams.backends import for_config
from examples._common import embedded_bootstrap, fresh_data_dir

S, I64 = serdes.STRING, serdes.INT64
SIZE_MS, ADVANCE_MS, GRACE_MS = 60_000, 30_000, 10_000
REGIONS = ("eu", "us", "apac")
FLUSH_USER = "~flush"  # one view far ahead moves stream time past every window of the run


def build_topology() -> Any:
    builder = StreamsBuilder()
    (builder.stream("pageviews", key_serde=S, value_serde=S)
        .group_by_key()
        .windowed_by(TimeWindows.of_size_and_grace(SIZE_MS, GRACE_MS).advance_by(ADVANCE_MS))
        .count(store="views-per-user")
        .suppress(Suppressed.until_window_closes(BufferConfig.unbounded()).with_name("final-views"))
        .to_stream()
        .map(lambda windowed, count: (f"{windowed.key}@{windowed.window.start}", count))
        .to("pageviews-per-user-window", key_serde=S, value_serde=I64))
    (builder.table("user-regions", key_serde=S, value_serde=S, store="user-regions")
        .group_by(lambda user, region: (region, user), key_serde=S, value_serde=S)
        .count(store="users-per-region")
        .to_stream()
        .to("users-per-region", key_serde=S, value_serde=I64))
    return builder.build()


def generate_views(users: int, n: int, seed: int) -> list[tuple[str, str, int]]:
    """(user, page, timestamp): time moves forward ~1 s per view with jitter (out of order
    within the grace), plus a few views far behind (late: dropped)."""
    rng = random.Random(seed)
    views, now = [], 1_000_000
    for i in range(n):
        now += rng.randint(0, 2000)
        t = now - rng.randint(0, 8000) if rng.random() < 0.2 else now
        if i % 97 == 96:
            t = now - 120_000  # past window end + grace of every window holding it
        views.append((f"user{rng.randrange(users)}", f"/page/{rng.randrange(20)}", t))
    views.append((FLUSH_USER, "/", now + 10 * SIZE_MS))
    return views


def expected_windows(views: list[tuple[str, str, int]]) -> tuple[dict[str, int], int]:
    """Kafka's hopping-window count with grace and until_window_closes, in plain Python: the
    final count of every window closed by the end, and how many window updates were dropped."""
    counts: dict[tuple[str, int], int] = collections.Counter()
    stream_time, dropped = -1, 0
    for user, _, t in views:
        stream_time = max(stream_time, t)
        first = max(0, t - SIZE_MS + ADVANCE_MS) // ADVANCE_MS * ADVANCE_MS
        for start in range(first, t + 1, ADVANCE_MS):
            if start + SIZE_MS > t and start <= t:
                if start + SIZE_MS + GRACE_MS > stream_time:
                    counts[(user, start)] += 1
                else:
                    dropped += 1
    closed = {f"{u}@{s}": c for (u, s), c in counts.items() if s + SIZE_MS + GRACE_MS <= stream_time}
    return closed, dropped


def generate_moves(users: int, moves: int, seed: int) -> list[tuple[str, str]]:
    rng = random.Random(seed + 1)
    out = [(f"user{u}", rng.choice(REGIONS)) for u in range(users)]
    out += [(f"user{rng.randrange(users)}", rng.choice(REGIONS)) for _ in range(moves)]
    return out


def wait_until(predicate, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    pause = threading.Event()
    while not predicate():
        if time.monotonic() > deadline:
            raise SystemExit(f"pageviews: timed out after {timeout_s:.0f}s waiting for {what}")
        pause.wait(0.05)


def read_topic(backend: Any, topic: str, partitions: int, until, timeout_s: float) -> list:
    consumer = backend.consumer({"group.id": f"pageviews-reader-{time.monotonic_ns()}", "enable.auto.commit": False,
                                 "isolation.level": "read_committed"})
    try:
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
        got: list = []
        deadline = time.monotonic() + timeout_s
        while not until(got):
            if time.monotonic() > deadline:
                raise SystemExit(f"pageviews: timed out reading {topic} ({len(got)} records)")
            got.extend(m for m in consumer.consume(1000, 0.2) if m.error() is None)
        return got
    finally:
        consumer.close()


def produce(backend: Any, topic: str, records: list[tuple[str, str, int | None]]) -> None:
    producer = backend.producer({"client.id": f"pageviews-{topic}"})
    for key, value, ts in records:
        kwargs = {} if ts is None else {"timestamp": ts}
        while True:
            try:
                producer.produce(topic, key=key.encode(), value=value.encode(), **kwargs)
                break
            except BufferError:
                producer.poll(0.05)
    if producer.flush(60):
        raise SystemExit(f"pageviews: could not write {topic} within 60s")


def start_app(config: dict, timeout_s: float) -> App:
    app = App(build_topology(), config)
    app.start()
    if not app.wait_for_state(AppState.RUNNING, timeout=timeout_s):
        state = app.state.value
        app.close(timeout=60)
        raise SystemExit(f"pageviews: the app did not reach RUNNING ({state})")
    return app


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", default=os.path.join(tempfile.gettempdir(), "eddy-pageviews"))
    parser.add_argument("--users", type=int, default=20)
    parser.add_argument("--views", type=int, default=2000)
    parser.add_argument("--moves", type=int, default=60)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--timeout", type=float, default=90.0)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.ERROR, format="%(levelname)s %(name)s: %(message)s")

    data_dir = fresh_data_dir(args.data_dir)
    bootstrap = embedded_bootstrap(data_dir)
    print(f"pageviews on the embedded cluster, data directory: {data_dir}")
    views = generate_views(args.users, args.views, args.seed)
    windows, dropped = expected_windows(views)
    moves = generate_moves(args.users, args.moves, args.seed)
    regions = collections.Counter(dict(moves).values())

    # the restart falls on a view that is not late (a restarted processor's stream time starts
    # over from the first record it sees, as Kafka's)
    half = next(i for i in range(len(views) // 2, len(views)) if i % 97 != 96)
    first_windows, _ = expected_windows(views[:half])
    state_dir = os.path.join(data_dir, "state")
    config = {"application.id": "pageviews", "bootstrap.servers": bootstrap, "state.dir": state_dir,
              "replication.factor": 1, "commit.interval.ms": 200}

    backend = for_config({"bootstrap.servers": bootstrap})
    app = None
    dropped_metric = 0
    try:
        admin = backend.admin()
        topics = {"pageviews": 1, "user-regions": 2, "pageviews-per-user-window": 1, "users-per-region": 1}
        for future in admin.create_topics([NewTopic(t, n, 1) for t, n in topics.items()]).values():
            future.result()
        app = start_app(config, args.timeout)
        produce(backend, "user-regions", [(u, r, None) for u, r in moves])
        produce(backend, "pageviews", views[:half])
        read_topic(backend, "pageviews-per-user-window", 1, lambda got: len(got) >= len(first_windows), args.timeout)
        dropped_metric += sum(m.value for m in app.metrics() if m.name == "dropped-records-total")
        app.close(timeout=60)
        shutil.rmtree(os.path.join(state_dir, "pageviews"), ignore_errors=True)
        print(f"processed {half} views, {len(first_windows)} windows final; closed the app and wiped its state")
        app = start_app(config, args.timeout)
        produce(backend, "pageviews", views[half:])

        finals = read_topic(backend, "pageviews-per-user-window", 1, lambda got: len(got) >= len(windows),
                            args.timeout)
        got_windows = {m.key().decode(): I64.deserialize(m.value()) for m in finals}
        duplicates = len(finals) - len(got_windows)
        per_region = app.store("users-per-region")
        wait_until(lambda: all((per_region.get(r) or 0) == regions.get(r, 0) for r in REGIONS), args.timeout,
                   f"the region counts {regions}")
        got_regions = {r: per_region.get(r) or 0 for r in REGIONS}
        dropped_metric += sum(m.value for m in app.metrics() if m.name == "dropped-records-total")
    finally:
        if app is not None:
            app.close(timeout=60)
        backend.close()

    print(f"\n{len(views) - 1} page views of {args.users} users; {len(got_windows)} final window counts "
          f"(60 s windows every 30 s, 10 s grace), for example:")
    for key in sorted(got_windows, key=lambda k: (int(k.split("@")[1]), k))[:8]:
        print(f"  {key:<22} {got_windows[key]:>4} views")
    print(f"late window updates dropped: {dropped_metric} (dropped-records-total; expected {dropped})")
    print("users per region after the moves (queried from the store): "
          + ", ".join(f"{r}={n}" for r, n in sorted(got_regions.items())))
    ok = got_windows == windows and duplicates == 0 and dropped_metric == dropped
    print(f"\nfinal window counts match the reference: {'yes' if got_windows == windows else 'NO'}; "
          f"one result per window: {'yes' if duplicates == 0 else f'NO ({duplicates} repeated)'}; "
          f"dropped records match: {'yes' if dropped_metric == dropped else 'NO'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
