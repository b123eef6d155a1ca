"""Producer state, transaction markers, the last stable offset and the transaction coordinator,
on real logs and a real LocalCluster."""

from __future__ import annotations

import os

import pytest
from confluent_kafka import KafkaError, KafkaException, TopicPartition as CTopicPartition

from replication.cluster import LocalCluster
from replication.clients.consumer import ConsumerGroupMetadata
from replication.log import Log
from replication.producer_state import (
    SNAPSHOT_FILE, InvalidProducerEpochError, InvalidTxnStateError, OutOfOrderSequenceError,
)
from replication.protocol import IsolationLevel, TopicPartition
from replication.records import ControlType, decode_batches, decode_messages, encode_batch, encode_control_batch
from replication.txn_coordinator import TRANSACTION_STATE_TOPIC, TxnErrors, TxnState

FAST = {
    "replica.fetch.backoff.ms": 20,
    "replica.lag.time.max.ms": 10000,
    "replica.socket.timeout.ms": 1000,
    "transaction.abort.timed.out.transaction.cleanup.interval.ms": 100,
}


@pytest.fixture
def cluster(tmp_path):
    with LocalCluster(tmp_path / "cluster", num_brokers=3, config=FAST) as c:
        yield c


def batch(seq, n=2, epoch=0, pid=7, txn=False, value=b"v"):
    return encode_batch([(None, value, 1)] * n, producer_id=pid, producer_epoch=epoch,
                        base_sequence=seq, is_transactional=txn)


def marker(kind, pid=7, epoch=0):
    return encode_control_batch(kind, timestamp=1, producer_id=pid, producer_epoch=epoch)


# -- producer state on one log --------------------------------------------------------------------


def test_leader_append_validates_sequences_epochs_and_detects_duplicates(tmp_path):
    lg = Log(tmp_path / "t-0")
    assert (lg.append_as_leader(batch(0), 0).first_offset, lg.log_end_offset) == (0, 2)
    assert lg.append_as_leader(batch(2), 0).first_offset == 2
    dup = lg.append_as_leader(batch(0), 0)  # a retry of the first batch
    assert (dup.first_offset, dup.last_offset, lg.log_end_offset) == (0, 1, 4)
    with pytest.raises(OutOfOrderSequenceError, match="expected 4"):
        lg.append_as_leader(batch(5), 0)
    with pytest.raises(OutOfOrderSequenceError, match="new epoch starts at 0"):
        lg.append_as_leader(batch(3, epoch=1), 0)
    lg.append_as_leader(batch(0, epoch=1), 0)  # an epoch bump resets the sequence
    with pytest.raises(InvalidProducerEpochError):
        lg.append_as_leader(batch(4, epoch=0), 0)
    assert lg.append_as_leader(batch(123, pid=8), 0).first_offset == 6  # unknown producer: any sequence
    assert lg.log_end_offset == 8
    lg.close()


def test_open_transaction_holds_the_last_stable_offset(tmp_path):
    lg = Log(tmp_path / "t-0")
    lg.append_as_leader(encode_batch([(None, b"plain", 1)]), 0)  # 0
    lg.append_as_leader(batch(0, txn=True), 0)  # 1-2
    with pytest.raises(InvalidTxnStateError):
        lg.append_as_leader(batch(2, txn=False), 0)
    lg.append_as_leader(batch(0, pid=9, txn=True), 0)  # 3-4
    lg.maybe_increment_high_watermark(5)
    assert lg.first_unstable_offset == 1 and lg.last_stable_offset == 1
    lg.append_as_leader(marker(ControlType.ABORT), 0)  # 5
    # The marker is not below the high watermark yet: the transaction is not stable.
    assert lg.first_unstable_offset == 3 and lg.last_stable_offset == 1
    lg.maybe_increment_high_watermark(6)
    assert lg.last_stable_offset == 3
    lg.append_as_leader(marker(ControlType.COMMIT, pid=9), 0)  # 6
    lg.maybe_increment_high_watermark(7)
    assert lg.first_unstable_offset is None and lg.last_stable_offset == 7
    aborted = lg.aborted_transactions(0, 7)
    assert [(a.producer_id, a.first_offset, a.last_offset) for a in aborted] == [(7, 1, 5)]
    assert lg.aborted_transactions(6, 7) == []
    msgs, _next = decode_messages(lg.read(0, 1 << 20).buffer, "t", 0,
                                  aborted=[(a.producer_id, a.first_offset, a.last_offset) for a in aborted])
    assert [m.offset() for m in msgs] == [0, 3, 4]
    lg.close()


@pytest.mark.parametrize("with_snapshot", [True, False])
def test_producer_state_is_rebuilt_on_open(tmp_path, with_snapshot):
    lg = Log(tmp_path / "t-0")
    lg.append_as_leader(batch(0, txn=True), 0)
    lg.append_as_leader(marker(ControlType.ABORT), 0)
    lg.roll()  # snapshot at the roll
    lg.append_as_leader(batch(2, txn=True), 0)  # open, after the snapshot
    lg.append_as_leader(batch(0, pid=3), 0)
    lg.close()
    if not with_snapshot:
        os.unlink(tmp_path / "t-0" / SNAPSHOT_FILE)
    lg = Log(tmp_path / "t-0")
    assert lg.first_unstable_offset == 3
    assert [(a.producer_id, a.first_offset, a.last_offset) for a in lg.aborted_transactions(0, 100)] == [(7, 0, 2)]
    assert lg.append_as_leader(batch(0, pid=3), 0).first_offset == 5  # still a known duplicate
    with pytest.raises(OutOfOrderSequenceError):
        lg.append_as_leader(batch(9, txn=True), 0)
    lg.close()


def test_producer_state_after_crash_and_truncation(tmp_path):
    lg = Log(tmp_path / "t-0")
    lg.append_as_leader(batch(0), 0)
    lg.roll()
    lg.append_as_leader(batch(2, txn=True), 0)  # 2-3
    lg.flush()
    lg.crash()
    lg = Log(tmp_path / "t-0")
    assert lg.first_unstable_offset == 2
    lg.truncate_to(2)  # drops the open transaction's batch
    assert lg.first_unstable_offset is None
    assert lg.append_as_leader(batch(2), 0).first_offset == 2  # sequence continues after 0-1
    lg.close()


def test_follower_append_tracks_producers(tmp_path):
    leader = Log(tmp_path / "t-0")
    follower = Log(tmp_path / "f" / "t-0")
    leader.append_as_leader(batch(0, txn=True), 0)
    follower.append_as_follower(leader.read(0, 1 << 20).buffer)
    assert follower.first_unstable_offset == 0
    assert follower.append_as_leader(batch(0, txn=True), 1).first_offset == 0  # a duplicate
    leader.close()
    follower.close()


# -- transactions on the cluster ------------------------------------------------------------------


def read_committed(cluster, topic, partition=0):
    """Values a read_committed consumer sees, using the fetch's aborted transactions."""
    resp = cluster.fetch(topic, partition, 0, isolation=IsolationLevel.TXN_COMMITTED)
    aborted = [(a.producer_id, a.first_offset, a.last_offset) for a in resp.aborted_transactions or []]
    msgs, _ = decode_messages(resp.records.buffer, topic, partition, aborted=aborted)
    return [m.value() for m in msgs]


def read_uncommitted(cluster, topic, partition=0):
    resp = cluster.fetch(topic, partition, 0)
    return [m.value() for m in decode_messages(resp.records.buffer, topic, partition)[0]]


def control_batches(cluster, topic, partition=0):
    lg = cluster.partition_on(cluster.leader(topic, partition), topic, partition).log
    return [(b.base_offset, b.control_type()) for b in decode_batches(lg.read(0, 1 << 20).buffer) if b.is_control]


def lso(cluster, topic, partition=0):
    return cluster.partition_on(cluster.leader(topic, partition), topic, partition).log.last_stable_offset


def txn_producer(cluster, txn_id="tx", **conf):
    producer = cluster.producer({"transactional.id": txn_id, **conf})
    producer.init_transactions(15)
    return producer


def test_commit_and_abort_write_markers_to_every_partition_and_move_the_lso(cluster):
    cluster.create_topic("t", partitions=2)
    producer = txn_producer(cluster)
    producer.begin_transaction()
    producer.produce("t", value=b"a0", partition=0)
    producer.produce("t", value=b"a1", partition=1)
    assert producer.flush(10) == 0
    assert lso(cluster, "t", 0) == 0 and cluster.high_watermark("t", 0) == 1
    assert read_committed(cluster, "t", 0) == [] and read_uncommitted(cluster, "t", 0) == [b"a0"]
    producer.commit_transaction(15)
    for p in (0, 1):
        assert control_batches(cluster, "t", p) == [(1, ControlType.COMMIT)]
        assert lso(cluster, "t", p) == 2
    assert read_committed(cluster, "t", 1) == [b"a1"]

    producer.begin_transaction()
    producer.produce("t", value=b"b0", partition=0)
    assert producer.flush(10) == 0
    producer.abort_transaction(15)
    producer.begin_transaction()
    producer.produce("t", value=b"c0", partition=0)
    producer.commit_transaction(15)
    assert control_batches(cluster, "t", 0) == [(1, ControlType.COMMIT), (3, ControlType.ABORT),
                                                 (5, ControlType.COMMIT)]
    assert control_batches(cluster, "t", 1) == [(1, ControlType.COMMIT)]  # not in the later ones
    assert read_uncommitted(cluster, "t", 0) == [b"a0", b"b0", b"c0"]
    assert read_committed(cluster, "t", 0) == [b"a0", b"c0"]
    meta = cluster.txn_coordinator.describe("tx")
    assert meta.state is TxnState.COMPLETE_COMMIT and meta.partitions == frozenset()


def test_commit_without_records_and_invalid_coordinator_calls(cluster):
    cluster.create_topic("t")
    producer = txn_producer(cluster)
    producer.begin_transaction()
    producer.commit_transaction(5)  # nothing was sent: nothing to do
    with pytest.raises(KafkaException) as raised:
        producer.commit_transaction(5)
    assert raised.value.args[0].code() == KafkaError._STATE
    coordinator = cluster.txn_coordinator
    meta = coordinator.describe("tx")
    assert coordinator.end_txn("tx", meta.producer_id, meta.producer_epoch, True) == TxnErrors.INVALID_TXN_STATE
    assert coordinator.end_txn("tx", meta.producer_id + 1, meta.producer_epoch, True) == \
        TxnErrors.INVALID_PRODUCER_ID_MAPPING
    assert coordinator.add_partitions_to_txn("tx", meta.producer_id, meta.producer_epoch,
                                             [TopicPartition("missing", 0)]) == TxnErrors.UNKNOWN_TOPIC_OR_PART
    assert coordinator.init_producer_id("other", 10**9)[0] == TxnErrors.INVALID_TRANSACTION_TIMEOUT


def test_zombie_is_fenced_and_its_open_transaction_aborted(cluster):
    cluster.create_topic("t")
    zombie = txn_producer(cluster, "shared")
    zombie.begin_transaction()
    zombie.produce("t", value=b"zombie-open")
    assert zombie.flush(10) == 0
    successor = txn_producer(cluster, "shared")  # aborts the zombie's transaction
    assert control_batches(cluster, "t") == [(1, ControlType.ABORT)]
    successor.begin_transaction()
    successor.produce("t", value=b"after")
    successor.commit_transaction(15)

    with pytest.raises(KafkaException) as raised:
        zombie.commit_transaction(15)
    error = raised.value.args[0]
    assert error.code() == KafkaError._FENCED and error.fatal()
    with pytest.raises(KafkaException) as raised:
        zombie.begin_transaction()
    assert raised.value.args[0].code() == KafkaError._FENCED
    # Its late writes are refused by the partition (older epoch).
    stale = encode_batch([(None, b"late", 1)], producer_id=zombie._producer_id,
                         producer_epoch=zombie._producer_epoch, base_sequence=1, is_transactional=True)
    assert cluster.produce("t", 0, stale).error.name == "INVALID_PRODUCER_EPOCH"
    assert read_committed(cluster, "t") == [b"after"]


def test_hung_transaction_is_aborted_after_its_timeout(cluster):
    cluster.create_topic("t")
    hung = txn_producer(cluster, "hung", **{"transaction.timeout.ms": 1000})
    hung.begin_transaction()
    hung.produce("t", value=b"hung")
    assert hung.flush(10) == 0
    other = txn_producer(cluster, "other")
    other.begin_transaction()
    other.produce("t", value=b"later")
    other.commit_transaction(15)
    assert read_committed(cluster, "t") == []  # blocked behind the hung transaction
    cluster.wait_until(lambda: cluster.txn_coordinator.describe("hung").state is TxnState.COMPLETE_ABORT,
                       30, "the hung transaction to be aborted")
    cluster.wait_until(lambda: read_committed(cluster, "t") == [b"later"], 15, "the LSO to move")
    with pytest.raises(KafkaException) as raised:
        hung.commit_transaction(15)
    assert raised.value.args[0].code() == KafkaError._FENCED


def test_send_offsets_commit_only_with_the_transaction(cluster):
    cluster.create_topic("src")
    cluster.create_topic("sink")
    groups = cluster.group_coordinator
    tp = TopicPartition("src", 0)
    producer = txn_producer(cluster)

    producer.begin_transaction()
    producer.produce("sink", value=b"x")
    producer.send_offsets_to_transaction([CTopicPartition("src", 0, 5)], ConsumerGroupMetadata("g1"), 10)
    producer.abort_transaction(15)
    assert groups.fetch_offsets("g1", [tp])[tp] is None

    producer.begin_transaction()
    producer.produce("sink", value=b"y")
    producer.send_offsets_to_transaction([CTopicPartition("src", 0, 7)], ConsumerGroupMetadata("g1"), 10)
    assert groups.fetch_offsets("g1", [tp])[tp] is None
    producer.commit_transaction(15)
    assert groups.fetch_offsets("g1", [tp])[tp].offset == 7
    with pytest.raises(KafkaException) as raised:
        producer.send_offsets_to_transaction([CTopicPartition("src", 0, 8)], ConsumerGroupMetadata("g1"), 10)
    assert raised.value.args[0].code() == KafkaError._STATE


def test_coordinator_state_survives_a_full_cluster_restart(tmp_path):
    data = tmp_path / "cluster"
    with LocalCluster(data, num_brokers=3, config=FAST) as cluster:
        cluster.create_topic("t")
        producer = txn_producer(cluster, "durable", **{"transaction.timeout.ms": 600000})
        producer.begin_transaction()
        producer.produce("t", value=b"open")
        assert producer.flush(10) == 0
        pid, epoch = producer._producer_id, producer._producer_epoch
        idempotent_pid = cluster.txn_coordinator.init_producer_id(None)[1]
    with LocalCluster(data, num_brokers=3, config=FAST) as cluster:
        meta = cluster.txn_coordinator.describe("durable")
        assert (meta.state, meta.producer_id, meta.producer_epoch) == (TxnState.ONGOING, pid, epoch)
        assert meta.partitions == {TopicPartition("t", 0)}
        assert cluster.txn_coordinator.init_producer_id(None)[1] > idempotent_pid  # ids never reused
        cluster.wait_until(lambda: cluster.leader("t", 0) >= 0, 15, "a leader")
        assert lso(cluster, "t") == 0  # the partition rebuilt its open transaction too
        successor = txn_producer(cluster, "durable")
        assert successor._producer_epoch > epoch
        assert control_batches(cluster, "t") == [(1, ControlType.ABORT)]
        cluster.wait_until(lambda: lso(cluster, "t") == 2, 15, "the LSO past the abort marker")
        assert read_committed(cluster, "t") == []


def test_coordinator_reloads_after_the_state_partition_leader_crashes(cluster):
    cluster.create_topic("t")
    producer = txn_producer(cluster, "crashy")
    producer.begin_transaction()
    producer.produce("t", value=b"one")
    producer.commit_transaction(15)
    coordinator = cluster.txn_coordinator
    state_partition = coordinator.partition_for("crashy")
    old_leader = cluster.leader(TRANSACTION_STATE_TOPIC, state_partition)
    loaded_before = coordinator.coordinator_epoch
    cluster.crash_broker(old_leader)
    cluster.wait_until(lambda: cluster.leader(TRANSACTION_STATE_TOPIC, state_partition) not in (-1, old_leader),
                       15, "a new leader of the state partition")
    meta = coordinator.describe("crashy")  # read back from the new leader's log
    assert coordinator.coordinator_epoch > loaded_before
    assert (meta.state, meta.producer_id) == (TxnState.COMPLETE_COMMIT, producer._producer_id)
    producer.begin_transaction()
    producer.produce("t", value=b"two")
    producer.commit_transaction(15)
    cluster.start_broker(old_leader)
    assert read_committed(cluster, "t") == [b"one", b"two"]
    assert [c for _o, c in control_batches(cluster, "t")] == [ControlType.COMMIT, ControlType.COMMIT]


def test_committed_offsets_survive_a_restart_between_prepare_commit_and_the_markers(tmp_path, monkeypatch):
    """EndTxn(commit) persisted PREPARE_COMMIT, then the process died before markers and group
    offsets were written: after the restart the coordinator completes the commit, offsets
    included (they travel in the PREPARE_COMMIT record, as Kafka keeps them in its log)."""
    from replication.txn_coordinator import TransactionCoordinator

    data = tmp_path / "cluster"
    tp = TopicPartition("src", 0)
    with LocalCluster(data, num_brokers=3, config=FAST) as cluster:
        cluster.create_topic("src")
        cluster.create_topic("sink")
        producer = txn_producer(cluster, "offsets")
        producer.begin_transaction()
        producer.produce("sink", value=b"out")
        producer.send_offsets_to_transaction([CTopicPartition("src", 0, 7, "meta")], ConsumerGroupMetadata("g1"), 10)
        # the "crash": nothing after PREPARE_COMMIT reaches the partitions or the group
        monkeypatch.setattr(TransactionCoordinator, "_write_markers", lambda self, meta, commit: False)
        try:
            producer.commit_transaction(1)
        except KafkaException:
            pass  # the client may time out waiting; what matters is the persisted PREPARE_COMMIT
        assert cluster.txn_coordinator.describe("offsets").state is TxnState.PREPARE_COMMIT
        assert cluster.group_coordinator.fetch_offsets("g1", [tp])[tp] is None
    monkeypatch.undo()
    with LocalCluster(data, num_brokers=3, config=FAST) as cluster:
        cluster.wait_until(lambda: cluster.txn_coordinator.describe("offsets").state is TxnState.COMPLETE_COMMIT,
                           15, "the commit completed after the restart")
        committed = cluster.group_coordinator.fetch_offsets("g1", [tp])[tp]
        assert (committed.offset, committed.metadata) == (7, "meta")
        assert read_committed(cluster, "sink") == [b"out"]
