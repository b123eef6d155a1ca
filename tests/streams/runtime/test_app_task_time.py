"""A task's time on the real runtime, across a restart: the partition time committed in the offset
metadata is read back before processing (Kafka's StreamTask.initializeTaskTime), so a restarted
task's stream time does not fall back to its first record's; and a store write that gives no
timestamp is logged at its record's time (Kafka's context.timestamp()), not the wall clock."""

from __future__ import annotations

from state.stores import Stores
from streams import App, AppState, Processor, Topology, serdes

from _runtime_util import Cluster, unique, wait_for

S = serdes.STRING


class StreamTimeOf(Processor):
    """Writes each record to its store without a timestamp and forwards (key, the task's stream
    time as its record is processed)."""

    def init(self, context):
        self.context = context
        self.store = context.get_state_store("seen")

    def process(self, record):
        self.store.put(record.key, record.value)
        self.context.forward(record.with_value(str(self.context.current_stream_time_ms)))


def topology(source: str, sink: str) -> Topology:
    t = Topology()
    t.add_source("src", source, key_serde=S, value_serde=S)
    t.add_processor("time", StreamTimeOf, "src")
    t.add_state_store(Stores.key_value_store_builder(Stores.persistent_key_value_store("seen"), S, S), "time")
    t.add_sink("out", sink, "time", key_serde=S, value_serde=S)
    return t



def run(cluster: Cluster, config: dict, source: str, sink: str, records: list, outputs: int) -> None:
    """Start the app, write `records` ((key, timestamp)), wait until `outputs` records are out
    and their input offsets committed, close it."""
    app = App(topology(source, sink), config)
    app.start()
    try:
        assert app.wait_for_state(AppState.RUNNING, timeout=60), app.state
        cluster.produce(source, [(k.encode(), b"v") for k, _ in records], partition=0,
                        timestamps=[t for _, t in records])
        cluster.read_all(sink, 1, until=lambda got: len(got) >= outputs, timeout=60)
        wait_for(lambda: sum(t.processed_total for t in app.threads) >= len(records), 30, "records processed")
        # the commit every 100 ms carries the partition time; waiting for it (not only for the
        # close's commit, which a rebalance on a loaded broker can refuse, leaving at-least-once
        # duplicates for the restart) makes the restart's input exactly the new records
        # (one output per input record: `outputs` is also the input's end offset)
        wait_for(lambda: cluster.committed_offset(config["application.id"], source) == outputs, 30,
                 f"{source}-0 committed up to {outputs}")
    finally:
        assert app.close(timeout=60)  # a clean close commits the offsets with the partition time


def test_a_restarted_task_goes_on_from_its_committed_partition_time(backend_config, tmp_path):
    source, sink = unique("time-in"), unique("time-out")
    cluster = Cluster(backend_config)
    try:
        cluster.create_topics(1, source, sink)
        config = {**cluster.config, "application.id": unique("task-time"), "state.dir": str(tmp_path),
                  "commit.interval.ms": 100}
        run(cluster, config, source, sink, [("a", 100), ("b", 300)], 2)
        run(cluster, config, source, sink, [("c", 200)], 3)
        out = cluster.read_all(sink, 1, until=lambda got: len(got) >= 3)
        # a@100 and b@300: stream time 100, then 300. After the restart c@200 finds the committed
        # partition time 300: the stream time stays 300 (without it, c@200 would make it 200)
        assert [(m.key().decode(), m.value().decode()) for m in out] == [("a", "100"), ("b", "300"), ("c", "300")]
        # the writes gave no timestamp: each changelog record has its input record's
        topic = f"{config['application.id']}-seen-changelog"
        logged = cluster.read_all(topic, 1, until=lambda got: len(got) >= 3)
        assert [(m.key().decode(), m.timestamp()[1]) for m in logged] == [("a", 100), ("b", 300), ("c", 200)]
    finally:
        cluster.close()
