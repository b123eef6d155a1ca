"""Restore listeners (Kafka's StateRestoreListener and StandbyUpdateListener), in snake_case.

Subclass and override what you need; every callback defaults to doing nothing. Callbacks run on
the restoring thread, between batches: keep them short. An exception raised by a callback fails
the restore step (wrapped in `state.errors.RestoreListenerError`).
"""

from __future__ import annotations

from enum import Enum

from confluent_kafka import TopicPartition


class StateRestoreListener:
    """Notified while active tasks restore their stores from changelogs."""

    def on_restore_start(
        self, tp: TopicPartition, store_name: str, start_offset: int, end_offset: int
    ) -> None:
        """Restoration of `store_name` from `tp` begins at `start_offset`; it ends before
        `end_offset` (exclusive: the changelog's end when restoration started)."""

    def on_batch_restored(
        self, tp: TopicPartition, store_name: str, batch_end_offset: int, num_restored: int
    ) -> None:
        """A batch of `num_restored` records up to and including `batch_end_offset` was applied."""

    def on_restore_end(self, tp: TopicPartition, store_name: str, total_restored: int) -> None:
        """The store is restored to the end offset; `total_restored` records were applied."""

    def on_restore_suspended(self, tp: TopicPartition, store_name: str, total_restored: int) -> None:
        """Restoration stopped before the end because the changelog was unregistered (the task
        was revoked or closed); `total_restored` records had been applied."""


class SuspendReason(Enum):
    MIGRATED = "MIGRATED"  # the standby moved to another instance
    PROMOTED = "PROMOTED"  # the standby became an active task here


class StandbyUpdateListener:
    """Notified while standby tasks keep their stores up to date (Kafka's StandbyUpdateListener)."""

    def on_update_start(self, tp: TopicPartition, store_name: str, start_offset: int) -> None:
        """Updating `store_name` from `tp` begins at `start_offset`."""

    def on_batch_loaded(
        self, tp: TopicPartition, store_name: str, batch_end_offset: int, num_loaded: int
    ) -> None:
        """A batch of `num_loaded` records up to and including `batch_end_offset` was applied."""

    def on_update_suspended(
        self,
        tp: TopicPartition,
        store_name: str,
        store_offset: int | None,
        reason: SuspendReason,
    ) -> None:
        """Updating stopped at `store_offset` (the last applied offset) for `reason`."""
