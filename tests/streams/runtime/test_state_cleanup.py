"""Directories of tasks an instance no longer has are deleted after state.cleanup.delay.ms
(Kafka Streams' state cleaner); the directories of its own tasks are kept."""

from __future__ import annotations

import os
import time

from streams import App, AppState

from _runtime_util import Cluster, unique, wait_for, wordcount_topology


def test_obsolete_task_directories_are_cleaned_and_owned_ones_kept(backend_config, tmp_path):
    cluster = Cluster(backend_config)
    lines, out = unique("lines"), unique("counts")
    cluster.create_topics(1, lines, out)
    app_id = unique("clean")
    app_dir = tmp_path / app_id
    stale = app_dir / "1_7"  # a task of a partition this app does not have (it moved away long ago)
    (stale / "rocksdb" / "counts").mkdir(parents=True)
    (stale / "rocksdb" / "counts" / "000001.sst").write_bytes(b"old state")
    hour_ago = time.time() - 3600
    for path in (stale / "rocksdb" / "counts", stale / "rocksdb", stale):
        os.utime(path, (hour_ago, hour_ago))
    app = App(wordcount_topology(lines, out), {**cluster.config, "application.id": app_id,
                                               "state.dir": str(tmp_path), "state.cleanup.delay.ms": 1000})
    try:
        app.start()
        assert app.wait_for_state(AppState.RUNNING, timeout=60)
        wait_for(lambda: not stale.exists(), 30, "the obsolete task directory deleted")
        assert (app_dir / "1_0").is_dir()  # the app's own stateful task keeps its directory
        assert app.state is AppState.RUNNING
    finally:
        assert app.close(timeout=60)
        cluster.close()
