"""Interactive-query metadata across instances (Kafka's metadataForAllStreamsClients,
streamsMetadataForStore, queryMetadataForKey): every instance with an application.server sees
which one holds each key of a store, actively and in standbys, and they all see the same."""

from __future__ import annotations

import pytest

from eddy.murmur2 import murmur2_partition
from state.errors import InvalidStateStoreError
from streams import App, AppState, serdes
from streams.errors import ConfigError
from streams.runtime.config import StreamsConfig
from streams.runtime.errors import InvalidQueryArgumentError, RuntimeStateError
from streams.runtime.streams_metadata import HostInfo, endpoint_client_suffix, endpoint_of_client

from _runtime_util import Cluster, make_lines, running_with_tasks, unique, wait_for, wordcount_topology

A, B = HostInfo("a.example", 1111), HostInfo("b.example", 2222)


@pytest.mark.needs_faithful_broker(reason="moved tasks restore their changelogs; aborted data must stay hidden")
def test_every_instance_routes_each_key_to_the_instance_holding_it(backend_config, tmp_path):
    cluster = Cluster(backend_config)
    lines, out = unique("lines"), unique("counts")
    cluster.create_topics(2, lines, out)
    records, expected = make_lines(300, seed=21, vocabulary=40)
    app_id = unique("iq")
    topo = wordcount_topology(lines, out)
    apps = {host: App(topo, {**cluster.config, "application.id": app_id, "state.dir": str(tmp_path / host.host),
                             "application.server": f"{host.host}:{host.port}", "num.standby.replicas": 1,
                             "processing.guarantee": "exactly_once_v2", "commit.interval.ms": 100})
            for host in (A, B)}
    a, b = apps[A], apps[B]
    try:
        with pytest.raises(RuntimeStateError, match="not RUNNING or REBALANCING"):
            a.metadata_for_all_streams_clients()
        a.start()
        assert a.wait_for_state(AppState.RUNNING, timeout=60)
        b.start()
        cluster.produce(lines, records)
        wait_for(lambda: running_with_tasks(a, b), 60, "a and b sharing the tasks")

        def agreed() -> list:
            """Both instances' view, once it is the same and shows every source partition owned once."""
            views = [a.metadata_for_all_streams_clients(), b.metadata_for_all_streams_clients()]
            owned = [tp for m in views[0] for tp in m.topic_partitions]
            return views[0] if views[0] == views[1] and len(owned) == len(set(owned)) == 4 else []
        everyone = wait_for(agreed, 60, "both instances seeing the same assignment")
        assert [m.host_info for m in everyone] == [A, B]
        repartition = {tp for m in everyone for tp in m.topic_partitions if tp[0] != lines}
        assert {tp for m in everyone for tp in m.topic_partitions if tp[0] == lines} == {(lines, 0), (lines, 1)}
        assert {p for _t, p in repartition} == {0, 1}
        for m in everyone:  # the count store is where its repartition partitions are; standbys elsewhere
            assert ("counts" in m.state_store_names) == bool(m.topic_partitions & repartition)
            assert m.standby_topic_partitions == repartition - m.topic_partitions
            assert m.standby_state_store_names == ({"counts"} if m.standby_topic_partitions else set())
        assert {m.host_info for m in a.streams_metadata_for_store("counts")} == {A, B}

        counted = {w: n for w, n in expected.items()}
        stores = {host: app.store("counts") for host, app in apps.items()}
        wait_for(lambda: all((stores[A].get(w) or stores[B].get(w)) == n for w, n in counted.items()), 60,
                 "every word counted")
        for word, n in counted.items():
            where = a.query_metadata_for_key("counts", word, serdes.STRING)
            assert where == b.query_metadata_for_key("counts", word, serdes.STRING)
            other = B if where.active_host == A else A
            assert where.partition == murmur2_partition(word.encode(), 2)
            assert where.standby_hosts == {other}
            assert stores[where.active_host].get(word) == n and stores[other].get(word) is None
        # a custom partitioner places the key itself
        where = a.query_metadata_for_key("counts", "anything", partitioner=lambda topic, key, value, n: 1)
        assert where.partition == 1 and where.active_host in (A, B)

        with pytest.raises(InvalidStateStoreError, match="unknown state store 'nope'"):
            a.query_metadata_for_key("nope", "w", serdes.STRING)
        with pytest.raises(InvalidQueryArgumentError, match="give the key's serde"):
            a.query_metadata_for_key("counts", "w")
        with pytest.raises(InvalidQueryArgumentError, match="the partitioner gave 7"):
            a.query_metadata_for_key("counts", "w", partitioner=lambda topic, key, value, n: 7)
    finally:
        for app in apps.values():
            app.close(timeout=60)
        cluster.close()


@pytest.mark.parametrize("server", ["nohost", ":80", "host:", "host:port", "host:0", "host:70000", 8080])
def test_a_bad_application_server_is_refused(server):
    with pytest.raises(ConfigError, match="'application.server' must be 'host:port'"):
        StreamsConfig.parse({"application.id": "x", "bootstrap.servers": "local:///x", "application.server": server})


def test_the_endpoint_travels_in_the_consumer_client_id():
    for host in (A, HostInfo("::1", 9), HostInfo("h-1.example.com", 65535)):
        suffix = endpoint_client_suffix(host)
        assert all(c.isalnum() or c in "-" for c in suffix)
        assert endpoint_of_client(f"app-pid-StreamThread-1-consumer{suffix}") == host
    assert endpoint_client_suffix(None) == "" and endpoint_of_client("app-pid-StreamThread-1-consumer") is None


class _CountingAdmin:
    """The app's own admin client, counting the group descriptions asked of the broker."""

    def __init__(self, admin) -> None:
        self.admin, self.describes = admin, 0

    def describe_consumer_groups(self, *args, **kwargs):
        self.describes += 1
        return self.admin.describe_consumer_groups(*args, **kwargs)

    def __getattr__(self, name):
        return getattr(self.admin, name)


def test_the_metadata_is_read_once_per_rebalance_not_once_per_query(backend_config, tmp_path):
    """Kafka's queryMetadataForKey answers from what the last assignment said: a query costs no
    round trip to the group coordinator, and a rebalance (here, a second instance joining)
    brings the new view."""
    cluster = Cluster(backend_config)
    lines, out = unique("lines"), unique("counts")
    cluster.create_topics(2, lines, out)
    app_id, topo = unique("iq"), wordcount_topology(lines, out)
    apps = {host: App(topo, {**cluster.config, "application.id": app_id, "state.dir": str(tmp_path / host.host),
                             "application.server": f"{host.host}:{host.port}"})
            for host in (A, B)}
    a, b = apps[A], apps[B]
    try:
        a.start()
        assert a.wait_for_state(AppState.RUNNING, timeout=60)
        admin = a._admin = _CountingAdmin(a._admin)
        alone = a.query_metadata_for_key("counts", "w", serdes.STRING)
        assert alone.active_host == A and admin.describes == 1
        assert all(a.query_metadata_for_key("counts", w, serdes.STRING).active_host == A for w in "abcdefghij")
        assert [m.host_info for m in a.metadata_for_all_streams_clients()] == [A]
        assert admin.describes == 1

        b.start()
        wait_for(lambda: running_with_tasks(a, b), 60, "a and b sharing the tasks")
        wait_for(lambda: [m.host_info for m in a.metadata_for_all_streams_clients()] == [A, B], 60,
                 "a seeing b's tasks")
        described = admin.describes
        assert described >= 2  # the rebalances b's joining caused were read again
        views = [a.query_metadata_for_key("counts", w, serdes.STRING) for w in "abcdefghij"]
        assert admin.describes == described
        assert views == [b.query_metadata_for_key("counts", w, serdes.STRING) for w in "abcdefghij"]
        holders = {m.host_info for m in a.streams_metadata_for_store("counts")}
        assert {v.active_host for v in views} <= holders and admin.describes == described
    finally:
        for app in apps.values():
            app.close(timeout=60)
        cluster.close()
