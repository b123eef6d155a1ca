"""Which clients an app's client setting is for. Kafka Streams hands each client only its own
config names (StreamsConfig.getMainConsumerConfigs, getProducerConfigs, getAdminConfigs): a
`session.timeout.ms` set once in the app config reaches its consumers, not its producers or its
admin client. Every backend's clients take librdkafka's property names (confluent-kafka's API),
and librdkafka logs a CONFWARN for a consumer property given to a producer or an admin client,
and for a producer property given to a consumer, once per client created.

A name no client knows is not handed to any, with a warning naming it, as Kafka Streams hands
each client only its config names (an app's config may carry the app's own settings: on Kafka
Streams they run unchanged, and so here, on either backend; librdkafka would refuse to create a
client given one). A setting under a client's prefix (`consumer.`, `producer.`, `admin.`)
reaches that kind of client as it is, known here or not, as Kafka's prefixed settings do.

The lists are librdkafka's properties (the C, P and * rows of librdkafka 2.15's
CONFIGURATION.md, global and topic properties, aliases included) and confluent-kafka's own
ones. tests/clients/test_client_scopes.py checks each against the installed librdkafka; a
property a later librdkafka adds reaches a client under that client's prefix."""

from __future__ import annotations

import logging
from typing import Any, Mapping

log = logging.getLogger(__name__)

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

#: librdkafka's properties of every client ("*"), and confluent-kafka's own
EVERY_CLIENT = frozenset({
    "allow.auto.create.topics", "api.version.fallback.ms", "api.version.request",
    "api.version.request.timeout.ms", "background_event_cb", "bootstrap.servers",
    "broker.address.family", "broker.address.ttl", "broker.version.fallback",
    "builtin.features", "client.dns.lookup", "client.id", "client.rack", "closesocket_cb",
    "connect_cb", "connections.max.idle.ms", "debug", "default_topic_conf",
    "enable.metrics.push", "enable.random.seed", "enable.sasl.oauthbearer.unsecure.jwt",
    "enable.ssl.certificate.verification", "enabled_events", "error_cb", "https.ca.location",
    "https.ca.pem", "interceptors", "internal.termination.signal", "log.connection.close",
    "log.queue", "log.thread.name", "log_cb", "log_level", "max.in.flight",
    "max.in.flight.requests.per.connection", "message.copy.max.bytes", "message.max.bytes",
    "metadata.broker.list", "metadata.max.age.ms", "metadata.recovery.rebootstrap.trigger.ms",
    "metadata.recovery.strategy", "oauthbearer_token_refresh_cb", "opaque", "open_cb",
    "plugin.library.paths", "receive.message.max.bytes", "reconnect.backoff.jitter.ms",
    "reconnect.backoff.max.ms", "reconnect.backoff.ms", "resolve_cb", "retry.backoff.max.ms",
    "retry.backoff.ms", "sasl.kerberos.keytab", "sasl.kerberos.kinit.cmd",
    "sasl.kerberos.min.time.before.relogin", "sasl.kerberos.principal",
    "sasl.kerberos.service.name", "sasl.mechanism", "sasl.mechanisms",
    "sasl.oauthbearer.assertion.algorithm", "sasl.oauthbearer.assertion.claim.aud",
    "sasl.oauthbearer.assertion.claim.exp.seconds", "sasl.oauthbearer.assertion.claim.iss",
    "sasl.oauthbearer.assertion.claim.jti.include",
    "sasl.oauthbearer.assertion.claim.nbf.seconds", "sasl.oauthbearer.assertion.claim.sub",
    "sasl.oauthbearer.assertion.file", "sasl.oauthbearer.assertion.jwt.template.file",
    "sasl.oauthbearer.assertion.private.key.file",
    "sasl.oauthbearer.assertion.private.key.passphrase",
    "sasl.oauthbearer.assertion.private.key.pem",
    "sasl.oauthbearer.client.credentials.client.id",
    "sasl.oauthbearer.client.credentials.client.secret", "sasl.oauthbearer.client.id",
    "sasl.oauthbearer.client.secret", "sasl.oauthbearer.config", "sasl.oauthbearer.extensions",
    "sasl.oauthbearer.grant.type", "sasl.oauthbearer.metadata.authentication.type",
    "sasl.oauthbearer.method", "sasl.oauthbearer.scope", "sasl.oauthbearer.sub.claim.name",
    "sasl.oauthbearer.token.endpoint.url", "sasl.password", "sasl.username",
    "security.protocol", "socket.blocking.max.ms", "socket.connection.setup.timeout.ms",
    "socket.keepalive.enable", "socket.max.fails", "socket.nagle.disable",
    "socket.receive.buffer.bytes", "socket.send.buffer.bytes", "socket.timeout.ms", "socket_cb",
    "ssl.ca.certificate.stores", "ssl.ca.location", "ssl.ca.pem", "ssl.certificate.location",
    "ssl.certificate.pem", "ssl.certificate.verify_cb", "ssl.cipher.suites", "ssl.crl.location",
    "ssl.curves.list", "ssl.endpoint.identification.algorithm", "ssl.engine.id",
    "ssl.engine.location", "ssl.key.location", "ssl.key.password", "ssl.key.pem",
    "ssl.keystore.location", "ssl.keystore.password", "ssl.providers", "ssl.sigalgs.list",
    "ssl_ca", "ssl_certificate", "ssl_engine_callback_data", "ssl_key",
    "statistics.interval.ms", "stats_cb", "throttle_cb", "topic.blacklist",
    "topic.metadata.propagation.max.ms", "topic.metadata.refresh.fast.cnt",
    "topic.metadata.refresh.fast.interval.ms", "topic.metadata.refresh.interval.ms",
    "topic.metadata.refresh.sparse",
    "logger", "oauth_cb",  # confluent-kafka's
})

#: the prefixes that hand a setting to one kind of client as it is (the backends strip them)
CLIENT_PREFIXES = (CONSUMER_PREFIX, PRODUCER_PREFIX, "admin.")


def scope_client_settings(config: Mapping[str, Any]) -> dict[str, Any]:
    """`config` (an app's client settings) with each unprefixed consumer-only key moved under
    `consumer.` and each producer-only key under `producer.` (the prefixes the backends give one
    kind of client), so that no client gets another kind's setting; a prefixed key already set
    wins over the unprefixed one, as Kafka's prefixed settings do. Every client's settings and
    prefixed keys are kept as they are; an unprefixed key no client knows is dropped, with a
    warning naming it."""
    scoped: dict[str, Any] = {}
    moved: list[tuple[str, Any]] = []
    unknown: list[str] = []
    for key, value in config.items():
        if key in CONSUMER_ONLY:
            moved.append((CONSUMER_PREFIX + key, value))
        elif key in PRODUCER_ONLY:
            moved.append((PRODUCER_PREFIX + key, value))
        elif key in EVERY_CLIENT or key.startswith(CLIENT_PREFIXES):
            scoped[key] = value
        else:
            unknown.append(key)
    for key, value in moved:
        scoped.setdefault(key, value)
    if unknown:
        log.warning("config %s: not a Kafka Streams or client setting, handed to no client (a client's "
                    "own setting reaches it under its prefix: consumer., producer. or admin.)",
                    ", ".join(map(repr, sorted(unknown))))
    return scoped
