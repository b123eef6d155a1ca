"""The table operators' hot path (streams/dsl/ops/table.py): TimestampedAccess reads and writes
a timestamped store's bytes below its typed layer, and a cached table's forwarder decodes the
flushed bytes itself; both must see and write exactly what the typed store (ValueAndTimestamp
through its serde) does, errors included, and forward through a fused chain as `forward` does."""

import sys

import pytest

from state.errors import InvalidStoreArgumentError
from state.stores import Stores
from state.timestamped import ValueAndTimestamp
from streams import StreamsBuilder, serdes
from streams.dsl.ops.table import TimestampedAccess
from streams.errors import ProcessingError, SerializationError
from streams.testing import TopologyTestDriver

sys.path.insert(0, __file__.rsplit("/tests/", 1)[0] + "/tests/state")
from recording_context import RecordingContext  # noqa: E402

S = serdes.STRING

CASES = {
    "string": (serdes.STRING, ["a", "", "\u00e9\u4e2d"]),
    "int64": (serdes.INT64, [0, -1, 2**63 - 1, -2**63]),
    "json": (serdes.JSON, [{"a": [1, 2]}, "s", 3.5]),
}


def _store(tmp_path, inner, caching):
    builder = Stores.timestamped_key_value_store_builder(Stores.persistent_key_value_store("ts"), S, inner)
    store = (builder.with_caching_enabled() if caching else builder).build()
    ctx = RecordingContext(tmp_path / "0_0")
    store.init(ctx)
    return store, ctx


@pytest.mark.parametrize("caching", [False, True], ids=["uncached", "cached"])
@pytest.mark.parametrize("kind", sorted(CASES))
def test_access_reads_and_writes_what_the_typed_store_does(tmp_path, kind, caching):
    inner, values = CASES[kind]
    ours, ours_ctx = _store(tmp_path / "access", inner, caching)
    typed, typed_ctx = _store(tmp_path / "typed", inner, caching)
    access = TimestampedAccess(ours)
    assert access.value_of is not None  # below the typed layer
    for ts, value in enumerate(values + [None] + values[:1], start=10):
        key = f"k{ts % 2}"
        handle, old, old_ts = access.get(key)
        expected = typed.get(key)
        assert (old, old_ts) == ((None, None) if expected is None else (expected.value, expected.timestamp))
        access.put(handle, value, ts)
        typed.put(key, ValueAndTimestamp.make(value, ts), ts)
        assert ours.get(key) == typed.get(key)
    ours.flush()
    typed.flush()
    assert ours_ctx.logged_changes == typed_ctx.logged_changes  # the changelog too (Kafka's format)
    stored = [(k, v) for k, v in ours.all()]
    assert stored == [(k, v) for k, v in typed.all()]
    for key, vat in stored:
        raw = ours.wrapped.get(S.serialize(key))  # bytes below the typed layer
        assert access.key_of(S.serialize(key)) == key and access.value_of(raw) == vat.value


def test_access_raises_the_value_serdes_errors(tmp_path):
    """A value the C packer refuses gets the serde's own error, the one the typed store wraps."""
    store, _ = _store(tmp_path, serdes.INT64, caching=False)
    access = TimestampedAccess(store)
    handle, _, _ = access.get("k")
    for bad in ("not a number", 2**63):
        with pytest.raises(SerializationError) as ours:
            access.put(handle, bad, 1)
        with pytest.raises(InvalidStoreArgumentError) as typed:
            store.put("k", ValueAndTimestamp(bad, 1), 1)
        assert type(typed.value.__cause__) is SerializationError
        assert str(ours.value) == str(typed.value.__cause__)
    with pytest.raises(InvalidStoreArgumentError):
        access.get(None)  # the typed store's key error
    assert store.get("k") is None  # nothing was written


def test_a_cached_tables_flush_runs_the_chain_after_it():
    """A named (so cached) source table forwards from its cache's flush into the fused chain
    after it (no Record made): the records forwarding each would give."""
    b = StreamsBuilder()
    (b.table("in", key_serde=S, value_serde=S, store="t")
        .to_stream()
        .map_values(lambda v: v if v is None else v.upper())
        .to("out", key_serde=S, value_serde=S))
    with TopologyTestDriver(b.build()) as driver:
        inp = driver.create_input_topic("in", S, S)
        out = driver.create_output_topic("out", S, S)
        inp.pipe_input("k", "a", timestamp=1)
        inp.pipe_input("j", None, timestamp=2)  # a delete of an absent key: never forwarded
        inp.pipe_input("k", None, timestamp=3)  # a delete: the tombstone goes on (to_stream: None)
        assert [(r.key, r.value, r.timestamp) for r in out.read_records_to_list()] == [
            ("k", "A", 1), ("k", None, 3)]


def test_a_stage_operator_as_a_node_forwards_into_a_chain_and_names_its_failing_node():
    """After a merge an operator runs as a node (two parents); its only child, a sink, is a chain
    it calls directly (context.node_stage): the records are forwarded, and an error there names
    the sink, as `forward` would."""
    b = StreamsBuilder()
    left = b.stream("a", key_serde=S, value_serde=S)
    (left.merge(b.stream("b", key_serde=S, value_serde=S))
        .map_values(lambda v: 5 if v == "bad" else v + "!")
        .to("out", key_serde=S, value_serde=S))
    topology = b.build()
    sink = next(word for word in str(topology.describe()).replace(",", " ").split() if word.startswith("KSTREAM-SINK"))
    with TopologyTestDriver(topology) as driver:
        out = driver.create_output_topic("out", S, S)
        driver.create_input_topic("a", S, S).pipe_input("k", "x", timestamp=1)
        driver.create_input_topic("b", S, S).pipe_input("k", "y", timestamp=2)
        assert out.read_key_values_to_list() == [("k", "x!"), ("k", "y!")]
        with pytest.raises(ProcessingError) as err:
            driver.create_input_topic("b", S, S).pipe_input("k", "bad", timestamp=3)
        assert f"processor={sink}," in str(err.value)


def _flushed_changes(seed, inner=S):
    """(key, new, timestamp, old, metadata, headers) as a cached timestamped STRING (or INT64)
    table flushes them, some undecodable (a value shorter than its timestamp, bytes that are no
    UTF-8 or not 8 bytes long, a key too), each with its record context."""
    import random
    rng = random.Random(seed)
    stamp = (7).to_bytes(8, "big")
    values = [None, stamp + b"a", stamp + b"", stamp + "\u00e9".encode(), stamp + b"\xff", b"short"]
    if inner is serdes.INT64:
        values = [None, stamp + (5).to_bytes(8, "big"), stamp + (-2).to_bytes(8, "big", signed=True),
                  stamp + (2**63 - 1).to_bytes(8, "big"), stamp + b"\x00" * 7, stamp + b"\x00" * 9, b"short"]
    keys = [b"k", b"", "\u4e2d".encode(), b"\xff"]
    metadatas = [None, ("in", 0, 3), ("other", 1, 9)]
    headers = [(), (("h", b"1"),), (("h", b"2"), ("g", None))]
    return [(rng.choice(keys), rng.choice(values), rng.randrange(100), rng.choice(values), rng.choice(metadatas),
             rng.choice(headers)) for _ in range(300)]


class _Recording:
    """An operator whose children record what it forwards and the record context they see (its
    context scopes nothing)."""

    def __init__(self, got: list) -> None:
        self.got = got
        self.context = type("Ctx", (), {"scoped": staticmethod(lambda fn: fn)})()
        self.context.metadata, self.context.headers = ("writer", 0, 1), (("w", b"0"),)

    def _to_children(self):
        context = self.context
        return lambda key, value, timestamp, headers: self.got.append(
            (key, value, timestamp, headers, context.metadata, context.headers))


@pytest.mark.parametrize("inner", [S, serdes.INT64], ids=["string", "int64"])
@pytest.mark.parametrize("seed", range(4))
def test_the_c_flush_loop_forwards_what_the_python_loop_does(tmp_path, seed, inner):
    """streams/dsl/_change.c forward_flushed against attach_tuple_forwarder's Python loop (the
    accelerator switched off): the same records, and at an undecodable change the same error,
    after the same records."""
    from state.typed import find_caching_layer
    from streams.dsl import change as change_mod
    from streams.dsl.ops import table as table_ops
    if change_mod.forward_flushed is None:
        pytest.skip("streams.dsl._change is not built")
    changes = _flushed_changes(seed, inner)
    results = []
    for accelerated in (True, False):
        store, _ = _store(tmp_path / str(accelerated), inner, caching=True)
        got: list = []
        saved = change_mod.forward_flushed
        change_mod.forward_flushed = saved if accelerated else None
        recording = _Recording(got)
        try:
            assert table_ops.attach_tuple_forwarder(recording, store, True) is False
        finally:
            change_mod.forward_flushed = saved
        listener = find_caching_layer(store)._flush_listener
        outcome = []
        start = 0
        while start < len(changes):  # past each error, as a caller retrying the rest would
            before = len(got)
            try:
                listener.flush_many(changes[start:])
                start = len(changes)
            except Exception as exc:  # noqa: BLE001 - compared below
                outcome.append((len(got), type(exc).__name__, str(exc)))
                start += len(got) - before + 1  # the records forwarded, then the failing change
            # the writer's record context is put back after every flush, even a failed one
            assert (recording.context.metadata, recording.context.headers) == (("writer", 0, 1), (("w", b"0"),))
        results.append((got, outcome))
    assert results[0] == results[1]
    assert results[0][0] and results[0][1]  # both records and errors were met
    # each record goes with its change's headers, in its change's record context
    assert all(headers == context_headers for _k, _v, _t, headers, _m, context_headers in results[0][0])
    assert {metadata for *_, metadata, _h in results[0][0]} == {None, ("in", 0, 3), ("other", 1, 9)}


@pytest.mark.parametrize("caching", [False, True], ids=["uncached", "cached"])
def test_replace_writes_and_returns_the_timestamp_it_read(tmp_path, caching):
    store, _ = _store(tmp_path, serdes.STRING, caching)
    access = TimestampedAccess(store)
    assert access.replace("k", "a", 10) is None  # nothing there
    assert access.replace("k", "b", 5) == 10
    assert access.replace("k", None, 7) == 5
    assert access.replace("k", "c", 8) is None  # deleted
    assert store.get("k") == ValueAndTimestamp("c", 8)
