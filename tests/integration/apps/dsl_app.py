"""The DSL app the fault campaign kills (tests/faults/campaign.py `run_eos_dsl`): issue 16's
stateful operators in one topology over two input topics, with what they must make of seeded
input.

- ``events`` (user -> page): per user, counts in tumbling windows with grace suppressed until
  the window closes (one final result per window: a window store and a suppress buffer, each
  with its changelog) written to ``finals``, and counts in session windows with grace (a session
  store; merged-away sessions get their tombstones) written to ``sessions``. No repartition:
  each events partition's task holds its own stream time.
- ``updates`` (user -> group, with tombstones) read as a table (store ``users``), grouped by
  group and counted with adder and subtractor through a repartition topic (store
  ``group-counts``), written to ``group-counts``.
- every event is also written to ``last-pages``, which the app reads back as a global table
  (store ``last-pages``: each user's last page): its global thread applies records while the
  stream thread writes them (exactly once: only committed ones), checkpointing every 10,000.

`make_inputs` draws the records (each with its partition: a user's records all go to one) and
`expected_events_output` asks the TopologyTestDriver, one driver per events partition (a task's
stream time is its partition's), what Kafka's rules make of them: the same code path, whose
agreement with Kafka Streams the conformance suite checks; what a crash can break (restore,
stream time after a restart, exactly-once output) the driver does not have. `expected_group_counts`
counts the users of each group in the table's final state (a group once used and now empty
stays at 0: a count's subtractor does not delete).
"""

from __future__ import annotations

import collections
import random
import time

from streams import BufferConfig, Materialized, SessionWindows, StreamsBuilder, Suppressed, TimeWindows, serdes
from streams.testing import TopologyTestDriver
from streams.topology import Topology

EVENTS, UPDATES = "events", "updates"
FINALS, SESSIONS, GROUP_COUNTS = "finals", "sessions", "group-counts"
LAST_PAGES = "last-pages"
INPUTS, OUTPUTS = (EVENTS, UPDATES), (FINALS, SESSIONS, GROUP_COUNTS)
FEEDS = (LAST_PAGES,)  # what the app writes and reads back
PARTITIONS = 2
WINDOW_MS, GRACE_MS = 1_000, 200
GAP_MS, SESSION_GRACE_MS = 150, 100
# Far longer than any record is out of order, and than the event time a crash makes an at least
# once run process again: a merge never meets a session the store below the cache has already
# dropped. With Kafka's default (gap + grace), a record up to grace late can
# merge a session past that retention while the cache still holds it; the flush then finds no
# old value for the merged-away session and forwards no tombstone for it, so which sessions the
# output keeps would hang on when the cache was last flushed (Kafka's CachingSessionStore, and
# Eddy's, as the conformance suite checks).
SESSION_RETENTION_MS = 600_000
# The window store keeps as long (Kafka's default is size + grace): under at least once a crash
# makes the app process again the records since its last commit (seconds of event time), and a
# window the store had already dropped would start again from zero and emit a smaller final
# result, the right one having been lost with the crash's unsent output (Kafka's behaviour too).
WINDOW_RETENTION_MS = SESSION_RETENTION_MS
# Event times start at the last full hour: a real broker deletes a changelog's old segments by
# their records' timestamps (a window or session store's changelog keeps the store's retention
# plus a day), so a restore of input stamped years ago would miss what the broker deleted (as
# Kafka Streams' would). The hour keeps window boundaries where a fixed start puts them.
START_MS = int(time.time()) // 3600 * 3600 * 1000
S, I64 = serdes.STRING, serdes.INT64

#: (partition, key, value, timestamp) of one input record
Row = tuple[int, bytes, "bytes | None", int]


def build_topology(feed: bool = True) -> Topology:
    """The app's topology; `feed` False leaves ``last-pages`` and its global table out (the
    oracle's: Kafka's driver, as Eddy's, flushes and checkpoints a global store after each
    record, milliseconds apiece, and the global table changes no other output)."""
    b = StreamsBuilder()
    events = b.stream(EVENTS, key_serde=S, value_serde=S)
    (events.group_by_key()
        .windowed_by(TimeWindows.of_size_and_grace(WINDOW_MS, GRACE_MS))
        .count(store=Materialized.as_("window-counts").with_retention(WINDOW_RETENTION_MS))
        .suppress(Suppressed.until_window_closes(BufferConfig.unbounded()))
        .to_stream()
        .to(FINALS, key_serde=serdes.time_windowed(S, WINDOW_MS), value_serde=I64))
    (events.group_by_key()
        .windowed_by(SessionWindows.of_inactivity_gap_and_grace(GAP_MS, SESSION_GRACE_MS))
        .count(store=Materialized.as_("session-counts").with_retention(SESSION_RETENTION_MS))
        .to_stream()
        .to(SESSIONS, key_serde=serdes.session_windowed(S), value_serde=I64))
    if feed:
        events.to(LAST_PAGES, key_serde=S, value_serde=S)
        b.global_table(LAST_PAGES, key_serde=S, value_serde=S, store=LAST_PAGES)
    (b.table(UPDATES, key_serde=S, value_serde=S, store="users")
        .group_by(lambda user, group: (group, user), key_serde=S, value_serde=S)
        .count(store=GROUP_COUNTS)
        .to_stream()
        .to(GROUP_COUNTS, key_serde=S, value_serde=I64))
    return b.build()


def make_inputs(rng: random.Random, events: int = 6_000, updates: int = 3_000) -> dict[str, list[Row]]:
    """Seeded records of both inputs. Events advance ~10 ms each per partition, 10% up to 300 ms
    out of order, 2% later than the window grace (dropped, as some session records are), and
    each partition ends with a record far ahead that closes every earlier window. Updates move
    200 users among 10 groups, 5% of them tombstones."""
    users = [f"u{i:03d}" for i in range(20)]
    clock = [START_MS] * PARTITIONS
    rows: list[Row] = []
    for _ in range(events):
        user = rng.randrange(len(users))
        p = user % PARTITIONS
        clock[p] += rng.randint(0, 20)
        t = clock[p]
        r = rng.random()
        if r < 0.02:
            t -= WINDOW_MS + GRACE_MS + rng.randint(0, 2_000)
        elif r < 0.12:
            t -= rng.randint(0, 300)
        rows.append((p, users[user].encode(), f"page{rng.randrange(5)}".encode(), t))
    rows += [(p, b"flush", b"end", clock[p] + 100 * WINDOW_MS) for p in range(PARTITIONS)]
    table_users = [f"t{i:03d}" for i in range(200)]
    changes: list[Row] = []
    for i in range(updates):
        user = rng.randrange(len(table_users))
        group = None if rng.random() < 0.05 else f"g{rng.randrange(10)}".encode()
        changes.append((user % PARTITIONS, table_users[user].encode(), group, START_MS + i))
    return {EVENTS: rows, UPDATES: changes}


def expected_events_output(rows: list[Row]) -> dict[str, list[tuple[int, bytes, bytes | None]]]:
    """What the topology writes to ``finals`` and ``sessions`` for the events `rows`: (partition,
    key, value) in each partition's order, by one driver per partition."""
    out: dict[str, list] = {FINALS: [], SESSIONS: []}
    for p in range(PARTITIONS):
        with TopologyTestDriver(build_topology(feed=False), {"application.id": "dsl-oracle"}) as driver:
            for partition, key, value, timestamp in rows:
                if partition == p:
                    driver.pipe_raw(EVENTS, key, value, timestamp)
            for topic in out:
                out[topic] += [(p, r.key, r.value) for r in driver.producer_history(topic)]
    return out


def records_per_window(rows: list[Row]) -> collections.Counter:
    """How many of the events `rows` fall in each (user, window start) tumbling window, the
    ones too late for it included: what the window may count when a crash's replay accepts
    records the run without one dropped (see `records_per_user`)."""
    return collections.Counter((key, timestamp - timestamp % WINDOW_MS) for _p, key, _v, timestamp in rows)


def records_per_user(rows: list[Row]) -> collections.Counter:
    """How many of the events `rows` each user has, the ones too late for their window or
    session included. A restarted task's window and session processors begin with no observed
    stream time (Kafka's observedStreamTime, a field of the processor), so records processed
    again after a crash may be accepted that the first processing dropped as late: a further,
    larger final result, or sessions holding more records, is Kafka's outcome then."""
    return collections.Counter(key.decode() for _p, key, _v, _t in rows)


def final_users(changes: list[Row]) -> dict[bytes, bytes]:
    """The table of users' groups after the updates `changes` (a tombstone deletes the user)."""
    return final_table([(partition, user, group) for partition, user, group, _timestamp in changes])


def expected_last_pages(rows: list[Row]) -> dict[str, str]:
    """The ``last-pages`` global store's final content for the events `rows`: each user's last
    page (a user's events are all in one partition, in order)."""
    return {key.decode(): value.decode() for _partition, key, value, _timestamp in rows}


def expected_group_counts(changes: list[Row]) -> dict[str, int]:
    """Each group's final count: its users in the table's final state (0 for a group emptied)."""
    counts = {group.decode(): 0 for _p, _user, group, _t in changes if group is not None}
    for group in final_users(changes).values():
        counts[group.decode()] += 1
    return counts


def final_table(records: list[tuple[int, bytes, bytes | None]]) -> dict[bytes, bytes]:
    """An output read as a table: each key's last value, a tombstone deleting it."""
    table: dict[bytes, bytes] = {}
    for _partition, key, value in records:
        if value is None:
            table.pop(key, None)
        else:
            table[key] = value
    return table


def counts_per_user(sessions: dict[bytes, bytes]) -> dict[str, int]:
    """The sum of each user's session counts in a ``sessions`` table (`final_table`'s)."""
    sums: dict[str, int] = {}
    for key, value in sessions.items():
        user = serdes.session_windowed(S).deserialize(key).key
        sums[user] = sums.get(user, 0) + I64.deserialize(value)
    return sums


def describe_key(topic: str, key: bytes) -> str:
    """An output key as text, for a report."""
    if topic == SESSIONS:
        windowed = serdes.session_windowed(S).deserialize(key)
        return f"{windowed.key}@{windowed.window.start}..{windowed.window.end}"
    if topic == FINALS:
        windowed = serdes.time_windowed(S, WINDOW_MS).deserialize(key)
        return f"{windowed.key}@{windowed.window.start}"
    return S.deserialize(key)


def describe_value(value: bytes | None) -> str:
    return "absent" if value is None else str(I64.deserialize(value))
