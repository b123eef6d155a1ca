"""GlobalKTable on the running App: every instance holds every partition of the global topic,
the bootstrap ends before any stream record is processed, a restart resumes from the global
checkpoint, and bad starts fail with typed errors."""

from __future__ import annotations

import collections
import os

import pytest

from state.checkpoint import OffsetCheckpoint
from streams import App, AppState, StreamsBuilder, serdes
from streams.dsl.global_table import stream_global_join
from streams.errors import RecordDeserializationError
from streams.runtime.errors import MissingSourceTopicError
from streams.runtime.global_thread import GlobalOffsetOutOfRangeError
from streams.serdes import DeserializationHandlerResponse

from _runtime_util import Cluster, unique, wait_for

S = serdes.STRING


class Recorder:
    """A restore listener keeping what it was told, per (topic, partition)."""

    def __init__(self):
        self.starts, self.ends = {}, {}
        self.batches = collections.Counter()
        self.app = None
        self.app_states = set()  # the App's states seen while the global stores restore

    def on_restore_start(self, tp, store, start, end):
        self.starts[(tp.topic, tp.partition)] = (store, start, end)
        if self.app is not None:
            self.app_states.add(self.app.state)

    def on_batch_restored(self, tp, store, batch_end, n):
        self.batches[(tp.topic, tp.partition)] += n

    def on_restore_end(self, tp, store, total):
        self.ends[(tp.topic, tp.partition)] = total

    def on_restore_suspended(self, tp, store, total):
        raise AssertionError("a global restore is never suspended")


def join_app(cluster, app_id, users, orders, out, state_dir, listener=None, extra_config=None):
    b = StreamsBuilder()
    table = b.global_table(users, key_serde=S, value_serde=S, store="users")
    stream = b.stream(orders, key_serde=S, value_serde=S)
    stream_global_join(stream, table, lambda k, v: v, lambda v, u: f"{v}|{u}", left=False).to(
        out, key_serde=S, value_serde=S)
    app = App(b.build(), {**cluster.config, "application.id": app_id, "state.dir": str(state_dir),
                          "commit.interval.ms": 100, **(extra_config or {})})
    if listener is not None:
        app.set_global_state_restore_listener(listener)
    return app


def test_every_instance_holds_every_partition_and_joins_after_the_bootstrap(backend_config, tmp_path):
    cluster = Cluster(backend_config)
    users, orders, out = unique("users"), unique("orders"), unique("out")
    cluster.create_topics(3, users)
    cluster.create_topics(2, orders, out)
    for p, (k, v) in enumerate([(b"u0", b"U0"), (b"u1", b"U1"), (b"u2", b"U2")]):
        cluster.produce(users, [(k, v)], partition=p)
    cluster.produce(users, [(b"u1", None), (None, b"nokey")], partition=1)  # u1 deleted; a None key skipped
    # written before start: its join must see the table as it was before start (bootstrap first)
    cluster.produce(orders, [(b"o-early", b"u2")])
    apps, listeners = [], []
    try:
        for i in range(2):
            listeners.append(Recorder())
            apps.append(join_app(cluster, "gapp-" + users, users, orders, out,
                                 tmp_path / f"i{i}", listeners[-1]))
            apps[-1].start()
        for app in apps:
            assert app.wait_for_state(AppState.RUNNING, timeout=60)
        for app, listener in zip(apps, listeners):
            # the whole table on each instance: partitions 0 and 2 hold u0 and u2, u1 was deleted
            assert sorted(app.store("users").all()) == [("u0", "U0"), ("u2", "U2")]
            assert sorted(listener.starts) == [(users, 0), (users, 1), (users, 2)]
            # bootstrap from the log start to the end offsets: 1, 3 and 1 records; the None key
            # of partition 1 is not restored (Kafka skips it)
            assert {p: v[1:] for (_, p), v in listener.starts.items()} == {0: (0, 1), 1: (0, 3), 2: (0, 1)}
            assert {p: n for (_, p), n in listener.ends.items()} == {0: 1, 1: 2, 2: 1}
        cluster.produce(users, [(b"u3", b"U3")], partition=0)
        for app in apps:
            wait_for(lambda app=app: app.store("users").get("u3") == "U3", 30, "u3 on every instance")
        cluster.produce(orders, [(b"o-late", b"u3"), (b"o-miss", b"u1")])
        got = cluster.read_all(out, 2, until=lambda ms: len(ms) >= 2)
        # inner join: o-miss finds no u1 (deleted) and emits nothing
        assert sorted((m.key(), m.value()) for m in got) == [(b"o-early", b"u2|U2"), (b"o-late", b"u3|U3")]
    finally:
        for app in apps:
            assert app.close(timeout=60)
        cluster.close()


def test_out_of_order_global_updates_are_warned_of_once_bootstrapped(backend_config, tmp_path, caplog):
    """Kafka restores a global table's store without its processor: an older update in the
    topic's history is not warned of at the bootstrap, one arriving afterwards is."""
    cluster = Cluster(backend_config)
    users, orders, out = unique("users"), unique("orders"), unique("out")
    cluster.create_topics(1, users, orders, out)
    cluster.produce(users, [(b"u1", b"new"), (b"u1", b"old")], timestamps=[2_000, 1_000])
    app = join_app(cluster, "gwarn-" + users, users, orders, out, tmp_path / "i0")
    try:
        with caplog.at_level("WARNING", logger="streams.dsl.ops.table"):
            app.start()
            assert app.wait_for_state(AppState.RUNNING, timeout=60)
            assert app.store("users").get("u1") == "old"  # applied all the same
            cluster.produce(users, [(b"u1", b"older")], timestamps=[500])
            wait_for(lambda: app.store("users").get("u1") == "older", 30, "the late update applied")
        warned = [r.getMessage() for r in caplog.records if "out-of-order KTable update" in r.getMessage()]
        assert warned == ["Detected out-of-order KTable update for users, old timestamp=[1000] new timestamp=[500]. "
                          f"topic=[{users}] partition=[0] offset=[2]."]
    finally:
        assert app.close(timeout=60)
        cluster.close()


def test_restart_resumes_from_the_global_checkpoint(backend_config, tmp_path):
    cluster = Cluster(backend_config)
    users = unique("users")
    cluster.create_topics(3, users)
    for p in range(3):
        cluster.produce(users, [(f"k{p}-{i}".encode(), f"v{i}".encode()) for i in range(4)], partition=p)
    b = StreamsBuilder()
    b.global_table(users, key_serde=S, value_serde=S, store="users")  # a global-only topology
    config = {**cluster.config, "application.id": "ckpt-" + users, "state.dir": str(tmp_path)}
    checkpoint = tmp_path / config["application.id"] / "global" / ".checkpoint"
    first, second, third = Recorder(), Recorder(), Recorder()
    try:
        app = App(b.build(), config)
        app.set_global_state_restore_listener(first)
        first.app = app
        app.start()
        assert app.wait_for_state(AppState.RUNNING, timeout=60)
        assert sum(first.ends.values()) == 12
        assert first.app_states == {AppState.REBALANCING}  # Kafka: REBALANCING until the bootstrap ends
        assert sum(first.batches.values()) == 12
        assert app.close(timeout=60)
        # a clean close checkpoints each partition's next offset (Kafka's global format)
        assert {tp.partition: o for tp, o in OffsetCheckpoint(checkpoint).read().items()} == {0: 4, 1: 4, 2: 4}

        cluster.produce(users, [(b"k1-new", b"n")], partition=1)
        app = App(b.build(), config)
        app.set_global_state_restore_listener(second)
        app.start()
        assert app.wait_for_state(AppState.RUNNING, timeout=60)
        # only the record written since: each partition starts at its checkpoint
        assert {p: v[1:] for (_, p), v in second.starts.items()} == {0: (4, 4), 1: (4, 5), 2: (4, 4)}
        assert {p: n for (_, p), n in second.ends.items()} == {0: 0, 1: 1, 2: 0}
        assert len(list(app.store("users").all())) == 13 and app.store("users").get("k1-new") == "n"
        assert app.close(timeout=60)

        # a checkpoint past the log end (the topic was recreated, say): start fails, the global
        # state is wiped, and the next start restores everything from the beginning
        OffsetCheckpoint(checkpoint).write({tp: o + 100 for tp, o in OffsetCheckpoint(checkpoint).read().items()})
        app = App(b.build(), config)
        with pytest.raises(GlobalOffsetOutOfRangeError, match=f"checkpointed offset 104 of {users}-0 is outside"):
            app.start()
        assert app.state is AppState.ERROR and not os.path.exists(checkpoint.parent)
        assert app.close(timeout=60)
        app = App(b.build(), config)
        app.set_global_state_restore_listener(third)
        app.start()
        assert app.wait_for_state(AppState.RUNNING, timeout=60)
        assert sum(third.ends.values()) == 13 and len(list(app.store("users").all())) == 13
        assert app.close(timeout=60)
    finally:
        cluster.close()


def test_missing_global_topic_fails_the_start_naming_it(backend_config, tmp_path):
    cluster = Cluster(backend_config)
    orders, missing = unique("orders"), unique("missing")
    cluster.create_topics(1, orders)
    app = join_app(cluster, "missing-" + orders, missing, orders, unique("out"), tmp_path)
    try:
        with pytest.raises(MissingSourceTopicError, match=f"global store 'users': its topic '{missing}' does not exist"):
            app.start()
        assert app.state is AppState.ERROR
    finally:
        assert app.close(timeout=60)
        cluster.close()


def test_bad_global_records_meet_the_deserialization_handler(backend_config, tmp_path):
    cluster = Cluster(backend_config)
    counts = unique("counts")
    cluster.create_topics(1, counts)
    cluster.produce(counts, [(b"a", b"bad"), (b"b", serdes.INT64.serialize(7))])  # b"bad" is no INT64
    b = StreamsBuilder()
    b.global_table(counts, key_serde=S, value_serde=serdes.INT64, store="counts")
    config = {**cluster.config, "application.id": "bad-" + counts}
    try:
        # log_and_fail (the default) while bootstrapping: start() fails, naming the record
        app = App(b.build(), {**config, "state.dir": str(tmp_path / "a")})
        with pytest.raises(RecordDeserializationError, match=f"topic '{counts}' partition 0 offset 0"):
            app.start()
        assert app.state is AppState.ERROR and app.close(timeout=60)
        # log_and_continue: the bad record is skipped, the bootstrap goes on
        app = App(b.build(), {**config, "state.dir": str(tmp_path / "b"),
                              "default.deserialization.exception.handler": "log_and_continue"})
        app.start()
        assert app.wait_for_state(AppState.RUNNING, timeout=60)
        assert list(app.store("counts").all()) == [("b", 7)]
        assert app.close(timeout=60)
        # log_and_fail after the bootstrap: the global thread dies and the client goes to ERROR
        app = App(b.build(), {**config, "state.dir": str(tmp_path / "c"),
                              "default.deserialization.exception.handler": lambda err: (
                                  DeserializationHandlerResponse.CONTINUE if err.offset == 0
                                  else DeserializationHandlerResponse.FAIL)})
        app.start()
        assert app.wait_for_state(AppState.RUNNING, timeout=60)
        cluster.produce(counts, [(b"c", b"bad")])
        assert app.wait_for_state(AppState.ERROR, timeout=60)
        assert app.close(timeout=60)
    finally:
        cluster.close()


def test_the_global_bootstrap_polls_global_consumer_max_poll_records(backend_config, tmp_path):
    """global.consumer.max.poll.records sizes the global thread's polls: each restored batch of
    the bootstrap holds at most that many records, and the whole table is there."""
    cluster = Cluster(backend_config)
    users, orders, out = unique("users"), unique("orders"), unique("out")
    cluster.create_topics(1, users, orders, out)
    cluster.produce(users, [(f"u{i:02d}".encode(), f"U{i}".encode()) for i in range(40)])

    class BatchSizes(Recorder):
        def __init__(self):
            super().__init__()
            self.sizes = []

        def on_batch_restored(self, tp, store, batch_end, n):
            super().on_batch_restored(tp, store, batch_end, n)
            self.sizes.append(n)

    listener = BatchSizes()
    app = join_app(cluster, unique("gmpr"), users, orders, out, tmp_path / "state", listener,
                   {"global.consumer.max.poll.records": 5})
    try:
        app.start()
        assert app.wait_for_state(AppState.RUNNING, timeout=60)
        assert listener.ends == {(users, 0): 40}
        assert sum(listener.sizes) == 40 and max(listener.sizes) <= 5 and len(listener.sizes) >= 8
        assert len(list(app.store("users").all())) == 40
    finally:
        assert app.close(timeout=60)
        cluster.close()
