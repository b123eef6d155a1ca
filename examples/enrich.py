"""Joins: clicks enriched from user profiles, and orders matched with payments:
`python -m examples.enrich`.

Runs on the embedded cluster by default (its data under the directory printed first, reset at
start), deterministic (a seeded generator), and checks what it joined against a plain Python
reference of Kafka's rules:

1. `clicks` (key user, value page) left-joined with the `profiles` table (key user, value
   "name|tier", updated and deleted along the way): a stream-table join, so only clicks produce
   output, each with the profile the user had at the click's time (`enriched-clicks`). The two
   topics are co-partitioned (same key, same partition count), as the join requires.
2. The same clicks joined with a global table of page titles (`pages`), by the click's page
   (a key selector), not its key: no co-partitioning needed, every instance reads all pages
   (`clicks-with-titles`).
3. `orders` (key order id, value "customer|amount") joined with `payments` (key order id,
   value method) paid within 10 minutes of the order, before or after it: a stream-stream join
   over two window stores (`paid-orders`).

Everything is written before the app starts, with event timestamps, so the app processes the
inputs of each task in timestamp order (max.task.idle.ms, KIP-695) as the reference does.
"""

from __future__ import annotations

import argparse
import collections
import logging
import os
import random
import sys
import tempfile
import time
from datetime import timedelta
from typing import Any, Optional

from confluent_kafka import OFFSET_BEGINNING, TopicPartition
from confluent_kafka.admin import NewTopic

from streams import App, AppState, JoinWindows, StreamsBuilder, serdes
from streams.backends import for_config
from examples._common import embedded_bootstrap, fresh_data_dir

S = serdes.STRING
PAYMENT_WINDOW = timedelta(minutes=10)
WINDOW_MS = int(PAYMENT_WINDOW.total_seconds() * 1000)
TIERS = ("free", "pro", "team")
START_MS = 1_700_000_000_000
TOPICS = {"clicks": 2, "profiles": 2, "pages": 1, "orders": 2, "payments": 2,
          "enriched-clicks": 2, "clicks-with-titles": 2, "paid-orders": 2}


def describe_click(page: str, profile: Optional[str]) -> str:
    """The stream-table joiner: a click and the user's profile (None: no profile)."""
    if profile is None:
        return f"{page} by an unknown user"
    name, tier = profile.split("|")
    return f"{page} by {name} ({tier})"


def title_click(page: str, title: str) -> str:
    return f"{page}: {title}"


def pay(order: str, method: str) -> str:
    customer, amount = order.split("|")
    return f"{customer} paid {amount} by {method}"


def build_topology() -> Any:
    builder = StreamsBuilder()
    clicks = builder.stream("clicks", key_serde=S, value_serde=S)
    profiles = builder.table("profiles", key_serde=S, value_serde=S, store="profiles")
    clicks.left_join(profiles, describe_click).to("enriched-clicks", key_serde=S, value_serde=S)
    # the global table join: KStream.join(GlobalKTable, key_selector, joiner)
    pages = builder.global_table("pages", key_serde=S, value_serde=S, store="pages")
    clicks.join(pages, lambda user, page: page, title_click).to("clicks-with-titles", key_serde=S, value_serde=S)
    orders = builder.stream("orders", key_serde=S, value_serde=S)
    payments = builder.stream("payments", key_serde=S, value_serde=S)
    # named stores (Kafka's StreamJoined.withStoreName): a name the topology keeps across changes
    (orders.join(payments, pay, JoinWindows.of_time_difference_with_no_grace(PAYMENT_WINDOW), store="order-payments")
        .to("paid-orders", key_serde=S, value_serde=S))
    return builder.build()


# ------------------------------------------------------------------------------------ input
def generate_clicks(users: int, n: int, seed: int) -> tuple[list, list]:
    """(profiles, clicks) as (key, value or None, timestamp): every user but the last gets a
    profile; profiles change tier and a few are deleted while clicks flow; timestamps distinct."""
    rng = random.Random(seed)
    profiles, clicks = [], []
    t = START_MS
    for u in range(users - 1):
        t += 1
        profiles.append((f"user{u}", f"name{u}|{rng.choice(TIERS)}", t))
    for i in range(n):
        t += rng.randint(1, 500)
        if i % 25 == 24:
            u = rng.randrange(users - 1)
            value = None if rng.random() < 0.3 else f"name{u}|{rng.choice(TIERS)}"
            profiles.append((f"user{u}", value, t))
            t += 1
        clicks.append((f"user{rng.randrange(users)}", f"/page/{rng.randrange(12)}", t))
    return profiles, clicks


def generate_pages(seed: int) -> list:
    rng = random.Random(seed + 1)
    return [(f"/page/{p}", f"title {rng.randrange(1000)}", START_MS) for p in range(10)]  # 10, 11: none


def generate_orders(n: int, seed: int) -> tuple[list, list]:
    """(orders, payments): an order every 0-60 s; most are paid 0-15 minutes after (those after 10
    minutes do not join), a few up to 2 minutes before the order was recorded, some never."""
    rng = random.Random(seed + 2)
    orders, payments = [], []
    t = START_MS
    for i in range(n):
        t += rng.randint(1, 60_000)
        orders.append((f"order{i}", f"customer{rng.randrange(20)}|{rng.randint(1, 500)}.00", t))
        r = rng.random()
        if r < 0.8:
            payments.append((f"order{i}", rng.choice(("card", "paypal", "transfer")), t + rng.randint(1, 15 * 60_000)))
        elif r < 0.9:
            payments.append((f"order{i}", "card", t - rng.randint(1, 2 * 60_000)))
    payments.sort(key=lambda rec: rec[2])
    return orders, payments


# -------------------------------------------------------------------------------- reference
def expected_enriched(profiles: list, clicks: list) -> dict:
    """Kafka's stream-table left join in plain Python: every click, in timestamp order, with the
    profile its user has at that time. {user: [joined values in order]}."""
    events = sorted([(ts, 0, k, v) for k, v, ts in profiles] + [(ts, 1, k, v) for k, v, ts in clicks])
    table: dict = {}
    out = collections.defaultdict(list)
    for _, is_click, key, value in events:
        if is_click:
            out[key].append(describe_click(value, table.get(key)))
        elif value is None:
            table.pop(key, None)
        else:
            table[key] = value
    return dict(out)


def expected_titles(pages: list, clicks: list) -> dict:
    """Kafka's stream-global-table inner join: the global table is complete before processing."""
    titles = {k: v for k, v, _ in pages}
    out = collections.defaultdict(list)
    for user, page, _ in clicks:
        if page in titles:
            out[user].append(title_click(page, titles[page]))
    return dict(out)


def expected_paid(orders: list, payments: list) -> dict:
    """Kafka's stream-stream inner join: each order with each payment of the same key no more
    than 10 minutes before or after it. {order id: sorted joined values}."""
    by_key = collections.defaultdict(list)
    for key, method, ts in payments:
        by_key[key].append((method, ts))
    out = {}
    for key, order, ts in orders:
        joined = [pay(order, method) for method, pts in by_key[key] if abs(pts - ts) <= WINDOW_MS]
        if joined:
            out[key] = sorted(joined)
    return out


# ---------------------------------------------------------------------------------- plumbing
def produce(backend: Any, topic: str, records: list) -> None:
    producer = backend.producer({"client.id": f"enrich-{topic}"})
    for key, value, ts in records:
        while True:
            try:
                producer.produce(topic, key=key.encode(), value=None if value is None else value.encode(), timestamp=ts)
                break
            except BufferError:
                producer.poll(0.05)
    if producer.flush(60):
        raise SystemExit(f"enrich: could not write {topic} within 60s")


def read_topic(backend: Any, topic: str, count: int, timeout_s: float) -> dict:
    """{key: [values in offset order]} of the first `count` records of `topic`."""
    consumer = backend.consumer({"group.id": f"enrich-reader-{time.monotonic_ns()}", "enable.auto.commit": False,
                                 "isolation.level": "read_committed"})
    try:
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(TOPICS[topic])])
        got: list = []
        deadline = time.monotonic() + timeout_s
        while len(got) < count:
            if time.monotonic() > deadline:
                raise SystemExit(f"enrich: timed out reading {topic} ({len(got)} of {count} records)")
            got.extend(m for m in consumer.consume(1000, 0.2) if m.error() is None)
    finally:
        consumer.close()
    out = collections.defaultdict(list)
    for m in got:
        out[m.key().decode()].append(m.value().decode())
    return dict(out)


def show(title: str, got: dict, expected: dict, sort_values: bool = False) -> bool:
    if sort_values:
        got = {k: sorted(v) for k, v in got.items()}
    ok = got == expected
    print(f"\n{title}: {sum(len(v) for v in got.values())} records; match the reference: {'yes' if ok else 'NO'}")
    for key in sorted(got)[:4]:
        print(f"  {key:<10} {got[key][0]}")
    return ok


def main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", default=os.path.join(tempfile.gettempdir(), "eddy-enrich"))
    parser.add_argument("--users", type=int, default=30)
    parser.add_argument("--clicks", type=int, default=2000)
    parser.add_argument("--orders", type=int, default=300)
    parser.add_argument("--seed", type=int, default=11)
    parser.add_argument("--timeout", type=float, default=90.0)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.ERROR, format="%(levelname)s %(name)s: %(message)s")

    data_dir = fresh_data_dir(args.data_dir)
    bootstrap = embedded_bootstrap(data_dir)
    print(f"enrich on the embedded cluster, data directory: {data_dir}")
    profiles, clicks = generate_clicks(args.users, args.clicks, args.seed)
    pages = generate_pages(args.seed)
    orders, payments = generate_orders(args.orders, args.seed)
    enriched, titled, paid = (expected_enriched(profiles, clicks), expected_titles(pages, clicks),
                              expected_paid(orders, payments))

    config = {"application.id": "enrich", "bootstrap.servers": bootstrap, "state.dir": os.path.join(data_dir, "state"),
              "replication.factor": 1, "commit.interval.ms": 200, "processing.guarantee": "exactly_once_v2"}
    backend = for_config({"bootstrap.servers": bootstrap})
    app = None
    try:
        admin = backend.admin()
        for future in admin.create_topics([NewTopic(t, n, 1) for t, n in TOPICS.items()]).values():
            future.result()
        for topic, records in (("profiles", profiles), ("clicks", clicks), ("pages", pages), ("orders", orders),
                               ("payments", payments)):
            produce(backend, topic, records)
        app = App(build_topology(), config)
        app.start()
        if not app.wait_for_state(AppState.RUNNING, timeout=args.timeout):
            raise SystemExit(f"enrich: the app did not reach RUNNING ({app.state.value})")
        got_enriched = read_topic(backend, "enriched-clicks", len(clicks), args.timeout)
        got_paid = read_topic(backend, "paid-orders", sum(len(v) for v in paid.values()), args.timeout)
        got_titled = read_topic(backend, "clicks-with-titles", sum(len(v) for v in titled.values()), args.timeout)
    finally:
        if app is not None:
            app.close(timeout=60)
        backend.close()

    print(f"{len(clicks)} clicks of {args.users} users, {len(profiles)} profile updates; "
          f"{len(orders)} orders, {len(payments)} payments")
    ok = show("clicks enriched from the profiles table (stream-table left join)", got_enriched, enriched)
    ok = show("clicks with page titles from a global table (stream-global-table join)", got_titled, titled) and ok
    ok = show("orders paid within 10 minutes (stream-stream join)", got_paid, paid, sort_values=True) and ok
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
