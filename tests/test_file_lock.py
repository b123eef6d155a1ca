"""eddy/file_lock.py: one holder of a lock file at a time (any other open of it is refused, in
this process too), the refusal naming the holder; a released lock is free again."""

from __future__ import annotations

import os
import threading

import pytest

from eddy import file_lock


def test_a_held_lock_refuses_another_open_naming_the_holder_until_released(tmp_path):
    path = tmp_path / ".lock"
    fd = file_lock.acquire(path)
    try:
        with pytest.raises(file_lock.FileLockHeldError) as refused:
            file_lock.acquire(path)
        assert refused.value.holder == f"pid {os.getpid()} thread {threading.current_thread().name!r}"
        assert str(path) in str(refused.value)
    finally:
        file_lock.release(fd)
    again = file_lock.acquire(path)  # released: free
    file_lock.release(again)


def test_the_refused_open_leaves_no_descriptor_behind(tmp_path):
    path = tmp_path / ".lock"
    fd = file_lock.acquire(path)
    try:
        before = len(os.listdir("/proc/self/fd"))
        for _ in range(20):
            with pytest.raises(file_lock.FileLockHeldError):
                file_lock.acquire(path)
        assert len(os.listdir("/proc/self/fd")) == before
    finally:
        file_lock.release(fd)


def test_a_lock_file_in_a_missing_directory_is_an_os_error(tmp_path):
    with pytest.raises(FileNotFoundError):
        file_lock.acquire(tmp_path / "absent" / ".lock")
