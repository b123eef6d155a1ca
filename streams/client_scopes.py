"""Which clients an app's client setting is for. Kafka Streams hands each client only its own
config names (StreamsConfig.getMainConsumerConfigs, getProducerConfigs, getAdminConfigs): a
`session.timeout.ms` set once in the app config reaches its consumers, not its producers or its
admin client. Every backend's clients take librdkafka's property names (confluent-kafka's API),
and librdkafka logs a CONFWARN for a consumer property given to a producer or an admin client,
and for a producer property given to a consumer, once per client created.

The two lists are librdkafka's consumer-only and producer-only properties (the C and P rows of
its CONFIGURATION.md, global and topic properties, aliases included; unchanged from librdkafka
2.15 to 2.16) and confluent-kafka's own per-client callbacks. A property of every client
("*"), or a name librdkafka does not know (which it rejects with an error naming it), is
handed to every client as before. tests/clients/test_client_scopes.py checks the lists against
the installed librdkafka."""

from __future__ import annotations

from typing import Any, Mapping

CONSUMER_PREFIX = "consumer."
PRODUCER_PREFIX = "producer."

CONSUMER_ONLY = frozenset({
    "auto.commit.enable", "auto.commit.interval.ms", "auto.offset.reset", "check.crcs",
    "consume.callback.max.messages", "consume_cb", "coordinator.query.interval.ms",
    "enable.auto.commit", "enable.auto.offset.store", "enable.partition.eof",
    "fetch.error.backoff.ms", "fetch.max.bytes", "fetch.message.max.bytes", "fetch.min.bytes",
    "fetch.queue.backoff.ms", "fetch.wait.max.ms", "group.id", "group.instance.id",
    "group.protocol", "group.protocol.type", "group.remote.assignor", "heartbeat.interval.ms",
    "isolation.level", "max.partition.fetch.bytes", "max.poll.interval.ms", "max.poll.records",
    "offset.store.method", "offset.store.path", "offset.store.sync.interval.ms",
    "offset_commit_cb", "partition.assignment.strategy", "queued.max.messages.kbytes",
    "queued.min.messages", "rebalance_cb", "session.timeout.ms", "share.acknowledgement.mode",
    "on_commit",  # confluent-kafka's
})

PRODUCER_ONLY = frozenset({
    "acks", "batch.num.messages", "batch.size", "compression.codec", "compression.level",
    "compression.type", "delivery.report.only.error", "delivery.timeout.ms", "dr_cb",
    "dr_msg_cb", "enable.gapless.guarantee", "enable.idempotence", "linger.ms",
    "message.send.max.retries", "message.timeout.ms", "msg_order_cmp", "partitioner",
    "partitioner_cb", "produce.offset.report", "queue.buffering.backpressure.threshold",
    "queue.buffering.max.kbytes", "queue.buffering.max.messages", "queue.buffering.max.ms",
    "queuing.strategy", "request.required.acks", "request.timeout.ms", "retries",
    "sticky.partitioning.linger.ms", "transaction.timeout.ms", "transactional.id",
    "on_delivery",  # confluent-kafka's
})


def scope_client_settings(config: Mapping[str, Any]) -> dict[str, Any]:
    """`config` (client settings) with each unprefixed consumer-only key moved under `consumer.`
    and each producer-only key under `producer.` (the prefixes the backends give one kind of
    client), so that no client gets another kind's setting. A prefixed key already set wins over
    the unprefixed one, as Kafka's prefixed settings do; every other key is kept as it is."""
    scoped: dict[str, Any] = {}
    moved: list[tuple[str, Any]] = []
    for key, value in config.items():
        if key in CONSUMER_ONLY:
            moved.append((CONSUMER_PREFIX + key, value))
        elif key in PRODUCER_ONLY:
            moved.append((PRODUCER_PREFIX + key, value))
        else:
            scoped[key] = value
    for key, value in moved:
        scoped.setdefault(key, value)
    return scoped
