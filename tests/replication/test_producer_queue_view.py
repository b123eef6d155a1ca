"""The embedded producer's shortcuts for the stream runtime's sinks: its QueueView lets a caller
queue exactly what produce() would (or says produce() must check), and delivery callbacks
marked `delivery_report_only_error` / `delivery_report_last_only` hear failures only / the last
record of each delivered batch."""

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


def _append(producer, topic, on_delivery, key, value, timestamp):
    """A caller following the QueueView protocol as its docstring states it: True when queued,
    False when the view says produce() must be used."""
    view = producer.queue_view()
    queues = view.topics.get(topic)
    if queues is None:
        return False
    queue = queues[murmur2_partition(key, len(queues))]
    if queue.cb is not on_delivery:
        return False
    if view.append(queue.entries, key, value, timestamp) >= queue.kick_at:
        view.kick(queue)
    return True


def test_records_queued_through_the_view_equal_produced_ones(cluster):
    reports = Reports()
    k0, k1 = _key_on(0), _key_on(1)
    with closing(cluster.producer({"linger.ms": 5})) as producer:
        assert _append(producer, "t", reports, k0, b"v0", 10) is False  # the queue's callback is not set yet
        producer.produce("t", b"v0", k0, on_delivery=reports, timestamp=10)
        producer.produce("t", b"w0", k1, on_delivery=reports, timestamp=11)
        assert _append(producer, "t", reports, k0, b"v1", 12) is True
        assert _append(producer, "t", reports, k0, None, 13) is True
        assert _append(producer, "t", reports, k1, b"w1", 14) is True
        assert producer.flush(30) == 0
    assert _records(cluster, "t", 0) == [(k0, b"v0", 10), (k0, b"v1", 12), (k0, None, 13)]
    assert _records(cluster, "t", 1) == [(k1, b"w0", 11), (k1, b"w1", 14)]
    # per partition in order (reports of different partitions may interleave either way)
    assert sorted((p, o, e) for e, p, o, _k, _v in reports.items) == [
        (0, 0, None), (0, 1, None), (0, 2, None), (1, 0, None), (1, 1, None)]


def test_the_view_offers_queues_only_while_produce_has_nothing_to_check(cluster):
    reports, other = Reports(), Reports()
    k0 = _key_on(0)
    with closing(cluster.producer({"linger.ms": 5})) as producer:
        producer.produce("t", b"v", k0, on_delivery=reports)
        assert _append(producer, "t", other, k0, b"v", 1) is False  # not the queue's callback
        assert producer.queue_view().topics.get("no-such-topic") is None
        assert producer.flush(30) == 0
    assert len(_records(cluster, "t", 0)) == 1
    with closing(cluster.producer({"partitioner": "consistent_random"})) as producer:
        assert producer.queue_view() is None  # only murmur2's choice may be remembered
    cluster.create_topic("tx", partitions=1, replication_factor=3)
    with closing(cluster.producer({"transactional.id": "tx-1"})) as producer:
        producer.init_transactions(30)
        producer.begin_transaction()
        producer.produce("tx", b"v", b"k", on_delivery=reports)
        producer.commit_transaction(30)
        # between transactions produce() raises _STATE: the view must not offer the queues
        assert producer.queue_view().topics.get("tx") is None
        producer.begin_transaction()
        assert _append(producer, "tx", reports, b"k2", b"v2", 1) is True
        producer.commit_transaction(30)
    assert [k for k, _v, _t in _records(cluster, "tx", 0)] == [b"k", b"k2"]


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
