"""Co-partitioning of joined inputs, as Kafka's CopartitionedTopicsEnforcer decides it."""

import pytest

from streams.runtime.copartitioning import check_copartitioned, enforce_copartitioning
from streams.runtime.errors import CoPartitioningError, MissingSourceTopicError


def test_same_counts_pass_and_repartition_topics_take_them():
    assert check_copartitioned({"clicks": 4, "profiles": 4}) == 4
    assert enforce_copartitioning(["clicks", "profiles", "app-rekey-repartition"],
                                  partition_counts={"clicks": 4, "profiles": 4},
                                  repartition_topics={"app-rekey-repartition": 12}) == {"app-rekey-repartition": 4}


def test_different_counts_name_topics_and_counts():
    with pytest.raises(CoPartitioningError, match=r"Topics not co-partitioned: \[orders=3, payments=2\]") as info:
        enforce_copartitioning(["payments", "orders"], partition_counts={"orders": 3, "payments": 2},
                               repartition_topics={})
    assert info.value.partition_counts == {"orders": 3, "payments": 2}


def test_only_repartition_topics_take_the_largest_count():
    got = enforce_copartitioning(["a-repartition", "b-repartition"], partition_counts={},
                                 repartition_topics={"a-repartition": 2, "b-repartition": 6})
    assert got == {"a-repartition": 6, "b-repartition": 6}


def test_enforced_repartition_counts_win_and_must_agree():
    got = enforce_copartitioning(["a-repartition", "b-repartition"], partition_counts={},
                                 repartition_topics={"a-repartition": 3, "b-repartition": 8},
                                 enforced={"a-repartition"})
    assert got == {"a-repartition": 3, "b-repartition": 3}
    with pytest.raises(CoPartitioningError, match=r"a-repartition=3, b-repartition=5"):
        enforce_copartitioning(["a-repartition", "b-repartition"], partition_counts={},
                               repartition_topics={"a-repartition": 3, "b-repartition": 5},
                               enforced={"a-repartition", "b-repartition"})


def test_enforced_repartition_count_must_match_the_source_topics():
    with pytest.raises(CoPartitioningError, match=r"Number of partitions \[2\] of repartition topic \[r\]"):
        enforce_copartitioning(["s", "r"], partition_counts={"s": 4}, repartition_topics={"r": 2}, enforced={"r"})


def test_of_several_mismatched_repartition_topics_the_first_by_name_is_named():
    """Every run names the same topic (the group is a set; its topics are taken in name order)."""
    for group in (["s", "r-b", "r-a", "r-c"], ["r-c", "r-a", "s", "r-b"]):
        with pytest.raises(CoPartitioningError, match=r"repartition topic \[r-a\]"):
            enforce_copartitioning(group, partition_counts={"s": 4},
                                   repartition_topics={"r-a": 2, "r-b": 3, "r-c": 1}, enforced={"r-a", "r-b", "r-c"})


def test_missing_topic_and_unknown_counts_are_named():
    with pytest.raises(MissingSourceTopicError, match="Topic not found: gone"):
        enforce_copartitioning(["gone"], partition_counts={}, repartition_topics={})
    with pytest.raises(CoPartitioningError, match="Could not validate"):
        enforce_copartitioning(["r"], partition_counts={}, repartition_topics={"r": None})
    assert enforce_copartitioning([], partition_counts={}, repartition_topics={}) == {}
