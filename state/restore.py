"""StoreChangelogReader: restores active tasks' stores and keeps standby stores up to date.

Kafka Streams' StoreChangelogReader (semantics-restore.md steps 5-12) on the confluent-kafka
consumer API, so it runs on the embedded cluster and on Kafka alike.

The caller (a stream thread) registers the changelog partitions of its tasks' state managers and
calls `restore()` in its loop; each call is one bounded step: initialise changelogs whose end
offsets can be fetched, one `consume()`, apply the records batch by batch, detect completion.

The restore consumer must be created with `restore_consumer_config(eos_enabled)` merged into its
configuration (bootstrap.servers etc. added by the caller).

Hot path: a consumed batch of keyed records of one partition (the common case) becomes the
store's (key, value) records in one C pass (`eddy._messages.changelog_records`, reading the
fields of confluent_kafka.Message objects through their verified layout); otherwise keys and
values are taken with C-level `map()` calls, and null-key records and consumer events (end of
partition, errors) are found with one `None in keys` scan (events carry no key). Each changelog's
records go to the store in ONE `restore_batch` call (one RocksDB WriteBatch). Per-record offsets
are only read for the rare batch that crosses the restore end offset. A timestamped store's
changelog (Kafka's format: raw values) needs each record's timestamp put back in front of its
value, on active restores and standby updates alike: the C pass does it for the common batch
(`changelog_records(msgs, stamped=True)`), the state manager's record converter
(`state.timestamped.restore_converter`) for any other, given the records' timestamps.

Bulk loading: a store with `start_bulk_loading(records_expected)` / `end_bulk_loading()` (found
through its wrappers) is told when an active restore starts, with its size, and when it
completes, before the task serves reads (RocksDB: a vector memtable while restoring).
"""

from __future__ import annotations

import bisect
import logging
import operator
import sys
import time
from enum import Enum
from typing import Any, Callable, Iterable, Mapping, Optional

from confluent_kafka import (
    OFFSET_BEGINNING,
    KafkaError,
    KafkaException,
    Message,
    TopicPartition,
)

from eddy.messages import message_function
from state.errors import (
    IllegalStateTransitionError,
    RestoreListenerError,
    RestoreTimeoutError,
    StateError,
    TaskCorruptedError,
)
from state.listener import StandbyUpdateListener, StateRestoreListener, SuspendReason

logger = logging.getLogger(__name__)

MAX_POLL_RECORDS = 1000  # Kafka Streams' restore consumer max.poll.records, unless set
PROGRESS_LOG_INTERVAL_S = 10.0
DEFAULT_TASK_TIMEOUT_MS = 300_000

_KEY = Message.key
_VALUE = Message.value
_OFFSET = Message.offset
_ERROR = Message.error
_TIMESTAMP = Message.timestamp
_SECOND = operator.itemgetter(1)
_TOPIC = Message.topic
_PARTITION = Message.partition

_OUT_OF_RANGE_CODES = frozenset({KafkaError._AUTO_OFFSET_RESET, KafkaError.OFFSET_OUT_OF_RANGE})


# One pass in C over a consumed batch: [(key, value)] when the whole batch is keyed records of
# one partition (the restore's common case), None otherwise.
_changelog_records = message_function("changelog_records")


def restore_consumer_config(eos_enabled: bool, *, group_id: str = "eddy-restore-consumer") -> dict:
    """The settings a restore consumer needs (add bootstrap.servers and client.id).

    - `isolation.level=read_committed` under exactly-once: aborted changelog writes are never
      restored;
    - `auto.offset.reset=error`: an out-of-range position (changelog truncated or deleted below the
      checkpoint) must surface as an error and become TaskCorruptedError, never a silent jump;
    - `enable.partition.eof=true`: end-of-partition events tell the reader where the log ends,
      which steps over trailing transaction markers (never delivered to the application);
    - no auto commit: the restore consumer never commits; `group.id` is required by the client
      but no group is ever joined (partitions are assigned manually).
    """
    return {
        "group.id": group_id,
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
        "auto.offset.reset": "error",
        "enable.partition.eof": True,
        "isolation.level": "read_committed" if eos_enabled else "read_uncommitted",
    }


class ChangelogState(Enum):
    REGISTERED = "REGISTERED"
    RESTORING = "RESTORING"
    COMPLETED = "COMPLETED"


_CHANGELOG_PREV_STATES = {
    ChangelogState.REGISTERED: frozenset(),
    ChangelogState.RESTORING: frozenset({ChangelogState.REGISTERED}),
    ChangelogState.COMPLETED: frozenset({ChangelogState.RESTORING}),
}


class ReaderState(Enum):
    ACTIVE_RESTORING = "ACTIVE_RESTORING"
    STANDBY_UPDATING = "STANDBY_UPDATING"


_READER_PREV_STATES = {
    ReaderState.ACTIVE_RESTORING: frozenset({ReaderState.STANDBY_UPDATING}),
    ReaderState.STANDBY_UPDATING: frozenset({ReaderState.ACTIVE_RESTORING}),
}


class _Changelog:
    __slots__ = (
        "tp", "key", "state_manager", "store_name", "active", "state", "end_offset",
        "log_start_offset", "start_offset", "next_offset", "eof_offset", "beyond_end",
        "total_restored", "assigned", "first_failure", "needs_timestamps", "limit", "held",
    )

    def __init__(self, tp: TopicPartition, state_manager: Any, store_name: str, active: bool) -> None:
        self.tp = tp
        self.key = (tp.topic, tp.partition)
        self.state_manager = state_manager
        self.store_name = store_name
        self.active = active
        self.state = ChangelogState.REGISTERED
        self.end_offset: Optional[int] = None  # restore limit (exclusive); None for standbys
        self.log_start_offset: Optional[int] = None
        self.start_offset: Optional[int] = None
        self.next_offset: Optional[int] = None  # offset after the last record seen (our position)
        self.eof_offset: Optional[int] = None  # where the consumer last reported end of partition
        self.beyond_end = False  # a record at or past end_offset was seen
        self.total_restored = 0
        self.assigned = False
        self.first_failure: Optional[float] = None
        # a standby following a source topic as its changelog: it applies records below `limit`
        # (the committed offset) only; `held` while it waits there, unassigned, for the limit to move
        self.limit: Optional[int] = None
        self.held = False
        # a timestamped store's changelog: the state manager needs each record's timestamp
        needs = getattr(state_manager, "needs_record_timestamps", None)
        self.needs_timestamps = bool(needs(tp)) if needs is not None else False

    def transit(self, new: ChangelogState) -> None:
        if self.state not in _CHANGELOG_PREV_STATES[new]:
            raise IllegalStateTransitionError(
                f"changelog {_tp_str(self.tp)}: invalid transition {self.state.value} -> {new.value}"
            )
        self.state = new


class StoreChangelogReader:
    """Restores active changelogs to their end offsets and keeps standby changelogs updated.

    Not thread-safe: owned by one stream thread, like its restore consumer.
    """

    def __init__(
        self,
        restore_consumer: Any,
        listener: Optional[StateRestoreListener] = None,
        *,
        eos_enabled: bool = False,
        admin: Any = None,
        end_offsets_fn: Optional[Callable[[list[TopicPartition]], dict]] = None,
        poll_ms: int = 100,
        standby_listener: Optional[StandbyUpdateListener] = None,
        task_timeout_ms: int = DEFAULT_TASK_TIMEOUT_MS,
        request_timeout_s: float = 5.0,
        progress_bar: Optional[bool] = None,
        max_poll_records: int = MAX_POLL_RECORDS,
    ) -> None:
        """`end_offsets_fn(tps) -> {tp: (log_start_offset, end_offset)}` overrides how offsets are
        fetched; otherwise `admin.list_offsets` (READ_UNCOMMITTED, as KAFKA-10167 requires) when an
        admin client is given, else the consumer's `get_watermark_offsets(cached=False)`.
        `max_poll_records`: the most changelog records one poll brings."""
        if poll_ms < 0:
            raise StateError(f"poll_ms must be >= 0, got {poll_ms}")
        if type(max_poll_records) is not int or max_poll_records < 1:
            raise StateError(f"max_poll_records must be an int >= 1, got {max_poll_records!r}")
        self.max_poll_records = max_poll_records
        self.consumer = restore_consumer
        self.listener = listener or StateRestoreListener()
        self.standby_listener = standby_listener or StandbyUpdateListener()
        self.eos_enabled = bool(eos_enabled)
        self.admin = admin
        self.end_offsets_fn = end_offsets_fn
        self.poll_timeout_s = poll_ms / 1000.0
        self.task_timeout_s = task_timeout_ms / 1000.0
        self.request_timeout_s = request_timeout_s
        self._changelogs: dict[tuple[str, int], _Changelog] = {}
        self._state = ReaderState.ACTIVE_RESTORING
        if progress_bar is None:
            progress_bar = bool(getattr(sys.stderr, "isatty", lambda: False)())
        self._progress = _Progress(progress_bar)

    # ------------------------------------------------------------------ state

    @property
    def state(self) -> ReaderState:
        return self._state

    def _transit(self, new: ReaderState) -> None:
        if self._state not in _READER_PREV_STATES[new]:
            raise IllegalStateTransitionError(
                f"changelog reader: invalid transition {self._state.value} -> {new.value}"
            )
        logger.debug("changelog reader: %s -> %s", self._state.value, new.value)
        self._state = new

    def enforce_restore_active(self) -> None:
        """Restore actives from now on: pause every standby changelog."""
        if self._state is not ReaderState.ACTIVE_RESTORING:
            self._pause([c for c in self._changelogs.values() if not c.active and c.assigned])
            self._transit(ReaderState.ACTIVE_RESTORING)

    def transit_to_update_standby(self) -> None:
        """Update standbys from now on (legal only from ACTIVE_RESTORING): resume them."""
        if self._state is not ReaderState.ACTIVE_RESTORING:
            raise IllegalStateTransitionError(
                f"changelog reader: cannot transit to {ReaderState.STANDBY_UPDATING.value} "
                f"from {self._state.value}"
            )
        self._resume([c for c in self._changelogs.values() if not c.active and c.assigned])
        self._transit(ReaderState.STANDBY_UPDATING)

    def changelog_state(self, tp: TopicPartition) -> ChangelogState:
        return self._get(tp).state

    def is_empty(self) -> bool:
        return not self._changelogs

    def completed_changelogs(self) -> set[TopicPartition]:
        return {c.tp for c in self._changelogs.values() if c.state is ChangelogState.COMPLETED}

    def all_changelogs_completed(self) -> bool:
        return all(c.state is ChangelogState.COMPLETED for c in self._changelogs.values())

    def restored_offsets(self) -> dict[TopicPartition, int]:
        """The last applied offset of each registered changelog of a persistent store."""
        result = {}
        for c in self._changelogs.values():
            meta = c.state_manager.store_metadata(c.tp)
            if meta.store.persistent and meta.offset is not None:
                result[c.tp] = meta.offset
        return result

    def total_restored(self, tp: TopicPartition) -> int:
        return self._get(tp).total_restored

    # --------------------------------------------------------------- register

    def register(self, tp: TopicPartition, state_manager: Any) -> None:
        """Register a changelog partition of `state_manager` (a ProcessorStateManager) for restore
        (active task) or updating (standby task). Registering an active changelog while updating
        standbys switches the reader back to ACTIVE_RESTORING."""
        key = (tp.topic, tp.partition)
        if key in self._changelogs:
            raise StateError(f"changelog {_tp_str(tp)} is already registered")
        store_name = state_manager.store_metadata(tp).name  # raises if not a changelog of it
        active = bool(state_manager.is_active)
        self._changelogs[key] = _Changelog(TopicPartition(tp.topic, tp.partition), state_manager, store_name, active)
        logger.debug("registered %s changelog %s of store %s", "active" if active else "standby", _tp_str(tp), store_name)
        if active and self._state is ReaderState.STANDBY_UPDATING:
            self.enforce_restore_active()

    def unregister(self, tps: Iterable[TopicPartition], reason: SuspendReason = SuspendReason.MIGRATED) -> None:
        """Stop restoring/updating these changelogs (revocation, close, recycling). A RESTORING
        active gets on_restore_suspended, a standby on_update_suspended(reason)."""
        tps = list(tps)
        to_unassign = []
        first_error = None
        for tp in tps:
            c = self._changelogs.pop((tp.topic, tp.partition), None)
            if c is None:
                continue
            if c.assigned:
                to_unassign.append(c.tp)
            if c.state is ChangelogState.RESTORING:
                try:
                    if c.active:
                        self.listener.on_restore_suspended(c.tp, c.store_name, c.total_restored)
                    else:
                        self.standby_listener.on_update_suspended(
                            c.tp, c.store_name, c.state_manager.store_offset(c.tp), reason
                        )
                except Exception as e:  # noqa: BLE001 - unregister the rest first
                    if first_error is None:
                        first_error = e
        if to_unassign:
            self.consumer.incremental_unassign(to_unassign)
        self._progress.forget(tps)
        if first_error is not None:
            raise RestoreListenerError(f"state restore listener failed on suspend: {first_error}") from first_error

    def clear(self) -> None:
        """Unregister everything (thread shutdown)."""
        self.unregister([c.tp for c in list(self._changelogs.values())])

    # ---------------------------------------------------------------- restore

    def restore(self, tasks: Optional[Mapping] = None) -> int:
        """One bounded step of the restore loop; returns the number of records applied.

        `tasks` is accepted for API parity with Kafka and not needed. Raises TaskCorruptedError
        (listing every changelog partition of the affected tasks, `.task_ids` attached) when a
        changelog position is out of range.
        """
        if self._changelogs:
            self._initialize_changelogs()
        restoring = [c for c in self._changelogs.values() if c.state is ChangelogState.RESTORING]
        if self._state is ReaderState.ACTIVE_RESTORING:
            if not any(c.active for c in restoring):
                self._progress.finish()
                return 0
            timeout = self.poll_timeout_s
        else:
            if not any(not c.active for c in restoring):
                return 0
            timeout = 0.0  # standby updating must not hold up processing
        try:
            msgs = self.consumer.consume(self.max_poll_records, timeout)
        except KafkaException as e:
            err = e.args[0] if e.args and isinstance(e.args[0], KafkaError) else None
            if err is not None and err.code() in _OUT_OF_RANGE_CODES:
                self._raise_corrupted(list(self._changelogs.values()), str(err))
            raise StateError(f"restore consumer failed: {e}") from e
        applied = 0
        if msgs:
            applied = self._apply(msgs)
        self._check_completion(restoring, idle=not msgs)
        self._progress.maybe_report(self._changelogs.values())
        return applied

    # ---------------------------------------------------------- initialisation

    def _initialize_changelogs(self) -> None:
        pending = [c for c in self._changelogs.values() if c.state is ChangelogState.REGISTERED]
        if not pending:
            return
        offsets = self._fetch_offsets(pending)
        now = time.monotonic()
        ready = []
        for c in pending:
            found = offsets.get(c.key)
            if found is None:
                if c.first_failure is None:
                    c.first_failure = now
                elif now - c.first_failure > self.task_timeout_s:
                    raise RestoreTimeoutError(
                        f"could not fetch the end offset of changelog {_tp_str(c.tp)} within "
                        f"task.timeout.ms ({self.task_timeout_s * 1000:.0f} ms)"
                    )
                continue
            c.first_failure = None
            c.log_start_offset, end = found
            # a source topic read as the changelog: only up to the committed offset (what comes
            # after it is processed, not restored: Kafka's restore end for it, a standby's limit)
            limit_of = getattr(c.state_manager, "restore_limit", None)
            limit = limit_of(c.tp) if limit_of is not None else None
            if c.active:
                c.end_offset = end if limit is None else min(end, limit)
            else:
                c.limit = limit
            ready.append((c, end))
        if not ready:
            return
        # Out of range before fetching anything: a checkpoint past the log end (log truncated or
        # recreated) or below the log start (records deleted). Some brokers never answer such a
        # fetch with OFFSET_OUT_OF_RANGE, so check here, deterministically.
        corrupted = []
        for c, end in ready:
            offset = c.state_manager.store_offset(c.tp)
            if offset is not None and (offset + 1 > end or offset + 1 < c.log_start_offset):
                corrupted.append((c, offset, end))
        if corrupted:
            detail = "; ".join(
                f"{_tp_str(c.tp)}: store offset {o} but the log spans [{c.log_start_offset}, {e})"
                for c, o, e in corrupted
            )
            self._raise_corrupted([c for c, _, _ in corrupted], detail)

        assignment = []
        for c, _end in ready:
            offset = c.state_manager.store_offset(c.tp)
            if offset is not None:
                c.start_offset = offset + 1
                assignment.append(TopicPartition(c.tp.topic, c.tp.partition, offset + 1))
            else:
                c.start_offset = c.log_start_offset
                assignment.append(TopicPartition(c.tp.topic, c.tp.partition, OFFSET_BEGINNING))
            c.next_offset = c.start_offset
            c.eof_offset = None
            c.beyond_end = False
        held = {c.key for c, _ in ready if c.limit is not None and c.start_offset >= c.limit}
        assignment = [tp for tp in assignment if (tp.topic, tp.partition) not in held]
        if assignment:
            self.consumer.incremental_assign(assignment)
            # librdkafka keeps a partition's pause across unassign and assign (Java's consumer
            # forgets it): a changelog paused in an earlier registration (a task revived) must
            # fetch again.
            self.consumer.resume(assignment)
        for c, _ in ready:
            c.held = c.key in held
            c.assigned = not c.held
            c.transit(ChangelogState.RESTORING)
        if self._state is ReaderState.ACTIVE_RESTORING:
            self._pause([c for c, _ in ready if not c.active and c.assigned])
        for c, _end in ready:
            if c.active:
                end = c.end_offset
                logger.info(
                    "restoring store %s of task %s from %s: offsets %d to %d",
                    c.store_name, c.state_manager.task_id, _tp_str(c.tp), c.start_offset, end,
                )
                self._call(self.listener.on_restore_start, "on_restore_start", c.tp, c.store_name, c.start_offset, end)
                start_bulk_loading = self._store_hook(c, "start_bulk_loading")
                if start_bulk_loading is not None:
                    # at most this many records: compaction and transaction markers leave gaps
                    start_bulk_loading(max(end - c.start_offset, 0))
                self._progress.started(c)
            else:
                self._call(self.standby_listener.on_update_start, "on_update_start", c.tp, c.store_name, c.start_offset)
        # Restored already (empty changelog, or checkpoint at the end): complete without a fetch.
        self._check_completion([c for c, _ in ready if c.active], idle=False)

    def _fetch_offsets(self, pending: list[_Changelog]) -> dict[tuple[str, int], tuple[int, int]]:
        tps = [c.tp for c in pending]
        if self.end_offsets_fn is not None:
            try:
                raw = self.end_offsets_fn(tps)
            except KafkaException as e:
                logger.debug("end offsets not available yet: %s", e)
                return {}
            return {(tp.topic, tp.partition): (lo, hi) for tp, (lo, hi) in raw.items()}
        if self.admin is not None:
            return self._fetch_offsets_admin(tps)
        result = {}
        for tp in tps:
            try:
                lo, hi = self.consumer.get_watermark_offsets(tp, timeout=self.request_timeout_s, cached=False)
            except KafkaException as e:
                logger.debug("end offset of %s not available yet: %s", _tp_str(tp), e)
                continue
            if lo is not None and hi is not None and lo >= 0 and hi >= 0:
                result[(tp.topic, tp.partition)] = (lo, hi)
        return result

    def _fetch_offsets_admin(self, tps: list[TopicPartition]) -> dict:
        from confluent_kafka.admin import OffsetSpec

        try:
            latest = list_offsets(self.admin, tps, OffsetSpec.latest(), self.request_timeout_s)
            earliest = list_offsets(self.admin, tps, OffsetSpec.earliest(), self.request_timeout_s)
        except KafkaException as e:
            logger.debug("list_offsets failed: %s", e)
            return {}
        return {k: (earliest[k], latest[k]) for k in latest if k in earliest}

    # ---------------------------------------------------------------- applying

    def _apply(self, msgs: list) -> int:
        if _changelog_records is not None:
            first = msgs[0]
            c = self._changelogs.get((first.topic(), first.partition()))
            stamped = c is not None and c.needs_timestamps
            fast = _changelog_records(msgs, stamped)
            if fast is not None:
                # all of first's partition, no events in the batch (they carry no key): nothing
                # to log for an unknown partition
                return self._apply_changelog(c, msgs, fast[2], stamped) if c is not None else 0
        n = len(msgs)
        # list.count compares by identity first: one topic str and one partition int repeated
        # make these two C-level scans (no per-record tuple).
        topics = list(map(_TOPIC, msgs))
        partitions = list(map(_PARTITION, msgs))
        topic = topics[0]
        partition = partitions[0]
        if topics.count(topic) == n and partitions.count(partition) == n:
            # the common case: the whole batch is one partition
            return self._apply_group((topic, partition), msgs)
        groups: dict[tuple[str, int], list] = {}
        for m, tp in zip(msgs, zip(topics, partitions)):
            g = groups.get(tp)
            if g is None:
                g = groups[tp] = []
            g.append(m)
        applied = 0
        for tp, ms in groups.items():
            applied += self._apply_group(tp, ms)
        return applied

    def _apply_group(self, key: tuple, msgs: list) -> int:
        c = self._changelogs.get(key)
        if c is not None:
            return self._apply_changelog(c, msgs)
        for m in msgs:
            err = m.error()
            if err is not None and err.code() != KafkaError._PARTITION_EOF:
                logger.warning("restore consumer error (%s-%s): %s", m.topic(), m.partition(), err)
        return 0

    def _apply_changelog(self, c: _Changelog, msgs: list, records: Optional[list] = None,
                         stamped: bool = False) -> int:
        """Apply one partition's consumed messages; `records`, when given, are their (key,
        value) pairs, all keyed (no events among the messages), with `stamped` their values as a
        timestamped store keeps them (the C pass put each record's timestamp in front)."""
        if c.state is not ChangelogState.RESTORING:
            return 0  # completed actives ignore what arrives after their end; stale fetches
        if records is not None:
            keys = None
        else:
            keys = list(map(_KEY, msgs))
        # all() is a cheap truth scan; only a falsy key (None, or an empty key) pays for the
        # exact None check.
        if keys is not None and not all(keys) and None in keys:
            # Slow path: consumer events (end of partition, errors) and null-key records.
            data = []
            for m in msgs:
                err = m.error()
                if err is None:
                    data.append(m)
                    continue
                code = err.code()
                if code == KafkaError._PARTITION_EOF:
                    c.eof_offset = m.offset()
                elif code in _OUT_OF_RANGE_CODES:
                    self._raise_corrupted([c], str(err))
                else:
                    logger.warning("restore consumer error on %s: %s", _tp_str(c.tp), err)
            if not data:
                return 0
            c.next_offset = data[-1].offset() + 1
            data = [m for m in data if m.key() is not None]  # Kafka drops null-key changelog records
            keys = None
        else:
            data = msgs
            c.next_offset = msgs[-1].offset() + 1
        if not data:
            return 0
        end = c.end_offset if c.active else c.limit
        last_offset = data[-1].offset()
        if end is not None and last_offset >= end:
            # The rare batch crossing the restore end: only offsets < end are restored.
            offsets = list(map(_OFFSET, data))
            limit = bisect.bisect_left(offsets, end)
            if c.active:
                c.beyond_end = True
            else:
                self._hold(c)
            if limit < len(data):
                data = data[:limit]
                keys = None
                if records is not None:
                    records = records[:limit]
            if not data:
                return 0
            last_offset = offsets[limit - 1]
        if records is None:
            if keys is None:
                keys = list(map(_KEY, data))
            records = list(zip(keys, map(_VALUE, data)))
        if stamped:
            c.state_manager.restore(c.tp, records, last_offset, stamped=True)
        elif c.needs_timestamps:
            # (type, timestamp) pairs -> timestamps, in C-level passes
            c.state_manager.restore(c.tp, records, last_offset, list(map(_SECOND, map(_TIMESTAMP, data))))
        else:
            c.state_manager.restore(c.tp, records, last_offset)
        count = len(records)
        c.total_restored += count
        if c.active:
            self._call(self.listener.on_batch_restored, "on_batch_restored", c.tp, c.store_name, last_offset, count)
        else:
            self._call(self.standby_listener.on_batch_loaded, "on_batch_loaded", c.tp, c.store_name, last_offset, count)
        return count

    def _hold(self, c: _Changelog) -> None:
        """A standby reached its limit: unassigned, so that what follows is fetched again from
        the limit once it moves (update_limits), not applied before its input is committed."""
        c.next_offset = c.limit
        c.held = True
        if c.assigned:
            self.consumer.incremental_unassign([c.tp])
            c.assigned = False

    def update_limits(self) -> None:
        """Standby changelogs whose limit moved (the state manager's restore_limit: a source
        topic's committed offset) apply records up to the new one: a held one fetches again."""
        release = []
        for c in self._changelogs.values():
            if c.active or c.limit is None or c.state is not ChangelogState.RESTORING:
                continue
            limit = c.state_manager.restore_limit(c.tp)
            if limit is None or limit <= c.limit:
                continue
            c.limit = limit
            if c.held:
                c.held = False
                release.append(c)
        if not release:
            return
        tps = [TopicPartition(c.tp.topic, c.tp.partition, c.next_offset) for c in release]
        self.consumer.incremental_assign(tps)
        self.consumer.resume(tps)  # a pause outlives unassign and assign (see _initialize_changelogs)
        for c in release:
            c.assigned = True
        if self._state is ReaderState.ACTIVE_RESTORING:
            self._pause(release)

    # -------------------------------------------------------------- completion

    def _check_completion(self, changelogs: list[_Changelog], *, idle: bool) -> None:
        done = []
        for c in changelogs:
            if not c.active or c.state is not ChangelogState.RESTORING:
                continue
            if self._restored_to_end(c, idle):
                done.append(c)
        if not done:
            return
        self._pause(done)
        for c in done:
            c.transit(ChangelogState.COMPLETED)
            self._end_bulk_loading(c)
            logger.info(
                "restored store %s of task %s from %s: %d records",
                c.store_name, c.state_manager.task_id, _tp_str(c.tp), c.total_restored,
            )
            self._progress.completed(c)
            self._call(self.listener.on_restore_end, "on_restore_end", c.tp, c.store_name, c.total_restored)

    def _end_bulk_loading(self, c: _Changelog) -> None:
        """The store's restore is complete: a store that loads restores in a bulk mode (RocksDB:
        a memtable that reads must not see) leaves it now, before its task serves reads, as
        Kafka's RocksDBStore did in onRestoreEnd."""
        end = self._store_hook(c, "end_bulk_loading")
        if end is not None:
            end()

    @staticmethod
    def _store_hook(c: _Changelog, name: str) -> Optional[Callable]:
        """The store's bulk-loading method `name`, looked up through the wrappers (change
        logging, caching) of the registered store; None for stores without one."""
        store = c.state_manager.store_metadata(c.tp).store
        while store is not None:
            hook = getattr(store, name, None)
            if hook is not None:
                return hook
            store = getattr(store, "wrapped", None)
        return None

    def _restored_to_end(self, c: _Changelog, idle: bool) -> bool:
        end = c.end_offset
        if end == 0 or c.beyond_end:
            return True
        if c.next_offset is not None and c.next_offset >= end:
            return True
        eof = c.eof_offset
        if eof is not None:
            # The consumer reached the end of the partition at `eof` (past trailing transaction
            # markers, which are never delivered to the application).
            if eof >= end:
                return True
            if not self.eos_enabled and eof >= (c.next_offset or 0):
                # The broker listed an end offset past the partition's real end. On a correct
                # broker this cannot happen at read_uncommitted; under EOS it means an open
                # transaction, which we must wait for, as Kafka does.
                logger.warning(
                    "changelog %s: listed end offset %d but the partition ends at %d; "
                    "treating the restore as complete", _tp_str(c.tp), end, eof,
                )
                return True
        if idle:
            # Without end-of-partition events (consumer configured without them) fall back to
            # the consumer's position, which also steps over transaction markers.
            try:
                pos = self.consumer.position([c.tp])[0].offset
            except KafkaException:
                return False
            if pos >= 0 and pos >= end:
                return True
        return False

    # ------------------------------------------------------------------ helpers

    def _get(self, tp: TopicPartition) -> _Changelog:
        try:
            return self._changelogs[(tp.topic, tp.partition)]
        except KeyError:
            raise StateError(f"changelog {_tp_str(tp)} is not registered") from None

    def _pause(self, changelogs: list[_Changelog]) -> None:
        tps = [c.tp for c in changelogs if c.assigned]
        if tps:
            self.consumer.pause(tps)

    def _resume(self, changelogs: list[_Changelog]) -> None:
        tps = [c.tp for c in changelogs if c.assigned]
        if tps:
            self.consumer.resume(tps)

    def _call(self, fn, name: str, *args) -> None:
        try:
            fn(*args)
        except Exception as e:
            raise RestoreListenerError(f"state restore listener failed in {name}: {e}") from e

    def _raise_corrupted(self, changelogs: list[_Changelog], detail: str) -> None:
        managers = {id(c.state_manager): c.state_manager for c in changelogs}
        tps = [
            c.tp for c in self._changelogs.values() if id(c.state_manager) in managers
        ]
        task_ids = sorted({m.task_id for m in managers.values()})
        logger.warning(
            "changelog position out of range (changelog truncated, compacted or deleted on the "
            "broker): tasks %s are corrupted: %s", [str(t) for t in task_ids], detail,
        )
        err = TaskCorruptedError(
            f"changelog out of range for tasks {', '.join(str(t) for t in task_ids)} ({detail}); "
            "wipe and restore them from the changelog",
            tps,
        )
        err.task_ids = task_ids
        raise err


class _Progress:
    """A log line every 10 s while actives restore; a one-line bar on a terminal."""

    def __init__(self, bar: bool) -> None:
        self.bar = bar
        self.started_at: Optional[float] = None
        self.last_log = 0.0
        self.last_bar = 0.0
        self.restored_at_start = 0
        self.bar_shown = False

    def started(self, c: _Changelog) -> None:
        if self.started_at is None:
            self.started_at = self.last_log = time.monotonic()

    def completed(self, c: _Changelog) -> None:
        pass

    def forget(self, tps) -> None:
        pass

    def finish(self) -> None:
        if self.bar_shown:
            sys.stderr.write("\n")
            sys.stderr.flush()
            self.bar_shown = False
        self.started_at = None

    def maybe_report(self, changelogs) -> None:
        if self.started_at is None:
            return
        now = time.monotonic()
        log_due = now - self.last_log >= PROGRESS_LOG_INTERVAL_S
        bar_due = self.bar and now - self.last_bar >= 0.25
        if not (log_due or bar_due):
            return
        restored = remaining = 0
        active = 0
        for c in changelogs:
            if c.active and c.end_offset is not None:
                restored += c.total_restored
                if c.state is ChangelogState.RESTORING:
                    active += 1
                    remaining += max(0, c.end_offset - (c.next_offset or 0))
        rate = restored / max(now - self.started_at, 1e-9)
        if log_due:
            self.last_log = now
            logger.info(
                "restoring %d changelog partitions: %d records restored, about %d remaining, %.0f records/s",
                active, restored, remaining, rate,
            )
        if bar_due:
            self.last_bar = now
            total = restored + remaining
            frac = restored / total if total else 1.0
            width = 30
            filled = int(frac * width)
            sys.stderr.write(
                f"\rrestoring state [{'#' * filled}{'-' * (width - filled)}] {frac * 100:5.1f}% "
                f"{restored}/{total} records {rate:,.0f}/s "
            )
            sys.stderr.flush()
            self.bar_shown = True


def list_offsets(admin: Any, tps: Iterable[TopicPartition], spec: Any, timeout_s: float) -> dict[tuple[str, int], int]:
    """`admin.list_offsets` of `tps` at `spec` (an OffsetSpec) read uncommitted, as KAFKA-10167
    requires of changelog end offsets: {(topic, partition): offset}, without a partition whose
    offset is not available yet. A failed request raises KafkaException."""
    from confluent_kafka import IsolationLevel

    futures = admin.list_offsets({tp: spec for tp in tps}, isolation_level=IsolationLevel.READ_UNCOMMITTED,
                                 request_timeout=timeout_s)
    out = {}
    for tp, fut in futures.items():
        try:
            out[(tp.topic, tp.partition)] = fut.result().offset
        except KafkaException as e:
            logger.debug("offset of %s not available yet: %s", _tp_str(tp), e)
    return out


def _tp_str(tp: TopicPartition) -> str:
    return f"{tp.topic}-{tp.partition}"
