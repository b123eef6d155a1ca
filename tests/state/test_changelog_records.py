"""The restore reader's C fast path: `changelog_records` (eddy/_messages.c) turns a batch of
consumed messages into the store's (key, value) records in one pass, or answers None so that the
reader takes its general path (events, null keys, several partitions, unknown message types)."""

from __future__ import annotations

import pytest
from confluent_kafka import KafkaError, Message

import state.restore as restore
from replication.records import decode_messages, encode_batch

changelog_records = restore._changelog_records
pytestmark = pytest.mark.skipif(changelog_records is None, reason="C accelerator or Message layout unavailable")


def consumed(records, topic="app-store-changelog", partition=3, base_offset=100):
    """Messages as the embedded consumer hands them over (decoded into confluent_kafka.Message)."""
    buf = encode_batch([(k, v, 1_700_000_000_000, None) for k, v in records], base_offset=base_offset,
                       partition_leader_epoch=0)
    msgs, _ = decode_messages(bytes(buf), topic, partition, min_offset=0)
    return msgs


def built(topic, partition, offset, key, value, error=None):
    """A Message made by its constructor, as librdkafka's consumer makes them."""
    return Message(topic, partition, offset, key, value, None, error, (1, 1_700_000_000_000), -1.0, 0)


def test_keyed_records_of_one_partition_become_key_value_pairs():
    records = [(b"k1", b"v1"), (b"k2", None), (b"", b"empty key"), (b"k1", b"")]
    msgs = consumed(records)
    assert changelog_records(msgs) == ("app-store-changelog", 3, records)
    # confluent's own Messages (a real Kafka consumer) and equal but distinct topic strings too
    msgs = [built("".join(["app-", "store"]), 1, i, k, v) for i, (k, v) in enumerate(records)]
    assert changelog_records(msgs) == ("app-store", 1, records)


@pytest.mark.parametrize("case", ["null key", "end of partition event", "two partitions", "two topics",
                                  "another message type", "empty"])
def test_anything_but_keyed_records_of_one_partition_takes_the_general_path(case):
    msgs = consumed([(b"k1", b"v1"), (b"k2", b"v2")])
    if case == "null key":
        msgs.append(built("app-store-changelog", 3, 102, None, b"v"))
    elif case == "end of partition event":
        msgs.append(built("app-store-changelog", 3, 102, None, None, KafkaError(KafkaError._PARTITION_EOF)))
    elif case == "two partitions":
        msgs.append(built("app-store-changelog", 4, 102, b"k", b"v"))
    elif case == "two topics":
        msgs.append(built("other-changelog", 3, 102, b"k", b"v"))
    elif case == "another message type":
        class Sub(Message):
            pass
        msgs.append(Sub("app-store-changelog", 3, 102, b"k", b"v", None, None, (1, 0), -1.0, 0))
    else:
        msgs = []
    assert changelog_records(msgs) is None


def test_a_batch_that_is_not_a_list_is_a_type_error():
    with pytest.raises(TypeError, match="messages must be a list, not tuple"):
        changelog_records(tuple(consumed([(b"k", b"v")])))


def test_the_pairs_hold_their_own_references():
    msgs = consumed([(b"key-%d" % i, b"value-%d" % i) for i in range(50)])
    _, _, records = changelog_records(msgs)
    del msgs  # the messages go; the pairs keep their keys and values
    assert records == [(b"key-%d" % i, b"value-%d" % i) for i in range(50)]


def _python_converted(records, timestamps):
    from state.timestamped import restore_converter

    return restore_converter("s")(records, timestamps)


def stamped_consumed(records, timestamps, topic="app-store-changelog", partition=3):
    buf = encode_batch([(k, v, t, None) for (k, v), t in zip(records, timestamps)], base_offset=0,
                       partition_leader_epoch=0)
    msgs, _ = decode_messages(bytes(buf), topic, partition, min_offset=0)
    return msgs


@pytest.mark.parametrize("seed", range(5))
def test_stamped_records_are_what_the_restore_converter_makes(seed):
    """A timestamped store's changelog (raw values): the C pass puts each record's timestamp in
    front of its value exactly as state.timestamped.restore_converter does."""
    import random

    rng = random.Random(seed)
    records, timestamps = [], []
    for i in range(rng.randrange(1, 300)):
        ts = rng.choice([1, 255, 1 << 40, 1_700_000_000_000 + i, (1 << 63) - 1])
        value = rng.choice([None, b"", b"v%d" % i, bytes(rng.randrange(256) for _ in range(rng.randrange(1, 40))),
                            ts.to_bytes(8, "big")])  # 8 bytes equal to the timestamp: a raw value
        records.append((b"k%d" % rng.randrange(50), value))
        timestamps.append(ts)
    got = changelog_records(stamped_consumed(records, timestamps), True)
    assert got == ("app-store-changelog", 3, _python_converted(records, timestamps))
    assert changelog_records(stamped_consumed(records, timestamps), False) == ("app-store-changelog", 3, records)


def test_a_value_in_the_old_prefixed_format_takes_the_general_path():
    """A value longer than 8 bytes that starts with its record's timestamp: the C pass leaves the
    batch to the converter, which refuses it."""
    from state.timestamped import LegacyChangelogFormatError

    records = [(b"a", b"raw"), (b"b", (7).to_bytes(8, "big") + b"old")]
    msgs = stamped_consumed(records, [5, 7])
    assert changelog_records(msgs, True) is None
    assert changelog_records(msgs, False) == ("app-store-changelog", 3, records)
    with pytest.raises(LegacyChangelogFormatError):
        _python_converted(records, [5, 7])


def test_stamped_pairs_hold_their_own_references():
    msgs = stamped_consumed([(b"key-%d" % i, b"value-%d" % i) for i in range(50)], list(range(1, 51)))
    _, _, records = changelog_records(msgs, True)
    del msgs
    assert records == [(b"key-%d" % i, (i + 1).to_bytes(8, "big") + b"value-%d" % i) for i in range(50)]
    with pytest.raises(TypeError, match="takes 1 or 2 arguments"):
        changelog_records()
