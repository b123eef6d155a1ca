"""A real Apache Kafka broker started from Maven Central jars, without Docker.

`local_kafka_broker` fetches the broker's jars once per machine (`streams.testing.maven_jars`),
formats a fresh single-node combined KRaft log directory with ``kafka.tools.StorageTool`` and
runs ``kafka.Kafka`` on free loopback ports, waits until it answers a Metadata request, and
stops it by its process id when the block exits. Settings differ from Kafka's defaults only
where one node or a test's pace needs it: internal topics at replication factor 1, no initial
rebalance delay, a small cleaner buffer and heap, and short cleaner and transaction-abort
check intervals so compaction and ``transaction.timeout.ms`` are observable within a test.
Topics have no time-based retention unless a topic sets its own: tests stamp records with fixed
timestamps, and under the default 7 days the broker's next retention check (every 5 minutes)
deleted records older than that between a test's write and its read.
"""

from __future__ import annotations

import base64
import contextlib
import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Iterator

from streams.errors import StreamsError
from streams.testing.maven_jars import (BROKER_ARTIFACTS, KAFKA_VERSION, JarFetchError, class_path, fetch_jars,
                                      java_problem)

logger = logging.getLogger(__name__)

_READY_TIMEOUT_S = 90.0
_FORMAT_TIMEOUT_S = 120.0
# A controlled shutdown of one node takes a few seconds; past this it is killed.
_STOP_TIMEOUT_S = 30.0
_JVM_OPTIONS = ("-Xmx512m", "-Xms128m", "-XX:+UseG1GC", "-Djava.awt.headless=true")

#: Broker settings beyond the listeners and directories.
BROKER_SETTINGS = {
    "num.partitions": "1",
    "offsets.topic.replication.factor": "1",
    "offsets.topic.num.partitions": "5",
    "transaction.state.log.replication.factor": "1",
    "transaction.state.log.min.isr": "1",
    "transaction.state.log.num.partitions": "5",
    "share.coordinator.state.topic.replication.factor": "1",
    "share.coordinator.state.topic.min.isr": "1",
    "group.initial.rebalance.delay.ms": "0",
    "log.cleaner.dedupe.buffer.size": str(4 * 1024 * 1024),
    "log.cleaner.threads": "1",
    "log.cleaner.backoff.ms": "500",
    "transaction.abort.timed.out.transaction.cleanup.interval.ms": "500",
    "auto.create.topics.enable": "true",
    "log.retention.ms": "-1",  # see the module doc; a topic's own retention.ms still applies
}

# A failed start must show its reason: INFO from the server's life cycle, WARN elsewhere.
_LOG4J2_PROPERTIES = """\
status = error
name = eddy-test-broker
appender.out.type = Console
appender.out.name = STDOUT
appender.out.layout.type = PatternLayout
appender.out.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = WARN
rootLogger.appenderRef.out.ref = STDOUT
logger.server.name = kafka.server.KafkaRaftServer
logger.server.level = INFO
logger.kafka.name = kafka.Kafka$
logger.kafka.level = INFO
"""


class KafkaStartError(StreamsError):
    """The local Kafka broker could not be fetched or started; the message says why."""


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _cluster_id() -> str:
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")


def server_properties(log_dir: Path, port: int, controller_port: int) -> str:
    """The ``server.properties`` text of the single-node combined broker/controller."""
    settings = {
        "process.roles": "broker,controller",
        "node.id": "1",
        "controller.quorum.voters": f"1@127.0.0.1:{controller_port}",
        "listeners": f"PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:{controller_port}",
        "advertised.listeners": f"PLAINTEXT://127.0.0.1:{port}",
        "controller.listener.names": "CONTROLLER",
        "inter.broker.listener.name": "PLAINTEXT",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
        "log.dirs": str(log_dir),
        **BROKER_SETTINGS,
    }
    return "".join(f"{key}={value}\n" for key, value in settings.items())


def _java(jars: Path, log4j: Path, *args: str) -> list[str]:
    return [shutil.which("java") or "java", *_JVM_OPTIONS, f"-Dlog4j2.configurationFile={log4j}",
            "-cp", class_path(jars), *args]


def _dies_with_parent(command: list[str]) -> list[str]:
    """`command` run so that it gets SIGTERM when the thread that starts it ends, also when the
    Python process is killed (a killed benchmark left brokers running that took the CPU and the
    ports of the next run): util-linux's setpriv sets the parent-death signal before it execs
    the command (Linux; elsewhere, or without setpriv, the command as it is). The broker must be
    started from a thread that outlives it (the fixture's and the scripts' main thread)."""
    setpriv = shutil.which("setpriv") if sys.platform.startswith("linux") else None
    return [setpriv, "--pdeathsig", "TERM", "--", *command] if setpriv else command


def _answers_metadata(bootstrap: str, timeout_s: float) -> bool:
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 0})
    try:
        return bool(admin.list_topics(timeout=timeout_s).brokers)
    except Exception:
        return False


def _tail(path: Path, chars: int = 1500) -> str:
    try:
        return path.read_text(errors="replace")[-chars:].strip()
    except OSError:
        return ""


def stop_process(process: subprocess.Popen, timeout_s: float = _STOP_TIMEOUT_S) -> None:
    """SIGTERM (after SIGCONT, a paused JVM cannot act on it), then SIGKILL past ``timeout_s``."""
    if process.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        os.kill(process.pid, signal.SIGCONT)
    process.terminate()
    try:
        process.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        logger.warning("Kafka broker pid %d ignored SIGTERM for %.0fs; killing it", process.pid, timeout_s)
        process.kill()
        process.wait(timeout=timeout_s)


def _wait_ready(process: subprocess.Popen, port: int, log: Path) -> None:
    deadline = time.monotonic() + _READY_TIMEOUT_S
    bootstrap = f"127.0.0.1:{port}"
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise KafkaStartError(f"Kafka exited with code {process.returncode} before it was ready; "
                                  f"log tail: {_tail(log)}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                pass
        except OSError:
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(timeout=0.2)  # not listening yet: block on the process, do not spin
            continue
        if _answers_metadata(bootstrap, timeout_s=min(5.0, max(0.5, deadline - time.monotonic()))):
            return
    raise KafkaStartError(f"Kafka did not answer Metadata within {_READY_TIMEOUT_S:.0f}s; log tail: {_tail(log)}")


@contextlib.contextmanager
def _started(jars: Path, work: Path) -> Iterator[tuple[subprocess.Popen, int]]:
    log4j = work / "log4j2.properties"
    log4j.write_text(_LOG4J2_PROPERTIES)
    port, controller_port = _free_port(), _free_port()
    while controller_port == port:
        controller_port = _free_port()
    data = work / "data"
    shutil.rmtree(data, ignore_errors=True)
    props = work / "server.properties"
    props.write_text(server_properties(data, port, controller_port))
    fmt = subprocess.run(_java(jars, log4j, "kafka.tools.StorageTool", "format", "-t", _cluster_id(),
                               "-c", str(props)),
                         capture_output=True, text=True, timeout=_FORMAT_TIMEOUT_S, stdin=subprocess.DEVNULL)
    if fmt.returncode != 0:
        raise KafkaStartError(f"kafka.tools.StorageTool format failed (exit {fmt.returncode}): "
                              f"{(fmt.stdout + fmt.stderr)[-1500:].strip()}")
    log = work / "server.log"
    with open(log, "wb") as out:
        process = subprocess.Popen(
            _dies_with_parent(_java(jars, log4j, "kafka.Kafka", str(props))),
            stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
            start_new_session=True,  # Ctrl-C in the terminal must not reach it before the fixture stops it
        )
    try:
        _wait_ready(process, port, log)
        yield process, port
    finally:
        stop_process(process)


@contextlib.contextmanager
def local_kafka_broker(work_dir: str | os.PathLike | None = None) -> Iterator[tuple[str, subprocess.Popen]]:
    """Run a real Apache Kafka broker (KRaft, one node) on loopback; yield (bootstrap, process).

    Raises `KafkaStartError` naming the reason when java/mvn are missing, the jars cannot be
    fetched or the broker does not start (the broker's log tail is in the message).
    """
    problem = java_problem()
    if problem is not None:
        raise KafkaStartError(problem)
    try:
        jars = fetch_jars("broker", BROKER_ARTIFACTS)
    except JarFetchError as exc:
        raise KafkaStartError(str(exc)) from exc
    work = Path(work_dir) if work_dir is not None else Path(tempfile.mkdtemp(prefix="eddy-kafka-"))
    work.mkdir(parents=True, exist_ok=True)
    failures = []
    try:
        for _attempt in range(2):  # a probed free port can be taken before the broker binds it
            try:
                with _started(jars, work) as (process, port):
                    logger.info("started Apache Kafka %s pid %d on 127.0.0.1:%d (work dir %s)",
                                KAFKA_VERSION, process.pid, port, work)
                    yield f"127.0.0.1:{port}", process
                    return
            except KafkaStartError as exc:
                failures.append(str(exc))
        raise KafkaStartError("; ".join(failures))
    finally:
        if work_dir is None:
            shutil.rmtree(work, ignore_errors=True)
