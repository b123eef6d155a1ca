"""ListOffsets naming a partition more than once (Kafka's ListOffsetsRequest.duplicatePartitions).

Kafka answers each partition named twice or more with INVALID_REQUEST, once, and answers the
other partitions of the same request as usual. No embedded client sends such a request
(clients ask once per partition, see tests/clients/test_clients_positions.py), but the broker
must refuse it as Kafka does rather than answer one of the timestamps.
"""

from __future__ import annotations

from replication.cluster import LocalCluster
from replication.protocol import (
    EARLIEST_TIMESTAMP,
    LATEST_TIMESTAMP,
    Errors,
    IsolationLevel,
    ListOffsetsPartition,
    ListOffsetsRequest,
    TopicPartition,
)
from replication.records import encode_batch


def test_a_partition_named_twice_is_an_invalid_request_and_the_others_are_answered(tmp_path) -> None:
    with LocalCluster(tmp_path / "cluster", num_brokers=1) as cluster:
        cluster.create_topic("t", partitions=2, replication_factor=1)
        for partition, count in ((0, 3), (1, 2)):
            batch = encode_batch([(b"k", b"v", 1000 + i) for i in range(count)])
            assert cluster.produce("t", partition, batch).error is Errors.NONE
        t0, t1 = TopicPartition("t", 0), TopicPartition("t", 1)

        def list_offsets(*partitions: ListOffsetsPartition) -> dict:
            return cluster.request(0, ListOffsetsRequest(-1, IsolationLevel.HIGH_WATERMARK, list(partitions)))

        answer = list_offsets(ListOffsetsPartition(t0, LATEST_TIMESTAMP), ListOffsetsPartition(t1, LATEST_TIMESTAMP),
                              ListOffsetsPartition(t0, EARLIEST_TIMESTAMP))
        assert set(answer) == {t0, t1}
        assert answer[t0].error == Errors.INVALID_REQUEST and answer[t0].offset == -1
        # t1 is named once: its end offset (two records) as usual
        assert (answer[t1].error, answer[t1].offset) == (Errors.NONE, 2)
        # The same timestamp twice is a duplicate too.
        answer = list_offsets(ListOffsetsPartition(t1, 1001), ListOffsetsPartition(t1, 1001))
        assert answer[t1].error == Errors.INVALID_REQUEST
        # Named once, the partition is answered (the first record at or after 1001 is offset 1).
        answer = list_offsets(ListOffsetsPartition(t0, 1001))
        assert (answer[t0].error, answer[t0].offset, answer[t0].timestamp) == (Errors.NONE, 1, 1001)
