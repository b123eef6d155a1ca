"""Typed errors of the runtime (tasks, threads, App)."""

from __future__ import annotations

from streams.errors import StreamsError


class RuntimeStateError(StreamsError):
    """A state machine (task, thread, App) was asked for a transition its state does not allow."""


class TaskMigratedError(StreamsError):
    """The thread lost ownership of its tasks (fenced producer, stale group generation):
    they must be closed dirty and revived."""


class RebalanceInProgressError(TaskMigratedError):
    """An offset commit met REBALANCE_IN_PROGRESS: the group is between its join and sync, so
    nothing was committed, yet the tasks are still this thread's. The stream loop skips the
    commit and tries again on its next turn, as Kafka Streams skips commits during a rebalance;
    any other caller treats it as the migration it derives from."""


class MissingValidOffsetError(StreamsError):
    """An input partition has no valid offset (none committed, or the committed one out of range)
    and its topic's reset policy is neither earliest nor latest (Kafka Streams' "No valid
    committed offset found for input topic")."""


class ProductionError(StreamsError):
    """A record could not be delivered; raised at the next send or flush (production
    exception handler `fail`)."""


class MissingSourceTopicError(StreamsError):
    """A source topic of the topology does not exist."""


class CoPartitioningError(StreamsError):
    """Source topics of one sub-topology have different partition counts."""
