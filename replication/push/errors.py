"""Typed errors of push replication."""

from __future__ import annotations

from replication.errors import IllegalStateError, InvalidConfigurationError, ReplicationError


class PushError(ReplicationError):
    """Base of push replication errors."""


class InvalidPushStateTransitionError(IllegalStateError, PushError):
    """A per-replica push state change that the state machine forbids (e.g. PULL -> PUSH)."""


class PushConfigError(InvalidConfigurationError, PushError):
    """A push.* configuration value is missing, of the wrong type or out of range."""


class InvalidPushSessionError(PushError, ValueError):
    """A PushSession field is missing, of the wrong type or out of range."""
