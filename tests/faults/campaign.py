"""The fault campaign of issue 20, run by tests/faults and by bench/faults.py.

Six kinds of run, each seeded and each returning a `RunReport` whose ``anomalies`` name
what broke (``"kind: detail"``; [] when the guarantees held):

- ``writes``: `fault_workload.run_fault_workload` (acks=all writers recording every
  acknowledged (partition, offset, value), a consumer, a high-watermark monitor) under the
  campaign's nemesis, `campaign_action`: brokers crash, stop and restart, sometimes two at
  once, sometimes the leader of a partition; pull or push replication. The checker is
  `fault_workload.find_anomalies` (lost write, duplicate, inconsistent offsets, non-monotonic
  offsets, replicas whose committed prefixes differ, writes that never succeed again after
  healing, ...).
- ``eos``: a word count with ``exactly_once_v2`` on the embedded cluster runs in a
  subprocess (tests/integration/apps/wordcount_instance.py) that is SIGKILLed at random
  points, several times; a last run finishes the input, and the committed output must hold
  exactly the expected counts (each word's counts strictly increasing, ending at its total).
- ``eos-dsl``: the same kills for issue 16's stateful operators
  (tests/integration/apps/dsl_app.py): each window's final count, suppressed until the window
  closes, committed exactly once; the sessions' and the group counts' final values those of a
  run without a crash (the TopologyTestDriver's, one per input partition). What Kafka's restart
  rule adds is allowed: a replay after a crash may count records the first processing dropped
  as late (a further, larger final; sessions with more records).
- ``eos-dsl-pair``: the same app and checks with two instances on a real Kafka broker (an
  embedded cluster is one process's), one of them killed and started again at a time: tasks
  migrate and restore where they land, standbys take over.
- ``alos-dsl``: the same app and kills under at_least_once, where a crash repeats work but must
  lose none: the source table's store exact, every window's final count and each user's
  session counts at least those of a run without a crash, the group counts' store agreeing
  with their output.
- ``corruption``: the corruption matrix (`CORRUPTION_CASES`) for items 3, 4 and 5: a bit
  flipped in a closed segment of the leader, wrong leader-epoch checkpoints, damaged tails.

A failure message names the seed and the anomalies, so ``bench/faults.py --seed`` replays it.
"""

from __future__ import annotations

import collections
import json
import random
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from confluent_kafka import KafkaError, TopicPartition

from corruption import flip_bit_in_batch
from fault_workload import TOPIC, _wait, find_anomalies, run_fault_workload
from replication.cluster import LocalCluster
from replication.protocol import Errors

REPO = Path(__file__).resolve().parents[2]
INSTANCE_SCRIPT = REPO / "tests" / "integration" / "apps" / "wordcount_instance.py"

#: Broker settings of the nemesis runs (as tests/replication/test_cluster_faults.py).
CONFIG = {
    "replica.fetch.backoff.ms": 20,
    "replica.socket.timeout.ms": 1000,
    "replica.lag.time.max.ms": 2000,
    "replica.fetch.wait.max.ms": 100,
}


@dataclass
class RunReport:
    kind: str  # "writes" | "eos" | "eos-dsl" | "eos-dsl-pair" | "alos-dsl" | "corruption"
    seed: int
    detail: str  # replication mode, kill count or corruption case
    anomalies: list[str] = field(default_factory=list)
    acked: int = 0
    actions: list[str] = field(default_factory=list)
    seconds: float = 0.0

    def describe(self) -> str:
        what = "ok" if not self.anomalies else "; ".join(self.anomalies[:5])
        return f"{self.kind} {self.detail} seed {self.seed}: {what}"


# -- the nemesis ---------------------------------------------------------------------------------


def campaign_action(cluster: LocalCluster, rng: random.Random, partitions: int) -> str:
    """The next fault: restart what is down, or stop / crash one or two brokers, chosen at
    random or as the leader of a partition. A crash (a power cut: unflushed bytes are lost)
    only hits brokers whose partitions keep a live ISR member outside the crashed set, Kafka's
    durability premise (rule 30); a clean stop may hit any."""
    live = cluster.live_brokers()
    down = [b for b in range(cluster.num_brokers) if b not in live]
    if down and (len(live) < 2 or rng.random() < 0.6):
        if len(down) > 1 and rng.random() < 0.3:
            return "start:" + "+".join(map(str, down))
        return f"start:{rng.choice(down)}"
    count = 2 if len(live) == 3 and rng.random() < 0.25 else 1
    if rng.random() < 0.5:
        leader = cluster.leader(TOPIC, rng.randrange(partitions))
        first = leader if leader in live else rng.choice(live)
    else:
        first = rng.choice(live)
    targets = [first] + rng.sample([b for b in live if b != first], count - 1)
    kind = "crash" if rng.random() < 0.5 and _crash_is_safe(cluster, targets, partitions) else "stop"
    return f"{kind}:" + "+".join(map(str, targets))


def _crash_is_safe(cluster: LocalCluster, targets: list[int], partitions: int) -> bool:
    live = set(cluster.live_brokers()) - set(targets)
    return all(live & set(cluster.isr(TOPIC, p)) for p in range(partitions))


def run_writes(seed: int, mode: str, workdir: Path, *, steps: int = 14, partitions: int = 3) -> RunReport:
    """One nemesis run; ``mode`` is "pull" or "push"."""
    started = time.monotonic()
    with LocalCluster(workdir / f"writes-{mode}-{seed}", num_brokers=3, replication=mode, config=CONFIG) as cluster:
        out = run_fault_workload(cluster, seed, partitions=partitions, steps=steps, acks_per_step=20,
                                 step_timeout_s=6.0, pick_action=campaign_action, heal_timeout_s=20.0,
                                 raise_on_stuck=False, replicated_timeout_s=30.0)
    return RunReport("writes", seed, mode, find_anomalies(out), sum(len(a) for a in out.acked.values()),
                     out.actions, time.monotonic() - started)


# -- the exactly-once app, killed ------------------------------------------------------------------


def _wait_file(path: Path, predicate, timeout_s: float, process: subprocess.Popen) -> dict | None:
    deadline = time.monotonic() + timeout_s
    idle = threading.Event()
    while time.monotonic() < deadline:
        if process.poll() is not None:
            return None
        try:
            status = json.loads(path.read_text())
        except (OSError, ValueError):
            status = None
        if status is not None and predicate(status):
            return status
        idle.wait(0.05)
    return None


def _make_lines(n: int, rng: random.Random) -> tuple[list[tuple[bytes, bytes]], dict[str, int]]:
    words = [f"w{i}" for i in range(30)]
    records, expected = [], {}
    for i in range(n):
        line = [rng.choice(words) for _ in range(rng.randint(1, 5))]
        for w in line:
            expected[w] = expected.get(w, 0) + 1
        records.append((str(i).encode(), " ".join(line).encode()))
    return records, expected


def _start_instance(root: Path, instance_args: list[str], servers: str, state_dir: Path, run: str,
                    app_config: dict) -> tuple[subprocess.Popen, Path]:
    """Starts the instance script (`instance_args` pick its app) with its state in `state_dir`,
    its status in root/status-<run>.json (returned) and its log (stderr) in
    root/stderr-<run>.log: a file, not a pipe, which a chatty run (a WARN per late record) would
    fill and then block on."""
    status_file = root / f"status-{run}.json"
    with open(root / f"stderr-{run}.log", "wb") as log_file:  # the child keeps its own descriptor
        process = subprocess.Popen(
            [sys.executable, str(INSTANCE_SCRIPT), *instance_args, "--bootstrap-servers", servers,
             "--state-dir", str(state_dir), "--status-file", str(status_file), "--config", json.dumps(app_config)],
            cwd=REPO, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=log_file)
    return process, status_file


def _stderr_tail(root: Path, run: str) -> str:
    """The end of run `run`'s log (`_start_instance`)."""
    try:
        return (root / f"stderr-{run}.log").read_bytes()[-300:].decode(errors="replace")
    except OSError:
        return ""


def _kill_at_random_points(root: Path, rng: random.Random, kills: int, instance_args: list[str], servers: str,
                           app_config: dict) -> tuple[list[str], list[str]]:
    """Runs the instance script (`instance_args` pick its app) ``kills`` times on the cluster at
    `servers`, each run SIGKILLed at a random point after it reached RUNNING; (anomalies,
    actions). The runs share one state directory, as one machine's restarts do."""
    anomalies: list[str] = []
    actions: list[str] = []
    idle = threading.Event()
    for kill in range(kills):
        process, status_file = _start_instance(root, instance_args, servers, root / "state", str(kill), app_config)
        try:
            running = _wait_file(status_file, lambda st: st["state"] == "RUNNING", 60, process)
            if running is None:
                anomalies.append(f"app-did-not-start: run {kill} ({_stderr_tail(root, str(kill))})")
                break
            delay = rng.uniform(0.0, 1.0)
            idle.wait(delay)  # a random point of the run is the thing under test
            try:
                processed = json.loads(status_file.read_text()).get("processed")
            except (OSError, ValueError):
                processed = "?"
            actions.append(f"SIGKILL {delay:.2f}s after RUNNING ({processed} processed in this run)")
        finally:
            process.send_signal(signal.SIGKILL)
            process.wait(30)
    return anomalies, actions


def _kill_pair_at_random_points(root: Path, rng: random.Random, kills: int, instance_args: list[str], servers: str,
                                app_config: dict) -> tuple[list[str], list[str]]:
    """Two instances of the instance script's app (`instance_args`), each with its own state
    directory, run together on the broker at `servers` (a real one: an embedded cluster is one
    process's); ``kills`` times one of them, picked at random, is SIGKILLed at a random point and
    started again (its tasks move to the other and back, restoring where they land), the last
    kill ending both: (anomalies, actions)."""
    anomalies: list[str] = []
    actions: list[str] = []
    idle = threading.Event()
    processes: dict[str, subprocess.Popen] = {}
    runs: dict[str, str] = {}  # each instance's current run (`_start_instance`)
    starts: collections.Counter = collections.Counter()

    def start(name: str) -> Path:
        starts[name] += 1
        runs[name] = f"{name}-{starts[name]}"
        processes[name], status_file = _start_instance(root, instance_args, servers, root / f"state-{name}",
                                                       runs[name], app_config)
        return status_file

    def kill(name: str) -> None:
        process = processes.pop(name)
        process.send_signal(signal.SIGKILL)
        process.wait(30)

    try:
        status_files = {name: start(name) for name in ("a", "b")}
        for name, status_file in status_files.items():
            if _wait_file(status_file, lambda st: st["state"] == "RUNNING", 90, processes[name]) is None:
                anomalies.append(f"app-did-not-start: instance {name} ({_stderr_tail(root, runs[name])})")
                return anomalies, actions
        for k in range(kills):
            delay = rng.uniform(0.0, 3.0)
            idle.wait(delay)  # a random point, maybe mid-rebalance or mid-restore: the thing under test
            victim = rng.choice(sorted(processes))
            exited = processes[victim].poll()
            if exited is not None:
                anomalies.append(f"instance-exited: {victim} with {exited} ({_stderr_tail(root, runs[victim])})")
                return anomalies, actions
            try:
                status = json.loads((root / f"status-{runs[victim]}.json").read_text())
                processed = f"{status['state']}, {status.get('processed')} processed"
            except (OSError, ValueError, KeyError):
                processed = "no status yet"
            kill(victim)
            actions.append(f"SIGKILL {victim} {delay:.2f}s later ({processed} in this run)")
            if k < kills - 1:
                start(victim)
    finally:
        for name in list(processes):
            kill(name)
    return anomalies, actions


def run_eos(seed: int, workdir: Path, *, kills: int = 3, lines: int = 20000) -> RunReport:
    """Word count with exactly_once_v2 in a subprocess SIGKILLed ``kills`` times at random
    points; the committed output must count every word exactly."""
    from streams import App
    from streams.backends import for_config

    sys.path.insert(0, str(INSTANCE_SCRIPT.parent))
    from wordcount_instance import STORE, build_topology

    started = time.monotonic()
    rng = random.Random(seed)
    root = workdir / f"eos-{seed}"
    servers = f"local://{root / 'cluster'}"
    records, expected = _make_lines(lines, rng)
    app_config = {"processing.guarantee": "exactly_once_v2", "commit.interval.ms": 50, "replication.factor": 3,
                  "num.stream.threads": 1}
    backend = for_config({"bootstrap.servers": servers})
    try:
        from confluent_kafka.admin import NewTopic

        admin = backend.admin()
        for f in admin.create_topics([NewTopic("lines", 2, 3), NewTopic("counts", 2, 3)]).values():
            f.result(30)
        producer = backend.producer({"enable.idempotence": True})
        for key, value in records:
            producer.produce("lines", key=key, value=value)
        assert producer.flush(30) == 0
    finally:
        backend.close()

    anomalies, actions = _kill_at_random_points(
        root, rng, kills, ["--application-id", "eos-wc", "--input", "lines", "--output", "counts"], servers,
        app_config)
    if not anomalies:
        app = App(build_topology("lines", "counts"),
                  {**app_config, "application.id": "eos-wc", "bootstrap.servers": servers,
                   "state.dir": str(root / "state")})
        app.start()
        try:
            store = app.store(STORE)
            if not _wait(lambda: all(store.get(w) == n for w, n in expected.items()), 90):
                wrong = {w: (store.get(w), n) for w, n in expected.items() if store.get(w) != n}
                anomalies.append(f"wrong-counts: {len(wrong)} words differ, e.g. {sorted(wrong.items())[:3]}")
        finally:
            app.close(timeout=60)
        anomalies += _check_eos_output(servers, expected)
    return RunReport("eos", seed, f"{kills} kills", anomalies, lines, actions, time.monotonic() - started)


def _check_eos_output(servers: str, expected: dict[str, int]) -> list[str]:
    """Committed counts per word strictly increase and end at the expected total."""
    from streams import serdes

    def counts(out: dict[str, list]) -> dict[str, list[int]]:
        seqs: dict[str, list[int]] = {}
        for _partition, key, value in out["counts"]:
            seqs.setdefault(key.decode(), []).append(serdes.INT64.deserialize(value))
        return seqs

    def done(out: dict[str, list]) -> bool:
        seqs = counts(out)
        return all(seqs.get(w, [0])[-1] == n for w, n in expected.items())

    seqs = counts(_read_committed(servers, ("counts",), 2, done, 60))
    found: list[str] = []
    for word, n in sorted(expected.items()):
        seq = seqs.get(word, [])
        if seq != sorted(set(seq)):
            repeated = [c for i, c in enumerate(seq) if i and c <= seq[i - 1]]
            found.append(f"duplicate-output: {word} counts not increasing (e.g. {repeated[:3]})")
        if not seq or seq[-1] != n:
            found.append(f"wrong-final-count: {word} ends at {seq[-1] if seq else None}, expected {n}")
    return found


def _dsl_app():
    """tests/integration/apps/dsl_app.py, the app the DSL runs kill."""
    if str(INSTANCE_SCRIPT.parent) not in sys.path:
        sys.path.insert(0, str(INSTANCE_SCRIPT.parent))
    import dsl_app
    return dsl_app


def _kill_dsl_app(name: str, seed: int, workdir: Path, app_config: dict, kills: int, servers: str | None = None,
                  **sizes: int) -> tuple[Path, str, dict, list[str], list[str]]:
    """Writes tests/integration/apps/dsl_app.py's seeded input (`sizes`: make_inputs' record
    counts) to a new embedded cluster and runs the app with `app_config` in a subprocess
    SIGKILLed ``kills`` times at random points (application id `name`); or, given the `servers`
    of a real broker, to it, with two instances (`_kill_pair_at_random_points`): (root, servers,
    inputs, anomalies, actions)."""
    from streams.backends import for_config

    dsl_app = _dsl_app()
    rng = random.Random(seed)
    root = workdir / f"{name}-{seed}"
    pair = servers is not None
    if servers is None:
        servers = f"local://{root / 'cluster'}"
    root.mkdir(parents=True, exist_ok=True)
    inputs = dsl_app.make_inputs(rng, **sizes)
    backend = for_config({"bootstrap.servers": servers})
    try:
        from confluent_kafka.admin import NewTopic

        admin = backend.admin()
        topics = [NewTopic(t, dsl_app.PARTITIONS, app_config["replication.factor"])
                  for t in dsl_app.INPUTS + dsl_app.OUTPUTS + dsl_app.FEEDS]
        for f in admin.create_topics(topics).values():
            f.result(30)
        producer = backend.producer({"enable.idempotence": True})
        for topic, rows in inputs.items():
            for partition, key, value, timestamp in rows:
                producer.produce(topic, key=key, value=value, partition=partition, timestamp=timestamp)
        assert producer.flush(30) == 0
    finally:
        backend.close()
    killer = _kill_pair_at_random_points if pair else _kill_at_random_points
    anomalies, actions = killer(root, rng, kills, ["--topology", "dsl", "--application-id", name], servers, app_config)
    return root, servers, inputs, anomalies, actions


def _wait_for_store(app, store_name: str, expected: dict, timeout_s: float) -> list[str]:
    """Waits until the app's store `store_name` answers `expected` (key -> value, None: absent)
    for every key of it; the anomaly when it does not within `timeout_s` ([] when it does). The
    output may be complete before the store is: the last run's tasks may still be restoring."""
    from state.errors import InvalidStateStoreError

    def answers() -> dict | None:  # None: not queryable (yet)
        try:
            store = app.store(store_name)
            return {key: store.get(key) for key in expected}
        except InvalidStateStoreError:
            return None

    if _wait(lambda: answers() == expected, timeout_s):
        return []
    answered = answers()
    if answered is None:
        return [f"store-not-queryable: {store_name} after {timeout_s:.0f} s"]
    wrong = sorted((k, v, expected[k]) for k, v in answered.items() if v != expected[k])
    return [f"wrong-store: {len(wrong)} keys of {store_name} differ, e.g. "
            + "; ".join(f"{k}: {v} instead of {want}" for k, v, want in wrong[:3])]


def run_eos_dsl(seed: int, workdir: Path, *, kills: int = 3, kafka: str | None = None) -> RunReport:
    """Issue 16's stateful operators (tests/integration/apps/dsl_app.py: window counts suppressed
    until their windows close, session counts, a table grouped and counted through a repartition
    topic) with exactly_once_v2 in a subprocess SIGKILLed ``kills`` times at random points; or,
    on the real Kafka broker at `kafka`, in two subprocesses with a standby replica each, one of
    them SIGKILLed and started again each time (tasks migrate and restore, standbys take over, a
    dead instance's open transaction holds the restores back until the broker aborts it). A last
    run finishes the input. The committed output must be what the operators make
    of the input without a crash: each window's final count exactly once (none lost, none
    repeated), the sessions' final values and tombstones, each group's final count (in its store
    too), and the global table the app feeds holding each user's last page; beyond that only
    what a replay counting late records makes (`_compare_dsl_output`)."""
    from streams import App, serdes

    dsl_app = _dsl_app()
    started = time.monotonic()
    kind = "eos-dsl" if kafka is None else "eos-dsl-pair"
    app_config = {"processing.guarantee": "exactly_once_v2", "commit.interval.ms": 50, "replication.factor": 3,
                  "num.stream.threads": 1}
    if kafka is not None:  # one broker; a killed member leaves the group in seconds, not Kafka's default 45
        app_config.update({"replication.factor": 1, "num.standby.replicas": 1, "consumer.session.timeout.ms": 6000,
                           "consumer.heartbeat.interval.ms": 500})
    # the pair processes eos-dsl's input in about a second once both have joined: five times
    # that keeps it busy across the first kills
    sizes = {} if kafka is None else {"events": 30_000, "updates": 15_000}
    root, servers, inputs, anomalies, actions = _kill_dsl_app(kind, seed, workdir, app_config, kills, kafka, **sizes)
    records = sum(len(rows) for rows in inputs.values())
    if anomalies:
        return RunReport(kind, seed, f"{kills} kills", anomalies, records, actions, time.monotonic() - started)
    expected = dsl_app.expected_events_output(inputs[dsl_app.EVENTS])
    finals = collections.Counter((key, value) for _p, key, value in expected[dsl_app.FINALS])
    sessions = dsl_app.final_table(expected[dsl_app.SESSIONS])
    counts = dsl_app.expected_group_counts(inputs[dsl_app.UPDATES])
    groups = {group.encode(): serdes.INT64.serialize(n) for group, n in counts.items()}  # as the output holds them

    def complete(out: dict[str, list]) -> bool:
        return not _compare_dsl_output(out, finals, sessions, groups, inputs[dsl_app.EVENTS])

    app = App(dsl_app.build_topology(), {**app_config, "application.id": kind, "bootstrap.servers": servers,
                                         "state.dir": str(root / ("state" if kafka is None else "state-a"))})
    app.start()
    try:
        out = _read_committed(servers, dsl_app.OUTPUTS, dsl_app.PARTITIONS, complete, 120)
        anomalies += _wait_for_store(app, dsl_app.GROUP_COUNTS, counts, 90)
        anomalies += _wait_for_store(app, dsl_app.LAST_PAGES, dsl_app.expected_last_pages(inputs[dsl_app.EVENTS]), 90)
    finally:
        app.close(timeout=60)
    anomalies += _compare_dsl_output(out, finals, sessions, groups, inputs[dsl_app.EVENTS])
    return RunReport(kind, seed, f"{kills} kills", anomalies, records, actions, time.monotonic() - started)


def run_alos_dsl(seed: int, workdir: Path, *, kills: int = 3) -> RunReport:
    """`run_eos_dsl`'s app and kills under at_least_once (commits every 100 ms, so checkpoints
    and the restore from them are what a restart meets). A record processed after the last
    commit is processed again after a crash, so exact results are not the guarantee; what is
    checked is that nothing is lost:

    - the source table's store (``users``) holds each user's last update exactly (an update
      applied twice leaves the same table), and so does the global table the app feeds
      (``last-pages``: each user's last page);
    - every window has a final result at least its count without a crash (a record counted
      twice raises it; a record dropped as late in a run without a crash may be taken after a
      restart, whose operators observe stream time afresh as Kafka's do, and then a window can
      also get a further, smaller result: the window store has dropped it);
    - each user's sessions count at least the records they count without a crash;
    - once the app has closed cleanly, the group counts' store (its changelog) holds what their
      output last said (their values themselves are not checked: a repartition record processed
      twice adds or subtracts once more)."""
    from streams import App, serdes

    dsl_app = _dsl_app()
    started = time.monotonic()
    app_config = {"processing.guarantee": "at_least_once", "commit.interval.ms": 100, "replication.factor": 3,
                  "num.stream.threads": 1}
    # ten times eos-dsl's input: at least once runs it in about as long as exactly once does
    # the smaller one (~3 s), so that the kills land while it is being processed
    root, servers, inputs, anomalies, actions = _kill_dsl_app("alos-dsl", seed, workdir, app_config, kills,
                                                              events=60_000, updates=30_000)
    records = sum(len(rows) for rows in inputs.values())
    if anomalies:
        return RunReport("alos-dsl", seed, f"{kills} kills", anomalies, records, actions, time.monotonic() - started)
    expected = dsl_app.expected_events_output(inputs[dsl_app.EVENTS])
    finals = {key: serdes.INT64.deserialize(value) for _p, key, value in expected[dsl_app.FINALS]}
    session_sums = dsl_app.counts_per_user(dsl_app.final_table(expected[dsl_app.SESSIONS]))
    table = dsl_app.final_users(inputs[dsl_app.UPDATES])
    users = {user.decode(): table[user].decode() if user in table else None  # None: deleted
             for _p, user, _g, _t in inputs[dsl_app.UPDATES]}

    def best_finals(out: dict[str, list]) -> dict[bytes, int]:
        best: dict[bytes, int] = {}
        for _p, key, value in out[dsl_app.FINALS]:
            best[key] = max(best.get(key, 0), serdes.INT64.deserialize(value))
        return best

    def complete(out: dict[str, list]) -> bool:
        best = best_finals(out)
        sums = dsl_app.counts_per_user(dsl_app.final_table(out[dsl_app.SESSIONS]))
        return (all(best.get(k, 0) >= n for k, n in finals.items())
                and all(sums.get(u, 0) >= n for u, n in session_sums.items()))

    app = App(dsl_app.build_topology(), {**app_config, "application.id": "alos-dsl", "bootstrap.servers": servers,
                                         "state.dir": str(root / "state")})
    app.start()
    try:
        out = _read_committed(servers, dsl_app.OUTPUTS, dsl_app.PARTITIONS, complete, 120)
        anomalies += _wait_for_store(app, "users", users, 90)
        anomalies += _wait_for_store(app, dsl_app.LAST_PAGES, dsl_app.expected_last_pages(inputs[dsl_app.EVENTS]), 90)
    finally:
        app.close(timeout=60)  # a clean close flushes the caches: every count written down is sent
    # the group counts' store as its changelog holds it, and their output, each read to its end
    changelog = f"alos-dsl-{dsl_app.GROUP_COUNTS}-changelog"
    ends = _read_committed(servers, (changelog, dsl_app.GROUP_COUNTS), dsl_app.PARTITIONS, None, 60)
    stored, sent = dsl_app.final_table(ends[changelog]), dsl_app.final_table(ends[dsl_app.GROUP_COUNTS])
    differ = sorted(g for g in set(stored) | set(sent) if stored.get(g) != sent.get(g))
    if differ:
        anomalies.append(f"group-counts-disagree: {len(differ)} groups' last output is not their stored count, e.g. "
                         + "; ".join(f"{g.decode()}: {dsl_app.describe_value(stored.get(g))} stored, "
                                     f"{dsl_app.describe_value(sent.get(g))} sent" for g in differ[:3]))
    best = best_finals(out)
    low = sorted((k, best.get(k), n) for k, n in finals.items() if best.get(k, 0) < n)
    if low:
        anomalies.append(f"lost-final: {len(low)} windows have no final result as high as their count, e.g. "
                         + "; ".join(f"{dsl_app.describe_key(dsl_app.FINALS, k)}: {got} below {n}"
                                     for k, got, n in low[:3]))
    sums = dsl_app.counts_per_user(dsl_app.final_table(out[dsl_app.SESSIONS]))
    short = sorted((u, sums.get(u, 0), n) for u, n in session_sums.items() if sums.get(u, 0) < n)
    if short:
        anomalies.append(f"lost-session-records: {len(short)} users' sessions count fewer records, e.g. "
                         + "; ".join(f"{u}: {got} below {n}" for u, got, n in short[:3]))
    return RunReport("alos-dsl", seed, f"{kills} kills", anomalies, records, actions, time.monotonic() - started)


def _read_committed(servers: str, topics: tuple[str, ...], partitions: int, done, timeout_s: float) -> dict[str, list]:
    """The committed records of `topics` from their start, (partition, key, value) each in its
    partition's order, read until `done(records)` or `timeout_s`; `done` None: until every
    partition's end (its last stable offset when the read starts)."""
    from streams.backends import for_config

    backend = for_config({"bootstrap.servers": servers})
    out: dict[str, list] = {t: [] for t in topics}
    try:
        consumer = backend.consumer({"group.id": "eos-check", "isolation.level": "read_committed",
                                     "enable.auto.commit": False})
        assigned = [TopicPartition(t, p, 0) for t in topics for p in range(partitions)]
        consumer.assign(assigned)
        if done is None:
            ends = {(tp.topic, tp.partition): consumer.get_watermark_offsets(tp, timeout=10)[1] for tp in assigned}
            read = {tp: 0 for tp in ends}

            def done(_out: dict[str, list]) -> bool:
                return all(read[tp] >= end for tp, end in ends.items())
        else:
            read = {}
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline and not done(out):
            for m in consumer.consume(2000, 0.2):
                if m.error() is None:
                    out[m.topic()].append((m.partition(), m.key(), m.value()))
                    read[(m.topic(), m.partition())] = m.offset() + 1
        consumer.close()
    finally:
        backend.close()
    return out


def _compare_dsl_output(out: dict[str, list], finals: collections.Counter, sessions: dict, groups: dict,
                        events: list) -> list[str]:
    """What differs between the committed output `out` and a run without a crash (`finals`,
    `sessions`, `groups`), beyond what Kafka's restart rule allows (dsl_app.records_per_user):
    a window's further, larger final results up to its records' count, and a user's sessions
    holding more records, up to the user's count, than without a crash."""
    from streams import serdes

    dsl_app = _dsl_app()

    def results(pairs) -> str:
        return "; ".join(f"{dsl_app.describe_key(dsl_app.FINALS, k)}={dsl_app.describe_value(v)}" for k, v in pairs)

    found: list[str] = []
    window_serde = serdes.time_windowed(dsl_app.S, dsl_app.WINDOW_MS)
    in_window = dsl_app.records_per_window(events)
    wanted = {key: value for key, value in finals}
    got: dict[bytes, list] = collections.defaultdict(list)
    for _p, key, value in out[dsl_app.FINALS]:
        got[key].append(value)
    repeated, missing, extra = [], [], []
    for key in sorted(set(got) | set(wanted)):
        values, want = got.get(key, []), wanted.get(key)
        if values == [want]:
            continue
        if want is not None and values:
            windowed = window_serde.deserialize(key)
            counts = [dsl_app.I64.deserialize(v) for v in values]
            most = in_window[(windowed.key.encode(), windowed.window.start)]
            if (dsl_app.I64.deserialize(want) <= counts[0] and counts[-1] <= most
                    and all(a < b for a, b in zip(counts, counts[1:]))):
                continue  # records dropped as late, counted by a replay after a crash
        if len(values) > 1:
            repeated.append(key)
        if want is not None and want not in values:
            missing.append((key, want))
        extra += [(key, v) for v in values if v != want]
    if repeated:
        shown = ", ".join(dsl_app.describe_key(dsl_app.FINALS, k) for k in repeated[:3])
        found.append(f"duplicate-final: {len(repeated)} windows have more than one final result, e.g. {shown}")
    if missing or extra:
        found.append(f"wrong-finals: {len(missing)} expected results missing (e.g. {results(missing[:2])}), "
                     f"{len(extra)} unexpected (e.g. {results(extra[:2])})")
    got_sessions = dsl_app.final_table(out[dsl_app.SESSIONS])
    # a user's sessions holding more records than without a crash, and no more than it has:
    # records dropped as late, counted by a replay; their sessions are not compared
    in_user = dsl_app.records_per_user(events)
    want_sums = dsl_app.counts_per_user(sessions)
    replayed = {user for user, n in dsl_app.counts_per_user(got_sessions).items()
                if want_sums.get(user, 0) < n <= in_user[user]}
    user_of = _session_users(got_sessions, sessions)
    for topic, got_table, want in (
            (dsl_app.SESSIONS, {k: v for k, v in got_sessions.items() if user_of[k] not in replayed},
             {k: v for k, v in sessions.items() if user_of[k] not in replayed}),
            (dsl_app.GROUP_COUNTS, dsl_app.final_table(out[dsl_app.GROUP_COUNTS]), groups)):
        differ = sorted(k for k in set(got_table) | set(want) if got_table.get(k) != want.get(k))
        if differ:
            shown = [f"{dsl_app.describe_key(topic, k)}: {dsl_app.describe_value(got_table.get(k))} instead of "
                     f"{dsl_app.describe_value(want.get(k))}" for k in differ[:3]]
            found.append(f"wrong-{topic}: {len(differ)} keys end differently, e.g. {'; '.join(shown)}")
    return found


def _session_users(*tables: dict) -> dict[bytes, str]:
    """Each session key of the ``sessions`` tables -> its user."""
    from streams import serdes

    serde = serdes.session_windowed(_dsl_app().S)
    return {key: serde.deserialize(key).key for table in tables for key in table}


# -- the corruption matrix -------------------------------------------------------------------------


def _cluster_with_acked(root: Path, n: int = 20, config: dict | None = None) -> list[bytes]:
    from test_cluster import FAST, batch, wait_replicated

    with LocalCluster(root, num_brokers=3, config=FAST) as cluster:
        cluster.create_topic("t", partitions=1, replication_factor=3,
                             config={"min.insync.replicas": "2", **(config or {})})
        acked = []
        for i in range(n):
            value = b"v%d" % i
            if cluster.produce("t", 0, batch(value), acks=-1).error is Errors.NONE:
                acked.append(value)
        wait_replicated(cluster)
    return acked


def _heals_with_everything(root: Path, acked: list[bytes]) -> list[str]:
    """Start the cluster again: it must start, get a full ISR, keep every acknowledged record on
    every replica, and take a new write."""
    from test_cluster import FAST, batch, records_on

    found: list[str] = []
    try:
        cluster = LocalCluster(root, num_brokers=3, config=FAST)
        cluster.start()
    except Exception as e:  # the anomaly is the failed start itself
        return [f"start-failed: {type(e).__name__}: {e}"]
    try:
        if not _wait(lambda: cluster.leader("t", 0) >= 0 and sorted(cluster.isr("t", 0)) == [0, 1, 2], 30):
            found.append(f"isr-stuck: ISR {cluster.isr('t', 0)} leader {cluster.leader('t', 0)}")
        resp = cluster.produce("t", 0, batch(b"after"), acks=-1, timeout_ms=10_000)
        if resp.error is not Errors.NONE:
            found.append(f"no-write-after-heal: {Errors(resp.error).name}")
        else:
            acked = acked + [b"after"]
        leo = lambda b: cluster.log_end_offset(b, "t", 0)  # noqa: E731
        _wait(lambda: len({leo(b) for b in cluster.live_brokers()}) == 1, 20)
        for b in range(3):
            values = [v for _, v in records_on(cluster, b)]
            missing = [v for v in acked if v not in values]
            if missing:
                found.append(f"lost-write: broker {b} lacks {len(missing)} acknowledged records, e.g. {missing[:2]}")
            if len(values) != len(set(values)):
                found.append(f"duplicate: broker {b} holds a record twice")
    finally:
        cluster.close()
    return found


def _case_flipped_bit(root: Path, rng: random.Random) -> list[str]:
    """Item 3: one bit flipped in a record of a closed segment on the leader."""
    acked = _cluster_with_acked(root, 30, {"segment.bytes": "400"})
    found: list[str] = []
    with LocalCluster(root, num_brokers=3, config=CONFIG) as cluster:
        cluster.wait_until(lambda: cluster.leader("t", 0) >= 0, 20, "a leader")
        log = cluster.partition_on(cluster.leader("t", 0), "t", 0).log
        closed_end = log.segments[-1].base_offset
        bad = rng.randrange(closed_end)
        flip_bit_in_batch(log, bad, bit=rng.randrange(8))
        consumer = cluster.consumer({"group.id": "corrupt", "enable.auto.commit": False})
        consumer.assign([TopicPartition("t", 0, 0)])
        got: list = []
        _wait(lambda: got.extend(consumer.consume(100, 0.1)) or any(m.error() for m in got), 20)
        values = [m.value() for m in got if m.error() is None]
        errors = [m for m in got if m.error() is not None]
        if not errors:
            found.append(f"silent-stall: no error for the corrupt batch at offset {bad} ({len(values)} records)")
        elif errors[0].error().code() != KafkaError._BAD_MSG or errors[0].offset() != bad:
            found.append(f"wrong-error: {errors[0].error()} at offset {errors[0].offset()}, expected _BAD_MSG at {bad}")
        if values != acked[:bad]:
            found.append(f"records-before-withheld: got {len(values)} records before the corrupt batch at {bad}")
        position = consumer.position([TopicPartition("t", 0)])[0].offset
        if errors and position != bad:
            found.append(f"wrong-position: {position}, expected {bad}")
        consumer.close()
    return found


def _case_epoch_checkpoint(root: Path, rng: random.Random, kind: str) -> list[str]:
    """Item 4: a plausible but wrong leader-epoch-checkpoint after a clean shutdown."""
    from replication.epoch import CHECKPOINT_FILE_NAME, EpochEntry, format_epoch_checkpoint
    from test_epoch_checkpoint_load import _cluster_with_history

    acked = _cluster_with_history(root)
    state = json.loads((root / "cluster-metadata.json").read_text())["topics"][0]["partitions"][0]
    damaged = state["isr"] if rng.random() < 0.5 else rng.sample([0, 1, 2], rng.randint(1, 3))
    for b in damaged:
        if kind == "epoch-0-covers-everything":
            bad = [EpochEntry(0, 0)]
        else:
            bad = [EpochEntry(0, 0), EpochEntry(state["leader_epoch"] + rng.randint(1, 99), rng.randint(1, 12))]
        (root / f"broker-{b}" / "t-0" / CHECKPOINT_FILE_NAME).write_text(format_epoch_checkpoint(bad))
    return _heals_with_everything(root, acked)


def _case_damaged_tail(root: Path, rng: random.Random, kind: str) -> list[str]:
    """Item 5: garbage after the last batch of a cleanly closed segment."""
    from test_damaged_tail import _append_to_active_segment

    acked = _cluster_with_acked(root)
    for b in rng.sample([0, 1, 2], rng.randint(1, 3)):
        _append_to_active_segment(root / f"broker-{b}" / "t-0", kind)
    return _heals_with_everything(root, acked)


#: case name -> (issue item, function(root, rng) -> anomalies)
CORRUPTION_CASES = {
    "flipped-bit-closed-segment": (3, _case_flipped_bit),
    "epoch-checkpoint-epoch-0-covers-everything": (
        4, lambda root, rng: _case_epoch_checkpoint(root, rng, "epoch-0-covers-everything")),
    "epoch-checkpoint-future-epoch": (4, lambda root, rng: _case_epoch_checkpoint(root, rng, "future-epoch")),
    **{f"damaged-tail-{kind}": (5, lambda root, rng, kind=kind: _case_damaged_tail(root, rng, kind))
       for kind in ("random-bytes", "zeros", "huge-length", "torn-copy")},
}


def run_corruption(case: str, seed: int, workdir: Path) -> RunReport:
    started = time.monotonic()
    _item, fn = CORRUPTION_CASES[case]
    root = workdir / f"corrupt-{case}-{seed}"
    anomalies = fn(root, random.Random(seed))
    return RunReport("corruption", seed, case, anomalies, 0, [], time.monotonic() - started)


def seeds(base: int, count: int) -> list[int]:
    return [base + i for i in range(count)]


__all__ = ["CONFIG", "CORRUPTION_CASES", "RunReport", "campaign_action", "run_corruption", "run_eos",
           "run_writes", "seeds"]
