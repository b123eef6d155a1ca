import os
import subprocess
import sys
import textwrap
import threading

import pytest

from state.directory import StateDirectory
from state.errors import LockError, StateDirectoryError
from state.task_id import TaskId

T0 = TaskId(0, 1)
T1 = TaskId(1, 0)


@pytest.fixture
def sd(tmp_path):
    d = StateDirectory(tmp_path / "state", "app")
    yield d
    d.close()


def run_in_thread(fn):
    box = {}

    def target():
        try:
            box["result"] = fn()
        except BaseException as e:  # noqa: BLE001 - handed back to the test
            box["error"] = e

    t = threading.Thread(target=target, name="other-thread")
    t.start()
    t.join(timeout=10)
    assert not t.is_alive()
    return box


def test_directory_layout(sd, tmp_path):
    path = sd.directory_for_task(TaskId(2, 7))
    assert path == tmp_path / "state" / "app" / "2_7"
    assert path.is_dir()


def test_bad_application_id(tmp_path):
    for bad in ("", "a/b", "..", "a b", "x" * 250):
        with pytest.raises(StateDirectoryError, match="cannot name a state directory"):
            StateDirectory(tmp_path, bad)


def test_task_dir_path_is_a_file(sd):
    sd.app_dir.mkdir(parents=True)
    (sd.app_dir / "0_1").write_text("x")
    with pytest.raises(StateDirectoryError, match="0_1 exists and is not a directory"):
        sd.directory_for_task(T0)


def test_lock_contention_between_threads(sd):
    sd.lock(T0)
    sd.lock(T0)  # re-entrant for the owner
    box = run_in_thread(lambda: sd.lock(T0))
    err = box["error"]
    assert isinstance(err, LockError)
    assert str(sd.task_dir(T0)) in str(err)
    assert threading.current_thread().name in str(err)
    # Another task is independent.
    assert "error" not in run_in_thread(lambda: (sd.lock(T1), sd.unlock(T1)))
    # A non-owner cannot release it.
    assert isinstance(run_in_thread(lambda: sd.unlock(T0))["error"], LockError)
    sd.unlock(T0)
    assert "error" not in run_in_thread(lambda: (sd.lock(T0), sd.unlock(T0)))


def test_two_instances_in_one_process_exclude_each_other(sd, tmp_path):
    other = StateDirectory(tmp_path / "state", "app")
    sd.lock(T0)
    with pytest.raises(LockError, match="locked by another process"):
        other.lock(T0)
    sd.unlock(T0)
    other.lock(T0)
    other.close()


LOCKER = textwrap.dedent(
    """
    import sys
    from state.directory import StateDirectory
    from state.errors import LockError
    from state.task_id import TaskId
    sd = StateDirectory(sys.argv[1], "app")
    try:
        sd.lock(TaskId(0, 1))
    except LockError as e:
        print("LockError:", e, flush=True)
        sys.exit(3)
    print("locked", flush=True)
    sys.stdin.read()  # hold until the parent closes our stdin
    sd.unlock(TaskId(0, 1))
    print("unlocked", flush=True)
    """
)


def spawn_locker(state_dir):
    return subprocess.Popen(
        [sys.executable, "-c", LOCKER, str(state_dir)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        cwd=os.getcwd(),
        env={**os.environ, "PYTHONPATH": os.getcwd()},
    )


def test_lock_contention_between_processes(sd, tmp_path):
    child = spawn_locker(tmp_path / "state")
    try:
        assert child.stdout.readline().strip() == "locked"
        with pytest.raises(LockError) as info:
            sd.lock(T0)
        msg = str(info.value)
        assert str(sd.task_dir(T0)) in msg and "another process" in msg
        assert f"pid {child.pid}" in msg
        child.stdin.close()
        assert child.stdout.readline().strip() == "unlocked"
        assert child.wait(timeout=10) == 0
        sd.lock(T0)  # free now
    finally:
        child.kill()
        child.wait()


def test_child_process_cannot_take_our_lock(sd, tmp_path):
    sd.lock(T0)
    child = spawn_locker(tmp_path / "state")
    out, _ = child.communicate(input="", timeout=20)
    assert child.returncode == 3
    assert "LockError" in out and f"pid {os.getpid()}" in out
    sd.unlock(T0)
    child = spawn_locker(tmp_path / "state")
    out, _ = child.communicate(input="", timeout=20)
    assert child.returncode == 0 and "locked" in out


def test_lock_released_when_process_dies(sd, tmp_path):
    child = spawn_locker(tmp_path / "state")
    assert child.stdout.readline().strip() == "locked"
    child.kill()
    child.wait()
    sd.lock(T0)
    assert sd.lock_owner(T0) is threading.current_thread()


def test_is_empty_ignores_lock_and_checkpoint(sd):
    assert sd.is_empty(T0)  # does not exist yet
    sd.lock(T0)
    path = sd.task_dir(T0)
    (path / ".checkpoint").write_text("0\n0\n")
    (path / ".checkpoint.tmp").write_text("")
    assert sd.is_empty(T0)
    (path / "rocksdb").mkdir()
    assert not sd.is_empty(T0)


def test_list_task_dirs(sd):
    for t in (TaskId(1, 2), TaskId(0, 10), TaskId(0, 2)):
        sd.directory_for_task(t)
    (sd.app_dir / "global").mkdir()
    (sd.app_dir / "3_x").mkdir()
    (sd.app_dir / "4_4").write_text("not a dir")
    assert [t for t, _ in sd.list_task_dirs()] == [TaskId(0, 2), TaskId(0, 10), TaskId(1, 2)]


def test_list_task_dirs_without_app_dir(sd):
    assert sd.list_task_dirs() == []


def test_clean_removed_tasks_only_unowned_and_old(sd, tmp_path):
    owned, stale, locked, fresh = TaskId(0, 0), TaskId(0, 1), TaskId(0, 2), TaskId(0, 3)
    for t in (owned, stale, locked, fresh):
        (sd.directory_for_task(t) / "data").write_text("x")
    old = 1_000_000  # seconds since the epoch: long ago
    for t in (owned, stale, locked):
        os.utime(sd.task_dir(t), (old, old))
    # `locked` is held by another instance (as if by another process).
    other = StateDirectory(tmp_path / "state", "app")
    other.lock(locked)
    try:
        removed = sd.clean_removed_tasks({owned}, cleanup_delay_ms=600_000)
    finally:
        other.close()
    assert removed == [stale]
    assert not sd.task_dir(stale).exists()
    for t in (owned, locked, fresh):
        assert (sd.task_dir(t) / "data").exists()
    # After the delay has elapsed for `fresh` too, it goes; the owned one never does.
    future_ms = int((os.stat(sd.task_dir(fresh)).st_mtime + 3600) * 1000)
    removed = sd.clean_removed_tasks({owned}, cleanup_delay_ms=0, now_ms=future_ms)
    assert removed == [locked, fresh]
    assert [t for t, _ in sd.list_task_dirs()] == [owned]


def test_clean_skips_tasks_locked_in_this_process(sd):
    sd.lock(T0)
    os.utime(sd.task_dir(T0), (1, 1))
    assert sd.clean_removed_tasks(set(), cleanup_delay_ms=0) == []
    assert sd.task_dir(T0).exists()


def test_clean_rejects_negative_delay(sd):
    with pytest.raises(StateDirectoryError, match="cleanup_delay_ms"):
        sd.clean_removed_tasks(set(), -1)


def test_lock_after_cleanup_recreates_directory(sd, tmp_path):
    sd.directory_for_task(T0)
    other = StateDirectory(tmp_path / "state", "app")
    assert other.clean_removed_tasks(set(), 0, now_ms=2**62) == [T0]
    sd.lock(T0)
    assert (sd.task_dir(T0) / ".lock").exists()
    with pytest.raises(LockError):
        other.lock(T0)
    other.close()


def test_wipe_task_keeps_lock(sd, tmp_path):
    sd.lock(T0)
    path = sd.task_dir(T0)
    (path / "rocksdb" / "s").mkdir(parents=True)
    (path / "rocksdb" / "s" / "CURRENT").write_text("x")
    (path / ".checkpoint").write_text("0\n0\n")
    sd.wipe_task(T0)
    assert sorted(os.listdir(path)) == [".lock"]
    other = StateDirectory(tmp_path / "state", "app")
    with pytest.raises(LockError):
        other.lock(T0)
    other.close()


def test_clean_deletes_every_task_directory_and_the_named_ones_only(sd):
    # Kafka's StateDirectory.clean: all task state and the global stores' directory go, the
    # application's own files (its lock, the process id) and anything else stay
    for name in ("0_0", "1_3"):
        (sd.app_dir / name / "rocksdb" / "counts").mkdir(parents=True)
        (sd.app_dir / name / ".checkpoint").write_text("0\n0\n")
    (sd.app_dir / "global" / "rocksdb").mkdir(parents=True)
    (sd.app_dir / "notes").mkdir()
    sd.lock_application()
    (sd.app_dir / "eddy-process-metadata").write_text("{}")
    deleted = sd.clean(["global", "absent"])
    assert sorted(p.name for p in deleted) == ["0_0", "1_3", "global"]
    assert sorted(p.name for p in sd.app_dir.iterdir()) == [".lock", "eddy-process-metadata", "notes"]
    assert sd.clean(["global"]) == []  # nothing left to delete
    sd.close()

