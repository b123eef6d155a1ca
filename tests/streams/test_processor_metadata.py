"""Processor metadata committed with the input offsets (Kafka's ProcessorMetadata and
TopicPartitionMetadata): the offset metadata string's bytes, merging, bad strings, and the
context a processor reads and writes it through."""

import base64
import logging

from streams.engine.processor_metadata import (NO_PARTITION_TIME, ProcessorMetadata, decode_offset_metadata,
                                               encode_offset_metadata)

# Kafka's TopicPartitionMetadata(5, {"store": 42}).encode(), written out by hand: magic 2, the
# partition time (8 bytes), the entry count (4), the key's length (4), the key, the value (8)
KAFKA_BYTES = (b"\x02" + (5).to_bytes(8, "big") + (1).to_bytes(4, "big") + (5).to_bytes(4, "big") + b"store"
               + (42).to_bytes(8, "big"))


def test_offset_metadata_is_kafkas_string():
    metadata = ProcessorMetadata({"store": 42})
    assert encode_offset_metadata(5, metadata) == base64.b64encode(KAFKA_BYTES).decode()
    partition_time, decoded = decode_offset_metadata(base64.b64encode(KAFKA_BYTES).decode())
    assert (partition_time, decoded.values) == (5, {"store": 42})
    # no metadata: magic, time, nothing else (Kafka's empty serialize)
    assert base64.b64decode(encode_offset_metadata(-1, ProcessorMetadata())) == b"\x02" + (-1).to_bytes(8, "big", signed=True)


def test_version_one_carries_only_the_partition_time():
    text = base64.b64encode(b"\x01" + (7).to_bytes(8, "big")).decode()
    partition_time, decoded = decode_offset_metadata(text)
    assert (partition_time, decoded.values) == (7, {})


def test_empty_foreign_and_broken_strings_give_nothing(caplog):
    assert decode_offset_metadata(None)[1].values == {}
    assert decode_offset_metadata("")[0] == NO_PARTITION_TIME
    with caplog.at_level(logging.WARNING):
        # a string another client committed, an unknown version: nothing
        for text in ("not base64!", base64.b64encode(b"\x09" + bytes(8)).decode()):
            partition_time, decoded = decode_offset_metadata(text)
            assert (partition_time, decoded.values) == (NO_PARTITION_TIME, {})
        # a truncated entry: the partition time read before it stays (Kafka's decode)
        partition_time, decoded = decode_offset_metadata(base64.b64encode(KAFKA_BYTES[:-3]).decode())
        assert (partition_time, decoded.values) == (5, {})
    assert sum("offset metadata" in r.getMessage() for r in caplog.records) == 3


def test_merge_keeps_the_largest_value_and_put_marks_a_commit():
    merged = ProcessorMetadata({"a": 5, "b": 1})
    merged.update(ProcessorMetadata({"a": 3, "b": 9, "c": 2}))
    assert merged.values == {"a": 5, "b": 9, "c": 2}
    assert not merged.needs_commit
    merged.put("a", 4)  # put sets, even lower (the processor knows its own value)
    assert merged.get("a") == 4 and merged.needs_commit


def test_context_reads_and_writes_the_tasks_metadata():
    from streams import Processor, StreamsBuilder, serdes
    from streams.testing import TopologyTestDriver

    seen = []

    class Remember(Processor):
        def init(self, context):
            self.context = context
            seen.append(context.processor_metadata_for_key("last"))

        def process(self, record):
            self.context.add_processor_metadata_key_value("last", record.timestamp)
            seen.append(self.context.processor_metadata_for_key("last"))

    b = StreamsBuilder()
    b.stream("in", key_serde=serdes.STRING, value_serde=serdes.STRING).process(Remember)
    with TopologyTestDriver(b.build(), {"application.id": "meta"}) as d:
        d.create_input_topic("in", serdes.STRING, serdes.STRING).pipe_input("k", "v", timestamp=17)
    assert seen == [None, 17]
