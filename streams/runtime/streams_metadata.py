"""Which instance of an application holds which store partition, for routing interactive queries
(Kafka's StreamsMetadata, KeyQueryMetadata and HostInfo; KafkaStreams.metadataForAllStreamsClients,
streamsMetadataForStore and queryMetadataForKey).

Each instance names its endpoint in `application.server` ("host:port", where it answers queries:
the application's own server, Eddy does not serve them). Kafka Streams passes endpoints in its
group assignor's user data; confluent-kafka cannot plug in an assignor, so the endpoint goes in
the stream threads' consumer client ids (`endpoint_client_suffix`) and every instance reads the
group's membership (DescribeConsumerGroups: each member's client id and assigned partitions), as
standby placement does (`standby_placement`). An instance's active partitions are its members'
assignments; its standbys are the ones standby placement gives its process, computed the same
way by every instance. Instances without an endpoint do not appear (as in Kafka)."""

from __future__ import annotations

from typing import Any, Iterable, NamedTuple, Optional

from state.task_id import TaskId
from streams.errors import ConfigError
from streams.runtime.standby_placement import process_of_client, standbys_from_members

APPLICATION_SERVER_CONFIG = "application.server"
_ENDPOINT_MARK = "-at-"


class HostInfo(NamedTuple):
    """An instance's `application.server` endpoint."""

    host: str
    port: int


#: Kafka's HostInfo("unavailable", -1): no instance with an endpoint holds it (or none is known yet)
UNKNOWN_HOST = HostInfo("unavailable", -1)
UNKNOWN_PARTITION = -1


class StreamsMetadata(NamedTuple):
    """One instance: its endpoint, the stores and input partitions of its active tasks, and those
    of its standby tasks (partitions as (topic, partition))."""

    host_info: HostInfo
    state_store_names: frozenset
    topic_partitions: frozenset
    standby_state_store_names: frozenset
    standby_topic_partitions: frozenset


class KeyQueryMetadata(NamedTuple):
    """Where a key of a store is: the instance whose active task holds its partition, the
    instances keeping standbys of it, and the partition."""

    active_host: HostInfo
    standby_hosts: frozenset
    partition: int


#: Kafka's KeyQueryMetadata.NOT_AVAILABLE: the application's membership is not known (yet)
NOT_AVAILABLE = KeyQueryMetadata(UNKNOWN_HOST, frozenset(), UNKNOWN_PARTITION)


def parse_application_server(config: dict) -> Optional[HostInfo]:
    """`application.server` as a HostInfo (None when unset); ConfigError when it is not "host:port"."""
    value = config.get(APPLICATION_SERVER_CONFIG)
    if value is None or value == "":
        return None
    host, sep, port = value.rpartition(":") if isinstance(value, str) else ("", "", "")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ConfigError(f"config {APPLICATION_SERVER_CONFIG!r} must be 'host:port' with a port of 1-65535, "
                          f"got {value!r}")
    return HostInfo(host, int(port))


def endpoint_client_suffix(endpoint: Optional[HostInfo]) -> str:
    """What a stream thread's consumer client id ends with to carry the instance's endpoint (its
    "host:port" in hex, so that the id keeps to Kafka's client id characters), "" without one."""
    return "" if endpoint is None else _ENDPOINT_MARK + f"{endpoint.host}:{endpoint.port}".encode().hex()


def endpoint_of_client(client_id: str) -> Optional[HostInfo]:
    """The endpoint in a stream thread's consumer client id (None when it carries none)."""
    _, mark, encoded = client_id.rpartition(_ENDPOINT_MARK)
    if not mark:
        return None
    try:
        host, _, port = bytes.fromhex(encoded).decode().rpartition(":")
        return HostInfo(host, int(port))
    except ValueError:
        return None


class Placement(NamedTuple):
    """What the runtime knows of its topology for the metadata: each stateful task's stores, each
    sub-topology's decorated source topics and partition count, the global stores, and
    num.standby.replicas."""

    stores_of_sub: dict
    topics_of_sub: dict
    partitions_of_sub: dict
    global_stores: frozenset
    standby_replicas: int

    def stateful_task_of_partition(self) -> dict[tuple[str, int], TaskId]:
        """The stateful task each input partition belongs to."""
        return {(t, p): TaskId(sub, p) for sub, topics in self.topics_of_sub.items() if self.stores_of_sub.get(sub)
                for t in topics for p in range(self.partitions_of_sub[sub])}


def all_metadata(application_id: str, members: Iterable[Any], placement: Placement) -> list[StreamsMetadata]:
    """Every instance with an endpoint, from a consumer group description's members (objects with
    `client_id` and `assignment.topic_partitions`), sorted by endpoint."""
    members = list(members)
    sub_of_topic = {t: sub for sub, topics in placement.topics_of_sub.items() for t in topics}
    endpoints: dict[str, HostInfo] = {}  # process -> endpoint
    active: dict[HostInfo, set] = {}
    for member in members:
        process, endpoint = process_of_client(application_id, member.client_id), endpoint_of_client(member.client_id)
        if process is None or endpoint is None:
            continue
        endpoints[process] = endpoint
        partitions = active.setdefault(endpoint, set())
        for tp in member.assignment.topic_partitions:
            if tp.topic in sub_of_topic:
                partitions.add((tp.topic, tp.partition))
    standby: dict[HostInfo, set] = {endpoint: set() for endpoint in active}
    if placement.standby_replicas > 0:
        _processes, placed = standbys_from_members(application_id, members, placement.stateful_task_of_partition(),
                                                   placement.standby_replicas)
        for process, tasks in placed.items():
            if process in endpoints:
                standby[endpoints[process]] |= {(t, task.partition) for task in tasks
                                                 for t in placement.topics_of_sub[task.subtopology]}

    def stores(partitions: set) -> frozenset:
        return frozenset(s for t, _p in partitions for s in placement.stores_of_sub.get(sub_of_topic[t], ()))
    return [StreamsMetadata(endpoint, stores(active[endpoint]), frozenset(active[endpoint]),
                            stores(standby[endpoint]), frozenset(standby[endpoint]))
            for endpoint in sorted(active)]


def metadata_for_store(store: str, metadata: list[StreamsMetadata], placement: Placement) -> list[StreamsMetadata]:
    """The instances holding `store`, actively or in a standby (all of them for a global store)."""
    if store in placement.global_stores:
        return list(metadata)
    return [m for m in metadata if store in m.state_store_names or store in m.standby_state_store_names]


def key_query_metadata(store: str, sub: int, partition: int, metadata: list[StreamsMetadata],
                       placement: Placement, local: Optional[HostInfo]) -> KeyQueryMetadata:
    """Where partition `partition` of `store` (of sub-topology `sub`) is; a global store is
    everywhere: this instance (or the first known one) answers, with no partition."""
    if store in placement.global_stores:
        host = local if local is not None else (metadata[0].host_info if metadata else UNKNOWN_HOST)
        return KeyQueryMetadata(host, frozenset(), UNKNOWN_PARTITION)
    wanted = {(t, partition) for t in placement.topics_of_sub[sub]}
    active, standbys = UNKNOWN_HOST, set()
    for m in metadata:
        if store in m.state_store_names and wanted & m.topic_partitions:
            active = m.host_info
        if store in m.standby_state_store_names and wanted & m.standby_topic_partitions:
            standbys.add(m.host_info)
    return KeyQueryMetadata(active, frozenset(standbys), partition)
