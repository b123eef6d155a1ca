"""Differential conformance: random seeded scenarios (vocabulary.py) and hand-written ones
(regressions.py) through Kafka Streams' TopologyTestDriver and Eddy's, output records (key,
value, timestamp) and final store contents compared one by one, and the two topologies'
describe() texts (every generated node, store and internal topic name Kafka's).

All scenarios of a run go through one JVM (a module fixture), which runs them in the background
while the tests compare; ``EDDY_CONFORMANCE_SCENARIOS`` sets how many random ones (default 500:
250 topologies, each without and with caching, about 40% of them joins and 9% cogroups),
``EDDY_CONFORMANCE_SEED`` the first seed (default 0). A mismatch names its seed: ``vocabulary.generate(seed)`` rebuilds the scenario and
``python tests/conformance/minimise.py SEED`` shrinks it. A mismatch a known gap explains
(known_gaps.py: fixed on another branch) xfails with that gap's reason.
"""

from __future__ import annotations

import os
import re
import shutil
import sys
from pathlib import Path
from typing import Any, Iterator

import pytest

sys.path.insert(0, str(Path(__file__).parent))

import known_gaps  # noqa: E402
import regressions  # noqa: E402
import runner  # noqa: E402
import vocabulary  # noqa: E402

from streams.testing.maven_jars import JarFetchError  # noqa: E402

COUNT = int(os.environ.get("EDDY_CONFORMANCE_SCENARIOS", "500"))
FIRST_SEED = int(os.environ.get("EDDY_CONFORMANCE_SEED", "0"))
SEEDS = list(range(FIRST_SEED, FIRST_SEED + COUNT))
#: the sample the generator's coverage is checked on: the first 2,000 seeds (generated, not run:
#: more than the default run compares, for the rarest steps, a named count), whatever slice a run
#: compares (a few hundred or an odd slice may miss a rare step; the generator is what is checked)
COVERAGE_SEEDS = range(2000)


@pytest.fixture(scope="module")
def kafka_streams_results(request: pytest.FixtureRequest) -> Iterator[Any]:
    """{seed: Kafka Streams' result} for the seeds this session runs, computed by one JVM in the
    background while the tests compare (a lookup waits for its seed)."""
    scenarios = []
    for item in request.session.items:
        params = getattr(getattr(item, "callspec", None), "params", {}) if item.module is request.module else {}
        if "seed" in params:
            scenarios.append(vocabulary.generate(params["seed"]))
        elif "regression" in params:
            scenarios.append(regressions.SCENARIOS[params["regression"]])
    try:
        run = runner.KafkaStreamsRun(scenarios)
    except JarFetchError as exc:
        pytest.skip(f"no Kafka Streams reference: {exc}")
    yield run
    run.close()


@pytest.fixture(scope="module")
def state_root() -> Iterator[Path]:
    root = runner.scratch_dir("eddy-conformance-state-")
    yield root
    shutil.rmtree(root, ignore_errors=True)


@pytest.mark.parametrize("seed", SEEDS)
def test_eddy_matches_kafka_streams(seed: int, kafka_streams_results: dict[int, dict], state_root: Path) -> None:
    scenario = vocabulary.generate(seed)
    expected = kafka_streams_results[seed]
    assert expected["error"] is None, f"seed {seed}: Kafka Streams failed: {expected['error']}"
    got = runner.run_eddy(scenario, state_root)
    assert got["output"] == expected["output"], (
        _mismatch(seed, scenario, got, expected, "output"))
    assert got["store"] == expected["store"], _mismatch(seed, scenario, got, expected, "store")
    assert _described(got) == _described(expected), _mismatch(seed, scenario, got, expected, "topology")
    assert got["unnamed_resources"] == expected["unnamed_resources"], (
        _mismatch(seed, scenario, got, expected, "unnamed_resources"))
    assert _reads(got, expected) == _reads(expected, expected), _mismatch(seed, scenario, got, expected, "reads")
    assert got.get("failed_at") == expected.get("failed_at"), (
        f"seed {seed}: the task failed at record {got.get('failed_at')} in Eddy, {expected.get('failed_at')} in Kafka")


def _reads(result: dict, kafka: dict) -> dict:
    """A result's store reads, but those Kafka Streams failed (its result a text naming the
    error: some of its stores raise for some bounds, see vocabulary._add_reads), left out."""
    return {name: [read for read, theirs in zip(reads, kafka["reads"].get(name, ())) if not isinstance(theirs, str)]
            for name, reads in result["reads"].items()}


@pytest.mark.parametrize("regression", sorted(regressions.SCENARIOS))
def test_regression_scenario(regression: str, kafka_streams_results: Any, state_root: Path) -> None:
    """A hand-written scenario of one divergence found here (regressions.py)."""
    scenario = regressions.SCENARIOS[regression]
    seed = scenario["seed"]
    expected = kafka_streams_results[seed]
    assert expected["error"] is None, f"{regression}: Kafka Streams failed: {expected['error']}"
    got = runner.run_eddy(scenario, state_root)
    assert got["output"] == expected["output"], _mismatch(seed, scenario, got, expected, "output")
    assert got["store"] == expected["store"], _mismatch(seed, scenario, got, expected, "store")
    assert _described(got) == _described(expected), _mismatch(seed, scenario, got, expected, "topology")
    assert got["unnamed_resources"] == expected["unnamed_resources"], (
        _mismatch(seed, scenario, got, expected, "unnamed_resources"))


def _described(result: dict) -> str:
    """A result's Topology.describe() text, a topic name extractor's class left out (a Java
    lambda's on one side, a Python function's on the other: all else is Kafka's text)."""
    return re.sub(r"\(extractor class: [^)]*\)", "(extractor class: *)", result["topology"]).strip()


def _mismatch(seed: int, scenario: dict, got: dict, expected: dict, part: str) -> str:
    """The failure message of a mismatch; a mismatch a known gap explains (known_gaps.py, fixed on
    another branch) xfails here instead, with the gap's reason and branch."""
    gap = known_gaps.explain(scenario, got, expected)
    if gap is not None:
        pytest.xfail(f"{gap.reason} [known gap {gap.name!r}, fixed on branch {gap.branch!r}]")
    return (f"seed {seed} ({scenario['family']}, cache {scenario['cache_max_bytes']}, optimization "
            f"{vocabulary.optimization(scenario)}, dsl_store {scenario.get('dsl_store')}): {part} differs\n"
            f" ops {scenario['ops']}\n source {scenario['source']} records {scenario['records']}\n"
            f" eddy  {got[part]}\n kafka {expected[part]}")


def test_vocabulary_is_deterministic_and_covers_every_operation() -> None:
    assert vocabulary.generate(7) == vocabulary.generate(7)
    scenarios = [vocabulary.generate(seed) for seed in COVERAGE_SEEDS]
    assert {step["op"] for s in scenarios for step in s["ops"]} == vocabulary.ALL_OPS
    assert any(s.get("unnamed_stores") for s in scenarios) and not all(s.get("unnamed_stores") for s in scenarios)
    windowed = [step for s in scenarios for step in s["ops"] if step["op"] == vocabulary.WINDOWED]
    kinds = vocabulary.WINDOW_TYPES
    assert {(w["windows"]["type"], w["agg"]) for w in windowed} == {
        (kind, agg) for kind in kinds for agg in vocabulary.AGGREGATIONS}
    assert {(w["windows"]["type"], w["windows"]["grace"] is None) for w in windowed} == {
        (kind, no_grace) for kind in kinds for no_grace in (True, False)}
    assert {w["emit"] for w in windowed} == {"update", "close"}
    assert {s["family"] for s in scenarios} == {*vocabulary.FAMILIES, vocabulary.JOIN_FAMILY, vocabulary.COGROUP_FAMILY}
    cogroups = [step for s in scenarios for step in s["ops"] if step["op"] == vocabulary.COGROUP]
    assert {(c["windows"] or {}).get("type") for c in cogroups} == {None, *kinds}
    assert {c["fn"].removeprefix(vocabulary.FAILING) for c in cogroups} == set(vocabulary.COGROUP_AGGREGATORS)
    # either side may be re-keyed, both (two repartition topics) never: Kafka cannot build it unnamed
    assert any(c["other"]["ops"][-1]["op"] == "group_by" for c in cogroups)
    rekeyed = vocabulary.changes_key
    sides = [(any(rekeyed(step) for step in s["ops"][:s["ops"].index(c)]),
              any(rekeyed(step) for step in c["other"]["ops"]))
             for s in scenarios for c in s["ops"] if c["op"] == vocabulary.COGROUP]
    assert {(True, False), (False, True), (False, False)} <= set(sides) and (True, True) not in sides
    joins = [vocabulary.join_step(s) for s in scenarios if s["family"] == vocabulary.JOIN_FAMILY]
    assert {(j["op"], j["type"]) for j in joins} == {(kind, t) for kind, types in vocabulary.JOINS.items()
                                                    for t in types}
    assert {(j["op"], j.get("store")) for j in joins} == {
        (kind, stored) for kind in vocabulary.JOINS for stored in ((None,) if kind == "stream_table_join"
                                                                   else (True, False))}
    sides = [j["other"] for j in joins if "other" in j]
    # tables read through value getters: unmaterialized filters and mappers on either side
    assert any(not step["store"] for side in sides for step in side["ops"] if step["op"] in vocabulary.TABLE_OPS)
    assert {j["op"] for s in scenarios if s["family"] == vocabulary.JOIN_FAMILY
            for j in [vocabulary.join_step(s)] if any(step["op"] in ("select_key", "map") for step in s["ops"])} >= {
        "stream_join", "stream_table_join"}
    assert {s["source"] for s in scenarios} == {"stream", "table"}
    assert {vocabulary.optimization(s) for s in scenarios} == {"none", vocabulary.OPTIMIZATIONS}
    assert {s["cache_max_bytes"] for s in scenarios} == {vocabulary.NO_CACHE, vocabulary.TINY_CACHE, vocabulary.CACHE,
                                                         *vocabulary.SMALL_CACHES}
    in_memory = [s for s in scenarios if s.get("store_type") == vocabulary.IN_MEMORY]
    assert {s["family"] for s in in_memory} == {*vocabulary.FAMILIES, vocabulary.COGROUP_FAMILY}
    assert any(step.get("emit") == "close" for s in in_memory for step in s["ops"])
    # named groupings (Grouped.as) of every kind: a stream's by a selector or by its key (re-keyed
    # before), a table's, a cogroup's other side
    named = [s for s in scenarios if s.get("grouped_names")]
    assert {step["op"] for s in named for step in s["ops"]} >= {"group_by", "group_by_key", vocabulary.TABLE_AGGREGATE,
                                                                vocabulary.COGROUP}
    # named stream joins of both kinds and types, after key changes too
    named_joins = [vocabulary.join_step(s) for s in scenarios
                   if s.get("join_names") and s["family"] == vocabulary.JOIN_FAMILY]
    assert {(j["op"], j["type"]) for j in named_joins if j["op"] in ("stream_join", "stream_table_join")} >= {
        ("stream_join", "inner"), ("stream_join", "left"), ("stream_join", "outer"),
        ("stream_table_join", "inner"), ("stream_table_join", "left")}
    # named sources (stream, table, the second input, the global table), sinks, table and global
    # joins (primary and foreign key) and cogroup aggregations (plain, windowed, session)
    node_named = [s for s in scenarios if s.get("node_names")]
    assert {s["source"] for s in node_named} == {"stream", "table"}
    assert {vocabulary.join_step(s)["op"] for s in node_named if s["family"] == vocabulary.JOIN_FAMILY} >= {
        "table_join", "fk_join", "global_join"}
    cogroup_windows = {step["windows"] and step["windows"]["type"] == "session"
                       for s in node_named for step in s["ops"] if step["op"] == vocabulary.COGROUP}
    assert cogroup_windows == {None, True, False}  # unwindowed, session, time windows
    assert any(step["op"] == "merge" for s in node_named for step in s["ops"])
    # stores chosen by the builder's or the app's config, in every family (joins' stores too)
    configured = [s for s in scenarios if s.get("dsl_store")]
    assert {(s["family"], s["dsl_store"]) for s in configured} == {
        (family, where) for family in (*vocabulary.FAMILIES, vocabulary.JOIN_FAMILY, vocabulary.COGROUP_FAMILY)
        for where in vocabulary.DSL_STORES}
    assert any(vocabulary.join_step(s)["op"] == "fk_join" for s in configured if s["family"] == vocabulary.JOIN_FAMILY)
    limits = [step for s in scenarios for step in s["ops"] if step["op"] == "suppress" and step["until"] == "time_limit"]
    assert {(step["max_records"] is not None, "max_bytes" in step) for step in limits} == {
        (records, size) for records in (True, False) for size in (True, False)}
    # byte bounds, where-from extractors and headers below caches too (a flushed record goes in
    # its cached write's record context)
    cached = [s for s in scenarios if s["cache_max_bytes"] != vocabulary.NO_CACHE]
    assert any("max_bytes" in step for s in cached for step in s["ops"])
    assert any(s.get("headers") for s in cached)
    # a topic name extractor over every kind of output: plain, windowed and session keys, long values
    extracted = [s for s in scenarios if s.get("output_extractor")]
    assert {s["output_extractor"] for s in extracted} == set(vocabulary.OUTPUT_EXTRACTORS)
    assert {s["output_extractor"] for s in extracted if s["cache_max_bytes"]} == set(vocabulary.OUTPUT_EXTRACTORS)
    assert {s["family"] for s in extracted} == {*vocabulary.FAMILIES, vocabulary.JOIN_FAMILY, vocabulary.COGROUP_FAMILY}
    assert any(step["op"] == vocabulary.WINDOWED and step["windows"]["type"] == "session"
               for s in extracted for step in s["ops"])
    # a repartition() before a grouping that therefore needs none, and one after a key change
    repartitioned = [s["ops"][: i + 2] for s in scenarios for i, step in enumerate(s["ops"]) if step["op"] == "repartition"]
    assert any(ops[-1]["op"] in vocabulary.GROUPINGS for ops in repartitioned)
    assert any(vocabulary.changes_key(step) for ops in repartitioned for step in ops[:-2])
    # Processor API steps: both processors, their store cached or not, in memory too, and a
    # grouping after one (which repartitions: a processor may change the key)
    processes = [(s, step) for s in scenarios for step in s["ops"] if step["op"] == vocabulary.PROCESS]
    assert {(step["fn"], step["cached"]) for _, step in processes} == {
        (fn, cached) for fn in vocabulary.PROCESSORS for cached in (True, False)}
    assert any(s.get("store_type") == vocabulary.IN_MEMORY for s, _ in processes)
    assert any(later["op"] == "group_by_key" for s, step in processes for later in s["ops"][s["ops"].index(step):])
    # named stream operations (Kafka's Named): every nameable operation, named and not in one scenario
    named = [step for s in scenarios for ops in [s["ops"]] + [st["other"]["ops"] for st in s["ops"]
                                                            if st["op"] == vocabulary.COGROUP]
             for step in ops if step.get("name")]
    assert {step["op"] for step in named} == set(vocabulary.NAMEABLE_OPS)
    assert any(step.get("name") is None and step["op"] in vocabulary.NAMEABLE_OPS
               for s in scenarios if any(st.get("name") for st in s["ops"]) for step in s["ops"])
    # fixed-key processors (process_values), a grouping below one too (which needs no repartition)
    values = [(s, step) for s, step in processes if step.get("values")]
    assert {step["cached"] for _, step in values} == {True, False}
    assert any(later["op"] == "group_by_key" for s, step in values for later in s["ops"][s["ops"].index(step):])
    # table operations over windowed tables (a windowed key in their stores), of every window type
    after_windows = [(s["ops"][i - 1]["windows"]["type"], step["store"]) for s in scenarios
                     for i, step in enumerate(s["ops"])
                     if step["op"] in vocabulary.TABLE_OPS and i and s["ops"][i - 1]["op"] == vocabulary.WINDOWED]
    assert {kind for kind, _ in after_windows} == set(vocabulary.WINDOW_TYPES)
    assert {stored for _, stored in after_windows} == {True, False}
    # records with headers, compared on the way out, in every family (vocabulary.HEADERS_SHARE)
    with_headers = [s for s in scenarios if s.get("headers")]
    assert {s["family"] for s in with_headers} == {*vocabulary.FAMILIES, vocabulary.JOIN_FAMILY, vocabulary.COGROUP_FAMILY}
    # the processing exception handler (log and continue) in every family, cached and not, with
    # the failing twins of every kind of named function, inside joins' and cogroups' other
    # pipelines too (vocabulary.HANDLER_SHARE)
    handled = [s for s in scenarios if s.get("processing_handler")]
    assert {s["processing_handler"] for s in handled} == {vocabulary.CONTINUE_HANDLER, vocabulary.FAIL_HANDLER}
    assert {s["family"] for s in handled} == {*vocabulary.FAMILIES, vocabulary.JOIN_FAMILY, vocabulary.COGROUP_FAMILY}
    assert {s["cache_max_bytes"] != vocabulary.NO_CACHE for s in handled} == {True, False}
    failing = set()

    def failing_tables(steps: list, nested: bool) -> None:
        for step in steps:
            for field, table in vocabulary._function_fields(step):
                if str(step.get(field)).startswith(vocabulary.FAILING):
                    failing.add((id(table), nested))
            if isinstance(step.get("other"), dict):
                failing_tables(step["other"].get("ops", []), True)
    for s in handled:
        failing_tables(s["ops"], False)
    tables = (vocabulary.VALUE_MAPPERS, vocabulary.VALUE_SPLITTERS, vocabulary.PREDICATES, vocabulary.KEY_SELECTORS,
              vocabulary.KV_MAPPERS, vocabulary.KV_SPLITTERS, vocabulary.REDUCERS, vocabulary.AGGREGATORS,
              vocabulary.COGROUP_AGGREGATORS, vocabulary.TABLE_REDUCERS, vocabulary.TABLE_AGGREGATORS,
              vocabulary.JOINERS, vocabulary.FK_EXTRACTORS)
    assert {table for table, _ in failing} == {id(table) for table in tables}
    assert (id(vocabulary.VALUE_MAPPERS), True) in failing
    # without the handler, no failing function
    assert not any(str(step.get(field)).startswith(vocabulary.FAILING) for s in scenarios
                   if not s.get("processing_handler") for step in s["ops"]
                   for field, _ in vocabulary._function_fields(step))
    # interactive queries of every kind on every store after the records (vocabulary._add_reads)
    assert {read[0] for s in scenarios for read in s["reads"]} == {
        *(f"kv:{op}" for op in ("range", "reverse_range", "prefix_scan")),
        *(f"window:{op}" for op in ("fetch_one", "fetch", "backward_fetch", "fetch_range", "backward_fetch_range",
                                    "fetch_all", "backward_fetch_all")),
        *(f"session:{op}" for op in ("find_sessions", "backward_find_sessions", "find_sessions_range",
                                     "backward_find_sessions_range", "fetch", "backward_fetch", "fetch_range",
                                     "backward_fetch_range"))}
    assert any(None in read[1:3] for s in scenarios for read in s["reads"] if read[0].endswith("range"))
