"""A real, minimal StoreContext for store tests: records registrations and change-log calls."""

import pathlib

from state.task_id import TaskId


class RecordingContext:
    """The task id comes from the directory name when it reads like one ("2_1"), else 0_1."""

    def __init__(self, task_dir: pathlib.Path, task_id: TaskId | None = None, config=None):
        self.application_id = "app"
        if task_id is None:
            try:
                task_id = TaskId.parse(pathlib.Path(task_dir).name)
            except Exception:
                task_id = TaskId(0, 1)
        self.task_id = task_id
        self.task_dir = task_dir
        self.config = config or {}
        self.registered = []
        self.logged_changes = []

    def store_dir(self, store_name):
        return self.task_dir / "rocksdb" / store_name

    def register(self, store, restore_callback, *, logged):
        self.registered.append((store, restore_callback, logged))

    def log_change(self, store_name, key, value, timestamp, headers=None):
        self.logged_changes.append((store_name, key, value, timestamp))
