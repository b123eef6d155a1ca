"""processing.exception.handler (Kafka's ProcessingExceptionHandler, KIP-1033) on the
TopologyTestDriver: the node whose processor raised is asked, with the record it was given;
CONTINUE drops that node's processing of that record only (its siblings, the rest of a flat_map's
records, the next records go on) and counts it in dropped-records-total; FAIL fails as without a
handler. Expected outputs worked out by hand."""

from __future__ import annotations

import pytest

from state.stores import Stores
from streams import (JoinWindows, Materialized, Processor, PunctuationType, Record, StreamsBuilder, Topology,
                     serdes)
from streams.engine.processing_errors import (ErrorHandlerContext, ProcessingHandlerError, ProcessingHandlerResponse,
                                              processing_handler_from_config)
from streams.errors import ConfigError, ProcessingError
from streams.testing import TopologyTestDriver

S, I64 = serdes.STRING, serdes.INT64
KEY = "processing.exception.handler"
CONTINUE, FAIL = ProcessingHandlerResponse.CONTINUE, ProcessingHandlerResponse.FAIL


def boom(value: str) -> str:
    if "bad" in value:
        raise ValueError(f"cannot take {value!r}")
    return value.upper()


def dropped(driver) -> float:
    return sum(m.value for m in driver.metrics() if m.name == "dropped-records-total")


def pipe(driver, values, topic="in"):
    inp = driver.create_input_topic(topic, S, S)
    for i, value in enumerate(values):
        inp.pipe_input("k", value, timestamp=100 + i)


def out(driver, topic="out", value_serde=S):
    return driver.create_output_topic(topic, S, value_serde).read_values_to_list()


def mapped():
    b = StreamsBuilder()
    b.stream("in", key_serde=S, value_serde=S).map_values(boom).to("out", key_serde=S, value_serde=S)
    return b.build()


@pytest.mark.parametrize("handler", ["log_and_continue", "LOG_AND_CONTINUE",
                                     "org.apache.kafka.streams.errors.LogAndContinueProcessingExceptionHandler"])
def test_continue_drops_the_failing_record_and_goes_on(handler):
    with TopologyTestDriver(mapped(), {"application.id": "p", KEY: handler}) as driver:
        pipe(driver, ["a", "bad", "c"])
        assert out(driver) == ["A", "C"]
        assert dropped(driver) == 1


@pytest.mark.parametrize("config", [{}, {KEY: "log_and_fail"},
                                    {KEY: lambda context, record, exception: FAIL}])
def test_fail_fails_as_without_a_handler(config):
    with TopologyTestDriver(mapped(), {"application.id": "p", **config}) as driver:
        with pytest.raises(ProcessingError, match=r"processor=KSTREAM-MAPVALUES-0000000001.*cannot take 'bad'"):
            pipe(driver, ["a", "bad"])
        assert out(driver) == ["A"]


def test_a_failing_branch_does_not_stop_its_sibling():
    b = StreamsBuilder()
    source = b.stream("in", key_serde=S, value_serde=S)
    source.map_values(boom).to("a", key_serde=S, value_serde=S)
    source.to("b", key_serde=S, value_serde=S)
    with TopologyTestDriver(b.build(), {"application.id": "p", KEY: "log_and_continue"}) as driver:
        pipe(driver, ["x", "bad", "y"])
        assert out(driver, "a") == ["X", "Y"]
        assert out(driver, "b") == ["x", "bad", "y"]  # Kafka asks at the failing node, not the source


def test_a_flat_maps_other_records_go_on():
    """The failure is the child's: the flat_map forwards its next records after it."""
    b = StreamsBuilder()
    (b.stream("in", key_serde=S, value_serde=S).flat_map_values(str.split).map_values(boom)
        .to("out", key_serde=S, value_serde=S))
    with TopologyTestDriver(b.build(), {"application.id": "p", KEY: "log_and_continue"}) as driver:
        pipe(driver, ["x bad y", "z"])
        assert out(driver) == ["X", "Y", "Z"]
        assert dropped(driver) == 1


def test_the_handler_gets_the_failing_nodes_context_and_record():
    seen = []

    def handler(context, record, exception):
        seen.append((context, (record.key, record.value, record.timestamp), exception))
        return CONTINUE
    b = StreamsBuilder()
    (b.stream("in", key_serde=S, value_serde=S).map_values(str.upper).map_values(lambda v: boom(v.lower()) + "!")
        .to("out", key_serde=S, value_serde=S))
    with TopologyTestDriver(b.build(), {"application.id": "p", KEY: handler}) as driver:
        pipe(driver, ["ok", "bad"])
        assert out(driver) == ["OK!"]
    [(context, record, exception)] = seen
    assert context == ErrorHandlerContext("in", 0, 1, (), "KSTREAM-MAPVALUES-0000000002", context.task_id, 101)
    assert str(context.task_id) == "0_0"
    assert record == ("k", "BAD", 101)  # what the failing node was given: the upper-cased value
    assert isinstance(exception, ValueError)


@pytest.mark.parametrize("handler,says", [
    (lambda context, record, exception: 1 / 0, "the processing exception handler failed"),
    (lambda context, record, exception: "continue", "returned 'continue'"),
])
def test_a_broken_handler_is_named(handler, says):
    with TopologyTestDriver(mapped(), {"application.id": "p", KEY: handler}) as driver:
        with pytest.raises(ProcessingHandlerError, match=f"{says}.*processor KSTREAM-MAPVALUES-0000000001"):
            pipe(driver, ["bad"])


def test_an_aggregators_failure_drops_that_record_only():
    """The aggregation's records go through its boundary one by one (a bulk run of them could
    not stop at the failing one): the others are counted."""
    def add(key, value, total):
        if value == "bad":
            raise ValueError("bad value")
        return total + len(value)
    b = StreamsBuilder()
    (b.stream("in", key_serde=S, value_serde=S).group_by_key()
        .aggregate(lambda: 0, add, store=Materialized.as_("lengths").with_value_serde(I64))
        .to_stream().to("out", key_serde=S, value_serde=I64))
    with TopologyTestDriver(b.build(), {"application.id": "p", KEY: "log_and_continue"}) as driver:
        pipe(driver, ["ab", "bad", "cde", "bad", "f"])
        assert out(driver, value_serde=I64) == [2, 5, 6]
        assert driver.get_key_value_store("lengths").get("k") == 6
        assert dropped(driver) == 2


class Picky(Processor):
    """Forwards values, raising on "bad"; a stream-time punctuation every 10 ms that raises the
    first time and forwards "tick@<time>" after."""

    def init(self, context):
        self.context = context
        self.ticks = 0
        context.schedule(10, PunctuationType.STREAM_TIME, self.tick)

    def process(self, record):
        if record.value == "bad":
            raise ValueError("picky")
        self.context.forward(record)

    def tick(self, now):
        self.ticks += 1
        if self.ticks == 1:
            raise RuntimeError("first tick")
        self.context.forward(Record("tick", f"tick@{now}", now))


def test_processor_api_and_punctuation_failures():
    t = Topology()
    t.add_source("src", "in", key_serde=S, value_serde=S)
    t.add_processor("picky", Picky, "src")
    t.add_sink("sink", "out", "picky", key_serde=S, value_serde=S)
    seen = []

    def handler(context, record, exception):
        seen.append((context.processor_node_id, None if record is None else record.value, str(exception)))
        return CONTINUE
    with TopologyTestDriver(t, {"application.id": "p", KEY: handler}) as driver:
        inp = driver.create_input_topic("in", S, S)
        # each record is processed, then punctuation due by stream time runs (given the stream
        # time): at 5 the one due at 0 raises; at 12 the one due at 10 forwards
        for value, ts in [("a", 5), ("bad", 7), ("b", 12)]:
            inp.pipe_input("k", value, timestamp=ts)
        assert out(driver) == ["a", "b", "tick@12"]
        assert dropped(driver) == 2
    assert seen == [("picky", None, "first tick"), ("picky", "bad", "picky")]


def test_config_values():
    assert processing_handler_from_config({}) is None
    assert processing_handler_from_config({KEY: "log_and_fail"}) is None  # the engine's own failing
    custom = lambda context, record, exception: CONTINUE  # noqa: E731
    assert processing_handler_from_config({KEY: custom}) is custom
    with pytest.raises(ConfigError, match=f"config '{KEY}': unknown handler 'skip'"):
        processing_handler_from_config({KEY: "skip"})
    with pytest.raises(ConfigError, match=f"config '{KEY}' must be a handler name or a callable"):
        processing_handler_from_config({KEY: 42})


def test_processor_api_store_writes_keep_working_under_a_handler():
    """A Processor API node with a store (wrapped to give store writes its record's timestamp)
    gets the boundary too."""
    class Keep(Processor):
        def init(self, context):
            self.store = context.get_state_store("kept")

        def process(self, record):
            if record.value == "bad":
                raise ValueError("no")
            self.store.put(record.key, record.value)
    t = Topology()
    t.add_source("src", "in", key_serde=S, value_serde=S)
    t.add_processor("keep", Keep, "src")
    t.add_state_store(Stores.key_value_store_builder(Stores.in_memory_key_value_store("kept"), S, S), "keep")
    with TopologyTestDriver(t, {"application.id": "p", KEY: "log_and_continue"}) as driver:
        pipe(driver, ["a", "bad"])
        assert driver.get_key_value_store("kept").get("k") == "a"
        assert dropped(driver) == 1


class _Message:
    def __init__(self, offset, value):
        self._offset, self._value = offset, value

    def topic(self):
        return "in"

    def partition(self):
        return 0

    def offset(self):
        return self._offset

    def value(self):
        return self._value


def test_a_bulk_run_goes_on_after_a_dropped_record():
    """Every bulk run today is a count (nothing in it fails per record), so this runs the
    boundary of a stage's bulk run over a run that fails at its third and fifth keys: a failure
    that cannot be produced with a real stage."""
    from types import SimpleNamespace

    from streams.engine.processing_errors import ProcessingFailures
    from streams.metrics import MetricsRegistry, task_dropped_records_sensor

    done, seen = [], []

    def run(keys, timestamps, clock, messages):
        for i, key in enumerate(keys):
            if key.startswith(b"bad"):
                exc = ValueError(f"bad key {key!r}")
                exc.updates_done = i
                raise exc
            done.append(key)

    def stage(key, value, timestamp, headers):  # the per-record form (not used by a run)
        raise AssertionError("the run, not the stage")
    stage.key_bytes_run = (S, run)
    source = SimpleNamespace(key_deserialize=S.deserialize, value_deserialize=S.deserialize)
    engine = SimpleNamespace(context=SimpleNamespace(metadata=None, current_node="head", headers=()),
                             sources_by_topic={"in": source}, task_id="0_0",
                             dropped_records_sensor=task_dropped_records_sensor(MetricsRegistry(), "t", "0_0"))

    def handler(context, record, exception):
        seen.append((context.offset, record.key, record.value, record.timestamp))
        return CONTINUE
    guarded = ProcessingFailures(engine, handler).guard_stage("COUNT", stage)
    keys = [b"a", b"b", b"bad1", b"c", b"bad2", b"d"]
    guarded_run = guarded.key_bytes_run[1]
    guarded_run(keys, [10, 11, 12, 13, 14, 15], None, [_Message(i, f"v{i}".encode()) for i in range(6)])
    assert done == [b"a", b"b", b"c", b"d"]
    assert seen == [(2, "bad1", "v2", 12), (4, "bad2", "v4", 14)]
    assert engine.dropped_records_sensor.count == 2
    assert engine.context.metadata is None and engine.context.current_node == "head"
    assert guarded.key_bytes_run[0] is S


def test_a_global_stores_processor_is_not_asked():
    """Kafka's GlobalStateUpdateTask initialises its nodes without the handler: a global
    processor's failure fails."""
    class Strict(Processor):
        def init(self, context):
            self.store = context.get_state_store("global")

        def process(self, record):
            if record.value == "bad":
                raise ValueError("global bad")
            self.store.put(record.key, record.value)
    t = Topology()
    t.add_source("src", "in", key_serde=S, value_serde=S)
    t.add_sink("sink", "out", "src", key_serde=S, value_serde=S)
    t.add_global_store(Stores.key_value_store_builder(Stores.in_memory_key_value_store("global"), S, S)
                       .with_logging_disabled(), "gsrc", S, S, "g", "gproc", Strict)
    with TopologyTestDriver(t, {"application.id": "p", KEY: "log_and_continue"}) as driver:
        g = driver.create_input_topic("g", S, S)
        g.pipe_input("k", "ok")
        with pytest.raises(ProcessingError, match="global bad"):
            g.pipe_input("k", "bad")


def _outer_join(joiner, join="outer_join"):
    b = StreamsBuilder()
    left = b.stream("left", key_serde=S, value_serde=S)
    right = b.stream("right", key_serde=S, value_serde=S)
    getattr(left, join)(right, joiner, JoinWindows.of_time_difference_and_grace(10, 0)).to(
        "out", key_serde=S, value_serde=S)
    return b.build()


def _fails_once_on(bad: str):
    """A joiner raising the first time it gets `bad` on its left, joining "<left>+<right>" else."""
    failed = []

    def joiner(left, right):
        if left == bad and not failed:
            failed.append(left)
            raise ValueError(f"cannot join {left!r}")
        return f"{left}+{right}"
    return joiner


def test_a_stream_join_stores_its_record_whatever_became_of_its_join():
    """Kafka's KSTREAM-WINDOWED- node forwards a record to its join, then stores it: when the
    join fails (here emitting a held record whose window closed) and the handler continues, the
    record is in its window store all the same, and a later record of the other side joins it.
    By hand: "bad"@0 is held (no match); L2@100 closes its window, its joiner fails, the rest of
    L2's join is dropped (L2 is not held) but L2 is stored; R2@105 emits "bad" (its joiner now
    passes), then finds L2 in [95, 115]."""
    with TopologyTestDriver(_outer_join(_fails_once_on("bad")), {"application.id": "p", KEY: "log_and_continue",
                                                                  "__emit.interval.ms.kstreams.outer.join.spurious"
                                                                  ".results.fix__": 0}) as driver:
        left, right = driver.create_input_topic("left", S, S), driver.create_input_topic("right", S, S)
        left.pipe_input("a", "bad", timestamp=0)
        left.pipe_input("b", "L2", timestamp=100)
        right.pipe_input("b", "R2", timestamp=105)
        got = driver.create_output_topic("out", S, S).read_records_to_list()
        assert [(r.key, r.value, r.timestamp) for r in got] == [("a", "bad+None", 0), ("b", "L2+R2", 105)]
        assert dropped(driver) == 1


def test_a_failure_emitting_held_records_leaves_what_kafkas_loop_leaves():
    """Kafka's emitNonJoinedOuterRecords deletes each held key once the next key was forwarded:
    failing at "bad"@2, it has deleted x@0 (y went out after it) but not y@1, and its min-time
    hint stays at 2. By hand: the scan of L@100 emits x and y, fails at "bad"; the scan of M@101
    emits y again, then "bad" and z, deleting all three."""
    with TopologyTestDriver(_outer_join(_fails_once_on("bad"), "left_join"),
                            {"application.id": "p", KEY: "log_and_continue",
                             "__emit.interval.ms.kstreams.outer.join.spurious.results.fix__": 0}) as driver:
        left = driver.create_input_topic("left", S, S)
        for key, value, ts in [("x", "x", 0), ("y", "y", 1), ("w", "bad", 2), ("z", "z", 3), ("l", "L", 100),
                               ("m", "M", 101)]:
            left.pipe_input(key, value, timestamp=ts)
        got = driver.create_output_topic("out", S, S).read_records_to_list()
        assert [(r.key, r.value, r.timestamp) for r in got] == [
            ("x", "x+None", 0), ("y", "y+None", 1), ("y", "y+None", 1), ("w", "bad+None", 2), ("z", "z+None", 3)]

