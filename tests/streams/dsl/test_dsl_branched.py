"""Branched value objects and the branch-map rules of KStream.split (Kafka's BranchedKStream)."""

import pytest

from streams.dsl.branched import Branched, branch_name
from streams.errors import TopologyError


def test_names():
    assert branch_name("s-", "a", 1) == "s-a"
    assert branch_name("s-", None, 2) == "s-2"
    assert branch_name("s-", None, 0) == "s-0"  # unnamed default branch
    # an unnamed split's keys start with its generated name (Kafka's getBranchChildName)
    assert branch_name("KSTREAM-BRANCH-0000000001", "x", 3) == "KSTREAM-BRANCH-0000000001x"


def test_plain_branch_goes_in_the_map():
    out = {}
    Branched.as_("a").add_to(out, "split-", 1, "stream-a")
    Branched().add_to(out, "split-", 2, "stream-2")
    assert out == {"split-a": "stream-a", "split-2": "stream-2"}


def test_function_result_replaces_branch_and_none_is_left_out():
    out = {}
    Branched.with_function(lambda s: s + "-mapped", "f").add_to(out, "", 1, "s")
    Branched.with_function(lambda s: None).add_to(out, "", 2, "t")
    assert out == {"f": "s-mapped"}


def test_consumer_gets_the_branch_and_it_is_left_out():
    seen = []
    out = {}
    Branched.with_consumer(seen.append, "c").add_to(out, "", 1, "s")
    assert seen == ["s"] and out == {}


def test_duplicate_branch_name_rejected():
    out = {}
    Branched.as_("a").add_to(out, "", 1, "s")
    with pytest.raises(TopologyError, match="'a'"):
        Branched.as_("a").add_to(out, "", 2, "t")


@pytest.mark.parametrize("call", [
    lambda: Branched.as_(None),
    lambda: Branched.as_(""),
    lambda: Branched.with_function(None),
    lambda: Branched.with_consumer(42),
    lambda: Branched("x", chain_function=print, chain_consumer=print),
])
def test_bad_arguments(call):
    with pytest.raises(TopologyError):
        call()


def test_immutable_and_equal():
    b = Branched.as_("a")
    assert b == Branched.as_("a") and b != Branched.as_("b")
    with pytest.raises(AttributeError):
        b.name = "z"
