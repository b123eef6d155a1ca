"""Typed errors of the runtime (tasks, threads, App)."""

from __future__ import annotations

from streams.errors import StreamsError


class RuntimeStateError(StreamsError):
    """A state machine (task, thread, App) was asked for a transition its state does not allow."""


class InvalidTimeoutError(StreamsError, ValueError):
    """A timeout argument that is not None or a number of seconds >= 0."""


class InvalidQueryArgumentError(StreamsError, ValueError):
    """An interactive-query metadata call got an argument it cannot use (no way to place the key)."""


class ThreadRemovalTimeoutError(StreamsError, TimeoutError):
    """App.remove_stream_thread: the thread did not stop within the timeout (it goes on stopping)."""


class TaskMigratedError(StreamsError):
    """The thread lost ownership of its tasks (fenced producer, stale group generation):
    they must be closed dirty and revived."""


class RetriableCommitError(TaskMigratedError):
    """An offset commit that did not happen but may on a later try: the group's coordinator is
    moving, loading or slow, or the group is between its join and sync. Nothing was committed,
    yet the tasks are still this thread's. The stream loop tries again a little later, for up to
    task.timeout.ms (Kafka Streams' KIP-572), then fails with CommitTimeoutError; any other caller
    treats it as the migration it derives from."""


class RebalanceInProgressError(RetriableCommitError):
    """The commit met REBALANCE_IN_PROGRESS (Kafka Streams skips commits during a rebalance)."""


class CommitTimeoutError(StreamsError):
    """Offset commits kept failing with retriable errors for longer than task.timeout.ms."""


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
