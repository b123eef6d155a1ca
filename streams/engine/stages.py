"""Stage operators: a DSL operator written once, as a stage.

A stage is `stage(key, value, timestamp, headers)`; an operator builds it with
`stage(down, failed)`: `down` is the next stage (records it emits go there), `failed()` is called
before an error of the operator's own leaves the stage (it names the operator as the failing node
in a fused chain). The engine derives everything else from that one form: in a fused chain
(streams/engine/fusion.py) `down` is the next node's stage; called as a node (`process(record)`,
when its node cannot be fused: several children, a parent that is no stage) `down` forwards a
Record to the node's children through the context. Only user Processors implement `process`.
"""

from __future__ import annotations

from typing import Any, Callable

from streams.processor import Processor, ProcessorContext, Record

Stage = Callable[[Any, Any, int, Any], None]

_new_record = object.__new__  # Record._make inlined (fields already validated)


KeyRun = Callable[[list, list, Any, list], None]  # run(keys, timestamps, clock, messages)


def marking_failures(run: KeyRun, failed: Callable[[], None]) -> KeyRun:
    """A stage's bulk run over serialized keys (the `key_bytes_run` capability,
    streams/engine/accelerated.py) that calls `failed()` before an error leaves it, as the
    stage itself does."""
    def marked(keys: list, timestamps: list, clock: Any, messages: list) -> None:
        try:
            run(keys, timestamps, clock, messages)
        except BaseException:
            failed()
            raise
    return marked


def _no_failure_mark() -> None:
    """As a node the failing node is already current (the context names it)."""


class StageOperator(Processor):
    """Base of operators written as a stage (see the module doc). Subclasses implement `stage`."""

    _entry: Any = None
    #: the stage keeps no state of its own (a pass-through): it may be fused into every chain
    #: that reaches its node, after a merge too (streams/engine/fusion.py)
    stateless_stage = False

    def stage(self, down: Stage, failed: Callable[[], None]) -> Stage:
        raise NotImplementedError

    def init(self, context: ProcessorContext) -> None:
        self.context = context
        self._entry = None

    def process(self, record: Record) -> None:
        """The operator as a node: its stage, emitting to the node's children."""
        entry = self._entry
        if entry is None:
            entry = self._entry = self._node_entry()
        entry(record.key, record.value, record.timestamp, record.headers)

    def _node_entry(self) -> Stage:
        """The node's one stage in its task: the fused chain it heads where the engine has one
        (the stage a parent's `node_stage` calls too: an operator keeping state in its stage,
        such as a windowed aggregation's last emitted close time, keeps one copy however its
        records come), else its stage emitting to its children."""
        node_entry = getattr(self.context, "node_entry", None)
        entry = node_entry() if node_entry is not None else None
        return entry if entry is not None else self.stage(self._to_children(), _no_failure_mark)

    def _to_children(self) -> Stage:
        context = self.context
        node_stage = getattr(context, "node_stage", None)
        if node_stage is not None:  # the engine's context: no Record where a fused chain follows
            return node_stage()
        node_forward = getattr(context, "node_forward", None)
        return as_records(node_forward() if node_forward is not None else context.forward)


def as_records(forward: Callable[[Record], None]) -> Stage:
    """A stage handing each record to `forward` as a Record."""
    new = _new_record

    def to_forward(key: Any, value: Any, timestamp: int, headers: Any) -> None:
        rec = new(Record)
        rec.key = key
        rec.value = value
        rec.timestamp = timestamp
        rec.headers = headers
        forward(rec)
    return to_forward


def drop(key: Any, value: Any, timestamp: int, headers: Any) -> None:
    """The `down` of an operator with no child: what it emits goes nowhere."""
