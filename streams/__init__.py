"""Eddy streams: topology, Processor API, DSL, the runtime (App) and the test driver."""

from streams import serdes
from streams.dsl import (CogroupedKStream, KGroupedStream, KGroupedTable, KStream, KTable,
                         SessionWindowedCogroupedKStream, SessionWindowedKStream, StreamsBuilder,
                         TimeWindowedCogroupedKStream, TimeWindowedKStream)
from streams.dsl import BufferConfig, GlobalKTable, Materialized, Printed, Suppressed
from streams.dsl.branched import Branched
from streams.dsl.windows import EmitStrategy, JoinWindows, SessionWindows, SlidingWindows, TimeWindows, Window, Windowed
from streams.fixed_key import FixedKeyProcessor, FixedKeyProcessorContext, FixedKeyRecord
from streams.processor import Processor, ProcessorContext, PunctuationType, Record
from streams.runtime import App, AppState, StreamThreadExceptionResponse
from streams.topology import Topology

__all__ = ["Topology", "StreamsBuilder", "serdes", "Record", "Processor", "ProcessorContext",
           "FixedKeyRecord", "FixedKeyProcessor", "FixedKeyProcessorContext", "PunctuationType", "App", "AppState", "StreamThreadExceptionResponse",
           "Branched", "EmitStrategy", "JoinWindows", "SessionWindows", "SlidingWindows", "TimeWindows",
           "Window", "Windowed", "Suppressed", "BufferConfig", "Materialized", "Printed", "KStream", "KTable",
           "GlobalKTable",
           "KGroupedStream", "KGroupedTable", "TimeWindowedKStream", "SessionWindowedKStream",
           "CogroupedKStream", "TimeWindowedCogroupedKStream", "SessionWindowedCogroupedKStream"]
