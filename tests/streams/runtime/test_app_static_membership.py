"""Static membership (KIP-345) for an App: `group.instance.id` goes to the main consumers only,
each with its stream thread's index appended (Kafka's StreamsConfig.getMainConsumerConfigs), so
that the threads of one instance are distinct static members instead of fencing each other; a
removed thread leaves the group; an instance fenced by another with its id fails."""

from __future__ import annotations

import pytest

from streams import App, AppState
from streams.errors import ConfigError
from streams.runtime.config import StreamsConfig

from _runtime_util import Cluster, last_counts, make_lines, shutdown_on_error, unique, wait_for, wordcount_topology


def test_each_stream_thread_joins_as_its_own_static_member(backend_config, tmp_path):
    cluster = Cluster(backend_config)
    lines, out = unique("lines"), unique("counts")
    cluster.create_topics(4, lines, out)
    records, expected = make_lines(400, seed=5, vocabulary=30)
    app_id, instance = unique("static"), unique("node")
    app = App(wordcount_topology(lines, out), {
        **cluster.config, "application.id": app_id, "state.dir": str(tmp_path), "num.stream.threads": 2,
        "group.instance.id": instance, "commit.interval.ms": 100, "consumer.session.timeout.ms": 30000})
    errors = shutdown_on_error(app)
    try:
        app.start()
        wait_for(lambda: app.state is AppState.RUNNING and all(t.active_task_ids for t in app.threads), 60,
                 "both threads running with tasks")
        group = cluster.admin.describe_consumer_groups([app_id])[app_id].result(10)
        assert sorted(m.group_instance_id for m in group.members) == [f"{instance}-1", f"{instance}-2"]
        cluster.produce(lines, records[:200])
        # a removed thread leaves the group, static as it is: its tasks move at once, not when
        # its 30 s session times out
        assert app.remove_stream_thread(timeout=60) == f"{app_id}-StreamThread-1"
        wait_for(lambda: app.state is AppState.RUNNING and len(app.threads[0].active_task_ids) == 8, 20,
                 "the remaining thread running every task")
        group = cluster.admin.describe_consumer_groups([app_id])[app_id].result(10)
        assert [m.group_instance_id for m in group.members] == [f"{instance}-2"]
        cluster.produce(lines, records[200:])
        cluster.read_all(out, 4, until=lambda got: last_counts(got) == dict(expected))
        assert not errors and app.state is AppState.RUNNING
    finally:
        assert app.close(timeout=60)
        cluster.close()


def test_group_instance_id_by_kafka_streams_precedence_and_checked():
    base = {"application.id": "app", "bootstrap.servers": "local://"}
    plain = StreamsConfig.parse({**base, "group.instance.id": "a"})
    assert plain.main_consumer_instance_id(1) == "a-1" and plain.main_consumer_instance_id(3) == "a-3"
    # the main consumer's prefix over the consumers' over the plain key
    assert StreamsConfig.parse({**base, "group.instance.id": "a", "consumer.group.instance.id": "b"}
                               ).main_consumer_instance_id(2) == "b-2"
    both = StreamsConfig.parse({**base, "consumer.group.instance.id": "b", "main.consumer.group.instance.id": "c"})
    assert both.main_consumer_instance_id(1) == "c-1"
    # no other client gets it: not the backend's base (producers, admin, the app's own readers),
    # not the restore or global consumers even when set under their prefixes
    restore = StreamsConfig.parse({**base, "group.instance.id": "a", "restore.consumer.group.instance.id": "r",
                                   "global.consumer.group.instance.id": "g"})
    assert not any("group.instance.id" in key for key in restore.backend_config())
    assert "group.instance.id" not in restore.consumer_overrides("restore.consumer.")
    assert "group.instance.id" not in restore.consumer_overrides("global.consumer.")
    assert StreamsConfig.parse(base).main_consumer_instance_id(1) is None
    for bad in ("", "has space", "x" * 250, 7):
        with pytest.raises(ConfigError, match="group.instance.id"):
            StreamsConfig.parse({**base, "consumer.group.instance.id": bad})


def test_an_instance_fenced_by_another_with_its_group_instance_id_fails(backend_config, tmp_path):
    """Two instances given the same group.instance.id: the later one's consumers fence the
    earlier one's, whose thread fails with the consumer's fatal error (Kafka's
    FencedInstanceIdException from poll) instead of running on outside the group."""
    cluster = Cluster(backend_config)
    lines, out = unique("lines"), unique("counts")
    cluster.create_topics(2, lines, out)
    app_id, instance = unique("static"), unique("node")

    def make(name: str) -> App:
        return App(wordcount_topology(lines, out), {
            **cluster.config, "application.id": app_id, "state.dir": str(tmp_path / name),
            "group.instance.id": instance, "commit.interval.ms": 100})
    first, second = make("first"), make("second")
    errors = shutdown_on_error(first)
    try:
        first.start()
        assert first.wait_for_state(AppState.RUNNING, timeout=60)
        second.start()
        wait_for(lambda: errors, 60, "the first instance's thread to fail")
        assert "Static consumer fenced" in str(errors[0])
        wait_for(lambda: first.state in (AppState.ERROR, AppState.NOT_RUNNING), 60, "the first instance to stop")
    finally:
        assert first.close(timeout=60)
        assert second.close(timeout=60)
        cluster.close()


def test_a_restarted_instance_takes_its_tasks_back_and_one_closed_with_leave_group_hands_them_over(
        backend_config, tmp_path):
    """An instance closed as a static member keeps its place in the group (its session is
    30 s here): restarted, it gets its own tasks back and the other instance's never move.
    close(leave_group=True) (Kafka's CloseOptions.leaveGroup) takes it out at once: the other
    instance runs every task well within the session timeout."""
    cluster = Cluster(backend_config)
    lines, out = unique("lines"), unique("counts")
    cluster.create_topics(4, lines, out)
    records, expected = make_lines(300, seed=9, vocabulary=30)
    app_id = unique("static")

    def make(name: str) -> App:
        return App(wordcount_topology(lines, out), {
            **cluster.config, "application.id": app_id, "state.dir": str(tmp_path / name),
            "group.instance.id": f"{app_id}-{name}", "commit.interval.ms": 100,
            "consumer.session.timeout.ms": 30000})
    a, b = make("a"), make("b")
    restarted = None
    try:
        a.start()
        assert a.wait_for_state(AppState.RUNNING, timeout=60)
        b.start()
        wait_for(lambda: all(x.state is AppState.RUNNING and x.threads[0].active_task_ids for x in (a, b))
                 and len(a.threads[0].active_task_ids) + len(b.threads[0].active_task_ids) == 8, 60,
                 "a and b sharing the tasks")
        cluster.produce(lines, records[:150])
        kept, given = set(a.threads[0].active_task_ids), set(b.threads[0].active_task_ids)
        assert b.close(timeout=60)
        assert len(cluster.admin.describe_consumer_groups([app_id])[app_id].result(10).members) == 2
        restarted = make("b")
        restarted.start()
        seen: list = []

        def back() -> bool:
            seen.append(set(a.threads[0].active_task_ids))
            return restarted.state is AppState.RUNNING and set(restarted.threads[0].active_task_ids) == given
        wait_for(back, 60, "the restarted instance running its own tasks again")
        assert all(tasks == kept for tasks in seen), seen  # nothing of b's moved to a meanwhile
        cluster.produce(lines, records[150:])
        cluster.read_all(out, 4, until=lambda got: last_counts(got) == dict(expected))

        assert a.close(timeout=60, leave_group=True)
        wait_for(lambda: restarted.state is AppState.RUNNING and len(restarted.threads[0].active_task_ids) == 8,
                 20, "the restarted instance running every task, long before a's session would end")
    finally:
        for app in (a, b, restarted):
            if app is not None:
                assert app.close(timeout=60)
        cluster.close()
