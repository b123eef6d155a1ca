"""The order in which the TopologyTestDriver takes the records a topology wrote to topics it
reads (streams/testing/record_order.py): Kafka's driver runs one task whose PartitionGroup keeps
a java.util.PriorityQueue of the non-empty topic queues by head timestamp. The expected orders
below are java.util.PriorityQueue's, worked through by hand (offer: sift up past larger parents
only; poll: the last element sifts down from the root, the smaller child moving up, the left one
on a tie)."""

from dataclasses import dataclass

from streams import StreamsBuilder, serdes
from streams.dsl import JoinWindows
from streams.testing import TopologyTestDriver
from streams.testing.record_order import TaskQueues

S = serdes.STRING


@dataclass
class Rec:
    topic: str
    timestamp: int
    name: str


def drain(queues):
    out = []
    while queues:
        out.append(queues.pop().name)
    return out


def test_lowest_head_timestamp_first_fifo_within_a_topic():
    q = TaskQueues()
    for rec in (Rec("a", 5, "a5"), Rec("a", 1, "a1"), Rec("b", 3, "b3"), Rec("b", 9, "b9"), Rec("c", 4, "c4")):
        q.add(rec)
    # heads a5, b3, c4: b3; then b9 is b's head: c4, a5, a1 (a FIFO: a1 waits behind a5), b9
    assert drain(q) == ["b3", "c4", "a5", "a1", "b9"]


def test_ties_take_turns_between_topics():
    # offered r then l (heap [r, l]); polling r leaves [l], r offered back behind it: [l, r]
    q = TaskQueues()
    for rec in (Rec("r", 0, "r1"), Rec("r", 0, "r2"), Rec("r", 0, "r3"), Rec("l", 0, "l1")):
        q.add(rec)
    assert drain(q) == ["r1", "l1", "r2", "r3"]


def test_three_topics_at_one_timestamp_follow_the_heap():
    # heap [a, b, c]; poll a (a1): c sifts down from the root, not larger than b -> [c, b]; a
    # offered back -> [c, b, a]; poll c (c1): a sifts down -> [a, b], c offered back -> [a, b, c];
    # poll a (a2, a now empty): -> [c, b]; poll c (c2): -> [b]; poll b (b1)
    q = TaskQueues()
    for rec in (Rec("a", 0, "a1"), Rec("a", 0, "a2"), Rec("b", 0, "b1"), Rec("c", 0, "c1"), Rec("c", 0, "c2")):
        q.add(rec)
    assert drain(q) == ["a1", "c1", "a2", "c2", "b1"]


def test_a_self_join_with_both_sides_repartitioned_interleaves_the_two_topics():
    """s = in.select_key(upper); s.join(s.flat_map_values(words), 100 ms). The other side was
    built first, so each input record writes its words to the other side's repartition topic
    before the record itself goes to this side's; all at timestamp 0, the two topics take turns.
    - "p": right p (no left yet), then left p joins right p: p+p.
    - "x y": right x joins left p: p+x; left "x y" joins right p, x: x y+p, x y+x; right y joins
      left p, "x y": p+y, x y+y. (Records in the order they came, the order of a first-in
      first-out driver, would give p+x, p+y before the left record's results.)"""
    b = StreamsBuilder()
    s = b.stream("in", key_serde=S, value_serde=S).select_key(lambda k, v: k.upper())
    s.join(s.flat_map_values(str.split), lambda left, right: f"{left}+{right}",
           JoinWindows.of_time_difference_with_no_grace(100)).to("out", key_serde=S, value_serde=S)
    config = {"application.id": "order", "default.key.serde": "string", "default.value.serde": "string"}
    with TopologyTestDriver(b.build(), config) as d:
        source = d.create_input_topic("in", S, S)
        source.pipe_input("b", "p", 0)
        source.pipe_input("b", "x y", 0)
        got = [r.value for r in d.create_output_topic("out", S, S).read_records_to_list()]
        assert got == ["p+p", "p+x", "x y+p", "x y+x", "p+y", "x y+y"]
