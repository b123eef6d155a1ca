"""A cached count right after its source takes whole runs of serialized keys
(the accelerated route, streams/engine/accelerated.py -> CachingKeyValueStore.update_many): the store, the forwarded
updates (evictions included), the stream and partition times, the skipped records and the
errors are exactly those of processing the same records one at a time. Each test runs twice:
over rows (process_batch, the Python route) and over consumed messages (process_messages, which reads the keys
straight from the messages with the C `keyed_run` when it is built)."""

import pytest
from confluent_kafka import Message

from streams.engine import accelerated

from streams import StreamsBuilder, serdes
from streams.errors import ProcessingError
from streams.testing import TopologyTestDriver

S = serdes.STRING
I64 = serdes.INT64


def _topology(key_serde=S, out_value=I64):
    b = StreamsBuilder()
    (b.stream("words", key_serde=key_serde, value_serde=S)
        .group_by_key()
        .count(store="counts")
        .to_stream()
        .to("out", key_serde=key_serde, value_serde=out_value))
    return b.build()


def _driver(topology, cache_bytes, handler="log_and_continue"):
    return TopologyTestDriver(topology, {"statestore.cache.max.bytes": cache_bytes,
                                         "default.deserialization.exception.handler": handler})


def _rows(n_keys=7, n=60):
    """(key, value, timestamp, headers, offset) rows with the odd ones the bulk path hands back
    to the per-record loop: a None key, None values (not counted: dropped), a key that is not
    UTF-8, a value that is not UTF-8, timestamps going back in time."""
    rows = []
    for i in range(n):
        key = f"k{(i * 5) % n_keys}".encode()
        ts = 1000 + (i * 37) % 50  # not monotonic
        if i == 11:
            key = None
        if i == 23:
            key = b"\xff\xfe"
        if i in (17, 18, 44):
            rows.append((key, None, ts, None, i))
            continue
        if i == 31:
            rows.append((key, b"\xff", ts, None, i))  # the value does not deserialize either
            continue
        rows.append((key, b"w", ts, None, i))
    return rows


def _messages(rows, topic="words", partition=0):
    return [Message(topic, partition, offset, key, value, headers, None, (1 if ts >= 0 else 0, ts), -1.0, -1)
            for key, value, ts, headers, offset in rows]


@pytest.fixture(params=["rows", "messages", "messages-without-C"])
def process(request, monkeypatch):
    """`process(engine, rows)`: the rows through process_batch, or as messages through
    process_messages (with and without the C pass)."""
    if request.param == "rows":
        return lambda engine, rows: engine.process_batch("words", 0, rows)
    if request.param == "messages-without-C":
        monkeypatch.setattr(accelerated, "_keyed_run", None)
    elif accelerated._keyed_run is None:
        pytest.skip("eddy._messages (keyed_run) not built")
    return lambda engine, rows: engine.process_messages("words", 0, _messages(rows))


def _engine(driver):
    engine = driver._engine_for_topic["words"]
    assert getattr(engine.chains.entry(engine.sources_by_topic["words"].children[0]), "key_bytes_run", None), \
        "the count must offer the bulk path, or this test tests nothing"
    return engine


def _state(driver, engine):
    driver._commit_all()
    store = driver.get_key_value_store("counts")
    # what was sent (the engine is driven directly: no record completes in the driver's sense)
    out = driver.producer_history("out")
    return ({f"k{i}": store.get(f"k{i}") for i in range(7)},
            [(S.deserialize(r.key), I64.deserialize(r.value), r.timestamp) for r in out],
            engine.stream_time, dict(engine.partition_times), engine.dropped_records_sensor.count)


# 1 byte: every update evicts at once (0 would strip the caching layer, as Kafka, and the bulk route with it)
@pytest.mark.parametrize("cache_bytes", [10_000_000, 150, 1])
def test_a_run_counts_exactly_as_record_at_a_time(cache_bytes, process):
    rows = _rows()
    with _driver(_topology(), cache_bytes) as bulk, _driver(_topology(), cache_bytes) as single:
        bulk_engine, single_engine = _engine(bulk), _engine(single)
        done = process(bulk_engine, rows)
        done_single = sum(single_engine.process_batch("words", 0, [row]) for row in rows)
        assert done == done_single == len(rows) - 2  # the two rows that do not deserialize are skipped
        got, expected = _state(bulk, bulk_engine), _state(single, single_engine)
    assert got == expected
    counts, out, stream_time, partition_times, dropped = got
    # the None key and the three None values are dropped and counted too, and so are the two
    # records skipped by the deserialization handler (Kafka's RecordDeserializer)
    assert sum(c for c in counts.values() if c) == len(rows) - 2 - 4
    assert dropped == 4 + 2, dropped
    assert stream_time == max(r[2] for r in rows) and partition_times[("words", 0)] == stream_time
    if cache_bytes < 10_000_000:
        assert len(out) > 7  # evictions forwarded in the middle of the run
    # a count is stamped with the newest timestamp it has seen (KIP-258): the rows go back in
    # time, a key's results never do
    newest = {}
    for key, _count, timestamp in out:
        assert timestamp >= newest.get(key, timestamp), (key, timestamp)
        newest[key] = timestamp


def test_the_stream_time_is_raised_record_by_record_for_what_an_eviction_forwards(process):
    seen = []
    b = StreamsBuilder()
    table = b.stream("words", key_serde=S, value_serde=S).group_by_key().count(store="counts")
    engine_box = []
    table.to_stream().peek(lambda k, v: seen.append((k, v, engine_box[0].stream_time)))
    with _driver(b.build(), 150) as driver:
        engine = _engine(driver)
        engine_box.append(engine)
        rows = [(f"k{i % 5}".encode(), b"w", 10 + i, None, i) for i in range(20)]
        process(engine, rows)
    assert seen, "the tiny cache must evict during the run"
    # an eviction happens while record i is counted: stream time is i's timestamp, not the run's
    assert [t for _, _, t in seen] != [29] * len(seen)
    assert all(10 <= t <= 29 for _, _, t in seen)


def test_a_negative_timestamp_fails_after_the_rows_before_it_were_counted(process):
    rows = [(b"a", b"w", 5, None, 0), (b"b", b"w", 6, None, 1), (b"a", b"w", -1, None, 2), (b"c", b"w", 7, None, 3)]
    with _driver(_topology(), 10_000_000, handler="log_and_fail") as driver:
        engine = _engine(driver)
        with pytest.raises(ProcessingError) as err:
            process(engine, rows)
        assert "offset 2" in str(err.value) or "offset=2" in str(err.value)
        store = driver.get_key_value_store("counts")
        assert (store.get("a"), store.get("b"), store.get("c")) == (1, 1, None)


def test_a_failure_while_counting_names_the_count_and_the_record_being_counted(process):
    # the sink after the count cannot serialize the count: the first eviction fails
    bad = serdes.Serde.from_functions(lambda v: (_ for _ in ()).throw(ValueError("no")), lambda b: b)
    with _driver(_topology(out_value=bad), 150) as driver:
        engine = _engine(driver)
        rows = [(f"k{i}".encode(), b"w", 10 + i, None, 100 + i) for i in range(20)]
        with pytest.raises(ProcessingError) as err:
            process(engine, rows)
    message = str(err.value)
    assert "processor=KSTREAM-AGGREGATE-" in message or "count" in message.lower()
    offset = int(message.split("offset=")[1].split(":")[0].split(",")[0])
    assert 100 < offset < 120  # the record whose update evicted, not the run's first or a made-up one


class CaseFoldingString(serdes.Serde):
    """Has C-speed unchecked calls like STRING, but does not round-trip: b"A" reads as "a"."""
    name = "case-folding"
    serialize_unchecked = staticmethod(str.encode)

    def serialize(self, obj):
        return None if obj is None else obj.encode()

    def deserialize(self, data):
        return None if data is None else data.decode().lower()

    @staticmethod
    def deserialize_unchecked(data):
        return data.decode().lower()


def test_only_round_tripping_key_serdes_take_the_bulk_path(process):
    assert serdes.round_trips(serdes.STRING) and serdes.round_trips(serdes.INT64)
    assert not serdes.round_trips(serdes.JSON) and not serdes.round_trips(serdes.DOUBLE)
    folding = CaseFoldingString()
    with _driver(_topology(key_serde=folding, out_value=I64), 10_000_000) as driver:
        engine = driver._engine_for_topic["words"]
        # the count re-serializes the key it read: b"A" and b"a" are one key
        process(engine, [(b"A", b"w", 1, None, 0), (b"a", b"w", 2, None, 1)])
        assert driver.get_key_value_store("counts").get("a") == 2
