"""unclean.leader.election.enable: off by default (an offline partition waits for its last
in-sync replica), on per topic (an out-of-sync replica leads and the records only the old
leader had are lost; the old leader truncates when it comes back)."""

from __future__ import annotations

from replication.cluster import LocalCluster
from replication.protocol import Errors, TopicPartition

from test_cluster import FAST, batch, records_on


def test_offline_partition_waits_for_its_isr_until_unclean_election_is_enabled_on_the_topic(tmp_path):
    with LocalCluster(tmp_path / "c", num_brokers=3, config=FAST) as cluster:
        cluster.create_topic("t", partitions=1, replication_factor=3)
        cluster.wait_until(lambda: cluster.leader("t", 0) >= 0, 15, "a leader")
        assert cluster.produce("t", 0, batch(b"replicated"), acks=-1).error is Errors.NONE
        leader = cluster.leader("t", 0)
        followers = [b for b in range(3) if b != leader]
        for b in followers:
            cluster.stop_broker(b)
        assert cluster.controller.partition_state(TopicPartition("t", 0)).isr == [leader]
        assert cluster.produce("t", 0, batch(b"only-on-the-leader"), acks=1).error is Errors.NONE
        cluster.stop_broker(leader)
        cluster.start_broker(followers[0])
        # clean elections only: the partition stays offline rather than lose acknowledged data
        assert cluster.leader("t", 0) == -1
        epoch = cluster.controller.partition_state(TopicPartition("t", 0)).leader_epoch

        cluster.controller.alter_topic_config("t", {"unclean.leader.election.enable": "true"})
        state = cluster.controller.partition_state(TopicPartition("t", 0))
        assert (state.leader, state.isr) == (followers[0], [followers[0]]) and state.leader_epoch > epoch
        assert cluster.produce("t", 0, batch(b"after"), acks=1).error is Errors.NONE

        cluster.start_broker(leader)  # the old leader follows: its extra record is truncated away
        cluster.wait_until(lambda: [v for _, v in records_on(cluster, leader)] == [b"replicated", b"after"],
                           15, "the old leader to truncate and catch up")
        assert [v for _, v in records_on(cluster, followers[0])] == [b"replicated", b"after"]
