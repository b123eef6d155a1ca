"""buffered.records.per.partition on the embedded cluster: a partition whose buffer exceeds it
is paused on the main consumer, and resumed once processing brings the buffer down to it;
nothing is lost or reordered by the pause (the consumer fetches again from its position)."""

from __future__ import annotations

import pytest

from streams import App, AppState, serdes
from streams.errors import ConfigError
from streams.runtime.config import StreamsConfig

from _runtime_util import Cluster, Exploding, pass_through_topology, unique, wait_for

LIMIT = 7


@pytest.fixture
def cluster(tmp_path):
    c = Cluster({"bootstrap.servers": f"local://{tmp_path}/cluster",
                 "consumer.session.timeout.ms": 6000, "consumer.heartbeat.interval.ms": 500})
    yield c
    c.close()


def test_a_partition_over_the_limit_is_paused_and_resumed_once_drained(cluster, tmp_path):
    source, sink = unique("bin"), unique("bout")
    cluster.create_topics(1, source, sink)
    app = App(pass_through_topology(source, sink, Exploding),
              {**cluster.config, "application.id": unique("buffered"), "state.dir": str(tmp_path / "state"),
               "commit.interval.ms": 100, "buffered.records.per.partition": LIMIT})
    app.start()
    try:
        assert app.wait_for_state(AppState.RUNNING, timeout=60)
        thread = app.threads[0]
        tm, consumer = thread.task_manager, thread.consumer
        events = []
        pause, resume = consumer.pause, consumer.resume

        def buffered(tp):
            task = tm._task_of_tp.get((tp.topic, tp.partition))
            return task.partition_group.buffered_in((tp.topic, tp.partition)) if task is not None else None

        def recording_pause(tps):
            events.extend(("pause", tp.topic, tp.partition, buffered(tp)) for tp in tps)
            return pause(tps)

        def recording_resume(tps):
            events.extend(("resume", tp.topic, tp.partition, buffered(tp)) for tp in tps)
            return resume(tps)
        consumer.pause, consumer.resume = recording_pause, recording_resume
        records = [(b"k%d" % (i % 5), b"v%d" % i) for i in range(500)]
        cluster.produce(source, records)
        msgs = cluster.read_all(sink, 1, until=lambda got: len(got) >= len(records), timeout=60)
        assert [(m.key(), m.value()) for m in msgs] == records  # all of them, once, in order
        mine = [e for e in events if e[1] == source]
        assert mine and mine[0][0] == "pause" and mine[0][3] > LIMIT
        assert any(e[0] == "resume" for e in mine)
        # pauses and resumes alternate; every resume finds the buffer down to the limit
        assert [e[0] for e in mine] == ["pause", "resume"] * (len(mine) // 2) + ["pause"] * (len(mine) % 2)
        assert all(e[3] <= LIMIT for e in mine if e[0] == "resume")
        wait_for(lambda: not tm._buffer_paused, 30, "the partition resumed")
    finally:
        assert app.close(timeout=60)


@pytest.mark.parametrize("value", [0, -1, "many"])
def test_buffered_records_per_partition_must_be_a_positive_int(value):
    with pytest.raises(ConfigError, match="buffered.records.per.partition"):
        StreamsConfig.parse({"application.id": "a", "bootstrap.servers": "x",
                                 "buffered.records.per.partition": value})
