"""Task state directories `<state.dir>/<application.id>/<subtopology>_<partition>/` and their locks.

A task directory is owned by exactly one thread of one process at a time. Ownership is an
`fcntl.flock` on `<task dir>/.lock` (excludes other processes: two instances of an app sharing a
state.dir) plus an in-process owner map (excludes other threads of this process, and lets the
error name the owning thread). The pid and thread of the holder are written into the lock file so
that another process can name it in its error.
"""

from __future__ import annotations

import logging
import os
import re
import shutil
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

from eddy import file_lock
from state.errors import LockError, StateDirectoryError
from state.task_id import InvalidTaskIdError, TaskId

logger = logging.getLogger(__name__)

LOCK_FILE_NAME = ".lock"
CHECKPOINT_FILE_NAME = ".checkpoint"
# Files that say nothing about whether a task has local state.
_NON_STATE_FILES = frozenset({LOCK_FILE_NAME, CHECKPOINT_FILE_NAME, CHECKPOINT_FILE_NAME + ".tmp"})
_TASK_DIR_RE = re.compile(r"[0-9]+_[0-9]+\Z")
_APP_ID_RE = re.compile(r"[a-zA-Z0-9._-]{1,249}\Z")


@dataclass
class _Owner:
    thread: threading.Thread
    fd: int


class StateDirectory:
    """Creates, locks, inspects and cleans the task directories of one application."""

    def __init__(self, state_dir: str | os.PathLike, application_id: str) -> None:
        if not isinstance(application_id, str) or not _APP_ID_RE.match(application_id) or application_id in (".", ".."):
            raise StateDirectoryError(
                f"application.id {application_id!r} cannot name a state directory: "
                "use 1-249 characters from [a-zA-Z0-9._-]"
            )
        self.state_dir = Path(state_dir)
        self.application_id = application_id
        self.app_dir = self.state_dir / application_id
        self._mutex = threading.Lock()
        self._owners: dict[TaskId, _Owner] = {}
        self._app_lock_fd: int | None = None

    def __repr__(self) -> str:
        return f"StateDirectory({str(self.app_dir)!r})"

    # ------------------------------------------------------------- directories

    def task_dir(self, task_id: TaskId) -> Path:
        """The path of a task's directory, without creating it."""
        if not isinstance(task_id, TaskId):
            raise StateDirectoryError(f"expected a TaskId, got {task_id!r}")
        return self.app_dir / str(task_id)

    def directory_for_task(self, task_id: TaskId) -> Path:
        """The task's directory, created if missing."""
        path = self.task_dir(task_id)
        try:
            path.mkdir(parents=True, exist_ok=True)
        except FileExistsError:
            raise StateDirectoryError(f"{path} exists and is not a directory") from None
        except NotADirectoryError:
            raise StateDirectoryError(f"a parent of {path} is not a directory") from None
        return path

    def checkpoint_path(self, task_id: TaskId) -> Path:
        return self.task_dir(task_id) / CHECKPOINT_FILE_NAME

    def is_empty(self, task_id: TaskId) -> bool:
        """True when the task directory holds no state (the lock and checkpoint files do not count)."""
        try:
            with os.scandir(self.task_dir(task_id)) as entries:
                return not any(e.name not in _NON_STATE_FILES for e in entries)
        except FileNotFoundError:
            return True

    def list_task_dirs(self) -> list[tuple[TaskId, Path]]:
        """The task directories that exist, sorted by task id; other entries are ignored."""
        result = []
        try:
            entries = list(os.scandir(self.app_dir))
        except FileNotFoundError:
            return []
        for entry in entries:
            if not _TASK_DIR_RE.match(entry.name) or not entry.is_dir(follow_symlinks=False):
                continue
            try:
                result.append((TaskId.parse(entry.name), Path(entry.path)))
            except InvalidTaskIdError:
                continue
        result.sort()
        return result

    # ------------------------------------------------------------------- locks

    def lock_application(self) -> None:
        """Take `<state.dir>/<application.id>/.lock` for this instance, as Kafka Streams locks
        its state directory: two running instances of one app must not share a state directory
        (they would share a process id, hence transactional ids and task directories). Raises
        LockError naming the directory and, when known, the holder."""
        with self._mutex:
            if self._app_lock_fd is not None:
                return
            self.app_dir.mkdir(parents=True, exist_ok=True)
            try:
                fd = file_lock.acquire(self.app_dir / LOCK_FILE_NAME)
            except file_lock.FileLockHeldError as e:
                raise LockError(
                    f"state directory {self.app_dir} is used by another running instance of application "
                    f"{self.application_id!r}" + (f" ({e.holder})" if e.holder else "")
                    + "; give each instance its own state.dir"
                ) from None
            except OSError as e:
                raise LockError(f"cannot lock state directory {self.app_dir}: {e}") from e
            self._app_lock_fd = fd

    def lock(self, task_id: TaskId) -> None:
        """Take the task directory for the calling thread; raises LockError if anyone else has it.

        Re-locking by the owning thread is a no-op.
        """
        current = threading.current_thread()
        with self._mutex:
            owner = self._owners.get(task_id)
            if owner is not None:
                if owner.thread is current:
                    return
                raise LockError(
                    f"task directory {self.task_dir(task_id)} is locked by thread "
                    f"{owner.thread.name!r} (ident {owner.thread.ident}) of this process"
                )
            fd = self._acquire_file_lock(task_id)
            self._owners[task_id] = _Owner(current, fd)

    def _acquire_file_lock(self, task_id: TaskId) -> int:
        # The cleaner of another process may delete the directory between our open() and flock():
        # then we would hold a lock on an unlinked file. Retry until the locked inode is the one
        # at the path.
        for _ in range(5):
            directory = self.directory_for_task(task_id)
            lock_path = directory / LOCK_FILE_NAME
            try:
                fd = file_lock.acquire(lock_path)
            except FileNotFoundError:
                continue
            except file_lock.FileLockHeldError as e:
                raise LockError(
                    f"task directory {directory} is locked by another process"
                    + (f" ({e.holder})" if e.holder else "")
                ) from None
            except OSError as e:
                raise LockError(f"cannot lock task directory {directory}: {e}") from e
            try:
                same = os.stat(lock_path).st_ino == os.fstat(fd).st_ino
            except FileNotFoundError:
                same = False
            if same:
                return fd
            file_lock.release(fd)
        raise LockError(f"task directory {self.task_dir(task_id)} keeps being removed while locking it")

    def unlock(self, task_id: TaskId) -> None:
        """Release the task directory. A no-op if nobody in this process holds it; LockError if
        another thread holds it."""
        current = threading.current_thread()
        with self._mutex:
            owner = self._owners.get(task_id)
            if owner is None:
                return
            if owner.thread is not current:
                raise LockError(
                    f"task directory {self.task_dir(task_id)} is locked by thread "
                    f"{owner.thread.name!r}, not by the calling thread {current.name!r}"
                )
            del self._owners[task_id]
            file_lock.release(owner.fd)

    def lock_owner(self, task_id: TaskId) -> threading.Thread | None:
        """The thread of this process that holds the task directory, if any."""
        with self._mutex:
            owner = self._owners.get(task_id)
            return owner.thread if owner else None

    def locked_tasks(self) -> set[TaskId]:
        with self._mutex:
            return set(self._owners)

    def close(self) -> None:
        """Release every lock this instance holds (whatever thread took it)."""
        with self._mutex:
            owners, self._owners = self._owners, {}
            app_fd, self._app_lock_fd = self._app_lock_fd, None
        for owner in owners.values():
            file_lock.release(owner.fd)
        if app_fd is not None:
            file_lock.release(app_fd)

    # ----------------------------------------------------------------- cleanup

    def clean_removed_tasks(
        self,
        owned_task_ids: Iterable[TaskId],
        cleanup_delay_ms: int,
        *,
        now_ms: int | None = None,
    ) -> list[TaskId]:
        """Delete the directories of tasks this instance does not own and that have not been
        modified for `cleanup_delay_ms` (Kafka's state.cleanup.delay.ms). Directories locked by
        anyone (here or in another process) are left alone. Returns the removed task ids."""
        if cleanup_delay_ms < 0:
            raise StateDirectoryError(f"cleanup_delay_ms must be >= 0, got {cleanup_delay_ms}")
        owned = set(owned_task_ids)
        now = int(time.time() * 1000) if now_ms is None else now_ms
        removed = []
        for task_id, path in self.list_task_dirs():
            if task_id in owned or self.lock_owner(task_id) is not None:
                continue
            try:
                last_modified_ms = int(path.stat().st_mtime * 1000)
            except FileNotFoundError:
                continue
            if now <= last_modified_ms + cleanup_delay_ms:
                continue
            try:
                self.lock(task_id)
            except LockError as e:
                logger.debug("not cleaning %s: %s", path, e)
                continue
            try:
                logger.info(
                    "Deleting obsolete state directory %s for task %s as %d ms have elapsed "
                    "(cleanup delay is %d ms)",
                    path, task_id, now - last_modified_ms, cleanup_delay_ms,
                )
                shutil.rmtree(path)
                removed.append(task_id)
            except OSError as e:
                logger.warning("failed to delete obsolete state directory %s: %s", path, e)
            finally:
                self.unlock(task_id)
        return removed

    def clean(self, other_dirs: Iterable[str] = ()) -> list[Path]:
        """Delete every task directory and the named `other_dirs` of the application's
        directory (Kafka's StateDirectory.clean, which App.clean_up runs: its `global` one), all
        of them even when one fails; the application's own files (its lock, the process id) stay.
        The caller holds the application lock (`lock_application`), so no running instance uses
        them. Returns the directories deleted; raises StateDirectoryError naming the first that
        could not be."""
        paths = [path for _task_id, path in self.list_task_dirs()]
        paths += [self.app_dir / name for name in other_dirs if (self.app_dir / name).is_dir()]
        deleted, failed = [], []
        for path in paths:
            logger.info("deleting the state directory %s (clean up)", path)
            try:
                shutil.rmtree(path)
                deleted.append(path)
            except OSError as e:
                logger.error("failed to delete the state directory %s: %s", path, e)
                failed.append((path, e))
        if deleted:
            _fsync_dir(self.app_dir)
        if failed:
            path, error = failed[0]
            raise StateDirectoryError(f"cannot delete the state directory {path}: {error}") from error
        return deleted

    def wipe_task(self, task_id: TaskId) -> None:
        """Delete a task's state (everything but the lock file, which the caller may hold)."""
        path = self.task_dir(task_id)
        try:
            entries = list(os.scandir(path))
        except FileNotFoundError:
            return
        for entry in entries:
            if entry.name == LOCK_FILE_NAME:
                continue
            if entry.is_dir(follow_symlinks=False):
                shutil.rmtree(entry.path)
            else:
                os.unlink(entry.path)
        _fsync_dir(path)


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
