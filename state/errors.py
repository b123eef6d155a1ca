"""Typed errors of the state layer."""

from eddy.errors import EddyError


class StateError(EddyError):
    """Base of state-layer errors."""


class StoreClosedError(StateError):
    """An operation on a store that is not open."""


class LockError(StateError):
    """A task directory is locked by another thread or process."""


class CheckpointError(StateError):
    """A `.checkpoint` file is malformed; the message names the file and line."""


class TaskCorruptedError(StateError):
    """A task's state cannot be trusted and must be wiped and restored from the changelog.

    Carries the changelog partitions that are corrupted so the caller can close the
    owning tasks dirty and revive them.
    """

    def __init__(self, message: str, changelog_partitions=()) -> None:
        super().__init__(message)
        self.changelog_partitions = tuple(changelog_partitions)


class InvalidStateStoreError(StateError):
    """A store is not available (not local, migrated, or the app is not running)."""


class StateDirectoryError(StateError):
    """The state directory or a task directory cannot be used (bad name, not a directory...)."""


class IllegalStateTransitionError(StateError):
    """A state machine was asked for a transition its current state does not allow."""


class StoreLayoutError(StateError):
    """A store directory was created with a different on-disk layout (or not by Eddy)."""


class InvalidStoreArgumentError(StateError, ValueError):
    """A bad argument to a store operation (None key, wrong type, negative timestamp...).

    The message names the store and the argument.
    """


class RestoreListenerError(StateError):
    """A user restore listener callback raised; the original exception is the cause."""


class RestoreTimeoutError(StateError):
    """Changelog offsets could not be fetched within task.timeout.ms."""
