"""Attach push replication to a `Broker` (``replication.mode = push``).

Every broker of a push cluster gets the follower side (the AppendRecords handler and the
fetcher's switch callback); the leader side pushes only where enabled: brokers listed in
``push.enabled.brokers`` (default: all) and topics without ``push.replication.enable=false``.
That gives the mixed mode the tests use: some leaders or topics push, the rest pull.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from replication.protocol import AppendRecordsBatchRequest, AppendRecordsRequest
from replication.push.errors import PushConfigError
from replication.push.follower import PushFollower
from replication.push.leader import PushLeader
from replication.push.manager import PushConfig, PushManager

if TYPE_CHECKING:  # pragma: no cover
    from replication.broker import Broker

log = logging.getLogger(__name__)


def push_mode_enabled(config: dict) -> bool:
    mode = str(config.get("replication.mode", "pull")).lower()
    if mode not in ("pull", "push"):
        raise PushConfigError(f"replication.mode must be 'pull' or 'push', got {mode!r}", key="replication.mode")
    return mode == "push"


def push_enabled_brokers(config: dict) -> set[int] | None:
    """``push.enabled.brokers``: None (all), a list of ids, or a comma-separated string."""
    value = config.get("push.enabled.brokers")
    if value is None or value == "":
        return None
    items = value.split(",") if isinstance(value, str) else value
    try:
        return {int(str(b).strip()) for b in items}
    except (TypeError, ValueError):
        raise PushConfigError(f"push.enabled.brokers must list broker ids, got {value!r}",
                              key="push.enabled.brokers") from None


class BrokerPush:
    """Push replication parts of one broker."""

    def __init__(self, broker: "Broker") -> None:
        config = PushConfig.from_mapping(broker.config)
        rm = broker.replica_manager

        def log_for(tp):
            p = rm.partitions.get(tp)
            return p.log if p is not None else None

        enabled = push_enabled_brokers(broker.config)
        self.manager = PushManager(broker.broker_id, broker.transport, config, log_for=log_for)
        self.leader = PushLeader(broker.broker_id, rm, self.manager,
                                 leader_enabled=enabled is None or broker.broker_id in enabled)
        self.manager.listener = self.leader
        self.follower = PushFollower(broker, config.follower_session_timeout_ms)
        broker.extra_handlers[AppendRecordsBatchRequest] = self.follower.handle
        broker.extra_handlers[AppendRecordsRequest] = self.follower.handle
        broker.fetcher_manager.on_switch_to_push = self.follower.on_switch_to_push

        prev_leader, prev_follower, prev_removed = rm.on_become_leader, rm.on_become_follower, rm.on_partition_removed
        leader = self.leader

        def on_become_leader(partition, changed):
            leader.on_become_leader(partition, changed)
            prev_leader(partition, changed)

        def on_become_follower(partition, needs_fetch):
            leader.on_become_follower(partition)
            prev_follower(partition, needs_fetch)

        def on_partition_removed(tp):
            leader.on_partition_removed(tp)
            prev_removed(tp)

        rm.on_become_leader = on_become_leader
        rm.on_become_follower = on_become_follower
        rm.on_partition_removed = on_partition_removed
        self.manager.startup()
        self.follower.start()

    def shutdown(self) -> None:
        self.manager.shutdown()
        self.follower.stop()

    def metrics(self) -> dict:
        out = self.manager.metrics_snapshot()
        out["FollowerEndedSessionCount"] = self.follower.sessions_ended_by_follower
        return out


def attach_push(broker: "Broker") -> BrokerPush | None:
    """Wire push replication into a starting broker (before it registers with the controller)."""
    if not push_mode_enabled(broker.config):
        return None
    return BrokerPush(broker)
