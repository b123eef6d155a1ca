"""Eddy streams: topology, Processor API, DSL and the test driver."""

from streams import serdes
from streams.dsl import StreamsBuilder
from streams.processor import Processor, ProcessorContext, PunctuationType, Record
from streams.topology import Topology

__all__ = ["Topology", "StreamsBuilder", "serdes", "Record", "Processor", "ProcessorContext",
           "PunctuationType"]
