"""The conformance vocabulary: the DSL operations and named functions a scenario may use,
in ONE place, plus the seeded scenario generator.

A scenario is a linear topology over one input topic ``input`` (String keys and values) and one
output topic ``output``: some stateless operations, then optionally a grouping and ``count`` into
the store ``counts`` (its table streamed to ``output``), and a list of input records
``[key, value, timestamp]`` (None key or value allowed: tombstones, unkeyed records; timestamps
out of order). ``ConformanceDriver.java`` builds the same topology with Kafka Streams from the
same names: a function added here needs its twin in ``FUNCTIONS`` there (same name, same result,
same None handling), an operation its branch in ``apply``.

Every named function is total on None (a tombstone's value or an unkeyed record's key), as the
Java twin is.
"""

from __future__ import annotations

import random
from typing import Any, Callable

#: value -> value (KStream.map_values)
VALUE_MAPPERS: dict[str, Callable[[Any], Any]] = {
    "upper": lambda v: None if v is None else v.upper(),
    "exclaim": lambda v: None if v is None else v + "!",
    "first_word": lambda v: None if v is None else v.split(" ")[0],
    "drop_to_null": lambda v: None if v is None or v.startswith("b") else v,
}
#: value -> list of values (KStream.flat_map_values)
VALUE_SPLITTERS: dict[str, Callable[[Any], list]] = {
    "words": lambda v: [] if v is None else [w for w in v.split(" ") if w],
    "twice": lambda v: [v, v],
}
#: (key, value) -> bool (KStream.filter / filter_not)
PREDICATES: dict[str, Callable[[Any, Any], bool]] = {
    "value_has_a": lambda k, v: v is not None and "a" in v,
    "value_is_short": lambda k, v: v is not None and len(v) <= 3,
    "key_present": lambda k, v: k is not None,
}
#: (key, value) -> new key (KStream.select_key, KStream.group_by)
KEY_SELECTORS: dict[str, Callable[[Any, Any], Any]] = {
    "value": lambda k, v: v,
    "first_char": lambda k, v: None if v is None or v == "" else v[0],
    "key_upper": lambda k, v: None if k is None else k.upper(),
}

#: operation name -> the function table its ``fn`` comes from (None: takes no function)
STATELESS_OPS: dict[str, dict | None] = {
    "filter": PREDICATES,
    "filter_not": PREDICATES,
    "map_values": VALUE_MAPPERS,
    "flat_map_values": VALUE_SPLITTERS,
    "select_key": KEY_SELECTORS,
}
GROUPINGS: dict[str, dict | None] = {"group_by": KEY_SELECTORS, "group_by_key": None}
AGGREGATIONS = ("count",)
STORE = "counts"
INPUT, OUTPUT = "input", "output"

_KEYS = ["a", "b", "c", "dd", None]
_WORDS = ["a", "b", "ab", "ba", "cab", "d", "abc", "bb"]


def generate(seed: int) -> dict:
    """The scenario of ``seed`` (same seed, same scenario, on every machine)."""
    rng = random.Random(seed)
    ops = []
    for _ in range(rng.randint(0, 3)):
        name = rng.choice(sorted(STATELESS_OPS))
        ops.append({"op": name, "fn": rng.choice(sorted(STATELESS_OPS[name]))})
    if rng.random() < 0.7:
        grouping = rng.choice(sorted(GROUPINGS))
        table = GROUPINGS[grouping]
        ops.append({"op": grouping, "fn": rng.choice(sorted(table)) if table else None})
        ops.append({"op": rng.choice(AGGREGATIONS)})
    records = []
    ts = 1_000
    for _ in range(rng.randint(1, 40)):
        ts += rng.randint(-300, 500)  # out of order now and then, never negative
        ts = max(ts, 0)
        key = rng.choice(_KEYS)
        value = None if rng.random() < 0.15 else " ".join(rng.choice(_WORDS) for _ in range(rng.randint(1, 3)))
        records.append([key, value, ts])
    return {"seed": seed, "ops": ops, "cache_max_bytes": rng.choice([0, 10 * 1024 * 1024]), "records": records}


def build_eddy(scenario: dict) -> Any:
    """The scenario's topology in Eddy's DSL."""
    from streams import StreamsBuilder, serdes

    builder = StreamsBuilder()
    stream = builder.stream(INPUT, key_serde=serdes.STRING, value_serde=serdes.STRING)
    grouped = None
    for step in scenario["ops"]:
        op, fn = step["op"], step.get("fn")
        if op in ("filter", "filter_not", "select_key"):
            stream = getattr(stream, op)(KEY_SELECTORS[fn] if op == "select_key" else PREDICATES[fn])
        elif op == "map_values":
            stream = stream.map_values(VALUE_MAPPERS[fn])
        elif op == "flat_map_values":
            stream = stream.flat_map_values(VALUE_SPLITTERS[fn])
        elif op == "group_by":
            grouped = stream.group_by(KEY_SELECTORS[fn], key_serde=serdes.STRING, value_serde=serdes.STRING)
        elif op == "group_by_key":
            grouped = stream.group_by_key(key_serde=serdes.STRING, value_serde=serdes.STRING)
        elif op == "count":
            grouped.count(store=STORE).to_stream().to(OUTPUT, key_serde=serdes.STRING, value_serde=serdes.INT64)
            return builder.build()
        else:
            raise ValueError(f"operation {op!r} is not in the conformance vocabulary")
    stream.to(OUTPUT, key_serde=serdes.STRING, value_serde=serdes.STRING)
    return builder.build()


def run_eddy(scenario: dict, state_dir: str | None = None) -> dict:
    """Run ``scenario`` through Eddy's TopologyTestDriver: {"output": [[k, v, ts]...], "store": [[k, v]...]|None}."""
    from streams import serdes
    from streams.testing.driver import TopologyTestDriver

    grouped = any(step["op"] in AGGREGATIONS for step in scenario["ops"])
    config = {"application.id": "conformance", "statestore.cache.max.bytes": scenario["cache_max_bytes"]}
    if state_dir is not None:
        config["state.dir"] = state_dir
    with TopologyTestDriver(build_eddy(scenario), config) as driver:
        source = driver.create_input_topic(INPUT, serdes.STRING, serdes.STRING)
        for key, value, ts in scenario["records"]:
            source.pipe_input(key, value, ts)
        sink = driver.create_output_topic(OUTPUT, serdes.STRING, serdes.INT64 if grouped else serdes.STRING)
        output = [[r.key, r.value, r.timestamp] for r in sink.read_records_to_list()]
        store = None
        if grouped:
            with driver.get_key_value_store(STORE).all() as it:
                store = [[k, v] for k, v in it]
    return {"output": output, "store": store}
