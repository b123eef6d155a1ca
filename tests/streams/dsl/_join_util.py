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
