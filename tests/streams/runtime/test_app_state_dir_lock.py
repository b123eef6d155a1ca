"""Two running instances of one application may not share a state directory (Kafka Streams
refuses it too): they would share a process id, so transactional ids and task directories."""

from __future__ import annotations

import pytest

from state.errors import LockError
from streams import App, AppState

from _runtime_util import Cluster, unique, wordcount_topology


def test_second_instance_on_the_same_state_dir_is_refused_until_the_first_closes(backend_config, tmp_path):
    cluster = Cluster(backend_config)
    lines, out = unique("lines"), unique("counts")
    cluster.create_topics(1, lines, out)
    config = {**cluster.config, "application.id": unique("lock"), "state.dir": str(tmp_path)}
    first, second = App(wordcount_topology(lines, out), config), App(wordcount_topology(lines, out), config)
    try:
        first.start()
        with pytest.raises(LockError, match=f"state directory {tmp_path}.* is used by another running instance"):
            second.start()
        assert second.state is AppState.CREATED  # nothing started, nothing to close
        assert first.close(timeout=60)
        third = App(wordcount_topology(lines, out), config)
        third.start()  # the directory is free again
        assert third.close(timeout=60)
    finally:
        first.close(timeout=60)
        cluster.close()
