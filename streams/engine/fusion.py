"""Fused chains: a run of nodes called as one function `entry(key, value, timestamp, headers)`.

A node takes part when it has at most one child and one parent and its processor is a stage
operator (streams/engine/stages.py: its `stage(down, failed)` is the operator). The chain ends at a
sink (serializing and sending directly) or at the first node that cannot be fused, which is called
through `process(Record)` as `forward` would, with that node current. A node with several parents
(after a merge) is not fused: every chain reaching it would build its own stage, and an operator
keeping state in its stage (a windowed aggregation's stream time, a suppression's) would keep one
copy per parent; through `process` it has one stage per task (the chain it heads, the one its
parent's `node_stage` calls too: StageOperator.process). An operator whose stage keeps
nothing (`StageOperator.stateless_stage`: the merge's pass-through) is fused all the same, and
after it only such stages and sinks: a stateful node below it, reached from several chains,
is called through `process`.

An entry is called with `context.current_node` = its head (as `forward` sets it); on return it
is the head again. A stage that fails sets the failing node current before the exception leaves
it (only the innermost failing stage does: it finds the head still current), so errors name the
failing node exactly as with `forward`.
"""

from __future__ import annotations

from typing import Any, Callable, Optional

from streams.engine.context import ProcessorContextImpl
from streams.engine.nodes import ProcessorNode, SinkNode
from streams.engine.processing_errors import ProcessingFailures
from streams.engine.stages import Stage, StageOperator, drop
from streams.processor import Record

_new_record = object.__new__  # Record._make inlined on the hot path (fields already validated)


class FusedChains:
    """The fused chains of one task, built once per head node (at its first use: processors are
    initialised parent first, and a stage may need its processor initialised)."""

    def __init__(self, context: ProcessorContextImpl, failures: Optional[ProcessingFailures] = None) -> None:
        self.context = context
        self._entries: dict[str, Optional[Stage]] = {}
        # processing.exception.handler's boundaries (streams/engine/processing_errors.py): each
        # processor node's stage gets one; None: none at all
        self._failures = failures

    def entry(self, head: ProcessorNode) -> Optional[Stage]:
        """`head` and the nodes after it as one function, or None when `head` cannot start a chain."""
        cache = self._entries
        if head.name in cache:
            return cache[head.name]
        entry = self._stage(head, head) if self.can_start(head) else None
        cache[head.name] = entry
        return entry

    @staticmethod
    def can_start(node: ProcessorNode) -> bool:
        """Whether `node` may start a fused chain: a sink, or a stage operator with at most one
        child and one parent (any number of parents when its stage keeps no state)."""
        if isinstance(node, SinkNode):
            return True
        processor = node.processor
        return (isinstance(processor, StageOperator) and len(node.children) <= 1
                and (node.parent_count <= 1 or processor.stateless_stage))

    def _failed_marker(self, node: ProcessorNode, head: ProcessorNode) -> Callable[[], None]:
        ctx = self.context

        def failed() -> None:
            if ctx.current_node is head:
                ctx.current_node = node
        return failed

    def _bounded(self, node: ProcessorNode, stage: Stage) -> Stage:
        """`stage` with the node's processing.exception.handler boundary, if there are any (a
        sink has none: its failures are its parent's, as in Kafka)."""
        return stage if self._failures is None else self._failures.guard_stage(node.name, stage)

    def _stage(self, node: ProcessorNode, head: ProcessorNode, shared: bool = False) -> Stage:
        """`node`'s stage in the chain of `head`; `shared`: a node above it in the chain has
        several parents (so this one is reached from several chains)."""
        ctx = self.context
        failed = self._failed_marker(node, head)

        if isinstance(node, SinkNode):
            return node.stage(failed)
        if self.can_start(node) and (not shared or node.processor.stateless_stage):
            only = node.only_child
            if isinstance(only, SinkNode) and getattr(node.processor, "null_key_filter", False):
                # the filter's whole work (drop None keys; it cannot fail) done by the sink's stage
                return self._bounded(node, only.stage(self._failed_marker(only, head), drop_null_keys=True))
            below = self._stage(only, head, shared or node.parent_count > 1) if only is not None else drop
            return self._bounded(node, node.processor.stage(below, failed))
        process = node.process
        new = _new_record

        def enter(key: Any, value: Any, timestamp: int, headers: Any) -> None:
            rec = new(Record)
            rec.key = key
            rec.value = value
            rec.timestamp = timestamp
            rec.headers = headers
            ctx.current_node = node
            process(rec)
            # not restored in a finally: after an exception current_node names the failing node
            ctx.current_node = head
        return enter
