"""Reading consumed `confluent_kafka.Message` objects fast, for every layer that consumes.

A Message answers eight method calls per record; the C passes of `eddy._messages` read its
fields directly instead, once this module has found where the constructor puts them (probing
messages with distinct values) and verified that a message filled at those offsets is byte for
byte the one the constructor builds. The same verified layout is handed to replication's fetch
decoder (`probed_layout`), so one probe serves the consumer, the restore loop and the engine.

`message_function(name)` gives a C pass (`message_rows`, `partition_runs`, `changelog_records`,
`keyed_run`, `dispatch_run`, `untrack_messages`), or None without the accelerator or the layout:
callers then take their Python path (`message_rows`, `partition_runs`, `payload_bytes` and
`untrack_messages` below have it built in).
EDDY_MESSAGES_PURE_PYTHON=1 forces it.
"""

from __future__ import annotations

import itertools
import logging
import operator
import os
import sys
import threading
from typing import Any, Callable, Iterable, Optional, Sequence

from confluent_kafka import Message

__all__ = ["message_rows", "partition_runs", "payload_bytes", "untrack_messages", "message_function", "probed_layout",
           "layout_arguments", "POINTER_FIELDS", "INT_FIELDS"]

logger = logging.getLogger(__name__)

if os.environ.get("EDDY_MESSAGES_PURE_PYTHON"):
    _accel = None
else:
    try:
        from eddy import _messages as _accel
    except ImportError as _e:  # no compiler at install time, or an unbuilt checkout
        _accel = None
        logger.debug("eddy.messages: pure Python (C accelerator unavailable: %s)", _e)

#: The fields set_message_layout takes, in its argument order after (type, background).
POINTER_FIELDS = ("topic", "value", "key", "headers")
INT_FIELDS = (("offset", 8), ("timestamp", 8), ("partition", 4), ("leader_epoch", 4), ("tstype", 4))

# Distinct probe values per field (all within the field's C type).
_PROBE_INTS = {
    "offset": (0x123456789AB, 0x2468ACE0246, 0x13579BDF135),
    "timestamp": (0x3456789ABCD, 0x1A2B3C4D5E6, 0x2B3C4D5E6F7),
    "partition": (0x1234567, 0x2345671, 0x3456712),
    "leader_epoch": (0x2345678, 0x3456782, 0x4567823),
    "tstype": (1, 2, 0),
}

_lock = threading.Lock()
_probed: dict = {}  # message type -> (background, offsets) or None, once probed and verified


def _probe_layout(message_type: Any) -> tuple[bytes, dict] | None:
    """Where the constructor puts each field of `message_type`: (background, offsets) or None.

    Three probe messages with distinct values: an object field must sit at the one 8-byte
    slot holding that object's address in all three, an int field at the one slot holding its
    value in all three; the remaining bytes (the background) must be the same in all three and
    hold no pointer. Anything else and the layout is not used.
    """
    import ctypes  # noqa: PLC0415 - only the probe needs it

    size = message_type.__basicsize__
    header = object.__basicsize__
    probes = []
    for i in range(3):
        objs = {
            "topic": f"eddy-layout-probe-{i}",
            "value": b"probe-value-%d" % i,
            "key": b"probe-key-%d" % i,
            "headers": [("probe", b"%d" % i)],
        }
        ints = {name: vals[i] for name, vals in _PROBE_INTS.items()}
        msg = message_type(objs["topic"], ints["partition"], ints["offset"], objs["key"], objs["value"],
                           objs["headers"], None, (ints["tstype"], ints["timestamp"]), -1.0,
                           ints["leader_epoch"])
        probes.append((ctypes.string_at(id(msg), size), objs, ints, msg))
    order = sys.byteorder

    def slots(width: int, want: list) -> list[int]:
        return [
            off for off in range(header, size - width + 1, width)
            if all(int.from_bytes(body[off:off + width], order, signed=True) == w
                   for (body, *_), w in zip(probes, want))
        ]

    offsets = {}
    for name in POINTER_FIELDS:
        found = slots(8, [id(objs[name]) for _, objs, _, _ in probes])
        if len(found) != 1:
            return None
        offsets[name] = found[0]
    for name, width in INT_FIELDS:
        found = slots(width, [ints[name] for _, _, ints, _ in probes])
        if len(found) != 1:
            return None
        offsets[name] = found[0]
    backgrounds = set()
    for body, *_ in probes:
        b = bytearray(body)
        for name, off in offsets.items():
            width = 4 if name in ("partition", "leader_epoch", "tstype") else 8
            b[off:off + width] = bytes(width)
        backgrounds.add(bytes(b[header:]))
    if len(backgrounds) != 1:
        return None
    background = backgrounds.pop()
    for off in range(0, len(background) - 7, 8):
        word = int.from_bytes(background[off:off + 8], order)
        if (1 << 32) <= word < (1 << 64) - (1 << 32):  # looks like an address: refuse to copy it
            return None
    return background, offsets


_SAMPLES = (  # (topic, partition, offset, key, value, headers, leader_epoch, timestamp, tstype)
    ("eddy-layout-check", 0, 41, b"k", b"v", None, -1, 1_700_000_000_000, 1),
    ("eddy-layout-check", 0, 42, None, b"v2", [("h", b"x")], -1, 1_700_000_000_005, 1),
    ("eddy-layout-check", 3, 1 << 40, b"", None, [("a", None), ("b", b"")], 7, 5, 2),
)


def _filled_matches_constructor(message_type: Any) -> bool:
    """Messages filled at the layout are byte-identical (after the object header) to the ones the
    constructor builds from the same fields, and answer every accessor the same."""
    import ctypes  # noqa: PLC0415 - only the check needs it

    size = message_type.__basicsize__
    header = object.__basicsize__
    for topic, partition, offset, key, value, headers, epoch, ts, tstype in _SAMPLES:
        m = _accel.fill_message(topic, partition, offset, key, value, headers, epoch, ts, tstype)
        ref = message_type(topic, partition, offset, key, value, headers, None, (tstype, ts), -1.0, epoch)
        if m is None or ctypes.string_at(id(m) + header, size - header) != ctypes.string_at(id(ref) + header,
                                                                                           size - header):
            return False
        for accessor in ("topic", "partition", "offset", "key", "value", "headers", "timestamp",
                         "leader_epoch", "latency", "error"):
            if getattr(m, accessor)() != getattr(ref, accessor)():
                return False
        if len(m) != len(ref):
            return False
    return True


def probed_layout(message_type: Any = Message) -> Optional[tuple[bytes, dict]]:
    """The verified layout of `message_type` as `(background, offsets by field name)`, or None
    (no accelerator, another type than confluent_kafka.Message - a subclass may do more in its
    constructor than set the fields - or a layout that does not verify). Probed once."""
    with _lock:
        if message_type in _probed:
            return _probed[message_type]
        layout = None
        if _accel is not None and message_type is Message:
            try:
                probed = _probe_layout(message_type)
                if probed is not None:
                    _accel.set_message_layout(*layout_arguments(message_type, probed))
                    if _filled_matches_constructor(message_type):
                        layout = probed
            except Exception as e:  # noqa: BLE001 - any surprise means: keep calling the methods
                logger.debug("eddy.messages: layout of %r not usable: %s", message_type, e)
            if layout is None:
                _accel.set_message_layout(None)
        _probed[message_type] = layout
    logger.debug("eddy.messages: %s fields are %s", getattr(message_type, "__name__", message_type),
                 "read directly" if layout is not None else "read through its methods")
    return layout


def layout_arguments(message_type: Any, layout: tuple[bytes, dict]) -> tuple:
    """The arguments of a C module's `set_message_layout` for a probed layout."""
    background, offsets = layout
    return (message_type, background, *(offsets[n] for n in POINTER_FIELDS), *(offsets[n] for n, _ in INT_FIELDS))


def message_function(name: str) -> Optional[Callable[..., Any]]:
    """The C pass `name` over confluent_kafka.Message lists, once their layout is verified; None
    (use the methods) without the accelerator or the layout."""
    if _accel is None or not hasattr(_accel, name) or probed_layout(Message) is None:
        return None
    return getattr(_accel, name)


_message_rows = message_function("message_rows")
_TS_MS = operator.itemgetter(1)  # Message.timestamp() is (type, ms)


_partition_runs = message_function("partition_runs")
_payload_bytes = message_function("payload_bytes")
_FIRST = operator.itemgetter(0)
_SECOND = operator.itemgetter(1)


def partition_runs(messages: list) -> Iterable[tuple[tuple[str, int], list]]:
    """`((topic, partition), [messages])` for each run of consecutive messages of one partition,
    in the order consumed."""
    runs = _partition_runs(messages) if _partition_runs is not None else None
    if runs is None:
        keyed = zip(zip(map(Message.topic, messages), map(Message.partition, messages)), messages)
        runs = ((key, list(map(_SECOND, group))) for key, group in itertools.groupby(keyed, _FIRST))
    return runs


_untrack_messages = message_function("untrack_messages")


def untrack_messages(messages: list) -> None:
    """Leaves consumed messages to no cyclic garbage collection where the C pass can (see
    `untrack_messages` in eddy/_messages.c); nothing otherwise: only what the collector scans
    changes, never a message."""
    if _untrack_messages is not None:
        _untrack_messages(messages)


def payload_bytes(messages: Sequence) -> tuple[int, int]:
    """`(total, largest)`: the key and value bytes of consumed messages (a None key or value
    counts 0), summed and of the largest message."""
    found = _payload_bytes(messages) if _payload_bytes is not None else None
    if found is None:
        sizes = [len(m.key() or b"") + len(m.value() or b"") for m in messages]
        found = (sum(sizes), max(sizes, default=0))
    return found


def message_rows(messages: list) -> Iterable[tuple]:
    """The rows `(key, value, timestamp, headers, offset)` of consumed messages."""
    rows = _message_rows(messages) if _message_rows is not None else None
    if rows is None:
        rows = zip(map(Message.key, messages), map(Message.value, messages),
                   map(_TS_MS, map(Message.timestamp, messages)), map(Message.headers, messages),
                   map(Message.offset, messages))
    return rows
