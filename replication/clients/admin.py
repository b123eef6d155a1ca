"""The embedded cluster's admin client, with `confluent_kafka.admin.AdminClient`'s API.

Every call returns what confluent-kafka returns (dicts of `concurrent.futures.Future`, or one
future), takes confluent's own request classes (`NewTopic`, `NewPartitions`,
`ConfigResource`, `TopicPartition`, `ConsumerGroupTopicPartitions`, `OffsetSpec`) and
resolves futures with confluent's result classes, so user code cannot tell the backends apart.
Requests are validated with AdminClient's own checks; broker-side failures are set on the
future as ``KafkaException(KafkaError(<code>))`` with Kafka's error codes. The work happens
in the calling thread against the in-process controller, so futures are done on return.
"""

from __future__ import annotations

import concurrent.futures
import logging
from typing import Any, Callable

from confluent_kafka import (
    ConsumerGroupState,
    ConsumerGroupTopicPartitions,
    ConsumerGroupType,
    IsolationLevel as ConfluentIsolationLevel,
    KafkaError,
    KafkaException,
    Node,
    TopicPartition,
)
from confluent_kafka.admin import (
    AdminClient as _ConfluentAdmin,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    ConsumerGroupDescription,
    ConsumerGroupListing,
    DeletedRecords,
    ListConsumerGroupsResult,
    ListOffsetsResultInfo,
    MemberAssignment,
    MemberDescription,
    NewPartitions,
    NewTopic,
    OffsetSpec,
)

from replication.clients.common import (
    ClientConfig,
    ClientConfigError,
    Metadata,
    call_leader,
    check_bootstrap,
    cluster_metadata,
    kafka_error,
    make_topic_partition,
)
from replication.errors import (
    ClusterError,
    NotLeaderError,
    InvalidConfigurationError,
    InvalidTopicError,
    OffsetOutOfRangeError,
    ReplicationError,
)
from replication.group_coordinator import GroupCoordinatorError, OffsetAndMetadata
from replication.log import LogConfig
from replication.names import validate_topic_name
from replication.protocol import Errors, IsolationLevel, ListOffsetsPartition, ListOffsetsRequest
from replication.protocol import TopicPartition as TP

log = logging.getLogger(__name__)

# Topic configs that are not log configs but that Kafka accepts on a topic.
_EXTRA_TOPIC_CONFIGS = frozenset({
    "message.downconversion.enable", "preallocate", "follower.replication.throttled.replicas",
    "leader.replication.throttled.replicas", "message.timestamp.difference.max.ms",
    "message.timestamp.before.max.ms", "message.timestamp.after.max.ms", "local.retention.ms",
    "local.retention.bytes", "remote.storage.enable", "message.format.version",
})

_STATES = {
    "Empty": ConsumerGroupState.EMPTY, "Stable": ConsumerGroupState.STABLE,
    "PreparingRebalance": ConsumerGroupState.PREPARING_REBALANCING,
    "CompletingRebalance": ConsumerGroupState.COMPLETING_REBALANCING, "Dead": ConsumerGroupState.DEAD,
}


def _done(value: Any = None) -> concurrent.futures.Future:
    future: concurrent.futures.Future = concurrent.futures.Future()
    future.set_result(value)
    return future


def _failed(code: int, reason: str) -> concurrent.futures.Future:
    future: concurrent.futures.Future = concurrent.futures.Future()
    future.set_exception(KafkaException(kafka_error(code, reason)))
    return future


def _run(fn: Callable[[], Any]) -> concurrent.futures.Future:
    """Run `fn` now; a `KafkaException` it raises is set on the future."""
    try:
        return _done(fn())
    except KafkaException as e:
        future: concurrent.futures.Future = concurrent.futures.Future()
        future.set_exception(e)
        return future


def _raise(code: int, reason: str) -> None:
    raise KafkaException(kafka_error(code, reason))


class AdminClient:
    """An admin client of the embedded cluster with confluent_kafka.admin.AdminClient's API."""

    def __init__(self, conf: dict | None = None, *, cluster: Any = None, **kwargs: Any) -> None:
        merged = dict(conf or {})
        merged.update(kwargs)
        if cluster is None:
            raise ClientConfigError("replication.clients.AdminClient needs the embedded cluster: use "
                                    "LocalCluster.admin(conf) or streams.backends.for_config(...)")
        self._config = ClientConfig(merged, "admin")
        check_bootstrap(self._config, cluster)
        self._cluster = cluster
        self._metadata = Metadata(cluster)

    @property
    def _controller(self):
        return self._metadata.controller

    def poll(self, timeout: float = -1) -> int:
        return 0

    def __len__(self) -> int:
        return 0

    # -- topics -------------------------------------------------------------------------------

    def list_topics(self, topic: str | None = None, timeout: float = -1, **kwargs: Any) -> Any:
        return cluster_metadata(self._cluster, topic)

    def _default_replication_factor(self) -> int:
        rf = int(self._cluster.config.get("default.replication.factor", 3))
        return max(1, min(rf, len(self._controller.broker_ids)))

    def create_topics(self, new_topics: list[NewTopic], validate_only: bool = False,
                      operation_timeout: float = 0, request_timeout: float = 0, **kwargs: Any
                      ) -> dict[str, concurrent.futures.Future]:
        if not isinstance(new_topics, list) or not new_topics:
            raise ValueError("Expected non-empty list of NewTopic objects")
        for nt in new_topics:
            if not isinstance(nt, NewTopic):
                raise ValueError(f"Expected list of {NewTopic!r}")
            if nt.num_partitions < -1:
                raise ValueError(f"num_partitions must be -1 (broker default) or >= 1, got {nt.num_partitions}")
            if nt.replication_factor < -1:
                raise ValueError(f"replication_factor must be -1 (broker default) or >= 1, "
                                 f"got {nt.replication_factor}")
        return {nt.topic: _run(lambda nt=nt: self._create_topic(nt, validate_only)) for nt in new_topics}

    def _validate_topic_config(self, config: dict[str, str]) -> None:
        log_keys = {k: v for k, v in config.items() if k not in _EXTRA_TOPIC_CONFIGS}
        try:
            LogConfig.from_dict(log_keys, strict=True)
        except InvalidConfigurationError as e:
            _raise(KafkaError.INVALID_CONFIG, str(e))

    def _create_topic(self, nt: NewTopic, validate_only: bool) -> None:
        name = nt.topic
        try:
            validate_topic_name(name)
        except (InvalidTopicError, ReplicationError) as e:
            _raise(KafkaError.TOPIC_EXCEPTION, str(e))
        partitions = nt.num_partitions
        if partitions == -1:
            partitions = int(self._cluster.config.get("num.partitions", 1))
        if partitions < 1:
            _raise(KafkaError.INVALID_PARTITIONS, f"Number of partitions must be larger than 0, got {partitions}")
        rf = nt.replication_factor
        if rf == -1:
            rf = self._default_replication_factor()
        brokers = len(self._controller.broker_ids)
        if nt.replica_assignment:
            _raise(KafkaError.INVALID_REQUEST, "manual replica assignment is not supported by the embedded cluster")
        if not 1 <= rf <= brokers:
            _raise(KafkaError.INVALID_REPLICATION_FACTOR,
                   f"Replication factor: {rf} larger than available brokers: {brokers}" if rf > brokers
                   else f"Replication factor must be larger than 0, got {rf}")
        config = {str(k): str(v) for k, v in (nt.config or {}).items()}
        self._validate_topic_config(config)
        if name in self._controller.topics:
            _raise(KafkaError.TOPIC_ALREADY_EXISTS, f"Topic '{name}' already exists.")
        if validate_only:
            return None
        try:
            self._controller.create_topic(name, partitions, rf, config, internal=name.startswith("__"))
        except InvalidTopicError as e:
            _raise(KafkaError.TOPIC_EXCEPTION, str(e))
        except ClusterError as e:
            if "already exists" in str(e):
                _raise(KafkaError.TOPIC_ALREADY_EXISTS, f"Topic '{name}' already exists.")
            _raise(KafkaError.INVALID_REQUEST, str(e))
        return None

    def delete_topics(self, topics: list[str], operation_timeout: float = 0, request_timeout: float = 0,
                      **kwargs: Any) -> dict[str, concurrent.futures.Future]:
        if not isinstance(topics, list) or not topics:
            raise ValueError("Expected non-empty list of topic strings")
        for topic in topics:
            if not isinstance(topic, str):
                raise ValueError("Expected list of topic strings")
        return {t: _run(lambda t=t: self._delete_topic(t)) for t in topics}

    def _delete_topic(self, topic: str) -> None:
        if topic not in self._controller.topics:
            _raise(KafkaError.UNKNOWN_TOPIC_OR_PART, "Broker: Unknown topic or partition")
        try:
            self._controller.delete_topic(topic)
        except (InvalidTopicError, ClusterError):
            _raise(KafkaError.UNKNOWN_TOPIC_OR_PART, "Broker: Unknown topic or partition")

    def create_partitions(self, new_partitions: list[NewPartitions], validate_only: bool = False,
                          operation_timeout: float = 0, request_timeout: float = 0, **kwargs: Any
                          ) -> dict[str, concurrent.futures.Future]:
        if not isinstance(new_partitions, list) or not new_partitions:
            raise ValueError("Expected non-empty list of NewPartitions objects")
        for np_ in new_partitions:
            if not isinstance(np_, NewPartitions):
                raise ValueError(f"Expected list of {NewPartitions!r}")
        return {np_.topic: _run(lambda np_=np_: self._create_partitions(np_, validate_only))
                for np_ in new_partitions}

    def _create_partitions(self, np_: NewPartitions, validate_only: bool) -> None:
        current = self._metadata.partition_count(np_.topic)
        if current is None:
            _raise(KafkaError.UNKNOWN_TOPIC_OR_PART, "Broker: Unknown topic or partition")
        if np_.new_total_count <= current:
            _raise(KafkaError.INVALID_PARTITIONS,
                   f"Topic currently has {current} partitions, which is higher than or equal to the "
                   f"requested {np_.new_total_count}.")
        if validate_only:
            return None
        self._controller.create_partitions(np_.topic, np_.new_total_count)
        return None

    # -- configs ------------------------------------------------------------------------------

    def describe_configs(self, resources: list[ConfigResource], request_timeout: float = 0, **kwargs: Any
                         ) -> dict[ConfigResource, concurrent.futures.Future]:
        if not isinstance(resources, list) or not resources:
            raise ValueError("Expected non-empty list of ConfigResource objects")
        for r in resources:
            if not isinstance(r, ConfigResource):
                raise ValueError(f"Expected list of {ConfigResource!r}")
        return {r: _run(lambda r=r: self._describe(r)) for r in resources}

    def _describe(self, resource: ConfigResource) -> dict[str, ConfigEntry]:
        rtype = resource.restype
        if rtype == ConfigResource.Type.TOPIC:
            topic = self._controller.topics.get(resource.name)
            if topic is None:
                _raise(KafkaError.UNKNOWN_TOPIC_OR_PART, "Broker: Unknown topic or partition")
            broker_defaults = {k: v for k, v in self._cluster.config.items() if "." in k}
            defaults = LogConfig.from_dict(broker_defaults).to_dict()
            out: dict[str, ConfigEntry] = {}
            for name, value in defaults.items():
                out[name] = ConfigEntry(name, _config_str(value), source=ConfigSource.DEFAULT_CONFIG,
                                        is_default=True)
            for name, value in topic.config.items():
                out[name] = ConfigEntry(name, str(value), source=ConfigSource.DYNAMIC_TOPIC_CONFIG)
            return out
        if rtype == ConfigResource.Type.BROKER:
            try:
                broker = int(resource.name)
            except ValueError:
                _raise(KafkaError.INVALID_REQUEST, f"invalid broker id {resource.name!r}")
            if broker not in self._controller.broker_ids:
                _raise(KafkaError.BROKER_NOT_AVAILABLE, f"unknown broker {broker}")
            return {k: ConfigEntry(k, _config_str(v), source=ConfigSource.STATIC_BROKER_CONFIG)
                    for k, v in self._cluster.config.items()}
        _raise(KafkaError.INVALID_REQUEST, f"describe_configs of {rtype} resources is not supported")

    def incremental_alter_configs(self, resources: list[ConfigResource], validate_only: bool = False,
                                  request_timeout: float = 0, **kwargs: Any
                                  ) -> dict[ConfigResource, concurrent.futures.Future]:
        if not isinstance(resources, list) or not resources:
            raise ValueError("Expected non-empty list of ConfigResource objects")
        for r in resources:
            if not isinstance(r, ConfigResource):
                raise ValueError(f"Expected list of {ConfigResource!r}")
        return {r: _run(lambda r=r: self._alter(r, validate_only)) for r in resources}

    def _alter(self, resource: ConfigResource, validate_only: bool) -> None:
        if resource.restype != ConfigResource.Type.TOPIC:
            _raise(KafkaError.INVALID_REQUEST, "only topic configs can be altered on the embedded cluster")
        topic = self._controller.topics.get(resource.name)
        if topic is None:
            _raise(KafkaError.UNKNOWN_TOPIC_OR_PART, "Broker: Unknown topic or partition")
        current = dict(topic.config)
        changes: dict[str, str | None] = {}
        for entry in resource.incremental_configs or []:
            op = entry.incremental_operation
            name = entry.name
            if op == AlterConfigOpType.SET:
                changes[name] = str(entry.value)
            elif op == AlterConfigOpType.DELETE:
                changes[name] = None
            elif op in (AlterConfigOpType.APPEND, AlterConfigOpType.SUBTRACT):
                items = [x for x in (current.get(name) or "").split(",") if x]
                for value in str(entry.value).split(","):
                    if op == AlterConfigOpType.APPEND and value not in items:
                        items.append(value)
                    elif op == AlterConfigOpType.SUBTRACT and value in items:
                        items.remove(value)
                changes[name] = ",".join(items) if items else None
            else:
                _raise(KafkaError.INVALID_REQUEST, f"unsupported operation {op} for {name}")
        merged = {k: v for k, v in {**current, **changes}.items() if v is not None}
        self._validate_topic_config(merged)
        if not validate_only:
            self._controller.alter_topic_config(resource.name, changes)
        return None

    # -- records and offsets -----------------------------------------------------------------------

    def delete_records(self, topic_partition_offsets: list[TopicPartition], request_timeout: float = 0,
                       operation_timeout: float = 0, **kwargs: Any) -> dict[TopicPartition, concurrent.futures.Future]:
        _ConfluentAdmin._check_delete_records(topic_partition_offsets)
        return {tp: _run(lambda tp=tp: self._delete_records(tp)) for tp in topic_partition_offsets}

    def _delete_records(self, tp: TopicPartition) -> DeletedRecords:
        key = TP(tp.topic, tp.partition)
        count = self._metadata.partition_count(tp.topic)
        if count is None or not 0 <= tp.partition < count:
            _raise(KafkaError.UNKNOWN_TOPIC_OR_PART, "Broker: Unknown topic or partition")
        leader, _ = self._metadata.leader(key)
        if leader < 0:
            _raise(KafkaError.LEADER_NOT_AVAILABLE, "Broker: Leader not available")
        try:
            partition = self._cluster.partition_on(leader, tp.topic, tp.partition)
            if not partition.log.config.delete:
                # Kafka refuses DeleteRecords unless the topic's cleanup.policy includes delete.
                _raise(KafkaError.POLICY_VIOLATION, f"Records of partition {tp.topic}-{tp.partition} can not be "
                       "deleted due to the configured policy")
            low = partition.delete_records(tp.offset)
        except OffsetOutOfRangeError as e:
            _raise(KafkaError.OFFSET_OUT_OF_RANGE, str(e))
        except (ClusterError, NotLeaderError):
            _raise(KafkaError.NOT_LEADER_FOR_PARTITION, "Broker: Not leader for partition")
        return DeletedRecords(low)

    def list_offsets(self, topic_partition_offsets: dict[TopicPartition, OffsetSpec], **kwargs: Any
                     ) -> dict[TopicPartition, concurrent.futures.Future]:
        _ConfluentAdmin._check_list_offsets_request(topic_partition_offsets, kwargs)
        isolation = kwargs.get("isolation_level", ConfluentIsolationLevel.READ_UNCOMMITTED)
        level = (IsolationLevel.TXN_COMMITTED if isolation == ConfluentIsolationLevel.READ_COMMITTED
                 else IsolationLevel.HIGH_WATERMARK)
        timeout = kwargs.get("request_timeout") or 30.0
        return {tp: _run(lambda tp=tp, spec=spec: self._list_offset(tp, spec, level, timeout))
                for tp, spec in topic_partition_offsets.items()}

    def _list_offset(self, tp: TopicPartition, spec: OffsetSpec, level: IsolationLevel,
                     timeout: float) -> ListOffsetsResultInfo:
        key = TP(tp.topic, tp.partition)
        value = int(spec._value)
        error, resp = call_leader(
            self._cluster, key, lambda leader, epoch: ListOffsetsRequest(-1, level, [ListOffsetsPartition(key, value, epoch)]),
            lambda r: (r[key].error, r[key]), timeout)
        if error != Errors.NONE:
            _raise(int(error) if error != Errors.REQUEST_TIMED_OUT else KafkaError._TIMED_OUT,
                   f"ListOffsets failed: {Errors(error).name}")
        epoch = resp.leader_epoch if resp.leader_epoch >= 0 else None
        return ListOffsetsResultInfo(resp.offset, resp.timestamp, epoch)

    # -- consumer groups ----------------------------------------------------------------------------

    @property
    def _groups(self):
        return self._cluster.group_coordinator

    def list_consumer_group_offsets(self, list_consumer_group_offsets_request: list[ConsumerGroupTopicPartitions],
                                    **kwargs: Any) -> dict[str, concurrent.futures.Future]:
        _ConfluentAdmin._check_list_consumer_group_offsets_request(list_consumer_group_offsets_request)
        return {r.group_id: _run(lambda r=r: self._list_group_offsets(r)) for r in list_consumer_group_offsets_request}

    def _list_group_offsets(self, request: ConsumerGroupTopicPartitions) -> ConsumerGroupTopicPartitions:
        wanted = None
        if request.topic_partitions:
            wanted = [TP(tp.topic, tp.partition) for tp in request.topic_partitions]
        try:
            stored = self._groups.fetch_offsets(request.group_id, wanted)
        except (GroupCoordinatorError, ReplicationError) as e:
            _raise(KafkaError.COORDINATOR_NOT_AVAILABLE, str(e))
        out = []
        for key, om in stored.items():
            if om is None:
                out.append(TopicPartition(key.topic, key.partition, -1001))
            else:
                out.append(make_topic_partition(key.topic, key.partition, om.offset, om.metadata, om.leader_epoch))
        return ConsumerGroupTopicPartitions(request.group_id, out)

    def alter_consumer_group_offsets(self, alter_consumer_group_offsets_request: list[ConsumerGroupTopicPartitions],
                                     **kwargs: Any) -> dict[str, concurrent.futures.Future]:
        _ConfluentAdmin._check_alter_consumer_group_offsets_request(alter_consumer_group_offsets_request)
        return {r.group_id: _run(lambda r=r: self._alter_group_offsets(r))
                for r in alter_consumer_group_offsets_request}

    def _alter_group_offsets(self, request: ConsumerGroupTopicPartitions) -> ConsumerGroupTopicPartitions:
        offsets = {TP(tp.topic, tp.partition): OffsetAndMetadata(
            tp.offset, tp.metadata, tp.leader_epoch if tp.leader_epoch is not None else -1)
            for tp in request.topic_partitions}
        error = self._groups.alter_offsets(request.group_id, offsets)
        if error != Errors.NONE:
            _raise(int(error), f"AlterConsumerGroupOffsets of group {request.group_id!r} failed (error {error})")
        return ConsumerGroupTopicPartitions(
            request.group_id, [make_topic_partition(k.topic, k.partition, om.offset, om.metadata)
                               for k, om in offsets.items()])

    def delete_consumer_groups(self, group_ids: list[str], request_timeout: float = 0, **kwargs: Any
                               ) -> dict[str, concurrent.futures.Future]:
        if not isinstance(group_ids, list):
            raise TypeError("Expected input to be list of group ids to delete")
        if not group_ids:
            raise ValueError("Expected at least one group to be deleted")
        return {g: _run(lambda g=g: self._delete_group(g)) for g in group_ids}

    def _delete_group(self, group_id: str) -> None:
        error = self._groups.delete_group(group_id)
        if error != Errors.NONE:
            reason = {KafkaError.GROUP_ID_NOT_FOUND: "Broker: The group id does not exist",
                      KafkaError.NON_EMPTY_GROUP: "Broker: The group is not empty"}.get(int(error), f"error {error}")
            _raise(int(error), reason)
        return None

    def describe_consumer_groups(self, group_ids: list[str], include_authorized_operations: bool = False,
                                 request_timeout: float = 0, **kwargs: Any) -> dict[str, concurrent.futures.Future]:
        if not isinstance(group_ids, list):
            raise TypeError("Expected input to be list of group ids to describe")
        if not group_ids:
            raise ValueError("Expected at least one group to be described")
        return {g: _run(lambda g=g: self._describe_group(g)) for g in group_ids}

    def _coordinator_node(self) -> Node:
        live = sorted(self._controller.live_brokers)
        b = live[0] if live else 0
        return Node(b, "localhost", 9092 + b)

    def _describe_group(self, group_id: str) -> ConsumerGroupDescription:
        desc = self._groups.describe_group(group_id)
        node = self._coordinator_node()
        if desc is None:
            return ConsumerGroupDescription(group_id, False, [], "", ConsumerGroupState.DEAD, node,
                                            type=ConsumerGroupType.CLASSIC)
        members = [MemberDescription(m.member_id, m.client_id, m.host, MemberAssignment(
            [TopicPartition(tp.topic, tp.partition) for tp in m.assignment]), group_instance_id=m.group_instance_id)
            for m in desc.members]
        return ConsumerGroupDescription(group_id, False, members, desc.protocol,
                                        _STATES.get(desc.state, ConsumerGroupState.UNKNOWN), node,
                                        type=ConsumerGroupType.CLASSIC)

    def list_consumer_groups(self, request_timeout: float = 0, states: set | None = None, types: set | None = None,
                             **kwargs: Any) -> concurrent.futures.Future:
        def run() -> ListConsumerGroupsResult:
            listings = []
            for desc in self._groups.list_groups():
                state = _STATES.get(desc.state, ConsumerGroupState.UNKNOWN)
                if states and state not in states:
                    continue
                listings.append(ConsumerGroupListing(desc.group_id, not desc.members and not desc.protocol,
                                                     state, ConsumerGroupType.CLASSIC))
            return ListConsumerGroupsResult(valid=listings, errors=[])
        return _run(run)


def _config_str(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (tuple, list)):
        return ",".join(str(v) for v in value)
    return str(value)
