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
"""

from __future__ import annotations

import json
import logging
import os
import threading
import zlib
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable

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
        self._notify(changed)
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
        self._notify(changed)

    def _unclean_allowed(self, topic: TopicMetadata) -> bool:
        """The topic's unclean.leader.election.enable, else the cluster's."""
        value = topic.config.get("unclean.leader.election.enable")
        return self.unclean_leader_election if value is None else str(value).lower() == "true"

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
        self._notify(changed, extra={"config": topic.config, "new": True})
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
        self._notify(changed, extra={"config": topic.config, "new": True})

    def delete_topic(self, name: str) -> None:
        with self._lock:
            topic = self._topic(name)
            del self.topics[name]
            self._persist()
            changed = [(TopicPartition(name, p), s) for p, s in enumerate(topic.partitions)]
        self._notify(changed, extra={"deleted": True})

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
        self._notify(changed, extra={"config": dict(topic.config), "config_only": True})
        if elected:
            self._notify(elected)

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
        """Apply an ISR change requested by the leader; None if the request is stale."""
        with self._lock:
            topic = self.topics.get(tp.topic)
            if topic is None or tp.partition >= len(topic.partitions):
                return None
            state = topic.partitions[tp.partition]
            if (state.leader != leader_id or state.leader_epoch != leader_epoch
                    or state.partition_epoch != partition_epoch):
                return None
            isr = [b for b in new_isr if b in state.replicas]
            if leader_id not in isr:
                return None
            if any(b not in self.live_brokers for b in isr if b not in state.isr):
                return None  # never add a broker that is down
            state.isr = isr
            state.partition_epoch += 1
            self._persist()
            result = state.copy()
        self._notify([(tp, state)])
        return result

    # -- propagation -------------------------------------------------------------------------

    def _notify(self, changed: list[tuple[TopicPartition, PartitionState]], *,
                extra: dict | None = None) -> None:
        """Send the new states to the live replicas (applying a known state again is a no-op)."""
        if not changed:
            return
        with self._lock:
            listeners = dict(self._listeners)
            live = set(self.live_brokers)
            updates = []
            for tp, state in changed:
                topic = self.topics.get(tp.topic)
                config = dict(topic.config) if topic else {}
                info = {"config": config}
                if extra:
                    info.update(extra)
                targets = [b for b in state.replicas if b in live]
                # Leaders learn first so followers find a leader ready to answer.
                targets.sort(key=lambda b: b != state.leader)
                updates.append((tp, state.copy(), info, targets))
        for tp, state, info, targets in updates:
            for b in targets:
                listener = listeners.get(b)
                if listener is not None:
                    listener(b, tp, state, info)
