"""buffered.records.per.partition on the embedded cluster: a partition whose buffer still exceeds
it when the thread would poll again is paused on the main consumer, and resumed once processing
brings the buffer down to it; nothing is lost or reordered by the pause (the consumer fetches
again from its position)."""

from __future__ import annotations

import pytest

from streams import App, AppState
from streams.errors import ConfigError
from streams.runtime.config import DEFAULT_BUFFERED_RECORDS_PER_PARTITION, StreamsConfig
from streams.runtime.task_manager import RECORDS

from _runtime_util import Cluster, embedded_config, two_input_topology, unique, wait_for

LIMIT = 7


@pytest.fixture
def cluster(tmp_path):
    c = Cluster(embedded_config(tmp_path))
    yield c
    c.close()


def test_a_partition_over_the_limit_is_paused_while_its_task_idles_and_resumed_once_drained(cluster, tmp_path):
    """The task reads two topics; one stays empty, so the task idles for max.task.idle.ms while
    the other's records pile up: that partition is paused (the consumer stops fetching it),
    then resumed once the task has processed its buffer down to the limit."""
    a, b, sink = unique("ba"), unique("bb"), unique("bout")
    cluster.create_topics(1, a, b, sink)
    records = [(b"k%d" % (i % 5), b"v%d" % i) for i in range(300)]
    cluster.produce(a, records)
    app = App(two_input_topology(a, b, sink),
              {**cluster.config, "application.id": unique("buffered"), "state.dir": str(tmp_path / "state"),
               "commit.interval.ms": 100, "buffered.records.per.partition": LIMIT, "max.task.idle.ms": 3000})
    app.start()
    try:
        assert app.wait_for_state(AppState.RUNNING, timeout=60)
        tm = app.threads[0].task_manager
        tp = (a, 0)

        def paused_over_limit():
            task = tm._task_of_tp.get(tp)
            return tp in tm.held_by(RECORDS) and task is not None and task.partition_group.buffered_in(tp) > LIMIT
        wait_for(paused_over_limit, 30, "the idle task's full partition paused")
        msgs = cluster.read_all(sink, 1, until=lambda got: len(got) >= len(records), timeout=60)
        assert [(m.key(), m.value()) for m in msgs] == records  # all of them, once, in order
        wait_for(lambda: not tm.held_by(RECORDS), 30, "the partition resumed")
        cluster.produce(a, [(b"k", b"after")])  # fetched again after the resume
        msgs = cluster.read_all(sink, 1, until=lambda got: len(got) > len(records), timeout=60)
        assert msgs[-1].value() == b"after"
    finally:
        assert app.close(timeout=60)


@pytest.mark.parametrize("value", [0, -1, "many"])
def test_buffered_records_per_partition_must_be_a_positive_int(value):
    with pytest.raises(ConfigError, match="buffered.records.per.partition"):
        StreamsConfig.parse({"application.id": "a", "bootstrap.servers": "x",
                                 "buffered.records.per.partition": value})


def test_the_default_bound_leaves_room_for_a_fetch_dropped_by_a_pause():
    """10,000 unless set (Kafka's 1000 made every join pause and fetch again: see the default's
    comment); a setting still wins."""
    base = {"application.id": "a", "bootstrap.servers": "x"}
    assert StreamsConfig.parse(base).buffered_records_per_partition == DEFAULT_BUFFERED_RECORDS_PER_PARTITION == 10_000
    assert StreamsConfig.parse(base | {"buffered.records.per.partition": 1000}).buffered_records_per_partition == 1000
