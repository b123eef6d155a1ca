"""The client conformance suite: every case runs once per backend kind.

The ``backend`` fixture is parametrized over backend kinds. "kafka" runs on the
session's broker (``streams.testing.kafka_fixture``); the embedded backend joins
by adding its kind to `BACKEND_KINDS` and a branch in `_make_backend`.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, ContextManager

import pytest

from streams.testing.kafka_fixture import skip_if_unfaithful

HERE = Path(__file__).parent
BACKEND_KINDS = ["kafka", "embedded"]


@dataclass
class BackendUnderTest:
    """A backend plus what the suite needs to know about it."""

    kind: str
    backend: Any  # streams.backends.Backend
    description: str
    #: Suspends the broker so requests in flight time out on the client (None: not possible).
    pause: Callable[[], ContextManager[None]] | None = None
    #: Producer settings that make a paused broker show up as request timeouts quickly.
    stall_conf: dict = field(default_factory=dict)
    _clients: list = field(default_factory=list, repr=False)

    @property
    def bootstrap_servers(self) -> str:
        return self.backend.bootstrap_servers

    def producer(self, conf: dict | None = None) -> Any:
        return self.backend.producer(conf or {})

    def consumer(self, conf: dict | None = None) -> Any:
        consumer = self.backend.consumer(conf or {})
        self._clients.append(consumer)
        return consumer

    def admin(self, conf: dict | None = None) -> Any:
        return self.backend.admin(conf or {})

    def close(self) -> None:
        for consumer in self._clients:
            with contextlib.suppress(RuntimeError):  # already closed by the test
                consumer.close()
        self.backend.close()


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if HERE in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.integration)


def _make_backend(kind: str, request: pytest.FixtureRequest) -> BackendUnderTest:
    if kind == "kafka":
        from connectors.kafka import KafkaBackend

        broker = request.getfixturevalue("kafka_broker")
        skip_if_unfaithful(request.node, broker)
        return BackendUnderTest(
            kind="kafka",
            backend=KafkaBackend(broker.bootstrap_servers),
            description=broker.description,
            pause=broker.paused if broker.can_pause else None,
            stall_conf={"request.timeout.ms": 500, "socket.timeout.ms": 1000},
        )
    if kind == "embedded":
        from streams.backends import for_config

        directory = request.getfixturevalue("tmp_path") / "embedded-cluster"
        local = for_config({"bootstrap.servers": f"local://{directory}"})

        @contextlib.contextmanager
        def lose_produce_responses():
            # The brokers append what they get but every answer is lost: the client times out.
            from replication.transport import LinkFaults

            faults = local.cluster.transport.faults
            faults.set(-1, -1, LinkFaults(drop_response_probability=1.0, request_types=frozenset({"ProduceRequest"})))
            try:
                yield
            finally:
                faults.clear()

        return BackendUnderTest(kind="embedded", backend=local, description="embedded LocalCluster (3 brokers)",
                                pause=lose_produce_responses, stall_conf={"request.timeout.ms": 500})
    raise AssertionError(f"unknown backend kind {kind!r}")


@pytest.fixture(params=BACKEND_KINDS)
def backend(request: pytest.FixtureRequest):
    under_test = _make_backend(request.param, request)
    try:
        yield under_test
    finally:
        under_test.close()


@pytest.fixture
def admin(backend: BackendUnderTest) -> Any:
    return backend.admin()
