"""A compacted topic refuses records without a key (Kafka's LogValidator.validateKey).

Kafka checks every record of a leader append when the topic's cleanup.policy holds
``compact`` (``compact`` and ``compact,delete``): a record with a null key fails its batch as a
whole with INVALID_RECORD, and the produce answer lists the failed records by their index in
the batch (KIP-467 record errors). Nothing of the batch is written and the log is unchanged.
Follower appends are not validated (Kafka's appendAsFollower skips the LogValidator): what the
leader has, the followers take.
"""

from __future__ import annotations

import pytest

from replication.cluster import LocalCluster
from replication.errors import RecordValidationError
from replication.log import Log
from replication.protocol import Errors, ProduceRequest, TopicPartition
from replication.records import encode_batch

TS = 1_000


@pytest.fixture
def open_log(tmp_path):
    """Opens the log ``topic-0`` with a cleanup.policy (closed after the test)."""
    opened = []

    def open_with(policy: str = "compact") -> Log:
        opened.append(Log(tmp_path / "topic-0", {"cleanup.policy": policy}))
        return opened[-1]

    yield open_with
    for log in opened:
        log.close()


def _read(log: Log) -> list[tuple[int, bytes | None, bytes | None]]:
    out = []
    offset = log.log_start_offset
    while offset < log.log_end_offset:
        records = log.read(offset, 1 << 20, log.log_end_offset).records()
        out.extend((r.offset, r.key, r.value) for r in records)
        offset = records[-1].offset + 1
    return out


@pytest.mark.parametrize("policy", ["compact", "compact,delete"])
def test_leader_append_refuses_the_whole_batch_naming_every_null_key(open_log, policy) -> None:
    log = open_log(policy)
    log.append_as_leader(encode_batch([(b"a", b"1", TS), (b"b", b"2", TS)]), 0)
    epochs_before = log.leader_epoch_cache.entries()
    bad = encode_batch([(b"c", b"3", TS), (None, b"x", TS), (b"d", b"4", TS), (None, None, TS)])
    with pytest.raises(RecordValidationError) as info:
        log.append_as_leader(bad, 1)
    # Records #1 and #3 of the batch have no key: both are named, #0 and #2 are not.
    assert [index for index, _ in info.value.record_errors] == [1, 3]
    for _, message in info.value.record_errors:
        assert message == "Compacted topic cannot accept message without key in topic partition topic-0"
    assert "2 record errors" in str(info.value)
    # Nothing of the refused batch was written, not even its leader epoch.
    assert log.log_end_offset == 2
    assert log.leader_epoch_cache.entries() == epochs_before
    log.append_as_leader(encode_batch([(b"e", b"5", TS)]), 1)
    assert _read(log) == [(0, b"a", b"1"), (1, b"b", b"2"), (2, b"e", b"5")]


def test_a_later_batch_of_the_same_append_is_checked_too(open_log) -> None:
    log = open_log()
    two = encode_batch([(b"a", b"1", TS)]) + encode_batch([(b"b", b"2", TS), (None, b"3", TS)])
    with pytest.raises(RecordValidationError) as info:
        log.append_as_leader(two, 0)
    # The index is the record's place in its own batch (Kafka appends one batch per request).
    assert [index for index, _ in info.value.record_errors] == [1]
    assert log.log_end_offset == 0


def test_a_deleting_topic_takes_null_keys_and_a_policy_change_applies_to_the_next_append(open_log) -> None:
    log = open_log("delete")
    log.append_as_leader(encode_batch([(None, b"1", TS)]), 0)
    log.update_config({"cleanup.policy": "compact"})
    with pytest.raises(RecordValidationError):
        log.append_as_leader(encode_batch([(None, b"2", TS)]), 0)
    assert _read(log) == [(0, None, b"1")]


def test_follower_appends_are_not_validated(open_log) -> None:
    # A null key written while the topic was not compacted reaches a follower as it is.
    log = open_log()
    log.append_as_follower(encode_batch([(None, b"old", TS)], base_offset=0, partition_leader_epoch=0))
    assert _read(log) == [(0, None, b"old")]


def test_an_idempotent_batch_refused_for_its_key_leaves_its_sequence_free(open_log) -> None:
    log = open_log()
    pid = dict(producer_id=7, producer_epoch=0)
    log.append_as_leader(encode_batch([(b"a", b"1", TS)], base_sequence=0, **pid), 0)
    with pytest.raises(RecordValidationError):
        log.append_as_leader(encode_batch([(None, b"x", TS)], base_sequence=1, **pid), 0)
    # The refused batch did not take sequence 1: the producer's next batch reuses it.
    info = log.append_as_leader(encode_batch([(b"b", b"2", TS)], base_sequence=1, **pid), 0)
    assert (info.first_offset, info.last_offset) == (1, 1)


FAST = {"replica.fetch.backoff.ms": 20, "replica.socket.timeout.ms": 1000}


def test_produce_answers_invalid_record_with_record_errors_and_replicas_stay_identical(tmp_path) -> None:
    with LocalCluster(tmp_path / "cluster", num_brokers=3, config=FAST) as cluster:
        cluster.create_topic("kv", partitions=1, replication_factor=3, config={"cleanup.policy": "compact"})
        ok = cluster.produce("kv", 0, encode_batch([(b"a", b"1", TS), (b"b", b"2", TS)]))
        assert ok.error is Errors.NONE and ok.base_offset == 0
        leader = cluster.leader("kv", 0)
        tp = TopicPartition("kv", 0)
        refused = cluster.request(leader, ProduceRequest(-1, 5000, {tp: encode_batch(
            [(b"c", b"3", TS), (None, b"x", TS)])}))[tp]
        assert refused.error == Errors.INVALID_RECORD
        assert [index for index, _ in refused.record_errors] == [1]
        assert refused.base_offset == -1
        assert "Compacted topic cannot accept message without key in topic partition kv-0" in refused.error_message
        # The partition goes on from where it was: the refused batch took no offsets.
        after = cluster.produce("kv", 0, encode_batch([(b"d", b"4", TS)]))
        assert after.error is Errors.NONE and after.base_offset == 2
        cluster.wait_until(lambda: all(cluster.log_end_offset(b, "kv", 0) == 3 for b in range(3))
                           and cluster.high_watermark("kv", 0) == 3, 20, "kv-0 replicated")
        expected = [(0, b"a", b"1"), (1, b"b", b"2"), (2, b"d", b"4")]
        for broker in range(3):
            assert _read(cluster.partition_on(broker, "kv", 0).log) == expected
