"""What a cache entry costs, as Kafka counts it (NamedCache.LRUNode.size() + LRUCacheEntry's size):
key + value + 45 + the write's record context (topic chars, header key chars and value bytes),
plus 8 for a window or session store's cache key (the segment id Kafka's keys start with). The
figures below are worked out by hand from that rule; the eviction tests show where a budget
cut the entries off under it."""

import pytest
from confluent_kafka import Message

from state.cache import ENTRY_OVERHEAD, CachingKeyValueStore, CachingSessionStore, CachingWindowStore, ThreadCache
from state.cache.thread_cache import context_size
from state.memory_kv import InMemoryKeyValueStore
from state.session import InMemorySessionStore, session_changelog_key
from state.window import InMemoryWindowStore, window_changelog_key

from recording_context import RecordingContext

MIN = 60_000


class _Context:
    """A task's processor context as a caching store reads a write's record context from it."""

    def __init__(self, metadata=None, headers=()):
        self.metadata, self.headers = metadata, headers


def _message(topic, headers=None):
    """A consumed message (a keyed run's record context)."""
    return Message(topic, 0, 0, b"k", b"v", headers, None, (1, 1), -1.0, -1)


def test_kafkas_fixed_cost_is_45_bytes():
    # LRUNode: key + 8 + 8 + 8; LRUCacheEntry: value + 1 (dirty) + timestamp 8 + offset 8 + partition 4
    assert ENTRY_OVERHEAD == 8 + 8 + 8 + 1 + 8 + 8 + 4


@pytest.mark.parametrize("metadata, headers, size", [
    (None, (), 0),  # a punctuation's write, a read-through: no topic
    (("orders", 0, 7), (), 6),
    (("orders", 0, 7), None, 6),
    (("t", 1, 2), [("key", b"12345")], 1 + 3 + 5),
    (("t", 1, 2), (("k", None), ("k", b"")), 1 + 1 + 1),  # a None value counts nothing
    (("t", 1, 2), (("\u00e9", b"x"),), 1 + 1 + 1),  # one UTF-16 unit
    (("t", 1, 2), (("\U0001f600", b"x"),), 1 + 2 + 1),  # two: a Java char array holds a surrogate pair
    (_message("clicks"), (), 6),  # a consumed message: its own topic and headers
    (_message("clicks", [("h", b"ab")]), (), 6 + 1 + 2),
])
def test_context_size(metadata, headers, size):
    assert context_size(metadata, headers) == size


def _kv(tmp_path, max_bytes, context):
    inner = InMemoryKeyValueStore("kv")
    store = CachingKeyValueStore(inner, ThreadCache(max_bytes))
    store.init(RecordingContext(tmp_path / "0_0"))
    store.set_record_context(context)
    flushed = []
    store.set_flush_listener(lambda key, new, old, ts: flushed.append((key, new)))
    return store, inner, flushed


def test_a_write_costs_its_record_context_and_a_read_through_none(tmp_path):
    context = _Context(("orders", 0, 1), [("trace", b"abcd")])
    store, inner, _ = _kv(tmp_path, 1_000_000, context)
    store.put(b"k1", b"value", 5)
    assert store._named.entries[b"k1"].size == 2 + 5 + 45 + 6 + 5 + 4
    inner.put(b"k2", b"vv", 1)
    assert store.get(b"k2") == b"vv"  # read through: kept clean, as LRUCacheEntry(value) in Kafka
    assert store._named.entries[b"k2"].size == 2 + 2 + 45
    context.metadata, context.headers = ("o", 0, 2), ()
    store.put(b"k2", b"vvv", 6)  # rewritten in another context: the size follows
    assert store._named.entries[b"k2"].size == 2 + 3 + 45 + 1
    assert store.cache.size_bytes == (2 + 5 + 45 + 6 + 5 + 4) + (2 + 3 + 45 + 1)
    store.close()


def test_the_budget_holds_as_many_entries_as_kafkas_sizes_allow(tmp_path):
    """Entries of 1 + 1 + 45 + 1 (topic "t") = 48 bytes: 96 hold two, a third evicts the eldest
    (under a fixed 64-byte overhead not even two would fit)."""
    store, _, flushed = _kv(tmp_path, 96, _Context(("t", 0, 0)))
    store.put(b"a", b"1", 1)
    store.put(b"b", b"2", 2)
    assert flushed == [] and store.cache.size_bytes == 96
    store.put(b"c", b"3", 3)
    # the eldest evicted, so every dirty entry flushed (Kafka's NamedCache.evict), the new one too
    assert flushed == [(b"a", b"1"), (b"b", b"2"), (b"c", b"3")]
    assert list(store._named.entries) == [b"b", b"c"]
    store.close()


def test_a_longer_topic_makes_the_same_write_overflow(tmp_path):
    store, _, flushed = _kv(tmp_path, 96, _Context(("tt", 0, 0)))  # 49 bytes each: 98 > 96
    store.put(b"a", b"1", 1)
    store.put(b"b", b"2", 2)
    assert flushed == [(b"a", b"1"), (b"b", b"2")] and list(store._named.entries) == [b"b"]
    store.close()


def test_window_and_session_entries_count_the_segment_id(tmp_path):
    context = _Context(("in", 0, 3))
    window = CachingWindowStore(InMemoryWindowStore("w", retention_ms=2 * MIN, window_size_ms=1000,
                                                    segment_interval_ms=MIN), ThreadCache(1_000_000))
    window.init(RecordingContext(tmp_path / "w" / "0_0"))
    window.set_record_context(context)
    window.put(b"k", b"v", 1000, timestamp=1500)
    cache_key = window_changelog_key(b"k", 1000, 0)
    assert len(cache_key) == 1 + 8 + 4
    assert window._named.entries[cache_key].size == 8 + len(cache_key) + 1 + 45 + 2
    window.close()
    session = CachingSessionStore(InMemorySessionStore("s", retention_ms=2 * MIN, segment_interval_ms=MIN),
                                  ThreadCache(1_000_000))
    session.init(RecordingContext(tmp_path / "s" / "0_0"))
    session.set_record_context(context)
    session.put(b"k", 10, 20, b"v")
    cache_key = session_changelog_key(b"k", 10, 20)
    assert len(cache_key) == 1 + 16
    assert session._named.entries[cache_key].size == 8 + len(cache_key) + 1 + 45 + 2
    session.close()


def test_a_count_run_keeps_sizes_with_its_messages_topic(tmp_path):
    """update_many with a keyed run's messages: each write costs the messages' topic; a count
    first read through (no context) grows by it when written, then keeps its size."""
    store, inner, _ = _kv(tmp_path, 1_000_000, _Context())
    inner.put(b"g", (5).to_bytes(8, "big"), 0)

    def add_one(old):
        return (int.from_bytes(old, "big", signed=True) + 1).to_bytes(8, "big", signed=True)
    add_one.int64_increment = True
    messages = [_message("groups-repartition")] * 3
    store.update_many([b"g", b"g", b"g"], add_one, [1, 2, 3], None, messages)
    entry = store._named.entries[b"g"]
    assert int.from_bytes(entry.value, "big") == 8
    assert entry.size == 1 + 8 + 45 + len("groups-repartition")
    assert store.cache.size_bytes == entry.size
    store.close()


# ------------------------------------------------------------- the thread's total, as Kafka keeps it
def _two_caches(max_bytes):
    """Caches a and b of one ThreadCache; a's flushes write each flushed key into b (as a
    downstream store written by what a forwards), b's flushes are recorded."""
    cache = ThreadCache(max_bytes)
    b_flushed = []
    cache.add_dirty_entry_flush_listener("0_0-b", lambda entries: b_flushed.append([e[0] for e in entries]))

    def a_listener(entries):
        for entry in entries:
            cache.put("0_0-b", b"c" + entry[0], b"1", dirty=True, timestamp=1)
    cache.add_dirty_entry_flush_listener("0_0-a", a_listener)
    return cache, b_flushed


def test_an_evicted_entry_counts_until_its_flush_is_over():
    """Kafka's ThreadCache adds a named cache's size change after NamedCache.evict() returns:
    while the evicted dirty entry's flush forwards downstream, the thread's total still counts
    it. a's entries cost 1 + 1 + 45 = 47 bytes, b's 48, the budget 120."""
    cache, b_flushed = _two_caches(120)
    cache.put("0_0-b", b"b1", b"1", dirty=False, timestamp=0)  # b: one clean entry (48)
    cache.put("0_0-a", b"a", b"1", dirty=True, timestamp=1)  # 95
    cache.put("0_0-a", b"x", b"1", dirty=True, timestamp=2)  # 142 > 120: a evicts "a", flushing a and x
    # the flush writes ca into b while a's "a" still counts (190): b evicts b1, then ca (its
    # flush); then cx (142): b evicts it alone. Were "a" no longer counted (95 + 48 = 143), b
    # would evict b1 only and keep ca, and cx would flush both at once: [[b"ca", b"cx"]].
    assert b_flushed == [[b"ca"], [b"cx"]]
    assert list(cache._caches["0_0-b"].entries) == []
    assert list(cache._caches["0_0-a"].entries) == [b"x"]
    assert cache.size_bytes == 47


def test_a_write_into_the_flushing_cache_counts_twice_as_in_kafka():
    """What a flush's listener writes into the cache being flushed is added to the total by its
    own put and again by the flush's size change (Kafka's sizeInBytes += after - before)."""
    cache = ThreadCache(1_000_000)
    named = cache.named_cache("0_0-a")

    def listener(entries):
        if entries[0][0] == b"a":
            cache.put("0_0-a", b"z", b"1", dirty=True, timestamp=2)
    cache.add_dirty_entry_flush_listener("0_0-a", listener)
    cache.put("0_0-a", b"a", b"1", dirty=True, timestamp=1)
    cache.flush("0_0-a")
    assert named.size_bytes == 47 + 47
    assert cache.size_bytes == 47 + 47 + 47  # z counted twice


@pytest.mark.parametrize("c_loop", [True, False])
def test_a_count_over_the_budget_evicts_even_at_the_same_size(tmp_path, c_loop):
    """Kafka calls maybeEvict after every put. With its total over the budget (a write into the
    cache being flushed counted twice, above), rewriting a cached count at the same size evicts:
    the C loop leaves such a write to the Python loop. Entries: 1 + 8 + 45 = 54 bytes."""
    inner = InMemoryKeyValueStore("kv")
    store = CachingKeyValueStore(inner, ThreadCache(150))
    store.init(RecordingContext(tmp_path / "0_0"))
    if not c_loop:
        store._increment_run = None
    flushed = []

    def listener(key, new, old, timestamp):
        flushed.append(key)
        if key == b"a" and len(flushed) == 1:
            store.put(b"z", (0).to_bytes(8, "big"), timestamp)  # into the cache being flushed
    store.set_flush_listener(listener)

    def add_one(old):
        return ((int.from_bytes(old, "big") if old else 0) + 1).to_bytes(8, "big")
    add_one.int64_increment = True
    store.update_many([b"a"], add_one, [1])
    store.flush()
    assert store.cache.size_bytes == 54 + 54 + 54 > 150  # z counted twice: 108 held
    store.update_many([b"a"], add_one, [2])  # a hit at the same size, over the budget
    assert flushed == [b"a", b"z", b"a"]  # z, the eldest, evicted: every dirty entry flushed
    assert list(store._named.entries) == [b"a"] and store._named.size_bytes == 54
    assert store.cache.size_bytes == 108  # the double count stays, as in Kafka
    store.close()
