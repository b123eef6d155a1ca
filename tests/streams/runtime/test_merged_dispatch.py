"""A task reading several partitions hands Kafka's record-by-record choice between them and the
common record's dispatch to C (`merge_dispatch`, streams/engine/accelerated.py): what the task's
processors see, in which order, and what the task records (consumed offsets, buffered count,
partition and stream times) must be exactly what the Python loop over PartitionGroup.runs gives,
and the order the record-by-record model of Kafka's PartitionGroup gives (the lowest head
timestamp, the first partition on a tie)."""

from __future__ import annotations

import random

import pytest
from confluent_kafka import Message

from state.directory import StateDirectory
from state.task_id import TaskId
from streams import StreamsBuilder, serdes
from streams.engine import accelerated
from streams.errors import ProcessingError
from streams.runtime.task import StreamTask

S = serdes.STRING
TOPICS = ("x", "y", "z")


def _task(tmp_path, seen, partitions, fail_on=None):
    b = StreamsBuilder()

    def peek(key, value):
        if value == fail_on:
            raise ValueError("no")
        seen.append(value)
    streams = [b.stream(topic, key_serde=S, value_serde=S) for topic in TOPICS[:partitions]]
    merged = streams[0]
    for other in streams[1:]:
        merged = merged.merge(other)  # one sub-topology over all the topics
    merged.peek(peek)
    topology = b.build()
    task = StreamTask(TaskId(0, 0), topology.build()[0], topology,
                      input_partitions=[(t, 0) for t in TOPICS[:partitions]], application_id="app",
                      config={"default.deserialization.exception.handler": "log_and_continue"}, collector=None,
                      state_directory=StateDirectory(tmp_path, "app"), thread_cache=None, eos_enabled=False,
                      clock_ms=lambda: 0, max_task_idle_ms=-1, fetched_lag=None)
    task.initialize_if_needed()
    if task.state.value != "RUNNING":
        task.complete_restoration()
    return task


def _message(topic, offset, ts, odd=None):
    key, value, headers = b"k", f"{topic}{offset}".encode(), None
    if odd == "headers":
        headers = [("h", b"1")]
    elif odd == "bad":
        value = b"\xff"  # not UTF-8: the deserialization handler skips it
    elif odd == "none":
        key = None
    return Message(topic, 0, offset, key, value, headers, None, (1, ts), -1.0, -1)


def _contents(rng, partitions):
    contents = {}
    for topic in TOPICS[:partitions]:
        contents[(topic, 0)] = [
            _message(topic, i, rng.randint(0, 12), rng.choice((None,) * 8 + ("headers", "bad", "none")))
            for i in range(rng.randint(0, 9))]
    return contents


def _model(contents, limit, stop_when_empty):
    """Kafka's choice record by record over copies of the queues: the processed values in order."""
    tps = list(contents)
    heads = {tp: list(ms) for tp, ms in contents.items()}
    taken = []
    while len(taken) < limit:
        live = [tp for tp in tps if heads[tp]]
        if not live:
            break
        tp = min(live, key=lambda t: (heads[t][0].timestamp()[1], tps.index(t)))
        taken.append(heads[tp].pop(0))
        if stop_when_empty and len(live) > 1 and not heads[tp]:
            break
    return [m.value().decode() for m in taken if m.value() != b"\xff"]


def _run(tmp_path, contents, limit, stop_when_empty, partitions):
    seen = []
    task = _task(tmp_path, seen, partitions)
    task.max_task_idle_ms = 0 if stop_when_empty else -1
    task.fetched_lag = lambda tp: 0
    for tp, ms in contents.items():
        task.add_records(tp, ms)
    n = task.process(limit)
    engine = task.engine
    return seen, n, dict(task.consumed), task.buffered, dict(engine.partition_times), engine.stream_time


@pytest.mark.skipif(accelerated._merge_dispatch is None, reason="eddy._messages (merge_dispatch) not built")
def test_the_c_choice_and_dispatch_give_what_the_python_loop_gives(tmp_path, monkeypatch):
    rng = random.Random(7)
    for case in range(120):
        partitions = rng.choice((2, 3))
        contents = _contents(rng, partitions)
        limit = rng.randint(1, 30)
        stop_when_empty = case % 3 == 0
        got = _run(tmp_path / f"c{case}", contents, limit, stop_when_empty, partitions)
        with monkeypatch.context() as m:
            m.setattr(accelerated, "_merge_dispatch", None)
            expected = _run(tmp_path / f"p{case}", contents, limit, stop_when_empty, partitions)
        assert got == expected, case
        assert got[0] == _model(contents, limit, stop_when_empty), case


@pytest.mark.skipif(accelerated._merge_dispatch is None, reason="eddy._messages (merge_dispatch) not built")
def test_the_merged_pass_is_taken(tmp_path, monkeypatch):
    # the test above compares nothing if the task never takes the C pass
    calls = []
    real = accelerated._merge_dispatch

    def counted(*args):
        calls.append(1)
        return real(*args)
    monkeypatch.setattr(accelerated, "_merge_dispatch", counted)
    seen = []
    task = _task(tmp_path, seen, 2)
    task.add_records(("x", 0), [_message("x", 0, 5), _message("x", 1, 7)])
    task.add_records(("y", 0), [_message("y", 0, 5), _message("y", 1, 6)])
    assert task.process(10) == 4
    # ties go to the first partition: x0 (5) before y0 (5); then y1 (6), x1 (7)
    assert seen == ["x0", "y0", "y1", "x1"] and len(calls) == 1
    assert task.consumed == {("x", 0): 1, ("y", 0): 1} and task.buffered == 0


@pytest.mark.parametrize("accelerator", ["C", "without-C"])
def test_a_failing_record_is_named_and_the_records_before_it_count(tmp_path, monkeypatch, accelerator):
    if accelerator == "without-C":
        monkeypatch.setattr(accelerated, "_merge_dispatch", None)
    elif accelerated._merge_dispatch is None:
        pytest.skip("eddy._messages (merge_dispatch) not built")
    seen = []
    task = _task(tmp_path, seen, 2, fail_on="y1")
    task.add_records(("x", 0), [_message("x", 0, 1), _message("x", 1, 4)])
    task.add_records(("y", 0), [_message("y", 0, 2), _message("y", 1, 3)])
    with pytest.raises(ProcessingError) as err:
        task.process(10)
    assert "topic=y" in str(err.value) and "offset=1" in str(err.value)
    assert seen == ["x0", "y0"]
    engine = task.engine
    assert engine.context.metadata is None and engine.context.current_node is None
    assert engine.partition_times[("y", 0)] == 3 and engine.stream_time == 3
    assert task.buffered == 1  # x1 is still buffered; y1 was taken off
