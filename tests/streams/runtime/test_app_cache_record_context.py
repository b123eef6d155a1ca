"""A cached count in an App forwards each flushed update in its write's record context (Kafka's
CachingKeyValueStore), on both routes records take: runs of records without headers through the
bulk count (state.cache._cache.increment_run), records with headers one by one."""

from __future__ import annotations

import threading

import pytest

from streams import App, AppState, StreamsBuilder, serdes

from _runtime_util import Cluster, unique, wait_for


@pytest.fixture
def cluster(backend_config):
    c = Cluster(backend_config)
    yield c
    c.close()


def _started_count(cluster, tmp_path, src: str, to, commit_ms: int) -> App:
    """A running App counting `src` by key (the cached store "counts"), the counts written out
    by `to(to, ...)`: a topic, or a topic name extractor."""
    b = StreamsBuilder()
    (b.stream(src, key_serde=serdes.STRING, value_serde=serdes.STRING).group_by_key().count(store="counts")
     .to_stream().to(to, key_serde=serdes.STRING, value_serde=serdes.INT64))
    app = App(b.build(), {**cluster.config, "application.id": unique("ctx"), "state.dir": str(tmp_path / "s"),
                          "commit.interval.ms": commit_ms})
    app.start()
    return app


def test_each_flushed_count_names_the_record_that_made_it(cluster, tmp_path):
    """Every count (key, n) written out names, through the topic name extractor's record context,
    the input offset of the key's n-th record, and carries that record's headers: the cache may
    skip counts (a key updated twice between commits goes out once), never mix them up."""
    src, out = unique("ctx-in"), unique("ctx-out")
    cluster.create_topics(1, src, out)
    keys = ["a", "b", "c", "d", "e"]
    batches, size = 8, 60
    n = batches * size
    records = [(keys[(i * 7) % 5].encode(), b"v") for i in range(n)]
    # a header on every 9th record (those leave the bulk route) and on the last five of every
    # other batch (so that some batches' last counts carry headers, others none)
    headers = [[("i", str(i).encode())] if i % 9 == 0 or (i // size % 2 and i % size >= size - 5) else None
               for i in range(n)]
    nth: dict[tuple[str, int], int] = {}  # (key, n) -> the offset of the key's n-th record
    counts: dict[str, int] = {}
    for offset, (key, _value) in enumerate(records):
        counts[key.decode()] = counts.get(key.decode(), 0) + 1
        nth[(key.decode(), counts[key.decode()])] = offset

    seen: list = []
    lock = threading.Lock()

    def route(key, value, record_context):
        with lock:
            seen.append((key, value, record_context.topic, record_context.offset, tuple(record_context.headers)))
        return out

    app = _started_count(cluster, tmp_path, src, route, commit_ms=50)
    try:
        assert app.wait_for_state(AppState.RUNNING, timeout=60)
        for start in range(0, n, size):  # a batch at a time, each counted (and committed) before the next
            cluster.produce(src, records[start:start + size], headers=headers[start:start + size])
            last = {key.decode(): offset for offset, (key, _v) in enumerate(records[:start + size])}
            wanted = {(key, count) for (key, count), offset in nth.items() if offset == last[key]}

            def done(wanted=wanted) -> bool:
                with lock:
                    return {(k, v) for k, v, *_ in seen} >= wanted
            wait_for(done, 60, f"the counts of the batch from offset {start} written out")
    finally:
        assert app.close(timeout=60)
    with lock:
        got = list(seen)
    assert len(got) < n  # the cache merged some updates
    for key, count, topic, offset, hdrs in got:
        assert (topic, offset) == (src, nth[(key, count)]), (key, count)
        expected = headers[offset]
        assert hdrs == (tuple((k, v) for k, v in expected) if expected else ()), (key, count)
    assert any(hdrs for *_, hdrs in got) and any(not hdrs for *_, hdrs in got)


def test_consumed_messages_kept_as_record_contexts_are_left_to_no_cycle_collection(cluster, tmp_path):
    """A bulk run's count keeps each key's last consumed message as its dirty entry's record
    context until a flush. Neither the message nor the entry is tracked by the cyclic collector
    (every full collection would scan them), on both backends: the embedded log's decoder makes
    its messages untracked, confluent-kafka's consumer's are untracked as the thread takes them."""
    import gc

    from confluent_kafka import Message

    src, out = unique("gc-in"), unique("gc-out")
    cluster.create_topics(1, src, out)
    # no commit while the test looks: the entries stay dirty, holding their messages
    app = _started_count(cluster, tmp_path, src, out, commit_ms=600_000)
    try:
        assert app.wait_for_state(AppState.RUNNING, timeout=60)
        cluster.produce(src, [(b"k%d" % (i % 20), b"v") for i in range(200)])
        wait_for(lambda: sum(t.processed_total for t in app.threads) >= 200, 60, "200 records processed")
        entries = [entry for thread in app.threads
                   for named in list(thread.task_manager.thread_cache._caches.values())
                   for entry in list(named.entries.values())]
        held = [entry for entry in entries if isinstance(entry.metadata, Message)]
        assert len(held) == 20  # one per key: the bulk route took the records
        assert [(gc.is_tracked(entry), gc.is_tracked(entry.metadata)) for entry in held] == [(False, False)] * 20
    finally:
        assert app.close(timeout=60)
