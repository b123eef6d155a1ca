"""The transaction coordinator of a LocalCluster (Kafka's TransactionCoordinator).

A cluster-level service, like the controller: producers call it in process.

- ``init_producer_id(transactional_id, transaction_timeout_ms)``: a fresh producer id for an
  idempotent producer; for a transactional id, the next epoch (fencing every older instance)
  after aborting the previous epoch's open transaction.
- ``add_partitions_to_txn``, ``add_offsets_to_txn`` / ``send_offsets_to_txn`` (the group's
  offsets are held by the group coordinator until the transaction ends), ``end_txn``: the
  PREPARE state is written first, then COMMIT/ABORT markers go to every partition of the
  transaction through its leader (``WriteTxnMarkersRequest``, acks=all), then the COMPLETE
  state is written.
- State machine with checked transitions: EMPTY, ONGOING, PREPARE_COMMIT, PREPARE_ABORT,
  COMPLETE_COMMIT, COMPLETE_ABORT, DEAD.
- State lives in the compacted internal topic ``__transaction_state`` (created on first use,
  replication factor min(3, brokers)), one record per transactional id (key ``t:<id>``, JSON
  value) plus the producer id block (key ``p:block``), written with acks=all through the
  normal produce path. A partition's state is (re)loaded from its leader's log whenever that
  partition's leader epoch differs from the one it was loaded at: after a cluster restart and
  after the leader of a state partition crashed. Transactions found in a PREPARE state are
  completed; open ones are left to the timeout.
- A reaper thread aborts transactions open longer than their ``transaction.timeout.ms``,
  bumping the epoch so the hung producer is fenced, retries unfinished completions, and
  expires ids idle longer than ``transactional.id.expiration.ms``.

Errors are returned as Kafka protocol codes (`TxnErrors`), which are also confluent-kafka's.
"""

from __future__ import annotations

import enum
import json
import logging
import threading
import time
from dataclasses import dataclass, field, replace
from typing import Any, Iterable

from replication.errors import ReplicationError, TransportError
from replication.group_coordinator import OffsetAndMetadata
from replication.protocol import Errors, ProduceRequest, TopicPartition
from replication.records import MemoryRecords, encode_batch

log = logging.getLogger(__name__)

__all__ = ["TRANSACTION_STATE_TOPIC", "TransactionCoordinator", "TransactionMetadata", "TxnErrors",
           "TxnState", "TxnStateError", "WriteTxnMarkersRequest"]

TRANSACTION_STATE_TOPIC = "__transaction_state"
PRODUCER_ID_BLOCK_SIZE = 1000
_BLOCK_KEY = b"p:block"
_MAX_EPOCH = 32767


class TxnErrors(enum.IntEnum):
    """Kafka protocol codes the coordinator answers with."""

    NONE = 0
    UNKNOWN_TOPIC_OR_PART = 3
    REQUEST_TIMED_OUT = 7
    COORDINATOR_NOT_AVAILABLE = 15
    NOT_COORDINATOR = 16
    INVALID_PRODUCER_EPOCH = 47
    INVALID_TXN_STATE = 48
    INVALID_PRODUCER_ID_MAPPING = 49
    INVALID_TRANSACTION_TIMEOUT = 50
    CONCURRENT_TRANSACTIONS = 51
    INVALID_REQUEST = 42
    ILLEGAL_GENERATION = 22
    UNKNOWN_MEMBER_ID = 25
    PRODUCER_FENCED = 90


RETRIABLE = frozenset({TxnErrors.COORDINATOR_NOT_AVAILABLE, TxnErrors.NOT_COORDINATOR,
                       TxnErrors.CONCURRENT_TRANSACTIONS, TxnErrors.REQUEST_TIMED_OUT})


class TxnStateError(ReplicationError):
    """An illegal transaction state transition (a coordinator bug, never a client error)."""


class TxnState(enum.Enum):
    EMPTY = "Empty"
    ONGOING = "Ongoing"
    PREPARE_COMMIT = "PrepareCommit"
    PREPARE_ABORT = "PrepareAbort"
    COMPLETE_COMMIT = "CompleteCommit"
    COMPLETE_ABORT = "CompleteAbort"
    DEAD = "Dead"


_S = TxnState
VALID_PREVIOUS: dict[TxnState, frozenset[TxnState]] = {
    _S.EMPTY: frozenset({_S.EMPTY, _S.COMPLETE_COMMIT, _S.COMPLETE_ABORT}),
    _S.ONGOING: frozenset({_S.ONGOING, _S.EMPTY, _S.COMPLETE_COMMIT, _S.COMPLETE_ABORT}),
    _S.PREPARE_COMMIT: frozenset({_S.ONGOING}),
    _S.PREPARE_ABORT: frozenset({_S.ONGOING}),
    _S.COMPLETE_COMMIT: frozenset({_S.PREPARE_COMMIT}),
    _S.COMPLETE_ABORT: frozenset({_S.PREPARE_ABORT}),
    _S.DEAD: frozenset({_S.EMPTY, _S.COMPLETE_COMMIT, _S.COMPLETE_ABORT}),
}


@dataclass(slots=True)
class WriteTxnMarkersRequest:
    """Coordinator -> partition leader: append a COMMIT (or ABORT) marker to these partitions."""

    producer_id: int
    producer_epoch: int
    coordinator_epoch: int
    commit: bool
    partitions: list[TopicPartition]
    timeout_ms: int = 30000


@dataclass
class TransactionMetadata:
    transactional_id: str
    producer_id: int
    producer_epoch: int
    timeout_ms: int
    state: TxnState = TxnState.EMPTY
    partitions: frozenset[TopicPartition] = frozenset()
    groups: frozenset[str] = frozenset()
    txn_start_ms: int = -1
    last_update_ms: int = 0
    #: PREPARE_COMMIT only: the group offsets the transaction commits, as (group, topic,
    #: partition, offset, metadata) rows, so completing after a restart still writes them.
    pending_offsets: tuple[tuple[str, str, int, int, str | None], ...] = ()

    def transition(self, state: TxnState, **changes: Any) -> "TransactionMetadata":
        """A copy in ``state``; TxnStateError if the transition is not allowed."""
        if self.state not in VALID_PREVIOUS[state]:
            raise TxnStateError(f"transaction {self.transactional_id!r}: illegal transition "
                                f"{self.state.name} -> {state.name}")
        return replace(self, state=state, last_update_ms=_now_ms(), **changes)

    def to_json(self) -> bytes:
        return json.dumps({
            "producer_id": self.producer_id, "producer_epoch": self.producer_epoch,
            "timeout_ms": self.timeout_ms, "state": self.state.value,
            "partitions": sorted([tp.topic, tp.partition] for tp in self.partitions),
            "groups": sorted(self.groups), "txn_start_ms": self.txn_start_ms,
            "last_update_ms": self.last_update_ms,
            **({"pending_offsets": [list(row) for row in self.pending_offsets]} if self.pending_offsets else {}),
        }, separators=(",", ":")).encode()

    @classmethod
    def from_json(cls, transactional_id: str, value: bytes) -> "TransactionMetadata":
        d = json.loads(value)
        return cls(transactional_id, int(d["producer_id"]), int(d["producer_epoch"]), int(d["timeout_ms"]),
                   TxnState(d["state"]), frozenset(TopicPartition(t, int(p)) for t, p in d["partitions"]),
                   frozenset(d["groups"]), int(d["txn_start_ms"]), int(d["last_update_ms"]),
                   tuple((str(g), str(t), int(p), int(o), m) for g, t, p, o, m in d.get("pending_offsets", ())))


def _offsets_by_group(rows: tuple) -> dict[str, dict[TopicPartition, OffsetAndMetadata]]:
    out: dict[str, dict[TopicPartition, OffsetAndMetadata]] = {}
    for group_id, topic, partition, offset, metadata in rows:
        out.setdefault(group_id, {})[TopicPartition(topic, partition)] = OffsetAndMetadata(offset, metadata)
    return out


def _now_ms() -> int:
    return int(time.time() * 1000)


class _NotAvailable(Exception):
    """The state partition cannot be read or written now (no leader, not enough replicas)."""


@dataclass
class _Partition:
    leader_epoch: int = -1  # the leader epoch the state was loaded at
    txn_ids: set[str] = field(default_factory=set)


class TransactionCoordinator:
    """Transactions of one LocalCluster (see the module docstring)."""

    def __init__(self, cluster: Any, config: dict | None = None) -> None:
        self.cluster = cluster
        cfg = dict(cluster.config)
        cfg.update(config or {})
        self.num_partitions = int(cfg.get("transaction.state.log.num.partitions", 3))
        self.replication_factor = min(int(cfg.get("transaction.state.log.replication.factor", 3)),
                                      cluster.num_brokers)
        self.min_isr = min(int(cfg.get("transaction.state.log.min.isr", 2)), self.replication_factor)
        self.max_timeout_ms = int(cfg.get("transaction.max.timeout.ms", 900000))
        self.abort_interval_ms = int(cfg.get("transaction.abort.timed.out.transaction.cleanup.interval.ms",
                                             10000))
        self.expiration_ms = int(cfg.get("transactional.id.expiration.ms", 7 * 24 * 3600 * 1000))
        self.request_timeout_ms = int(cfg.get("request.timeout.ms", 30000))
        self._lock = threading.RLock()
        self._txns: dict[str, TransactionMetadata] = {}
        self._partitions: dict[int, _Partition] = {}
        self._next_producer_id = 0
        self._block_end = 0
        self._block_loaded = False
        self._stop = threading.Event()
        self._reaper: threading.Thread | None = None
        self.coordinator_epoch = 0

    # -- lifecycle -------------------------------------------------------------------------------

    def start(self) -> None:
        if self._reaper is None:
            self._stop.clear()
            self._reaper = threading.Thread(target=self._reap_loop, name="txn-coordinator-reaper", daemon=True)
            self._reaper.start()

    def close(self) -> None:
        self._stop.set()
        if self._reaper is not None:
            self._reaper.join(timeout=5)
            self._reaper = None

    # -- state topic -----------------------------------------------------------------------------

    def partition_for(self, transactional_id: str) -> int:
        from replication.clients.partitioner import murmur2_partition

        return murmur2_partition(transactional_id.encode("utf-8"), self.num_partitions)

    def _topic_exists(self) -> bool:
        return TRANSACTION_STATE_TOPIC in self.cluster.controller.topics

    def _ensure_topic(self) -> None:
        if self._topic_exists():
            return
        try:
            self.cluster.create_topic(TRANSACTION_STATE_TOPIC, self.num_partitions, self.replication_factor,
                                      {"cleanup.policy": "compact", "min.insync.replicas": str(self.min_isr),
                                       "segment.bytes": str(100 * 1024 * 1024)})
        except ReplicationError:
            if not self._topic_exists():  # else created concurrently
                raise

    def _ensure_loaded(self, partition: int) -> None:
        """(Re)load a state partition whose leader changed since it was loaded."""
        state = self.cluster.controller.partition_state(TopicPartition(TRANSACTION_STATE_TOPIC, partition))
        if state is None or state.leader < 0:
            raise _NotAvailable(f"{TRANSACTION_STATE_TOPIC}-{partition} has no leader")
        loaded = self._partitions.get(partition)
        if loaded is not None and loaded.leader_epoch == state.leader_epoch:
            return
        records = self._read_partition(partition, state.leader)
        for txn_id in (loaded.txn_ids if loaded else ()):
            self._txns.pop(txn_id, None)
        part = _Partition(state.leader_epoch)
        latest: dict[bytes, bytes | None] = {}
        for key, value in records:
            latest[key] = value
        for key, value in latest.items():
            if key == _BLOCK_KEY:
                if value is not None:
                    end = int(json.loads(value)["block_end"])
                    if end > self._block_end:
                        self._block_end = self._next_producer_id = end
                continue
            if not key.startswith(b"t:") or value is None:
                continue
            txn_id = key[2:].decode("utf-8")
            try:
                meta = TransactionMetadata.from_json(txn_id, value)
            except (ValueError, KeyError, TypeError) as e:
                log.error("skipping a malformed %s record for %r: %s", TRANSACTION_STATE_TOPIC, txn_id, e)
                continue
            if meta.state is TxnState.DEAD:
                continue
            self._txns[txn_id] = meta
            part.txn_ids.add(txn_id)
        self._partitions[partition] = part
        if partition == 0:
            self._block_loaded = True
        self.coordinator_epoch += 1
        log.info("transaction coordinator loaded %d transactional ids from %s-%d (leader %d, epoch %d)",
                 len(part.txn_ids), TRANSACTION_STATE_TOPIC, partition, state.leader, state.leader_epoch)
        for txn_id in sorted(part.txn_ids):
            meta = self._txns[txn_id]
            if meta.state in (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT):
                self._complete(meta)

    def _read_partition(self, partition: int, leader: int) -> list[tuple[bytes, bytes | None]]:
        """Every (key, value) of the leader's log: acks=all writes are all in a new leader's log,
        its high watermark may only lag behind."""
        from replication.log import FetchIsolation

        try:
            lg = self.cluster.partition_on(leader, TRANSACTION_STATE_TOPIC, partition).log
        except ReplicationError as e:
            raise _NotAvailable(str(e)) from e
        out: list[tuple[bytes, bytes | None]] = []
        offset = lg.log_start_offset
        end = lg.log_end_offset
        while offset < end:
            data = lg.read(offset, 1 << 20, FetchIsolation.LOG_END)
            batches = MemoryRecords(data.buffer).record_batches()
            if not batches:
                break
            for batch in batches:
                if not batch.is_control:
                    out.extend((r.key, r.value) for r in batch.records())
            offset = batches[-1].next_offset
        return out

    def _write(self, partition: int, key: bytes, value: bytes | None) -> None:
        """Append one record to a state partition with acks=all; _NotAvailable on failure."""
        from replication.clients.common import call_leader

        tp = TopicPartition(TRANSACTION_STATE_TOPIC, partition)
        batch = encode_batch([(key, value, _now_ms())])
        timeout_ms = self.request_timeout_ms

        def extract(response):
            if response is None:
                return Errors.REQUEST_TIMED_OUT, None
            r = response[tp]
            return r.error, r

        error, _ = call_leader(self.cluster, tp, lambda leader, epoch: ProduceRequest(-1, timeout_ms, {tp: batch}),
                               extract, timeout_ms / 1000.0)
        if error != Errors.NONE:
            raise _NotAvailable(f"writing to {tp} failed: {Errors(error).name}")

    def _persist(self, meta: TransactionMetadata) -> None:
        """Write ``meta`` and make it the current state (only once the write is acknowledged)."""
        p = self.partition_for(meta.transactional_id)
        self._write(p, b"t:" + meta.transactional_id.encode("utf-8"),
                    None if meta.state is TxnState.DEAD else meta.to_json())
        if meta.state is TxnState.DEAD:
            self._txns.pop(meta.transactional_id, None)
            self._partitions[p].txn_ids.discard(meta.transactional_id)
        else:
            self._txns[meta.transactional_id] = meta
            self._partitions[p].txn_ids.add(meta.transactional_id)

    def _allocate_producer_id(self) -> int:
        self._ensure_loaded(0)
        if self._next_producer_id >= self._block_end:
            end = self._block_end + PRODUCER_ID_BLOCK_SIZE
            self._write(0, _BLOCK_KEY, json.dumps({"block_end": end}).encode())
            self._next_producer_id = self._block_end
            self._block_end = end
        pid = self._next_producer_id
        self._next_producer_id += 1
        return pid

    # -- requests --------------------------------------------------------------------------------

    def init_producer_id(self, transactional_id: str | None, transaction_timeout_ms: int = 60000
                         ) -> tuple[TxnErrors, int, int]:
        """(error, producer id, producer epoch)."""
        with self._lock:
            try:
                self._ensure_topic()
                if transactional_id is None:
                    return TxnErrors.NONE, self._allocate_producer_id(), 0
                if not isinstance(transactional_id, str) or not transactional_id:
                    return TxnErrors.INVALID_REQUEST, -1, -1
                if not 0 < transaction_timeout_ms <= self.max_timeout_ms:
                    return TxnErrors.INVALID_TRANSACTION_TIMEOUT, -1, -1
                self._ensure_loaded(self.partition_for(transactional_id))
                meta = self._txns.get(transactional_id)
                if meta is None:
                    meta = TransactionMetadata(transactional_id, self._allocate_producer_id(), 0,
                                               transaction_timeout_ms, last_update_ms=_now_ms())
                    self._persist(meta)
                    return TxnErrors.NONE, meta.producer_id, meta.producer_epoch
                if meta.state in (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT):
                    meta = self._complete(meta)
                    if meta.state not in (TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT):
                        return TxnErrors.CONCURRENT_TRANSACTIONS, -1, -1
                if meta.state is TxnState.ONGOING:
                    # The previous instance's open transaction is aborted under a bumped epoch:
                    # its late writes and its EndTxn are fenced.
                    meta = self._abort(meta, bump_epoch=True)
                    if meta.state is not TxnState.COMPLETE_ABORT:
                        return TxnErrors.CONCURRENT_TRANSACTIONS, -1, -1
                if meta.producer_epoch + 1 >= _MAX_EPOCH:
                    pid, epoch = self._allocate_producer_id(), 0
                else:
                    pid, epoch = meta.producer_id, meta.producer_epoch + 1
                meta = meta.transition(TxnState.EMPTY, producer_id=pid, producer_epoch=epoch,
                                       timeout_ms=transaction_timeout_ms, partitions=frozenset(),
                                       groups=frozenset(), txn_start_ms=-1)
                self._persist(meta)
                return TxnErrors.NONE, pid, epoch
            except _NotAvailable as e:
                log.info("InitProducerId(%r): %s", transactional_id, e)
                return TxnErrors.COORDINATOR_NOT_AVAILABLE, -1, -1

    def _check_producer(self, transactional_id: str, producer_id: int, producer_epoch: int
                        ) -> tuple[TxnErrors, TransactionMetadata | None]:
        self._ensure_loaded(self.partition_for(transactional_id))
        meta = self._txns.get(transactional_id)
        if meta is None or meta.producer_id != producer_id:
            return TxnErrors.INVALID_PRODUCER_ID_MAPPING, None
        if producer_epoch != meta.producer_epoch:
            return TxnErrors.PRODUCER_FENCED, None
        return TxnErrors.NONE, meta

    def _check_can_add(self, transactional_id: str, producer_id: int, producer_epoch: int):
        """The checks AddPartitionsToTxn and AddOffsetsToTxn share: (error, None) or (NONE, meta)."""
        if not self._topic_exists():
            return TxnErrors.INVALID_PRODUCER_ID_MAPPING, None
        error, meta = self._check_producer(transactional_id, producer_id, producer_epoch)
        if error:
            return error, None
        if meta.state in (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT):
            return TxnErrors.CONCURRENT_TRANSACTIONS, None
        return TxnErrors.NONE, meta

    def add_partitions_to_txn(self, transactional_id: str, producer_id: int, producer_epoch: int,
                              partitions: Iterable[TopicPartition]) -> TxnErrors:
        partitions = frozenset(TopicPartition(tp[0], tp[1]) for tp in partitions)
        with self._lock:
            try:
                error, meta = self._check_can_add(transactional_id, producer_id, producer_epoch)
                if error:
                    return error
                controller = self.cluster.controller
                if any(controller.partition_state(tp) is None for tp in partitions):
                    return TxnErrors.UNKNOWN_TOPIC_OR_PART
                if meta.state is TxnState.ONGOING and partitions <= meta.partitions:
                    return TxnErrors.NONE
                start = meta.txn_start_ms if meta.state is TxnState.ONGOING else _now_ms()
                groups = meta.groups if meta.state is TxnState.ONGOING else frozenset()
                self._persist(meta.transition(TxnState.ONGOING, partitions=meta.partitions | partitions
                                              if meta.state is TxnState.ONGOING else partitions,
                                              groups=groups, txn_start_ms=start))
                return TxnErrors.NONE
            except _NotAvailable as e:
                log.info("AddPartitionsToTxn(%r): %s", transactional_id, e)
                return TxnErrors.COORDINATOR_NOT_AVAILABLE

    def add_offsets_to_txn(self, transactional_id: str, producer_id: int, producer_epoch: int,
                           group_id: str) -> TxnErrors:
        with self._lock:
            try:
                error, meta = self._check_can_add(transactional_id, producer_id, producer_epoch)
                if error:
                    return error
                if meta.state is TxnState.ONGOING and group_id in meta.groups:
                    return TxnErrors.NONE
                ongoing = meta.state is TxnState.ONGOING
                self._persist(meta.transition(
                    TxnState.ONGOING, groups=(meta.groups if ongoing else frozenset()) | {group_id},
                    partitions=meta.partitions if ongoing else frozenset(),
                    txn_start_ms=meta.txn_start_ms if ongoing else _now_ms()))
                return TxnErrors.NONE
            except _NotAvailable as e:
                log.info("AddOffsetsToTxn(%r): %s", transactional_id, e)
                return TxnErrors.COORDINATOR_NOT_AVAILABLE

    def send_offsets_to_txn(self, transactional_id: str, producer_id: int, producer_epoch: int,
                            group_id: str, offsets: Any, member_id: str = "", generation: int = -1) -> TxnErrors:
        """AddOffsetsToTxn, then TxnOffsetCommit to the group coordinator (offsets pending
        until the transaction ends; member and generation checked when given, KIP-447)."""
        error = self.add_offsets_to_txn(transactional_id, producer_id, producer_epoch, group_id)
        if error:
            return error
        groups = getattr(self.cluster, "group_coordinator", None)
        if groups is None:
            return TxnErrors.COORDINATOR_NOT_AVAILABLE
        code = groups.txn_offset_commit(group_id, producer_id, producer_epoch, offsets, member_id, generation)
        return TxnErrors(int(code)) if code else TxnErrors.NONE

    def end_txn(self, transactional_id: str, producer_id: int, producer_epoch: int, commit: bool) -> TxnErrors:
        with self._lock:
            try:
                if not self._topic_exists():
                    return TxnErrors.INVALID_PRODUCER_ID_MAPPING
                error, meta = self._check_producer(transactional_id, producer_id, producer_epoch)
                if error:
                    return error
                done = TxnState.COMPLETE_COMMIT if commit else TxnState.COMPLETE_ABORT
                prepare = TxnState.PREPARE_COMMIT if commit else TxnState.PREPARE_ABORT
                if meta.state is done:
                    return TxnErrors.NONE  # a retried EndTxn
                if meta.state is prepare:
                    self._complete(meta)
                    return TxnErrors.NONE
                if meta.state is not TxnState.ONGOING:
                    return TxnErrors.INVALID_TXN_STATE
                meta = meta.transition(prepare, pending_offsets=self._offsets_to_commit(meta) if commit else ())
                self._persist(meta)
                self._complete(meta)
                return TxnErrors.NONE
            except _NotAvailable as e:
                log.info("EndTxn(%r): %s", transactional_id, e)
                return TxnErrors.COORDINATOR_NOT_AVAILABLE

    def describe(self, transactional_id: str) -> TransactionMetadata | None:
        """The current metadata of a transactional id (tests and admin look)."""
        with self._lock:
            try:
                if self._topic_exists():
                    self._ensure_loaded(self.partition_for(transactional_id))
            except _NotAvailable:
                pass
            return self._txns.get(transactional_id)

    # -- completion ------------------------------------------------------------------------------

    def _abort(self, meta: TransactionMetadata, bump_epoch: bool) -> TransactionMetadata:
        if bump_epoch:
            if meta.producer_epoch + 1 >= _MAX_EPOCH:
                # No epoch left to fence with: the abort marker keeps the epoch; a new id follows.
                pass
            else:
                meta = replace(meta, producer_epoch=meta.producer_epoch + 1)
        meta = meta.transition(TxnState.PREPARE_ABORT)
        self._persist(meta)
        return self._complete(meta)

    def _complete(self, meta: TransactionMetadata) -> TransactionMetadata:
        """Markers to every partition, the group offsets, then the COMPLETE state. Returns the
        metadata as it stands (still PREPARE_* if the markers could not all be written)."""
        commit = meta.state is TxnState.PREPARE_COMMIT
        if not self._write_markers(meta, commit):
            log.warning("transaction %r: markers not written yet; the reaper retries",
                        meta.transactional_id)
            return meta
        groups = getattr(self.cluster, "group_coordinator", None)
        if meta.groups and groups is not None:
            try:
                groups.complete_pending_txn_offsets(meta.producer_id, commit,
                                                    _offsets_by_group(meta.pending_offsets) if commit else None)
            except ReplicationError as e:
                log.warning("transaction %r: group offsets not completed yet (%s); the reaper retries",
                            meta.transactional_id, e)
                return meta
        done = meta.transition(TxnState.COMPLETE_COMMIT if commit else TxnState.COMPLETE_ABORT,
                               partitions=frozenset(), groups=frozenset(), txn_start_ms=-1, pending_offsets=())
        self._persist(done)
        return done

    def _offsets_to_commit(self, meta: TransactionMetadata) -> tuple:
        groups = getattr(self.cluster, "group_coordinator", None)
        if not meta.groups or groups is None:
            return ()
        return tuple(sorted((g, tp.topic, tp.partition, om.offset, om.metadata)
                            for g, offsets in groups.pending_txn_offsets(meta.producer_id).items()
                            for tp, om in offsets.items()))

    def _write_markers(self, meta: TransactionMetadata, commit: bool) -> bool:
        """Write the markers through the leaders, retrying moved leaders until the request
        timeout. Partitions of deleted topics are skipped. True when every marker is written."""
        remaining = set(meta.partitions)
        deadline = time.monotonic() + self.request_timeout_ms / 1000.0
        controller = self.cluster.controller
        delay = 0.005
        while remaining:
            by_leader: dict[int, list[TopicPartition]] = {}
            for tp in list(remaining):
                state = controller.partition_state(tp)
                if state is None:
                    remaining.discard(tp)  # the topic was deleted
                elif state.leader >= 0:
                    by_leader.setdefault(state.leader, []).append(tp)
            for leader, tps in by_leader.items():
                request = WriteTxnMarkersRequest(meta.producer_id, meta.producer_epoch, self.coordinator_epoch,
                                                 commit, tps, self.request_timeout_ms)
                try:
                    response = self.cluster.transport.request(-1, leader, request,
                                                              self.request_timeout_ms / 1000.0 + 1)
                except (TransportError, ReplicationError) as e:
                    log.debug("WriteTxnMarkers to broker %d failed: %s", leader, e)
                    continue
                for tp, result in response.items():
                    if result.error == Errors.NONE:
                        remaining.discard(tp)
                    elif result.error in (Errors.INVALID_PRODUCER_EPOCH,):
                        # A newer epoch already wrote there: this marker is obsolete.
                        log.warning("transaction %r: marker for %s refused (%s)", meta.transactional_id,
                                    tp, result.error_message)
                        remaining.discard(tp)
            if not remaining:
                return True
            if time.monotonic() >= deadline or self._stop.is_set():
                return False
            self._stop.wait(delay)
            delay = min(delay * 2, 0.2)
        return True

    # -- reaper ----------------------------------------------------------------------------------

    def _reap_loop(self) -> None:
        interval = max(0.01, self.abort_interval_ms / 1000.0)
        while not self._stop.wait(interval):
            try:
                self.abort_timed_out_transactions()
            except Exception:
                log.exception("transaction coordinator: reaper pass failed")

    def abort_timed_out_transactions(self, now_ms: int | None = None) -> list[str]:
        """Abort (with an epoch bump) every transaction open longer than its timeout; finish
        PREPARE_* transactions; expire idle ids. Returns the transactional ids aborted."""
        aborted: list[str] = []
        with self._lock:
            if not self.cluster._started or not self._topic_exists():
                return aborted
            for p in range(self.num_partitions):
                try:
                    self._ensure_loaded(p)
                except _NotAvailable:
                    continue
            now = _now_ms() if now_ms is None else now_ms
            for txn_id, meta in list(self._txns.items()):
                try:
                    if meta.state is TxnState.ONGOING and now - meta.txn_start_ms > meta.timeout_ms:
                        log.info("aborting transaction %r of producer %d epoch %d: open for more than %d ms",
                                 txn_id, meta.producer_id, meta.producer_epoch, meta.timeout_ms)
                        self._abort(meta, bump_epoch=True)
                        aborted.append(txn_id)
                    elif meta.state in (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT):
                        self._complete(meta)
                    elif (meta.state in (TxnState.EMPTY, TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT)
                          and now - meta.last_update_ms > self.expiration_ms):
                        self._persist(meta.transition(TxnState.DEAD))
                except _NotAvailable as e:
                    log.info("reaper: transaction %r not handled now: %s", txn_id, e)
        return aborted
