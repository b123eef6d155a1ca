"""KGroupedTable.count over a caching store counts runs of Change records at the bytes level
(streams/dsl/ops/table_count.py, the C loop state.cache._cache.increment_run with each record's
increment): on the TopologyTestDriver (the production route) it must emit exactly what the
per-record aggregation emits. Expected outputs are derived by hand from Kafka's
KTableRepartitionMap and KTableAggregate; the driver commits after each input record."""

import random

import pytest

from streams import StreamsBuilder, serdes
from streams.dsl import Materialized
from streams.dsl.ops import table_count
from streams.dsl.ops.aggregate import add_to_stamped
from streams.testing import TopologyTestDriver

S = serdes.STRING
I64 = serdes.INT64
CONFIG = {"application.id": "tc"}


def _count(records, bulk, monkeypatch, value_serde=S, mapper=None, spy=None):
    """The table count's output records (key, count, timestamp) and its store's contents;
    `records` are (user, group, timestamp), or callables run between two of them."""
    if not bulk:
        monkeypatch.setattr(table_count.TableCountBytes, "of", classmethod(lambda cls, store: None))
    if spy is not None:
        real = table_count.TableCountBytes.__init__

        def init(self, store, below):
            real(self, store, below)
            run = self.run

            def counted(keys, timestamps, clock, messages):
                spy.append(len(keys))
                run(keys, timestamps, clock, messages)
            self.run = counted
        monkeypatch.setattr(table_count.TableCountBytes, "__init__", init)
    b = StreamsBuilder()
    (b.table("users", key_serde=S, value_serde=value_serde)
        .group_by(mapper or (lambda user, group: (group, user)), key_serde=S, value_serde=value_serde)
        .count(store=Materialized.as_("per-group"))
        .to_stream().to("out", key_serde=S, value_serde=I64))
    with TopologyTestDriver(b.build(), CONFIG) as d:
        inp = d.create_input_topic("users", S, value_serde)
        for record in records:
            if callable(record):
                record()
            else:
                user, group, t = record
                inp.pipe_input(user, group, timestamp=t)
        out = [(r.key, r.value, r.timestamp) for r in d.create_output_topic("out", S, I64).read_records_to_list()]
        store = d.get_timestamped_key_value_store("per-group")
        stored = {k: (v.value, v.timestamp) for k, v in store.all()}
    monkeypatch.undo()
    return out, stored


RECORDS = [
    ("alice", "eu", 10),
    ("bob", "eu", 5),  # eu: 2, stamped max(10, 5)
    ("alice", "us", 20),  # eu loses alice first (1 @ 20), then us gains her (1 @ 20)
    ("bob", "eu", 7),  # kept in eu: one Change(bob, bob), -1 then +1, stamped max(20, 7)
    ("alice", None, 25),  # a tombstone: us loses alice (0 @ 25), the count stays
    ("carol", "ap", 3),  # a new group: 1 stamped with its own record's timestamp
    ("alice", "us", 1),  # back in us: 1 @ max(25, 1); the table warns of the out-of-order update
]
EXPECTED = [("eu", 1, 10), ("eu", 2, 10), ("eu", 1, 20), ("us", 1, 20), ("eu", 1, 20), ("us", 0, 25),
            ("ap", 1, 3), ("us", 1, 25)]


def test_a_cached_table_count_counts_in_bulk_as_kafka_counts(monkeypatch):
    runs = []
    out, stored = _count(RECORDS, True, monkeypatch, spy=runs)
    assert out == EXPECTED
    assert stored == {"eu": (1, 20), "us": (1, 25), "ap": (1, 3)}
    assert sum(runs) == 8  # every repartition record went through the bulk run (a move sends two)
    assert _count(RECORDS, False, monkeypatch) == (out, stored)


def test_a_group_with_no_count_has_nothing_to_subtract_from(monkeypatch):
    """A group_by whose mapping changes between a value's addition and its removal sends the
    old pair to a group that never counted it: the subtractor does not run (no aggregate),
    the group's entry is a delete of nothing, and nothing is emitted for it (Kafka)."""
    def counted(bulk):
        moved = {"x": "g1"}

        def move():
            moved.update(x="g2", y="g3")
        # u counted in g1; then its old pair goes to g2 (which never counted it), its new to g3
        return _count([("u", "x", 1), move, ("u", "y", 3)], bulk, monkeypatch,
                      mapper=lambda user, value: (moved[value], user))
    expected = ([("g1", 1, 1), ("g3", 1, 3)], {"g1": (1, 1), "g3": (1, 3)})
    assert counted(True) == counted(False) == expected


def test_random_updates_emit_what_the_per_record_count_emits(monkeypatch):
    rng = random.Random(7)
    records = []
    for _ in range(400):
        user = f"u{rng.randrange(30)}"
        group = rng.choice([None, "a", "b", "c", "d", "e"]) if rng.random() < 0.9 else None
        records.append((user, group, rng.randrange(1000)))
    runs = []
    bulk = _count(records, True, monkeypatch, spy=runs)
    assert sum(runs) > 400  # moves send two records
    assert bulk == _count(records, False, monkeypatch)
    # the final counts are the table's final groups, whatever the order of the updates
    final = {}
    for user, group, _ in records:
        final[user] = group
    expected = {}
    for group in final.values():
        if group is not None:
            expected[group] = expected.get(group, 0) + 1
    assert {k: v for k, (v, _) in bulk[1].items() if v} == expected


def test_values_whose_serde_does_not_round_trip_take_the_per_record_route(monkeypatch):
    """JSON values (not round-tripping): the flag byte is not trusted to say which sides a
    deserialized Change has, so the bulk run is not offered and each record goes alone."""
    runs = []
    records = [("alice", {"g": "eu"}, 1), ("bob", {"g": "eu"}, 2), ("alice", {"g": "us"}, 3)]
    out, stored = _count(records, True, monkeypatch, value_serde=serdes.JSON,
                         mapper=lambda user, v: (v["g"], {"u": user}), spy=runs)
    assert runs == []
    assert out == [("eu", 1, 1), ("eu", 2, 2), ("eu", 1, 3), ("us", 1, 3)]


@pytest.mark.parametrize("serde, expected", [(S, True), (serdes.INT64, True), (serdes.JSON, False),
                                             (serdes.DOUBLE, False)])
def test_takes_changes_only_over_round_tripping_inner_serdes(serde, expected):
    from streams.dsl.change import ChangeSerde
    assert table_count.takes_changes(ChangeSerde(serde)) is expected
    assert table_count.takes_changes(serde) is False


def test_a_record_that_is_not_a_serialized_change_stops_the_run():
    """The source's deserializer check lets no other flag byte through; were one to come, the
    run names it instead of counting it as some increment."""
    from state.cache import CachingKeyValueStore, ThreadCache
    from state.memory_kv import InMemoryKeyValueStore
    from state.timestamped import TimestampedKeyValueStore
    from streams.errors import ProcessingError

    class Message:
        def __init__(self, value):
            self._value = value

        def value(self):
            return self._value

    store = TimestampedKeyValueStore(CachingKeyValueStore(InMemoryKeyValueStore("c"), ThreadCache(1_000_000)),
                                     S, I64)
    count = table_count.TableCountBytes.of(store)
    assert count is not None
    with pytest.raises(ProcessingError, match="flag byte 7"):
        count.run([b"g"], [1], None, [Message(b"u\x07")])


def _stamped(timestamp, value_bytes):
    return timestamp.to_bytes(8, "big", signed=True) + value_bytes


@pytest.mark.parametrize("serde,old,increment,expected", [
    (I64, 41, 1, 42), (I64, 5, -1, 4), (I64, 7, 0, 7), (serdes.INT32, 41, 1, 42), (serdes.INT32, 5, -3, 2),
], ids=["int64-add", "int64-subtract", "int64-zero", "int32-add", "int32-subtract"])
@pytest.mark.parametrize("stored_ts,record_ts,stamp", [(10, 20, 20), (30, 20, 30)], ids=["record-newer", "stored-newer"])
def test_add_to_stamped_adds_in_the_serde_and_keeps_the_newest_timestamp(serde, old, increment, expected,
                                                                         stored_ts, record_ts, stamp):
    """The one addition both counts (and _BytesIncrement over any serde) make to a stored
    timestamped aggregate: the value in the store's serde, the stamp max(stored, record)."""
    value, timestamp = add_to_stamped(_stamped(stored_ts, serde.serialize(old)), record_ts, increment, serde)
    assert (value, timestamp) == (_stamped(stamp, serde.serialize(expected)), stamp)


def test_add_to_stamped_int64_overflow_is_the_serdes_error():
    """INT64's own format first; a sum past int64 goes through the serde, which refuses it."""
    with pytest.raises(Exception) as raised:
        add_to_stamped(_stamped(1, I64.serialize(2**63 - 1)), 2, 1)
    with pytest.raises(type(raised.value)):
        I64.serialize(2**63)
