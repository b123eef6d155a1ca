"""Exclusive locks on lock files, one process or thread at a time: the embedded cluster's data
directory (replication/cluster.py) and the state directory's application and task directories
(state/directory.py) take theirs here.

The lock is an `flock` on an open of the file: it conflicts with every other open of it, in this
process too, and the OS drops it with the descriptor (a killed process never leaves a directory
locked). The holder writes its pid and thread into the file, so that a refused caller can name it.
"""

from __future__ import annotations

import errno
import fcntl
import os
import threading

from eddy.errors import EddyError

_HELD_ERRNOS = (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES)


class FileLockHeldError(EddyError):
    """Another open of the lock file holds it. `holder` is the note it wrote ("" when none);
    callers raise their own typed error naming what the file locks."""

    def __init__(self, path: str | os.PathLike, holder: str) -> None:
        super().__init__(f"{os.fspath(path)} is locked" + (f" by {holder}" if holder else ""))
        self.path = path
        self.holder = holder


def acquire(path: str | os.PathLike) -> int:
    """Opens `path` (created if absent) and takes its exclusive lock without waiting; returns
    the descriptor, whose `release` gives the lock back. `FileLockHeldError` when another open
    holds it; any other OS error propagates (the descriptor closed in both cases)."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as e:
        held = e.errno in _HELD_ERRNOS
        holder = _read_holder(fd) if held else ""
        os.close(fd)
        if held:
            raise FileLockHeldError(path, holder) from None
        raise
    except BaseException:
        os.close(fd)
        raise
    _write_holder(fd)
    return fd


def release(fd: int) -> None:
    """Gives back a lock `acquire` took and closes its descriptor."""
    try:
        fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)


def _write_holder(fd: int) -> None:
    text = f"pid {os.getpid()} thread {threading.current_thread().name!r}\n".encode()
    try:
        os.ftruncate(fd, 0)
        os.pwrite(fd, text, 0)
    except OSError:  # the note is a courtesy for error messages only
        pass


def _read_holder(fd: int) -> str:
    try:
        return os.pread(fd, 200, 0).decode("utf-8", "replace").strip()
    except OSError:
        return ""
