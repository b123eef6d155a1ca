"""The embedded producer's shortcuts for the stream runtime's sinks: `appender(topic, cb)`
queues exactly what produce() would (or declines, leaving produce() to check), and a delivery
callback marked `delivery_report_only_error` hears about failures only."""

from __future__ import annotations

from contextlib import closing

import pytest

from replication.cluster import LocalCluster
from replication.clients.partitioner import murmur2_partition

from test_producer import FAST, Reports, batches_of


@pytest.fixture
def cluster(tmp_path):
    with LocalCluster(tmp_path / "cluster", num_brokers=3, config=FAST) as c:
        c.create_topic("t", partitions=2, replication_factor=3)
        yield c


def _records(cluster, topic, partition):
    return [(r.key, r.value, r.timestamp) for b in batches_of(cluster, topic, partition)
            if not b.is_control for r in b.records()]


def _key_on(partition, n=2):
    """A key whose murmur2 partition (of n) is `partition`."""
    return next(k for k in (b"key-%d" % i for i in range(1000)) if murmur2_partition(k, n) == partition)


def test_appended_records_equal_produced_ones(cluster):
    reports = Reports()
    k0, k1 = _key_on(0), _key_on(1)
    with closing(cluster.producer({"linger.ms": 5})) as producer:
        append = producer.appender("t", reports)
        assert append(k0, b"v0", 10) is False  # the queue's callback is not set yet
        producer.produce("t", b"v0", k0, on_delivery=reports, timestamp=10)
        producer.produce("t", b"w0", k1, on_delivery=reports, timestamp=11)
        assert append(k0, b"v1", 12) is True
        assert append(k0, None, 13) is True
        assert append(k1, b"w1", 0) is True  # 0: stamped now, as produce() does
        assert producer.flush(30) == 0
    assert _records(cluster, "t", 0) == [(k0, b"v0", 10), (k0, b"v1", 12), (k0, None, 13)]
    p1 = _records(cluster, "t", 1)
    assert p1[0] == (k1, b"w0", 11) and p1[1][:2] == (k1, b"w1") and p1[1][2] > 1_000_000_000_000
    # per partition in order (reports of different partitions may interleave either way)
    assert sorted((p, o, e) for e, p, o, _k, _v in reports.items) == [
        (0, 0, None), (0, 1, None), (0, 2, None), (1, 0, None), (1, 1, None)]


def test_the_appender_declines_whatever_produce_must_check(cluster):
    reports, other = Reports(), Reports()
    k0 = _key_on(0)
    with closing(cluster.producer({"linger.ms": 5})) as producer:
        producer.produce("t", b"v", k0, on_delivery=reports)
        assert producer.appender("t", other)(k0, b"v", 1) is False  # not the queue's callback
        assert producer.appender("no-such-topic", reports)(k0, b"v", 1) is False
        assert producer.flush(30) == 0
    assert len(_records(cluster, "t", 0)) == 1
    with closing(cluster.producer({"partitioner": "consistent_random"})) as producer:
        assert producer.appender("t", reports) is None  # only murmur2's choice is remembered
    cluster.create_topic("tx", partitions=1, replication_factor=3)
    with closing(cluster.producer({"transactional.id": "tx-1"})) as producer:
        producer.init_transactions(30)
        producer.begin_transaction()
        producer.produce("tx", b"v", b"k", on_delivery=reports)
        producer.commit_transaction(30)
        # between transactions produce() raises _STATE: the appender must not queue silently
        assert producer.appender("tx", reports)(b"k", b"v", 1) is False
        producer.begin_transaction()
        assert producer.appender("tx", reports)(b"k2", b"v2", 1) is True
        producer.commit_transaction(30)
    assert [k for k, _v, _t in _records(cluster, "tx", 0)] == [b"k", b"k2"]


def test_the_appender_follows_a_growing_partition_count(cluster):
    reports = Reports()
    with closing(cluster.producer({"linger.ms": 0, "topic.metadata.refresh.interval.ms": 10})) as producer:
        key = next(k for k in (b"key-%d" % i for i in range(1000))
                   if murmur2_partition(k, 2) != murmur2_partition(k, 5))
        producer.produce("t", b"v", key, on_delivery=reports)
        append = producer.appender("t", reports)
        assert append(key, b"a", 1) is True
        cluster.controller.create_partitions("t", 5)
        producer.produce("t", b"v", key, partition=4, on_delivery=reports)  # grows its queues
        for p in range(5):
            producer.produce("t", b"v", key, partition=p, on_delivery=reports)
        assert append(key, b"b", 2) is True
        assert producer.flush(30) == 0
    want = murmur2_partition(key, 5)
    assert (key, b"b", 2) in _records(cluster, "t", want)


def test_a_failures_only_callback_hears_failures_and_nothing_else(cluster):
    failures = []

    def on_error(err, msg):
        failures.append((err, msg.topic(), msg.partition(), len(msg.value())))
    on_error.delivery_report_only_error = True
    every = Reports()
    with closing(cluster.producer({"linger.ms": 0, "message.max.bytes": 10_000_000})) as producer:
        producer.produce("t", b"small", b"k", 0, on_error)
        producer.produce("t", b"small", b"k", 1, every)
        assert producer.flush(30) == 0
        assert failures == [] and len(every.items) == 1
        producer.produce("t", b"x" * 2_000_000, b"k", 0, on_error)  # over the topic's max.message.bytes
        assert producer.flush(30) == 0
    assert len(failures) == 1
    err, topic, partition, size = failures[0]
    assert err is not None and (topic, partition, size) == ("t", 0, 2_000_000)


def test_a_last_only_callback_hears_each_delivered_batch_once_and_every_failure(cluster):
    heard = []

    def on_delivery(err, msg):
        heard.append((err is None, msg.partition(), msg.offset(), msg.value()[:5]))
    on_delivery.delivery_report_last_only = True
    with closing(cluster.producer({"linger.ms": 50, "message.max.bytes": 10_000_000})) as producer:
        for i in range(5):
            producer.produce("t", b"v%d" % i, b"k", partition=0, on_delivery=on_delivery)
        assert producer.flush(30) == 0
        assert heard == [(True, 0, 4, b"v4")]  # one batch: its last record, at its offset
        heard.clear()
        producer.produce("t", b"x" * 2_000_000, b"k", partition=0, on_delivery=on_delivery)
        producer.produce("t", b"y" * 2_000_000, b"k", partition=0, on_delivery=on_delivery)
        assert producer.flush(30) == 0
    assert [(ok, p, v) for ok, p, _o, v in heard] == [(False, 0, b"xxxxx"), (False, 0, b"yyyyy")]


def test_queue_append_builds_the_entry_produce_would_untracked_by_the_collector():
    import gc

    from replication.clients import producer as producer_module

    entries_c, entries_py = [], []
    for key, value, ts in ((b"k", b"v", 5), (None, None, 6), (b"", b"x" * 1000, 2 ** 45)):
        assert producer_module.queue_append(entries_c, key, value, ts) == len(entries_c)
        assert producer_module._py_queue_append(entries_py, key, value, ts) == len(entries_py)
    assert entries_c == entries_py == [(b"k", b"v", 5, None), (None, None, 6, None), (b"", b"x" * 1000, 2 ** 45, None)]
    if producer_module.queue_append is not producer_module._py_queue_append:  # the C version
        assert not any(gc.is_tracked(e) for e in entries_c)
        for bad in (("k", b"v", 1), (b"k", bytearray(b"v"), 1), (b"k", b"v", 1.5)):
            with pytest.raises(TypeError, match="queue_append"):
                producer_module.queue_append([], *bad)
        with pytest.raises(TypeError, match="entries must be a list"):
            producer_module.queue_append((), b"k", b"v", 1)
