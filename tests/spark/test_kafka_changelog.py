"""eddy_changelog reading a topic of the integration broker (confluent-kafka in the workers)."""

from __future__ import annotations

import collections
import uuid

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from streams import serdes

pytestmark = [pytest.mark.integration]


def test_kafka_topic_batch_and_latest_per_key(spark, kafka_broker):
    servers = kafka_broker.bootstrap_servers
    topic = f"eddy-spark-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": servers})
    admin.create_topics([NewTopic(topic, 2, 1)])[topic].result(30)
    # one record per batch: Tansu's end offsets are right only then (streams.testing.kafka_fixture)
    producer = Producer({"bootstrap.servers": servers, "batch.num.messages": 1, "linger.ms": 0})
    sent = [(f"k{i % 13}", i) for i in range(120)] + [("k5", None)]
    for key, value in sent:
        producer.produce(topic, key=key.encode(), value=None if value is None else serdes.INT64.serialize(value),
                         partition=int(key[1:]) % 2)
        producer.flush(30)
    reader = (spark.read.format("eddy_changelog").option("bootstrap.servers", servers).option("topic", topic)
              .option("key_serde", "STRING").option("value_serde", "INT64"))
    rows = reader.load().collect()
    assert collections.Counter((r["key"], r["value"]) for r in rows) == collections.Counter(sent)
    assert all(r["partition"] == int(r["key"][1:]) % 2 for r in rows)
    for p in (0, 1):
        offsets = [r["offset"] for r in rows if r["partition"] == p]
        assert offsets == list(range(len(offsets)))
    latest = {}
    for key, value in sent:
        latest[key] = value
    table = {r["key"]: r["value"] for r in reader.option("latest_per_key", "true").load().collect()}
    assert table == {k: v for k, v in latest.items() if v is not None}
    assert "k5" not in table  # its tombstone dropped it
