"""The cluster controller: topic metadata, replica assignment, leader election and ISR changes.

It plays the part of Kafka's KRaft controller for brokers in one process: it owns the
authoritative partition state (replicas, leader, leader epoch, ISR, partition epoch), persists
it durably in ``<data_dir>/cluster-metadata.json`` so a restarted cluster comes back with the
same topics, epochs and ISR, and pushes every change to the replicas of the partition.

Elections are clean only: a new leader comes from the live members of the ISR. With
``unclean.leader.election.enable`` set, a live out-of-sync replica may be chosen when no ISR
member is alive, trading safety for availability as in Kafka. Every leader change bumps the
leader epoch; every ISR change bumps the partition epoch, which leaders must quote when they
ask for an ISR change (``alter_partition``), so stale requests are rejected.

States reach brokers in the order the controller made them, as Kafka's metadata log orders
them: each change is queued under the controller lock and one thread at a time delivers the
queue. A broker ignores a state older than the partition epoch it holds
(`Partition.is_stale_state`), and a refused AlterPartition sends the requester the current state.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import zlib
from collections import deque
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable

from eddy.config_values import parse_bool
from replication.errors import ClusterError, InvalidTopicError
from replication.names import validate_topic_name
from replication.protocol import TopicPartition

log = logging.getLogger(__name__)

NO_LEADER = -1
METADATA_FILE = "cluster-metadata.json"


@dataclass
class PartitionState:
    replicas: list[int]
    leader: int
    leader_epoch: int
    isr: list[int]
    partition_epoch: int = 0

    def copy(self) -> "PartitionState":
        return PartitionState(list(self.replicas), self.leader, self.leader_epoch, list(self.isr),
                              self.partition_epoch)


@dataclass
class TopicMetadata:
    name: str
    partitions: list[PartitionState]
    config: dict[str, str] = field(default_factory=dict)
    internal: bool = False


# Called for each (broker, partition) whose state changed; the broker applies it.
Listener = Callable[[int, TopicPartition, PartitionState, dict], None]


class Controller:
    """Authoritative partition metadata for one LocalCluster."""

    def __init__(self, data_dir: Path, broker_ids: list[int], *, unclean_leader_election: bool = False) -> None:
        self.data_dir = Path(data_dir)
        self.broker_ids = list(broker_ids)
        self.unclean_leader_election = unclean_leader_election
        self.topics: dict[str, TopicMetadata] = {}
        self.live_brokers: set[int] = set()
        self.broker_epochs: dict[int, int] = {b: 0 for b in broker_ids}
        self._lock = threading.RLock()
        self._listeners: dict[int, Listener] = {}
        # Partition states waiting to reach brokers, in the order they were made (appended
        # under `_lock`). One thread at a time drains it (`_delivery_lock`), so a broker never
        # sees an older state of a partition after a newer one (Kafka's metadata log order).
        self._outbox: deque[tuple[int, TopicPartition, PartitionState, dict]] = deque()
        self._delivery_lock = threading.Lock()
        self._load()

    # -- persistence -------------------------------------------------------------------------

    @property
    def metadata_path(self) -> Path:
        return self.data_dir / METADATA_FILE

    def _load(self) -> None:
        path = self.metadata_path
        if not path.exists():
            return
        try:
            doc = json.loads(path.read_text("utf-8"))
            for t in doc["topics"]:
                parts = [PartitionState(**p) for p in t["partitions"]]
                self.topics[t["name"]] = TopicMetadata(t["name"], parts, dict(t.get("config", {})),
                                                       bool(t.get("internal", False)))
            for b, e in doc.get("broker_epochs", {}).items():
                self.broker_epochs[int(b)] = int(e)
        except (ValueError, KeyError, TypeError) as e:
            raise ClusterError(f"corrupt cluster metadata file {path}: {e}") from e

    def _persist(self) -> None:
        doc = {
            "version": 1,
            "topics": [
                {"name": t.name, "config": t.config, "internal": t.internal,
                 "partitions": [asdict(p) for p in t.partitions]}
                for t in self.topics.values()
            ],
            "broker_epochs": {str(b): e for b, e in self.broker_epochs.items()},
        }
        self.data_dir.mkdir(parents=True, exist_ok=True)
        tmp = self.metadata_path.with_suffix(".json.tmp")
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump(doc, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.metadata_path)
        dir_fd = os.open(self.data_dir, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)

    # -- brokers -----------------------------------------------------------------------------

    def register_listener(self, broker_id: int, listener: Listener) -> None:
        with self._lock:
            self._listeners[broker_id] = listener

    def broker_started(self, broker_id: int) -> int:
        """Mark a broker alive; returns its new broker epoch. Offline partitions it can lead
        (it is in their ISR) get it as leader."""
        with self._lock:
            self._check_broker(broker_id)
            self.broker_epochs[broker_id] = self.broker_epochs.get(broker_id, 0) + 1
            self.live_brokers.add(broker_id)
            changed: list[tuple[TopicPartition, PartitionState]] = []
            for topic in self.topics.values():
                for p, state in enumerate(topic.partitions):
                    if broker_id not in state.replicas:
                        continue
                    if state.leader == NO_LEADER:
                        self._elect(state, unclean=self._unclean_allowed(topic))
                    changed.append((TopicPartition(topic.name, p), state))
            self._persist()
            epoch = self.broker_epochs[broker_id]
            self._enqueue(changed)
        self._deliver()
        return epoch

    def broker_stopped(self, broker_id: int) -> None:
        """Mark a broker gone: it leaves every ISR; partitions it led elect a new leader."""
        with self._lock:
            self.live_brokers.discard(broker_id)
            changed: list[tuple[TopicPartition, PartitionState]] = []
            for topic in self.topics.values():
                for p, state in enumerate(topic.partitions):
                    if broker_id not in state.replicas:
                        continue
                    touched = False
                    if broker_id in state.isr and len(state.isr) > 1:
                        # Kafka keeps the last ISR member so a clean election stays possible later.
                        state.isr.remove(broker_id)
                        state.partition_epoch += 1
                        touched = True
                    if state.leader == broker_id:
                        self._elect(state, exclude=broker_id, unclean=self._unclean_allowed(topic))
                        touched = True
                    if touched:
                        changed.append((TopicPartition(topic.name, p), state))
            self._persist()
            self._enqueue(changed)
        self._deliver()

    def _unclean_allowed(self, topic: TopicMetadata) -> bool:
        """The topic's unclean.leader.election.enable, else the cluster's. A value that is not a
        boolean (the topic's log refuses it) allows no unclean election: that loses no data."""
        value = topic.config.get("unclean.leader.election.enable")
        return self.unclean_leader_election if value is None else parse_bool(value) is True

    def _elect(self, state: PartitionState, exclude: int | None = None, *, unclean: bool = False) -> None:
        candidates = [b for b in state.replicas
                      if b in state.isr and b in self.live_brokers and b != exclude]
        if not candidates and unclean:
            candidates = [b for b in state.replicas if b in self.live_brokers and b != exclude]
            if candidates:
                log.warning("unclean election of broker %d: data not in its log is lost", candidates[0])
                state.isr = [candidates[0]]
        new_leader = candidates[0] if candidates else NO_LEADER
        if new_leader != state.leader:
            state.leader = new_leader
            state.leader_epoch += 1
            state.partition_epoch += 1
            if new_leader != NO_LEADER and new_leader not in state.isr:
                state.isr.append(new_leader)

    def _check_broker(self, broker_id: int) -> None:
        if broker_id not in self.broker_ids:
            raise ClusterError(f"unknown broker {broker_id} (brokers: {self.broker_ids})")

    # -- topics ------------------------------------------------------------------------------

    def create_topic(self, name: str, partitions: int, replication_factor: int,
                     config: dict[str, str] | None = None, internal: bool = False) -> TopicMetadata:
        validate_topic_name(name)
        if partitions < 1:
            raise ClusterError(f"topic {name!r}: number of partitions must be >= 1, got {partitions}")
        if not 1 <= replication_factor <= len(self.broker_ids):
            raise ClusterError(
                f"topic {name!r}: replication factor {replication_factor} must be between 1 and "
                f"the number of brokers ({len(self.broker_ids)})")
        with self._lock:
            if name in self.topics:
                raise ClusterError(f"topic {name!r} already exists")
            start = zlib.crc32(name.encode()) % len(self.broker_ids)
            states = [self._new_partition_state(start, p, replication_factor) for p in range(partitions)]
            topic = TopicMetadata(name, states, dict(config or {}), internal)
            self.topics[name] = topic
            self._persist()
            changed = [(TopicPartition(name, p), s) for p, s in enumerate(states)]
            self._enqueue(changed, extra={"config": topic.config, "new": True})
        self._deliver()
        return topic

    def _new_partition_state(self, start: int, p: int, rf: int) -> PartitionState:
        n = len(self.broker_ids)
        # Kafka-like spread: leaders round-robin, followers shifted so load balances.
        first = (start + p) % n
        shift = 1 + (p // n) % max(1, n - 1)
        replicas = [self.broker_ids[first]]
        for i in range(1, rf):
            replicas.append(self.broker_ids[(first + shift * i) % n] if n > 1 else self.broker_ids[0])
        # Guarantee distinct replicas even when the shift wraps onto itself.
        seen: list[int] = []
        for b in replicas + self.broker_ids:
            if b not in seen:
                seen.append(b)
        replicas = seen[:rf]
        isr = [b for b in replicas if b in self.live_brokers] or list(replicas)
        leader = next((b for b in replicas if b in self.live_brokers), NO_LEADER)
        return PartitionState(replicas, leader, 0, isr, 0)

    def create_partitions(self, name: str, new_total: int) -> None:
        with self._lock:
            topic = self._topic(name)
            current = len(topic.partitions)
            if new_total <= current:
                raise ClusterError(
                    f"topic {name!r} has {current} partitions; new total {new_total} must be larger")
            rf = len(topic.partitions[0].replicas)
            start = zlib.crc32(name.encode()) % len(self.broker_ids)
            added = [self._new_partition_state(start, p, rf) for p in range(current, new_total)]
            topic.partitions.extend(added)
            self._persist()
            changed = [(TopicPartition(name, current + i), s) for i, s in enumerate(added)]
            self._enqueue(changed, extra={"config": topic.config, "new": True})
        self._deliver()

    def delete_topic(self, name: str) -> None:
        with self._lock:
            topic = self._topic(name)
            del self.topics[name]
            self._persist()
            changed = [(TopicPartition(name, p), s) for p, s in enumerate(topic.partitions)]
            self._enqueue(changed, extra={"deleted": True})
        self._deliver()

    def alter_topic_config(self, name: str, config: dict[str, str | None]) -> None:
        with self._lock:
            topic = self._topic(name)
            for k, v in config.items():
                if v is None:
                    topic.config.pop(k, None)
                else:
                    topic.config[k] = str(v)
            elected = []
            if self._unclean_allowed(topic):
                # As Kafka's controller: enabling unclean election brings offline partitions back.
                for p, state in enumerate(topic.partitions):
                    if state.leader == NO_LEADER:
                        self._elect(state, unclean=True)
                        if state.leader != NO_LEADER:
                            elected.append((TopicPartition(name, p), state))
            self._persist()
            changed = [(TopicPartition(name, p), s) for p, s in enumerate(topic.partitions)]
            self._enqueue(changed, extra={"config": dict(topic.config), "config_only": True})
            self._enqueue(elected)
        self._deliver()

    def _topic(self, name: str) -> TopicMetadata:
        topic = self.topics.get(name)
        if topic is None:
            raise InvalidTopicError(f"unknown topic {name!r}")
        return topic

    def partition_state(self, tp: TopicPartition) -> PartitionState | None:
        with self._lock:
            topic = self.topics.get(tp.topic)
            if topic is None or not 0 <= tp.partition < len(topic.partitions):
                return None
            return topic.partitions[tp.partition].copy()

    def partitions_of(self, broker_id: int) -> list[tuple[TopicPartition, PartitionState, dict]]:
        with self._lock:
            return [
                (TopicPartition(t.name, p), s.copy(), dict(t.config))
                for t in self.topics.values()
                for p, s in enumerate(t.partitions)
                if broker_id in s.replicas
            ]

    # -- ISR changes (Kafka's AlterPartition) ------------------------------------------------

    def alter_partition(self, tp: TopicPartition, leader_id: int, leader_epoch: int,
                        partition_epoch: int, new_isr: list[int]) -> PartitionState | None:
        """Apply an ISR change requested by the leader; None if the request is refused.

        A request quoting a stale leader or partition epoch (Kafka's FENCED_LEADER_EPOCH /
        INVALID_UPDATE_VERSION) is refused, and the requester is sent the current state again:
        a leader whose view went stale would otherwise quote the old epoch for ever.
        """
        result = None
        with self._lock:
            topic = self.topics.get(tp.topic)
            if topic is None or tp.partition >= len(topic.partitions):
                return None
            state = topic.partitions[tp.partition]
            isr = [b for b in new_isr if b in state.replicas]
            if (state.leader != leader_id or state.leader_epoch != leader_epoch
                    or state.partition_epoch != partition_epoch):
                log.info("%s: refused AlterPartition from broker %d (leader epoch %d, partition "
                         "epoch %d): the current state is leader %d, leader epoch %d, partition "
                         "epoch %d, ISR %s; sending it to the broker", tp, leader_id, leader_epoch,
                         partition_epoch, state.leader, state.leader_epoch, state.partition_epoch,
                         state.isr)
                self._enqueue([(tp, state)], only=leader_id)
            elif leader_id not in isr:
                return None
            elif any(b not in self.live_brokers for b in isr if b not in state.isr):
                return None  # never add a broker that is down
            else:
                state.isr = isr
                state.partition_epoch += 1
                self._persist()
                result = state.copy()
                self._enqueue([(tp, state)])
        # The leader may hold its partition lock here: it never waits for a delivery another
        # thread is making (that thread may need the same lock); it applies `result` itself.
        self._deliver(wait=False)
        return result

    # -- propagation -------------------------------------------------------------------------

    def _enqueue(self, changed: list[tuple[TopicPartition, PartitionState]], *,
                 extra: dict | None = None, only: int | None = None) -> None:
        """Queue copies of the new states for their live replicas (`only`: for that broker).

        Called with `_lock` held, so the queue order is the order the states were made.
        """
        live = self.live_brokers
        for tp, state in changed:
            topic = self.topics.get(tp.topic)
            info = {"config": dict(topic.config) if topic else {}}
            if extra:
                info.update(extra)
            targets = [b for b in state.replicas if b in live and (only is None or b == only)]
            # Leaders learn first so followers find a leader ready to answer.
            targets.sort(key=lambda b: b != state.leader)
            snapshot = state.copy()
            for b in targets:
                self._outbox.append((b, tp, snapshot, info))

    def _deliver(self, wait: bool = True) -> None:
        """Hand queued states to the brokers' listeners, in queue order, outside `_lock`.

        With `wait`, returns once everything queued before the call is delivered. Without it,
        returns at once if another thread is delivering: that thread delivers what we queued
        (it looks at the queue again after letting go of the delivery lock).
        """
        while True:
            if not self._delivery_lock.acquire(blocking=wait):
                return
            try:
                while True:
                    with self._lock:
                        if not self._outbox:
                            break
                        broker_id, tp, state, info = self._outbox.popleft()
                        listener = self._listeners.get(broker_id)
                    if listener is None:
                        continue
                    try:
                        listener(broker_id, tp, state, info)
                    except Exception:
                        # One broker failing to apply a state must not hold back the others.
                        log.exception("broker %d failed to apply the state of %s: %s",
                                      broker_id, tp, state)
            finally:
                self._delivery_lock.release()
            with self._lock:
                if not self._outbox:
                    return
