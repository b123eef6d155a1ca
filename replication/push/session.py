"""Push sessions and the leader's per-(partition, follower) replication state.

A session is identified by (leader epoch, replica epoch, session id): the leader epoch fences
old leaders (rule 14), the replica epoch (the follower broker's epoch, bumped on restart)
fences a restarted follower, and the session id tells apart successive push sessions of the
same follower within one leadership. Session ids only grow; ids below INITIAL are special.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from replication.push.errors import InvalidPushSessionError, InvalidPushStateTransitionError

SESSION_ID_UNKNOWN = -1  # the follower has never been pushed to
SESSION_ID_FINAL = -2  # push disabled for good (manager shut down)
SESSION_ID_INITIAL = 0  # the first real session id is INITIAL + 1


@dataclass(frozen=True, slots=True)
class PushSession:
    """Identifies one push session to one follower replica."""

    leader_epoch: int
    replica_epoch: int
    session_id: int
    replica_id: int

    def __post_init__(self) -> None:
        for name in ("leader_epoch", "session_id", "replica_id"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise InvalidPushSessionError(f"PushSession.{name} must be an int >= 0, got {value!r}")
        if isinstance(self.replica_epoch, bool) or not isinstance(self.replica_epoch, int):
            raise InvalidPushSessionError(f"PushSession.replica_epoch must be an int, got {self.replica_epoch!r}")


class PushSessionEndReason(enum.Enum):
    """Why a push session ends, and whether the follower is sent an end-session signal.

    Not told: the follower already knows (it rejected a request, it fetched) or cannot be
    reached through this leader any more (new leader epoch, replica removed).
    """

    NEW_LEADER_EPOCH = ("NEW_LEADER_EPOCH", False)
    FOLLOWER_NOT_CAUGHT_UP = ("FOLLOWER_NOT_CAUGHT_UP", True)
    BUFFER_FULL = ("BUFFER_FULL", True)
    REQUEST_NON_RETRIABLE_ERROR = ("REQUEST_NON_RETRIABLE_ERROR", False)
    LEADER_REPLICATION_ERROR = ("LEADER_REPLICATION_ERROR", True)
    REPLICA_REMOVED = ("REPLICA_REMOVED", False)
    SHUTDOWN = ("SHUTDOWN", True)

    def __init__(self, label: str, send_end_session_request: bool) -> None:
        self.label = label
        self.send_end_session_request = send_end_session_request


class PushState(enum.Enum):
    """Leader-side replication mode of one follower of one partition."""

    PULL = "PULL"
    TRANSITIONING = "TRANSITIONING"  # switch sent in a fetch response, first push not yet acked
    PUSH = "PUSH"
    STOPPING = "STOPPING"  # the leader ended the session; the follower has not yet confirmed


_ALLOWED = {
    PushState.PULL: frozenset({PushState.TRANSITIONING}),
    PushState.TRANSITIONING: frozenset({PushState.PUSH, PushState.STOPPING}),
    PushState.PUSH: frozenset({PushState.STOPPING}),
    PushState.STOPPING: frozenset({PushState.PULL}),
}


class ReplicationState:
    """The leader's push state machine for one (partition, follower).

    PULL -> TRANSITIONING -> PUSH -> STOPPING -> PULL (TRANSITIONING may also go to STOPPING).
    `begin_session` allocates the next session id; ids never decrease.
    """

    __slots__ = ("replica_id", "state", "session_id", "session", "caught_up_fetches", "last_fetch",
                 "end_reason")

    def __init__(self, replica_id: int) -> None:
        self.replica_id = replica_id
        self.state = PushState.PULL
        self.session_id = SESSION_ID_INITIAL
        self.session: PushSession | None = None
        self.caught_up_fetches = 0
        self.last_fetch: object = None  # the last fetch request object seen (a parked fetch is read twice)
        self.end_reason: PushSessionEndReason | None = None

    def __repr__(self) -> str:
        return f"ReplicationState(replica={self.replica_id}, {self.state.value}, session={self.session_id})"

    def transition(self, to: PushState) -> None:
        if to not in _ALLOWED[self.state]:
            raise InvalidPushStateTransitionError(
                f"replica {self.replica_id}: push state cannot go from {self.state.value} to {to.value} "
                f"(session {self.session_id})")
        self.state = to

    def begin_session(self, leader_epoch: int, replica_epoch: int) -> PushSession:
        """PULL -> TRANSITIONING with a new, larger session id."""
        self.transition(PushState.TRANSITIONING)
        self.session_id += 1
        self.session = PushSession(leader_epoch, replica_epoch, self.session_id, self.replica_id)
        self.caught_up_fetches = 0
        self.end_reason = None
        return self.session

    def mark_pushing(self) -> None:
        """TRANSITIONING -> PUSH (the first AppendRecords was acknowledged)."""
        self.transition(PushState.PUSH)

    def begin_stop(self, reason: PushSessionEndReason) -> None:
        self.transition(PushState.STOPPING)
        self.end_reason = reason

    def finish_stop(self) -> None:
        """STOPPING -> PULL: the follower pulls again."""
        self.transition(PushState.PULL)
        self.session = None
        self.caught_up_fetches = 0

    @property
    def in_session(self) -> bool:
        return self.state is PushState.TRANSITIONING or self.state is PushState.PUSH
