import os
import threading

import pytest
from confluent_kafka import TopicPartition

from state.checkpoint import OffsetCheckpoint
from state.directory import StateDirectory
from state.errors import CheckpointError, LockError, StateError, TaskCorruptedError
from state.manager import (
    ProcessorStateManager,
    TaskType,
    close_state_manager,
    register_state_stores,
)
from state.logging_store import ChangeLoggingKeyValueStore
from state.memory_kv import InMemoryKeyValueStore
from state.rocksdb_kv import RocksDBKeyValueStore
from state.task_id import TaskId

TASK = TaskId(0, 3)
CL = TopicPartition("app-counts-changelog", 3)


class LoggedKV(ChangeLoggingKeyValueStore):
    """The real change-logging layer, recording when it is flushed."""

    def __init__(self, wrapped, events=None):
        super().__init__(wrapped)
        self.events = events

    def flush(self):
        if self.events is not None:
            self.events.append(("flush", self.name))
        super().flush()


class Collector:
    """In-memory record collector: assigns offsets per partition like a broker would."""

    def __init__(self):
        self.sent = []
        self._next = {}

    def send(self, topic, key, value, *, partition, timestamp, headers=None):
        tp = TopicPartition(topic, partition)
        offset = self._next.get(tp, 0)
        self._next[tp] = offset + 1
        self.sent.append((topic, partition, key, value, offset))

    def offsets(self):
        return {tp: n - 1 for tp, n in self._next.items()}


@pytest.fixture
def sd(tmp_path):
    d = StateDirectory(tmp_path, "app")
    yield d
    d.close()


def make(sd, eos=False, collector=None, task_type=TaskType.ACTIVE):
    return ProcessorStateManager(TASK, task_type, eos, sd, collector=collector or Collector())


def rocks(name="counts", events=None):
    return LoggedKV(RocksDBKeyValueStore(name), events)


def open_task(sd, stores, eos=False, collector=None):
    mgr = make(sd, eos, collector)
    register_state_stores(mgr, stores)
    return mgr


def test_register_and_changelog_naming(sd, tmp_path):
    mgr = make(sd)
    store = rocks()
    store.init(mgr)
    assert mgr.changelog_partitions() == [CL]
    assert mgr.store_dir("counts") == tmp_path / "app" / "0_3" / "rocksdb" / "counts"
    assert mgr.get_store("counts") is store
    with pytest.raises(StateError, match="already been registered"):
        mgr.register(store, store.wrapped.restore_batch, logged=True)
    with pytest.raises(StateError, match="without a restore callback"):
        mgr.register(InMemoryKeyValueStore("other"), None, logged=True)
    mgr.close(dirty=True)


def test_changelog_topic_override_and_partition(sd):
    mgr = ProcessorStateManager(
        TASK, TaskType.ACTIVE, False, sd, changelog_topics={"counts": "custom-topic"},
        changelog_partition=7, collector=Collector(),
    )
    rocks().init(mgr)
    assert mgr.changelog_partitions() == [TopicPartition("custom-topic", 7)]
    mgr.close(dirty=True)


def test_log_change_goes_to_changelog_partition(sd):
    collector = Collector()
    mgr = open_task(sd, [rocks()], collector=collector)
    store = mgr.get_store("counts")
    store.put(b"k", b"v")
    store.put(b"k", None)
    assert collector.sent == [
        ("app-counts-changelog", 3, b"k", b"v", 0),
        ("app-counts-changelog", 3, b"k", None, 1),
    ]
    with pytest.raises(StateError, match="not registered as a logged store"):
        mgr.log_change("nope", b"k", b"v", 0)
    close_state_manager(mgr, dirty=False)


def test_a_flush_batch_is_logged_through_one_sender_where_log_change_sends(sd):
    # the change-logging layer's write_changes (a caching layer's flush) sends through
    # change_sender: the same records, in order, log_change of each would send
    collector = Collector()
    mgr = open_task(sd, [rocks()], collector=collector)
    store = mgr.get_store("counts")
    store.write_changes([(b"a", b"1", 5, None, None, ()), (b"b", None, 6, None, None, ()), (b"c", b"3", 7, None, None, ())])
    # (topic, partition, key, value, offset)
    assert collector.sent == [("app-counts-changelog", 3, b"a", b"1", 0), ("app-counts-changelog", 3, b"b", None, 1),
                              ("app-counts-changelog", 3, b"c", b"3", 2)]
    assert store.get(b"a") == b"1" and store.get(b"b") is None
    mgr.change_sender("counts")(b"d", b"4", 8, None)
    assert collector.sent[-1] == ("app-counts-changelog", 3, b"d", b"4", 3)
    with pytest.raises(StateError, match="not registered as a logged store"):
        mgr.change_sender("nope")
    close_state_manager(mgr, dirty=False)


def test_no_checkpoint_starts_from_beginning(sd):
    mgr = open_task(sd, [rocks()])
    assert mgr.store_offset(CL) is None
    assert mgr.changelog_offsets() == {CL: 0}
    close_state_manager(mgr, dirty=True)


def test_checkpoint_offset_loaded(sd):
    OffsetCheckpoint(sd.directory_for_task(TASK) / ".checkpoint").write({CL: 41})
    mgr = open_task(sd, [rocks()])
    assert mgr.store_offset(CL) == 41
    assert mgr.changelog_offsets() == {CL: 42}
    assert mgr.checkpoint_file.path.exists()  # at-least-once keeps the file
    close_state_manager(mgr, dirty=True)


def test_unknown_offset_sentinel_means_from_beginning(sd):
    OffsetCheckpoint(sd.directory_for_task(TASK) / ".checkpoint").write({CL: -4})
    mgr = open_task(sd, [rocks()])
    assert mgr.store_offset(CL) is None
    close_state_manager(mgr, dirty=True)


def test_in_memory_and_unlogged_stores_skip_checkpoint(sd):
    mem_cl = TopicPartition("app-mem-changelog", 3)
    OffsetCheckpoint(sd.directory_for_task(TASK) / ".checkpoint").write({mem_cl: 10})
    mgr = open_task(sd, [LoggedKV(InMemoryKeyValueStore("mem")), RocksDBKeyValueStore("plain")], eos=True)
    assert mgr.changelog_partitions() == [mem_cl]
    assert mgr.store_offset(mem_cl) is None
    mgr.get_store("mem").put(b"a", b"1")
    assert mgr.checkpoint(force=True)
    assert OffsetCheckpoint(mgr.checkpoint_file.path).read() == {}  # in-memory never checkpointed
    close_state_manager(mgr, dirty=True)


def test_eos_deletes_checkpoint_after_reading(sd):
    OffsetCheckpoint(sd.directory_for_task(TASK) / ".checkpoint").write({CL: 5})
    mgr = open_task(sd, [rocks()], eos=True)
    assert mgr.store_offset(CL) == 5
    assert not mgr.checkpoint_file.path.exists()
    close_state_manager(mgr, dirty=True)


def test_eos_non_empty_dir_without_checkpoint_is_corrupted_then_wipe_and_restore(sd):
    mgr = open_task(sd, [rocks()], eos=True)
    mgr.get_store("counts").put(b"uncommitted", b"x")
    close_state_manager(mgr, dirty=True)  # crash: no checkpoint
    assert not mgr.checkpoint_file.path.exists()

    mgr = make(sd, eos=True)
    with pytest.raises(TaskCorruptedError) as info:
        register_state_stores(mgr, [rocks()])
    assert info.value.changelog_partitions == (CL,)
    assert "app-counts-changelog-3" in str(info.value)
    # The directory stays locked for the wipe.
    assert sd.lock_owner(TASK) is threading.current_thread()
    close_state_manager(mgr, dirty=True, wipe=True)
    assert sd.lock_owner(TASK) is None
    assert sd.is_empty(TASK)

    mgr = open_task(sd, [rocks()], eos=True)
    assert mgr.store_offset(CL) is None
    assert mgr.get_store("counts").get(b"uncommitted") is None
    close_state_manager(mgr, dirty=True)


def test_alos_non_empty_dir_without_checkpoint_restores_from_beginning(sd):
    mgr = open_task(sd, [rocks()])
    mgr.get_store("counts").put(b"k", b"x")
    close_state_manager(mgr, dirty=True)
    mgr = open_task(sd, [rocks()])
    assert mgr.store_offset(CL) is None
    close_state_manager(mgr, dirty=True)


def test_corrupt_checkpoint_is_a_named_error_and_unlocks(sd):
    path = sd.directory_for_task(TASK) / ".checkpoint"
    path.write_text("0\n1\napp-counts-changelog 3 12x\n")
    mgr = make(sd)
    with pytest.raises(CheckpointError, match=r"line 3: bad offset '12x'"):
        register_state_stores(mgr, [rocks()])
    assert sd.lock_owner(TASK) is None


def test_lock_contention(sd, tmp_path):
    mgr = open_task(sd, [rocks()])
    other = StateDirectory(tmp_path, "app")
    with pytest.raises(LockError, match="0_3"):
        register_state_stores(ProcessorStateManager(TASK, TaskType.ACTIVE, False, other), [rocks()])
    other.close()
    close_state_manager(mgr, dirty=False)


def test_checkpoint_threshold_and_flush_first(sd, monkeypatch):
    events = []
    collector = Collector()
    mgr = open_task(sd, [rocks(events=events)], collector=collector)
    store = mgr.get_store("counts")
    real_write = OffsetCheckpoint.write
    monkeypatch.setattr(
        OffsetCheckpoint, "write", lambda self, o: (events.append(("write", dict(o))), real_write(self, o))
    )
    for i in range(10_000):
        store.put(b"k%d" % i, b"v")
    assert mgr.checkpoint() is False  # delta exactly 10,000: not more than the threshold
    assert events == []
    store.put(b"last", b"v")
    assert mgr.checkpoint() is True
    assert events == [("flush", "counts"), ("write", {CL: 10_000})]
    assert OffsetCheckpoint(mgr.checkpoint_file.path).read() == {CL: 10_000}
    store.put(b"more", b"v")
    assert mgr.checkpoint() is False
    assert mgr.checkpoint(force=True) is True
    assert OffsetCheckpoint(mgr.checkpoint_file.path).read() == {CL: 10_001}
    close_state_manager(mgr, dirty=True)


def test_update_changelog_offsets_ignores_foreign_partitions(sd):
    mgr = open_task(sd, [rocks()])
    mgr.update_changelog_offsets({CL: 7, TopicPartition("output", 3): 99})
    assert mgr.store_offset(CL) == 7
    close_state_manager(mgr, dirty=True)


def test_clean_close_writes_checkpoint_even_under_eos(sd):
    mgr = open_task(sd, [rocks()], eos=True)
    mgr.get_store("counts").put(b"a", b"1")
    mgr.get_store("counts").put(b"b", b"2")
    store = mgr.get_store("counts")
    close_state_manager(mgr, dirty=False)
    assert not store.is_open
    assert OffsetCheckpoint(mgr.checkpoint_file.path).read() == {CL: 1}
    mgr = open_task(sd, [rocks()], eos=True)
    assert mgr.store_offset(CL) == 1
    assert mgr.get_store("counts").get(b"b") == b"2"
    close_state_manager(mgr, dirty=True)


def test_dirty_close_keeps_old_checkpoint(sd):
    mgr = open_task(sd, [rocks()])
    mgr.get_store("counts").put(b"a", b"1")
    mgr.checkpoint(force=True)
    mgr.get_store("counts").put(b"a", b"2")
    close_state_manager(mgr, dirty=True)
    assert OffsetCheckpoint(mgr.checkpoint_file.path).read() == {CL: 0}


def test_restore_batch_sets_offset_and_writes_rocksdb(sd):
    mgr = open_task(sd, [rocks()])
    mgr.restore(CL, [(b"a", b"1"), (b"b", b"2"), (b"a", None)], last_offset=9)
    assert mgr.store_offset(CL) == 9
    store = mgr.get_store("counts")
    assert store.get(b"a") is None and store.get(b"b") == b"2"
    with pytest.raises(StateError, match="not a changelog of this task"):
        mgr.restore(TopicPartition("x", 3), [], last_offset=1)
    close_state_manager(mgr, dirty=False)
    assert OffsetCheckpoint(mgr.checkpoint_file.path).read() == {CL: 9}


def test_corrupted_changelog_left_out_of_checkpoint(sd):
    mgr = open_task(sd, [rocks("a"), rocks("b")])
    ta, tb = TopicPartition("app-a-changelog", 3), TopicPartition("app-b-changelog", 3)
    mgr.update_changelog_offsets({ta: 4, tb: 6})
    mgr.mark_changelog_as_corrupted([ta])
    with pytest.raises(StateError, match="cannot mark other-0"):
        mgr.mark_changelog_as_corrupted([TopicPartition("other", 0)])
    mgr.checkpoint(force=True)
    assert OffsetCheckpoint(mgr.checkpoint_file.path).read() == {tb: 6}
    close_state_manager(mgr, dirty=True)


def test_wipe_removes_everything_but_lock(sd):
    mgr = open_task(sd, [rocks()])
    mgr.get_store("counts").put(b"a", b"1")
    mgr.checkpoint(force=True)
    mgr.wipe()
    assert os.listdir(mgr.task_dir) == [".lock"]
    assert sd.lock_owner(TASK) is threading.current_thread()
    close_state_manager(mgr, dirty=True)


def test_checkpoint_before_initialisation_is_refused(sd):
    OffsetCheckpoint(sd.directory_for_task(TASK) / ".checkpoint").write({CL: 77})
    mgr = make(sd)
    rocks().init(mgr)
    assert mgr.checkpoint(force=True) is False
    assert OffsetCheckpoint(mgr.checkpoint_file.path).read() == {CL: 77}
    mgr.close(dirty=True)
