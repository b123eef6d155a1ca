"""The embedded cluster's producer, with confluent_kafka.Producer's API.

    producer = cluster.producer({"linger.ms": 5})
    producer.produce("orders", key=b"k", value=b"v", on_delivery=lambda err, msg: ...)
    producer.flush(10)

How it works:
- ``produce()`` appends one tuple to its partition's queue (default partitioner
  ``murmur2_random``: Kafka's murmur2 on the key bytes, so keyed records land where any Kafka
  client puts them). The common case takes no lock and builds no object but the tuple: a list append is atomic under the GIL and the sender only ever removes a
  prefix of the queue. The sender is woken by the first record of an idle partition and when
  a queue holds a full batch; otherwise it wakes on its own when ``linger.ms`` is over.
- A sender thread cuts batches off the queues (``batch.num.messages`` records, ``batch.size``
  bytes, or what is there after ``linger.ms``), encodes them with `records.encode_batch` (one
  C call per batch) and sends them to the partition leaders (metadata from the in-process
  controller), one ProduceRequest per leader.
- ``timestamp=0`` (now): stamped with the wall clock in ``produce()``, as librdkafka does.
- ``queue.buffering.max.messages`` is checked by the sender and by ``poll()``, and exactly
  once the queue is found full: the queue can overshoot it by what is produced between two
  checks (at most about a batch per partition). One batch per partition is in flight at a time, so order per
  partition holds through retries. Retriable errors (leader moved, not enough replicas,
  timeouts, transport failures) are retried after ``retry.backoff.ms`` until
  ``message.timeout.ms``.
- Idempotence (``enable.idempotence``, default false as in confluent-kafka; implied by
  ``transactional.id``): a producer id and epoch from the transaction coordinator and a
  sequence number per partition. A retried batch keeps its sequence, so a batch the broker
  already wrote is acknowledged with its first offsets instead of being written twice.
- Delivery reports are `confluent_kafka.Message` objects given to the callbacks on the
  caller's thread, in ``poll()`` and ``flush()``. Errors are `KafkaError`s with
  confluent-kafka's codes and flags (fatal, retriable, txn_requires_abort).
- Transactions: ``init_transactions``, ``begin_transaction``, ``send_offsets_to_transaction``,
  ``commit_transaction``, ``abort_transaction`` against `txn_coordinator`. A fenced producer
  gets a fatal ``_FENCED`` error, as librdkafka raises it.

Per-partition pipelining is one batch deep (librdkafka keeps up to ``max.in.flight``): the
ordering and duplicate guarantees are the same, throughput comes from large batches.
"""

from __future__ import annotations

import collections
import logging
import threading
import time
from operator import itemgetter
from typing import Any, Callable

from confluent_kafka import KafkaError, KafkaException, Message

from replication.clients.common import (
    ClientConfig, ClientConfigError, Metadata, check_bootstrap, cluster_metadata, kafka_error,
    kafka_exception,
)
from replication.clients.partitioner import PARTITIONERS, make_partitioner
from replication.errors import TransportError
from replication.names import is_valid_topic_name
from replication.protocol import Errors, ProduceRequest, TopicPartition
from replication.transport import NotDeliveredError
from replication import records as _records
from replication.records import encode_batch

log = logging.getLogger(__name__)

__all__ = ["Producer"]

OFFSET_INVALID = -1001

#: Broker errors after which the same batch may be sent again.
RETRIABLE = frozenset({
    Errors.NOT_LEADER_OR_FOLLOWER, Errors.LEADER_NOT_AVAILABLE, Errors.REQUEST_TIMED_OUT,
    Errors.NOT_ENOUGH_REPLICAS, Errors.NOT_ENOUGH_REPLICAS_AFTER_APPEND, Errors.KAFKA_STORAGE_ERROR,
    Errors.FENCED_LEADER_EPOCH, Errors.UNKNOWN_LEADER_EPOCH, Errors.BROKER_NOT_AVAILABLE,
    Errors.REPLICA_NOT_AVAILABLE, Errors.UNKNOWN_TOPIC_OR_PART,
})
_TRANSPORT = -1  # a transport failure (no answer), retried like a leader change

_ACKS = {"all": -1, "-1": -1, "0": 0, "1": 1}
_TXN_RETRIABLE = frozenset({15, 16, 51, 7})  # coordinator (not) available, concurrent txns, timeout
_FENCING = frozenset({Errors.INVALID_PRODUCER_EPOCH, Errors.PRODUCER_FENCED})
#: Answers after which the batch may be in the log although it failed (appended, then not
#: replicated in time); a transport failure other than NotDeliveredError is one too.
_MAYBE_WRITTEN = frozenset({Errors.REQUEST_TIMED_OUT, Errors.NOT_ENOUGH_REPLICAS_AFTER_APPEND,
                            Errors.KAFKA_STORAGE_ERROR})
#: Answers that mean the broker's sequence state and ours disagree (idempotence is broken).
_SEQUENCE_DESYNC = frozenset({Errors.OUT_OF_ORDER_SEQUENCE_NUMBER, Errors.UNKNOWN_PRODUCER_ID})


_time_ns = time.time_ns
_ILLEGAL_GENERATION = 22
_UNKNOWN_MEMBER_ID = 25


class _TxnState:
    UNINIT = "uninit"
    READY = "ready"
    IN_TRANSACTION = "in_transaction"
    ABORTABLE_ERROR = "abortable_error"
    FATAL_ERROR = "fatal_error"


_NEVER = 1 << 62  # a queue length never reached: no kick
_KEY = itemgetter(0)
_VALUE = itemgetter(1)
_RECORD = itemgetter(0, 1, 2, 3)


class _Queue:
    """The records produced to one partition and not yet cut into a batch.

    ``entries`` holds ``(key, value, timestamp)`` (no delivery callback), ``(key, value,
    timestamp, None)`` (the queue's ``cb``, set once: one callback for every record is the
    common case) or ``(key, value, timestamp, headers, callback)``. The first two are what
    encode_batch takes and are not tracked by the garbage collector. Producers only append; the sender only
    deletes a prefix (both single operations under the GIL), so no lock is needed to queue.
    A producer wakes the sender when the queue reaches ``kick_at`` records: 1 while the sender
    does not watch the partition, a full batch while it lingers, never while a batch is in
    flight (the answer wakes the sender)."""

    __slots__ = ("tp", "entries", "cb", "kick_at", "full_at", "since", "ts")

    def __init__(self, tp: TopicPartition, full_at: int) -> None:
        self.tp = tp
        self.entries: list[tuple] = []
        self.cb: Any = None
        self.kick_at = 1
        self.full_at = full_at  # records in a full batch, estimated from the sizes seen
        self.since = 0.0  # monotonic time the sender first saw the queued records (0: not yet)


def _py_queue_append(entries: list, key: bytes | None, value: bytes | None, timestamp: int) -> int:
    entries.append((key, value, timestamp, None))
    return len(entries)


#: ``queue_append(entries, key, value, timestamp) -> len(entries)``: append a queue entry; the C
#: version creates the tuple untracked by the garbage collector (it holds bytes and ints only).
queue_append = (_records._accel.queue_append
                if _records.ACCELERATED and hasattr(_records._accel, "queue_append") else _py_queue_append)


class QueueView:
    """How a caller in this process may queue records without produce() (the stream runtime's
    sinks do, once per record). ``topics`` maps a topic to its partitions' queues while
    produce() has nothing to check (no full queue, an open transaction when transactional, no
    fatal error), and is empty otherwise; then the caller uses produce(). A caller appends
    ``(key, value, timestamp_ms, None)`` (key bytes, value bytes or None, timestamp > 0) to
    ``queue.entries`` of partition ``murmur2_partition(key, len(queues))`` (what produce()
    picks for a keyed record without a partition; or any partition in range the caller
    names, with a bytes or None key), with ``append(entries, key, value, timestamp)`` (which
    returns the new length), only when ``queue.cb`` is its own delivery callback (produce()
    set it), and then calls ``kick(queue)`` when that length is ``>= queue.kick_at``. This is
    exactly what produce() does for such a record.

    ``untracked_entries`` is the capability a caller in C asks for before building entries
    itself: when True, ``append`` appends exactly the tuple ``(key, value, timestamp, None)``
    (for bytes or None key and value and an int timestamp) untracked by the garbage collector,
    so the caller may append that same tuple without calling ``append``; otherwise it must
    call ``append``."""

    __slots__ = ("topics", "kick", "append", "untracked_entries")

    def __init__(self, topics: dict, kick: Callable[[_Queue], None]) -> None:
        self.topics = topics
        self.kick = kick
        self.append = queue_append
        self.untracked_entries = queue_append is not _py_queue_append


def _entries_size(entries: list[tuple]) -> int:
    """The batch.size estimate of ``entries``: key + value + 16 bytes a record (C loops)."""
    return (sum(map(len, filter(None, map(_KEY, entries)))) + sum(map(len, filter(None, map(_VALUE, entries))))
            + 16 * len(entries))


def _entry_size(entry: tuple) -> int:
    return (len(entry[0]) if entry[0] is not None else 0) + (len(entry[1]) if entry[1] is not None else 0) + 16


class _Batch:
    """Records of one partition sent together."""

    __slots__ = ("tp", "entries", "cb", "records", "has_callbacks", "created", "deadline", "data", "base_sequence",
                 "attempts", "retry_at", "sent_at", "generation", "leader", "maybe_written")

    def __init__(self, tp: TopicPartition, now: float, deadline: float, entries: list[tuple],
                 cb: Any = None) -> None:
        self.tp = tp
        self.entries = entries  # queue entries (see _Queue)
        self.cb = cb  # the callback of 4-tuple entries
        self.records: list[tuple] | None = None  # what encode_batch takes, made by prepare()
        self.has_callbacks = False
        self.created = now
        self.deadline = deadline
        self.data: bytes | None = None
        self.base_sequence = -1
        self.attempts = 0
        self.retry_at = 0.0
        self.sent_at = 0.0
        self.generation = 0
        self.leader = -1
        self.maybe_written = False  # an attempt ended without knowing whether the broker wrote it

    def prepare(self) -> None:
        """Split the entries into encodable records (one C pass when no record has a
        callback or headers) and note whether any delivery callback is waiting."""
        if self.records is not None:
            return
        entries = self.entries
        longest = max(map(len, entries))
        if longest < 5:
            self.records = entries
        elif min(map(len, entries)) == 5:
            self.records = list(map(_RECORD, entries))
        else:
            self.records = [e[:4] if len(e) == 5 else e for e in entries]
        self.has_callbacks = longest > 3


def _to_bytes(value: Any, what: str) -> bytes | None:
    if value is None or value.__class__ is bytes:
        return value
    if isinstance(value, str):
        return value.encode("utf-8")
    if isinstance(value, (bytearray, memoryview)):
        return bytes(value)
    raise TypeError(f"{what} must be str, bytes or None, not {type(value).__name__}")


def _headers(headers: Any) -> list[tuple[str, bytes | None]] | None:
    if not headers:
        return None
    items = headers.items() if isinstance(headers, dict) else headers
    out = []
    for item in items:
        try:
            name, value = item
        except (TypeError, ValueError):
            raise TypeError(f"headers must be a dict or a list of (str, value) pairs, got {item!r}") from None
        if not isinstance(name, str):
            raise TypeError(f"header names must be str, got {name!r}")
        out.append((name, _to_bytes(value, f"header {name!r} value")))
    return out


class Producer:
    """A producer of the embedded cluster with confluent_kafka.Producer's API."""

    def __init__(self, conf: dict | None = None, *, cluster: Any = None, **kwargs: Any) -> None:
        merged = dict(conf or {})
        merged.update(kwargs)
        config = ClientConfig(merged, "producer")
        if cluster is None:
            raise ClientConfigError("replication.clients.Producer needs the embedded cluster: use "
                                    "LocalCluster.producer(conf) or streams.backends.for_config(...)")
        check_bootstrap(config, cluster)
        self._cluster = cluster
        self._metadata = Metadata(cluster)
        self._transport = cluster.transport

        acks = config.raw("acks", config.raw("request.required.acks", "all"))
        acks_key = str(acks).lower()
        if acks_key not in _ACKS:
            raise ClientConfigError(f"producer configuration 'acks' must be all, -1, 0 or 1, got {acks!r}")
        self._transactional_id = config.get_str("transactional.id")
        self._idempotent = config.get_bool("enable.idempotence", False) or self._transactional_id is not None
        self._acks = _ACKS[acks_key]
        if self._idempotent and self._acks != -1:
            if "acks" in config or "request.required.acks" in config:
                raise ClientConfigError("producer configuration: enable.idempotence requires acks=all")
            self._acks = -1
        self._linger_s = config.get_int("linger.ms", config.get_int("queue.buffering.max.ms", 5, 0), 0,
                                        900000) / 1000.0
        self._batch_size = config.get_int("batch.size", 1000000, 1, 2147483647)
        self._batch_num = config.get_int("batch.num.messages", 10000, 1, 1000000)
        self._max_messages = config.get_int("queue.buffering.max.messages", 100000, 0, 2147483647)
        self._message_timeout_s = config.get_int(
            "message.timeout.ms", config.get_int("delivery.timeout.ms", 300000, 0), 0) / 1000.0
        self._request_timeout_s = config.get_int("request.timeout.ms", 30000, 1, 900000) / 1000.0
        self._retries = config.get_int("retries", config.get_int("message.send.max.retries", 2147483647, 0), 0)
        self._retry_backoff_s = config.get_int("retry.backoff.ms", 100, 1, 300000) / 1000.0
        self._txn_timeout_ms = config.get_int("transaction.timeout.ms", 60000, 1000, 2147483647)
        self._refresh_s = config.get_int("topic.metadata.refresh.interval.ms", 300000, -1, 3600000) / 1000.0
        self._refresh_next = time.monotonic() + self._refresh_s
        self._metadata_propagation_s = config.get_int("topic.metadata.propagation.max.ms", 30000, 0) / 1000.0
        partitioner = config.get_str("partitioner", "murmur2_random")
        if partitioner not in PARTITIONERS:
            raise ClientConfigError(f"producer configuration 'partitioner' must be one of {list(PARTITIONERS)}, "
                                    f"got {partitioner!r}")
        self._partitioner_name = partitioner
        self._partitioner = make_partitioner(partitioner, config.get_int("sticky.partitioning.linger.ms", 10, 0))
        self._default_dr = config.get_callable("on_delivery") or config.get_callable("delivery.report.cb")
        self._dr_only_error = config.get_bool("delivery.report.only.error", False)
        self._error_cb = config.get_callable("error_cb")
        self._stats_cb = config.get_callable("stats_cb")
        self._stats_interval_s = config.get_int("statistics.interval.ms", 0, 0, 86400000) / 1000.0
        self._stats_next = time.monotonic() + self._stats_interval_s
        self._client_id = config.get_str("client.id", "rdkafka")
        # librdkafka-style counters per broker id: requests sent, timed out, retried.
        self._broker_stats: dict[int, dict[str, int]] = {}

        self._lock = threading.Lock()
        self._wake = threading.Condition(self._lock)  # the sender waits here
        self._reported = threading.Condition(self._lock)  # poll() waits here
        # topic -> its partitions' queues; produce() reads ``_fast``, which is this dict while
        # producing is allowed and an empty one while it is not (fatal error, no transaction,
        # queue full), so a single lookup checks the topic and the producer state.
        self._topics: dict[str, list[_Queue]] = {}
        self._fast: dict[str, list[_Queue]] = {}
        self._view = QueueView(self._fast, self._kick)
        self._full = False
        self._active: dict[_Queue, None] = {}  # queues the sender watches
        self._ready: dict[TopicPartition, collections.deque[_Batch]] = {}
        self._in_flight: dict[TopicPartition, _Batch] = {}
        self._unknown: list[tuple[str, tuple, Any, float]] = []  # records of topics not known yet
        self._reports: collections.deque = collections.deque()
        self._count = 0  # cut into batches (or held for metadata), not yet reported to the application
        self._flushing = 0
        self._next_sequence: dict[TopicPartition, int] = {}
        self._producer_id = -1
        self._producer_epoch = -1
        self._closed = False
        self._fatal: KafkaError | None = None
        self._errors: list[KafkaError] = []  # for error_cb, served by poll()
        self._bump_epoch = False  # a transactional batch failed maybe written: bump at the abort
        # transactions
        self._txn_state = _TxnState.UNINIT
        self._txn_partitions: set[TopicPartition] = set()
        self._txn_has_offsets = False
        self._txn_error: KafkaError | None = None
        self._txn_lock = threading.Lock()
        self._refresh_gate_locked()

        self._sender = threading.Thread(target=self._run_sender, name="eddy-producer-sender", daemon=True)
        self._sender.start()

    # -- producing -------------------------------------------------------------------------------

    def produce(self, topic: str, value: Any = None, key: Any = None, partition: int = -1,
                on_delivery: Callable | None = None, callback: Callable | None = None,
                timestamp: int = 0, headers: Any = None) -> None:
        """Queue one record; its delivery report comes through poll()/flush()."""
        if value.__class__ is not bytes and value is not None:
            value = _to_bytes(value, "value")
        if key.__class__ is not bytes and key is not None:
            key = _to_bytes(key, "key")
        queues = self._fast.get(topic) if topic.__class__ is str else None
        if queues is None or headers or partition.__class__ is not int:
            return self._produce_slow(topic, value, key, partition, on_delivery or callback or self._default_dr,
                                      timestamp, headers)
        if partition == -1:
            queue = queues[self._partitioner(key, len(queues))]
        elif 0 <= partition < len(queues):
            queue = queues[partition]
        else:
            return self._produce_slow(topic, value, key, partition, on_delivery or callback or self._default_dr,
                                      timestamp, headers)
        if not timestamp:
            timestamp = _time_ns() // 1_000_000
        cb = on_delivery or callback or self._default_dr
        entries = queue.entries
        if cb is None:
            entries.append((key, value, timestamp))
        elif cb is queue.cb or cb == queue.cb:
            entries.append((key, value, timestamp, None))
        elif queue.cb is None:
            return self._produce_slow(topic, value, key, partition, cb, timestamp, None)
        else:
            entries.append((key, value, timestamp, None, cb))
        if len(entries) >= queue.kick_at:
            self._kick(queue)

    def queue_view(self) -> "QueueView | None":
        """The in-process append protocol (see QueueView), or None unless the partitioner is
        murmur2 or murmur2_random (the only ones whose choice for a key is fixed, so a caller may
        remember it). An extension of this client: confluent-kafka has no such call."""
        if self._partitioner_name not in ("murmur2", "murmur2_random"):
            return None
        return self._view

    def _kick(self, queue: _Queue) -> None:
        """Wake the sender for ``queue`` (checked again under the lock: it may have seen it)."""
        with self._lock:
            if len(queue.entries) >= queue.kick_at:
                queue.kick_at = _NEVER
                self._active[queue] = None
                self._wake.notify()
                if self._max_messages > 0:
                    self._limit_kicks_locked()

    def _limit_kicks_locked(self) -> None:
        """With queue.buffering.max.messages: close the fast path once the queue is full,
        else make every watched queue kick before it takes more than its share of what is left."""
        room = self._max_messages - self._outstanding_locked()
        if room <= 0:
            if not self._full:
                self._full = True  # the next produce() checks exactly and raises BufferError
                self._refresh_gate_locked()
            return
        share = max(1, room // max(1, len(self._active)))
        for queue in self._active:
            limit = len(queue.entries) + share
            if queue.kick_at > limit:
                queue.kick_at = limit

    def _produce_slow(self, topic: Any, value: bytes | None, key: bytes | None, partition: Any, cb: Any,
                      timestamp: int, headers: Any) -> None:
        """produce() for everything but the common case: validation, errors, headers, topics
        without metadata yet, partition counts to refresh, a full queue."""
        if not isinstance(topic, str):
            raise TypeError(f"topic must be str, not {type(topic).__name__}")
        if partition.__class__ is not int:
            raise TypeError(f"partition must be int, not {type(partition).__name__}")
        hdrs = _headers(headers) if headers else None
        if not timestamp:
            timestamp = time.time_ns() // 1_000_000
        if self._fatal is not None:
            raise KafkaException(self._fatal)
        if self._transactional_id is not None and self._txn_state != _TxnState.IN_TRANSACTION:
            raise kafka_exception(KafkaError._STATE, "Producer is not in a transaction: call begin_transaction()")
        queues = self._topics.get(topic)
        if queues is None:
            n = self._metadata.partition_count(topic) if is_valid_topic_name(topic) else None
            if n is None:
                if partition < -1:
                    raise kafka_exception(KafkaError._UNKNOWN_PARTITION, "Local: Unknown partition")
                entry = (key, value, timestamp) if cb is None and hdrs is None else (key, value, timestamp, hdrs, cb)
                self._queue_unknown(topic, partition, entry)
                return
            queues = self._grow_topic(topic, n)
        if partition == -1:
            partition = self._partitioner(key, len(queues))
        elif partition < 0 or partition >= len(queues):
            # The count may have grown since it was cached.
            queues = self._grow_topic(topic, self._metadata.partition_count(topic) or len(queues))
            if partition < 0 or partition >= len(queues):
                raise kafka_exception(KafkaError._UNKNOWN_PARTITION, "Local: Unknown partition")
        self._enqueue(queues[partition], key, value, timestamp, hdrs, cb)

    def _enqueue(self, queue: "_Queue", key: bytes | None, value: bytes | None, timestamp: int, hdrs: Any,
                 cb: Any) -> None:
        """Append one record to its partition's queue, minding queue.buffering.max.messages."""
        with self._lock:
            if self._max_messages > 0 and self._outstanding_locked(exact=True) >= self._max_messages:
                if not self._full:
                    self._full = True
                    self._refresh_gate_locked()
                raise BufferError("Local: Queue full")
            if self._full:
                self._full = False
                self._refresh_gate_locked()
                self._limit_kicks_locked()
            if cb is not None and queue.cb is None:
                queue.cb = cb  # set once: 4-tuple entries may refer to it at any time
            if hdrs is not None:
                entry = (key, value, timestamp, hdrs, cb)
            elif cb is None:
                entry = (key, value, timestamp)
            elif cb is queue.cb:
                entry = (key, value, timestamp, None)
            else:
                entry = (key, value, timestamp, None, cb)
            queue.entries.append(entry)
            if len(queue.entries) >= queue.kick_at:
                queue.kick_at = _NEVER
                self._active[queue] = None
                self._wake.notify()
                if self._max_messages > 0:
                    self._limit_kicks_locked()  # as _kick does: the fast path after this must kick in time

    def _grow_topic(self, topic: str, n: int) -> list[_Queue]:
        """The queues of ``topic``, extended to ``n`` partitions (a partition count only grows)."""
        with self._lock:
            queues = self._topics.get(topic) or []
            if len(queues) < n:
                full_at = self._batch_num
                queues = queues + [_Queue(TopicPartition(topic, p), full_at) for p in range(len(queues), n)]
                self._topics[topic] = queues
            return queues

    def _refresh_gate_locked(self) -> None:
        """Let produce() take its fast path only while producing needs no check."""
        allowed = (self._fatal is None and not self._full
                   and (self._transactional_id is None or self._txn_state == _TxnState.IN_TRANSACTION))
        self._fast = self._topics if allowed else {}
        self._view.topics = self._fast

    def _outstanding_locked(self, exact: bool = False) -> int:
        """Records produced and not yet served (``exact``: counting every queue)."""
        if exact:
            return self._count + sum(len(q.entries) for qs in self._topics.values() for q in qs)
        return self._count + sum(len(q.entries) for q in self._active)

    def _queue_unknown(self, topic: str, partition: int, entry: tuple) -> None:
        """librdkafka holds records of a topic it has no metadata for, then fails them."""
        with self._lock:
            self._unknown.append((topic, partition, entry, time.monotonic()))
            self._count += 1
            self._wake.notify()

    def __len__(self) -> int:
        """Messages and delivery reports not yet served to the application."""
        with self._lock:
            return self._outstanding_locked(exact=True)

    def poll(self, timeout: float | None = None) -> int:
        """Serve delivery reports; wait up to ``timeout`` seconds (None or -1: forever) for one.
        Returns the number of reports served."""
        deadline = None if timeout is None or timeout < 0 else time.monotonic() + timeout
        if self._stats_cb is not None and self._stats_interval_s > 0 and time.monotonic() >= self._stats_next:
            self._emit_stats()
        if self._errors:
            with self._lock:
                errors, self._errors = self._errors, []
            for error in errors:
                self._error_cb(error)
        with self._lock:
            while not self._reports:
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    return 0
                self._reported.wait(remaining if remaining is None or remaining < 0.2 else 0.2)
            reports = list(self._reports)
            self._reports.clear()
        served = 0
        try:
            for batch, error, base_offset in reports:
                served += self._serve(batch, error, base_offset)
        finally:
            with self._lock:
                self._count -= sum(len(b.entries) for b, _e, _o in reports)
                if self._full and self._outstanding_locked(exact=True) < self._max_messages:
                    self._full = False
                    self._refresh_gate_locked()
                    self._limit_kicks_locked()
        return served

    def _emit_stats(self) -> None:
        """A subset of librdkafka's statistics JSON (per-broker request counters)."""
        import json

        self._stats_next = time.monotonic() + self._stats_interval_s
        with self._lock:
            brokers = {f"localhost:{9092 + b}/{b}": {"name": f"localhost:{9092 + b}/{b}", "nodeid": b, **c}
                       for b, c in self._broker_stats.items()}
            count = self._outstanding_locked(exact=True)
        now_us = time.time_ns() // 1000
        self._stats_cb(json.dumps({"name": f"{self._client_id}#producer-1", "client_id": self._client_id,
                                   "type": "producer", "ts": now_us, "time": now_us // 1_000_000,
                                   "msg_cnt": count, "brokers": brokers, "topics": {}}))

    def _count_request(self, broker: int, key: str) -> None:
        stats = self._broker_stats.get(broker)
        if stats is None:
            stats = self._broker_stats[broker] = {"tx": 0, "req_timeouts": 0, "txretries": 0}
        stats[key] += 1

    def _serve(self, batch: _Batch, error: KafkaError | None, base_offset: int) -> int:
        entries = batch.entries
        batch.prepare()
        if not batch.has_callbacks or (self._dr_only_error and error is None):
            return len(entries)
        common = batch.cb
        if error is None and common is not None and batch.records is entries and \
                getattr(common, "delivery_report_only_error", False):
            # every record's callback wants failures only (an extension of this client: a
            # callable with delivery_report_only_error=True, as the config does producer-wide)
            return len(entries)
        if error is None and base_offset >= 0 and common is not None and batch.records is entries and \
                getattr(common, "delivery_report_last_only", False) and min(map(len, entries)) == 4:
            # a callback that only keeps the latest delivered offset (this client's extension,
            # delivery_report_last_only=True) hears about the batch's last record only
            key, value, ts = entries[-1][:3]
            common(None, Message(batch.tp[0], batch.tp[1], base_offset + len(entries) - 1, key, value, None, None,
                                 (1, ts), -1.0, -1))
            return len(entries)
        topic, partition = batch.tp
        ok = error is None and base_offset >= 0
        offset = base_offset if ok else OFFSET_INVALID
        if common is not None and batch.records is entries and min(map(len, entries)) == 4:
            # Every record has the queue's callback (the common case): one tight loop.
            message = Message
            if ok:
                for key, value, ts, _h in entries:
                    common(None, message(topic, partition, offset, key, value, None, None, (1, ts), -1.0, -1))
                    offset += 1
            else:
                for key, value, ts, _h in entries:
                    common(error, message(topic, partition, offset, key, value, None, error, (1, ts), -1.0, -1))
            return len(entries)
        for entry in entries:
            n = len(entry)
            cb = common if n == 4 else entry[4] if n == 5 else None
            if cb is not None:
                cb(error, Message(topic, partition, offset, entry[0], entry[1], entry[3], error,
                                  (1, entry[2]), -1.0, -1))
            if ok:
                offset += 1
        return len(entries)

    def flush(self, timeout: float | None = None) -> int:
        """Send everything queued and serve the delivery reports; returns how many messages are
        still queued or in flight when ``timeout`` ran out (0: all delivered)."""
        deadline = None if timeout is None or timeout < 0 else time.monotonic() + timeout
        with self._lock:
            self._flushing += 1
            self._wake.notify()
        try:
            while True:
                self.poll(0)
                left = len(self)
                if left == 0:
                    return 0
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    return left
                self.poll(0.05 if remaining is None else min(0.05, remaining))
        finally:
            with self._lock:
                self._flushing -= 1

    def purge(self, in_queue: bool = True, in_flight: bool = True, blocking: bool = True) -> None:
        """Fail queued (and, with ``in_flight``, wait for in-flight) messages with _PURGE_QUEUE."""
        with self._lock:
            if in_queue:
                self._purge_queued_locked(kafka_error(KafkaError._PURGE_QUEUE, "Local: Purged in queue"))
        if in_flight and blocking:
            deadline = time.monotonic() + self._request_timeout_s + 1
            with self._lock:
                while self._in_flight and time.monotonic() < deadline:
                    self._reported.wait(0.05)

    def _purge_queued_locked(self, error: KafkaError) -> None:
        now = time.monotonic()
        for queues in self._topics.values():
            for queue in queues:
                if queue.entries:
                    self._reports.append((self._cut_locked(queue, now, len(queue.entries)), error, -1))
        for q in self._ready.values():
            for batch in q:
                self._reports.append((batch, error, -1))
            q.clear()
        for topic, partition, entry, _t in self._unknown:
            self._reports.append((self._single(topic, partition, entry), error, -1))
        self._unknown.clear()
        self._reported.notify_all()

    @staticmethod
    def _single(topic: str, partition: int, entry: tuple) -> _Batch:
        return _Batch(TopicPartition(topic, partition), 0.0, 0.0, [entry])

    def list_topics(self, topic: str | None = None, timeout: float = -1) -> Any:
        """Cluster metadata (confluent_kafka.admin.ClusterMetadata)."""
        md = cluster_metadata(self._cluster, topic)
        for name, tm in md.topics.items():
            if tm.error is None and len(tm.partitions) > len(self._topics.get(name, ())):
                self._grow_topic(name, len(tm.partitions))
        return md

    def close(self, timeout: float | None = None) -> None:
        """Flush (bounded by ``timeout``) and stop the sender thread."""
        if self._closed:
            return
        self.flush(timeout if timeout is not None else self._message_timeout_s)
        with self._lock:
            self._closed = True
            self._wake.notify_all()
        self._sender.join(timeout=5)

    def __del__(self) -> None:
        try:
            with self._lock:
                self._closed = True
                self._wake.notify_all()
        except Exception:
            pass

    # -- sender thread ---------------------------------------------------------------------------

    def _run_sender(self) -> None:
        while True:
            if self._refresh_s > 0 and time.monotonic() >= self._refresh_next:
                self._refresh_partition_counts()
            with self._lock:
                if self._closed:
                    return
                sendable, wait = self._collect_locked()
                if not sendable:
                    if self._refresh_s > 0:
                        left = max(0.0, self._refresh_next - time.monotonic())
                        wait = left if wait is None or left < wait else wait
                    self._wake.wait(wait)
                    continue
            try:
                self._send(sendable)
            except Exception as e:  # never let the sender die silently
                log.exception("producer sender failed")
                error = kafka_error(KafkaError._FAIL, f"producer sender failed: {e!r}")
                with self._lock:
                    for batch in sendable:
                        self._in_flight.pop(batch.tp, None)
                        self._reports.append((batch, error, -1))
                    self._reported.notify_all()

    def _collect_locked(self) -> tuple[list[_Batch], float | None]:
        """Close lingered batches, expire old ones, and take one batch per idle partition."""
        now = time.monotonic()
        wait: float | None = None
        flushing = self._flushing > 0
        if self._unknown:
            self._resolve_unknown_locked(now)
            wait = 0.05 if wait is None or wait > 0.05 else wait
        sendable = []
        for tp, q in self._ready.items():
            if not q or tp in self._in_flight:
                continue
            batch = q[0]
            if now >= batch.deadline and batch.data is None:
                while q and now >= q[0].deadline and q[0].data is None:
                    self._reports.append((q.popleft(), kafka_error(KafkaError._MSG_TIMED_OUT,
                                                                   "Local: Message timed out"), -1))
                self._reported.notify_all()
                if not q:
                    continue
                batch = q[0]
            if batch.retry_at > now:
                w = batch.retry_at - now
                wait = w if wait is None or w < wait else wait
                continue
            q.popleft()
            self._in_flight[tp] = batch
            sendable.append(batch)
        w = self._cut_queues_locked(now, flushing, sendable)
        if w is not None:
            wait = w if wait is None or w < wait else wait
        if self._max_messages > 0 and not self._full and self._outstanding_locked() >= self._max_messages:
            self._full = True
            self._refresh_gate_locked()
        for batch in list(self._in_flight.values()):
            if batch.sent_at and batch not in sendable:
                w = batch.sent_at + self._request_timeout_s - now
                if w <= 0:
                    # No answer within request.timeout.ms: retry (a late answer is ignored).
                    batch.generation += 1
                    batch.sent_at = 0.0
                    batch.maybe_written = True
                    self._count_request(batch.leader, "req_timeouts")
                    self._retry_or_fail_locked(batch, _TRANSPORT, "request timed out", now)
                    wait = 0.0
                else:
                    wait = w if wait is None or w < wait else wait
        return sendable, wait

    def _refresh_partition_counts(self) -> None:
        """librdkafka's topic.metadata.refresh.interval.ms: keyed records follow added partitions."""
        self._refresh_next = time.monotonic() + self._refresh_s
        for topic, queues in list(self._topics.items()):
            n = self._metadata.partition_count(topic)
            if n is not None and n > len(queues):
                self._grow_topic(topic, n)

    def _cut_queues_locked(self, now: float, flushing: bool, sendable: list[_Batch]) -> float | None:
        """Cut a batch off each watched queue whose partition is free and whose batch is full
        or lingered (or everything, when flushing); re-arm the kicks. Returns the time until
        the next linger deadline (None: none)."""
        wait: float | None = None
        linger = self._linger_s
        in_flight = self._in_flight
        ready = self._ready
        # With queue.buffering.max.messages, a queue also kicks when it alone would fill what
        # is left, so the queue is found full close to the limit.
        room = self._max_messages - self._outstanding_locked() if self._max_messages > 0 else _NEVER
        if 0 < room < _NEVER:
            room = max(1, room // max(1, len(self._active)))  # each queue's share
        for queue in list(self._active):
            tp = queue.tp
            entries = queue.entries
            if tp in in_flight or ready.get(tp):
                queue.kick_at = len(entries) + room if room < _NEVER else _NEVER  # the answer wakes the sender
                if entries and not queue.since:
                    queue.since = now
                continue
            if not entries:
                queue.since = 0.0
                queue.kick_at = 1
                if not entries:  # (checked again: a producer appends without the lock)
                    del self._active[queue]
                    continue
            if not queue.since:
                queue.since = now
                # records of this size in a full batch
                queue.full_at = max(1, min(self._batch_num, self._batch_size // _entry_size(entries[0])))
            if len(entries) >= queue.full_at or flushing or now - queue.since >= linger:
                batch = self._cut_locked(queue, now, self._batch_num)
                in_flight[tp] = batch
                sendable.append(batch)
                queue.kick_at = len(entries) + room if room < _NEVER else _NEVER
                continue
            queue.kick_at = min(queue.full_at, len(entries) + room)
            if len(entries) >= queue.full_at:  # reached before the kick was armed
                w = 0.0
            else:
                w = queue.since + linger - now
            wait = w if wait is None or w < wait else wait
        return wait

    def _cut_locked(self, queue: _Queue, now: float, limit: int) -> _Batch:
        """Take up to ``limit`` records (and about ``batch.size`` bytes) off ``queue``."""
        entries = queue.entries
        take = min(len(entries), limit)
        if limit == self._batch_num and take > queue.full_at:
            take = queue.full_at  # the full batch size seen so far: usually no record-by-record cut
        batch_entries = entries[:take]
        size = _entries_size(batch_entries)
        if size > self._batch_size and take > 1 and limit == self._batch_num:
            total = 0
            for i, entry in enumerate(batch_entries):  # noqa: B007 - i is read after the loop
                total += _entry_size(entry)
                if total >= self._batch_size:
                    break
            take = max(1, i + 1)
            batch_entries = batch_entries[:take]
            size = total
        del entries[:take]
        self._count += take
        if size > 0:
            queue.full_at = max(1, min(self._batch_num, self._batch_size * take // size))
        since = queue.since or now
        queue.since = now if entries else 0.0
        return _Batch(queue.tp, now, since + self._message_timeout_s, batch_entries, queue.cb)

    def _resolve_unknown_locked(self, now: float) -> None:
        still = []
        for topic, partition, entry, since in self._unknown:
            n = self._metadata.partition_count(topic) if is_valid_topic_name(topic) else None
            if n is not None and partition < n:
                p = self._partitioner(entry[0], n) if partition == -1 else partition
                tp = TopicPartition(topic, p)
                batch = _Batch(tp, now, now + self._message_timeout_s, [entry])
                self._ready.setdefault(tp, collections.deque()).append(batch)
            elif n is not None:
                self._reports.append((self._single(topic, partition, entry),
                                      kafka_error(KafkaError._UNKNOWN_PARTITION, "Local: Unknown partition"), -1))
            elif not is_valid_topic_name(topic):
                self._reports.append((self._single(topic, partition, entry),
                                      kafka_error(KafkaError.TOPIC_EXCEPTION,
                                                  f"Broker: Invalid topic: {topic!r}"), -1))
            elif now - since >= min(self._metadata_propagation_s, self._message_timeout_s):
                self._reports.append((self._single(topic, partition, entry),
                                      kafka_error(KafkaError.UNKNOWN_TOPIC_OR_PART,
                                                  "Broker: Unknown topic or partition"), -1))
            else:
                still.append((topic, partition, entry, since))
        if len(still) != len(self._unknown):
            self._reported.notify_all()
        self._unknown = still

    def _send(self, batches: list[_Batch]) -> None:
        if self._idempotent and self._producer_id < 0:
            self._ensure_producer_id()
        by_leader: dict[int, dict[TopicPartition, _Batch]] = {}
        for batch in batches:
            tp = batch.tp
            if batch.data is None:
                batch.prepare()
                if self._idempotent:
                    seq = self._next_sequence.get(tp, 0)
                    batch.base_sequence = seq
                    self._next_sequence[tp] = (seq + len(batch.entries)) & 0x7FFFFFFF
                batch.data = encode_batch(batch.records, producer_id=self._producer_id,
                                          producer_epoch=self._producer_epoch,
                                          base_sequence=batch.base_sequence,
                                          is_transactional=self._transactional_id is not None)
            if self._transactional_id is not None and tp not in self._txn_partitions:
                error = self._add_partition_to_txn(tp)
                if error is not None:
                    with self._lock:
                        self._in_flight.pop(tp, None)
                        self._fail_locked(batch, error)
                    continue
            leader, _epoch = self._metadata.leader(tp)
            if leader < 0:
                with self._lock:
                    self._retry_or_fail_locked(batch, Errors.LEADER_NOT_AVAILABLE, "no leader",
                                               time.monotonic())
                continue
            by_leader.setdefault(leader, {})[tp] = batch
            batch.leader = leader
        for leader, group in by_leader.items():
            now = time.monotonic()
            for batch in group.values():
                batch.attempts += 1
                batch.sent_at = now
                batch.generation += 1
            request = ProduceRequest(self._acks, int(self._request_timeout_s * 1000),
                                     {tp: b.data for tp, b in group.items()}, self._transactional_id)
            generations = {tp: b.generation for tp, b in group.items()}
            with self._lock:
                self._count_request(leader, "tx")
                if any(b.attempts > 1 for b in group.values()):
                    self._count_request(leader, "txretries")
            self._transport.send_async(
                -1, leader, request,
                lambda response, error, group=group, generations=generations:
                self._on_response(group, generations, response, error))

    def _on_response(self, group: dict[TopicPartition, _Batch], generations: dict[TopicPartition, int],
                     response: Any, error: TransportError | None) -> None:
        now = time.monotonic()
        with self._lock:
            for tp, batch in group.items():
                if batch.generation != generations[tp] or self._in_flight.get(tp) is not batch:
                    continue  # timed out and resent (or purged) meanwhile
                batch.sent_at = 0.0
                if error is not None:
                    if not isinstance(error, NotDeliveredError):
                        batch.maybe_written = True
                    self._retry_or_fail_locked(batch, _TRANSPORT, str(error), now)
                    continue
                if response is None:  # acks=0
                    self._complete_locked(batch, None, -1)
                    continue
                result = response.get(tp)
                code = result.error if result is not None else Errors.UNKNOWN_TOPIC_OR_PART
                if code == Errors.NONE or code == Errors.DUPLICATE_SEQUENCE_NUMBER:
                    self._complete_locked(batch, None, result.base_offset)
                elif code in RETRIABLE:
                    if code in _MAYBE_WRITTEN:
                        batch.maybe_written = True
                    if code == Errors.UNKNOWN_TOPIC_OR_PART and self._metadata.partition_count(tp.topic) is None:
                        self._fail_locked(batch, kafka_error(code, "Broker: Unknown topic or partition"))
                    else:
                        self._retry_or_fail_locked(batch, code, result.error_message or "", now)
                elif code in _FENCING and self._idempotent:
                    self._fenced_locked(batch, code)
                elif code in _SEQUENCE_DESYNC and self._idempotent:
                    # librdkafka: the broker's sequence state and ours disagree; no later
                    # write to this partition can keep the idempotence guarantee.
                    self._set_fatal_locked(kafka_error(
                        int(code), f"ProduceRequest for {tp.topic} [{tp.partition}] with base sequence "
                        f"{batch.base_sequence} failed: sequence desynchronization with the broker "
                        f"({Errors(code).name})", fatal=True))
                    self._complete_locked(batch, self._fatal, -1)
                else:
                    self._fail_locked(batch, kafka_error(int(code), result.error_message or None))
            self._wake.notify()

    def _complete_locked(self, batch: _Batch, error: KafkaError | None, base_offset: int) -> None:
        self._in_flight.pop(batch.tp, None)
        self._reports.append((batch, error, base_offset))
        self._reported.notify_all()

    def _fail_locked(self, batch: _Batch, error: KafkaError) -> None:
        if self._idempotent and batch.base_sequence >= 0:
            self._release_sequence_locked(batch, error)
        if self._transactional_id is not None and self._txn_error is None and not error.fatal():
            # librdkafka: a failed delivery inside a transaction makes it abortable only.
            self._txn_error = kafka_error(error.code(), error.str(), txn_requires_abort=True)
            if self._txn_state == _TxnState.IN_TRANSACTION:
                self._txn_state = _TxnState.ABORTABLE_ERROR
                self._refresh_gate_locked()
        self._complete_locked(batch, error, -1)

    def _retry_or_fail_locked(self, batch: _Batch, code: int, reason: str, now: float) -> None:
        if batch.attempts <= self._retries and now + self._retry_backoff_s < batch.deadline:
            self._in_flight.pop(batch.tp, None)
            batch.retry_at = now + self._retry_backoff_s
            self._ready.setdefault(batch.tp, collections.deque()).appendleft(batch)
            self._wake.notify()
            return
        if code == _TRANSPORT:
            error = kafka_error(KafkaError._MSG_TIMED_OUT if now + self._retry_backoff_s >= batch.deadline
                                else KafkaError._TRANSPORT, reason or None, retriable=True)
        else:
            error = kafka_error(int(code), reason or None, retriable=True)
        self._fail_locked(batch, error)

    def _fenced_locked(self, batch: _Batch, code: int) -> None:
        if self._transactional_id is not None:
            self._set_fatal_locked(kafka_error(KafkaError._FENCED, "Producer fenced by a newer instance "
                                               f"(broker: {Errors(code).name})", fatal=True))
            self._complete_locked(batch, self._fatal, -1)
        else:
            self._fail_locked(batch, kafka_error(int(code)))

    def _release_sequence_locked(self, batch: _Batch, error: KafkaError) -> None:
        """A failed batch gives its sequence numbers back, as librdkafka does (KIP-360).

        One batch per partition is in flight, so the failed batch is the last one that took
        sequence numbers. When the broker surely did not write it, the next batch reuses its base
        sequence and the partition goes on. When it may be in the log (an answer lost, appended
        but not replicated in time), reusing the numbers could acknowledge other records as its
        duplicates, and skipping them is refused as out of order: a fatal error."""
        tp = batch.tp
        if batch.maybe_written and self._transactional_id is not None:
            # The transaction must abort (see _fail_locked); the abort then bumps the epoch
            # (KIP-360), which starts every partition's sequence again.
            self._bump_epoch = True
        elif batch.maybe_written:
            self._set_fatal_locked(kafka_error(
                KafkaError._INCONSISTENT,
                f"{len(batch.entries)} message(s) to {tp.topic} [{tp.partition}] (base sequence "
                f"{batch.base_sequence}) failed ({error.str()}) and may have been written: the idempotent "
                "producer cannot continue without risking duplicates or gaps", fatal=True))
            return
        if self._next_sequence.get(tp) == (batch.base_sequence + len(batch.entries)) & 0x7FFFFFFF:
            self._next_sequence[tp] = batch.base_sequence
            log.info("%s [%d]: %d message(s) failed unwritten (%s); the next batch reuses base sequence %d",
                     tp.topic, tp.partition, len(batch.entries), error.str(), batch.base_sequence)
        batch.base_sequence = -1

    def _set_fatal_locked(self, error: KafkaError) -> None:
        """Record the first fatal error: produce() raises it from now on, error_cb hears it, and
        what is still queued fails with it (librdkafka purges the queues of a fatal producer)."""
        if self._fatal is None:
            self._fatal = error
            self._txn_state = _TxnState.FATAL_ERROR
            self._refresh_gate_locked()
            log.error("producer fatal error: %s", error)
            if self._error_cb is not None:
                self._errors.append(error)
            self._purge_queued_locked(error)

    # -- producer id ------------------------------------------------------------------------------

    def _coordinator(self):
        coordinator = getattr(self._cluster, "txn_coordinator", None)
        if coordinator is None:
            raise kafka_exception(KafkaError._TRANSPORT, "the embedded cluster has no transaction coordinator")
        return coordinator

    def _ensure_producer_id(self) -> None:
        """Idempotent producer without transactions: get a producer id (retrying)."""
        deadline = time.monotonic() + self._request_timeout_s
        while True:
            error, pid, epoch = self._coordinator().init_producer_id(None)
            if error == 0:
                self._producer_id, self._producer_epoch = pid, epoch
                return
            if time.monotonic() >= deadline:
                raise kafka_exception(KafkaError._TIMED_OUT, f"InitProducerId failed: {error!r}", retriable=True)
            time.sleep(self._retry_backoff_s)

    # -- transactions -----------------------------------------------------------------------------

    def _check_txn(self, *allowed: str) -> None:
        if self._transactional_id is None:
            raise kafka_exception(KafkaError._NOT_CONFIGURED,
                                  "The Transactional API requires transactional.id to be configured")
        if self._fatal is not None:
            raise KafkaException(self._fatal)
        if self._txn_state not in allowed:
            raise kafka_exception(KafkaError._STATE, f"Operation not valid in state {self._txn_state}")

    def _txn_call(self, call: Callable[[], Any], timeout: float | None, what: str) -> Any:
        """Call the coordinator, retrying retriable answers until ``timeout``; map errors."""
        deadline = time.monotonic() + (self._request_timeout_s if timeout is None or timeout < 0 else timeout)
        while True:
            result = call()
            code = int(result[0] if isinstance(result, tuple) else result)
            if code == 0:
                return result
            if code in (Errors.PRODUCER_FENCED, Errors.INVALID_PRODUCER_EPOCH):
                with self._lock:
                    self._set_fatal_locked(kafka_error(
                        KafkaError._FENCED, f"{what}: producer fenced by a newer instance with the same "
                                            f"transactional.id {self._transactional_id!r}", fatal=True))
                raise KafkaException(self._fatal)
            if code in _TXN_RETRIABLE:
                if time.monotonic() >= deadline:
                    raise kafka_exception(KafkaError._TIMED_OUT, f"{what} timed out (last error {code})",
                                          retriable=True)
                time.sleep(self._retry_backoff_s / 2)
                continue
            raise kafka_exception(code, f"{what} failed", fatal=code in (49, 50))

    def init_transactions(self, timeout: float | None = None) -> None:
        """Get the producer id and epoch of ``transactional.id``, fencing older instances and
        aborting their open transaction."""
        self._check_txn(_TxnState.UNINIT)  # librdkafka: once per producer (a timed-out call may be retried)
        with self._txn_lock:
            _e, pid, epoch = self._txn_call(
                lambda: self._coordinator().init_producer_id(self._transactional_id, self._txn_timeout_ms),
                timeout, "InitProducerId")
            self._producer_id, self._producer_epoch = pid, epoch
            self._next_sequence.clear()
            self._txn_state = _TxnState.READY

    def begin_transaction(self) -> None:
        self._check_txn(_TxnState.READY)
        with self._lock:
            self._txn_partitions = set()
            self._txn_has_offsets = False
            self._txn_error = None
            self._txn_state = _TxnState.IN_TRANSACTION
            self._refresh_gate_locked()

    def _add_partition_to_txn(self, tp: TopicPartition) -> KafkaError | None:
        try:
            self._txn_call(lambda: self._coordinator().add_partitions_to_txn(
                self._transactional_id, self._producer_id, self._producer_epoch, [tp]),
                self._request_timeout_s, "AddPartitionsToTxn")
        except KafkaException as e:
            return e.args[0]
        self._txn_partitions.add(tp)
        return None

    def send_offsets_to_transaction(self, offsets: list, group_metadata: Any, timeout: float | None = None) -> None:
        """Commit the consumer's ``offsets`` as part of the current transaction."""
        self._check_txn(_TxnState.IN_TRANSACTION, _TxnState.ABORTABLE_ERROR)
        if self._txn_state == _TxnState.ABORTABLE_ERROR:
            raise KafkaException(self._txn_error)
        group_id = getattr(group_metadata, "group_id", None)
        if group_id is None:  # confluent-kafka accepts only its consumer's metadata object
            raise TypeError(f"group_metadata must come from Consumer.consumer_group_metadata(), "
                            f"got {type(group_metadata).__name__}")
        if not isinstance(group_id, str) or not group_id:
            raise kafka_exception(KafkaError._INVALID_ARG, "group_metadata must come from consumer_group_metadata()")
        if not isinstance(offsets, (list, tuple)):
            raise TypeError("offsets must be a list of TopicPartition")
        for tp in offsets:
            if getattr(tp, "offset", -1) < 0:
                raise kafka_exception(KafkaError._INVALID_ARG,
                                      f"send_offsets_to_transaction: invalid offset {tp.offset} for "
                                      f"{tp.topic} [{tp.partition}]")
        if not offsets:
            return
        member_id = getattr(group_metadata, "member_id", None) or ""
        generation = getattr(group_metadata, "generation_id", -1)
        try:
            self._txn_call(lambda: self._coordinator().send_offsets_to_txn(
                self._transactional_id, self._producer_id, self._producer_epoch, group_id, list(offsets),
                member_id, generation if isinstance(generation, int) else -1),
                timeout, "AddOffsetsToTxn")
        except KafkaException as exc:
            error = exc.args[0]
            if error.code() in (_ILLEGAL_GENERATION, _UNKNOWN_MEMBER_ID):
                # librdkafka: the consumer's group moved on; only aborting the transaction helps
                with self._lock:
                    self._txn_error = kafka_error(error.code(), f"TxnOffsetCommit: {error.str()} (the consumer "
                                                  "group rebalanced)", txn_requires_abort=True)
                    if self._txn_state == _TxnState.IN_TRANSACTION:
                        self._txn_state = _TxnState.ABORTABLE_ERROR
                        self._refresh_gate_locked()
                raise KafkaException(self._txn_error) from None
            raise
        self._txn_has_offsets = True

    def commit_transaction(self, timeout: float | None = None) -> None:
        """Flush, then commit: the transaction's records and offsets become visible atomically."""
        self._check_txn(_TxnState.IN_TRANSACTION, _TxnState.ABORTABLE_ERROR)
        if self._txn_state == _TxnState.ABORTABLE_ERROR:
            raise KafkaException(self._txn_error)
        remaining = self.flush(-1 if timeout is None else timeout)
        if remaining:
            raise kafka_exception(KafkaError._TIMED_OUT, f"commit_transaction: {remaining} messages not "
                                  "delivered before the timeout", retriable=True)
        if self._fatal is not None:
            raise KafkaException(self._fatal)
        if self._txn_error is not None:
            raise KafkaException(self._txn_error)
        self._end_txn(True, timeout)

    def abort_transaction(self, timeout: float | None = None) -> None:
        """Purge what is not sent, wait for what is in flight, then abort."""
        self._check_txn(_TxnState.IN_TRANSACTION, _TxnState.ABORTABLE_ERROR)
        self.purge(in_queue=True, in_flight=True, blocking=True)
        self.poll(0)
        self._end_txn(False, timeout)

    def _end_txn(self, commit: bool, timeout: float | None) -> None:
        if self._txn_partitions or self._txn_has_offsets:
            self._txn_call(lambda: self._coordinator().end_txn(
                self._transactional_id, self._producer_id, self._producer_epoch, commit),
                timeout, "EndTxn")
        if not commit and self._bump_epoch:
            _e, pid, epoch = self._txn_call(
                lambda: self._coordinator().init_producer_id(self._transactional_id, self._txn_timeout_ms),
                timeout, "InitProducerId (epoch bump)")
            with self._lock:
                self._producer_id, self._producer_epoch = pid, epoch
                self._next_sequence.clear()
                self._bump_epoch = False
        with self._lock:
            self._txn_partitions = set()
            self._txn_has_offsets = False
            self._txn_error = None
            self._txn_state = _TxnState.READY
            self._refresh_gate_locked()

    # -- odds and ends ----------------------------------------------------------------------------

    def set_sasl_credentials(self, username: str, password: str) -> None:
        """Accepted and ignored: the embedded cluster has no authentication."""

    def __repr__(self) -> str:
        return f"<replication.clients.Producer {len(self)} pending, acks={self._acks}>"
