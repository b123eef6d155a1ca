"""Stream-stream join logic (Kafka's KStreamJoinWindow + KStreamKStreamJoinLeftSide/RightSide with
the shared outer store of KIP-633 / Kafka 3.1+): inner, left and outer joins over `JoinWindows`.

What the operator must call. One `StreamStreamJoinLogic` per task, shared by the two processors of
the join (it holds Kafka's shared TimeTracker): the left input's processor calls
`process_left(key, value, timestamp, topic=, partition=, offset=)`, the right input's
`process_right(...)`. The operator builds three stores per task with the builders below
(`join_window_store_builder` for each side, `outer_join_store_builder` for left/outer joins; names
are the operator's, e.g. Kafka's KSTREAM-JOINTHIS-/JOINOTHER-/OUTERSHARED- names) and hands in the
typed window stores and an `OuterJoinStore` over the outer store. Results go to
`forward(key, joined_value, timestamp)`; an operator instead routes each side's results with
`route(is_left, forward, failed)` (`forward(key, value, timestamp, headers)`: that side's child,
with the record's headers; `failed()` before an error leaves the side) and calls the side's
`side_process(is_left)` as a stage `(key, value, timestamp, headers)`, with `record_metadata()`
naming the record (topic, partition, offset) in the warnings. `emit_interval_ms` is
`__emit.interval.ms.kstreams.outer.join.spurious.results.fix__` (1000 in an App, 0 in the test
driver) and `wall_clock` the task's cached system time in ms.

Semantics (Kafka's; the test file replays Kafka's own join test cases):
- Each record is joined with the other side's records in [t - before, t + after] (for the right
  side [t - after, t + before]); each match is forwarded at once with timestamp max(both
  timestamps). Then (`window_put`, the windowed node's part) it is stored in its side's window
  store (window start = its timestamp, duplicates kept): after its join, whatever became of it.
- A left-join left record, or an outer-join record of either side, that finds no match is held in
  the outer store and forwarded as joiner(value, None) / joiner(None, value), with its own
  timestamp, once its window has closed: left records when t + after + grace < stream time, right
  records when t + before + grace < stream time. A later match removes it from the store. The scan
  runs only for a record at stream time, only when the smallest held timestamp may have closed,
  and at most once per emit interval of wall clock. As in Kafka, "may have closed" uses a hint, the
  timestamp of the last record the previous scan visited, so a record can be emitted some time
  after its window closed (never before).
- Stream time is shared by both sides: the largest timestamp either has seen.
- A null key or null value is dropped and counted (dropped-records), except that an outer side
  (the left of a left join, both of an outer join) forwards a null-key record with a value at once
  as joiner(value, None) (KIP-962, Kafka 3.7+).
- Late records are Kafka's too: a record is always joined with what the other side's store still
  retains (retention before + after + grace), even after its own window closed; when its own
  side's store rejects it as expired (older than that store's observed time - retention, by
  segment as Kafka) it is counted through the LateRecordReporter (dropped-records, WARN once per
  window) as Kafka's store counts it. An unmatched record whose window end (t + after) is already
  behind stream time is forwarded as joiner(value, None) at once instead of being held, as Kafka
  (KAFKA-19536, still open, proposes waiting for the grace period).
"""

from __future__ import annotations

import logging
from contextlib import closing
from functools import partial
from typing import Any, Callable, Optional

from state.outer_join_store import OuterJoinStore
from streams.dsl.store_suppliers import (BuiltInDslStoreSuppliers, DslKeyValueParams, DslStoreSuppliers,
                                         DslWindowParams, supplier_of)
from streams.dsl.windows import EmitThrottle as _EmitThrottle
from streams.dsl.windows import JoinWindows, LateRecordReporter, Window
from streams.errors import TopologyError

__all__ = ["StreamStreamJoinLogic", "join_window_store_builder", "outer_join_store_builder",
           "INNER", "LEFT", "OUTER"]

log = logging.getLogger(__name__)

INNER, LEFT, OUTER = "inner", "left", "outer"
NO_TIMESTAMP = -1
MAX_TIME = (1 << 63) - 1
Forward = Callable[[Any, Any, int], None]


def join_window_store_builder(name: str, windows: JoinWindows, key_serde: Any = None, value_serde: Any = None, *,
                              suppliers: Optional[DslStoreSuppliers] = None, logging_enabled: bool = True,
                              log_config: Optional[dict] = None) -> Any:
    """The window store of one join side (Kafka's StreamJoinedStoreFactory): retention
    before + after + grace, window size before + after, duplicates retained, no caching;
    made by `suppliers` (RocksDB unless given)."""
    from state.stores import Stores
    from streams.dsl.windows import EmitStrategy

    retention = windows.size() + windows.grace_ms
    params = DslWindowParams(name, retention, windows.size(), True, EmitStrategy.on_window_update(), False, False)
    supplier = supplier_of(suppliers or BuiltInDslStoreSuppliers.ROCKS_DB, "window", params)
    builder = Stores.window_store_builder(supplier, key_serde, value_serde).with_caching_disabled()
    return builder.with_logging_enabled(log_config) if logging_enabled else builder.with_logging_disabled()


def outer_join_store_builder(name: str, *, suppliers: Optional[DslStoreSuppliers] = None,
                             logging_enabled: bool = True, log_config: Optional[dict] = None) -> Any:
    """The bytes key-value store behind the shared outer store (Kafka's OuterStreamJoinStoreFactory:
    a list-value store, no caching), made by `suppliers` (RocksDB unless given); wrap the built
    store in `OuterJoinStore` with the serdes."""
    from state.stores import Stores

    supplier = supplier_of(suppliers or BuiltInDslStoreSuppliers.ROCKS_DB, "key_value", DslKeyValueParams(name, False))
    builder = Stores.key_value_store_builder(supplier).with_caching_disabled()
    return builder.with_logging_enabled(log_config) if logging_enabled else builder.with_logging_disabled()


_NO_METADATA = ("", -1, -1)


def _no_metadata() -> None:
    """No record metadata to name (the warnings print Kafka's placeholders)."""


def _no_failure_mark() -> None:
    """Nothing to mark: an error leaves the side as it is."""


def _with_headers(forward: Forward) -> Callable[[Any, Any, int, Any], None]:
    """`forward(key, value, timestamp)` called as a side's `(key, value, timestamp, headers)`."""
    def forward_dropping_headers(key: Any, value: Any, timestamp: int, headers: Any) -> None:
        forward(key, value, timestamp)
    return forward_dropping_headers


class _NoExpiryCount:
    expired_records = 0
    observed_stream_time = NO_TIMESTAMP


class _Side:
    __slots__ = ("is_left", "this_store", "other_store", "join_before", "join_after", "outer", "this_inner")

    def __init__(self, is_left: bool, this_store: Any, other_store: Any, join_before: int, join_after: int,
                 outer: bool) -> None:
        self.is_left = is_left
        self.this_store = this_store
        self.other_store = other_store
        self.join_before = join_before
        self.join_after = join_after
        self.outer = outer
        # the bytes store under the layers: it counts the puts it skips as expired (a store that
        # does not count them: a stand-in that never changes)
        inner = this_store.inner_most() if hasattr(this_store, "inner_most") else this_store
        self.this_inner = inner if hasattr(inner, "expired_records") else _NoExpiryCount()


def _fetched(store: Any, key: Any, time_from: int, time_to: int) -> list:
    """A window store's records of `key` in [time_from, time_to] as a list (a store without
    `fetch_values`)."""
    with store.fetch(key, time_from, time_to) as it:
        return list(it)


class StreamStreamJoinLogic:
    """Both sides of one windowed stream-stream join in one task."""

    def __init__(self, windows: JoinWindows, left_store: Any, right_store: Any,
                 joiner: Callable[[Any, Any], Any], forward: Forward, *, join_type: str = INNER,
                 outer_store: Optional[OuterJoinStore] = None, late: LateRecordReporter,
                 emit_interval_ms: int = 0, wall_clock: Optional[Callable[[], int]] = None,
                 record_metadata: Optional[Callable[[], Optional[tuple]]] = None) -> None:
        if join_type not in (INNER, LEFT, OUTER):
            raise TopologyError(f"stream-stream join type must be one of inner, left, outer; got {join_type!r}")
        if join_type != INNER and outer_store is None:
            raise TopologyError(f"a {join_type} stream-stream join needs the shared outer store")
        self.windows = windows
        self.joiner = joiner
        # each side's results and failure mark (see route); both `forward` until routed
        self._forwards: list = [_with_headers(forward)] * 2
        self._failures: list = [_no_failure_mark] * 2
        self.record_metadata = record_metadata or _no_metadata
        self.join_type = join_type
        self.outer_store = outer_store if join_type != INNER else None
        self.late = late
        self.grace_ms = windows.grace_ms
        self.left = _Side(True, left_store, right_store, windows.before_ms, windows.after_ms, join_type != INNER)
        self.right = _Side(False, right_store, left_store, windows.after_ms, windows.before_ms, join_type == OUTER)
        self.throttle = _EmitThrottle(emit_interval_ms, wall_clock)
        # Kafka's TimeTracker: shared stream time, and the smallest held timestamp (a hint that
        # lets most records skip the outer-store scan)
        self.stream_time = NO_TIMESTAMP
        self.min_time = MAX_TIME
        if self.outer_store is not None:
            self._recover_min_time()
        self._steps = (self._step(self.left), self._step(self.right))
        self._window_puts = (self._window_put(self.left), self._window_put(self.right))

    def _recover_min_time(self) -> None:
        """After a restart the outer store may hold records; start from the oldest one."""
        with closing(self.outer_store.all()) as records:
            for _, rec in records:
                self.min_time = rec.timestamp
                break

    def process_left(self, key: Any, value: Any, timestamp: int, *, topic: str = "", partition: int = -1,
                     offset: int = -1) -> None:
        """The left side's join, then its windowed node's put (what the two nodes do)."""
        self._steps[0](key, value, timestamp, (), topic, partition, offset)
        if key is not None:
            self._window_puts[0](key, value, timestamp, topic, partition, offset)

    def process_right(self, key: Any, value: Any, timestamp: int, *, topic: str = "", partition: int = -1,
                      offset: int = -1) -> None:
        self._steps[1](key, value, timestamp, (), topic, partition, offset)
        if key is not None:
            self._window_puts[1](key, value, timestamp, topic, partition, offset)

    def route(self, is_left: bool, forward: Callable[[Any, Any, int, Any], None],
              failed: Callable[[], None]) -> None:
        """Where a side's results go: `forward(key, value, timestamp, headers)` (the record's
        headers), and `failed()` called before an error of the side leaves it."""
        self._forwards[0 if is_left else 1] = forward
        self._failures[0 if is_left else 1] = failed

    def side_process(self, is_left: bool) -> Callable[..., None]:
        """The side's per-record path as one positional call `(key, value, timestamp[, headers,
        topic, partition, offset])`: a stage (no method frame in between); without a topic the
        warnings ask `record_metadata()`."""
        return self._steps[0 if is_left else 1]

    def _joined(self, side: _Side, this_value: Any, other_value: Any) -> Any:
        return self.joiner(this_value, other_value) if side.is_left else self.joiner(other_value, this_value)

    def _step(self, side: _Side) -> Callable[..., None]:
        """The per-record work of one side, as one function with what it reads bound once."""
        index = 0 if side.is_left else 1
        forwards, failures = self._forwards, self._failures
        other = side.other_store
        # the other side's records in a time range, decoded, read at once where the store offers it
        fetch_values = getattr(other, "fetch_values", None) or partial(_fetched, other)
        join_before, join_after, outer = side.join_before, side.join_after, side.outer
        is_left = side.is_left
        joiner = self.joiner
        outer_store = self.outer_store

        def process(key: Any, value: Any, timestamp: int, headers: Any = (), topic: Optional[str] = None,
                    partition: int = -1, offset: int = -1) -> None:
            try:
                forward = forwards[index]
                if timestamp > self.stream_time:
                    self.stream_time = timestamp
                if key is None or value is None:
                    if outer and key is None and value is not None:
                        forward(None, self._joined(side, value, None), timestamp, headers)
                        return
                    self._skip(topic, partition, offset)
                    return
                window_end = timestamp + join_after
                if outer_store is not None and timestamp == self.stream_time:
                    self._emit_non_joined(side, forward, headers)
                time_from = timestamp - join_before
                if time_from < 0:
                    time_from = 0
                time_to = window_end if window_end > 0 else 0
                found = fetch_values(key, time_from, time_to)
                for other_ts, other_value in found:
                    if outer_store is not None:
                        outer_store.remove_if_present(key, other_ts, not is_left, timestamp)
                    forward(key, joiner(value, other_value) if is_left else joiner(other_value, value),
                            timestamp if timestamp > other_ts else other_ts, headers)
                if not found and outer:
                    if time_to < self.stream_time:
                        # out of order and its window already ended: nothing held for it (Kafka)
                        forward(key, self._joined(side, value, None), timestamp, headers)
                    else:
                        if timestamp < self.min_time:
                            self.min_time = timestamp
                        outer_store.put(key, timestamp, is_left, value)
            except BaseException:
                failures[index]()
                raise
        return process

    def window_put(self, is_left: bool) -> Callable[..., None]:
        """`put(key, value, timestamp[, topic, partition, offset])` of a side's windowed node
        (Kafka's KStreamJoinWindow), called once the side's join (or the self-join, over the left
        side) has processed the record: every record with a key starts its own window in its
        side's store, a None value too (the store logs it and keeps nothing; an in-memory one
        observes its time); a put the store skips as expired is counted and logged as Kafka's
        store does (the record named by `record_metadata()` without a topic)."""
        return self._window_puts[0 if is_left else 1]

    def _window_put(self, side: _Side) -> Callable[..., None]:
        this_put, inner = side.this_store.put, side.this_inner

        def put(key: Any, value: Any, timestamp: int, topic: Optional[str] = None, partition: int = -1,
                offset: int = -1) -> None:
            expired_before = inner.expired_records
            this_put(key, value, timestamp, timestamp)
            if inner.expired_records != expired_before:
                self._report_expired(side, key, timestamp, topic, partition, offset)
        return put

    def _skip(self, topic: Optional[str], partition: int, offset: int) -> None:
        """A record with a null key or value: Kafka's WARN, counted in dropped-records."""
        if topic is None:
            topic, partition, offset = self.record_metadata() or _NO_METADATA
        log.warning("Skipping record due to null key or value. topic=[%s] partition=[%d] offset=[%d]",
                    topic, partition, offset)
        self.late.sensor.count += 1

    def self_join_process(self) -> Callable[..., None]:
        """The per-record path of an inner join of a stream with itself over one window store
        (topology.optimization single.store.self.join; Kafka's KStreamKStreamSelfJoin), emitting
        what the two-store join emits, in its order: the record joined with the stored records in
        its left side's range, then its own pair, then the stored records' joins with it in the
        right side's range (its own pair goes before the first of those with a later timestamp).
        Unlike the two sides of a join, it skips a null key or value before stream time moves,
        and joins the record with itself before too (a joiner failing there leaves it unmoved).
        Its windowed node stores the record after it (`window_put(True)`). Its results and
        failures are routed as the left side's (`route(True, ...)`)."""
        side = self.left
        fetch_values = getattr(side.this_store, "fetch_values", None) or partial(_fetched, side.this_store)
        before, after = self.windows.before_ms, self.windows.after_ms
        retention = self.windows.size() + self.grace_ms
        joiner, forwards, failures = self.joiner, self._forwards, self._failures

        def process(key: Any, value: Any, timestamp: int, headers: Any = (), topic: Optional[str] = None,
                    partition: int = -1, offset: int = -1) -> None:
            try:
                forward = forwards[0]
                if key is None or value is None:
                    self._skip(topic, partition, offset)
                    return
                # the own pair before stream time moves, as Kafka's: a failing joiner leaves it unmoved
                own = joiner(value, value)
                if timestamp > self.stream_time:
                    self.stream_time = timestamp
                emit_own = timestamp > self.stream_time - retention + 1  # not already expired
                for other_ts, other_value in fetch_values(key, max(0, timestamp - before), max(0, timestamp + after)):
                    forward(key, joiner(value, other_value), timestamp if timestamp > other_ts else other_ts, headers)
                for other_ts, other_value in fetch_values(key, max(0, timestamp - after), max(0, timestamp + before)):
                    if emit_own and other_ts > timestamp:
                        emit_own = False
                        forward(key, own, timestamp, headers)
                    forward(key, joiner(other_value, value), timestamp if timestamp > other_ts else other_ts, headers)
                if emit_own:
                    forward(key, own, timestamp, headers)
            except BaseException:
                failures[0]()
                raise
        return process

    def _report_expired(self, side: _Side, key: Any, timestamp: int, topic: Optional[str], partition: int,
                        offset: int) -> None:
        if topic is None:
            topic, partition, offset = self.record_metadata() or _NO_METADATA
        retention = self.windows.size() + self.grace_ms
        self.late.report(key, timestamp, Window(max(0, timestamp - side.join_before), timestamp + side.join_after),
                         side.this_inner.observed_stream_time - retention, self.stream_time, topic, partition,
                         offset)

    def _emit_non_joined(self, side: _Side, forward: Callable[[Any, Any, int, Any], None], headers: Any) -> None:
        """Forward and remove every held record whose window has closed (Kafka's
        emitNonJoinedOuterRecords), in time order; right before left at one timestamp. Step by
        step as Kafka's loop, so that a joiner failing at one record (which the processing
        exception handler may let go) leaves what Kafka's leaves: the records before the one
        emitted last deleted, that one and the rest still held, the min-time hint at the failing
        record."""
        stream_time = self.stream_time
        if self.min_time + side.join_after + self.grace_ms >= stream_time:
            return
        if not self.throttle.ready():
            return
        delete = self.outer_store.delete_raw
        joiner = self.joiner
        self.min_time = MAX_TIME  # as Kafka, in case the store is empty
        previous = None
        for store_key, rec, closed in self._visited_records(stream_time):
            self.min_time = rec.timestamp
            if not closed:
                continue
            if rec.is_left:
                forward(rec.key, joiner(rec.value, None), rec.timestamp, headers)
            else:
                forward(rec.key, joiner(None, rec.value), rec.timestamp, headers)
            # a key's whole list of values goes at once: deleted when the next key was forwarded
            # (at the time of the record being processed, which is the stream time here)
            if previous is not None and previous != store_key:
                delete(previous, stream_time)
            previous = store_key
        if previous is not None:
            delete(previous, stream_time)

    def _visited_records(self, stream_time: int) -> list:
        """(store key, held record, closed) for each held record Kafka's scan visits, in store
        order: closed when its window has closed; the scan stops at the first record after it
        found records of both sides open (that record visited, not closed). Read whole before
        anything is forwarded or deleted."""
        grace = self.grace_ms
        after, before = self.windows.after_ms, self.windows.before_ms
        left_open = right_open = False
        visited = []
        with closing(self.outer_store.all()) as records:
            for store_key, rec in records:
                if left_open and right_open:
                    visited.append((store_key, rec, False))
                    break
                look_back = after if rec.is_left else before
                if rec.timestamp + look_back + grace >= stream_time:
                    if rec.is_left:
                        left_open = True
                    else:
                        right_open = True
                    visited.append((store_key, rec, False))
                    continue
                visited.append((store_key, rec, True))
        return visited
