"""Testing helpers: the broker-free TopologyTestDriver."""

from streams.testing.driver import (ProducerRecord, TestInputTopic, TestOutputTopic, TestRecord,
                                    TopologyTestDriver)

__all__ = ["TopologyTestDriver", "TestInputTopic", "TestOutputTopic", "TestRecord", "ProducerRecord"]
