"""input.buffer.max.bytes (KIP-770), on both backends: when the records a thread buffers exceed
its share of the bound in key and value bytes, every partition with records buffered is paused on
the main consumer, and resumed once processing brings the buffers back under it; nothing is lost
or reordered by the pause."""

from __future__ import annotations

import time

import pytest

from streams import App, AppState
from streams.errors import ConfigError
from streams.runtime.config import DEFAULT_INPUT_BUFFER_MAX_BYTES, StreamsConfig
from streams.runtime.task_manager import BYTES, RECORDS

from _runtime_util import Cluster, two_input_topology, unique, wait_for

CAP = 4000  # bytes: about 20 of the records below


@pytest.fixture
def cluster(backend_config):
    c = Cluster(backend_config)
    yield c
    c.close()


# with the record bound: both bounds are crossed by any two records, so whatever the consumer
# hands over first, the partition is paused for both at once
@pytest.mark.parametrize("threads,record_bound,cap", [(1, None, CAP), (2, None, CAP), (1, 1, 300)],
                         ids=["one-thread", "two-threads", "with-record-bound"])
def test_a_thread_over_its_byte_share_pauses_what_it_buffers_and_resumes_once_under(cluster, tmp_path, threads,
                                                                                     record_bound, cap):
    """The task reads two topics; one stays empty, so the task idles (max.task.idle.ms is long)
    while the other's records pile up past the thread's share of the byte bound (the bound split
    between the threads): that partition is paused. A record on the empty topic, later than all
    the others, ends the wait: the partition is resumed once the task has processed its buffer.
    With buffered.records.per.partition exceeded too, the partition is paused for both and
    resumed only once both let it go."""
    a, b, sink = unique("ia"), unique("ib"), unique("iout")
    cluster.create_topics(1, a, b, sink)
    records = [(b"k%d" % (i % 5), b"v%03d" % i + b"." * 200) for i in range(300)]
    cluster.produce(a, records)
    share = cap // threads
    app = App(two_input_topology(a, b, sink),
              {**cluster.config, "application.id": unique("inbytes"), "state.dir": str(tmp_path / "state"),
               "commit.interval.ms": 100, "input.buffer.max.bytes": cap, "max.task.idle.ms": 600_000,
               "num.stream.threads": threads}
              | ({} if record_bound is None else {"buffered.records.per.partition": record_bound}))
    app.start()
    try:
        assert app.wait_for_state(AppState.RUNNING, timeout=60)
        assert [t.task_manager.input_buffer_max_bytes for t in app.threads] == [share] * threads
        tp = (a, 0)
        seen = {}

        def paused_over_bytes():
            for thread in app.threads:
                tm = thread.task_manager
                if tp in tm.held_by(BYTES) and (record_bound is None) is (tp not in tm.held_by(RECORDS)):
                    seen["tm"], seen["bytes"] = tm, tm.buffered_bytes()[0]
                    return True
            return False
        wait_for(paused_over_bytes, 30, "the idle task's partition paused for its bytes")
        tm = seen["tm"]
        assert seen["bytes"] > share

        def reported() -> list:
            return [m.value for m in app.metrics()
                    if m.name == "input-buffer-bytes-total" and m.group == "stream-task-metrics"]
        # Kafka's task metric (KIP-770) reports what the task buffers: over the share while it idles
        assert len(reported()) == 1 and reported()[0] >= seen["bytes"] > share
        # b's record, later than all of a's, ends the wait: a's records go through, then the task
        # idles again on a (drained, KIP-695) holding b's record: the partition resumed, 5 bytes left
        now_ms = int(time.time() * 1000)
        cluster.produce(b, [(b"k", b"last")], timestamps=[now_ms + 60_000])
        msgs = cluster.read_all(sink, 1, until=lambda got: len(got) >= len(records), timeout=60)
        assert [(m.key(), m.value()) for m in msgs] == records  # all of them, once, in order
        wait_for(lambda: not tm.held_by(BYTES) and not tm.held_by(RECORDS), 30, "the partition resumed")
        wait_for(lambda: reported() == [len(b"k") + len(b"last")], 30, "b's record alone buffered")
        # fetched again after the resume: a record on a lets b's through
        cluster.produce(a, [(b"k", b"after")], timestamps=[now_ms + 120_000])
        msgs = cluster.read_all(sink, 1, until=lambda got: len(got) > len(records), timeout=60)
        assert [m.value() for m in msgs[len(records):]] == [b"last"]
    finally:
        assert app.close(timeout=60)


@pytest.mark.parametrize("value", [-1, "lots", 1.5])
def test_input_buffer_max_bytes_must_be_a_non_negative_int(value):
    with pytest.raises(ConfigError, match="input.buffer.max.bytes"):
        StreamsConfig.parse({"application.id": "a", "bootstrap.servers": "x", "input.buffer.max.bytes": value})


def test_the_default_bound_is_kip_770s_and_a_setting_wins():
    base = {"application.id": "a", "bootstrap.servers": "x"}
    assert StreamsConfig.parse(base).input_buffer_max_bytes == DEFAULT_INPUT_BUFFER_MAX_BYTES == 512 * 1024 * 1024
    assert StreamsConfig.parse(base | {"input.buffer.max.bytes": "0"}).input_buffer_max_bytes == 0
