"""The conformance vocabulary: the DSL operations and named functions a scenario may use,
in ONE place, plus the seeded scenario generator and the scenario's run through Eddy.

A scenario is a linear pipeline over the input topic ``input`` (String keys and values; a
``merge`` step also reads ``input2``) ending in the output topic ``output``: ``source`` is
``"stream"`` (builder.stream) or ``"table"`` (builder.table with the store ``source-store``);
``source_store: false`` leaves the table's store unnamed (not materialized in Kafka's sense);
``ops`` is a list of steps ``{"op": name, ...}`` applied in order to the current KStream
(``STATELESS_OPS``, ``process`` with a store of its own, ``GROUPINGS``, ``to_table``), KGroupedStream (``AGGREGATIONS``, ``windowed``)
or KTable (``TABLE_OPS``, ``table_aggregate``, ``suppress``, ``to_stream``); the last KStream is
written to ``output`` (a KTable through ``to_stream()``), or, with ``output_extractor``
(``OUTPUT_EXTRACTORS``), by a topic name extractor to ``output`` or ``output2`` (output2's rows
come after output's, the topic as their last element). With ``headers`` (``HEADERS_SHARE``)
each input record carries a header and each output row, after its timestamp, the list of the
header values it came out with. Every store a step creates is named
``store-<step index>`` and compared at the end (with ``unnamed_stores``, a share of the scenarios,
the steps' stores have no name: Kafka generates them, and only describe() shows them); ``records`` are ``[key, value, timestamp]``
(plus the topic when it is not ``input``); None keys and values (unkeyed records, tombstones),
out-of-order and late timestamps and timestamps on window boundaries are generated.
``cache_max_bytes`` is 0 (no caching layer, as Kafka's rewriteTopology), 10 MiB or, for a
quarter of the cached ones, 1 byte (every put evicts at once, through the caching layer), for
another quarter a few hundred bytes (``SMALL_CACHES``: what is evicted when depends on Kafka's
entry sizes, which count each write's record context); seeds
2n and 2n + 1 are one topology and its records without and with caching. A third of the
topologies are built with ``topology_optimization`` (``OPTIMIZATIONS``: both drivers' builds apply it, Kafka's
build(props)); the others have none. Some of the topologies that are not joins have
``store_type: in_memory``: every store they name is in memory (Kafka's
``Materialized.withStoreType(IN_MEMORY)``, Eddy's ``with_in_memory_store()``). A share of all the
scenarios (``DSL_STORE_SHARE``) have ``dsl_store``: ``builder`` builds the topology with
``StreamsBuilder(config)`` whose ``default.dsl.store`` is ``in_memory`` (Kafka's
StreamsBuilder(TopologyConfig)), ``app`` runs it with ``dsl.store.suppliers.class`` the in-memory
suppliers: every DSL store of the topology follows (a join's too; the foreign-key join's
subscription store only the app's).

A share of all the scenarios (``HANDLER_SHARE``) run with ``processing_handler``
(``log_and_continue``: Kafka's LogAndContinueProcessingExceptionHandler) and give some of their
named functions their failing twins (``fails_<name>``, ``FAILING``: the function, raising on a
value that contains ``FAIL_MARK``): what each node drops, and what it did before it failed,
must be Kafka's. A quarter of them run with ``log_and_fail`` instead: the record the task failed
at (``failed_at``) and what came out before it are compared.

Join scenarios (family ``join``, ``JOINS``): a join step joins the current KStream or KTable with
the pipeline its ``other`` describes (over its ``topic``, ``right`` or ``right2``, its stores
prefixed with the topic: ``right-source-store``, ``right-store-<i>``; or ``source: self``, the
current stream or table itself through the side's operations, stores prefixed ``self-``) or with
the global table of the topic ``global``; the records go to ``input`` and to those topics.

Cogroup scenarios (family ``cogroup``, ``COGROUP``): the input's grouped stream cogrouped with
input2's (each through stateless steps and a grouping; never both re-keyed, which Kafka cannot
build unnamed), one aggregator each, into one aggregate, windowed (any window type) or not, maybe
suppressed; the records go to both topics.

``ConformanceDriver.java`` builds the same topology with Kafka Streams from the same names: a
function added here needs its twin there (same name, same result, same None handling), an
operation its branch there. Every named function is total on None, as its Java twin is.

Results of both sides have one shape: ``{"output": [[key, value, timestamp]...], "store":
{store name: rows}}``; a windowed key is ``[key, start, end]``; rows are ``[key, value,
timestamp]`` for timestamped key-value and window stores and ``[key, value]`` for session
stores and a stream-stream join's window stores, in each store's own order (see canonical).
"""

from __future__ import annotations

import os
import random
from typing import Any, Callable, Optional

INPUT, INPUT2, OUTPUT, OUTPUT2 = "input", "input2", "output", "output2"
SOURCE_STORE = "source-store"
NO_CACHE, CACHE = 0, 10 * 1024 * 1024
TINY_CACHE, TINY_CACHE_SHARE = 1, 0.25
#: caches of a few entries (Kafka's entry sizes decide what stays: key, value, record context),
#: for the next quarter of the cached scenarios
SMALL_CACHES, SMALL_CACHE_SHARE = (200, 400, 800), 0.25


def _first_char(v: Any) -> Any:
    return None if v is None or v == "" else v[0]


def _words(v: Any) -> list:
    return [] if v is None else [w for w in v.split(" ") if w]


def _s(v: Any) -> str:
    """None as "" (for functions Kafka never calls with None, total anyway)."""
    return "" if v is None else v


def _length(v: Any) -> int:
    return 0 if v is None else len(v)


def _null(v: Any) -> str:
    """None as Java's string concatenation writes null."""
    return "null" if v is None else v


# ---- failing functions (the processing handler dimension) -----------------------------------

#: a named function's failing twin is its name after FAILING: the function itself, raising on a
#: value (a record's value, the value an aggregator adds or subtracts, a joiner's either side)
#: that contains FAIL_MARK (ConformanceDriver.failing)
FAILING, FAIL_MARK = "fails_", "cab"


class ConformanceFunctionError(RuntimeError):
    """What a failing function raises (Java's twin throws a RuntimeException)."""


def _check(*values: Any) -> None:
    for v in values:
        if isinstance(v, str) and FAIL_MARK in v:
            raise ConformanceFunctionError(f"conformance: {v!r} contains {FAIL_MARK!r}")


class _Functions(dict):
    """A table of named functions whose keys are what the generator picks from, and which also
    answers `FAILING + name` with `wrap(function)`, the failing twin of the function `name`."""

    def __init__(self, entries: dict, wrap: Callable[[Any], Any]) -> None:
        super().__init__(entries)
        self.wrap = wrap

    def __missing__(self, name: str) -> Any:
        if isinstance(name, str) and name.startswith(FAILING) and name[len(FAILING):] in self:
            return self.wrap(self[name[len(FAILING):]])
        raise KeyError(name)


def _on_value(f: Callable[[Any], Any]) -> Callable[[Any], Any]:
    return lambda v: (_check(v), f(v))[1]


def _on_second(f: Callable[[Any, Any], Any]) -> Callable[[Any, Any], Any]:
    """(key, value) functions and reducers (aggregate, value): checked on the value."""
    return lambda a, v: (_check(v), f(a, v))[1]


def _on_both(f: Callable[[Any, Any], Any]) -> Callable[[Any, Any], Any]:
    return lambda left, right: (_check(left, right), f(left, right))[1]


def _on_middle(f: Callable[[Any, Any, Any], Any]) -> Callable[[Any, Any, Any], Any]:
    """(key, value, aggregate) functions: checked on the value."""
    return lambda k, v, a: (_check(v), f(k, v, a))[1]


# ---- named functions -------------------------------------------------------------------------

#: value -> value (KStream.map_values, KTable.map_values)
VALUE_MAPPERS: dict[str, Callable[[Any], Any]] = _Functions({
    "upper": lambda v: None if v is None else v.upper(),
    "exclaim": lambda v: None if v is None else v + "!",
    "first_word": lambda v: None if v is None else v.split(" ")[0],
    "drop_to_null": lambda v: None if v is None or v.startswith("b") else v,
}, _on_value)
#: value -> list of values (KStream.flat_map_values)
VALUE_SPLITTERS: dict[str, Callable[[Any], list]] = _Functions({
    "words": _words,
    "twice": lambda v: [v, v],
}, _on_value)
#: (key, value) -> bool (KStream/KTable filter, filter_not; split's branch)
PREDICATES: dict[str, Callable[[Any, Any], bool]] = _Functions({
    "value_has_a": lambda k, v: v is not None and "a" in v,
    "value_is_short": lambda k, v: v is not None and len(v) <= 3,
    "key_present": lambda k, v: k is not None,
}, _on_second)
#: (key, value) -> new key (KStream.select_key, KStream.group_by)
KEY_SELECTORS: dict[str, Callable[[Any, Any], Any]] = _Functions({
    "value": lambda k, v: v,
    "first_char": lambda k, v: _first_char(v),
    "key_upper": lambda k, v: None if k is None else k.upper(),
}, _on_second)
#: (key, value) -> (new key, new value) (KStream.map; KTable.group_by)
KV_MAPPERS: dict[str, Callable[[Any, Any], tuple]] = _Functions({
    "swap": lambda k, v: (v, k),
    "by_first_char": lambda k, v: (_first_char(v), v),
    "key_upper": lambda k, v: (None if k is None else k.upper(), v),
}, _on_second)
#: (key, value) -> list of (key, value) (KStream.flat_map)
KV_SPLITTERS: dict[str, Callable[[Any, Any], list]] = _Functions({
    "words_as_keys": lambda k, v: [(w, k) for w in _words(v)],
    "both_ways": lambda k, v: [(k, v), (v, k)],
}, _on_second)
#: (aggregate, value) -> aggregate (KGroupedStream.reduce, windowed reduce; a session reduce
#: merges sessions with it too, as Kafka)
REDUCERS: dict[str, Callable[[Any, Any], Any]] = _Functions({
    "concat": lambda a, v: _s(a) + "|" + _s(v),
    "max": lambda a, v: v if a is None else a if v is None else max(a, v),
    "longer": lambda a, v: v if _length(v) > _length(a) else a,
}, _on_second)
#: name -> (initializer, aggregator(key, value, aggregate), session merger(key, a, b), value type)
AGGREGATORS: dict[str, tuple] = _Functions({
    "sum_of_lengths": (lambda: 0, lambda k, v, a: a + _length(v), lambda k, a, b: a + b, "long"),
    "concat": (lambda: "", lambda k, v, a: a + "," + _s(v), lambda k, a, b: a + "&" + b, "string"),
}, lambda t: (t[0], _on_middle(t[1]), *t[2:]))
#: name -> (initializer, the first stream's aggregator, the second stream's, session merger, value
#: type) (KGroupedStream.cogroup: one aggregate, one aggregator per grouped stream; they differ,
#: so the result shows which stream each value came through)
COGROUP_AGGREGATORS: dict[str, tuple] = _Functions({
    "weighted_lengths": (lambda: 0, lambda k, v, a: a + _length(v), lambda k, v, a: a + 100 * _length(v),
                         lambda k, a, b: a + b, "long"),
    "tagged_concat": (lambda: "", lambda k, v, a: a + "," + _s(v), lambda k, v, a: a + ";" + _s(v),
                      lambda k, a, b: a + "&" + b, "string"),
}, lambda t: (t[0], _on_middle(t[1]), _on_middle(t[2]), *t[3:]))
#: name -> (adder(aggregate, value), subtractor(aggregate, value)) (KGroupedTable.reduce)
TABLE_REDUCERS: dict[str, tuple] = _Functions({
    "plus_minus": (lambda a, v: _s(a) + "+" + _s(v), lambda a, v: _s(a) + "-" + _s(v)),
    "longer_keep": (lambda a, v: v if _length(v) > _length(a) else a, lambda a, v: a),
}, lambda t: (_on_second(t[0]), _on_second(t[1])))
#: name -> (initializer, adder(key, value, aggregate), subtractor(key, value, aggregate), value type)
#: (KGroupedTable.aggregate)
TABLE_AGGREGATORS: dict[str, tuple] = _Functions({
    "sum_of_lengths": (lambda: 0, lambda k, v, a: a + _length(v), lambda k, v, a: a - _length(v), "long"),
    "trace": (lambda: "", lambda k, v, a: a + "+" + _s(v), lambda k, v, a: a + "-" + _s(v), "string"),
}, lambda t: (t[0], _on_middle(t[1]), _on_middle(t[2]), t[3]))
#: (left value, right value) -> joined value (every join's ValueJoiner; None where a side is missing)
JOINERS: dict[str, Callable[[Any, Any], Any]] = _Functions({
    "pair": lambda left, right: _null(left) + "+" + _null(right),
    "both_or_none": lambda left, right: None if left is None or right is None else left + right,
}, _on_both)
#: value -> foreign key (KTable.join/left_join with foreign_key_extractor)
FK_EXTRACTORS: dict[str, Callable[[Any], Any]] = _Functions({
    "first_char": _first_char,
    "first_word": lambda v: None if v is None else v.split(" ")[0],
    "first_char_not_b": lambda v: None if _first_char(v) in (None, "b") else _first_char(v),
}, _on_value)

#: KStream.process with a key-value store (String to Long) of its own: "running_count" forwards
#: each value with its key's count ("<value>#<n>"), "punctuated_tally" forwards records as they are
#: and, every 200 ms of stream time, each key's count ("<key>=<n>", the punctuation's timestamp);
#: a record without a key goes on as it is, uncounted (ConformanceDriver.Counting)
PROCESSORS = ("running_count", "punctuated_tally")
TALLY_INTERVAL_MS = 200

#: (value, record context) -> the output topic (the final to()'s topic name extractor)
OUTPUT_EXTRACTORS: dict[str, Callable[[Any, Any], str]] = {
    "odd_timestamps_apart": lambda v, context: "output2" if context.timestamp % 2 else "output",
    "tombstones_apart": lambda v, context: "output2" if v is None else "output",
    # what the record context says the record came from: input, or another topic (input2, a
    # join's, a repartition topic) or none (a punctuation); below a cache, the cached write's
    "other_topics_apart": lambda v, context: "output" if context.topic == INPUT else "output2",
    # the offset the record context names (in its topic, -1 in a punctuation)
    "odd_offsets_apart": lambda v, context: "output2" if context.offset % 2 else "output",
}

# ---- operations ------------------------------------------------------------------------------

#: stream -> stream operations and the function table of their ``fn`` (None: no function)
STATELESS_OPS: dict[str, dict | None] = {
    "filter": PREDICATES,
    "filter_not": PREDICATES,
    "map_values": VALUE_MAPPERS,
    "flat_map_values": VALUE_SPLITTERS,
    "select_key": KEY_SELECTORS,
    "map": KV_MAPPERS,
    "flat_map": KV_SPLITTERS,
    "merge": None,   # merged with builder.stream("input2")
    "split": PREDICATES,  # branch "x" on fn, default branch "y" map_values'd "exclaim", merged back
    # branch 1 (unnamed) on fn through Branched.with_function(map_values "upper"), the default
    # branch "y" through Branched.with_function(filter_not "value_is_short"), merged back
    "split_with_functions": PREDICATES,
    "repartition": None,  # KStream.repartition() with String serdes
}
#: stream -> stream through a Processor API processor and its store: {"op": "process", "fn":
#: PROCESSORS name, "cached": the store's caching, "values": True for a fixed-key processor
#: (KStream.process_values: it keeps keys, a grouping below needs no repartition; running_count
#: only, as a fixed-key processor cannot make the tally's new records)}
PROCESS = "process"
#: stream -> grouped stream
GROUPINGS: dict[str, dict | None] = {"group_by": KEY_SELECTORS, "group_by_key": None}
#: grouped stream -> table (non-windowed KStream aggregations, Kafka's KStreamAggregate/Reduce)
AGGREGATIONS = ("count", "reduce", "aggregate")
#: grouped stream -> windowed table: {"op": "windowed", "windows": {...}, "agg": count|reduce|aggregate, "fn", "emit"}
WINDOWED = "windowed"
WINDOW_TYPES = ("tumbling", "hopping", "sliding", "session")
#: grouped stream -> cogrouped table: {"op": "cogroup", "fn": COGROUP_AGGREGATORS name, "other":
#: {"ops": stateless steps over builder.stream("input2"), then a grouping}, "windows": None or a
#: windowed step's windows}: grouped.cogroup(first).cogroup(other grouped, second)
#: [.windowed_by(windows)].aggregate(initializer[, session merger])
COGROUP = "cogroup"
#: table -> table operations (``store``: materialized as store-<i> or not); transform_values'
#: transformer maps a value with its VALUE_MAPPERS function and a tombstone's None to "~"
TABLE_OPS: dict[str, dict] = {"table_filter": PREDICATES, "table_filter_not": PREDICATES,
                              "table_map_values": VALUE_MAPPERS, "table_transform_values": VALUE_MAPPERS}
#: table -> re-keyed table aggregate: {"op": "table_aggregate", "by": KV_MAPPERS name, "agg", "fn"}
TABLE_AGGREGATE = "table_aggregate"
#: stream -> table, table -> stream, table -> suppressed table
CONVERSIONS = ("to_table", "to_stream", "suppress")
#: join -> its join types. A join step names its other side in ``other`` (a pipeline over the
#: topic ``right``, as a scenario's: ``source``, ``source_store``, ``ops``, its stores named with
#: the prefix ``right-``), or, for ``global_join``, reads the global table of the topic ``global``
#: (store ``global-store`` when ``store``) through ``key_selector``:
#: ``stream_join`` KStream x KStream over ``windows`` {"diff", "grace", "before", "after"} (``store``:
#: StreamJoined.withStoreName(store-<i>), the two window stores compared); ``stream_table_join``
#: KStream x KTable; ``table_join`` KTable x KTable and ``fk_join`` (``extractor``) with ``store``:
#: materialized as store-<i>
JOINS: dict[str, tuple] = {
    "stream_join": ("inner", "left", "outer"),
    "stream_table_join": ("inner", "left"),
    "global_join": ("inner", "left"),
    "table_join": ("inner", "left", "outer"),
    "fk_join": ("inner", "left"),
}
#: the joins whose left side is a KStream (the others join two KTables)
STREAM_JOINS = ("stream_join", "stream_table_join", "global_join")
ALL_OPS = (set(STATELESS_OPS) | set(GROUPINGS) | set(AGGREGATIONS) | {WINDOWED, TABLE_AGGREGATE, COGROUP, PROCESS}
           | set(TABLE_OPS) | set(CONVERSIONS) | set(JOINS))

FAMILIES = ("stateless", "aggregate", "windowed", "table")
#: the family of join scenarios, drawn apart from FAMILIES (see generate)
JOIN_FAMILY = "join"
JOIN_SHARE = 0.4
#: the family of cogroup scenarios, drawn apart too (from the seeds that are not join scenarios)
COGROUP_FAMILY = "cogroup"
COGROUP_SHARE = 0.15
RIGHT, RIGHT2, RIGHT3, GLOBAL = "right", "right2", "right3", "global"
GLOBAL_STORE = "global-store"
#: the stream operations that change the key (an aggregation below them repartitions), but a
#: process step with "values" (see changes_key)
KEY_CHANGING_OPS = ("select_key", "map", "flat_map", "group_by", PROCESS)
#: the stream operations before a join (the key-changing ones make it repartition)
JOIN_STREAM_OPS = ("filter", "map_values", "flat_map_values", "select_key", "map")

def changes_key(step: dict) -> bool:
    """Whether a step changes the key (a fixed-key processor does not)."""
    return step["op"] in KEY_CHANGING_OPS and not step.get("values")


_KEYS = ["a", "b", "c", "dd", None]
_WORDS = ["a", "b", "ab", "ba", "cab", "d", "abc", "bb"]
_JOIN_KEYS = ["a", "b", "c", None]  # fewer keys than _KEYS: more matches
_RIGHT_KEYS = ["a", "b", "c", "d", "A", None]  # some are keys a select_key makes
_FOREIGN_KEYS = ["a", "b", "c", "d", "ab", "cab", None]  # what the foreign key extractors make
_GLOBAL_KEYS = ["a", "b", "c", "d", "A", "B", None]  # what the key selectors make


def store_name(index: int, prefix: str = "") -> str:
    return f"{prefix}store-{index}"


# ---- the generator ---------------------------------------------------------------------------

def _pick(rng: random.Random, table: dict) -> str:
    return rng.choice(sorted(table))


def _stateless_steps(rng: random.Random, most: int) -> list:
    steps = []
    for _ in range(rng.randint(0, most)):
        name = _pick(rng, STATELESS_OPS)
        table = STATELESS_OPS[name]
        steps.append({"op": name, "fn": _pick(rng, table) if table else None})
    return steps


def _grouping(rng: random.Random) -> dict:
    grouping = _pick(rng, GROUPINGS)
    table = GROUPINGS[grouping]
    return {"op": grouping, "fn": _pick(rng, table) if table else None}


def _aggregation(rng: random.Random) -> tuple[str, Any]:
    agg = rng.choice(AGGREGATIONS)
    return agg, (None if agg == "count" else _pick(rng, REDUCERS if agg == "reduce" else AGGREGATORS))


def _windows(rng: random.Random) -> dict:
    kind = rng.choice(WINDOW_TYPES)
    grace = rng.choice([None, None, 0, 50, 100, 300])  # None: of_..._with_no_grace
    if kind in ("tumbling", "hopping"):
        size = rng.choice([100, 200, 500, 1000])
        advance = size if kind == "tumbling" else rng.choice([size // 2, size // 4, 100 if size > 100 else 50])
        return {"type": kind, "size": size, "advance": advance, "grace": grace}
    if kind == "sliding":
        return {"type": kind, "size": rng.choice([100, 200, 500]), "grace": grace}
    return {"type": kind, "gap": rng.choice([50, 100, 300]), "grace": grace}


def _suppress(rng: random.Random, windowed: bool) -> dict:
    if windowed and rng.random() < 0.6:
        return {"op": "suppress", "until": "window_close"}
    step = {"op": "suppress", "until": "time_limit", "limit": rng.choice([0, 100, 400]),
            "max_records": rng.choice([None, None, 1, 2])}
    # a byte bound (Kafka's size estimate of a buffered record: ~50 bytes of context and key
    # plus the values) holds a few records
    max_bytes = rng.choice([None, None, 100, 200, 400])
    if max_bytes is not None:
        step["max_bytes"] = max_bytes
    return step


def _stream_family(rng: random.Random, family: str) -> list:
    ops = _stateless_steps(rng, 4 if family == "stateless" else 2)
    if rng.random() < 0.25:  # a processor among the steps (Kafka: a later grouping repartitions)
        at = rng.randint(0, len(ops))
        fn = rng.choice(PROCESSORS)
        if family != "stateless" or any(step["op"] == "repartition" for step in ops):
            # A punctuation only where the topology is one sub-topology (a grouping after a
            # processor repartitions): Kafka's TopologyTestDriver runs all sub-topologies in one
            # task, with one stream time, so records on one side of a repartition topic punctuate
            # processors on the other. In an application (and in Eddy's driver) each
            # sub-topology is a task of its own, with its own stream time.
            fn = "running_count"
        step = {"op": PROCESS, "fn": fn, "cached": rng.random() < 0.5}
        if fn == "running_count" and rng.random() < 0.5:
            step["values"] = True
        ops.insert(at, step)
    if family == "stateless":
        return ops
    ops.append(_grouping(rng))
    if family == "aggregate":
        agg, fn = _aggregation(rng)
        ops.append({"op": agg, "fn": fn})
        # old values downstream of the aggregation (String values only: the table operations'
        # functions take Strings): the first update of a key carries the aggregate it started
        # from (Kafka's KStreamAggregate: the initializer's value)
        if (agg == "reduce" or (agg == "aggregate" and AGGREGATORS[fn][3] == "string")) and rng.random() < 0.5:
            if rng.random() < 0.5:
                ops += _table_ops(rng, 1)[:1]
            else:
                by = _pick(rng, KV_MAPPERS)
                ops.append({"op": TABLE_AGGREGATE, "by": by, "agg": "count", "fn": None})
        if rng.random() < 0.2:
            ops.append(_suppress(rng, False))
        return ops
    windows = _windows(rng)
    agg, fn = _aggregation(rng)
    emit = "update"
    if rng.random() < 0.3:
        emit = "close"
    ops.append({"op": WINDOWED, "windows": windows, "agg": agg, "fn": fn, "emit": emit})
    # a filter or value mapper over the windowed table (String values only: the functions take
    # Strings; they are given the record key without its window, as ConformanceDriver.plainKey)
    if (agg == "reduce" or (agg == "aggregate" and AGGREGATORS[fn][3] == "string")) and rng.random() < 0.5:
        ops += _table_ops(rng, 1)[:1]
    if emit == "update" and rng.random() < 0.4:
        ops.append(_suppress(rng, True))
    return ops


def _cogroup_family(rng: random.Random) -> list:
    """Two grouped streams (the input's, input2's: each maybe re-keyed, so maybe two repartition
    topics) cogrouped into one aggregate, maybe windowed, maybe suppressed."""
    ops = _stateless_steps(rng, 2)
    ops.append(_grouping(rng))
    # input2 merged into itself is no pipeline: the other side does not merge. Kafka cannot build
    # two re-keyed streams' cogroup without naming their repartition topics (both would be
    # <store>-repartition): when the first is re-keyed, the other keeps its key
    rekeyed = any(changes_key(step) for step in ops)
    other = [step for step in _stateless_steps(rng, 2)
             if step["op"] != "merge" and not (rekeyed and changes_key(step))]
    other.append({"op": "group_by_key", "fn": None} if rekeyed else _grouping(rng))
    windows = _windows(rng) if rng.random() < 0.6 else None
    ops.append({"op": COGROUP, "fn": _pick(rng, COGROUP_AGGREGATORS), "other": {"ops": other}, "windows": windows})
    if rng.random() < 0.25:
        ops.append(_suppress(rng, windows is not None))
    return ops


def _table_family(rng: random.Random) -> tuple[str, list]:
    ops: list = []
    if rng.random() < 0.5:
        source = "table" if rng.random() < 0.6 else "unnamed_table"
    else:
        source = "stream"
        ops += _stateless_steps(rng, 2)
        ops.append({"op": "to_table"})
    for _ in range(rng.randint(0, 2)):
        name = _pick(rng, TABLE_OPS)
        ops.append({"op": name, "fn": _pick(rng, TABLE_OPS[name]), "store": rng.random() < 0.5})
    if rng.random() < 0.6:
        agg = rng.choice(AGGREGATIONS)
        fn = None if agg == "count" else _pick(rng, TABLE_REDUCERS if agg == "reduce" else TABLE_AGGREGATORS)
        ops.append({"op": TABLE_AGGREGATE, "by": _pick(rng, KV_MAPPERS), "agg": agg, "fn": fn})
    elif rng.random() < 0.4:  # the changelog as a stream, on through stream operations (String values)
        ops.append({"op": "to_stream"})
        ops += _stateless_steps(rng, 2)
        return source, ops
    if rng.random() < 0.2:
        ops.append(_suppress(rng, False))
    return source, ops


def _timestamp_grid(ops: list) -> int:
    """A window boundary step the timestamps snap to now and then (start, end, end - 1 hit exactly)."""
    for step in ops:
        if step["op"] in (WINDOWED, COGROUP) and step["windows"] is not None:
            w = step["windows"]
            return w.get("advance") or w.get("size") or w.get("gap")
    return 100


def _next_timestamp(rng: random.Random, ts: int, grid: int, spread: int = 500) -> int:
    r = rng.random()
    if r < 0.08:
        ts -= rng.randint(300, 2_000) * spread // 500  # late: beyond most graces
    elif r < 0.3:
        ts += rng.randint(-300 * spread // 500, 0)  # out of order
    else:
        ts += rng.randint(0, spread)
    if rng.random() < 0.3:  # on a window boundary, or just before it
        ts = ts // grid * grid - rng.choice([0, 0, 1])
    return max(ts, 0)


def _value(rng: random.Random, none_share: float = 0.15) -> Any:
    return None if rng.random() < none_share else " ".join(rng.choice(_WORDS) for _ in range(rng.randint(1, 3)))


def _records(rng: random.Random, ops: list) -> list:
    two_topics = any(step["op"] in ("merge", COGROUP) for step in ops)
    grid = _timestamp_grid(ops)
    records = []
    ts = rng.choice([0, 1_000])
    for _ in range(rng.randint(1, 40)):
        ts = _next_timestamp(rng, ts, grid)
        key = rng.choice(_KEYS)
        value = _value(rng)
        record = [key, value, ts]
        if two_topics and rng.random() < 0.4:
            record.append(INPUT2)
        records.append(record)
    return records


def _steps(rng: random.Random, names: tuple, most: int) -> list:
    steps = []
    for _ in range(rng.randint(0, most)):
        name = rng.choice(names)
        table = STATELESS_OPS[name]
        steps.append({"op": name, "fn": _pick(rng, table) if table else None})
    return steps


def _join_windows(rng: random.Random) -> dict:
    diff = rng.choice([50, 100, 300])
    spec = {"diff": diff, "grace": rng.choice([None, None, 0, 50, 200]), "before": None, "after": None}
    r = rng.random()
    if r < 0.25:
        spec["before"] = rng.choice([0, 50, 200])
    elif r < 0.5:
        spec["after"] = rng.choice([0, 50, 200])
    elif r < 0.6:  # a negative side, the other covering it
        spec["before"], spec["after"] = -(diff // 2), diff
    elif r < 0.7:
        spec["before"], spec["after"] = diff, -(diff // 2)
    return spec


def _table_ops(rng: random.Random, least: int = 0) -> list:
    ops = []
    for _ in range(max(least, rng.choice((0, 0, 1, 1, 2)))):
        name = _pick(rng, TABLE_OPS)
        ops.append({"op": name, "fn": _pick(rng, TABLE_OPS[name]), "store": rng.random() < 0.5})
    return ops


def _join_table(rng: random.Random, topic: str = RIGHT) -> dict:
    """A table to join over `topic`: builder.table (its store named or not) or a stream's
    to_table, then maybe filters and value mappers with and without a store (read through value
    getters)."""
    r = rng.random()
    if r < 0.65:
        side = {"source": "table", "topic": topic, "source_store": rng.random() < 0.6, "ops": []}
    elif r < 0.85:
        side = {"source": "stream", "topic": topic, "source_store": True,
                "ops": _steps(rng, JOIN_STREAM_OPS, 1) + [{"op": "to_table"}]}
    else:  # an aggregation's table (String values: reduce)
        side = {"source": "stream", "topic": topic, "source_store": True,
                "ops": [_grouping(rng), {"op": "reduce", "fn": _pick(rng, REDUCERS)}]}
    side["ops"] += _table_ops(rng)
    return side


def _join_step(rng: random.Random, kind: str, nested: bool = False, topic: str = RIGHT) -> dict:
    """A join of `kind` with its other side over `topic`: maybe the left side itself through
    operations (``source: self``: one record updates both sides), maybe (not when `nested`) a
    table that is itself a join's result (read through the join's value getter or its store),
    over ``right2``. Every side reads a topic of its own."""
    step: dict = {"op": kind, "type": rng.choice(JOINS[kind]), "joiner": _pick(rng, JOINERS)}
    r = rng.random()
    if kind == "stream_join":
        # a self-join without steps on its other side: an inner one is a pure self-join
        # (single.store.self.join under the optimized scenarios), a left or outer one gets a step
        plain_self = [] if step["type"] == "inner" else [{"op": "map_values", "fn": "upper"}]
        other = ({"source": "self", "ops": _steps(rng, JOIN_STREAM_OPS, 2) or plain_self}
                 if r < 0.15 else {"source": "stream", "topic": topic, "source_store": True,
                                   "ops": _steps(rng, JOIN_STREAM_OPS, 2)})
        step.update(windows=_join_windows(rng), store=rng.random() < 0.3, other=other)
        if other.get("source") == "self" and not other["ops"]:
            # a pure self-join's stores are not compared: optimized (single.store.self.join) it
            # has no `other` store to compare
            step["store"] = False
    elif kind == "global_join":
        step.update(key_selector=_pick(rng, KEY_SELECTORS), store=rng.random() < 0.5)
    else:
        if r < 0.15 and kind != "stream_table_join":
            step["other"] = {"source": "self", "ops": _table_ops(rng, 1)}
        elif r < 0.35 and not nested:
            side = _join_table(rng, topic)
            side["ops"].append(_join_step(rng, rng.choice(("table_join", "fk_join")), nested=True, topic=RIGHT2))
            side["ops"] += _table_ops(rng)[:1]
            step["other"] = side
        else:
            step["other"] = _join_table(rng, topic)
        if kind == "fk_join":
            step["extractor"] = _pick(rng, FK_EXTRACTORS)
        if kind != "stream_table_join":
            step["store"] = rng.random() < 0.5
    return step


def _join_family(rng: random.Random) -> tuple[dict, list]:
    """(the left side, the ops: the left side's, the join, maybe one more operation)."""
    kinds = ("stream_join", "stream_table_join", "global_join", "table_join", "fk_join")
    kind = rng.choices(kinds, weights=[3, 2, 1.5, 2.5, 3])[0]
    left = ({"source": "stream", "source_store": True, "ops": _steps(rng, JOIN_STREAM_OPS, 2)}
            if kind in STREAM_JOINS else _join_table(rng, INPUT))
    ops = left["ops"] + [_join_step(rng, kind)]
    if kind in STREAM_JOINS:
        ops += _steps(rng, ("filter", "map_values"), 1)
        if rng.random() < 0.2:  # the joined stream (out of order after a left/outer join) joined again
            ops.append(_join_step(rng, rng.choice(("stream_join", "stream_table_join")), nested=True, topic=RIGHT3))
    else:  # old values downstream of the join: a filter, a value mapper or a re-keyed aggregate
        r = rng.random()
        if r < 0.3:
            ops += _table_ops(rng, 1)[:1]
        elif r < 0.45:
            agg = rng.choice(("count", "reduce"))
            ops.append({"op": TABLE_AGGREGATE, "by": _pick(rng, KV_MAPPERS), "agg": agg,
                        "fn": None if agg == "count" else _pick(rng, TABLE_REDUCERS)})
    return left, ops


def join_step(scenario: dict) -> dict | None:
    """The scenario's (first) join."""
    return next((step for step in scenario["ops"] if step["op"] in JOINS), None)


def _join_topics(ops: list, roles: dict) -> dict:
    """{topic: what reads it: stream | table | fk (a foreign-key join's right table) | global}."""
    for step in ops:
        if step["op"] == "global_join":
            roles[GLOBAL] = "global"
        elif step["op"] in JOINS and step["other"]["source"] != "self":
            roles[step["other"].get("topic", RIGHT)] = {"stream_join": "stream", "fk_join": "fk"}.get(
                step["op"], "table")
        if step["op"] in JOINS and "other" in step:
            _join_topics(step["other"]["ops"], roles)
    return roles


_TOPIC_KEYS = {"stream": _RIGHT_KEYS, "table": _RIGHT_KEYS, "fk": _FOREIGN_KEYS, "global": _GLOBAL_KEYS}


def _join_records(rng: random.Random, ops: list) -> list:
    """Records for the left topic and the joins' other topics (more tombstones on a table's)."""
    step = join_step({"ops": ops})
    others = sorted(_join_topics(ops, {}).items())
    grid = spread = 100
    if step["op"] == "stream_join":
        w = step["windows"]
        grid = w["diff"]
        spread = max(50, w["diff"] + (w["before"] or 0) + (w["after"] or 0) + (w["grace"] or 0))
    records = []
    ts = rng.choice([0, 1_000])
    for _ in range(rng.randint(1, 40)):
        ts = _next_timestamp(rng, ts, grid, spread)
        if not others or rng.random() < 0.5:
            records.append([rng.choice(_JOIN_KEYS), _value(rng), ts])
        else:
            topic, role = rng.choice(others)
            records.append([rng.choice(_TOPIC_KEYS[role]), _value(rng, 0.15 if role == "stream" else 0.25), ts, topic])
    return records


#: the topology.optimization of the optimized scenarios
OPTIMIZATIONS = "all"
#: the store type of the scenarios whose stores are all in memory (Kafka's
#: Materialized.withStoreType(IN_MEMORY), Eddy's with_in_memory_store())
IN_MEMORY = "in_memory"
IN_MEMORY_SHARE = 0.3
#: the share of the scenarios whose groupings are named (``grouped_names``: Kafka's Grouped.as,
#: ``<store of the step>-grouped``; the repartition topics and the selectors take the name)
GROUPED_NAMES_SHARE = 0.25
#: the share of the scenarios whose stream joins and to_table steps are named (``join_names``:
#: Kafka's StreamJoined.withName / Joined.withName, ``<store of the step>-joined``; Named,
#: ``<store of the step>-totable``)
JOIN_NAMES_SHARE = 0.25
#: the share of the scenarios some of whose stream operations are named (Kafka's Named: the
#: step's "name", ``step-<i>``, on about 60% of the NAMEABLE_OPS steps of the stream and of a
#: cogroup's other stream)
OP_NAMES_SHARE = 0.25
#: the share of the scenarios whose sources, sinks, table joins, global joins and cogroup
#: aggregations are named (``node_names``: Kafka's Consumed.as and Produced.as, ``read-<topic>``
#: and ``write-output``; Named and TableJoined.as, ``<store of the step>-tjoin``, ``-gjoin`` and
#: ``-cogrouped``): the describe() comparison checks the names and internal topics they give
NODE_NAMES_SHARE = 0.25
NAMEABLE_OPS = ("filter", "filter_not", "select_key", "map_values", "flat_map_values", "map", "flat_map", "merge",
                PROCESS, *AGGREGATIONS, WINDOWED, TABLE_AGGREGATE, *TABLE_OPS, "to_stream")
#: the share of the scenarios run with ``processing_handler`` (``CONTINUE_HANDLER``: Kafka's
#: LogAndContinueProcessingExceptionHandler, Eddy's log_and_continue), in which about
#: FAILING_SHARE of the named functions are their failing twins (see FAILING);
#: EDDY_CONFORMANCE_HANDLER_SHARE sets the share for a run (1: all)
HANDLER_SHARE = float(os.environ.get("EDDY_CONFORMANCE_HANDLER_SHARE", "0.2"))
FAILING_SHARE = 0.4
CONTINUE_HANDLER = "log_and_continue"
#: the share of those that run with ``log_and_fail`` instead (Kafka's default,
#: LogAndFailProcessingExceptionHandler): the first failing function fails the task; the
#: record it failed at (``failed_at``) and what came out before are compared, not the stores
FAIL_HANDLER, FAIL_HANDLER_SHARE = "log_and_fail", 0.25
#: the share of the scenarios whose stores a config chooses (``dsl_store``, see the module doc)
DSL_STORE_SHARE = 0.25
DSL_STORES = ("builder", "app")
KAFKA_IN_MEMORY_SUPPLIERS = "org.apache.kafka.streams.state.BuiltInDslStoreSuppliers$InMemoryDslStoreSuppliers"


def _optimized(seed: int) -> bool:
    """A third of the topologies, without drawing from a scenario's generator (each seed keeps
    its topology and records)."""
    return seed // 2 % 3 == 2


def _cache_size(seed: int) -> int:
    """Seed 2n: no cache; 2n + 1: a cache, of 10 MiB, of a few entries (which evicts by Kafka's
    entry sizes), or of one byte, which every put overflows: each write evicts at once, through
    the caching layer (Kafka strips that layer only at 0)."""
    if seed % 2 == 0:
        return NO_CACHE
    rng = random.Random(f"tiny-cache-{seed // 2}")
    draw = rng.random()
    if draw < TINY_CACHE_SHARE:
        return TINY_CACHE
    if draw < TINY_CACHE_SHARE + SMALL_CACHE_SHARE:
        return rng.choice(SMALL_CACHES)
    return CACHE


def _in_memory(seed: int) -> bool:
    """Some of the topologies that are not joins (a join's stores are StreamJoined's or the
    tables'), without drawing from a scenario's generator."""
    return random.Random(f"memory-{seed // 2}").random() < IN_MEMORY_SHARE


#: the share of the scenarios whose output goes through a topic name extractor
OUTPUT_EXTRACTOR_SHARE = 0.2
#: the share of the scenarios whose records carry a header, ``("n", b"<index>")``, the output
#: rows the header values they come out with (a list before the topic tag; below a cache, the
#: headers of the cached write)
HEADERS_SHARE = 0.3
HEADER_KEY = "n"
#: the share of the scenarios whose operations are given a Materialized without a name (serdes
#: and store type only; a global table keeps its name): Kafka generates their store names (and
#: so changelog and repartition topic names), which the describe() comparison checks; their
#: contents are not compared. EDDY_CONFORMANCE_UNNAMED_SHARE sets it for a run (1: all)
UNNAMED_STORES_SHARE = float(os.environ.get("EDDY_CONFORMANCE_UNNAMED_SHARE", "0.2"))


def generate(seed: int) -> dict:
    """The scenario of ``seed`` (same seed, same scenario, on every machine). Seeds 2n and 2n + 1
    are the same topology and records, without and with caching. A share of the seeds are join
    scenarios, and of the others cogroup scenarios, each drawn by a generator of its own, so the
    other families' seeds keep their scenarios."""
    scenario = _generate(seed)
    # drawn apart (seeds 2n and 2n + 1 alike), so the scenarios themselves stay as they are
    rng = random.Random(f"extractor-{seed // 2}")
    if rng.random() < OUTPUT_EXTRACTOR_SHARE:
        scenario["output_extractor"] = _pick(rng, OUTPUT_EXTRACTORS)
    if random.Random(f"headers-{seed // 2}").random() < HEADERS_SHARE:
        scenario["headers"] = True
    if random.Random(f"unnamed-{seed // 2}").random() < UNNAMED_STORES_SHARE:
        scenario["unnamed_stores"] = True
    if random.Random(f"grouped-{seed // 2}").random() < GROUPED_NAMES_SHARE:
        scenario["grouped_names"] = True
    if random.Random(f"joined-{seed // 2}").random() < JOIN_NAMES_SHARE:
        scenario["join_names"] = True
    rng = random.Random(f"dsl-store-{seed // 2}")
    if rng.random() < DSL_STORE_SHARE:
        scenario["dsl_store"] = rng.choice(DSL_STORES)
    if random.Random(f"node-names-{seed // 2}").random() < NODE_NAMES_SHARE:
        scenario["node_names"] = True
    rng = random.Random(f"op-names-{seed // 2}")
    if rng.random() < OP_NAMES_SHARE:
        _name_steps(scenario["ops"], rng, iter(range(1000)))
    _add_reads(scenario, random.Random(f"reads-{seed // 2}"))
    rng = random.Random(f"handler-{seed // 2}")
    if rng.random() < HANDLER_SHARE:
        scenario["processing_handler"] = CONTINUE_HANDLER
        _fail_steps(scenario["ops"], rng)
        if random.Random(f"fail-{seed // 2}").random() < FAIL_HANDLER_SHARE:
            scenario["processing_handler"] = FAIL_HANDLER
    return scenario


#: the bounds and keys of the store reads: keys the stores hold, keys between them, None (open)
_READ_KEYS = ["a", "b", "c", "dd", "ab", "A", "B", "z", None]


def _add_reads(scenario: dict, rng: random.Random) -> None:
    """``reads``: interactive queries both drivers run on each compared store after the records
    (``family:op`` and its arguments; the ones of a store's kind apply, see ``read_applies``),
    their results compared in the order the store gives them. ``windowed_keys``: a key-value
    store of the scenario may have windowed keys (a windowed table's), whose reads by String
    bounds are left out."""
    times = sorted({0, 100, 500, 1000, 2000, *(r[2] for r in scenario["records"])})

    def key(none: bool = True) -> Any:
        return rng.choice(_READ_KEYS if none else _READ_KEYS[:-1])

    def keys() -> list:
        """A key range (from > to left out: Kafka's stores answer it differently, some raise)."""
        low, high = key(), key()
        return [high, low] if low is not None and high is not None and low > high else [low, high]

    def span() -> tuple:
        t0 = rng.choice(times) - rng.choice([0, 0, 1, 250])
        return max(t0, 0), max(t0, 0) + rng.choice([0, 1, 100, 500, 1_000_000])
    reads: list = []
    for _ in range(rng.randint(1, 3)):
        op = rng.choice(["range", "reverse_range", "prefix_scan"])
        reads.append(["kv:" + op, key(False)] if op == "prefix_scan" else ["kv:" + op, *keys()])
    for _ in range(rng.randint(2, 4)):
        op = rng.choice(["fetch_one", "fetch", "backward_fetch", "fetch_range", "backward_fetch_range", "fetch_all",
                         "backward_fetch_all"])
        if op == "fetch_one":
            reads.append(["window:fetch_one", key(False), rng.choice(times), 0, 0])
        elif op in ("fetch", "backward_fetch"):
            reads.append(["window:" + op, key(False), *span()])
        elif op in ("fetch_range", "backward_fetch_range"):
            reads.append(["window:" + op, *keys(), *span()])
        else:
            reads.append(["window:" + op, *span()])
    for _ in range(rng.randint(2, 4)):
        op = rng.choice(["find_sessions", "backward_find_sessions", "find_sessions_range",
                         "backward_find_sessions_range", "fetch", "backward_fetch", "fetch_range", "backward_fetch_range"])
        earliest_end, latest_start = rng.choice(times), rng.choice(times) + rng.choice([0, 500, 1_000_000])
        if op in ("find_sessions", "backward_find_sessions"):
            reads.append(["session:" + op, key(False), earliest_end, latest_start])
        elif op.endswith("find_sessions_range"):
            reads.append(["session:" + op, *keys(), earliest_end, latest_start])
        elif op in ("fetch", "backward_fetch"):
            reads.append(["session:" + op, key(False)])
        else:
            reads.append(["session:" + op, *keys()])
    scenario["reads"] = reads
    if any(step["op"] in (WINDOWED, COGROUP) for step in scenario["ops"]):
        scenario["windowed_keys"] = True


def read_applies(scenario: dict, read: str, kind: str) -> bool:
    """Whether `read` (``family:op``) applies to a store of `kind`. A join's window store (of
    duplicates) is not asked for one window (``fetch_one``): Kafka's answers for its latest
    sequence number only (RocksDB) or never (in memory), Eddy's with the first duplicate (noted)."""
    family, op = read.split(":")
    if family == "kv":
        return kind == "plain_kv" or (kind == "kv" and not scenario.get("windowed_keys"))
    if family == "window":
        return kind == "window" or (kind == "join_window" and op != "fetch_one")
    return kind == "session"


def _function_fields(step: dict) -> list:
    """[(field, table)] of the step's named functions (a windowed or cogroup step's session
    merger and a processor's are not among them)."""
    op, fields = step["op"], []
    table = STATELESS_OPS.get(op) or GROUPINGS.get(op) or TABLE_OPS.get(op)
    if table is not None:
        fields.append(("fn", table))
    elif op in ("reduce", "aggregate") or (op == WINDOWED and step["agg"] != "count"):
        fields.append(("fn", REDUCERS if step.get("agg", op) == "reduce" else AGGREGATORS))
    elif op == COGROUP:
        fields.append(("fn", COGROUP_AGGREGATORS))
    elif op == TABLE_AGGREGATE:
        fields.append(("by", KV_MAPPERS))
        if step["agg"] != "count":
            fields.append(("fn", TABLE_REDUCERS if step["agg"] == "reduce" else TABLE_AGGREGATORS))
    elif op in JOINS:
        fields.append(("joiner", JOINERS))
        if "key_selector" in step:
            fields.append(("key_selector", KEY_SELECTORS))
        if "extractor" in step:
            fields.append(("extractor", FK_EXTRACTORS))
    return fields


def _fail_steps(ops: list, rng: random.Random) -> None:
    """Gives about FAILING_SHARE of the named functions of `ops` (and of the pipelines inside
    cogroup and join steps) their failing twins; at least one where there are any."""
    fields = []

    def collect(steps: list) -> None:
        for step in steps:
            fields.extend((step, field) for field, _table in _function_fields(step) if step.get(field) is not None)
            inner = step.get("other")
            if isinstance(inner, dict):
                collect(inner.get("ops", []))
    collect(ops)
    chosen = [item for item in fields if rng.random() < FAILING_SHARE]
    if fields and not chosen:
        chosen = [rng.choice(fields)]
    for step, field in chosen:
        step[field] = FAILING + step[field]


def _name_steps(ops: list, rng: random.Random, numbers: Any) -> None:
    """Names about 60% of the nameable steps of `ops` and of a cogroup's other stream."""
    for step in ops:
        if step["op"] in NAMEABLE_OPS and rng.random() < 0.6:
            step["name"] = f"step-{next(numbers)}"
        if step["op"] == COGROUP:
            _name_steps(step["other"]["ops"], rng, numbers)


def _generate(seed: int) -> dict:
    if random.Random(f"join-{seed // 2}").random() < JOIN_SHARE:
        rng = random.Random(f"join-scenario-{seed // 2}")
        left, ops = _join_family(rng)
        scenario = {"seed": seed, "family": JOIN_FAMILY, "source": left["source"], "ops": ops,
                    "cache_max_bytes": _cache_size(seed),
                    "records": _join_records(rng, ops)}
        if not left["source_store"]:
            scenario["source_store"] = False
        if _optimized(seed):
            scenario["topology_optimization"] = OPTIMIZATIONS
        return scenario
    if random.Random(f"cogroup-{seed // 2}").random() < COGROUP_SHARE:
        rng = random.Random(f"cogroup-scenario-{seed // 2}")
        ops = _cogroup_family(rng)
        scenario = {"seed": seed, "family": COGROUP_FAMILY, "source": "stream", "ops": ops,
                    "cache_max_bytes": _cache_size(seed), "records": _records(rng, ops)}
        if _optimized(seed):
            scenario["topology_optimization"] = OPTIMIZATIONS
        if _in_memory(seed):
            scenario["store_type"] = IN_MEMORY
        return scenario
    rng = random.Random(seed // 2)
    family = FAMILIES[rng.choices(range(len(FAMILIES)), weights=[2, 3, 5, 4])[0]]
    if family == "table":
        source, ops = _table_family(rng)
    else:
        source, ops = "stream", _stream_family(rng, family)
    scenario = {"seed": seed, "family": family, "source": source, "ops": ops,
                "cache_max_bytes": _cache_size(seed), "records": _records(rng, ops)}
    if source == "unnamed_table":  # builder.table without a store name
        scenario.update(source="table", source_store=False)
    # Kafka's merge.repartition.topics walks up through a process() step to the key change above
    # it and repartitions before the processor; Eddy leaves such a repartition where it is
    # (streams/dsl/repartition_merge.py): the results agree, the repartition topic's offsets not
    if _optimized(seed) and not any(step["op"] == PROCESS for step in ops):
        scenario["topology_optimization"] = OPTIMIZATIONS
    if _in_memory(seed):
        scenario["store_type"] = IN_MEMORY
    return scenario


# ---- Eddy ------------------------------------------------------------------------------------

def _serde(kind: str) -> Any:
    from streams import serdes

    return serdes.INT64 if kind == "long" else serdes.STRING


def _eddy_windows(spec: dict) -> Any:
    from streams import SessionWindows, SlidingWindows, TimeWindows

    grace = spec["grace"]
    kind = spec["type"]
    if kind == "session":
        return (SessionWindows.of_inactivity_gap_with_no_grace(spec["gap"]) if grace is None
                else SessionWindows.of_inactivity_gap_and_grace(spec["gap"], grace))
    if kind == "sliding":
        return (SlidingWindows.of_time_difference_with_no_grace(spec["size"]) if grace is None
                else SlidingWindows.of_time_difference_and_grace(spec["size"], grace))
    windows = (TimeWindows.of_size_with_no_grace(spec["size"]) if grace is None
               else TimeWindows.of_size_and_grace(spec["size"], grace))
    return windows if spec["advance"] == spec["size"] else windows.advance_by(spec["advance"])


def _eddy_suppressed(step: dict) -> Any:
    from streams import BufferConfig, Suppressed

    if step["until"] == "window_close":
        return Suppressed.until_window_closes(BufferConfig.unbounded())
    n, size = step["max_records"], step.get("max_bytes")
    if n is None and size is None:
        return Suppressed.until_time_limit(step["limit"], BufferConfig.unbounded())
    buffer = BufferConfig.max_records(n) if n is not None else BufferConfig.max_bytes(size)
    if n is not None and size is not None:
        buffer = buffer.with_max_bytes(size)
    return Suppressed.until_time_limit(step["limit"], buffer)


class _Built:
    """What building a scenario yields: the topology, the output serdes and the stores to read."""

    def __init__(self, in_memory: bool = False, unnamed: bool = False, grouped_names: bool = False,
                 join_names: bool = False, node_names: bool = False) -> None:
        self.in_memory = in_memory  # every store the scenario materializes is in memory
        self.unnamed = unnamed  # every Materialized without a name (unnamed_stores)
        self.grouped_names = grouped_names  # every grouping named (Kafka's Grouped.as): see grouped
        self.join_names = join_names  # every stream join named (StreamJoined/Joined.withName): see joined
        self.node_names = node_names  # sources, sinks, table and global joins, cogroups named: see node
        self.unnamed_names: set[str] = set()  # the names they would have had: not compared
        self.topology: Any = None
        self.value_type = "string"
        self.windows: Any = None  # the spec of the output's windowed key, if any
        self.stores: list[tuple[str, str]] = []  # (name, kind: kv | window | session)

    def grouped(self, name: str) -> Optional[str]:
        """The name of the grouping of the step whose store is `name` (grouped_names), else None."""
        return name + "-grouped" if self.grouped_names else None

    def joined(self, name: str) -> Optional[str]:
        """The name of the stream join of the step whose store is `name` (join_names), else None."""
        return name + "-joined" if self.join_names else None

    def node(self, name: str) -> Optional[str]:
        """`name` for a source, sink, table join, global join or cogroup aggregation
        (node_names), else None (Kafka generates it)."""
        return name if self.node_names else None

    def materialized(self, name: str) -> Any:
        """Materialized.as_(name), or one without a name (unnamed_stores), in memory when the
        scenario says (Kafka's withStoreType)."""
        from streams import Materialized

        if self.unnamed:
            self.unnamed_names.add(name)
        mat = Materialized() if self.unnamed else Materialized.as_(name)
        return mat.with_in_memory_store() if self.in_memory else mat

    def compared_stores(self) -> list[tuple[str, str]]:
        """The stores whose contents are compared: the named ones."""
        return [(name, kind) for name, kind in self.stores if name not in self.unnamed_names]


def _eddy_windowed(grouped: Any, step: dict, name: str, built: _Built) -> Any:
    from streams import EmitStrategy

    spec = step["windows"]
    windowed = grouped.windowed_by(_eddy_windows(spec))
    if step["emit"] == "close":
        windowed = windowed.emit_strategy(EmitStrategy.on_window_close())
    agg, fn = step["agg"], step["fn"]
    if agg == "count":
        vtype = "long"
        table = windowed.count(store=built.materialized(name).with_value_serde(_serde(vtype)), name=step.get("name"))
    elif agg == "reduce":
        vtype = "string"
        table = windowed.reduce(REDUCERS[fn], store=built.materialized(name), name=step.get("name"))
    else:
        init, aggregator, merger, vtype = AGGREGATORS[fn]
        mat = built.materialized(name).with_value_serde(_serde(vtype))
        table = (windowed.aggregate(init, aggregator, merger, store=mat, name=step.get("name"))
                 if spec["type"] == "session" else windowed.aggregate(init, aggregator, store=mat, name=step.get("name")))
    built.value_type, built.windows = vtype, spec
    built.stores.append((name, "session" if spec["type"] == "session" else "window"))
    return table


def _eddy_cogroup(builder: Any, grouped: Any, step: dict, name: str, built: _Built, input2: list) -> Any:
    from streams import serdes

    init, first, second, merger, vtype = COGROUP_AGGREGATORS[step["fn"]]
    other = _input2(builder, input2, built)
    *steps, grouping = step["other"]["ops"]
    if grouping["op"] not in GROUPINGS:
        raise ValueError(f"a cogroup's other side ends in a grouping, not {grouping['op']!r}")
    for index, other_step in enumerate(steps):
        other = _eddy_stream_step(builder, other, other_step, 100 + index, input2, built)
    other_name = built.grouped(name + "-other")
    other = (other.group_by(KEY_SELECTORS[grouping["fn"]], key_serde=serdes.STRING, value_serde=serdes.STRING,
                            name=other_name)
             if grouping["op"] == "group_by" else other.group_by_key(key_serde=serdes.STRING, value_serde=serdes.STRING,
                                                                      name=other_name))
    cogrouped = grouped.cogroup(first).cogroup(other, second)
    store = built.materialized(name).with_value_serde(_serde(vtype))
    built.value_type = vtype
    spec = step["windows"]
    if spec is None:
        built.stores.append((name, "kv"))
        return cogrouped.aggregate(init, store=store, name=built.node(name + "-cogrouped"))
    built.windows = spec
    windowed = cogrouped.windowed_by(_eddy_windows(spec))
    if spec["type"] == "session":
        built.stores.append((name, "session"))
        return windowed.aggregate(init, merger, store=store, name=built.node(name + "-cogrouped"))
    built.stores.append((name, "window"))
    return windowed.aggregate(init, store=store, name=built.node(name + "-cogrouped"))


def _eddy_table_op(table: Any, step: dict, name: str, built: _Built) -> Any:
    """A table's filter, filter_not, map_values or transform_values (TABLE_OPS), materialized as
    `name` or not."""
    from streams import serdes

    op, fn = step["op"], step["fn"]
    method = {"table_filter": "filter", "table_filter_not": "filter_not", "table_map_values": "map_values",
              "table_transform_values": "transform_values"}[op]
    if op == "table_map_values":
        function = VALUE_MAPPERS[fn]
    elif op == "table_transform_values":
        def function() -> _Transformer:
            return _Transformer(VALUE_MAPPERS[fn])
    else:  # given the record key without its window (a windowed table's), as the Java twin
        predicate = PREDICATES[fn]

        def function(key: Any, value: Any) -> bool:
            return predicate(key.key if getattr(key, "window", None) is not None else key, value)
    if not step["store"]:
        return getattr(table, method)(function, name=step.get("name"))
    # a windowed table's keys in the output's windowed serde, given as the Java twin must
    store = built.materialized(name).with_value_serde(serdes.STRING)
    if built.windows is not None:
        store = store.with_key_serde(_output_key_serde(built))
    built.stores.append((name, "kv"))
    return getattr(table, method)(function, store=store, name=step.get("name"))


class _Transformer:
    """TABLE_OPS' value transformer (ConformanceDriver's table_transform_values twin)."""

    def __init__(self, mapper: Callable[[str], str]) -> None:
        self.mapper = mapper

    def transform(self, key: Any, value: Any) -> Any:
        return "~" if value is None else self.mapper(value)


def _eddy_aggregation(grouped: Any, step: dict, name: str, built: _Built) -> Any:
    """A grouped stream's count, reduce or aggregate (AGGREGATIONS) into the store `name`."""
    op, fn, named = step["op"], step["fn"], step.get("name")
    built.stores.append((name, "kv"))
    if op == "count":
        built.value_type = "long"
        return grouped.count(store=built.materialized(name), name=named)
    if op == "reduce":
        return grouped.reduce(REDUCERS[fn], store=built.materialized(name), name=named)
    init, aggregator, _merger, vtype = AGGREGATORS[fn]
    built.value_type = vtype
    return grouped.aggregate(init, aggregator, store=built.materialized(name).with_value_serde(_serde(vtype)),
                             name=named)


def _eddy_table_aggregate(table: Any, step: dict, name: str, built: _Built) -> Any:
    from streams import serdes

    grouped = table.group_by(KV_MAPPERS[step["by"]], key_serde=serdes.STRING, value_serde=serdes.STRING,
                             name=built.grouped(name))
    agg, fn, named = step["agg"], step["fn"], step.get("name")
    if agg == "count":
        vtype, result = "long", grouped.count(store=built.materialized(name).with_value_serde(serdes.INT64), name=named)
    elif agg == "reduce":
        adder, subtractor = TABLE_REDUCERS[fn]
        vtype, result = "string", grouped.reduce(adder, subtractor, store=built.materialized(name), name=named)
    else:
        init, adder, subtractor, vtype = TABLE_AGGREGATORS[fn]
        result = grouped.aggregate(init, adder, subtractor, store=built.materialized(name).with_value_serde(_serde(vtype)),
                                   name=named)
    built.value_type = vtype
    built.stores.append((name, "kv"))
    return result


def _input2(builder: Any, input2: list, built: _Built) -> Any:
    """The stream of INPUT2, read once however often a scenario merges or cogroups it."""
    from streams import serdes

    if not input2:
        input2.append(builder.stream(INPUT2, key_serde=serdes.STRING, value_serde=serdes.STRING,
                                     name=built.node("read-" + INPUT2)))
    return input2[0]


def _eddy_stream_step(builder: Any, stream: Any, step: dict, index: int, input2: list, built: _Built) -> Any:
    from streams import Branched, serdes

    op, fn, named = step["op"], step.get("fn"), step.get("name")
    if op in ("filter", "filter_not"):
        return getattr(stream, op)(PREDICATES[fn], name=named)
    if op == "select_key":
        return stream.select_key(KEY_SELECTORS[fn], name=named)
    if op == "map_values":
        return stream.map_values(VALUE_MAPPERS[fn], name=named)
    if op == "flat_map_values":
        return stream.flat_map_values(VALUE_SPLITTERS[fn], name=named)
    if op == "map":
        return stream.map(KV_MAPPERS[fn], name=named)
    if op == "flat_map":
        return stream.flat_map(KV_SPLITTERS[fn], name=named)
    if op == "merge":  # input2 is read once, merged as often as asked
        return stream.merge(_input2(builder, input2, built), name=named)
    if op == "split":
        name = f"split{index}-"
        branches = stream.split(name).branch(PREDICATES[fn], Branched.as_("x")).default_branch(Branched.as_("y"))
        return branches[name + "x"].merge(branches[name + "y"].map_values(VALUE_MAPPERS["exclaim"]))
    if op == "split_with_functions":
        name = f"split{index}-"
        upper, short = VALUE_MAPPERS["upper"], PREDICATES["value_is_short"]
        branches = (stream.split(name).branch(PREDICATES[fn], Branched.with_function(lambda s: s.map_values(upper)))
                    .default_branch(Branched.with_function(lambda s: s.filter_not(short), "y")))
        return branches[name + "1"].merge(branches[name + "y"])
    if op == "repartition":
        return stream.repartition(key_serde=serdes.STRING, value_serde=serdes.STRING)
    raise ValueError(f"operation {op!r} is not a stream operation of the conformance vocabulary")


class _Counting:
    """PROCESSORS' processors (ConformanceDriver.Counting's twin, and CountingValues' under "values")."""

    def __init__(self, store_name: str, tally: bool) -> None:
        self.store_name, self.tally = store_name, tally

    def init(self, context: Any) -> None:
        from streams import PunctuationType

        self.context = context
        self.store = context.get_state_store(self.store_name)
        if self.tally:
            context.schedule(TALLY_INTERVAL_MS, PunctuationType.STREAM_TIME, self.punctuate)

    def punctuate(self, timestamp: int) -> None:
        from streams import Record

        with self.store.all() as it:
            for key, n in it:
                self.context.forward(Record(key, f"{key}={n}", timestamp))

    def process(self, record: Any) -> None:
        if record.key is None:
            self.context.forward(record)
            return
        count = (self.store.get(record.key) or 0) + 1
        self.store.put(record.key, count)
        self.context.forward(record if self.tally else record.with_value(f"{_null(record.value)}#{count}"))

    def close(self) -> None:
        pass


def _eddy_process(builder: Any, stream: Any, step: dict, name: str, built: _Built) -> Any:
    from state.stores import Stores
    from streams import serdes

    if step["fn"] not in PROCESSORS:
        raise ValueError(f"no processor {step['fn']!r} in the conformance vocabulary")
    supplier = Stores.in_memory_key_value_store(name) if built.in_memory else Stores.persistent_key_value_store(name)
    store = Stores.key_value_store_builder(supplier, serdes.STRING, serdes.INT64)
    builder.add_state_store(store.with_caching_enabled() if step["cached"] else store)
    built.stores.append((name, "plain_kv"))
    tally = step["fn"] == "punctuated_tally"
    if step.get("values"):
        return stream.process_values(lambda: _Counting(name, tally), stores=[name], name=step.get("name"))
    return stream.process(lambda: _Counting(name, tally), stores=[name], name=step.get("name"))


def _eddy_join_windows(spec: dict) -> Any:
    from streams import JoinWindows

    grace = spec["grace"]
    windows = (JoinWindows.of_time_difference_with_no_grace(spec["diff"]) if grace is None
               else JoinWindows.of_time_difference_and_grace(spec["diff"], grace))
    if spec["before"] is not None:
        windows = windows.before(spec["before"])
    if spec["after"] is not None:
        windows = windows.after(spec["after"])
    return windows


def join_window_stores(step: dict, name: str) -> list:
    """The window stores StreamJoined.withStoreName(name) names (Kafka's KStreamImplJoin)."""
    kind = step["type"]
    return [name + ("-outer-this-join" if kind == "outer" else "-this-join") + "-store",
            name + ("-other-join" if kind == "inner" else "-outer-other-join") + "-store"]


def side_prefix(side: dict, prefix: str) -> str:
    """The store name prefix of a join's other side in a pipeline of store `prefix`."""
    return (prefix + "self" if side["source"] == "self" else side.get("topic", RIGHT)) + "-"


def _eddy_join(builder: Any, current: Any, step: dict, name: str, prefix: str, built: _Built, input2: list) -> Any:
    from streams import serdes

    kind, joiner = step["op"], JOINERS[step["joiner"]]
    method = {"inner": "join", "left": "left_join", "outer": "outer_join"}[step["type"]]
    if kind == "global_join":
        table = builder.global_table(GLOBAL, key_serde=serdes.STRING, value_serde=serdes.STRING,
                                     store=GLOBAL_STORE if step["store"] else None, name=built.node("read-" + GLOBAL))
        if step["store"]:
            built.stores.append((GLOBAL_STORE, "kv"))
        return getattr(current, method)(table, KEY_SELECTORS[step["key_selector"]], joiner,
                                        name=built.node(name + "-gjoin"))
    side = step["other"]
    other = _eddy_pipeline(builder, side.get("topic", RIGHT), side, side_prefix(side, prefix), built, input2, current)
    if kind == "stream_join":
        if step["store"]:
            built.stores.extend((store, "join_window") for store in join_window_stores(step, name))
        return getattr(current, method)(other, joiner, _eddy_join_windows(step["windows"]),
                                        other_value_serde=serdes.STRING, store=name if step["store"] else None,
                                        name=built.joined(name))
    if kind == "stream_table_join":
        return getattr(current, method)(other, joiner, name=built.joined(name))
    store = None
    if step["store"]:
        store = built.materialized(name).with_key_serde(serdes.STRING).with_value_serde(serdes.STRING)
        built.stores.append((name, "kv"))
    if kind == "fk_join":
        return getattr(current, method)(other, joiner, foreign_key_extractor=FK_EXTRACTORS[step["extractor"]],
                                        store=store, name=built.node(name + "-tjoin"))
    return getattr(current, method)(other, joiner, store=store, name=built.node(name + "-tjoin"))


def build_eddy(scenario: dict, ensure_names: bool = False) -> _Built:
    """The scenario's topology in Eddy's DSL (`ensure_names`: by a builder whose config has
    ensure.explicit.internal.resource.naming, which refuses generated internal names)."""
    from streams import StreamsBuilder

    config: dict = {"default.dsl.store": IN_MEMORY} if scenario.get("dsl_store") == "builder" else {}
    if ensure_names:
        config["ensure.explicit.internal.resource.naming"] = True
    builder = StreamsBuilder(config or None)
    built = _Built(scenario.get("store_type") == IN_MEMORY, scenario.get("unnamed_stores", False),
                   scenario.get("grouped_names", False), scenario.get("join_names", False),
                   scenario.get("node_names", False))
    current = _eddy_pipeline(builder, INPUT, scenario, "", built, [])
    if not hasattr(current, "to"):  # a table: its changelog
        current = current.to_stream()
    extractor = scenario.get("output_extractor")
    if extractor is None:
        topic: Any = OUTPUT
    else:
        route = OUTPUT_EXTRACTORS[extractor]

        def topic(key: Any, value: Any, record_context: Any) -> str:
            return route(value, record_context)
    current.to(topic, key_serde=_output_key_serde(built), value_serde=_serde(built.value_type),
               name=built.node("write-" + OUTPUT))
    built.topology = builder.build({"topology.optimization": optimization(scenario)})
    return built


def optimization(scenario: dict) -> str:
    return scenario.get("topology_optimization", "none")


def _eddy_pipeline(builder: Any, topic: str, spec: dict, prefix: str, built: _Built, input2: list,
                   this: Any = None) -> Any:
    """`spec`'s source over `topic` (``self``: `this`) and its ops (stores named with `prefix`): a
    KStream or a KTable."""
    from streams import serdes

    current: Any
    if spec["source"] == "self":
        current = this
    elif spec["source"] == "table":  # named: materialized (Kafka's sense) and compared
        named = spec.get("source_store", True)
        current = builder.table(topic, key_serde=serdes.STRING, value_serde=serdes.STRING,
                                store=built.materialized(prefix + SOURCE_STORE) if named else None,
                                name=built.node("read-" + topic))
        if named:
            built.stores.append((prefix + SOURCE_STORE, "kv"))
    else:
        current = builder.stream(topic, key_serde=serdes.STRING, value_serde=serdes.STRING,
                                 name=built.node("read-" + topic))
    for index, step in enumerate(spec["ops"]):
        op, fn, name = step["op"], step.get("fn"), store_name(index, prefix)
        if op in JOINS:
            current = _eddy_join(builder, current, step, name, prefix, built, input2)
        elif op in STATELESS_OPS:
            current = _eddy_stream_step(builder, current, step, index, input2, built)
        elif op == PROCESS:
            current = _eddy_process(builder, current, step, name, built)
        elif op == "group_by":
            current = current.group_by(KEY_SELECTORS[fn], key_serde=serdes.STRING, value_serde=serdes.STRING,
                                       name=built.grouped(name))
        elif op == "group_by_key":
            current = current.group_by_key(key_serde=serdes.STRING, value_serde=serdes.STRING, name=built.grouped(name))
        elif op in AGGREGATIONS:
            current = _eddy_aggregation(current, step, name, built)
        elif op == WINDOWED:
            current = _eddy_windowed(current, step, name, built)
        elif op == COGROUP:
            current = _eddy_cogroup(builder, current, step, name, built, input2)
        elif op == "to_table":
            current = current.to_table(store=built.materialized(name).with_key_serde(serdes.STRING)
                                       .with_value_serde(serdes.STRING),
                                       name=name + "-totable" if built.join_names else None)
            built.stores.append((name, "kv"))
        elif op in TABLE_OPS:
            current = _eddy_table_op(current, step, name, built)
        elif op == TABLE_AGGREGATE:
            current = _eddy_table_aggregate(current, step, name, built)
        elif op == "suppress":
            current = current.suppress(_eddy_suppressed(step))
        elif op == "to_stream":
            current = current.to_stream(name=step.get("name"))
        else:
            raise ValueError(f"operation {op!r} is not in the conformance vocabulary")
    return current


def _output_key_serde(built: _Built) -> Any:
    from streams import serdes

    spec = built.windows
    if spec is None:
        return serdes.STRING
    if spec["type"] == "session":
        return serdes.session_windowed(serdes.STRING)
    return serdes.time_windowed(serdes.STRING, spec["size"])


def _key(key: Any) -> Any:
    window = getattr(key, "window", None)
    return key if window is None else [key.key, window.start, window.end]


def _retention(spec: dict) -> int:
    """The default retention of a windowed aggregation's store (Kafka's *StoreMaterializer)."""
    grace = spec["grace"] or 0
    if spec["type"] == "session":
        return spec["gap"] + grace
    if spec["type"] == "sliding":
        return 2 * spec["size"] + grace
    return spec["size"] + grace


def canonical(scenario: dict, stores: dict) -> dict:
    """The store contents as compared: every store's rows in the order its all() gives them
    (Kafka's RocksDB window and session stores by segment, then key; its in-memory window store
    by start, then key, its in-memory session store by end, then key, then start; a
    stream-stream join's duplicates by sequence number). With caching, only the rows within the
    store's retention: Kafka's caching window and
    session stores merge their cache into all() without the retention filter of the store below
    (AbstractRocksDBSegmentedBytesStore.all starts at observed stream time - retention + 1), so
    expired windows still cached show up there, and only there."""
    specs = {store_name(i): step["windows"] for i, step in enumerate(scenario["ops"])
             if step["op"] in (WINDOWED, COGROUP) and step["windows"] is not None}
    out = {}
    for name, rows in stores.items():
        spec = specs.get(name)
        if spec is not None:
            # a window store's segments are by window start, a session store's by session end
            at = 2 if spec["type"] == "session" else 1
            if rows and scenario["cache_max_bytes"]:
                cutoff = max(row[0][at] for row in rows) - _retention(spec) + 1
                rows = [row for row in rows if row[0][at] >= cutoff]
        out[name] = rows
    return out


def _store_reads(driver: Any, scenario: dict, name: str, kind: str) -> list:
    """The results of the scenario's reads that apply to the store (ConformanceDriver.storeReads)."""
    results = []
    for read in scenario.get("reads", ()):
        if not read_applies(scenario, read[0], kind):
            continue
        family, op = read[0].split(":")
        args = read[1:]
        if family == "kv":
            it = getattr(driver.get_key_value_store(name), op)(*args)
        elif family == "window":
            store = driver.get_window_store(name)
            if op == "fetch_one":
                results.append([store.fetch(args[0], args[1])])  # the value, alone in its row list
                continue
            it = getattr(store, op)(*args)
        else:
            it = getattr(driver.get_session_store(name), op)(*args)
        with it:
            results.append([[k if type(k) is int else _key(k), v] for k, v in it])
    return results


def _store_rows(driver: Any, name: str, kind: str) -> list:
    if kind == "plain_kv":
        with driver.get_key_value_store(name).all() as it:
            return [[k, v] for k, v in it]
    if kind == "kv":
        with driver.get_timestamped_key_value_store(name).all() as it:  # a windowed table's keys too
            return [[_key(k), v.value, v.timestamp] if hasattr(v, "timestamp") else [_key(k), v, None] for k, v in it]
    if kind == "window":
        with driver.get_timestamped_window_store(name).all() as it:
            return [[_key(k), v.value, v.timestamp] for k, v in it]
    if kind == "join_window":
        with driver.get_window_store(name).all() as it:
            return [[_key(k), v] for k, v in it]
    with driver.get_session_store(name).all() as it:
        return [[_key(k), v] for k, v in it]


def run_eddy(scenario: dict, state_dir: str | None = None, *, history: list | None = None) -> dict:
    """Run ``scenario`` through Eddy's TopologyTestDriver: {"output": [[k, v, ts]...], "store": {name: rows},
    "topology": its Topology.describe() text, "unnamed_resources": the generated internal names
    ensure.explicit.internal.resource.naming refuses (Kafka's message, "" for none)}.
    ``history``, a list, gets every record the driver's producer sent (changelogs included)."""
    from streams import serdes
    from streams.testing.driver import TopologyTestDriver

    built = build_eddy(scenario)
    # the generated internal names (KIP-1111), as ConformanceDriver.java finds them
    from streams.errors import TopologyError

    try:
        build_eddy(scenario, ensure_names=True)
        unnamed_resources = ""
    except TopologyError as exc:
        unnamed_resources = str(exc)
    # default serdes as ConformanceDriver.java sets them: a suppress buffer after an unmaterialized
    # table operation takes them
    config = {"application.id": "conformance", "statestore.cache.max.bytes": scenario["cache_max_bytes"],
              "default.key.serde": "string", "default.value.serde": "string",
              "topology.optimization": optimization(scenario)}
    if state_dir is not None:
        config["state.dir"] = state_dir
    if scenario.get("dsl_store") == "app":
        config["dsl.store.suppliers.class"] = KAFKA_IN_MEMORY_SUPPLIERS
    if scenario.get("processing_handler"):
        config["processing.exception.handler"] = scenario["processing_handler"]
    failed_at = None
    failing = scenario.get("processing_handler") == FAIL_HANDLER
    driver = TopologyTestDriver(built.topology, config)
    try:
        topics = {}
        with_headers = scenario.get("headers", False)
        for index, record in enumerate(scenario["records"]):
            key, value, ts = record[:3]
            topic = record[3] if len(record) > 3 else INPUT
            if topic not in topics:
                topics[topic] = driver.create_input_topic(topic, serdes.STRING, serdes.STRING)
            headers = ((HEADER_KEY, str(index).encode()),) if with_headers else None
            try:
                topics[topic].pipe_input(key, value, ts, headers=headers)
            except Exception:  # the failing function's own error (Eddy lets it through as it is)
                if not failing:
                    raise
                # the task failed here: what came out before is compared (both drivers show a
                # record's output once it is processed: none of the record that failed, all of
                # the repartitioned records processed before it)
                failed_at = index
                break
        output = []
        for topic in (OUTPUT, OUTPUT2) if scenario.get("output_extractor") else (OUTPUT,):
            sink = driver.create_output_topic(topic, _output_key_serde(built), _serde(built.value_type))
            # output2's rows say so (each topic is read whole: the drivers do not interleave them)
            tag = [] if topic == OUTPUT else [topic]
            records = sink.read_records_to_list()
            output += [[_key(r.key), r.value, r.timestamp,
                        *([[None if v is None else v.decode() for _, v in r.headers]] if with_headers else []), *tag]
                       for r in records]
        compared = built.compared_stores() if failed_at is None else ()
        stores = {name: _store_rows(driver, name, kind) for name, kind in compared}
        reads = {name: _store_reads(driver, scenario, name, kind) for name, kind in compared}
        if history is not None:
            history += driver.producer_history()
    finally:
        try:
            driver.close()
        except Exception:  # under log_and_fail a failing function may first run in the close's flush
            if not failing:
                raise
            if failed_at is None:
                failed_at = "close"
    return {"output": output, "store": canonical(scenario, stores), "topology": str(built.topology.describe()),
            "unnamed_resources": unnamed_resources, "reads": reads,
            **({} if failed_at is None else {"failed_at": failed_at})}
