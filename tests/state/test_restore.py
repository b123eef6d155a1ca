"""StoreChangelogReader + ProcessorStateManager + RocksDB stores against real brokers.

The `backend` fixture gives producer/consumer/admin factories with the confluent-kafka API and is
parametrized over the embedded cluster (`streams.backends.for_config("local://...")`: three
in-process brokers, transactions, compaction, DeleteRecords) and Kafka (the session broker of
`streams.testing.kafka_fixture`; on Tansu the `needs_faithful_broker` cases are skipped). Cases
that look inside the broker (compaction) run on the embedded cluster only.
"""

from __future__ import annotations

import threading
import time
import uuid

import pytest
from confluent_kafka import KafkaError, Message, TopicPartition
from confluent_kafka.admin import NewTopic

from state.checkpoint import OffsetCheckpoint
from state.directory import StateDirectory
from state.errors import (
    CheckpointError,
    IllegalStateTransitionError,
    LockError,
    RestoreListenerError,
    StateError,
    TaskCorruptedError,
)
from state.listener import StandbyUpdateListener, StateRestoreListener, SuspendReason
from state.cache import CachingKeyValueStore, ThreadCache
from state.logging_store import ChangeLoggingKeyValueStore
from state.manager import ProcessorStateManager, TaskType, close_state_manager, register_state_stores
from state.restore import (
    ChangelogState,
    ReaderState,
    StoreChangelogReader,
    restore_consumer_config,
)
from state.rocksdb_kv import RocksDBKeyValueStore
from state.task_id import TaskId
from streams.testing.kafka_fixture import skip_if_unfaithful

pytestmark = pytest.mark.integration

TASK = TaskId(0, 1)
STORE = "counts"


BACKEND_KINDS = ["embedded", "kafka"]


class Backend:
    """Producer/consumer/admin factories with the confluent-kafka API, plus what tests need to
    know: the embedded `LocalCluster` (None on Kafka) and the Kafka broker (None embedded)."""

    def __init__(self, kind, factories, cluster=None, broker=None):
        self.kind = kind
        self.factories = factories
        self.cluster = cluster
        self.broker = broker

    def producer(self, conf: dict):
        return self.factories.producer(conf)

    def consumer(self, conf: dict):
        return self.factories.consumer(conf)

    def admin(self, conf: dict):
        return self.factories.admin(conf)


@pytest.fixture(scope="module", params=BACKEND_KINDS)
def backend_under_test(request, tmp_path_factory):
    if request.param == "embedded":
        from streams.backends import for_config

        directory = tmp_path_factory.mktemp("embedded-cluster")
        local = for_config({"bootstrap.servers": f"local://{directory}"})
        try:
            yield Backend("embedded", local, cluster=local.cluster)
        finally:
            local.close()
    else:
        from connectors.kafka import KafkaBackend

        broker = request.getfixturevalue("kafka_broker")
        yield Backend("kafka", KafkaBackend(broker.bootstrap_servers), broker=broker)


@pytest.fixture
def backend(backend_under_test, request):
    if backend_under_test.broker is not None:
        skip_if_unfaithful(request.node, backend_under_test.broker)
    return backend_under_test


#: Runs a test on the embedded cluster only: it looks inside the broker (compaction) or needs a
#: fault the Kafka test broker cannot produce.
embedded_only = pytest.mark.parametrize("backend_under_test", ["embedded"], indirect=True)


class Recorder(StateRestoreListener, StandbyUpdateListener):
    def __init__(self):
        self.calls = []
        self.on_start_hook = None

    def on_restore_start(self, tp, store_name, start_offset, end_offset):
        self.calls.append(("start", tp.topic, tp.partition, store_name, start_offset, end_offset))
        if self.on_start_hook:
            self.on_start_hook()

    def on_batch_restored(self, tp, store_name, batch_end_offset, num_restored):
        self.calls.append(("batch", batch_end_offset, num_restored))

    def on_restore_end(self, tp, store_name, total_restored):
        self.calls.append(("end", total_restored))

    def on_restore_suspended(self, tp, store_name, total_restored):
        self.calls.append(("suspended", total_restored))

    def on_update_start(self, tp, store_name, start_offset):
        self.calls.append(("update_start", start_offset))

    def on_batch_loaded(self, tp, store_name, batch_end_offset, num_loaded):
        self.calls.append(("loaded", batch_end_offset, num_loaded))

    def on_update_suspended(self, tp, store_name, store_offset, reason):
        self.calls.append(("update_suspended", store_offset, reason))

    def kinds(self):
        return [c[0] for c in self.calls]

    def restored(self):
        return sum(c[2] for c in self.calls if c[0] == "batch")


class Env:
    """One application's changelog topic plus helpers to open its task state."""

    def __init__(self, backend, tmp_path, topic_config=None, producer_conf=None, compacted=False):
        self.backend = backend
        self.app = f"rt-{uuid.uuid4().hex[:10]}"
        self.topic = f"{self.app}-{STORE}-changelog"
        self.tp = TopicPartition(self.topic, TASK.partition)
        self.state_directory = StateDirectory(tmp_path / "state", self.app)
        admin = backend.admin({})
        replication_factor = 3 if backend.kind == "embedded" else 1
        config = {"cleanup.policy": "compact", **(topic_config or {})}
        if not compacted:
            # A compacted topic refuses a null-key record (INVALID_RECORD, on both backends) and the
            # workloads carry one to show that restore skips it: their changelog keeps delete only.
            # (Compaction itself runs on the embedded cluster here, and on Kafka in tests/integration.)
            config["cleanup.policy"] = "delete"
        futures = admin.create_topics([NewTopic(self.topic, 2, replication_factor, config=config)])
        for f in futures.values():
            f.result(timeout=30)
        self.producer = backend.producer({"linger.ms": 5, **(producer_conf or {})})
        self.delivery_errors = []
        self.consumers = []
        self.expected: dict[bytes, bytes] = {}
        self.count = 0  # records in the changelog partition

    def produce(self, records):
        """Append (key, value) records to the task's changelog partition.

        The last record goes alone in its own batch: Tansu's ListOffsets reports a wrong end
        offset otherwise (harmless elsewhere)."""
        records = list(records)
        for i, (k, v) in enumerate(records):
            if i == len(records) - 1:
                self.producer.flush(30)
            self.producer.produce(self.topic, key=k, value=v, partition=TASK.partition, on_delivery=self._delivered)
        assert self.producer.flush(30) == 0
        assert not self.delivery_errors, self.delivery_errors[:3]
        self.expected = latest_values(records, self.expected)
        self.count += len(records)

    def _delivered(self, err, msg):
        if err is not None:
            self.delivery_errors.append(err)

    def open(self, eos=False, task_type=TaskType.ACTIVE, *, collector=None, caching=False, thread_cache=None):
        mgr = ProcessorStateManager(TASK, task_type, eos, self.state_directory, collector=collector,
                                    thread_cache=thread_cache)
        store = ChangeLoggingKeyValueStore(RocksDBKeyValueStore(STORE))
        if caching:
            store = CachingKeyValueStore(store)
        register_state_stores(mgr, [store])
        return mgr

    def reader(self, eos=False, listener=None, consumer_conf=None, **kw):
        consumer = self.backend.consumer({**restore_consumer_config(eos), "client.id": f"{self.app}-restore",
                                          **(consumer_conf or {})})
        self.consumers.append(consumer)
        rec = listener or Recorder()
        return StoreChangelogReader(consumer, rec, eos_enabled=eos, standby_listener=rec, **kw), rec

    def log_offsets(self):
        """(log start, log end) of the changelog partition, from the broker."""
        consumer = self.backend.consumer({"group.id": f"{self.app}-probe"})
        try:
            return consumer.get_watermark_offsets(self.tp, timeout=30, cached=False)
        finally:
            consumer.close()

    def await_stable_end(self, end, timeout_s=30.0):
        """Wait until a read_committed consumer's end of the changelog partition (its last stable
        offset) reaches `end`. A transactional producer's commit or abort returns once the
        coordinator has it; a real broker writes the partition's marker after that, and until
        then read_committed readers, a restore among them, end before the transaction."""
        consumer = self.backend.consumer({"group.id": f"{self.app}-lso-probe", "isolation.level": "read_committed"})
        try:
            deadline = time.monotonic() + timeout_s
            while (stable := consumer.get_watermark_offsets(self.tp, timeout=30, cached=False)[1]) < end:
                assert time.monotonic() < deadline, f"the last stable offset stayed at {stable}, not {end}"
        finally:
            consumer.close()

    def read(self, offset, n, timeout_s=30.0):
        """The (key, value) of the `n` records from `offset` of the changelog partition."""
        consumer = self.backend.consumer({"group.id": f"{self.app}-reader", "auto.offset.reset": "earliest"})
        try:
            consumer.assign([TopicPartition(self.topic, TASK.partition, offset)])
            out = []
            deadline = time.monotonic() + timeout_s
            while len(out) < n:
                assert time.monotonic() < deadline, f"read {len(out)} of {n} records"
                out.extend((m.key(), m.value()) for m in consumer.consume(n - len(out), 0.1) if m.error() is None)
            return out
        finally:
            consumer.close()

    def leader_log(self):
        """The embedded leader's `replication.log.Log` of the changelog partition."""
        cluster = self.backend.cluster
        return cluster.partition_on(cluster.leader(self.topic, TASK.partition), self.topic, TASK.partition).log

    def close(self):
        for c in self.consumers:
            c.close()
        self.state_directory.close()


class ProducerCollector:
    """The record collector of an active task on a real producer: changelog writes go to the
    broker; `offsets()` gives the last offset written per partition (from delivery reports)."""

    def __init__(self, producer):
        self.producer = producer
        self._offsets = {}
        self.errors = []

    def _delivered(self, err, msg):
        if err is not None:
            self.errors.append(err)
        else:
            self._offsets[(msg.topic(), msg.partition())] = msg.offset()

    def send(self, topic, key, value, *, partition, timestamp, headers=None):
        self.producer.produce(topic, key=key, value=value, partition=partition, timestamp=timestamp,
                              on_delivery=self._delivered)

    def flush(self):
        assert self.producer.flush(30) == 0 and not self.errors

    def offsets(self):
        self.flush()
        return {TopicPartition(t, p): o for (t, p), o in self._offsets.items()}


@pytest.fixture
def env(backend, tmp_path):
    e = Env(backend, tmp_path)
    yield e
    e.close()


@pytest.fixture
def make_env(backend, tmp_path):
    made = []

    def make(**kw):
        e = Env(backend, tmp_path / f"env{len(made)}", **kw)
        made.append(e)
        return e

    yield make
    for e in made:
        e.close()


def latest_values(records, start=None):
    """What a store holds after applying `records` in order on top of `start` (tombstones delete,
    null-key records are dropped)."""
    out = dict(start or {})
    for k, v in records:
        if k is None:
            continue
        if v is None:
            out.pop(k, None)
        else:
            out[k] = v
    return out


def workload(n, start=0):
    """n changelog records: 30% overwrites, some tombstones, one null-key record."""
    out = []
    for i in range(start, start + n):
        if i % 10 == 3:
            out.append((b"key-%05d" % (i // 3), b"overwrite-%d" % i))
        elif i % 97 == 5:
            out.append((b"key-%05d" % (i - 1), None))
        elif i % 1000 == 500:
            out.append((None, b"null key: dropped"))
        else:
            out.append((b"key-%05d" % i, b"value-%d" % i))
    return out


def restore_until(reader, predicate, timeout_s=30.0):
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, "restore did not reach the expected state in time"
        reader.restore()


def store_contents(mgr):
    with mgr.get_store(STORE).all() as it:
        return dict(it)


def null_keys(n, start=0):
    return sum(1 for k, _ in workload(n, start) if k is None)


def test_restore_from_beginning_without_checkpoint(env):
    env.produce(workload(2500))
    mgr = env.open()
    reader, rec = env.reader()
    reader.register(env.tp, mgr)
    assert reader.changelog_state(env.tp) is ChangelogState.REGISTERED
    restore_until(reader, lambda: env.tp in reader.completed_changelogs())
    assert reader.changelog_state(env.tp) is ChangelogState.COMPLETED
    assert store_contents(mgr) == env.expected
    assert mgr.store_offset(CL := env.tp) == 2499
    assert reader.restored_offsets() == {CL: 2499}
    assert rec.calls[0] == ("start", env.topic, 1, STORE, 0, 2500)
    assert rec.calls[-1] == ("end", 2500 - null_keys(2500))
    assert rec.restored() == 2500 - null_keys(2500)
    assert reader.restore() == 0  # nothing left to do
    close_state_manager(mgr, dirty=False)
    assert OffsetCheckpoint(mgr.checkpoint_file.path).read() == {env.tp: 2499}


def test_max_poll_records_bounds_each_batch_and_everything_is_restored(env):
    """The reader's max_poll_records (the App hands it restore.consumer.max.poll.records, see
    tests/streams/runtime/test_max_poll_records.py): each batch it applies holds at most that many
    records, and the store still ends with every record."""
    env.produce(workload(300))
    mgr = env.open()
    reader, rec = env.reader(max_poll_records=7)
    reader.register(env.tp, mgr)
    restore_until(reader, lambda: env.tp in reader.completed_changelogs())
    assert store_contents(mgr) == env.expected
    batches = [c[2] for c in rec.calls if c[0] == "batch"]
    assert len(batches) >= 300 // 7 and max(batches) <= 7
    close_state_manager(mgr, dirty=False)


@embedded_only  # the constructor's check: no client is involved
@pytest.mark.parametrize("bad", [0, -1, 2.5, "7", True])
def test_a_bad_max_poll_records_is_refused(env, bad):
    with pytest.raises(StateError, match="max_poll_records must be an int >= 1"):
        env.reader(max_poll_records=bad)


def test_restore_after_clean_close_restores_only_the_tail(env):
    env.produce(workload(1200))
    mgr = env.open()
    reader, _ = env.reader()
    reader.register(env.tp, mgr)
    restore_until(reader, lambda: reader.all_changelogs_completed())
    reader.unregister([env.tp])
    close_state_manager(mgr, dirty=False)

    env.produce(workload(30, start=1200))
    mgr = env.open()
    assert mgr.store_offset(env.tp) == 1199
    reader, rec = env.reader()
    reader.register(env.tp, mgr)
    restore_until(reader, lambda: reader.all_changelogs_completed())
    assert rec.calls[0] == ("start", env.topic, 1, STORE, 1200, 1230)
    assert rec.calls[-1] == ("end", 30 - null_keys(30, 1200))
    assert store_contents(mgr) == env.expected
    close_state_manager(mgr, dirty=False)


def test_checkpoint_at_end_completes_without_records(env):
    env.produce(workload(10))
    mgr = env.open()
    mgr.update_changelog_offsets({env.tp: 9})
    reader, rec = env.reader()
    reader.register(env.tp, mgr)
    reader.restore()
    assert reader.completed_changelogs() == {env.tp}
    assert rec.kinds() == ["start", "end"] and rec.calls[-1] == ("end", 0)
    close_state_manager(mgr, dirty=True)


def test_empty_changelog_completes_immediately(env):
    mgr = env.open()
    reader, rec = env.reader()
    reader.register(env.tp, mgr)
    reader.restore()
    assert reader.completed_changelogs() == {env.tp}
    assert rec.calls == [("start", env.topic, 1, STORE, 0, 0), ("end", 0)]
    close_state_manager(mgr, dirty=True)


def test_records_after_the_end_offset_are_not_restored(env):
    env.produce(workload(400))
    mgr = env.open()
    reader, rec = env.reader()
    before = dict(env.expected)
    # Written once the end offset is fixed, before the first fetch: must not be restored.
    rec.on_start_hook = lambda: env.produce([(b"late-%d" % i, b"x") for i in range(50)])
    reader.register(env.tp, mgr)
    restore_until(reader, lambda: reader.all_changelogs_completed())
    assert env.count == 450
    assert store_contents(mgr) == before
    assert mgr.store_offset(env.tp) == 399
    assert rec.calls[0][-1] == 400
    close_state_manager(mgr, dirty=True)


def test_listener_call_order_and_counts(env):
    env.produce(workload(3500))
    mgr = env.open()
    reader, rec = env.reader()
    reader.register(env.tp, mgr)
    restore_until(reader, lambda: reader.all_changelogs_completed())
    kinds = rec.kinds()
    assert kinds[0] == "start" and kinds[-1] == "end"
    assert set(kinds[1:-1]) == {"batch"} and len(kinds) - 2 >= 4  # at most 1000 records a batch
    batches = [c for c in rec.calls if c[0] == "batch"]
    ends = [b[1] for b in batches]
    assert ends == sorted(ends) and ends[-1] == 3499
    assert all(0 < b[2] <= 1000 for b in batches)
    assert rec.calls[-1][1] == sum(b[2] for b in batches) == 3500 - null_keys(3500)
    assert reader.total_restored(env.tp) == rec.calls[-1][1]
    close_state_manager(mgr, dirty=True)


def test_unregister_during_restore_suspends(env):
    env.produce(workload(5000))
    mgr = env.open()
    reader, rec = env.reader()
    reader.register(env.tp, mgr)
    restore_until(reader, lambda: rec.restored() > 0)
    assert reader.changelog_state(env.tp) is ChangelogState.RESTORING
    restored = rec.restored()
    reader.unregister([env.tp])
    assert rec.calls[-1] == ("suspended", restored)
    assert reader.is_empty() and reader.completed_changelogs() == set()
    assert env.tp not in [(TopicPartition(t.topic, t.partition)) for t in reader.consumer.assignment()]
    assert reader.restore() == 0
    reader.unregister([env.tp])  # unknown now: ignored
    assert rec.kinds().count("suspended") == 1
    close_state_manager(mgr, dirty=True)


def test_eos_crash_means_wipe_and_full_restore(env):
    env.produce(workload(1500))
    mgr = env.open(eos=True)
    reader, _ = env.reader(eos=True)
    reader.register(env.tp, mgr)
    restore_until(reader, lambda: reader.all_changelogs_completed())
    reader.unregister([env.tp])
    mgr.get_store(STORE).wrapped.put(b"uncommitted", b"never committed")  # a write, then a crash
    close_state_manager(mgr, dirty=True)

    mgr = ProcessorStateManager(TASK, TaskType.ACTIVE, True, env.state_directory)
    with pytest.raises(TaskCorruptedError) as info:
        register_state_stores(mgr, [ChangeLoggingKeyValueStore(RocksDBKeyValueStore(STORE))])
    assert info.value.changelog_partitions == (env.tp,)
    close_state_manager(mgr, dirty=True, wipe=True)

    mgr = env.open(eos=True)
    assert mgr.store_offset(env.tp) is None
    reader, rec = env.reader(eos=True)
    reader.register(env.tp, mgr)
    restore_until(reader, lambda: reader.all_changelogs_completed())
    assert rec.calls[0][4:] == (0, 1500)
    assert store_contents(mgr) == env.expected
    close_state_manager(mgr, dirty=False)


def test_eos_clean_close_restores_from_checkpoint_and_deletes_it(env):
    env.produce(workload(800))
    mgr = env.open(eos=True)
    reader, _ = env.reader(eos=True)
    reader.register(env.tp, mgr)
    restore_until(reader, lambda: reader.all_changelogs_completed())
    reader.unregister([env.tp])
    close_state_manager(mgr, dirty=False)
    env.produce(workload(5, start=800))
    mgr = env.open(eos=True)
    assert not mgr.checkpoint_file.path.exists()  # deleted once read under EOS
    reader, rec = env.reader(eos=True)
    reader.register(env.tp, mgr)
    restore_until(reader, lambda: reader.all_changelogs_completed())
    assert rec.calls[0][4:] == (800, 805)
    assert store_contents(mgr) == env.expected
    close_state_manager(mgr, dirty=True)


def test_checkpoint_beyond_log_end_is_task_corrupted(env):
    env.produce(workload(100))
    mgr = env.open()
    mgr.update_changelog_offsets({env.tp: 10_000})  # as if the changelog was deleted and recreated
    reader, rec = env.reader()
    reader.register(env.tp, mgr)
    with pytest.raises(TaskCorruptedError) as info:
        reader.restore()
    assert info.value.changelog_partitions == (env.tp,)
    assert info.value.task_ids == [TASK]
    assert "store offset 10000" in str(info.value)
    assert rec.calls == []  # never started
    reader.unregister([env.tp])
    mgr.mark_changelog_as_corrupted([env.tp])
    close_state_manager(mgr, dirty=True, wipe=True)
    mgr = env.open()
    reader.register(env.tp, mgr)
    restore_until(reader, lambda: reader.all_changelogs_completed())
    assert store_contents(mgr) == env.expected
    close_state_manager(mgr, dirty=True)


class OutOfRangeConsumer:
    """Wraps a real consumer and reports an out-of-range position for one partition.

    Tansu never answers a fetch with OFFSET_OUT_OF_RANGE, so this fault cannot be produced for
    real on the Kafka test broker; the event is the one librdkafka emits with
    auto.offset.reset=error. On the embedded cluster the fault is real: see
    test_changelog_truncated_while_restoring_is_task_corrupted.
    """

    def __init__(self, consumer, tp):
        self._consumer = consumer
        self._tp = tp

    def consume(self, num_messages, timeout):
        self._consumer.consume(num_messages, timeout)
        err = KafkaError(KafkaError._AUTO_OFFSET_RESET, "Fetch position offset 5 is out of range")
        return [Message(topic=self._tp.topic, partition=self._tp.partition, offset=5, error=err)]

    def __getattr__(self, name):
        return getattr(self._consumer, name)


@pytest.mark.parametrize("backend_under_test", ["kafka"], indirect=True)
def test_out_of_range_event_is_task_corrupted(env):
    env.produce(workload(20))
    mgr = env.open()
    consumer = env.backend.consumer({**restore_consumer_config(False)})
    env.consumers.append(consumer)
    reader = StoreChangelogReader(OutOfRangeConsumer(consumer, env.tp), eos_enabled=False)
    reader.register(env.tp, mgr)
    with pytest.raises(TaskCorruptedError, match="out of range") as info:
        reader.restore()
    assert info.value.changelog_partitions == (env.tp,)
    close_state_manager(mgr, dirty=True)


def test_standby_updates_then_promotes_without_full_restore(env):
    env.produce(workload(1500))
    mgr = env.open(task_type=TaskType.STANDBY)
    reader, rec = env.reader()
    reader.register(env.tp, mgr)
    assert reader.restore() == 0  # ACTIVE_RESTORING: standbys are paused
    assert reader.changelog_state(env.tp) is ChangelogState.RESTORING
    assert mgr.store_offset(env.tp) is None
    reader.transit_to_update_standby()
    assert reader.state is ReaderState.STANDBY_UPDATING
    with pytest.raises(IllegalStateTransitionError):
        reader.transit_to_update_standby()
    restore_until(reader, lambda: mgr.store_offset(env.tp) == 1499)
    env.produce(workload(20, start=1500))
    restore_until(reader, lambda: mgr.store_offset(env.tp) == 1519)
    assert reader.changelog_state(env.tp) is ChangelogState.RESTORING  # standbys never complete
    assert reader.completed_changelogs() == set()
    assert store_contents(mgr) == env.expected
    assert rec.calls[0] == ("update_start", 0)
    assert {c[0] for c in rec.calls[1:]} == {"loaded"}

    # Promotion: recycle the open stores as an active task; only the tail is restored.
    reader.unregister([env.tp], reason=SuspendReason.PROMOTED)
    assert rec.calls[-1] == ("update_suspended", 1519, SuspendReason.PROMOTED)
    mgr.transition_task_type(TaskType.ACTIVE)
    env.produce(workload(7, start=1520))
    reader.register(env.tp, mgr)  # an active changelog: back to ACTIVE_RESTORING
    assert reader.state is ReaderState.ACTIVE_RESTORING
    rec.calls.clear()
    restore_until(reader, lambda: reader.all_changelogs_completed())
    assert rec.calls[0] == ("start", env.topic, 1, STORE, 1520, 1527)
    assert rec.calls[-1] == ("end", 7)
    assert store_contents(mgr) == env.expected
    close_state_manager(mgr, dirty=False)


def test_a_standby_follows_a_source_changelog_only_up_to_its_limit(env):
    """A source topic read as a store's changelog (reuse.ktable.source.topics): a standby applies
    it up to the limit (the offset the application committed there), waits there unassigned
    (what follows is fetched again, not dropped), and goes on when the limit moves; promoted, it
    restores up to the active's limit."""
    records = workload(100)
    env.produce(records)
    mgr = ProcessorStateManager(TASK, TaskType.STANDBY, False, env.state_directory,
                                source_changelogs={STORE: env.topic})
    register_state_stores(mgr, [RocksDBKeyValueStore(STORE)])
    assert mgr.changelog_partitions() == [env.tp] and mgr.restore_limit(env.tp) == 0
    mgr.set_restore_limits({env.tp: 40})
    reader, rec = env.reader()
    consumer = env.consumers[-1]
    reader.register(env.tp, mgr)
    reader.transit_to_update_standby()
    restore_until(reader, lambda: mgr.store_offset(env.tp) == 39
                  and env.tp not in [TopicPartition(tp.topic, tp.partition) for tp in consumer.assignment()])
    reader.restore()
    assert mgr.store_offset(env.tp) == 39
    assert store_contents(mgr) == latest_values(records[:40])
    mgr.set_restore_limits({env.tp: 90})
    reader.update_limits()
    restore_until(reader, lambda: mgr.store_offset(env.tp) == 89)
    assert store_contents(mgr) == latest_values(records[:90])

    reader.unregister([env.tp], reason=SuspendReason.PROMOTED)
    mgr.transition_task_type(TaskType.ACTIVE)
    mgr.set_restore_limits({env.tp: 95})
    reader.register(env.tp, mgr)
    rec.calls.clear()
    restore_until(reader, lambda: reader.all_changelogs_completed())
    assert rec.calls[0] == ("start", env.topic, 1, STORE, 90, 95)
    assert mgr.store_offset(env.tp) == 94
    assert store_contents(mgr) == latest_values(records[:95])
    close_state_manager(mgr, dirty=False)


def test_corrupt_checkpoint_is_a_named_error(env):
    path = env.state_directory.directory_for_task(TASK) / ".checkpoint"
    path.write_text(f"0\n1\n{env.topic} 1 -17x\n")
    mgr = ProcessorStateManager(TASK, TaskType.ACTIVE, False, env.state_directory)
    with pytest.raises(CheckpointError, match=r"\.checkpoint: line 3: bad offset '-17x'"):
        register_state_stores(mgr, [ChangeLoggingKeyValueStore(RocksDBKeyValueStore(STORE))])


def test_register_errors(env):
    mgr = env.open()
    reader, _ = env.reader()
    reader.register(env.tp, mgr)
    with pytest.raises(StateError, match="already registered"):
        reader.register(env.tp, mgr)
    with pytest.raises(StateError, match="not a changelog of this task"):
        reader.register(TopicPartition("other", 1), mgr)
    with pytest.raises(StateError, match="not registered"):
        reader.changelog_state(TopicPartition("other", 1))
    close_state_manager(mgr, dirty=True)


def test_listener_failure_is_typed(env):
    env.produce(workload(5))
    mgr = env.open()

    class Failing(StateRestoreListener):
        def on_restore_start(self, *args):
            raise ValueError("boom")

    reader, _ = env.reader(listener=Failing())
    reader.register(env.tp, mgr)
    with pytest.raises(RestoreListenerError, match="on_restore_start: boom"):
        reader.restore()
    close_state_manager(mgr, dirty=True)


def test_changelog_state_transitions_are_checked(env):
    from state.restore import _Changelog

    mgr = env.open()
    c = _Changelog(env.tp, mgr, STORE, True)
    with pytest.raises(IllegalStateTransitionError, match="REGISTERED -> COMPLETED"):
        c.transit(ChangelogState.COMPLETED)
    c.transit(ChangelogState.RESTORING)
    c.transit(ChangelogState.COMPLETED)
    with pytest.raises(IllegalStateTransitionError, match="COMPLETED -> RESTORING"):
        c.transit(ChangelogState.RESTORING)
    close_state_manager(mgr, dirty=True)


def test_transactional_changelog_completes_past_the_commit_marker(env):
    producer = env.backend.producer({"transactional.id": f"{env.app}-tx"})
    producer.init_transactions(30)
    producer.begin_transaction()
    for i in range(10):
        producer.produce(env.topic, key=b"t%d" % i, value=b"v%d" % i, partition=TASK.partition)
    producer.commit_transaction(30)
    env.await_stable_end(11)  # ten records and the commit marker
    expected = {b"t%d" % i: b"v%d" % i for i in range(10)}
    mgr = env.open(eos=True)
    reader, rec = env.reader(eos=True)
    reader.register(env.tp, mgr)
    restore_until(reader, lambda: reader.all_changelogs_completed())
    assert store_contents(mgr) == expected
    assert rec.calls[-1] == ("end", 10)
    close_state_manager(mgr, dirty=True)


@pytest.mark.needs_faithful_broker(reason="aborted transactional data is visible to read_committed consumers")
def test_eos_restore_skips_aborted_changelog_writes(env):
    producer = env.backend.producer({"transactional.id": f"{env.app}-tx"})
    producer.init_transactions(30)
    for i, commit in zip(range(3), (True, False, True)):
        producer.begin_transaction()
        producer.produce(env.topic, key=b"k%d" % i, value=b"v", partition=TASK.partition)
        assert producer.flush(30) == 0  # on the broker before the abort (abort purges unsent records)
        (producer.commit_transaction if commit else producer.abort_transaction)(30)
    env.await_stable_end(6)  # three records, three markers
    mgr = env.open(eos=True)
    reader, _ = env.reader(eos=True)
    reader.register(env.tp, mgr)
    restore_until(reader, lambda: reader.all_changelogs_completed())
    assert store_contents(mgr) == {b"k0": b"v", b"k2": b"v"}
    close_state_manager(mgr, dirty=True)


def test_alos_crash_restores_from_the_last_checkpoint(env):
    env.produce(workload(1000))
    mgr = env.open()
    reader, _ = env.reader()
    reader.register(env.tp, mgr)
    restore_until(reader, lambda: reader.all_changelogs_completed())
    assert mgr.checkpoint(force=True)
    reader.unregister([env.tp])
    env.produce(workload(300, start=1000))  # processed, then a crash before the next checkpoint
    close_state_manager(mgr, dirty=True)

    mgr = env.open()
    assert mgr.store_offset(env.tp) == 999
    reader, rec = env.reader()
    reader.register(env.tp, mgr)
    restore_until(reader, lambda: reader.all_changelogs_completed())
    assert rec.calls[0][4:] == (1000, 1300)
    assert store_contents(mgr) == env.expected
    close_state_manager(mgr, dirty=True)


def test_end_offsets_from_admin_list_offsets(env):
    env.produce(workload(700))
    mgr = env.open()
    reader, rec = env.reader(admin=env.backend.admin({}))
    reader.register(env.tp, mgr)
    restore_until(reader, lambda: reader.all_changelogs_completed())
    assert rec.calls[0][4:] == (0, 700)
    assert store_contents(mgr) == env.expected
    close_state_manager(mgr, dirty=True)


def test_listed_end_offset_past_the_partition_end(env, caplog):
    """A broker listing an end offset beyond the partition's real end: under at-least-once the
    end-of-partition event completes the restore; under EOS (an open transaction looks the same)
    the reader waits, as Kafka does."""
    env.produce(workload(300))

    def too_high(tps):
        return {tp: (0, 400) for tp in tps}

    mgr = env.open()
    reader, rec = env.reader(end_offsets_fn=too_high)
    reader.register(env.tp, mgr)
    restore_until(reader, lambda: reader.all_changelogs_completed())
    assert "listed end offset 400 but the partition ends at 300" in caplog.text
    assert store_contents(mgr) == env.expected
    close_state_manager(mgr, dirty=True)

    mgr = ProcessorStateManager(TaskId(0, 0), TaskType.ACTIVE, True, env.state_directory)
    register_state_stores(mgr, [ChangeLoggingKeyValueStore(RocksDBKeyValueStore(STORE))])
    reader, rec = env.reader(eos=True, end_offsets_fn=too_high)
    tp0 = TopicPartition(env.topic, 0)
    env.producer.produce(env.topic, key=b"a", value=b"b", partition=0)
    env.producer.flush(30)
    reader.register(tp0, mgr)
    restore_until(reader, lambda: reader._get(tp0).eof_offset == 1)
    for _ in range(3):
        reader.restore()
    assert reader.changelog_state(tp0) is ChangelogState.RESTORING
    close_state_manager(mgr, dirty=True)


def test_progress_is_logged_and_drawn(env, caplog, capsys, monkeypatch):
    import state.restore as restore_mod

    monkeypatch.setattr(restore_mod, "PROGRESS_LOG_INTERVAL_S", 0.0)
    env.produce(workload(2000))
    mgr = env.open()
    reader, _ = env.reader(progress_bar=True)
    reader.register(env.tp, mgr)
    with caplog.at_level("INFO", logger="state.restore"):
        restore_until(reader, lambda: reader.all_changelogs_completed())
        reader.restore()
    assert "records restored, about" in caplog.text and "records/s" in caplog.text
    assert "restoring state [" in capsys.readouterr().err
    close_state_manager(mgr, dirty=True)


# --------------------------------------------------------------------------- exactly-once


@pytest.mark.needs_faithful_broker(reason="aborted transactional data is visible to read_committed consumers")
def test_eos_restore_never_applies_aborted_overwrites_or_deletes(env):
    """Aborted transactions that overwrite and delete committed keys leave no trace after an
    exactly_once_v2 restore (read_committed restore consumer), from the start or a checkpoint."""
    producer = env.backend.producer({"transactional.id": f"{env.app}-tx"})
    producer.init_transactions(30)

    def txn(records, commit):
        producer.begin_transaction()
        for k, v in records:
            producer.produce(env.topic, key=k, value=v, partition=TASK.partition)
        assert producer.flush(30) == 0  # on the broker before the abort (abort purges unsent records)
        (producer.commit_transaction if commit else producer.abort_transaction)(30)

    committed = [(b"k%03d" % i, b"c1") for i in range(100)]
    txn(committed, True)
    aborted = [(b"k%03d" % i, b"aborted") for i in range(100)] + [(b"k%03d" % i, None) for i in range(50)]
    aborted += [(b"ghost%d" % i, b"aborted") for i in range(20)]
    txn(aborted, False)
    later = [(b"k%03d" % i, b"c3") for i in range(50, 150)]
    txn(later, True)
    expected = latest_values(committed + later)
    assert env.log_offsets()[1] == 100 + 1 + 170 + 1 + 100 + 1  # aborted records are in the log

    mgr = env.open(eos=True)
    reader, rec = env.reader(eos=True)
    reader.register(env.tp, mgr)
    restore_until(reader, lambda: reader.all_changelogs_completed())
    assert store_contents(mgr) == expected
    assert rec.calls[-1] == ("end", 200)  # aborted records and markers are never restored
    reader.unregister([env.tp])
    close_state_manager(mgr, dirty=False)  # checkpoint at the last applied offset

    txn([(b"k000", b"aborted-after-checkpoint"), (b"k001", None)], False)
    txn([(b"k002", b"c4")], True)
    expected[b"k002"] = b"c4"
    mgr = env.open(eos=True)
    reader, rec = env.reader(eos=True)
    reader.register(env.tp, mgr)
    restore_until(reader, lambda: reader.all_changelogs_completed())
    assert store_contents(mgr) == expected
    assert rec.calls[-1] == ("end", 1)
    close_state_manager(mgr, dirty=True)


@pytest.mark.needs_faithful_broker(reason="aborted transactional data is visible to read_committed consumers")
def test_eos_open_transaction_at_crash_time_is_never_restored(env):
    """A task crashed with a transaction open on its changelog. The restore waits (the records
    are below the listed end offset but not yet decided) and never applies them; when the new
    producer with the same transactional.id fences the old one, the transaction is aborted and
    the restore completes with only committed data."""
    tx_id = f"{env.app}-tx"
    crashed = env.backend.producer({"transactional.id": tx_id})
    crashed.init_transactions(30)
    crashed.begin_transaction()
    for i in range(300):
        crashed.produce(env.topic, key=b"k%03d" % i, value=b"committed", partition=TASK.partition)
    crashed.commit_transaction(30)
    crashed.begin_transaction()
    for i in range(0, 300, 2):
        crashed.produce(env.topic, key=b"k%03d" % i, value=b"open at crash", partition=TASK.partition)
    crashed.produce(env.topic, key=b"only-in-open-txn", value=b"x", partition=TASK.partition)
    assert crashed.flush(30) == 0  # on the broker, undecided; then the process "crashes"
    expected = {b"k%03d" % i: b"committed" for i in range(300)}

    mgr = env.open(eos=True)
    # End offsets from ListOffsets at READ_UNCOMMITTED (KAFKA-10167): they include the open
    # transaction, which a read_committed restore consumer cannot read past until it is decided.
    reader, rec = env.reader(eos=True, admin=env.backend.admin({}))
    reader.register(env.tp, mgr)
    restore_until(reader, lambda: mgr.store_offset(env.tp) == 299)  # the committed prefix
    end_offset = rec.calls[0][5]
    assert end_offset == 300 + 1 + 151  # committed records, commit marker, open transaction
    for _ in range(5):
        reader.restore()
    assert reader.changelog_state(env.tp) is ChangelogState.RESTORING  # waits for the outcome
    assert store_contents(mgr) == expected

    successor = env.backend.producer({"transactional.id": tx_id})
    successor.init_transactions(30)  # fences the crashed producer: its transaction is aborted
    restore_until(reader, lambda: reader.all_changelogs_completed())
    assert store_contents(mgr) == expected
    assert rec.calls[-1] == ("end", 300)
    close_state_manager(mgr, dirty=True)


# --------------------------------------------------------------------------- compaction


@embedded_only
def test_changelog_compacted_while_restoring(make_env):
    env = make_env(topic_config={"segment.bytes": "8192", "min.cleanable.dirty.ratio": "0.01"},
                   producer_conf={"batch.size": 4096}, compacted=True)
    # 6,000 records over 200 keys (plus tombstones): compaction can drop most of them.
    records = []
    for i in range(6000):
        key = b"key-%03d" % (i * 7919 % 200)
        records.append((key, None if i % 50 == 7 else b"value-%05d" % i))
    env.produce(records)
    log = env.leader_log()
    size_before, segments_before = log.size, log.num_segments
    assert segments_before > 10

    mgr = env.open()
    # A small fetch size and queue: the consumer reads the log as the restore goes, so the
    # records compacted away after the first batches are never fetched.
    reader, rec = env.reader(consumer_conf={"max.partition.fetch.bytes": 2048, "queued.min.messages": 50})
    reader.register(env.tp, mgr)
    restore_until(reader, lambda: rec.restored() > 0)
    assert reader.changelog_state(env.tp) is ChangelogState.RESTORING
    restored_before_cleaning = rec.restored()

    cluster = env.backend.cluster

    def compacted():
        for broker in cluster.brokers.values():
            broker.cleaner.wakeup()
        return log.size < size_before / 3

    cluster.wait_until(compacted, 30, "the broker's log cleaner compacting the changelog")
    restore_until(reader, lambda: reader.all_changelogs_completed())
    assert store_contents(mgr) == env.expected == latest_values(records)
    assert mgr.store_offset(env.tp) == 5999
    # Fewer records were restored than the log held: the compacted ones were skipped.
    assert restored_before_cleaning < rec.restored() < 6000 - restored_before_cleaning
    assert rec.calls[-1] == ("end", rec.restored())
    close_state_manager(mgr, dirty=False)

    # A second, full restore of the compacted log gives the same store.
    mgr2_dir = StateDirectory(env.state_directory.state_dir.parent / "state-2", env.app)
    mgr2 = ProcessorStateManager(TASK, TaskType.ACTIVE, False, mgr2_dir)
    register_state_stores(mgr2, [ChangeLoggingKeyValueStore(RocksDBKeyValueStore(STORE))])
    reader2, rec2 = env.reader()
    reader2.register(env.tp, mgr2)
    restore_until(reader2, lambda: reader2.all_changelogs_completed())
    assert store_contents(mgr2) == env.expected
    assert rec2.restored() < 1000
    close_state_manager(mgr2, dirty=True)
    mgr2_dir.close()


# --------------------------------------------------------------------------- truncation


# Kafka refuses DeleteRecords on a compact-only topic (POLICY_VIOLATION): these changelogs
# have cleanup.policy compact,delete so that records can be deleted under them.
COMPACT_DELETE = {"cleanup.policy": "compact,delete"}


@pytest.mark.needs_faithful_broker(reason="delete_records is unsupported")
def test_changelog_truncated_below_the_checkpoint_wipes_and_restores_from_log_start(make_env):
    env = make_env(topic_config=COMPACT_DELETE)
    records = workload(1500)
    env.produce(records[:1000])
    mgr = env.open()
    reader, _ = env.reader()
    reader.register(env.tp, mgr)
    restore_until(reader, lambda: reader.all_changelogs_completed())
    reader.unregister([env.tp])
    close_state_manager(mgr, dirty=False)  # checkpoint: 999

    env.produce(records[1000:])
    admin = env.backend.admin({})
    [result] = admin.delete_records([TopicPartition(env.topic, TASK.partition, 1200)]).values()
    assert result.result(30).low_watermark == 1200
    assert env.log_offsets() == (1200, 1500)

    mgr = env.open()
    assert mgr.store_offset(env.tp) == 999
    reader, rec = env.reader()
    reader.register(env.tp, mgr)
    with pytest.raises(TaskCorruptedError, match=r"store offset 999 but the log spans \[1200, 1500\)") as info:
        reader.restore()
    assert info.value.changelog_partitions == (env.tp,) and info.value.task_ids == [TASK]
    assert rec.calls == []
    # Kafka's handleCorruption: leave the changelog out of the checkpoint, close dirty, wipe, revive.
    reader.unregister([env.tp])
    mgr.mark_changelog_as_corrupted([env.tp])
    close_state_manager(mgr, dirty=True, wipe=True)
    assert not mgr.checkpoint_file.path.exists()

    mgr = env.open()
    assert mgr.store_offset(env.tp) is None
    reader.register(env.tp, mgr)
    restore_until(reader, lambda: reader.all_changelogs_completed())
    assert rec.calls[0] == ("start", env.topic, TASK.partition, STORE, 1200, 1500)
    assert store_contents(mgr) == latest_values(records[1200:])
    close_state_manager(mgr, dirty=True)


@pytest.mark.needs_faithful_broker(reason="delete_records is unsupported")
def test_changelog_truncated_while_restoring_is_task_corrupted(make_env):
    """Records deleted under the restore consumer's position: the broker answers the fetch with
    OFFSET_OUT_OF_RANGE, the consumer (auto.offset.reset=error) reports it, and the reader raises
    TaskCorruptedError instead of jumping silently over the missing records."""
    env = make_env(topic_config=COMPACT_DELETE,
                   producer_conf={"batch.size": 2048})  # small batches: the consumer fetches as it goes
    records = workload(6000)
    env.produce(records)
    mgr = env.open()
    reader, rec = env.reader(consumer_conf={"max.partition.fetch.bytes": 2048, "queued.min.messages": 50})
    reader.register(env.tp, mgr)
    restore_until(reader, lambda: rec.restored() > 0)
    applied = mgr.store_offset(env.tp)
    assert applied < 1000
    admin = env.backend.admin({})
    [result] = admin.delete_records([TopicPartition(env.topic, TASK.partition, 5000)]).values()
    assert result.result(30).low_watermark == 5000
    with pytest.raises(TaskCorruptedError, match="out of range") as info:
        restore_until(reader, lambda: reader.all_changelogs_completed())
    assert info.value.changelog_partitions == (env.tp,)
    assert mgr.store_offset(env.tp) < 5000  # nothing past the hole was applied
    reader.unregister([env.tp])
    mgr.mark_changelog_as_corrupted([env.tp])
    close_state_manager(mgr, dirty=True, wipe=True)

    mgr = env.open()
    reader, rec = env.reader()
    reader.register(env.tp, mgr)
    restore_until(reader, lambda: reader.all_changelogs_completed())
    assert rec.calls[0][4:] == (5000, 6000)
    assert store_contents(mgr) == latest_values(records[5000:])
    close_state_manager(mgr, dirty=True)


# --------------------------------------------------------------------------- end offset


def test_records_written_during_the_restore_are_not_restored(make_env):
    """A producer keeps appending to the changelog while the restore runs: the restore stops at
    the end offset listed when it started, and the store holds exactly the records below it."""
    env = make_env(producer_conf={"batch.size": 4096})
    records = workload(3000)
    env.produce(records)
    mgr = env.open()
    reader, rec = env.reader(consumer_conf={"max.partition.fetch.bytes": 4096, "queued.min.messages": 100})
    reader.register(env.tp, mgr)
    late = [(b"key-%05d" % i, b"late-%d" % i) for i in range(600)]  # overwrites restored keys too
    produced = []
    while not reader.all_changelogs_completed():
        reader.restore()
        if len(produced) < len(late):
            k, v = late[len(produced)]
            env.producer.produce(env.topic, key=k, value=v, partition=TASK.partition)
            env.producer.poll(0)
            produced.append((k, v))
    assert env.producer.flush(30) == 0
    assert rec.calls[0][4:] == (0, 3000)
    assert mgr.store_offset(env.tp) == 2999
    assert store_contents(mgr) == latest_values(records)
    assert reader.restore() == 0  # completed: later records are left for processing
    assert produced and env.read(3000, len(produced)) == produced  # in the log, not in the store
    close_state_manager(mgr, dirty=True)


# --------------------------------------------------------------------------- at-least-once crash


def test_alos_crash_without_checkpoint_restores_from_the_start(env):
    """An at-least-once task writes through its logged store, crashes before any checkpoint, and
    meanwhile the changelog moved on (overwrites and deletes): the restore starts at the beginning,
    over the store's leftover state, and ends equal to the changelog's latest values."""
    collector = ProducerCollector(env.backend.producer({"linger.ms": 5}))
    mgr = env.open(collector=collector)
    store = mgr.get_store(STORE)
    for k, v in workload(800):
        if k is not None:
            store.put(k, v) if v is not None else store.delete(k)
    collector.flush()
    assert not mgr.checkpoint_file.path.exists()
    close_state_manager(mgr, dirty=True)  # crash: no checkpoint was ever written
    assert not mgr.checkpoint_file.path.exists()

    later = [(b"key-%05d" % i, None) for i in range(0, 800, 3)] + [(b"key-%05d" % i, b"new") for i in range(1, 800, 3)]
    env.produce(later)
    log_end = env.log_offsets()[1]
    mgr = env.open()
    assert mgr.store_offset(env.tp) is None
    assert store_contents(mgr)  # leftover state from before the crash
    reader, rec = env.reader()
    reader.register(env.tp, mgr)
    restore_until(reader, lambda: reader.all_changelogs_completed())
    assert rec.calls[0][4:] == (0, log_end)
    expected = latest_values([(k, v) for k, v in workload(800) if k is not None] + later)
    assert store_contents(mgr) == expected
    close_state_manager(mgr, dirty=False)
    assert OffsetCheckpoint(mgr.checkpoint_file.path).read() == {env.tp: log_end - 1}


def test_dirty_close_drops_cached_writes_instead_of_logging_them(env):
    """A dirty close must not flush the caching layer: the cached updates of a failed task would
    reach the changelog (and other tasks' restores) although the task never committed them."""
    env.produce([(b"a", b"1"), (b"b", b"2")])
    collector = ProducerCollector(env.backend.producer({"linger.ms": 5}))
    cache = ThreadCache(1 << 20)
    mgr = env.open(collector=collector, caching=True, thread_cache=cache)
    assert mgr.thread_cache is cache and mgr.get_store(STORE).cache is cache
    reader, _ = env.reader()
    reader.register(env.tp, mgr)
    restore_until(reader, lambda: reader.all_changelogs_completed())
    reader.unregister([env.tp])
    store = mgr.get_store(STORE)
    store.put(b"a", b"committed")
    mgr.flush_cache()  # a commit: the cached write goes down to RocksDB and the changelog
    collector.flush()
    assert env.log_offsets()[1] == 3
    assert mgr.get_store(STORE).wrapped.get(b"a") == b"committed"
    store.put(b"a", b"uncommitted")
    store.put(b"c", b"uncommitted")
    store.delete(b"b")
    close_state_manager(mgr, dirty=True)
    collector.flush()
    assert env.log_offsets()[1] == 3  # nothing more was logged

    mgr = env.open()  # at-least-once, no checkpoint: restore from the start
    reader, _ = env.reader()
    reader.register(env.tp, mgr)
    restore_until(reader, lambda: reader.all_changelogs_completed())
    assert store_contents(mgr) == {b"a": b"committed", b"b": b"2"}
    close_state_manager(mgr, dirty=True)


# --------------------------------------------------------------------------- standby


def test_standby_keeps_up_with_a_busy_changelog_and_promotes_without_full_restore(env):
    env.produce(workload(2000))
    mgr = env.open(task_type=TaskType.STANDBY)
    reader, rec = env.reader()
    reader.register(env.tp, mgr)
    reader.transit_to_update_standby()
    restore_until(reader, lambda: mgr.store_offset(env.tp) == 1999)
    for round_ in range(5):  # the active keeps writing; each round the standby catches up
        env.produce(workload(200, start=2000 + 200 * round_))
        restore_until(reader, lambda: mgr.store_offset(env.tp) == env.count - 1)
        assert store_contents(mgr) == env.expected
    assert reader.completed_changelogs() == set()
    assert sum(c[2] for c in rec.calls if c[0] == "loaded") == env.count - null_keys(env.count)

    reader.unregister([env.tp], reason=SuspendReason.PROMOTED)
    mgr.transition_task_type(TaskType.ACTIVE)
    reader.register(env.tp, mgr)
    rec.calls.clear()
    restore_until(reader, lambda: reader.all_changelogs_completed())
    assert rec.calls == [("start", env.topic, TASK.partition, STORE, env.count, env.count), ("end", 0)]
    assert store_contents(mgr) == env.expected
    close_state_manager(mgr, dirty=False)
    assert OffsetCheckpoint(mgr.checkpoint_file.path).read() == {env.tp: env.count - 1}


# --------------------------------------------------------------------------- lock contention


def test_lock_contention_between_stream_threads(env):
    """Another stream thread cannot open a task whose state is being restored: LockError names
    the task directory and nothing is touched. Once the owner closes cleanly, the other thread
    takes the task over and restores only the tail."""
    env.produce(workload(1200))
    owner = env.open()
    reader, _ = env.reader()
    reader.register(env.tp, owner)
    restore_until(reader, lambda: reader.all_changelogs_completed())
    reader.unregister([env.tp])

    outcome = {}

    def other_thread():
        """Another stream thread taking the task: open, restore, close (it owns the lock)."""
        mgr = ProcessorStateManager(TASK, TaskType.ACTIVE, False, env.state_directory)
        try:
            register_state_stores(mgr, [ChangeLoggingKeyValueStore(RocksDBKeyValueStore(STORE))])
        except LockError as e:
            outcome["error"] = e
            return
        try:
            outcome["offset"] = mgr.store_offset(env.tp)
            reader, rec = env.reader()
            reader.register(env.tp, mgr)
            restore_until(reader, lambda: reader.all_changelogs_completed())
            outcome["calls"] = rec.calls
            outcome["contents"] = store_contents(mgr)
        finally:
            close_state_manager(mgr, dirty=False)

    t = threading.Thread(target=other_thread)
    t.start()
    t.join(30)
    assert isinstance(outcome.get("error"), LockError)
    assert str(env.state_directory.task_dir(TASK)) in str(outcome["error"])
    assert store_contents(owner) == env.expected  # the owner's store is untouched
    close_state_manager(owner, dirty=False)

    env.produce(workload(40, start=1200))
    outcome.clear()
    t = threading.Thread(target=other_thread)
    t.start()
    t.join(60)
    assert "error" not in outcome
    assert outcome["offset"] == 1199
    assert outcome["calls"][0][4:] == (1200, 1240)
    assert outcome["contents"] == env.expected
    assert env.state_directory.lock_owner(TASK) is None  # released by the thread that took it


# --------------------------------------------------------------------------- client behaviour


def consume_until_eof(consumer, tp, eof_offset, timeout_s=15.0):
    """Consume until the end-of-partition event at `eof_offset`; returns the data messages."""
    data = []
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for m in consumer.consume(100, 0.1):
            err = m.error()
            if err is None:
                data.append(m)
            elif err.code() == KafkaError._PARTITION_EOF and m.offset() == eof_offset:
                return data
            else:
                assert err.code() == KafkaError._PARTITION_EOF, err
    raise AssertionError(f"no end-of-partition event at offset {eof_offset} of {tp.topic}-{tp.partition}")


@pytest.mark.needs_faithful_broker(reason="aborted transactional data is visible to read_committed consumers")
def test_consumer_reports_end_of_partition_again_past_an_aborted_transaction(env):
    """The restore of a changelog whose tail is an aborted transaction relies on this: librdkafka
    emits _PARTITION_EOF whenever a fetch position reaches the end offset and differs from the
    offset of the previous EOF event, even when only aborted records and markers lay between."""
    producer = env.backend.producer({"transactional.id": f"{env.app}-tx"})
    producer.init_transactions(30)
    producer.begin_transaction()
    producer.produce(env.topic, key=b"a", value=b"committed", partition=TASK.partition)
    producer.commit_transaction(30)  # offsets 0 (record), 1 (marker)
    consumer = env.backend.consumer({**restore_consumer_config(True), "group.id": f"{env.app}-eof"})
    env.consumers.append(consumer)
    consumer.assign([TopicPartition(env.topic, TASK.partition, 0)])
    assert [m.value() for m in consume_until_eof(consumer, env.tp, 2)] == [b"committed"]
    producer.begin_transaction()
    for i in range(3):
        producer.produce(env.topic, key=b"b%d" % i, value=b"aborted", partition=TASK.partition)
    assert producer.flush(30) == 0  # written, then aborted (an abort purges unsent records)
    producer.abort_transaction(30)  # offsets 2-4 (records), 5 (marker)
    assert consume_until_eof(consumer, env.tp, 6) == []
