"""ProcessorStateManager: a task's stores, their changelog partitions, offsets and checkpoint.

Follows Kafka Streams' ProcessorStateManager / StateManagerUtil (semantics-restore.md steps 1-4,
13 and 14). A store's *offset* is the offset of the last changelog record it contains (the
checkpoint holds exactly that; restore seeks to offset + 1); None means unknown (restore from the
beginning).

Typical life of a task's state (StateManagerUtil in Kafka)::

    manager = ProcessorStateManager(task_id, TaskType.ACTIVE, eos_enabled, state_directory,
                                    collector=collector)
    register_state_stores(manager, stores)         # lock, init stores, load checkpoint
    ... restore through StoreChangelogReader, process, manager.checkpoint() on commit ...
    close_state_manager(manager, dirty=False)      # flush, checkpoint, close, unlock

On TaskCorruptedError: `manager.mark_changelog_as_corrupted(...)`, `close_state_manager(manager,
dirty=True, wipe=eos_enabled)`, then register the stores again: they restore from offset 0.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, Optional

from confluent_kafka import TopicPartition

from state.checkpoint import OFFSET_UNKNOWN, OffsetCheckpoint
from state.directory import StateDirectory
from state.errors import StateError, TaskCorruptedError
from state.store import BatchRestoreCallback, StateStore
from state.task_id import TaskId
from state.timestamped import TimestampedKeyValueStore, restore_converter

logger = logging.getLogger(__name__)

# Kafka's AbstractTask.OFFSET_DELTA_THRESHOLD_FOR_CHECKPOINT.
OFFSET_DELTA_THRESHOLD_FOR_CHECKPOINT = 10_000
_TOPIC_RE = re.compile(r"[a-zA-Z0-9._-]{1,249}\Z")


class TaskType(Enum):
    ACTIVE = "ACTIVE"
    STANDBY = "STANDBY"


def changelog_topic_name(application_id: str, store_name: str) -> str:
    """`<application.id>-<store>-changelog`."""
    return f"{application_id}-{store_name}-changelog"


@dataclass
class StoreMetadata:
    """What the manager knows about one registered store."""

    store: StateStore
    restore_callback: Optional[BatchRestoreCallback]
    changelog_partition: Optional[TopicPartition]  # None: not logged
    offset: Optional[int] = None  # last changelog offset contained in the store; None = unknown
    corrupted: bool = False
    # Kafka's record converter: `convert(records, record_timestamps)` before the restore callback,
    # for a store whose changelog is in the timestamped format (state.timestamped.restore_converter)
    record_converter: Optional[Callable[[list, list], list]] = None
    # the changelog is a source topic of the task (topology.optimization reuse.ktable.source.topics):
    # the store logs nothing; restore stops at the committed offset, the offset is what was processed
    source: bool = False

    @property
    def name(self) -> str:
        return self.store.name


class ProcessorStateManager:
    """The state of one task (active or standby); implements `state.store.StoreContext`.

    Not thread-safe: a task's state is used by one stream thread at a time.
    """

    def __init__(
        self,
        task_id: TaskId,
        task_type: TaskType,
        eos_enabled: bool,
        state_directory: StateDirectory,
        changelog_topics: Optional[Mapping[str, str]] = None,
        changelog_partition: Optional[int] = None,
        collector: Any = None,
        config: Optional[dict] = None,
        thread_cache: Any = None,
        source_changelogs: Optional[Mapping[str, str]] = None,
    ) -> None:
        """`thread_cache` is the stream thread's `state.cache.ThreadCache`, shared by the caching
        stores of every task of that thread; caching stores read it from here when they are
        initialised (without one each caching store gets a private cache).

        `source_changelogs` maps a store to the source topic that is its changelog (Kafka's
        changelogAsSource): such a store logs nothing and is restored from that topic's partition
        of the task, up to the offset given by `set_restore_limits` (the offset the application
        committed there: later records are processed, not restored); its offset is what the task
        processed (`source_offsets`). A standby follows them up to the same limit, which its
        owner raises as the application commits."""
        if not isinstance(task_id, TaskId):
            raise StateError(f"task_id must be a TaskId, got {task_id!r}")
        if not isinstance(task_type, TaskType):
            raise StateError(f"task_type must be a TaskType, got {task_type!r}")
        self.task_id = task_id
        self.task_type = task_type
        self.eos_enabled = bool(eos_enabled)
        self.state_directory = state_directory
        self.application_id = state_directory.application_id
        self.config = dict(config or {})
        self.changelog_topics = dict(changelog_topics or {})
        self.source_changelogs = dict(source_changelogs or {})
        self._restore_limits: dict[TopicPartition, int] = {}
        # `source_offsets() -> {TopicPartition: last processed offset}`: the active task's, for the
        # source changelogs' offsets at a checkpoint
        self.source_offsets: Optional[Callable[[], Mapping[TopicPartition, int]]] = None
        self.changelog_partition = task_id.partition if changelog_partition is None else changelog_partition
        self.collector = collector
        self.thread_cache = thread_cache
        self.task_dir: Path = state_directory.directory_for_task(task_id)
        self.checkpoint_file = OffsetCheckpoint(self.task_dir / ".checkpoint")
        self._stores: dict[str, StoreMetadata] = {}
        self._by_changelog: dict[TopicPartition, StoreMetadata] = {}
        # store name -> (topic, partition) for the log_change hot path
        self._log_targets: dict[str, tuple[str, int]] = {}
        # Offsets at the last checkpoint; None until the stores are registered and initialised, so
        # that a half-registered task never overwrites a good checkpoint (Kafka: checkpointNeeded).
        self._offsets_at_last_checkpoint: Optional[dict[TopicPartition, int]] = None

    def __repr__(self) -> str:
        return f"ProcessorStateManager({self.task_type.value} {self.task_id}, stores={list(self._stores)})"

    @property
    def is_active(self) -> bool:
        return self.task_type is TaskType.ACTIVE

    def transition_task_type(self, task_type: TaskType) -> None:
        """Recycle the open stores for the other task type (standby promoted to active, or the
        reverse) without closing them: their offsets are kept, so a promoted standby restores
        only the tail. Unregister the changelogs from the reader first, register them again after."""
        if not isinstance(task_type, TaskType):
            raise StateError(f"task_type must be a TaskType, got {task_type!r}")
        self.task_type = task_type

    # ----------------------------------------------------------- StoreContext

    def store_dir(self, store_name: str) -> Path:
        return self.task_dir / "rocksdb" / store_name

    def register(
        self,
        store: StateStore,
        restore_callback: Optional[BatchRestoreCallback],
        *,
        logged: bool,
    ) -> None:
        """Called by `store.init(self)`. A logged store gets the changelog partition
        `<application.id>-<store>-changelog` / task partition (or the topic from changelog_topics)."""
        name = store.name
        if name in self._stores:
            raise StateError(f"task {self.task_id}: store {name!r} has already been registered")
        changelog_tp = None
        source_topic = self.source_changelogs.get(name)
        if source_topic is not None:
            if logged:
                raise StateError(f"task {self.task_id}: store {name!r} logs its changes, but its changelog is its "
                                 f"source topic {source_topic!r}: disable its logging")
            if restore_callback is None:
                raise StateError(f"task {self.task_id}: store {name!r} registered without a restore callback")
            changelog_tp = TopicPartition(source_topic, self.changelog_partition)
        elif logged:
            if restore_callback is None:
                raise StateError(
                    f"task {self.task_id}: logged store {name!r} registered without a restore callback"
                )
            topic = self.changelog_topics.get(name) or changelog_topic_name(self.application_id, name)
            if not _TOPIC_RE.match(topic):
                raise StateError(
                    f"task {self.task_id}: store {name!r} has an illegal changelog topic name {topic!r}"
                )
            changelog_tp = TopicPartition(topic, self.changelog_partition)
            if changelog_tp in self._by_changelog:
                raise StateError(
                    f"task {self.task_id}: changelog {topic}-{self.changelog_partition} of store "
                    f"{name!r} is already used by store {self._by_changelog[changelog_tp].name!r}"
                )
        # a source topic holds the raw values: a store of timestamped values stamps them on restore
        timestamped = _timestamped_changelog(store) if source_topic is None else _holds_timestamped(store)
        # (Eddy's old prefixed changelog format cannot be in a source topic: no check for it there)
        converter = restore_converter(name, check_legacy=source_topic is None) if timestamped else None
        meta = StoreMetadata(store, restore_callback, changelog_tp, record_converter=converter,
                             source=source_topic is not None)
        self._stores[name] = meta
        if changelog_tp is not None:
            self._by_changelog[changelog_tp] = meta
            if source_topic is None:
                self._log_targets[name] = (changelog_tp.topic, changelog_tp.partition)
        logger.debug("task %s: registered store %s (changelog %s)", self.task_id, name, changelog_tp)

    def log_change(
        self,
        store_name: str,
        key: bytes,
        value: Optional[bytes],
        timestamp: int,
        headers: Any = None,
    ) -> None:
        send = self._log_senders.get(store_name)
        if send is None:
            send = self._log_sender(store_name)
        send(key, value, timestamp, headers)

    def change_sender(self, store_name: str) -> Any:
        """`send(key, value, timestamp, headers)`: where log_change(store_name, ...) sends, for a
        batch of the store's changes (one lookup, not one a record; valid until the collector
        changes)."""
        send = self._log_senders.get(store_name)
        return send if send is not None else self._log_sender(store_name)

    def _log_sender(self, store_name: str) -> Any:
        """The collector's sender to the store's changelog partition (`partition_sender` where
        the collector offers it), kept until the collector changes."""
        try:
            topic, partition = self._log_targets[store_name]
        except KeyError:
            raise StateError(
                f"task {self.task_id}: store {store_name!r} is not registered as a logged store"
            ) from None
        collector = self.collector
        if collector is None:
            raise StateError(f"task {self.task_id}: no record collector to send changelog records to")
        make = getattr(collector, "partition_sender", None)
        if make is not None:
            send = make(topic, partition)
        else:
            def send(key: bytes, value: Optional[bytes], timestamp: int, headers: Any = None) -> None:
                collector.send(topic, key, value, partition=partition, timestamp=timestamp, headers=headers)
        self._log_senders[store_name] = send
        return send

    @property
    def collector(self) -> Any:
        """Where changelog records go (the task's record collector; None for a standby)."""
        return self._collector

    @collector.setter
    def collector(self, collector: Any) -> None:
        self._collector = collector
        self._log_senders: dict[str, Any] = {}

    # ----------------------------------------------------------- inspection

    @property
    def stores(self) -> dict[str, StoreMetadata]:
        return dict(self._stores)

    def get_store(self, name: str) -> StateStore:
        try:
            return self._stores[name].store
        except KeyError:
            raise StateError(f"task {self.task_id}: no store named {name!r}") from None

    def changelog_partitions(self) -> list[TopicPartition]:
        return list(self._by_changelog)

    def source_changelog_partitions(self) -> list[TopicPartition]:
        return [tp for tp, meta in self._by_changelog.items() if meta.source]

    def set_restore_limits(self, limits: Mapping[TopicPartition, int]) -> None:
        """Where the restore of these (source) changelogs stops, or a standby's updates pause: the
        offset the application committed on the partition, 0 without one (Kafka's restore end and
        standby limit of a source changelog)."""
        for tp, offset in limits.items():
            self.store_metadata(tp)  # raises for a partition that is not a changelog of this task
            self._restore_limits[TopicPartition(tp.topic, tp.partition)] = offset

    def restore_limit(self, changelog_tp: TopicPartition) -> Optional[int]:
        """The offset the restore of `changelog_tp` stops at beside its end, None for none. A
        source changelog without a limit set restores nothing (0): records past the committed
        offset must not be in the store before they are processed."""
        meta = self.store_metadata(changelog_tp)
        if not meta.source:
            return None
        return self._restore_limits.get(TopicPartition(changelog_tp.topic, changelog_tp.partition), 0)

    def store_metadata(self, changelog_tp: TopicPartition) -> StoreMetadata:
        try:
            return self._by_changelog[changelog_tp]
        except KeyError:
            raise StateError(
                f"task {self.task_id}: {changelog_tp.topic}-{changelog_tp.partition} is not a "
                "changelog of this task"
            ) from None

    def store_offset(self, changelog_tp: TopicPartition) -> Optional[int]:
        """The last changelog offset contained in the store; None when unknown."""
        return self.store_metadata(changelog_tp).offset

    def changelog_offsets(self) -> dict[TopicPartition, int]:
        """Next offset to fetch per changelog (0 when the store offset is unknown), like Kafka."""
        return {
            tp: 0 if meta.offset is None else meta.offset + 1 for tp, meta in self._by_changelog.items()
        }

    # ----------------------------------------------------------- checkpoint load

    def initialize_store_offsets_from_checkpoint(self, store_dir_is_empty: bool) -> None:
        """Steps 3-4: set each logged persistent store's offset from `.checkpoint`.

        Raises TaskCorruptedError (listing the changelog partitions) under EOS when the task
        directory holds state but the checkpoint has no offset for a store; CheckpointError when
        the file is malformed. Under EOS the file is deleted right after reading: while the task
        runs there must be no checkpoint, so a crash means wipe and restore.
        """
        loaded = self.checkpoint_file.read()
        missing = []
        for meta in self._stores.values():
            if meta.corrupted:
                raise StateError(
                    f"task {self.task_id}: cannot initialise offsets of corrupted store {meta.name!r}"
                )
            if meta.changelog_partition is None:
                logger.info("task %s: store %s is not logged and will not be restored", self.task_id, meta.name)
                continue
            if not meta.store.persistent:
                logger.info(
                    "task %s: in-memory store %s restores from the start of %s",
                    self.task_id, meta.name, _tp_str(meta.changelog_partition),
                )
                continue
            if meta.offset is not None:
                continue
            offset = loaded.pop(meta.changelog_partition, None)
            if offset is not None and offset != OFFSET_UNKNOWN:
                meta.offset = offset
            elif self.eos_enabled and not store_dir_is_empty:
                missing.append(meta.changelog_partition)
            else:
                logger.info(
                    "task %s: no checkpointed offset for store %s, restoring %s from the beginning",
                    self.task_id, meta.name, _tp_str(meta.changelog_partition),
                )
        if missing:
            raise TaskCorruptedError(
                f"task {self.task_id}: state directory {self.task_dir} is not empty but the checkpoint "
                f"has no offset for {', '.join(_tp_str(tp) for tp in missing)} under exactly-once: "
                "the stores may hold uncommitted data; wipe and restore",
                missing,
            )
        if loaded:
            logger.warning(
                "task %s: checkpoint offsets without a registered store: %s",
                self.task_id, {_tp_str(tp): o for tp, o in loaded.items()},
            )
        if self.eos_enabled:
            self.checkpoint_file.delete()
        self._offsets_at_last_checkpoint = self.changelog_offsets()

    # ----------------------------------------------------------- offsets

    def update_changelog_offsets(self, offsets: Mapping[TopicPartition, int]) -> None:
        """Record the offsets of the last changelog records written (from delivery reports).
        Partitions that are not changelogs of this task are ignored."""
        by_changelog = self._by_changelog
        for tp, offset in offsets.items():
            meta = by_changelog.get(tp)
            if meta is not None and offset is not None and offset >= 0:
                meta.offset = offset

    def refresh_changelog_offsets(self, written: Optional[Mapping[TopicPartition, int]] = None) -> None:
        """An active task's store offsets as they are now: the changelog records written
        (`written`, else the collector's `offsets()`, from delivery reports) and, for a source
        topic read as a changelog, the offsets the task processed (`source_offsets`)."""
        if written is None and self.collector is not None and hasattr(self.collector, "offsets"):
            written = self.collector.offsets()
        if written:
            self.update_changelog_offsets(written)
        if self.source_offsets is not None:
            self.update_changelog_offsets(self.source_offsets())

    def needs_record_timestamps(self, changelog_tp: TopicPartition) -> bool:
        """Whether `restore` of this changelog needs the records' timestamps (a timestamped store's
        changelog: the timestamp goes back in front of each value)."""
        return self.store_metadata(changelog_tp).record_converter is not None

    def restore(self, changelog_tp: TopicPartition, records: list, last_offset: int,
                timestamps: Optional[list] = None, *, stamped: bool = False) -> None:
        """Apply one batch of changelog records `[(key, value), ...]` through the store's batch
        restore callback (one WriteBatch for RocksDB) and set the store offset to `last_offset`,
        the offset of the batch's last record. When `needs_record_timestamps`, Kafka's record
        converter runs on the batch first, given `timestamps` (the records' timestamps), unless
        `stamped` says the values already have their timestamps in front (the reader's C pass)."""
        meta = self._by_changelog.get(changelog_tp)
        if meta is None:
            raise StateError(
                f"task {self.task_id}: restoring {_tp_str(changelog_tp)}, which is not a changelog "
                "of this task"
            )
        if records:
            convert = meta.record_converter
            if stamped:
                if convert is None:
                    raise StateError(f"task {self.task_id}: store {meta.name!r} is not timestamped: its "
                                     f"changelog {_tp_str(changelog_tp)} cannot restore stamped records")
            elif convert is not None:
                if timestamps is None:
                    raise StateError(
                        f"task {self.task_id}: store {meta.name!r} is timestamped: restoring "
                        f"{_tp_str(changelog_tp)} needs the records' timestamps")
                records = convert(records, timestamps)
            meta.restore_callback(records)
        meta.offset = last_offset

    def mark_changelog_as_corrupted(self, changelog_tps: Iterable[TopicPartition]) -> None:
        """Leave these changelogs' stores out of every later checkpoint (they restore from 0)."""
        unknown = []
        for tp in changelog_tps:
            meta = self._by_changelog.get(tp)
            if meta is None:
                unknown.append(tp)
            else:
                meta.corrupted = True
        if unknown:
            raise StateError(
                f"task {self.task_id}: cannot mark {', '.join(_tp_str(tp) for tp in unknown)} as "
                "corrupted: not changelogs of this task"
            )

    # ----------------------------------------------------------- flush / checkpoint

    def flush(self) -> None:
        """Flush every store; the first failure is raised after trying all."""
        first_error = None
        for meta in self._stores.values():
            try:
                meta.store.flush()
            except Exception as e:  # noqa: BLE001 - keep flushing the other stores
                logger.error("task %s: failed to flush store %s: %s", self.task_id, meta.name, e)
                if first_error is None:
                    first_error = e
        if first_error is not None:
            raise StateError(f"task {self.task_id}: failed to flush state stores: {first_error}") from first_error

    def flush_cache(self) -> None:
        """Write the caching layers' dirty entries down (to the inner stores and the changelog,
        forwarding them to their flush listeners) without flushing the inner stores: what a commit
        does (Kafka's `flushCache`); a full `flush()` happens only when checkpointing."""
        first_error = None
        for meta in self._stores.values():
            layer = meta.store
            try:
                while layer is not None:
                    flush_cache = getattr(layer, "flush_cache", None)
                    if callable(flush_cache):
                        flush_cache()
                        break
                    layer = getattr(layer, "wrapped", None)
            except Exception as e:  # noqa: BLE001 - keep flushing the other caches
                logger.error("task %s: failed to flush the cache of store %s: %s", self.task_id, meta.name, e)
                if first_error is None:
                    first_error = e
        if first_error is not None:
            raise StateError(f"task {self.task_id}: failed to flush store caches: {first_error}") from first_error

    def checkpoint(self, force: bool = False) -> bool:
        """Kafka's maybeCheckpoint: if forced, or more than 10,000 changelog offsets have passed
        since the last checkpoint, flush the stores and write `.checkpoint`. Returns True if written.

        Under EOS a RUNNING task must checkpoint only when forced (StreamTask.postCommit): the
        caller enforces that by not calling this unforced. Active tasks first take the written
        offsets from the collector's `offsets()` (delivery reports).
        """
        if self._offsets_at_last_checkpoint is None:
            return False  # stores not initialised: never overwrite the checkpoint
        if self.is_active:
            self.refresh_changelog_offsets()
        current = self.changelog_offsets()
        if not force:
            old = self._offsets_at_last_checkpoint
            delta = sum(o - old.get(tp, 0) for tp, o in current.items())
            if delta <= OFFSET_DELTA_THRESHOLD_FOR_CHECKPOINT:
                return False
        self.flush()
        self.write_checkpoint()
        self._offsets_at_last_checkpoint = current
        return True

    def write_checkpoint(self) -> None:
        """Write the offsets of the logged, persistent, uncorrupted stores (-4 when unknown)."""
        offsets = {
            tp: OFFSET_UNKNOWN if meta.offset is None else meta.offset
            for tp, meta in self._by_changelog.items()
            if meta.store.persistent and not meta.corrupted
        }
        logger.debug("task %s: writing checkpoint %s", self.task_id, offsets)
        self.checkpoint_file.write(offsets)

    # ----------------------------------------------------------- close / wipe

    def close(self, dirty: bool = False) -> None:
        """Close every store. Clean: flush and write a forced checkpoint first (also under EOS:
        a clean shutdown must not cost a full restore). Dirty: no flush, no checkpoint, stores
        closed with `close(dirty=True)` (caching layers drop their dirty entries instead of
        writing them to the store and the changelog), errors logged and swallowed. Stores are
        unregistered afterwards so the task can register them again (revive)."""
        first_error = None
        if not dirty and self._offsets_at_last_checkpoint is not None:
            self.checkpoint(force=True)
        for meta in self._stores.values():
            try:
                if meta.store.is_open:
                    if dirty:
                        meta.store.close(dirty=True)
                    else:
                        meta.store.close()
            except Exception as e:  # noqa: BLE001 - close the other stores too
                logger.error("task %s: failed to close store %s: %s", self.task_id, meta.name, e)
                if first_error is None:
                    first_error = e
        self._stores.clear()
        self._by_changelog.clear()
        self._log_targets.clear()
        self._offsets_at_last_checkpoint = None
        if first_error is not None and not dirty:
            raise StateError(f"task {self.task_id}: failed to close state stores: {first_error}") from first_error

    def wipe(self) -> None:
        """Delete the task's state: the stores and the checkpoint (step 14 under EOS). Open stores
        are closed dirty first. The `.lock` file stays: the caller still holds the directory."""
        if self._stores:
            self.close(dirty=True)
        logger.info("task %s: wiping state directory %s", self.task_id, self.task_dir)
        self.state_directory.wipe_task(self.task_id)


# --------------------------------------------------------------------------- StateManagerUtil


def register_state_stores(manager: ProcessorStateManager, stores: Iterable[StateStore]) -> None:
    """Steps 1-4: lock the task directory, init (= open and register) the stores, load offsets.

    Raises LockError if another thread or process holds the directory, TaskCorruptedError under
    EOS when the stores may hold uncommitted data. On TaskCorruptedError the stores are closed
    but the directory stays locked, so that the caller can wipe it safely with
    `close_state_manager(manager, dirty=True, wipe=True)`; on any other error it is unlocked.
    """
    sd = manager.state_directory
    sd.lock(manager.task_id)
    try:
        store_dir_is_empty = sd.is_empty(manager.task_id)
        for store in stores:
            if store.name not in manager._stores:
                store.init(manager)
        manager.initialize_store_offsets_from_checkpoint(store_dir_is_empty)
    except TaskCorruptedError:
        manager.close(dirty=True)
        raise
    except BaseException:
        manager.close(dirty=True)
        sd.unlock(manager.task_id)
        raise


def close_state_manager(manager: ProcessorStateManager, *, dirty: bool, wipe: bool = False) -> None:
    """Close the stores (clean: with a checkpoint), wipe the task directory if asked (Kafka wipes
    on a dirty close under EOS), and release the directory lock."""
    try:
        manager.close(dirty=dirty)
        if wipe:
            manager.wipe()
    finally:
        manager.state_directory.unlock(manager.task_id)


def _timestamped_changelog(store: StateStore) -> bool:
    """Whether a layer of the registered store logs in the timestamped format (Kafka's
    WrappedStateStore.isTimestamped, asked of the change-logging layer that decides the format)."""
    layer: Any = store
    while layer is not None:
        if getattr(type(layer), "timestamped_changelog", False):
            return True
        layer = getattr(layer, "wrapped", None)
    return False


def _holds_timestamped(store: StateStore) -> bool:
    """Whether a layer of the registered store keeps timestamped values (a source topic read as
    its changelog holds the raw values: restore stamps them, Kafka's RecordConverters)."""
    layer: Any = store
    while layer is not None:
        if isinstance(layer, TimestampedKeyValueStore):
            return True
        layer = getattr(layer, "wrapped", None)
    return False


def _tp_str(tp: TopicPartition) -> str:
    return f"{tp.topic}-{tp.partition}"
