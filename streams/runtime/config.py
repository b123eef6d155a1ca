"""The App's configuration: Kafka Streams' keys and defaults, validated once at App creation."""

from __future__ import annotations

import logging
import os
import tempfile
from dataclasses import dataclass
from typing import Any, Mapping, Optional

from state.restore import MAX_POLL_RECORDS as RESTORE_MAX_POLL_RECORDS
from state.rocksdb_config import config_setter_class
from state.stores import WINDOW_CHANGELOG_ADDITIONAL_RETENTION_MS
from streams.backends import STREAMS_CONFIG_KEYS, TOPIC_PREFIX
from streams.client_scopes import CONSUMER_PREFIX
from streams.runtime.streams_metadata import parse_application_server
from streams.dsl.naming import ensure_explicit_naming
from streams.dsl.store_suppliers import check_app_configs as check_dsl_store_configs
from streams.errors import ConfigError
from streams.engine.processing_errors import processing_handler_from_config
from streams.optimizations import topology_optimizations
from streams.processor import default_timestamp_extractor
from streams.unsupported_configs import unsupported_configs
from streams.runtime.collector import production_handler_from_config
from streams.serdes import deserialization_handler_from_config

log = logging.getLogger(__name__)

AT_LEAST_ONCE = "at_least_once"
EXACTLY_ONCE_V2 = "exactly_once_v2"
_GUARANTEES = (AT_LEAST_ONCE, EXACTLY_ONCE_V2)

#: Keys this module consumes that must never reach a client (prefixes for per-client settings
#: of the main, restore and global consumers, as Kafka Streams' main.consumer. / restore.consumer. /
#: global.consumer.).
MAIN_CONSUMER_PREFIX = "main.consumer."
RESTORE_CONSUMER_PREFIX = "restore.consumer."
GLOBAL_CONSUMER_PREFIX = "global.consumer."
#: The App's snapshot settings (streams.runtime.snapshots), never a client's.
SNAPSHOT_PREFIX = "snapshot."

#: buffered.records.per.partition's default: 10 times Kafka's 1000. Kafka's consumer keeps what
#: it prefetched for a partition while it is paused (KAFKA-7548), so Kafka Streams can pause at
#: 1000 for free. librdkafka drops it (librdkafka#5343) and the embedded consumer does as
#: librdkafka does: every pause is a fetch again, and the task waits for it. Tasks reading two
#: inputs in time order (joins) paused over and over at 1000: on a real broker the
#: stream-stream join ran 2.9x faster at 10,000 (bench/dsl_kafka.py). Setting it still bounds
#: a partition's buffer at any value.
DEFAULT_BUFFERED_RECORDS_PER_PARTITION = 10_000

#: input.buffer.max.bytes' default (KIP-770's): 512 MiB of buffered records' key and value bytes
#: for the whole App instance, shared evenly by its stream threads. With 10,000 records a
#: partition, the record bound alone would let large records take any amount of memory.
DEFAULT_INPUT_BUFFER_MAX_BYTES = 512 * 1024 * 1024

#: max.poll.records unless set: the most records one poll brings. Kafka Streams sets 1000 for all
#: its consumers (the Java consumer's own default is 500); the restore and global consumers keep
#: that. The main consumer polls 5000: a stream thread processes what one poll brings before it
#: polls again, and smaller polls make more, shorter runs through the tasks. At 1000,
#: bench/windowed.py (A/B in one session) used about 5% more stream-thread CPU for word count, 8%
#: for the stream-table join and 15% for the stream-stream join, and the same for the table
#: aggregation. The thread hands the count to consume(); no form of the key reaches a client.
#: (The changelog reader's own default, which the restore consumer's setting overrides, is the
#: same 1000.)
DEFAULT_MAX_POLL_RECORDS = RESTORE_MAX_POLL_RECORDS
MAIN_MAX_POLL_RECORDS = 5000
MAX_POLL_RECORDS_CONFIG = "max.poll.records"


def default_state_dir() -> str:
    """Kafka's `${java.io.tmpdir}/kafka-streams`, named for Eddy."""
    return os.path.join(tempfile.gettempdir(), "eddy-streams")


def _int(config: Mapping[str, Any], key: str, default: int, minimum: int) -> int:
    value = config.get(key, default)
    if isinstance(value, str) and value.strip().lstrip("-").isdigit():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ConfigError(f"config {key!r} must be an int >= {minimum}, got {value!r}")
    return value


def _topic_value(key: str, value: Any) -> str:
    """A `topic.` config's value as a topic config string (Kafka's originalsWithPrefix values
    turned to strings); only a scalar is one."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (str, int, float)) and len(key) > len(TOPIC_PREFIX):
        return str(value)
    raise ConfigError(f"config {key!r} must name a topic config and give it a string or number, got {value!r}")


#: Kafka's default statestore.cache.max.bytes (10 MiB)
DEFAULT_CACHE_MAX_BYTES = 10 * 1024 * 1024


def cache_max_bytes(raw: Mapping[str, Any]) -> int:
    """statestore.cache.max.bytes, or its deprecated name cache.max.bytes.buffering, or the default."""
    key = "statestore.cache.max.bytes" if "statestore.cache.max.bytes" in raw else "cache.max.bytes.buffering"
    return _int(raw, key, DEFAULT_CACHE_MAX_BYTES, 0)


def max_poll_records(raw: Mapping[str, Any], prefix: str, default: int) -> int:
    """max.poll.records of the consumer `prefix` names (main.consumer., ...): its prefixed
    setting, else consumer.max.poll.records, else max.poll.records (Kafka Streams' precedence),
    else `default`."""
    for key in (prefix + MAX_POLL_RECORDS_CONFIG, CONSUMER_PREFIX + MAX_POLL_RECORDS_CONFIG, MAX_POLL_RECORDS_CONFIG):
        if key in raw:
            return _int(raw, key, default, 1)
    return default


def _legal_name(value: Any) -> bool:
    """Kafka's rule for a topic-like name (an application.id, a group.instance.id): a string of
    1-249 characters of [a-zA-Z0-9._-]."""
    return isinstance(value, str) and 1 <= len(value) <= 249 and all(
        (c.isalnum() and c.isascii()) or c in "._-" for c in value)


GROUP_INSTANCE_ID_CONFIG = "group.instance.id"
#: where an app config may set it, lowest precedence first (Kafka Streams': the plain key, the
#: consumers' prefix, the main consumer's prefix)
_INSTANCE_ID_KEYS = (GROUP_INSTANCE_ID_CONFIG, CONSUMER_PREFIX + GROUP_INSTANCE_ID_CONFIG,
                     MAIN_CONSUMER_PREFIX + GROUP_INSTANCE_ID_CONFIG)


def group_instance_id(raw: Mapping[str, Any]) -> Optional[str]:
    """The app's group.instance.id (static membership, KIP-345) by Kafka Streams' precedence
    (_INSTANCE_ID_KEYS), None when unset; ConfigError unless 1-249 characters of [a-zA-Z0-9._-]
    (Kafka's JoinGroupRequest.validateGroupInstanceId, which its consumer applies at start)."""
    for key in reversed(_INSTANCE_ID_KEYS):
        if key in raw:
            value = raw[key]
            if not _legal_name(value):
                raise ConfigError(f"config {key!r} (this instance's static membership id) must be 1-249 "
                                  f"characters of [a-zA-Z0-9._-], got {value!r}")
            return value
    return None


@dataclass(frozen=True)
class StreamsConfig:
    """The parsed streams-level settings; `raw` keeps everything (serdes, client settings...)."""

    raw: dict
    application_id: str
    bootstrap_servers: str
    state_dir: str
    processing_guarantee: str
    commit_interval_ms: int
    num_stream_threads: int
    num_standby_replicas: int
    cache_max_bytes: int
    poll_ms: int
    replication_factor: int
    #: KIP-695: how long a task with an empty input partition waits (PartitionGroup.ready_to_process).
    max_task_idle_ms: int
    #: a partition buffering more is paused on the main consumer until drained (TaskManager);
    #: DEFAULT_BUFFERED_RECORDS_PER_PARTITION unless set.
    buffered_records_per_partition: int
    #: the records buffered by the tasks of the instance, in key and value bytes: over it, a
    #: thread pauses every partition it buffers records of until its share is drained (TaskManager)
    input_buffer_max_bytes: int
    task_timeout_ms: int
    #: how much longer than its store a windowed store's changelog keeps records (Kafka's default 1 day)
    window_changelog_additional_retention_ms: int
    #: the `topic.`-prefixed configs, without the prefix: every internal topic's (InternalTopicManager)
    internal_topic_configs: dict
    #: the most records one poll of the main, the restore and the global consumer brings
    max_poll_records: int = MAIN_MAX_POLL_RECORDS
    restore_max_poll_records: int = DEFAULT_MAX_POLL_RECORDS
    global_max_poll_records: int = DEFAULT_MAX_POLL_RECORDS
    #: librdkafka's topic.metadata.refresh.interval.ms, which the record collector follows too.
    metadata_refresh_ms: int = 300_000
    #: application.server: where this instance answers interactive queries (streams_metadata)
    application_server: Any = None
    #: group.instance.id (static membership, KIP-345) as the main consumers take it (see
    #: main_consumer_instance_id); None when unset
    group_instance_id: Optional[str] = None

    @property
    def eos_enabled(self) -> bool:
        return self.processing_guarantee == EXACTLY_ONCE_V2

    def thread_shares(self, live_threads: int, global_thread: bool = False) -> tuple[int, int]:
        """One thread's share of statestore.cache.max.bytes and of input.buffer.max.bytes when
        the app runs `live_threads` stream threads: the cache's total over them, plus one when
        the topology has global stores (`global_thread`; Kafka's cacheSizePerThread: the global
        thread's cache takes a share too), the whole of it with no stream thread (the global
        thread alone); the input buffer's total over the stream threads."""
        threads = max(1, live_threads)
        # no stream thread (a topology of global stores only): the global thread has it all
        cache = self.cache_max_bytes if live_threads <= 0 else self.cache_max_bytes // (
            threads + (1 if global_thread else 0))
        return max(1, cache), self.input_buffer_max_bytes // threads

    @classmethod
    def parse(cls, config: Mapping[str, Any], *, require_bootstrap_servers: bool = True) -> "StreamsConfig":
        """Validate `config`; `require_bootstrap_servers=False` is for the TopologyTestDriver, which
        talks to no cluster (a missing key then parses as ""; a present one is still checked)."""
        if not isinstance(config, Mapping):
            raise ConfigError(f"App config must be a dict, got {type(config).__name__}")
        raw = dict(config)
        app_id = raw.get("application.id")
        if app_id is None:
            raise ConfigError("config 'application.id' is required: it names the consumer group, "
                              "the internal topics and the state directory")
        if not _legal_name(app_id):
            raise ConfigError(f"config 'application.id' must be 1-249 characters of [a-zA-Z0-9._-], got {app_id!r}")
        servers = raw.get("bootstrap.servers")
        if servers is None and not require_bootstrap_servers:
            servers = ""
        elif not isinstance(servers, str) or not servers.strip():
            raise ConfigError("config 'bootstrap.servers' is required: 'host:port' for Kafka or "
                              "'local:///path/to/dir' for the embedded cluster")
        guarantee = raw.get("processing.guarantee", AT_LEAST_ONCE)
        if guarantee == "exactly_once":
            raise ConfigError("config 'processing.guarantee': 'exactly_once' (v1) is not supported, "
                              "use 'exactly_once_v2'")
        if guarantee not in _GUARANTEES:
            raise ConfigError(f"config 'processing.guarantee' must be one of {_GUARANTEES}, got {guarantee!r}")
        eos = guarantee == EXACTLY_ONCE_V2
        state_dir = raw.get("state.dir") or default_state_dir()
        if not isinstance(state_dir, (str, os.PathLike)):
            raise ConfigError(f"config 'state.dir' must be a path, got {state_dir!r}")
        topology_optimizations(raw)  # checked here; Topology.bind_config says what was not applied
        try:
            config_setter_class(raw)  # each RocksDB store instantiates it when it opens
        except ValueError as exc:
            raise ConfigError(str(exc)) from None
        default_timestamp_extractor(raw)  # checked here (ConfigError); each task makes its own
        deserialization_handler_from_config(raw)  # the handlers too, a ConfigError naming the key set
        production_handler_from_config(raw)
        processing_handler_from_config(raw)
        check_dsl_store_configs(raw)  # the topology takes the app's store type when it binds (Topology.bind_config)
        ensure_explicit_naming(raw)  # checked here; only a StreamsBuilder's applies (Topology.bind_config says so)
        unsupported_configs(raw)
        return cls(
            raw=raw,
            application_id=app_id,
            bootstrap_servers=servers.strip(),
            state_dir=os.fspath(state_dir),
            processing_guarantee=guarantee,
            commit_interval_ms=_int(raw, "commit.interval.ms", 100 if eos else 30_000, 0),
            num_stream_threads=_int(raw, "num.stream.threads", 1, 1),
            num_standby_replicas=_int(raw, "num.standby.replicas", 0, 0),
            cache_max_bytes=cache_max_bytes(raw),
            poll_ms=_int(raw, "poll.ms", 100, 0),
            replication_factor=_int(raw, "replication.factor", -1, -1),
            max_task_idle_ms=_int(raw, "max.task.idle.ms", 0, -1),
            buffered_records_per_partition=_int(raw, "buffered.records.per.partition",
                                                DEFAULT_BUFFERED_RECORDS_PER_PARTITION, 1),
            input_buffer_max_bytes=_int(raw, "input.buffer.max.bytes", DEFAULT_INPUT_BUFFER_MAX_BYTES, 0),
            task_timeout_ms=_int(raw, "task.timeout.ms", 300_000, 0),
            window_changelog_additional_retention_ms=_int(raw, "windowstore.changelog.additional.retention.ms",
                                                          WINDOW_CHANGELOG_ADDITIONAL_RETENTION_MS, 0),
            internal_topic_configs={k[len(TOPIC_PREFIX):]: _topic_value(k, v) for k, v in raw.items()
                                    if k.startswith(TOPIC_PREFIX)},
            max_poll_records=max_poll_records(raw, MAIN_CONSUMER_PREFIX, MAIN_MAX_POLL_RECORDS),
            restore_max_poll_records=max_poll_records(raw, RESTORE_CONSUMER_PREFIX, DEFAULT_MAX_POLL_RECORDS),
            global_max_poll_records=max_poll_records(raw, GLOBAL_CONSUMER_PREFIX, DEFAULT_MAX_POLL_RECORDS),
            metadata_refresh_ms=_int(raw, "topic.metadata.refresh.interval.ms", 300_000, 0),
            application_server=parse_application_server(raw),
            group_instance_id=group_instance_id(raw),
        )

    def backend_config(self) -> dict:
        """The config handed to `streams.backends.for_config` (runtime-only prefixes removed, and
        group.instance.id, which only the main consumers get: main_consumer_instance_id)."""
        return {k: v for k, v in self.raw.items()
                if not k.startswith((MAIN_CONSUMER_PREFIX, RESTORE_CONSUMER_PREFIX, GLOBAL_CONSUMER_PREFIX,
                                     SNAPSHOT_PREFIX)) and k not in _INSTANCE_ID_KEYS}

    def main_consumer_instance_id(self, thread_index: int) -> Optional[str]:
        """The group.instance.id of stream thread `thread_index`'s main consumer: the app's with
        the thread's index appended, so that each of its consumers is a distinct static member
        (Kafka's StreamsConfig.getMainConsumerConfigs); None without static membership."""
        if self.group_instance_id is None:
            return None
        return f"{self.group_instance_id}-{thread_index}"

    def prefixed(self, prefix: str) -> dict:
        return {k[len(prefix):]: v for k, v in self.raw.items() if k.startswith(prefix)}

    def consumer_overrides(self, prefix: str) -> dict:
        """The settings `prefix` (main.consumer., restore.consumer., global.consumer.) gives one
        consumer, without Kafka Streams' own keys (STREAMS_CONFIG_KEYS, max.poll.records among
        them: the thread's poll size, not the client's) and without group.instance.id (the
        restore and global consumers join no group; a main consumer's is
        main_consumer_instance_id)."""
        return {k: v for k, v in self.prefixed(prefix).items()
                if k not in STREAMS_CONFIG_KEYS and k != GROUP_INSTANCE_ID_CONFIG}

    def task_config(self) -> dict:
        """The config tasks and stores see (with the resolved state.dir)."""
        return {**self.raw, "state.dir": self.state_dir}
