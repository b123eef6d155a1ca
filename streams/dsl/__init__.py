"""The DSL: StreamsBuilder -> KStream -> KGroupedStream -> KTable, windows, suppress, Branched."""

from streams.dsl.branched import Branched
from streams.dsl.cogrouped import CogroupedKStream, SessionWindowedCogroupedKStream, TimeWindowedCogroupedKStream
from streams.dsl.global_table import GlobalKTable
from streams.dsl.grouped import KGroupedStream, KGroupedTable, SessionWindowedKStream, TimeWindowedKStream
from streams.dsl.kstream import BranchedKStream, KStream, StreamsBuilder
from streams.dsl.ktable import KTable
from streams.dsl.materialized import Materialized
from streams.dsl.printed import Printed
from streams.dsl.change import Change
from streams.dsl.store_suppliers import BuiltInDslStoreSuppliers, DslStoreSuppliers
from streams.dsl.suppressed import BufferConfig, Suppressed
from streams.dsl.windows import (
    EmitStrategy,
    JoinWindows,
    SessionWindows,
    SlidingWindows,
    TimeWindows,
    Window,
    Windowed,
)

__all__ = ["StreamsBuilder", "KStream", "KGroupedStream", "KTable", "GlobalKTable", "KGroupedTable",
           "TimeWindowedKStream", "SessionWindowedKStream", "CogroupedKStream", "TimeWindowedCogroupedKStream",
           "SessionWindowedCogroupedKStream", "BranchedKStream", "Materialized", "Change",
           "Branched", "EmitStrategy", "JoinWindows", "SessionWindows", "SlidingWindows", "TimeWindows",
           "Window", "Windowed", "Suppressed", "BufferConfig", "DslStoreSuppliers", "BuiltInDslStoreSuppliers",
           "Printed"]
