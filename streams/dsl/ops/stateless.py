"""Stateless record operators (Kafka's KStreamMapValues, KStreamFlatMapValues, KStreamFilter,
KStreamPeek, the key selection of selectKey/groupBy, and the null-key filter before a repartition
topic), each written once as a stage (streams/engine/stages.py)."""

from __future__ import annotations

from typing import Any, Callable

from streams.engine.stages import Stage, StageOperator
from streams.processor import Processor, ProcessorContext, Record


class MapValuesProcessor(StageOperator):
    def __init__(self, fn: Callable[[Any], Any]) -> None:
        self.fn = fn

    def stage(self, down: Stage, failed: Callable[[], None]) -> Stage:
        fn = self.fn

        def map_values(key: Any, value: Any, timestamp: int, headers: Any) -> None:
            try:
                down(key, fn(value), timestamp, headers)
            except BaseException:
                failed()
                raise
        return map_values


class FlatMapValuesProcessor(StageOperator):
    def __init__(self, fn: Callable[[Any], Any]) -> None:
        self.fn = fn

    def stage(self, down: Stage, failed: Callable[[], None]) -> Stage:
        fn = self.fn
        with_values_from = getattr(down, "with_values_from", None)
        if with_values_from is not None:  # the next stage loops over fn's values itself: one call less each
            return with_values_from(fn, failed)

        def flat_map_values(key: Any, value: Any, timestamp: int, headers: Any) -> None:
            try:
                for v in fn(value):
                    down(key, v, timestamp, headers)
            except BaseException:
                failed()
                raise
        return flat_map_values


class FilterProcessor(StageOperator):
    def __init__(self, predicate: Callable[[Any, Any], bool], negate: bool = False) -> None:
        self.predicate = predicate
        self.negate = negate

    def stage(self, down: Stage, failed: Callable[[], None]) -> Stage:
        predicate, negate = self.predicate, self.negate

        def filter_(key: Any, value: Any, timestamp: int, headers: Any) -> None:
            try:
                if bool(predicate(key, value)) is not negate:
                    down(key, value, timestamp, headers)
            except BaseException:
                failed()
                raise
        return filter_


class PeekProcessor(StageOperator):
    def __init__(self, action: Callable[[Any, Any], None], forward: bool = True) -> None:
        self.action = action
        self.forwards = forward

    def stage(self, down: Stage, failed: Callable[[], None]) -> Stage:
        action, forwards = self.action, self.forwards

        def peek(key: Any, value: Any, timestamp: int, headers: Any) -> None:
            try:
                action(key, value)
                if forwards:
                    down(key, value, timestamp, headers)
            except BaseException:
                failed()
                raise
        return peek


class KeySelectProcessor(StageOperator):
    def __init__(self, fn: Callable[[Any, Any], Any]) -> None:
        self.fn = fn

    def stage(self, down: Stage, failed: Callable[[], None]) -> Stage:
        fn = self.fn
        with_key_selector = getattr(down, "with_key_selector", None)
        if with_key_selector is not None:  # the next stage selects the key itself: one call less
            return with_key_selector(fn, failed)

        def key_select(key: Any, value: Any, timestamp: int, headers: Any) -> None:
            try:
                down(fn(key, value), value, timestamp, headers)
            except BaseException:
                failed()
                raise
        return key_select


class NullKeyFilterProcessor(StageOperator):
    """Drops null-key records before a repartition topic (they cannot be grouped)."""

    null_key_filter = True  # a fused chain lets the sink after it drop the None keys itself

    def stage(self, down: Stage, failed: Callable[[], None]) -> Stage:
        def null_key_filter(key: Any, value: Any, timestamp: int, headers: Any) -> None:
            if key is not None:  # only `down` can fail here, and it names itself
                down(key, value, timestamp, headers)
        return null_key_filter


class MapProcessor(StageOperator):
    """KStream.map (Kafka's KStreamMap): (key, value) -> mapper(key, value) = (new_key, new_value)."""

    def __init__(self, mapper: Callable[[Any, Any], Any]) -> None:
        self.mapper = mapper

    def stage(self, down: Stage, failed: Callable[[], None]) -> Stage:
        mapper = self.mapper

        def map_(key: Any, value: Any, timestamp: int, headers: Any) -> None:
            try:
                new_key, new_value = mapper(key, value)
                down(new_key, new_value, timestamp, headers)
            except BaseException:
                failed()
                raise
        return map_


class FlatMapProcessor(StageOperator):
    """KStream.flat_map (Kafka's KStreamFlatMap): one record per (key, value) pair of mapper(key, value)."""

    def __init__(self, mapper: Callable[[Any, Any], Any]) -> None:
        self.mapper = mapper

    def stage(self, down: Stage, failed: Callable[[], None]) -> Stage:
        mapper = self.mapper

        def flat_map(key: Any, value: Any, timestamp: int, headers: Any) -> None:
            try:
                for new_key, new_value in mapper(key, value):
                    down(new_key, new_value, timestamp, headers)
            except BaseException:
                failed()
                raise
        return flat_map


class PassThroughProcessor(StageOperator):
    """Forwards every record unchanged (Kafka's PassThrough: merge and branch children)."""

    stateless_stage = True  # fused after a merge too

    def stage(self, down: Stage, failed: Callable[[], None]) -> Stage:
        return down


class BranchProcessor(Processor):
    """KStream.split (Kafka's KStreamBranch): each record goes to the child of the first predicate
    it matches, else to the default child (if any). It routes to named children, so it is a
    node, not a stage."""

    def __init__(self, predicates: list, children: list, default_child: Any) -> None:
        self.predicates = predicates
        self.children = children
        self.default_child = default_child

    def init(self, context: ProcessorContext) -> None:
        self.context = context

    def process(self, record: Record) -> None:
        key, value = record.key, record.value
        for predicate, child in zip(self.predicates, self.children):
            if predicate(key, value):
                self.context.forward(record, child)
                return
        if self.default_child is not None:
            self.context.forward(record, self.default_child)
