"""topology.optimization single.store.self.join (Kafka's rewriteSingleStoreSelfJoin and
KStreamKStreamSelfJoin): an inner join of a stream with itself runs over one window store, with the
two-store join's results in its order. Against Kafka Streams itself: the single-store-self-join
scenarios of tests/conformance/regressions.py."""

from __future__ import annotations

import random

import pytest

from streams import JoinWindows, StreamsBuilder, serdes
from streams.testing import TopologyTestDriver

S = serdes.STRING
SELF_JOIN = {"topology.optimization": "single.store.self.join"}


def _self_join(op: str = "join", windows=None, other=lambda s: s) -> StreamsBuilder:
    b = StreamsBuilder()
    s = b.stream("in", key_serde=S, value_serde=S)
    windows = windows or JoinWindows.of_time_difference_and_grace(100, 20)
    getattr(s, op)(other(s), lambda a, c: f"{a}+{c}", windows).to("out", key_serde=S, value_serde=S)
    return b


def _run(topology, records) -> tuple[list, int]:
    with TopologyTestDriver(topology, {"statestore.cache.max.bytes": 0}) as driver:
        inp = driver.create_input_topic("in", S, S)
        for key, value, ts in records:
            inp.pipe_input(key, value, timestamp=ts)
        out = [(r.key, r.value, r.timestamp) for r in driver.create_output_topic("out", S, S).read_records_to_list()]
        dropped = sum(m.value for m in driver.metrics() if m.name == "dropped-records-total")
    return out, dropped


def test_the_self_join_has_one_store_and_the_two_store_joins_results():
    b = _self_join()
    plain, optimized = b.build(), b.build(SELF_JOIN)
    assert optimized.store_names == ["KSTREAM-JOINTHIS-0000000003-store"]
    assert len(plain.store_names) == 2
    # Kafka's shape: the windowed node, then the self-join under the merge node's name
    assert optimized.children("KSTREAM-WINDOWED-0000000001") == ["KSTREAM-MERGE-0000000005"]
    records = [("k", "a", 10), ("k", "b", 50), ("k", "c", 5), ("j", "x", 200), ("k", "d", 300)]
    got, _ = _run(optimized, records)
    # by hand: each record joins the stored ones within 100 ms both ways, then itself (its own
    # pair goes before the stored records' pairs with a later timestamp)
    assert got == [("k", "a+a", 10),
                   ("k", "b+a", 50), ("k", "a+b", 50), ("k", "b+b", 50),
                   ("k", "c+a", 10), ("k", "c+b", 50), ("k", "c+c", 5), ("k", "a+c", 10), ("k", "b+c", 50),
                   ("j", "x+x", 200), ("k", "d+d", 300)]
    assert got == _run(plain, records)[0]


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("before,after,grace", [(100, 100, 20), (30, 80, 0), (0, 50, 200)])
def test_random_inputs_give_the_two_store_joins_results(seed, before, after, grace):
    rng = random.Random(seed)
    windows = JoinWindows.of_time_difference_and_grace(max(before, after), grace)
    if before != after:
        windows = windows.before(before).after(after)
    b = _self_join(windows=windows)
    records, t = [], 1000
    for i in range(150):
        t += rng.randint(0, 40)
        ts = t - (rng.randint(0, 400) if rng.random() < 0.2 else 0)  # out of order, some past retention
        key = None if rng.random() < 0.02 else rng.choice("abc")
        records.append((key, None if rng.random() < 0.02 else f"v{i}", ts))
    got, dropped = _run(b.build(SELF_JOIN), records)
    plain, plain_dropped = _run(b.build(), records)
    assert got == plain
    assert len(got) > len(records)
    nulls = sum(1 for k, v, _ in records if k is None or v is None)
    # a null record is skipped once here, once by each side of the two-store join; records past
    # the store's retention are counted once each way
    assert plain_dropped - dropped == nulls


@pytest.mark.parametrize("op", ["left_join", "outer_join"])
def test_left_and_outer_self_joins_keep_both_stores(op):
    """Their unmatched and None-key results are not the self-join processor's."""
    b = _self_join(op)
    assert str(b.build(SELF_JOIN).describe()) == str(b.build().describe())


def test_a_join_with_a_different_stream_keeps_both_stores():
    b = _self_join(other=lambda s: s.filter(lambda k, v: True))
    assert len(b.build(SELF_JOIN).store_names) == 2
    assert len(b.build({"topology.optimization": "all"}).store_names) == 2
