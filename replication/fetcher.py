"""Pull replication, follower side: Kafka's AbstractFetcherThread / ReplicaFetcherThread /
AbstractFetcherManager / ReplicaFetcherManager (semantics rules 22-29).

A follower broker runs a :class:`ReplicaFetcherManager`. It groups the partitions it follows
into :class:`ReplicaFetcherThread` s keyed by ``(leader id, fetcher id)`` (rule 22). Each thread
loops over :meth:`ReplicaFetcherThread.do_work`:

1. *truncation phase* (rules 25-26): partitions in ``TRUNCATING`` ask the leader for the end
   offset of their latest epoch (OffsetsForLeaderEpoch) and truncate their log; partitions
   whose log has no epoch truncate to their high watermark (their initial fetch offset);
2. *fetch phase* (rules 27-29): one long-poll Fetch for every ready partition, then the
   response is applied per partition: append + HW/log-start update, diverging-epoch
   truncation, out-of-range reset, or an error that delays the partition for
   ``replica.fetch.backoff.ms``.

The long poll happens at the leader (``max_wait_ms``/``min_bytes``); the thread itself only
waits when nothing is ready, on a condition that ``add_partitions``, ``resume_fetching`` and
shutdown wake.

The thread talks to the leader through a :class:`LeaderEndPoint` (``RemoteLeaderEndPoint``
over the in-process transport in a cluster; a test double in tests) and to its local replicas
through :class:`FollowerReplicaOps` (``LogReplicaOps`` over real :class:`replication.log.Log`).

Locking: ``partition map lock`` (a re-entrant lock and its condition) guards the partition
states and is held while local logs are truncated or appended, so a partition removed under
the lock is never written afterwards. Leader RPCs (fetch, epochs, list offsets) are made
without holding it; their answers are re-validated against the current state.

Push replication hook: a fetch response with ``switch_to_push`` moves a partition to
``ReplicaState.PUSHING`` (not fetched; the leader pushes AppendRecords) and calls
``on_switch_to_push(tp, session_id)``; :meth:`ReplicaFetcherThread.resume_fetching` moves it
back to ``FETCHING``.
"""

from __future__ import annotations

import abc
import dataclasses
import enum
import logging
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Mapping, NamedTuple, Protocol, runtime_checkable

from eddy.config_values import parse_bool

from replication.errors import (
    CorruptRecordError,
    IllegalStateError,
    InvalidConfigurationError,
    InvalidRecordError,
    KafkaStorageError,
    ReplicationError,
    TransportError,
    UnexpectedAppendOffsetError,
)
from replication.protocol import (
    EARLIEST_TIMESTAMP,
    FINAL_EPOCH,
    INITIAL_EPOCH,
    INVALID_SESSION_ID,
    LATEST_TIMESTAMP,
    UNDEFINED_EPOCH,
    UNDEFINED_EPOCH_OFFSET,
    EpochEndOffset,
    Errors,
    FetchPartition,
    FetchPartitionResponse,
    FetchRequest,
    IsolationLevel,
    ListOffsetsPartition,
    ListOffsetsPartitionResponse,
    ListOffsetsRequest,
    MemoryRecords,
    OffsetForLeaderPartition,
    OffsetsForLeaderEpochRequest,
    TopicPartition,
)

log = logging.getLogger(__name__)

__all__ = [
    "ReplicaState",
    "PartitionFetchState",
    "InitialFetchState",
    "OffsetTruncationState",
    "FollowerAppendInfo",
    "FetcherConfig",
    "FailedPartitions",
    "LeaderResponseError",
    "LeaderEndPoint",
    "RemoteLeaderEndPoint",
    "FollowerReplicaOps",
    "LogReplicaOps",
    "Clock",
    "SystemClock",
    "ReplicaFetcherThread",
    "ReplicaFetcherManager",
    "java_string_hashcode",
    "kafka_abs",
    "fetcher_id_for",
]


# --- errors ----------------------------------------------------------------------------------


class LeaderResponseError(ReplicationError):
    """The leader answered a ListOffsets (or other offsets) request with an error code, or with
    a response of an unexpected shape (``error`` is then None)."""

    def __init__(self, message: str, error: Errors | None = None,
                 partition: TopicPartition | None = None) -> None:
        super().__init__(message)
        self.error = error
        self.partition = partition


# --- configuration ---------------------------------------------------------------------------


def _int_key(config: Mapping[str, object], key: str, default: int, minimum: int, *aliases: str) -> int:
    value: object = default
    for k in (key, *aliases):
        if k in config:
            value = config[k]
            key = k
            break
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidConfigurationError(
            f"{key} must be an int, got {type(value).__name__} {value!r}", key=key)
    if value < minimum:
        raise InvalidConfigurationError(f"{key} must be >= {minimum}, got {value}", key=key)
    return value


@dataclass(frozen=True, slots=True)
class FetcherConfig:
    """The fetcher's configuration keys, with Kafka's defaults."""

    num_replica_fetchers: int = 1
    replica_fetch_wait_max_ms: int = 500
    replica_fetch_min_bytes: int = 1
    replica_fetch_max_bytes: int = 1 << 20
    replica_fetch_response_max_bytes: int = 10 << 20
    replica_fetch_backoff_ms: int = 1000
    replica_socket_timeout_ms: int = 30000
    #: Incremental fetch sessions (KIP-227). Off under push replication, whose leader judges
    #: every follower fetch of every partition to decide the switch to push.
    fetch_sessions: bool = True

    @classmethod
    def from_mapping(cls, config: "Mapping[str, object] | FetcherConfig | None") -> "FetcherConfig":
        """Read Kafka keys from a dict; unknown keys are ignored (the dict is the broker's)."""
        if config is None:
            return cls()
        if isinstance(config, FetcherConfig):
            return config
        if not isinstance(config, Mapping):
            raise InvalidConfigurationError(
                f"fetcher config must be a mapping of Kafka keys, got {type(config).__name__}")
        out = cls(
            num_replica_fetchers=_int_key(config, "num.replica.fetchers", 1, 1),
            replica_fetch_wait_max_ms=_int_key(config, "replica.fetch.wait.max.ms", 500, 0),
            replica_fetch_min_bytes=_int_key(config, "replica.fetch.min.bytes", 1, 1, "fetch.min.bytes"),
            replica_fetch_max_bytes=_int_key(config, "replica.fetch.max.bytes", 1 << 20, 0),
            replica_fetch_response_max_bytes=_int_key(
                config, "replica.fetch.response.max.bytes", 10 << 20, 0),
            replica_fetch_backoff_ms=_int_key(config, "replica.fetch.backoff.ms", 1000, 0),
            replica_socket_timeout_ms=_int_key(config, "replica.socket.timeout.ms", 30000, 1),
            fetch_sessions=_bool_key(config, "replica.fetch.sessions.enable",
                                     str(config.get("replication.mode", "pull")).lower() != "push"),
        )
        # Kafka's KafkaConfig check: the socket timeout must outlast the leader's long poll.
        if out.replica_socket_timeout_ms < out.replica_fetch_wait_max_ms:
            raise InvalidConfigurationError(
                f"replica.socket.timeout.ms ({out.replica_socket_timeout_ms}) must be >= "
                f"replica.fetch.wait.max.ms ({out.replica_fetch_wait_max_ms})",
                key="replica.socket.timeout.ms")
        return out

    @property
    def backoff_s(self) -> float:
        return self.replica_fetch_backoff_ms / 1000.0


def _bool_key(config: Mapping[str, object], key: str, default: bool) -> bool:
    value = config.get(key, default)
    parsed = parse_bool(value)
    if parsed is not None:
        return parsed
    raise InvalidConfigurationError(f"{key} must be true or false, got {value!r}", key=key)


# --- fetcher id (rule 22) -------------------------------------------------------------------


def _to_int32(n: int) -> int:
    n &= 0xFFFFFFFF
    return n - 0x100000000 if n & 0x80000000 else n


def java_string_hashcode(s: str) -> int:
    """Java's ``String.hashCode``: ``s[0]*31^(n-1) + ... + s[n-1]`` over UTF-16 code units,
    in 32-bit two's complement arithmetic."""
    if not isinstance(s, str):
        raise TypeError(f"java_string_hashcode needs a str, got {type(s).__name__}")
    h = 0
    data = s.encode("utf-16-be", "surrogatepass")
    for i in range(0, len(data), 2):
        h = (31 * h + ((data[i] << 8) | data[i + 1])) & 0xFFFFFFFF
    return _to_int32(h)


def kafka_abs(n: int) -> int:
    """Kafka's ``Utils.abs``: like ``Math.abs`` on an int, but ``Integer.MIN_VALUE`` maps to 0
    (``Math.abs`` would return it unchanged, negative)."""
    n = _to_int32(n)
    return 0 if n == -0x80000000 else abs(n)


def fetcher_id_for(tp: TopicPartition, num_replica_fetchers: int) -> int:
    """Kafka's ``AbstractFetcherManager.getFetcherId``:
    ``Utils.abs(31 * topic.hashCode + partition) % num.replica.fetchers`` (Int arithmetic)."""
    if num_replica_fetchers < 1:
        raise InvalidConfigurationError(
            f"num.replica.fetchers must be >= 1, got {num_replica_fetchers}", key="num.replica.fetchers")
    return kafka_abs(31 * java_string_hashcode(tp[0]) + tp[1]) % num_replica_fetchers


# --- states ---------------------------------------------------------------------------------


class ReplicaState(enum.Enum):
    TRUNCATING = "Truncating"
    FETCHING = "Fetching"
    # Not fetched: the leader pushes AppendRecords to this replica (push replication).
    PUSHING = "Pushing"


class Clock(Protocol):
    """Time source of a fetcher thread; tests inject a manual one."""

    def monotonic(self) -> float: ...

    def wait(self, condition: threading.Condition, timeout_s: float) -> None:
        """Wait on ``condition`` (held by the caller) for at most ``timeout_s``."""
        ...


class SystemClock:
    def monotonic(self) -> float:
        return time.monotonic()

    def wait(self, condition: threading.Condition, timeout_s: float) -> None:
        condition.wait(timeout_s)


SYSTEM_CLOCK = SystemClock()


@dataclass(frozen=True, slots=True)
class PartitionFetchState:
    """One partition's fetch state (rule 24). Immutable: every change makes a new state.

    ``delay`` is a deadline on the thread's clock (seconds), or None.
    """

    fetch_offset: int
    lag: int | None
    current_leader_epoch: int
    delay: float | None
    state: ReplicaState
    last_fetched_epoch: int | None
    push_session_id: int = -1
    #: Why the last fetch of this partition failed to apply (corrupt records from the leader),
    #: None after a fetch that applied: a stuck follower says why.
    error: str | None = None

    def is_delayed(self, now: float | None = None) -> bool:
        if self.delay is None:
            return False
        return self.delay > (time.monotonic() if now is None else now)

    def is_ready_for_fetch(self, now: float | None = None) -> bool:
        return self.state is ReplicaState.FETCHING and not self.is_delayed(now)

    def is_truncating(self, now: float | None = None) -> bool:
        return self.state is ReplicaState.TRUNCATING and not self.is_delayed(now)

    @property
    def is_pushing(self) -> bool:
        return self.state is ReplicaState.PUSHING

    def updated(self, **changes) -> "PartitionFetchState":
        return dataclasses.replace(self, **changes)


class InitialFetchState(NamedTuple):
    """How a partition joins a fetcher (Kafka's ``InitialFetchState``).

    ``init_offset`` is the LEO if the log has an epoch, else the HW (rule 23); a negative one
    asks the leader (the out-of-range reset). ``last_fetched_epoch`` None means "the local
    log's latest epoch".
    """

    leader_id: int
    current_leader_epoch: int
    init_offset: int
    last_fetched_epoch: int | None = None


class OffsetTruncationState(NamedTuple):
    offset: int
    truncation_completed: bool


class FollowerAppendInfo(NamedTuple):
    """What a follower append did (the parts of Kafka's ``LogAppendInfo`` the thread uses)."""

    first_offset: int  # -1 when nothing was appended
    last_offset: int  # -1 when nothing was appended
    last_leader_epoch: int | None
    valid_bytes: int
    high_watermark: int


class FailedPartitions:
    """Partitions whose fetch failed for good (Kafka's ``FailedPartitions``); thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._set: set[TopicPartition] = set()

    def add(self, tp: TopicPartition) -> None:
        with self._lock:
            self._set.add(tp)

    def remove_all(self, tps: Iterable[TopicPartition]) -> None:
        with self._lock:
            self._set.difference_update(tps)

    def contains(self, tp: TopicPartition) -> bool:
        with self._lock:
            return tp in self._set

    __contains__ = contains

    def partitions(self) -> set[TopicPartition]:
        with self._lock:
            return set(self._set)

    def __len__(self) -> int:
        with self._lock:
            return len(self._set)


# --- leader end point -----------------------------------------------------------------------


class LeaderEndPoint(abc.ABC):
    """The fetcher's view of the leader broker (Kafka's ``LeaderEndPoint``)."""

    leader_id: int = -1

    @abc.abstractmethod
    def build_fetch(self, partitions: Mapping[TopicPartition, PartitionFetchState],
                    log_start_offsets: Mapping[TopicPartition, int] | None = None) -> FetchRequest | None:
        """A Fetch for the partitions in ``FETCHING`` (the caller passes the ready ones),
        or None if there is nothing to send (with a fetch session open and nothing ready, a
        request forgetting every partition). ``log_start_offsets`` are the follower's,
        informational."""

    @abc.abstractmethod
    def fetch(self, request: FetchRequest) -> dict[TopicPartition, FetchPartitionResponse]:
        """Send the fetch; raises (e.g. TransportError) when the request as a whole failed."""

    def fetched_partitions(self, request: FetchRequest) -> Mapping[TopicPartition, FetchPartition]:
        """Every partition ``request`` fetches, as the leader sees them: an incremental
        session request names only the changed ones."""
        return request.partitions

    @abc.abstractmethod
    def fetch_epoch_end_offsets(
        self, partitions: Mapping[TopicPartition, OffsetForLeaderPartition]
    ) -> dict[TopicPartition, EpochEndOffset]:
        """OffsetsForLeaderEpoch; a failed request yields an error entry per partition."""

    @abc.abstractmethod
    def fetch_earliest_offset(self, tp: TopicPartition, current_leader_epoch: int) -> tuple[int, int]:
        """``(leader epoch, log start offset)`` of the leader; raises LeaderResponseError."""

    @abc.abstractmethod
    def fetch_latest_offset(self, tp: TopicPartition, current_leader_epoch: int) -> tuple[int, int]:
        """``(leader epoch, log end offset)`` of the leader; raises LeaderResponseError."""

    def initiate_close(self) -> None:  # noqa: B027 - optional, most end points have nothing to unblock
        """Unblock requests in flight (they fail); called when the fetcher starts shutting down."""

    def close(self) -> None:  # noqa: B027 - optional, the default has nothing to release
        """Release resources; the default has none."""


_PENDING = object()


class _LogStartOffsets:
    """The follower's log start offsets, read only for the partitions a request names (an
    incremental fetch names few); -1 where the log is offline (its fetch then fails)."""

    __slots__ = ("replicas",)

    def __init__(self, replicas: "FollowerReplicaOps") -> None:
        self.replicas = replicas

    def get(self, tp: TopicPartition, default: int = -1) -> int:
        try:
            return self.replicas.log_start_offset(tp)
        except KafkaStorageError:
            return default


class FetchSessionHandler:
    """The follower's side of a fetch session with one leader (Kafka's FetchSessionHandler).

    ``build`` turns the partitions ready to fetch into the next request: all of them to open a
    session, else only those whose fetch position changed, plus the ones no longer fetched
    (``forgotten``). ``view`` is what the leader's session holds after that request. A session
    error, a failed request or a reset starts over with a full fetch."""

    __slots__ = ("leader_id", "session_id", "next_epoch", "view", "_states", "_pending", "built")

    def __init__(self, leader_id: int) -> None:
        self.leader_id = leader_id
        self.session_id = INVALID_SESSION_ID
        self.next_epoch = INITIAL_EPOCH
        self.view: dict[TopicPartition, FetchPartition] = {}
        self._states: dict[TopicPartition, PartitionFetchState] = {}  # the states ``view`` was made from
        self._pending: tuple | None = None  # (view, states) of the request in flight
        self.built: FetchRequest | None = None  # the last request built

    @property
    def pending_view(self) -> dict[TopicPartition, FetchPartition] | None:
        """What the leader's session holds once the request in flight is applied."""
        return self._pending[0] if self._pending is not None else None

    def reset(self) -> None:
        self.next_epoch = INITIAL_EPOCH  # keeps session_id: the leader closes it when opening the next
        self.view = {}
        self._states = {}

    def build(self, ready: Mapping[TopicPartition, PartitionFetchState],
              make: Callable[[TopicPartition, PartitionFetchState], FetchPartition]):
        """(partitions to send, forgotten, session id, epoch) for the next request."""
        if self.next_epoch == INITIAL_EPOCH:
            parts = {tp: make(tp, st) for tp, st in ready.items()}
            self._pending = (parts, dict(ready))
            return parts, (), self.session_id, INITIAL_EPOCH
        # Runs every round over every ready partition: identity checks first, no copies
        # unless something changed.
        old_view, old_states = self.view, self._states
        parts = {}
        added = 0
        for tp, st in ready.items():
            prev = old_states.get(tp)
            if prev is st:
                continue
            if (prev is not None and prev.fetch_offset == st.fetch_offset
                    and prev.current_leader_epoch == st.current_leader_epoch
                    and prev.last_fetched_epoch == st.last_fetched_epoch
                    and prev.push_session_id == st.push_session_id):
                continue  # a new state object, the same fetch position
            parts[tp] = make(tp, st)
            if prev is None:
                added += 1
        # ready = (ready & view) + added: the view is covered when the counts match
        forgotten = () if len(ready) - added == len(old_view) else tuple(tp for tp in old_view if tp not in ready)
        if parts or forgotten:
            view = dict(old_view)
            view.update(parts)
            for tp in forgotten:
                del view[tp]
        else:
            view = old_view
        self._pending = (view, dict(ready))
        return parts, forgotten, self.session_id, self.next_epoch

    def handle_response(self, request: FetchRequest, response: object) -> None:
        error = getattr(response, "error", Errors.NONE)
        pending, self._pending = self._pending, None
        if error != Errors.NONE or pending is None:
            log.info("fetch session %d with leader %d ends (%s): the next fetch is a full one",
                     self.session_id, self.leader_id, getattr(error, "name", error))
            self.reset()
            return
        session_id = getattr(response, "session_id", INVALID_SESSION_ID)
        if request.session_epoch == INITIAL_EPOCH:
            self.session_id = session_id
            if self.session_id == INVALID_SESSION_ID:
                return  # the leader keeps no sessions: every fetch stays a full one
            self.next_epoch = 1
        elif session_id == INVALID_SESSION_ID:
            # The leader closed the session (the request forgot its last partition): the next
            # fetch opens a new one.
            self.session_id = INVALID_SESSION_ID
            self.reset()
            return
        else:
            self.next_epoch = self.next_epoch + 1 if self.next_epoch < 0x7FFFFFFF else 1
        self.view, self._states = pending


def _partition_map(response: object, what: str) -> Mapping:
    if isinstance(response, Mapping):
        return response
    for attr in ("partitions", "responses"):
        value = getattr(response, attr, None)
        if isinstance(value, Mapping):
            return value
    raise LeaderResponseError(
        f"unexpected {what} response of type {type(response).__name__}: {response!r}")


class RemoteLeaderEndPoint(LeaderEndPoint):
    """A leader reached over the in-process transport (Kafka's ``RemoteLeaderEndPoint``).

    ``transport.request(source_id, leader_id, body, timeout_s)`` must return, for a Fetch, a
    mapping ``tp -> FetchPartitionResponse`` (or an object whose ``partitions`` is one), and
    likewise ``tp -> EpochEndOffset`` / ``tp -> ListOffsetsPartitionResponse``.
    """

    def __init__(self, source_broker_id: int, broker_epoch_fn: Callable[[], int], leader_id: int,
                 transport, config: "Mapping[str, object] | FetcherConfig | None" = None) -> None:
        self.source_broker_id = source_broker_id
        self.broker_epoch_fn = broker_epoch_fn
        self.leader_id = leader_id
        self.transport = transport
        self.config = FetcherConfig.from_mapping(config)
        self._timeout_s = self.config.replica_socket_timeout_ms / 1000.0
        self._closed = False
        self._lock = threading.Lock()
        self._in_flight: set[threading.Event] = set()
        self._session = FetchSessionHandler(leader_id) if self.config.fetch_sessions else None
        # The session the leader last opened for us (under _lock): close() ends it.
        self._leader_session = INVALID_SESSION_ID

    def __repr__(self) -> str:
        return f"RemoteLeaderEndPoint({self.source_broker_id} -> {self.leader_id})"

    def _fetch_partition(self, tp: TopicPartition, st: PartitionFetchState, log_start_offsets) -> FetchPartition:
        return FetchPartition(
            fetch_offset=st.fetch_offset,
            current_leader_epoch=st.current_leader_epoch,
            last_fetched_epoch=UNDEFINED_EPOCH if st.last_fetched_epoch is None else st.last_fetched_epoch,
            log_start_offset=-1 if log_start_offsets is None else log_start_offsets.get(tp, -1),
            max_bytes=self.config.replica_fetch_max_bytes,
            push_session_id=st.push_session_id,
        )

    def build_fetch(self, partitions, log_start_offsets=None):
        cfg = self.config
        fetching = ReplicaState.FETCHING
        ready = partitions
        if any(st.state is not fetching for st in partitions.values()):
            ready = {tp: st for tp, st in partitions.items() if st.state is fetching}
        session = self._session
        if not ready and (session is None or session.next_epoch == INITIAL_EPOCH or not session.view):
            return None
        # (With nothing ready and a session open, the request forgets every partition, as
        # Kafka's FetchSessionHandler builds it: the leader then closes the empty session.)
        forgotten: tuple[TopicPartition, ...] = ()
        session_id, epoch = INVALID_SESSION_ID, FINAL_EPOCH
        if self._session is None:
            parts = {tp: self._fetch_partition(tp, st, log_start_offsets) for tp, st in ready.items()}
        else:
            parts, forgotten, session_id, epoch = self._session.build(
                ready, lambda tp, st: self._fetch_partition(tp, st, log_start_offsets))
        request = FetchRequest(
            replica_id=self.source_broker_id,
            replica_epoch=self.broker_epoch_fn(),
            max_wait_ms=cfg.replica_fetch_wait_max_ms,
            min_bytes=cfg.replica_fetch_min_bytes,
            max_bytes=cfg.replica_fetch_response_max_bytes,
            isolation_level=IsolationLevel.LOG_END,
            partitions=parts,
            session_id=session_id,
            session_epoch=epoch,
            forgotten=forgotten,
        )
        if self._session is not None:
            self._session.built = request
        return request

    def fetched_partitions(self, request):
        session = self._session
        if session is not None and request.is_incremental and session.built is request \
                and session.pending_view is not None:
            return session.pending_view
        return request.partitions

    def _request(self, body: object) -> object:
        # As transport.request, but close() can fail the wait at once: a dropped request would
        # otherwise hold up the fetcher's shutdown for replica.socket.timeout.ms.
        done = threading.Event()
        result: list = [_PENDING, None]

        def callback(response: object, error: TransportError | None) -> None:
            result[0] = response
            result[1] = error
            done.set()
            if error is None and isinstance(body, FetchRequest) and body.session_epoch == INITIAL_EPOCH:
                self._note_leader_session(getattr(response, "session_id", INVALID_SESSION_ID))

        with self._lock:
            if self._closed:
                raise TransportError(f"{self!r} is closed")
            self._in_flight.add(done)
        try:
            self.transport.send_async(self.source_broker_id, self.leader_id, body, callback)
            if not done.wait(self._timeout_s):
                raise TransportError(
                    f"{type(body).__name__} from broker {self.source_broker_id} to broker "
                    f"{self.leader_id} timed out after {self._timeout_s:.3f}s")
        finally:
            with self._lock:
                self._in_flight.discard(done)
        if result[1] is not None:
            raise result[1]
        if result[0] is _PENDING:
            raise TransportError(f"{self!r} closed with {type(body).__name__} in flight")
        return result[0]

    def fetch(self, request):
        # The leader parks the request up to max_wait_ms, so the timeout covers both.
        session = self._session if request.session_epoch != FINAL_EPOCH else None
        try:
            response = self._request(request)
        except Exception:
            if session is not None:
                session.reset()  # the leader may or may not have applied it: start over
            raise
        if session is not None:
            session.handle_response(request, response)
        return dict(_partition_map(response, "Fetch"))

    def fetch_epoch_end_offsets(self, partitions):
        if not partitions:
            return {}
        request = OffsetsForLeaderEpochRequest(replica_id=self.source_broker_id, partitions=dict(partitions))
        try:
            return dict(_partition_map(self._request(request), "OffsetsForLeaderEpoch"))
        except (TransportError, LeaderResponseError) as e:
            # As Kafka: any failure of the request becomes an error for every partition in it.
            log.warning("OffsetsForLeaderEpoch to broker %d failed: %s", self.leader_id, e)
            return {tp: EpochEndOffset(error=Errors.BROKER_NOT_AVAILABLE) for tp in partitions}

    def _list_offset(self, tp: TopicPartition, current_leader_epoch: int, timestamp: int) -> tuple[int, int]:
        request = ListOffsetsRequest(
            replica_id=self.source_broker_id,
            isolation_level=IsolationLevel.LOG_END,
            partitions=[ListOffsetsPartition(tp, timestamp, current_leader_epoch)],
        )
        answer = _partition_map(self._request(request), "ListOffsets").get(tp)
        if not isinstance(answer, ListOffsetsPartitionResponse):
            raise LeaderResponseError(f"ListOffsets reply from broker {self.leader_id} lacks {tp}",
                                      partition=tp)
        if answer.error != Errors.NONE:
            raise LeaderResponseError(
                f"ListOffsets for {tp} at broker {self.leader_id} failed: {Errors(answer.error).name}",
                error=Errors(answer.error), partition=tp)
        return answer.leader_epoch, answer.offset

    def fetch_earliest_offset(self, tp, current_leader_epoch):
        return self._list_offset(tp, current_leader_epoch, EARLIEST_TIMESTAMP)

    def fetch_latest_offset(self, tp, current_leader_epoch):
        return self._list_offset(tp, current_leader_epoch, LATEST_TIMESTAMP)

    @property
    def requests_in_flight(self) -> int:
        with self._lock:
            return len(self._in_flight)

    def _note_leader_session(self, session_id: int) -> None:
        """The leader opened ``session_id`` for us; one opened after close() is closed at once."""
        if session_id == INVALID_SESSION_ID:
            return
        with self._lock:
            orphan = self._closed  # answered after close began: no fetch will use it
            if not orphan:
                self._leader_session = session_id
        if orphan:
            self._close_session(session_id)

    def _close_session(self, session_id: int) -> None:
        """Ask the leader to drop ``session_id`` (a fetch at FINAL_EPOCH naming no partition,
        as Kafka's consumer closes its sessions), without waiting for the answer."""
        request = FetchRequest(
            replica_id=self.source_broker_id, replica_epoch=self.broker_epoch_fn(), max_wait_ms=0,
            min_bytes=0, max_bytes=0, isolation_level=IsolationLevel.LOG_END, partitions={},
            session_id=session_id, session_epoch=FINAL_EPOCH)
        try:
            self.transport.send_async(self.source_broker_id, self.leader_id, request, lambda response, error: None)
        except Exception as e:  # the leader is gone: so is the session
            log.debug("closing fetch session %d at broker %d failed: %r", session_id, self.leader_id, e)

    def initiate_close(self) -> None:
        with self._lock:
            self._closed = True
            waiting = list(self._in_flight)
        for done in waiting:
            done.set()

    def close(self) -> None:
        """Fail the requests in flight and close the fetch session on the leader, so a fetcher
        that stops frees its slot in the leader's session cache at once."""
        self.initiate_close()
        with self._lock:
            session_id, self._leader_session = self._leader_session, INVALID_SESSION_ID
        if session_id != INVALID_SESSION_ID:
            self._close_session(session_id)


# --- local replica operations ---------------------------------------------------------------


@runtime_checkable
class FollowerReplicaOps(Protocol):
    """What a fetcher thread does to its local follower replicas."""

    def process_partition_data(self, tp: TopicPartition, fetch_offset: int,
                               response: FetchPartitionResponse) -> FollowerAppendInfo | None: ...

    def truncate(self, tp: TopicPartition, offset: int) -> None: ...

    def truncate_fully_and_start_at(self, tp: TopicPartition, offset: int) -> None: ...

    def log_start_offset(self, tp: TopicPartition) -> int: ...

    def log_end_offset(self, tp: TopicPartition) -> int: ...

    def latest_epoch(self, tp: TopicPartition) -> int | None: ...

    def end_offset_for_epoch(self, tp: TopicPartition, epoch: int) -> tuple[int, int] | None: ...

    def high_watermark(self, tp: TopicPartition) -> int: ...

    def is_present(self, tp: TopicPartition) -> bool: ...


def _value(x):
    """Read a Log attribute that may be a property or a zero-argument method."""
    return x() if callable(x) else x


class LogReplicaOps:
    """:class:`FollowerReplicaOps` over real :class:`replication.log.Log` objects.

    ``get_log(tp)`` returns the follower's log, or None when the replica is not (or no longer)
    hosted here, which is a :class:`KafkaStorageError` for the partition (it fails only that
    partition). Subclasses hook partition-level effects by overriding the methods, calling
    ``super()``.
    """

    def __init__(self, get_log: Callable[[TopicPartition], object | None]) -> None:
        self._get_log = get_log

    def log(self, tp: TopicPartition):
        lg = self._get_log(tp)
        if lg is None:
            raise KafkaStorageError(f"no local log for {tp} on this broker")
        return lg

    def is_present(self, tp):
        return self._get_log(tp) is not None

    def log_start_offset(self, tp):
        return _value(self.log(tp).log_start_offset)

    def log_end_offset(self, tp):
        return _value(self.log(tp).log_end_offset)

    def high_watermark(self, tp):
        return _value(self.log(tp).high_watermark)

    def latest_epoch(self, tp):
        return self.log(tp).leader_epoch_cache.latest_epoch

    def end_offset_for_epoch(self, tp, epoch):
        """``(epoch, end offset)`` of the greatest local epoch <= ``epoch`` (rule 12), or None."""
        lg = self.log(tp)
        found_epoch, end_offset = lg.leader_epoch_cache.end_offset_for(epoch, _value(lg.log_end_offset))
        if found_epoch == UNDEFINED_EPOCH or end_offset == UNDEFINED_EPOCH_OFFSET:
            return None
        return found_epoch, end_offset

    def truncate(self, tp, offset):
        lg = self.log(tp)
        hw = _value(lg.high_watermark)
        lg.truncate_to(offset)
        if offset < hw:
            log.warning("truncated %s to %d, below its high watermark %d", tp, offset, hw)

    def truncate_fully_and_start_at(self, tp, offset):
        self.log(tp).truncate_fully_and_start_at(offset)

    def process_partition_data(self, tp, fetch_offset, response):
        """Append the leader's records, then HW := clamp(leader HW) and
        log start := max(own, leader's) (rule 27)."""
        lg = self.log(tp)
        leo = _value(lg.log_end_offset)
        if fetch_offset != leo:
            raise IllegalStateError(
                f"offset mismatch for {tp}: fetched offset {fetch_offset}, log end offset {leo}")
        records = response.records
        first = last = -1
        last_epoch = None
        size = records.size
        if size:
            batches = records.batches()
            first = batches[0].base_offset
            last = batches[-1].last_offset
            last_epoch = batches[-1].partition_leader_epoch
            try:
                lg.append_as_follower(records)
            except UnexpectedAppendOffsetError as e:
                # The leader's log start can fall inside a batch (retention by deleteRecords,
                # an out-of-range reset): the first batch then starts below our empty log's
                # start. As Kafka's Partition does, restart the empty log at the batch's base.
                start = _value(lg.log_start_offset)
                if leo == start and e.first_offset < leo <= e.last_offset:
                    log.info("%s: first fetched batch starts at %d, below the log start %d of the "
                             "empty log; restarting the log there", tp, e.first_offset, leo)
                    lg.truncate_fully_and_start_at(e.first_offset)
                    lg.append_as_follower(records)
                else:
                    raise
        else:
            size = 0
        self._update_follower_offsets(tp, lg, response)
        return FollowerAppendInfo(first, last, last_epoch, size, _value(lg.high_watermark))

    def _update_follower_offsets(self, tp, lg, response) -> None:
        if response.high_watermark >= 0:
            lg.maybe_update_high_watermark(response.high_watermark)
        leader_start = response.log_start_offset
        if leader_start > _value(lg.log_start_offset):
            lg.maybe_increment_log_start_offset(leader_start)


# --- the fetcher thread ---------------------------------------------------------------------


SwitchToPushCallback = Callable[[TopicPartition, int], None]


class ReplicaFetcherThread(threading.Thread):
    """Fetches from one leader for a set of partitions (Kafka's AbstractFetcherThread +
    ReplicaFetcherThread). Call :meth:`start` to run it, or :meth:`do_work` directly in tests.
    """

    def __init__(self, name: str, fetcher_id: int, leader: LeaderEndPoint, replicas: FollowerReplicaOps,
                 config: "Mapping[str, object] | FetcherConfig | None" = None,
                 failed_partitions: FailedPartitions | None = None,
                 on_switch_to_push: SwitchToPushCallback | None = None,
                 clock: Clock | None = None) -> None:
        super().__init__(name=name, daemon=True)
        self.fetcher_id = fetcher_id
        self.leader = leader
        self.replicas = replicas
        self.config = FetcherConfig.from_mapping(config)
        self.failed_partitions = failed_partitions if failed_partitions is not None else FailedPartitions()
        self.on_switch_to_push = on_switch_to_push
        self.clock: Clock = clock or SYSTEM_CLOCK
        # Kafka's partitionMapLock/partitionMapCond. Re-entrant: fencing and failure marking
        # run inside locked sections.
        self._lock = threading.RLock()
        self._cond = threading.Condition(self._lock)
        # Insertion-ordered; an updated partition moves to the end (Kafka's PartitionStates)
        # so that partitions take turns in size-limited responses.
        self._states: dict[TopicPartition, PartitionFetchState] = {}
        self._running = True
        self._stopped = threading.Event()
        self.failure: BaseException | None = None

    # -- logging -------------------------------------------------------------------------------

    def _info(self, msg, *args):
        log.info("[%s] " + msg, self.name, *args)

    def _debug(self, msg, *args):
        if log.isEnabledFor(logging.DEBUG):
            log.debug("[%s] " + msg, self.name, *args)

    def _warn(self, msg, *args, exc_info=None):
        log.warning("[%s] " + msg, self.name, *args, exc_info=exc_info)

    def _error(self, msg, *args, exc_info=None):
        log.error("[%s] " + msg, self.name, *args, exc_info=exc_info)

    # -- lifecycle -----------------------------------------------------------------------------

    @property
    def is_running(self) -> bool:
        return self._running

    def run(self) -> None:
        self._info("starting")
        try:
            while self._running:
                self.do_work()
        except BaseException as e:  # as Kafka's ShutdownableThread: an unexpected error ends the thread
            if self._running:
                self.failure = e
                self._error("stopped by an unexpected error", exc_info=True)
        finally:
            self._stopped.set()
            self._info("stopped")

    def initiate_shutdown(self) -> bool:
        """Ask the thread to stop after its current step; True the first time."""
        with self._cond:
            first = self._running
            self._running = False
            self._cond.notify_all()
        if first:
            try:
                self.leader.initiate_close()  # fail a fetch parked or lost on its way
            except Exception:
                self._error("initiate_close of %r failed", self.leader, exc_info=True)
        return first

    def shutdown(self, timeout_s: float = 10.0) -> bool:
        """Stop, wait for the thread (a parked fetch ends within ``max_wait_ms``), close the
        leader end point. Returns False if the thread did not stop within ``timeout_s``."""
        self.initiate_shutdown()
        stopped = True
        if self.is_alive():
            self.join(timeout_s)
            stopped = not self.is_alive()
            if not stopped:
                self._warn("did not stop within %.1fs", timeout_s)
        self.leader.close()
        return stopped

    # -- partition management ------------------------------------------------------------------

    def add_partitions(self, initial_states: Mapping[TopicPartition, InitialFetchState]) -> set[TopicPartition]:
        """Start fetching ``initial_states`` (rule 23); a partition re-added at the same leader
        epoch keeps its state. Clears them from the failed partitions."""
        reset: dict[TopicPartition, PartitionFetchState] = {}
        with self._cond:
            needs_reset = [tp for tp, init in initial_states.items()
                           if init.init_offset < 0 and not self._same_epoch(tp, init)]
        for tp in needs_reset:
            # The leader is asked without holding the lock (see the module docstring).
            reset[tp] = self._fetch_offset_and_truncate(tp, initial_states[tp].current_leader_epoch)
        with self._cond:
            self.failed_partitions.remove_all(initial_states.keys())
            for tp, init in initial_states.items():
                current = self._states.get(tp)
                if current is not None and current.current_leader_epoch == init.current_leader_epoch:
                    new = current
                elif tp in reset:
                    new = reset[tp]
                else:
                    latest = init.last_fetched_epoch
                    if latest is None:
                        latest = self.replicas.latest_epoch(tp)
                    new = PartitionFetchState(
                        fetch_offset=init.init_offset, lag=None,
                        current_leader_epoch=init.current_leader_epoch, delay=None,
                        state=ReplicaState.FETCHING if latest is not None else ReplicaState.TRUNCATING,
                        last_fetched_epoch=latest)
                self._put(tp, new)
                self._info("added %s with %s", tp, new)
            self._cond.notify_all()
        return set(initial_states)

    def _same_epoch(self, tp: TopicPartition, init: InitialFetchState) -> bool:
        current = self._states.get(tp)
        return current is not None and current.current_leader_epoch == init.current_leader_epoch

    def remove_partitions(self, tps: Iterable[TopicPartition]) -> dict[TopicPartition, PartitionFetchState]:
        """Stop fetching ``tps``; returns the states of those that were here."""
        out: dict[TopicPartition, PartitionFetchState] = {}
        with self._cond:
            for tp in tps:
                st = self._states.pop(tp, None)
                if st is not None:
                    out[tp] = st
        return out

    def mark_partitions_for_truncation(self, tp: TopicPartition, truncation_offset: int) -> None:
        """Send ``tp`` back through the truncation phase, fetching from at most ``truncation_offset``."""
        with self._cond:
            st = self._states.get(tp)
            if st is not None:
                self._put(tp, st.updated(fetch_offset=min(st.fetch_offset, truncation_offset),
                                         state=ReplicaState.TRUNCATING, last_fetched_epoch=None))
                self._cond.notify_all()

    def resume_fetching(self, tp: TopicPartition, fetch_offset: int, session_id: int | None = None) -> bool:
        """Move a partition (normally ``PUSHING``) back to ``FETCHING`` from ``fetch_offset``.
        Its fetches keep carrying its push session id (or ``session_id`` if given), so the
        leader can tell which session ended. Returns False if the partition is not here."""
        with self._cond:
            st = self._states.get(tp)
            if st is None:
                return False
            self._put(tp, st.updated(fetch_offset=fetch_offset, state=ReplicaState.FETCHING, delay=None,
                                     last_fetched_epoch=self.replicas.latest_epoch(tp),
                                     push_session_id=st.push_session_id if session_id is None else session_id))
            self._info("%s resumes fetching at %d", tp, fetch_offset)
            self._cond.notify_all()
            return True

    @property
    def partition_count(self) -> int:
        with self._lock:
            return len(self._states)

    def partitions(self) -> set[TopicPartition]:
        with self._lock:
            return set(self._states)

    def fetch_state(self, tp: TopicPartition) -> PartitionFetchState | None:
        with self._lock:
            return self._states.get(tp)

    def delay_partitions(self, tps: Iterable[TopicPartition], delay_s: float | None = None) -> None:
        """Delay ``tps`` by ``delay_s`` (default the backoff); an already-delayed one is not re-delayed."""
        delay_s = self.config.backoff_s if delay_s is None else delay_s
        with self._cond:
            now = self.clock.monotonic()
            for tp in tps:
                st = self._states.get(tp)
                if st is not None and not st.is_delayed(now):
                    self._put(tp, st.updated(delay=now + delay_s))
            self._cond.notify_all()

    def _put(self, tp: TopicPartition, st: PartitionFetchState) -> None:
        self._states.pop(tp, None)
        self._states[tp] = st

    def _mark_partition_failed(self, tp: TopicPartition) -> None:
        with self._lock:
            self._states.pop(tp, None)
            self.failed_partitions.add(tp)
        self._warn("partition %s marked as failed", tp)

    def _on_partition_fenced(self, tp: TopicPartition, request_epoch: int | None) -> bool:
        """FENCED_LEADER_EPOCH: fail the partition if the request was at our current epoch;
        otherwise our epoch moved on meanwhile and the partition is retried. True = retry."""
        with self._lock:
            st = self._states.get(tp)
            if st is None:
                return False
            if request_epoch is not None and request_epoch == st.current_leader_epoch:
                self._info("partition %s is fenced at leader epoch %d", tp, st.current_leader_epoch)
                self._mark_partition_failed(tp)
                return False
            self._info("partition %s has a newer epoch %d than the fenced request; retrying",
                       tp, st.current_leader_epoch)
            return True

    # -- work ----------------------------------------------------------------------------------

    def do_work(self) -> None:
        """One round: the truncation phase, then one fetch (Kafka's ``doWork``)."""
        self._maybe_truncate()
        self._maybe_fetch()

    # truncation (rules 25-26)

    def _maybe_truncate(self) -> None:
        with_epochs: dict[TopicPartition, OffsetForLeaderPartition] = {}
        without_epochs: list[TopicPartition] = []
        with self._lock:
            now = self.clock.monotonic()
            for tp, st in list(self._states.items()):
                if not st.is_truncating(now):
                    continue
                try:
                    epoch = self.replicas.latest_epoch(tp)
                except Exception:
                    self._error("cannot read the latest epoch of %s", tp, exc_info=True)
                    self._mark_partition_failed(tp)
                    continue
                if epoch is not None:
                    with_epochs[tp] = OffsetForLeaderPartition(
                        current_leader_epoch=st.current_leader_epoch, leader_epoch=epoch)
                else:
                    without_epochs.append(tp)
        if with_epochs:
            self._truncate_to_epoch_end_offsets(with_epochs)
        if without_epochs:
            self._truncate_to_high_watermark(without_epochs)

    def _truncate_to_epoch_end_offsets(self, requested: dict[TopicPartition, OffsetForLeaderPartition]) -> None:
        try:
            end_offsets = self.leader.fetch_epoch_end_offsets(requested)
        except Exception as e:
            self._warn("OffsetsForLeaderEpoch for %s failed: %s", list(requested), e)
            self.delay_partitions(requested)
            return
        with self._cond:
            current: dict[TopicPartition, EpochEndOffset] = {}
            for tp, eo in end_offsets.items():
                req = requested.get(tp)
                if req is None:
                    raise IllegalStateError(
                        f"leader replied with partition {tp} not requested in OffsetsForLeaderEpoch")
                st = self._states.get(tp)
                # Drop answers for partitions removed or whose leader epoch changed meanwhile.
                if st is not None and st.current_leader_epoch == req.current_leader_epoch:
                    current[tp] = eo
            missing = [tp for tp in requested if tp not in end_offsets]
            fetch_offsets, with_error = self._maybe_truncate_to_epoch_end_offsets(current, requested)
            if missing:
                self._warn("leader did not answer OffsetsForLeaderEpoch for %s", missing)
                with_error.update(missing)
            self.delay_partitions(with_error)
            self._update_fetch_offset_and_maybe_mark_truncation_complete(fetch_offsets)

    def _maybe_truncate_to_epoch_end_offsets(
        self, fetched: Mapping[TopicPartition, EpochEndOffset],
        requested: Mapping[TopicPartition, OffsetForLeaderPartition],
    ) -> tuple[dict[TopicPartition, OffsetTruncationState], set[TopicPartition]]:
        fetch_offsets: dict[TopicPartition, OffsetTruncationState] = {}
        with_error: set[TopicPartition] = set()
        for tp, eo in fetched.items():
            if tp not in self._states:
                self._info("ignoring epoch offsets for %s: removed from this fetcher", tp)
                continue
            if eo.error == Errors.NONE:
                try:
                    ots = self._offset_truncation_state(tp, eo)
                except Exception:
                    self._error("cannot compute the truncation offset of %s", tp, exc_info=True)
                    self._mark_partition_failed(tp)
                    continue
                self._info("truncating %s to %s (leader epoch %d end offset %d)",
                           tp, ots, eo.leader_epoch, eo.end_offset)
                if self._do_truncate(tp, ots):
                    fetch_offsets[tp] = ots
            elif eo.error == Errors.FENCED_LEADER_EPOCH:
                req = requested.get(tp)
                if self._on_partition_fenced(tp, req.current_leader_epoch if req is not None else None):
                    with_error.add(tp)
            else:
                self._info("retrying OffsetsForLeaderEpoch for %s: leader reported %s",
                           tp, Errors(eo.error).name)
                with_error.add(tp)
        return fetch_offsets, with_error

    def _offset_truncation_state(self, tp: TopicPartition, eo: EpochEndOffset) -> OffsetTruncationState:
        """Where to truncate given the leader's ``(epoch, end offset)`` (rule 26)."""
        if eo.end_offset == UNDEFINED_EPOCH_OFFSET:
            # The leader does not know our epoch: fall back to the initial fetch offset, which
            # for a truncating partition is its high watermark (rule 23).
            st = self._states[tp]
            return OffsetTruncationState(st.fetch_offset, True)
        replica_end = self.replicas.log_end_offset(tp)
        if eo.leader_epoch == UNDEFINED_EPOCH:
            return OffsetTruncationState(min(eo.end_offset, replica_end), True)
        local = self.replicas.end_offset_for_epoch(tp, eo.leader_epoch)
        if local is None:
            return OffsetTruncationState(min(eo.end_offset, replica_end), True)
        follower_epoch, follower_end = local
        if follower_epoch != eo.leader_epoch:
            # We do not know the leader's epoch: truncate to the end of our greatest epoch below
            # it and ask again with our (now smaller) latest epoch.
            return OffsetTruncationState(min(follower_end, replica_end), False)
        return OffsetTruncationState(min(follower_end, eo.end_offset, replica_end), True)

    def _truncate_to_high_watermark(self, tps: list[TopicPartition]) -> None:
        with self._lock:
            fetch_offsets: dict[TopicPartition, OffsetTruncationState] = {}
            for tp in tps:
                st = self._states.get(tp)
                if st is None:
                    continue
                ots = OffsetTruncationState(st.fetch_offset, True)
                self._info("truncating %s to its high watermark %d (no leader epoch)", tp, st.fetch_offset)
                if self._do_truncate(tp, ots):
                    fetch_offsets[tp] = ots
            self._update_fetch_offset_and_maybe_mark_truncation_complete(fetch_offsets)

    def _do_truncate(self, tp: TopicPartition, ots: OffsetTruncationState) -> bool:
        try:
            self.replicas.truncate(tp, ots.offset)
            return True
        except Exception:
            self._error("failed to truncate %s at offset %d", tp, ots.offset, exc_info=True)
            self._mark_partition_failed(tp)
            return False

    def _update_fetch_offset_and_maybe_mark_truncation_complete(
            self, fetch_offsets: Mapping[TopicPartition, OffsetTruncationState]) -> None:
        # With truncation on fetch (diverging epochs), a partition fetches even when its
        # truncation is incomplete: the leader answers with a diverging epoch again if needed.
        for tp, ots in fetch_offsets.items():
            st = self._states.get(tp)
            if st is None:
                continue
            try:
                latest = self.replicas.latest_epoch(tp)
            except Exception:
                self._error("cannot read the latest epoch of %s", tp, exc_info=True)
                self._mark_partition_failed(tp)
                continue
            self._states[tp] = st.updated(fetch_offset=ots.offset, state=ReplicaState.FETCHING,
                                          last_fetched_epoch=latest)

    # fetch (rules 27-29)

    def _maybe_fetch(self) -> None:
        with self._cond:
            now = self.clock.monotonic()
            fetching = ReplicaState.FETCHING
            # (is_ready_for_fetch inlined: this runs over every partition on every round)
            ready = {tp: st for tp, st in self._states.items()
                     if st.state is fetching and (st.delay is None or st.delay <= now)}
            # Asked even with nothing ready: an end point with a fetch session may have one
            # last request to send (forgetting every partition).
            request = self.leader.build_fetch(ready, _LogStartOffsets(self.replicas))
            if request is None:
                if self._running:
                    timeout = self._idle_wait_s(now)
                    self._debug("nothing to fetch; waiting up to %.3fs", timeout)
                    self.clock.wait(self._cond, timeout)
                return
        self._process_fetch_request(request)

    def _on_corrupt_records(self, tp: TopicPartition, st: PartitionFetchState, data: FetchPartitionResponse,
                            error: ReplicationError) -> None:
        """Append the valid batches before a corrupt one and mark the partition's fetch state
        with the error; log it at ERROR once per offset (then at DEBUG on each retry)."""
        fetch_offset = st.fetch_offset
        position = getattr(error, "position", -1)
        if position > 0:
            try:
                prefix = dataclasses.replace(data, records=MemoryRecords(data.records.buffer[:position]))
                info = self.replicas.process_partition_data(tp, fetch_offset, prefix)
                if info is not None and info.valid_bytes > 0:
                    fetch_offset = info.last_offset + 1
            except ReplicationError as e2:
                self._debug("could not append the records before the corrupt batch of %s: %s", tp, e2)
        reason = (f"corrupt records from leader {getattr(self.leader, 'leader_id', '?')} for {tp.topic}-{tp.partition} at offset "
                  f"{fetch_offset}: {error}")
        if st.error != reason:
            self._error("%s; the replica stays at offset %d and retries", reason, fetch_offset)
        else:
            self._debug("%s (again)", reason)
        self._put(tp, st.updated(fetch_offset=fetch_offset, error=reason,
                                 last_fetched_epoch=st.last_fetched_epoch))

    def _idle_wait_s(self, now: float) -> float:
        """Wait out the backoff, but no longer than the earliest delayed partition needs."""
        wait = self.config.backoff_s
        for st in self._states.values():
            if st.delay is not None and st.state is not ReplicaState.PUSHING and st.delay > now:
                wait = min(wait, st.delay - now)
        return wait

    def _process_fetch_request(self, request: FetchRequest) -> None:
        fetched = self.leader.fetched_partitions(request)
        try:
            self._debug("sending fetch for %d partitions", len(request.partitions))
            response = self.leader.fetch(request)
        except Exception as e:
            if self._running:
                self._warn("fetch for %d partitions failed: %r", len(fetched), e)
                self.delay_partitions(fetched)
            return

        with_error: set[TopicPartition] = set()
        out_of_range: list[tuple[TopicPartition, PartitionFetchState, int]] = []
        switched: list[tuple[TopicPartition, int]] = []
        with self._cond:
            if not self._running:
                # Shutting down: the broker may be closing these logs; leave them alone.
                return
            now = self.clock.monotonic()
            diverging: dict[TopicPartition, EpochEndOffset] = {}
            for tp, data in response.items():
                st = self._states.get(tp)
                if st is None:
                    continue
                req = fetched.get(tp)
                # The partition may have been removed, re-added or truncated while the fetch was
                # in flight: apply the answer only to the state it was asked for.
                if req is None or req.fetch_offset != st.fetch_offset or not st.is_ready_for_fetch(now):
                    continue
                err = data.error
                if err == Errors.NONE:
                    if data.diverging_epoch is not None:
                        epoch, end_offset = data.diverging_epoch
                        self._info("%s diverges from the leader: epoch %d ends at %d", tp, epoch, end_offset)
                        diverging[tp] = EpochEndOffset(Errors.NONE, epoch, end_offset)
                        continue
                    self._apply_partition_data(tp, st, data, with_error, switched)
                elif err == Errors.OFFSET_OUT_OF_RANGE:
                    out_of_range.append((tp, st, req.current_leader_epoch))
                elif err == Errors.FENCED_LEADER_EPOCH:
                    if self._on_partition_fenced(tp, req.current_leader_epoch):
                        with_error.add(tp)
                else:
                    # UNKNOWN_LEADER_EPOCH, NOT_LEADER_OR_FOLLOWER, UNKNOWN_TOPIC_OR_PART,
                    # CORRUPT_MESSAGE, ...: the leader is changing or recovering; retry later.
                    self._debug("fetch of %s failed with %s; retrying after backoff", tp, Errors(err).name)
                    with_error.add(tp)
            if diverging:
                fetch_offsets, errs = self._maybe_truncate_to_epoch_end_offsets(diverging, {})
                with_error.update(errs)
                self._update_fetch_offset_and_maybe_mark_truncation_complete(fetch_offsets)

        for tp, st, request_epoch in out_of_range:
            if self._handle_out_of_range(tp, st, request_epoch):
                with_error.add(tp)
        if with_error:
            self.delay_partitions(with_error)
        if self.on_switch_to_push is not None:
            for tp, session_id in switched:
                try:
                    self.on_switch_to_push(tp, session_id)
                except Exception:
                    self._error("on_switch_to_push(%s, %d) failed", tp, session_id, exc_info=True)

    def _apply_partition_data(self, tp: TopicPartition, st: PartitionFetchState, data: Any,
                              with_error: set, switched: list) -> None:
        """Append a fetched partition's records and move its fetch state on (under `_cond`)."""
        try:
            info = self.replicas.process_partition_data(tp, st.fetch_offset, data)
        except (CorruptRecordError, InvalidRecordError) as e:
            # Keep what precedes the bad batch, note the error in the fetch state
            # and retry later (a torn read at the leader heals; a damaged file
            # does not, and then the state and the log say why the replica lags).
            self._on_corrupt_records(tp, st, data, e)
            with_error.add(tp)
            return
        except KafkaStorageError:
            self._error("storage error on %s at offset %d", tp, st.fetch_offset, exc_info=True)
            self._mark_partition_failed(tp)
            return
        except Exception:
            self._error("unexpected error processing %s at offset %d", tp, st.fetch_offset,
                        exc_info=True)
            self._mark_partition_failed(tp)
            return
        if info is None:
            return
        next_offset = info.last_offset + 1 if info.valid_bytes > 0 else st.fetch_offset
        last_epoch = info.last_leader_epoch if info.last_leader_epoch is not None \
            else st.last_fetched_epoch
        new = PartitionFetchState(
            fetch_offset=next_offset, lag=max(0, data.high_watermark - next_offset),
            current_leader_epoch=st.current_leader_epoch, delay=None,
            state=ReplicaState.FETCHING, last_fetched_epoch=last_epoch,
            push_session_id=st.push_session_id)
        if data.switch_to_push:
            new = new.updated(state=ReplicaState.PUSHING, push_session_id=data.push_session_id)
            switched.append((tp, data.push_session_id))
            self._info("%s switches to push at offset %d (session %d)",
                       tp, next_offset, data.push_session_id)
        self._put(tp, new)

    def _handle_out_of_range(self, tp: TopicPartition, st: PartitionFetchState, request_epoch: int) -> bool:
        """Rule 29; True if the partition should be retried after the backoff."""
        try:
            new = self._fetch_offset_and_truncate(tp, st.current_leader_epoch, expected=st)
        except LeaderResponseError as e:
            if e.error == Errors.FENCED_LEADER_EPOCH:
                return self._on_partition_fenced(tp, request_epoch)
            self._info("could not fetch offsets of %s: %s", tp, e)
            return True
        except Exception as e:
            self._error("error resetting the offset of %s: %r", tp, e)
            return True
        if new is not None:
            with self._cond:
                if self._states.get(tp) is st:
                    self._put(tp, new)
                    self._info("%s: offset out of range, fetching from %d", tp, new.fetch_offset)
        return False

    def _fetch_offset_and_truncate(self, tp: TopicPartition, current_leader_epoch: int,
                                   expected: PartitionFetchState | None = None) -> PartitionFetchState | None:
        """Kafka's ``fetchOffsetAndTruncate``: ask the leader for its end (and start) offset and
        reset the local log to where fetching can resume. With ``expected``, the truncation
        happens only if the partition's state is still ``expected`` (else returns None)."""
        _, leader_end = self.leader.fetch_latest_offset(tp, current_leader_epoch)
        replica_end = self.replicas.log_end_offset(tp)
        leader_start = None
        if leader_end >= replica_end:
            _, leader_start = self.leader.fetch_earliest_offset(tp, current_leader_epoch)
        with self._lock:
            if expected is not None and self._states.get(tp) is not expected:
                return None
            replica_end = self.replicas.log_end_offset(tp)
            if leader_end < replica_end:
                # An unclean election left the leader shorter than us: follow its log.
                self._warn("%s: leader end offset %d < local end offset %d; truncating",
                           tp, leader_end, replica_end)
                self.replicas.truncate(tp, leader_end)
                return PartitionFetchState(leader_end, 0, current_leader_epoch, None, ReplicaState.FETCHING,
                                           self.replicas.latest_epoch(tp))
            if leader_start is None:  # only if the local log shrank meanwhile
                _, leader_start = self.leader.fetch_earliest_offset(tp, current_leader_epoch)
            offset_to_fetch = max(leader_start, replica_end)
            if leader_start > replica_end:
                # Retention at the leader removed what we need: start over at its log start.
                self._warn("%s: leader log start %d > local end offset %d; restarting the log there",
                           tp, leader_start, replica_end)
                self.replicas.truncate_fully_and_start_at(tp, leader_start)
            return PartitionFetchState(offset_to_fetch, max(0, leader_end - offset_to_fetch),
                                       current_leader_epoch, None, ReplicaState.FETCHING,
                                       self.replicas.latest_epoch(tp))


# --- the manager ----------------------------------------------------------------------------


EndPointFactory = Callable[[int, int], LeaderEndPoint]


class ReplicaFetcherManager:
    """Owns the fetcher threads of one broker, keyed by ``(leader id, fetcher id)`` (rule 22)."""

    def __init__(self, broker_id: int, config: "Mapping[str, object] | FetcherConfig | None",
                 endpoint_factory: EndPointFactory, replicas: FollowerReplicaOps, *,
                 on_switch_to_push: SwitchToPushCallback | None = None,
                 clock: Clock | None = None, start_threads: bool = True) -> None:
        self.broker_id = broker_id
        self.config = FetcherConfig.from_mapping(config)
        self.endpoint_factory = endpoint_factory
        self.replicas = replicas
        self.on_switch_to_push = on_switch_to_push
        self.clock = clock
        self.start_threads = start_threads
        self.failed_partitions = FailedPartitions()
        self._lock = threading.RLock()
        self._threads: dict[tuple[int, int], ReplicaFetcherThread] = {}
        self._owner: dict[TopicPartition, tuple[int, int]] = {}
        self._closed = False

    def fetcher_id(self, tp: TopicPartition) -> int:
        return fetcher_id_for(tp, self.config.num_replica_fetchers)

    @property
    def fetcher_threads(self) -> dict[tuple[int, int], ReplicaFetcherThread]:
        with self._lock:
            return dict(self._threads)

    def fetcher_for(self, tp: TopicPartition) -> ReplicaFetcherThread | None:
        with self._lock:
            key = self._owner.get(tp)
            return self._threads.get(key) if key is not None else None

    def _create_thread(self, leader_id: int, fetcher_id: int) -> ReplicaFetcherThread:
        name = f"ReplicaFetcherThread-{fetcher_id}-{leader_id}@broker-{self.broker_id}"
        thread = ReplicaFetcherThread(
            name, fetcher_id, self.endpoint_factory(leader_id, fetcher_id), self.replicas, self.config,
            self.failed_partitions, on_switch_to_push=self.on_switch_to_push, clock=self.clock)
        if self.start_threads:
            thread.start()
        return thread

    def add_fetcher_for_partitions(self, initial_states: Mapping[TopicPartition, InitialFetchState]) -> None:
        """Fetch ``initial_states`` from their leaders; a partition whose leader changed leaves
        its old thread first."""
        with self._lock:
            if self._closed:
                raise IllegalStateError("the replica fetcher manager is closed")
            groups: dict[tuple[int, int], dict[TopicPartition, InitialFetchState]] = {}
            for tp, init in initial_states.items():
                if not isinstance(init, InitialFetchState):
                    raise TypeError(f"initial fetch state of {tp} must be an InitialFetchState, "
                                    f"got {type(init).__name__}")
                groups.setdefault((init.leader_id, self.fetcher_id(tp)), {})[tp] = init
            for key, states in groups.items():
                for tp in states:
                    old = self._owner.get(tp)
                    if old is not None and old != key and old in self._threads:
                        self._threads[old].remove_partitions([tp])
                thread = self._threads.get(key)
                if thread is None:
                    thread = self._create_thread(*key)
                    self._threads[key] = thread
                thread.add_partitions(states)
                for tp in states:
                    self._owner[tp] = key
                log.info("broker %d: fetching %s from broker %d (fetcher %d)",
                         self.broker_id, sorted(states), key[0], key[1])

    def remove_fetcher_for_partitions(self, tps: Iterable[TopicPartition]) -> dict[TopicPartition, PartitionFetchState]:
        """Stop fetching ``tps``; returns their last states. Also clears them from the failed set."""
        tps = list(tps)
        out: dict[TopicPartition, PartitionFetchState] = {}
        with self._lock:
            for tp in tps:
                key = self._owner.pop(tp, None)
                thread = self._threads.get(key) if key is not None else None
                if thread is not None:
                    out.update(thread.remove_partitions([tp]))
            self.failed_partitions.remove_all(tps)
        return out

    def resume_fetching(self, tp: TopicPartition, fetch_offset: int, session_id: int | None = None) -> bool:
        thread = self.fetcher_for(tp)
        return thread.resume_fetching(tp, fetch_offset, session_id) if thread is not None else False

    def shutdown_idle_fetcher_threads(self) -> None:
        with self._lock:
            idle = [key for key, t in self._threads.items() if t.partition_count <= 0]
            threads = [self._threads.pop(key) for key in idle]
        for t in threads:
            t.shutdown()

    def close_all_fetchers(self) -> None:
        with self._lock:
            self._closed = True
            threads = list(self._threads.values())
            self._threads.clear()
            self._owner.clear()
        # Stop them all at once, then wait: each may be parked in a long poll at its leader.
        for t in threads:
            t.initiate_shutdown()
        for t in threads:
            t.shutdown()
