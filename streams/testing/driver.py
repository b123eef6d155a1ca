"""TopologyTestDriver: run a topology synchronously, in process, with no broker.

Each sub-topology runs as one task (partition 0) on the same `TaskEngine` the real runtime uses.
Every piped record is processed, then stream-time punctuation runs and all tasks commit (caches
flush, as Kafka's driver commits after every record). Records produced to internal topics
(repartition) or to any topic a source reads are fed back in before `pipe_input` returns, in the
order Kafka's driver takes them (streams/testing/record_order.py: lowest head timestamp first
across topics). Everything produced (outputs, repartition and changelog records) is kept in
`producer_history()`. Records piped (or produced) to the topic of a global store update that
store at once through the App's own GlobalStateUpdateTask; every task can read it.

Output topics show what Kafka's driver captures: the records of each processed record once it is
processed (and its commit done), so a record whose processing fails shows none of what it
produced until the next record is piped (Kafka captures them then); `producer_history()` has
them at once.

The config is validated as the App validates it (`StreamsConfig.parse`: same keys, defaults and
ConfigErrors), except that `bootstrap.servers` is not needed; without `state.dir` each driver
gets its own temporary directory, removed on close.
"""

from __future__ import annotations

import collections
import logging
import shutil
import tempfile
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping, Optional

from confluent_kafka import TopicPartition

from state.cache import ThreadCache
from state.directory import StateDirectory
from state.manager import ProcessorStateManager, TaskType, close_state_manager, register_state_stores
from state.task_id import TaskId
from state.readonly import read_only_view
from state.timestamped import TimestampedKeyValueStore
from streams.metrics import MetricsRegistry
from streams.errors import ConfigError, EmptyTopicError, StoreAccessError, ProcessingError, UnknownTopicError
from streams.dsl.ops.windowed import EMIT_INTERVAL_CONFIG as WINDOWED_EMIT_INTERVAL_CONFIG
from streams.engine import TaskEngine
from streams.engine.global_task import GlobalStateUpdateTask, global_update_task
from streams.engine.task_engine import raw_message
from streams.processor import _normalize_headers
from streams.testing.record_order import TaskQueues
from streams.runtime.config import StreamsConfig
from streams.topology import Topology, changelog_topic_name, source_changelogs

log = logging.getLogger(__name__)

__all__ = ["TopologyTestDriver", "TestInputTopic", "TestOutputTopic", "TestRecord", "ProducerRecord"]

DEFAULT_APPLICATION_ID = "topology-test-driver"


@dataclass(frozen=True)
class ProducerRecord:
    """One record the topology produced (to an output, repartition or changelog topic), as bytes."""

    topic: str
    partition: int
    offset: int
    key: Optional[bytes]
    value: Optional[bytes]
    timestamp: int
    headers: tuple = ()


@dataclass(frozen=True)
class TestRecord:
    """A deserialized output record."""

    __test__ = False  # not a pytest test class
    key: Any
    value: Any
    timestamp: int
    headers: tuple = field(default=())


class _Collector:
    """In-memory record collector: assigns offsets per partition and keeps everything sent."""

    def __init__(self, driver: "TopologyTestDriver") -> None:
        self._driver = driver
        self.history: list[ProducerRecord] = []
        self._next_offset: dict[tuple[str, int], int] = collections.defaultdict(int)
        self._last_offset: dict[tuple[str, int], int] = {}

    def partitions_for(self, topic: str) -> int:
        return 1

    def next_offset(self, topic: str, partition: int = 0) -> int:
        tp = (topic, partition)
        offset = self._next_offset[tp]
        self._next_offset[tp] = offset + 1
        return offset

    def send(self, topic: str, key: bytes | None, value: bytes | None, *, partition: int | None,
             timestamp: int, headers: Any = None) -> None:
        partition = partition or 0
        if partition != 0:
            raise ProcessingError(
                f"record for topic {topic!r} sent to partition {partition}; the test driver has one partition per topic")
        offset = self.next_offset(topic, partition)
        self._last_offset[(topic, partition)] = offset
        record = ProducerRecord(topic, partition, offset, key, value, timestamp, tuple(headers or ()))
        self.history.append(record)
        self._driver._on_produced(record)

    def offsets(self) -> dict[TopicPartition, int]:
        return {TopicPartition(t, p): o for (t, p), o in self._last_offset.items()}


class TopologyTestDriver:
    """See the module doc. Use as a context manager or call `close()`."""

    def __init__(self, topology: Topology, config: Optional[Mapping[str, Any]] = None, *,
                 initial_wall_clock_time_ms: int = 0) -> None:
        if not isinstance(topology, Topology):
            raise ProcessingError(f"TopologyTestDriver needs a Topology, got {type(topology).__name__}")
        if config is not None and not isinstance(config, Mapping):
            raise ConfigError(f"TopologyTestDriver config must be a dict, got {type(config).__name__}")
        raw = dict(config or {})
        raw.setdefault("application.id", DEFAULT_APPLICATION_ID)
        # as Kafka's driver: no wall-clock throttle on emitting final window results (its wall
        # clock only moves when the test moves it)
        raw.setdefault(WINDOWED_EMIT_INTERVAL_CONFIG, 0)
        # Kafka's driver: stream-stream outer joins emit held records on every record, not once
        # per second of wall clock
        raw.setdefault("__emit.interval.ms.kstreams.outer.join.spurious.results.fix__", 0)
        # the App's own validation (same ConfigErrors, same defaults and deprecated-key fallbacks);
        # only bootstrap.servers is optional: the driver talks to no cluster
        parsed = StreamsConfig.parse(raw, require_bootstrap_servers=False)
        self.streams_config = parsed
        self.config: dict[str, Any] = raw
        self.application_id: str = parsed.application_id
        self.topology = topology
        self._wall_clock_ms = int(initial_wall_clock_time_ms)
        self._closed = False
        self._collector = _Collector(self)
        self._outputs: dict[str, collections.deque[ProducerRecord]] = collections.defaultdict(collections.deque)
        self._uncaptured: list[ProducerRecord] = []  # produced by the record in progress (see the module doc)
        # what the topology produced to topics it reads: global ones applied after the record
        # that produced them, the others queued as in Kafka's driver (record_order.py)
        self._pending = TaskQueues()
        self._pending_global: list[ProducerRecord] = []
        self._engines: list[TaskEngine] = []
        self._engine_for_topic: dict[str, TaskEngine] = {}
        self._store_owner: dict[str, TaskEngine] = {}
        self._managers: list[ProcessorStateManager] = []
        self._registered: list[ProcessorStateManager] = []
        self._tmp_dir: Optional[str] = None
        self._global_task: Optional[GlobalStateUpdateTask] = None
        self._global_stores: dict[str, Any] = {}
        self._global_topics = set(topology.global_topics)
        subtopologies = topology.build()
        if raw.get("state.dir"):
            state_dir = parsed.state_dir
        else:  # unlike the App (a shared default directory), each driver gets its own temporary one
            self._tmp_dir = tempfile.mkdtemp(prefix="eddy-ttd-")
            state_dir = self._tmp_dir
        self.config["state.dir"] = state_dir
        self._state_directory = StateDirectory(state_dir, self.application_id)
        self._eos = parsed.eos_enabled
        # one stream thread -> one record cache shared by all caching stores (Kafka's ThreadCache)
        self._thread_cache = ThreadCache(parsed.cache_max_bytes)
        self._metrics = MetricsRegistry()
        try:
            self._init_global_stores()
            for sub in subtopologies:
                self._add_task(sub)
            for engine, manager in zip(self._engines, self._managers):
                register_state_stores(manager, engine.build_stores().values())  # locks the task dir
                self._registered.append(manager)
                engine.init_processors()
        except BaseException:
            self.close()
            raise

    def _init_global_stores(self) -> None:
        """The global stores, opened before the tasks (which may read them), updated by the
        App's own GlobalStateUpdateTask: records piped to a global topic go straight to it. Its
        caching stores share the driver's one cache with the task's, as Kafka's driver does."""
        self._global_task = global_update_task(self.topology, self._state_directory, config=self.config,
                                               clock_ms=self._clock, metrics=self._metrics,
                                               thread_cache=self._thread_cache)
        if self._global_task is not None:
            self._global_task.initialize()
            self._global_stores.update(self._global_task.stores)

    def _add_task(self, sub: Any) -> None:
        task_id = TaskId(sub.id, 0)
        manager = ProcessorStateManager(
            task_id, TaskType.ACTIVE, self._eos, self._state_directory,
            changelog_topics={name: changelog_topic_name(self.application_id, name) for name in sub.store_names},
            source_changelogs=source_changelogs(self.topology, sub),
            changelog_partition=0, collector=self._collector, config=self.config,
            thread_cache=self._thread_cache)  # one cache shared by every caching store of the driver
        self._managers.append(manager)
        engine = TaskEngine(self.topology, sub, task_id=task_id, application_id=self.application_id,
                            config=self.config, collector=self._collector, clock_ms=self._clock,
                            state_context=manager, metrics=self._metrics, global_stores=self._global_stores)
        self._engines.append(engine)
        for topic in engine.sources_by_topic:
            self._engine_for_topic[topic] = engine
        for store in sub.store_names:
            self._store_owner[store] = engine

    def _clock(self) -> int:
        return self._wall_clock_ms

    # ---- processing -----------------------------------------------------------------------

    def _check_open(self) -> None:
        if self._closed:
            raise ProcessingError("the TopologyTestDriver is closed")

    def _on_produced(self, record: ProducerRecord) -> None:
        self._uncaptured.append(record)
        if record.topic in self._global_topics:
            self._pending_global.append(record)
        if record.topic in self._engine_for_topic:
            self._pending.add(record)

    def _process_one(self, topic: str, offset: int, key: bytes | None, value: bytes | None,
                     timestamp: int, headers: Any) -> None:
        if topic in self._global_topics:
            task = self._global_task
            task.update(topic, 0, [raw_message(topic, 0, offset, key, value, timestamp, headers)])
            task.flush_state()  # Kafka's driver flushes the global state after each of its records
            self._capture()
            return
        engine = self._engine_for_topic[topic]
        engine.process(topic, 0, offset, key, value, timestamp, headers)
        engine.maybe_punctuate_stream_time()
        self._commit_all()
        self._capture()

    def _capture(self) -> None:
        """What was produced since the last capture becomes visible on the output topics (Kafka's
        captureOutputsAndGenerateInterceptorEvents, after each processed record)."""
        produced, self._uncaptured = self._uncaptured, []
        outputs = self._outputs
        for record in produced:
            outputs[record.topic].append(record)

    def _commit_all(self) -> None:
        # Kafka's driver commits after every record: flush caches (forwarding their entries), then
        # maybe checkpoint (the manager flushes the stores and writes .checkpoint only past its
        # offset threshold, and always on close)
        for engine, manager in zip(self._engines, self._managers):
            engine.flush_cache()
            engine.context.commit_requested = False
            if not self._eos:
                manager.checkpoint()

    def _drain(self) -> None:
        """Process what the records so far produced to topics the topology reads, as Kafka's
        driver: after each record, its global records update their stores, then the next queued
        record is taken in Kafka's order (TaskQueues)."""
        pending = self._pending
        try:
            self._apply_global_records()
            while pending:
                rec = pending.pop()
                self._process_one(rec.topic, rec.offset, rec.key, rec.value, rec.timestamp, rec.headers)
                self._apply_global_records()
        except BaseException:
            self._clear_pending()  # a failed pipe must not leak half-routed records into the next one
            raise

    def _apply_global_records(self) -> None:
        produced = self._pending_global
        while produced:
            rec = produced.pop(0)
            self._process_one(rec.topic, rec.offset, rec.key, rec.value, rec.timestamp, rec.headers)

    def _clear_pending(self) -> None:
        self._pending.clear()
        self._pending_global.clear()

    def pipe_raw(self, topic: str, key: bytes | None, value: bytes | None, timestamp: int,
                 headers: Any = None) -> None:
        """Feed one serialized record to `topic` (partition 0) and process everything it causes."""
        self._check_open()
        self._check_input_topic(topic)
        self._capture()  # what a failed record produced (Kafka's driver captures it at the next pipe)
        offset = self._collector.next_offset(topic)
        try:
            self._process_one(topic, offset, key, value, timestamp, _normalize_headers(headers))
        except BaseException:
            self._clear_pending()
            raise
        self._drain()

    def _check_input_topic(self, topic: str) -> None:
        if topic not in self._engine_for_topic and topic not in self._global_topics:
            raise UnknownTopicError(
                f"unknown input topic {topic!r}: no source reads it (sources read "
                f"{sorted({*self._engine_for_topic, *self._global_topics})})")

    def advance_wall_clock_time(self, ms: int) -> None:
        """Move the mock wall clock forward and fire due wall-clock punctuations."""
        self._check_open()
        if isinstance(ms, bool) or not isinstance(ms, int) or ms < 0:
            raise ProcessingError(f"advance_wall_clock_time needs a non-negative int of ms, got {ms!r}")
        self._wall_clock_ms += ms
        for engine in self._engines:
            engine.maybe_punctuate_system_time()
        self._commit_all()
        self._capture()
        self._drain()

    @property
    def wall_clock_time_ms(self) -> int:
        return self._wall_clock_ms

    # ---- topics ---------------------------------------------------------------------------

    def create_input_topic(self, name: str, key_serde: Any, value_serde: Any, *,
                           start_timestamp_ms: int = 0, auto_advance_ms: int = 0) -> "TestInputTopic":
        self._check_open()
        self._check_input_topic(name)
        return TestInputTopic(self, name, key_serde, value_serde, start_timestamp_ms, auto_advance_ms)

    def create_output_topic(self, name: str, key_serde: Any, value_serde: Any) -> "TestOutputTopic":
        self._check_open()
        return TestOutputTopic(self, name, key_serde, value_serde)

    def producer_history(self, topic: Optional[str] = None) -> list[ProducerRecord]:
        """Everything produced so far (outputs, repartition and changelog topics), in order."""
        hist = self._collector.history
        return list(hist) if topic is None else [r for r in hist if r.topic == topic]

    def changelog_topic(self, store_name: str) -> str:
        return changelog_topic_name(self.application_id, store_name)

    def metrics(self) -> list:
        """Kafka Streams' metrics of the driver's tasks (streams.metrics.Metric list)."""
        return self._metrics.metrics()

    # ---- stores ---------------------------------------------------------------------------

    def get_all_state_stores(self) -> dict[str, Any]:
        return {**{name: engine.stores[name] for name, engine in self._store_owner.items()}, **self._global_stores}

    def get_state_store(self, name: str) -> Any:
        """Store `name` of a task or a global store (Kafka's driver gives both)."""
        self._check_open()
        if name in self._global_stores:
            return self._global_stores[name]
        engine = self._store_owner.get(name)
        if engine is None:
            raise StoreAccessError(
                f"unknown state store {name!r}; stores are {sorted({*self._store_owner, *self._global_stores})}")
        return engine.stores[name]

    def _typed_store(self, name: str, kind: str, methods: tuple[str, ...]) -> Any:
        store = self.get_state_store(name)
        builder_kind = getattr(self.topology.store_builder(name), "kind", None)
        if builder_kind is not None:
            ok = builder_kind == kind
        else:
            ok = all(callable(getattr(store, m, None)) for m in methods)
        if not ok:
            raise StoreAccessError(
                f"state store {name!r} is a {builder_kind or type(store).__name__} store, not a {kind} store")
        return store

    def get_key_value_store(self, name: str) -> Any:
        """The typed key-value store `name` (keys and values through the store's serdes); a
        timestamped store (a DSL table's) shows plain values, read-only (Kafka's facade)."""
        store = self._typed_store(name, "key_value", ("get", "put", "range", "all", "delete"))
        if isinstance(store, TimestampedKeyValueStore):
            return read_only_view(store, name)
        return store

    def get_timestamped_key_value_store(self, name: str) -> Any:
        """The key-value store `name` as a read-only view whose `get(key)` is a ValueAndTimestamp."""
        store = self._typed_store(name, "key_value", ("get", "put", "range", "all", "delete"))
        return read_only_view(store, name, timestamped=True)

    def get_window_store(self, name: str) -> Any:
        """The window store `name` as a read-only view (state/readonly.py): plain values, also of
        a DSL aggregation's timestamped window store."""
        return read_only_view(self._typed_store(name, "window", ("fetch", "put", "fetch_all")), name)

    def get_timestamped_window_store(self, name: str) -> Any:
        """The window store `name` as a read-only view of ValueAndTimestamp values (Kafka's
        getTimestampedWindowStore): what a DSL windowed aggregation stores, with its timestamp."""
        return read_only_view(self._typed_store(name, "window", ("fetch", "put", "fetch_all")), name,
                              timestamped=True)

    def get_session_store(self, name: str) -> Any:
        """The session store `name` as a read-only view (state/readonly.py)."""
        return read_only_view(self._typed_store(name, "session", ("find_sessions", "put", "remove")), name)

    # ---- lifecycle ------------------------------------------------------------------------

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        first_error: Optional[BaseException] = None
        if len(self._registered) == len(self._engines):
            try:  # like Kafka's driver: a last commit before closing (caches are normally empty)
                self._commit_all()
                self._capture()
            except BaseException as exc:
                first_error = exc
        for engine in self._engines:
            try:
                engine.close(close_stores=False)
            except BaseException as exc:
                first_error = first_error or exc
        for manager in self._registered:
            try:
                close_state_manager(manager, dirty=False)  # flush, checkpoint, close stores, unlock
            except BaseException as exc:
                first_error = first_error or exc
        if self._global_stores:  # initialised: close it cleanly (a checkpoint, as the App's)
            try:
                self._global_task.close(clean=True)
            except BaseException as exc:
                first_error = first_error or exc
        try:
            self._state_directory.close()
        except BaseException as exc:
            first_error = first_error or exc
        if self._tmp_dir is not None:
            shutil.rmtree(self._tmp_dir, ignore_errors=True)
        if first_error is not None:
            raise first_error

    def __enter__(self) -> "TopologyTestDriver":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


class TestInputTopic:
    """Serializes and pipes records into one input topic of a driver."""

    __test__ = False

    def __init__(self, driver: TopologyTestDriver, name: str, key_serde: Any, value_serde: Any,
                 start_timestamp_ms: int, auto_advance_ms: int) -> None:
        self._driver = driver
        self.name = name
        self._ser_key = key_serde.serialize
        self._ser_value = value_serde.serialize
        self._current_time = int(start_timestamp_ms)
        self._advance = int(auto_advance_ms)

    def advance_time(self, ms: int) -> None:
        if ms < 0:
            raise ProcessingError(f"advance_time needs a non-negative duration, got {ms}")
        self._current_time += ms

    def _next_time(self, timestamp: Optional[int]) -> int:
        if timestamp is not None:
            return timestamp
        ts = self._current_time
        self._current_time += self._advance
        return ts

    def pipe_input(self, key: Any, value: Any, timestamp: Optional[int] = None, headers: Any = None) -> None:
        """Pipe one record; without `timestamp` the topic's current time is used (then auto-advanced)."""
        ts = self._next_time(timestamp)
        self._driver.pipe_raw(self.name, self._ser_key(key), self._ser_value(value), ts, headers)

    def pipe_value_list(self, values: Iterable[Any], timestamp: Optional[int] = None) -> None:
        for v in values:
            self.pipe_input(None, v, timestamp)

    def pipe_key_value_list(self, pairs: Iterable[tuple[Any, Any]], timestamp: Optional[int] = None) -> None:
        for k, v in pairs:
            self.pipe_input(k, v, timestamp)

    def pipe_record_list(self, records: Iterable[TestRecord]) -> None:
        for r in records:
            self.pipe_input(r.key, r.value, r.timestamp, r.headers)


class TestOutputTopic:
    """Reads and deserializes what the topology wrote to one topic (each record read once)."""

    __test__ = False

    def __init__(self, driver: TopologyTestDriver, name: str, key_serde: Any, value_serde: Any) -> None:
        self._driver = driver
        self.name = name
        self._de_key = key_serde.deserialize
        self._de_value = value_serde.deserialize

    def _queue(self) -> collections.deque:
        return self._driver._outputs[self.name]

    def read_record(self) -> TestRecord:
        q = self._queue()
        if not q:
            raise EmptyTopicError(f"output topic {self.name!r} is empty")
        r = q.popleft()
        return TestRecord(self._de_key(r.key), self._de_value(r.value), r.timestamp, r.headers)

    def read_value(self) -> Any:
        return self.read_record().value

    def read_key_value(self) -> tuple[Any, Any]:
        r = self.read_record()
        return (r.key, r.value)

    def read_records_to_list(self) -> list[TestRecord]:
        out = []
        while self._queue():
            out.append(self.read_record())
        return out

    def read_values_to_list(self) -> list[Any]:
        return [r.value for r in self.read_records_to_list()]

    def read_key_values_to_list(self) -> list[tuple[Any, Any]]:
        return [(r.key, r.value) for r in self.read_records_to_list()]

    def read_key_values_to_map(self) -> dict[Any, Any]:
        """Latest value per key (as Kafka: a None value is kept as None; None keys are an error)."""
        result: dict[Any, Any] = {}
        for r in self.read_records_to_list():
            if r.key is None:
                raise ProcessingError(
                    f"output topic {self.name!r}: read_key_values_to_map does not allow None keys")
            result[r.key] = r.value
        return result

    def is_empty(self) -> bool:
        return not self._queue()

    def get_queue_size(self) -> int:
        return len(self._queue())
