"""The DSL (word-count subset): StreamsBuilder -> KStream -> KGroupedStream -> KTable."""

from streams.dsl.kstream import KGroupedStream, KStream, KTable, StreamsBuilder
from streams.dsl.materialized import Materialized
from streams.dsl.change import Change

__all__ = ["StreamsBuilder", "KStream", "KGroupedStream", "KTable", "Materialized", "Change"]
