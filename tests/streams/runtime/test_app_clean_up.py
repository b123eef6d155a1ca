"""App.clean_up (Kafka's KafkaStreams.cleanUp): a stopped instance's local state is deleted and
the next start restores every store from its changelog; a running instance's state is never
touched."""

from __future__ import annotations

import pytest

from state.errors import LockError
from streams import App, AppState
from streams.runtime.errors import RuntimeStateError

from _runtime_util import Cluster, RestoredCounts, make_lines, unique, wait_for, wordcount_topology


def _task_dirs(app_dir) -> list[str]:
    return sorted(p.name for p in app_dir.iterdir() if p.is_dir() and p.name[0].isdigit())


def test_clean_up_deletes_a_stopped_instances_state_and_the_next_start_restores_it(backend_config, tmp_path):
    cluster = Cluster(backend_config)
    lines, out = unique("lines"), unique("counts")
    cluster.create_topics(2, lines, out)
    records, expected = make_lines(400, seed=3, vocabulary=20)
    app_id = unique("cleanup")
    config = {**cluster.config, "application.id": app_id, "state.dir": str(tmp_path), "commit.interval.ms": 100}
    app_dir = tmp_path / app_id
    app = App(wordcount_topology(lines, out), config)
    try:
        app.clean_up()  # before the first start: nothing to delete
        cluster.produce(lines, records)
        app.start()
        assert app.wait_for_state(AppState.RUNNING, timeout=60)
        store = app.store("counts")
        wait_for(lambda: all(store.get(w) == n for w, n in expected.items()), 60, "exact counts")
        with pytest.raises(RuntimeStateError, match="while it is RUNNING: close it first"):
            app.clean_up()
        # another instance on the same state directory cannot clean it while this one runs
        with pytest.raises(LockError, match="used by another running instance"):
            App(wordcount_topology(lines, out), config).clean_up()
        assert "1_0" in _task_dirs(app_dir) and all(store.get(w) == n for w, n in expected.items())
    finally:
        assert app.close(timeout=60)
    process_id = (app_dir / "eddy-process-metadata").read_text()
    app.clean_up()
    assert _task_dirs(app_dir) == []
    assert (app_dir / "eddy-process-metadata").read_text() == process_id  # the instance stays itself

    again = App(wordcount_topology(lines, out), config)
    restored = RestoredCounts()
    again.set_global_state_restore_listener(restored)
    try:
        again.start()
        assert again.wait_for_state(AppState.RUNNING, timeout=60)
        store = again.store("counts")
        wait_for(lambda: all(store.get(w) == n for w, n in expected.items()), 60, "the counts restored")
        assert restored.ended >= len(expected)  # every word's count came back from the changelog
    finally:
        assert again.close(timeout=60)
        cluster.close()
