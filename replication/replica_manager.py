"""A broker's partitions and the requests served on them (Kafka's ReplicaManager).

Applies partition states pushed by the controller (become leader / follower, delete, config
change), answers Produce, Fetch, ListOffsets and OffsetsForLeaderEpoch, and parks fetches and
acks=all produces in purgatories that leader appends and high-watermark moves complete.
"""

from __future__ import annotations

import logging
import shutil
import threading
import time
from pathlib import Path
from typing import Callable

from replication.controller import NO_LEADER, PartitionState
from replication.errors import (
    CorruptRecordError,
    InvalidRecordError,
    KafkaStorageError,
    NotEnoughReplicasError,
    NotLeaderError,
    RecordBatchTooLargeError,
    RecordTooLargeError,
    RecordValidationError,
    ReplicationError,
)
from replication.fetch_session import FetchSession, FetchSessionCache
from replication.log import Log, LogConfig
from replication.names import partition_dir_name
from replication.partition import Partition
from replication.protocol import (
    FINAL_EPOCH,
    INITIAL_EPOCH,
    INVALID_SESSION_ID,
    EpochEndOffset,
    Errors,
    FetchPartitionResponse,
    FetchRequest,
    FetchResponse,
    ListOffsetsPartitionResponse,
    ListOffsetsRequest,
    OffsetsForLeaderEpochRequest,
    ProducePartitionResponse,
    ProduceRequest,
    TopicPartition,
)
from replication.purgatory import DelayedOperation, DelayedOperationPurgatory

log = logging.getLogger(__name__)


class DelayedFetch(DelayedOperation):
    """A fetch waiting for `min_bytes` (rule 21): completed by appends and HW moves."""

    __slots__ = ("manager", "request", "respond")

    def __init__(self, manager: "ReplicaManager", request: FetchRequest, respond) -> None:
        super().__init__(request.max_wait_ms)
        self.manager = manager
        self.request = request
        self.respond = respond

    def try_complete(self) -> bool:
        req = self.request
        accumulated = 0
        for tp, fp in req.partitions.items():
            partition = self.manager.partitions.get(tp)
            if (partition is None or not partition.is_leader
                    or (fp.current_leader_epoch >= 0 and fp.current_leader_epoch != partition.leader_epoch)):
                return self.force_complete()  # an error to report now
            accumulated += partition.available_bytes(fp.fetch_offset, req.replica_id, req.isolation_level)
            if accumulated >= req.min_bytes:
                return self.force_complete()
        return False

    def on_complete(self) -> None:
        self.respond(self.manager.read_partitions(self.request))


class DelayedSessionFetch(DelayedOperation):
    """An incremental session fetch waiting for a change of one of the session's partitions:
    it watches the session's key only, however many partitions the session has."""

    __slots__ = ("manager", "session", "request", "respond", "answer")

    def __init__(self, manager: "ReplicaManager", session: FetchSession, request: FetchRequest, respond,
                 answer: FetchResponse) -> None:
        super().__init__(request.max_wait_ms)
        self.manager = manager
        self.session = session
        self.request = request
        self.respond = respond
        self.answer = answer  # what the first read found (high-watermark moves): answered too

    def try_complete(self) -> bool:
        if self.manager.fetch_sessions.has_changes(self.session):
            return self.force_complete()
        return False

    def on_complete(self) -> None:
        answer = self.answer
        answer.update(self.manager.read_session(self.session, self.request, full=False))
        self.respond(answer)


class DelayedProduce(DelayedOperation):
    """An acks=all produce waiting for the high watermark to cover its appends (rule 20)."""

    __slots__ = ("manager", "pending", "results", "respond")

    def __init__(self, manager: "ReplicaManager", timeout_ms: int,
                 pending: dict[TopicPartition, int], results: dict, respond) -> None:
        super().__init__(timeout_ms)
        self.manager = manager
        self.pending = pending  # tp -> required next offset
        self.results = results
        self.respond = respond

    def try_complete(self) -> bool:
        for tp, required in list(self.pending.items()):
            partition = self.manager.partitions.get(tp)
            if partition is None:
                done, error = True, Errors.NOT_LEADER_OR_FOLLOWER
            else:
                done, error = partition.check_enough_replicas_reach_offset(required)
            if done:
                if error is not Errors.NONE:
                    result = self.results[tp]
                    result.error = error
                self.pending.pop(tp, None)
        if not self.pending:
            return self.force_complete()
        return False

    def on_expiration(self) -> None:
        pass

    def on_complete(self) -> None:
        for tp in self.pending:
            self.results[tp].error = Errors.REQUEST_TIMED_OUT
        self.respond(self.results)


class ReplicaManager:
    """Partitions hosted by one broker and the request handlers that act on them."""

    def __init__(self, broker_id: int, log_dir: Path, config: dict,
                 alter_isr: Callable, is_broker_alive: Callable[[int], bool]) -> None:
        self.broker_id = broker_id
        self.log_dir = Path(log_dir)
        self.config = config
        self._alter_isr = alter_isr
        self._is_broker_alive = is_broker_alive
        self.partitions: dict[TopicPartition, Partition] = {}
        self.logs: dict[TopicPartition, Log] = {}
        self._lock = threading.RLock()
        self.fetch_purgatory = DelayedOperationPurgatory(f"fetch-{broker_id}")
        lag_ms = int(config.get("replica.lag.time.max.ms", 30000))
        self.fetch_sessions = FetchSessionCache(
            max_slots=int(config.get("max.incremental.fetch.session.cache.slots", 1000)),
            # read every partition of a session a few times per lag window: the follower's
            # caught-up time stays fresh for the ISR without a change to fetch
            refresh_s=max(0.05, lag_ms / 4000.0))
        self.produce_purgatory = DelayedOperationPurgatory(f"produce-{broker_id}")
        # Set by the broker: called for partitions that must (re)start or stop fetching.
        self.on_become_follower: Callable[[Partition, bool], None] = lambda p, changed: None
        self.on_become_leader: Callable[[Partition, bool], None] = lambda p, changed: None
        self.on_partition_removed: Callable[[TopicPartition], None] = lambda tp: None
        self.on_log_opened: Callable[[Log], None] = lambda lg: None
        self.on_log_closing: Callable[[Log], None] = lambda lg: None

    # -- logs ----------------------------------------------------------------------------------

    def _log_config(self, topic_config: dict) -> LogConfig:
        merged = {k: v for k, v in self.config.items() if "." in k}
        merged.update(topic_config)
        return LogConfig.from_dict(merged)

    def get_or_create_log(self, tp: TopicPartition, topic_config: dict) -> Log:
        with self._lock:
            lg = self.logs.get(tp)
            if lg is None:
                path = self.log_dir / partition_dir_name(tp.topic, tp.partition)
                lg = Log(path, self._log_config(topic_config))
                self.logs[tp] = lg
                self.on_log_opened(lg)
            return lg

    def load_logs(self, topic_configs: dict[str, dict]) -> None:
        """Open (and recover) every partition directory this broker has on disk."""
        from replication.names import parse_partition_dir_name

        if not self.log_dir.exists():
            return
        for entry in sorted(self.log_dir.iterdir()):
            if not entry.is_dir():
                continue
            try:
                topic, partition = parse_partition_dir_name(entry.name)
            except ReplicationError:
                continue
            if topic not in topic_configs:
                log.info("broker %d: deleting log of removed topic %s", self.broker_id, entry.name)
                shutil.rmtree(entry, ignore_errors=True)
                continue
            self.get_or_create_log(TopicPartition(topic, partition), topic_configs[topic])

    # -- controller updates ----------------------------------------------------------------------

    def apply_partition_state(self, tp: TopicPartition, state: PartitionState, info: dict) -> None:
        if info.get("deleted"):
            self.remove_partition(tp, delete_log=True)
            return
        with self._lock:
            partition = self.partitions.get(tp)
            if partition is None:
                lg = self.get_or_create_log(tp, info.get("config", {}))
                partition = Partition(tp, self.broker_id, lg, self._partition_config(info.get("config", {})),
                                      self._alter_isr, self._is_broker_alive)
                self.partitions[tp] = partition
            elif info.get("config_only"):
                partition.config = self._partition_config(info["config"])
                partition.log.update_config(self._log_config(info["config"]))
        if partition.is_stale_state(state.partition_epoch, "leader %d" % state.leader, state.leader_epoch):
            return  # arrived after a newer state: no role change, no fetcher change
        if state.leader == self.broker_id:
            changed = partition.make_leader(state.leader_epoch, state.partition_epoch, state.replicas, state.isr)
            self.on_become_leader(partition, changed)
        else:
            changed = partition.make_follower(state.leader, state.leader_epoch, state.partition_epoch,
                                              state.replicas, state.isr)
            self.on_become_follower(partition, changed and state.leader != NO_LEADER)
        self.complete_delayed(tp)

    def _partition_config(self, topic_config: dict) -> dict:
        merged = dict(self.config)
        merged.update(topic_config)
        return merged

    def remove_partition(self, tp: TopicPartition, delete_log: bool) -> None:
        with self._lock:
            partition = self.partitions.pop(tp, None)
            lg = self.logs.pop(tp, None)
        self.on_partition_removed(tp)
        if partition is not None:
            partition.delete()
        self.complete_delayed(tp)
        if lg is not None:
            self.on_log_closing(lg)
            lg.close()
            if delete_log:
                shutil.rmtree(lg.dir, ignore_errors=True)

    def complete_delayed(self, tp: TopicPartition) -> None:
        """Wake parked fetches and produces of `tp` (after an append or a HW/role change)."""
        self.fetch_purgatory.check_and_complete(tp)
        self.produce_purgatory.check_and_complete(tp)
        self._notify_sessions(tp, wake=True)

    def parked_fetches(self, tp: TopicPartition) -> int:
        """Fetches parked in purgatory that an append to `tp` would answer (sessionless ones
        watching `tp`, and session fetches whose session holds it)."""
        count = self.fetch_purgatory.watched(tp)
        for session in self.fetch_sessions.sessions_of(tp):
            count += self.fetch_purgatory.watched(session.key)
        return count

    def _notify_sessions(self, tp: TopicPartition, wake: bool) -> None:
        """A change of `tp` for the fetch sessions that hold it; ``wake`` completes their parked
        fetches (records or a role change; a high-watermark move alone waits for the next
        answer, as Kafka's delayed fetch completes on bytes)."""
        keys = self.fetch_sessions.mark_changed(tp, wake)
        if wake:
            for key in keys:
                self.fetch_purgatory.check_and_complete(key)

    # -- produce -------------------------------------------------------------------------------

    @staticmethod
    def _append_to_leader(partition: Partition, records: bytes, acks: int, fallback: Errors):
        """Append as leader: (append info, None), or (None, the error response with Kafka's code)."""
        try:
            return partition.append_records_to_leader(records, acks), None
        except NotLeaderError:
            return None, ProducePartitionResponse(error=Errors.NOT_LEADER_OR_FOLLOWER)
        except NotEnoughReplicasError as e:
            return None, ProducePartitionResponse(error=Errors.NOT_ENOUGH_REPLICAS, error_message=str(e))
        except RecordValidationError as e:
            return None, ProducePartitionResponse(error=Errors.INVALID_RECORD, error_message=str(e),
                                                  record_errors=e.record_errors)
        except (RecordTooLargeError, RecordBatchTooLargeError) as e:
            return None, ProducePartitionResponse(error=Errors.MSG_SIZE_TOO_LARGE, error_message=str(e))
        except (CorruptRecordError, InvalidRecordError) as e:
            return None, ProducePartitionResponse(error=Errors.CORRUPT_MESSAGE, error_message=str(e))
        except KafkaStorageError as e:
            return None, ProducePartitionResponse(error=Errors.KAFKA_STORAGE_ERROR, error_message=str(e))
        except ReplicationError as e:
            code = getattr(e, "error_code", None)
            return None, ProducePartitionResponse(error=code if code is not None else fallback, error_message=str(e))

    def handle_produce(self, request: ProduceRequest, respond) -> None:
        results: dict[TopicPartition, ProducePartitionResponse] = {}
        pending: dict[TopicPartition, int] = {}
        for tp, records in request.partitions.items():
            partition = self.partitions.get(tp)
            if partition is None:
                results[tp] = ProducePartitionResponse(error=Errors.UNKNOWN_TOPIC_OR_PART)
                continue
            info, error = self._append_to_leader(partition, records, request.acks, Errors.CORRUPT_MESSAGE)
            if error is not None:
                results[tp] = error
                continue
            results[tp] = ProducePartitionResponse(base_offset=info.first_offset,
                                                   log_start_offset=partition.log.log_start_offset)
            if request.acks == -1:
                pending[tp] = info.last_offset + 1
            self.complete_delayed(tp)
        if request.acks == 0:
            respond(None)
            return
        if not pending:
            respond(results)
            return
        op = DelayedProduce(self, request.timeout_ms, pending, results, respond)
        self.produce_purgatory.try_complete_else_watch(op, list(pending))

    # -- fetch ---------------------------------------------------------------------------------

    def read_partitions(self, request: FetchRequest) -> FetchResponse:
        out = FetchResponse()
        remaining = request.max_bytes
        for tp, fp in request.partitions.items():
            partition = self.partitions.get(tp)
            if partition is None:
                out[tp] = FetchPartitionResponse(error=Errors.UNKNOWN_TOPIC_OR_PART)
                continue
            max_bytes = min(fp.max_bytes, remaining) if remaining > 0 else 0
            # Kafka returns at least one batch even past max_bytes so progress is always possible.
            resp = partition.fetch_records(fp, request.replica_id, request.replica_epoch,
                                           request.isolation_level, max(max_bytes, 1))
            out[tp] = resp
            remaining -= len(resp.records)
            if partition.hw_changed():
                self.produce_purgatory.check_and_complete(tp)
                self.fetch_purgatory.check_and_complete(tp)
                self._notify_sessions(tp, wake=False)
        return out

    def read_session(self, session: FetchSession, request: FetchRequest, full: bool) -> FetchResponse:
        """Read a session's changed partitions (``full``: all of them) and answer those the
        follower must hear about (``full``: all)."""
        if full:
            self.fetch_sessions.take_changed(session, time.monotonic())
            tps = list(session.partitions)
        else:
            tps = self.fetch_sessions.take_changed(session, time.monotonic())
        parts = session.partitions
        selected = {}
        for tp in tps:
            fp = parts.get(tp)
            if fp is not None:
                selected[tp] = fp
        out = FetchResponse(session_id=session.id)
        if not selected:
            return out
        read = self.read_partitions(FetchRequest(
            request.replica_id, request.replica_epoch, request.max_wait_ms, request.min_bytes, request.max_bytes,
            request.isolation_level, selected))
        answer_needed = session.answer_needed
        for tp, resp in read.items():
            if answer_needed(tp, resp) or full:
                out[tp] = resp
        return out

    def _handle_session_fetch(self, request: FetchRequest, respond) -> None:
        """KIP-227: open, continue or close a fetch session (see `replication.fetch_session`)."""
        sessions = self.fetch_sessions
        if request.session_epoch == FINAL_EPOCH:
            sessions.remove(request.session_id)
            self._sessionless_fetch(request, respond)
            return
        if request.session_epoch == INITIAL_EPOCH:
            session = sessions.create(request.replica_id, request.partitions, replaces=request.session_id)
            respond(self.read_session(session, request, full=True))
            return
        session = sessions.get(request.session_id)
        if session is None:
            respond(FetchResponse(error=Errors.FETCH_SESSION_ID_NOT_FOUND))
            return
        if not sessions.update(session, request.session_epoch, request.partitions, request.forgotten):
            respond(FetchResponse(error=Errors.INVALID_FETCH_SESSION_EPOCH, session_id=session.id))
            return
        if not session.partitions:
            # Kafka's FetchManager: the request forgot the last partition; the session ends
            # and the answer comes without one (how a follower that stops fetching frees it).
            sessions.remove(session.id)
            self._sessionless_fetch(request, respond)
            return
        response = self.read_session(session, request, full=False)
        if request.max_wait_ms <= 0 or self._fetch_satisfied(response, request.min_bytes):
            respond(response)
            return
        op = DelayedSessionFetch(self, session, request, respond, response)
        self.fetch_purgatory.try_complete_else_watch(op, [session.key])

    def _sessionless_fetch(self, request: FetchRequest, respond) -> None:
        """Answer ``request``'s partitions as a fetch without a session (session id 0)."""
        self.handle_fetch(FetchRequest(request.replica_id, request.replica_epoch, request.max_wait_ms,
                                       request.min_bytes, request.max_bytes, request.isolation_level,
                                       request.partitions), respond)

    @staticmethod
    def _fetch_satisfied(response: dict, min_bytes: int) -> bool:
        """An answer to give now: min_bytes of records, or a partition to report at once."""
        readable = 0
        for resp in response.values():
            if resp.error is not Errors.NONE or resp.diverging_epoch is not None or resp.switch_to_push:
                return True
            readable += len(resp.records)
        return readable >= min_bytes

    def handle_fetch(self, request: FetchRequest, respond) -> None:
        if request.session_id != INVALID_SESSION_ID or request.session_epoch != FINAL_EPOCH:
            self._handle_session_fetch(request, respond)
            return
        responses = self.read_partitions(request)
        readable = 0
        for resp in responses.values():
            # A switch to push replication is answered at once: the leader pushes from now on.
            if resp.error is not Errors.NONE or resp.diverging_epoch is not None or resp.switch_to_push:
                respond(responses)
                return
            readable += len(resp.records)
        if request.max_wait_ms <= 0 or not request.partitions or readable >= request.min_bytes:
            respond(responses)
            return
        op = DelayedFetch(self, request, respond)
        self.fetch_purgatory.try_complete_else_watch(op, list(request.partitions))

    # -- offsets -------------------------------------------------------------------------------

    def handle_list_offsets(self, request: ListOffsetsRequest) -> dict[TopicPartition, ListOffsetsPartitionResponse]:
        out = {}
        named: set[TopicPartition] = set()
        duplicates: set[TopicPartition] = set()
        for tp, _timestamp, _epoch in request.partitions:
            if tp in named:
                duplicates.add(tp)
            named.add(tp)
        for tp, timestamp, current_epoch in request.partitions:
            if tp in duplicates:
                # Kafka answers every partition named twice with INVALID_REQUEST, once.
                out[tp] = ListOffsetsPartitionResponse(error=Errors.INVALID_REQUEST)
                continue
            partition = self.partitions.get(tp)
            if partition is None:
                out[tp] = ListOffsetsPartitionResponse(error=Errors.UNKNOWN_TOPIC_OR_PART)
                continue
            error, ts, offset, epoch = partition.list_offset(timestamp, current_epoch, request.replica_id,
                                                              request.isolation_level)
            out[tp] = ListOffsetsPartitionResponse(error=error, timestamp=ts, offset=offset, leader_epoch=epoch)
        return out

    def handle_offsets_for_leader_epoch(self, request: OffsetsForLeaderEpochRequest) -> dict[TopicPartition, EpochEndOffset]:
        out = {}
        for tp, req in request.partitions.items():
            partition = self.partitions.get(tp)
            if partition is None:
                out[tp] = EpochEndOffset(error=Errors.UNKNOWN_TOPIC_OR_PART)
            else:
                out[tp] = partition.last_offset_for_leader_epoch(req.current_leader_epoch, req.leader_epoch)
        return out

    # -- transaction markers -------------------------------------------------------------------

    def handle_write_txn_markers(self, request, respond) -> None:
        """WriteTxnMarkers from the transaction coordinator (`txn_coordinator.WriteTxnMarkersRequest`):
        append a COMMIT or ABORT marker to each listed partition this broker leads and answer
        per partition (`ProducePartitionResponse`) once the high watermark covers it (acks=all)."""
        from replication.records import ControlType, encode_control_batch

        control = ControlType.COMMIT if request.commit else ControlType.ABORT
        marker = encode_control_batch(control, timestamp=int(time.time() * 1000),
                                      producer_id=request.producer_id,
                                      producer_epoch=request.producer_epoch,
                                      coordinator_epoch=request.coordinator_epoch)
        results: dict[TopicPartition, ProducePartitionResponse] = {}
        pending: dict[TopicPartition, int] = {}
        for tp in request.partitions:
            partition = self.partitions.get(tp)
            if partition is None:
                results[tp] = ProducePartitionResponse(error=Errors.UNKNOWN_TOPIC_OR_PART)
                continue
            info, error = self._append_to_leader(partition, marker, -1, Errors.KAFKA_STORAGE_ERROR)
            if error is not None:
                results[tp] = error
                continue
            results[tp] = ProducePartitionResponse(base_offset=info.first_offset,
                                                   log_start_offset=partition.log.log_start_offset)
            pending[tp] = info.last_offset + 1
            self.complete_delayed(tp)
        if not pending:
            respond(results)
            return
        op = DelayedProduce(self, request.timeout_ms, pending, results, respond)
        self.produce_purgatory.try_complete_else_watch(op, list(pending))

    # -- maintenance ---------------------------------------------------------------------------

    def delete_old_segments(self) -> None:
        """Retention by time and size for every log (Kafka's log.retention.check task)."""
        for lg in list(self.logs.values()):
            try:
                lg.delete_old_segments()
            except ReplicationError:
                log.exception("broker %d: retention of %s failed", self.broker_id, lg.dir)
        for partition in list(self.partitions.values()):
            partition.announce_log_start_offset()

    def flush_due_logs(self) -> None:
        """Flush logs whose flush.ms has passed (by default never: the OS decides)."""
        for lg in list(self.logs.values()):
            try:
                lg.maybe_flush()
            except ReplicationError:
                log.exception("broker %d: flushing %s failed", self.broker_id, lg.dir)

    def maybe_shrink_isr(self) -> None:
        for tp, partition in list(self.partitions.items()):
            if partition.is_leader and partition.maybe_shrink_isr():
                self.complete_delayed(tp)

    def shutdown(self, crash: bool = False) -> None:
        self.fetch_sessions.clear()
        self.fetch_purgatory.shutdown()
        self.produce_purgatory.shutdown()
        with self._lock:
            logs = list(self.logs.values())
            self.logs.clear()
            self.partitions.clear()
        for lg in logs:
            try:
                if crash:
                    lg.crash()
                else:
                    lg.close()
            except Exception:
                log.exception("broker %d: closing %s failed", self.broker_id, lg.dir)
