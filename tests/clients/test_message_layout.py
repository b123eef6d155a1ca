"""The C decoder filling confluent_kafka.Message objects directly (the layout eddy/messages.py
probes, replication/_records.c `set_message_layout`, replication/records.py `enable_message_layout`).

Messages filled through the probed layout must be indistinguishable from constructor-built ones
(every accessor, byte for byte after the object header, reference counts), the decoder must fall
back to the constructor for types it cannot probe, and bad layouts are refused.
"""

from __future__ import annotations

import ctypes
import gc
import sys

import pytest
from confluent_kafka import Message
from hypothesis import HealthCheck, given, settings, strategies as st

from eddy import messages
from replication import records
from replication.records import decode_messages, encode_batch

_records = pytest.importorskip(
    "replication._records", reason="C accelerator not built (python setup.py build_ext --inplace)"
)
if not records.ACCELERATED:
    pytest.skip("EDDY_RECORDS_PURE_PYTHON is set: records.py runs without the accelerator",
                allow_module_level=True)

ACCESSORS = ("topic", "partition", "offset", "key", "value", "headers", "timestamp", "leader_epoch",
             "latency", "error")
HEADER = object.__basicsize__
SIZE = Message.__basicsize__


def fields(m) -> tuple:
    return tuple(getattr(m, a)() for a in ACCESSORS) + (len(m),)


def body(m) -> bytes:
    return ctypes.string_at(id(m) + HEADER, SIZE - HEADER)


@pytest.fixture
def layout():
    """The verified layout on; re-probed afterwards so other tests find it as they expect."""
    assert records.enable_message_layout(Message) is True
    yield
    records._layout_checked.pop(Message, None)
    records.enable_message_layout(Message)


def _outcome(fn, *args):
    try:
        msgs, nxt = fn(*args)
    except Exception as e:  # noqa: BLE001 - the same exception type is expected of every path
        return ("error", type(e).__name__), None
    return ("ok", [fields(m) for m in msgs], nxt), msgs


def decode_both(buf: bytes, topic: str = "t", partition: int = 1, min_offset: int = 0, aborted=None):
    """Outcomes and messages of: the layout, the constructor, the pure-Python decoder."""
    args = (buf, topic, partition, min_offset, Message, True, aborted, False)
    fast = _outcome(_records.decode_messages, *args)
    _records.set_message_layout(None)
    try:
        slow = _outcome(_records.decode_messages, *args)
    finally:
        records._layout_checked.pop(Message, None)
        assert records.enable_message_layout(Message) is True
    py = _outcome(records._py_decode_messages, *args)
    return fast, slow, py


def sample_buffer() -> bytes:
    return b"".join([
        encode_batch([(b"k", b"v", 1_700_000_000_000, None), (None, b"v2", 1_700_000_000_001, [("h", b"x")]),
                      (b"", None, 5, [("a", None), ("b", b"")])], base_offset=0, partition_leader_epoch=-1),
        encode_batch([(b"x" * 300, b"y" * 5000, 9, None)], base_offset=10, partition_leader_epoch=12,
                     timestamp_type=1),
        encode_batch([(b"t", b"u", 3, None)], base_offset=2**62, partition_leader_epoch=0),
    ])


def test_layout_is_found_for_confluent_kafka_message(layout):
    probed = messages._probe_layout(Message)
    assert probed is not None
    background, offsets = probed
    assert len(background) == SIZE - HEADER
    assert len(set(offsets.values())) == len(offsets)


def test_filled_messages_equal_constructor_built_ones(layout):
    (fast, msgs), (slow, _), (py, _) = decode_both(sample_buffer())
    assert fast == slow == py
    assert fast[0] == "ok" and fast[2] == 2**62 + 1
    assert len(msgs) == 5
    for m in msgs:
        epoch = m.leader_epoch()
        ref = Message(m.topic(), m.partition(), m.offset(), m.key(), m.value(), m.headers(), None,
                      m.timestamp(), -1.0, -1 if epoch is None else epoch)
        assert body(m) == body(ref)
        assert not gc.is_tracked(m)
    assert msgs[0].leader_epoch() is None and msgs[3].leader_epoch() == 12
    assert msgs[3].timestamp() == (2, 9) and msgs[0].timestamp() == (1, 1_700_000_000_000)
    assert msgs[1].key() is None and msgs[2].value() is None and msgs[2].key() == b""


RECORD = st.tuples(st.one_of(st.none(), st.binary(max_size=40)), st.one_of(st.none(), st.binary(max_size=80)),
                   st.one_of(st.integers(0, 2**41), st.integers(-(2**61), 2**61)),
                   st.one_of(st.none(), st.lists(st.tuples(st.text(max_size=5), st.one_of(st.none(), st.binary(max_size=5))),
                                                 max_size=3)))


@settings(deadline=None, max_examples=120, suppress_health_check=[HealthCheck.too_slow,
                                                                   HealthCheck.function_scoped_fixture])
@given(batches=st.lists(st.tuples(st.lists(RECORD, min_size=1, max_size=6), st.booleans(), st.integers(-1, 9),
                                  st.one_of(st.integers(0, 1000), st.just(2**63 - 3))),
                        min_size=1, max_size=4),
       min_offset=st.integers(0, 30), partition=st.integers(0, 2**31 - 1))
def test_filled_messages_match_for_any_records(layout, batches, min_offset, partition):
    # the last choice of base offset makes offsets overflow 64 bits: those records take the
    # constructor path within the same call
    buf = b"".join(encode_batch(recs, base_offset=base, timestamp_type=int(log_append), partition_leader_epoch=epoch)
                   for recs, log_append, epoch, base in batches)
    (fast, _), (slow, _), (py, _) = decode_both(buf, "topic-x", partition, min_offset)
    assert fast == slow == py


def test_filled_messages_hold_exactly_one_reference_to_each_field(layout):
    topic = "refcount-topic-" + str(id(object()))
    buf = encode_batch([(b"k%d" % i, b"v%d" % i, i, [("h", b"1")]) for i in range(100)])
    before = sys.getrefcount(topic)
    msgs, _ = decode_messages(buf, topic, 0)
    assert sys.getrefcount(topic) == before + 100
    key = msgs[0].key()
    assert sys.getrefcount(key) == 3  # the message, `key`, getrefcount's argument
    del key
    del msgs
    assert sys.getrefcount(topic) == before


def test_other_partition_and_topic_types_use_the_constructor(layout):
    buf = encode_batch([(b"k", b"v", 1, None)], base_offset=4)
    # arguments the layout cannot hold go to the constructor, which judges them as before
    for topic, partition, result in (("t", 2**40, "error"), ("t", "zero", "error"), (b"t", 0, "ok")):
        fast, slow, py = decode_both(buf, topic, partition)
        assert fast[0] == slow[0] == py[0]
        assert fast[0][0] == result


class _PyMessage:
    """A pure-Python message type: no C layout to probe."""

    __slots__ = ("args",)

    def __init__(self, *args):
        self.args = args


def test_types_without_a_probeable_layout_keep_their_constructor():
    assert records.enable_message_layout(_PyMessage) is False
    buf = encode_batch([(b"k", b"v", 7, None)], base_offset=3)
    msgs, nxt = decode_messages(buf, "t", 0, message_type=_PyMessage)
    assert nxt == 4
    assert msgs[0].args[:5] == ("t", 0, 3, b"k", b"v")
    # the verified Message layout is still in place
    assert records._layout_checked[Message] is True or records.enable_message_layout(Message)


@pytest.mark.parametrize("args, error", [
    ((42, b"", 16, 24, 32, 40, 72, 88, 64, 80, 96), TypeError),  # not a type
    ((Message, b"\0" * 3, 16, 24, 32, 40, 72, 88, 64, 80, 96), ValueError),  # background size
    ((Message, b"\0" * (SIZE - HEADER), 8, 24, 32, 40, 72, 88, 64, 80, 96), ValueError),  # in the header
    ((Message, b"\0" * (SIZE - HEADER), 16, 16, 32, 40, 72, 88, 64, 80, 96), ValueError),  # overlap
    ((Message, b"\0" * (SIZE - HEADER), 16, 24, 32, 40, 73, 88, 64, 80, 96), ValueError),  # misaligned
    ((Message, b"\0" * (SIZE - HEADER), 16, 24, 32, 40, 72, 88, 64, 80, SIZE), ValueError),  # past the end
])
def test_bad_layouts_are_refused(layout, args, error):
    with pytest.raises(error, match="set_message_layout"):
        _records.set_message_layout(*args)
    # a refused layout leaves the verified one in place
    msgs, _ = decode_messages(encode_batch([(b"k", b"v", 1, None)]), "t", 0)
    assert fields(msgs[0])[:5] == ("t", 0, 0, b"k", b"v")


class _SubMessage(Message):
    """A subclass may do more in its constructor: only Message itself is filled directly."""

    def __init__(self, *args):
        super().__init__(*args)
        self.seen = True


def test_subclasses_keep_their_constructor(layout):
    assert records.enable_message_layout(_SubMessage) is False
    msgs, _ = decode_messages(encode_batch([(b"k", b"v", 7, None)], base_offset=3), "t", 0,
                              message_type=_SubMessage)
    assert type(msgs[0]) is _SubMessage and msgs[0].seen and msgs[0].offset() == 3
    assert records.enable_message_layout(Message) is True
