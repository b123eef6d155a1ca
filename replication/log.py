"""One partition replica's log on disk: Kafka's UnifiedLog + LocalLog (rules 1-10).

Layout of a log directory ``<data dir>/<topic>-<partition>/``::

    00000000000000000000.log        batches, Kafka v2 format, back to back
    00000000000000000000.index      offset index  (relative offset i32, position i32)
    00000000000000000000.timeindex  time index    (timestamp i64, relative offset i32)
    leader-epoch-checkpoint         the leader epoch cache (replication.epoch)
    log-state-checkpoint            recovery point, log start offset, high watermark

Public API (all thread-safe; offsets are ints)
-----------------------------------------------
``Log(dir, config=None, *, clock=None, rng=None)``  open or create; recovers on open. Every
  open also cuts bytes that do not parse after the active segment's last batch, and
  cross-checks the leader epoch cache with the batch headers (rebuilt when they disagree).
  ``config`` is a :class:`LogConfig` or a dict of Kafka keys (``LogConfig.from_dict``).
Properties: ``log_start_offset``, ``log_end_offset``, ``high_watermark``,
  ``last_stable_offset``, ``recovery_point``, ``latest_epoch``, ``leader_epoch_cache``
  (alias ``epoch_cache``), ``segments``, ``active_segment``, ``size``, ``closed``,
  ``topic``, ``partition``, ``load_stats``, ``first_unstable_offset`` (settable).
``append_as_leader(records, leader_epoch, *, now=None) -> LogAppendInfo``   (rule 1)
``append_as_follower(records, *, now=None) -> LogAppendInfo``              (rule 2)
``read(start_offset, max_bytes=1 MiB, upper_bound=None, *, min_one_message=True)
  -> FetchDataInfo`` (a MemoryRecords; ``upper_bound`` an offset or FetchIsolation; rule 5)
``fetch_offset_by_timestamp(ts) -> (timestamp, offset) | None``  (-2 earliest, -1 latest, -3 max)
``end_offset_for_epoch(epoch) -> (epoch, end_offset) | None``
``update_high_watermark(hw) -> int``, ``maybe_increment_high_watermark(hw) -> old | None``,
  ``maybe_update_high_watermark(hw) -> new | None``                         (rule 6)
``maybe_increment_log_start_offset(offset, reason="") -> bool``             (rule 7)
``delete_records(offset) -> new log start``, ``delete_old_segments(now=None) -> int``
``truncate_to(offset) -> bool`` (rule 8), ``truncate_fully_and_start_at(offset, log_start_offset=None)``
``roll(expected_next_offset=None) -> LogSegment``
``flush(offset=None)``, ``maybe_flush(now=None) -> bool``, ``write_checkpoint()``
``update_config(config)``, ``close()``, ``crash()`` (power-cut simulation), ``delete()``

API used by the log cleaner (replication.cleaner)
-------------------------------------------------
``log.lock``                 an ``RLock``; hold it while reading ``log.segments`` and swapping.
``log.segments``             list of :class:`~replication.segment.LogSegment`, ordered by base offset
                             (a snapshot copy); ``log.active_segment`` is the last one.
``log.config``               the :class:`LogConfig` (``cleanup_policy``, ``delete_retention_ms``,
                             ``min_compaction_lag_ms``, ``segment_bytes``...).
``log.dir``                  the partition directory.
``log.first_unstable_offset`` settable (transactions); None means no open transaction.
``log.new_cleaned_segment(base_offset) -> LogSegment``
                             an empty segment whose files carry the ``.cleaned`` suffix
                             (``<base>.log.cleaned``, ``.index.cleaned``, ``.timeindex.cleaned``).
                             Fill it with ``segment.append(data)`` (whole batches, offsets
                             preserved, strictly increasing).
``log.replace_segments(new_segments, old_segments)``
                             atomically swap a run of *closed* (non-active) segments for cleaned
                             ones, Kafka's protocol: flush the new segments, rename their files
                             ``.cleaned`` -> ``.swap`` (highest base first), delete the old
                             segments, rename ``.swap`` -> live. On open, ``.cleaned`` files are
                             deleted, and ``.swap`` files are completed (old segments overlapping
                             the swap's offsets deleted, swap renamed live) unless a ``.cleaned``
                             file with a lower base remains (then the swap is rolled back).
``segment.base_offset``, ``segment.size``, ``segment.next_offset`` (offset after its last batch),
``segment.largest_timestamp``, ``segment.log_path``, ``segment.read_bytes(position, size)``,
``segment.batches(start_position=0)`` (iterator of BatchHeader, no record decoding).
"""

from __future__ import annotations

import enum
import logging
import os
import random
import shutil
import struct
import threading
import time
from bisect import bisect_right
from dataclasses import dataclass
from typing import Callable, Iterable, Mapping

from eddy.config_values import parse_bool

from replication.epoch import (
    CHECKPOINT_FILE_NAME, EpochEntry, LeaderEpochFileCache, write_checkpoint_atomically,
)
from replication.errors import (
    CorruptIndexError, CorruptRecordError, IllegalStateError, InvalidConfigurationError,
    InvalidOffsetError, KafkaStorageError, LogClosedError, OffsetOutOfRangeError,
    OffsetsOutOfOrderError, RecordBatchTooLargeError, RecordTooLargeError, RecordValidationError,
    TruncationLoopError, UnexpectedAppendOffsetError,
)
from replication.records import BatchHeader, MemoryRecords, iter_batch_headers, null_key_indexes
from replication.producer_state import ProducerStateManager
from replication.segment import (
    CLEANED_SUFFIX, DELETED_SUFFIX, INDEX_SUFFIX, LOG_SUFFIX, SWAP_SUFFIX, TIME_INDEX_SUFFIX,
    LogSegment, log_file_name, offset_from_file_name,
)

try:  # names.py validates Kafka topic names; the directory must be `<topic>-<partition>`.
    from replication.names import parse_partition_dir_name
except ImportError:  # pragma: no cover
    parse_partition_dir_name = None

log = logging.getLogger(__name__)

__all__ = [
    "Log", "LogConfig", "LogAppendInfo", "FetchDataInfo", "FetchIsolation",
    "STATE_CHECKPOINT_FILE", "EARLIEST_TIMESTAMP", "LATEST_TIMESTAMP", "MAX_TIMESTAMP",
]

LONG_MAX = 2**63 - 1
STATE_CHECKPOINT_FILE = "log-state-checkpoint"
STATE_CHECKPOINT_VERSION = 0
EARLIEST_TIMESTAMP = -2
LATEST_TIMESTAMP = -1
MAX_TIMESTAMP = -3
_DAY_MS = 24 * 60 * 60 * 1000

# base_offset i64 | batch_length i32 | partition_leader_epoch i32: the 16 header bytes a
# leader append rewrites (the CRC starts after them).
_STAMP = struct.Struct(">qii")
_STAMPED = 16
# The same truncation below the high watermark this many times in a row is a loop.
TRUNCATION_LOOP_LIMIT = 3


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


# --- configuration -----------------------------------------------------------------------------


def _parse_int(key: str, value: object) -> int:
    if isinstance(value, bool):
        raise InvalidConfigurationError(f"{key} must be an integer, got {value!r}", key=key)
    if isinstance(value, int):
        return value
    if isinstance(value, str):
        text = value.strip()
        body = text[1:] if text[:1] in "+-" else text
        if body.isascii() and body.isdigit():
            return int(text)
    raise InvalidConfigurationError(f"{key} must be an integer, got {value!r}", key=key)


def _parse_float(key: str, value: object) -> float:
    if isinstance(value, bool):
        raise InvalidConfigurationError(f"{key} must be a number, got {value!r}", key=key)
    try:
        return float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise InvalidConfigurationError(f"{key} must be a number, got {value!r}", key=key) from None


def _parse_bool(key: str, value: object) -> bool:
    parsed = parse_bool(value)
    if parsed is not None:
        return parsed
    raise InvalidConfigurationError(f"{key} must be true or false, got {value!r}", key=key)


def _parse_policy(key: str, value: object) -> tuple[str, ...]:
    if isinstance(value, str):
        items = [v.strip() for v in value.split(",") if v.strip()]
    elif isinstance(value, (list, tuple, set, frozenset)):
        items = [str(v).strip() for v in value]
    else:
        raise InvalidConfigurationError(f"{key} must be a list of delete/compact, got {value!r}",
                                        key=key)
    for item in items:
        if item not in ("delete", "compact"):
            raise InvalidConfigurationError(
                f"{key}: invalid value {item!r} (valid values: delete, compact)", key=key)
    return tuple(sorted(set(items)))


def _parse_choice(choices: tuple[str, ...]):
    def parse(key: str, value: object) -> str:
        if not isinstance(value, str) or value not in choices:
            raise InvalidConfigurationError(
                f"{key}: invalid value {value!r} (valid values: {', '.join(choices)})", key=key)
        return value
    return parse


# Kafka key -> (field name, parser, minimum or None, maximum or None)
_KEYS: dict[str, tuple[str, Callable, object, object]] = {
    "segment.bytes": ("segment_bytes", _parse_int, 14, 2**31 - 1),
    "segment.ms": ("segment_ms", _parse_int, 1, None),
    "segment.jitter.ms": ("segment_jitter_ms", _parse_int, 0, None),
    "segment.index.bytes": ("segment_index_bytes", _parse_int, 12, 2**31 - 1),
    "index.interval.bytes": ("index_interval_bytes", _parse_int, 0, 2**31 - 1),
    "retention.ms": ("retention_ms", _parse_int, -1, None),
    "retention.bytes": ("retention_bytes", _parse_int, None, None),
    "flush.messages": ("flush_messages", _parse_int, 1, None),
    "flush.ms": ("flush_ms", _parse_int, 0, None),
    "cleanup.policy": ("cleanup_policy", _parse_policy, None, None),
    "delete.retention.ms": ("delete_retention_ms", _parse_int, 0, None),
    "min.compaction.lag.ms": ("min_compaction_lag_ms", _parse_int, 0, None),
    "max.compaction.lag.ms": ("max_compaction_lag_ms", _parse_int, 1, None),
    "min.cleanable.dirty.ratio": ("min_cleanable_dirty_ratio", _parse_float, 0.0, 1.0),
    "max.message.bytes": ("max_message_bytes", _parse_int, 0, None),
    "file.delete.delay.ms": ("file_delete_delay_ms", _parse_int, 0, None),
    "min.insync.replicas": ("min_insync_replicas", _parse_int, 1, None),
    "unclean.leader.election.enable": ("unclean_leader_election_enable", _parse_bool, None, None),
    "message.timestamp.type": ("message_timestamp_type",
                               _parse_choice(("CreateTime", "LogAppendTime")), None, None),
    "compression.type": ("compression_type", _parse_choice(("producer", "uncompressed")),
                         None, None),
}


@dataclass(frozen=True)
class LogConfig:
    """Per-topic log configuration with Kafka's keys and defaults.

    Build it with :meth:`from_dict` from Kafka-named keys (``"segment.bytes"``...); values may
    be ints or strings. A bad value raises InvalidConfigurationError naming the key.
    """

    segment_bytes: int = 1024 * 1024 * 1024
    segment_ms: int = 7 * _DAY_MS
    segment_jitter_ms: int = 0
    segment_index_bytes: int = 10 * 1024 * 1024
    index_interval_bytes: int = 4096
    retention_ms: int = 7 * _DAY_MS
    retention_bytes: int = -1
    flush_messages: int = LONG_MAX
    flush_ms: int = LONG_MAX
    cleanup_policy: tuple[str, ...] = ("delete",)
    delete_retention_ms: int = _DAY_MS
    min_compaction_lag_ms: int = 0
    max_compaction_lag_ms: int = LONG_MAX
    min_cleanable_dirty_ratio: float = 0.5
    max_message_bytes: int = 1024 * 1024 + 12
    file_delete_delay_ms: int = 60_000
    min_insync_replicas: int = 1
    unclean_leader_election_enable: bool = False
    message_timestamp_type: str = "CreateTime"
    compression_type: str = "producer"

    def __post_init__(self) -> None:
        for key, (name, parse, lo, hi) in _KEYS.items():
            value = parse(key, getattr(self, name))
            if lo is not None and value < lo:
                raise InvalidConfigurationError(f"{key} must be at least {lo}, got {value}", key=key)
            if hi is not None and value > hi:
                raise InvalidConfigurationError(f"{key} must be at most {hi}, got {value}", key=key)
            object.__setattr__(self, name, value)

    @classmethod
    def from_dict(cls, config: Mapping[str, object] | None = None, *,
                  strict: bool = False) -> "LogConfig":
        """From Kafka-named keys. Keys that are not log configs are ignored (broker configs are
        often passed along) unless ``strict``, which rejects them naming the key."""
        kwargs = {}
        for key, value in (config or {}).items():
            spec = _KEYS.get(key)
            if spec is None:
                if strict:
                    raise InvalidConfigurationError(f"unknown topic config name {key!r}", key=key)
                continue
            kwargs[spec[0]] = value
        return cls(**kwargs)

    def with_overrides(self, config: Mapping[str, object]) -> "LogConfig":
        merged = self.to_dict()
        merged.update(config)
        return LogConfig.from_dict(merged)

    def to_dict(self) -> dict[str, object]:
        out: dict[str, object] = {}
        for key, (name, *_rest) in _KEYS.items():
            value = getattr(self, name)
            out[key] = ",".join(value) if name == "cleanup_policy" else value
        return out

    @property
    def compact(self) -> bool:
        return "compact" in self.cleanup_policy

    @property
    def delete(self) -> bool:
        return "delete" in self.cleanup_policy

    def random_segment_jitter(self, rng: random.Random) -> int:
        """Kafka: a per-segment jitter in [0, min(segment.jitter.ms, segment.ms))."""
        if self.segment_jitter_ms == 0:
            return 0
        return rng.randrange(min(self.segment_jitter_ms, self.segment_ms))


# --- results -----------------------------------------------------------------------------------


class FetchIsolation(enum.Enum):
    """How far a read may go (rule 5): followers to the LEO, consumers to the HW
    (read_uncommitted) or the last stable offset (read_committed)."""

    LOG_END = "log_end"
    HIGH_WATERMARK = "high_watermark"
    TXN_COMMITTED = "txn_committed"


class FetchDataInfo(MemoryRecords):
    """A read's result: whole batches (a `MemoryRecords`) plus where they came from."""

    __slots__ = ("fetch_offset", "segment_base_offset", "position", "first_entry_incomplete")

    def __init__(self, buffer: bytes, fetch_offset: int, segment_base_offset: int = -1,
                 position: int = -1, first_entry_incomplete: bool = False, source: str = "") -> None:
        super().__init__(buffer, None, source)
        self.fetch_offset = fetch_offset
        self.segment_base_offset = segment_base_offset
        self.position = position
        self.first_entry_incomplete = first_entry_incomplete

    def __repr__(self) -> str:
        return (f"FetchDataInfo(fetch_offset={self.fetch_offset}, {len(self.buffer)} bytes, "
                f"segment={self.segment_base_offset}, position={self.position})")


class LogAppendInfo:
    """What an append did. ``records`` are the bytes as written (offsets and epoch stamped);
    for a leader append they are joined from the written pieces on first access."""

    __slots__ = ("first_offset", "last_offset", "max_timestamp", "offset_of_max_timestamp",
                 "num_messages", "valid_bytes", "log_start_offset", "leader_epoch", "batches",
                 "rolled", "_records")

    def __init__(self, first_offset: int, last_offset: int, max_timestamp: int = -1,
                 offset_of_max_timestamp: int = -1, num_messages: int = 0, valid_bytes: int = 0,
                 log_start_offset: int = 0, leader_epoch: int = -1, records=b"",
                 batches: list | None = None, rolled: bool = False) -> None:
        self.first_offset = first_offset
        self.last_offset = last_offset
        self.max_timestamp = max_timestamp
        self.offset_of_max_timestamp = offset_of_max_timestamp
        self.num_messages = num_messages
        self.valid_bytes = valid_bytes
        self.log_start_offset = log_start_offset
        self.leader_epoch = leader_epoch
        self._records = records
        self.batches = batches if batches is not None else []
        self.rolled = rolled

    @property
    def records(self) -> bytes:
        r = self._records
        if isinstance(r, list):
            r = self._records = b"".join(r)
        return r

    @property
    def next_offset(self) -> int:
        return self.last_offset + 1

    def __repr__(self) -> str:
        return (f"LogAppendInfo(first_offset={self.first_offset}, last_offset={self.last_offset}, "
                f"num_messages={self.num_messages}, valid_bytes={self.valid_bytes}, "
                f"leader_epoch={self.leader_epoch}, rolled={self.rolled})")


# --- the log -----------------------------------------------------------------------------------


class Log:
    """One partition replica's log (see the module docstring for files and cleaner API).

    Open it with ``Log(dir, config)``: the directory (``<topic>-<partition>``) is created if
    missing, otherwise loaded and recovered. Thread-safe: every public method holds ``lock``.
    """

    def __init__(self, dir: str | os.PathLike, config: LogConfig | Mapping[str, object] | None = None,
                 *, clock: Callable[[], int] | None = None, rng: random.Random | None = None) -> None:
        self.dir = os.fspath(dir)
        name = os.path.basename(os.path.normpath(self.dir))
        if parse_partition_dir_name is not None:
            self.topic, self.partition = parse_partition_dir_name(name)
        else:  # pragma: no cover
            self.topic, _, part = name.rpartition("-")
            self.partition = int(part)
        if config is None:
            config = LogConfig()
        elif not isinstance(config, LogConfig):
            config = LogConfig.from_dict(config)
        self.config: LogConfig = config
        self._clock = clock or _now_ms
        self._rng = rng or random.Random()
        self.lock = threading.RLock()
        self._segments: list[LogSegment] = []
        self._bases: list[int] = []
        self._positions: dict[int, tuple[int, int]] = {}  # read bound offset -> (segment, position)
        self._closed = False
        self.first_unstable_offset: int | None = None
        # (offset, times in a row) of truncations below the HW, and whether a loop was reported.
        self._below_hw_truncations = (-1, 0)
        self._truncation_loop_reported = False
        #: What opening the log did: {"recovered_segments": [...], "bytes_truncated": n,
        #: "rebuilt_indexes": [...], "clean_shutdown": bool, "tail_bytes_dropped": n (garbage
        #: cut after the active segment's last batch), "epoch_cache_rebuilt": bool}
        self.load_stats: dict[str, object] = {}
        try:
            os.makedirs(self.dir, exist_ok=True)
            self.leader_epoch_cache = LeaderEpochFileCache(os.path.join(self.dir, CHECKPOINT_FILE_NAME))
            #: Producer ids, sequences, open transactions and the aborted transactions index.
            self.producer_state = ProducerStateManager(self.dir)
            self._load()
            self.producer_state.load(self)
        except OSError as e:
            for seg in self._segments:
                seg.close()
            raise KafkaStorageError(f"cannot open log {self.dir}: {e}") from e
        self.first_unstable_offset = self.producer_state.first_unstable_offset()
        self._last_flush_ms = self._clock()

    # -- properties ---------------------------------------------------------------------------

    @property
    def epoch_cache(self) -> LeaderEpochFileCache:
        return self.leader_epoch_cache

    @property
    def log_end_offset(self) -> int:
        return self._leo

    @property
    def high_watermark(self) -> int:
        return self._hw

    @property
    def log_start_offset(self) -> int:
        return self._log_start

    @property
    def recovery_point(self) -> int:
        return self._recovery_point

    @property
    def last_stable_offset(self) -> int:
        """min(first unstable offset, HW); the HW when no transaction is open."""
        fu = self.first_unstable_offset
        hw = self._hw
        ps = self.producer_state
        if ps.unreplicated:  # completed transactions are stable once their marker is below the HW
            u = ps.first_unreplicated_offset(hw)
            if u is not None and (fu is None or u < fu):
                fu = u
        return fu if fu is not None and fu < hw else hw

    def aborted_transactions(self, start_offset: int, upper_offset: int) -> list:
        """Aborted transactions overlapping [start_offset, upper_offset) (read_committed)."""
        with self.lock:
            return self.producer_state.aborted_transactions(start_offset, upper_offset)

    @property
    def latest_epoch(self) -> int | None:
        return self.leader_epoch_cache.latest_epoch

    @property
    def segments(self) -> list[LogSegment]:
        with self.lock:
            return list(self._segments)

    @property
    def active_segment(self) -> LogSegment:
        return self._segments[-1]

    @property
    def num_segments(self) -> int:
        return len(self._segments)

    @property
    def size(self) -> int:
        with self.lock:
            return sum(s.size for s in self._segments)

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def name(self) -> str:
        return f"{self.topic}-{self.partition}"

    def __repr__(self) -> str:
        return (f"Log({self.dir!r}, log_start={self._log_start}, hw={self._hw}, leo={self._leo}, "
                f"segments={len(self._segments)})")

    def update_config(self, config: LogConfig | Mapping[str, object]) -> None:
        """New configuration; new segments (and roll checks) use it from now on."""
        if not isinstance(config, LogConfig):
            config = LogConfig.from_dict(config)
        with self.lock:
            self.config = config

    def _check_open(self) -> None:
        if self._closed:
            raise LogClosedError(f"log {self.dir} is closed")

    # -- loading and recovery -------------------------------------------------------------------

    def _new_segment(self, base_offset: int, suffix: str = "") -> LogSegment:
        cfg = self.config
        return LogSegment(self.dir, base_offset, index_interval_bytes=cfg.index_interval_bytes,
                          max_index_size=cfg.segment_index_bytes,
                          roll_jitter_ms=cfg.random_segment_jitter(self._rng), suffix=suffix,
                          clock=self._clock)

    def _read_state(self) -> dict[str, int]:
        path = os.path.join(self.dir, STATE_CHECKPOINT_FILE)
        try:
            with open(path, "rb") as f:
                text = f.read().decode("ascii")
        except FileNotFoundError:
            return {}
        except (OSError, UnicodeDecodeError) as e:
            log.warning("unreadable %s (%s): recovering the whole log", path, e)
            return {}
        state: dict[str, int] = {}
        lines = text.split("\n")
        try:
            if int(lines[0]) != STATE_CHECKPOINT_VERSION:
                raise ValueError(f"version {lines[0]!r}")
            for line in lines[1:]:
                if line.strip():
                    key, value = line.split()
                    state[key] = int(value)
        except (ValueError, IndexError) as e:
            log.warning("malformed %s (%s): recovering the whole log", path, e)
            return {}
        return state

    def _write_state(self, clean_shutdown: bool = False) -> None:
        text = (f"{STATE_CHECKPOINT_VERSION}\n"
                f"recovery_point {self._recovery_point}\n"
                f"log_start_offset {self._log_start}\n"
                f"high_watermark {self._hw}\n"
                f"clean_shutdown {int(clean_shutdown)}\n")
        write_checkpoint_atomically(os.path.join(self.dir, STATE_CHECKPOINT_FILE), text)

    def write_checkpoint(self) -> None:
        """Persist the recovery point, log start offset and high watermark now."""
        with self.lock:
            self._check_open()
            self._write_state()

    def _sweep_leftover_files(self, stats: dict) -> set[int]:
        """Delete what a crash left half-done (deleted, .tmp, .cleaned files; swaps of an
        unfinished clean; orphaned index swaps); the bases of swaps to complete."""
        names = sorted(os.listdir(self.dir))
        cleaned_bases: list[int] = []
        swap_bases: set[int] = set()
        for name in names:
            path = os.path.join(self.dir, name)
            if name.endswith(DELETED_SUFFIX) or name.endswith(".tmp"):
                os.unlink(path)
            elif name.endswith(CLEANED_SUFFIX):
                cleaned_bases.append(offset_from_file_name(name))
                os.unlink(path)
            elif name.endswith(LOG_SUFFIX + SWAP_SUFFIX):
                swap_bases.add(offset_from_file_name(name))
        min_cleaned = min(cleaned_bases) if cleaned_bases else None
        # A .cleaned file left means the cleaner crashed before every .cleaned became .swap
        # (renamed highest first): swaps at or above it belong to that unfinished swap. Roll back.
        for base in sorted(swap_bases):
            if min_cleaned is not None and base >= min_cleaned:
                for ext in (LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX):
                    p = os.path.join(self.dir, log_file_name(base) + ext + SWAP_SUFFIX)
                    if os.path.exists(p):
                        os.unlink(p)
                stats["swaps_rolled_back"].append(base)
        swap_bases -= set(stats["swaps_rolled_back"])
        # A crash between the per-file .swap -> live renames can leave index .swap files whose
        # .log is already live; the live segment rebuilds missing indexes, so drop them.
        for name in os.listdir(self.dir):
            if (name.endswith(INDEX_SUFFIX + SWAP_SUFFIX) or name.endswith(TIME_INDEX_SUFFIX + SWAP_SUFFIX)) \
                    and offset_from_file_name(name) not in swap_bases:
                log.info("deleting orphaned index file %s", os.path.join(self.dir, name))
                os.unlink(os.path.join(self.dir, name))
        return swap_bases

    def _open_segments(self, swap_bases: set[int], log_start_offset: int, stats: dict) -> None:
        """Open every segment, drop orphaned indexes and complete interrupted swaps."""
        segments: dict[int, LogSegment] = {}
        for name in os.listdir(self.dir):
            if name.endswith(LOG_SUFFIX):
                base = offset_from_file_name(name)
                segments[base] = self._new_segment(base)
            elif name.endswith(INDEX_SUFFIX) or name.endswith(TIME_INDEX_SUFFIX):
                stem = name.rsplit(".", 1)[0]
                if not os.path.exists(os.path.join(self.dir, stem + LOG_SUFFIX)):
                    log.info("deleting orphaned index file %s", os.path.join(self.dir, name))
                    os.unlink(os.path.join(self.dir, name))
        # Complete interrupted swaps: delete what they replace, then rename them live.
        for base in sorted(swap_bases):
            for ext in (INDEX_SUFFIX, TIME_INDEX_SUFFIX):  # rebuilt by recover()
                p = os.path.join(self.dir, log_file_name(base) + ext + SWAP_SUFFIX)
                if os.path.exists(p):
                    os.unlink(p)
            swap = self._new_segment(base, SWAP_SUFFIX)
            swap.recover()
            end = swap.next_offset
            for old_base in [b for b in segments if base <= b < max(end, base + 1)]:
                segments.pop(old_base).delete()
            swap.change_file_suffixes(SWAP_SUFFIX, "")
            swap.flush()
            segments[base] = swap
            stats["swaps_completed"].append(base)
            log.info("completed the interrupted swap of segment %s", swap.log_path)
        self._segments = [segments[b] for b in sorted(segments)]
        if not self._segments:
            self._segments = [self._new_segment(log_start_offset)]
        self._bases = [s.base_offset for s in self._segments]

    def _recover_segments(self, clean: bool, recovery_point: int, stats: dict) -> None:
        """Recover the segments overlapping [recovery point, end) after an unclean shutdown, and
        any segment whose index files are missing or fail their sanity check."""
        cache = self.leader_epoch_cache
        first_unflushed = len(self._segments)
        if not clean:
            first_unflushed = max(0, bisect_right(self._bases, recovery_point) - 1)
        if first_unflushed == len(self._segments):
            # Not recovered below: check the active segment's tail, the only place a cleanly
            # closed log can end in bytes that do not parse.
            dropped = self._segments[-1].check_tail()
            stats["bytes_truncated"] += dropped
            stats["tail_bytes_dropped"] = dropped
        for seg in self._segments[:first_unflushed]:
            try:
                if seg.index_files_created:
                    raise CorruptIndexError(f"missing index files for {seg.log_path}")
                seg.sanity_check()
            except (CorruptIndexError, CorruptRecordError) as e:
                log.warning("rebuilding the indexes of %s: %s", seg.log_path, e)
                truncated = seg.recover()
                stats["rebuilt_indexes"].append(seg.base_offset)
                if truncated:
                    # Flushed data should never be corrupt; keep what is valid and go on.
                    stats["bytes_truncated"] += truncated
                    log.error("segment %s below the recovery point lost %d invalid bytes",
                              seg.log_path, truncated)
                seg.flush()
        i = first_unflushed
        while i < len(self._segments):
            seg = self._segments[i]
            truncated = seg.recover(cache)
            stats["recovered_segments"].append(seg.base_offset)
            if truncated:
                stats["bytes_truncated"] += truncated
                later = self._segments[i + 1:]
                log.warning("log %s: recovery dropped %d bytes from %s (next offset %d) and %d "
                            "later segment(s)", self.dir, truncated, seg.log_path, seg.next_offset,
                            len(later))
                for s in later:
                    stats["bytes_truncated"] += s.size
                    s.delete()
                del self._segments[i + 1:]
                del self._bases[i + 1:]
            # Not flushed here (as in Kafka): the recovery point stays put, so a second crash
            # before the next flush recovers these segments again.
            i += 1

    def _load(self) -> None:
        state = self._read_state()
        clean = bool(state.get("clean_shutdown", 0))
        recovery_point = state.get("recovery_point", 0)
        stats: dict[str, object] = {"recovered_segments": [], "bytes_truncated": 0,
                                    "rebuilt_indexes": [], "clean_shutdown": clean,
                                    "epoch_cache_rebuilt": False, "tail_bytes_dropped": 0,
                                    "swaps_completed": [], "swaps_rolled_back": []}
        self.load_stats = stats
        swap_bases = self._sweep_leftover_files(stats)
        self._open_segments(swap_bases, state.get("log_start_offset", 0), stats)
        self._recover_segments(clean, recovery_point, stats)
        for seg in self._segments[:-1]:
            seg.on_become_inactive()
        self._segments[-1].resize_indexes(self.config.segment_index_bytes)

        self._leo = self._segments[-1].next_offset
        self._log_start = max(state.get("log_start_offset", 0), self._segments[0].base_offset)
        self._recovery_point = self._leo if clean else min(recovery_point, self._leo)
        if self._log_start > self._leo:
            # The checkpointed start is beyond the data that survived: nothing below it is
            # readable anyway, so start an empty log there.
            log.warning("log %s: log start offset %d is above the log end offset %d after "
                        "recovery; starting empty at %d", self.dir, self._log_start, self._leo,
                        self._log_start)
            self._hw = self._log_start
            self._truncate_fully(self._log_start, self._log_start)
        self.leader_epoch_cache.truncate_from_end(self._leo)
        self.leader_epoch_cache.truncate_from_start(self._log_start)
        self._check_epoch_cache(stats)
        self._hw = min(max(state.get("high_watermark", 0), self._log_start), self._leo)
        self._write_state(clean_shutdown=False)
        log.info("loaded log %s: log start %d, log end %d, high watermark %d, %d segment(s), "
                 "recovered %s", self.dir, self._log_start, self._leo, self._hw,
                 len(self._segments), stats["recovered_segments"])

    def _batch_epoch_at(self, offset: int) -> tuple[int, int] | None:
        """(base offset, leader epoch) of the first batch whose last offset is >= ``offset``."""
        for seg in self._segments[max(0, bisect_right(self._bases, offset) - 1):]:
            found = seg.translate_offset(offset)
            if found is not None:
                base, _length, epoch = _STAMP.unpack(seg.read_bytes(found.position, _STAMPED))
                return base, epoch
        return None

    def _epoch_cache_mismatch(self) -> str | None:
        """Why the epoch cache disagrees with the batch headers, or None if it agrees.

        Each batch carries the leader epoch it was written in, so a correct cache has: the
        last batch's epoch as its latest epoch; for every entry ``(epoch, start)``, the batch at
        ``start`` in that epoch, starting there (unless ``start`` is the log start), and the
        batch just before it in the previous entry's epoch (no epoch before the first entry).
        A few index lookups per entry: no scan of the log.
        """
        entries = self.leader_epoch_cache.entries()
        if self._leo <= self._log_start:
            return None
        last = self._batch_epoch_at(self._leo - 1)
        last_epoch = last[1] if last is not None else -1
        if not entries:
            if last_epoch >= 0:
                return f"it is empty but the last batch carries epoch {last_epoch}"
            return None
        if entries[-1].epoch != last_epoch:
            return (f"its latest epoch is {entries[-1].epoch} (from offset {entries[-1].start_offset}) "
                    f"but the last batch (below offset {self._leo}) carries epoch {last_epoch}")
        previous_epoch = -1
        for epoch, start in entries:
            found = self._batch_epoch_at(start)
            if found is None or found[1] != epoch:
                return (f"epoch {epoch} starts at offset {start} but the batch there carries "
                        f"epoch {found[1] if found else None}")
            base = found[0]
            if base < start and start != self._log_start:
                return f"epoch {epoch} starts at offset {start}, inside the batch starting at {base}"
            if base > self._log_start:
                before = self._batch_epoch_at(base - 1)
                # A gap (compaction removed the batches before) has no batch to compare with.
                if before is not None and before[0] < base and before[1] != previous_epoch:
                    return (f"epoch {epoch} starts at offset {start} but the batch before it "
                            f"carries epoch {before[1]}, not {previous_epoch}")
            previous_epoch = epoch
        return None

    def _check_epoch_cache(self, stats: dict) -> None:
        """Cross-check the loaded epoch cache with the batch headers; rebuild it if they disagree.

        A wrong ``leader-epoch-checkpoint`` (say "epoch 0 covers everything", or an epoch that
        never wrote here) would make this replica answer OffsetsForLeaderEpoch and diverging
        epochs wrongly: followers truncating committed records in a loop, or a follower never
        matching the leader.
        """
        cache = self.leader_epoch_cache
        why = self._epoch_cache_mismatch()
        if why is None:
            return
        old = cache.entries()
        rebuilt: list[tuple[int, int]] = []
        try:
            for seg in self._segments:
                if seg.next_offset <= self._log_start:
                    continue
                for h in seg.batches():
                    epoch = h.partition_leader_epoch
                    if h.last_offset >= self._log_start and epoch >= 0 and (
                            not rebuilt or epoch > rebuilt[-1][0]):
                        rebuilt.append((epoch, max(h.base_offset, self._log_start)))
        except CorruptRecordError as e:
            log.error("log %s: rebuilding the leader epoch cache stopped at a corrupt batch: %s",
                      self.dir, e)
        log.warning("leader epoch checkpoint %s disagrees with the log's batches: %s; rebuilt it "
                    "from the batch headers: %s -> %s", cache.path, why, old, rebuilt)
        cache.replace_all([EpochEntry(e, o) for e, o in rebuilt])
        stats["epoch_cache_rebuilt"] = True

    # -- append -------------------------------------------------------------------------------

    def append_as_leader(self, records: bytes | MemoryRecords, leader_epoch: int, *,
                         now: int | None = None) -> LogAppendInfo:
        """Rule 1: assign offsets from the LEO, stamp ``leader_epoch`` on every batch, update the
        epoch cache, write. ``records`` is one or more encoded batches (their offsets are
        ignored). Raises CorruptRecordError (bad CRC/torn), RecordTooLargeError (a batch above
        ``max.message.bytes``) or RecordBatchTooLargeError (more than ``segment.bytes``)."""
        buf = records.buffer if isinstance(records, MemoryRecords) else records
        with self.lock:
            self._check_open()
            first = self._leo
            if not buf:
                return LogAppendInfo(first, first - 1, log_start_offset=self._log_start,
                                     leader_epoch=leader_epoch)
            headers = list(iter_batch_headers(buf, source=self.dir))
            n = len(buf)
            if n > self.config.segment_bytes:
                raise RecordBatchTooLargeError(
                    f"append of {n} bytes to {self.dir} is larger than segment.bytes "
                    f"{self.config.segment_bytes}")
            if self.config.compact:
                self._check_keys(buf, headers)
            staged = None
            if ProducerStateManager.has_producer_batches(headers):
                # Idempotence and transactions: a duplicate is answered with its first offsets.
                duplicate, staged = self.producer_state.prepare(headers, buf, first, validate=True)
                if duplicate is not None:
                    return LogAppendInfo(duplicate.first_offset, duplicate.last_offset,
                                         log_start_offset=self._log_start, leader_epoch=leader_epoch)
            max_message = self.config.max_message_bytes
            mv = memoryview(buf)
            parts = []
            offset = first
            max_ts = -1
            offset_of_max_ts = first
            count = 0
            stamp = _STAMP.pack
            for h in headers:
                size = h.size
                if size > max_message:
                    raise RecordTooLargeError(
                        f"batch of {size} bytes at position {h.position} is larger than "
                        f"max.message.bytes {max_message} ({self.dir})")
                pos = h.position
                parts.append(stamp(offset, size - 12, leader_epoch))
                parts.append(mv[pos + _STAMPED:pos + size])
                h.base_offset = offset
                h.partition_leader_epoch = leader_epoch
                offset += h.last_offset_delta + 1
                if h.max_timestamp > max_ts:
                    max_ts = h.max_timestamp
                    offset_of_max_ts = offset - 1
                count += h.records_count
            last = offset - 1
            if leader_epoch >= 0:
                self.leader_epoch_cache.assign(leader_epoch, first)
            rolled = self._append(parts, n, headers, first, last, max_ts, now)
            if staged is not None:
                self._commit_producer_state(staged)
            return LogAppendInfo(first, last, max_ts, offset_of_max_ts, count, n, self._log_start,
                                 leader_epoch, parts, headers, rolled)

    def _check_keys(self, buf, headers: list[BatchHeader]) -> None:
        """A compacted log takes no record without a key (Kafka's LogValidator.validateKey):
        the first batch holding one is refused whole, naming each such record."""
        for h in headers:
            missing = null_key_indexes(buf, h, self.dir)
            if missing:
                message = f"Compacted topic cannot accept message without key in topic partition {self.name}"
                errors = [(index, message) for index in missing]
                shown = ", ".join(f"RecordError(batchIndex={i}, message='{m}')" for i, m in errors[:3])
                raise RecordValidationError(
                    f"One or more records have been rejected due to {len(errors)} record errors in total, "
                    f"and only showing the first three errors at most: [{shown}]", errors)

    def _commit_producer_state(self, staged) -> None:
        self.producer_state.commit(staged)
        self.first_unstable_offset = self.producer_state.first_unstable_offset()

    def append_as_follower(self, records: bytes | MemoryRecords, *,
                           now: int | None = None) -> LogAppendInfo:
        """Rule 2: write the leader's batches as they are. Offsets must increase strictly
        (OffsetsOutOfOrderError) and start at or above the LEO (UnexpectedAppendOffsetError);
        more than ``segment.bytes`` raises RecordBatchTooLargeError. The epoch cache learns each
        epoch increase from the batches. An empty append changes nothing."""
        buf = records.buffer if isinstance(records, MemoryRecords) else records
        with self.lock:
            self._check_open()
            if not buf:
                return LogAppendInfo(self._leo, self._leo - 1, log_start_offset=self._log_start)
            headers = list(iter_batch_headers(buf, source=self.dir))
            n = len(buf)
            first = headers[0].base_offset
            prev_last = first - 1
            max_ts = -1
            offset_of_max_ts = first
            count = 0
            for h in headers:
                base = h.base_offset
                last = base + h.last_offset_delta
                if base <= prev_last or last < base:
                    raise OffsetsOutOfOrderError(
                        f"out of order offsets in follower append to {self.dir}: batch "
                        f"{base}..{last} at position {h.position} follows offset {prev_last}")
                prev_last = last
                if h.max_timestamp > max_ts:
                    max_ts = h.max_timestamp
                    offset_of_max_ts = last
                count += h.records_count
            if first < self._leo:
                raise UnexpectedAppendOffsetError(
                    f"follower append to {self.dir} starts at offset {first}, below the log end "
                    f"offset {self._leo} (last offset {prev_last})", first, prev_last)
            if n > self.config.segment_bytes:
                raise RecordBatchTooLargeError(
                    f"follower append of {n} bytes to {self.dir} is larger than segment.bytes "
                    f"{self.config.segment_bytes}")
            cache = self.leader_epoch_cache
            latest = cache.latest_epoch
            epoch = -1
            for h in headers:
                epoch = h.partition_leader_epoch
                if epoch >= 0 and (latest is None or epoch > latest):
                    cache.assign(epoch, h.base_offset)
                    latest = epoch
            rolled = self._append(buf, n, headers, first, prev_last, max_ts, now)
            if ProducerStateManager.has_producer_batches(headers):
                # Followers track producers too, so a new leader validates and knows the LSO.
                self._commit_producer_state(self.producer_state.prepare(headers, buf, None, False)[1])
            return LogAppendInfo(first, prev_last, max_ts, offset_of_max_ts, count, n,
                                 self._log_start, epoch, buf, headers, rolled)

    def _append(self, data, size: int, headers: list[BatchHeader], first: int, last: int,
                max_ts: int, now: int | None) -> bool:
        cfg = self.config
        seg = self._segments[-1]
        if now is None:
            now = self._clock()
        rolled = False
        if seg.should_roll(size, max_ts, last, now, cfg.segment_bytes, cfg.segment_ms):
            seg = self._roll(first)
            rolled = True
        seg.append(data, headers)
        self._leo = last + 1
        if cfg.flush_messages != LONG_MAX and self._leo - self._recovery_point >= cfg.flush_messages:
            self._flush(self._leo, checkpoint=False)
        elif cfg.flush_ms != LONG_MAX and now - self._last_flush_ms >= cfg.flush_ms:
            self._flush(self._leo, checkpoint=False)
        return rolled

    # -- roll -----------------------------------------------------------------------------------

    def roll(self, expected_next_offset: int | None = None) -> LogSegment:
        """Start a new active segment at ``max(expected_next_offset, LEO)`` and flush the
        segments below it (Kafka schedules that flush; we do it at once)."""
        with self.lock:
            self._check_open()
            return self._roll(expected_next_offset)

    def _roll(self, expected_next_offset: int | None = None) -> LogSegment:
        new_offset = max(expected_next_offset or 0, self._leo)
        active = self._segments[-1]
        if new_offset in self._bases:
            if active.base_offset == new_offset and active.size == 0:
                # Rule 3: re-rolling onto an empty active segment recreates it.
                log.warning("log %s: rolling onto the empty active segment %d; recreating it",
                            self.dir, new_offset)
                self._segments.pop().delete()
                self._bases.pop()
            else:
                raise IllegalStateError(
                    f"log {self.dir}: cannot roll a new segment at {new_offset}: a segment with "
                    "that base offset already exists")
        elif new_offset < active.base_offset:
            raise IllegalStateError(
                f"log {self.dir}: cannot roll a new segment at {new_offset}, below the active "
                f"segment's base offset {active.base_offset}")
        else:
            for ext in (LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX):
                stale = os.path.join(self.dir, log_file_name(new_offset) + ext)
                if os.path.exists(stale):
                    log.warning("deleting stale file %s before rolling", stale)
                    os.unlink(stale)
        if self._segments:
            self._segments[-1].on_become_inactive()
        seg = self._new_segment(new_offset)
        self._segments.append(seg)
        self._bases.append(new_offset)
        start = max(0, bisect_right(self._bases, self._recovery_point) - 1)
        for s in self._segments[start:-1]:
            s.flush()  # a no-op for what is already synced
        if self._leo > self._recovery_point:
            self._recovery_point = self._leo  # everything below the new segment is durable
        if self.producer_state.producers:
            self.producer_state.write_snapshot(self._leo, self._log_start)
        log.info("log %s rolled a new segment at offset %d", self.dir, new_offset)
        return seg

    # -- read -----------------------------------------------------------------------------------

    def read(self, start_offset: int, max_bytes: int = 1024 * 1024,
             upper_bound: int | FetchIsolation | None = None, *,
             min_one_message: bool = True) -> FetchDataInfo:
        """Whole batches from the one holding ``start_offset`` (rule 5).

        ``upper_bound`` is an offset, or a FetchIsolation (LOG_END for followers,
        HIGH_WATERMARK for read_uncommitted, TXN_COMMITTED for read_committed); default LOG_END.
        No batch at or beyond the bound is returned. OffsetOutOfRangeError if ``start_offset``
        is below the log start offset or above the LEO; ``start_offset == LEO`` is empty. At most
        ``max_bytes`` unless ``min_one_message`` and the first batch is bigger. Reads come from
        one segment (the next one if the first has nothing at or after ``start_offset``).
        """
        with self.lock:
            self._check_open()
            leo = self._leo
            if start_offset == leo:
                return FetchDataInfo(b"", start_offset, self._segments[-1].base_offset,
                                     self._segments[-1].size)
            if start_offset > leo or start_offset < self._log_start:
                raise OffsetOutOfRangeError(
                    f"offset {start_offset} is out of range for log {self.dir}: log start offset "
                    f"{self._log_start}, log end offset {leo}")
            if upper_bound is None or upper_bound is FetchIsolation.LOG_END:
                bound = leo
            elif upper_bound is FetchIsolation.HIGH_WATERMARK:
                bound = self._hw
            elif upper_bound is FetchIsolation.TXN_COMMITTED:
                bound = self.last_stable_offset
            else:
                bound = min(int(upper_bound), leo)
            if start_offset >= bound:
                return FetchDataInfo(b"", start_offset)
            segments = self._segments
            i = max(0, bisect_right(self._bases, start_offset) - 1)
            bound_base, bound_pos = (-1, -1) if bound == leo else self._position_of(bound)
            while i < len(segments):
                seg = segments[i]
                max_pos = bound_pos if seg.base_offset == bound_base else seg.size
                r = seg.read(start_offset, max_bytes, max_pos, min_one_message)
                if r is not None:
                    return FetchDataInfo(r.data, start_offset, seg.base_offset, r.position,
                                         r.first_entry_incomplete, seg.log_path)
                if seg.base_offset == bound_base:
                    break
                i += 1
            return FetchDataInfo(b"", start_offset)

    def _position_of(self, offset: int) -> tuple[int, int]:
        """(segment base, byte position) of the batch holding ``offset`` (its segment's size if
        none does yet). Cached: positions change only when the log is truncated or rewritten."""
        found = self._positions.get(offset)
        if found is None:
            seg = self._segments[max(0, bisect_right(self._bases, offset) - 1)]
            op = seg.translate_offset(offset)
            found = (seg.base_offset, op.position if op is not None else seg.size)
            if len(self._positions) > 8:
                self._positions.clear()
            self._positions[offset] = found
        return found

    def fetch_offset_by_timestamp(self, timestamp: int) -> tuple[int, int] | None:
        """ListOffsets: ``(timestamp, offset)`` of the first record with a timestamp >= the
        target, or None. ``-2`` earliest -> (-1, log start), ``-1`` latest -> (-1, LEO), ``-3``
        the record with the largest timestamp."""
        with self.lock:
            self._check_open()
            if timestamp == EARLIEST_TIMESTAMP:
                return -1, self._log_start
            if timestamp == LATEST_TIMESTAMP:
                return -1, self._leo
            if timestamp == MAX_TIMESTAMP:
                best = None
                for seg in self._segments:
                    if seg.max_timestamp_so_far >= 0 and (
                            best is None or seg.max_timestamp_so_far > best[0]):
                        best = (seg.max_timestamp_so_far, seg.offset_of_max_timestamp_so_far)
                return best
            if timestamp < 0:
                raise InvalidOffsetError(f"invalid timestamp {timestamp} for {self.dir}")
            for seg in self._segments:
                if seg.max_timestamp_so_far >= timestamp:
                    return seg.find_offset_by_timestamp(timestamp, self._log_start)
            return None

    def end_offset_for_epoch(self, leader_epoch: int) -> tuple[int, int] | None:
        """OffsetsForLeaderEpoch on this log: (epoch, end offset) or None if undefined."""
        epoch, offset = self.leader_epoch_cache.end_offset_for(leader_epoch, self._leo)
        if epoch < 0 or offset < 0:
            return None
        return epoch, offset

    # -- high watermark (rule 6) ----------------------------------------------------------------

    def update_high_watermark(self, high_watermark: int) -> int:
        """Set the HW clamped to [log start, LEO]; returns the value set."""
        with self.lock:
            hw = min(max(high_watermark, self._log_start), self._leo)
            self._hw = hw
            return hw

    def maybe_increment_high_watermark(self, high_watermark: int) -> int | None:
        """Leader: move the HW forward only. Returns the old HW if it moved, else None.
        InvalidOffsetError if the new HW is above the LEO."""
        with self.lock:
            if high_watermark > self._leo:
                raise InvalidOffsetError(
                    f"high watermark {high_watermark} of {self.dir} would exceed the log end "
                    f"offset {self._leo}")
            old = self._hw
            if high_watermark > old:
                self._hw = high_watermark
                return old
            return None

    def maybe_update_high_watermark(self, high_watermark: int) -> int | None:
        """Follower: take the leader's HW clamped to [log start, LEO]; it may go down. Returns
        the new HW if it changed, else None."""
        with self.lock:
            hw = min(max(high_watermark, self._log_start), self._leo)
            if hw != self._hw:
                self._hw = hw
                return hw
            return None

    # -- log start offset, retention (rule 7) ---------------------------------------------------

    def maybe_increment_log_start_offset(self, new_log_start_offset: int, reason: str = "") -> bool:
        """Raise the log start offset (never lower it). OffsetOutOfRangeError above the HW.
        The epoch cache drops what is below it. Returns True if it moved."""
        with self.lock:
            self._check_open()
            if new_log_start_offset > self._hw:
                raise OffsetOutOfRangeError(
                    f"cannot increment the log start offset of {self.dir} to "
                    f"{new_log_start_offset}: it is above the high watermark {self._hw}")
            if new_log_start_offset <= self._log_start:
                return False
            log.info("log %s: log start offset %d -> %d (%s)", self.dir, self._log_start,
                     new_log_start_offset, reason or "increment")
            self._log_start = new_log_start_offset
            self.leader_epoch_cache.truncate_from_start(new_log_start_offset)
            if self._recovery_point < new_log_start_offset:
                self._recovery_point = new_log_start_offset
            self._write_state()
            return True

    def delete_records(self, offset: int) -> int:
        """DeleteRecords: move the log start offset to ``offset`` (``-1`` = the HW) and delete
        the segments entirely below it. Returns the new log start offset (low watermark)."""
        with self.lock:
            self._check_open()
            if offset == -1:
                offset = self._hw
            if offset < 0 or offset > self._hw:
                raise OffsetOutOfRangeError(
                    f"cannot delete records of {self.dir} before offset {offset}: the valid range "
                    f"is [0, high watermark {self._hw}]")
            self.maybe_increment_log_start_offset(offset, "delete records")
            self._delete_segments(lambda seg, nxt: nxt is not None and nxt.base_offset <= self._log_start,
                                  "log start offset breach")
            return self._log_start

    def delete_old_segments(self, now: int | None = None) -> int:
        """Retention: delete whole old segments by ``retention.ms`` and ``retention.bytes``
        (policy ``delete``), and those below the log start offset (any policy). Never deletes
        data at or above the HW; if the active segment is eligible the log rolls first, as
        Kafka does, so the active segment itself is never deleted. Returns the count deleted."""
        with self.lock:
            self._check_open()
            now = self._clock() if now is None else now
            deleted = 0
            cfg = self.config
            if cfg.delete:
                if cfg.retention_ms >= 0:
                    deleted += self._delete_segments(
                        lambda seg, nxt: now - seg.largest_timestamp > cfg.retention_ms,
                        f"retention.ms {cfg.retention_ms}")
                if cfg.retention_bytes >= 0:
                    excess = [sum(s.size for s in self._segments) - cfg.retention_bytes]

                    def over_size(seg, nxt):
                        if excess[0] - seg.size >= 0:
                            excess[0] -= seg.size
                            return True
                        return False
                    deleted += self._delete_segments(over_size, f"retention.bytes {cfg.retention_bytes}")
            deleted += self._delete_segments(
                lambda seg, nxt: nxt is not None and nxt.base_offset <= self._log_start,
                "log start offset breach")
            return deleted

    def _delete_segments(self, predicate, reason: str) -> int:
        segs = self._segments
        deletable: list[LogSegment] = []
        for i, seg in enumerate(segs):
            nxt = segs[i + 1] if i + 1 < len(segs) else None
            upper = nxt.base_offset if nxt is not None else self._leo
            if nxt is None and seg.size == 0:
                break
            if self._hw >= upper and predicate(seg, nxt):
                deletable.append(seg)
            else:
                break
        if not deletable:
            return 0
        if deletable[-1] is segs[-1]:
            self._roll()
        for seg in deletable:
            log.info("log %s: deleting segment %s (%s)", self.dir, seg.log_path, reason)
            seg.delete()
        del self._segments[:len(deletable)]
        del self._bases[:len(deletable)]
        self._positions.clear()
        first = self._segments[0].base_offset
        if first > self._log_start:
            self.maybe_increment_log_start_offset(min(first, self._hw), reason)
        return len(deletable)

    # -- truncation (rules 8, 9) ----------------------------------------------------------------

    def truncate_to(self, target_offset: int) -> bool:
        """Make the log end at ``target_offset`` (rule 8). Returns True if data was removed.

        (a) target >= LEO: no data change, but the epoch cache is truncated from the LEO;
        (b) the first segment starts above the target: ``truncate_fully_and_start_at(target)``;
        (c) delete segments above, truncate the active one, epoch cache truncated from the
        target, log start = min(target, log start), HW = min(HW, LEO).
        """
        if target_offset < 0:
            raise InvalidOffsetError(f"cannot truncate {self.dir} to a negative offset "
                                     f"{target_offset}")
        with self.lock:
            self._check_open()
            if target_offset >= self._leo:
                log.info("log %s: truncating to %d has no effect, the log end offset is %d",
                         self.dir, target_offset, self._leo)
                self.leader_epoch_cache.truncate_from_end(self._leo)
                return False
            log.info("log %s: truncating to offset %d (log end offset %d)", self.dir,
                     target_offset, self._leo)
            self._check_truncation_loop(target_offset)
            if self._bases[0] > target_offset:
                self._truncate_fully(target_offset, target_offset)
                return True
            while self._bases[-1] > target_offset:
                self._segments.pop().delete()
                self._bases.pop()
            self._segments[-1].truncate_to(target_offset)
            self._leo = target_offset
            self.leader_epoch_cache.truncate_from_end(target_offset)
            self._log_start = min(target_offset, self._log_start)
            self._hw = min(self._hw, self._leo)
            self._recovery_point = min(self._recovery_point, target_offset)
            if self.first_unstable_offset is not None and self.first_unstable_offset >= target_offset:
                self.first_unstable_offset = None
            self._positions.clear()
            self._write_state()
            self.producer_state.rebuild(self)
            self.first_unstable_offset = self.producer_state.first_unstable_offset()
            return True

    def _check_truncation_loop(self, target_offset: int) -> None:
        """Refuse the same truncation below the high watermark a third time in a row.

        Truncating below the HW happens once after an unclean election or a lost flush; doing
        it again to the same offset, after the records came back, means this replica's leader
        epochs and the leader's disagree: every refetch would be cut again, for ever, and the
        follower would never rejoin the ISR. Raises TruncationLoopError (logged once per log)
        naming the offsets and the epoch cache, instead of looping silently.
        """
        if target_offset >= self._hw:
            self._below_hw_truncations = (target_offset, 0)
            return
        last_target, count = self._below_hw_truncations
        count = count + 1 if last_target == target_offset else 1
        self._below_hw_truncations = (target_offset, count)
        if count < TRUNCATION_LOOP_LIMIT:
            log.warning("log %s: truncating to %d, below the high watermark %d", self.dir,
                        target_offset, self._hw)
            return
        error = TruncationLoopError(
            f"log {self.dir}: truncation to offset {target_offset}, below the high watermark "
            f"{self._hw}, asked {count} times in a row after the records were fetched again: this "
            f"replica's leader epochs {self.leader_epoch_cache.entries()} and the leader's "
            f"disagree about where an epoch ends (check {self.leader_epoch_cache.path} on both)")
        if not self._truncation_loop_reported:
            self._truncation_loop_reported = True
            log.error("%s", error)
        raise error

    def truncate_fully_and_start_at(self, new_offset: int, log_start_offset: int | None = None) -> None:
        """Rule 9: delete everything; one empty segment at ``new_offset``; the epoch cache is
        cleared; LEO = HW = ``new_offset``; log start = ``log_start_offset`` (default the same)."""
        if new_offset < 0:
            raise InvalidOffsetError(f"cannot restart {self.dir} at a negative offset {new_offset}")
        with self.lock:
            self._check_open()
            self._truncate_fully(new_offset, new_offset if log_start_offset is None else log_start_offset)

    def _truncate_fully(self, new_offset: int, log_start_offset: int) -> None:
        log.info("log %s: truncating fully and starting at offset %d", self.dir, new_offset)
        for seg in self._segments:
            seg.delete()
        self._segments = [self._new_segment(new_offset)]
        self._bases = [new_offset]
        self.leader_epoch_cache.clear()
        self._leo = new_offset
        self._log_start = log_start_offset
        self._hw = min(max(new_offset, log_start_offset), new_offset)
        self._recovery_point = new_offset
        self.first_unstable_offset = None
        self._positions.clear()
        self._write_state()
        self.producer_state.reset()
        self.producer_state.delete_snapshot()

    # -- durability -----------------------------------------------------------------------------

    def flush(self, offset: int | None = None) -> None:
        """fsync every segment holding offsets below ``offset`` (default: the LEO), advance the
        recovery point to it and persist the checkpoint. The epoch cache is always durable."""
        with self.lock:
            self._check_open()
            self._flush(self._leo if offset is None else min(offset, self._leo), checkpoint=True)

    def _flush(self, offset: int, checkpoint: bool) -> None:
        if offset > self._recovery_point:
            start = max(0, bisect_right(self._bases, self._recovery_point) - 1)
            end = bisect_right(self._bases, offset - 1)
            for seg in self._segments[start:end]:
                seg.flush()
            self._recovery_point = offset
            self._last_flush_ms = self._clock()
        if checkpoint:
            self._write_state()

    def maybe_flush(self, now: int | None = None) -> bool:
        """The ``flush.ms`` scheduler hook: flush if that long has passed since the last flush."""
        with self.lock:
            if self._closed or self.config.flush_ms == LONG_MAX:
                return False
            now = self._clock() if now is None else now
            if now - self._last_flush_ms >= self.config.flush_ms and self._leo > self._recovery_point:
                self._flush(self._leo, checkpoint=True)
                return True
            return False

    @property
    def unflushed_messages(self) -> int:
        return self._leo - self._recovery_point

    def close(self) -> None:
        """Clean shutdown: flush everything, checkpoint (marked clean, so the next open scans
        nothing) and close the files. Idempotent."""
        with self.lock:
            if self._closed:
                return
            self._flush(self._leo, checkpoint=False)
            self.producer_state.write_snapshot(self._leo, self._log_start)
            for seg in self._segments:
                seg.close()
            self._write_state(clean_shutdown=True)
            self._closed = True

    def crash(self) -> None:
        """Power-cut simulation (used by ``LocalCluster.crash_broker``): every log and index file
        is cut back to the length its last fsync covered, and the files are closed without
        flushing. The checkpoints keep their last written (always fsynced) contents, so the next
        open recovers from the recovery point exactly as after a real power loss."""
        with self.lock:
            if self._closed:
                return
            for seg in self._segments:
                seg.crash()
            self._closed = True

    def delete(self) -> None:
        """Close the log and remove its directory (the replica was deleted)."""
        with self.lock:
            if not self._closed:
                for seg in self._segments:
                    seg.close()
                self._closed = True
            shutil.rmtree(self.dir, ignore_errors=True)

    # -- cleaner API ----------------------------------------------------------------------------

    def new_cleaned_segment(self, base_offset: int) -> LogSegment:
        """An empty segment with ``.cleaned`` files for the cleaner to fill."""
        with self.lock:
            for ext in (LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX):
                p = os.path.join(self.dir, log_file_name(base_offset) + ext + CLEANED_SUFFIX)
                if os.path.exists(p):
                    os.unlink(p)
            seg = self._new_segment(base_offset, CLEANED_SUFFIX)
            seg.roll_jitter_ms = 0
            return seg

    def replace_segments(self, new_segments: Iterable[LogSegment],
                         old_segments: Iterable[LogSegment]) -> None:
        """Swap closed segments for cleaned ones, crash-safely (see the module docstring).

        ``old_segments`` must be current, non-active segments of this log; ``new_segments``
        carry the ``.cleaned`` suffix. IllegalStateError (and nothing changed) otherwise.
        """
        new = sorted(new_segments, key=lambda s: s.base_offset)
        old = sorted(old_segments, key=lambda s: s.base_offset)
        with self.lock:
            self._check_open()
            current = {id(s) for s in self._segments[:-1]}
            for s in old:
                if id(s) not in current:
                    raise IllegalStateError(
                        f"log {self.dir}: segment {s.log_path} is not a closed segment of this log")
            for s in new:
                if s.suffix != CLEANED_SUFFIX:
                    raise IllegalStateError(
                        f"log {self.dir}: replacement segment {s.log_path} is not a .cleaned segment")
            for s in new:
                s.on_become_inactive()
                s.flush()
            for s in reversed(new):
                s.change_file_suffixes(CLEANED_SUFFIX, SWAP_SUFFIX)
            self._fsync_dir()
            old_ids = {id(s) for s in old}
            for s in old:
                s.delete()
            kept = [s for s in self._segments if id(s) not in old_ids]
            for s in new:
                s.change_file_suffixes(SWAP_SUFFIX, "")
            self._fsync_dir()
            self._segments = sorted(kept + new, key=lambda s: s.base_offset)
            self._bases = [s.base_offset for s in self._segments]
            self._positions.clear()
            log.info("log %s: replaced segments %s with cleaned %s", self.dir,
                     [s.base_offset for s in old], [s.base_offset for s in new])

    def _fsync_dir(self) -> None:
        fd = os.open(self.dir, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
