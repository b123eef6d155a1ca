"""RecordCollector on a confluent-kafka-API producer (both backends).

Sinks and the change-logging layer call `send` with serialized bytes (a sink through `sender`).
Where the producer offers its queues (the embedded producer's `QueueView`), a record for a known
partition is queued through them (`_queue`, the one Python implementation of that protocol; the
sink accelerator in streams/runtime/_sink.c is the other, behind `sink_stage`). Delivery reports record
the last written offset per partition of what went through `send` (the state manager
checkpoints changelog offsets from `offsets()`; a sink's `sender` reports failures only: no
offset of a sink topic is ever read) and the first delivery failure, which is raised at the next `send` or `flush`
(Kafka's default production exception handler: fail). Under exactly-once the collector opens
the producer's transaction before the first record of each transaction.
"""

from __future__ import annotations

import logging
import time
from typing import Any, Callable, Optional

from confluent_kafka import KafkaError, KafkaException, TopicPartition

from streams.config_names import PRODUCTION_HANDLER_CONFIG, renamed_config
from streams.errors import ConfigError
from streams.runtime.errors import ProductionError, TaskMigratedError
from eddy.murmur2 import murmur2_partition as partition_for_key
from streams.runtime.direct_sink import direct_sink_stage, partition_sender as direct_partition_sender

log = logging.getLogger(__name__)

_KEY_CACHE_MAX = 100_000  # distinct keys remembered per topic

# Errors meaning another producer (or a newer group generation) owns our work now.
_FENCED = frozenset({
    KafkaError._FENCED, KafkaError.PRODUCER_FENCED, KafkaError.INVALID_PRODUCER_EPOCH,
    KafkaError.INVALID_PRODUCER_ID_MAPPING, KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
    KafkaError.UNKNOWN_MEMBER_ID, KafkaError.ILLEGAL_GENERATION, KafkaError.FENCED_INSTANCE_ID,
    KafkaError.REBALANCE_IN_PROGRESS,
})


def _remember_partition(cache: dict[bytes, int], key: bytes, count: int) -> int:
    """The murmur2 partition of `key` over `count` partitions, remembered in `cache` (a keyed
    send's first record of a key; the cache starts over past _KEY_CACHE_MAX keys)."""
    if len(cache) >= _KEY_CACHE_MAX:
        cache.clear()
    part = cache[key] = partition_for_key(key, count)
    return part


def production_handler_from_config(config: dict) -> Callable[[Exception, Any], str]:
    """`production.exception.handler` (or its deprecated name `default.production.exception.handler`):
    "fail" (default), "continue" or a callable `handler(error, message) -> "fail" | "continue"`."""
    key, value = renamed_config(config, PRODUCTION_HANDLER_CONFIG)
    if value is None:
        value = "fail"
    if callable(value):
        return value
    if isinstance(value, str) and value.lower() in ("fail", "continue"):
        response = value.lower()
        return lambda error, msg: response
    raise ConfigError(f"config {key!r} must be 'fail', 'continue' or a callable, got {value!r}")


def uses_murmur2(producer_config: dict) -> bool:
    """True when the producer partitions keyed records with murmur2 (both backends' default)."""
    value = producer_config.get("producer.partitioner", producer_config.get("partitioner", "murmur2_random"))
    return value in ("murmur2_random", "murmur2")


def is_fenced(error: Any) -> bool:
    """True for a KafkaError/KafkaException saying the producer or group member was fenced."""
    err = error.args[0] if isinstance(error, KafkaException) and error.args else error
    if not isinstance(err, KafkaError):
        return False
    return err.code() in _FENCED or bool(getattr(err, "fatal", lambda: False)())


def breaks_transactional_producer(error: Any) -> bool:
    """True when a transactional producer must be replaced: fenced, or librdkafka's _FATAL, which
    produce() raises after a fatal error (on a transactional producer: a fencing seen elsewhere,
    e.g. when a fencing InitProducerId retried by another instance lands after this one's)."""
    err = error.args[0] if isinstance(error, KafkaException) and error.args else error
    return is_fenced(err) or (isinstance(err, KafkaError) and err.code() == KafkaError._FATAL)


class RecordCollector:
    """One per stream thread, shared by its active tasks (one producer per thread)."""

    POLL_EVERY = 4096  # serve delivery reports every so many sends, so the producer queue never fills up

    def __init__(self, producer: Any, *, eos_enabled: bool = False,
                 production_handler: Optional[Callable[[Exception, Any], str]] = None,
                 flush_timeout_s: float = 60.0, murmur2_partitioning: bool = False,
                 metadata_refresh_ms: int = 300000) -> None:
        """`metadata_refresh_ms` (librdkafka's topic.metadata.refresh.interval.ms): how often
        `refresh_partition_counts` looks again at the partition counts it routes keys by."""
        self.eos_enabled = eos_enabled
        self.in_transaction = False
        self._handler = production_handler or (lambda error, msg: "fail")
        self._flush_timeout_s = flush_timeout_s
        self._offsets: dict[tuple[str, int], int] = {}
        self._error: Optional[BaseException] = None
        self._partition_counts: dict[str, int] = {}
        self._metadata_refresh_s = max(0, metadata_refresh_ms) / 1000.0
        self._next_refresh = time.monotonic() + self._metadata_refresh_s
        self._since_poll = 0
        self._on_delivery = self._delivery_callback()
        self.use_producer(producer)
        # one object: the producer's per-queue callback (the sink accelerator compares it)
        self.sink_delivery_callback = self._sink_delivery_callback()
        # With the producer on Kafka's default partitioner (murmur2), keyed records are routed
        # here, remembering each key's partition: the same choice, made once per distinct key.
        self._murmur2 = murmur2_partitioning
        self._key_partitions: dict[str, dict[bytes, int]] = {}

    def use_producer(self, producer: Any) -> None:
        """Send through `producer` from now on (the thread replaces a fenced or broken
        transactional one): its produce() and, where it offers one, its queue view (the sinks'
        in-process path; the old producer's would take records it never sends). Stages built
        before keep the old view: the thread revives its tasks after a replacement."""
        self.producer = producer
        self._produce = producer.produce
        queue_view = getattr(producer, "queue_view", None)
        self._view = queue_view() if queue_view is not None else None
        self.in_transaction = False
        self.reset_error()

    # ---- delivery reports -----------------------------------------------------------------

    def _delivery_failed(self, err: Any, msg: Any) -> None:
        """A record was not delivered: the first failure is raised at the next `send` or
        `flush`, unless the production exception handler says to continue."""
        if self._error is not None:
            return
        error = ProductionError(
            f"error sending a record to topic {msg.topic()!r} partition {msg.partition()}: {err}")
        if is_fenced(err) or (self.eos_enabled and not getattr(err, "retriable", lambda: False)()):
            # under EOS any lost record breaks the transaction: the tasks must be revived
            self._error = TaskMigratedError(f"{error}; the producer's transaction cannot commit")
            self._error.__cause__ = KafkaException(err)
            return
        try:
            response = self._handler(error, msg)
        except Exception as exc:  # the user's handler failed: fail like Kafka
            response = "fail"
            error.__cause__ = exc
        if str(response).lower() == "continue" and not self.eos_enabled:
            log.warning("production exception handler chose to continue after: %s", error)
            return
        self._error = error

    def _delivery_callback(self) -> Callable[[Any, Any], None]:
        """`send`'s delivery callback. A delivered record only moves its partition's offset
        forward, so of a delivered batch only the last record matters: the callback says so
        with `delivery_report_last_only`, which the embedded producer honours (one Message per
        delivered batch instead of one per record); confluent-kafka calls it for every record."""
        offsets, failed = self._offsets, self._delivery_failed

        def on_delivery(err: Any, msg: Any) -> None:  # per record on confluent-kafka: one frame
            if err is None:
                offsets[(msg.topic(), msg.partition())] = msg.offset()
            else:
                failed(err, msg)
        on_delivery.delivery_report_last_only = True  # type: ignore[attr-defined]
        return on_delivery

    def _sink_delivery_callback(self) -> Callable[[Any, Any], None]:
        """The sinks' delivery callback: failures only. It says so with
        `delivery_report_only_error`, which the embedded producer honours per callback (it then
        builds no Message for a delivered record); confluent-kafka calls it for every record."""
        failed = self._delivery_failed

        def sink_delivered(err: Any, msg: Any) -> None:
            if err is not None:
                failed(err, msg)
        sink_delivered.delivery_report_only_error = True  # type: ignore[attr-defined]
        return sink_delivered

    def check_error(self) -> None:
        error = self._error
        if error is not None:
            self._error = None
            raise error

    # ---- sending --------------------------------------------------------------------------

    def begin_transaction(self) -> None:
        if self.eos_enabled and not self.in_transaction:
            try:
                self.producer.begin_transaction()
            except KafkaException as exc:
                raise TaskMigratedError(f"cannot begin a transaction: {exc}") from exc
            self.in_transaction = True

    def send(self, topic: str, key: bytes | None, value: bytes | None, *, partition: int | None,
             timestamp: int, headers: Any = None) -> None:
        if self._error is not None:
            self.check_error()
        if self.eos_enabled and not self.in_transaction:
            self.begin_transaction()
        if partition is not None:
            part = partition
            if self._view is not None and not headers and self._queue(topic, part, key, value, timestamp,
                                                                      self._on_delivery):
                return  # changelog writes
        elif key is not None and self._murmur2:
            cache = self._key_partitions.get(topic)
            if cache is None:
                cache = self._key_partitions[topic] = {}
            part = cache.get(key, -1)
            if part < 0:
                part = _remember_partition(cache, key, self.partitions_for(topic))
        else:
            part = -1
        self._produce_one(topic, key, value, part, timestamp, headers, self._on_delivery)

    def _queue(self, topic: str, partition: int, key: Optional[bytes], value: Optional[bytes], timestamp: Any,
               on_delivery: Callable[[Any, Any], None]) -> bool:
        """Queue the record on the producer's `QueueView` where the protocol allows it (the
        view offers `topic`, the partition is in range, its queue carries `on_delivery`, key and
        value are bytes or None): exactly what produce() would do. False: produce() instead."""
        view = self._view
        if view is None:
            return False
        queues = view.topics.get(topic)
        if queues is None or not 0 <= partition < len(queues):
            return False
        queue = queues[partition]
        if (queue.cb is not on_delivery or (key is not None and key.__class__ is not bytes)
                or (value is not None and value.__class__ is not bytes)):
            return False
        if view.append(queue.entries, key, value, timestamp or time.time_ns() // 1_000_000) >= queue.kick_at:
            view.kick(queue)
        self.count_send()
        return True

    def sender(self, topic: str) -> Callable[[Any, Any, int, Any], None]:
        """`send` to `topic` with the default partitioning, as one function a sink keeps:
        `sender(topic)(key, value, timestamp, headers)` (the per-record path, no keyword call
        and no per-topic lookups; the sinks' delivery callback). Keyed records go to their
        murmur2 partition over the count the producer's queues know where it offers them (what
        produce() would pick, checked per record: a queue view follows a topic's growth), else
        the count `partitions_for` knows (`refresh_partition_counts` clears the remembered
        partitions in place when it grows)."""
        murmur2 = self._murmur2
        cache = self._key_partitions.get(topic)
        if cache is None:
            cache = self._key_partitions[topic] = {}
        topics = self._view.topics if self._view is not None else None
        counted = [0]  # the partition count the remembered partitions were computed over
        collector = self
        produce_one, on_delivery = self._produce_one, self.sink_delivery_callback

        def send(key: Any, value: Any, timestamp: int, headers: Any) -> None:
            if collector._error is not None:
                collector.check_error()
            if collector.eos_enabled and not collector.in_transaction:
                collector.begin_transaction()
            part = -1
            if murmur2 and key is not None:
                if topics is not None:
                    queues = topics.get(topic)
                    count = len(queues) if queues else collector.partitions_for(topic)
                    if count != counted[0]:
                        cache.clear()
                        counted[0] = count
                part = cache.get(key, -1)
                if part < 0:
                    part = _remember_partition(cache, key, counted[0] if topics is not None
                                               else collector.partitions_for(topic))
                if topics is not None and not headers and collector._queue(topic, part, key, value, timestamp,
                                                                           on_delivery):
                    return
            produce_one(topic, key, value, part, timestamp, headers, on_delivery)
        return send

    def sink_stage(self, topic: str, key_serialize: Callable[[Any], bytes], value_serialize: Callable[[Any], bytes],
                   sink: Callable[[Any, Any, int, Any], None],
                   failed: Callable[[], None]) -> Optional[Callable[[Any, Any, int, Any], None]]:
        """The sink accelerator's stage standing in for `sink` (the sink's own stage, which
        serializes with `key_serialize`/`value_serialize`'s checked forms and sends through
        `sender(topic)`), see streams/runtime/direct_sink.py. None where it is not offered: no
        queue view, keys not routed by murmur2 here, or the C module not built."""
        if self._view is None or not self._murmur2:
            return None
        return direct_sink_stage(self, self._view, topic, key_serialize, value_serialize, sink,
                                 self.sender(topic), failed)

    def partition_sender(self, topic: str, partition: int) -> Callable[[Any, Any, int, Any], None]:
        """`send(topic, key, value, partition=partition, timestamp=timestamp, headers=headers)`
        as one function `(key, value, timestamp, headers)` (a changelog's per-record path): the
        sink accelerator's C stage where it is offered (streams/runtime/direct_sink.py), which
        hands every uncommon case to `send`."""
        send = self.send

        def send_to_partition(key: Any, value: Any, timestamp: int, headers: Any = None) -> None:
            send(topic, key, value, partition=partition, timestamp=timestamp, headers=headers)
        if self._view is None:
            return send_to_partition
        return direct_partition_sender(self, self._view, topic, partition, send_to_partition) or send_to_partition

    def _produce_one(self, topic: str, key: Optional[bytes], value: Optional[bytes], partition: int, timestamp: int,
                     headers: Any, on_delivery: Callable[[Any, Any], None]) -> None:
        """produce() of one record to a partition already chosen (-1: the producer's choice),
        with `on_delivery` (`send`'s or the sinks' callback), counted."""
        try:
            # positional: confluent-kafka parses keywords through a dict, which doubles the call's
            # cost (1.66 against 0.80 µs a record); the arguments are produce()'s own order
            if headers:
                self._produce(topic, value, key, partition, on_delivery, None, timestamp, headers)
            else:
                self._produce(topic, value, key, partition, on_delivery, None, timestamp)
        except BufferError:
            self._produce_when_room(topic, value, key, partition, timestamp, headers, on_delivery)
        except KafkaException as exc:
            self._send_failed(topic, exc)
        self.count_send()

    def count_send(self) -> None:
        """One more record sent: serve delivery reports now and then."""
        self._since_poll += 1
        if self._since_poll >= self.POLL_EVERY:
            self._since_poll = 0
            self.producer.poll(0)

    def _send_failed(self, topic: str, exc: KafkaException) -> None:
        if is_fenced(exc) or (self.eos_enabled and breaks_transactional_producer(exc)):
            raise TaskMigratedError(f"producer fenced while sending to {topic!r}: {exc}") from exc
        raise ProductionError(f"cannot send a record to topic {topic!r}: {exc}") from exc

    def _produce_when_room(self, topic: str, value: Any, key: Any, part: int, timestamp: int, headers: Any,
                           on_delivery: Callable[[Any, Any], None]) -> None:
        while True:
            self.producer.poll(0.05)  # deliveries free queue space
            if self._error is not None:
                self.check_error()
            try:
                self._produce(topic, value, key, part, on_delivery, None, timestamp, headers or None)
                return
            except BufferError:
                continue

    def partitions_for(self, topic: str) -> int:
        count = self._partition_counts.get(topic)
        if count is None:
            metadata = self.producer.list_topics(topic, timeout=10)
            info = metadata.topics.get(topic)
            if info is None or not info.partitions:
                raise ProductionError(f"cannot find the partitions of topic {topic!r}")
            count = self._partition_counts[topic] = len(info.partitions)
        return count

    def refresh_partition_counts(self) -> None:
        """Once per metadata refresh interval (the caller may ask more often): re-read the
        partition count of every topic keys are routed to; where it grew, forget the remembered
        key partitions, so keyed records go where a Kafka producer puts them after its own
        metadata refresh. The caches are cleared in place: senders hold them."""
        now = time.monotonic()
        if now < self._next_refresh or not self._partition_counts:
            return
        self._next_refresh = now + self._metadata_refresh_s
        for topic, count in list(self._partition_counts.items()):
            try:
                info = self.producer.list_topics(topic, timeout=10).topics.get(topic)
            except KafkaException as exc:
                log.debug("cannot refresh the partition count of %s: %s", topic, exc)
                continue
            if info is None or info.error is not None or len(info.partitions) <= count:
                continue  # a count only grows; a topic without metadata keeps the known one
            log.info("topic %s grew from %d to %d partitions: keyed records follow", topic, count,
                     len(info.partitions))
            self._partition_counts[topic] = len(info.partitions)
            cache = self._key_partitions.get(topic)
            if cache is not None:
                cache.clear()

    def poll(self) -> None:
        """Serve delivery reports without blocking."""
        self.producer.poll(0)

    def flush(self) -> None:
        """Wait until every sent record is delivered; raise the first delivery failure."""
        remaining = self.producer.flush(self._flush_timeout_s)
        self.check_error()
        if remaining:
            raise ProductionError(f"{remaining} records were not delivered within {self._flush_timeout_s:.0f}s")

    # ---- offsets --------------------------------------------------------------------------

    def offsets(self) -> dict[TopicPartition, int]:
        """The offset of the last record delivered per partition, of records sent with `send`
        (the change-logging layer's path; sinks' senders track failures only)."""
        return {TopicPartition(t, p): o for (t, p), o in self._offsets.items()}

    def offset_of(self, topic: str, partition: int) -> Optional[int]:
        return self._offsets.get((topic, partition))

    def reset_error(self) -> None:
        self._error = None
