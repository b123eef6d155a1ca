"""Push replication (issue 8): the leader pushes AppendRecords to caught-up followers.

Pull stays the way a follower catches up, truncates and recovers; push only carries a
caught-up in-sync follower's new records and high watermark, and falls back to pull on any
doubt (buffer full, error, leader change, follower not caught up).

Modules: `session` (PushSession, end reasons, the per-replica state machine), `manager`
(PushManager: buffers, pushers, metrics), `pusher` (Pusher threads), `leader` (when to
switch a follower to push, hooks on the leader's partitions), `follower` (the AppendRecords
handler), `wiring` (attaches all of it to a Broker).
"""

from replication.push.errors import (
    InvalidPushSessionError,
    InvalidPushStateTransitionError,
    PushConfigError,
    PushError,
)
from replication.push.manager import PushConfig, PushManager, PushMetrics
from replication.push.pusher import Pusher
from replication.push.session import (
    PushSession,
    PushSessionEndReason,
    PushState,
    ReplicationState,
    SESSION_ID_FINAL,
    SESSION_ID_INITIAL,
    SESSION_ID_UNKNOWN,
)

__all__ = [
    "InvalidPushSessionError",
    "InvalidPushStateTransitionError",
    "PushConfig",
    "PushConfigError",
    "PushError",
    "PushManager",
    "PushMetrics",
    "PushSession",
    "PushSessionEndReason",
    "PushState",
    "Pusher",
    "ReplicationState",
    "SESSION_ID_FINAL",
    "SESSION_ID_INITIAL",
    "SESSION_ID_UNKNOWN",
]
