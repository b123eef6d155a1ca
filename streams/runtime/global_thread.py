"""GlobalStreamThread: keeps the global stores of one App instance (Kafka's GlobalStreamThread).

One per App, apart from the stream threads, with its own consumer (no group: every partition
of every global topic assigned by hand; `auto.offset.reset` error, Kafka's "none";
read_committed under exactly-once) and its own state (`<state.dir>/<application.id>/global/`,
GlobalStateManager). The updates themselves are the GlobalStateUpdateTask's, the code the
TopologyTestDriver runs.

`start()` returns once the bootstrap is done, as Kafka's: each partition of each global topic
is read, one after the other, from the checkpointed offset (else from the log start) to the end
offset listed when it begins (the high watermark; the last stable offset under read_committed),
with the restore listener told of the start, each batch and the end. Only then do the stream
threads start, so no stream record is processed before the global tables are loaded. An error
there (a global topic missing, offsets out of range, a bad record under log_and_fail) is raised
by `start()`; after out-of-range offsets the global state is wiped first, so a restart restores
it from the beginning. Then the thread keeps polling and applying new records, checkpointing as
the update task decides, until `shutdown()`; a failure there is reported to `on_error` (the App
shuts down to ERROR: a global thread is never replaced, as in Kafka).
"""

from __future__ import annotations

import enum
import logging
import threading
import time
from typing import Any, Callable, Optional

from confluent_kafka import KafkaError, KafkaException, Message, TopicPartition

from eddy.messages import partition_runs
from state.cache import ThreadCache
from state.restore import restore_consumer_config
from streams.engine.global_task import GlobalStateUpdateTask, global_update_task
from streams.errors import StreamsError
from streams.runtime.config import GLOBAL_CONSUMER_PREFIX, StreamsConfig
from streams.runtime.errors import MissingSourceTopicError

log = logging.getLogger(__name__)

_OUT_OF_RANGE_CODES = frozenset({KafkaError._AUTO_OFFSET_RESET, KafkaError.OFFSET_OUT_OF_RANGE})
_ERROR = Message.error


class GlobalStateError(StreamsError):
    """The global state cannot be kept: bootstrapping or updating the global stores failed."""


class GlobalOffsetOutOfRangeError(GlobalStateError):
    """A global topic no longer holds the offset the global stores stand at (records deleted,
    topic recreated): the global state was wiped; a restart restores it from the beginning."""


class GlobalThreadState(enum.Enum):
    CREATED = "CREATED"
    RUNNING = "RUNNING"
    PENDING_SHUTDOWN = "PENDING_SHUTDOWN"
    DEAD = "DEAD"


def _wall_clock_ms() -> int:
    return int(time.time() * 1000)


class GlobalStreamThread(threading.Thread):
    """See the module doc. `stores` maps each global store's name to its (open) store once
    `start()` has returned."""

    def __init__(self, topology: Any, *, config: StreamsConfig, backend: Any, state_directory: Any,
                 restore_listener: Any = None, metrics: Any = None, live_threads: int = 0,
                 on_error: Callable[["GlobalStreamThread", BaseException], None]) -> None:
        super().__init__(name=f"{config.application_id}-GlobalStreamThread", daemon=True)
        self.topology = topology
        self.config = config
        self.backend = backend
        self.state_directory = state_directory
        self.restore_listener = restore_listener
        self.metrics = metrics
        self._on_error = on_error
        self.state = GlobalThreadState.CREATED
        self.stores: dict[str, Any] = {}
        self._stop_event = threading.Event()
        self._clean = True
        self._bootstrapped = threading.Event()
        self._startup_error: Optional[BaseException] = None
        self.consumer: Any = None
        self.task: Optional[GlobalStateUpdateTask] = None
        # the caching global stores' cache: Kafka's share of statestore.cache.max.bytes beside
        # `live_threads` stream threads (`resize` when their count changes)
        self.thread_cache = ThreadCache(self._cache_share(live_threads))
        self._resize_to: Optional[int] = None

    # ---- control ---------------------------------------------------------------------------

    def start(self) -> None:
        """Start, and return once the global stores are bootstrapped; raises what stopped it."""
        super().start()
        self._bootstrapped.wait()
        if self._startup_error is not None:
            self.join()
            raise self._startup_error

    def shutdown(self, *, clean: bool = True) -> None:
        """Stop after the current poll; clean: with a last checkpoint (False: as if the process
        died)."""
        self._clean = self._clean and clean
        self._stop_event.set()

    @property
    def stopping(self) -> bool:
        return self._stop_event.is_set()

    def resize(self, live_threads: int) -> None:
        """Take the cache's share beside `live_threads` stream threads (the app added or removed
        one), applied by this thread at its next poll, as a stream thread's (a smaller cache
        evicts, on the thread that owns it)."""
        self._resize_to = self._cache_share(live_threads)

    def _cache_share(self, live_threads: int) -> int:
        return self.config.thread_shares(live_threads, global_thread=True)[0]

    def _set_state(self, new: GlobalThreadState) -> None:
        log.info("%s: %s -> %s", self.name, self.state.value, new.value)
        self.state = new

    # ---- the thread ------------------------------------------------------------------------

    def run(self) -> None:
        try:
            task = self._initialize()
        except BaseException as exc:  # noqa: BLE001 - raised by start() in the caller's thread
            self._startup_error = exc
            task = None
        finally:
            self._bootstrapped.set()
        if task is None:
            self._set_state(GlobalThreadState.PENDING_SHUTDOWN)
            self._set_state(GlobalThreadState.DEAD)
            return
        error: Optional[BaseException] = None
        wipe = False
        try:
            while not self._stop_event.is_set():
                self._poll_and_update(task)
        except GlobalOffsetOutOfRangeError as exc:
            log.error("%s: updating the global state failed on offsets out of range; the global state is "
                      "deleted, restart the application to restore it: %s", self.name, exc)
            error, wipe = exc, True
        except BaseException as exc:  # noqa: BLE001 - reported to the App, which shuts down
            log.exception("%s: updating the global state failed", self.name)
            error = exc
        self._set_state(GlobalThreadState.PENDING_SHUTDOWN)
        self._close(task, clean=error is None and self._clean, wipe=wipe)
        self._set_state(GlobalThreadState.DEAD)
        if error is not None:
            self._on_error(self, error)

    def _initialize(self) -> Optional[GlobalStateUpdateTask]:
        cfg = self.config
        task = global_update_task(self.topology, self.state_directory, config=cfg.task_config(),
                                  clock_ms=_wall_clock_ms, metrics=self.metrics, thread_id=self.name,
                                  thread_cache=self.thread_cache)
        if task is None:
            raise GlobalStateError("the topology has no global store: no global thread is needed")
        self.consumer = self.backend.consumer({
            **restore_consumer_config(cfg.eos_enabled, group_id=f"{cfg.application_id}-global"),
            "client.id": f"{self.name}-global-consumer",
            **cfg.consumer_overrides(GLOBAL_CONSUMER_PREFIX)})
        try:
            checkpointed = task.initialize()
        except BaseException:
            self.consumer.close()
            raise
        try:
            partitions = self._bootstrap_stores(task, checkpointed)
        except GlobalOffsetOutOfRangeError:
            self._close(task, clean=False, wipe=True)
            raise
        except BaseException:
            self._close(task, clean=False)
            raise
        if self._stop_event.is_set():
            self._close(task, clean=False)
            return None
        # every partition from where the bootstrap left it
        offsets = task.manager.offsets()
        self.consumer.assign([TopicPartition(tp.topic, tp.partition, offsets[tp]) for tp in partitions])
        self.stores = dict(task.stores)
        self.task = task
        self._set_state(GlobalThreadState.RUNNING)
        return task

    def _close(self, task: GlobalStateUpdateTask, *, clean: bool, wipe: bool = False) -> None:
        try:
            self.consumer.close()
        except Exception:  # noqa: BLE001 - the stores must still be closed
            log.exception("%s: closing the global consumer failed", self.name)
        try:
            task.close(clean=clean, wipe=wipe)
        except Exception:  # noqa: BLE001
            log.exception("%s: closing the global stores failed", self.name)

    # ---- bootstrap -------------------------------------------------------------------------

    def _partitions(self, topic: str, store: str) -> list[TopicPartition]:
        metadata = self.consumer.list_topics(topic, timeout=self.config.task_timeout_ms / 1000.0)
        found = metadata.topics.get(topic)
        if found is None or found.error is not None or not found.partitions:
            raise MissingSourceTopicError(
                f"global store {store!r}: its topic {topic!r} does not exist (no partitions available); "
                f"create it before starting the application {self.config.application_id!r}")
        return [TopicPartition(topic, p) for p in sorted(found.partitions)]

    def _bootstrap_stores(self, task: GlobalStateUpdateTask, checkpointed: dict) -> list[TopicPartition]:
        """Restore every partition of every global topic up to its end offset (Kafka's
        GlobalStateManagerImpl.restoreState, one partition after the other)."""
        every: list[TopicPartition] = []
        for topic, store in self.topology.global_topics.items():
            for tp in self._partitions(topic, store):
                every.append(tp)
                if self._stop_event.is_set():
                    return every
                self._restore_partition(task, tp, store, checkpointed.get(tp))
        return every

    def _restore_partition(self, task: GlobalStateUpdateTask, tp: TopicPartition, store: str,
                           checkpoint: Optional[int]) -> None:
        consumer, listener = self.consumer, self.restore_listener
        timeout_s = self.config.task_timeout_ms / 1000.0
        low, high = consumer.get_watermark_offsets(tp, timeout=timeout_s)
        if checkpoint is not None and not low <= checkpoint <= high:
            raise GlobalOffsetOutOfRangeError(
                f"bootstrapping global store {store!r} failed: the checkpointed offset {checkpoint} of "
                f"{tp.topic}-{tp.partition} is outside the log [{low}, {high}]; the global state is deleted, "
                "restart the application to restore it from the beginning")
        start = low if checkpoint is None else checkpoint
        if listener is not None:
            listener.on_restore_start(tp, store, start, high)
        consumer.assign([TopicPartition(tp.topic, tp.partition, start)])
        position, total = start, 0
        deadline = time.monotonic() + timeout_s
        while position < high and not self._stop_event.is_set():
            msgs = consumer.consume(self.config.global_max_poll_records, self.config.poll_ms / 1000.0)
            data = self._records(msgs)
            if data:
                done = task.restore(tp.topic, tp.partition, data)
                total += done
                position = data[-1].offset() + 1
                if listener is not None:
                    listener.on_batch_restored(tp, store, data[-1].offset(), done)
            # the consumer's position steps over transaction markers, which are never delivered
            found = consumer.position([tp])[0].offset
            if found is not None and found > position:
                position = found
            if msgs:
                deadline = time.monotonic() + timeout_s
            elif time.monotonic() > deadline:
                raise GlobalStateError(
                    f"global store {store!r}: restoring {tp.topic}-{tp.partition} made no progress within "
                    f"task.timeout.ms ({self.config.task_timeout_ms} ms) at offset {position} of {high}")
        task.set_offset(tp.topic, tp.partition, max(position, start))
        if listener is not None and not self._stop_event.is_set():
            listener.on_restore_end(tp, store, total)

    @staticmethod
    def _records(msgs: list) -> list:
        """The records among consumed messages; end-of-partition events dropped, out-of-range
        errors raised, others logged."""
        if not any(map(_ERROR, msgs)):
            return msgs
        data = []
        for m in msgs:
            err = m.error()
            if err is None:
                data.append(m)
            elif err.code() in _OUT_OF_RANGE_CODES:
                raise GlobalOffsetOutOfRangeError(
                    f"the global consumer's offset of {m.topic()}-{m.partition()} is out of range: {err}")
            elif err.code() != KafkaError._PARTITION_EOF:
                if err.fatal():
                    raise KafkaException(err)
                log.warning("global consumer error: %s", err)
        return data

    # ---- steady state ----------------------------------------------------------------------

    def _poll_and_update(self, task: GlobalStateUpdateTask) -> None:
        if self._resize_to is not None:
            size, self._resize_to = self._resize_to, None
            self.thread_cache.resize(size)
        msgs = self._records(self.consumer.consume(self.config.global_max_poll_records, self.config.poll_ms / 1000.0))
        if msgs:
            for (topic, partition), run in partition_runs(msgs):
                task.update(topic, partition, run)
        task.maybe_checkpoint()
