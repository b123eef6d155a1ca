"""task.timeout.ms of the StoreChangelogReader: a changelog whose offsets cannot be fetched (the
topic does not exist, or the offset source fails) raises RestoreTimeoutError naming the changelog
once task.timeout.ms has passed since the first failure; offsets that become available in time
let the restore go on normally.

Runs on the embedded cluster: an unknown topic is answered UNKNOWN_TOPIC_OR_PART at once by both
the consumer's watermark query and the admin's ListOffsets (a real fault, not a stand-in).
"""

from __future__ import annotations

import threading
import time
import uuid

import pytest
from confluent_kafka import KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import NewTopic

from state.directory import StateDirectory
from state.errors import RestoreTimeoutError, StateError
from state.logging_store import ChangeLoggingKeyValueStore
from state.manager import ProcessorStateManager, TaskType, close_state_manager, register_state_stores
from state.restore import ChangelogState, StoreChangelogReader, restore_consumer_config
from state.rocksdb_kv import RocksDBKeyValueStore
from state.task_id import TaskId

TASK = TaskId(0, 0)
STORE = "counts"
_pause = threading.Event()  # never set: short bounded pauses between restore steps


@pytest.fixture(scope="module")
def backend(tmp_path_factory):
    from streams.backends import for_config

    local = for_config({"bootstrap.servers": f"local://{tmp_path_factory.mktemp('cluster')}"})
    try:
        yield local
    finally:
        local.close()


class Env:
    def __init__(self, backend, tmp_path):
        self.backend = backend
        self.app = f"rto-{uuid.uuid4().hex[:10]}"
        self.topic = f"{self.app}-{STORE}-changelog"
        self.tp = TopicPartition(self.topic, TASK.partition)
        self.state_directory = StateDirectory(tmp_path / "state", self.app)
        self.admin = backend.admin({})
        self.consumers = []
        self.managers = []

    def create_topic(self, records):
        for f in self.admin.create_topics([NewTopic(self.topic, 1, 1)]).values():
            f.result(timeout=30)
        producer = self.backend.producer({})
        for k, v in records:
            producer.produce(self.topic, key=k, value=v, partition=TASK.partition)
        assert producer.flush(30) == 0

    def open(self):
        mgr = ProcessorStateManager(TASK, TaskType.ACTIVE, False, self.state_directory)
        register_state_stores(mgr, [ChangeLoggingKeyValueStore(RocksDBKeyValueStore(STORE))])
        self.managers.append(mgr)
        return mgr

    def reader(self, source, task_timeout_ms, end_offsets_fn=None):
        consumer = self.backend.consumer({**restore_consumer_config(False), "client.id": f"{self.app}-restore"})
        self.consumers.append(consumer)
        kw = {"admin": self.admin} if source == "admin" else {}
        return StoreChangelogReader(consumer, eos_enabled=False, task_timeout_ms=task_timeout_ms,
                                    end_offsets_fn=end_offsets_fn, poll_ms=10, **kw)

    def close(self):
        for mgr in self.managers:
            close_state_manager(mgr, dirty=True)
        for c in self.consumers:
            c.close()
        self.state_directory.close()


@pytest.fixture
def env(backend, tmp_path):
    e = Env(backend, tmp_path)
    yield e
    e.close()


def restore_until_error(reader, timeout_s=30.0):
    """Step the reader until it raises; return (error, seconds from the first step, steps)."""
    start = time.monotonic()
    steps = 0
    while True:
        assert time.monotonic() - start < timeout_s, "the restore never gave up"
        try:
            assert reader.restore() == 0
        except StateError as e:
            return e, time.monotonic() - start, steps
        steps += 1
        _pause.wait(0.005)


@pytest.mark.parametrize("source", ["consumer", "admin"])
def test_missing_changelog_topic_times_out_naming_the_changelog(env, source):
    mgr = env.open()
    reader = env.reader(source, task_timeout_ms=300)
    reader.register(env.tp, mgr)
    err, elapsed, steps = restore_until_error(reader)
    assert isinstance(err, RestoreTimeoutError)
    assert f"changelog {env.topic}-0" in str(err)
    assert "task.timeout.ms (300 ms)" in str(err)
    # it kept trying (every step failed to fetch the offsets) until task.timeout.ms had passed
    assert elapsed >= 0.3
    assert steps >= 1
    assert reader.changelog_state(env.tp) is ChangelogState.REGISTERED
    assert not reader.completed_changelogs()


def test_failing_end_offsets_fn_times_out(env):
    calls = []

    def end_offsets(tps):
        calls.append(list(tps))
        raise KafkaException(KafkaError(KafkaError.REQUEST_TIMED_OUT, "list offsets timed out"))

    mgr = env.open()
    reader = env.reader("fn", task_timeout_ms=200, end_offsets_fn=end_offsets)
    reader.register(env.tp, mgr)
    err, elapsed, _ = restore_until_error(reader)
    assert isinstance(err, RestoreTimeoutError)
    assert f"{env.topic}-0" in str(err) and "task.timeout.ms (200 ms)" in str(err)
    assert elapsed >= 0.2
    assert len(calls) >= 2 and all(c == [env.tp] for c in calls)


@pytest.mark.parametrize("source", ["consumer", "admin"])
def test_offsets_available_before_the_timeout_restore_normally(env, source):
    """The changelog topic appears (with records) after several failed fetches, well within
    task.timeout.ms: the restore then starts and completes with every record."""
    mgr = env.open()
    reader = env.reader(source, task_timeout_ms=60_000)
    reader.register(env.tp, mgr)
    for _ in range(5):
        assert reader.restore() == 0
        assert reader.changelog_state(env.tp) is ChangelogState.REGISTERED
    records = [(b"k%d" % (i % 7), b"v%d" % i) for i in range(50)]
    env.create_topic(records)
    deadline = time.monotonic() + 30
    while env.tp not in reader.completed_changelogs():
        assert time.monotonic() < deadline, "restore did not complete"
        reader.restore()
    expected = {}
    for k, v in records:
        expected[k] = v
    with mgr.get_store(STORE).all() as it:
        assert dict(it) == expected
    assert mgr.store_offset(env.tp) == 49


def test_end_offsets_fn_recovering_before_the_timeout(env):
    """An offset source that fails a few times then answers: no timeout, normal restore."""
    env.create_topic([(b"a", b"1"), (b"b", b"2"), (b"a", b"3")])
    failures = [3]

    def end_offsets(tps):
        if failures[0] > 0:
            failures[0] -= 1
            raise KafkaException(KafkaError(KafkaError.LEADER_NOT_AVAILABLE, "no leader yet"))
        return {tp: (0, 3) for tp in tps}

    mgr = env.open()
    reader = env.reader("fn", task_timeout_ms=60_000, end_offsets_fn=end_offsets)
    reader.register(env.tp, mgr)
    deadline = time.monotonic() + 30
    while not reader.all_changelogs_completed():
        assert time.monotonic() < deadline, "restore did not complete"
        reader.restore()
    assert failures[0] == 0
    with mgr.get_store(STORE).all() as it:
        assert dict(it) == {b"a": b"3", b"b": b"2"}
