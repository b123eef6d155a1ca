"""A named cache's write of a dirty entry: state.cache.thread_cache.write_entry_py (the
definition) and state.cache._cache.write_entry (C, where built) must leave the maps in exactly the
same state (values, old values, dirty flags, timestamps, sizes, LRU order, write order) and
return the same size change; the C function declines (None, nothing done) what it does not take."""

import random
from collections import OrderedDict

import pytest
from confluent_kafka import Message

from state.cache import ENTRY_OVERHEAD, UNKNOWN, CacheEntry, ThreadCache
from state.cache.thread_cache import SEGMENT_ID_BYTES, RangeIndex
from state.cache import thread_cache

try:
    from state.cache import _cache
except ImportError:  # pragma: no cover - the accelerator is optional
    _cache = None

needs_c = pytest.mark.skipif(_cache is None, reason="state.cache._cache is not built")


def snapshot(entries, dirty):
    return ([(k, e.value, e.dirty, e.timestamp, e.size, e.old) for k, e in entries.items()], list(dirty))


def test_the_python_write_by_hand():
    entries, dirty = OrderedDict(), {}
    # a new key: its entry costs key + value + the overhead, dirty, with the old value given
    assert thread_cache.write_entry_py(entries, dirty, b"a", b"12", 5, UNKNOWN) == 1 + 2 + ENTRY_OVERHEAD
    entries[b"b"] = CacheEntry(b"x", False, 1, 1 + 1 + ENTRY_OVERHEAD)  # a clean read-through
    # rewriting the clean entry: its value becomes the old value, it moves to the end of both orders
    assert thread_cache.write_entry_py(entries, dirty, b"b", None, 6, UNKNOWN) == -1
    assert thread_cache.write_entry_py(entries, dirty, b"a", b"3", 7, None) == -1
    assert snapshot(entries, dirty) == ([(b"b", None, True, 6, 1 + ENTRY_OVERHEAD, b"x"),
                                         (b"a", b"3", True, 7, 2 + ENTRY_OVERHEAD, UNKNOWN)], [b"b", b"a"])


@needs_c
@pytest.mark.parametrize("seed", range(5))
def test_c_and_python_writes_leave_the_same_maps(seed):
    rng = random.Random(seed)
    keys = [b"k%d" % i for i in range(12)]
    values = [None, b"", b"v", b"\x00" * 16, b"longer value"]
    olds = [UNKNOWN, None, b"o"]
    maps = [(OrderedDict(), {}), (OrderedDict(), {})]
    for step in range(2000):
        key, value, old = rng.choice(keys), rng.choice(values), rng.choice(olds)
        r = rng.random()
        if r < 0.15:  # a clean read-through entry, as put_clean makes
            for entries, _ in maps:
                if key not in entries:
                    entries[key] = CacheEntry(value, False, step, len(key) + len(value or b"") + ENTRY_OVERHEAD)
            continue
        if r < 0.25:  # a flush: entries become clean, the write order empties
            for entries, dirty in maps:
                for k in dirty:
                    entries[k].dirty = False
                dirty.clear()
            continue
        if r < 0.3:  # an eviction of the eldest
            for entries, dirty in maps:
                if entries:
                    k, _ = entries.popitem(last=False)
                    dirty.pop(k, None)
            continue
        ours = _cache.write_entry(*maps[0], key, value, step, old)
        theirs = thread_cache.write_entry_py(*maps[1], key, value, step, old)
        assert ours == theirs
        assert snapshot(*maps[0]) == snapshot(*maps[1])


@needs_c
def test_c_declines_what_it_does_not_take_and_does_nothing():
    entries, dirty = OrderedDict([(b"a", CacheEntry(b"1", True, 0, 1 + 1 + ENTRY_OVERHEAD))]), {b"a": None}
    before = snapshot(entries, dirty)
    assert _cache.write_entry(entries, dirty, "a", b"1", 1, UNKNOWN) is None  # not bytes
    assert _cache.write_entry(entries, dirty, bytearray(b"a"), b"1", 1, UNKNOWN) is None
    assert _cache.write_entry(entries, dirty, b"a", bytearray(b"2"), 1, UNKNOWN) is None
    assert _cache.write_entry(dict(entries), dirty, b"a", b"2", 1, UNKNOWN) is None  # not an OrderedDict
    entries[b"a"].size = 2.0  # a size that is not an int
    assert _cache.write_entry(entries, dirty, b"a", b"2", 1, UNKNOWN) is None
    entries[b"a"].size = 1 + 1 + ENTRY_OVERHEAD
    entries[b"a"].dirty = 1  # a flag that is not a bool
    assert _cache.write_entry(entries, dirty, b"a", b"2", 1, UNKNOWN) is None
    entries[b"a"].dirty = True
    assert snapshot(entries, dirty) == before
    with pytest.raises(TypeError):
        _cache.write_entry(entries, dirty, b"a")


@needs_c
def test_the_caches_use_the_c_write_when_built():
    assert thread_cache.write_entry is _cache.write_entry
    cache = ThreadCache(10_000)
    named = cache.named_cache("0_0-s")
    named.listener = lambda entries: None
    named.put_dirty(b"k", b"v", 3)
    assert snapshot(named.entries, named.dirty) == ([(b"k", b"v", True, 3, 2 + ENTRY_OVERHEAD, UNKNOWN)], [b"k"])
    assert named.size_bytes == cache.size_bytes == 2 + ENTRY_OVERHEAD


@needs_c
def test_c_leaves_atomic_entries_to_no_cycle_collection():
    """A new entry holding only bytes, None, ints, bools or the UNKNOWN marker is in no cycle:
    the C write untracks it from the cyclic collector (a cache keeps many of them); one holding
    anything else stays tracked."""
    import gc
    entries, dirty = OrderedDict(), {}
    _cache.write_entry(entries, dirty, b"a", b"1", 1, UNKNOWN)
    _cache.write_entry(entries, dirty, b"b", None, 2, None)
    _cache.write_entry(entries, dirty, b"c", b"3", 3, b"old")
    _cache.write_entry(entries, dirty, b"d", b"4", 4.0, UNKNOWN)  # a float timestamp
    _cache.write_entry(entries, dirty, b"e", b"5", 5, [])  # a container as the old value
    assert [gc.is_tracked(entries[k]) for k in (b"a", b"b", b"c", b"d", b"e")] == [False, False, False, True, True]


@needs_c
def test_c_leaves_entries_holding_an_untracked_consumed_message_to_no_cycle_collection():
    """A bulk run's write keeps its consumed message as the record context (no headers). The
    log's decoder untracks the messages it makes (they hold bytes, str and ints): an entry
    holding such a message is untracked too. A tracked message, headers, or a rewrite in such a
    context put the entry (back) under the collector."""
    import gc

    from replication import records
    if not records.ACCELERATED:
        pytest.skip("the log's C decoder is off (EDDY_RECORDS_PURE_PYTHON): its messages are tracked")
    consumed, _next = records.decode_messages(records.encode_batch([(b"k", b"v", 1, None)]), "t", 0)
    assert not gc.is_tracked(consumed[0])
    built = Message("t", 0, 0, b"k", b"v", None, None, (1, 1), -1.0, -1)
    assert gc.is_tracked(built)
    entries, dirty = OrderedDict(), {}
    _cache.write_entry(entries, dirty, b"a", b"1", 1, UNKNOWN, consumed[0], ())
    _cache.write_entry(entries, dirty, b"b", b"2", 2, UNKNOWN, built, ())
    _cache.write_entry(entries, dirty, b"c", b"3", 3, UNKNOWN, consumed[0], (("h", b"x"),))

    class DictMessage(dict):  # a message that is a dict: an untracked dict can track itself again
        def topic(self):
            return "t"

        def headers(self):
            return None
    _cache.write_entry(entries, dirty, b"d", b"4", 4, UNKNOWN, DictMessage(), ())
    assert [gc.is_tracked(entries[k]) for k in (b"a", b"b", b"c", b"d")] == [False, True, True, True]
    _cache.write_entry(entries, dirty, b"a", b"5", 5, UNKNOWN, built, ())
    assert gc.is_tracked(entries[b"a"]) and entries[b"a"].metadata is built


def _named_with_dirty(seed):
    """A named cache after random writes, some flushed, so clean and dirty entries mix."""
    rng = random.Random(seed)
    cache = ThreadCache(10_000_000)
    named = cache.named_cache("0_0-s")
    named.listener = lambda entries: None
    for step in range(300):
        key = b"k%d" % rng.randrange(40)
        named.put_dirty(key, rng.choice([None, b"", b"v", b"value"]), step, rng.choice([UNKNOWN, None, b"o"]))
        if rng.random() < 0.05:
            cache.flush(named.name)
    named.put_dirty(b"gone", None, 300)  # a tombstone among them
    return named


@needs_c
@pytest.mark.parametrize("seed", range(4))
def test_c_and_python_take_the_same_dirty_entries(seed, monkeypatch):
    results = []
    for c in (True, False):
        if not c:
            monkeypatch.setattr(thread_cache, "_take_dirty_c", None)
        named = _named_with_dirty(seed)
        first = thread_cache.DirtyEntry(b"first", b"x", 1, UNKNOWN)
        flushed, tombstones = named._take_dirty(first)
        assert all(type(e) is thread_cache.DirtyEntry for e in flushed)
        results.append((flushed, tombstones, named.dirty, snapshot(named.entries, {})))
    assert results[0] == results[1]
    assert len(results[0][0]) > 1 and results[0][1]  # entries and tombstones were taken


@needs_c
def test_c_take_dirty_declines_an_entry_it_does_not_take():
    entries, dirty = OrderedDict([(b"a", CacheEntry(b"1", True, 0, 1 + 1 + ENTRY_OVERHEAD))]), {b"a": None, b"b": None}
    flushed, tombstones = [], []
    assert _cache.take_dirty(entries, dirty, thread_cache.DirtyEntry, flushed, tombstones) is False  # b not cached
    assert flushed == [] and entries[b"a"].dirty is True
    del dirty[b"b"]
    assert _cache.take_dirty(entries, dirty, thread_cache.DirtyEntry, flushed, tombstones) is True
    assert flushed == [(b"a", b"1", 0, UNKNOWN, None, ())] and entries[b"a"].dirty is False and tombstones == []


def _cache_state(cache, flushed):
    return (cache.size_bytes, {name: (snapshot(named.entries, named.dirty), named.size_bytes, named.hits, named.misses,
                                      named.evictions, _index_state(named.range_index))
                               for name, named in cache._caches.items()}, flushed)


def _index_state(index):
    return None if index is None else (list(index.positions), sorted(index.keys))


class _WriteContext:
    metadata = None
    headers = ()


def _consumed(topic, headers=None):
    """A consumed message standing for its record context (a keyed run's)."""
    return Message(topic, 0, 5, b"k", b"v", headers, None, (1, 1), -1.0, -1)


_WRITE_CONTEXTS = [(None, ()), (("in", 0, 1), ()), (("a-longer-topic", 2, 7), ()), (("in", 0, 2), [("h", b"xy")]),
                   (("in", 0, 3), (("\u00e9\U0001f600", None), ("k", b""))), (_consumed("msgs"), ()),
                   (_consumed("msgs", [("hh", b"12345")]), ())]


def _run_named_ops(seed, ops):
    """Random reads and writes of two stores sharing a small budget (so evictions of clean and
    dirty entries, flushes of a whole dirty set and write-throughs into an empty cache all
    happen), through `ops` (lookup, put_clean, put_dirty): the caches' states after every step."""
    rng = random.Random(seed)
    lookup, put_clean, put_dirty = ops
    cache = ThreadCache(700)
    flushed = []
    names = ("0_0-a", "0_0-b")
    for name in names:
        cache.add_dirty_entry_flush_listener(name, lambda entries, name=name: flushed.append((name, list(entries))))
        cache.named_cache(name).context = _WriteContext()
    cache.named_cache("0_0-b").entry_overhead = ENTRY_OVERHEAD + SEGMENT_ID_BYTES  # a window store's
    cache.named_cache("0_0-a").range_index = RangeIndex()  # a range-read store's: insertions add to it
    states = []
    for step in range(3000):
        named = cache.named_cache(rng.choice(names))
        # the record context of the writes from here (their topic and headers count in sizes)
        named.context.metadata, named.context.headers = rng.choice(_WRITE_CONTEXTS)
        key = b"k%d" % rng.randrange(15)
        value = rng.choice([None, b"", b"v", b"x" * 40, b"y" * 300, b"z" * 700])
        r = rng.random()
        if r < 0.3:
            entry = lookup(named, key)
            states.append(None if entry is None else (entry.value, entry.dirty))
        elif r < 0.55:
            put_clean(named, key, value, step)
        elif r < 0.97:
            put_dirty(named, key, value, step, rng.choice([UNKNOWN, None, b"o"]))
        else:
            cache.flush(named.name)
        states.append(_cache_state(cache, flushed))
        indexed = cache.named_cache("0_0-a")
        assert set(indexed.entries) <= indexed.range_index.keys  # every key cached is in the index
    return states


@needs_c
@pytest.mark.parametrize("seed", range(4))
def test_c_and_python_named_cache_operations_leave_the_same_caches(seed, monkeypatch):
    """lookup / put_clean / put_dirty / maybe_evict in C against their Python definitions: the
    same entries (values, old values, flags, timestamps, sizes, LRU and write order), sizes,
    stats and flushes after every step."""
    monkeypatch.setattr(thread_cache, "maybe_evict", thread_cache.maybe_evict_py)  # the Python run's evictions
    python = _run_named_ops(seed, (thread_cache.lookup_py, thread_cache.put_clean_py, thread_cache.put_dirty_py))
    ours = _run_named_ops(seed, (_cache.lookup, _cache.put_clean, _cache.put_dirty))
    assert ours == python
    final = python[-1]
    assert final[1]["0_0-a"][4] > 0 and any(len(entries) > 1 for _, entries in final[2])  # evictions, whole flushes


@needs_c
def test_c_named_cache_writes_decline_what_write_entry_declines():
    cache = ThreadCache(10_000)
    named = cache.named_cache("0_0-s")
    named.listener = lambda entries: None
    assert _cache.put_clean(named, "k", b"v", 1) is None and _cache.put_dirty(named, b"k", bytearray(b"v"), 1, None) is None
    assert not named.entries and cache.size_bytes == 0
    assert _cache.put_dirty(named, b"k", b"v", 1, None) is True and cache.size_bytes == 1 + 1 + ENTRY_OVERHEAD


@needs_c
def test_the_caches_use_the_c_named_cache_operations_when_built():
    assert (thread_cache.lookup, thread_cache.put_clean, thread_cache.put_dirty, thread_cache.maybe_evict) == (
        _cache.lookup, _cache.put_clean, _cache.put_dirty, _cache.maybe_evict)
