"""A stream task hands consumed messages to its engine (TaskEngine.process_messages). When the
source's only child starts a fused chain, the common record goes through the C loop
`dispatch_run` (eddy/_messages.c) and every other record through the per-record loop:
the output, the stores, the stream and partition times, the skipped records and the errors
must be exactly those of processing the same records as rows (process_batch)."""

import pytest
from confluent_kafka import Message

from streams import StreamsBuilder, serdes
from streams.engine import accelerated
from streams.errors import RecordDeserializationError, ProcessingError
from streams.testing import TopologyTestDriver

S = serdes.STRING


def _messages(rows, topic="lines", partition=0):
    return [Message(topic, partition, offset, key, value, headers, None, (1 if ts >= 0 else 0, ts), -1.0, -1)
            for key, value, ts, headers, offset in rows]


def _topology(fn=str.split):
    b = StreamsBuilder()
    (b.stream("lines", key_serde=S, value_serde=S)
        .flat_map_values(fn)
        .map_values(str.upper)
        .to("out", key_serde=S, value_serde=S))
    return b.build()


def _driver(topology, handler="log_and_continue"):
    return TopologyTestDriver(topology, {"default.deserialization.exception.handler": handler})


def _rows(n=40):
    """Rows with the odd ones dispatch_run hands back to the per-record loop: headers, a None
    key, a key and a value that are not UTF-8, a None value; timestamps going back in time."""
    rows = []
    for i in range(n):
        key, value, headers = f"k{i % 3}".encode(), f"a{i} b{i}".encode(), None
        if i == 5:
            headers = [("h", b"1")]
        if i == 9:
            key = None
        if i == 13:
            key = b"\xff"
        if i == 17:
            value = b"\xfe"
        if i == 21:
            value = None
        rows.append((key, value, 1000 + (i * 37) % 50, headers, i))
    return rows


@pytest.fixture(params=["C", "without-C"])
def dispatch(request, monkeypatch):
    if request.param == "without-C":
        monkeypatch.setattr(accelerated, "_dispatch_run", None)
    elif accelerated._dispatch_run is None:
        pytest.skip("eddy._messages (dispatch_run) not built")
    return request.param


def _sent(driver) -> list:
    """(key, value, timestamp, headers) of what was sent to "out" (the engine is driven directly:
    no record completes in the driver's sense, so its output topics show nothing)."""
    return [(S.deserialize(r.key), S.deserialize(r.value), r.timestamp, tuple(r.headers))
            for r in driver.producer_history("out")]


def _state(driver, engine):
    return _sent(driver), engine.stream_time, dict(engine.partition_times)


def _none_safe_topology():
    return _topology(lambda line: [] if line is None else line.split())


def test_messages_give_exactly_what_rows_give(dispatch):
    rows = _rows()
    with _driver(_none_safe_topology()) as by_messages, _driver(_none_safe_topology()) as by_rows:
        engine_m = by_messages._engine_for_topic["lines"]
        engine_r = by_rows._engine_for_topic["lines"]
        assert engine_m.chains.entry(engine_m.sources_by_topic["lines"].children[0]) is not None, \
            "the chain must fuse, or this test tests nothing"
        per_record = []
        loop = engine_m.process_rows

        def counted(source, topic, partition, rows_):
            rows_ = list(rows_)
            per_record.extend(r[4] for r in rows_)
            return loop(source, topic, partition, rows_)
        engine_m.process_rows = counted
        done_m = engine_m.process_messages("lines", 0, _messages(rows))
        # with C, only headers and undecodable bytes take the per-record loop (None keys and values do not)
        assert per_record == ([5, 13, 17] if dispatch == "C" else [r[4] for r in rows])
        done_r = engine_r.process_batch("lines", 0, rows)
        assert done_m == done_r == len(rows) - 2  # the two records that do not deserialize are skipped
        got, expected = _state(by_messages, engine_m), _state(by_rows, engine_r)
    assert got == expected
    out, stream_time, partition_times = got
    assert ("k2", "A5", 1000 + (5 * 37) % 50, (("h", b"1"),)) in out  # the headers went with the record
    assert stream_time == max(r[2] for r in rows) == partition_times[("lines", 0)]


def test_a_failing_function_names_its_node_and_the_record_and_keeps_the_times(dispatch):
    def explode(line):
        if line == "boom":
            raise ValueError("no")
        return line.split()

    rows = [(b"k", b"a b", 10, None, 100), (b"k", b"c", 30, None, 101), (b"k", b"boom", 20, None, 102),
            (b"k", b"d", 40, None, 103)]
    with _driver(_topology(explode)) as driver:
        engine = driver._engine_for_topic["lines"]
        with pytest.raises(ProcessingError) as err:
            engine.process_messages("lines", 0, _messages(rows))
        message = str(err.value)
        assert "offset=102" in message and "FLATMAPVALUES" in message.upper()
        assert engine.partition_times[("lines", 0)] == 30 and engine.stream_time == 30
        assert [value for _k, value, _t, _h in _sent(driver)] == ["A", "B", "C"]  # the records before it went through
        assert engine.context.metadata is None and engine.context.current_node is None


def test_a_negative_timestamp_fails_after_the_records_before_it(dispatch):
    rows = [(b"k", b"a", 5, None, 0), (b"k", b"b", -1, None, 1), (b"k", b"c", 7, None, 2)]
    with _driver(_topology(), handler="log_and_fail") as driver:
        engine = driver._engine_for_topic["lines"]
        with pytest.raises(ProcessingError) as err:
            engine.process_messages("lines", 0, _messages(rows))
        assert "-1" in str(err.value)
        assert [value for _k, value, _t, _h in _sent(driver)] == ["A"]


def test_a_value_that_does_not_deserialize_fails_with_log_and_fail(dispatch):
    rows = [(b"k", b"a", 5, None, 0), (b"k", b"\xff", 6, None, 1), (b"k", b"c", 7, None, 2)]
    with _driver(_topology(), handler="log_and_fail") as driver:
        engine = driver._engine_for_topic["lines"]
        with pytest.raises(RecordDeserializationError, match="offset 1"):
            engine.process_messages("lines", 0, _messages(rows))
        assert [value for _k, value, _t, _h in _sent(driver)] == ["A"]


@pytest.mark.skipif(accelerated._dispatch_run is None, reason="eddy._messages not built")
def test_dispatch_run_rejects_bad_arguments():
    run = accelerated._dispatch_run
    with pytest.raises(TypeError, match="expects 11 arguments"):
        run([], 0)
    with pytest.raises(TypeError, match="times a list of one int"):
        run([], 0, None, None, None, None, None, None, "t", 0, [])
    with pytest.raises(ValueError, match="start must be >= 0"):
        run([], -1, None, None, None, None, None, None, "t", 0, [0])
