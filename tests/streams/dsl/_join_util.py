"""Shared helpers of the join logic tests: the StoreContext an unlogged store needs, opened stores."""


class Context:
    application_id = "app"
    config = {}

    def __init__(self, task_dir):
        self.task_dir = task_dir
        self.registered = []

    def store_dir(self, name):
        return self.task_dir / name

    def register(self, store, restore_callback, *, logged):
        self.registered.append(store.name)

    def log_change(self, *args, **kwargs):
        raise AssertionError("unlogged stores must not log")


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
