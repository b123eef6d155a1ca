"""Runtime tests run once per backend: the embedded cluster and a Kafka-protocol broker."""

from __future__ import annotations

import pytest

from streams.testing.kafka_fixture import skip_if_unfaithful


@pytest.fixture(params=["embedded", "kafka"])
def backend_config(request: pytest.FixtureRequest, tmp_path) -> dict:
    """Client settings of one backend: `bootstrap.servers` plus group timings it honours."""
    if request.param == "embedded":
        from replication import LocalCluster

        if not all(callable(getattr(LocalCluster, m, None)) for m in ("producer", "consumer", "admin")):
            pytest.skip("the embedded cluster's clients are not available yet")
        return {"bootstrap.servers": f"local://{tmp_path}/cluster",
                "consumer.session.timeout.ms": 6000, "consumer.heartbeat.interval.ms": 500}
    broker = request.getfixturevalue("kafka_broker")
    skip_if_unfaithful(request.node, broker)
    # Tansu delays group joins by half of session.timeout.ms
    return {"bootstrap.servers": broker.bootstrap_servers,
            "consumer.session.timeout.ms": 6000, "consumer.heartbeat.interval.ms": 500}
