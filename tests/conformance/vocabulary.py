"""The conformance vocabulary: the DSL operations and named functions a scenario may use,
in ONE place, plus the seeded scenario generator and the scenario's run through Eddy.

A scenario is a linear pipeline over the input topic ``input`` (String keys and values; a
``merge`` step also reads ``input2``) ending in the output topic ``output``: ``source`` is
``"stream"`` (builder.stream) or ``"table"`` (builder.table with the store ``source-store``);
``source_store: false`` leaves the table's store unnamed (not materialized in Kafka's sense);
``ops`` is a list of steps ``{"op": name, ...}`` applied in order to the current KStream
(``STATELESS_OPS``, ``GROUPINGS``, ``to_table``), KGroupedStream (``AGGREGATIONS``, ``windowed``)
or KTable (``TABLE_OPS``, ``table_aggregate``, ``suppress``, ``to_stream``); the last KStream is
written to ``output`` (a KTable through ``to_stream()``). Every store a step creates is named
``store-<step index>`` and compared at the end; ``records`` are ``[key, value, timestamp]``
(plus the topic when it is not ``input``); None keys and values (unkeyed records, tombstones),
out-of-order and late timestamps and timestamps on window boundaries are generated.
``cache_max_bytes`` is 0 (no caching layer, as Kafka's rewriteTopology) or 10 MiB; seeds 2n and
2n + 1 are one topology and its records without and with caching.

``ConformanceDriver.java`` builds the same topology with Kafka Streams from the same names: a
function added here needs its twin there (same name, same result, same None handling), an
operation its branch there. Every named function is total on None, as its Java twin is.

Results of both sides have one shape: ``{"output": [[key, value, timestamp]...], "store":
{store name: rows}}``; a windowed key is ``[key, start, end]``; rows are ``[key, value,
timestamp]`` for timestamped key-value and window stores and ``[key, value]`` for session
stores, window and session rows sorted (their iteration order is the store's business).
"""

from __future__ import annotations

import random
from typing import Any, Callable

INPUT, INPUT2, OUTPUT = "input", "input2", "output"
SOURCE_STORE = "source-store"
NO_CACHE, CACHE = 0, 10 * 1024 * 1024


def _first_char(v: Any) -> Any:
    return None if v is None or v == "" else v[0]


def _words(v: Any) -> list:
    return [] if v is None else [w for w in v.split(" ") if w]


def _s(v: Any) -> str:
    """None as "" (for functions Kafka never calls with None, total anyway)."""
    return "" if v is None else v


def _length(v: Any) -> int:
    return 0 if v is None else len(v)


# ---- named functions -------------------------------------------------------------------------

#: value -> value (KStream.map_values, KTable.map_values)
VALUE_MAPPERS: dict[str, Callable[[Any], Any]] = {
    "upper": lambda v: None if v is None else v.upper(),
    "exclaim": lambda v: None if v is None else v + "!",
    "first_word": lambda v: None if v is None else v.split(" ")[0],
    "drop_to_null": lambda v: None if v is None or v.startswith("b") else v,
}
#: value -> list of values (KStream.flat_map_values)
VALUE_SPLITTERS: dict[str, Callable[[Any], list]] = {
    "words": _words,
    "twice": lambda v: [v, v],
}
#: (key, value) -> bool (KStream/KTable filter, filter_not; split's branch)
PREDICATES: dict[str, Callable[[Any, Any], bool]] = {
    "value_has_a": lambda k, v: v is not None and "a" in v,
    "value_is_short": lambda k, v: v is not None and len(v) <= 3,
    "key_present": lambda k, v: k is not None,
}
#: (key, value) -> new key (KStream.select_key, KStream.group_by)
KEY_SELECTORS: dict[str, Callable[[Any, Any], Any]] = {
    "value": lambda k, v: v,
    "first_char": lambda k, v: _first_char(v),
    "key_upper": lambda k, v: None if k is None else k.upper(),
}
#: (key, value) -> (new key, new value) (KStream.map; KTable.group_by)
KV_MAPPERS: dict[str, Callable[[Any, Any], tuple]] = {
    "swap": lambda k, v: (v, k),
    "by_first_char": lambda k, v: (_first_char(v), v),
    "key_upper": lambda k, v: (None if k is None else k.upper(), v),
}
#: (key, value) -> list of (key, value) (KStream.flat_map)
KV_SPLITTERS: dict[str, Callable[[Any, Any], list]] = {
    "words_as_keys": lambda k, v: [(w, k) for w in _words(v)],
    "both_ways": lambda k, v: [(k, v), (v, k)],
}
#: (aggregate, value) -> aggregate (KGroupedStream.reduce, windowed reduce; a session reduce
#: merges sessions with it too, as Kafka)
REDUCERS: dict[str, Callable[[Any, Any], Any]] = {
    "concat": lambda a, v: _s(a) + "|" + _s(v),
    "max": lambda a, v: v if a is None else a if v is None else max(a, v),
    "longer": lambda a, v: v if _length(v) > _length(a) else a,
}
#: name -> (initializer, aggregator(key, value, aggregate), session merger(key, a, b), value type)
AGGREGATORS: dict[str, tuple] = {
    "sum_of_lengths": (lambda: 0, lambda k, v, a: a + _length(v), lambda k, a, b: a + b, "long"),
    "concat": (lambda: "", lambda k, v, a: a + "," + _s(v), lambda k, a, b: a + "&" + b, "string"),
}
#: name -> (adder(aggregate, value), subtractor(aggregate, value)) (KGroupedTable.reduce)
TABLE_REDUCERS: dict[str, tuple] = {
    "plus_minus": (lambda a, v: _s(a) + "+" + _s(v), lambda a, v: _s(a) + "-" + _s(v)),
    "longer_keep": (lambda a, v: v if _length(v) > _length(a) else a, lambda a, v: a),
}
#: name -> (initializer, adder(key, value, aggregate), subtractor(key, value, aggregate), value type)
#: (KGroupedTable.aggregate)
TABLE_AGGREGATORS: dict[str, tuple] = {
    "sum_of_lengths": (lambda: 0, lambda k, v, a: a + _length(v), lambda k, v, a: a - _length(v), "long"),
    "trace": (lambda: "", lambda k, v, a: a + "+" + _s(v), lambda k, v, a: a + "-" + _s(v), "string"),
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
}
#: stream -> grouped stream
GROUPINGS: dict[str, dict | None] = {"group_by": KEY_SELECTORS, "group_by_key": None}
#: grouped stream -> table (non-windowed KStream aggregations, Kafka's KStreamAggregate/Reduce)
AGGREGATIONS = ("count", "reduce", "aggregate")
#: grouped stream -> windowed table: {"op": "windowed", "windows": {...}, "agg": count|reduce|aggregate, "fn", "emit"}
WINDOWED = "windowed"
WINDOW_TYPES = ("tumbling", "hopping", "sliding", "session")
#: table -> table operations (``store``: materialized as store-<i> or not)
TABLE_OPS: dict[str, dict] = {"table_filter": PREDICATES, "table_filter_not": PREDICATES,
                              "table_map_values": VALUE_MAPPERS}
#: table -> re-keyed table aggregate: {"op": "table_aggregate", "by": KV_MAPPERS name, "agg", "fn"}
TABLE_AGGREGATE = "table_aggregate"
#: stream -> table, table -> stream, table -> suppressed table
CONVERSIONS = ("to_table", "to_stream", "suppress")
ALL_OPS = (set(STATELESS_OPS) | set(GROUPINGS) | set(AGGREGATIONS) | {WINDOWED, TABLE_AGGREGATE}
           | set(TABLE_OPS) | set(CONVERSIONS))

FAMILIES = ("stateless", "aggregate", "windowed", "table")

_KEYS = ["a", "b", "c", "dd", None]
_WORDS = ["a", "b", "ab", "ba", "cab", "d", "abc", "bb"]


def store_name(index: int) -> str:
    return f"store-{index}"


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
    return {"op": "suppress", "until": "time_limit", "limit": rng.choice([0, 100, 400]),
            "max_records": rng.choice([None, None, 1, 2])}


def _stream_family(rng: random.Random, family: str) -> list:
    ops = _stateless_steps(rng, 4 if family == "stateless" else 2)
    if family == "stateless":
        return ops
    ops.append(_grouping(rng))
    if family == "aggregate":
        agg, fn = _aggregation(rng)
        ops.append({"op": agg, "fn": fn})
        if rng.random() < 0.2:
            ops.append(_suppress(rng, False))
        return ops
    windows = _windows(rng)
    agg, fn = _aggregation(rng)
    emit = "update"
    if rng.random() < 0.3:
        emit = "close"
    ops.append({"op": WINDOWED, "windows": windows, "agg": agg, "fn": fn, "emit": emit})
    if emit == "update" and rng.random() < 0.4:
        ops.append(_suppress(rng, True))
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
        if step["op"] == WINDOWED:
            w = step["windows"]
            return w.get("advance") or w.get("size") or w.get("gap")
    return 100


def _records(rng: random.Random, ops: list) -> list:
    two_topics = any(step["op"] == "merge" for step in ops)
    grid = _timestamp_grid(ops)
    records = []
    ts = rng.choice([0, 1_000])
    for _ in range(rng.randint(1, 40)):
        r = rng.random()
        if r < 0.08:
            ts -= rng.randint(300, 2_000)  # late: beyond most graces
        elif r < 0.3:
            ts += rng.randint(-300, 0)  # out of order
        else:
            ts += rng.randint(0, 500)
        if rng.random() < 0.3:  # on a window boundary, or just before it
            ts = ts // grid * grid - rng.choice([0, 0, 1])
        ts = max(ts, 0)
        key = rng.choice(_KEYS)
        value = None if rng.random() < 0.15 else " ".join(rng.choice(_WORDS) for _ in range(rng.randint(1, 3)))
        record = [key, value, ts]
        if two_topics and rng.random() < 0.4:
            record.append(INPUT2)
        records.append(record)
    return records


def generate(seed: int) -> dict:
    """The scenario of ``seed`` (same seed, same scenario, on every machine). Seeds 2n and 2n + 1
    are the same topology and records, without and with caching."""
    rng = random.Random(seed // 2)
    family = FAMILIES[rng.choices(range(len(FAMILIES)), weights=[2, 3, 5, 4])[0]]
    if family == "table":
        source, ops = _table_family(rng)
    else:
        source, ops = "stream", _stream_family(rng, family)
    scenario = {"seed": seed, "family": family, "source": source, "ops": ops,
                "cache_max_bytes": CACHE if seed % 2 else NO_CACHE, "records": _records(rng, ops)}
    if source == "unnamed_table":  # builder.table without a store name
        scenario.update(source="table", source_store=False)
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
    n = step["max_records"]
    return Suppressed.until_time_limit(step["limit"], BufferConfig.unbounded() if n is None
                                       else BufferConfig.max_records(n))


class _Built:
    """What building a scenario yields: the topology, the output serdes and the stores to read."""

    def __init__(self) -> None:
        self.topology: Any = None
        self.value_type = "string"
        self.windows: Any = None  # the spec of the output's windowed key, if any
        self.stores: list[tuple[str, str]] = []  # (name, kind: kv | window | session)


def _eddy_windowed(grouped: Any, step: dict, name: str, built: _Built) -> Any:
    from streams import EmitStrategy, Materialized

    spec = step["windows"]
    windowed = grouped.windowed_by(_eddy_windows(spec))
    if step["emit"] == "close":
        windowed = windowed.emit_strategy(EmitStrategy.on_window_close())
    agg, fn = step["agg"], step["fn"]
    if agg == "count":
        vtype = "long"
        table = windowed.count(store=Materialized.as_(name).with_value_serde(_serde(vtype)))
    elif agg == "reduce":
        vtype = "string"
        table = windowed.reduce(REDUCERS[fn], store=name)
    else:
        init, aggregator, merger, vtype = AGGREGATORS[fn]
        mat = Materialized.as_(name).with_value_serde(_serde(vtype))
        table = (windowed.aggregate(init, aggregator, merger, store=mat) if spec["type"] == "session"
                 else windowed.aggregate(init, aggregator, store=mat))
    built.value_type, built.windows = vtype, spec
    built.stores.append((name, "session" if spec["type"] == "session" else "window"))
    return table


def _eddy_table_aggregate(table: Any, step: dict, name: str, built: _Built) -> Any:
    from streams import Materialized, serdes

    grouped = table.group_by(KV_MAPPERS[step["by"]], key_serde=serdes.STRING, value_serde=serdes.STRING)
    agg, fn = step["agg"], step["fn"]
    if agg == "count":
        vtype, result = "long", grouped.count(store=Materialized.as_(name).with_value_serde(serdes.INT64))
    elif agg == "reduce":
        adder, subtractor = TABLE_REDUCERS[fn]
        vtype, result = "string", grouped.reduce(adder, subtractor, store=name)
    else:
        init, adder, subtractor, vtype = TABLE_AGGREGATORS[fn]
        result = grouped.aggregate(init, adder, subtractor, store=Materialized.as_(name).with_value_serde(_serde(vtype)))
    built.value_type = vtype
    built.stores.append((name, "kv"))
    return result


def _eddy_stream_step(builder: Any, stream: Any, step: dict, index: int, input2: list) -> Any:
    from streams import Branched, serdes

    op, fn = step["op"], step.get("fn")
    if op in ("filter", "filter_not"):
        return getattr(stream, op)(PREDICATES[fn])
    if op == "select_key":
        return stream.select_key(KEY_SELECTORS[fn])
    if op == "map_values":
        return stream.map_values(VALUE_MAPPERS[fn])
    if op == "flat_map_values":
        return stream.flat_map_values(VALUE_SPLITTERS[fn])
    if op == "map":
        return stream.map(KV_MAPPERS[fn])
    if op == "flat_map":
        return stream.flat_map(KV_SPLITTERS[fn])
    if op == "merge":  # input2 is read once, merged as often as asked
        if not input2:
            input2.append(builder.stream(INPUT2, key_serde=serdes.STRING, value_serde=serdes.STRING))
        return stream.merge(input2[0])
    if op == "split":
        name = f"split{index}-"
        branches = stream.split(name).branch(PREDICATES[fn], Branched.as_("x")).default_branch(Branched.as_("y"))
        return branches[name + "x"].merge(branches[name + "y"].map_values(VALUE_MAPPERS["exclaim"]))
    raise ValueError(f"operation {op!r} is not a stream operation of the conformance vocabulary")


def build_eddy(scenario: dict) -> _Built:
    """The scenario's topology in Eddy's DSL."""
    from streams import Materialized, StreamsBuilder, serdes

    builder = StreamsBuilder()
    built = _Built()
    current: Any
    input2: list = []
    if scenario["source"] == "table":  # named: materialized (Kafka's sense) and compared
        named = scenario.get("source_store", True)
        current = builder.table(INPUT, key_serde=serdes.STRING, value_serde=serdes.STRING,
                                store=SOURCE_STORE if named else None)
        if named:
            built.stores.append((SOURCE_STORE, "kv"))
    else:
        current = builder.stream(INPUT, key_serde=serdes.STRING, value_serde=serdes.STRING)
    for index, step in enumerate(scenario["ops"]):
        op, fn, name = step["op"], step.get("fn"), store_name(index)
        if op in STATELESS_OPS:
            current = _eddy_stream_step(builder, current, step, index, input2)
        elif op == "group_by":
            current = current.group_by(KEY_SELECTORS[fn], key_serde=serdes.STRING, value_serde=serdes.STRING)
        elif op == "group_by_key":
            current = current.group_by_key(key_serde=serdes.STRING, value_serde=serdes.STRING)
        elif op == "count":
            current = current.count(store=name)
            built.value_type = "long"
            built.stores.append((name, "kv"))
        elif op == "reduce":
            current = current.reduce(REDUCERS[fn], store=name)
            built.stores.append((name, "kv"))
        elif op == "aggregate":
            init, aggregator, _merger, vtype = AGGREGATORS[fn]
            current = current.aggregate(init, aggregator, store=Materialized.as_(name).with_value_serde(_serde(vtype)))
            built.value_type = vtype
            built.stores.append((name, "kv"))
        elif op == WINDOWED:
            current = _eddy_windowed(current, step, name, built)
        elif op == "to_table":
            current = current.to_table(store=Materialized.as_(name).with_key_serde(serdes.STRING)
                                       .with_value_serde(serdes.STRING))
            built.stores.append((name, "kv"))
        elif op in TABLE_OPS:
            method = {"table_filter": "filter", "table_filter_not": "filter_not", "table_map_values": "map_values"}[op]
            table = PREDICATES if op != "table_map_values" else VALUE_MAPPERS
            if step["store"]:
                current = getattr(current, method)(table[fn], store=Materialized.as_(name).with_value_serde(serdes.STRING))
                built.stores.append((name, "kv"))
            else:
                current = getattr(current, method)(table[fn])
        elif op == TABLE_AGGREGATE:
            current = _eddy_table_aggregate(current, step, name, built)
        elif op == "suppress":
            current = current.suppress(_eddy_suppressed(step))
        elif op == "to_stream":
            current = current.to_stream()
        else:
            raise ValueError(f"operation {op!r} is not in the conformance vocabulary")
    if not hasattr(current, "to"):  # a table: its changelog
        current = current.to_stream()
    current.to(OUTPUT, key_serde=_output_key_serde(built), value_serde=_serde(built.value_type))
    built.topology = builder.build()
    return built


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
    """The store contents as compared: window and session rows sorted (their iteration order is
    the store layout's business: Kafka's time-ordered and key-ordered stores differ, not the
    DSL's). With caching, only the rows within the store's retention: Kafka's caching window and
    session stores merge their cache into all() without the retention filter of the store below
    (AbstractRocksDBSegmentedBytesStore.all starts at observed stream time - retention + 1), so
    expired windows still cached show up there, and only there."""
    specs = {store_name(i): step["windows"] for i, step in enumerate(scenario["ops"]) if step["op"] == WINDOWED}
    out = {}
    for name, rows in stores.items():
        spec = specs.get(name)
        if spec is not None:
            # a window store's segments are by window start, a session store's by session end
            at = 2 if spec["type"] == "session" else 1
            if rows and scenario["cache_max_bytes"]:
                cutoff = max(row[0][at] for row in rows) - _retention(spec) + 1
                rows = [row for row in rows if row[0][at] >= cutoff]
            rows = sorted(rows, key=repr)
        out[name] = rows
    return out


def _store_rows(driver: Any, name: str, kind: str) -> list:
    if kind == "kv":
        with driver.get_timestamped_key_value_store(name).all() as it:
            return [[k, v.value, v.timestamp] if hasattr(v, "timestamp") else [k, v, None] for k, v in it]
    if kind == "window":
        with driver.get_timestamped_window_store(name).all() as it:
            return [[_key(k), v.value, v.timestamp] for k, v in it]
    with driver.get_session_store(name).all() as it:
        return [[_key(k), v] for k, v in it]


def run_eddy(scenario: dict, state_dir: str | None = None) -> dict:
    """Run ``scenario`` through Eddy's TopologyTestDriver: {"output": [[k, v, ts]...], "store": {name: rows}}."""
    from streams import serdes
    from streams.testing.driver import TopologyTestDriver

    built = build_eddy(scenario)
    # default serdes as ConformanceDriver.java sets them: a suppress buffer after an unmaterialized
    # table operation takes them
    config = {"application.id": "conformance", "statestore.cache.max.bytes": scenario["cache_max_bytes"],
              "default.key.serde": "string", "default.value.serde": "string"}
    if state_dir is not None:
        config["state.dir"] = state_dir
    with TopologyTestDriver(built.topology, config) as driver:
        topics = {}
        for record in scenario["records"]:
            key, value, ts = record[:3]
            topic = record[3] if len(record) > 3 else INPUT
            if topic not in topics:
                topics[topic] = driver.create_input_topic(topic, serdes.STRING, serdes.STRING)
            topics[topic].pipe_input(key, value, ts)
        sink = driver.create_output_topic(OUTPUT, _output_key_serde(built), _serde(built.value_type))
        output = [[_key(r.key), r.value, r.timestamp] for r in sink.read_records_to_list()]
        stores = {name: _store_rows(driver, name, kind) for name, kind in built.stores}
    return {"output": output, "store": canonical(scenario, stores)}
