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
)


def explain(scenario: dict, got: dict, expected: dict) -> Optional[Gap]:
    """The known gap that explains this mismatch, if any."""
    for gap in GAPS:
        if gap.explains(scenario, got, expected):
            return gap
    return None
