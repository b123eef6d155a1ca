"""Changing an App's thread count while it runs (Kafka's addStreamThread / removeStreamThread):
the group spreads the tasks over the threads, the threads share the record cache, nothing is lost
and, under exactly_once_v2, nothing is counted twice."""

from __future__ import annotations

import threading

import pytest

from streams import App, AppState, Processor, StreamsBuilder, serdes
from streams.runtime.errors import InvalidTimeoutError, ThreadRemovalTimeoutError
from streams.runtime.thread import ThreadState

from _runtime_util import (Cluster, count_sequences, last_counts, make_lines, pass_through_topology, unique, wait_for,
                           wordcount_topology)

CACHE = 1_000_000  # statestore.cache.max.bytes of the apps below


def _live(app: App) -> list:
    return [t for t in app.threads if t.state is not ThreadState.DEAD and not t.stopping]


def _caches(app: App) -> list:
    """Each live thread's cache budget (None before it has tasks)."""
    return [t.task_manager.thread_cache.max_bytes if t.task_manager is not None else None for t in _live(app)]


def _shared(app: App, threads: int, tasks: int) -> bool:
    """`threads` live threads, each running with tasks of its own, `tasks` in all, and each
    thread's cache resized to its share."""
    live = _live(app)
    if app.state is not AppState.RUNNING or len(live) != threads:
        return False
    owned = [set(t.active_task_ids) for t in live]
    return (all(owned) and sum(map(len, owned)) == tasks == len(set().union(*owned))
            and _caches(app) == [CACHE // threads] * threads)


@pytest.mark.needs_faithful_broker(
    reason="moved tasks restore their changelogs, which needs right end offsets; aborted data must stay hidden")
def test_threads_added_and_removed_while_running_share_the_tasks_and_count_exactly_once(backend_config, tmp_path):
    cluster = Cluster(backend_config)
    lines, out = unique("lines"), unique("counts")
    cluster.create_topics(4, lines, out)
    records, expected = make_lines(1800, seed=11, vocabulary=50)
    app_id = unique("threads")
    app = App(wordcount_topology(lines, out), {
        **cluster.config, "application.id": app_id, "state.dir": str(tmp_path),
        "processing.guarantee": "exactly_once_v2", "commit.interval.ms": 100, "statestore.cache.max.bytes": CACHE})
    tasks = 8  # the word count's two sub-topologies over four partitions
    try:
        app.start()
        assert app.wait_for_state(AppState.RUNNING, timeout=60)
        cluster.produce(lines, records[:600])
        store = app.store("counts")
        wait_for(lambda: sum(store.get(w) or 0 for w in expected) > 0, 60, "some counting")

        assert app.add_stream_thread() == f"{app_id}-StreamThread-2"
        wait_for(lambda: _shared(app, 2, tasks), 60, "two threads sharing the tasks and the cache")
        cluster.produce(lines, records[600:1200])

        # the first thread started goes (Kafka's choice): its tasks move to the other one
        assert app.remove_stream_thread(timeout=60) == f"{app_id}-StreamThread-1"
        assert [t.name for t in app.threads] == [f"{app_id}-StreamThread-2"]
        wait_for(lambda: _shared(app, 1, tasks), 60, "the one thread left running every task with the whole cache")
        cluster.produce(lines, records[1200:])

        assert app.add_stream_thread() == f"{app_id}-StreamThread-1"  # the lowest free number again
        wait_for(lambda: _shared(app, 2, tasks), 60, "two threads sharing the tasks again")
        wait_for(lambda: all(store.get(w) == n for w, n in expected.items()), 60, "exact counts in the store")
        msgs = cluster.read_all(out, 4, until=lambda got: last_counts(got) == dict(expected))
        for word, seq in count_sequences(msgs).items():
            assert seq == sorted(set(seq)), (word, seq)  # every count written once, in order
    finally:
        assert app.close(timeout=60)
        cluster.close()
    # only a running app changes its thread count
    assert app.add_stream_thread() is None and app.remove_stream_thread() is None


def test_with_global_stores_the_cache_is_shared_with_the_global_thread_too(backend_config, tmp_path):
    """Kafka's cacheSizePerThread: statestore.cache.max.bytes over the stream threads plus one
    when the topology has global stores, each stream thread's and the global thread's, at start
    and when a thread is added."""
    cluster = Cluster(backend_config)
    lines, regions, out = unique("lines"), unique("regions"), unique("counts")
    cluster.create_topics(2, lines, out)
    cluster.create_topics(1, regions)
    b = StreamsBuilder()
    b.global_table(regions, key_serde=serdes.STRING, value_serde=serdes.STRING, store="regions")
    (b.stream(lines, key_serde=serdes.STRING, value_serde=serdes.STRING)
        .group_by(lambda key, word: word, key_serde=serdes.STRING, value_serde=serdes.STRING)
        .count(store="counts").to_stream().to(out, key_serde=serdes.STRING, value_serde=serdes.INT64))
    app = App(b.build(), {**cluster.config, "application.id": unique("global-share"), "state.dir": str(tmp_path),
                          "num.stream.threads": 2, "statestore.cache.max.bytes": CACHE})
    try:
        app.start()
        global_cache = app._global_thread.thread_cache  # the global table's, caching as Kafka's
        wait_for(lambda: app.state is AppState.RUNNING and _caches(app) == [CACHE // 3] * 2, 60,
                 "two stream threads, each with a third of the cache")
        assert global_cache.max_bytes == CACHE // 3
        cluster.produce(regions, [("u1", "eu")])  # the global thread polls, and so resizes, meanwhile
        assert app.add_stream_thread() is not None
        wait_for(lambda: _caches(app) == [CACHE // 4] * 3, 60, "three stream threads, each with a quarter")
        wait_for(lambda: global_cache.max_bytes == CACHE // 4, 60, "the global thread's cache a quarter too")
        wait_for(lambda: app.store("regions").get("u1") == "eu", 60, "the global table's update")
        assert len(global_cache) == 1  # held in the global thread's cache (flushed at a checkpoint)
    finally:
        assert app.close(timeout=60)
        cluster.close()
    # without global stores the stream threads share it alone (the test above), and a share
    # is never below one byte
    config = app.config
    assert config.thread_shares(2) == (CACHE // 2, config.input_buffer_max_bytes // 2)
    assert config.thread_shares(2, global_thread=True) == (CACHE // 3, config.input_buffer_max_bytes // 2)
    assert config.thread_shares(0, global_thread=True)[0] == CACHE  # global stores only: all of it


class _Gate(Processor):
    """Passes records through; the record "hold" waits for the test's `release` (at most 60 s)."""

    entered = threading.Event()
    release = threading.Event()

    def init(self, context):
        self.context = context

    def process(self, record):
        if record.value == "hold":
            type(self).entered.set()
            type(self).release.wait(60)
        self.context.forward(record)


def test_a_thread_that_cannot_stop_in_time_raises_and_stops_later(backend_config, tmp_path):
    cluster = Cluster(backend_config)
    src, sink = unique("in"), unique("out")
    cluster.create_topics(1, src, sink)
    app = App(pass_through_topology(src, sink, _Gate), {**cluster.config, "application.id": unique("gate"),
                                                      "state.dir": str(tmp_path)})
    _Gate.entered.clear()
    _Gate.release.clear()
    try:
        app.start()
        assert app.wait_for_state(AppState.RUNNING, timeout=60)
        cluster.produce(src, [(b"a", b"hold")])
        assert _Gate.entered.wait(60)
        thread = app.threads[0]
        with pytest.raises(ThreadRemovalTimeoutError, match="StreamThread-1 did not stop within 0.2 s"):
            app.remove_stream_thread(timeout=0.2)  # it is held in process()
        assert thread.is_alive() and thread.stopping
        _Gate.release.set()
        thread.join(60)
        assert thread.state is ThreadState.DEAD
        # no live thread is left to remove; the record it held was processed and written
        assert app.remove_stream_thread(timeout=10) is None
        out = cluster.read_all(sink, 1, until=lambda got: len(got) >= 1)
        assert [m.value() for m in out] == [b"hold"]
    finally:
        _Gate.release.set()
        assert app.close(timeout=60)
        cluster.close()


@pytest.mark.parametrize("timeout", [-1, -0.5, float("nan"), True, "5"])
def test_remove_stream_thread_rejects_a_bad_timeout(tmp_path, timeout):
    app = App(wordcount_topology("lines", "counts"), {"application.id": "bad-timeout",
                                                       "bootstrap.servers": f"local://{tmp_path}/cluster"})
    with pytest.raises(InvalidTimeoutError, match="timeout must be None or seconds >= 0"):
        app.remove_stream_thread(timeout=timeout)


def test_a_created_app_changes_no_thread_count(tmp_path):
    app = App(wordcount_topology("lines", "counts"), {"application.id": "not-started",
                                                       "bootstrap.servers": f"local://{tmp_path}/cluster"})
    assert app.add_stream_thread() is None
    assert app.remove_stream_thread(timeout=1) is None
    assert app.threads == [] and app.state is AppState.CREATED


def test_metadata_for_local_threads_names_each_threads_clients_and_tasks(backend_config, tmp_path):
    cluster = Cluster(backend_config)
    lines, out = unique("lines"), unique("counts")
    cluster.create_topics(2, lines, out)
    records, expected = make_lines(400, seed=17, vocabulary=30)
    app_id = unique("meta")
    app = App(wordcount_topology(lines, out), {
        **cluster.config, "application.id": app_id, "state.dir": str(tmp_path), "num.stream.threads": 2,
        "commit.interval.ms": 100})
    try:
        assert app.metadata_for_local_threads() == []
        app.start()
        assert app.wait_for_state(AppState.RUNNING, timeout=60)
        cluster.produce(lines, records)

        def committed_everything() -> list:
            """The metadata once the source tasks committed every line they read (else [])."""
            threads = app.metadata_for_local_threads()
            sources = [t for m in threads for t in m.active_tasks if t.task_id.subtopology == 0]
            ends = [t.end_offsets.get((lines, t.task_id.partition)) for t in sources]
            # Kafka's end offset is the last fetched record's: all committed is end + 1
            done = (len(sources) == 2 and None not in ends
                    and all(t.committed_offsets.get((lines, t.task_id.partition)) == end + 1
                            for t, end in zip(sources, ends)) and sum(ends) + 2 == len(records))
            return threads if done and app.state is AppState.RUNNING else []
        threads = wait_for(committed_everything, 60, "every line committed by the source tasks")
        assert sorted(m.thread_name for m in threads) == [f"{app_id}-StreamThread-1", f"{app_id}-StreamThread-2"]
        for m in threads:
            n = m.thread_name.rsplit("-", 1)[1]
            assert m.thread_state == "RUNNING"
            assert m.consumer_client_id == f"{app_id}-{app.process_id}-StreamThread-{n}-consumer"
            assert m.restore_consumer_client_id == f"{m.thread_name}-restore-consumer"
            assert m.producer_client_ids == {f"{m.thread_name}-producer"} and m.admin_client_id == f"{app_id}-admin"
            assert m.standby_tasks == ()  # one instance: nowhere else to keep them
        tasks = [t for m in threads for t in m.active_tasks]
        assert sorted(str(t.task_id) for t in tasks) == ["0_0", "0_1", "1_0", "1_1"]
        for t in tasks:
            (topic, partition), = t.topic_partitions
            assert partition == t.task_id.partition
            assert topic == lines if t.task_id.subtopology == 0 else topic.endswith("-repartition")
    finally:
        assert app.close(timeout=60)
        cluster.close()
    assert app.metadata_for_local_threads() == []  # (dead threads are not live)
