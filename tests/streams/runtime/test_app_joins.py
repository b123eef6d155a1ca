"""Joins on the embedded runtime with two App instances and a rebalance in the middle (a second
instance joins, or one stops): the tasks that move restore their window, outer and table stores
from the changelogs, and the final results are the ones derived by hand (the same scenarios as
the driver tests), exactly once. One embedded cluster for the module.

Each phase writes one side, waits until the app has stored it (its store's changelog shows it),
then writes the records that read it, so the order in which a task sees the two inputs is
the order the expectations assume."""

from __future__ import annotations

import collections

import pytest

from eddy.murmur2 import murmur2_partition
from streams import App, AppState, StreamsBuilder, serdes
from streams.dsl import JoinWindows, Materialized
from streams.runtime.errors import CoPartitioningError

from _runtime_util import Cluster, unique, wait_for

S = serdes.STRING
P = 2  # partitions of every topic


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    c = Cluster({"bootstrap.servers": f"local://{tmp_path_factory.mktemp('joins')}/cluster",
                 "consumer.session.timeout.ms": 6000, "consumer.heartbeat.interval.ms": 500})
    yield c
    c.close()


def joiner(left, right):
    return f"{left}+{right}"


class Run:
    """Apps of one application id over `topology`, and the topics they read and write."""

    def __init__(self, cluster, tmp_path, build, topics):
        self.cluster, self.tmp_path = cluster, tmp_path
        self.topics = {name: unique(name) for name in topics}
        cluster.create_topics(P, *self.topics.values())
        self.app_id = unique("join")
        b = StreamsBuilder()
        build(b, self.topics)
        self.topology = b.build()
        self.apps: dict[str, App] = {}

    def start(self, name):
        app = App(self.topology, {**self.cluster.config, "application.id": self.app_id,
                                  "state.dir": str(self.tmp_path / name), "processing.guarantee": "exactly_once_v2",
                                  "commit.interval.ms": 100,
                                  # no wall-clock wait between outer-join scans: the test closes
                                  # windows with records, not with time
                                  "__emit.interval.ms.kstreams.outer.join.spurious.results.fix__": 0})
        self.apps[name] = app
        app.start()
        wait_for(lambda: all(a.state is AppState.RUNNING and a.local_tasks()["active"] for a in self.apps.values()),
                 60, f"{sorted(self.apps)} running with tasks")
        return app

    def stop(self, name):
        self.apps.pop(name).close(timeout=60)
        wait_for(lambda: all(a.state is AppState.RUNNING for a in self.apps.values()), 60, "the rest running")

    def write(self, topic, records):
        """records: (key, value, timestamp) strings; None value = tombstone."""
        self.cluster.produce(self.topics[topic], [(k.encode(), None if v is None else v.encode()) for k, v, _ in records],
                             timestamps=[ts for _, _, ts in records])

    def latest(self, store, expected):
        """Wait until the changelog of `store` holds `expected` as each key's latest value."""
        topic = f"{self.app_id}-{store}-changelog"

        def shows(messages):
            last = {m.key().decode(): m.value() for m in messages}
            return all(k in last and (v is None) == (last[k] is None) for k, v in expected.items())
        self.cluster.read_all(topic, P, until=shows, timeout=60)

    def stored(self, store, n):
        """Wait until the changelog of `store` holds n records (a window store's keys are bytes)."""
        self.cluster.read_all(f"{self.app_id}-{store}-changelog", P, until=lambda got: len(got) >= n, timeout=60)

    def output(self, n):
        messages = self.cluster.read_all(self.topics["out"], P, until=lambda got: len(got) >= n, timeout=60)
        by_key = collections.defaultdict(list)
        for m in messages:
            by_key[m.key().decode()].append(None if m.value() is None else m.value().decode())
        return dict(by_key)

    def close(self):
        for app in self.apps.values():
            app.close(timeout=60)


@pytest.fixture
def run(cluster, tmp_path):
    runs = []

    def make(build, topics):
        runs.append(Run(cluster, tmp_path, build, topics))
        return runs[-1]
    yield make
    for r in runs:
        r.close()


def test_stream_table_left_join_while_a_second_instance_joins(run):
    def build(b, t):
        profiles = b.table(t["profiles"], key_serde=S, value_serde=S, store="profiles")
        (b.stream(t["clicks"], key_serde=S, value_serde=S)
          .left_join(profiles, joiner).to(t["out"], key_serde=S, value_serde=S))
    r = run(build, ["clicks", "profiles", "out"])
    r.start("a")
    # by murmur2, u1..u4 are in partition 0 and u5 in partition 1: whichever task moves has
    # profiles written before the rebalance that clicks read after it
    r.write("profiles", [("u1", "gold", 1), ("u2", "silver", 2), ("u3", "bronze", 3), ("u5", "tin", 4)])
    r.latest("profiles", {"u1": "gold", "u2": "silver", "u3": "bronze", "u5": "tin"})
    r.write("clicks", [("u1", "c1", 10), ("u2", "c2", 11), ("u4", "c3", 12)])
    assert r.output(3) == {"u1": ["c1+gold"], "u2": ["c2+silver"], "u4": ["c3+None"]}
    r.start("b")                                               # rebalance: tasks move to b
    r.write("profiles", [("u1", "platinum", 20), ("u2", None, 21)])
    r.latest("profiles", {"u1": "platinum", "u2": None})
    r.write("clicks", [("u1", "c4", 30), ("u2", "c5", 31), ("u3", "c6", 32), ("u5", "c7", 33)])
    # u3's and u5's profiles were written before the rebalance: a moved task reads them from its
    # restored store
    assert r.output(7) == {"u1": ["c1+gold", "c4+platinum"], "u2": ["c2+silver", "c5+None"],
                           "u3": ["c6+bronze"], "u4": ["c3+None"], "u5": ["c7+tin"]}


def keys_per_partition(prefix):
    """One key for each partition (by the producer's murmur2 partitioner)."""
    found = {}
    i = 0
    while len(found) < P:
        key = f"{prefix}{i}"
        found.setdefault(murmur2_partition(key.encode(), P), key)
        i += 1
    return [found[p] for p in range(P)]


def test_stream_stream_left_join_holds_records_across_a_rebalance(run):
    def build(b, t):
        left = b.stream(t["left"], key_serde=S, value_serde=S)
        right = b.stream(t["right"], key_serde=S, value_serde=S)
        (left.left_join(right, joiner, JoinWindows.of_time_difference_with_no_grace(10), store="sj")
             .to(t["out"], key_serde=S, value_serde=S))
    r = run(build, ["left", "right", "out"])
    r.start("a")
    # held in the outer store; a and b are in partition 0, d in 1 (murmur2), so whichever task
    # moves takes a held record along (timestamp 0 means "now" to a producer: these start at 1000)
    r.write("left", [("a", "A0", 1000), ("b", "B1", 1001), ("d", "D2", 1002)])
    r.stored("sj-this-join-store", 3)
    r.write("right", [("b", "b5", 1005)])                               # joins B1 at once
    assert r.output(1) == {"b": ["B1+b5"]}
    r.start("b")                                                        # rebalance: held records move
    # a record at time 1100 in every task closes the windows of A0 and D2 (t + 10 < 1100)
    r.write("left", [(key, "Z", 1100) for key in keys_per_partition("z")])
    out = r.output(3)
    assert out == {"b": ["B1+b5"], "a": ["A0+None"], "d": ["D2+None"]}


def test_table_table_outer_join_while_one_instance_stops(run):
    def build(b, t):
        t1 = b.table(t["t1"], key_serde=S, value_serde=S, store="t1")
        t2 = b.table(t["t2"], key_serde=S, value_serde=S, store="t2")
        (t1.outer_join(t2, joiner, store=Materialized.as_("tt").with_value_serde(S).with_caching_disabled())
           .to_stream().to(t["out"], key_serde=S, value_serde=S))
    r = run(build, ["t1", "t2", "out"])
    r.start("a")
    r.start("b")
    # k1 is in partition 1, k3 in partition 0 (murmur2): b had one of them
    r.write("t1", [("k1", "A", 1), ("k3", "B", 2)])
    r.latest("t1", {"k1": "A", "k3": "B"})
    r.write("t2", [("k1", "x", 3)])
    assert r.output(3) == {"k1": ["A+None", "A+x"], "k3": ["B+None"]}
    r.stop("b")                                                         # a takes every task over
    r.write("t1", [("k1", None, 4)])                                    # left tombstone: right only
    r.latest("t1", {"k1": None})
    r.write("t2", [("k3", "y", 5)])                                     # reads t1's k3
    assert r.output(5) == {"k1": ["A+None", "A+x", "None+x"], "k3": ["B+None", "B+y"]}
    app = r.apps["a"]
    assert app.store("tt").get("k3") == "B+y"
    assert app.store("tt").get("k1") == "None+x"


def test_joined_topics_with_different_partition_counts_fail_at_start(cluster, tmp_path):
    clicks, profiles = unique("clicks"), unique("profiles")
    cluster.create_topics(3, clicks)
    cluster.create_topics(2, profiles)
    b = StreamsBuilder()
    b.stream(clicks, key_serde=S, value_serde=S).join(b.table(profiles, key_serde=S, value_serde=S), joiner).to(
        unique("out"), value_serde=S)
    app = App(b.build(), {**cluster.config, "application.id": unique("copart"), "state.dir": str(tmp_path)})
    with pytest.raises(CoPartitioningError, match=f"{clicks}=3, {profiles}=2"):
        app.start()
    assert app.state is AppState.CREATED
