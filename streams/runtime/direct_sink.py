"""A sink's per-record work as one Python function over the embedded producer's queues.

The stateless DSL nodes before a sink already run fused (one stage call per node). Each call
still costs a Python frame, and on this path the frame is most of the cost, so a sink whose
producer offers a `QueueView` (replication/clients/producer.py) gets its whole work as one
generated function: serialize (C serializers), pick the murmur2 partition (remembered per key),
append to the partition's queue. Two nodes commonly found right before a repartition sink are
folded into the same function (group_by's key selection, a flat_map_values before it), so word
count's first sub-topology runs one frame per input line plus the user's functions.

The function is generated from one template (`_BODY`) for each combination, so the body exists
once. Anything off the common path (a None key, headers, a pending delivery failure, a
serializer error, a queue produce() must check first) goes to `slow`, the sink's ordinary
stage. Failures call the marker of the node they belong to (`values_failed`,
`selector_failed`, `failed`), innermost first, exactly as the separate stages do.

When the C module `streams.runtime._sink` is built, the stage is its `DirectSink` instead, made
from the same namespace: it runs the common path per value in C (the values of a line, the
selector, the serializers, the murmur2 partition, the queue entry, kick and poll) and hands any
other case to two functions generated from the template's parts (`sink_rest`: after the key
selection; `sink_tail`: after serialization), so the uncommon cases still exist once. The
generated function stays the stage without the C module.
"""

from __future__ import annotations

import time
from typing import Any, Callable, Optional

from eddy.murmur2 import murmur2_partition

try:  # the C stage (optional: without a compiler the template's function is the stage)
    from streams.runtime import _sink as _accel
except ImportError:  # pragma: no cover - depends on the build
    _accel = None

_POLL_EVERY = 4096  # as RecordCollector: serve delivery reports regularly
_KEY_PARTITIONS_MAX = 100_000

# The sink's work for one record (key, value), in three parts: the key selection, the checks
# and serialization, and what follows serialization. `SKIP` ends this record's work ("return"
# in the plain function, "continue" inside a flat_map_values loop). The C stage (_sink.c) runs
# the common path itself and hands the rest of a record to the last two parts (`sink_rest`,
# `sink_tail`), so each uncommon case is written once, here.
_SELECT = """\
k = key
if key_selector is not None:
    try:
        k = key_selector(key, value)
    except BaseException:
        selector_failed()
        raise
"""
_REST = """\
queues = view.topics.get(topic)
if queues is None or k is None or headers or collector._error is not None:
    if k is None and drop_null_keys:
        SKIP
    slow(k, value, timestamp, headers)
    SKIP
try:
    try:
        key_bytes = key_serialize(k)
        if value is k and same_serializer:
            value_bytes = key_bytes
        else:
            value_bytes = None if value is None else value_serialize(value)
    except Exception:
        slow(k, value, timestamp, headers)
        SKIP
TAIL
except BaseException:
    failed()
    raise
"""
_TAIL = """\
partition = partitions.get(key_bytes)
if partition is None or counted[0] != len(queues):
    if counted[0] != len(queues) or len(partitions) >= KEY_PARTITIONS_MAX:
        partitions.clear()
        counted[0] = len(queues)
    partition = partitions[key_bytes] = murmur2_partition(key_bytes, len(queues))
queue = queues[partition]
if queue.cb is not on_delivery:  # produce() to the partition chosen (it sets cb)
    collector._send_sink(topic, key_bytes, value_bytes, partition, timestamp)
    SKIP
if append_entry(queue.entries, key_bytes, value_bytes, timestamp or now_ns() // 1_000_000) >= queue.kick_at:
    kick(queue)
collector._since_poll += 1
if collector._since_poll >= POLL_EVERY:
    collector._since_poll = 0
    producer.poll(0)
"""


def _indent(text: str, spaces: int) -> str:
    pad = " " * spaces
    return "".join(pad + line if line.strip() else line for line in text.splitlines(True))


_REST_BODY = _REST.replace("TAIL\n", _indent(_TAIL, 4))
_BODY = _SELECT + _REST_BODY


def _source(flat: bool) -> str:
    if not flat:
        return "def sink_direct(key, value, timestamp, headers):\n" + _indent(_BODY.replace("SKIP", "return"), 4)
    return ("def sink_direct(key, line, timestamp, headers):\n"
            "    try:\n"
            "        for value in values_fn(line):\n"
            + _indent(_BODY.replace("SKIP", "continue"), 12)
            + "    except BaseException:\n"
            "        values_failed()\n"
            "        raise\n")


# The C stage's two Python parts: one record's work after the key selection (k chosen), and
# after serialization (queues as looked up before serializing).
_PARTS = ("def sink_rest(k, value, timestamp, headers):\n" + _indent(_REST_BODY.replace("SKIP", "return"), 4)
          + "\n\ndef sink_tail(key_bytes, value_bytes, queues, timestamp):\n"
          "    try:\n" + _indent(_TAIL.replace("SKIP", "return"), 8)
          + "    except BaseException:\n"
          "        failed()\n"
          "        raise\n")

_CODE = {flat: compile(_source(flat), f"<direct sink{' (flat)' if flat else ''}>", "exec") for flat in (False, True)}
_PARTS_CODE = compile(_PARTS, "<direct sink parts>", "exec")


def direct_sink_stage(collector: Any, view: Any, topic: str, key_serialize: Callable[[Any], bytes],
                      value_serialize: Callable[[Any], bytes], slow: Callable[[Any, Any, int, Any], None],
                      failed: Callable[[], None], drop_null_keys: bool, *,
                      key_selector: Optional[Callable[[Any, Any], Any]] = None,
                      selector_failed: Optional[Callable[[], None]] = None,
                      values_fn: Optional[Callable[[Any], Any]] = None,
                      values_failed: Optional[Callable[[], None]] = None) -> Callable[[Any, Any, int, Any], None]:
    """The stage `stage(key, value, timestamp, headers)` of a sink on `topic` (see the module
    docstring). With `key_selector`, it first does a key-select node's work; with `values_fn`,
    a flat_map_values node's before that (then the stage's `value` is the node's input)."""
    namespace = {
        "collector": collector, "producer": collector.producer, "view": view, "topic": topic,
        "on_delivery": collector._on_sink_delivery, "kick": view.kick, "append_entry": view.append,
        "now_ns": time.time_ns,
        "key_serialize": key_serialize, "value_serialize": value_serialize,
        "same_serializer": key_serialize is value_serialize, "slow": slow, "failed": failed,
        "drop_null_keys": drop_null_keys, "key_selector": key_selector, "selector_failed": selector_failed,
        "values_fn": values_fn, "values_failed": values_failed, "partitions": {}, "counted": [0],
        "murmur2_partition": murmur2_partition, "KEY_PARTITIONS_MAX": _KEY_PARTITIONS_MAX,
        "POLL_EVERY": _POLL_EVERY, "BaseException": BaseException, "Exception": Exception, "len": len,
    }
    exec(_CODE[values_fn is not None], namespace)  # noqa: S102 - our own template, compiled once
    stage = namespace["sink_direct"]
    # The C stage appends queue entries itself: only where the producer says it may (the view's
    # `untracked_entries` capability, see QueueView).
    if _accel is not None and getattr(view, "untracked_entries", False):
        exec(_PARTS_CODE, namespace)  # noqa: S102 - the same template's parts
        stage = _accel.DirectSink(namespace)
        stage.__name__ = "sink_direct"

    # The nodes before the sink that may fold into it, outermost last: a key selection, then a
    # flat_map_values before that (KeySelectProcessor.fuse / FlatMapValuesProcessor.fuse ask).
    if key_selector is None and values_fn is None:
        def with_key_selector(select: Callable[[Any, Any], Any], select_failed: Callable[[], None]) -> Any:
            return direct_sink_stage(collector, view, topic, key_serialize, value_serialize, slow, failed,
                                     drop_null_keys, key_selector=select, selector_failed=select_failed)
        stage.with_key_selector = with_key_selector
    if values_fn is None:
        def with_values_from(fn: Callable[[Any], Any], fn_failed: Callable[[], None]) -> Any:
            return direct_sink_stage(collector, view, topic, key_serialize, value_serialize, slow, failed,
                                     drop_null_keys, key_selector=key_selector, selector_failed=selector_failed,
                                     values_fn=fn, values_failed=fn_failed)
        stage.with_values_from = with_values_from
    return stage
