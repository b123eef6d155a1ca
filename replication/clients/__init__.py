"""Clients of the embedded cluster with confluent-kafka's Python API.

``Producer`` (when present), ``Consumer`` and ``AdminClient``; usually obtained through
``LocalCluster.producer(conf)``, ``.consumer(conf)`` and ``.admin(conf)``.
"""

from __future__ import annotations

from typing import Any

__all__ = ["Producer", "Consumer", "AdminClient"]


def __getattr__(name: str) -> Any:
    # Lazy, so importing one client does not import the others (or fail while one is missing).
    if name == "Consumer":
        from replication.clients.consumer import Consumer

        return Consumer
    if name == "AdminClient":
        from replication.clients.admin import AdminClient

        return AdminClient
    if name == "Producer":
        from replication.clients.producer import Producer

        return Producer
    raise AttributeError(f"module 'replication.clients' has no attribute {name!r}")
