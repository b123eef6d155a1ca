"""App.pause / resume (Kafka's KIP-834): a paused app goes on consuming and committing but
processes, restores and punctuates nothing until it is resumed; then it goes on where it stood."""

from __future__ import annotations

from typing import Callable

import pytest

from streams import App, AppState
from streams.runtime import LagInfo, RuntimeStateError
from streams.runtime.task import TaskState

from _runtime_util import Cluster, RestoredCounts, make_lines, unique, wait_for, wordcount_topology


class _Turns:
    """Counts the stream threads' loop turns (the "poll" point of the testing hook)."""

    def __init__(self) -> None:
        self.count = 0

    def __call__(self, thread, point: str) -> None:
        if point == "poll":
            self.count += 1


def _counts(store, words) -> dict:
    return {w: store.get(w) for w in words}


def _count_then_clean_up(cluster: Cluster, config: dict, lines: str, out: str, records: list, expected: dict,
                         check: Callable[[App], None] = lambda app: None) -> None:
    """Count `records` with an app of `config` (then `check(app)` while it runs), close it and
    delete its local state: the next start must restore the counts from the changelog."""
    first = App(wordcount_topology(lines, out), config)
    try:
        cluster.produce(lines, records)
        first.start()
        assert first.wait_for_state(AppState.RUNNING, timeout=60)
        store = first.store("counts")
        wait_for(lambda: all(store.get(w) == n for w, n in expected.items()), 60, "exact counts")
        check(first)
    finally:
        assert first.close(timeout=60)
    first.clean_up()


def test_a_paused_app_buffers_its_input_and_processes_it_once_resumed(backend_config, tmp_path):
    cluster = Cluster(backend_config)
    lines, out = unique("lines"), unique("counts")
    cluster.create_topics(2, lines, out)
    records, expected = make_lines(600, seed=9, vocabulary=30)
    _, first = make_lines(300, seed=9, vocabulary=30)  # the counts of the first half alone
    app = App(wordcount_topology(lines, out), {**cluster.config, "application.id": unique("pause"),
                                               "state.dir": str(tmp_path), "commit.interval.ms": 100})
    try:
        app.start()
        assert app.wait_for_state(AppState.RUNNING, timeout=60)
        cluster.produce(lines, records[:300])
        store = app.store("counts")
        wait_for(lambda: all(store.get(w) == n for w, n in first.items()), 60, "the first half counted")
        processed = sum(t.processed_total for t in app.threads)

        app.pause()
        assert app.is_paused()
        cluster.produce(lines, records[300:])
        wait_for(lambda: sum(t.task_manager.buffered() for t in app.threads) > 0, 60, "the second half buffered")
        assert sum(t.processed_total for t in app.threads) == processed
        assert _counts(store, expected) == {w: first.get(w) for w in expected}
        assert app.state is AppState.RUNNING  # pausing is no state of its own

        app.resume()
        assert not app.is_paused()
        wait_for(lambda: all(store.get(w) == n for w, n in expected.items()), 60, "every line counted once resumed")
    finally:
        assert app.close(timeout=60)
        cluster.close()


def test_an_app_paused_before_start_restores_nothing_until_resumed(backend_config, tmp_path):
    cluster = Cluster(backend_config)
    lines, out = unique("lines"), unique("counts")
    cluster.create_topics(1, lines, out)
    records, expected = make_lines(300, seed=4, vocabulary=25)
    config = {**cluster.config, "application.id": unique("paused-start"), "state.dir": str(tmp_path),
              "commit.interval.ms": 100}
    _count_then_clean_up(cluster, config, lines, out, records, expected)

    app = App(wordcount_topology(lines, out), config)
    restored, turns = RestoredCounts(), _Turns()
    app.set_global_state_restore_listener(restored)
    app.set_fault_injector(turns)
    app.pause()
    try:
        app.start()

        def restoring() -> bool:
            tm = app.threads[0].task_manager
            return tm is not None and any(t.state is TaskState.RESTORING for t in list(tm.tasks.values()))
        wait_for(restoring, 60, "the stateful task initialized")
        seen = turns.count
        wait_for(lambda: turns.count >= seen + 5, 60, "five more loop turns")
        assert restored.batched == 0 and restoring() and app.state is AppState.REBALANCING

        app.resume()
        assert app.wait_for_state(AppState.RUNNING, timeout=60)
        store = app.store("counts")
        wait_for(lambda: all(store.get(w) == n for w, n in expected.items()), 60, "the counts restored")
        assert restored.batched >= len(expected)
    finally:
        assert app.close(timeout=60)
        cluster.close()


def test_store_lags_show_a_paused_restore_and_none_once_caught_up(backend_config, tmp_path):
    cluster = Cluster(backend_config)
    lines, out = unique("lines"), unique("counts")
    cluster.create_topics(2, lines, out)
    records, expected = make_lines(300, seed=5, vocabulary=25)
    config = {**cluster.config, "application.id": unique("lags"), "state.dir": str(tmp_path),
              "commit.interval.ms": 100}

    def running_lags(first: App) -> None:
        with pytest.raises(RuntimeStateError, match="not RUNNING or REBALANCING"):
            App(wordcount_topology(lines, out), config).all_local_store_partition_lags()

        def logged() -> dict:
            """The lags once the changelogs hold every word (a commit wrote the caches down)."""
            lags = first.all_local_store_partition_lags()
            ends = [lag.end_offset_position for lag in lags.get("counts", {}).values()]
            return lags if sum(ends) >= len(expected) else {}
        lags = wait_for(logged, 60, "the counts in the changelogs")
        # running active tasks are at the end of their changelogs
        assert set(lags) == {"counts"} and set(lags["counts"]) == {0, 1}
        assert all(lag.offset_lag == 0 and lag.current_offset_position == lag.end_offset_position
                   for lag in lags["counts"].values())
    _count_then_clean_up(cluster, config, lines, out, records, expected, running_lags)

    app = App(wordcount_topology(lines, out), config)
    app.pause()  # so the restore waits at its start
    try:
        app.start()
        wait_for(lambda: app.threads[0].task_manager is not None
                 and len([t for t in app.threads[0].task_manager.tasks.values() if t.manager is not None]) == 4,
                 60, "the tasks initialized")
        lags = app.all_local_store_partition_lags()
        # nothing restored yet: each partition is behind by its whole changelog
        ends = {p: lag.end_offset_position for p, lag in lags["counts"].items()}
        assert set(lags) == {"counts"} and set(ends) == {0, 1} and sum(ends.values()) >= len(expected)
        assert lags["counts"] == {p: LagInfo(0, end) for p, end in ends.items()}
        assert {p: lag.offset_lag for p, lag in lags["counts"].items()} == ends
        app.resume()
        assert app.wait_for_state(AppState.RUNNING, timeout=60)
        lags = app.all_local_store_partition_lags()
        assert {p: (lag.current_offset_position, lag.offset_lag) for p, lag in lags["counts"].items()} == {
            p: (end, 0) for p, end in ends.items()}
    finally:
        assert app.close(timeout=60)
        cluster.close()
    with pytest.raises(RuntimeStateError, match="it is NOT_RUNNING"):
        app.all_local_store_partition_lags()
