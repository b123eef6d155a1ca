"""A sink's direct path (RecordCollector.sink_stage over the embedded producer's QueueView)
writes exactly what its ordinary stage writes: same partitions, keys, values, timestamps and
headers, and the same errors (a serializer failure naming the sink, a delivery failure raised
at the next send)."""

from __future__ import annotations

from contextlib import closing

import pytest

from confluent_kafka import TopicPartition

from replication.cluster import LocalCluster
from replication.records import decode_batches
from streams import serdes
from streams.errors import SerializationError
from streams.processing import SinkNode
from streams.runtime.collector import RecordCollector
from streams.runtime.errors import ProductionError


@pytest.fixture
def cluster(tmp_path):
    with LocalCluster(tmp_path / "cluster", num_brokers=1) as c:
        for topic in ("direct", "ordinary"):
            c.create_topic(topic, partitions=3, replication_factor=1)
        yield c


def _written(cluster, topic):
    out = []
    for p in range(3):
        lg = cluster.partition_on(cluster.leader(topic, p), topic, p).log
        offset = lg.log_start_offset
        while offset < lg.log_end_offset:
            got = decode_batches(lg.read(offset, 1 << 20).buffer)
            out.extend((p, r.key, r.value, r.timestamp, tuple(r.headers or ()))
                       for b in got if not b.is_control for r in b.records())
            offset = got[-1].next_offset
    return sorted(out, key=lambda row: (row[0], row[3]))


def _stage(collector, topic, key_serde, value_serde, failed=lambda: None, drop_null_keys=False):
    sink = SinkNode(f"sink-{topic}", topic, key_serde, value_serde, None, collector)
    return sink.stage(failed, drop_null_keys=drop_null_keys)


RECORDS = [("a", "a", 1, ()), ("b", "x", 2, ()), ("a", None, 3, ()), (None, "n", 4, ()),
           ("c", "h", 5, (("h1", b"1"),)), ("dd", "dd", 6, ()), ("é", "ü", 7, ())]


def test_the_direct_path_writes_what_the_ordinary_stage_writes(cluster):
    with closing(cluster.producer({"linger.ms": 1})) as producer:
        collector = RecordCollector(producer, murmur2_partitioning=True)
        direct = _stage(collector, "direct", serdes.STRING, serdes.STRING)
        assert direct.__name__ == "sink_direct", "the embedded producer must offer the direct path"
        ordinary_collector = RecordCollector(producer, murmur2_partitioning=True)
        ordinary_collector.sink_stage = lambda *args: None  # no direct stage: the ordinary one
        ordinary = _stage(ordinary_collector, "ordinary", serdes.STRING, serdes.STRING)
        assert ordinary.__name__ != "sink_direct"
        for _ in range(3):
            for key, value, ts, headers in RECORDS:
                direct(key, value, ts, headers)
                ordinary(key, value, ts, headers)
        collector.flush()
        ordinary_collector.flush()
    got, want = _written(cluster, "direct"), _written(cluster, "ordinary")
    assert got == want and len(got) == 3 * len(RECORDS)


def test_the_direct_path_drops_null_keys_when_told_and_names_the_sink_on_a_serializer_error(cluster):
    failed = []
    with closing(cluster.producer({"linger.ms": 1})) as producer:
        collector = RecordCollector(producer, murmur2_partitioning=True)
        stage = _stage(collector, "direct", serdes.STRING, serdes.INT64,
                       failed=lambda: failed.append(True), drop_null_keys=True)
        assert stage.__name__ == "sink_direct"
        stage(None, 1, 1, ())
        stage("k", 5, 2, ())
        with pytest.raises(SerializationError, match="sink 'sink-direct'.*topic 'direct'"):
            stage("k", "not a number", 3, ())
        assert failed
        collector.flush()
    assert [(k, v) for _p, k, v, _t, _h in _written(cluster, "direct")] == [(b"k", (5).to_bytes(8, "big"))]


def test_a_delivery_failure_is_raised_by_the_next_send_on_the_direct_path(cluster):
    with closing(cluster.producer({"linger.ms": 0, "message.max.bytes": 10_000_000})) as producer:
        collector = RecordCollector(producer, murmur2_partitioning=True)
        stage = _stage(collector, "direct", serdes.STRING, serdes.STRING)
        stage("k", "ok", 1, ())
        assert producer.flush(30) == 0
        stage("k", "x" * 2_000_000, 2, ())  # over the topic's max.message.bytes
        assert producer.flush(30) == 0  # serves the failed report: the collector keeps it
        assert collector._error is not None
        with pytest.raises(ProductionError, match="topic 'direct'"):
            stage("k", "after", 3, ())
        collector_error_cleared = collector._error is None
    assert collector_error_cleared
    assert [v for _p, _k, v, _t, _h in _written(cluster, "direct")] == [b"ok"]


def test_the_direct_path_follows_a_growing_partition_count(cluster):
    from eddy.murmur2 import murmur2_partition

    key = next(k for k in (f"key-{i}" for i in range(1000))
               if murmur2_partition(k.encode(), 3) != murmur2_partition(k.encode(), 5))
    with closing(cluster.producer({"linger.ms": 1})) as producer:
        collector = RecordCollector(producer, murmur2_partitioning=True)
        stage = _stage(collector, "direct", serdes.STRING, serdes.STRING)
        stage(key, "before", 1, ())
        stage(key, "before", 2, ())
        collector.flush()
        cluster.controller.create_partitions("direct", 5)
        for p in range(5):  # the producer learns the new count
            producer.produce("direct", b"x", b"x", partition=p)
        assert producer.flush(30) == 0
        stage(key, "after", 3, ())
        stage(key, "after", 4, ())
        collector.flush()
    lg = cluster.partition_on(cluster.leader("direct", murmur2_partition(key.encode(), 5)), "direct",
                              murmur2_partition(key.encode(), 5)).log
    values = [r.value for b in decode_batches(lg.read(lg.log_start_offset, 1 << 20).buffer) for r in b.records()]
    assert values.count(b"after") == 2


def test_a_key_selection_done_by_the_direct_stage_equals_selecting_first(cluster):
    marks = []
    with closing(cluster.producer({"linger.ms": 1})) as producer:
        collector = RecordCollector(producer, murmur2_partitioning=True)
        plain = _stage(collector, "ordinary", serdes.STRING, serdes.STRING, drop_null_keys=True)
        direct = _stage(collector, "direct", serdes.STRING, serdes.STRING,
                        failed=lambda: marks.append("sink"), drop_null_keys=True)

        def select(key, value):
            if value == "boom":
                raise ValueError("selector failed")
            return None if value.startswith("n") else value[:1]
        selecting = direct.with_key_selector(select, lambda: marks.append("selector"))
        assert not hasattr(selecting, "with_key_selector")
        for key, value in (("a", "xy"), (None, "yz"), ("b", "no key"), ("c", "xq"), ("d", "é")):
            selecting(key, value, 5, ())
            selected = select(key, value)
            plain(selected, value, 5, ())
        with pytest.raises(ValueError, match="selector failed"):
            selecting("k", "boom", 6, ())
        assert marks == ["selector"]  # the selector's node is named, not the sink
        collector.flush()
    assert [(p, k, v) for p, k, v, _t, _h in _written(cluster, "direct")] == \
        [(p, k, v) for p, k, v, _t, _h in _written(cluster, "ordinary")]
    assert len(_written(cluster, "direct")) == 4


def test_changelog_sends_to_a_named_partition_land_in_order_and_report_the_last_offset(cluster):
    with closing(cluster.producer({"linger.ms": 1})) as producer:
        collector = RecordCollector(producer, murmur2_partitioning=True)
        assert collector._view is not None  # the embedded producer's queues are used
        for i in range(50):
            collector.send("direct", b"k%d" % (i % 7), None if i % 10 == 9 else b"v%d" % i,
                           partition=2, timestamp=100 + i)
        collector.flush()
        offsets = collector.offsets()
    rows = [(k, v, t) for p, k, v, t, _h in _written(cluster, "direct") if p == 2]
    assert rows == [(b"k%d" % (i % 7), None if i % 10 == 9 else b"v%d" % i, 100 + i) for i in range(50)]
    assert collector.offset_of("direct", 2) == 49 and offsets[TopicPartition("direct", 2)] == 49


def test_a_flat_map_values_folded_into_the_direct_stage_keeps_order_and_names_the_failing_node(cluster):
    marks = []

    def words(line):
        for i, word in enumerate(line.split()):
            if word == "BREAK":
                raise ValueError("iterator failed")
            yield word

    def select(key, word):
        if word == "boom":
            raise ValueError("selector failed")
        return None if word.startswith("n") else word

    with closing(cluster.producer({"linger.ms": 1})) as producer:
        collector = RecordCollector(producer, murmur2_partitioning=True)
        plain = _stage(collector, "ordinary", serdes.STRING, serdes.STRING, drop_null_keys=True)
        direct = _stage(collector, "direct", serdes.STRING, serdes.INT64,
                        failed=lambda: marks.append("sink"), drop_null_keys=True)
        assert _stage(collector, "direct", serdes.STRING, serdes.STRING).with_values_from  # offered
        fused = _stage(collector, "direct", serdes.STRING, serdes.STRING, failed=lambda: marks.append("sink"),
                       drop_null_keys=True).with_key_selector(select, lambda: marks.append("selector"))
        fused = fused.with_values_from(words, lambda: marks.append("flat_map"))
        for line, ts in (("a b no a", 1), ("", 2), ("c é", 3)):
            fused("line-key", line, ts, ())
            for word in line.split():
                plain(select("line-key", word), word, ts, ())
        with pytest.raises(ValueError, match="iterator failed"):
            fused("k", "x BREAK y", 4, ())
        assert marks == ["flat_map"]
        marks.clear()
        with pytest.raises(ValueError, match="selector failed"):
            fused("k", "z boom w", 5, ())
        assert marks[0] == "selector"  # innermost first (outer markers then find the node already named)
        marks.clear()
        with pytest.raises(SerializationError):
            direct.with_key_selector(select, lambda: marks.append("selector")).with_values_from(
                words, lambda: marks.append("flat_map"))("k", "q", 6, ())  # INT64 cannot take "q"
        assert marks[0] == "sink"
        collector.flush()
    got = [(p, k, v, t) for p, k, v, t, _h in _written(cluster, "direct")]
    want = [(p, k, v, t) for p, k, v, t, _h in _written(cluster, "ordinary")]
    # what ran before each failure was written, in order; nothing after it
    assert got == sorted(want + [(next(p for p, k, *_ in got if k == b"x"), b"x", b"x", 4),
                                 (next(p for p, k, *_ in got if k == b"z"), b"z", b"z", 5)],
                         key=lambda row: (row[0], row[3]))
