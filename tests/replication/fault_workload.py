"""A seeded fault workload for the embedded cluster, shared by the pull and push tests.

Producers write with acks=all and min.insync.replicas=2 while brokers are stopped, crashed
and restarted at random; a consumer reads committed data all along. `run_fault_workload`
returns what happened; `check_fault_outcome` asserts the replication guarantees:

- every acknowledged record is present exactly once, at its acknowledged offset, on every
  replica in the ISR;
- no consumer read past the high watermark, and nothing it read later disappeared;
- a leader's high watermark never went backwards within its leader epoch.

Crashes respect Kafka's durability premise: a broker is power-cut only while every partition
it is in the ISR of has another ISR member alive (with no fsync per append, a committed
record survives a crash as long as one ISR member holding it lives; rule 30).
"""

from __future__ import annotations

import random
import threading
import time
from dataclasses import dataclass, field

from replication.cluster import LocalCluster
from replication.errors import ClusterError, TransportError
from replication.protocol import Errors
from replication.records import encode_batch

TOPIC = "faults"


@dataclass
class FaultOutcome:
    seed: int
    acked: dict[int, dict[int, bytes]] = field(default_factory=dict)  # partition -> offset -> value
    consumed: dict[int, dict[int, bytes]] = field(default_factory=dict)
    consumer_past_hw: list[str] = field(default_factory=list)
    hw_regressions: list[str] = field(default_factory=list)
    actions: list[str] = field(default_factory=list)
    final_logs: dict[int, dict[int, list[tuple[int, bytes]]]] = field(default_factory=dict)
    final_hw: dict[int, int] = field(default_factory=dict)
    final_isr: dict[int, list[int]] = field(default_factory=dict)
    ack_order: dict[int, list[int]] = field(default_factory=dict)  # partition -> offsets as acknowledged
    no_write_after_heal: list[int] = field(default_factory=list)  # partitions never written again
    stuck: list[str] = field(default_factory=list)  # partitions never fully replicated again


def read_log(cluster: LocalCluster, broker: int, partition: int, upto: int) -> list[tuple[int, bytes]]:
    lg = cluster.partition_on(broker, TOPIC, partition).log
    out: list[tuple[int, bytes]] = []
    offset = lg.log_start_offset
    while offset < upto:
        recs = lg.read(offset, 1 << 20, upto).records()
        if not recs:
            break
        out.extend((r.offset, r.value) for r in recs)
        offset = recs[-1].offset + 1
    return out


def _consume_all(cluster: LocalCluster, partitions: int, stop: threading.Event, out: FaultOutcome) -> None:
    """Read every partition from its leader until `stop`, noting reads past the high watermark."""
    positions = dict.fromkeys(range(partitions), 0)
    while not stop.is_set():
        for p in range(partitions):
            try:
                leader = cluster.leader(TOPIC, p)
                if leader < 0:
                    continue
                resp = cluster.fetch(TOPIC, p, positions[p], max_wait_ms=20)
            except (TransportError, ClusterError):
                continue
            if resp.error is not Errors.NONE:
                continue
            for r in resp.records.records():
                if r.offset < positions[p]:
                    continue
                if r.offset >= resp.high_watermark:
                    out.consumer_past_hw.append(f"p{p} offset {r.offset} >= HW {resp.high_watermark}")
                out.consumed[p][r.offset] = r.value
                positions[p] = r.offset + 1


def _watch_high_watermarks(cluster: LocalCluster, partitions: int, stop: threading.Event,
                           out: FaultOutcome) -> None:
    """Note any leader whose high watermark goes down within one leader epoch."""
    hw_seen: dict[tuple[int, int], int] = {}
    while not stop.is_set():
        for p in range(partitions):
            try:
                leader = cluster.leader(TOPIC, p)
                epoch = cluster.leader_epoch(TOPIC, p)
                if leader < 0:
                    continue
                part = cluster.partition_on(leader, TOPIC, p)
            except ClusterError:
                continue
            if part.leader_epoch != epoch or not part.is_leader:
                continue
            hw = part.log.high_watermark
            key = (p, epoch)
            if hw < hw_seen.get(key, -1):
                out.hw_regressions.append(f"p{p} epoch {epoch}: HW {hw_seen[key]} -> {hw}")
            hw_seen[key] = max(hw, hw_seen.get(key, -1))
        stop.wait(0.005)


def _apply_action(cluster: LocalCluster, action: str) -> None:
    """Carry out a fault such as "crash:0", "stop:1+2" or "start:2"."""
    kind, brokers = action.split(":")
    for broker in map(int, brokers.split("+")):
        if kind == "crash":
            cluster.crash_broker(broker)
        elif kind == "stop":
            cluster.stop_broker(broker)
        else:
            cluster.start_broker(broker)


def run_fault_workload(cluster: LocalCluster, seed: int, *, partitions: int = 3, steps: int = 12,
                       acks_per_step: int = 20, step_timeout_s: float = 10.0,
                       pick_action=None, heal_timeout_s: float | None = None,
                       raise_on_stuck: bool = True, replicated_timeout_s: float = 30.0) -> FaultOutcome:
    """Drive producers, a consumer and random broker faults; returns the outcome to check.

    ``pick_action(cluster, rng, partitions)`` chooses each fault ("stop:1", "crash:0",
    "start:2", or several brokers at once: "crash:0+2"); by default any broker is stopped or
    crashed and restarted at random. After the faults every broker is started again (healing);
    a partition without an acknowledged write within ``heal_timeout_s`` after that is noted in
    ``no_write_after_heal``, one not fully replicated within ``replicated_timeout_s`` raises
    (or, with ``raise_on_stuck=False``, is noted in ``stuck``).
    """
    pick_action = pick_action or _pick_action
    rng = random.Random(seed)
    out = FaultOutcome(seed=seed, acked={p: {} for p in range(partitions)},
                       consumed={p: {} for p in range(partitions)},
                       ack_order={p: [] for p in range(partitions)})
    healed = threading.Event()
    acked_after_heal: set[int] = set()
    cluster.create_topic(TOPIC, partitions=partitions, replication_factor=3,
                         config={"min.insync.replicas": "2"})
    stop = threading.Event()
    lock = threading.Lock()
    acked_count = [0]

    def producer(p: int) -> None:
        attempt = 0
        while not stop.is_set():
            attempt += 1
            value = b"p%d-a%d" % (p, attempt)  # unique per attempt: a retry is a new record
            try:
                resp = cluster.produce(TOPIC, p, encode_batch([(None, value, 1000 + attempt)]),
                                       acks=-1, timeout_ms=2000)
            except (TransportError, ClusterError):
                continue
            if resp.error is Errors.NONE:
                with lock:
                    out.acked[p][resp.base_offset] = value
                    out.ack_order[p].append(resp.base_offset)
                    acked_count[0] += 1
                    if healed.is_set():
                        acked_after_heal.add(p)

    threads = [threading.Thread(target=producer, args=(p,), daemon=True) for p in range(partitions)]
    threads += [threading.Thread(target=_consume_all, args=(cluster, partitions, stop, out), daemon=True),
                threading.Thread(target=_watch_high_watermarks, args=(cluster, partitions, stop, out), daemon=True)]
    for t in threads:
        t.start()
    try:
        for _ in range(steps):
            target = acked_count[0] + acks_per_step
            _wait(lambda target=target: acked_count[0] >= target or _all_offline(cluster, partitions), step_timeout_s)
            action = pick_action(cluster, rng, partitions)
            out.actions.append(action)
            _apply_action(cluster, action)
        for b in range(cluster.num_brokers):
            if b not in cluster.live_brokers():
                cluster.start_broker(b)
                out.actions.append(f"start:{b}")
        healed.set()
        target = acked_count[0] + acks_per_step
        _wait(lambda: acked_count[0] >= target, step_timeout_s)
        if heal_timeout_s is not None:
            _wait(lambda: len(acked_after_heal) == partitions, heal_timeout_s)
            with lock:
                out.no_write_after_heal = sorted(set(range(partitions)) - acked_after_heal)
    finally:
        stop.set()
        for t in threads:
            t.join(timeout=10)
    for p in range(partitions):
        if not _wait(lambda p=p: _fully_replicated(cluster, p), replicated_timeout_s):
            what = (f"p{p} did not fully replicate after the faults (seed {seed}, "
                    f"actions {out.actions}, ISR {cluster.isr(TOPIC, p)})")
            if raise_on_stuck:
                raise AssertionError(what)
            out.stuck.append(what)
        out.final_hw[p] = cluster.high_watermark(TOPIC, p)
        out.final_isr[p] = cluster.isr(TOPIC, p)
        out.final_logs[p] = {b: read_log(cluster, b, p, out.final_hw[p]) for b in out.final_isr[p]}
    return out


def check_fault_outcome(out: FaultOutcome) -> None:
    anomalies = find_anomalies(out)
    assert not anomalies, f"{anomalies[:5]} (seed {out.seed}, actions {out.actions})"


#: The anomaly kinds `find_anomalies` reports (Jepsen's names where it has one).
ANOMALY_KINDS = ("lost-write", "duplicate", "inconsistent-offset", "non-monotonic-offsets",
                 "replicas-differ", "no-write-after-heal", "never-fully-replicated", "read-past-hw",
                 "hw-regression", "consumed-then-vanished", "nothing-acknowledged")


def find_anomalies(out: FaultOutcome) -> list[str]:
    """Every anomaly of a run as ``"kind: detail"`` (kinds in `ANOMALY_KINDS`); [] when the
    replication guarantees held."""
    found: list[str] = []
    found += [f"read-past-hw: {x}" for x in out.consumer_past_hw[:5]]
    found += [f"hw-regression: {x}" for x in out.hw_regressions[:5]]
    found += [f"no-write-after-heal: p{p} took no acknowledged write after the brokers healed"
              for p in out.no_write_after_heal]
    found += [f"never-fully-replicated: {x}" for x in out.stuck]
    for p, order in out.ack_order.items():
        # One writer per partition, one request at a time: each acknowledgement is later in the log.
        backwards = [(a, b) for a, b in zip(order, order[1:], strict=False) if b <= a]
        if backwards:
            found.append(f"non-monotonic-offsets: p{p} acknowledged offset {backwards[0][1]} after "
                         f"{backwards[0][0]} ({len(backwards)} times)")
    for p, logs in out.final_logs.items():
        replicas = list(logs.items())
        if not replicas:
            continue
        first_broker, first = replicas[0]
        for broker, other in replicas[1:]:
            if other != first:
                at = next((i for i, (x, y) in enumerate(zip(first, other, strict=False)) if x != y), min(len(first), len(other)))
                found.append(f"replicas-differ: p{p} brokers {first_broker} and {broker} differ below the HW "
                             f"from position {at}")
        log = dict(first)
        where = {}
        for offset, value in first:
            where.setdefault(value, []).append(offset)
        for offset, value in sorted(out.acked[p].items()):
            offsets = where.get(value, [])
            if not offsets:
                found.append(f"lost-write: p{p} acknowledged {value!r}@{offset} is not in the log")
            elif len(offsets) > 1:
                found.append(f"duplicate: p{p} {value!r} at offsets {offsets}")
            elif offsets[0] != offset:
                found.append(f"inconsistent-offset: p{p} {value!r} acknowledged at {offset}, found at {offsets[0]}")
        for offset, value in out.consumed[p].items():
            if log.get(offset) != value:
                found.append(f"consumed-then-vanished: p{p} consumed {value!r}@{offset}, log has "
                             f"{log.get(offset)!r}")
    if sum(len(a) for a in out.acked.values()) == 0:
        found.append("nothing-acknowledged: no write was acknowledged")
    return found


def _pick_action(cluster: LocalCluster, rng: random.Random, partitions: int) -> str:
    live = cluster.live_brokers()
    down = [b for b in range(cluster.num_brokers) if b not in live]
    choices: list[str] = [f"start:{b}" for b in down]
    if len(down) == 0:
        for b in live:
            choices.append(f"stop:{b}")
            if all(len(cluster.isr(TOPIC, p)) >= 2 or b not in cluster.isr(TOPIC, p) for p in range(partitions)):
                choices.append(f"crash:{b}")
    return rng.choice(choices)


def _all_offline(cluster: LocalCluster, partitions: int) -> bool:
    return any(cluster.leader(TOPIC, p) < 0 or len(cluster.isr(TOPIC, p)) < 2 for p in range(partitions))


def _fully_replicated(cluster: LocalCluster, p: int) -> bool:
    leader = cluster.leader(TOPIC, p)
    if leader < 0 or sorted(cluster.isr(TOPIC, p)) != sorted(cluster.replicas(TOPIC, p)):
        return False
    leo = cluster.log_end_offset(leader, TOPIC, p)
    return (cluster.high_watermark(TOPIC, p) == leo
            and all(cluster.log_end_offset(b, TOPIC, p) == leo for b in cluster.isr(TOPIC, p)))


def _wait(predicate, timeout_s: float) -> bool:
    """Wait for a condition; False when the deadline passes (callers decide if that matters)."""
    deadline = time.monotonic() + timeout_s
    delay = 0.001
    idle = threading.Event()  # never set: its wait is the back-off between predicate checks
    while not predicate():
        if time.monotonic() > deadline:
            return False
        idle.wait(delay)
        delay = min(delay * 2, 0.02)
    return True
