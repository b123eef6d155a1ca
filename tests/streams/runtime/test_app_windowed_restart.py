"""Issue 16's scenarios on the embedded runtime across a restart: each scenario is one
implementation (topology, input, the final view of its output) run once straight through on the
TopologyTestDriver and once on an App that is closed half-way and started again (for some with its
local state wiped, so window, session and suppression stores restore from their changelogs); the
final results must be the same, and results meant to be final (suppress, on_window_close) must
come out exactly once.

The half-way point is a record carrying the largest timestamp so far: a restarted processor's
observed stream time starts over from the first record it sees (Kafka's processors keep it in
memory only), so restarting before an out-of-order record could accept what the uninterrupted
run drops. One embedded cluster serves the module."""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from typing import Any, Callable

import pytest
from confluent_kafka import OFFSET_BEGINNING, TopicPartition

from streams import (App, AppState, BufferConfig, EmitStrategy, Materialized, SessionWindows, SlidingWindows,
                     StreamsBuilder, Suppressed, TimeWindows, serdes)
from streams.testing import TopologyTestDriver

from _runtime_util import Cluster, unique, wait_for

S, I64 = serdes.STRING, serdes.INT64


def flat(windowed: Any, value: Any) -> tuple:
    return f"{windowed.key}@{windowed.window.start}/{windowed.window.end}", value


@dataclass
class Scenario:
    """`build(builder, input, output)` the topology; `records` are (key, value, timestamp), the
    first `half` before the restart; the output's final view is the last value per key (a
    tombstone removes the key); `exactly_once`: every output key appears once."""

    name: str
    build: Callable[[StreamsBuilder, str, str], None]
    records: list
    half: int
    value_serde: Any = I64
    empty: Any = None  # a value meaning "nothing": dropped from the final view
    exactly_once: bool = False
    wipe: bool = False
    guarantee: str = "at_least_once"


def view(pairs: list, empty: Any = None) -> dict:
    out: dict = {}
    for key, value in pairs:
        if value is None or value == empty:
            out.pop(key, None)
        else:
            out[key] = value
    return out


# ---------------------------------------------------------------------------------- scenarios
def tumbling_suppress(b: StreamsBuilder, src: str, out: str) -> None:
    (b.stream(src, key_serde=S, value_serde=S).group_by_key()
        .windowed_by(TimeWindows.of_size_and_grace(10, 5)).count()
        .suppress(Suppressed.until_window_closes(BufferConfig.unbounded()))
        .to_stream().map(flat).to(out, key_serde=S, value_serde=I64))


def tumbling_on_close(b: StreamsBuilder, src: str, out: str) -> None:
    # a retention far beyond size + grace: the store still holds the emitted windows after the
    # restart, so only the committed close time keeps them from being emitted again
    (b.stream(src, key_serde=S, value_serde=S).group_by_key()
        .windowed_by(TimeWindows.of_size_and_grace(10, 5)).emit_strategy(EmitStrategy.on_window_close())
        .count(store=Materialized.as_("closing").with_retention(10_000))
        .to_stream().map(flat).to(out, key_serde=S, value_serde=I64))


def hopping(b: StreamsBuilder, src: str, out: str) -> None:
    (b.stream(src, key_serde=S, value_serde=S).group_by_key()
        .windowed_by(TimeWindows.of_size_and_grace(10, 2).advance_by(5)).count()
        .to_stream().map(flat).to(out, key_serde=S, value_serde=I64))


def sliding(b: StreamsBuilder, src: str, out: str) -> None:
    (b.stream(src, key_serde=S, value_serde=S).group_by_key()
        .windowed_by(SlidingWindows.of_time_difference_and_grace(5, 10))
        .reduce(lambda agg, v: agg + v)
        .to_stream().map(flat).to(out, key_serde=S, value_serde=S))


def sliding_on_close(b: StreamsBuilder, src: str, out: str) -> None:
    # its time-ordered store keeps a key index: wiped, both come back from the changelog
    (b.stream(src, key_serde=S, value_serde=S).group_by_key()
        .windowed_by(SlidingWindows.of_time_difference_and_grace(5, 10)).emit_strategy(EmitStrategy.on_window_close())
        .count(store=Materialized.as_("sliding-closing").with_retention(10_000))
        .to_stream().map(flat).to(out, key_serde=S, value_serde=I64))


def sessions(b: StreamsBuilder, src: str, out: str) -> None:
    # a retention far beyond gap + grace: a session past the store's retention is still found
    # while cached (Kafka's CachingSessionStore), which the driver's cache always is and a wiped
    # and restored store is not (a@16 after the restart merges [12,12] only if it is found)
    (b.stream(src, key_serde=S, value_serde=S).group_by_key()
        .windowed_by(SessionWindows.of_inactivity_gap_and_grace(5, 20))
        .count(store=Materialized.as_("sessions").with_retention(10_000))
        .to_stream().map(flat).to(out, key_serde=S, value_serde=I64))


def _members(agg: str) -> set:
    return set(agg.split(",")) - {""}


def regrouped_table(b: StreamsBuilder, src: str, out: str) -> None:
    # the users of each region, as a sorted list (the subtractor undoes the adder, so caching,
    # which skips intermediate updates, cannot change the final results; but a region whose
    # updates the source's cache all skipped has no aggregate where the driver, flushing after
    # every record, leaves an emptied one: "" counts as no region in the final view)
    (b.table(src, key_serde=S, value_serde=S)
        .group_by(lambda user, region: (region, user), key_serde=S, value_serde=S)
        .aggregate(lambda: "", lambda region, user, agg: ",".join(sorted(_members(agg) | {user})),
                   lambda region, user, agg: ",".join(sorted(_members(agg) - {user})),
                   store=Materialized.as_("members").with_value_serde(S))
        .to_stream().to(out, key_serde=S, value_serde=S))


# keys a/b; out of order within the grace, a few late; the half-way record is the newest so far
WINDOWED = [("a", "1", 1), ("b", "2", 3), ("a", "3", 7), ("a", "4", 2), ("b", "5", 12), ("a", "6", 9),
            ("a", "7", 16), ("b", "8", 14), ("a", "9", 21), ("b", "x", 24), ("a", "y", 8),
            ("b", "z", 31), ("a", "u", 27), ("a", "v", 38), ("b", "w", 45), ("a", "q", 60)]
SESSION = [("a", "1", 1), ("a", "2", 4), ("b", "3", 5), ("a", "4", 20), ("a", "5", 12), ("b", "6", 9),
           ("a", "7", 30), ("b", "8", 40), ("a", "9", 16), ("a", "x", 25), ("b", "y", 44), ("a", "z", 70)]
# users moving between regions, leaving (tombstones) and coming back
TABLE = [("u1", "eu", 1), ("u2", "us", 2), ("u3", "eu", 3), ("u1", "us", 4), ("u4", "apac", 5),
         ("u2", None, 6), ("u3", "apac", 7), ("u5", "eu", 8), ("u1", "eu", 9), ("u2", "eu", 10),
         ("u4", None, 11), ("u5", "us", 12), ("u3", None, 13), ("u4", "us", 14)]

SCENARIOS = [
    Scenario("tumbling-suppress", tumbling_suppress, WINDOWED, 9, exactly_once=True, wipe=True),
    Scenario("hopping", hopping, WINDOWED, 9),
    Scenario("sliding", sliding, WINDOWED, 9, value_serde=S),
    Scenario("sessions", sessions, SESSION, 8, wipe=True),
    Scenario("regrouped-table", regrouped_table, TABLE, 7, value_serde=S, empty=""),
    Scenario("on-window-close", tumbling_on_close, WINDOWED, 9, exactly_once=True),
    Scenario("on-window-close-wiped", tumbling_on_close, WINDOWED, 9, exactly_once=True, wipe=True,
             guarantee="exactly_once_v2"),
    Scenario("sliding-on-window-close-wiped", sliding_on_close, WINDOWED, 9, exactly_once=True, wipe=True),
]


def driver_output(scenario: Scenario, records: list) -> list:
    b = StreamsBuilder()
    scenario.build(b, "in", "out")
    config = {"application.id": "restart", "__emit.interval.ms.kstreams.windowed.aggregation__": 0}
    with TopologyTestDriver(b.build(), config) as d:
        inp = d.create_input_topic("in", S, S)
        for key, value, t in records:
            inp.pipe_input(key, value, timestamp=t)
        return [(r.key, r.value) for r in d.create_output_topic("out", S, scenario.value_serde).read_records_to_list()]


# ---------------------------------------------------------------------------------- the app runs
@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    c = Cluster({"bootstrap.servers": f"local://{tmp_path_factory.mktemp('restart')}/cluster",
                 "consumer.session.timeout.ms": 6000, "consumer.heartbeat.interval.ms": 500})
    yield c
    c.close()


def start(config: dict, build: Callable[[StreamsBuilder, str, str], None], src: str, out: str) -> App:
    b = StreamsBuilder()
    build(b, src, out)
    app = App(b.build(), config)
    app.start()
    assert app.wait_for_state(AppState.RUNNING, timeout=60), app.state
    return app


def produce(cluster: Cluster, topic: str, records: list) -> None:
    cluster.produce(topic, [(k.encode(), None if v is None else v.encode()) for k, v, _ in records],
                    partition=0, timestamps=[t for _, _, t in records])


def pairs(messages: list, serde: Any) -> list:
    return [(m.key().decode(), serde.deserialize(m.value())) for m in messages]


def app_output(cluster: Cluster, topic: str, serde: Any, until: Callable[[list], bool]) -> list:
    return pairs(cluster.read_all(topic, 1, until=lambda got: until(pairs(got, serde)), timeout=60), serde)


def whole_topic(cluster: Cluster, topic: str, serde: Any) -> list:
    """Every committed record of `topic` (read until the position reaches the end offset)."""
    consumer = cluster.backend.consumer({"group.id": unique("end"), "isolation.level": "read_committed"})
    try:
        tp = TopicPartition(topic, 0, OFFSET_BEGINNING)
        end = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)[1]
        consumer.assign([tp])
        got: list = []

        def at_end() -> bool:
            got.extend(m for m in consumer.consume(500, 0.1) if m.error() is None)
            return consumer.position([TopicPartition(topic, 0)])[0].offset >= end
        wait_for(at_end, 30, f"the end of {topic}", step=0)
        return pairs(got, serde)
    finally:
        consumer.close()


@pytest.mark.parametrize("scenario", SCENARIOS, ids=lambda s: s.name)
def test_final_results_across_a_restart_match_the_driver(cluster, tmp_path, scenario):
    records = scenario.records
    first, second = records[:scenario.half], records[scenario.half:]
    assert all(t <= first[-1][2] for _, _, t in first), "the half-way record must be the newest so far"
    expected_first = view(driver_output(scenario, first), scenario.empty)
    expected = view(driver_output(scenario, records), scenario.empty)
    src, out = unique(f"{scenario.name}-in"), unique(f"{scenario.name}-out")
    cluster.create_topics(1, src, out)
    config = {**cluster.config, "application.id": unique(scenario.name), "state.dir": str(tmp_path),
              "processing.guarantee": scenario.guarantee, "commit.interval.ms": 100,
              "__emit.interval.ms.kstreams.windowed.aggregation__": 0}
    app = start(config, scenario.build, src, out)
    try:
        produce(cluster, src, first)
        app_output(cluster, out, scenario.value_serde, lambda got: view(got, scenario.empty) == expected_first)
        wait_for(lambda: sum(t.processed_total for t in app.threads) >= len(first), 30, "the first half processed")
    finally:
        assert app.close(timeout=60)
    if scenario.wipe:
        shutil.rmtree(tmp_path / config["application.id"])
    app = start(config, scenario.build, src, out)
    try:
        produce(cluster, src, second)
        got = app_output(cluster, out, scenario.value_serde, lambda got: view(got, scenario.empty) == expected)
    finally:
        assert app.close(timeout=60)
    assert view(got, scenario.empty) == expected
    if scenario.exactly_once:  # everything the closed app wrote: each final result once
        keys = [key for key, _ in whole_topic(cluster, out, scenario.value_serde)]
        assert sorted(keys) == sorted(set(keys)), f"final results emitted more than once: {keys}"
        assert len(keys) == len(expected)
