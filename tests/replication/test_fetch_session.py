"""Incremental fetch sessions (KIP-227): the protocol on a real broker, and followers using it.

The protocol cases talk to one broker as a consumer would (replica id -1, reads up to the
high watermark), so nothing else moves the partitions under test."""

from __future__ import annotations

import threading

import pytest

from replication.cluster import LocalCluster
from replication.protocol import (
    FINAL_EPOCH, INITIAL_EPOCH, Errors, FetchPartition, FetchRequest, FetchResponse, IsolationLevel,
    TopicPartition,
)
from replication.records import encode_batch

FAST = {"replica.fetch.backoff.ms": 20, "replica.socket.timeout.ms": 1000}
T = [TopicPartition("s", p) for p in range(4)]


def _fetch(cluster, partitions, session_id=0, epoch=INITIAL_EPOCH, forgotten=(), max_wait_ms=0) -> FetchResponse:
    request = FetchRequest(-1, -1, max_wait_ms, 1, 1 << 20, IsolationLevel.HIGH_WATERMARK,
                           {tp: FetchPartition(offset) for tp, offset in partitions.items()},
                           session_id=session_id, session_epoch=epoch, forgotten=tuple(forgotten))
    response = cluster.request(0, request, max_wait_ms / 1000 + 10)
    assert isinstance(response, FetchResponse)
    return response


def _produce(cluster, tp: TopicPartition, *values: bytes) -> None:
    resp = cluster.produce(tp.topic, tp.partition, encode_batch([(None, v, 1000) for v in values]), acks=-1)
    assert resp.error is Errors.NONE


def _values(resp) -> list[bytes]:
    return [r.value for r in resp.records.records()]


@pytest.fixture
def single(tmp_path):
    config = dict(FAST, **{"max.incremental.fetch.session.cache.slots": 2})
    with LocalCluster(tmp_path / "c", num_brokers=1, config=config) as cluster:
        cluster.create_topic("s", partitions=4, replication_factor=1)
        yield cluster


def test_a_session_opens_with_a_full_answer_and_then_answers_only_changes(single):
    _produce(single, T[1], b"before")
    opened = _fetch(single, {tp: 0 for tp in T[:3]})
    assert opened.error is Errors.NONE and opened.session_id > 0
    assert sorted(opened) == T[:3]  # every partition, with or without records
    assert _values(opened[T[1]]) == [b"before"]
    sid = opened.session_id
    # The client moves partition 1 on; nothing else changed: nothing to answer.
    assert dict(_fetch(single, {T[1]: 1}, sid, 1)) == {}
    _produce(single, T[2], b"new")
    third = _fetch(single, {}, sid, 2)  # a request naming no partition
    assert list(third) == [T[2]] and _values(third[T[2]]) == [b"new"]
    assert third[T[2]].high_watermark == 1


def test_partitions_added_and_forgotten(single):
    sid = _fetch(single, {T[0]: 0, T[1]: 0}).session_id
    added = _fetch(single, {T[3]: 0}, sid, 1, forgotten=[T[1]])
    assert list(added) == [T[3]]  # a partition new to the session is answered in full
    _produce(single, T[1], b"forgotten")
    _produce(single, T[0], b"kept")
    answer = _fetch(single, {}, sid, 2)
    assert list(answer) == [T[0]] and _values(answer[T[0]]) == [b"kept"]
    # Added back: answered in full again, from the offset the request names.
    again = _fetch(single, {T[1]: 0}, sid, 3)
    assert _values(again[T[1]]) == [b"forgotten"]


def test_wrong_epoch_and_unknown_session_are_session_errors(single):
    sid = _fetch(single, {T[0]: 0}).session_id
    wrong = _fetch(single, {T[0]: 0}, sid, 5)
    assert wrong.error is Errors.INVALID_FETCH_SESSION_EPOCH and dict(wrong) == {}
    assert _fetch(single, {}, sid, 1).error is Errors.NONE  # the expected epoch still works
    unknown = _fetch(single, {}, sid + 1000, 1)
    assert unknown.error is Errors.FETCH_SESSION_ID_NOT_FOUND


def test_the_least_recently_used_session_is_evicted(single):
    first = _fetch(single, {T[0]: 0}).session_id
    second = _fetch(single, {T[1]: 0}).session_id
    assert _fetch(single, {}, second, 1).error is Errors.NONE  # the first is now the oldest
    _fetch(single, {T[2]: 0})  # a third session: two slots
    assert _fetch(single, {}, first, 1).error is Errors.FETCH_SESSION_ID_NOT_FOUND
    assert _fetch(single, {}, second, 2).error is Errors.NONE


def test_closing_a_session_and_sessionless_fetches(single):
    sid = _fetch(single, {T[0]: 0}).session_id
    _produce(single, T[0], b"x")
    closed = _fetch(single, {T[0]: 0}, sid, FINAL_EPOCH)
    assert closed.session_id == 0 and _values(closed[T[0]]) == [b"x"]
    assert _fetch(single, {}, sid, 1).error is Errors.FETCH_SESSION_ID_NOT_FOUND
    plain = _fetch(single, {T[0]: 0, T[1]: 0}, 0, FINAL_EPOCH)  # without a session: every partition
    assert sorted(plain) == T[:2]


def test_a_parked_session_fetch_is_answered_by_an_append(single):
    sid = _fetch(single, {tp: 0 for tp in T}).session_id
    result = {}
    done = threading.Event()

    def poll():
        result["r"] = _fetch(single, {}, sid, 1, max_wait_ms=60_000)
        done.set()

    threading.Thread(target=poll, daemon=True).start()
    rm = single.brokers[0].replica_manager
    single.wait_until(lambda: rm.parked_fetches(T[3]) == 1, 10, "the session fetch parked")
    assert not done.is_set()
    _produce(single, T[3], b"wake")
    assert done.wait(10), "the append did not answer the parked session fetch"
    assert list(result["r"]) == [T[3]] and _values(result["r"][T[3]]) == [b"wake"]


def test_followers_use_sessions_and_start_over_when_the_leader_forgets_them(tmp_path):
    with LocalCluster(tmp_path / "c", num_brokers=3, config=FAST) as cluster:
        cluster.create_topic("r", partitions=6, replication_factor=3, config={"min.insync.replicas": "3"})
        for p in range(6):
            assert cluster.produce("r", p, encode_batch([(None, b"a", 1)]), acks=-1).error is Errors.NONE
        caches = [cluster.brokers[b].replica_manager.fetch_sessions for b in range(3)]
        assert sum(len(c) for c in caches) > 0, "no follower opened a fetch session"
        for cache in caches:
            cache.clear()  # the leaders forget every session (as after eviction)
        for p in range(6):  # acks=all with min ISR 3: both followers fetch again, in new sessions
            assert cluster.produce("r", p, encode_batch([(None, b"b", 1)]), acks=-1, timeout_ms=10_000).error \
                is Errors.NONE
        cluster.wait_until(lambda: sum(len(c) for c in caches) > 0, 10, "new sessions")


def test_followers_learn_a_log_start_moved_without_an_append(tmp_path):
    # DeleteRecords moves the leader's log start and wakes no fetch: a session reads every
    # partition once per replica.lag.time.max.ms / 4, and answers the changed log start then.
    config = dict(FAST, **{"replica.lag.time.max.ms": 400, "replica.fetch.wait.max.ms": 100})
    with LocalCluster(tmp_path / "c", num_brokers=3, config=config) as cluster:
        cluster.create_topic("d", partitions=1, replication_factor=3)
        for i in range(5):
            assert cluster.produce("d", 0, encode_batch([(None, b"%d" % i, 1)]), acks=-1).error is Errors.NONE
        leader = cluster.leader("d", 0)
        followers = [b for b in cluster.replicas("d", 0) if b != leader]
        rm = cluster.brokers[leader].replica_manager
        tp = TopicPartition("d", 0)

        def quiet():  # both followers told HW 5, nothing left to answer, both fetches parked
            return (all(cluster.partition_on(b, "d", 0).log.high_watermark == 5 for b in followers)
                    and not any(session.changed for session in rm.fetch_sessions.sessions_of(tp))
                    and rm.parked_fetches(tp) == 2)

        cluster.wait_until(quiet, 10, "idle sessions")
        assert cluster.partition_on(leader, "d", 0).delete_records(3) == 3
        cluster.wait_until(lambda: all(cluster.partition_on(b, "d", 0).log.log_start_offset == 3 for b in followers),
                           10, "followers at log start 3")


def test_forgetting_every_partition_closes_the_session(single):
    # Kafka's FetchManager: an incremental request that leaves its session empty removes the
    # session and is answered without one (session id 0).
    sid = _fetch(single, {T[0]: 0, T[1]: 0}).session_id
    cache = single.brokers[0].replica_manager.fetch_sessions
    assert len(cache) == 1
    emptied = _fetch(single, {}, sid, 1, forgotten=[T[0], T[1]])
    assert emptied.error is Errors.NONE and emptied.session_id == 0 and dict(emptied) == {}
    assert len(cache) == 0
    assert _fetch(single, {}, sid, 2).error is Errors.FETCH_SESSION_ID_NOT_FOUND
    # Forgetting some partitions only keeps the session.
    sid = _fetch(single, {T[0]: 0, T[1]: 0}).session_id
    kept = _fetch(single, {}, sid, 1, forgotten=[T[0]])
    assert kept.session_id == sid and len(cache) == 1


def _sessions_from(cluster, leader: int, follower: int) -> list:
    return [s for s in cluster.brokers[leader].replica_manager.fetch_sessions.sessions() if s.replica_id == follower]


@pytest.fixture
def replicated(tmp_path):
    """Three brokers, one partition replicated to all (min ISR 3: acks=all needs both
    followers); yields (cluster, leader, followers) once each follower has a session."""
    with LocalCluster(tmp_path / "c", num_brokers=3, config=FAST) as cluster:
        cluster.create_topic("f", partitions=1, replication_factor=3, config={"min.insync.replicas": "3"})
        assert cluster.produce("f", 0, encode_batch([(None, b"a", 1)]), acks=-1).error is Errors.NONE
        leader = cluster.leader("f", 0)
        followers = [b for b in cluster.replicas("f", 0) if b != leader]
        cluster.wait_until(lambda: all(len(_sessions_from(cluster, leader, f)) == 1 for f in followers), 10,
                           "a fetch session per follower")
        yield cluster, leader, followers


def test_a_stopped_follower_frees_its_session_slot_on_the_leader(replicated):
    cluster, leader, (gone, stays) = replicated
    kept = _sessions_from(cluster, leader, stays)
    cluster.stop_broker(gone)  # its fetcher threads stop and close their sessions (FINAL_EPOCH)
    cluster.wait_until(lambda: not _sessions_from(cluster, leader, gone), 10,
                       f"broker {gone}'s session closed on the leader")
    assert _sessions_from(cluster, leader, stays) == kept


def test_a_fetcher_emptied_closes_its_session_and_refilled_opens_a_new_one(replicated):
    from replication.fetcher import InitialFetchState

    cluster, leader, (follower, _other) = replicated
    tp = TopicPartition("f", 0)
    manager = cluster.brokers[follower].fetcher_manager
    [old] = _sessions_from(cluster, leader, follower)
    thread = manager.fetcher_for(tp)
    manager.remove_fetcher_for_partitions([tp])
    # The fetcher's next request forgets the partition; the leader drops the empty session.
    cluster.wait_until(lambda: not _sessions_from(cluster, leader, follower), 10,
                       "the emptied session closed on the leader")
    assert thread.is_alive() and manager.fetcher_for(tp) is None
    log = cluster.partition_on(follower, "f", 0).log
    manager.add_fetcher_for_partitions(
        {tp: InitialFetchState(leader, cluster.leader_epoch("f", 0), log.log_end_offset)})
    # acks=all with min ISR 3 is answered once the re-added partition fetched it.
    assert cluster.produce("f", 0, encode_batch([(None, b"b", 1)]), acks=-1).error is Errors.NONE
    cluster.wait_until(lambda: log.log_end_offset == 2, 10, "the re-added partition replicated")
    [new] = _sessions_from(cluster, leader, follower)
    assert new.id != old.id and list(new.partitions) == [tp]
