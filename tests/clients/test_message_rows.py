"""The C passes over consumed messages (eddy/_messages.c `message_rows`, `partition_runs`,
`keyed_run`, `payload_bytes`): the same rows and runs as the Message methods give, for
filled and constructor-built messages, and None (the methods' path) for anything else."""

from __future__ import annotations

import itertools
import sys

import pytest
from confluent_kafka import Message

from eddy import messages
from replication import records
from replication.records import decode_messages, encode_batch

_records = pytest.importorskip(
    "eddy._messages", reason="C accelerator not built (python setup.py build_ext --inplace)"
)
if messages.probed_layout(Message) is None:
    pytest.skip("the Message layout is not verified (or EDDY_MESSAGES_PURE_PYTHON is set)",
                allow_module_level=True)


@pytest.fixture(autouse=True)
def layout():
    assert records.enable_message_layout(Message) is True


def _messages(topic="t", partition=0):
    buf = b"".join([
        encode_batch([(b"k", b"v", 1_700_000_000_000, None), (None, b"v2", 1_700_000_000_001, [("h", b"x")]),
                      (b"", None, 5, [("a", None), ("b", b"")])], base_offset=0, partition_leader_epoch=-1),
        encode_batch([(b"x" * 300, b"y" * 5000, 9, None)], base_offset=10, partition_leader_epoch=3,
                     timestamp_type=1),
    ])
    msgs, _ = decode_messages(buf, topic, partition)
    return msgs


def _method_rows(msgs):
    return [(m.key(), m.value(), m.timestamp()[1], m.headers(), m.offset()) for m in msgs]


def test_rows_equal_what_the_methods_give():
    filled = _messages()
    built = [Message("t", 0, 7, b"bk", None, [("z", b"1")], None, (1, 42), -1.0, -1),
             Message("t", 0, 8, None, b"bv", None, None, (0, -1), -1.0, -1)]
    for msgs in (filled, built, filled + built, []):
        assert _records.message_rows(msgs) == _method_rows(msgs)
    big_key = filled[3].key()
    before = sys.getrefcount(big_key)
    rows = _records.message_rows(filled)
    with_rows = sys.getrefcount(big_key)
    assert with_rows == before + 1  # the row's reference
    del rows
    after = sys.getrefcount(big_key)
    assert after == before  # no leak


class _SubMessage(Message):
    pass


def test_other_types_and_a_missing_layout_give_none():
    msgs = _messages()
    sub = _SubMessage("t", 0, 1, b"k", b"v", None, None, (1, 1), -1.0, -1)
    assert _records.message_rows(msgs + [sub]) is None
    assert _records.partition_runs([sub] + msgs) is None
    with pytest.raises(TypeError, match="must be a list"):
        _records.message_rows(tuple(msgs))
    _records.set_message_layout(None)
    try:
        assert _records.message_rows(msgs) is None and _records.partition_runs(msgs) is None
    finally:
        _records.set_message_layout(*messages.layout_arguments(Message, messages.probed_layout(Message)))


def test_runs_equal_groupby_over_topic_and_partition():
    a0, a1, b0 = _messages("a", 0), _messages("a", 1), _messages("b", 0)
    # equal topic strings that are different objects still make one run
    other_a0 = _messages("".join(["a"]), 0)
    mixed = a0[:2] + a1 + a0[2:] + other_a0 + b0 + a1[:1]
    expected = [(tp, list(g)) for tp, g in itertools.groupby(mixed, lambda m: (m.topic(), m.partition()))]
    got = _records.partition_runs(mixed)
    assert [(tp, [id(m) for m in run]) for tp, run in got] == [(tp, [id(m) for m in run]) for tp, run in expected]
    assert [tp for tp, _ in got] == [("a", 0), ("a", 1), ("a", 0), ("b", 0), ("a", 1)]
    assert _records.partition_runs([]) == []


def test_payload_bytes_equal_the_key_and_value_lengths_the_methods_give():
    import collections

    filled = _messages()
    built = [Message("t", 0, 7, b"bk", None, [("z", b"1")], None, (1, 42), -1.0, -1),
             Message("t", 0, 8, None, None, None, None, (0, -1), -1.0, -1)]
    for msgs in (filled, built, filled + built, []):
        sizes = [len(m.key() or b"") + len(m.value() or b"") for m in msgs]
        expected = (sum(sizes), max(sizes, default=0))
        assert _records.payload_bytes(msgs) == expected
        assert _records.payload_bytes(collections.deque(msgs)) == expected  # a task's buffer
        assert messages.payload_bytes(msgs) == expected
    assert _records.payload_bytes(filled)[1] == 5300  # the 300-byte key and 5000-byte value
    sub = _SubMessage("t", 0, 1, b"k", b"v", None, None, (1, 1), -1.0, -1)
    assert _records.payload_bytes(filled + [sub]) is None  # another type: the methods' path
    assert messages.payload_bytes(filled + [sub]) == (_records.payload_bytes(filled)[0] + 2, 5300)
    with pytest.raises(TypeError, match="must be a sequence"):
        _records.payload_bytes(42)


def test_untrack_messages_leaves_consumed_messages_to_no_cycle_collection():
    """confluent-kafka's consumer makes tracked messages (the constructor's), the log's decoder
    untracked ones: the pass untracks the first and leaves the rest, another type included,
    with every field as it was."""
    import gc

    built = [Message("t", 0, 7, b"bk", b"v", [("z", b"1")], None, (1, 42), -1.0, -1),
             Message("t", 1, 8, None, None, None, None, (0, -1), -1.0, -1)]
    sub = _SubMessage("t", 0, 1, b"k", b"v", None, None, (1, 1), -1.0, -1)
    filled = _messages()
    assert all(map(gc.is_tracked, built + [sub])) and not any(map(gc.is_tracked, filled))
    before = [_fields(m) for m in built + filled]
    mixed = built + filled + [sub]
    assert _records.untrack_messages(mixed) is None
    assert not any(map(gc.is_tracked, built + filled)) and gc.is_tracked(sub)
    assert [_fields(m) for m in built + filled] == before
    again = [Message("t", 0, 9, b"k", b"v", None, None, (1, 1), -1.0, -1)]
    messages.untrack_messages(again)  # the module's entry point takes the C pass
    assert not gc.is_tracked(again[0])
    with pytest.raises(TypeError, match="must be a list"):
        _records.untrack_messages(tuple(built))


def _fields(m):
    return (m.topic(), m.partition(), m.offset(), m.key(), m.value(), m.headers(), m.timestamp(),
            m.leader_epoch())


def _check_utf8(data):
    return data.decode()


def test_keyed_run_takes_keys_and_timestamps_up_to_the_first_message_it_cannot_take():
    def msg(offset, key, value, ts):
        return Message("t", 0, offset, key, value, None, None, (1 if ts >= 0 else 0, ts), -1.0, -1)

    msgs = [msg(0, b"a", b"x", 5), msg(1, b"b", None, 6),                          # a None value
            msg(2, None, b"x", 7),                                                  # a None key
            msg(3, b"c", b"x", 8), msg(4, b"\xff", b"x", 9),                        # a key that fails its check
            msg(5, b"d", b"\xfe", 10),                                              # a value that fails
            msg(6, b"e", b"x", -1),                                                 # no timestamp
            msg(7, b"f", b"x", 11)]
    run = _records.keyed_run
    assert run(msgs, 0, _check_utf8, _check_utf8) == ([b"a"], [5], 1)
    assert run(msgs, 1, _check_utf8, _check_utf8) == ([], [], 1)  # an aggregation skips it, not the run
    assert run(msgs, 2, _check_utf8, _check_utf8) == ([], [], 2)
    assert run(msgs, 3, _check_utf8, _check_utf8) == ([b"c"], [8], 4)
    assert run(msgs, 4, _check_utf8, _check_utf8) == ([], [], 4)
    assert run(msgs, 5, _check_utf8, _check_utf8) == ([], [], 5)
    assert run(msgs, 6, _check_utf8, _check_utf8) == ([], [], 6)
    assert run(msgs, 7, _check_utf8, _check_utf8) == ([b"f"], [11], 8)
    assert run(msgs, 8, _check_utf8, _check_utf8) == ([], [], 8)
    # decoded messages (filled by the C decoder) read the same fields
    filled = _messages()
    assert run(filled, 0, _check_utf8, _check_utf8) == ([b"k"], [1_700_000_000_000], 1)
    # a message with headers stops the run (its record context is its own), one without takes part
    with_headers = Message("t", 0, 8, b"g", b"x", [("h", b"1")], None, (1, 12), -1.0, -1)
    no_headers = Message("t", 0, 9, b"h", b"x", [], None, (1, 13), -1.0, -1)
    assert run([msgs[0], with_headers, msgs[7]], 0, _check_utf8, _check_utf8) == ([b"a"], [5], 1)
    assert run([msgs[0], no_headers], 0, _check_utf8, _check_utf8) == ([b"a", b"h"], [5, 13], 2)
    # another type stops the run; a missing layout gives None
    sub = _SubMessage("t", 0, 9, b"k", b"v", None, None, (1, 1), -1.0, -1)
    assert run([msgs[0], sub], 0, _check_utf8, _check_utf8) == ([b"a"], [5], 1)
    key = msgs[0].key()
    before = sys.getrefcount(key)
    taken = run(msgs, 0, _check_utf8, _check_utf8)
    assert sys.getrefcount(key) == before + 1
    del taken
    assert sys.getrefcount(key) == before


def test_keyed_run_lets_what_is_not_an_exception_through_and_rejects_bad_arguments():
    msgs = [Message("t", 0, 0, b"a", b"x", None, None, (1, 5), -1.0, -1)]

    def interrupted(data):
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        _records.keyed_run(msgs, 0, interrupted, _check_utf8)
    with pytest.raises(TypeError, match="must be a list"):
        _records.keyed_run(tuple(msgs), 0, _check_utf8, _check_utf8)
    with pytest.raises(ValueError, match="start must be >= 0"):
        _records.keyed_run(msgs, -1, _check_utf8, _check_utf8)
    with pytest.raises(TypeError, match="expects 4 arguments"):
        _records.keyed_run(msgs, 0, _check_utf8)
