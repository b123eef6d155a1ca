"""Eddy streams: topology, Processor API, DSL and the test driver."""

from streams import serdes
from streams.processor import Processor, ProcessorContext, PunctuationType, Record
from streams.topology import Topology

__all__ = ["Topology", "serdes", "Record", "Processor", "ProcessorContext", "PunctuationType"]
