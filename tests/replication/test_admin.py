"""The embedded AdminClient on a real LocalCluster: confluent's classes in, confluent's out."""

from __future__ import annotations

import time
import uuid

import pytest
from confluent_kafka import (
    ConsumerGroupState,
    ConsumerGroupTopicPartitions,
    IsolationLevel,
    KafkaError,
    KafkaException,
    TopicPartition,
)
from confluent_kafka.admin import (
    AlterConfigOpType,
    ClusterMetadata,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    DeletedRecords,
    ListConsumerGroupsResult,
    ListOffsetsResultInfo,
    NewPartitions,
    NewTopic,
    OffsetSpec,
)

from replication.cluster import LocalCluster
from replication.records import encode_batch

FAST = {"replica.fetch.backoff.ms": 20, "replica.socket.timeout.ms": 1000,
        "group.initial.rebalance.delay.ms": 20}


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    with LocalCluster(tmp_path_factory.mktemp("admin"), num_brokers=3, config=FAST) as c:
        yield c


@pytest.fixture
def admin(cluster):
    return cluster.admin()


def error_of(future) -> KafkaError:
    with pytest.raises(KafkaException) as raised:
        future.result(5)
    return raised.value.args[0]


def test_create_topic_with_defaults_and_configs(cluster, admin):
    topic = unique("t")
    config = {"cleanup.policy": "compact", "min.insync.replicas": "2", "segment.bytes": "1048576"}
    assert admin.create_topics([NewTopic(topic, 2, config=config)])[topic].result(5) is None
    assert cluster.replicas(topic, 0).__len__() == 3  # replication_factor -1: the broker default
    md = admin.list_topics(topic)
    assert isinstance(md, ClusterMetadata)
    partitions = md.topics[topic].partitions
    assert sorted(partitions) == [0, 1]
    assert all(len(p.replicas) == 3 and sorted(p.isrs) == sorted(p.replicas) and p.leader in p.replicas
               for p in partitions.values())
    resource = ConfigResource(ConfigResource.Type.TOPIC, topic)
    entries = admin.describe_configs([resource])[resource].result(5)
    assert {k: entries[k].value for k in config} == config
    assert entries["cleanup.policy"].source == ConfigSource.DYNAMIC_TOPIC_CONFIG
    assert entries["retention.ms"].is_default and entries["retention.ms"].value == str(7 * 24 * 3600 * 1000)
    # the partition leader enforces the topic's min.insync.replicas
    assert cluster.partition_on(cluster.leader(topic, 0), topic, 0).min_insync_replicas == 2


def test_validate_only_creates_nothing(cluster, admin):
    topic = unique("t")
    assert admin.create_topics([NewTopic(topic, 1, 1)], validate_only=True)[topic].result(5) is None
    assert topic not in admin.list_topics().topics


@pytest.mark.parametrize("new_topic, code", [
    (NewTopic("bad name", 1, 1), KafkaError.TOPIC_EXCEPTION),
    (NewTopic("ok-zero", 0, 1), KafkaError.INVALID_PARTITIONS),
    (NewTopic("ok-rf", 1, 4), KafkaError.INVALID_REPLICATION_FACTOR),
    (NewTopic("ok-rf0", 1, 0), KafkaError.INVALID_REPLICATION_FACTOR),
    (NewTopic("ok-cfg", 1, 1, config={"retention.ms": "soon"}), KafkaError.INVALID_CONFIG),
    (NewTopic("ok-unknown", 1, 1, config={"no.such.config": "1"}), KafkaError.INVALID_CONFIG),
])
def test_create_topic_errors(admin, new_topic, code):
    assert error_of(admin.create_topics([new_topic])[new_topic.topic]).code() == code


def test_create_topics_refuses_bad_arguments_locally(admin):
    with pytest.raises(ValueError, match="num_partitions"):
        admin.create_topics([NewTopic("x", -3, 1)])
    with pytest.raises(ValueError):
        admin.create_topics(["x"])


def test_create_partitions_and_delete_topics(admin):
    topic = unique("t")
    admin.create_topics([NewTopic(topic, 1, 3)])[topic].result(5)
    assert admin.create_partitions([NewPartitions(topic, 3)])[topic].result(5) is None
    assert len(admin.list_topics(topic).topics[topic].partitions) == 3
    assert error_of(admin.create_partitions([NewPartitions(topic, 2)])[topic]).code() == KafkaError.INVALID_PARTITIONS
    missing = unique("missing")
    assert error_of(admin.create_partitions([NewPartitions(missing, 2)])[missing]).code() == \
        KafkaError.UNKNOWN_TOPIC_OR_PART
    assert admin.delete_topics([topic])[topic].result(5) is None
    assert topic not in admin.list_topics().topics
    assert admin.list_topics(topic).topics[topic].error.code() == KafkaError.UNKNOWN_TOPIC_OR_PART
    assert error_of(admin.delete_topics([topic])[topic]).code() == KafkaError.UNKNOWN_TOPIC_OR_PART


def test_incremental_alter_configs_operations(cluster, admin):
    topic = unique("t")
    admin.create_topics([NewTopic(topic, 1, 3, config={"retention.ms": "1000"})])[topic].result(5)
    resource = ConfigResource(ConfigResource.Type.TOPIC, topic, incremental_configs=[
        ConfigEntry("retention.ms", None, incremental_operation=AlterConfigOpType.DELETE),
        ConfigEntry("cleanup.policy", "compact", incremental_operation=AlterConfigOpType.APPEND),
    ])
    assert admin.incremental_alter_configs([resource])[resource].result(5) is None
    assert cluster.controller.topics[topic].config == {"cleanup.policy": "compact"}
    bad = ConfigResource(ConfigResource.Type.TOPIC, topic, incremental_configs=[
        ConfigEntry("segment.bytes", "tiny", incremental_operation=AlterConfigOpType.SET)])
    assert error_of(admin.incremental_alter_configs([bad])[bad]).code() == KafkaError.INVALID_CONFIG
    assert cluster.controller.topics[topic].config == {"cleanup.policy": "compact"}  # unchanged


def test_list_offsets_delete_records(cluster, admin):
    topic = unique("t")
    admin.create_topics([NewTopic(topic, 1, 3)])[topic].result(5)
    for i, ts in enumerate([100, 300, 200, 400]):
        cluster.produce(topic, 0, encode_batch([(None, b"%d" % i, ts)]), acks=-1)
    tp = TopicPartition(topic, 0)

    def offset(spec, **kwargs) -> ListOffsetsResultInfo:
        return admin.list_offsets({tp: spec}, **kwargs)[tp].result(5)

    assert offset(OffsetSpec.earliest()).offset == 0
    assert offset(OffsetSpec.latest()).offset == 4
    assert offset(OffsetSpec.latest(), isolation_level=IsolationLevel.READ_COMMITTED).offset == 4
    assert (offset(OffsetSpec.for_timestamp(250)).offset, offset(OffsetSpec.for_timestamp(250)).timestamp) == (1, 300)
    assert offset(OffsetSpec.max_timestamp()).offset == 3
    deleted = admin.delete_records([TopicPartition(topic, 0, 2)])[TopicPartition(topic, 0, 2)].result(5)
    assert isinstance(deleted, DeletedRecords) and deleted.low_watermark == 2
    assert offset(OffsetSpec.earliest()).offset == 2
    beyond = TopicPartition(topic, 0, 99)
    assert error_of(admin.delete_records([beyond])[beyond]).code() == KafkaError.OFFSET_OUT_OF_RANGE
    missing = TopicPartition(unique("missing"), 0)
    assert error_of(admin.list_offsets({missing: OffsetSpec.latest()})[missing]).code() == \
        KafkaError.UNKNOWN_TOPIC_OR_PART


def test_delete_records_needs_the_delete_cleanup_policy(cluster, admin):
    """Kafka refuses DeleteRecords on a compact-only topic with POLICY_VIOLATION."""
    compact, both = unique("compact"), unique("both")
    for topic, policy in ((compact, "compact"), (both, "compact,delete")):
        admin.create_topics([NewTopic(topic, 1, 3, config={"cleanup.policy": policy})])[topic].result(5)
        for i in range(4):
            cluster.produce(topic, 0, encode_batch([(b"k%d" % i, b"v", 100 + i)]), acks=-1)
    refused = TopicPartition(compact, 0, 2)
    error = error_of(admin.delete_records([refused])[refused])
    assert error.code() == KafkaError.POLICY_VIOLATION
    assert f"Records of partition {compact}-0 can not be deleted due to the configured policy" in error.str()
    assert admin.list_offsets({TopicPartition(compact, 0): OffsetSpec.earliest()})[
        TopicPartition(compact, 0)].result(5).offset == 0  # nothing was deleted
    accepted = TopicPartition(both, 0, 2)
    assert admin.delete_records([accepted])[accepted].result(5).low_watermark == 2


def test_consumer_group_admin(cluster, admin):
    topic = unique("t")
    admin.create_topics([NewTopic(topic, 2, 3)])[topic].result(5)
    group = unique("g")
    altered = admin.alter_consumer_group_offsets(
        [ConsumerGroupTopicPartitions(group, [TopicPartition(topic, 0, 5, "meta")])])[group].result(5)
    assert [(tp.partition, tp.offset, tp.metadata) for tp in altered.topic_partitions] == [(0, 5, "meta")]
    listed = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)])[group].result(5)
    assert [(tp.topic, tp.partition, tp.offset, tp.metadata) for tp in listed.topic_partitions] == [
        (topic, 0, 5, "meta")]

    consumer = cluster.consumer({"group.id": group, "session.timeout.ms": 3000, "heartbeat.interval.ms": 100})
    consumer.subscribe([topic])
    deadline = time.monotonic() + 15
    while not consumer.assignment() and time.monotonic() < deadline:
        consumer.poll(0.05)
    description = admin.describe_consumer_groups([group])[group].result(5)
    assert description.state == ConsumerGroupState.STABLE
    assert sorted(tp.partition for m in description.members for tp in m.assignment.topic_partitions) == [0, 1]
    listing = admin.list_consumer_groups().result(5)
    assert isinstance(listing, ListConsumerGroupsResult)
    assert group in {g.group_id for g in listing.valid}
    # an active group can neither be altered nor deleted
    busy = admin.alter_consumer_group_offsets([ConsumerGroupTopicPartitions(group, [TopicPartition(topic, 0, 1)])])
    assert error_of(busy[group]).code() == KafkaError.UNKNOWN_MEMBER_ID
    assert error_of(admin.delete_consumer_groups([group])[group]).code() == KafkaError.NON_EMPTY_GROUP
    consumer.close()
    assert admin.delete_consumer_groups([group])[group].result(5) is None
    assert error_of(admin.delete_consumer_groups([group])[group]).code() == KafkaError.GROUP_ID_NOT_FOUND
    gone = admin.describe_consumer_groups([group])[group].result(5)
    assert gone.state == ConsumerGroupState.DEAD
