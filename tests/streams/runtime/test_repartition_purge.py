"""Repartition records below the committed offsets are deleted (Kafka Streams' purge), so the
topics do not grow without bound; records not yet committed are never deleted."""

from __future__ import annotations

import pytest
from confluent_kafka import TopicPartition

from streams import App, AppState

from _runtime_util import Cluster, last_counts, make_lines, unique, wait_for, wordcount_topology

pytestmark = pytest.mark.needs_faithful_broker(reason="delete_records is unsupported")


def test_consumed_repartition_records_are_purged(backend_config, tmp_path):
    cluster = Cluster(backend_config)
    lines, out = unique("lines"), unique("counts")
    cluster.create_topics(2, lines, out)
    app_id = unique("purge")
    records, expected = make_lines(600, seed=3)
    app = App(wordcount_topology(lines, out), {**cluster.config, "application.id": app_id,
                                               "state.dir": str(tmp_path), "commit.interval.ms": 100,
                                               "repartition.purge.interval.ms": 0})
    repartition = f"{app_id}-counts-repartition"
    probe = cluster.backend.consumer({"group.id": app_id})  # reads the app's committed offsets; never joins
    try:
        app.start()
        assert app.wait_for_state(AppState.RUNNING, timeout=60)
        cluster.produce(lines, records)
        cluster.read_all(out, 2, until=lambda got: last_counts(got) == dict(expected))

        def purged() -> bool:
            committed = {tp.partition: tp.offset for tp in probe.committed(
                [TopicPartition(repartition, p) for p in range(2)], timeout=10)}
            marks = {p: probe.get_watermark_offsets(TopicPartition(repartition, p), timeout=10, cached=False)
                     for p in range(2)}
            # everything consumed and committed is gone; nothing past the commit ever is
            assert all(marks[p][0] <= max(committed[p], 0) for p in range(2)), (marks, committed)
            return all(marks[p][1] > 0 and marks[p][0] == marks[p][1] == committed[p] for p in range(2))

        wait_for(purged, 30, "the consumed repartition records deleted")
    finally:
        probe.close()
        assert app.close(timeout=60)
        cluster.close()
