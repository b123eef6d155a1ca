"""An offset commit refused with REBALANCE_IN_PROGRESS keeps the tasks and is tried again.

With librdkafka the group's join and sync run beside the stream thread, so a periodic commit can
reach the coordinator while the group completes a rebalance; Kafka answers REBALANCE_IN_PROGRESS
and commits nothing. The tasks are still the thread's: Kafka Streams skips commits during a
rebalance and commits afterwards. Treating the refusal as a migration would close every task
dirty and reprocess from the last commit, which under at-least-once counts those records twice.

The refusal itself depends on when the broker's group is between join and sync, a window no
test can hit on purpose, so the thread's consumer refuses one commit the way Kafka does.
"""

from __future__ import annotations

import threading
from typing import Any

from confluent_kafka import KafkaError, KafkaException, TopicPartition

from streams import App, AppState

from _runtime_util import Cluster, count_sequences, last_counts, make_lines, unique, wait_for, wordcount_topology


class _RefusesOneCommit:
    """The thread's consumer, except that its next offset commit fails as Kafka's coordinator
    fails one sent between the group's join and sync."""

    def __init__(self, consumer: Any) -> None:
        self._consumer = consumer
        self.refused: list = []
        self.committed_after: list = []

    def commit(self, *args: Any, **kwargs: Any) -> Any:
        if not self.refused:
            self.refused.append(kwargs.get("offsets"))
            raise KafkaException(KafkaError(KafkaError.REBALANCE_IN_PROGRESS, "The group is rebalancing"))
        result = self._consumer.commit(*args, **kwargs)
        self.committed_after.append(kwargs.get("offsets"))
        return result

    def __getattr__(self, name: str) -> Any:
        return getattr(self._consumer, name)


def test_a_commit_refused_during_a_rebalance_is_retried_without_reprocessing(backend_config, tmp_path):
    cluster = Cluster(backend_config)
    lines, out = unique("lines"), unique("counts")
    cluster.create_topics(2, lines, out)
    records, expected = make_lines(1500, seed=8, vocabulary=40)
    app_id = unique("rip")
    app = App(wordcount_topology(lines, out), {**cluster.config, "application.id": app_id,
                                               "state.dir": str(tmp_path), "commit.interval.ms": 50})
    arm = threading.Event()
    wrapped: list[_RefusesOneCommit] = []

    def injector(thread, where: str) -> None:
        if where == "before_commit" and arm.is_set() and not wrapped:
            wrapped.append(_RefusesOneCommit(thread.task_manager.consumer))
            thread.task_manager.consumer = wrapped[0]

    try:
        cluster.produce(lines, records[:700])
        app.set_fault_injector(injector)
        app.start()
        assert app.wait_for_state(AppState.RUNNING, timeout=60)
        store = app.store("counts")
        first = make_lines(700, seed=8, vocabulary=40)[1]
        wait_for(lambda: all(store.get(w) == n for w, n in first.items()), 60, "the first 700 lines counted")
        # the refused commit covers records processed after this point
        arm.set()
        cluster.produce(lines, records[700:])
        wait_for(lambda: wrapped and wrapped[0].refused, 30, "a refused commit")
        assert wrapped[0].refused[0], "the refused commit carried offsets"

        wait_for(lambda: all(store.get(w) == n for w, n in expected.items()), 60, "exact counts")
        wait_for(lambda: wrapped[0].committed_after, 30, "a commit after the refused one")
        # nothing was reprocessed: every word's emitted counts only go up
        msgs = cluster.read_all(out, 2, until=lambda got: last_counts(got) == dict(expected))
        for word, seq in count_sequences(msgs).items():
            assert seq == sorted(set(seq)), (word, seq)
        assert all(t.is_alive() for t in app.threads)
        assert app.close(timeout=60)
        # the retried commits reached the group: every input record is committed
        probe = cluster.backend.consumer({"group.id": unique("probe")})
        try:
            ends = [probe.get_watermark_offsets(TopicPartition(lines, p), timeout=10)[1] for p in range(2)]
        finally:
            probe.close()
        assert sum(ends) == len(records)
        assert [cluster.committed_offset(app_id, lines, p) for p in range(2)] == ends
    finally:
        app.close(timeout=60)
        cluster.close()
