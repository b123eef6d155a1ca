"""KGroupedTable.count's adder and subtractor, and its bulk form: the count of a run of
Change records updated at the bytes level below the typed store, as the stream count is
(streams/dsl/ops/aggregate.py's `_BytesIncrement`).

A count ignores the values: what a Change record does to its group's count depends only on
which of its sides are there, which its serialized form says in its last byte (Kafka's
ChangedSerializer: 0 old only, 1 new only, 2 both). On a stored count each is an increment
(-1, +1, 0: the subtractor's then the adder's), the timestamp max(stored, record); on no count
the adder starts from zero (1, stamped with the record's timestamp), and an old-only Change has
nothing to subtract from (a delete, stamped with the record's timestamp): Kafka's
KTableAggregate as `aggregate_change` in streams/dsl/ops/table.py states it for any aggregation.
"""

from __future__ import annotations

import struct
from typing import Any, Optional

from state.timestamped import TimestampedKeyValueStore
from state.typed import find_caching_layer
from streams import serdes as _serdes
from streams.dsl.change import ChangeSerde
from streams.dsl.ops.aggregate import add_to_stamped
from streams.engine.stages import KeyRun
from streams.errors import ProcessingError


def count_add(key: Any, value: Any, aggregate: Any) -> int:
    """KGroupedTable.count's adder (from no aggregate: the initializer's zero)."""
    return (0 if aggregate is None else aggregate) + 1


def count_subtract(key: Any, value: Any, aggregate: int) -> int:
    """KGroupedTable.count's subtractor."""
    return aggregate - 1


_INT64 = struct.Struct(">q")
# a Change record's flag byte -> its increment as a signed byte; 0x80 marks a flag that is none
# of the three (the source's deserializer check lets none through)
_INCREMENT_OF_FLAG = bytes([0xFF, 0x01, 0x00] + [0x80] * 253)
_UNKNOWN = 0x80


def takes_changes(value_serde: Any) -> bool:
    """Whether a source with this value serde gives the bulk count what it reads: Change bytes
    whose inner values deserialize to a value, never None (a round-tripping inner serde), so
    that the flag byte says which sides the deserialized Change has."""
    return isinstance(value_serde, ChangeSerde) and _serdes.round_trips(value_serde.inner)


class TableCountBytes:
    """KGroupedTable.count on the layer below its typed store (`of(store)`, else None, when
    the store holds INT64 counts over a layer that updates bytes in runs): `run(keys, timestamps,
    clock, messages)` counts a run of serialized keys, messages[i] key i's consumed Change
    record (its flag byte and its record context)."""

    @classmethod
    def of(cls, store: Any) -> Optional["TableCountBytes"]:
        if (not isinstance(store, TimestampedKeyValueStore) or store.key_serde is None
                or store.inner_value_serde is not _serdes.INT64):
            return None
        below = store.wrapped
        # the caching layer itself: its flush listener decodes what this writes
        if below is not find_caching_layer(store) or not callable(getattr(below, "update_many", None)):
            return None
        return cls(store, below)

    def __init__(self, store: TimestampedKeyValueStore, below: Any) -> None:
        self.key_serde = store.key_serde
        update_many = below.update_many
        pack_stamp, one = _INT64.pack, _INT64.pack(1)

        def update(old: Optional[bytes], timestamp: int, increment: int) -> tuple[Optional[bytes], int]:
            """One Change record's effect on its group's stored count (see the module doc)."""
            if old is None:
                return (None if increment < 0 else pack_stamp(timestamp) + one), timestamp
            return add_to_stamped(old, timestamp, increment)
        # the caching layer adds increments to a timestamped int64 itself where it can
        update.int64_increment = True  # type: ignore[attr-defined]
        update.timestamped = True  # type: ignore[attr-defined]

        def run(keys: list, timestamps: list, clock: Any, messages: list) -> None:
            increments = bytes([m.value()[-1] for m in messages]).translate(_INCREMENT_OF_FLAG)
            if _UNKNOWN in increments:
                at = increments.index(_UNKNOWN)
                raise ProcessingError(f"a grouped table count got a record that is not a serialized Change "
                                      f"(flag byte {messages[at].value()[-1]})")
            update_many(keys, update, timestamps, clock, messages, increments)
        self.run: KeyRun = run
