"""Foreign-key join logic, end to end through Kafka's wire formats (subscription and response
records go through their serdes as they would through the internal topics); expected results
derived by hand from Kafka's SubscriptionSend / SubscriptionReceive / SubscriptionJoin /
ForeignTableJoin / ResponseJoin processors."""

import struct

import pytest

from _join_util import Table, opened
from streams import serdes
from streams.dsl.joins.foreign_key import (
    CombinedKey, CombinedKeySchema, ForeignTableJoinLogic, Instruction, ResponseJoinLogic, SubscriptionJoinLogic,
    SubscriptionReceiveLogic, SubscriptionResponseWrapper, SubscriptionResponseWrapperSerde, SubscriptionSendLogic,
    SubscriptionWrapper, SubscriptionWrapperSerde, UnsupportedVersionError, subscription_store_builder, value_hash)
from streams.dsl.joins.murmur3 import DEFAULT_SEED, hash128
from streams.dsl.store_suppliers import BuiltInDslStoreSuppliers
from streams.errors import ProcessingError
from streams.metrics import MetricsRegistry, task_dropped_records_sensor

S = serdes.STRING

# Kafka's Murmur3Test.testMurmur3_128 vectors (seed 123), as Java longs
KAFKA_VECTORS = {
    b"21": (5857341059704281894, -5288187638297930763),
    b"foobar": (-351361463397418609, 8959716011862540668),
    b"a-little-bit-long-string": (8836256500583638442, -198172363548498523),
    b"a-little-bit-longer-string": (1838346159335108511, 8794688210320490705),
    b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8": (-4024021876037397259, -1482317706335141238),
    b"abc": (1489494923063836066, -5440978547625122829),
}


@pytest.mark.parametrize("data", sorted(KAFKA_VECTORS))
def test_murmur3_128_matches_kafkas_vectors(data):
    assert hash128(data, 123) == KAFKA_VECTORS[data]


def test_murmur3_default_seed_and_empty_input():
    assert DEFAULT_SEED == 104729
    assert hash128(b"") != hash128(b"\x00")
    assert value_hash(S, "abc") == hash128(b"abc")
    assert value_hash(S, None) is None


def extract(value):
    fk = value.split("|")[0]
    return fk or None


class FkJoin:
    """The five processors wired as Kafka wires them; internal topics are queues of bytes."""

    def __init__(self, tmp_path, left_join, joiner=None, extractor=extract):
        self.reg = MetricsRegistry()
        dropped = task_dropped_records_sensor(self.reg, "t", "0_0")
        self.left, self.right, self.out = Table(), Table(), []
        self.subscription_topic, self.response_topic = [], []
        sub_serde, resp_serde = SubscriptionWrapperSerde(S), SubscriptionResponseWrapperSerde(S)
        self.sub_serde, self.resp_serde = sub_serde, resp_serde
        schema = CombinedKeySchema(S, S)
        self.store = opened(subscription_store_builder("subs", S, suppliers=BuiltInDslStoreSuppliers.IN_MEMORY, logging_enabled=False), tmp_path)

        def to_subscription_topic(fk, wrapper, ts):
            self.subscription_topic.append((fk, sub_serde.serialize(wrapper), ts))

        def to_response_topic(pk, response, ts):
            self.response_topic.append((pk, resp_serde.serialize(response), ts))

        self.send = SubscriptionSendLogic(extractor, S, S, to_subscription_topic, left_join=left_join, dropped=dropped)
        join = SubscriptionJoinLogic(self.right.get, to_response_topic)
        self.receive = SubscriptionReceiveLogic(self.store, schema, join.process, dropped=dropped)
        self.foreign = ForeignTableJoinLogic(self.store, schema, to_response_topic, dropped=dropped)
        self.response = ResponseJoinLogic(self.left.get, S, joiner or (lambda v, fv: f"{v}+{fv}"),
                                          lambda k, v, ts: self.out.append((k, v, ts)), left_join=left_join,
                                          dropped=dropped)
        self.auto = True

    def put_left(self, key, value, ts):
        self.send.process(key, self.left.update(key, value, ts), ts, partition=0)
        if self.auto:
            self.pump()

    def put_right(self, key, value, ts):
        self.foreign.process(key, self.right.update(key, value, ts), ts)
        if self.auto:
            self.pump()

    def pump(self):
        while self.subscription_topic or self.response_topic:
            while self.subscription_topic:
                fk, data, ts = self.subscription_topic.pop(0)
                self.receive.process(fk, self.sub_serde.deserialize(data), ts)
            while self.response_topic:
                pk, data, ts = self.response_topic.pop(0)
                self.response.process(pk, self.resp_serde.deserialize(data), ts)

    def subscribers(self):
        schema = CombinedKeySchema(S, S)
        with self.store.all() as it:
            return sorted(tuple(schema.from_bytes(k)) for k, _ in it)

    def dropped(self):
        return self.reg.value("dropped-records-total", task_id="0_0")


def test_inner_foreign_key_join(tmp_path):
    j = FkJoin(tmp_path, left_join=False)
    j.put_right("r1", "R1", 1)            # no subscriber yet
    j.put_left("k1", "r1|a", 2)           # PROPAGATE_ONLY_IF_FK_VAL_AVAILABLE: R1 is there
    j.put_left("k2", "r2|b", 3)           # no r2 yet: nothing
    assert j.out == [("k1", "r1|a+R1", 2)]
    j.put_right("r2", "R2", 4)            # the subscriber k2 gets a response
    assert j.out[1:] == [("k2", "r2|b+R2", 4)]
    j.put_left("k1", "r2|c", 5)           # foreign key r1 -> r2: unsubscribe r1 quietly, join R2
    assert j.out[2:] == [("k1", "r2|c+R2", 5)]
    assert j.subscribers() == [("r2", "k1"), ("r2", "k2")]
    j.put_right("r1", "R1b", 6)           # r1 has no subscriber left
    assert len(j.out) == 3
    j.put_right("r2", None, 7)            # right tombstone: both results deleted, in key order
    assert j.out[3:] == [("k1", None, 7), ("k2", None, 7)]
    j.put_left("k1", "r3|d", 8)           # new key without a right value: tombstone replaces the old result
    assert j.out[5:] == [("k1", None, 8)]
    j.put_left("k2", None, 9)             # left deleted: DELETE_KEY_AND_PROPAGATE, hash None
    assert j.out[6:] == [("k2", None, 9)]
    assert j.subscribers() == [("r3", "k1")]
    j.put_left("k3", "|x", 10)            # null foreign key in an inner join: dropped
    assert len(j.out) == 7 and j.dropped() == 1


def test_left_foreign_key_join(tmp_path):
    j = FkJoin(tmp_path, left_join=True)
    j.put_left("k1", "r1|a", 1)           # no right value: joiner(left, None)
    assert j.out == [("k1", "r1|a+None", 1)]
    j.put_right("r1", "R1", 2)
    assert j.out[1:] == [("k1", "r1|a+R1", 2)]
    j.put_left("k1", "r2|b", 3)           # DELETE_KEY_NO_PROPAGATE to r1 (KAFKA-18713: no spurious
    assert j.out[2:] == [("k1", "r2|b+None", 3)]  # left-only result), then r2: one result
    assert j.subscribers() == [("r2", "k1")]
    j.put_left("k1", "|c", 4)             # null foreign key: unsubscribe r2 quietly, the null key travels
    assert j.out[3:] == [("k1", "|c+None", 4)]    # and comes back as joiner(value, None) (KIP-962)
    assert j.subscribers() == []
    j.put_left("k1", None, 5)             # deleted: hash None on both ends, a tombstone
    assert j.out[4:] == [("k1", None, 5)]
    assert j.dropped() == 0


def test_stale_responses_are_dropped_by_hash(tmp_path):
    j = FkJoin(tmp_path, left_join=False)
    j.put_right("r1", "R1", 1)
    j.auto = False
    j.put_left("k1", "r1|a", 2)
    j.put_left("k1", "r1|z", 3)           # same key, new value: the first response is stale
    j.pump()
    assert j.out == [("k1", "r1|z+R1", 3)]
    assert j.dropped() == 1


def test_deleted_left_drops_in_flight_response(tmp_path):
    j = FkJoin(tmp_path, left_join=True)
    j.put_right("r1", "R1", 1)
    j.auto = False
    j.put_left("k1", "r1|a", 2)
    j.put_left("k1", None, 3)
    j.pump()
    # the response to "r1|a" carries its hash, the current value is gone: dropped; a left join's
    # delete sends DELETE_KEY_NO_PROPAGATE to r1 (no response) and PROPAGATE_NULL_IF_NO_FK_VAL_AVAILABLE
    # to the null foreign key with hash None (Kafka's leftJoinInstructions): one tombstone
    assert j.out == [("k1", None, 3)]
    assert j.dropped() == 1


def test_inner_join_foreign_key_to_and_from_none(tmp_path):
    """Kafka's KAFKA-16407: an inner join row whose foreign key becomes None loses its result; one
    whose foreign key was None joins when it gets one."""
    j = FkJoin(tmp_path, left_join=False)
    j.put_right("r1", "R1", 1)
    j.put_left("k1", "|a", 2)             # no foreign key: dropped, no subscription
    assert j.out == [] and j.subscribers() == [] and j.dropped() == 1
    j.put_left("k1", "r1|b", 3)           # old key None: an insert, PROPAGATE_ONLY_IF_FK_VAL_AVAILABLE
    assert j.out == [("k1", "r1|b+R1", 3)]
    j.put_left("k1", "|c", 4)             # key gone: DELETE_KEY_AND_PROPAGATE to r1 -> tombstone
    assert j.out[1:] == [("k1", None, 4)]
    assert j.subscribers() == [] and j.dropped() == 2
    j.put_left("k1", None, 5)             # old key None: nothing to unsubscribe, nothing to say
    assert j.out[2:] == [] and j.dropped() == 2


def test_inner_join_same_key_without_right_value_stays_quiet(tmp_path):
    """Same foreign key again and no right value: the old row did not join either, so no
    tombstone (PROPAGATE_ONLY_IF_FK_VAL_AVAILABLE)."""
    j = FkJoin(tmp_path, left_join=False)
    j.put_left("k1", "r1|a", 1)
    j.put_left("k1", "r1|b", 2)
    assert j.out == [] and j.subscribers() == [("r1", "k1")]
    j.put_right("r1", "R1", 3)            # the subscription carries the latest hash: one result
    assert j.out == [("k1", "r1|b+R1", 3)]


def test_subscription_wrapper_bytes_are_kafkas():
    serde = SubscriptionWrapperSerde(S)
    wrapper = SubscriptionWrapper((1, -2), Instruction.PROPAGATE_ONLY_IF_FK_VAL_AVAILABLE, "pk", 1, 3)
    data = serde.serialize(wrapper)
    assert data == b"\x01\x03" + struct.pack(">qq", 1, -2) + b"pk" + b"\x00\x00\x00\x03"
    assert serde.deserialize(data) == wrapper
    no_hash = SubscriptionWrapper(None, Instruction.DELETE_KEY_AND_PROPAGATE, "pk", 1, 0)
    assert serde.serialize(no_hash) == b"\x81\x01pk\x00\x00\x00\x00"
    assert serde.deserialize(serde.serialize(no_hash)) == no_hash
    v0 = SubscriptionWrapperSerde(S, upgrade_from_v0=True).serialize(wrapper)
    assert v0 == b"\x00\x03" + struct.pack(">qq", 1, -2) + b"pk"
    assert serde.deserialize(v0) == SubscriptionWrapper((1, -2), Instruction.PROPAGATE_ONLY_IF_FK_VAL_AVAILABLE,
                                                        "pk", 0, None)


def test_response_wrapper_bytes_are_kafkas():
    serde = SubscriptionResponseWrapperSerde(S)
    assert serde.serialize(SubscriptionResponseWrapper((5, 6), "fv")) == b"\x00" + struct.pack(">qq", 5, 6) + b"fv"
    assert serde.serialize(SubscriptionResponseWrapper(None, None)) == b"\x80"
    assert serde.deserialize(b"\x80") == SubscriptionResponseWrapper(None, None, 0, None)
    assert serde.deserialize(b"\x00" + struct.pack(">qq", 5, 6)) == SubscriptionResponseWrapper((5, 6), None)


def test_combined_key_schema():
    schema = CombinedKeySchema(S, S)
    assert schema.to_bytes("fk", "pk") == b"\x00\x00\x00\x02fkpk"
    assert schema.prefix_bytes("fk") == b"\x00\x00\x00\x02fk"
    assert schema.from_bytes(b"\x00\x00\x00\x02fkpk") == CombinedKey("fk", "pk")
    with pytest.raises(ProcessingError, match="runs past its end"):
        schema.from_bytes(b"\x00\x00\x00\x09fk")


def test_bad_wrappers_are_named():
    serde = SubscriptionWrapperSerde(S)
    with pytest.raises(ProcessingError, match="Unknown instruction byte value = 9"):
        serde.deserialize(b"\x01\x09pk\x00\x00\x00\x00")
    with pytest.raises(UnsupportedVersionError):
        serde.serialize(SubscriptionWrapper(None, Instruction.DELETE_KEY_NO_PROPAGATE, "pk", 2, 0))
    with pytest.raises(ProcessingError, match="too short"):
        serde.deserialize(b"\x01")
    out = []
    response = ResponseJoinLogic(lambda k: None, S, print, out.append, left_join=False, dropped=None)
    with pytest.raises(UnsupportedVersionError):
        response.process("k", SubscriptionResponseWrapper(None, None, 1), 0)


def kafka_extractor(value):
    return value.split("|")[1]   # Kafka's test values are "value|foreign key"


def kafka_joiner(value, foreign_value):
    return f"({value},{'null' if foreign_value is None else foreign_value})"


@pytest.mark.parametrize("left_join", [False, True])
def test_kafka_join_should_produce_nulls_when_value_has_non_matching_foreign_key(tmp_path, left_join):
    """Kafka's KTableKTableForeignKeyJoinIntegrationTest.joinShouldProduceNullsWhenValueHasNonMatchingForeignKey
    (its assertions read the output as a map: the last value per key of each step)."""
    j = FkJoin(tmp_path, left_join, kafka_joiner, kafka_extractor)

    def step(table, key, value, ts):
        j.out.clear()
        (j.put_left if table == "left" else j.put_right)(key, value, ts)
        return {k: v for k, v, _ in j.out}

    left_only = {"lhs1": "(lhsValue1|rhs1,null)"} if left_join else {}
    assert step("left", "lhs1", "lhsValue1|rhs1", 0) == left_only
    assert step("left", "lhs1", "lhsValue1|rhs2", 1) == {"lhs1": "(lhsValue1|rhs2,null)" if left_join else None}
    assert step("left", "lhs1", "lhsValue1|rhs3", 2) == {"lhs1": "(lhsValue1|rhs3,null)" if left_join else None}
    assert step("right", "rhs1", "rhsValue1", 3) == {}
    assert step("left", "lhs1", "lhsValue1|rhs1", 4) == {"lhs1": "(lhsValue1|rhs1,rhsValue1)"}
    assert step("left", "lhs1", "lhsValue1|rhs2", 5) == {"lhs1": "(lhsValue1|rhs2,null)" if left_join else None}


@pytest.mark.parametrize("left_join", [False, True])
def test_kafka_tombstones_when_deleting_left_records(tmp_path, left_join):
    """Kafka's shouldEmitTombstoneWhenDeletingNonJoiningRecords and
    shouldNotEmitTombstonesWhenDeletingNonExistingRecords."""
    j = FkJoin(tmp_path, left_join, kafka_joiner, kafka_extractor)
    j.put_left("lhs0", None, 0)                 # never existed: nothing
    assert j.out == []
    j.put_left("lhs1", "lhsValue1|rhs1", 1)
    assert j.out == ([("lhs1", "(lhsValue1|rhs1,null)", 1)] if left_join else [])
    j.out.clear()
    j.put_left("lhs1", None, 2)
    assert {k: v for k, v, _ in j.out} == {"lhs1": None}
    j.out.clear()
    j.put_left("lhs1", None, 3)                 # already gone: nothing
    assert j.out == []


@pytest.mark.parametrize("left_join", [False, True])
def test_kafka_should_unsubscribe_old_foreign_key_if_left_side_is_updated(tmp_path, left_join):
    """Kafka's KTableKTableForeignKeyJoinIntegrationTest.shouldUnsubscribeOldForeignKeyIfLeftSideIsUpdated."""
    j = FkJoin(tmp_path, left_join, kafka_joiner, kafka_extractor)

    def step(put, key, value, ts):
        j.out.clear()
        put(key, value, ts)
        return {k: v for k, v, _ in j.out}

    assert step(j.put_right, "rhs1", "rhsValue1", 0) == {}
    assert step(j.put_right, "rhs2", "rhsValue2", 1) == {}
    assert step(j.put_left, "lhs1", "lhsValue1|rhs1", 2) == {"lhs1": "(lhsValue1|rhs1,rhsValue1)"}
    assert step(j.put_left, "lhs1", "lhsValue1|rhs2", 3) == {"lhs1": "(lhsValue1|rhs2,rhsValue2)"}
    assert step(j.put_right, "rhs1", "rhsValue1Delta", 4) == {}
    assert j.subscribers() == [("rhs2", "lhs1")]
