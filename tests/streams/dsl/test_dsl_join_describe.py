"""Joins in Topology.describe(): node, store and topic names and the text's order as Kafka's.
Each expected text is what Kafka Streams 4.1.1's own `describe()` prints for the same topology
written with Kafka's DSL (StreamsBuilder, KStream#join/leftJoin/outerJoin, KTable#join/leftJoin,
StreamJoined.as("s") for store="s", Materialized.with(...) for an unnamed store)."""

from streams import StreamsBuilder, serdes
from streams.dsl import JoinWindows, Materialized
from streams.java_order import TreeSet, copy_capacity, hash_order, put_capacity, string_hash


def joiner(a, b):
    return f"{a}+{b}"


W = JoinWindows.of_time_difference_with_no_grace(10)


def describe(build):
    b = StreamsBuilder()
    build(b)
    return str(b.build().describe())


def test_stream_stream_left_join():
    def build(b):
        b.stream("left").left_join(b.stream("right"), joiner, W).to("out")
    assert describe(build) == SS_LEFT


def test_stream_stream_outer_join_with_named_stores():
    def build(b):
        b.stream("left").outer_join(b.stream("right"), joiner, W, store="s").to("out")
    assert describe(build) == SS_OUTER_NAMED_STORE


def test_a_key_changed_stream_joined_twice_repartitions_once():
    def build(b):
        left, right = b.stream("left"), b.stream("right")
        keyed = left.select_key(lambda k, v: v)
        keyed.join(right, joiner, W).to("out")
        keyed.join(right, joiner, W).to("out2")
    assert describe(build) == SS_REPARTITION_TWICE


def test_stream_table_left_join_repartitions_the_stream_and_reads_a_filtered_table():
    def build(b):
        clicks, profiles = b.stream("clicks"), b.table("profiles")
        clicks.select_key(lambda k, v: v).left_join(profiles.filter(lambda k, v: v is not None), joiner).to("out")
    assert describe(build) == ST_LEFT_REPARTITION_FILTER


def test_table_table_joins():
    def inner(b):
        b.table("t1").join(b.table("t2"), joiner).to_stream().to("out")

    def left_unnamed_store(b):
        (b.table("t1").left_join(b.table("t2"), joiner, store=Materialized.with_serdes(serdes.STRING, serdes.STRING))
         .to_stream().to("out"))
    assert describe(inner) == TT_INNER
    assert describe(left_unnamed_store) == TT_LEFT_UNNAMED_MAT


def test_java_collection_orders():
    # java.lang.String.hashCode(): "hello" is 99162322, "polygenelubricants" is Integer.MIN_VALUE
    assert string_hash("hello") == 99162322
    assert string_hash("polygenelubricants") == 0x80000000
    assert string_hash("") == 0
    assert [put_capacity(n) for n in (0, 12, 13, 24, 25)] == [16, 16, 32, 32, 64]
    assert [copy_capacity(n) for n in (1, 11, 12)] == [16, 16, 32]
    # HashMap buckets ((h ^ h >>> 16) & 15): "a" (97) -> 1, "b" -> 2, "q" (113) -> 1: "q" after "a"
    assert hash_order(["q", "b", "a"], 16) == ["q", "a", "b"]
    assert hash_order(["a", "b", "q"], 16) == ["a", "q", "b"]


def test_tree_set_keeps_javas_shape_when_the_order_changes_between_insertions():
    rank = {"a": 1, "b": 2, "c": 3, "d": 4}
    seen = TreeSet(lambda x, y: rank[x] - rank[y])
    for key in "cabd":
        seen.add(key)
    assert list(seen) == ["a", "b", "c", "d"]
    seen.add("a")  # already there
    assert list(seen) == ["a", "b", "c", "d"]
    # a comparator changing after insertion: the tree is not re-sorted (as Java's TreeSet)
    late = TreeSet(lambda x, y: rank[x] - rank[y])
    late.add("b")
    late.add("c")
    rank["c"] = 0
    late.add("a")                              # compared with b (root): 1 < 2 -> left of b
    assert list(late) == ["a", "b", "c"]


SS_LEFT = (
    "Topologies:\n"
    "   Sub-topology: 0\n"
    "    Source: KSTREAM-SOURCE-0000000000 (topics: [left])\n"
    "      --> KSTREAM-WINDOWED-0000000002\n"
    "    Source: KSTREAM-SOURCE-0000000001 (topics: [right])\n"
    "      --> KSTREAM-WINDOWED-0000000003\n"
    "    Processor: KSTREAM-WINDOWED-0000000002 (stores: [KSTREAM-JOINTHIS-0000000004-store])\n"
    "      --> KSTREAM-JOINTHIS-0000000004\n"
    "      <-- KSTREAM-SOURCE-0000000000\n"
    "    Processor: KSTREAM-WINDOWED-0000000003 (stores: [KSTREAM-OUTEROTHER-0000000005-store])\n"
    "      --> KSTREAM-OUTEROTHER-0000000005\n"
    "      <-- KSTREAM-SOURCE-0000000001\n"
    "    Processor: KSTREAM-JOINTHIS-0000000004 (stores: [KSTREAM-OUTEROTHER-0000000005-store, KSTREAM-OUTERSHARED-0000000004-store])\n"
    "      --> KSTREAM-MERGE-0000000006\n"
    "      <-- KSTREAM-WINDOWED-0000000002\n"
    "    Processor: KSTREAM-OUTEROTHER-0000000005 (stores: [KSTREAM-JOINTHIS-0000000004-store, KSTREAM-OUTERSHARED-0000000004-store])\n"
    "      --> KSTREAM-MERGE-0000000006\n"
    "      <-- KSTREAM-WINDOWED-0000000003\n"
    "    Processor: KSTREAM-MERGE-0000000006 (stores: [])\n"
    "      --> KSTREAM-SINK-0000000007\n"
    "      <-- KSTREAM-JOINTHIS-0000000004, KSTREAM-OUTEROTHER-0000000005\n"
    "    Sink: KSTREAM-SINK-0000000007 (topic: out)\n"
    "      <-- KSTREAM-MERGE-0000000006\n"
    "\n"
)


SS_OUTER_NAMED_STORE = (
    "Topologies:\n"
    "   Sub-topology: 0\n"
    "    Source: KSTREAM-SOURCE-0000000000 (topics: [left])\n"
    "      --> KSTREAM-WINDOWED-0000000002\n"
    "    Source: KSTREAM-SOURCE-0000000001 (topics: [right])\n"
    "      --> KSTREAM-WINDOWED-0000000003\n"
    "    Processor: KSTREAM-WINDOWED-0000000002 (stores: [s-outer-this-join-store])\n"
    "      --> KSTREAM-OUTERTHIS-0000000004\n"
    "      <-- KSTREAM-SOURCE-0000000000\n"
    "    Processor: KSTREAM-WINDOWED-0000000003 (stores: [s-outer-other-join-store])\n"
    "      --> KSTREAM-OUTEROTHER-0000000005\n"
    "      <-- KSTREAM-SOURCE-0000000001\n"
    "    Processor: KSTREAM-OUTEROTHER-0000000005 (stores: [s-outer-shared-join-store, s-outer-this-join-store])\n"
    "      --> KSTREAM-MERGE-0000000006\n"
    "      <-- KSTREAM-WINDOWED-0000000003\n"
    "    Processor: KSTREAM-OUTERTHIS-0000000004 (stores: [s-outer-shared-join-store, s-outer-other-join-store])\n"
    "      --> KSTREAM-MERGE-0000000006\n"
    "      <-- KSTREAM-WINDOWED-0000000002\n"
    "    Processor: KSTREAM-MERGE-0000000006 (stores: [])\n"
    "      --> KSTREAM-SINK-0000000007\n"
    "      <-- KSTREAM-OUTERTHIS-0000000004, KSTREAM-OUTEROTHER-0000000005\n"
    "    Sink: KSTREAM-SINK-0000000007 (topic: out)\n"
    "      <-- KSTREAM-MERGE-0000000006\n"
    "\n"
)


SS_REPARTITION_TWICE = (
    "Topologies:\n"
    "   Sub-topology: 0\n"
    "    Source: KSTREAM-SOURCE-0000000000 (topics: [left])\n"
    "      --> KSTREAM-KEY-SELECT-0000000002\n"
    "    Processor: KSTREAM-KEY-SELECT-0000000002 (stores: [])\n"
    "      --> KSTREAM-FILTER-0000000004\n"
    "      <-- KSTREAM-SOURCE-0000000000\n"
    "    Processor: KSTREAM-FILTER-0000000004 (stores: [])\n"
    "      --> KSTREAM-SINK-0000000003\n"
    "      <-- KSTREAM-KEY-SELECT-0000000002\n"
    "    Sink: KSTREAM-SINK-0000000003 (topic: KSTREAM-KEY-SELECT-0000000002-repartition)\n"
    "      <-- KSTREAM-FILTER-0000000004\n"
    "\n"
    "  Sub-topology: 1\n"
    "    Source: KSTREAM-SOURCE-0000000001 (topics: [right])\n"
    "      --> KSTREAM-WINDOWED-0000000007, KSTREAM-WINDOWED-0000000016\n"
    "    Source: KSTREAM-SOURCE-0000000005 (topics: [KSTREAM-KEY-SELECT-0000000002-repartition])\n"
    "      --> KSTREAM-WINDOWED-0000000006, KSTREAM-WINDOWED-0000000015\n"
    "    Processor: KSTREAM-WINDOWED-0000000006 (stores: [KSTREAM-JOINTHIS-0000000008-store])\n"
    "      --> KSTREAM-JOINTHIS-0000000008\n"
    "      <-- KSTREAM-SOURCE-0000000005\n"
    "    Processor: KSTREAM-WINDOWED-0000000007 (stores: [KSTREAM-JOINOTHER-0000000009-store])\n"
    "      --> KSTREAM-JOINOTHER-0000000009\n"
    "      <-- KSTREAM-SOURCE-0000000001\n"
    "    Processor: KSTREAM-WINDOWED-0000000015 (stores: [KSTREAM-JOINTHIS-0000000017-store])\n"
    "      --> KSTREAM-JOINTHIS-0000000017\n"
    "      <-- KSTREAM-SOURCE-0000000005\n"
    "    Processor: KSTREAM-WINDOWED-0000000016 (stores: [KSTREAM-JOINOTHER-0000000018-store])\n"
    "      --> KSTREAM-JOINOTHER-0000000018\n"
    "      <-- KSTREAM-SOURCE-0000000001\n"
    "    Processor: KSTREAM-JOINOTHER-0000000009 (stores: [KSTREAM-JOINTHIS-0000000008-store])\n"
    "      --> KSTREAM-MERGE-0000000010\n"
    "      <-- KSTREAM-WINDOWED-0000000007\n"
    "    Processor: KSTREAM-JOINOTHER-0000000018 (stores: [KSTREAM-JOINTHIS-0000000017-store])\n"
    "      --> KSTREAM-MERGE-0000000019\n"
    "      <-- KSTREAM-WINDOWED-0000000016\n"
    "    Processor: KSTREAM-JOINTHIS-0000000008 (stores: [KSTREAM-JOINOTHER-0000000009-store])\n"
    "      --> KSTREAM-MERGE-0000000010\n"
    "      <-- KSTREAM-WINDOWED-0000000006\n"
    "    Processor: KSTREAM-JOINTHIS-0000000017 (stores: [KSTREAM-JOINOTHER-0000000018-store])\n"
    "      --> KSTREAM-MERGE-0000000019\n"
    "      <-- KSTREAM-WINDOWED-0000000015\n"
    "    Processor: KSTREAM-MERGE-0000000010 (stores: [])\n"
    "      --> KSTREAM-SINK-0000000011\n"
    "      <-- KSTREAM-JOINTHIS-0000000008, KSTREAM-JOINOTHER-0000000009\n"
    "    Processor: KSTREAM-MERGE-0000000019 (stores: [])\n"
    "      --> KSTREAM-SINK-0000000020\n"
    "      <-- KSTREAM-JOINTHIS-0000000017, KSTREAM-JOINOTHER-0000000018\n"
    "    Sink: KSTREAM-SINK-0000000011 (topic: out)\n"
    "      <-- KSTREAM-MERGE-0000000010\n"
    "    Sink: KSTREAM-SINK-0000000020 (topic: out2)\n"
    "      <-- KSTREAM-MERGE-0000000019\n"
    "\n"
)


ST_LEFT_REPARTITION_FILTER = (
    "Topologies:\n"
    "   Sub-topology: 0\n"
    "    Source: KSTREAM-SOURCE-0000000000 (topics: [clicks])\n"
    "      --> KSTREAM-KEY-SELECT-0000000004\n"
    "    Processor: KSTREAM-KEY-SELECT-0000000004 (stores: [])\n"
    "      --> KSTREAM-FILTER-0000000007\n"
    "      <-- KSTREAM-SOURCE-0000000000\n"
    "    Processor: KSTREAM-FILTER-0000000007 (stores: [])\n"
    "      --> KSTREAM-SINK-0000000006\n"
    "      <-- KSTREAM-KEY-SELECT-0000000004\n"
    "    Sink: KSTREAM-SINK-0000000006 (topic: KSTREAM-KEY-SELECT-0000000004-repartition)\n"
    "      <-- KSTREAM-FILTER-0000000007\n"
    "\n"
    "  Sub-topology: 1\n"
    "    Source: KSTREAM-SOURCE-0000000002 (topics: [profiles])\n"
    "      --> KTABLE-SOURCE-0000000003\n"
    "    Source: KSTREAM-SOURCE-0000000008 (topics: [KSTREAM-KEY-SELECT-0000000004-repartition])\n"
    "      --> KSTREAM-LEFTJOIN-0000000009\n"
    "    Processor: KSTREAM-LEFTJOIN-0000000009 (stores: [profiles-STATE-STORE-0000000001])\n"
    "      --> KSTREAM-SINK-0000000010\n"
    "      <-- KSTREAM-SOURCE-0000000008\n"
    "    Processor: KTABLE-SOURCE-0000000003 (stores: [profiles-STATE-STORE-0000000001])\n"
    "      --> KTABLE-FILTER-0000000005\n"
    "      <-- KSTREAM-SOURCE-0000000002\n"
    "    Sink: KSTREAM-SINK-0000000010 (topic: out)\n"
    "      <-- KSTREAM-LEFTJOIN-0000000009\n"
    "    Processor: KTABLE-FILTER-0000000005 (stores: [])\n"
    "      --> none\n"
    "      <-- KTABLE-SOURCE-0000000003\n"
    "\n"
)


TT_INNER = (
    "Topologies:\n"
    "   Sub-topology: 0\n"
    "    Source: KSTREAM-SOURCE-0000000001 (topics: [t1])\n"
    "      --> KTABLE-SOURCE-0000000002\n"
    "    Source: KSTREAM-SOURCE-0000000004 (topics: [t2])\n"
    "      --> KTABLE-SOURCE-0000000005\n"
    "    Processor: KTABLE-SOURCE-0000000002 (stores: [t1-STATE-STORE-0000000000])\n"
    "      --> KTABLE-JOINTHIS-0000000007\n"
    "      <-- KSTREAM-SOURCE-0000000001\n"
    "    Processor: KTABLE-SOURCE-0000000005 (stores: [t2-STATE-STORE-0000000003])\n"
    "      --> KTABLE-JOINOTHER-0000000008\n"
    "      <-- KSTREAM-SOURCE-0000000004\n"
    "    Processor: KTABLE-JOINOTHER-0000000008 (stores: [t1-STATE-STORE-0000000000])\n"
    "      --> KTABLE-MERGE-0000000006\n"
    "      <-- KTABLE-SOURCE-0000000005\n"
    "    Processor: KTABLE-JOINTHIS-0000000007 (stores: [t2-STATE-STORE-0000000003])\n"
    "      --> KTABLE-MERGE-0000000006\n"
    "      <-- KTABLE-SOURCE-0000000002\n"
    "    Processor: KTABLE-MERGE-0000000006 (stores: [])\n"
    "      --> KTABLE-TOSTREAM-0000000009\n"
    "      <-- KTABLE-JOINTHIS-0000000007, KTABLE-JOINOTHER-0000000008\n"
    "    Processor: KTABLE-TOSTREAM-0000000009 (stores: [])\n"
    "      --> KSTREAM-SINK-0000000010\n"
    "      <-- KTABLE-MERGE-0000000006\n"
    "    Sink: KSTREAM-SINK-0000000010 (topic: out)\n"
    "      <-- KTABLE-TOSTREAM-0000000009\n"
    "\n"
)


TT_LEFT_UNNAMED_MAT = (
    "Topologies:\n"
    "   Sub-topology: 0\n"
    "    Source: KSTREAM-SOURCE-0000000001 (topics: [t1])\n"
    "      --> KTABLE-SOURCE-0000000002\n"
    "    Source: KSTREAM-SOURCE-0000000004 (topics: [t2])\n"
    "      --> KTABLE-SOURCE-0000000005\n"
    "    Processor: KTABLE-SOURCE-0000000002 (stores: [t1-STATE-STORE-0000000000])\n"
    "      --> KTABLE-JOINTHIS-0000000008\n"
    "      <-- KSTREAM-SOURCE-0000000001\n"
    "    Processor: KTABLE-SOURCE-0000000005 (stores: [t2-STATE-STORE-0000000003])\n"
    "      --> KTABLE-JOINOTHER-0000000009\n"
    "      <-- KSTREAM-SOURCE-0000000004\n"
    "    Processor: KTABLE-JOINOTHER-0000000009 (stores: [t1-STATE-STORE-0000000000])\n"
    "      --> KTABLE-MERGE-0000000007\n"
    "      <-- KTABLE-SOURCE-0000000005\n"
    "    Processor: KTABLE-JOINTHIS-0000000008 (stores: [t2-STATE-STORE-0000000003])\n"
    "      --> KTABLE-MERGE-0000000007\n"
    "      <-- KTABLE-SOURCE-0000000002\n"
    "    Processor: KTABLE-MERGE-0000000007 (stores: [KTABLE-MERGE-STATE-STORE-0000000006])\n"
    "      --> KTABLE-TOSTREAM-0000000010\n"
    "      <-- KTABLE-JOINTHIS-0000000008, KTABLE-JOINOTHER-0000000009\n"
    "    Processor: KTABLE-TOSTREAM-0000000010 (stores: [])\n"
    "      --> KSTREAM-SINK-0000000011\n"
    "      <-- KTABLE-MERGE-0000000007\n"
    "    Sink: KSTREAM-SINK-0000000011 (topic: out)\n"
    "      <-- KTABLE-TOSTREAM-0000000010\n"
    "\n"
)


def test_tree_set_matches_javas_order_when_ranks_change_between_insertions():
    # The same steps as this Java program gave, on Java 17's TreeSet: 40 insertions of keys
    # 0..39 with a comparator reading ranks that change after each insertion (a 64-bit LCG picks
    # the key, the rank changed and its new value); duplicates come from keys the search missed
    #   int[] rank = 0..39; long seed = 12345;
    #   TreeSet<Integer> set = new TreeSet<>((x, y) -> x.equals(y) ? 0
    #       : (rank[x] != rank[y] ? rank[x] - rank[y] : x - y));
    #   40 times: seed = seed * A + C; set.add((int) ((seed >>> 33) % 40));
    #             seed = seed * A + C; rank[(int) ((seed >>> 33) % 40)] = (int) ((seed >>> 40) % 100);
    java_order = [2, 3, 4, 5, 1, 6, 16, 8, 10, 11, 18, 20, 24, 25, 36, 26, 4, 32, 31, 33, 23, 29, 36, 13, 34, 37,
                  39, 0, 17, 19, 14, 27]
    a, c, mask = 6364136223846793005, 1442695040888963407, (1 << 64) - 1
    rank = list(range(40))
    seen = TreeSet(lambda x, y: 0 if x == y else (rank[x] - rank[y] if rank[x] != rank[y] else x - y))
    seed = 12345
    for _ in range(40):
        seed = (seed * a + c) & mask
        seen.add((seed >> 33) % 40)
        seed = (seed * a + c) & mask
        rank[(seed >> 33) % 40] = (seed >> 40) % 100
    assert list(seen) == java_order
