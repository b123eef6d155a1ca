"""Divergences from Kafka Streams found by this harness and being fixed on another branch.

Each gap names the branch that fixes it and recognises its own mismatches narrowly: by the
scenario's shape and the records that trigger it, and where the gap leaves a recognisable trace
by what differs (a scenario of the same shape that differs in another way still fails). The
test xfails a mismatch a gap explains, with the gap's reason; once the branch lands, the gap
explains nothing any more and its entry can go.
"""

from __future__ import annotations

from typing import Callable, NamedTuple, Optional

import vocabulary

#: a timestamp this large is the wall clock (ms since the epoch), never a scenario's
WALL_CLOCK_MS = 10 ** 12


class Gap(NamedTuple):
    name: str
    branch: str
    reason: str
    explains: Callable[[dict, dict, dict], bool]  # (scenario, got, expected) -> bool


def _windowed(scenario: dict) -> Optional[dict]:
    return next((step for step in scenario["ops"] if step["op"] == vocabulary.WINDOWED), None)


def _has_suppress(scenario: dict) -> bool:
    return any(step["op"] == "suppress" for step in scenario["ops"])


def _is_subsequence(short: list, long: list) -> bool:
    it = iter(long)
    return all(any(x == y for y in it) for x in short)


def _running_max(records: list):
    """(record, max timestamp of the records before it) for each record."""
    top = None
    for record in records:
        yield record, top
        top = record[2] if top is None else max(top, record[2])


# ---- kip258: KStream count/reduce/aggregate timestamps -------------------------------------------

def _kstream_aggregate_stores(scenario: dict) -> set:
    return {vocabulary.store_name(i) for i, step in enumerate(scenario["ops"]) if step["op"] in vocabulary.AGGREGATIONS}


def _without_timestamps(result: dict, stores: set) -> dict:
    return {"output": [row[:2] for row in result["output"]],
            "store": {name: [row[:2] for row in rows] if name in stores else rows
                      for name, rows in result["store"].items()}}


def _kip258(scenario: dict, got: dict, expected: dict) -> bool:
    """A KStream count/reduce/aggregate (whose store Eddy does not timestamp yet) and only the
    timestamps differ; behind a suppression, whose time limit runs on those timestamps, what it
    emits and when may differ too, given a record out of order (else the timestamps agree)."""
    stores = _kstream_aggregate_stores(scenario)
    if not stores:
        return False
    g, e = _without_timestamps(got, stores), _without_timestamps(expected, stores)
    if not _has_suppress(scenario):
        return g == e
    return g["store"] == e["store"] and (got["output"] == expected["output"] or any(
        top is not None and record[2] < top for record, top in _running_max(scenario["records"])))


# ---- windows: windowed aggregations (streams/dsl/window_aggregate.py, ops/windowed.py) -------------

def _session_close_time(scenario: dict, got: dict, expected: dict) -> bool:
    """Session windows, and a record Eddy's close time (stream time - grace) may drop but Kafka's
    (stream time - grace - gap) takes, or final results emitted on window close."""
    step = _windowed(scenario)
    if step is None or step["windows"]["type"] != "session":
        return False
    if step["emit"] == "close":
        return True
    gap, grace = step["windows"]["gap"], step["windows"]["grace"] or 0
    # the session processor's stream time is the timestamp of one of the records before (those
    # that reached it), so: a record within the band below some earlier record's timestamp
    records = scenario["records"]
    return any(earlier[2] - grace - gap <= record[2] < earlier[2] - grace
               for i, record in enumerate(records) for earlier in records[:i])


def _session_tombstone_time(scenario: dict, got: dict, expected: dict) -> bool:
    """Session windows updated on every change through a cache: a merged-away session's
    tombstone leaves the cache stamped with the wall clock, so it shows as such, or moves a
    suppression's stream time past everything."""
    step = _windowed(scenario)
    if step is None or step["windows"]["type"] != "session" or step["emit"] != "update":
        return False
    if not scenario["cache_max_bytes"]:
        return False
    return _has_suppress(scenario) or any(row[2] > WALL_CLOCK_MS for row in got["output"])


def _final_results_from_a_time_ordered_store(scenario: dict, got: dict, expected: dict) -> bool:
    """Tumbling or hopping windows emitting on window close: Kafka's final results are some of
    Eddy's (a put past retention loses some in Kafka), maybe in another order within one scan
    (window start first in Kafka), and its store may hold one more expired window."""
    step = _windowed(scenario)
    if step is None or step["windows"]["type"] not in ("tumbling", "hopping") or step["emit"] != "close":
        return False
    if not _is_subsequence(sorted(map(repr, expected["output"])), sorted(map(repr, got["output"]))):
        return False
    return all(_is_subsequence(rows, expected["store"].get(name, [])) for name, rows in got["store"].items())


def _sliding_null_values(scenario: dict, got: dict, expected: dict) -> bool:
    """Sliding windows and a record with a None value: Kafka drops it before it moves the
    observed stream time (KStreamSlidingWindowAggregate), Eddy after."""
    step = _windowed(scenario)
    if step is None or step["windows"]["type"] != "sliding":
        return False
    records, fns = scenario["records"], {s.get("fn") for s in scenario["ops"]}
    # a None value: in the input, from a mapper dropping values, or a None key made a value
    return (any(record[1] is None for record in records) or "drop_to_null" in fns
            or (bool(fns & {"swap", "both_ways"}) and any(record[0] is None for record in records)))


def _sliding_update_order(scenario: dict, got: dict, expected: dict) -> bool:
    """Sliding windows, and only the order of the updates differs: Kafka updates the windows a
    record falls in from the latest start down (processReverse over RocksDB), Eddy from the
    earliest up."""
    step = _windowed(scenario)
    if step is None or step["windows"]["type"] != "sliding" or got["store"] != expected["store"]:
        return False
    return sorted(map(repr, got["output"])) == sorted(map(repr, expected["output"]))


GAPS = (
    Gap("kip258", "kip258",
        "KStream count/reduce/aggregate: Kafka stamps the result max(record, previous aggregate) timestamps and "
        "keeps it in a timestamped store (KIP-258, KStreamAggregate); Eddy uses the record's timestamp and a "
        "plain store", _kip258),
    Gap("session-close-time", "windows",
        "session windows close at stream time - grace - inactivity gap in Kafka (KStreamSessionWindowAggregate"
        ".process: windowCloseTime), for late records and for on_window_close; Eddy's "
        "SessionWindowAggregateLogic uses stream time - grace", _session_close_time),
    Gap("session-tombstone-time", "windows",
        "a merged-away session's tombstone out of the session cache carries the wall clock: Eddy's store.remove "
        "passes no timestamp and the flush forwards the entry's; Kafka's SessionCacheFlushListener forwards "
        "every flushed session at its window end", _session_tombstone_time),
    Gap("final-results-time-ordered", "windows",
        "on_window_close (time windows): Kafka keeps the store's cache (WindowStoreMaterializer) in a time-ordered "
        "store and emits after the record's put, scanning by window start then key from observed stream time - "
        "retention (uncached windows past it are never emitted); Eddy drops the cache, emits before the put and "
        "scans by key then start", _final_results_from_a_time_ordered_store),
    Gap("sliding-null-values", "windows",
        "sliding windows: Kafka drops a record with a None value before it updates the observed stream time "
        "(KStreamSlidingWindowAggregate.process); Eddy's SlidingWindowAggregateLogic advances it first",
        _sliding_null_values),
    Gap("sliding-update-order", "windows",
        "sliding windows: Kafka updates the windows of one record from the latest start down "
        "(KStreamSlidingWindowAggregate.processReverse, RocksDB); Eddy from the earliest up",
        _sliding_update_order),
)


def explain(scenario: dict, got: dict, expected: dict) -> Optional[Gap]:
    """The known gap that explains this mismatch, if any."""
    for gap in GAPS:
        if gap.explains(scenario, got, expected):
            return gap
    return None
