"""CachingWindowStore.update_many for a windowed count (a fn with `int64_increment` and
`timestamped`): its cached windows' hot case is done by the KV store's C loop (state.cache._cache
increment_run) when it is built. Every test runs with that loop and with the Python loop alone,
on real window stores under change logging, and the two must leave the same cache (values, old
values, timestamps, sizes, record contexts, LRU and write order, counters), forward the same
flushes in the same stream time, log the same changelog records and store the same windows."""

import random

import pytest

from state.cache import CachingWindowStore, ThreadCache
from state.cache import window as caching_window
from state.errors import InvalidStoreArgumentError
from state.logging_store import ChangeLoggingWindowStore
from state.timestamped import TIMESTAMPED_INT64
from state.window import InMemoryWindowStore, RocksDBWindowStore, window_changelog_key

from recording_context import RecordingContext

try:
    from state.cache import _cache
except ImportError:  # pragma: no cover - the accelerator is optional
    _cache = None

SIZE = 1000
IMPLEMENTATIONS = [pytest.param(False, id="python")]
if _cache is not None:
    IMPLEMENTATIONS.append(pytest.param(True, id="c"))


class Clock:
    """The stream time's owner, as the task engine is."""

    stream_time = -1

    def advance_stream_time(self, t):
        if t > self.stream_time:
            self.stream_time = t


class Context:
    """Where the cache reads a write's record context (the task's processor context)."""

    metadata = None
    headers = ()


def make_count(seen):
    """A windowed count over timestamped int64 bytes, as WindowUpdates.counting makes it;
    `seen` records each call (the Python loop's hits and every miss)."""
    def count(old, t):
        seen.append((old, t))
        if old is None:
            return TIMESTAMPED_INT64.pack(t, 1), t
        old_t, old_count = TIMESTAMPED_INT64.unpack(old)
        new_t = max(old_t, t)
        return TIMESTAMPED_INT64.pack(new_t, old_count + 1), new_t
    count.int64_increment = True
    count.timestamped = True
    return count


def make(kind, path, max_bytes, use_c):
    cls = RocksDBWindowStore if kind == "rocksdb" else InMemoryWindowStore
    inner = cls("w", retention_ms=20 * SIZE, window_size_ms=SIZE, segment_interval_ms=5 * SIZE)
    ctx = RecordingContext(path)
    store = CachingWindowStore(ChangeLoggingWindowStore(inner), ThreadCache(max_bytes))
    if not use_c:
        store._increment_run = None
    store.init(ctx)
    context = Context()
    store.set_record_context(context)
    clock = Clock()
    flushed = []
    store.set_flush_listener(lambda k, new, old, ts: flushed.append(
        (k.key, k.window.start, new, old, ts, context.metadata, clock.stream_time)))
    return store, inner, ctx, clock, flushed


def snapshot(store):
    named = store._named
    return ([(key, e.value, e.dirty, e.timestamp, e.size, e.old, e.metadata, e.headers)
             for key, e in named.entries.items()],
            list(named.dirty), named.hits, named.misses, named.evictions, named.size_bytes,
            store._cache.size_bytes)


def run_both(tmp_path, kind, max_bytes, steps):
    """`steps` on a store per implementation: ("update", keys, starts, timestamps, metadatas or
    None) or ("flush",); the results of both, which must be equal."""
    results = []
    for use_c in [p.values[0] for p in IMPLEMENTATIONS]:
        store, inner, ctx, clock, flushed = make(kind, tmp_path / f"{'c' if use_c else 'py'}" / "0_1",
                                                 max_bytes, use_c)
        seen = []
        count = make_count(seen)
        trace = []
        for step in steps:
            if step[0] == "update":
                store.update_many(step[1], step[2], count, step[3], clock, step[4])
                trace.append(clock.stream_time)
            else:
                store.flush()
            trace.append(snapshot(store))
        store.flush()
        stored = [(w.key, w.window.start, v) for w, v in store.wrapped.wrapped.all()]
        results.append((trace, flushed, ctx.logged_changes, stored, [s for s in seen if s[0] is None]))
        store.close()
    for other in results[1:]:
        assert other == results[0]
    return results[0]


@pytest.mark.parametrize("kind", ["rocksdb", "memory"])
def test_hot_windows_counted_as_the_python_loop_counts(tmp_path, kind):
    metas = [("in", 0, n) for n in range(8)]
    steps = [("update", [b"a", b"b", b"a", b"a", b"b", b"c", b"a", b"b"],
              [0, 0, 0, 1000, 0, 0, 0, 1000], [5, 7, 3, 1005, 9, 2, 8, 1001], metas),
             ("flush",),
             # clean cached windows dirtied again: their old value is the value they held
             ("update", [b"a", b"b"], [0, 0], [9, 6], None),
             ("update", [b"a", b"c", b"a"], [0, 0, 2000], [11, 4, 2003], [("in", 0, 9), ("in", 0, 10), ("in", 0, 11)])]
    trace, flushed, logged, stored, _ = run_both(tmp_path, kind, 1_000_000, steps)
    # by hand: each window's count and the newest timestamp it saw
    assert sorted(stored) == [(b"a", 0, TIMESTAMPED_INT64.pack(11, 5)), (b"a", 1000, TIMESTAMPED_INT64.pack(1005, 1)),
                              (b"a", 2000, TIMESTAMPED_INT64.pack(2003, 1)), (b"b", 0, TIMESTAMPED_INT64.pack(9, 3)),
                              (b"b", 1000, TIMESTAMPED_INT64.pack(1001, 1)), (b"c", 0, TIMESTAMPED_INT64.pack(4, 2))]
    assert trace[0] == 1005 and trace[-2] == 2003  # the stream time after the first and the last run
    # the final flush, in the order of the latest writes (b and a by the third run, a again, c and
    # a's third window by the fourth): a window's old value is what the first flush wrote, its
    # record context its latest write's (the third run's without metadatas: the context's, None)
    final = [(k, s, TIMESTAMPED_INT64.unpack(new), TIMESTAMPED_INT64.unpack(old) if old else None, meta)
             for k, s, new, old, _, meta, _ in flushed[5:]]
    assert final == [(b"b", 0, (9, 3), (9, 2), None), (b"a", 0, (11, 5), (8, 3), ("in", 0, 9)),
                     (b"c", 0, (4, 2), (2, 1), ("in", 0, 10)), (b"a", 2000, (2003, 1), None, ("in", 0, 11))]
    assert len(logged) == len(flushed) == 9


def test_the_first_flush_in_write_order_with_each_writes_record_context(tmp_path):
    metas = [("in", 0, n) for n in range(5)]
    _, flushed, logged, _, _ = run_both(tmp_path, "memory", 1_000_000, [
        ("update", [b"a", b"b", b"a", b"c", b"b"], [0, 0, 0, 0, 0], [5, 7, 3, 2, 1], metas)])
    assert [(k, TIMESTAMPED_INT64.unpack(new), old, ts, meta) for k, _, new, old, ts, meta, _ in flushed] == [
        (b"a", (5, 2), None, 5, ("in", 0, 2)), (b"c", (2, 1), None, 2, ("in", 0, 3)),
        (b"b", (7, 2), None, 7, ("in", 0, 4))]
    assert [(key, value, ts) for _, key, value, ts in logged] == [
        (window_changelog_key(b"a", 0, 0), TIMESTAMPED_INT64.pack(5, 2), 5),
        (window_changelog_key(b"c", 0, 0), TIMESTAMPED_INT64.pack(2, 1), 2),
        (window_changelog_key(b"b", 0, 0), TIMESTAMPED_INT64.pack(7, 2), 7)]


@pytest.mark.parametrize("kind", ["rocksdb", "memory"])
@pytest.mark.parametrize("max_bytes", [0, 300, 2_000])
@pytest.mark.parametrize("seed", range(6))
def test_random_runs_with_evictions_and_flushes(tmp_path, kind, max_bytes, seed):
    rng = random.Random(seed)
    keys = [b"k%d" % n for n in range(12)]
    steps, t, offset = [], 0, 0
    for _ in range(30):
        if rng.random() < 0.15:
            steps.append(("flush",))
            continue
        n = rng.randint(1, 40)
        run_keys, starts, times = [], [], []
        for _ in range(n):
            t += rng.randint(0, 300)
            ts = max(0, t - rng.randint(0, 2000)) if rng.random() < 0.2 else t
            run_keys.append(rng.choice(keys))
            starts.append(ts // SIZE * SIZE)
            times.append(ts)
        metas = None
        if rng.random() < 0.5:
            metas = [("in", 0, offset + i) for i in range(n)]
        offset += n
        steps.append(("update", run_keys, starts, times, metas))
    trace, flushed, _, stored, misses = run_both(tmp_path, kind, max_bytes, steps)
    # every record counted once in its window (expired windows below aside: the store's to drop)
    assert sum(TIMESTAMPED_INT64.unpack(v)[1] for _, _, v in stored) <= sum(len(s[1]) for s in steps
                                                                             if s[0] == "update")
    assert flushed and misses


def test_the_python_loop_raises_at_the_record_the_run_cannot_take(tmp_path):
    for use_c in [p.values[0] for p in IMPLEMENTATIONS]:
        store, _, _, clock, _ = make("memory", tmp_path / str(use_c) / "0_1", 1_000_000, use_c)
        count = make_count([])
        store.update_many([b"a"], [0], count, [1], clock)
        with pytest.raises(InvalidStoreArgumentError, match="must be bytes"):
            store.update_many([b"a", "b", b"a"], [0, 0, 0], count, [2, 3, 4], clock)
        assert TIMESTAMPED_INT64.unpack(store.fetch(b"a", 0)) == (2, 2)  # the record before it counted
        with pytest.raises(InvalidStoreArgumentError, match="must be a non-negative int"):
            store.update_many([b"a", b"a"], [0, -1000], count, [5, 6], clock)
        assert TIMESTAMPED_INT64.unpack(store.fetch(b"a", 0)) == (5, 3)
        # the failing record raised the stream time before it failed, as Kafka's task takes a
        # record's time before processing it
        assert clock.stream_time == 6
        store.close()


def test_a_count_at_int64_max_is_left_to_fn(tmp_path):
    results = []
    for use_c in [p.values[0] for p in IMPLEMENTATIONS]:
        store, _, _, clock, _ = make("memory", tmp_path / str(use_c) / "0_1", 1_000_000, use_c)
        seen = []
        store.put(b"a", TIMESTAMPED_INT64.pack(1, 2**63 - 1), 0, 1)  # cached at the largest count
        with pytest.raises(Exception, match="int too large"):  # struct's: the count cannot grow past int64
            store.update_many([b"b", b"a"], [0, 0], make_count(seen), [2, 3], clock)
        assert seen == [(None, 2), (TIMESTAMPED_INT64.pack(1, 2**63 - 1), 3)]  # fn saw the cached maximum
        results.append(snapshot(store))
        store.close()
    assert results[-1] == results[0]


@pytest.mark.skipif(_cache is None, reason="state.cache._cache is not built")
def test_a_cached_windowed_count_takes_the_c_loop_and_emits_what_the_python_loop_emits(monkeypatch):
    from streams import StreamsBuilder, serdes
    from streams.dsl import TimeWindows
    from streams.testing import TopologyTestDriver

    def counts(run):
        monkeypatch.setattr(caching_window.CachingWindowStore, "_increment_run",
                            None if run is None else staticmethod(run))
        b = StreamsBuilder()
        (b.stream("in", key_serde=serdes.STRING, value_serde=serdes.STRING).group_by_key()
            .windowed_by(TimeWindows.of_size_and_grace(10, 5)).count(store="counts")  # cached (the default)
            .to_stream().map(lambda w, v: (f"{w.key}@{w.window.start}", v))
            .to("out", key_serde=serdes.STRING, value_serde=serdes.INT64))
        with TopologyTestDriver(b.build(), {"application.id": "win"}) as d:
            inp = d.create_input_topic("in", serdes.STRING, serdes.STRING)
            for key, t in (("k", 1), ("k", 5), ("j", 6), ("k", 12), ("k", 3), ("j", 8), ("k", 14), ("k", 30)):
                inp.pipe_input(key, "v", timestamp=t)
            out = d.create_output_topic("out", serdes.STRING, serdes.INT64).read_records_to_list()
            return [(r.key, r.value, r.timestamp) for r in out]

    taken = []

    def spy(*args):
        result = _cache.increment_run(*args)
        taken.append(result[1])  # the hits it counted
        return result
    with_c = counts(spy)
    assert sum(taken) == 4  # k@0 twice more, j@0 and k@10 once more: the cached windows' hits
    # by hand: the driver commits after each record (Kafka's), so each update is flushed and
    # emitted, stamped with the newest record of its window (t=3 is within [0,10)'s grace)
    assert with_c == [("k@0", 1, 1), ("k@0", 2, 5), ("j@0", 1, 6), ("k@10", 1, 12), ("k@0", 3, 5),
                      ("j@0", 2, 8), ("k@10", 2, 14), ("k@30", 1, 30)]
    assert counts(None) == with_c
