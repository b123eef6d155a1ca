"""The seam of the sink accelerator: a sink's per-record work in C over the embedded producer's
queues (`streams.runtime._sink.DirectSink`, see its module comment).

The one Python implementation of that work is the sink's own stage (`SinkNode._sink`: serialize,
then the collector's send path, which queues the record through the producer's `QueueView`,
RecordCollector._queue). Where the C module is built and the producer's view has the
`untracked_entries` capability, `direct_sink_stage` offers the C stage in its place: it runs the
common path itself and hands every other case, before it has any effect, to the sink's stage or
to the collector's send path for serialized bytes. Without the C module the sink's stage is the
stage (tests/streams/runtime/test_sink_direct.py runs both forms on the same input).

The C stage can also do the work of the two nodes most often found right before a repartition
sink (a key selection, a flat_map_values before it: `with_key_selector`, `with_values_from`,
which KeySelectProcessor.fuse and FlatMapValuesProcessor.fuse ask for), so word count's first
sub-topology runs no Python frame per word but the user's functions.
"""

from __future__ import annotations

from typing import Any, Callable, Optional

try:  # the C stage (optional: without a compiler the sink's own stage is the stage)
    from streams.runtime import _sink as _accel
except ImportError:  # pragma: no cover - depends on the build
    _accel = None

def direct_sink_stage(collector: Any, view: Any, topic: str, key_serialize: Callable[[Any], bytes],
                      value_serialize: Callable[[Any], bytes], sink: Callable[[Any, Any, int, Any], None],
                      send: Callable[[Any, Any, int, Any], None], failed: Callable[[], None], *,
                      key_selector: Optional[Callable[[Any, Any], Any]] = None,
                      selector_failed: Optional[Callable[[], None]] = None,
                      values_fn: Optional[Callable[[Any], Any]] = None,
                      values_failed: Optional[Callable[[], None]] = None) -> Optional[Callable[[Any, Any, int, Any], None]]:
    """The C stage `stage(key, value, timestamp, headers)` of a sink on `topic`, or None where
    the C module is not built or the view lacks `untracked_entries`. `sink` is the sink's own
    stage, `send(key_bytes, value_bytes, timestamp, headers)` the collector's send path to
    `topic`. With `key_selector`, the stage first does a key-select node's work; with
    `values_fn`, a flat_map_values node's before that (the stage's `value` is then its input)."""
    if _accel is None or not getattr(view, "untracked_entries", False):
        return None
    stage = _accel.DirectSink({
        "collector": collector, "producer": collector.producer, "view": view, "topic": topic,
        "on_delivery": collector.sink_delivery_callback, "kick": view.kick,
        "key_serialize": key_serialize, "value_serialize": value_serialize,
        "same_serializer": key_serialize is value_serialize, "sink": sink, "send": send, "failed": failed,
        "key_selector": key_selector, "selector_failed": selector_failed,
        "values_fn": values_fn, "values_failed": values_failed, "POLL_EVERY": collector.POLL_EVERY,
    })
    stage.__name__ = "sink_direct"

    # The nodes before the sink that may fold into it, outermost last: a key selection, then a
    # flat_map_values before that.
    if key_selector is None and values_fn is None:
        def with_key_selector(select: Callable[[Any, Any], Any], select_failed: Callable[[], None]) -> Any:
            return direct_sink_stage(collector, view, topic, key_serialize, value_serialize, sink, send, failed,
                                     key_selector=select, selector_failed=select_failed)
        stage.with_key_selector = with_key_selector
    if values_fn is None:
        def with_values_from(fn: Callable[[Any], Any], fn_failed: Callable[[], None]) -> Any:
            return direct_sink_stage(collector, view, topic, key_serialize, value_serialize, sink, send, failed,
                                     key_selector=key_selector, selector_failed=selector_failed,
                                     values_fn=fn, values_failed=fn_failed)
        stage.with_values_from = with_values_from
    return stage


def partition_sender(collector: Any, view: Any, topic: str, partition: int,
                     send: Callable[[Any, Any, int, Any], None]) -> Optional[Callable[[Any, Any, int, Any], None]]:
    """The C form of `send(key_bytes, value_bytes, timestamp, headers)`, the collector's send
    path to `partition` of `topic` (a changelog's records: serialized, the partition fixed), or
    None where the C module is not built or the view lacks `untracked_entries`. Every case but
    the common one (bytes or None key, bytes or None value, a positive timestamp, no headers,
    the partition's queue carrying the collector's own callback) goes to `send`."""
    if _accel is None or not getattr(view, "untracked_entries", False):
        return None
    return _accel.DirectSink({
        "collector": collector, "producer": collector.producer, "view": view, "topic": topic,
        "on_delivery": collector._on_delivery, "kick": view.kick, "key_serialize": None, "value_serialize": None,
        "same_serializer": False, "sink": send, "send": send, "failed": _no_marker, "partition": partition,
        "key_selector": None, "selector_failed": None, "values_fn": None, "values_failed": None,
        "POLL_EVERY": collector.POLL_EVERY,
    })


def _no_marker() -> None:
    """A changelog sender belongs to no node: nothing to mark when it fails."""

