"""The embedded replicated log. ``from replication import LocalCluster`` (imported lazily)."""


def __getattr__(name: str):
    if name == "LocalCluster":
        from replication.cluster import LocalCluster

        return LocalCluster
    raise AttributeError(f"module 'replication' has no attribute {name!r}")
