"""CachingKeyValueStore.update_many's int64-increment hot case, done in C by
state.cache._cache.increment_run when it is built: every test runs with the C loop and with the pure
Python loop (the fallback), and the two must leave the cache in exactly the same state (values,
old values, timestamps, sizes, LRU and write order, counters), forward the same flushes, see the
same stream time in fn and the listener, and raise the same errors with the same updates_done.
Values and flushes are also checked against get-then-put, the semantics update_many stands for."""

import os
import random
import struct
import subprocess
import sys
from collections import OrderedDict

import pytest

from state.cache import kv as caching
from state.cache import ENTRY_OVERHEAD, UNKNOWN, CacheEntry, CachingKeyValueStore, ThreadCache
from state.memory_kv import InMemoryKeyValueStore

from recording_context import RecordingContext

try:
    from state.cache import _cache
except ImportError:  # pragma: no cover - the accelerator is optional
    _cache = None

IMPLEMENTATIONS = [pytest.param(None, id="python")]
if _cache is not None:
    IMPLEMENTATIONS.append(pytest.param(_cache.increment_run, id="c"))
needs_c = pytest.mark.skipif(_cache is None, reason="state.cache._cache is not built")

I64 = struct.Struct(">q")
INT64_MAX = 2**63 - 1
ENTRY = len(b"k0") + 8 + ENTRY_OVERHEAD  # the cost of one cached count of a key "k<digit>"
ONE = len(b"a") + 8 + ENTRY_OVERHEAD  # of a one-byte key (written without a record context)


def _i(n: int) -> bytes:
    return I64.pack(n)


class Clock:
    """The stream time's owner, as the task engine is: the store reads it and asks to raise it."""

    stream_time = 0

    def advance_stream_time(self, timestamp):
        if timestamp > self.stream_time:
            self.stream_time = timestamp


class Log:
    """What fn and the flush listener saw, with the stream time at each call."""

    def __init__(self, clock):
        self.clock = clock
        self.calls = []

    def add_one(self, old):
        """A count's add-one: fn decides what the hot case leaves to it (None, decimal text,
        and the overflow at INT64_MAX, which raises struct.error like the real count's)."""
        self.calls.append(("fn", old, self.clock.stream_time))
        if old is None:
            return _i(1)
        if len(old) != 8:
            return _i(int(old) + 1)
        return I64.pack(I64.unpack(old)[0] + 1)

    add_one.int64_increment = True

    def add_one_stamped(self, old, timestamp):
        """The same over a timestamped store's values (8-byte timestamp + value): the result
        stamped max(the old value's, the record's) timestamps, the timestamp written with it."""
        self.calls.append(("fn", old, timestamp, self.clock.stream_time))
        if old is None:
            return I64.pack(timestamp) + _i(1), timestamp
        stamp = max(I64.unpack_from(old)[0], timestamp)
        count = old[8:]
        if len(count) != 8:
            return I64.pack(stamp) + _i(int(count) + 1), stamp
        return I64.pack(stamp) + I64.pack(I64.unpack(count)[0] + 1), stamp

    add_one_stamped.int64_increment = True
    add_one_stamped.timestamped = True

    def add_by(self, old, increment):
        """add_one with each key's own increment (update_many's `increments`)."""
        self.calls.append(("fn", old, increment, self.clock.stream_time))
        if old is None:
            return _i(1) if increment >= 0 else None
        if len(old) != 8:
            return _i(int(old) + increment)
        return I64.pack(I64.unpack(old)[0] + increment)

    add_by.int64_increment = True

    def add_by_stamped(self, old, timestamp, increment):
        """add_one_stamped with each key's own increment: a table count's (nothing to subtract
        from on no count: a delete)."""
        self.calls.append(("fn", old, timestamp, increment, self.clock.stream_time))
        if old is None:
            return (I64.pack(timestamp) + _i(1) if increment >= 0 else None), timestamp
        stamp = max(I64.unpack_from(old)[0], timestamp)
        count = old[8:]
        if len(count) != 8:
            return I64.pack(stamp) + _i(int(count) + increment), stamp
        return I64.pack(stamp) + I64.pack(I64.unpack(count)[0] + increment), stamp

    add_by_stamped.int64_increment = True
    add_by_stamped.timestamped = True

    def on_flush(self, key, new, old, timestamp):
        self.calls.append(("flush", key, new, old, timestamp, self.clock.stream_time))


class _RecordContext:
    """The task's processor context as the cache reads it: a write's metadata and headers."""

    metadata = ("ctx", 0, -1)
    headers = ()


def _store(tmp_path, name, max_bytes, run):
    inner = InMemoryKeyValueStore("c")
    store = CachingKeyValueStore(inner, ThreadCache(max_bytes))
    store.init(RecordingContext(tmp_path / name / "0_0"))
    store._increment_run = run
    clock = Clock()
    log = Log(clock)
    store.set_flush_listener(log.on_flush)
    return store, inner, clock, log


def _snapshot(store):
    named = store._named
    return (
        [(k, e.value, e.dirty, e.timestamp, e.size, "UNKNOWN" if e.old is UNKNOWN else e.old)
         for k, e in named.entries.items()],
        list(named.dirty),
        store.cache.stats(store.namespace),
        store.cache.size_bytes,
    )


def _fn(log, stamped, increments):
    if increments is None:
        return log.add_one_stamped if stamped else log.add_one
    return log.add_by_stamped if stamped else log.add_by


def _signed(increments):
    return [b - 256 if b > 127 else b for b in increments]


def _run(store, clock, log, keys, timestamps, stamped=False, increments=None):
    """update_many; returns (returned value or the exception's type, args and updates_done)."""
    try:
        return ("ok", store.update_many(keys, _fn(log, stamped, increments), timestamps, clock,
                                        increments=increments))
    except Exception as exc:
        return ("raised", type(exc), str(exc), exc.updates_done)


@pytest.fixture(params=IMPLEMENTATIONS)
def run(request):
    return request.param


# --------------------------------------------------------------------- the C function itself
@needs_c
def test_increment_run_updates_hot_keys_and_stops_at_the_first_other():
    entries = OrderedDict()
    entries[b"a"] = CacheEntry(_i(5), False, 1, ONE)
    entries[b"b"] = CacheEntry(_i(-1), True, 2, ONE, None)
    entries[b"c"] = CacheEntry(b"12", True, 3, 2 + 2 + ENTRY_OVERHEAD)
    dirty = {b"b": None, b"c": None}
    keys = [b"b", b"a", b"b", b"c", b"a"]
    stop, hits, newest, last, error = _cache.increment_run(entries, dirty, keys, [7, 9, 8, 10, 11], 0, 4)
    assert (stop, hits, newest, last, error) == (3, 3, 9, _i(1), None)
    assert entries[b"a"].value == _i(6) and entries[b"a"].old == _i(5) and entries[b"a"].dirty is True
    assert entries[b"a"].timestamp == 9
    assert entries[b"b"].value == _i(1) and entries[b"b"].old is None and entries[b"b"].timestamp == 8
    assert list(entries) == [b"c", b"a", b"b"]  # LRU order: c untouched, then a, then b
    assert list(dirty) == [b"c", b"a", b"b"]  # write order
    # from the next index on, at once past the end, and a newest that is not an int64
    assert _cache.increment_run(entries, dirty, keys, [7, 9, 8, 10, 11], 4, 20) == (5, 1, 20, _i(7), None)
    assert _cache.increment_run(entries, dirty, keys, [7], 4, 20) == (4, 0, 20, None, None)
    assert _cache.increment_run(entries, dirty, keys, [7], 0, 2**63) == (0, 0, 2**63, None, None)
    assert entries[b"a"].value == _i(7)


@needs_c
@pytest.mark.parametrize("key, value, timestamp", [
    (b"a", _i(INT64_MAX), 1),  # adding one overflows
    (b"a", None, 1),  # a cached delete
    (b"a", b"1234567", 1),  # not 8 bytes
    (b"a", bytearray(_i(3)), 1),  # not bytes
    (b"z", _i(3), 1),  # a miss
    (bytearray(b"a"), _i(3), 1),  # not a bytes key
    (b"a", _i(3), True),  # a timestamp that is not an int
    (b"a", _i(3), 2**63),  # nor an int64
])
def test_increment_run_leaves_every_other_case_untouched(key, value, timestamp):
    entries = OrderedDict([(b"a", CacheEntry(value, False, 0, ONE)), (b"b", CacheEntry(_i(0), False, 0, ONE))])
    dirty = {}
    assert _cache.increment_run(entries, dirty, (key,), (timestamp,), 0, 0) == (0, 0, 0, None, None)
    assert entries[b"a"].value is value and entries[b"a"].dirty is False and entries[b"a"].timestamp == 0
    assert list(entries) == [b"a", b"b"] and dirty == {}


@needs_c
def test_increment_run_bad_arguments():
    entries, dirty = OrderedDict(), {}
    with pytest.raises(TypeError, match="OrderedDict"):
        _cache.increment_run({}, dirty, [], [], 0, 0)
    with pytest.raises(TypeError, match="dirty must be a dict"):
        _cache.increment_run(entries, OrderedDict(), [], [], 0, 0)
    with pytest.raises(TypeError, match="lists or tuples"):
        _cache.increment_run(entries, dirty, iter([]), [], 0, 0)
    with pytest.raises(ValueError, match="start must be >= 0"):
        _cache.increment_run(entries, dirty, [], [], -1, 0)
    with pytest.raises(TypeError, match="takes 6 to 11 arguments"):
        _cache.increment_run(entries, dirty, [], [], 0)
    with pytest.raises(TypeError, match="increments must be bytes or None"):
        _cache.increment_run(entries, dirty, [], [], 0, 0, True, None, None, [1])


@needs_c
def test_set_entry_layout_rejects_types_it_cannot_write_directly():
    class NoSlots:
        pass

    class Guarded:
        __slots__ = ("value", "dirty", "timestamp", "size", "old")

        def __setattr__(self, name, value):  # pragma: no cover - never called
            object.__setattr__(self, name, value)

    with pytest.raises(TypeError, match="wants the CacheEntry type"):
        _cache.set_entry_layout(CacheEntry(None, False, 0, 0))
    with pytest.raises(TypeError, match="not a __slots__ member"):
        _cache.set_entry_layout(NoSlots)
    with pytest.raises(TypeError, match="customizes attribute access"):
        _cache.set_entry_layout(Guarded)
    # a failed registration keeps the one state/cache/kv.py made
    entries = OrderedDict([(b"a", CacheEntry(_i(1), True, 0, ONE))])
    assert _cache.increment_run(entries, {b"a": None}, [b"a"], [1], 0, 0)[:2] == (1, 1)
    assert entries[b"a"].value == _i(2)


def test_the_store_uses_the_c_loop_when_built():
    assert CachingKeyValueStore._increment_run is (caching._cache_c.increment_run if _cache is not None else None)


# ----------------------------------------------------------- update_many, C against Python
def _differential(tmp_path, max_bytes, script, check_oracle=True, stamped=False):
    """Runs `script` (a list of steps) on a store per implementation and on a get-then-put
    oracle; returns the per-implementation results after checking they are identical."""
    results = []
    for impl in IMPLEMENTATIONS:
        run = impl.values[0]
        store, inner, clock, log = _store(tmp_path, f"s-{impl.id}", max_bytes, run)
        context = _RecordContext()
        trace = []
        for step in script:
            kind = step[0]
            if kind == "context":  # the record context of the writes from here on
                context.metadata, context.headers = step[1], step[2]
                store.set_record_context(context)
            elif kind == "update":
                trace.append(_run(store, clock, log, step[1], step[2], stamped, *step[3:]))
                trace.append(clock.stream_time)
            elif kind == "put":
                store.put(step[1], step[2], step[3])
            elif kind == "get":
                trace.append(store.get(step[1]))
            elif kind == "inner":
                inner.put(step[1], step[2], 0)
            elif kind == "flush":
                store.flush()
            trace.append(_snapshot(store))
        store.flush()
        results.append((trace, log.calls, list(inner.all())))
        store.close()
    for other in results[1:]:
        assert other == results[0]
    if check_oracle:
        _check_against_get_then_put(tmp_path, max_bytes, script, results[0], stamped)
    return results[0]


def _check_against_get_then_put(tmp_path, max_bytes, script, result, stamped=False):
    store, inner, clock, log = _store(tmp_path, "oracle", max_bytes, None)
    context = _RecordContext()
    for step in script:
        kind = step[0]
        if kind == "context":
            context.metadata, context.headers = step[1], step[2]
            store.set_record_context(context)
        elif kind == "update" and len(step) > 3:  # each key's own increment
            for key, timestamp, increment in zip(step[1], step[2], _signed(step[3])):
                clock.stream_time = max(clock.stream_time, timestamp)
                if stamped:
                    store.put(key, *log.add_by_stamped(store.get(key), timestamp, increment))
                else:
                    store.put(key, log.add_by(store.get(key), increment), timestamp)
        elif kind == "update":
            for key, timestamp in zip(step[1], step[2]):
                clock.stream_time = max(clock.stream_time, timestamp)
                if stamped:
                    store.put(key, *log.add_one_stamped(store.get(key), timestamp))
                else:
                    store.put(key, log.add_one(store.get(key)), timestamp)
        elif kind == "put":
            store.put(step[1], step[2], step[3])
        elif kind == "get":
            store.get(step[1])
        elif kind == "inner":
            inner.put(step[1], step[2], 0)
        elif kind == "flush":
            store.flush()
    store.flush()
    flushes = [c for c in log.calls if c[0] == "flush"]
    assert flushes == [c for c in result[1] if c[0] == "flush"]
    assert list(inner.all()) == result[2]
    store.close()


def test_mixed_hits_misses_and_fn_cases(tmp_path):
    script = [
        ("inner", b"k1", _i(40)),  # read through on its first update: the old value known
        ("inner", b"k2", b"17"),  # decimal text: fn's case
        ("update", [b"k0", b"k1", b"k0", b"k2", b"k0", b"k1"], [5, 3, 8, 2, 9, 4]),
        ("update", (b"k0", b"k1", b"k2"), (10, 10, 11)),  # tuples, as update() passes
        ("flush",),
        ("get", b"k1"),  # clean entries: the next update dirties them with their old value
        ("update", [b"k1", b"k0", b"k1", b"k3", b"k2"], [12, 13, 13, 12, 14]),
        ("put", b"k0", None, 15),  # a cached delete: fn(None)
        ("update", [b"k1", b"k0", b"k0"], [16, 16, 17]),
        ("put", b"k1", b"9999", 18),  # 4 bytes: a size change goes through fn
        ("update", [b"k1", b"k1", b"k0"], [19, 20, 21]),
    ]
    trace, calls, stored = _differential(tmp_path, 1_000_000, script)
    assert dict(stored) == {b"k0": _i(3), b"k1": _i(10001), b"k2": _i(20), b"k3": _i(1)}
    assert trace[2] == ("ok", _i(42)) and trace[3] == 9  # returned value, stream time


def test_timestamps_and_stream_time_that_the_c_loop_leaves_to_python(tmp_path):
    script = [
        ("update", [b"k0", b"k1"], [5, 6]),
        ("update", [b"k0", b"k1", b"k0"], [True, 7, 2**64]),  # a bool, an int beyond int64
        ("update", [b"k0", b"k1"], [2, 3]),
    ]
    trace, _, _ = _differential(tmp_path, 1_000_000, script, check_oracle=False)
    assert trace[-2] == 2**64  # the stream time stays the largest timestamp seen


def test_keys_and_timestamps_of_different_lengths_stop_at_the_shorter(tmp_path):
    script = [
        ("update", [b"k0", b"k1"], [1, 2]),
        ("update", [b"k0", b"k1", b"k0"], [3, 4]),
        ("update", [b"k1"], [5, 6, 7]),
    ]
    trace, _, stored = _differential(tmp_path, 1_000_000, script, check_oracle=False)
    assert dict(stored) == {b"k0": _i(2), b"k1": _i(3)} and trace[-2] == 5


def test_overflow_at_int64_max_is_fns_and_its_error_carries_updates_done(tmp_path):
    script = [
        ("inner", b"k1", _i(INT64_MAX - 3)),
        ("update", [b"k0", b"k1"], [1, 2]),
        ("update", [b"k0", b"k0", b"k1", b"k0", b"k1"], [3, 4, 5, 6, 7]),  # k1 reaches the max
        ("update", [b"k0", b"k1", b"k0"], [8, 9, 10]),  # fn raises at k1: one update done
    ]
    trace, calls, stored = _differential(tmp_path, 1_000_000, script, check_oracle=False)
    assert trace[-2] == 9  # stream time raised to the failing key's timestamp
    raised = trace[-3]
    assert raised[0] == "raised" and raised[1] is struct.error and raised[3] == 1
    assert dict(stored) == {b"k0": _i(5), b"k1": _i(INT64_MAX)}
    assert ("fn", _i(INT64_MAX), 9) in calls  # fn saw the value and the stream time


def test_a_bad_key_raises_with_updates_done(tmp_path):
    script = [
        ("update", [b"k0", b"k1"], [1, 2]),
        ("update", [b"k0", b"k1", bytearray(b"k0"), b"k0"], [3, 4, 5, 6]),  # unhashable
    ]
    trace, _, stored = _differential(tmp_path, 1_000_000, script, check_oracle=False)
    raised = trace[-3]
    assert raised[0] == "raised" and raised[1] is TypeError and raised[3] == 2
    assert dict(stored) == {b"k0": _i(2), b"k1": _i(2)}


@pytest.mark.parametrize("entries_held", [1, 2, 3, 5])
def test_eviction_with_a_small_cache(tmp_path, entries_held):
    """A miss's read-through or write evicts (and flushes) mid-run: later hot keys must still be
    written to the named cache's current dirty set, so nothing is lost."""
    rng = random.Random(entries_held)
    keys = [b"k%d" % rng.randrange(6) for _ in range(300)]
    script = [("inner", b"k5", _i(100))]
    for start in range(0, 300, 50):
        script.append(("update", keys[start:start + 50], list(range(start, start + 50))))
    trace, _, stored = _differential(tmp_path, entries_held * ENTRY, script)
    counts = {k: keys.count(k) for k in set(keys)}
    counts[b"k5"] += 100
    assert dict(stored) == {k: _i(n) for k, n in counts.items()}
    assert trace[-1][2]["evictions"] > 0


def test_eviction_flush_mid_run_keeps_later_updates(tmp_path, run):
    """The two entries a and b are flushed by c's read-through eviction; b's next update lands
    in the fresh dirty set and is flushed later (it was lost when update_many kept the old set)."""
    store, inner, clock, log = _store(tmp_path, "s", 2 * ENTRY, run)
    store.update_many([b"k0", b"k1", b"k2", b"k1"], log.add_one, [1, 2, 3, 4], clock)
    assert list(store._named.dirty) == [b"k1"]  # k2 went with the eviction's flush
    store.flush()
    assert dict(inner.all()) == {b"k0": _i(1), b"k1": _i(2), b"k2": _i(1)}
    assert [c[1:5] for c in log.calls if c[0] == "flush"][-1] == (b"k1", _i(2), _i(1), 4)


def test_zero_cache_and_single_updates(tmp_path):
    script = [("update", [b"k0"], [1]), ("update", (b"k0",), (2,)), ("update", [b"k0", b"k0"], [3, 4])]
    _differential(tmp_path, 0, script)
    _differential(tmp_path / "big", 1_000_000, script)


def _random_script(rng, vocab, script, steps, update_share, put_value):
    """`script` and `steps` random steps: runs of updates (`update_share` of the steps; timestamps
    drifting, now and then back in time), flushes, gets, and puts of `put_value(rng, ts)`."""
    ts = 10
    for _ in range(steps):
        r = rng.random()
        if r < update_share:
            n = rng.randrange(0, 40)
            keys = [rng.choice(vocab) for _ in range(n)]
            stamps = []
            for _ in range(n):
                ts += rng.randrange(-3, 5)
                stamps.append(ts)
            script.append(("update", keys, stamps))
        elif r < update_share + (1 - update_share) / 3:
            script.append(("flush",))
        elif r < update_share + 2 * (1 - update_share) / 3:
            script.append(("get", rng.choice(vocab)))
        else:
            script.append(("put", rng.choice(vocab), put_value(rng, ts), ts))
    return script


@pytest.mark.parametrize("seed", range(6))
def test_random_runs(tmp_path, seed):
    rng = random.Random(seed)
    vocab = [b"k%d" % i for i in range(8)]
    script = _random_script(rng, vocab, [("inner", b"k7", _i(INT64_MAX - 3)), ("inner", b"k6", b"41")], 25, 0.6,
                            lambda rng, ts: rng.choice([None, _i(rng.randrange(50)), b"7", _i(INT64_MAX - 1)]))
    max_bytes = rng.choice([0, 3 * ENTRY, 6 * ENTRY, 1_000_000])
    # the oracle is only for scripts without an overflow error (it stops at the first)
    _differential(tmp_path, max_bytes, script, check_oracle=False)


#: record contexts of writes: their topics and headers change what an entry costs (Kafka's sizes)
_CONTEXTS = [(None, ()), (("in", 0, 1), ()), (("input-topic", 1, 9), ()), (("in", 0, 2), (("h", b"xyz"),)),
             (("in", 0, 3), (("\u00e9\U0001f600", None),))]


@pytest.mark.parametrize("seed", range(6))
def test_random_runs_in_changing_record_contexts(tmp_path, seed):
    """Writes whose record contexts cost different sizes: a cached count rewritten in another
    context changes size (the C loop leaves it to the Python loop, which resizes and evicts),
    in the same one keeps it; both loops and the get-then-put oracle agree, sizes included."""
    rng = random.Random(1000 + seed)
    vocab = [b"k%d" % i for i in range(6)]
    script = []
    for _ in range(8):
        script.append(("context",) + rng.choice(_CONTEXTS))
        _random_script(rng, vocab, script, 3, 0.8, lambda rng, ts: rng.choice([None, _i(rng.randrange(50))]))
    max_bytes = rng.choice([3 * ENTRY, 4 * ENTRY + 20, 6 * ENTRY, 1_000_000])
    _differential(tmp_path, max_bytes, script)


class _DroppingTimestamp(int):
    """A timestamp whose release removes its key from the cache, so the update that replaces
    it fails at the LRU move (KeyError) in both loops: a real error in the middle of a key."""

    entries = None
    key = None

    def __del__(self):
        entries = type(self).entries
        if entries is not None and type(self).key in entries:
            del entries[type(self).key]


def test_an_error_in_the_middle_of_a_hot_key_leaves_the_same_state(tmp_path):
    results = []
    for impl in IMPLEMENTATIONS:
        run = impl.values[0]
        store, inner, clock, log = _store(tmp_path, f"s-{impl.id}", 1_000_000, run)
        store.update_many([b"k0", b"k1"], log.add_one, [1, 2], clock)
        _DroppingTimestamp.entries, _DroppingTimestamp.key = store._named.entries, b"k1"
        # not an int: the Python loop stores it; below the stream time (2), so only k1 holds it
        store.update_many([b"k1"], log.add_one, [_DroppingTimestamp(1)], clock)
        try:
            with pytest.raises(KeyError) as info:
                store.update_many([b"k0", b"k0", b"k1", b"k0"], log.add_one, [4, 5, 6, 7], clock)
        finally:
            _DroppingTimestamp.entries = None
        assert info.value.updates_done == 2
        results.append((_snapshot(store), clock.stream_time, log.calls))
    for other in results[1:]:
        assert other == results[0]
    snapshot, stream_time, _ = results[0]
    assert stream_time == 6 and snapshot[2]["hits"] == 4  # the failed key was a hit
    assert [k for k, *_ in snapshot[0]] == [b"k0"] and snapshot[1] == [b"k0", b"k1"]


def test_without_the_accelerator_the_python_loop_counts(tmp_path):
    """state.cache._cache missing (ImportError): state/cache/kv.py imports and update_many counts in Python."""
    code = f"""
import struct, sys
sys.modules["state.cache._cache"] = None  # import state.cache._cache raises ImportError
sys.path.insert(0, {os.path.dirname(__file__)!r})
from state.cache import ThreadCache, kv as caching
from state.memory_kv import InMemoryKeyValueStore
from recording_context import RecordingContext
assert caching._cache_c is None and caching.CachingKeyValueStore._increment_run is None
inner = InMemoryKeyValueStore("c")
store = caching.CachingKeyValueStore(inner, ThreadCache(1_000_000))
store.init(RecordingContext(__import__("pathlib").Path({str(tmp_path)!r}) / "0_0"))
p = struct.Struct(">q")
def add_one(old):
    return p.pack(1 if old is None else p.unpack(old)[0] + 1)
add_one.int64_increment = True
store.update_many([b"a", b"b", b"a", b"a"], add_one, [1, 2, 3, 4])
store.flush()
print(sorted((k, p.unpack(v)[0]) for k, v in inner.all()))
"""
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    out = subprocess.run([sys.executable, "-c", code], cwd=root, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[(b'a', 3), (b'b', 1)]"


def _stamped(timestamp, count):
    return I64.pack(timestamp) + _i(count)


def test_a_timestamped_count_is_stamped_with_the_newest_timestamp_it_has_seen(tmp_path):
    script = [
        ("inner", b"k1", _stamped(50, 40)),  # read through: its timestamp is newer than the records'
        ("update", [b"k0", b"k1", b"k0", b"k0", b"k1"], [5, 3, 9, 2, 60]),
        ("flush",),
        ("get", b"k0"),
        ("update", [b"k0", b"k0"], [4, 12]),
    ]
    trace, calls, stored = _differential(tmp_path, 1_000_000, script, stamped=True)
    assert dict(stored) == {b"k0": _stamped(12, 5), b"k1": _stamped(60, 42)}
    flushes = [c for c in calls if c[0] == "flush"]
    # (key, new, old, timestamp): the entry's timestamp is the value's, never a late record's
    assert (b"k0", _stamped(9, 3), None, 9) in [f[1:5] for f in flushes]
    assert (b"k1", _stamped(60, 42), _stamped(50, 40), 60) in [f[1:5] for f in flushes]
    assert ("fn", None, 5, 5) in calls  # a miss: fn gets the record's timestamp


@pytest.mark.parametrize("seed", range(4))
def test_random_timestamped_runs(tmp_path, seed):
    rng = random.Random(seed)
    vocab = [b"k%d" % i for i in range(6)]
    script = _random_script(rng, vocab, [("inner", b"k5", _stamped(3, 7))], 20, 0.7,
                            lambda rng, ts: rng.choice([None, _stamped(ts - 5, 3), _i(7) + b"x"]))
    max_bytes = rng.choice([0, 3 * ENTRY, 6 * ENTRY, 1_000_000])
    _differential(tmp_path, max_bytes, script, stamped=True, check_oracle=False)


@pytest.mark.parametrize("as_type", [list, tuple])
def test_each_write_keeps_its_records_metadata_whatever_the_sequence(tmp_path, run, as_type):
    """metadatas[i] is the record context of the i-th write, a list taking the C loop for the
    cached keys, any other sequence the Python loop; the context's own metadata comes back after."""
    store, _, clock, log = _store(tmp_path, f"m-{as_type.__name__}", 1_000_000, run)
    context = _RecordContext()
    store.set_record_context(context)
    keys = [b"k0", b"k1", b"k0", b"k1", b"k0"]
    metas = as_type(("in", 0, offset) for offset in range(5))
    store.update_many(keys, log.add_one, [1, 2, 3, 4, 5], clock, metas)
    entries = store._named.entries
    assert (entries[b"k0"].value, entries[b"k0"].metadata) == (_i(3), ("in", 0, 4))
    assert (entries[b"k1"].value, entries[b"k1"].metadata) == (_i(2), ("in", 0, 3))
    assert context.metadata == ("ctx", 0, -1)
    store.flush()
    assert [c[1:3] for c in log.calls if c[0] == "flush"] == [(b"k1", _i(2)), (b"k0", _i(3))]
    store.close()


# ------------------------------------------------- each key's own increment (a table count's)
def _inc(*deltas):
    return bytes(d & 0xFF for d in deltas)


@needs_c
def test_increment_run_adds_each_keys_own_increment_and_stops_at_an_overflow():
    entries = OrderedDict()
    entries[b"a"] = CacheEntry(_stamped(5, 3), False, 5, ONE + 8)
    entries[b"b"] = CacheEntry(_stamped(9, -2**63 + 1), True, 9, ONE + 8, None)
    dirty = {b"b": None}
    keys = [b"a", b"b", b"a", b"b", b"a"]
    stop, hits, newest, last, error = _cache.increment_run(entries, dirty, keys, [7, 4, 6, 8, 9], 0, 0, True,
                                                           None, None, _inc(-1, -1, 0, -1, 1))
    # b at INT64_MIN: subtracting one more overflows, fn decides from there
    assert (stop, hits, newest, last, error) == (3, 3, 7, _stamped(7, 2), None)
    assert entries[b"a"].value == _stamped(7, 2) and entries[b"a"].old == _stamped(5, 3)
    assert entries[b"b"].value == _stamped(9, -2**63) and entries[b"b"].timestamp == 9
    # increments shorter than the keys: the run stops where they end
    assert _cache.increment_run(entries, dirty, keys, [7, 4, 6, 8, 9], 4, 0, True, None, None,
                                _inc(1, 1, 1, 1))[:2] == (4, 0)
    entries[b"c"] = CacheEntry(_stamped(1, 2**63 - 1), True, 1, ONE + 8)
    assert _cache.increment_run(entries, dirty, [b"c", b"c"], [2, 3], 0, 0, True, None, None,
                                _inc(0, 1))[:2] == (1, 1)
    assert entries[b"c"].value == _stamped(2, 2**63 - 1)


def test_update_many_wants_bytes_increments_and_an_int64_fn(tmp_path, run):
    store, _, clock, log = _store(tmp_path, "bad", 1_000_000, run)
    with pytest.raises(TypeError, match="increments must be bytes"):
        store.update_many([b"k0"], log.add_by, [1], clock, increments=[1])
    with pytest.raises(TypeError, match="fn must have int64_increment"):
        store.update_many([b"k0"], lambda old, increment: old, [1], clock, increments=_inc(1))
    store.close()


@pytest.mark.parametrize("stamped", [False, True])
def test_increments_with_hits_misses_deletes_and_overflows(tmp_path, stamped):
    value = (lambda ts, n: _stamped(ts, n)) if stamped else (lambda ts, n: _i(n))
    script = [
        ("inner", b"k1", value(50, 40)),
        ("inner", b"k3", value(2, -2**63 + 1)),
        ("update", [b"k0", b"k1", b"k0", b"k0", b"k1", b"k2"], [5, 3, 9, 2, 60, 4], _inc(1, -1, 0, -1, 1, -1)),
        ("flush",),
        ("get", b"k0"),
        ("update", [b"k0", b"k0", b"k1", b"k2", b"k3"], [4, 12, 13, 14, 15], _inc(1, 0, 1, 1, -1)),
        ("put", b"k1", None, 16),  # a cached delete: fn(None) with its increment
        ("update", [b"k1", b"k1", b"k0"], [17, 18, 19], _inc(-1, 1, -1)),
    ]
    trace, calls, stored = _differential(tmp_path, 1_000_000, script, stamped=stamped)
    counts = {k: I64.unpack(v[-8:])[0] for k, v in stored}
    assert counts == {b"k0": 0, b"k1": 1, b"k2": 1, b"k3": -2**63}
    # k2's first update: nothing to subtract from (the stream time is the run's newest so far)
    assert (("fn", None, 4, -1, 60) if stamped else ("fn", None, -1, 60)) in calls


@pytest.mark.parametrize("seed", range(6))
def test_random_runs_with_increments(tmp_path, seed):
    rng = random.Random(seed)
    stamped = seed % 2 == 1
    vocab = [b"k%d" % i for i in range(6)]
    script = _random_script(rng, vocab, [("inner", b"k5", _stamped(3, 7) if stamped else _i(7))], 20, 0.7,
                            lambda rng, ts: rng.choice([None, _stamped(ts - 5, 3) if stamped else _i(3)]))
    for i, step in enumerate(script):
        if step[0] == "update":
            script[i] = step + (_inc(*(rng.choice([-1, 0, 1]) for _ in step[1])),)
    max_bytes = rng.choice([0, 3 * ENTRY, 6 * ENTRY, 1_000_000])
    _differential(tmp_path, max_bytes, script, stamped=stamped)
