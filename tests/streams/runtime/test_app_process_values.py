"""KStream.process_values on the embedded runtime: a fixed-key processor deduplicating by key with
a RocksDB store, across a restart (the store is rebuilt, so a key seen in the first run is
still dropped in the second), and a grouping below it that needs no repartition topic."""

from __future__ import annotations

from state.stores import Stores
from streams import App, AppState, FixedKeyProcessor, StreamsBuilder, serdes

from _runtime_util import Cluster, embedded_config, unique, wait_for

S, I64 = serdes.STRING, serdes.INT64


class FirstOnly(FixedKeyProcessor):
    """Forwards a key's first value only, remembering the keys seen in the store "seen"."""

    def init(self, context):
        self.context = context
        self.seen = context.get_state_store("seen")

    def process(self, record):
        if self.seen.get(record.key) is None:
            self.seen.put(record.key, record.timestamp)
            self.context.forward(record.with_value(record.value.upper()))


def topology(source: str, out: str, counts: str):
    b = StreamsBuilder()
    b.add_state_store(Stores.key_value_store_builder(Stores.persistent_key_value_store("seen"), S, I64))
    firsts = b.stream(source, key_serde=S, value_serde=S).process_values(FirstOnly, stores=["seen"], name="first-only")
    firsts.to(out, value_serde=S)  # a fixed-key processor's values have no serde yet (Kafka)
    firsts.group_by_key().count(store=counts)
    return b.build()


def test_a_fixed_key_processors_store_survives_a_restart(tmp_path):
    """One partition, so each run's last record ("z"-like marker keys) is processed after the
    others: once its count shows, the ones before it were deduplicated or forwarded."""
    source, out = unique("pv-in"), unique("pv-out")
    cluster = Cluster(embedded_config(tmp_path))
    cluster.create_topics(1, source, out)
    app_id = unique("pv")
    config = {**cluster.config, "application.id": app_id, "state.dir": str(tmp_path / "state"),
              "processing.guarantee": "exactly_once_v2", "commit.interval.ms": 100}
    assert not [t for t in topology(source, out, "firsts").internal_topics if t.endswith("-repartition")]

    def run(records: list, marker: str) -> dict:
        cluster.produce(source, records + [(marker.encode(), b"end")])
        app = App(topology(source, out, "firsts"), config)
        app.start()
        try:
            assert app.wait_for_state(AppState.RUNNING, timeout=60)
            wait_for(lambda: app.store("firsts").get(marker) == 1, 60, f"the marker {marker} counted")
            return {key: app.store("firsts").get(key) for key in "abc"}
        finally:
            app.close()

    assert run([(b"a", b"x"), (b"b", b"y"), (b"a", b"z")], "m1") == {"a": 1, "b": 1, "c": None}
    # "a" and "b" were seen in the first run: the restored store drops them
    assert run([(b"a", b"w"), (b"c", b"v"), (b"b", b"u")], "m2") == {"a": 1, "b": 1, "c": 1}
    got = cluster.read_all(out, 1, until=lambda msgs: any(m.key() == b"m2" for m in msgs))
    assert [(m.key(), m.value()) for m in got] == [(b"a", b"X"), (b"b", b"Y"), (b"m1", b"END"), (b"c", b"V"),
                                                   (b"m2", b"END")]
