"""max.poll.records: the most records one poll of a stream thread's main consumer, of its restore
consumer or of the global thread's consumer brings (unless set: 5000 for the main consumer, Kafka
Streams' 1000 for the others), with Kafka Streams' precedence of the prefixed settings. The thread
hands the count to consume(); no form of the key reaches a client."""

from __future__ import annotations

import pytest

from streams import App, AppState
from streams.backends import client_config
from streams.errors import ConfigError
from streams.runtime.config import (DEFAULT_MAX_POLL_RECORDS, GLOBAL_CONSUMER_PREFIX, MAIN_CONSUMER_PREFIX,
                                    MAIN_MAX_POLL_RECORDS, RESTORE_CONSUMER_PREFIX, StreamsConfig)

from _runtime_util import Cluster, Exploding, pass_through_topology, unique, wait_for

BASE = {"application.id": "a", "bootstrap.servers": "x"}
# every form of the key, each with a different value, so that which one won shows
ALL_FORMS = {"max.poll.records": 500, "consumer.max.poll.records": 400, "main.consumer.max.poll.records": 7,
             "restore.consumer.max.poll.records": 3, "global.consumer.max.poll.records": 5}


@pytest.fixture
def cluster(backend_config):
    c = Cluster(backend_config)
    yield c
    c.close()


def _sizes(config: StreamsConfig) -> tuple[int, int, int]:
    return config.max_poll_records, config.restore_max_poll_records, config.global_max_poll_records


def test_the_defaults_are_5000_for_the_main_consumer_and_kafka_streams_1000_for_the_others():
    assert _sizes(StreamsConfig.parse(BASE)) == (MAIN_MAX_POLL_RECORDS, DEFAULT_MAX_POLL_RECORDS,
                                                 DEFAULT_MAX_POLL_RECORDS) == (5000, 1000, 1000)


@pytest.mark.parametrize("settings,sizes", [
    ({"max.poll.records": 50}, (50, 50, 50)),
    ({"max.poll.records": "50", "consumer.max.poll.records": 40}, (40, 40, 40)),
    ({"consumer.max.poll.records": 40, "main.consumer.max.poll.records": 7}, (7, 40, 40)),
    ({"main.consumer.max.poll.records": 7}, (7, 1000, 1000)),
    ({"max.poll.records": 50, "restore.consumer.max.poll.records": 3}, (50, 3, 50)),
    ({"max.poll.records": 50, "global.consumer.max.poll.records": 5}, (50, 50, 5)),
    (ALL_FORMS, (7, 3, 5)),
], ids=["plain", "consumer-over-plain", "main-over-consumer", "main-only", "restore-over-plain", "global-over-plain", "all"])
def test_the_prefixed_setting_wins_over_consumer_over_plain(settings, sizes):
    assert _sizes(StreamsConfig.parse(BASE | settings)) == sizes


@pytest.mark.parametrize("key", ["max.poll.records", "consumer.max.poll.records", "main.consumer.max.poll.records",
                                 "restore.consumer.max.poll.records", "global.consumer.max.poll.records"])
@pytest.mark.parametrize("value", [0, -5, "many", True, 1.5])
def test_a_bad_value_names_its_key(key, value):
    with pytest.raises(ConfigError, match=f"'{key}' must be an int >= 1"):
        StreamsConfig.parse(BASE | {key: value})


def test_no_form_of_the_key_reaches_a_client():
    config = StreamsConfig.parse(BASE | ALL_FORMS | {"main.consumer.fetch.min.bytes": 10})
    clients = client_config(config.backend_config())
    assert not any("max.poll.records" in key for key in clients)
    assert config.consumer_overrides(MAIN_CONSUMER_PREFIX) == {"fetch.min.bytes": 10}
    for prefix in (RESTORE_CONSUMER_PREFIX, GLOBAL_CONSUMER_PREFIX):
        assert config.consumer_overrides(prefix) == {}


def test_a_prefixed_consumer_gets_no_streams_key():
    """consumer_overrides filters with the one list of Kafka Streams' own keys
    (STREAMS_CONFIG_KEYS): a Streams key under a consumer's prefix is not a client setting either.
    bootstrap.servers, a client's key too, passes as Kafka Streams passes it."""
    config = StreamsConfig.parse(BASE | {"restore.consumer.application.id": "other", "restore.consumer.state.dir": "/x",
                                         "restore.consumer.fetch.max.bytes": 1024,
                                         "restore.consumer.bootstrap.servers": "elsewhere:9092"})
    assert config.consumer_overrides(RESTORE_CONSUMER_PREFIX) == {"fetch.max.bytes": 1024,
                                                                  "bootstrap.servers": "elsewhere:9092"}


def test_a_thread_takes_at_most_max_poll_records_a_poll_and_loses_nothing(cluster, tmp_path):
    """Every form of the key set at once (the main consumer's 7 wins, the restore consumer's 3 goes
    to the changelog reader): each poll hands the thread at most 7 records, and every record
    reaches the sink once, in order."""
    src, sink = unique("mpr-in"), unique("mpr-out")
    cluster.create_topics(1, src, sink)
    app = App(pass_through_topology(src, sink, Exploding),
              {**cluster.config, **ALL_FORMS, "application.id": unique("mpr"), "state.dir": str(tmp_path / "state"),
               "commit.interval.ms": 100})
    polls: list[int] = []
    app.start()
    try:
        assert app.wait_for_state(AppState.RUNNING, timeout=60)
        wait_for(lambda: app.threads[0].task_manager.tasks, 30, "the task assigned")
        tm = app.threads[0].task_manager
        assert tm.reader.max_poll_records == 3
        add_records = tm.add_records

        def counted(msgs):
            polls.append(len(msgs))
            return add_records(msgs)
        tm.add_records = counted  # the thread looks it up on each poll
        records = [(f"k{i % 5}", f"v{i}") for i in range(300)]
        cluster.produce(src, records)
        msgs = cluster.read_all(sink, 1, until=lambda got: len(got) >= len(records), timeout=60)
        assert [(m.key().decode(), m.value().decode()) for m in msgs] == records
        assert polls and max(polls) <= 7
        assert sum(polls) == len(records)
    finally:
        assert app.close(timeout=60)
