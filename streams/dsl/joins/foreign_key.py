"""Foreign-key table-table join logic (Kafka's KIP-213 design: SubscriptionSendProcessorSupplier,
SubscriptionReceiveProcessorSupplier, SubscriptionJoinProcessorSupplier,
ForeignTableJoinProcessorSupplier, ResponseJoinProcessorSupplier) with Kafka's wire formats.

What the operator must call. The join spans two sub-topologies and two internal topics:
1. Left table updates (primary key K, value V): `SubscriptionSendLogic.process(key, Change, timestamp,
   partition)` per update; it forwards `forward(foreign_key, SubscriptionWrapper, timestamp)` to the
   subscription topic (`<app>-<name>-subscription-registration-topic`, keyed by the foreign key
   with the foreign key serde, valued with `SubscriptionWrapperSerde`). `partition` is the left
   record's partition (v1 wrappers carry it so the response finds its way back). A None foreign
   key (left join only) must still reach the receive side on some partition.
2. Right side, in the right table's sub-topology, co-partitioned with the subscription topic:
   `SubscriptionReceiveLogic.process(foreign_key, wrapper, timestamp)` per subscription record; it
   keeps the subscription store (`subscription_store_builder`, Kafka's
   ...-SUBSCRIPTION-STATE-STORE) and forwards to `SubscriptionJoinLogic.process(combined_key,
   change, timestamp)`, which looks the right table up and forwards
   `forward(primary_key, SubscriptionResponseWrapper, timestamp)` to the response topic
   (`<app>-<name>-subscription-response-topic`, partitioned by `wrapper.primary_partition` when
   set, valued with `SubscriptionResponseWrapperSerde`).
   Right table updates: `ForeignTableJoinLogic.process(foreign_key, Change, timestamp)`; it scans
   the subscription store for the foreign key and forwards one response per subscriber, likewise.
3. Left side again: `ResponseJoinLogic.process(primary_key, response, timestamp)` per response; it
   compares the response's hash with the hash of the left table's current value, drops stale
   responses (counted), and forwards `forward(primary_key, result, timestamp)`: the join's new
   value (None = tombstone), which the operator feeds to a table source (materialized when
   `store=` is given, Change(new, old) downstream), as Kafka's FK-join result node does.

Semantics as Kafka's (4.1+, v1 subscription wrappers, with the KAFKA-16407 and KAFKA-18713 fixes
of the send side): the hash is murmur3 x64 128 of the left value serialized with the left value
serde (None for a deleted left value); the instructions are DELETE_KEY_NO_PROPAGATE (foreign key
changed, or a left join's delete: unsubscribe the old one quietly), DELETE_KEY_AND_PROPAGATE
(inner join: left deleted, or its foreign key became None: unsubscribe and send a tombstone),
PROPAGATE_NULL_IF_NO_FK_VAL_AVAILABLE (a result even when the right side is missing: an inner
join's changed key, every left join update, a None key included) and
PROPAGATE_ONLY_IF_FK_VAL_AVAILABLE (inner join: an insert, or the same key again). Result
timestamps: the subscription's or the right update's, the larger of both when the subscription
meets an existing right value.
"""

from __future__ import annotations

import enum
import logging
import struct
from typing import Any, Callable, NamedTuple, Optional

from state.timestamped import ValueAndTimestamp
from streams.dsl.joins.murmur3 import hash128
from streams.dsl.change import Change
from streams.dsl.store_suppliers import BuiltInDslStoreSuppliers, DslKeyValueParams, DslStoreSuppliers, supplier_of
from streams.errors import ProcessingError

__all__ = [
    "Instruction", "SubscriptionWrapper", "SubscriptionResponseWrapper", "SubscriptionWrapperSerde",
    "SubscriptionResponseWrapperSerde", "CombinedKey", "CombinedKeySchema", "UnsupportedVersionError",
    "SubscriptionSendLogic", "SubscriptionReceiveLogic", "SubscriptionJoinLogic", "ForeignTableJoinLogic",
    "ResponseJoinLogic", "subscription_store_builder", "value_hash",
]

log = logging.getLogger(__name__)

SUBSCRIPTION_VERSION_0 = 0
SUBSCRIPTION_VERSION_1 = 1
SUBSCRIPTION_CURRENT_VERSION = SUBSCRIPTION_VERSION_1
RESPONSE_CURRENT_VERSION = 0
_HASH = struct.Struct(">qq")
_I32 = struct.Struct(">i")


class UnsupportedVersionError(ProcessingError):
    """A subscription or response wrapper of a version this code does not know (Kafka's
    UnsupportedVersionException)."""


class Instruction(enum.IntEnum):
    DELETE_KEY_NO_PROPAGATE = 0x00
    DELETE_KEY_AND_PROPAGATE = 0x01
    PROPAGATE_NULL_IF_NO_FK_VAL_AVAILABLE = 0x02
    PROPAGATE_ONLY_IF_FK_VAL_AVAILABLE = 0x03


Hash = Optional[tuple]


class SubscriptionWrapper(NamedTuple):
    hash: Hash
    instruction: Instruction
    primary_key: Any
    version: int = SUBSCRIPTION_CURRENT_VERSION
    primary_partition: Optional[int] = None


class SubscriptionResponseWrapper(NamedTuple):
    original_value_hash: Hash
    foreign_value: Any
    version: int = RESPONSE_CURRENT_VERSION
    # not serialized: the response sink's partitioner routes by it
    primary_partition: Optional[int] = None


def value_hash(value_serde: Any, value: Any) -> Hash:
    """Kafka's hash of a left value: murmur3 x64 128 of its serialized bytes; None for None."""
    if value is None:
        return None
    data = value_serde.serialize(value) if value_serde is not None else value
    if data is None:
        return None
    return hash128(data)


def _serialize(serde: Any, obj: Any, what: str) -> bytes:
    data = obj if serde is None else serde.serialize(obj)
    if not isinstance(data, (bytes, bytearray)):
        raise ProcessingError(f"foreign-key join: {what} {obj!r} did not serialize to bytes (got {data!r})")
    return bytes(data)


class SubscriptionWrapperSerde:
    """Kafka's SubscriptionWrapperSerde: {1 bit hash-is-null}{7 bits version}{1 byte instruction}
    {16 bytes hash, unless null}{primary key}{4 bytes primary partition, version 1 only}.
    `upgrade_from_v0` writes version 0 (Kafka's upgrade.from <= 3.3)."""

    name = "subscription_wrapper"

    def __init__(self, primary_key_serde: Any = None, *, upgrade_from_v0: bool = False) -> None:
        self.primary_key_serde = primary_key_serde
        self.upgrade_from_v0 = upgrade_from_v0

    def serialize(self, wrapper: Optional[SubscriptionWrapper]) -> Optional[bytes]:
        if wrapper is None:
            return None
        version = wrapper.version
        if not 0 <= version <= 0x7F:
            raise UnsupportedVersionError(f"SubscriptionWrapper version {version} is outside 0..127")
        if self.upgrade_from_v0:
            version = SUBSCRIPTION_VERSION_0
        elif version > SUBSCRIPTION_CURRENT_VERSION:
            raise UnsupportedVersionError(f"Unsupported SubscriptionWrapper version {version}")
        pk = _serialize(self.primary_key_serde, wrapper.primary_key, "primary key")
        if wrapper.hash is None:
            head = bytes((version | 0x80, int(wrapper.instruction)))
        else:
            head = bytes((version, int(wrapper.instruction))) + _HASH.pack(*wrapper.hash)
        if version == SUBSCRIPTION_VERSION_0:
            return head + pk
        if wrapper.primary_partition is None:
            raise ProcessingError("a version 1 SubscriptionWrapper needs the primary partition")
        return head + pk + _I32.pack(wrapper.primary_partition)

    def deserialize(self, data: Optional[bytes]) -> Optional[SubscriptionWrapper]:
        if data is None:
            return None
        if len(data) < 2:
            raise ProcessingError(f"SubscriptionWrapper too short ({len(data)} bytes): {data!r}")
        version = data[0] & 0x7F
        hash_is_null = bool(data[0] & 0x80)
        try:
            instruction = Instruction(data[1])
        except ValueError:
            raise ProcessingError(f"Unknown instruction byte value = {data[1]}") from None
        pos = 2
        hash_ = None
        if not hash_is_null:
            if len(data) < pos + 16:
                raise ProcessingError(f"SubscriptionWrapper too short for its hash ({len(data)} bytes)")
            hash_ = _HASH.unpack_from(data, pos)
            pos += 16
        end = len(data) - 4 if version > 0 else len(data)
        if end < pos:
            raise ProcessingError(f"SubscriptionWrapper too short for its primary partition ({len(data)} bytes)")
        raw_pk = data[pos:end]
        pk = raw_pk if self.primary_key_serde is None else self.primary_key_serde.deserialize(raw_pk)
        partition = _I32.unpack_from(data, end)[0] if version > 0 else None
        return SubscriptionWrapper(hash_, instruction, pk, version, partition)


class SubscriptionResponseWrapperSerde:
    """Kafka's SubscriptionResponseWrapperSerde: {1 bit hash-is-null}{7 bits version}
    {16 bytes hash, unless null}{the foreign value's bytes, absent for None}."""

    name = "subscription_response_wrapper"

    def __init__(self, foreign_value_serde: Any = None) -> None:
        self.foreign_value_serde = foreign_value_serde

    def serialize(self, response: Optional[SubscriptionResponseWrapper]) -> Optional[bytes]:
        if response is None:
            return None
        if response.version < 0:
            raise UnsupportedVersionError("SubscriptionResponseWrapper version cannot be negative")
        value = b"" if response.foreign_value is None else _serialize(
            self.foreign_value_serde, response.foreign_value, "foreign value")
        if response.original_value_hash is None:
            return bytes((response.version | 0x80,)) + value
        return bytes((response.version,)) + _HASH.pack(*response.original_value_hash) + value

    def deserialize(self, data: Optional[bytes]) -> Optional[SubscriptionResponseWrapper]:
        if data is None:
            return None
        if not data:
            raise ProcessingError("SubscriptionResponseWrapper is empty")
        version = data[0] & 0x7F
        pos = 1
        hash_ = None
        if not data[0] & 0x80:
            if len(data) < 17:
                raise ProcessingError(f"SubscriptionResponseWrapper too short for its hash ({len(data)} bytes)")
            hash_ = _HASH.unpack_from(data, 1)
            pos = 17
        raw = data[pos:]
        if not raw:
            value = None
        else:
            value = raw if self.foreign_value_serde is None else self.foreign_value_serde.deserialize(raw)
        return SubscriptionResponseWrapper(hash_, value, version, None)


class CombinedKey(NamedTuple):
    foreign_key: Any
    primary_key: Any


class CombinedKeySchema:
    """Kafka's CombinedKeySchema: {4-byte BE foreign key length}{foreign key}{primary key}, so one
    prefix scan finds every subscriber of a foreign key."""

    def __init__(self, foreign_key_serde: Any, primary_key_serde: Any) -> None:
        self.foreign_key_serde = foreign_key_serde
        self.primary_key_serde = primary_key_serde

    def prefix_bytes(self, foreign_key: Any) -> bytes:
        fk = _serialize(self.foreign_key_serde, foreign_key, "foreign key")
        return _I32.pack(len(fk)) + fk

    def to_bytes(self, foreign_key: Any, primary_key: Any) -> bytes:
        return self.prefix_bytes(foreign_key) + _serialize(self.primary_key_serde, primary_key, "primary key")

    def from_bytes(self, data: bytes) -> CombinedKey:
        if len(data) < 4:
            raise ProcessingError(f"combined key too short ({len(data)} bytes): {data!r}")
        n = _I32.unpack_from(data)[0]
        if n < 0 or 4 + n > len(data):
            raise ProcessingError(f"combined key {data[:32]!r}: foreign key length {n} runs past its end")
        fk, pk = data[4:4 + n], data[4 + n:]
        fks, pks = self.foreign_key_serde, self.primary_key_serde
        return CombinedKey(fk if fks is None else fks.deserialize(fk), pk if pks is None else pks.deserialize(pk))


def subscription_store_builder(name: str, primary_key_serde: Any, *, suppliers: Optional[DslStoreSuppliers] = None,
                               logging_enabled: bool = True, log_config: Optional[dict] = None) -> Any:
    """The right side's subscription store: combined-key bytes -> ValueAndTimestamp of
    SubscriptionWrapper (Kafka's timestamped store with SubscriptionWrapperSerde values), made
    by `suppliers` (RocksDB unless given)."""
    from state.stores import Stores

    supplier = supplier_of(suppliers or BuiltInDslStoreSuppliers.ROCKS_DB, "key_value", DslKeyValueParams(name, True))
    builder = Stores.timestamped_key_value_store_builder(supplier, None, SubscriptionWrapperSerde(primary_key_serde))
    return builder.with_logging_enabled(log_config) if logging_enabled else builder.with_logging_disabled()


def _warn_drop(dropped: Any, what: str) -> None:
    log.warning("Skipping record due to %s.", what)
    dropped.count += 1


class SubscriptionSendLogic:
    """Left table updates -> subscription records keyed by the foreign key (Kafka's
    SubscriptionSendProcessorSupplier)."""

    def __init__(self, foreign_key_extractor: Callable[[Any], Any], foreign_key_serde: Any, value_serde: Any,
                 forward: Callable[[Any, SubscriptionWrapper, int], None], *, left_join: bool, dropped: Any) -> None:
        self.foreign_key_extractor = foreign_key_extractor
        self.foreign_key_serde = foreign_key_serde
        self.value_serde = value_serde
        self.forward = forward
        self.left_join = left_join
        self.dropped = dropped

    def _fk_bytes(self, foreign_key: Any) -> Optional[bytes]:
        return None if foreign_key is None else _serialize(self.foreign_key_serde, foreign_key, "foreign key")

    def process(self, key: Any, change: Change, timestamp: int, partition: int) -> None:
        instructions = (self._left_join_instructions(change) if self.left_join
                        else self._inner_join_instructions(change))
        if not instructions:
            return
        hash_ = value_hash(self.value_serde, change.new_value)
        for foreign_key, instruction in instructions:
            self.forward(foreign_key, SubscriptionWrapper(hash_, instruction, key, SUBSCRIPTION_CURRENT_VERSION,
                                                          partition), timestamp)

    def _left_join_instructions(self, change: Change) -> list:
        new_value, old_value = change.new_value, change.old_value
        if old_value is None and new_value is None:
            return []  # deleting a key that is not there: nothing to say
        extract = self.foreign_key_extractor
        old_fk = None if old_value is None else extract(old_value)
        new_fk = None if new_value is None else extract(new_value)
        sends = []
        if old_fk is not None and self._fk_bytes(new_fk) != self._fk_bytes(old_fk):
            # the new subscription lives elsewhere: drop the old one quietly (a response here would
            # emit a spurious left-only result before the real one, Kafka's KAFKA-18713)
            sends.append((old_fk, Instruction.DELETE_KEY_NO_PROPAGATE))
        # every change gets a response, with a None foreign key too (KIP-962): a left join always
        # has a result, and a delete (new_fk None, hash None) brings back its tombstone this way
        sends.append((new_fk, Instruction.PROPAGATE_NULL_IF_NO_FK_VAL_AVAILABLE))
        return sends

    def _inner_join_instructions(self, change: Change) -> list:
        new_value, old_value = change.new_value, change.old_value
        extract = self.foreign_key_extractor
        old_fk = None if old_value is None else extract(old_value)
        if new_value is None:
            # deleted: the old key's result (if it joined) becomes a tombstone
            return [] if old_fk is None else [(old_fk, Instruction.DELETE_KEY_AND_PROPAGATE)]
        new_fk = extract(new_value)
        if new_fk is None:
            _warn_drop(self.dropped, "null foreign key")
            # the row no longer joins: unsubscribe and delete its result (Kafka's KAFKA-16407)
            return [] if old_fk is None else [(old_fk, Instruction.DELETE_KEY_AND_PROPAGATE)]
        if old_fk is None:
            # an insert, or a key set where there was none (KAFKA-16407): no old result to replace
            return [(new_fk, Instruction.PROPAGATE_ONLY_IF_FK_VAL_AVAILABLE)]
        if self._fk_bytes(new_fk) != self._fk_bytes(old_fk):
            # the old key's result must be replaced even if the new key has no right value yet
            return [(old_fk, Instruction.DELETE_KEY_NO_PROPAGATE),
                    (new_fk, Instruction.PROPAGATE_NULL_IF_NO_FK_VAL_AVAILABLE)]
        # same key: without a right value the old row did not join either, nothing to delete
        return [(new_fk, Instruction.PROPAGATE_ONLY_IF_FK_VAL_AVAILABLE)]


class SubscriptionReceiveLogic:
    """Subscription records -> the subscription store, and Change(new, old) of the subscription
    keyed by CombinedKey (Kafka's SubscriptionReceiveProcessorSupplier)."""

    def __init__(self, store: Any, key_schema: CombinedKeySchema,
                 forward: Callable[[CombinedKey, Change, int], None], *, dropped: Any) -> None:
        self.store = store
        self.key_schema = key_schema
        self.forward = forward
        self.dropped = dropped

    def process(self, foreign_key: Any, wrapper: SubscriptionWrapper, timestamp: int) -> None:
        if foreign_key is None and wrapper.instruction != Instruction.PROPAGATE_NULL_IF_NO_FK_VAL_AVAILABLE:
            _warn_drop(self.dropped, "null foreign key")
            return
        if wrapper.version > SUBSCRIPTION_CURRENT_VERSION:
            raise UnsupportedVersionError("SubscriptionWrapper is of an incompatible version.")
        new = ValueAndTimestamp(wrapper, timestamp)
        if foreign_key is None:  # a left join's null foreign key: nothing to remember
            change = Change(new, None)
        else:
            store_key = self.key_schema.to_bytes(foreign_key, wrapper.primary_key)
            old = self.store.get(store_key)
            if wrapper.instruction in (Instruction.DELETE_KEY_AND_PROPAGATE, Instruction.DELETE_KEY_NO_PROPAGATE):
                # the tombstone is logged at the subscription's time (Kafka's context.timestamp())
                self.store.delete(store_key, timestamp)
            else:
                self.store.put(store_key, new, timestamp)
            change = Change(new, old)
        self.forward(CombinedKey(foreign_key, wrapper.primary_key), change, timestamp)


class SubscriptionJoinLogic:
    """A received subscription meets the right table: a response to the primary key (Kafka's
    SubscriptionJoinProcessorSupplier)."""

    def __init__(self, foreign_value_getter: Callable[[Any], Optional[ValueAndTimestamp]],
                 forward: Callable[[Any, SubscriptionResponseWrapper, int], None]) -> None:
        self.foreign_value_getter = foreign_value_getter
        self.forward = forward

    def process(self, combined_key: CombinedKey, change: Change, timestamp: int) -> None:
        subscription = change.new_value
        if subscription is None:
            raise ProcessingError("the subscription join never sees a subscription without a new value")
        wrapper = subscription.value
        if wrapper.version > SUBSCRIPTION_CURRENT_VERSION:
            raise UnsupportedVersionError("SubscriptionWrapper is of an incompatible version.")
        fk = combined_key.foreign_key
        foreign = None if fk is None else self.foreign_value_getter(fk)
        if foreign is None:
            ts = subscription.timestamp
        else:
            ts = max(subscription.timestamp, foreign.timestamp)
        I = Instruction
        instruction = wrapper.instruction
        if instruction == I.DELETE_KEY_AND_PROPAGATE:
            value: Any = None
        elif instruction == I.PROPAGATE_NULL_IF_NO_FK_VAL_AVAILABLE:
            value = None if foreign is None else foreign.value
        elif instruction == I.PROPAGATE_ONLY_IF_FK_VAL_AVAILABLE:
            if foreign is None:
                return
            value = foreign.value
        else:  # DELETE_KEY_NO_PROPAGATE
            return
        self.forward(combined_key.primary_key,
                     SubscriptionResponseWrapper(wrapper.hash, value, RESPONSE_CURRENT_VERSION,
                                                 wrapper.primary_partition), ts)


class ForeignTableJoinLogic:
    """Right table updates -> a response to every subscriber of the foreign key (Kafka's
    ForeignTableJoinProcessorSupplier); the response carries the subscriber's hash."""

    def __init__(self, store: Any, key_schema: CombinedKeySchema,
                 forward: Callable[[Any, SubscriptionResponseWrapper, int], None], *, dropped: Any) -> None:
        self.store = store
        self.key_schema = key_schema
        self.forward = forward
        self.dropped = dropped

    def process(self, foreign_key: Any, change: Change, timestamp: int) -> None:
        if foreign_key is None:
            _warn_drop(self.dropped, "null key")
            return
        prefix = self.key_schema.prefix_bytes(foreign_key)
        responses = []
        with self.store.prefix_scan(prefix) as it:
            for store_key, vat in it:
                wrapper = vat.value
                responses.append((self.key_schema.from_bytes(store_key).primary_key,
                                  SubscriptionResponseWrapper(wrapper.hash, change.new_value, RESPONSE_CURRENT_VERSION,
                                                              wrapper.primary_partition)))
        for primary_key, response in responses:
            self.forward(primary_key, response, timestamp)


class ResponseJoinLogic:
    """Responses -> join results on the left side, stale ones dropped by hash (Kafka's
    ResponseJoinProcessorSupplier)."""

    def __init__(self, value_getter: Callable[[Any], Optional[ValueAndTimestamp]], value_serde: Any,
                 joiner: Callable[[Any, Any], Any], forward: Callable[[Any, Any, int], None], *,
                 left_join: bool, dropped: Any) -> None:
        self.value_getter = value_getter
        self.value_serde = value_serde
        self.joiner = joiner
        self.forward = forward
        self.left_join = left_join
        self.dropped = dropped

    def process(self, primary_key: Any, response: SubscriptionResponseWrapper, timestamp: int) -> None:
        if response.version != RESPONSE_CURRENT_VERSION:
            raise UnsupportedVersionError("SubscriptionResponseWrapper is of an incompatible version.")
        current = self.value_getter(primary_key)
        current_value = None if current is None else current.value
        current_hash = value_hash(self.value_serde, current_value)
        if current_hash != response.original_value_hash:
            # the left value changed since this subscription was sent: a newer response follows
            log.debug("Dropping FK-join response due to hash mismatch. Expected %s. Actual %s",
                      response.original_value_hash, current_hash)
            self.dropped.count += 1
            return
        if response.foreign_value is None and (not self.left_join or current_value is None):
            result = None
        else:
            result = self.joiner(current_value, response.foreign_value)
        self.forward(primary_key, result, timestamp)
