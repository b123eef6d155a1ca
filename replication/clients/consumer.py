"""The embedded cluster's consumer, with `confluent_kafka.Consumer`'s API.

Three threads cooperate:

- the application thread calls `poll` / `consume`, which serve queued rebalance callbacks and
  slice pre-decoded `confluent_kafka.Message` lists off a queue (no per-record Python work);
- a fetcher thread keeps one long-poll fetch in flight per partition leader (the broker's
  fetch purgatory answers when data arrives), decodes responses with the C decoder
  (`replication.records.decode_messages`, which also drops control and aborted records), and
  resolves logical start positions (committed offset, earliest, latest);
- a group thread runs the group protocol against the cluster's `GroupCoordinator` (join,
  sync, heartbeats, leaving when `max.poll.interval.ms` is exceeded) and hands rebalance
  events to the application thread, waiting until they were served, as librdkafka does.

Positions: ``fetch_position`` runs ahead of ``position`` (the next offset the application
gets). A seek, pause, unassign or rebalance bumps a partition's version, which discards its
queued messages and any fetch in flight.
"""

from __future__ import annotations

import collections
import concurrent.futures
import logging
import re
import threading
import time
from typing import Any, Callable, Iterable

from confluent_kafka import (
    OFFSET_BEGINNING,
    OFFSET_END,
    OFFSET_INVALID,
    OFFSET_STORED,
    KafkaError,
    KafkaException,
    Message,
    TopicPartition,
)

from replication.clients.common import (
    ClientConfig,
    ClientConfigError,
    Metadata,
    RETRIABLE_LEADER_ERRORS,
    call_leader,
    check_bootstrap,
    cluster_metadata,
    kafka_error,
    make_topic_partition,
    kafka_exception,
)
from replication.errors import CorruptRecordError, ReplicationError
from replication.group_coordinator import (
    COOPERATIVE_ASSIGNORS,
    FENCED_INSTANCE_ID,
    ILLEGAL_GENERATION,
    REBALANCE_IN_PROGRESS,
    SUPPORTED_ASSIGNORS,
    UNKNOWN_MEMBER_ID,
    GroupCoordinatorError,
    OffsetAndMetadata,
)
from replication.protocol import (
    EARLIEST_TIMESTAMP,
    LATEST_TIMESTAMP,
    Errors,
    FetchPartition,
    FetchRequest,
    IsolationLevel,
    ListOffsetsPartition,
    ListOffsetsRequest,
)
from replication.protocol import TopicPartition as TP
from replication.log import MAX_TIMESTAMP
from replication.records import decode_messages, iter_batch_headers

log = logging.getLogger(__name__)

_RESET_CHOICES = {"earliest": "earliest", "smallest": "earliest", "beginning": "earliest",
                  "latest": "latest", "largest": "latest", "end": "latest", "error": "error"}
_ISOLATION_CHOICES = {"read_committed": "read_committed", "read_uncommitted": "read_uncommitted"}
_NO_END = 1 << 62


class ConsumerGroupMetadata:
    """What `consumer_group_metadata()` returns; `Producer.send_offsets_to_transaction` reads it."""

    __slots__ = ("group_id", "member_id", "generation_id", "group_instance_id")

    def __init__(self, group_id: str, member_id: str = "", generation_id: int = -1,
                 group_instance_id: str | None = None) -> None:
        self.group_id = group_id
        self.member_id = member_id
        self.generation_id = generation_id
        self.group_instance_id = group_instance_id

    def __repr__(self) -> str:
        return (f"ConsumerGroupMetadata(group_id={self.group_id!r}, member_id={self.member_id!r}, "
                f"generation_id={self.generation_id})")


class _Partition:
    """Per assigned partition state."""

    __slots__ = ("tp", "key", "version", "position", "fetch_position", "pending_offset", "paused",
                 "stopped", "in_flight", "buffered", "eof_offset", "leader", "leader_epoch",
                 "retry_at", "high_watermark", "low_watermark", "last_stable_offset", "stored",
                 "committed_sent", "leader_epoch_seen", "assigned_offset", "delivered")

    def __init__(self, key: TP, start: int) -> None:
        self.key = key
        # What assignment() reports, as librdkafka does: the offset given to assign (a seek
        # does not change it), OFFSET_INVALID shown as OFFSET_STORED, which is what it means.
        self.assigned_offset = OFFSET_STORED if start == OFFSET_INVALID else start
        self.version = 0
        self.position = OFFSET_INVALID  # next offset the application receives
        # position() reports `position` only once a message was delivered since the assign or
        # the last seek: librdkafka's application position is unset until then.
        self.delivered = False
        self.fetch_position = -1  # next offset to fetch; -1 while `pending_offset` is resolved
        self.pending_offset: int | None = start  # a logical or explicit start to resolve
        self.paused = False
        self.stopped = False  # auto.offset.reset=error hit: wait for a seek
        self.in_flight = False
        self.buffered = 0
        self.eof_offset = -1  # fetch position of the last end-of-partition event (-1: none)
        self.leader = -1
        self.leader_epoch = -1
        self.retry_at = 0.0
        self.high_watermark = -1
        self.low_watermark = -1
        self.last_stable_offset = -1
        self.stored: tuple[int, str | None, int] | None = None  # offset store (offset, metadata, epoch)
        self.committed_sent: int | None = None
        self.leader_epoch_seen = -1


class _RebalanceEvent:
    __slots__ = ("kind", "partitions", "incremental", "done")

    def __init__(self, kind: str, partitions: list[TP], incremental: bool) -> None:
        self.kind = kind  # "assign" | "revoke" | "lost"
        self.partitions = partitions
        self.incremental = incremental
        self.done = threading.Event()


def _error_message(error: KafkaError, topic: str | None = None, partition: int | None = None,
                   offset: int | None = None) -> Message:
    kwargs: dict[str, Any] = {"error": error}
    if topic is not None:
        kwargs["topic"] = topic
    if partition is not None:
        kwargs["partition"] = partition
    if offset is not None:
        kwargs["offset"] = offset
    return Message(**kwargs)


class _FailedTopicPartition(TopicPartition):
    """A TopicPartition carrying a per-partition error: confluent's `error` attribute is
    read-only from Python, librdkafka fills it in C. Compares like a TopicPartition."""

    def __init__(self, topic: str, partition: int, offset: int, error: KafkaError, **kwargs: Any) -> None:
        super().__init__(topic, partition, offset, **kwargs)
        self._error = error

    error = property(lambda self: self._error)

    def __repr__(self) -> str:
        return super().__repr__().replace("error=None", f"error={self._error}")

    def _key(self, other: Any) -> tuple | None:
        return (other.topic, other.partition) if isinstance(other, TopicPartition) else None

    def __eq__(self, other: Any) -> bool:
        return self._key(other) == (self.topic, self.partition)

    def __ne__(self, other: Any) -> bool:
        return not self == other

    def __lt__(self, other: Any) -> bool:
        key = self._key(other)
        if key is None:
            return NotImplemented
        return (self.topic, self.partition) < key

    def __gt__(self, other: Any) -> bool:
        key = self._key(other)
        if key is None:
            return NotImplemented
        return (self.topic, self.partition) > key

    def __hash__(self) -> int:
        return hash((self.topic, self.partition))


def _check_tp_list(partitions: Any, what: str) -> list:
    if not isinstance(partitions, (list, tuple)):
        raise TypeError(f"expected list of TopicPartition for {what}")
    for tp in partitions:
        if not isinstance(tp, TopicPartition):
            raise TypeError(f"expected list of TopicPartition for {what}, got {type(tp).__name__}")
    return list(partitions)


class Consumer:
    """A consumer of the embedded cluster with confluent_kafka.Consumer's API."""

    def __init__(self, conf: dict | None = None, *, cluster: Any = None, **kwargs: Any) -> None:
        merged = dict(conf or {})
        merged.update(kwargs)
        if cluster is None:
            raise ClientConfigError("replication.clients.Consumer needs the embedded cluster: use "
                                    "LocalCluster.consumer(conf) or streams.backends.for_config(...)")
        config = ClientConfig(merged, "consumer")
        check_bootstrap(config, cluster)
        self._cluster = cluster
        self._metadata = Metadata(cluster)
        self.group_id = config.get_str("group.id")
        if not self.group_id:
            raise ValueError("Failed to create consumer: group.id must be set")
        self.client_id = config.get_str("client.id", "rdkafka") or "rdkafka"
        self.group_instance_id = config.get_str("group.instance.id")
        self._auto_offset_reset = config.get_choice("auto.offset.reset", "latest", _RESET_CHOICES)
        self._enable_auto_commit = config.get_bool("enable.auto.commit", True)
        self._auto_commit_interval = config.get_int("auto.commit.interval.ms", 5000, 0) / 1000.0
        self._auto_offset_store = config.get_bool("enable.auto.offset.store", True)
        self._partition_eof = config.get_bool("enable.partition.eof", False)
        isolation = config.get_choice("isolation.level", "read_committed", _ISOLATION_CHOICES)
        self._read_committed = isolation == "read_committed"
        self._isolation = IsolationLevel.TXN_COMMITTED if self._read_committed else IsolationLevel.HIGH_WATERMARK
        self._session_timeout_ms = config.get_int("session.timeout.ms", 45000, 1, 3600000)
        self._heartbeat_interval = config.get_int("heartbeat.interval.ms", 3000, 1, 3600000) / 1000.0
        self._max_poll_interval_ms = config.get_int("max.poll.interval.ms", 300000, 1, 86400000)
        if self._max_poll_interval_ms < self._session_timeout_ms:
            raise ClientConfigError(
                f"consumer configuration 'max.poll.interval.ms' ({self._max_poll_interval_ms}) must be >= "
                f"'session.timeout.ms' ({self._session_timeout_ms})")
        self._fetch_min_bytes = config.get_int("fetch.min.bytes", 1, 1, 100000000)
        self._fetch_wait_max_ms = config.get_int("fetch.wait.max.ms", 500, 0, 300000)
        self._fetch_max_bytes = config.get_int("fetch.max.bytes", 52428800, 0, 2147483135)
        self._max_partition_fetch_bytes = config.get_int("max.partition.fetch.bytes", 1048576, 1, 1000000000)
        self._queued_min_messages = config.get_int("queued.min.messages", 100000, 1, 10000000)
        self._fetch_error_backoff = config.get_int("fetch.error.backoff.ms", 100, 0, 300000) / 1000.0
        strategies = config.get_str("partition.assignment.strategy", "range,roundrobin") or "range"
        self._strategies = [s.strip().lower() for s in strategies.split(",") if s.strip()]
        for s in self._strategies:
            if s not in SUPPORTED_ASSIGNORS:
                raise ClientConfigError(f"consumer configuration 'partition.assignment.strategy': unsupported "
                                        f"assignor {s!r} (supported: {', '.join(SUPPORTED_ASSIGNORS)})")
        if len({s in COOPERATIVE_ASSIGNORS for s in self._strategies}) > 1:
            raise ClientConfigError("consumer configuration 'partition.assignment.strategy': eager and "
                                    "cooperative assignors cannot be mixed")
        self._on_commit = config.get_callable("on_commit")
        self._error_cb = config.get_callable("error_cb")

        self._lock = threading.RLock()
        self._cv = threading.Condition(self._lock)
        self._closed = False
        self._closing = threading.Event()
        self._parts: dict[TP, _Partition] = {}
        self._queue: collections.deque = collections.deque()  # [state|None, version, messages, index]
        self._events: collections.deque = collections.deque()  # rebalance events and callbacks
        self._last_poll = time.monotonic()

        # group membership
        self._subscription: list[str] = []
        self._patterns: list[re.Pattern] = []
        self._on_assign = self._on_revoke = self._on_lost = None
        self._member_id = ""
        self._generation = -1
        self._owned: list[TP] = []  # partitions the group gave us (not yet revoked)
        self._group_wake = threading.Event()
        self._group_abort = threading.Event()
        self._need_join = False
        self._poll_exceeded = False
        # a static member fenced by a newer one with its group.instance.id: librdkafka's fatal
        # consumer error, after which this consumer takes no part in the group
        self._fenced = False
        self._reported_missing: set[str] = set()
        self._rebalance_handled = False
        self._protocol: str | None = None
        self._joined_counts: dict[str, int] = {}

        self._fetch_wake = threading.Event()
        self._responses: collections.deque = collections.deque()
        self._fetcher = threading.Thread(target=self._fetch_loop, name=f"consumer-fetcher-{self.group_id}",
                                         daemon=True)
        self._group_thread = threading.Thread(target=self._group_loop, name=f"consumer-group-{self.group_id}",
                                              daemon=True)
        self._commit_pool: concurrent.futures.ThreadPoolExecutor | None = None
        self._fetcher.start()
        self._group_thread.start()

    # -- helpers -------------------------------------------------------------------------------

    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError("Consumer closed")

    def _cluster_running(self) -> bool:
        return bool(getattr(self._cluster, "_started", True)) and self._cluster.controller is not None

    @property
    def _cooperative(self) -> bool:
        return bool(self._strategies) and self._strategies[0] in COOPERATIVE_ASSIGNORS

    # -- subscription ----------------------------------------------------------------------------

    def subscribe(self, topics: list[str], on_assign: Callable | None = None, on_revoke: Callable | None = None,
                  on_lost: Callable | None = None) -> None:
        self._check_open()
        if not isinstance(topics, (list, tuple)) or not all(isinstance(t, str) for t in topics):
            raise TypeError("expected list of topic unicode strings")
        for name, cb in (("on_assign", on_assign), ("on_revoke", on_revoke), ("on_lost", on_lost)):
            if cb is not None and not callable(cb):
                raise TypeError(f"{name} expects a callable")
        with self._lock:
            self._subscription = [t for t in topics if not t.startswith("^")]
            self._patterns = [re.compile(t) for t in topics if t.startswith("^")]
            self._on_assign, self._on_revoke, self._on_lost = on_assign, on_revoke, on_lost
            self._reported_missing = set()
            self._need_join = True
        self._group_wake.set()

    def unsubscribe(self) -> None:
        self._check_open()
        with self._lock:
            was_member = bool(self._subscription or self._patterns)
            self._subscription, self._patterns = [], []
            self._need_join = False
        if was_member:
            self._leave_group(revoke=True, leave=True)

    def _subscribed_topics(self) -> list[str]:
        topics = set(self._subscription)
        if self._patterns:
            for name in self._metadata.topics():
                if not name.startswith("__") and any(p.match(name) for p in self._patterns):
                    topics.add(name)
        return sorted(topics)

    # -- assignment ---------------------------------------------------------------------------

    def assign(self, partitions: list[TopicPartition]) -> None:
        self._check_open()
        partitions = _check_tp_list(partitions, "assign")
        with self._lock:
            self._rebalance_handled = True
            for state in self._parts.values():
                state.version += 1
            self._parts = {}
            self._add_partitions(partitions)
            self._cv.notify_all()
        self._fetch_wake.set()

    def unassign(self) -> None:
        self._check_open()
        with self._lock:
            self._rebalance_handled = True
            for state in self._parts.values():
                state.version += 1
            self._parts = {}
            # Queued data of the old partitions is dropped by version; errors stay queued.
            self._queue = collections.deque(item for item in self._queue if item[0] is None)

    def incremental_assign(self, partitions: list[TopicPartition]) -> None:
        self._check_open()
        partitions = _check_tp_list(partitions, "incremental_assign")
        with self._lock:
            self._rebalance_handled = True
            for tp in partitions:
                if TP(tp.topic, tp.partition) in self._parts:
                    raise kafka_exception(KafkaError._CONFLICT,
                                          f"{tp.topic} [{tp.partition}] is already part of the current assignment")
            self._add_partitions(partitions)
        self._fetch_wake.set()

    def incremental_unassign(self, partitions: list[TopicPartition]) -> None:
        self._check_open()
        partitions = _check_tp_list(partitions, "incremental_unassign")
        with self._lock:
            self._rebalance_handled = True
            for tp in partitions:
                if TP(tp.topic, tp.partition) not in self._parts:
                    raise kafka_exception(KafkaError._INVALID_ARG,
                                          f"{tp.topic} [{tp.partition}] is not part of the current assignment")
            for tp in partitions:
                state = self._parts.pop(TP(tp.topic, tp.partition))
                state.version += 1

    def _add_partitions(self, partitions: Iterable[TopicPartition]) -> None:
        for tp in partitions:
            if tp.partition < 0:
                raise kafka_exception(KafkaError._INVALID_ARG, f"invalid partition {tp.partition} for {tp.topic}")
            key = TP(tp.topic, tp.partition)
            offset = tp.offset
            self._parts[key] = _Partition(key, offset if offset is not None else OFFSET_INVALID)

    def assignment(self) -> list[TopicPartition]:
        self._check_open()
        with self._lock:
            return [TopicPartition(k.topic, k.partition, s.assigned_offset) for k, s in self._parts.items()]

    # -- positions ----------------------------------------------------------------------------

    def seek(self, partition: TopicPartition) -> None:
        self._check_open()
        if not isinstance(partition, TopicPartition):
            raise TypeError("seek() expects a TopicPartition")
        with self._lock:
            state = self._parts.get(TP(partition.topic, partition.partition))
            if state is None:
                count = self._metadata.partition_count(partition.topic)
                if count is not None and 0 <= partition.partition < count:
                    raise kafka_exception(KafkaError._STATE,
                                          f"Failed to seek to offset {partition.offset}: Local: Erroneous state")
                raise kafka_exception(KafkaError._UNKNOWN_PARTITION,
                                      f"Failed to seek to offset {partition.offset}: Local: Unknown partition")
            self._restart(state, partition.offset)
            state.delivered = False
        self._fetch_wake.set()

    def _restart(self, state: _Partition, offset: int) -> None:
        """Discard buffered data and start fetching from `offset` (logical or absolute)."""
        state.version += 1
        state.in_flight = False
        state.buffered = 0
        state.eof_offset = -1
        state.stopped = False
        state.fetch_position = -1
        state.pending_offset = offset
        if offset >= 0:
            state.position = offset

    def position(self, partitions: list[TopicPartition]) -> list[TopicPartition]:
        self._check_open()
        partitions = _check_tp_list(partitions, "position")
        out = []
        with self._lock:
            for tp in partitions:
                state = self._parts.get(TP(tp.topic, tp.partition))
                offset = state.position if state is not None and state.delivered else OFFSET_INVALID
                out.append(TopicPartition(tp.topic, tp.partition, offset))
        return out

    def pause(self, partitions: list[TopicPartition]) -> None:
        self._check_open()
        partitions = _check_tp_list(partitions, "pause")
        with self._lock:
            for tp in partitions:
                state = self._parts.get(TP(tp.topic, tp.partition))
                if state is None or state.paused:
                    continue
                state.paused = True
                # Queued data is dropped and fetched again on resume from the current position.
                if state.position >= 0:
                    self._restart(state, state.position)
                else:
                    state.version += 1
                    state.buffered = 0
                    state.in_flight = False

    def resume(self, partitions: list[TopicPartition]) -> None:
        self._check_open()
        partitions = _check_tp_list(partitions, "resume")
        with self._lock:
            for tp in partitions:
                state = self._parts.get(TP(tp.topic, tp.partition))
                if state is not None:
                    state.paused = False
        self._fetch_wake.set()

    # -- consuming ----------------------------------------------------------------------------

    def poll(self, timeout: float | None = None) -> Message | None:
        self._check_open()
        messages = self._consume(1, -1 if timeout is None else timeout)
        return messages[0] if messages else None

    def consume(self, num_messages: int = 1, timeout: float = -1) -> list[Message]:
        self._check_open()
        if not isinstance(num_messages, int) or num_messages < 0 or num_messages > 1000000:
            raise ValueError("num_messages must be between 0 and 1000000 (1M)")
        return self._consume(num_messages, timeout)

    def _consume(self, n: int, timeout: float) -> list[Message]:
        now = time.monotonic()
        self._last_poll = now
        if self._poll_exceeded:
            self._poll_exceeded = False
            self._group_wake.set()
        deadline = None if timeout is None or timeout < 0 else now + timeout
        out: list[Message] = []
        while True:
            if self._events:
                self._serve_events()
            with self._lock:
                queue = self._queue
                while queue and len(out) < n:
                    item = queue[0]
                    state, version, msgs, i = item[0], item[1], item[2], item[3]
                    if state is None:
                        queue.popleft()
                        out.append(msgs)  # an error or event message
                        continue
                    if version != state.version:
                        queue.popleft()
                        continue
                    need = n - len(out)
                    end = i + need
                    finished = end >= len(msgs)
                    if i == 0 and finished:
                        take = msgs
                        queue.popleft()
                    else:
                        take = msgs[i:end]
                        if finished:
                            queue.popleft()
                        else:
                            item[3] = end
                    last = take[-1]
                    if last.error() is None:
                        state.delivered = True
                        # Like librdkafka, the position steps past transaction markers (and
                        # aborted records) that follow the last record of a fetch.
                        state.position = item[4] if finished and item[4] > last.offset() else last.offset() + 1
                        if self._auto_offset_store:
                            epoch = last.leader_epoch()
                            state.stored = (state.position, None, epoch if epoch is not None else -1)
                    else:
                        data = [m for m in take if m.error() is None]
                        state.delivered = state.delivered or bool(data)
                        if data:
                            state.position = data[-1].offset() + 1
                            if self._auto_offset_store:
                                state.stored = (state.position, None, -1)
                    before = state.buffered
                    state.buffered = before - len(take)
                    if before >= self._queued_min_messages > state.buffered:
                        self._fetch_wake.set()
                    out.extend(take)
                if out or n == 0:
                    return out
                if self._events:
                    continue
                if deadline is None:
                    self._cv.wait(0.2)
                else:
                    remaining = deadline - time.monotonic()
                    if remaining <= 0:
                        return out
                    self._cv.wait(min(remaining, 0.2))
            self._last_poll = time.monotonic()
            if self._closed:
                raise RuntimeError("Consumer closed")

    def _push_error(self, error: KafkaError, topic: str | None = None, partition: int | None = None,
                    offset: int | None = None, front: bool = False) -> None:
        msg = _error_message(error, topic, partition, offset)
        with self._lock:
            item = [None, 0, msg, 0, -1]
            if front:
                self._queue.appendleft(item)
            else:
                self._queue.append(item)
            self._cv.notify_all()

    # -- rebalance events (served on the application thread) ----------------------------------------

    def _post_event(self, event: Any) -> None:
        with self._lock:
            self._events.append(event)
            self._cv.notify_all()

    def _serve_events(self) -> None:
        while True:
            with self._lock:
                if not self._events:
                    return
                event = self._events.popleft()
            try:
                if callable(event) and not isinstance(event, _RebalanceEvent):
                    event()
                else:
                    self._serve_rebalance(event)
            finally:
                if isinstance(event, _RebalanceEvent):
                    event.done.set()

    def _serve_rebalance(self, event: _RebalanceEvent) -> None:
        tps = [TopicPartition(k.topic, k.partition) for k in event.partitions]
        self._rebalance_handled = False
        if event.kind == "assign":
            if self._on_assign is not None:
                self._on_assign(self, tps)
            if not self._rebalance_handled and not self._closed:
                if event.incremental:
                    self.incremental_assign(tps)
                else:
                    self.assign(tps)
            return
        if event.kind == "revoke" and self._enable_auto_commit and not self._closed:
            self._commit_stored(sync=True, only=set(event.partitions))
        callback = self._on_revoke
        if event.kind == "lost" and self._on_lost is not None:
            callback = self._on_lost
        if callback is not None:
            callback(self, tps)
        if not self._rebalance_handled and not self._closed:
            if event.incremental:
                with self._lock:
                    present = [tp for tp in tps if TP(tp.topic, tp.partition) in self._parts]
                if present:
                    self.incremental_unassign(present)
            else:
                self.unassign()

    # -- group thread ---------------------------------------------------------------------------

    def _group_loop(self) -> None:
        next_heartbeat = 0.0
        next_auto_commit = time.monotonic() + self._auto_commit_interval
        while not self._closing.is_set():
            wait = 0.05
            try:
                now = time.monotonic()
                if self._enable_auto_commit and now >= next_auto_commit:
                    next_auto_commit = now + self._auto_commit_interval
                    self._auto_commit()
                with self._lock:
                    subscribed = bool(self._subscription or self._patterns)
                if not subscribed:
                    self._group_wake.wait(0.1)
                    self._group_wake.clear()
                    continue
                self._report_missing_topics()
                if self._poll_exceeded or self._fenced:
                    self._group_wake.wait(0.05)
                    self._group_wake.clear()
                    continue
                if self._member_id and now - self._last_poll > self._max_poll_interval_ms / 1000.0:
                    self._max_poll_exceeded()
                    continue
                if self._need_join or not self._member_id:
                    self._join()
                    next_heartbeat = 0.0
                    continue
                if self._topics_changed():
                    self._need_join = True
                    continue
                if now >= next_heartbeat or self._group_wake.is_set():
                    self._group_wake.clear()
                    error = self._cluster.group_coordinator.heartbeat(self.group_id, self._member_id,
                                                                     self._generation, self.group_instance_id)
                    next_heartbeat = time.monotonic() + self._heartbeat_interval
                    if error == FENCED_INSTANCE_ID:
                        self._fence("heartbeat")
                        continue
                    if error == REBALANCE_IN_PROGRESS:
                        self._need_join = True
                        continue
                    if error in (UNKNOWN_MEMBER_ID, ILLEGAL_GENERATION):
                        self._lose_partitions(f"heartbeat failed: error {error}")
                        continue
                wait = max(0.001, min(next_heartbeat - time.monotonic(), 0.05))
            except Exception:  # keep the group thread alive; log what went wrong
                if self._cluster_running():
                    log.exception("consumer %s: group thread error", self.group_id)
                wait = 0.1 if self._cluster_running() else 0.5
            self._group_wake.wait(wait)

    def _report_missing_topics(self) -> None:
        if not self._subscription:
            return
        topics = self._metadata.topics()
        for name in self._subscription:
            if name not in topics and name not in self._reported_missing:
                self._reported_missing.add(name)
                self._push_error(kafka_error(KafkaError.UNKNOWN_TOPIC_OR_PART,
                                             f"Subscribed topic not available: {name}: Broker: Unknown topic or partition"),
                                 topic=name)
            elif name in topics:
                self._reported_missing.discard(name)

    def _topics_changed(self) -> bool:
        topics = self._subscribed_topics()
        counts = {t: self._metadata.partition_count(t) for t in topics}
        counts = {t: c for t, c in counts.items() if c is not None}
        return counts != self._joined_counts

    def _wait_served(self, event: _RebalanceEvent) -> bool:
        """Wait until the application thread served `event` (False if closing or stalled)."""
        self._post_event(event)
        next_heartbeat = time.monotonic() + self._heartbeat_interval
        while not event.done.wait(min(0.05, self._heartbeat_interval)):
            if self._closing.is_set():
                return False
            now = time.monotonic()
            if now - self._last_poll > self._max_poll_interval_ms / 1000.0:
                return False
            if self._member_id and now >= next_heartbeat:
                # Keep the session alive while the application has not served the event yet.
                self._cluster.group_coordinator.heartbeat(self.group_id, self._member_id, self._generation,
                                                          self.group_instance_id)
                next_heartbeat = now + self._heartbeat_interval
        return True

    def _join(self) -> None:
        coordinator = self._cluster.group_coordinator
        if not self._cooperative and self._owned:
            revoked, self._owned = self._owned, []
            if not self._wait_served(_RebalanceEvent("revoke", revoked, False)):
                return
        topics = self._subscribed_topics()
        counts = {t: self._metadata.partition_count(t) for t in topics}
        self._joined_counts = {t: c for t, c in counts.items() if c is not None}
        self._need_join = False
        self._group_abort.clear()
        result = coordinator.join_group(
            self.group_id, self._member_id, client_id=self.client_id,
            session_timeout_ms=self._session_timeout_ms, rebalance_timeout_ms=self._max_poll_interval_ms,
            protocols=self._strategies, subscription=topics, owned=list(self._owned) if self._cooperative else [],
            wake=self._group_wake, abort=self._closing, group_instance_id=self.group_instance_id)
        if self._closing.is_set():
            return
        if result.error == FENCED_INSTANCE_ID:
            self._fence("join")
            return
        if result.error == UNKNOWN_MEMBER_ID:
            self._member_id = ""
            self._need_join = True
            if self._owned:
                self._lose_partitions("unknown member on join")
            return
        if result.error != Errors.NONE:
            self._need_join = True
            self._push_error(kafka_error(int(result.error), f"JoinGroup failed: error {result.error}"))
            self._closing.wait(0.2)
            return
        self._member_id = result.member_id
        self._generation = result.generation
        self._protocol = result.protocol
        error, assignment = coordinator.sync_group(self.group_id, result.generation, result.member_id,
                                                   self.group_instance_id)
        if error == FENCED_INSTANCE_ID:
            self._fence("sync")
            return
        if error != Errors.NONE:
            self._need_join = True
            if error == UNKNOWN_MEMBER_ID:
                self._member_id = ""
            return
        self._group_wake.clear()
        new = sorted(assignment)
        if self._cooperative:
            old = set(self._owned)
            revoked = sorted(old - set(new))
            added = sorted(set(new) - old)
            if revoked:
                self._owned = [tp for tp in self._owned if tp not in set(revoked)]
                if not self._wait_served(_RebalanceEvent("revoke", revoked, True)):
                    return
                self._need_join = True  # KIP-429: rejoin so the revoked partitions move on
            # the assignment callback ends every rebalance, even with nothing added (KIP-429,
            # librdkafka's rebalance_cb): how a member learns the group moved on without it
            self._owned = sorted(set(self._owned) | set(added))
            self._wait_served(_RebalanceEvent("assign", added, True))
        else:
            self._owned = new
            self._wait_served(_RebalanceEvent("assign", new, False))

    def _lose_partitions(self, reason: str) -> None:
        log.info("consumer %s: partitions lost (%s)", self.group_id, reason)
        lost, self._owned = self._owned, []
        self._member_id = ""
        self._generation = -1
        self._need_join = True
        if lost:
            self._post_event(_RebalanceEvent("lost", lost, self._cooperative))

    def _fence(self, where: str) -> None:
        """FENCED_INSTANCE_ID: another consumer joined with this one's group.instance.id. As
        librdkafka: a fatal error (an error event KafkaError._FATAL) returned by the next poll,
        the partitions lost, and no further part in the group."""
        log.error("consumer %s: static member %s fenced by a newer one with the same group.instance.id (%s)",
                  self.group_id, self.group_instance_id, where)
        self._fenced = True
        self._lose_partitions(f"fenced at {where}")
        reason = "Broker: Static consumer fenced by other consumer with same group.instance.id"
        # librdkafka's error event: _FATAL, its fatal() flag unset (the instance's error is)
        self._push_error(kafka_error(KafkaError._FATAL, f"Fatal error: {reason}: Fatal consumer error: {reason}"),
                         front=True)

    def _max_poll_exceeded(self) -> None:
        log.warning("consumer %s: max.poll.interval.ms (%d) exceeded; leaving the group", self.group_id,
                    self._max_poll_interval_ms)
        if self.group_instance_id is None:  # KIP-345: a static member keeps its place (librdkafka)
            self._cluster.group_coordinator.leave_group(self.group_id, self._member_id)
        self._poll_exceeded = True
        self._lose_partitions("max.poll.interval.ms exceeded")
        self._push_error(kafka_error(
            KafkaError._MAX_POLL_EXCEEDED,
            f"Application maximum poll interval ({self._max_poll_interval_ms}ms) exceeded by "
            f"{int((time.monotonic() - self._last_poll) * 1000) - self._max_poll_interval_ms}ms"), front=True)

    def _leave_group(self, revoke: bool, leave: bool) -> None:
        """Give the partitions up (served the revocation when `revoke`) and, when `leave`, send
        LeaveGroup."""
        owned, self._owned = self._owned, []
        if revoke and owned:
            # Served right here on the application thread (unsubscribe/close).
            event = _RebalanceEvent("revoke", owned, self._cooperative)
            try:
                self._serve_rebalance(event)
            finally:
                event.done.set()
        if self._member_id and leave and not self._fenced:
            self._cluster.group_coordinator.leave_group(self.group_id, self._member_id, self.group_instance_id)
        self._member_id = ""
        self._generation = -1
        self._group_abort.set()

    def memberid(self) -> str | None:
        self._check_open()
        return self._member_id or None

    def consumer_group_metadata(self) -> ConsumerGroupMetadata:
        self._check_open()
        return ConsumerGroupMetadata(self.group_id, self._member_id, self._generation, self.group_instance_id)

    # -- fetcher thread -----------------------------------------------------------------------------

    def _fetch_loop(self) -> None:
        while not self._closing.is_set():
            try:
                self._fetch_wake.clear()
                while self._responses:
                    self._handle_response(*self._responses.popleft())
                self._resolve_positions()
                next_retry = self._send_fetches()
                timeout = 0.1 if next_retry is None else max(0.0005, min(0.1, next_retry - time.monotonic()))
                if not self._responses:
                    self._fetch_wake.wait(timeout)
            except Exception:
                if self._cluster_running():
                    log.exception("consumer %s: fetcher error", self.group_id)
                self._closing.wait(0.1 if self._cluster_running() else 0.5)

    def _resolve_positions(self) -> None:
        with self._lock:
            pending = [(s, s.version, s.pending_offset) for s in self._parts.values()
                       if s.pending_offset is not None and not s.paused and not s.stopped
                       and s.retry_at <= time.monotonic()]
        if not pending:
            return
        committed: dict = {}
        if any(off in (OFFSET_INVALID, OFFSET_STORED) for _, _, off in pending):
            try:
                committed = self._cluster.group_coordinator.fetch_offsets(
                    self.group_id, [s.key for s, _, off in pending if off in (OFFSET_INVALID, OFFSET_STORED)])
            except (ReplicationError, GroupCoordinatorError):
                log.warning("consumer %s: committed offsets unavailable; retrying", self.group_id)
                with self._lock:
                    for s, _, _ in pending:
                        s.retry_at = time.monotonic() + self._fetch_error_backoff
                return
        for state, version, offset in pending:
            reset_error = None
            if offset in (OFFSET_INVALID, OFFSET_STORED):
                om = committed.get(state.key)
                if om is not None and om.offset >= 0:
                    resolved = om.offset
                else:
                    resolved, reset_error = self._reset_offset(state, "no previously committed offset available")
            elif offset == OFFSET_BEGINNING:
                resolved = self._list_offset(state.key, EARLIEST_TIMESTAMP)
            elif offset == OFFSET_END:
                resolved = self._list_offset(state.key, LATEST_TIMESTAMP)
            elif offset >= 0:
                resolved = offset
            else:
                resolved, reset_error = self._reset_offset(state, f"invalid offset {offset}")
            with self._lock:
                if state.version != version or self._parts.get(state.key) is not state:
                    continue
                if reset_error is not None:
                    state.pending_offset = None
                    state.stopped = True
                elif resolved is None:
                    state.retry_at = time.monotonic() + self._fetch_error_backoff
                    continue
                else:
                    state.pending_offset = None
                    state.fetch_position = resolved
                    state.position = resolved
            if reset_error is not None:
                self._push_error(reset_error, state.key.topic, state.key.partition)

    def _reset_offset(self, state: _Partition, why: str) -> tuple[int | None, KafkaError | None]:
        if self._auto_offset_reset == "error":
            return None, kafka_error(KafkaError._AUTO_OFFSET_RESET,
                                     f"{state.key.topic} [{state.key.partition}]: {why}: "
                                     "auto.offset.reset is set to 'error'")
        ts = EARLIEST_TIMESTAMP if self._auto_offset_reset == "earliest" else LATEST_TIMESTAMP
        return self._list_offset(state.key, ts), None

    def _list_offsets_call(self, key: TP, timestamp: int, timeout_s: float, attempts: int | None = None):
        """(error, ListOffsetsPartitionResponse) of a ListOffsets for ``key`` at its leader."""
        return call_leader(
            self._cluster, key,
            lambda leader, epoch: ListOffsetsRequest(-1, self._isolation, [ListOffsetsPartition(key, timestamp, epoch)]),
            lambda r: (r[key].error, r[key]), timeout_s, attempts=attempts)

    def _list_offset(self, key: TP, timestamp: int, timeout_s: float = 5.0) -> int | None:
        """The fetcher's position lookup: one ListOffsets, None when it fails. Its caller tries
        again after the fetch error backoff, so a partition whose leader cannot answer for a while
        holds up none of the others (Kafka's consumer resets positions asynchronously); retrying
        here would keep the fetcher from every partition meanwhile."""
        error, value = self._list_offsets_call(key, timestamp, timeout_s, attempts=1)
        if error != Errors.NONE:
            return None
        return value.offset

    def _send_fetches(self) -> float | None:
        now = time.monotonic()
        next_retry = None
        by_leader: dict[int, dict[TP, FetchPartition]] = {}
        versions: dict[int, dict[TP, tuple[_Partition, int]]] = {}
        with self._lock:
            busy = {s.leader for s in self._parts.values() if s.in_flight}
            for state in self._parts.values():
                if (state.in_flight or state.paused or state.stopped or state.fetch_position < 0
                        or state.buffered >= self._queued_min_messages):
                    continue
                if state.retry_at > now:
                    next_retry = state.retry_at if next_retry is None else min(next_retry, state.retry_at)
                    continue
                if state.leader < 0:
                    state.leader, state.leader_epoch = self._metadata.leader(state.key)
                    if state.leader < 0:
                        state.retry_at = now + self._fetch_error_backoff
                        next_retry = state.retry_at if next_retry is None else min(next_retry, state.retry_at)
                        continue
                if state.leader in busy:
                    continue
                by_leader.setdefault(state.leader, {})[state.key] = FetchPartition(
                    state.fetch_position, state.leader_epoch, max_bytes=self._max_partition_fetch_bytes)
                versions.setdefault(state.leader, {})[state.key] = (state, state.version)
                state.in_flight = True
        for leader, partitions in by_leader.items():
            request = FetchRequest(-1, -1, self._fetch_wait_max_ms, self._fetch_min_bytes, self._fetch_max_bytes,
                                   self._isolation, partitions)
            sent = versions[leader]

            def callback(response, error, sent=sent, leader=leader, request=request):
                self._responses.append((leader, request, sent, response, error))
                self._fetch_wake.set()

            self._cluster.transport.send_async(-1, leader, request, callback)
        return next_retry

    def _handle_response(self, leader: int, request: FetchRequest, sent: dict, response: Any, error: Any) -> None:
        now = time.monotonic()
        for key, (state, version) in sent.items():
            with self._lock:
                if state.version == version:
                    state.in_flight = False
                if state.version != version or self._parts.get(key) is not state:
                    continue
            if error is not None or response is None or key not in response:
                self._leader_error(state, now)
                continue
            resp = response[key]
            code = resp.error
            if code == Errors.NONE:
                self._accept(state, version, request.partitions[key].fetch_offset, resp)
            elif code == Errors.OFFSET_OUT_OF_RANGE:
                self._out_of_range(state, version, resp)
            elif code in RETRIABLE_LEADER_ERRORS or code == Errors.UNKNOWN_TOPIC_OR_PART:
                if code == Errors.UNKNOWN_TOPIC_OR_PART and self._metadata.partition_count(key.topic) is None:
                    with self._lock:
                        if state.version == version:
                            state.stopped = True
                    self._push_error(kafka_error(KafkaError.UNKNOWN_TOPIC_OR_PART,
                                                 "Broker: Unknown topic or partition"), key.topic, key.partition)
                    continue
                self._leader_error(state, now)
            else:
                with self._lock:
                    state.retry_at = now + self._fetch_error_backoff
                self._push_error(kafka_error(int(code), f"Fetch failed: {Errors(code).name}"), key.topic, key.partition)

    def _leader_error(self, state: _Partition, now: float) -> None:
        leader, epoch = self._metadata.leader(state.key)
        with self._lock:
            if leader == state.leader and epoch == state.leader_epoch:
                state.retry_at = now + min(self._fetch_error_backoff, 0.05)
            state.leader, state.leader_epoch = leader, epoch

    def _out_of_range(self, state: _Partition, version: int, resp: Any) -> None:
        if self._auto_offset_reset == "error":
            with self._lock:
                if state.version != version:
                    return
                state.stopped = True
                offset = state.fetch_position
            self._push_error(kafka_error(
                KafkaError._AUTO_OFFSET_RESET,
                f"Fetch from broker failed at offset {offset}: Broker: Offset out of range"),
                state.key.topic, state.key.partition, offset)
            return
        target = resp.log_start_offset if self._auto_offset_reset == "earliest" else (
            resp.last_stable_offset if self._read_committed else resp.high_watermark)
        with self._lock:
            if state.version == version and target is not None and target >= 0:
                log.info("consumer %s: %s offset %d out of range; reset to %d (%s)", self.group_id, state.key,
                         state.fetch_position, target, self._auto_offset_reset)
                state.fetch_position = target
                state.position = target

    def _accept(self, state: _Partition, version: int, fetch_offset: int, resp: Any) -> None:
        records = resp.records
        buf = records.buffer if len(records) else b""
        key = state.key
        msgs: list = []
        next_offset = fetch_offset
        corrupt: Message | None = None
        if buf:
            aborted = None
            if self._read_committed and resp.aborted_transactions:
                aborted = self._aborted_ranges(resp.aborted_transactions, buf)
            try:
                msgs, next_offset = decode_messages(buf, key.topic, key.partition, min_offset=fetch_offset,
                                                    aborted=aborted, partial_tail=True)
            except CorruptRecordError as e:
                msgs, next_offset, corrupt = self._corrupt_fetch(state, buf, fetch_offset, aborted, e)
        end = resp.last_stable_offset if self._read_committed else resp.high_watermark
        with self._lock:
            if state.version != version or self._parts.get(key) is not state:
                return
            state.high_watermark = resp.high_watermark
            state.low_watermark = resp.log_start_offset
            state.last_stable_offset = resp.last_stable_offset
            state.fetch_position = max(state.fetch_position, next_offset)
            if msgs:
                self._queue.append([state, version, msgs, 0, next_offset])
                state.buffered += len(msgs)
            if corrupt is not None:
                # Fetching stops at the bad batch until the application seeks (past it): the
                # position stays there, so nothing after it is skipped unnoticed.
                state.stopped = True
                if not msgs:
                    state.delivered = True
                    state.position = next_offset
                self._queue.append([state, version, [corrupt], 0, -1])
                state.buffered += 1
                self._cv.notify_all()
                return
            if (not msgs and state.buffered == 0 and state.position < next_offset
                    and (state.position >= 0 or next_offset > fetch_offset)):
                # Nothing to deliver (only markers or aborted records) and nothing queued:
                # the application's position moves past them now, and position() reports it,
                # as librdkafka does also before any record was delivered (a partition whose
                # only records left are a transaction's marker is not "position unknown").
                state.position = next_offset
                state.delivered = True
            # Like librdkafka: an EOF event each time the fetch position reaches the end at a new
            # offset, also when only aborted records or transaction markers moved it there.
            eof = (self._partition_eof and end >= 0 and state.fetch_position >= end
                   and state.eof_offset != state.fetch_position)
            if eof:
                state.eof_offset = state.fetch_position
                event = _error_message(kafka_error(
                    KafkaError._PARTITION_EOF,
                    f"Fetch from broker {state.leader} reached end of partition at offset {state.fetch_position} "
                    f"(HighwaterMark {resp.high_watermark})"), key.topic, key.partition, state.fetch_position)
                self._queue.append([state, version, [event], 0, -1])
                state.buffered += 1
            if msgs or eof:
                self._cv.notify_all()

    def _corrupt_fetch(self, state: _Partition, buf: bytes, fetch_offset: int, aborted: Any,
                       error: CorruptRecordError) -> tuple[list, int, Message]:
        """The records before a corrupt batch, the offset it starts at, and the error message
        the application gets after them (librdkafka's _BAD_MSG; the Java consumer raises a
        CorruptRecordException naming partition and offset)."""
        key = state.key
        msgs: list = []
        next_offset = fetch_offset
        if error.position > 0:
            msgs, next_offset = decode_messages(buf[:error.position], key.topic, key.partition,
                                                min_offset=fetch_offset, aborted=aborted)
        offset = error.base_offset if error.base_offset >= next_offset else next_offset
        log.error("consumer %s: corrupt record batch in %s [%d] at offset %d from broker %d: %s",
                  self.group_id, key.topic, key.partition, offset, state.leader, error)
        reason = (f"Fetch from broker {state.leader}: corrupt record batch in {key.topic} [{key.partition}] at "
                  f"offset {offset}: {error}; consumption of this partition stops here until it is seeked")
        return msgs, offset, _error_message(kafka_error(KafkaError._BAD_MSG, reason), key.topic, key.partition,
                                            offset)

    @staticmethod
    def _aborted_ranges(aborted: list, buf: bytes) -> list[tuple[int, int, int]]:
        """(producer_id, first_offset, last_offset) per aborted transaction: the end is the
        producer's first control batch (its abort marker) at or after the first offset."""
        ranges = []
        headers = None
        for entry in aborted:
            if isinstance(entry, tuple):
                pid, first = entry[0], entry[1]
                last = entry[2] if len(entry) > 2 else None
            else:
                pid, first = entry.producer_id, entry.first_offset
                last = getattr(entry, "last_offset", None)
            if last is None or last < 0:
                if headers is None:
                    headers = [h for h in iter_batch_headers(buf, validate_crc=False) if h.is_control]
                last = next((h.base_offset for h in headers
                             if h.producer_id == pid and h.base_offset >= first), _NO_END)
            ranges.append((pid, first, last))
        return ranges

    # -- offsets and commits --------------------------------------------------------------------------

    def store_offsets(self, message: Message | None = None, offsets: list[TopicPartition] | None = None) -> None:
        self._check_open()
        if self._auto_offset_store:
            raise kafka_exception(KafkaError._INVALID_ARG,
                                  "store_offsets requires enable.auto.offset.store=false")
        entries, negative = self._commit_entries(message, offsets)
        unassigned = []
        with self._lock:
            for key, (offset, metadata, epoch) in entries.items():
                state = self._parts.get(key)
                if state is None:
                    unassigned.append(key)
                else:
                    state.stored = (offset, metadata, epoch)
            for tp in negative:  # librdkafka stores it: nothing left to commit there
                state = self._parts.get(TP(tp.topic, tp.partition))
                if state is None:
                    unassigned.append(TP(tp.topic, tp.partition))
                else:
                    state.stored = None
        if unassigned:
            raise kafka_exception(KafkaError._STATE, "StoreOffsets failed: Local: Erroneous state "
                                  f"(not assigned: {', '.join(f'{k.topic} [{k.partition}]' for k in unassigned)})")

    def _commit_entries(self, message: Message | None, offsets: list[TopicPartition] | None
                        ) -> tuple[dict, list[TopicPartition]]:
        """(entries to commit by partition, the partitions with a negative offset). librdkafka
        leaves negative (logical) offsets out of the request and returns them untouched."""
        if message is not None and offsets is not None:
            raise ValueError("Commit takes either message or offsets, not both")
        if message is not None:
            if not isinstance(message, Message):
                raise TypeError("expected a Message")
            if message.error() is not None:
                raise kafka_exception(KafkaError._INVALID_ARG, "Cannot commit offsets for an error message")
            epoch = message.leader_epoch()
            return {TP(message.topic(), message.partition()): (message.offset() + 1, None,
                                                                epoch if epoch is not None else -1)}, []
        entries: dict = {}
        skipped: list[TopicPartition] = []
        if offsets is not None:
            for tp in _check_tp_list(offsets, "commit"):
                if tp.offset < 0:
                    skipped.append(tp)
                    continue
                entries[TP(tp.topic, tp.partition)] = (tp.offset, tp.metadata,
                                                       tp.leader_epoch if tp.leader_epoch is not None else -1)
        return entries, skipped

    def commit(self, message: Message | None = None, offsets: list[TopicPartition] | None = None,
               asynchronous: bool = True) -> list[TopicPartition] | None:
        self._check_open()
        entries, skipped = self._commit_entries(message, offsets)
        if message is None and offsets is None:
            # The stored offsets not committed yet, as librdkafka collects them.
            with self._lock:
                entries = {k: s.stored for k, s in self._parts.items()
                           if s.stored is not None and s.stored[0] != s.committed_sent}
        if not entries:
            error = kafka_error(KafkaError._NO_OFFSET, "Commit failed: Local: No offset stored")
            if not asynchronous:
                raise KafkaException(error)
            # As librdkafka: an asynchronous commit reports it to on_commit only.
            if self._on_commit is not None:
                callback = self._on_commit
                self._post_event(lambda: callback(error, list(skipped)))
            return None
        if asynchronous:
            self._pool().submit(self._do_commit, entries, True, skipped)
            return None
        return self._do_commit(entries, False, skipped)

    def _pool(self) -> concurrent.futures.ThreadPoolExecutor:
        if self._commit_pool is None:
            self._commit_pool = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="consumer-commit")
        return self._commit_pool

    def _do_commit(self, entries: dict, from_async: bool,
                   skipped: list[TopicPartition] = ()) -> list[TopicPartition] | None:
        """Commit `entries`; an asynchronous commit (also an automatic one) reports to on_commit,
        a synchronous one to its caller only, as in librdkafka."""
        offsets = {k: OffsetAndMetadata(o, m, e) for k, (o, m, e) in entries.items()}
        # Kafka's OffsetCommit refuses partitions the cluster does not have.
        unknown = {k: Errors.UNKNOWN_TOPIC_OR_PART for k in offsets
                   if not 0 <= k.partition < (self._metadata.partition_count(k.topic) or 0)}
        known = {k: om for k, om in offsets.items() if k not in unknown}
        try:
            errors = self._cluster.group_coordinator.commit_offsets(
                self.group_id, known, self._member_id if self._member_id else "",
                self._generation if self._member_id else -1, self.group_instance_id) if known else {}
        except (ReplicationError, GroupCoordinatorError) as e:
            errors = {k: Errors.REQUEST_TIMED_OUT for k in known}
            log.warning("consumer %s: commit failed: %s", self.group_id, e)
        errors = {**errors, **unknown}
        result = []
        first_error = None
        for key, om in offsets.items():
            code = int(errors.get(key, Errors.NONE))
            if code != Errors.NONE:
                err = kafka_error(code, f"Commit failed: {Errors(code).name}" if code in Errors._value2member_map_
                                  else f"Commit failed: error {code}")
                metadata = {"metadata": om.metadata} if om.metadata is not None else {}
                tp = _FailedTopicPartition(key.topic, key.partition, om.offset, err, **metadata)
                first_error = first_error or err
            else:
                tp = make_topic_partition(key.topic, key.partition, om.offset, om.metadata)
                with self._lock:
                    state = self._parts.get(key)
                    if state is not None:
                        state.committed_sent = om.offset
            result.append(tp)
        result.extend(skipped)
        if from_async and self._on_commit is not None:
            callback = self._on_commit
            self._post_event(lambda: callback(first_error, result))
        if from_async:
            if first_error is not None:
                log.warning("consumer %s: commit failed: %s", self.group_id, first_error)
            return None
        if first_error is not None and all(tp.error is not None for tp in result[:len(offsets)]):
            raise KafkaException(first_error)
        return result

    def _commit_stored(self, sync: bool, only: set | None = None) -> None:
        with self._lock:
            entries = {k: s.stored for k, s in self._parts.items()
                       if s.stored is not None and s.stored[0] != s.committed_sent
                       and (only is None or k in only)}
        if not entries:
            return
        try:
            self._do_commit(entries, True)
        except KafkaException as e:
            log.warning("consumer %s: auto commit failed: %s", self.group_id, e)

    def _auto_commit(self) -> None:
        self._commit_stored(sync=True)

    def committed(self, partitions: list[TopicPartition], timeout: float | None = None) -> list[TopicPartition]:
        self._check_open()
        partitions = _check_tp_list(partitions, "committed")
        try:
            stored = self._cluster.group_coordinator.fetch_offsets(
                self.group_id, [TP(tp.topic, tp.partition) for tp in partitions])
        except (ReplicationError, GroupCoordinatorError) as e:
            raise kafka_exception(KafkaError._TIMED_OUT, f"Failed to get committed offsets: {e}") from e
        out = []
        for tp in partitions:
            om = stored.get(TP(tp.topic, tp.partition))
            if om is None:
                out.append(TopicPartition(tp.topic, tp.partition, OFFSET_INVALID))
            else:
                out.append(make_topic_partition(tp.topic, tp.partition, om.offset, om.metadata, om.leader_epoch))
        return out

    # -- watermarks and metadata -------------------------------------------------------------------

    def get_watermark_offsets(self, partition: TopicPartition, timeout: float | None = None,
                              cached: bool = False) -> tuple[int, int] | None:
        self._check_open()
        if not isinstance(partition, TopicPartition):
            raise TypeError("expected a TopicPartition")
        key = TP(partition.topic, partition.partition)
        if cached:
            with self._lock:
                state = self._parts.get(key)
                if state is None or state.high_watermark < 0:
                    return OFFSET_INVALID, OFFSET_INVALID
                high = state.last_stable_offset if self._read_committed else state.high_watermark
                return state.low_watermark, high
        timeout_s = 30.0 if timeout is None or timeout < 0 else timeout
        low = self._list_offset_checked(key, EARLIEST_TIMESTAMP, timeout_s)
        high = self._list_offset_checked(key, LATEST_TIMESTAMP, timeout_s)
        return low, high

    def _list_offset_checked(self, key: TP, timestamp: int, timeout_s: float,
                             what: str = "watermark offsets") -> int:
        error, value = self._list_offsets_call(key, timestamp, timeout_s)
        if error != Errors.NONE:
            if error in RETRIABLE_LEADER_ERRORS:
                raise kafka_exception(KafkaError._TIMED_OUT, f"Failed to get {what}: Local: Timed out")
            if error == Errors.UNKNOWN_TOPIC_OR_PART:
                # librdkafka answers from its metadata before asking a broker.
                raise kafka_exception(KafkaError._UNKNOWN_PARTITION, f"Failed to get {what}: Local: Unknown partition")
            raise kafka_exception(int(error), f"Failed to get {what}: {Errors(error).name}")
        return value.offset

    def offsets_for_times(self, partitions: list[TopicPartition], timeout: float | None = None) -> list[TopicPartition]:
        self._check_open()
        partitions = _check_tp_list(partitions, "offsets_for_times")
        timeout_s = 30.0 if timeout is None or timeout < 0 else timeout
        # librdkafka asks once per partition: a partition listed twice is asked for its last
        # timestamp, and every entry of it gets that answer.
        wanted: dict[TP, int] = {}
        for tp in partitions:
            # -1 latest, -2 earliest and -3 the record with the largest timestamp are
            # ListOffsets' own special timestamps; librdkafka passes them through.
            if tp.offset < MAX_TIMESTAMP:
                raise kafka_exception(KafkaError._INVALID_ARG, f"invalid timestamp {tp.offset} for {tp.topic} "
                                      f"[{tp.partition}]: expected a timestamp in ms, -1 (latest) or -2 (earliest)")
            wanted[TP(tp.topic, tp.partition)] = tp.offset
        found = {key: self._list_offset_checked(key, timestamp, timeout_s, "offsets")
                 for key, timestamp in wanted.items()}
        out = []
        for tp in partitions:
            offset = found[TP(tp.topic, tp.partition)]
            out.append(TopicPartition(tp.topic, tp.partition, offset if offset >= 0 else OFFSET_END))
        return out

    def list_topics(self, topic: str | None = None, timeout: float = -1) -> Any:
        self._check_open()
        return cluster_metadata(self._cluster, topic)

    # -- closing ------------------------------------------------------------------------------------

    def close(self) -> None:
        if self._closed:
            return
        try:
            with self._lock:
                subscribed = bool(self._subscription or self._patterns or self._member_id)
            if subscribed:
                self._subscription, self._patterns = [], []
                self._closing.set()
                self._group_thread.join(timeout=10)
                self._serve_events_on_close()
                # KIP-345: a static member does not leave on close (librdkafka), so that its
                # restart within the session timeout takes its partitions back without a rebalance
                self._leave_group(revoke=True, leave=self.group_instance_id is None)
            elif self._enable_auto_commit:
                self._commit_stored(sync=True)
        finally:
            self._closing.set()
            self._fetch_wake.set()
            self._group_wake.set()
            self._closed = True
            with self._lock:
                self._cv.notify_all()
            for thread in (self._fetcher, self._group_thread):
                if thread is not threading.current_thread():
                    thread.join(timeout=10)
            if self._commit_pool is not None:
                self._commit_pool.shutdown(wait=True)

    def _serve_events_on_close(self) -> None:
        # Rebalance events still queued are settled so the owned set is what the app knows.
        with self._lock:
            events, self._events = list(self._events), collections.deque()
        for event in events:
            if isinstance(event, _RebalanceEvent):
                event.done.set()

    def __enter__(self) -> "Consumer":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __len__(self) -> int:
        with self._lock:
            return sum(s.buffered for s in self._parts.values())
