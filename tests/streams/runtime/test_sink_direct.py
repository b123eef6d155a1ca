"""A sink's two forms over the embedded producer's QueueView give the same output and side
effects: the Python form (SinkNode's own stage, sending through RecordCollector.sender, which
queues through the view) and the C form (DirectSink, behind RecordCollector.sink_stage): same
queue entries (partitions, keys, values, timestamps), kicks, produce() calls (headers, foreign
queues), polls, failure markers and errors (a serializer failure naming the sink, a delivery
failure raised at the next send)."""

from __future__ import annotations

from contextlib import closing

import pytest

from confluent_kafka import TopicPartition

from replication.cluster import LocalCluster
from replication.records import decode_batches
from streams import serdes
from streams.errors import SerializationError
from streams.engine import SinkNode
from streams.runtime.collector import RecordCollector
from streams.runtime.errors import ProductionError
from streams.runtime import direct_sink

IMPLS = ["python"] + (["c"] if direct_sink._accel is not None else [])


@pytest.fixture(params=IMPLS)
def impl(request, monkeypatch):
    """The sink's form: "c" (DirectSink) or "python" (SinkNode's own stage)."""
    if request.param == "python":
        monkeypatch.setattr(direct_sink, "_accel", None)
    return request.param


def _with_key_selector(stage, select, select_failed):
    """A key selection before `stage`: folded into it where it offers that (the C form), else a
    stage of its own (as KeySelectProcessor.fuse builds it)."""
    offered = getattr(stage, "with_key_selector", None)
    if offered is not None:
        return offered(select, select_failed)

    def selecting(key, value, timestamp, headers):
        try:
            k = select(key, value)
        except BaseException:
            select_failed()
            raise
        stage(k, value, timestamp, headers)
    return selecting


def _with_values_from(stage, values_fn, values_failed):
    """A flat_map_values before `stage`, as `_with_key_selector`."""
    offered = getattr(stage, "with_values_from", None)
    if offered is not None:
        return offered(values_fn, values_failed)

    def flat(key, line, timestamp, headers):
        try:
            for value in values_fn(line):
                stage(key, value, timestamp, headers)
        except BaseException:
            values_failed()
            raise
    return flat


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


def test_the_direct_path_writes_what_the_ordinary_stage_writes(cluster, impl):
    with closing(cluster.producer({"linger.ms": 1})) as producer:
        collector = RecordCollector(producer, murmur2_partitioning=True)
        direct = _stage(collector, "direct", serdes.STRING, serdes.STRING)
        assert (direct.__name__ == "sink_direct") == (impl == "c"), "the embedded producer offers the C stage"
        ordinary_collector = RecordCollector(producer, murmur2_partitioning=False)  # produce() picks
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


def test_the_direct_path_drops_null_keys_when_told_and_names_the_sink_on_a_serializer_error(cluster, impl):
    failed = []
    with closing(cluster.producer({"linger.ms": 1})) as producer:
        collector = RecordCollector(producer, murmur2_partitioning=True)
        stage = _stage(collector, "direct", serdes.STRING, serdes.INT64,
                       failed=lambda: failed.append(True), drop_null_keys=True)
        stage(None, 1, 1, ())
        stage("k", 5, 2, ())
        with pytest.raises(SerializationError, match="sink 'sink-direct'.*topic 'direct'"):
            stage("k", "not a number", 3, ())
        assert failed
        collector.flush()
    assert [(k, v) for _p, k, v, _t, _h in _written(cluster, "direct")] == [(b"k", (5).to_bytes(8, "big"))]


def test_a_delivery_failure_is_raised_by_the_next_send_on_the_direct_path(cluster, impl):
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


def test_the_direct_path_follows_a_growing_partition_count(cluster, impl):
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


def test_a_key_selection_done_by_the_direct_stage_equals_selecting_first(cluster, impl):
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
        selecting = _with_key_selector(direct, select, lambda: marks.append("selector"))
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


def test_a_flat_map_values_folded_into_the_direct_stage_keeps_order_and_names_the_failing_node(cluster, impl):
    marks = []

    def words(line):
        for word in line.split():
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
        fused = _with_key_selector(_stage(collector, "direct", serdes.STRING, serdes.STRING,
                                          failed=lambda: marks.append("sink"), drop_null_keys=True),
                                   select, lambda: marks.append("selector"))
        fused = _with_values_from(fused, words, lambda: marks.append("flat_map"))
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
            _with_values_from(_with_key_selector(direct, select, lambda: marks.append("selector")),
                              words, lambda: marks.append("flat_map"))("k", "q", 6, ())  # INT64 cannot take "q"
        assert marks[0] == "sink"
        collector.flush()
    got = [(p, k, v, t) for p, k, v, t, _h in _written(cluster, "direct")]
    want = [(p, k, v, t) for p, k, v, t, _h in _written(cluster, "ordinary")]
    # what ran before each failure was written, in order; nothing after it
    assert got == sorted(want + [(next(p for p, k, *_ in got if k == b"x"), b"x", b"x", 4),
                                 (next(p for p, k, *_ in got if k == b"z"), b"z", b"z", 5)],
                         key=lambda row: (row[0], row[3]))


# ---- the stage over a QueueView of our own queues (the protocol's real classes) ----------------

from types import SimpleNamespace  # noqa: E402

from replication.clients.producer import QueueView, _NEVER, _Queue  # noqa: E402
from eddy.murmur2 import py_murmur2_partition  # noqa: E402


class Bench:
    """A real collector (on the cluster's producer) whose QueueView is over queues the test owns,
    so a test can set a queue's `cb` and `kick_at`, grow the partition list and read the
    entries. `calls` logs kicks and failure markers in order, `produced` every produce() call
    (recorded only, unless `real_produce`)."""

    def __init__(self, producer, partitions=3, topic="direct", real_produce=False):
        self.collector = RecordCollector(producer, murmur2_partitioning=True)
        self.calls = []
        self.produced = []
        self.topic = topic
        self.queues = [self.new_queue(p) for p in range(partitions)]
        self.view = QueueView({topic: self.queues}, lambda queue: self.calls.append(("kick", queue.tp.partition)))
        self.collector._view = self.view
        real = self.collector._produce

        def produce(topic, value=None, key=None, partition=-1, on_delivery=None, callback=None, timestamp=0,
                    headers=None):  # confluent-kafka's order, positional or not
            self.produced.append((topic, key, value, partition, timestamp, headers))
            if real_produce:
                real(topic, value, key, partition, on_delivery, callback, timestamp, headers)
        self.collector._produce = produce

    def new_queue(self, partition):
        queue = _Queue(TopicPartition(self.topic, partition), 1000)
        queue.cb = self.collector.sink_delivery_callback  # as produce() leaves it
        queue.kick_at = _NEVER
        return queue

    def stage(self, key_serde=serdes.STRING, value_serde=None, drop_null_keys=False, selector=None, values_fn=None):
        calls = self.calls
        sink = SinkNode("sink-direct", self.topic, key_serde, value_serde or key_serde, None, self.collector)
        stage = sink.stage(lambda: calls.append(("failed", _handled())), drop_null_keys)
        if selector is not None:
            stage = _with_key_selector(stage, selector, lambda: calls.append(("selector_failed", _handled())))
        if values_fn is not None:
            stage = _with_values_from(stage, values_fn, lambda: calls.append(("values_failed", _handled())))
        return stage

    def entries(self):
        return [list(queue.entries) for queue in self.queues]


def _serde(serialize, unchecked=None):
    """A serde whose (unchecked) serializer is the test's."""
    return SimpleNamespace(serialize=serialize, serialize_unchecked=unchecked or serialize, deserialize=None)


def _handled():
    """The exception a marker sees as handled (it runs inside the node's `except`)."""
    import sys
    exc = sys.exc_info()[1]
    return None if exc is None else f"{type(exc).__name__}: {exc}"


@pytest.fixture
def producer(cluster):
    with closing(cluster.producer({"linger.ms": 1})) as p:
        yield p


def test_the_c_stage_is_the_sinks_stage_when_built_and_offered(producer):
    if direct_sink._accel is None:
        pytest.skip("streams.runtime._sink is not built")
    bench = Bench(producer)
    stage = bench.stage(selector=lambda k, v: v, values_fn=str.split)
    assert type(stage).__name__ == "DirectSink" and stage.__name__ == "sink_direct"
    assert not hasattr(stage, "with_values_from")
    with pytest.raises(TypeError, match="4 positional"):
        stage("k", "v", 3)


def test_the_c_stage_needs_the_views_untracked_entries_capability_and_murmur2(producer):
    """The C stage builds queue entries itself only where the producer says it may (QueueView
    `untracked_entries`) and keys are routed by murmur2 here; elsewhere the sink's own stage
    queues through the view's append."""
    bench = Bench(producer)
    bench.view.untracked_entries = False
    stage = bench.stage()
    assert type(stage).__name__ == "function"
    stage("k", "v", 5, ())
    assert [e for entries in bench.entries() for e in entries] == [(b"k", b"v", 5, None)]
    bench = Bench(producer)
    bench.collector._murmur2 = False
    assert type(bench.stage()).__name__ == "function"


def test_entries_are_untracked_four_tuples_in_the_murmur2_partition(producer, impl):
    import gc
    import random

    rng = random.Random(7)
    for partitions in (1, 2, 3, 7, 16, 31):
        bench = Bench(producer, partitions)
        stage = bench.stage(serdes.BYTES)
        keys = [rng.randbytes(rng.randint(0, 40)) for _ in range(200)]
        for i, key in enumerate(keys):
            stage(key, b"v%d" % i, 1000 + i, ())
        for p, entries in enumerate(bench.entries()):
            for key, value, ts, cb in entries:
                assert py_murmur2_partition(key, partitions) == p
                assert value == b"v%d" % (ts - 1000) and cb is None
        assert sorted(e for q in bench.entries() for e in q) == sorted(
            (k, b"v%d" % i, 1000 + i, None) for i, k in enumerate(keys))
        assert not any(gc.is_tracked(e) for q in bench.entries() for e in q)
        assert bench.calls == [] and bench.produced == []


def test_the_common_path_counts_sends_and_polls_every_4096(producer, impl):
    bench = Bench(producer)
    polls = []
    real_producer = bench.collector.producer

    class Polling:  # the real producer, its polls recorded
        def poll(self, timeout):
            polls.append((timeout, bench.collector._since_poll))
            return real_producer.poll(timeout)

        def __getattr__(self, name):
            return getattr(real_producer, name)
    bench.collector.producer = Polling()
    stage = bench.stage(selector=lambda k, w: w, values_fn=str.split)
    bench.collector._since_poll = 4090
    stage(None, "a b c", 5, ())
    assert bench.collector._since_poll == 4093 and polls == []
    stage(None, "d e f g h", 5, ())  # the 4096th send polls once, the count restarts at 0
    assert polls == [(0, 0)] and bench.collector._since_poll == 2
    assert sum(map(len, bench.entries())) == 8


def test_a_queue_reaching_kick_at_is_kicked_after_the_append(producer, impl):
    bench = Bench(producer, 1)
    bench.queues[0].kick_at = 3
    stage = bench.stage()
    kicked_at = []
    for i in range(4):
        stage("k", "v%d" % i, 1, ())
        kicked_at.append(len(bench.calls))
    assert kicked_at == [0, 0, 1, 2]  # at length 3 and 4 (kick_at is the sender's to move)
    assert bench.calls == [("kick", 0), ("kick", 0)]
    assert len(bench.entries()[0]) == 4


def test_a_foreign_callback_on_the_queue_goes_through_produce(cluster, producer, impl):
    bench = Bench(producer, real_produce=True)
    p = py_murmur2_partition(b"k", 3)
    bench.queues[p].cb = object()  # produce() has not set our callback yet
    stage = bench.stage()
    stage("k", "v", 7, ())
    assert bench.produced == [("direct", b"k", b"v", p, 7, None)] and bench.entries()[p] == []
    assert bench.collector._since_poll == 1  # counted by the collector's send
    bench.collector.flush()
    assert [(q, k, v) for q, k, v, _t, _h in _written(cluster, "direct")] == [(p, b"k", b"v")]


def test_records_off_the_common_path_go_through_the_sinks_stage(producer, impl):
    bench = Bench(producer)
    p = py_murmur2_partition(b"k", 3)
    bench.stage(drop_null_keys=True)(None, "dropped", 1, ())
    assert bench.calls == [] and bench.produced == [] and bench.entries() == [[], [], []]
    stage = bench.stage()
    stage(None, "no key", 1, ())
    stage("k", "headers", 2, (("h", b"1"),))
    assert bench.produced == [("direct", None, b"no key", -1, 1, None),
                              ("direct", b"k", b"headers", p, 2, [("h", b"1")])]
    bench.collector._error = ProductionError("pending")
    with pytest.raises(ProductionError, match="pending"):
        stage("k", "error", 3, ())
    assert bench.calls == [("failed", "ProductionError: pending")] and bench.collector._error is None
    bench.view.topics.clear()  # produce() has something to check: the count is the topic's (3)
    stage("k", "closed", 4, [])
    assert bench.produced[-1] == ("direct", b"k", b"closed", p, 4, None)
    assert bench.entries() == [[], [], []]


def test_a_serializer_error_is_the_sinks_checked_serializers_and_names_the_sink(producer, impl):
    bench = Bench(producer)

    def picky(obj):
        if obj == "bad":
            raise ValueError("cannot serialize")
        return obj.encode()

    def checked(obj):
        if obj == "bad":
            raise SerializationError("checked: cannot serialize")
        return obj.encode()
    stage = bench.stage(_serde(checked, picky))
    with pytest.raises(SerializationError, match="sink 'sink-direct'.*topic 'direct'.*checked") as info:
        stage("bad", "v", 1, ())
    assert bench.calls == [("failed", info.value.__class__.__name__ + ": " + str(info.value))]
    bench.calls.clear()
    stage("k", "v", 2, ())
    assert bench.calls == [] and [e for q in bench.entries() for e in q] == [(b"k", b"v", 2, None)]


def test_a_base_exception_from_a_serializer_is_the_sinks_failure(producer, impl):
    class Stop(BaseException):
        pass

    def stopping(obj):
        raise Stop("stop")
    bench = Bench(producer)
    with pytest.raises(Stop):
        bench.stage(_serde(stopping))("k", "v", 1, ())
    assert bench.calls == [("failed", "Stop: stop")]


def test_a_serializer_result_that_is_not_bytes_goes_to_produce(producer, impl):
    bench = Bench(producer)
    stage = bench.stage(value_serde=_serde(lambda v: bytearray(v.encode())))
    stage("k", "v", 1, ())
    assert bench.produced == [("direct", b"k", bytearray(b"v"), py_murmur2_partition(b"k", 3), 1, None)]
    assert bench.entries() == [[], [], []] and bench.calls == []


def test_no_timestamp_means_now_and_a_bad_one_fails_naming_the_sink(producer, impl):
    import time

    bench = Bench(producer, 1)
    stage = bench.stage()
    before = time.time_ns() // 1_000_000
    stage("k", "zero", 0, ())
    stage("k", "none", None, ())
    after = time.time_ns() // 1_000_000
    assert [before <= ts <= after for _k, _v, ts, _ in bench.entries()[0]] == [True, True]
    with pytest.raises(TypeError):
        stage("k", "float", 1.5, ())
    assert [c[0] for c in bench.calls] == ["failed"] and len(bench.entries()[0]) == 2


def test_markers_name_the_failing_node_innermost_first_while_its_error_is_handled(producer, impl):
    bench = Bench(producer)

    def select(key, word):
        if word == "boom":
            raise ValueError("selector failed")
        return word
    stage = bench.stage(selector=select, values_fn=str.split)
    with pytest.raises(ValueError, match="selector failed"):
        stage(None, "a boom b", 1, ())
    assert bench.calls == [("selector_failed", "ValueError: selector failed"),
                           ("values_failed", "ValueError: selector failed")]
    assert sum(map(len, bench.entries())) == 1  # "a" before the failure, "b" never
    bench.calls.clear()

    def no_values(line):
        raise KeyError(line)
    with pytest.raises(KeyError):
        bench.stage(selector=select, values_fn=no_values)(None, "x", 1, ())
    assert bench.calls == [("values_failed", "KeyError: 'x'")]
    bench.calls.clear()

    def not_iterable(line):
        return 5
    with pytest.raises(TypeError):
        bench.stage(selector=select, values_fn=not_iterable)(None, "x", 1, ())
    assert bench.calls == [("values_failed", "TypeError: 'int' object is not iterable")]
    bench.calls.clear()
    with pytest.raises(ProductionError):  # kick() failing is the sink's failure, then the flat map's
        bench.queues[0].kick_at = 0
        bench.collector._view = bench.view = QueueView({"direct": bench.queues[:1]}, _raise_production_error)
        bench.stage(values_fn=str.split)("k", "w", 1, ())
    assert bench.calls == [("failed", "ProductionError: kick"), ("values_failed", "ProductionError: kick")]


def _raise_production_error(queue):
    raise ProductionError("kick")


def test_a_generator_of_values_is_consumed_lazily_one_record_at_a_time(producer, impl):
    bench = Bench(producer)
    order = []

    def words(line):
        for word in line.split():
            order.append(("next", word))
            if word == "BREAK":
                raise RuntimeError("iterator failed")
            yield word

    def select(key, word):
        order.append(("select", word))
        return word
    stage = bench.stage(selector=select, values_fn=words)
    stage(None, "a b", 1, ())
    assert order == [("next", "a"), ("select", "a"), ("next", "b"), ("select", "b")]
    with pytest.raises(RuntimeError):
        stage(None, "c BREAK d", 2, ())
    assert bench.calls == [("values_failed", "RuntimeError: iterator failed")]
    assert sum(map(len, bench.entries())) == 3


def test_values_appended_or_removed_while_a_line_runs_are_seen_as_a_python_loop_sees_them(producer, impl):
    bench = Bench(producer, 1)
    values = ["a", "b", "c"]

    def select(key, word):
        if word == "a":
            values.append("z")
        if word == "b":
            del values[2:]  # "c" and "z" are gone before the loop reaches them
            values.append("y")
        return word
    bench.stage(selector=select, values_fn=lambda line: values)(None, "ignored", 1, ())
    assert [k for k, *_ in bench.entries()[0]] == [b"a", b"b", b"y"]


def test_a_partition_list_growing_during_a_line_routes_each_value_by_the_count_it_sees(producer, impl):
    bench = Bench(producer, 1)
    key = next(k for k in (f"key-{i}" for i in range(1000)) if py_murmur2_partition(k.encode(), 4) == 3)

    def select(k, word):
        if word == "grow":
            bench.queues.extend(bench.new_queue(p) for p in range(1, 4))  # the producer learnt 4 partitions
        return key
    bench.stage(selector=select, values_fn=str.split)(None, "before grow after", 1, ())
    assert [[v for _k, v, *_ in q] for q in bench.entries()] == [[b"before"], [], [], [b"grow", b"after"]]


def test_both_forms_make_the_same_entries_produce_calls_and_markers(producer, monkeypatch):
    """The parity test: a seeded mix of records over every path, run by each form on its own
    bench (queue entries, kicks, produce() calls with partitions, headers and timestamps,
    failure markers, errors, the poll count)."""
    import random

    if direct_sink._accel is None:
        pytest.skip("streams.runtime._sink is not built")
    results = []
    for accel in (direct_sink._accel, None):
        monkeypatch.setattr(direct_sink, "_accel", accel)
        rng = random.Random(3)
        bench = Bench(producer, 5)
        bench.queues[2].cb = None  # this partition's records go through produce()
        bench.queues[1].kick_at = 4
        errors = []

        def select(key, word):
            return None if word.startswith("n") else word[:2]
        stages = [bench.stage(selector=select, values_fn=str.split, drop_null_keys=rng.random() < 0.5),
                  bench.stage(selector=select, values_fn=lambda line: iter(line.split())),
                  bench.stage(value_serde=serdes.INT64), bench.stage()]
        for i in range(3000):
            words = " ".join(rng.choice(["ab", "abc", "né", "nx", "q", "é€", "zz" * 20]) for _ in range(rng.randint(0, 4)))
            which = rng.randrange(4)
            headers = (("h", b"x"),) if rng.random() < 0.05 else ()
            ts = rng.choice([0, 5, 10**12 + i])
            try:
                if which < 2:
                    stages[which]("line", words, ts, headers)
                elif which == 2:
                    stages[2](words[:1] or None, rng.choice([1, -7, None, "not an int"]), ts, headers)
                else:
                    stages[3](words[:3] or None, rng.choice([words, None, words[:3] or None]), ts, headers)
            except Exception as exc:
                errors.append((i, type(exc).__name__, str(exc)))
            if i % 500 == 0:
                bench.collector._error = ProductionError("x")
        normalized = [[(k, v, "now" if ts > 1.5e12 else ts, cb) for k, v, ts, cb in q] for q in bench.entries()]
        produced = [row[:4] + ("now" if not row[4] else row[4],) + row[5:] for row in bench.produced]
        results.append((normalized, bench.calls, produced, errors, bench.collector._since_poll))
    assert results[0][0] == results[1][0] and sum(map(len, results[0][0])) > 1000
    assert results[0][1:] == results[1][1:]
    assert results[0][2] and results[0][3] and any(c[0] == "kick" for c in results[0][1])


def test_queue_attributes_are_read_as_getattr_reads_them_when_the_queue_class_changes(producer, impl):
    class Queue:  # a queue of the protocol's shape, its class ours to change
        __slots__ = ("tp", "entries", "cb", "kick_at")

    class Deferring(Queue):  # a subclass whose cb is never the sink's callback
        __slots__ = ()
        cb = property(lambda self: None)

    bench = Bench(producer, 1)
    queue = Queue()
    queue.tp, queue.entries, queue.cb, queue.kick_at = (TopicPartition("direct", 0), [],
                                                        bench.collector.sink_delivery_callback, 2)
    bench.queues[0] = queue
    stage = bench.stage()
    stage("k", "v1", 1, ())
    stage("k", "v2", 2, ())
    assert queue.entries == [(b"k", b"v1", 1, None), (b"k", b"v2", 2, None)] and bench.calls == [("kick", 0)]
    bench.queues[0] = Queue()  # no slot set: getattr's AttributeError, naming the sink
    with pytest.raises(AttributeError, match="cb"):
        stage("k", "v3", 3, ())
    assert bench.calls[-1][0] == "failed"
    other = Deferring()
    other.tp, other.entries, other.kick_at = TopicPartition("direct", 0), [], _NEVER
    bench.queues[0] = other
    stage("k", "v4", 4, ())
    assert bench.produced == [("direct", b"k", b"v4", 0, 4, None)] and other.entries == []
    bench.queues[0] = queue
    bench.calls.clear()
    Queue.kick_at = property(lambda self: 1)  # the class changed: its kick_at is no longer the slot
    stage("k", "v5", 5, ())
    assert bench.calls == [("kick", 0)] and len(queue.entries) == 3
    Queue.cb = property(lambda self: None)
    stage("k", "v6", 6, ())
    assert bench.produced[-1] == ("direct", b"k", b"v6", 0, 6, None) and len(queue.entries) == 3


def test_a_partition_sender_queues_what_the_collectors_send_writes(cluster, impl):
    """A changelog's sender (RecordCollector.partition_sender): the C stage where offered, or
    the collector's send path; both write to the named partition what `send` writes, None keys
    and values, headers and a timestamp of 0 included, and report the last written offset."""
    records = [(b"k1", b"v1", 1, None), (b"k2", None, 2, None), (None, b"v3", 3, None),
               (b"k4", b"v4", 4, [("h", b"1")]), (b"k5", b"v5", 0, None), (b"k6", b"v6", 6, None)]
    with closing(cluster.producer({"linger.ms": 1})) as producer:
        collector = RecordCollector(producer)
        send = collector.partition_sender("direct", 2)
        assert (type(send).__name__ == "DirectSink") == (impl == "c")
        for key, value, ts, headers in records:
            send(key, value, ts, headers)
            collector.send("ordinary", key, value, partition=2, timestamp=ts, headers=headers)
        collector.flush()
        offsets = (collector.offset_of("direct", 2), collector.offset_of("ordinary", 2))
    got, want = _written(cluster, "direct"), _written(cluster, "ordinary")
    # the record of timestamp 0 is stamped with the wall clock by both: compare all else
    assert [(p, k, v, h) for p, k, v, _t, h in got] == [(p, k, v, h) for p, k, v, _t, h in want]
    assert [t for _p, _k, _v, t, _h in got][:4] == [1, 2, 3, 4] and len(got) == len(records)
    assert offsets == (len(records) - 1, len(records) - 1)


def test_a_replaced_producer_takes_the_sends_of_stages_built_after_it(cluster, impl):
    """The thread replaces a fenced producer and revives its tasks: their new stages and the
    collector's own sends queue on the new producer, none on the old one (whose queue view,
    still open here, would take records it is no longer asked to send)."""
    with closing(cluster.producer({"linger.ms": 1})) as old, closing(cluster.producer({"linger.ms": 1})) as new:
        collector = RecordCollector(old, murmur2_partitioning=True)
        _stage(collector, "direct", serdes.STRING, serdes.STRING)("a", "before", 1, ())
        collector.flush()
        collector.use_producer(new)
        assert collector.producer is new
        stage = _stage(collector, "direct", serdes.STRING, serdes.STRING)
        for i, key in enumerate(("a", "b", "c", "d")):
            stage(key, "after", 2 + i, ())
        collector.sender("direct")(b"e", b"sent", 9, None)
        assert len(old) == 0 and len(new) == 5  # queued on the new producer, nothing on the old
        collector.flush()
        assert len(new) == 0
    written = _written(cluster, "direct")
    assert sorted((k, v) for _p, k, v, _t, _h in written) == [
        (b"a", b"after"), (b"a", b"before"), (b"b", b"after"), (b"c", b"after"), (b"d", b"after"), (b"e", b"sent")]
