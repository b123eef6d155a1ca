"""Timestamps and close times of windowed and grouped-table aggregations checked against Kafka's
code (KIP-258 stamps, KStreamSessionWindowAggregate's close time with the gap (KAFKA-12718),
SessionCacheFlushListener, TimestampedCacheFlushListener, KTableReduce, sliding windows' emit
final), on the TopologyTestDriver; every expected output is derived by hand in its comments.
Also: a windowed count done at the bytes level (per record and as a run of keys) gives what the
typed rule gives."""

import pytest
from confluent_kafka import Message

from state.cache import ThreadCache
from streams import StreamsBuilder, serdes
from streams.dsl import (BufferConfig, EmitStrategy, Materialized, SessionWindows, SlidingWindows, Suppressed,
                         TimeWindows)
from streams.dsl.materialized import window_store_builder
from streams.dsl.ops.aggregate import count_adder, count_initializer
from streams.dsl.window_aggregate import TimeWindowAggregateLogic
from streams.dsl.windows import LateRecordReporter
from streams.metrics import MetricsRegistry, task_dropped_records_sensor
from streams.testing import TopologyTestDriver

from test_dsl_windowed_ops import flat, metric, out_records  # the module's helpers, one copy

S, I64 = serdes.STRING, serdes.INT64
CONFIG = {"application.id": "rules", "default.key.serde": "string", "default.value.serde": "string"}


def pipe_each(b, records, config=CONFIG):
    """Pipe (key, value, timestamp) records one at a time into `b`'s topology: the output
    records after each, and the driver's dropped-records total at the end."""
    with TopologyTestDriver(b.build(), config) as d:
        inp = d.create_input_topic("in", S, S)
        after_each = []
        for key, value, t in records:
            inp.pipe_input(key, value, timestamp=t)
            after_each.append(out_records(d))
        return after_each, metric(d, "dropped-records-total")


def session_outputs(windows, records, caching=False, suppress=False):
    """The output records after each (key, timestamp) record of a session count (optionally
    suppressed), and the driver's dropped-records total at the end."""
    b = StreamsBuilder()
    mat = Materialized.as_("sessions")
    table = (b.stream("in", key_serde=S, value_serde=S).group_by_key().windowed_by(windows)
             .count(store=mat if caching else mat.with_caching_disabled()))
    if suppress:
        table = table.suppress(Suppressed.until_window_closes(BufferConfig.unbounded()))
    table.to_stream().map(flat).to("out", key_serde=S, value_serde=I64)
    return pipe_each(b, [(key, "v", t) for key, t in records])


def test_a_session_closes_a_gap_after_its_end():
    outputs, dropped = session_outputs(SessionWindows.of_inactivity_gap_with_no_grace(5),
                                       [("a", 0), ("b", 4), ("a", 1), ("b", 12), ("a", 2)])
    # a@1: stream time 4, close time 4 - grace 0 - gap 5 = -1; the merged [0,1] ends at 1,
    # not before -1: accepted (a close time without the gap, 4, would drop it). a@2: stream
    # time 12, close time 7; merged with [0,1] it would end at 2 < 7: dropped
    assert sum(outputs, []) == [("a@0/0", 1, 0), ("b@4/4", 1, 4), ("a@0/0", None, 0), ("a@0/1", 2, 1),
                                ("b@12/12", 1, 12)]
    assert dropped == 1


def test_suppressed_sessions_wait_for_gap_plus_grace():
    outputs, _ = session_outputs(SessionWindows.of_inactivity_gap_and_grace(5, 2), [("a", 0), ("b", 6), ("b", 7)],
                                 suppress=True)
    # [0,0] is buffered at its end 0 and due once stream time - (gap 5 + grace 2) >= 0: not at 6
    # (the grace alone would release it there), at 7
    assert outputs == [[], [], [("a@0/0", 1, 0)]]


def test_cached_sessions_are_forwarded_at_their_end():
    outputs, _ = session_outputs(SessionWindows.of_inactivity_gap_and_grace(5, 100), [("a", 0), ("a", 3)],
                                 caching=True)
    # the driver flushes after each record; a flushed session goes downstream stamped with its
    # end (Kafka's SessionCacheFlushListener): the merged-away [0,0]'s tombstone at 0, although
    # it was removed while processing the record at 3
    assert outputs == [[("a@0/0", 1, 0)], [("a@0/0", None, 0), ("a@0/3", 2, 3)]]


@pytest.mark.parametrize("windows", ["session", "tumbling"])
@pytest.mark.parametrize("emit", ["update", "close"])
def test_which_windowed_forwards_keep_the_records_headers(windows, emit):
    """Uncached, Kafka's KStreamSessionWindowAggregate forwards an update (a session and the
    tombstone of one merged away) as `new Record(key, change, end)`: no headers. Its final
    results on window close, and KStreamWindowAggregate's updates and final results, are the
    record being processed with a new key and value: its headers. Hand-derived: a gap or size
    of 10 ms, no grace; records n=0 at 0, n=1 at 5 (merged with [0,0] / the same window), n=2 at
    30 (closes the first session or window)."""
    spec = (SessionWindows.of_inactivity_gap_with_no_grace(10) if windows == "session"
            else TimeWindows.of_size_with_no_grace(10))
    b = StreamsBuilder()
    w = b.stream("in", key_serde=S, value_serde=S).group_by_key().windowed_by(spec)
    if emit == "close":
        w = w.emit_strategy(EmitStrategy.on_window_close())
    # a retention past the final results' scan (Kafka's from observed stream time - retention + 1)
    w.count(store=Materialized.as_("c").with_caching_disabled().with_retention(1_000)).to_stream().to(
        "out", key_serde=serdes.session_windowed(S) if windows == "session" else serdes.time_windowed(S, 10),
        value_serde=I64)
    with TopologyTestDriver(b.build(), {**CONFIG, "__emit.interval.ms.kstreams.windowed.aggregation__": 0}) as d:
        inp = d.create_input_topic("in", S, S)
        for n, t in enumerate((0, 5, 30)):
            inp.pipe_input("k", "v", timestamp=t, headers=(("n", str(n).encode()),))
        out = d.create_output_topic("out", serdes.session_windowed(S) if windows == "session"
                                    else serdes.time_windowed(S, 10), I64).read_records_to_list()
    got = [(r.key.window.start, r.value, tuple(v.decode() for _, v in r.headers)) for r in out]
    if emit == "close":  # one final result, released by record 2
        assert got == [(0, 2, ("2",))]
    elif windows == "session":  # [0,0] = 1; its tombstone, [0,5] = 2; [30,30] = 1: none with headers
        assert got == [(0, 1, ()), (0, None, ()), (0, 2, ()), (30, 1, ())]
    else:  # [0,10) = 1, = 2, then [30,40) = 1, each with its record's headers
        assert got == [(0, 1, ("0",)), (0, 2, ("1",)), (30, 1, ("2",))]


@pytest.mark.parametrize("caching", [False, True])
def test_grouped_table_counts_are_stamped_with_the_newest_record(caching):
    b = StreamsBuilder()
    mat = Materialized.as_("counts")
    (b.table("users", key_serde=S, value_serde=S, store=Materialized.as_("users").with_caching_disabled())
        .group_by(lambda user, group: (group, user), key_serde=S, value_serde=S)
        .count(store=mat if caching else mat.with_caching_disabled())
        .to_stream().to("out", key_serde=S, value_serde=I64))
    with TopologyTestDriver(b.build(), CONFIG) as d:
        inp = d.create_input_topic("users", S, S)
        for user, group, t in (("u1", "g", 10), ("u2", "g", 5), ("u1", "h", 7)):
            inp.pipe_input(user, group, timestamp=t)
        # u2@5 adds to g (ts 10): max(5, 10) = 10. u1@7 moves g -> h: g's subtraction at
        # max(7, 10) = 10, h is new: 7
        assert out_records(d) == [("g", 1, 10), ("g", 2, 10), ("g", 1, 10), ("h", 1, 7)]


@pytest.mark.parametrize("caching", [False, True], ids=["uncached", "cached"])
def test_a_new_keys_aggregate_forwards_the_initializers_value_as_old(caching):
    # Kafka's KStreamAggregate: a new key's aggregate starts from initializer() and forwards it
    # as the old value. Regrouped by count: a@1's Change(1, 0) subtracts from group "0", which
    # has no aggregate (KTableAggregate: nothing to subtract, nothing to add: a tombstone), and
    # adds to "1"; a@2's Change(2, 1) moves a from "1" (now 0) to "2". Through a cache the first
    # update's old value is what the store held: none, so no "0"
    b = StreamsBuilder()
    mat = Materialized.as_("per-key")
    (b.stream("in", key_serde=S, value_serde=S).group_by_key()
        .count(store=mat if caching else mat.with_caching_disabled())
        .group_by(lambda key, n: (str(n), key), key_serde=S, value_serde=S)
        .count(store=Materialized.as_("per-count").with_caching_disabled())
        .to_stream().to("out", key_serde=S, value_serde=I64))
    with TopologyTestDriver(b.build(), CONFIG) as d:
        inp = d.create_input_topic("in", S, S)
        inp.pipe_input("a", "x", timestamp=1)
        first = out_records(d)
        inp.pipe_input("a", "x", timestamp=2)
        assert first == ([] if caching else [("0", None, 1)]) + [("1", 1, 1)]
        assert out_records(d) == [("1", 0, 2), ("2", 1, 2)]


@pytest.mark.parametrize("caching, stamp", [(False, 10), (True, 5)])
def test_a_reduced_group_deleted_by_the_subtractor(caching, stamp):
    b = StreamsBuilder()
    mat = Materialized.as_("joined")
    (b.table("users", key_serde=S, value_serde=S, store=Materialized.as_("users").with_caching_disabled())
        .group_by(lambda user, name: ("all", name), key_serde=S, value_serde=S)
        .reduce(lambda agg, v: agg + v, lambda agg, v: agg.replace(v, "") or None,
                store=mat if caching else mat.with_caching_disabled())
        .to_stream().to("out", key_serde=S, value_serde=S))
    with TopologyTestDriver(b.build(), CONFIG) as d:
        inp = d.create_input_topic("users", S, S)
        inp.pipe_input("u1", "x", timestamp=10)
        inp.pipe_input("u1", None, timestamp=5)
        # the tombstone of u1 subtracts "x": the aggregate becomes None and the group is deleted.
        # Kafka's KTableReduce forwards it at max(5, 10) = 10; through a cache, its
        # TimestampedCacheFlushListener stamps a deleted value with the record's 5
        assert out_records(d, S) == [("all", "x", 10), ("all", None, stamp)]


def test_sliding_windows_emit_final_results_on_window_close():
    b = StreamsBuilder()
    (b.stream("in", key_serde=S, value_serde=S).group_by_key()
        .windowed_by(SlidingWindows.of_time_difference_with_no_grace(5))
        .emit_strategy(EmitStrategy.on_window_close())
        .count()
        .to_stream().map(flat).to("out", key_serde=S, value_serde=I64))
    config = {**CONFIG, "__emit.interval.ms.kstreams.windowed.aggregation__": 0}
    with TopologyTestDriver(b.build(), config) as d:
        inp = d.create_input_topic("in", S, S)
        inp.pipe_input("a", "v", timestamp=10)  # its left window [5,10]; nothing closed
        assert out_records(d) == []
        # close time 17: windows whose end (start + 5) < 17, i.e. starting at 11 at the latest,
        # are final (Kafka's emit range [0, 17 - 5 - 1]): [5,10], with its timestamp 10
        inp.pipe_input("a", "v", timestamp=17)
        assert out_records(d) == [("a@5/10", 1, 10)]
        # close time 30: from the last close time 17 - 5 = 12 to 24, scanned after the put of
        # 30's left window [25,30]: the store (retention 2 * 5) keeps starts after 25 - 10 only,
        # so [12,17] is never emitted (Kafka)
        inp.pipe_input("a", "v", timestamp=30)
        assert out_records(d) == []
        # close time 31: from 30 - 5 = 25 to 25: [25,30]
        inp.pipe_input("a", "v", timestamp=31)
        assert out_records(d) == [("a@25/30", 1, 30)]


def on_close_outputs(windows, records, caching, in_memory=False, retention_ms=None):
    """The output after each input record of a count emitting final results on window close."""
    b = StreamsBuilder()
    mat = Materialized.as_("closing")
    if in_memory:
        mat = mat.with_in_memory_store()
    if retention_ms is not None:
        mat = mat.with_retention(retention_ms)
    (b.stream("in", key_serde=S, value_serde=S).group_by_key().windowed_by(windows)
        .emit_strategy(EmitStrategy.on_window_close())
        .count(store=mat if caching else mat.with_caching_disabled())
        .to_stream().map(flat).to("out", key_serde=S, value_serde=I64))
    config = {**CONFIG, "__emit.interval.ms.kstreams.windowed.aggregation__": 0}
    return pipe_each(b, [(key, "v", t) for key, t in records], config)[0]


@pytest.mark.parametrize("caching", [False, True], ids=["uncached", "cached"])
def test_final_results_are_scanned_after_the_put_from_the_stores_retention(caching):
    # tumbling 100, no grace: retention 100. c@1423 puts [1400,1500); c@1829 puts [1800,1900),
    # then scans for windows starting in [0 + 1, 1829 - 100] (the last emission's close time
    # was 1423: nothing had closed). Uncached, the store has seen start 1800 and returns starts
    # from 1800 - 100 on: [1400,1500) is lost. Cached, 1829's put waits in the cache and the store
    # below has seen start 1400 only: [1400,1500) is emitted (Kafka: the cache is kept for time
    # windows, WindowStoreMaterializer)
    outputs = on_close_outputs(TimeWindows.of_size_with_no_grace(100), [("c", 1423), ("c", 1829)], caching)
    assert outputs == [[], [("c@1400/1500", 1, 1423)] if caching else []]


@pytest.mark.parametrize("caching", [False, True], ids=["uncached", "cached"])
def test_final_results_come_by_window_start_then_key(caching):
    # hopping 200 by 50, no grace (retention 200): bb@217 and d@217 go into the windows starting
    # 50, 100, 150 and 200. d@702 (close time 702) scans starts [217 - 200 + 1, 702 - 200] =
    # [18, 502]: cached, the store below has seen start 200 (from 0 on): all eight, by start
    # then key; uncached, it has seen 700 (d@702's windows) and keeps starts from 500 on: none
    outputs = on_close_outputs(TimeWindows.of_size_and_grace(200, 0).advance_by(50),
                               [("bb", 217), ("d", 217), ("d", 702)], caching)
    expected = [(f"{key}@{start}/{start + 200}", 1, 217) for start in (50, 100, 150, 200) for key in ("bb", "d")]
    assert outputs == [[], [], expected if caching else []]


def test_sliding_final_results_come_by_window_start_then_key():
    # difference 100, grace 200 (close time = stream time - 200): b@150 and a@160 make their left
    # windows [50,150] and [60,160]; c@400 (close time 200) scans the windows ending before 200,
    # starting in [0, 99], of a time-ordered store: by start, then key (Kafka's indexed
    # time-ordered store for sliding windows)
    outputs = on_close_outputs(SlidingWindows.of_time_difference_and_grace(100, 200),
                               [("b", 150), ("a", 160), ("c", 400)], caching=False)
    assert outputs == [[], [], [("b@50/150", 1, 150), ("a@60/160", 1, 160)]]


@pytest.mark.parametrize("caching", [False, True], ids=["uncached", "cached"])
def test_in_memory_final_results_are_scanned_from_the_plain_stores_retention(caching):
    # tumbling 100, no grace: retention 100. c@1392 puts [1300,1400); c@1423 puts [1400,1500),
    # then scans starts [1392 - 100, 1423 - 100] = [1292, 1323]. On RocksDB (a time-ordered
    # store: starts from 1400 - 100 on) [1300,1400) is emitted. In memory Kafka's DSL store is
    # its InMemoryWindowStore whatever the emit strategy: starts after 1400 - 100 only, so
    # [1300,1400) is lost uncached; cached, c@1392's window is still in the cache, which has no
    # retention: emitted
    records = [("c", 1392), ("c", 1423)]
    emitted = [[], [("c@1300/1400", 1, 1392)]]
    windows = TimeWindows.of_size_with_no_grace(100)
    assert on_close_outputs(windows, records, caching) == emitted
    assert on_close_outputs(windows, records, caching, in_memory=True) == (emitted if caching else [[], []])


def test_in_memory_sliding_final_results_are_scanned_from_the_plain_stores_retention():
    # difference 100, no grace: retention 2 * 100. bb@1699 -> [1599,1699]; bb@1707 closes it
    # (emitted) and makes [1607,1707] and the right window [1700,1800] of 1699; bb@2000 makes its
    # left window [1900,2000] (newest start 1900) and scans the windows ending before 2000 from
    # start 1700 - 100 + 1 on: [1607,1707] and [1700,1800]. RocksDB (time-ordered) keeps starts
    # from 1900 - 200 = 1700 on: [1700,1800] is emitted; in memory (Kafka's InMemoryWindowStore)
    # starts after 1700 only: nothing
    records = [("bb", 1699), ("bb", 1707), ("bb", 2000)]
    windows = SlidingWindows.of_time_difference_with_no_grace(100)
    first = [("bb@1599/1699", 1, 1699)]
    assert on_close_outputs(windows, records, False) == [[], first, [("bb@1700/1800", 1, 1707)]]
    assert on_close_outputs(windows, records, False, in_memory=True) == [[], first, []]


def test_in_memory_session_final_results_are_scanned_within_the_retention():
    # gap 300, no grace: retention 300. C@0, then B@478 (close time 478 - 300 = 178): C's
    # session [0,0] ended before 178. RocksDB (Kafka's time-ordered session store, no retention
    # on that scan): emitted. In memory (Kafka's InMemorySessionStore): sessions ending after
    # 478 - 300 only: lost
    records = [("C", 0), ("B", 478)]
    windows = SessionWindows.of_inactivity_gap_with_no_grace(300)
    assert on_close_outputs(windows, records, False) == [[], [("C@0/0", 1, 0)]]
    assert on_close_outputs(windows, records, False, in_memory=True) == [[], []]


def test_in_memory_session_final_results_come_by_end_then_key():
    # gap 100, no grace, retention 1000 (with the default gap + grace, a session is behind the
    # in-memory store's retention as soon as it closes): b@[10,50] and a@[20,50] end together;
    # c@300 (close time 200) emits both, by end then key in memory (Kafka's
    # InMemorySessionStore: end -> key -> start), by end then start on RocksDB (the time-ordered
    # session store's key: end + start + key)
    records = [("b", 10), ("b", 50), ("a", 20), ("a", 50), ("c", 300)]
    windows = SessionWindows.of_inactivity_gap_with_no_grace(100)
    last = lambda in_memory: on_close_outputs(windows, records, False, in_memory, 1000)[-1]  # noqa: E731
    assert last(False) == [("b@10/50", 2, 50), ("a@20/50", 2, 50)]
    assert last(True) == [("a@20/50", 2, 50), ("b@10/50", 2, 50)]


def sliding_outputs(windows, records):
    b = StreamsBuilder()
    (b.stream("in", key_serde=S, value_serde=S).group_by_key().windowed_by(windows)
        .count(store=Materialized.as_("sliding").with_caching_disabled())
        .to_stream().map(flat).to("out", key_serde=S, value_serde=I64))
    return pipe_each(b, records)


def test_sliding_windows_drop_a_none_value_before_it_moves_stream_time():
    # a@1693's None value is dropped first (KStreamSlidingWindowAggregate): the stream time stays
    # 400, so b@1199 (close time 1199 - 100) is on time and gets its left window [999,1199]
    outputs, dropped = sliding_outputs(SlidingWindows.of_time_difference_and_grace(200, 100),
                                       [("b", "x", 400), ("a", None, 1693), ("b", "y", 1199)])
    assert outputs == [[("b@200/400", 1, 400)], [], [("b@999/1199", 1, 1199)]]
    assert dropped == 1


def test_sliding_windows_update_from_the_latest_start_down():
    # difference 10: a@15 -> [5,15]; a@20 -> [16,26] (15's right window) and [10,20]. a@18:
    # its windows from the latest start down (processReverse): [16,26] and [10,20] contain it,
    # [5,15] ends before it (its aggregate seeds 18's left window [8,18]: 15 and 18); then 18's
    # right window [19,29] holds 20. a@20 again: [19,29], [16,26], then its left window [10,20],
    # which already holds a record at 20: nothing is created
    outputs, _ = sliding_outputs(SlidingWindows.of_time_difference_and_grace(10, 100),
                                 [("a", "v", 15), ("a", "v", 20), ("a", "v", 18), ("a", "v", 20)])
    assert outputs[2:] == [[("a@16/26", 2, 20), ("a@10/20", 3, 20), ("a@8/18", 2, 18), ("a@19/29", 1, 20)],
                           [("a@19/29", 2, 20), ("a@16/26", 3, 20), ("a@10/20", 4, 20)]]


def test_a_cached_session_is_found_past_the_retention_of_the_store_below():
    # gap 100, no grace: the store keeps sessions ending after its newest end - 100. a@200, b@300
    # (the store below has seen end 300), then a@250 looks for a's sessions ending from 150 on:
    # [200,200] is behind the store's retention but still cached (Kafka's CachingSessionStore
    # reads its cache first): merged into [200,250]. The tombstone of [200,200] is not forwarded:
    # the store below returns no old value for it (Kafka skips a delete of nothing)
    outputs, _ = session_outputs(SessionWindows.of_inactivity_gap_with_no_grace(100),
                                 [("a", 200), ("b", 300), ("a", 250)], caching=True)
    assert outputs == [[("a@200/200", 1, 200)], [("b@300/300", 1, 300)], [("a@200/250", 2, 250)]]


def test_session_final_results_are_scanned_by_end_whatever_the_retention():
    # gap 100, grace 100: close time = stream time - 200, retention 200. c@3000 (close time 2800:
    # nothing ended before it); a@2800 is on time (its session ends at 2800, not before 2800) but
    # already behind the store's retention (3000 - 200); b@3100 (close time 2900) scans the
    # sessions ending in [2800, 2899] after its put: Kafka's time-ordered session store keeps
    # no retention there, so [2800,2800] is emitted, at its end
    outputs = on_close_outputs(SessionWindows.of_inactivity_gap_and_grace(100, 100),
                               [("c", 3000), ("a", 2800), ("b", 3100)], caching=False)
    assert outputs == [[], [], [("a@2800/2800", 1, 2800)]]


class _Context:
    application_id = "app"
    task_id = "0_0"

    def __init__(self, path):
        self.path = path
        self.config = {}
        self.thread_cache = ThreadCache(1 << 20)

    def store_dir(self, name):
        return self.path / name

    def register(self, store, restore_callback, *, logged):
        pass


class _Clock:
    stream_time = -1

    def advance_stream_time(self, t):
        self.stream_time = max(self.stream_time, t)


def test_a_count_at_the_bytes_level_gives_the_typed_rules_results(tmp_path):
    """The same records through the typed rule, the bytes-level count per record and the run of
    keys: the same flushed results, store and dropped records."""
    windows = TimeWindows.of_size_and_grace(10, 3).advance_by(5)
    records = [("a", 1), ("b", 4), ("a", 12), ("a", 3), ("b", 6), ("a", 25), ("b", 9), ("a", 19), ("c", 26)]
    results = []
    for mode in ("typed", "bytes", "run"):
        mat = Materialized.as_("agg").with_in_memory_store().with_logging_disabled()
        store = window_store_builder(mat, "agg", windows, S, I64, timestamped=True).build()
        store.init(_Context(tmp_path / mode))
        flushed: list = []
        store.set_flush_listener(lambda k, new, old, ts, flushed=flushed: flushed.append((k, new.value, ts)))
        registry = MetricsRegistry()
        late = LateRecordReporter(task_dropped_records_sensor(registry, "t", "0_0"), "0_0")
        aggregator = (lambda k, v, agg: agg + 1) if mode == "typed" else count_adder
        logic = TimeWindowAggregateLogic(windows, store, count_initializer, aggregator, None, late=late)
        if mode == "run":
            logic.counting_run()([k.encode() for k, _ in records], [t for _, t in records], _Clock(),
                                 [Message("in", 0, offset, k.encode(), b"v", None, None, (1, t), -1.0, -1)
                                  for offset, (k, t) in enumerate(records)])
        else:
            assert (logic._count is None) == (mode == "typed")
            for key, t in records:
                logic.process(key, "v", t)
        store.flush()
        with store.all() as it:
            stored = [(w, vat.value, vat.timestamp) for w, vat in it]
        results.append((sorted(flushed), stored, registry.value("dropped-records-total", task_id="0_0")))
    assert results[0] == results[1] == results[2]
    # by hand (windows [s, s + 10) every 5, close time = stream time - 3): a@3 at stream time 12
    # (close 9) goes into [0,10) (end 10 > 9); b@9 at stream time 25 (close 22): [0,10) and
    # [5,15) closed, 2 drops; a@19 (close 22): [10,20) closed, [15,25) open, 1 drop
    assert results[0][2] == 3
