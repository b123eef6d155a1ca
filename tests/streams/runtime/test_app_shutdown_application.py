"""SHUTDOWN_APPLICATION: a thread's failure on one instance stops every instance of the
application (each ends in ERROR, as Kafka Streams clients do on SHUTDOWN_REQUESTED), through a
request on the application's shutdown-request topic; a request made before an instance started
does not stop it."""

from __future__ import annotations

import json
import threading

import pytest

from streams import App, AppState, Processor, StreamThreadExceptionResponse
from streams.errors import InternalTopicPartitionMismatchError
from streams.internal_topics import InternalTopicManager
from streams.runtime.shutdown_requests import ShutdownRequests, shutdown_topic_name, shutdown_topic_spec

from _runtime_util import Cluster, Exploding, pass_through_topology, unique, wait_for


class PassThrough(Processor):
    def init(self, context):
        self.context = context

    def process(self, record):
        self.context.forward(record)


def test_shutdown_application_stops_every_instance(backend_config, tmp_path):
    cluster = Cluster(backend_config)
    src, sink, app_id = unique("in"), unique("out"), unique("shutdown-app")
    cluster.create_topics(2, src, sink)
    apps, handled, states, owner = _two_instances_fail(cluster, tmp_path, src, sink, app_id)
    other = "b" if owner == "a" else "a"
    try:
        for name, app in apps.items():
            assert app.wait_for_state(AppState.ERROR, timeout=60), (name, app.state)
        # only the owner of partition 0 failed; the other instance stopped on its request
        assert len(handled[owner]) == 1 and "bad record" in str(handled[owner][0])
        assert handled[other] == []
        assert states[other][-2:] == [AppState.PENDING_ERROR, AppState.ERROR]
        [request] = cluster.read_all(shutdown_topic_name(app_id), 1, until=lambda got: len(got) >= 1)
        assert request.key().decode() == apps[owner].process_id
        details = json.loads(request.value())
        assert details["process_id"] == apps[owner].process_id and "bad record" in details["error"]
    finally:
        for app in apps.values():
            assert app.close(timeout=60)
        cluster.close()
    assert all(app.state is AppState.NOT_RUNNING for app in apps.values())


def _two_instances_fail(cluster: Cluster, tmp_path, src: str, sink: str, app_id: str,
                        ) -> tuple[dict, dict, dict, str]:
    """Two instances of `app_id` whose handler answers SHUTDOWN_APPLICATION; a poison record on
    partition 0 fails its owner. (apps, handled exceptions, state changes) by name, and the
    name of partition 0's owner; the apps are left for the caller to close."""
    apps, handled, states = {}, {}, {}
    for name in ("a", "b"):
        app = App(pass_through_topology(src, sink, Exploding),
                  {**cluster.config, "application.id": app_id, "state.dir": str(tmp_path / name)})
        handled[name], states[name] = [], []
        app.set_uncaught_exception_handler(
            lambda exc, seen=handled[name]: seen.append(exc) or StreamThreadExceptionResponse.SHUTDOWN_APPLICATION)
        app.set_state_listener(lambda new, old, seen=states[name]: seen.append(new))
        apps[name] = app
    for app in apps.values():
        app.start()
    wait_for(lambda: all(app.state is AppState.RUNNING and app.local_tasks()["active"] for app in apps.values()),
             90, "both instances running with a task each")
    owner = next(n for n, app in apps.items() if any(t.partition == 0 for t in app.local_tasks()["active"]))
    cluster.produce(src, [(b"k1", b"fine"), (b"k2", b"boom")], partition=0)
    return apps, handled, states, owner


@pytest.mark.needs_faithful_broker(reason="a group whose members all leave during a pending (delayed) join "
                                          "assigns nothing to a new member (measured: none in 60 s; 3 s when "
                                          "the members leave 12 s after the failure)")
def test_a_later_run_is_not_stopped_by_an_old_request(backend_config, tmp_path):
    cluster = Cluster(backend_config)
    src, sink, app_id = unique("in"), unique("out"), unique("shutdown-app")
    cluster.create_topics(2, src, sink)
    apps, _handled, _states, _owner = _two_instances_fail(cluster, tmp_path, src, sink, app_id)
    try:
        for app in apps.values():
            assert app.wait_for_state(AppState.ERROR, timeout=60)
    finally:
        for app in apps.values():
            assert app.close(timeout=60)
    again = App(pass_through_topology(src, sink, PassThrough),
                {**cluster.config, "application.id": app_id, "state.dir": str(tmp_path / "a")})
    try:
        again.start()
        assert again.wait_for_state(AppState.RUNNING, timeout=60)
        cluster.produce(src, [(b"k3", b"after")], partition=1)
        # the poison record is passed through now, and the new record too
        cluster.read_all(sink, 2, until=lambda got: {b"boom", b"after"} <= {m.value() for m in got})
        assert again._shutdown_requests.poll() is None
        assert again.state is AppState.RUNNING
    finally:
        assert again.close(timeout=60)
        cluster.close()


def test_shutdown_requests_count_only_requests_made_after_start(backend_config):
    cluster = Cluster(backend_config)
    app_id = unique("requests")
    try:
        InternalTopicManager(cluster.admin).make_ready({shutdown_topic_name(app_id): shutdown_topic_spec()})
        early = ShutdownRequests(cluster.backend, cluster.admin, app_id, "process-1")
        early.start()
        assert early.poll() is None
        assert early.send("StreamThread-1", ValueError("broken input"))
        request = wait_for(early.poll, 30, "the request seen")
        assert request.offset == 0
        assert request.details["process_id"] == "process-1" and request.details["thread"] == "StreamThread-1"
        assert request.details["error"] == "ValueError: broken input"
        assert "process-1" in request.describe() and "broken input" in request.describe()
        late = ShutdownRequests(cluster.backend, cluster.admin, app_id, "process-2")
        late.start()
        assert late.poll() is None  # made before it started
        assert late.send("StreamThread-2", RuntimeError("second"))
        second = wait_for(late.poll, 30, "the second request seen")
        assert second.offset == 1 and second.details["process_id"] == "process-2"
    finally:
        cluster.close()


class _CountingAdmin:
    """The real admin client, counting the end-offset reads made through it that came back
    without an answer (`failed`) and with one (`answered`)."""

    def __init__(self, admin) -> None:
        self.admin, self.failed, self.answered = admin, 0, 0

    def list_offsets(self, *args, **kwargs):
        futures = self.admin.list_offsets(*args, **kwargs)
        for future in futures.values():
            future.add_done_callback(self._done)
        return futures

    def _done(self, future) -> None:
        if future.exception() is None:
            self.answered += 1
        else:
            self.failed += 1


def test_a_start_before_the_topic_answers_still_counts_requests_made_after_it(backend_config):
    """start() reads the end offset again until the topic answers (a topic just created may not
    yet): a request made after the start is seen, not taken for one made before it."""
    cluster = Cluster(backend_config)
    app_id = unique("late-topic")
    try:
        admin = _CountingAdmin(cluster.admin)
        requests = ShutdownRequests(cluster.backend, admin, app_id, "process-1")
        starting = threading.Thread(target=requests.start, kwargs={"timeout_s": 60})
        starting.start()
        # the topic is created only once a read has come back without it (created while that read
        # is still on its way, the read could answer, and start() would not need to read again)
        wait_for(lambda: admin.failed >= 1, 30, "a first read, of a topic that does not exist yet, failed")
        assert admin.answered == 0
        InternalTopicManager(cluster.admin).make_ready({shutdown_topic_name(app_id): shutdown_topic_spec()})
        starting.join(60)
        assert not starting.is_alive()
        # start() read again and got an answer (its callback may run just after start() returns)
        wait_for(lambda: admin.answered >= 1, 30, "a later read answered")
        assert requests.poll() is None
        assert requests.send("StreamThread-1", ValueError("after the start"))
        request = wait_for(requests.poll, 30, "the request made after the start seen")
        assert request.offset == 0 and request.details["error"] == "ValueError: after the start"
    finally:
        cluster.close()


def test_a_shutdown_topic_with_the_wrong_partition_count_fails_the_start_naming_it(backend_config, tmp_path):
    cluster = Cluster(backend_config)
    src, sink, app_id = unique("in"), unique("out"), unique("bad-topic")
    cluster.create_topics(1, src, sink)
    cluster.create_topics(2, shutdown_topic_name(app_id))
    app = App(pass_through_topology(src, sink, PassThrough),
              {**cluster.config, "application.id": app_id, "state.dir": str(tmp_path)})
    try:
        with pytest.raises(InternalTopicPartitionMismatchError) as caught:
            app.start()
        assert shutdown_topic_name(app_id) in str(caught.value) and "partition" in str(caught.value)
    finally:
        app.close(timeout=30)
        cluster.close()
