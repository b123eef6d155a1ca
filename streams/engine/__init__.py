"""The processing core shared by the real StreamTask and the TopologyTestDriver.

- nodes.py: processor, source and sink nodes; the record collector protocol sinks send through
- context.py: the processor context (forwarding, store access, scheduling)
- punctuation.py: punctuation schedules and their queues
- fusion.py: fused chains (a run of nodes as one stage function)
- accelerated.py: the accelerated route over consumed messages (C passes, eddy/_messages.c)
- task_engine.py: TaskEngine, one sub-topology for one task (the Python route, stream time)
"""

from streams.engine.accelerated import UNKNOWN_TIME
from streams.engine.context import ProcessorContextImpl
from streams.engine.nodes import ProcessorNode, RecordCollector, SinkNode, SourceNode
from streams.engine.punctuation import PunctuationQueue, PunctuationSchedule
from streams.engine.task_engine import TaskEngine

__all__ = ["RecordCollector", "ProcessorNode", "SourceNode", "SinkNode", "ProcessorContextImpl",
           "PunctuationSchedule", "PunctuationQueue", "TaskEngine", "UNKNOWN_TIME"]
