"""The group coordinator of the embedded cluster: consumer groups and their committed offsets.

A cluster-level service (Kafka runs one per ``__consumer_offsets`` partition leader; here one
object serves every group, and its durable state lives in that topic, so it survives any broker
crash and a full restart). Clients in the process call it directly:

- Membership follows Kafka's JoinGroup/SyncGroup/Heartbeat/LeaveGroup protocol: a rebalance
  (PreparingRebalance) waits for every known member to rejoin, bounded by the largest
  rebalance timeout (``max.poll.interval.ms``); members that do not rejoin are removed. The
  first join of an empty group waits ``group.initial.rebalance.delay.ms`` for others. The
  coordinator computes the assignment (``range``, ``roundrobin`` or ``cooperative-sticky``) from
  the member subscriptions; a member that stops heartbeating for ``session.timeout.ms`` is
  evicted. Under cooperative-sticky (KIP-429) a partition that moves is withheld from its new
  owner until the old owner has revoked it and rejoined: two rounds, no partition owned twice.
- Offsets are written to the compacted topic ``__consumer_offsets`` with acks=all in Kafka's
  key/value format (offset commit key v1, value v3) before they become visible; on first use
  after a start the coordinator rebuilds its cache from that topic. Transactional offset
  commits stay pending until the transaction coordinator completes the transaction.
"""

from __future__ import annotations

import logging
import struct
import threading
import time
import uuid
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping

from replication.errors import ClusterError, ReplicationError
from replication.protocol import (
    Errors,
    FetchPartition,
    FetchRequest,
    IsolationLevel,
    ProduceRequest,
    TopicPartition,
)
from replication.records import MemoryRecords, encode_batch

log = logging.getLogger(__name__)

OFFSETS_TOPIC = "__consumer_offsets"

# Group states (Kafka's names).
EMPTY = "Empty"
PREPARING_REBALANCE = "PreparingRebalance"
COMPLETING_REBALANCE = "CompletingRebalance"
STABLE = "Stable"
DEAD = "Dead"

# Errors the coordinator answers with, beyond the protocol module's (Kafka protocol codes).
ILLEGAL_GENERATION = 22
INCONSISTENT_GROUP_PROTOCOL = 23
UNKNOWN_MEMBER_ID = 25
INVALID_SESSION_TIMEOUT = 26
REBALANCE_IN_PROGRESS = 27
COORDINATOR_NOT_AVAILABLE = 15
INVALID_GROUP_ID = 24
NON_EMPTY_GROUP = 68
FENCED_INSTANCE_ID = 82
GROUP_ID_NOT_FOUND = 69

SUPPORTED_ASSIGNORS = ("range", "roundrobin", "cooperative-sticky")
COOPERATIVE_ASSIGNORS = frozenset({"cooperative-sticky"})

DEFAULTS = {
    "offsets.topic.num.partitions": 5,
    "offsets.topic.replication.factor": 3,
    "offsets.commit.timeout.ms": 10000,
    "group.initial.rebalance.delay.ms": 100,
    "group.min.session.timeout.ms": 1,
    "group.max.session.timeout.ms": 1800000,
}

_KEY_V1 = 1
_VALUE_V3 = 3


class GroupCoordinatorError(ReplicationError):
    """The coordinator cannot serve a request (offsets topic unavailable, bad arguments)."""

    def __init__(self, message: str, error_code: int = COORDINATOR_NOT_AVAILABLE) -> None:
        super().__init__(message)
        self.error_code = error_code


@dataclass(frozen=True)
class OffsetAndMetadata:
    offset: int
    metadata: str | None = None
    leader_epoch: int = -1
    commit_timestamp: int = -1


@dataclass
class JoinResult:
    error: int
    generation: int = -1
    member_id: str = ""
    leader_id: str = ""
    protocol: str | None = None
    members: list[str] = field(default_factory=list)


@dataclass
class MemberInfo:
    """What describe_group reports about a member."""

    member_id: str
    client_id: str
    host: str
    assignment: list[TopicPartition]
    group_instance_id: str | None = None


@dataclass
class GroupDescription:
    group_id: str
    state: str
    protocol_type: str
    protocol: str
    members: list[MemberInfo]


class _Member:
    __slots__ = ("member_id", "client_id", "host", "group_instance_id", "session_timeout_ms", "rebalance_timeout_ms",
                 "protocols", "subscription", "owned", "last_heartbeat", "awaiting_join",
                 "join_result", "assignment", "wake", "fenced")

    def __init__(self, member_id: str, client_id: str, host: str, group_instance_id: str | None = None) -> None:
        self.member_id = member_id
        self.client_id = client_id
        self.host = host
        self.group_instance_id = group_instance_id
        self.fenced = False  # replaced by a newer member with its group.instance.id
        self.session_timeout_ms = 10000
        self.rebalance_timeout_ms = 300000
        self.protocols: list[str] = []
        self.subscription: list[str] = []
        self.owned: list[TopicPartition] = []
        self.last_heartbeat = time.monotonic()
        self.awaiting_join = False
        self.join_result: JoinResult | None = None
        self.assignment: list[TopicPartition] = []
        self.wake: threading.Event | None = None


class _Group:
    def __init__(self, group_id: str) -> None:
        self.group_id = group_id
        self.state = EMPTY
        self.generation = 0
        self.protocol_type = "consumer"
        self.protocol: str | None = None
        self.leader_id = ""
        self.members: dict[str, _Member] = {}
        # static members (KIP-345): group.instance.id -> the member id that holds it now
        self.static_members: dict[str, str] = {}
        self.offsets: dict[TopicPartition, OffsetAndMetadata] = {}
        self.rebalance_deadline = 0.0
        self.delay_deadline = 0.0


def _fenced(group: _Group, group_instance_id: str | None, member_id: str) -> bool:
    """Kafka's isStaticMemberFenced: the request names a group.instance.id that the group holds
    under another member id (a newer incarnation of the same static member joined since)."""
    if group_instance_id is None:
        return False
    holder = group.static_members.get(group_instance_id)
    return holder is not None and holder != member_id


def _java_string_hash(s: str) -> int:
    h = 0
    for unit in struct.unpack(f"<{len(s.encode('utf-16-le')) // 2}H", s.encode("utf-16-le")):
        h = (31 * h + unit) & 0xFFFFFFFF
    return h - (1 << 32) if h & 0x80000000 else h


def _put_string(out: bytearray, s: str | None) -> None:
    if s is None:
        out += struct.pack(">h", -1)
        return
    raw = s.encode("utf-8")
    out += struct.pack(">h", len(raw))
    out += raw


def _get_string(buf: bytes, pos: int) -> tuple[str | None, int]:
    (n,) = struct.unpack_from(">h", buf, pos)
    pos += 2
    if n < 0:
        return None, pos
    return buf[pos:pos + n].decode("utf-8"), pos + n


def encode_offset_key(group_id: str, tp: TopicPartition) -> bytes:
    out = bytearray(struct.pack(">h", _KEY_V1))
    _put_string(out, group_id)
    _put_string(out, tp.topic)
    out += struct.pack(">i", tp.partition)
    return bytes(out)


def encode_offset_value(om: OffsetAndMetadata) -> bytes:
    out = bytearray(struct.pack(">hqi", _VALUE_V3, om.offset, om.leader_epoch))
    _put_string(out, om.metadata if om.metadata is not None else "")
    out += struct.pack(">q", om.commit_timestamp)
    return bytes(out)


def decode_offset_record(key: bytes, value: bytes | None) -> tuple[str, TopicPartition, OffsetAndMetadata | None] | None:
    """(group, partition, offset or None for a tombstone); None for other record kinds."""
    (version,) = struct.unpack_from(">h", key, 0)
    if version not in (0, 1):
        return None  # group metadata (v2) and anything newer: not offsets
    group, pos = _get_string(key, 2)
    topic, pos = _get_string(key, pos)
    (partition,) = struct.unpack_from(">i", key, pos)
    tp = TopicPartition(topic, partition)
    if value is None:
        return group, tp, None
    (vversion,) = struct.unpack_from(">h", value, 0)
    if vversion >= 3:
        offset, leader_epoch = struct.unpack_from(">qi", value, 2)
        metadata, pos = _get_string(value, 14)
        (ts,) = struct.unpack_from(">q", value, pos)
    else:
        (offset,) = struct.unpack_from(">q", value, 2)
        leader_epoch = -1
        metadata, pos = _get_string(value, 10)
        (ts,) = struct.unpack_from(">q", value, pos)
    return group, tp, OffsetAndMetadata(offset, metadata or None, leader_epoch, ts)


# -- assignors ---------------------------------------------------------------------------------


def _eligible(members: Mapping[str, list[str]], partitions_of: Mapping[str, int]) -> dict[str, list[TopicPartition]]:
    return {m: [TopicPartition(t, p) for t in sorted(set(topics)) if t in partitions_of
                for p in range(partitions_of[t])]
            for m, topics in members.items()}


def assign_range(subscriptions: Mapping[str, list[str]], partitions_of: Mapping[str, int]) -> dict[str, list[TopicPartition]]:
    """Kafka's RangeAssignor: per topic, contiguous runs to members sorted by id."""
    out: dict[str, list[TopicPartition]] = {m: [] for m in subscriptions}
    topics = sorted({t for ts in subscriptions.values() for t in ts if t in partitions_of})
    for topic in topics:
        members = sorted(m for m, ts in subscriptions.items() if topic in ts)
        n = partitions_of[topic]
        per, extra = divmod(n, len(members))
        start = 0
        for i, m in enumerate(members):
            count = per + (1 if i < extra else 0)
            out[m].extend(TopicPartition(topic, p) for p in range(start, start + count))
            start += count
    return out


def assign_roundrobin(subscriptions: Mapping[str, list[str]], partitions_of: Mapping[str, int]) -> dict[str, list[TopicPartition]]:
    out: dict[str, list[TopicPartition]] = {m: [] for m in subscriptions}
    members = sorted(subscriptions)
    all_parts = sorted({tp for tps in _eligible(subscriptions, partitions_of).values() for tp in tps})
    i = 0
    for tp in all_parts:
        for _ in range(len(members)):
            m = members[i % len(members)]
            i += 1
            if tp.topic in subscriptions[m]:
                out[m].append(tp)
                break
    return out


def assign_sticky(subscriptions: Mapping[str, list[str]], partitions_of: Mapping[str, int],
                  owned: Mapping[str, list[TopicPartition]]) -> dict[str, list[TopicPartition]]:
    """A balanced assignment that keeps as many currently owned partitions as balance allows."""
    eligible = _eligible(subscriptions, partitions_of)
    eligible_sets = {m: set(tps) for m, tps in eligible.items()}
    all_parts = sorted({tp for tps in eligible.values() for tp in tps})
    members = sorted(subscriptions)
    out: dict[str, list[TopicPartition]] = {m: [] for m in members}
    if not members:
        return out
    n, m_count = len(all_parts), len(members)
    min_q, extra = divmod(n, m_count)
    claimed: set[TopicPartition] = set()
    kept_rest: dict[str, list[TopicPartition]] = {}
    for m in members:
        mine = [tp for tp in sorted(set(owned.get(m, ()))) if tp in eligible_sets[m]]
        keep = []
        for tp in mine:
            if tp not in claimed and len(keep) < min_q:
                keep.append(tp)
                claimed.add(tp)
        out[m] = keep
        kept_rest[m] = [tp for tp in mine if tp not in claimed]
    for m in members:  # one more for members that owned more, while the extra slots last
        if extra <= 0:
            break
        for tp in kept_rest[m]:
            if tp not in claimed:
                out[m].append(tp)
                claimed.add(tp)
                extra -= 1
                break
    for tp in all_parts:
        if tp in claimed:
            continue
        candidates = [m for m in members if tp in eligible_sets[m]]
        if not candidates:
            continue
        target = min(candidates, key=lambda m: (len(out[m]), m))
        out[target].append(tp)
        claimed.add(tp)
    return {m: sorted(tps) for m, tps in out.items()}


# -- the coordinator ----------------------------------------------------------------------------


class GroupCoordinator:
    """Consumer groups and committed offsets of one `LocalCluster`."""

    def __init__(self, cluster: Any, config: Mapping[str, Any] | None = None) -> None:
        self.cluster = cluster
        merged = dict(DEFAULTS)
        for key in DEFAULTS:
            if config and key in config:
                merged[key] = config[key]
        self.num_partitions = int(merged["offsets.topic.num.partitions"])
        self.replication_factor = int(merged["offsets.topic.replication.factor"])
        self.commit_timeout_s = int(merged["offsets.commit.timeout.ms"]) / 1000.0
        self.initial_rebalance_delay_s = int(merged["group.initial.rebalance.delay.ms"]) / 1000.0
        self.min_session_timeout_ms = int(merged["group.min.session.timeout.ms"])
        self.max_session_timeout_ms = int(merged["group.max.session.timeout.ms"])
        self._lock = threading.RLock()
        self._cond = threading.Condition(self._lock)
        self._groups: dict[str, _Group] = {}
        self._pending_txn: dict[int, dict[str, dict[TopicPartition, OffsetAndMetadata]]] = {}
        self._loaded = False
        self._load_lock = threading.Lock()
        self._write_locks = [threading.Lock() for _ in range(max(1, self.num_partitions))]
        self._stop = threading.Event()
        self._reaper: threading.Thread | None = None

    # -- lifecycle ----------------------------------------------------------------------------

    def start(self) -> None:
        self._stop.clear()
        self._reaper = threading.Thread(target=self._reap_loop, name="group-coordinator-reaper", daemon=True)
        self._reaper.start()

    def close(self) -> None:
        self._stop.set()
        with self._cond:
            self._cond.notify_all()
        if self._reaper is not None:
            self._reaper.join(timeout=5)
        self._reaper = None

    def partition_for(self, group_id: str) -> int:
        """Kafka's ``abs(groupId.hashCode()) % offsets.topic.num.partitions``."""
        h = _java_string_hash(group_id)
        return (h & 0x7FFFFFFF if h == -(1 << 31) else abs(h)) % self.num_partitions

    def _ensure_loaded(self) -> None:
        if self._loaded:
            return
        with self._load_lock:
            if self._loaded:
                return
            controller = self.cluster.controller
            if controller is None:
                raise GroupCoordinatorError("the cluster is not started")
            if OFFSETS_TOPIC in controller.topics:
                self.num_partitions = len(controller.topics[OFFSETS_TOPIC].partitions)
                self._write_locks = [threading.Lock() for _ in range(self.num_partitions)]
                self._load_offsets()
            else:
                rf = max(1, min(self.replication_factor, len(controller.broker_ids)))
                try:
                    controller.create_topic(OFFSETS_TOPIC, self.num_partitions, rf,
                                            {"cleanup.policy": "compact", "segment.bytes": str(100 * 1024 * 1024)},
                                            internal=True)
                except ClusterError:
                    if OFFSETS_TOPIC not in controller.topics:
                        raise
            self._loaded = True

    def _load_offsets(self) -> None:
        """Rebuild the offset cache from ``__consumer_offsets`` (every partition, to its end)."""
        from replication.clients.common import call_leader

        loaded = 0
        for p in range(self.num_partitions):
            tp = TopicPartition(OFFSETS_TOPIC, p)
            self._wait_partition_committed(tp)
            offset = 0
            while True:
                req = lambda leader, epoch, o=offset, tp=tp: FetchRequest(  # noqa: E731
                    -1, -1, 0, 1, 4 << 20, IsolationLevel.HIGH_WATERMARK, {tp: FetchPartition(o, epoch, max_bytes=4 << 20)})
                error, resp = call_leader(self.cluster, tp, req, lambda r, tp=tp: (r[tp].error, r[tp]),
                                          self.commit_timeout_s)
                if error == Errors.OFFSET_OUT_OF_RANGE and resp is not None and offset < resp.log_start_offset:
                    offset = resp.log_start_offset
                    continue
                if error != Errors.NONE:
                    raise GroupCoordinatorError(f"cannot load {tp}: {Errors(error).name}")
                records: MemoryRecords = resp.records
                if not len(records):
                    break
                for batch in records.record_batches():
                    if batch.is_control:
                        continue
                    for record in batch.records():
                        if record.offset < offset or record.key is None:
                            continue
                        decoded = decode_offset_record(record.key, record.value)
                        if decoded is None:
                            continue
                        group_id, part, om = decoded
                        self._apply(group_id, {part: om})
                        loaded += 1
                    offset = max(offset, batch.last_offset + 1)
                if offset >= resp.high_watermark:
                    break
        log.info("group coordinator loaded %d offset records from %s", loaded, OFFSETS_TOPIC)

    def _wait_partition_committed(self, tp: TopicPartition, timeout_s: float = 10.0) -> None:
        # After a restart the new leader's high watermark catches up with its log end once
        # the followers fetched: read only then, or committed offsets would look missing.
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            try:
                leader = self.cluster.leader(tp.topic, tp.partition)
                if leader >= 0:
                    lg = self.cluster.partition_on(leader, tp.topic, tp.partition).log
                    if lg.high_watermark >= lg.log_end_offset:
                        return
            except ClusterError:
                pass
            self._stop.wait(0.01)

    def _apply(self, group_id: str, offsets: Mapping[TopicPartition, OffsetAndMetadata | None]) -> None:
        with self._lock:
            group = self._groups.get(group_id)
            if group is None:
                if all(om is None for om in offsets.values()):
                    return
                group = self._groups[group_id] = _Group(group_id)
            for tp, om in offsets.items():
                if om is None:
                    group.offsets.pop(tp, None)
                else:
                    group.offsets[tp] = om
            if not group.offsets and not group.members and group.state == EMPTY:
                self._groups.pop(group_id, None)

    def _write(self, group_id: str, offsets: Mapping[TopicPartition, OffsetAndMetadata | None]) -> int:
        """Append offset records durably (acks=all) then apply them; returns an error code."""
        from replication.clients.common import call_leader

        if not offsets:
            return Errors.NONE
        p = self.partition_for(group_id)
        tp = TopicPartition(OFFSETS_TOPIC, p)
        now = int(time.time() * 1000)
        records = [(encode_offset_key(group_id, part),
                    encode_offset_value(om) if om is not None else None, now)
                   for part, om in offsets.items()]
        batch = encode_batch(records)
        timeout_ms = int(self.commit_timeout_s * 1000)
        with self._write_locks[p % len(self._write_locks)]:
            error, _ = call_leader(
                self.cluster, tp, lambda leader, epoch: ProduceRequest(-1, timeout_ms, {tp: batch}),
                lambda r: (r[tp].error, r[tp]), self.commit_timeout_s)
            if error != Errors.NONE:
                log.warning("offset commit for group %s failed: %s", group_id, Errors(error).name)
                return COORDINATOR_NOT_AVAILABLE if error == Errors.UNKNOWN_TOPIC_OR_PART else int(error)
            self._apply(group_id, offsets)
        return Errors.NONE

    # -- membership ---------------------------------------------------------------------------

    def _group(self, group_id: str, create: bool) -> _Group | None:
        group = self._groups.get(group_id)
        if group is None and create:
            group = self._groups[group_id] = _Group(group_id)
        return group

    def join_group(self, group_id: str, member_id: str, *, client_id: str = "", host: str = "/127.0.0.1",
                   session_timeout_ms: int = 45000, rebalance_timeout_ms: int = 300000,
                   protocol_type: str = "consumer", protocols: Iterable[str] = ("range",),
                   subscription: Iterable[str] = (), owned: Iterable[TopicPartition] = (),
                   wake: threading.Event | None = None, abort: threading.Event | None = None,
                   group_instance_id: str | None = None) -> JoinResult:
        """JoinGroup: blocks until the rebalance completes (or the member is removed / aborts).

        With `group_instance_id` the member is static (KIP-345): a join without a member id
        under an instance id the group holds replaces that member, whose requests are answered
        FENCED_INSTANCE_ID from then on; in a stable group, with the same protocols and
        subscription, the new member takes over the old one's assignment in the current
        generation without a rebalance (a restart within the session timeout moves nothing)."""
        if not isinstance(group_id, str) or not group_id:
            return JoinResult(INVALID_GROUP_ID)
        if not self.min_session_timeout_ms <= session_timeout_ms <= self.max_session_timeout_ms:
            return JoinResult(INVALID_SESSION_TIMEOUT)
        protocols = list(protocols)
        subscription = sorted(set(subscription))
        self._ensure_loaded()
        with self._cond:
            group = self._group(group_id, create=True)
            if member_id:
                if _fenced(group, group_instance_id, member_id):
                    return JoinResult(FENCED_INSTANCE_ID, member_id=member_id)
                member = group.members.get(member_id)
                if member is None:
                    return JoinResult(UNKNOWN_MEMBER_ID, member_id=member_id)
            else:
                member_id = f"{client_id or 'consumer'}-{uuid.uuid4()}"
                holder = group.static_members.get(group_instance_id) if group_instance_id is not None else None
                if holder is not None:
                    member = self._replace_static_member(group, group.members[holder], member_id, client_id, host)
                    if group.state == STABLE and member.protocols == protocols and member.subscription == subscription:
                        member.session_timeout_ms = session_timeout_ms
                        member.rebalance_timeout_ms = rebalance_timeout_ms
                        member.last_heartbeat = time.monotonic()
                        if wake is not None:
                            member.wake = wake
                        leader = member_id == group.leader_id
                        return JoinResult(Errors.NONE, group.generation, member_id, group.leader_id, group.protocol,
                                          sorted(group.members) if leader else [])
                else:
                    member = _Member(member_id, client_id, host, group_instance_id)
            if group.members and not self._common_protocol(list(group.members.values()) + [member], protocols):
                return JoinResult(INCONSISTENT_GROUP_PROTOCOL, member_id=member_id)
            group.members[member_id] = member
            if group_instance_id is not None:
                group.static_members[group_instance_id] = member_id
            group.protocol_type = protocol_type
            member.session_timeout_ms = session_timeout_ms
            member.rebalance_timeout_ms = rebalance_timeout_ms
            member.protocols = protocols
            member.subscription = subscription
            member.owned = list(owned)
            member.last_heartbeat = time.monotonic()
            member.awaiting_join = True
            member.join_result = None
            if wake is not None:
                member.wake = wake
            if group.state != PREPARING_REBALANCE:
                self._prepare_rebalance(group, f"member {member_id} joined")
            self._maybe_complete_join(group)
            while member.join_result is None:
                if self._stop.is_set():
                    return JoinResult(COORDINATOR_NOT_AVAILABLE, member_id=member_id)
                if group.members.get(member_id) is not member:
                    return JoinResult(FENCED_INSTANCE_ID if member.fenced else UNKNOWN_MEMBER_ID, member_id=member_id)
                if abort is not None and abort.is_set():
                    self._remove_member(group, member_id, "join aborted")
                    return JoinResult(UNKNOWN_MEMBER_ID, member_id=member_id)
                wait = max(0.001, min(group.rebalance_deadline, group.delay_deadline or group.rebalance_deadline)
                           - time.monotonic())
                self._cond.wait(min(wait, 0.05))
                self._maybe_complete_join(group)
            return member.join_result

    def _replace_static_member(self, group: _Group, old: _Member, member_id: str, client_id: str,
                               host: str) -> _Member:
        """A static member's new incarnation under `member_id`, holding what `old` held (its
        place in the group, its assignment, its leadership); `old` is fenced, and a join it
        still waits in answers FENCED_INSTANCE_ID (Kafka's replaceStaticMember)."""
        new = _Member(member_id, client_id, host, old.group_instance_id)
        for attr in ("session_timeout_ms", "rebalance_timeout_ms", "protocols", "subscription", "owned",
                     "assignment", "awaiting_join", "last_heartbeat", "wake"):
            setattr(new, attr, getattr(old, attr))
        old.fenced = True
        del group.members[old.member_id]
        group.members[member_id] = new
        group.static_members[old.group_instance_id] = member_id
        if group.leader_id == old.member_id:
            group.leader_id = member_id
        log.info("group %s: static member %s (%s) replaced by %s", group.group_id, old.member_id,
                 old.group_instance_id, member_id)
        self._cond.notify_all()
        return new

    def _common_protocol(self, members: list[_Member], first: list[str]) -> str | None:
        for name in first:
            if all(name in m.protocols for m in members if m.protocols):
                return name
        return None

    def _prepare_rebalance(self, group: _Group, reason: str) -> None:
        now = time.monotonic()
        log.debug("group %s: preparing rebalance (%s)", group.group_id, reason)
        initial = group.state == EMPTY
        group.state = PREPARING_REBALANCE
        timeout_ms = max((m.rebalance_timeout_ms for m in group.members.values()), default=0)
        group.rebalance_deadline = now + timeout_ms / 1000.0
        group.delay_deadline = now + self.initial_rebalance_delay_s if initial else 0.0
        for m in group.members.values():
            if m.wake is not None:
                m.wake.set()
        self._cond.notify_all()

    def _maybe_complete_join(self, group: _Group) -> None:
        if group.state != PREPARING_REBALANCE:
            return
        now = time.monotonic()
        all_joined = all(m.awaiting_join for m in group.members.values())
        if not ((all_joined and now >= group.delay_deadline) or now >= group.rebalance_deadline):
            return
        for m in [m for m in group.members.values() if not m.awaiting_join]:
            log.info("group %s: member %s did not rejoin in time; removed", group.group_id, m.member_id)
            del group.members[m.member_id]
        if not group.members:
            group.state = EMPTY
            group.generation += 1
            group.protocol = None
            group.leader_id = ""
            self._cond.notify_all()
            return
        members = list(group.members.values())
        first = next(iter(group.members.values())).protocols
        protocol = self._common_protocol(members, first) or (first[0] if first else "range")
        group.generation += 1
        group.protocol = protocol
        if group.leader_id not in group.members:
            group.leader_id = members[0].member_id
        assignment = self._assign(group, protocol)
        member_ids = sorted(group.members)
        for m in members:
            m.assignment = assignment.get(m.member_id, [])
            m.awaiting_join = False
            m.last_heartbeat = now
            m.join_result = JoinResult(Errors.NONE, group.generation, m.member_id, group.leader_id,
                                       protocol, member_ids if m.member_id == group.leader_id else [])
        group.state = STABLE
        log.info("group %s: generation %d with %d members (%s)", group.group_id, group.generation,
                 len(members), protocol)
        self._cond.notify_all()

    def _assign(self, group: _Group, protocol: str) -> dict[str, list[TopicPartition]]:
        subscriptions = {m.member_id: m.subscription for m in group.members.values()}
        controller = self.cluster.controller
        with controller._lock:
            partitions_of = {t: len(meta.partitions) for t, meta in controller.topics.items()}
        if protocol == "cooperative-sticky":
            owned = {m.member_id: m.owned for m in group.members.values()}
            target = assign_sticky(subscriptions, partitions_of, owned)
            # KIP-429: a partition still owned by another member is withheld this round; its
            # owner revokes it and rejoins, and the next round hands it over.
            owner = {tp: mid for mid, tps in owned.items() for tp in tps}
            return {mid: [tp for tp in tps if owner.get(tp, mid) == mid] for mid, tps in target.items()}
        if protocol == "roundrobin":
            return assign_roundrobin(subscriptions, partitions_of)
        return assign_range(subscriptions, partitions_of)

    def sync_group(self, group_id: str, generation: int, member_id: str,
                   group_instance_id: str | None = None) -> tuple[int, list[TopicPartition]]:
        """SyncGroup: the member's assignment of `generation`."""
        with self._cond:
            group = self._groups.get(group_id)
            if group is not None and _fenced(group, group_instance_id, member_id):
                return FENCED_INSTANCE_ID, []
            member = group.members.get(member_id) if group is not None else None
            if member is None:
                return UNKNOWN_MEMBER_ID, []
            if group.state == PREPARING_REBALANCE:
                return REBALANCE_IN_PROGRESS, []
            if generation != group.generation:
                return ILLEGAL_GENERATION, []
            member.last_heartbeat = time.monotonic()
            return Errors.NONE, list(member.assignment)

    def heartbeat(self, group_id: str, member_id: str, generation: int, group_instance_id: str | None = None) -> int:
        with self._cond:
            group = self._groups.get(group_id)
            if group is not None and _fenced(group, group_instance_id, member_id):
                return FENCED_INSTANCE_ID
            member = group.members.get(member_id) if group is not None else None
            if member is None:
                return UNKNOWN_MEMBER_ID
            member.last_heartbeat = time.monotonic()
            if group.state == PREPARING_REBALANCE:
                return REBALANCE_IN_PROGRESS
            if generation != group.generation:
                return ILLEGAL_GENERATION
            return Errors.NONE

    def leave_group(self, group_id: str, member_id: str, group_instance_id: str | None = None) -> int:
        with self._cond:
            group = self._groups.get(group_id)
            if group is not None and _fenced(group, group_instance_id, member_id):
                return FENCED_INSTANCE_ID
            if group is None or member_id not in group.members:
                return UNKNOWN_MEMBER_ID
            self._remove_member(group, member_id, "member left")
            return Errors.NONE

    def _remove_member(self, group: _Group, member_id: str, reason: str) -> None:
        member = group.members.pop(member_id, None)
        if member is None:
            return
        if member.group_instance_id is not None and group.static_members.get(member.group_instance_id) == member_id:
            del group.static_members[member.group_instance_id]
        log.info("group %s: removing member %s (%s)", group.group_id, member_id, reason)
        if group.members:
            if group.state != PREPARING_REBALANCE:
                self._prepare_rebalance(group, reason)
            else:
                self._maybe_complete_join(group)
        else:
            group.state = EMPTY
            group.generation += 1
            group.protocol = None
            group.leader_id = ""
        self._cond.notify_all()

    def _reap_loop(self) -> None:
        while not self._stop.wait(0.02):
            now = time.monotonic()
            with self._cond:
                for group in list(self._groups.values()):
                    for m in list(group.members.values()):
                        if not m.awaiting_join and now - m.last_heartbeat > m.session_timeout_ms / 1000.0:
                            self._remove_member(group, m.member_id, "session timeout")
                    self._maybe_complete_join(group)

    # -- offsets ------------------------------------------------------------------------------

    def commit_offsets(self, group_id: str, offsets: Mapping[TopicPartition, OffsetAndMetadata],
                       member_id: str = "", generation: int = -1,
                       group_instance_id: str | None = None) -> dict[TopicPartition, int]:
        """OffsetCommit: per-partition error codes (all the same here)."""
        if not isinstance(group_id, str) or not group_id:
            return {tp: INVALID_GROUP_ID for tp in offsets}
        self._ensure_loaded()
        with self._cond:
            group = self._groups.get(group_id)
            if group is not None and _fenced(group, group_instance_id, member_id):
                return {tp: FENCED_INSTANCE_ID for tp in offsets}
            if generation >= 0 or member_id:
                member = group.members.get(member_id) if group is not None else None
                if member is None:
                    return {tp: UNKNOWN_MEMBER_ID for tp in offsets}
                if generation != group.generation:
                    return {tp: ILLEGAL_GENERATION for tp in offsets}
                member.last_heartbeat = time.monotonic()
            elif group is not None and group.members:
                # A commit without member and generation (a consumer that only assigns, or
                # an old client) is accepted only while the group is empty, as in Kafka.
                return {tp: UNKNOWN_MEMBER_ID for tp in offsets}
        error = self._write(group_id, dict(offsets))
        return {tp: error for tp in offsets}

    def alter_offsets(self, group_id: str, offsets: Mapping[TopicPartition, OffsetAndMetadata]) -> int:
        """AlterConsumerGroupOffsets: allowed only while the group has no active members."""
        self._ensure_loaded()
        with self._cond:
            group = self._groups.get(group_id)
            if group is not None and group.members:
                return UNKNOWN_MEMBER_ID
        return self._write(group_id, dict(offsets))

    def fetch_offsets(self, group_id: str, partitions: Iterable[TopicPartition] | None = None
                      ) -> dict[TopicPartition, OffsetAndMetadata | None]:
        """OffsetFetch: committed offsets (None where nothing is committed); all when
        `partitions` is None."""
        self._ensure_loaded()
        with self._lock:
            group = self._groups.get(group_id)
            stored = dict(group.offsets) if group is not None else {}
        if partitions is None:
            return dict(sorted(stored.items()))
        return {tp: stored.get(tp) for tp in partitions}

    def delete_offsets(self, group_id: str, partitions: Iterable[TopicPartition]) -> int:
        self._ensure_loaded()
        with self._lock:
            group = self._groups.get(group_id)
            if group is None:
                return GROUP_ID_NOT_FOUND
            present = [tp for tp in partitions if tp in group.offsets]
        return self._write(group_id, {tp: None for tp in present})

    def delete_group(self, group_id: str) -> int:
        """DeleteGroups: NON_EMPTY_GROUP while members are active; tombstones every offset."""
        self._ensure_loaded()
        with self._lock:
            group = self._groups.get(group_id)
            if group is None:
                return GROUP_ID_NOT_FOUND
            if group.members:
                return NON_EMPTY_GROUP
            present = list(group.offsets)
        error = self._write(group_id, {tp: None for tp in present}) if present else Errors.NONE
        if error == Errors.NONE:
            with self._lock:
                group = self._groups.get(group_id)
                if group is not None and not group.members:
                    self._groups.pop(group_id, None)
        return error

    # -- transactional offsets (called by the transaction coordinator) ------------------------

    def txn_offset_commit(self, group_id: str, producer_id: int, producer_epoch: int, offsets: Any,
                          member_id: str = "", generation: int = -1) -> int:
        """TxnOffsetCommit: offsets held until `complete_pending_txn_offsets(producer_id, ...)`;
        returns an error code.

        `offsets`: a mapping of (topic, partition) to an offset, an `OffsetAndMetadata` or an
        (offset, metadata) pair, or a list of objects with topic/partition/offset[/metadata]
        (confluent's TopicPartition). With a member id or generation (the consumer's group
        metadata, KIP-447) they are checked like a consumer's commit: a producer still holding
        the metadata of a generation that rebalanced away gets ILLEGAL_GENERATION or
        UNKNOWN_MEMBER_ID, so a zombie cannot commit offsets of partitions it no longer owns.
        """
        parsed = _parse_offsets(offsets)
        self._ensure_loaded()
        with self._lock:
            if generation >= 0 or member_id:
                group = self._groups.get(group_id)
                member = group.members.get(member_id) if group is not None else None
                if member is None:
                    return UNKNOWN_MEMBER_ID
                if generation != group.generation:
                    return ILLEGAL_GENERATION
            pending = self._pending_txn.setdefault(producer_id, {}).setdefault(group_id, {})
            pending.update(parsed)
        return Errors.NONE

    def pending_txn_offsets(self, producer_id: int) -> dict[str, dict[TopicPartition, OffsetAndMetadata]]:
        """A copy of the offsets a transaction has sent so far, per group (the transaction
        coordinator keeps them in its PREPARE_COMMIT record, so a restart cannot lose them)."""
        with self._lock:
            return {g: dict(o) for g, o in self._pending_txn.get(producer_id, {}).items()}

    def complete_pending_txn_offsets(
            self, producer_id: int, commit: bool,
            offsets: Mapping[str, Mapping[TopicPartition, OffsetAndMetadata]] | None = None) -> None:
        """Make a transaction's offsets visible (commit) or drop them (abort). `offsets`, when
        given, are the ones recorded with the transaction's PREPARE_COMMIT (the in-memory ones
        are gone after a restart). They are dropped only once written: a failed write raises and
        the coordinator's retry finds them again."""
        with self._lock:
            held = self._pending_txn.get(producer_id, {})
            pending = {g: dict(o) for g, o in (offsets if offsets is not None else held).items()}
        if commit:
            for group_id, group_offsets in pending.items():
                error = self._write(group_id, group_offsets)
                if error != Errors.NONE:
                    raise GroupCoordinatorError(
                        f"writing the committed transaction's offsets of group {group_id!r} failed: "
                        f"{Errors(error).name if error in Errors._value2member_map_ else error}", int(error))
        with self._lock:
            self._pending_txn.pop(producer_id, None)

    def has_pending_txn_offsets(self, producer_id: int) -> bool:
        with self._lock:
            return bool(self._pending_txn.get(producer_id))

    # -- describing ---------------------------------------------------------------------------

    def describe_group(self, group_id: str) -> GroupDescription | None:
        self._ensure_loaded()
        with self._lock:
            group = self._groups.get(group_id)
            if group is None:
                return None
            members = [MemberInfo(m.member_id, m.client_id, m.host, list(m.assignment), m.group_instance_id)
                       for m in group.members.values()]
            return GroupDescription(group_id, group.state, group.protocol_type if group.members or group.protocol else "consumer",
                                    group.protocol or "", members)

    def list_groups(self) -> list[GroupDescription]:
        self._ensure_loaded()
        with self._lock:
            ids = sorted(self._groups)
        return [d for d in (self.describe_group(g) for g in ids) if d is not None]


def _parse_offsets(offsets: Any) -> dict[TopicPartition, OffsetAndMetadata]:
    out: dict[TopicPartition, OffsetAndMetadata] = {}
    if isinstance(offsets, Mapping):
        for key, value in offsets.items():
            tp = TopicPartition(key[0], int(key[1])) if not isinstance(key, TopicPartition) else key
            if isinstance(value, OffsetAndMetadata):
                om = value
            elif isinstance(value, tuple):
                om = OffsetAndMetadata(int(value[0]), value[1] if len(value) > 1 else None)
            else:
                om = OffsetAndMetadata(int(value))
            out[tp] = om
        return out
    for item in offsets:
        out[TopicPartition(item.topic, int(item.partition))] = OffsetAndMetadata(
            int(item.offset), getattr(item, "metadata", None), getattr(item, "leader_epoch", None) or -1)
    return out
