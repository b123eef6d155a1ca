"""A store write that gives no timestamp is stamped as Kafka stamps it (context.timestamp(): the
record the node is processing, a punctuation's time in a punctuation), never with the wall clock:
its changelog record and its cache entry carry that time. Checked on the changelog records the
TopologyTestDriver kept (the driver's wall clock stays at 0; the machine's is far from every
timestamp here)."""

import pytest

from state.stores import Stores
from streams import Processor, PunctuationType, SessionWindows, StreamsBuilder, Topology, serdes
from streams.dsl import Materialized
from streams.testing import TopologyTestDriver

S = serdes.STRING


def changelog(driver, store):
    topic = driver.changelog_topic(store)
    return [(r.key, r.value, r.timestamp) for r in driver.producer_history(topic)]


class Writer(Processor):
    """Writes each record without a timestamp (a value "del" deletes its key), forwards it 100 ms
    later, then writes "after:<key>" (still its own record's time); a stream-time punctuation
    every 1000 ms writes "tick"."""

    def init(self, context):
        self.context = context
        self.store = context.get_state_store("seen")
        context.schedule(1000, PunctuationType.STREAM_TIME, lambda t: self.store.put("tick", str(t)))

    def process(self, record):
        if record.value == "del":
            self.store.delete(record.key)
        else:
            self.store.put(record.key, record.value)
        self.context.forward(record.with_timestamp(record.timestamp + 100))
        self.store.put("after:" + record.key, record.value)


class Child(Processor):
    """Writes the record it is given (stamped by its parent) without a timestamp."""

    def init(self, context):
        self.store = context.get_state_store("child")

    def process(self, record):
        self.store.put(record.key, record.value)


def topology(caching):
    t = Topology()
    t.add_source("src", "in", key_serde=S, value_serde=S)
    t.add_processor("writer", Writer, "src")
    t.add_processor("child", Child, "writer")
    for name, node in (("seen", "writer"), ("child", "child")):
        builder = Stores.key_value_store_builder(Stores.persistent_key_value_store(name), S, S)
        t.add_state_store(builder.with_caching_enabled() if caching else builder, node)
    return t


@pytest.mark.parametrize("caching", [False, True], ids=["uncached", "cached"])
def test_processor_api_writes_without_a_timestamp_carry_their_records(caching):
    with TopologyTestDriver(topology(caching), {"application.id": "stamps"}) as d:
        inp = d.create_input_topic("in", S, S)
        inp.pipe_input("a", "1", timestamp=500)
        inp.pipe_input("a", "del", timestamp=1200)
        # a@500: a and after:a at 500 (the child's a at 600: the record it was forwarded); the
        # stream-time punctuation (aligned to 0) fires at stream time 500 after the record: tick
        # "500" at 500. a@1200 (del): the tombstone of a and after:a at 1200, then tick "1200" at
        # 1200 (the next one was due at 1000); the child's a at 1300. With caching the driver's
        # commit after each record (after the punctuation) writes the keys down in that order too
        assert changelog(d, "seen") == [(b"a", b"1", 500), (b"after:a", b"1", 500), (b"tick", b"500", 500),
                                        (b"a", None, 1200), (b"after:a", b"del", 1200), (b"tick", b"1200", 1200)]
        assert changelog(d, "child") == [(b"a", b"1", 600), (b"a", b"del", 1300)]


@pytest.mark.parametrize("caching", [False, True], ids=["uncached", "cached"])
def test_a_merged_away_sessions_removal_is_logged_at_its_records_time(caching):
    b = StreamsBuilder()
    mat = Materialized.as_("sessions")
    (b.stream("in", key_serde=S, value_serde=S).group_by_key()
        .windowed_by(SessionWindows.of_inactivity_gap_and_grace(5, 100))
        .count(store=mat if caching else mat.with_caching_disabled()))
    with TopologyTestDriver(b.build(), {"application.id": "stamps"}) as d:
        inp = d.create_input_topic("in", S, S)
        inp.pipe_input("k", "v", timestamp=0)
        inp.pipe_input("k", "v", timestamp=4)
        # k@0: session [0,0]; k@4 merges it: [0,0] removed and [0,4] put, both at k@4's time 4
        # (Kafka's context.timestamp(); the forwarded records carry the sessions' ends)
        logged = [(key[:1], value is None, t) for key, value, t in changelog(d, "sessions")]
        assert logged == [(b"k", False, 0), (b"k", True, 4), (b"k", False, 4)]
