"""KStream joins (stream-stream, stream-table) through the DSL on the TopologyTestDriver. Expected
outputs are derived by hand from Kafka's rules (KStreamKStreamJoin: a left record at t joins right
records in [t - before, t + after], a match goes out at once with the larger timestamp, an
unmatched left/outer record only once t + after (+ before for the right side) + grace < stream
time, the scan running for a record at stream time; KStreamKTableJoin: only the stream triggers,
the table's current value, the stream record's key and timestamp). The rules' own corner cases
are tested in test_join_stream_stream.py / test_join_stream_table.py; these test the wiring."""

import pytest

from streams import StreamsBuilder, serdes
from streams.dsl import JoinWindows
from streams.errors import ProcessingError, TopologyError
from streams.testing import TopologyTestDriver

S = serdes.STRING
CONFIG = {"application.id": "joins", "default.key.serde": "string", "default.value.serde": "string"}


def joiner(left, right):
    return f"{left}+{right}"


def records(out):
    return [(r.key, r.value, r.timestamp) for r in out.read_records_to_list()]


def dropped(driver):
    return sum(m.value for m in driver.metrics() if m.name == "dropped-records-total")


def stream_stream(join, windows, config=CONFIG, **kw):
    b = StreamsBuilder()
    left, right = b.stream("left", key_serde=S, value_serde=S), b.stream("right", key_serde=S, value_serde=S)
    getattr(left, join)(right, joiner, windows, **kw).to("out", value_serde=S)
    d = TopologyTestDriver(b.build(), config)
    return d, d.create_input_topic("left", S, S), d.create_input_topic("right", S, S), d.create_output_topic("out", S, S)


def test_inner_join_before_after_asymmetry_and_out_of_order_records():
    # before=0, after=10: a left record at t joins right records in [t, t + 10]; a right
    # record at t joins left records in [t - 10, t]. Grace 20 makes the stores retain 10 + 20,
    # so the out-of-order L12 still finds R15 (a store serves [max(from, its time - retention +
    # 1), to], as Kafka's segmented stores)
    d, left, right, out = stream_stream("join", JoinWindows.of_time_difference_and_grace(10, 20).before(0))
    with d:
        left.pipe_input("k", "L10", 10)
        right.pipe_input("k", "R5", 5)      # left in [-5, 5]: L10 is after it
        right.pipe_input("k", "R15", 15)    # left in [5, 15]: L10
        right.pipe_input("k", "R25", 25)    # left in [15, 25]: nothing
        left.pipe_input("k", "L20", 20)     # right in [20, 30]: R25
        left.pipe_input("k", "L12", 12)     # out of order (stream time 25): right in [12, 22]: R15
        left.pipe_input("j", "J12", 12)     # another key: nothing
        assert records(out) == [("k", "L10+R15", 15), ("k", "L20+R25", 25), ("k", "L12+R15", 15)]
        assert dropped(d) == 0


def test_left_join_emits_unmatched_records_only_when_their_window_closed():
    # diff 10, grace 5: a held left record at t is emitted once t + 15 < stream time
    d, left, right, out = stream_stream("left_join", JoinWindows.of_time_difference_and_grace(10, 5))
    with d:
        left.pipe_input("a", "A0", 0)       # held
        left.pipe_input("z", "Z14", 14)     # A0 still open (15 >= 14); held
        right.pipe_input("a", "a9", 9)      # joins A0 (left in [-1, 19]), which is no longer held
        assert records(out) == [("a", "A0+a9", 9)]
        right.pipe_input("b", "b12", 12)    # right side of a left join: no match, nothing
        left.pipe_input("y", "Y16", 16)     # Z14 open (29 >= 16); held
        left.pipe_input("x", "X31", 31)     # Z14 closes (29 < 31), Y16 open (31 >= 31)
        assert records(out) == [("z", "Z14+None", 14)]
        left.pipe_input("w", "W40", 40)     # Y16 closes; X31 open (46 >= 40)
        left.pipe_input("v", None, 41)      # a None value is dropped and counted
        assert records(out) == [("y", "Y16+None", 16)]
        assert dropped(d) == 1


def test_outer_join_with_named_stores_emits_both_sides():
    d, left, right, out = stream_stream("outer_join", JoinWindows.of_time_difference_with_no_grace(5), store="pay")
    with d:
        right.pipe_input("x", "r1", 1)      # held (right)
        left.pipe_input("y", "l2", 2)       # held (left)
        left.pipe_input("x", "l4", 4)       # right in [-1, 9]: r1, no longer held
        left.pipe_input("z", "l10", 10)     # y@2 closes (2 + 5 < 10); z held
        right.pipe_input("q", "r17", 17)    # z@10 closes (10 + 5 < 17); q held
        left.pipe_input("e", "l40", 40)     # q@17 closes (17 + 5 < 40)
        assert records(out) == [("x", "l4+r1", 4), ("y", "l2+None", 2), ("z", "l10+None", 10),
                                ("q", "None+r17", 17)]
        # the window stores are StreamJoined-named after store=
        assert d.get_window_store("pay-outer-this-join-store").fetch("e", 40) == "l40"
        assert d.get_window_store("pay-outer-other-join-store").fetch("q", 17) == "r17"


def test_emit_interval_holds_unmatched_records_until_wall_clock_passes_it():
    config = {**CONFIG, "__emit.interval.ms.kstreams.outer.join.spurious.results.fix__": 1000}
    d, left, _, out = stream_stream("left_join", JoinWindows.of_time_difference_with_no_grace(10), config)
    with d:
        left.pipe_input("a", "A0", 0)
        left.pipe_input("b", "B20", 20)     # scan at wall 0: A0 closed; the next one is due at 1000
        left.pipe_input("c", "C40", 40)     # B20 closed, but not scanned yet
        assert records(out) == [("a", "A0+None", 0)]
        d.advance_wall_clock_time(1000)
        left.pipe_input("d", "D41", 41)     # scan: B20 closed, C40 open (50 >= 41)
        assert records(out) == [("b", "B20+None", 20)]


def test_key_change_repartitions_both_sides_before_the_join():
    b = StreamsBuilder()
    left = b.stream("left", key_serde=S, value_serde=S).select_key(lambda k, v: v.split(":")[0])
    right = b.stream("right", key_serde=S, value_serde=S).map(lambda k, v: (v, k))
    left.join(right, joiner, JoinWindows.of_time_difference_with_no_grace(100)).to("out", value_serde=S)
    topology = b.build()
    # named after the node before each key change (left: source 0, key-select 1; right: 2, 3)
    assert set(topology.internal_topics) == {"KSTREAM-KEY-SELECT-0000000001-repartition",
                                             "KSTREAM-MAP-0000000003-repartition"}
    assert topology.copartition_groups() == [frozenset(topology.internal_topics)]
    with TopologyTestDriver(topology, CONFIG) as d:
        d.create_input_topic("left", S, S).pipe_input("k1", "u7:click", 5)
        d.create_input_topic("right", S, S).pipe_input("pay", "u7", 8)
        assert records(d.create_output_topic("out", S, S)) == [("u7", "u7:click+pay", 8)]
        assert [r.key for r in d.producer_history("joins-KSTREAM-KEY-SELECT-0000000001-repartition")] == [b"u7"]


@pytest.mark.parametrize("join", ["join", "left_join", "outer_join"])
def test_a_repartition_before_a_left_or_outer_join_keeps_none_keys(join):
    # Kafka (KIP-962, InternalStreamsBuilder.rewriteRepartitionNodes): a repartition topic's filter
    # drops None keys unless a left/outer join is downstream of it. select_key makes the key of
    # "x" None; a left side with a None key and a value is forwarded at once as joiner(value,
    # None) by an outer side (the left of a left join, both of an outer join), so L1 goes out
    # for left and outer; the inner join never sees it (the repartition dropped it) and the
    # right-side R2 (a None key, not outer in a left join) is dropped by the join and counted
    b = StreamsBuilder()
    left = b.stream("left", key_serde=S, value_serde=S).select_key(lambda k, v: None if k == "x" else k)
    right = b.stream("right", key_serde=S, value_serde=S).select_key(lambda k, v: None if k == "x" else k)
    getattr(left, join)(right, joiner, JoinWindows.of_time_difference_with_no_grace(10)).to("out", value_serde=S)
    with TopologyTestDriver(b.build(), CONFIG) as d:
        d.create_input_topic("left", S, S).pipe_input("x", "L1", 1)
        d.create_input_topic("right", S, S).pipe_input("x", "R2", 2)
        got = records(d.create_output_topic("out", S, S))
        expected = {"join": [], "left_join": [(None, "L1+None", 1)],
                    "outer_join": [(None, "L1+None", 1), (None, "None+R2", 2)]}[join]
        assert got == expected
        assert dropped(d) == (1 if join == "left_join" else 0)


def test_a_repartition_before_a_stream_table_left_join_keeps_none_keys():
    # the same rule for a stream-table left join: the None-key record reaches the join, which
    # forwards joiner(value, None) (KStreamKTableJoinProcessor); the inner join never sees it
    for join, expected in (("join", []), ("left_join", [(None, "c1+None", 1)])):
        _, d, clicks, _, out = clicks_and_profiles(join, stream=lambda s: s.select_key(lambda k, v: None))
        with d:
            clicks.pipe_input("u1", "c1", 1)
            assert records(out) == expected
            assert dropped(d) == 0


def clicks_and_profiles(join, table=lambda t: t, stream=lambda s: s):
    b = StreamsBuilder()
    clicks = stream(b.stream("clicks", key_serde=S, value_serde=S))
    getattr(clicks, join)(table(b.table("profiles", key_serde=S, value_serde=S)), joiner).to("out", value_serde=S)
    topology = b.build()
    d = TopologyTestDriver(topology, CONFIG)
    return (topology, d, d.create_input_topic("clicks", S, S), d.create_input_topic("profiles", S, S),
            d.create_output_topic("out", S, S))


@pytest.mark.parametrize("join", ["join", "left_join"])
def test_stream_table_join_reads_the_current_table_value(join):
    topology, d, clicks, profiles, out = clicks_and_profiles(join)
    assert topology.copartition_groups() == [frozenset({"clicks", "profiles"})]
    with d:
        clicks.pipe_input("u1", "c0", 1)    # no profile yet: left join only
        profiles.pipe_input("u1", "P1", 10)  # the table side triggers nothing
        clicks.pipe_input("u1", "c1", 5)    # the stream's timestamp, the table's current value
        profiles.pipe_input("u1", "P2", 11)
        clicks.pipe_input("u1", "c2", 12)
        profiles.pipe_input("u1", None, 20)  # tombstone
        clicks.pipe_input("u1", "c3", 25)   # no value after the tombstone
        clicks.pipe_input("u1", None, 26)   # a None value is dropped and counted
        inner = [("u1", "c1+P1", 5), ("u1", "c2+P2", 12)]
        if join == "join":
            assert records(out) == inner
        else:
            assert records(out) == [("u1", "c0+None", 1), *inner, ("u1", "c3+None", 25)]
        assert dropped(d) == 1


def test_stream_table_join_through_unmaterialized_filter_and_map_values():
    # the join reads the source table's store through the filter's and the mapper's getters
    _, d, clicks, profiles, out = clicks_and_profiles(
        "join", table=lambda t: t.filter(lambda k, v: v.startswith("gold")).map_values(str.upper))
    with d:
        profiles.pipe_input("u1", "gold:ann", 1)
        profiles.pipe_input("u2", "silver:bob", 2)
        clicks.pipe_input("u1", "c1", 3)
        clicks.pipe_input("u2", "c2", 4)    # filtered out: no value
        profiles.pipe_input("u1", "silver:ann", 5)
        clicks.pipe_input("u1", "c3", 6)
        assert records(out) == [("u1", "c1+GOLD:ANN", 3)]


def test_outer_join_store_changelog_records_carry_the_processed_records_time():
    """Kafka logs every write of the shared outer store at context.timestamp(), the record being
    processed (never the wall clock). left_join, 10 ms, no grace: k@100 is held (put at 100);
    the right k@105 joins it, its held record is removed (tombstone at 105); m@200 is held (put
    at 200); z@300 moves stream time past m's window (200 + 10 < 300): m goes out with its null
    right side and is removed at 300."""
    d, left, right, out = stream_stream("left_join", JoinWindows.of_time_difference_with_no_grace(10))
    with d:
        left.pipe_input("k", "a", 100)
        right.pipe_input("k", "b", 105)
        left.pipe_input("m", "c", 200)
        right.pipe_input("z", "d", 300)
        assert records(out) == [("k", "a+b", 105), ("m", "c+None", 200)]
        logged = [(r.value is None, r.timestamp) for r in d.producer_history() if "OUTERSHARED" in r.topic]
        assert logged == [(False, 100), (True, 105), (False, 200), (True, 300)]


def test_stream_table_join_repartitions_a_key_changed_stream():
    topology, d, clicks, profiles, out = clicks_and_profiles(
        "left_join", stream=lambda s: s.select_key(lambda k, v: v))
    assert set(topology.internal_topics) == {"KSTREAM-KEY-SELECT-0000000001-repartition"}
    assert topology.copartition_groups() == [frozenset({"KSTREAM-KEY-SELECT-0000000001-repartition", "profiles"})]
    with d:
        profiles.pipe_input("u1", "P1", 1)
        clicks.pipe_input("session-9", "u1", 2)
        assert records(out) == [("u1", "u1+P1", 2)]


def test_stream_joined_with_a_count_table_from_a_plain_store():
    # a grouped stream's count keeps plain values (no timestamp): the join reads them as is
    b = StreamsBuilder()
    counts = b.stream("visits", key_serde=S, value_serde=S).group_by_key().count(store="visits")
    b.stream("clicks", key_serde=S, value_serde=S).join(counts, joiner).to("out", value_serde=S)
    with TopologyTestDriver(b.build(), CONFIG) as d:
        visits, clicks = d.create_input_topic("visits", S, S), d.create_input_topic("clicks", S, S)
        visits.pipe_input("u1", "v", 1)
        visits.pipe_input("u1", "v", 2)
        clicks.pipe_input("u1", "c", 3)
        clicks.pipe_input("u2", "c", 4)
        assert records(d.create_output_topic("out", S, S)) == [("u1", "c+2", 3)]


def test_join_argument_errors_name_the_problem():
    b = StreamsBuilder()
    s1, s2 = b.stream("a"), b.stream("b")
    table = b.table("t")
    w = JoinWindows.of_time_difference_with_no_grace(1)
    with pytest.raises(TopologyError, match="needs windows: a JoinWindows"):
        s1.join(s2, joiner)
    with pytest.raises(TopologyError, match="needs a JoinWindows, got int"):
        s1.left_join(s2, joiner, 10)
    with pytest.raises(TopologyError, match="needs a joiner"):
        s1.join(s2, windows=w)
    with pytest.raises(TopologyError, match="joiner"):
        s1.join(table, "not callable")
    with pytest.raises(TopologyError, match="with a KTable takes \\(table, joiner\\) only"):
        s1.join(table, joiner, w)
    with pytest.raises(TopologyError, match="outer_join joins two KStreams"):
        s1.outer_join(table, joiner, w)
    with pytest.raises(TopologyError, match="needs a KStream, a KTable or a GlobalKTable .* got str"):
        s1.join("b", joiner, w)
    with pytest.raises(TopologyError, match="same StreamsBuilder"):
        s1.join(StreamsBuilder().stream("c"), joiner, w)
    with pytest.raises(TopologyError, match="same StreamsBuilder"):
        s1.join(StreamsBuilder().table("c"), joiner)
    with pytest.raises(TopologyError, match="key_selector= is for a join with a GlobalKTable"):
        s1.join(table, joiner, key_selector=lambda k, v: k)
    with pytest.raises(TopologyError, match="store= names the join's window stores"):
        from streams.dsl import Materialized
        s1.join(s2, joiner, w, store=Materialized.as_("x").with_value_serde(S))


def test_a_global_table_join_is_chosen_by_the_table_type():
    # KStream.join(global_table, key_selector, joiner), positional or by keyword: the lookup key
    # comes from the selector; the stream's key and timestamp are kept
    b = StreamsBuilder()
    pages = b.global_table("pages", key_serde=S, value_serde=S)
    clicks = b.stream("clicks", key_serde=S, value_serde=S)
    clicks.join(pages, lambda user, page: page, joiner).to("inner", value_serde=S)
    clicks.left_join(pages, key_selector=lambda user, page: page, joiner=joiner).to("left", value_serde=S)
    with TopologyTestDriver(b.build(), CONFIG) as d:
        d.create_input_topic("pages", S, S).pipe_input("/a", "A", 1)
        click = d.create_input_topic("clicks", S, S)
        click.pipe_input("u", "/a", 5)
        click.pipe_input("u", "/b", 6)
        assert records(d.create_output_topic("inner", S, S)) == [("u", "/a+A", 5)]
        assert records(d.create_output_topic("left", S, S)) == [("u", "/a+A", 5), ("u", "/b+None", 6)]
    with pytest.raises(TopologyError, match="key_selector"):
        clicks.join(pages, None, joiner)
    with pytest.raises(TopologyError, match="takes \\(global_table, key_selector, joiner\\) only"):
        clicks.join(pages, lambda k, v: v, joiner, store="x")


def test_each_sides_results_carry_its_records_headers_and_a_failing_joiner_names_its_side(caplog):
    # left join, diff 5, no grace. Every result goes out with the headers of the record that
    # caused it (Kafka forwards through the record's context): a match with the arriving
    # record's, and a held left record whose window closed with the headers of the record whose
    # stream time closed it, here a right one (l0 closes once 0 + 5 < 20)
    def failing(left, right):
        if right == "boom":
            raise ValueError("no")
        return joiner(left, right)
    b = StreamsBuilder()
    left, right = b.stream("left", key_serde=S, value_serde=S), b.stream("right", key_serde=S, value_serde=S)
    left.left_join(right, failing, JoinWindows.of_time_difference_with_no_grace(5)).to("out", value_serde=S)
    with TopologyTestDriver(b.build(), CONFIG) as d:
        lin, rin = d.create_input_topic("left", S, S), d.create_input_topic("right", S, S)
        out = d.create_output_topic("out", S, S)
        lin.pipe_input("a", "l0", 0, headers=[("from", b"l0")])
        lin.pipe_input("b", "l3", 3, headers=[("from", b"l3")])
        rin.pipe_input("b", "r4", 4, headers=[("from", b"r4")])     # joins l3 (left in [-1, 9])
        rin.pipe_input("c", "r20", 20, headers=[("from", b"r20")])  # closes l0 (0 + 5 < 20)
        got = [(r.key, r.value, r.timestamp, [(k, bytes(v)) for k, v in r.headers])
               for r in out.read_records_to_list()]
        assert got == [("b", "l3+r4", 4, [("from", b"r4")]), ("a", "l0+None", 0, [("from", b"r20")])]
        rin.pipe_input(None, "x", 21)  # a None key on the inner side: dropped, the warning names it
        assert "topic=[right] partition=[0] offset=[2]" in caplog.text
        with pytest.raises(ProcessingError) as err:
            rin.pipe_input("c", "boom", 22)  # no left c: the joiner is not called
            lin.pipe_input("c", "l22", 22)   # joins boom: the joiner fails in the left side
        assert "KSTREAM-JOINTHIS" in str(err.value) and "offset=2" in str(err.value)


@pytest.mark.parametrize("store_type,joined", [("rocksDB", [("k", "l1+r1", 190)]), ("in_memory", [])])
def test_a_null_value_goes_into_its_sides_store_as_kafkas_join_window_does(store_type, joined):
    """Kafka's KStreamJoinWindow puts every keyed record into its side's store, a null value too
    (then the join skips it): the store's change logging logs a tombstone under the next sequence
    number, and an in-memory store observes its time, which expires what is older than its
    retention (200 ms here), so a later left record no longer finds r1; a RocksDB store skips
    the put and keeps r1 (until its segment expires). Seed 227,366 of the conformance run."""
    b = StreamsBuilder({"default.dsl.store": store_type})
    left, right = b.stream("left", key_serde=S, value_serde=S), b.stream("right", key_serde=S, value_serde=S)
    left.join(right, joiner, JoinWindows.of_time_difference_with_no_grace(100), store="j").to("out", value_serde=S)
    with TopologyTestDriver(b.build(), CONFIG) as d:
        d.create_input_topic("right", S, S).pipe_input("k", "r1", timestamp=100)
        d.create_input_topic("right", S, S).pipe_input("k", None, timestamp=350)
        d.create_input_topic("left", S, S).pipe_input("k", "l1", timestamp=190)
        assert records(d.create_output_topic("out", S, S)) == joined
        assert dropped(d) == 1  # the null value, skipped by the join
        changelog = [(r.key, r.value) for r in d.producer_history() if r.topic == "joins-j-other-join-store-changelog"]
        assert changelog == [(b"k" + (100).to_bytes(8, "big") + (1).to_bytes(4, "big"), b"r1"),
                             (b"k" + (350).to_bytes(8, "big") + (2).to_bytes(4, "big"), None)]
