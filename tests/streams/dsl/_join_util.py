"""Shared helpers of the join logic tests: the StoreContext an unlogged store needs, opened stores."""


class Context:
    """With `record_logs`, change-log calls are kept in `logged_changes` (store name, key, value,
    timestamp); otherwise a logging store is a test error."""

    application_id = "app"
    config = {}

    def __init__(self, task_dir, record_logs=False):
        self.task_dir = task_dir
        self.record_logs = record_logs
        self.registered = []
        self.logged_changes = []

    def store_dir(self, name):
        return self.task_dir / name

    def register(self, store, restore_callback, *, logged):
        self.registered.append((store, restore_callback, logged))

    def log_change(self, store_name, key, value, timestamp, headers=None):
        if not self.record_logs:
            raise AssertionError("unlogged stores must not log")
        self.logged_changes.append((store_name, key, value, timestamp))


def opened(builder, tmp_path):
    store = builder.build()
    store.init(Context(tmp_path))
    return store


class Table:
    """An upstream table: stores the update, returns the Change a join processor receives."""

    def __init__(self):
        from state.timestamped import ValueAndTimestamp
        from streams.dsl import Change

        self._vat = ValueAndTimestamp
        self._change = Change
        self.rows = {}

    def update(self, key, value, ts):
        old = self.rows.get(key)
        if value is None:
            self.rows.pop(key, None)
        else:
            self.rows[key] = self._vat(value, ts)
        return self._change(value, None if old is None else old.value)

    def get(self, key):
        return self.rows.get(key)
