"""Hand-written conformance scenarios, one or two per divergence this harness found (the minimal
scenario `minimise.py` shrank it to, or one written for it), run through both drivers with the
random ones. A divergence fixed on this branch must stay fixed; one left to another branch
xfails through known_gaps.py until that branch lands.
"""

from __future__ import annotations

from vocabulary import CACHE, IN_MEMORY, INPUT2, NO_CACHE, OPTIMIZATIONS, RIGHT

FIRST_SEED = 1_000_000  # apart from the random scenarios' seeds


def _windowed(kind: str, agg: str = "count", fn: str | None = None, emit: str = "update", **spec) -> dict:
    return {"op": "windowed", "windows": {"type": kind, "grace": None, **spec}, "agg": agg, "fn": fn, "emit": emit}


_GROUP_BY_KEY = {"op": "group_by_key", "fn": None}


def _join(op: str, kind: str, joiner: str, **fields) -> dict:
    return {"op": op, "type": kind, "joiner": joiner, **fields}


def _stream_join(kind: str, joiner: str, *, store: bool = False, other: tuple = (), **windows) -> dict:
    spec = {"diff": 100, "grace": None, "before": None, "after": None, **windows}
    return _join("stream_join", kind, joiner, windows=spec, store=store,
                 other={"source": "stream", "source_store": True, "ops": list(other)})


def _rekeyed_self_join(other_step: dict) -> list:
    """select_key, then a left join of the stream with itself through `other_step` on the other side."""
    return [{"op": "select_key", "fn": "key_upper"},
            _join("stream_join", "left", "both_or_none",
                  windows={"diff": 300, "grace": None, "before": 50, "after": None}, store=False,
                  other={"source": "self", "ops": [other_step]})]


#: the other side of a join: builder.table("right") with its store named right-source-store
_TABLE = {"source": "table", "source_store": True, "ops": []}

#: a record of input2 reaches the first cogrouped stream twice (through a merge of both inputs, and
#: of that merge with input2), then the second: three updates of its sliding windows, one by one
_SLIDING_COGROUP = [{"op": "merge", "fn": None}, {"op": "merge", "fn": None, "name": "step-0"}, _GROUP_BY_KEY,
                    {"op": "cogroup", "fn": "tagged_concat", "other": {"ops": [_GROUP_BY_KEY]},
                     "windows": {"type": "sliding", "size": 500, "grace": 0}}]
_SLIDING_COGROUP_RECORDS = [["b", "abc ba ab", 0, INPUT2], ["c", "a a", 0], [None, None, 0, INPUT2], ["dd", "abc", 0],
                            ["b", "abc", 1264], [None, "ba ab", 1264], ["c", "bb", 951, INPUT2], ["c", "d cab", 1222],
                            ["c", "d a a", 951, INPUT2], ["b", "d", 500], ["c", "abc", 1294, INPUT2]]

#: name -> (family, source, ops, records, cache, extra scenario fields)
_CASES = {
    # --- fixed here ------------------------------------------------------------------------------
    # statestore.cache.max.bytes = 0 strips the caching layers (Kafka's rewriteTopology): a table
    # forwards a delete of a key it never had, as uncached
    "zero-cache-table-tombstone": ("table", "table", [], [["a", "x", 1], ["b", None, 2], ["a", None, 3]], NO_CACHE),
    # KTable.filter asks its materialized parent for old values: no tombstone for "b", never forwarded
    "filter-old-values-named": ("table", "table", [{"op": "table_filter", "fn": "value_has_a", "store": False}],
                                [["a", "ab", 1], ["b", "d", 2], ["a", "d", 3]], NO_CACHE),
    # ... and an unnamed (unmaterialized) source refuses: every filtered-out value is a tombstone
    "filter-old-values-unnamed": ("table", "table", [{"op": "table_filter", "fn": "value_has_a", "store": False}],
                                  [["a", "ab", 1], ["b", "d", 2], ["a", "d", 3]], NO_CACHE, {"source_store": False}),
    # an unnamed source forwards every record uncached, a delete of an absent key too
    "unnamed-source-uncached": ("table", "table", [], [["a", "x", 1], ["b", None, 2]], CACHE,
                                {"source_store": False}),
    # Kafka's driver emits final results without a wall-clock throttle
    "emit-interval-zero": ("windowed", "stream",
                           [{"op": "group_by", "fn": "key_upper"},
                            _windowed("tumbling", "reduce", "concat", "close", size=1000, advance=1000, grace=50)],
                           [["c", "cab d", 524], ["dd", None, 1087]], NO_CACHE),
    # one stream time for an operator below a merge: dd@1600 is late after b@1867
    "merge-one-stream-time": ("windowed", "stream",
                              [{"op": "filter", "fn": "key_present"}, {"op": "merge", "fn": None}, _GROUP_BY_KEY,
                               _windowed("tumbling", "aggregate", "sum_of_lengths", size=200, advance=200, grace=0)],
                              [["b", None, 1867, INPUT2], ["dd", "a a cab", 1600]], NO_CACHE),
    # until_window_closes after sessions waits for end + grace + gap
    "suppress-session-grace": ("windowed", "stream",
                               [_GROUP_BY_KEY, _windowed("session", gap=100),
                                {"op": "suppress", "until": "window_close"}],
                               [["c", "cab", 964], ["d", "x", 1063], ["d", "y", 1064]], NO_CACHE),
    # on_window_close, time windows: Kafka emits after the record's puts, scanning a time-ordered
    # store from observed stream time - retention: c@1829's put (start 1800) leaves [1400,1500)
    # behind the store's retention (100), so it is never emitted ...
    "final-results-past-retention": ("windowed", "stream",
                                     [_GROUP_BY_KEY, _windowed("tumbling", "aggregate", "concat", "close",
                                                               size=100, advance=100)],
                                     [["c", "bb ab", 1423], ["c", "a cab ab", 1829]], NO_CACHE),
    # ... but with the cache kept (WindowStoreMaterializer), c@1829's put is still in the cache
    # when the scan runs: the store below has seen only start 1400 and returns [1400,1500)
    "final-results-past-retention-cached": ("windowed", "stream",
                                            [_GROUP_BY_KEY, _windowed("tumbling", "aggregate", "concat", "close",
                                                                      size=100, advance=100)],
                                            [["c", "bb ab", 1423], ["c", "a cab ab", 1829]], CACHE),
    # d@702 closes the windows of 217 ([50,250) to [200,400)); cached, the store below has seen
    # start 200 only and the scan gives them by start, then key: bb@50, d@50, bb@100, d@100, ...;
    # uncached, d@702's puts (start 700) leave them all behind the retention (200): none
    "final-results-scan-order": ("windowed", "stream",
                                 [_GROUP_BY_KEY, _windowed("hopping", emit="close", size=200, advance=50, grace=0)],
                                 [["bb", "x", 217], ["d", "x", 217], ["d", "x", 702]], CACHE),
    "final-results-scan-order-uncached": ("windowed", "stream",
                                          [_GROUP_BY_KEY, _windowed("hopping", emit="close", size=200, advance=50,
                                                                    grace=0)],
                                          [["bb", "x", 217], ["d", "x", 217], ["d", "x", 702]], NO_CACHE),
    # sliding windows drop a None value before it moves the observed stream time: b@1199 is
    # not late after a@1693 (None)
    "sliding-null-value": ("windowed", "stream", [_GROUP_BY_KEY, _windowed("sliding", "reduce", "max", size=200,
                                                                           grace=100)],
                           [["b", "ab cab", 400], ["a", None, 1693], ["b", "cab", 1199]], NO_CACHE),
    # sliding windows update a record's windows from the latest start down (processReverse)
    "sliding-update-order": ("windowed", "stream",
                             [{"op": "group_by", "fn": "first_char"},
                              _windowed("sliding", "reduce", "longer", size=500)],
                             [["dd", "ab d ab", 500], [None, "abc abc d", 1000], [None, "abc", 1000]], NO_CACHE),
    # sliding windows emitting final results on window close: a time-ordered (indexed) store,
    # scanned by start, then key: b's [50,150] before a's [60,160]
    "sliding-final-results-order": ("windowed", "stream",
                                    [_GROUP_BY_KEY, _windowed("sliding", "reduce", "concat", "close", size=100,
                                                              grace=200)],
                                    [["b", "x", 150], ["a", "y", 160], ["c", "z", 400]], NO_CACHE),
    # Kafka's caching session store finds what it caches whatever the retention of the store
    # below: a@250 finds [200,200] (the store below, at end 300 with retention 100, no longer
    # returns it) and merges it; its tombstone is not forwarded (the store below has none)
    "session-cached-past-retention": ("windowed", "stream",
                                      [_GROUP_BY_KEY, _windowed("session", "reduce", "concat", gap=100, grace=0)],
                                      [["a", "x", 200], ["b", "y", 300], ["a", "z", 250]], CACHE),
    # final results of sessions come from the time-ordered session store after the put, by end,
    # none held back by the retention: [2800,2800], created past the retention, is emitted
    "session-final-results-past-retention": ("windowed", "stream",
                                             [_GROUP_BY_KEY, _windowed("session", "reduce", "concat", "close",
                                                                       gap=100, grace=100)],
                                             [["c", "x", 3000], ["a", "y", 2800], ["b", "z", 3100]], NO_CACHE),
    # --- fixed on other branches (kip258, windows) ---------------------------------------------
    "kip258-count-timestamp": ("aggregate", "stream", [_GROUP_BY_KEY, {"op": "count", "fn": None}],
                               [["a", "x", 10], ["a", "y", 5]], NO_CACHE),
    "session-close-time-late": ("windowed", "stream", [_GROUP_BY_KEY, _windowed("session", gap=100)],
                                [["b", "cab cab", 1344], ["c", "abc", 1270]], NO_CACHE),
    "session-close-time-final": ("windowed", "stream", [_GROUP_BY_KEY, _windowed("session", emit="close", gap=300)],
                                 [["b", None, 143], ["a", "cab", 152]], NO_CACHE),
    "session-tombstone-time": ("windowed", "stream", [_GROUP_BY_KEY, _windowed("session", gap=100)],
                               [["a", "x", 599], ["a", "y", 644]], CACHE),
    # --- joins (fixed on branch joinconf) -------------------------------------------------------
    # a repartition topic keeps None keys when a left/outer join is downstream (KIP-962,
    # InternalStreamsBuilder.rewriteRepartitionNodes): the outer side forwards joiner(value, None)
    "join-null-key-repartition-outer": ("join", "stream",
                                        [{"op": "map", "fn": "key_upper"},
                                         _stream_join("outer", "both_or_none", diff=100, grace=50)],
                                        [[None, "ba b", 142], [None, "a", 150, RIGHT]], NO_CACHE),
    "join-null-key-repartition-left-table": ("join", "stream",
                                             [{"op": "select_key", "fn": "key_upper"},
                                              _join("stream_table_join", "left", "pair", other=_TABLE)],
                                             [["a", "x", 1, RIGHT], ["A", "y", 2, RIGHT], [None, "ab", 3],
                                              ["a", "b", 4]], NO_CACHE),
    # the foreign-key join reads both tables through their value getters: an unmaterialized
    # filter on the left, an unmaterialized value mapper on the right
    "fk-join-value-getters": ("join", "table",
                              [{"op": "table_filter", "fn": "value_has_a", "store": False},
                               _join("fk_join", "inner", "pair", extractor="first_char", store=False,
                                     other={"source": "table", "source_store": False,
                                            "ops": [{"op": "table_map_values", "fn": "upper", "store": False}]})],
                              [["a", "x", 1, RIGHT], ["k", "ab", 2], ["k", "bb", 3], ["a", "y", 4, RIGHT],
                               ["j", "a", 5]], CACHE),
    # a foreign-key join's result without a store refuses old values to a filter that does not
    # force them (KTableSource.enableSendingOldValues(false)): the filter forwards a tombstone
    "fk-join-result-filter-tombstone": ("join", "table",
                                        [_join("fk_join", "left", "pair", extractor="first_char_not_b", store=False,
                                               other=_TABLE),
                                         {"op": "table_filter_not", "fn": "key_present", "store": True}],
                                        [["a", "ab bb", 0]], NO_CACHE),
    # a materialized filter/map_values reads its old values from its own store and asks its
    # parent none (KTableFilter / KTableMapValues): the filter above, built on an unnamed source,
    # forwards Change(None, None) and the outer join's right side emits too
    "table-join-materialized-node-old-values": (
        "join", "table",
        [_join("table_join", "outer", "pair", store=False,
               other={"source": "self", "ops": [{"op": "table_filter_not", "fn": "key_present", "store": False},
                                                {"op": "table_map_values", "fn": "upper", "store": True}]})],
        [["b", "ab d bb", 300]], NO_CACHE, {"source_store": False}),
    # Kafka's driver takes the records of its internal topics lowest head timestamp first, ties
    # in java.util.PriorityQueue's order (PartitionGroup): both sides of a self-join repartitioned
    # at one timestamp take turns
    "self-join-repartition-order": ("join", "stream", _rekeyed_self_join({"op": "flat_map_values", "fn": "words"}),
                                    [["b", "abc a d", 0], ["b", "ba b", 0]], NO_CACHE),
    # merge.repartition.topics: both sides of a self-join below one key change share one
    # repartition topic, the other side's filter moved below it (Kafka's mergeRepartitionTopics)
    "merged-self-join-repartition": ("join", "stream", _rekeyed_self_join({"op": "filter", "fn": "key_present"}),
                                     [["b", "abc a d", 0], ["b", "ba b", 0], [None, "x", 5], ["a", "q", 400]],
                                     NO_CACHE, {"topology_optimization": OPTIMIZATIONS}),
    # single.store.self.join: an inner join of a stream with itself over one window store
    # (Kafka's KStreamKStreamSelfJoin): the same results in the two-store join's order; records
    # out of order, a null key and value, and one past the store's retention
    "single-store-self-join": ("join", "stream",
                               [_join("stream_join", "inner", "pair",
                                      windows={"diff": 100, "grace": 20, "before": None, "after": None},
                                      store=False, other={"source": "self", "ops": []})],
                               [["k", "a", 10], ["k", "b", 50], ["k", "c", 5], ["j", "x", 200], ["k", "d", 300],
                                ["k", "e", 120], [None, "n", 130], ["k", None, 140], ["k", "f", 400],
                                ["k", "late", 150], ["k", "g", 330]],
                               NO_CACHE, {"topology_optimization": OPTIMIZATIONS}),
    # ... whose joiner fails on a record's own pair (log_and_continue): Kafka's self-join joins the
    # record with itself before its stream time moves, so the failed record at 404 leaves it
    # unmoved and "b" at 225 is not past the retention (Eddy moved it first and dropped the
    # pair); seed 593,500
    "self-join-own-pair-fails-before-stream-time-moves": ("join", "stream",
                                                          [_join("stream_join", "inner", "fails_both_or_none",
                                                                 windows={"diff": 50, "grace": 50, "before": None,
                                                                          "after": None},
                                                                 store=False, other={"source": "self", "ops": []})],
                                                          [["c", "cab d", 404], ["a", "b", 225]], 0,
                                                          {"topology_optimization": "all",
                                                           "processing_handler": "log_and_continue"}),
    # ... with asymmetric windows (before 30, after 80) and a self-join after a key change
    "single-store-self-join-asymmetric": ("join", "stream",
                                          [{"op": "select_key", "fn": "key_upper"},
                                           _join("stream_join", "inner", "pair",
                                                 windows={"diff": 100, "grace": None, "before": 30, "after": 80},
                                                 store=False, other={"source": "self", "ops": []})],
                                          [["b", "abc", 100], ["b", "ba", 140], ["b", "q", 60], ["b", "r", 210],
                                           ["a", "s", 215], ["b", "t", 150]],
                                          CACHE, {"topology_optimization": OPTIMIZATIONS}),
    # ... after a key change under a join name (StreamJoined.withName): the two sides get two
    # repartitions (Kafka reuses one only for an unnamed join), which merge.repartition.topics
    # makes one before single.store.self.join is decided; seed 346,852
    "named-self-join-after-merged-repartitions": ("join", "stream",
                                                  [{"op": "map", "fn": "swap"},
                                                   _join("stream_join", "inner", "pair",
                                                         windows={"diff": 50, "grace": None, "before": None,
                                                                  "after": 200},
                                                         store=False, other={"source": "self", "ops": []})],
                                                  [["a", "b", 100], ["c", "b", 120], ["b", "d", 90], ["a", "b", 400]],
                                                  NO_CACHE, {"topology_optimization": OPTIMIZATIONS,
                                                             "join_names": True}),
    # in memory, Kafka's DSL window and session stores are its InMemoryWindowStore and
    # InMemorySessionStore whatever the emit strategy: final results are scanned from the plain
    # store's retention. c@1423's put (start 1400) leaves [1300,1400) behind it (retention 100):
    # never emitted (on RocksDB it is)
    "in-memory-final-results-past-retention": ("windowed", "stream",
                                               [{"op": "group_by", "fn": "key_upper"},
                                                _windowed("tumbling", "aggregate", "concat", "close", size=100,
                                                          advance=100)],
                                               [["c", "cab ab", 1392], ["c", "bb ab", 1423]], NO_CACHE,
                                               {"store_type": IN_MEMORY}),
    # ... sliding windows (retention 2 * 100): bb@2000's left window (start 1900) leaves the
    # right window [1700,1800] of bb@1699 behind the retention as it closes
    "in-memory-sliding-final-results-past-retention": ("windowed", "stream",
                                                       [{"op": "group_by", "fn": "value"},
                                                        _windowed("sliding", "aggregate", "concat", "close", size=100)],
                                                       [["c", "bb", 1699], ["a", "bb", 1707],
                                                        ["a", "ba cab abc", 2000]], NO_CACHE,
                                                       {"store_type": IN_MEMORY}),
    # ... sessions (retention gap 300): B@478 leaves C's [0,0] behind it as it closes
    "in-memory-session-final-results-past-retention": ("windowed", "stream",
                                                       [{"op": "group_by", "fn": "key_upper"},
                                                        _windowed("session", "count", None, "close", gap=300)],
                                                       [["c", "ab ab", 0], ["b", None, 478]], NO_CACHE,
                                                       {"store_type": IN_MEMORY}),
    # uncached, a new key's stream aggregate forwards the initializer's value as its old value
    # (Kafka's KStreamAggregate): regrouped, "" (the swapped initializer) gets a subtraction from
    # no aggregate, a tombstone
    "aggregate-initializer-old-value": ("aggregate", "stream",
                                        [_GROUP_BY_KEY, {"op": "aggregate", "fn": "concat"},
                                         {"op": "table_aggregate", "by": "swap", "agg": "count", "fn": None}],
                                        [["dd", "ba b ab", 0]], NO_CACHE),
    # ... and a byte-bounded suppression counts its bytes: b's count (1, old 0) is 50 bytes, so
    # with c's the buffer is over 100 and b is emitted early
    "aggregate-initializer-old-value-bytes": ("aggregate", "stream",
                                              [{"op": "merge", "fn": None}, _GROUP_BY_KEY,
                                               {"op": "count", "fn": None},
                                               {"op": "suppress", "until": "time_limit", "limit": 400,
                                                "max_records": None, "max_bytes": 100}],
                                              [["b", "bb bb", 1900], ["c", "d d bb", 1900, INPUT2]], NO_CACHE),
    # a buffered update whose old value equals its prior value (another array) counts it once
    # (Kafka's BufferValue dedups by content): c's second "d cab bb" fits, nothing more is emitted
    "suppress-bytes-old-equal-to-prior": ("aggregate", "stream",
                                          [{"op": "flat_map_values", "fn": "twice"}, _GROUP_BY_KEY,
                                           {"op": "reduce", "fn": "max"},
                                           {"op": "suppress", "until": "time_limit", "limit": 400,
                                            "max_records": None, "max_bytes": 100}],
                                          [["c", "d cab bb", 2399], ["a", "d b d", 2446], ["dd", "ab b ab", 2117],
                                           ["dd", "d", 2599], ["c", "a cab b", 2599]], NO_CACHE),
    # an operator below two merges of one topic is reached by a fused chain and by its parent's
    # node path: one stage per task all the same, so a final result is emitted once (seed 2168)
    "double-merge-final-results-once": ("windowed", "stream",
                                        [{"op": "merge", "fn": None}, {"op": "merge", "fn": None}, _GROUP_BY_KEY,
                                         _windowed("hopping", "aggregate", "sum_of_lengths", "close", size=200,
                                                   advance=100, grace=100)],
                                        [["b", "d ab ba", 1300], ["a", "ba", 1500, INPUT2]], NO_CACHE),
    # a suppression emits in the buffered update's record context, not in the releasing record's:
    # a topic name extractor below tells input2's windows from input's (seed 6056)
    "suppress-emits-in-the-buffered-context": ("windowed", "stream",
                                               [{"op": "merge", "fn": None}, _GROUP_BY_KEY,
                                                _windowed("sliding", "reduce", "max", size=500, grace=0),
                                                {"op": "suppress", "until": "window_close"}],
                                               [["b", "ba b ab", 1552, INPUT2], ["b", "ba a", 2000, INPUT2],
                                                ["a", "a ab bb", 2083]], NO_CACHE,
                                               {"output_extractor": "other_topics_apart"}),
    # an uncached session aggregation forwards its updates (and merged sessions' tombstones) as
    # new records, without the headers of the record being processed (seeds 506, 818, ...)
    "session-updates-carry-no-headers": ("windowed", "stream",
                                         [_GROUP_BY_KEY, _windowed("session", gap=50)],
                                         [["a", "x", 0], ["a", "y", 20], ["a", "z", 200]], NO_CACHE,
                                         {"headers": True}),
    # a key change before to_table repartitions through KSTREAM-TOTABLE-<n>-repartition (named
    # after the processor, not the store): the topic's length is in the record context a
    # byte-bounded suppression sizes its buffer with, so it decides which updates are emitted
    # early (seeds 48018, 48019)
    "to-table-repartition-named-after-its-processor": ("table", "stream",
                                                       [{"op": "flat_map", "fn": "words_as_keys"}, {"op": "to_table"},
                                                        {"op": "suppress", "until": "time_limit", "limit": 400,
                                                         "max_records": None, "max_bytes": 200}],
                                                       [["dd", "d ba bb", 0], [None, "ab d", 399],
                                                        [None, "b bb", 586], ["b", "cab ab", 370]], NO_CACHE),
    # merge.repartition.topics walks through a join with a global table (Kafka flags it neither
    # key- nor value-changing): the stream join's repartition comes right after the key change,
    # the global join below it (seed 58570: describe() differed)
    "optimized-repartition-above-a-global-join": ("join", "stream",
                                                  [{"op": "map", "fn": "by_first_char"},
                                                   {"op": "global_join", "type": "inner", "joiner": "pair",
                                                    "key_selector": "first_char", "store": True},
                                                   _join("stream_join", "outer", "pair", store=False,
                                                         windows={"diff": 300, "grace": 50, "before": None,
                                                                  "after": 0},
                                                         other={"source": "stream", "topic": "right3",
                                                                "source_store": True,
                                                                "ops": [{"op": "map_values", "fn": "upper"}]})],
                                                  [["a", "d b", 1000, "global"], ["c", "d ab", 1100],
                                                   ["b", "ab b", 1150, "right3"], ["d", "x", 1200, "right3"]],
                                                  NO_CACHE, {"topology_optimization": "all"}),
    # a merge below a key change takes its repartition over (Kafka's
    # maybeUpdateKeyChangingRepartitionNodeMap): the rewritten repartition, its nodes named after
    # the topic, comes right after the merge (seed 59446: describe() differed)
    "optimized-repartition-after-a-merge": ("table", "stream",
                                            [{"op": "select_key", "fn": "key_upper"}, {"op": "merge", "fn": None},
                                             {"op": "to_table"}],
                                            [["a", "a", 372], ["b", "b a", 100], ["c", "bb", 400, INPUT2],
                                             ["a", None, 974]], NO_CACHE, {"topology_optimization": "all"}),
    # a table join's value getter gives no result when the joiner returns None
    # (ValueAndTimestamp.make): the foreign-key join reading it sends no response for a
    # PROPAGATE_ONLY_IF_FK_VAL_AVAILABLE subscription
    "fk-join-over-join-getter-none": ("join", "stream",
                                      [_GROUP_BY_KEY, {"op": "reduce", "fn": "max"},
                                       _join("fk_join", "inner", "both_or_none", extractor="first_char", store=True,
                                             other={"source": "table", "topic": RIGHT, "source_store": False,
                                                    "ops": [_join("table_join", "outer", "both_or_none", store=False,
                                                                  other={"source": "table", "topic": "right2",
                                                                         "source_store": True, "ops": []})]})],
                                      [["a", "d b", 99], ["d", "d ab ba", 99, RIGHT], ["a", "bb cab cab", 99]],
                                      NO_CACHE),
    # a cache entry costs what Kafka counts (key, value, 45, the record context's topic and
    # headers; a window store's cache key carries the 8-byte segment id): with a cache of a few
    # entries that decides which windows are evicted (and emitted) before the next record
    "small-cache-window-entry-size": ("windowed", "stream",
                                      [{"op": "group_by", "fn": "first_char"},
                                       _windowed("hopping", emit="close", size=100, advance=50, grace=300)],
                                      [[None, "ab abc ab", 0], ["a", "ab ab", 471]], 200),
    "small-cache-window-aggregate-entry-size": ("windowed", "stream",
                                                [{"op": "flat_map", "fn": "words_as_keys"}, _GROUP_BY_KEY,
                                                 _windowed("hopping", "aggregate", "concat", "close", size=500,
                                                           advance=125, grace=100)],
                                                [["a", "b abc a", 249], ["c", "a bb", 728]], 200,
                                                {"topology_optimization": "all", "store_type": IN_MEMORY}),
    # Kafka's ThreadCache adds a named cache's size change after an eviction's flush: while the
    # evicted entry's flush forwards, downstream caches still see it counted (here the join's
    # merged table then evicts the filtered table's entry: the foreign-key join answers twice)
    "evicted-entry-counts-during-its-flush": ("join", "table",
                                              [_join("fk_join", "left", "pair", extractor="first_word", store=True,
                                                     other={"source": "table", "topic": RIGHT, "source_store": True,
                                                            "ops": [_join("table_join", "left", "both_or_none",
                                                                          store=True,
                                                                          other={"source": "self", "ops": [
                                                                              {"op": "table_filter",
                                                                               "fn": "key_present",
                                                                               "store": True}]}),
                                                                    {"op": "table_filter_not",
                                                                     "fn": "value_is_short", "store": True}]})],
                                              [["cab", "ab a", 0, RIGHT], ["b", "a ba", 0], ["a", "bb ba ab", 0, RIGHT]],
                                              330, {"source_store": False}),
    # Kafka's cache range reads make each cached entry they pass the most recently used: a
    # session aggregation's findSessions on an in-memory store passes the sessions of every key
    # ending after the earliest end (its cache keys lead with the session end), so here dd's
    # find saves a's session from eviction and evicts dd's own: a's last record merges into it
    "session-find-reorders-lru-in-memory": ("cogroup", "stream",
                                            [_GROUP_BY_KEY, {"op": "cogroup", "fn": "tagged_concat",
                                                             "other": {"ops": [{"op": "group_by", "fn": "first_char"}]},
                                                             "windows": {"type": "session", "gap": 100, "grace": 300}}],
                                            [["dd", "ab ba b", 4600], ["c", "a abc", 4169, INPUT2],
                                             ["dd", "abc b", 4254], ["b", "bb", 4254],
                                             ["a", "cab b ab", 4254, INPUT2], ["a", "ba", 4254]],
                                            420, {"store_type": IN_MEMORY, "headers": True}),
    # ... and on a RocksDB store, segment by segment, the key's own sessions: b's late record
    # finds session [1400] still cached (its reads kept it), as Kafka
    "session-find-reorders-lru-rocksdb": ("cogroup", "stream",
                                          [_GROUP_BY_KEY, {"op": "cogroup", "fn": "tagged_concat",
                                                           "other": {"ops": [_GROUP_BY_KEY]},
                                                           "windows": {"type": "session", "gap": 100, "grace": None}}],
                                          [["b", None, 1400, INPUT2], ["b", "ab a d", 1292],
                                           ["b", "d bb", 1292, INPUT2], ["c", "abc", 1292], ["c", "d b", 1677],
                                           ["b", "d ab", 1677], ["b", "ab d", 2110],
                                           ["b", "abc abc ba", 1399, INPUT2]], 408),
    # a sliding window aggregation writes while its fetch is open (Kafka's processReverse): the
    # window it updates becomes the most recent before the fetch reads the next cached window
    # (here dd's: an in-memory store's range of key a spans every key's windows from segment 0),
    # so the right window's put evicts a's window, not dd's
    "sliding-window-writes-during-its-fetch": ("windowed", "stream",
                                               [{"op": "flat_map_values", "fn": "twice"}, _GROUP_BY_KEY,
                                                _windowed("sliding", "aggregate", "sum_of_lengths", size=500)],
                                               [["dd", "cab a b", 1307], ["a", "abc", 1500], ["a", "ba ab ba", 1456]],
                                               212, {"store_type": IN_MEMORY}),
    # ... and reads each window of the key as it reaches it: on an in-memory store (Kafka's
    # iterator opens a window start's map when it gets there) the update of c's window
    # [952, 1452] evicts [794, 1294], whose write-down the fetch then reads, as the third update
    # of the record (input2's, the merge passing it twice) shows; seed 515,623
    "sliding-window-reads-a-window-written-down-during-its-fetch": ("cogroup", "stream", _SLIDING_COGROUP,
                                                                     _SLIDING_COGROUP_RECORDS, 200,
                                                                     {"store_type": IN_MEMORY, "headers": True,
                                                                      "windowed_keys": True}),
    # ... which a RocksDB store's iterator does not see (it reads the store as it was when opened,
    # Kafka's too): the third update starts from the window's value before the second
    "sliding-window-misses-a-window-written-down-during-its-fetch-rocksdb": (
        "cogroup", "stream", _SLIDING_COGROUP, _SLIDING_COGROUP_RECORDS, 200, {"headers": True, "windowed_keys": True}),
    # an emit-on-close window store's cache keys start with the time-first schema's byte (Kafka's
    # PrefixedWindowKeySchemas), one more than a window store's: a's two windows (90 bytes each)
    # overflow 179 bytes, the flush writes dd's windows to the time-ordered RocksDB store and a's
    # windows move its stream time past their retention, so nothing is emitted on close
    "time-ordered-cache-key-prefix": ("windowed", "stream",
                                      [_GROUP_BY_KEY, _windowed("hopping", "aggregate", "concat", "close",
                                                                size=500, advance=250, grace=50)],
                                      [["dd", "a", 4582], ["a", "abc ab ab", 5402]], 179),
    # Kafka's KStreamJoinWindow puts a null value into its side's store too: an in-memory store
    # (the app's dsl.store.suppliers.class) observes its time and expires a's record, which the
    # store then no longer holds (a RocksDB store skips that put); seed 227,366
    "join-null-value-moves-an-in-memory-stores-time": ("join", "stream",
                                                       [_stream_join("inner", "both_or_none", store=True, diff=50,
                                                                     before=200)],
                                                       [["a", "b ab ab", 1460, "right"], ["A", "d b b", 1707, "right"],
                                                        ["c", None, 1914, "right"], ["a", "cab ba d", 1989]],
                                                       0, {"dsl_store": "app"}),
    # Kafka's KStreamJoinWindow forwards a record to its join, then stores it: a joiner failing
    # while the join emits a held record whose window closed (the processing handler continuing)
    # leaves b's record stored all the same; seed 338
    "join-window-put-after-a-failed-join": ("join", "stream",
                                            [_stream_join("outer", "fails_both_or_none", store=True, grace=50,
                                                          after=50)],
                                            [["c", "d ba cab", 600, "right"], ["b", "bb cab d", 800]], 0,
                                            {"processing_handler": "log_and_continue"}),
    # Kafka's emitNonJoinedOuterRecords stops at a failing joiner with its min-time hint at the
    # failing record, so every later scan fails there again: b's "bb" is never emitted (both
    # copies stored); seed 2,068
    "join-emission-stops-at-a-failing-held-record": ("join", "stream",
                                                     [{"op": "flat_map_values", "fn": "fails_twice"},
                                                      _stream_join("outer", "fails_pair", store=True, diff=50,
                                                                   after=50)],
                                                     [["a", "a ab", 200], ["b", "abc a cab", 173, "right"],
                                                      ["b", "bb", 250], ["b", "b d", 215],
                                                      ["A", "abc bb b", 312, "right"]], 0,
                                                     {"topology_optimization": OPTIMIZATIONS,
                                                      "processing_handler": "log_and_continue"}),
    # Kafka's driver shares its one cache between the global task and the stream task: the
    # global table's entries (cached, as Kafka's globalTable is) take room from the count's
    # cache, which then evicts between a record's two updates of a key (Eddy's global stores
    # were uncached: one emission per key instead of two)
    "global-store-entries-share-the-drivers-cache": ("aggregate", "stream",
                              [{"op": "global_join", "type": "left", "joiner": "pair", "key_selector": "first_char",
                                "store": True},
                               {"op": "flat_map_values", "fn": "words"}, _GROUP_BY_KEY, {"op": "count", "fn": None}],
                              [["a", "xxxxxxxxxxxxxxxxxxxx", 0, "global"], ["b", "yyyyyyyyyyyyyyyyyyyyyy", 1, "global"],
                               ["c", "zzzzzzzzzzzzzzzzzzzzzzzzzz", 2, "global"],
                               ["a", "d b", 1010], ["b", "d b e", 1111], ["c", "e e", 1212], ["a", "f", 1313]], 260),
    # Kafka's driver shows each processed record's output once it is processed: "a cab" is
    # repartitioned into a and cab, a is counted and written out, then the reducer fails on cab
    # (log_and_fail); a's output shows, cab's does not (Eddy's harness used to cut all that the
    # input record caused); seed 337,760
    "fail-after-a-repartitioned-record-went-through": ("windowed", "stream",
                                                        [{"op": "flat_map_values", "fn": "words"},
                                                         {"op": "select_key", "fn": "value"}, _GROUP_BY_KEY,
                                                         _windowed("tumbling", "reduce", "fails_max", size=1000,
                                                                   advance=1000, grace=0)],
                                                        [["dd", "cab", 0], [None, "a cab", 0]], 0,
                                                        {"processing_handler": "log_and_fail"}),
}


def _scenario(seed: int, case: tuple) -> dict:
    family, source, ops, records, cache, *extra = case
    return {"seed": seed, "family": family, "source": source, "ops": ops, "cache_max_bytes": cache,
            "records": records, **(extra[0] if extra else {})}


SCENARIOS: dict[str, dict] = {name: _scenario(FIRST_SEED + i, case) for i, (name, case) in enumerate(sorted(_CASES.items()))}
