"""SHUTDOWN_APPLICATION: one instance asks every instance of its application to stop.

Kafka Streams carries the request through its group assignor: the requesting member flags its
subscription, and the leader hands every member an assignment with SHUTDOWN_REQUESTED, on which
each client shuts down to ERROR. confluent-kafka cannot plug an assignor, so Eddy carries the
request on a one-partition internal topic, `<application.id>-shutdown-requests`, created with the
changelog and repartition topics:

- a request is one record: key the requesting process id, value a JSON object naming the
  process, the stream thread and the error. The failing thread writes it before it leaves the
  group, so the rebalance that hands its partitions to another instance comes after it;
- every instance notes the topic's end offset when it starts (`ShutdownRequests.start`) and
  reads it again every second (maintenance thread) and on every assignment a stream thread
  receives, before processing anything assigned; an end offset past that note means a request
  was made while the instance ran, and the instance shuts down to ERROR;
- a request made before an instance started does not stop it, just as a Kafka Streams client
  that joins after the shutdown rebalance runs normally.
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass
from typing import Any, Optional

from confluent_kafka import KafkaException, TopicPartition
from confluent_kafka.admin import OffsetSpec

from streams.internal_topics import InternalTopicSpec

log = logging.getLogger(__name__)

#: Requests are read once each and never needed after every instance has stopped.
_TOPIC_CONFIG = {"cleanup.policy": "delete", "retention.ms": str(7 * 24 * 3600 * 1000)}
_REQUEST_TIMEOUT_S = 10.0
_RETRY_S = 0.1


def shutdown_topic_name(application_id: str) -> str:
    return f"{application_id}-shutdown-requests"


def shutdown_topic_spec(replication_factor: int = -1) -> InternalTopicSpec:
    return InternalTopicSpec(1, dict(_TOPIC_CONFIG), replication_factor)


@dataclass(frozen=True)
class ShutdownRequest:
    """A request seen on the topic: its offset and what the requester wrote (empty if it could
    not be read)."""

    offset: int
    details: dict

    def describe(self) -> str:
        if not self.details:
            return f"request at offset {self.offset}"
        return (f"request at offset {self.offset} by process {self.details.get('process_id')} "
                f"({self.details.get('thread')}: {self.details.get('error')})")


class ShutdownRequests:
    """One instance's end of the shutdown-request topic (see the module doc)."""

    def __init__(self, backend: Any, admin: Any, application_id: str, process_id: str) -> None:
        self.backend = backend
        self.admin = admin
        self.application_id = application_id
        self.process_id = process_id
        self.topic = shutdown_topic_name(application_id)
        self._tp = TopicPartition(self.topic, 0)
        self._baseline: Optional[int] = None

    def _end_offset(self) -> Optional[int]:
        try:
            future = self.admin.list_offsets({self._tp: OffsetSpec.latest()},
                                             request_timeout=_REQUEST_TIMEOUT_S)[self._tp]
            return int(future.result(_REQUEST_TIMEOUT_S).offset)
        except Exception as exc:  # noqa: BLE001 - any failure means "not known now"; the next poll retries
            log.debug("end offset of %s not available: %s", self.topic, exc)
            return None

    def start(self, timeout_s: float = _REQUEST_TIMEOUT_S) -> None:
        """Note the end offset: requests before it were made before this instance started. A
        topic just created may not answer at once (a real broker elects its leader first): the
        read is tried again for up to `timeout_s`, since a request made before the first read
        that succeeds would be taken as made before the start, and missed."""
        deadline = time.monotonic() + timeout_s
        self._baseline = self._end_offset()
        while self._baseline is None and time.monotonic() < deadline:
            time.sleep(_RETRY_S)  # a back-off between reads of the broker
            self._baseline = self._end_offset()
        if self._baseline is None:
            log.warning("cannot read the end offset of %s within %.0f s; shutdown requests are watched "
                        "from the first successful read", self.topic, timeout_s)

    def poll(self) -> Optional[ShutdownRequest]:
        """The first request made since `start`, or None (also when the topic cannot be read)."""
        end = self._end_offset()
        if end is None:
            return None
        if self._baseline is None:
            self._baseline = end
            return None
        if end <= self._baseline:
            return None
        return ShutdownRequest(self._baseline, self._read(self._baseline))

    def _read(self, offset: int) -> dict:
        """The request record at `offset`, best effort (the decision to stop does not wait on it)."""
        consumer = None
        try:
            consumer = self.backend.consumer({"group.id": f"{self.application_id}-shutdown-reader",
                                              "enable.auto.commit": False,
                                              "client.id": f"{self.application_id}-{self.process_id}-shutdown-reader"})
            consumer.assign([TopicPartition(self.topic, 0, offset)])
            deadline = time.monotonic() + _REQUEST_TIMEOUT_S
            while time.monotonic() < deadline:
                msg = consumer.poll(0.2)
                if msg is None or msg.error() is not None:
                    continue
                details = json.loads(msg.value() or b"{}")
                return details if isinstance(details, dict) else {}
        except Exception as exc:  # noqa: BLE001 - the details only decorate the log line
            log.debug("cannot read the shutdown request at %s-0@%d: %s", self.topic, offset, exc)
        finally:
            if consumer is not None:
                try:
                    consumer.close()
                except Exception:  # noqa: BLE001
                    pass
        return {}

    def send(self, thread_name: str, error: BaseException) -> bool:
        """Write this instance's request; True once the log has acknowledged it."""
        details = {"process_id": self.process_id, "thread": thread_name,
                   "error": f"{type(error).__name__}: {error}", "time_ms": int(time.time() * 1000)}
        producer = self.backend.producer({"client.id": f"{self.application_id}-{self.process_id}-shutdown-request",
                                          "acks": "all"})
        outcome: list = []
        try:
            producer.produce(self.topic, key=self.process_id.encode(), value=json.dumps(details).encode(),
                             on_delivery=lambda err, msg: outcome.append(err))
            remaining = producer.flush(_REQUEST_TIMEOUT_S)
        except (KafkaException, BufferError) as exc:
            log.error("cannot write the shutdown request to %s: %s", self.topic, exc)
            return False
        finally:
            close = getattr(producer, "close", None)  # the embedded producer's sender thread
            if close is not None:
                close()
        if remaining or not outcome or outcome[0] is not None:
            log.error("the shutdown request to %s was not acknowledged: %s", self.topic,
                      outcome[0] if outcome else f"{remaining} record(s) still queued")
            return False
        return True

