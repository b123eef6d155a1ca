"""A Processor API topology with stream-time punctuation and a state store gives the same output
on TopologyTestDriver and on the real runtime."""

from __future__ import annotations


from state.stores import Stores
from streams import App, AppState, Processor, PunctuationType, Record, Topology, serdes
from streams.testing import TopologyTestDriver

from _runtime_util import Cluster, unique, wait_for

WINDOW = 10


class WindowSum(Processor):
    """Sums values per 10 ms window of event time in a store; a stream-time punctuation emits
    each window once stream time has passed its end (independent of how often it fires)."""

    def init(self, context):
        self.context = context
        self.store = context.get_state_store("sums")
        context.schedule(WINDOW, PunctuationType.STREAM_TIME, self.punctuate)

    def process(self, record):
        start = record.timestamp // WINDOW * WINDOW
        key = f"{record.key}@{start:06d}"
        self.store.put(key, (self.store.get(key) or 0) + record.value)

    def punctuate(self, now):
        closed = [(k, v) for k, v in self.store.all() if int(k.split("@")[1]) + WINDOW <= now]
        for k, v in closed:
            start = int(k.split("@")[1])
            self.context.forward(Record(k, v, start + WINDOW - 1))
            self.store.delete(k)


def topology(source: str, sink: str) -> Topology:
    t = Topology()
    t.add_source("src", source, key_serde=serdes.STRING, value_serde=serdes.INT64)
    t.add_processor("sum", WindowSum, "src")
    t.add_state_store(Stores.key_value_store_builder(Stores.persistent_key_value_store("sums"),
                                                     serdes.STRING, serdes.INT64), "sum")
    t.add_sink("out", sink, "sum", key_serde=serdes.STRING, value_serde=serdes.INT64)
    return t


def _input():
    # in timestamp order; no timestamp 0 (confluent-kafka's produce() reads 0 as "now")
    return [("k", i % 7, 1000 + 3 * i) for i in range(60)]


def test_processor_api_same_output_on_driver_and_runtime(backend_config, tmp_path):
    source, sink = unique("pin"), unique("pout")
    with TopologyTestDriver(topology(source, sink), {"application.id": "ttd"}) as driver:
        inp = driver.create_input_topic(source, serdes.STRING, serdes.INT64)
        for k, v, ts in _input():
            inp.pipe_input(k, v, timestamp=ts)
        expected = driver.create_output_topic(sink, serdes.STRING, serdes.INT64).read_records_to_list()
    assert len(expected) == 17  # windows [1000,1010) .. [1160,1170) closed by stream time 1177
    expected = [(r.key, r.value, r.timestamp) for r in expected]

    cluster = Cluster(backend_config)
    try:
        cluster.create_topics(1, source, sink)
        cluster.produce(source, [(k.encode(), serdes.INT64.serialize(v)) for k, v, _ in _input()],
                        timestamps=[ts for _, _, ts in _input()])
        app = App(topology(source, sink), {**cluster.config, "application.id": unique("papi"),
                                           "state.dir": str(tmp_path), "commit.interval.ms": 100})
        app.start()
        try:
            assert app.wait_for_state(AppState.RUNNING, timeout=60)
            msgs = cluster.read_all(sink, 1, until=lambda got: len(got) >= len(expected), timeout=60)
            got = [(m.key().decode(), serdes.INT64.deserialize(m.value()), m.timestamp()[1]) for m in msgs]
            assert got == expected
            # the last, still open window stays in the store
            store = app.store("sums")
            wait_for(lambda: dict(store.all()) == {"k@001170": sum(v for _, v, ts in _input() if ts >= 1170)},
                     30, "the open window in the store")
        finally:
            assert app.close(timeout=60)
    finally:
        cluster.close()
