"""Topic and partition names (Kafka's Topic.validate rules) and partition directory names."""

from __future__ import annotations

import logging
import os

import pytest

from replication.errors import InvalidPartitionError, InvalidTopicError, ReplicationError
from replication.names import (
    MAX_TOPIC_NAME_LENGTH, has_collision, has_collision_chars, is_internal_topic,
    is_valid_topic_name, parse_partition_dir_name, partition_dir_name, unify_collision_chars,
    validate_partition, validate_topic_name, warn_if_collision_prone,
)


@pytest.mark.parametrize("name", [
    "valid", "TOPIC", "nAmEs", "ar6", "VaL1d", "_0-9_.", "...", "a.b-c_d", "__consumer_offsets",
    "-", "a" * MAX_TOPIC_NAME_LENGTH,
])
def test_valid_names(name):
    assert validate_topic_name(name) == name
    assert is_valid_topic_name(name)


@pytest.mark.parametrize("name,fragment", [
    ("", "empty"),
    (".", "'.' or '..'"),
    ("..", "'.' or '..'"),
    ("a" * (MAX_TOPIC_NAME_LENGTH + 1), "250 characters"),
    ("../x", "'/'"),
    ("a/b", "'/'"),
    ("/etc", "'/'"),
    ("a\\b", "'\\\\'"),
    ("x y", "' '"),
    ("tab\t", "'\\t'"),
    ("new\nline", "'\\n'"),
    ("nul\x00", "'\\x00'"),
    ("topic:1", "':'"),
    ("star*", "'*'"),
    ("caf\u00e9", "'\u00e9'"),
    ("\u0663", "'\u0663'"),          # an Arabic-Indic digit: str.isalnum() would accept it
    ("\uff41bc", "'\uff41'"),        # fullwidth 'a'
    ("ends\n", "'\\n'"),             # regex '$' would accept a trailing newline
])
def test_invalid_names_raise_naming_topic_and_reason(name, fragment):
    with pytest.raises(InvalidTopicError) as ei:
        validate_topic_name(name)
    msg = str(ei.value)
    assert isinstance(ei.value, ReplicationError)
    assert fragment in msg
    if name and len(name) <= 40:
        assert repr(name) in msg
    assert not is_valid_topic_name(name)


@pytest.mark.parametrize("bad", [None, 5, b"topic", ["a"]])
def test_non_string_topic(bad):
    with pytest.raises(InvalidTopicError, match="must be a str"):
        validate_topic_name(bad)


def test_valid_name_cannot_escape_a_directory(tmp_path):
    for name in ["...", "a..b", "-", "_"]:
        d = partition_dir_name(name, 0)
        full = os.path.realpath(os.path.join(tmp_path, d))
        assert os.path.dirname(full) == os.path.realpath(tmp_path)


def test_collision_helpers(caplog):
    assert has_collision_chars("a.b") and has_collision_chars("a_b")
    assert not has_collision_chars("a-b")
    assert unify_collision_chars("a.b_c") == "a_b_c"
    assert has_collision("a.b", "a_b")
    assert not has_collision("a.b", "a-b")
    with caplog.at_level(logging.WARNING, logger="replication.names"):
        assert warn_if_collision_prone("metrics.topic") is True
        assert warn_if_collision_prone("plain-topic") is False
    assert any("metrics.topic" in r.getMessage() for r in caplog.records)
    assert not any("plain-topic" in r.getMessage() for r in caplog.records)


def test_collision_with_existing_topic_raises():
    with pytest.raises(InvalidTopicError, match="collides with existing topic 'a_b'"):
        warn_if_collision_prone("a.b", existing=["x", "a_b"])
    # the same name is not a collision with itself
    assert warn_if_collision_prone("a.b", existing=["a.b"]) is True


def test_internal_topics():
    assert is_internal_topic("__consumer_offsets")
    assert is_internal_topic("__transaction_state")
    assert not is_internal_topic("orders")


@pytest.mark.parametrize("p", [0, 1, 2**31 - 1])
def test_valid_partitions(p):
    assert validate_partition(p) == p


@pytest.mark.parametrize("p,fragment", [
    (-1, "out of range"), (2**31, "out of range"), (True, "must be an int"),
    ("0", "must be an int"), (1.0, "must be an int"), (None, "must be an int"),
])
def test_invalid_partitions(p, fragment):
    with pytest.raises(InvalidPartitionError) as ei:
        validate_partition(p)
    assert fragment in str(ei.value)
    assert isinstance(ei.value, ReplicationError)


@pytest.mark.parametrize("topic,partition", [
    ("orders", 0), ("my-topic", 12), ("a-1", 3), ("-", 0), ("x.y_z", 2**31 - 1),
    ("app-store-changelog", 7),
])
def test_partition_dir_name_round_trip(topic, partition):
    d = partition_dir_name(topic, partition)
    assert d == f"{topic}-{partition}"
    assert parse_partition_dir_name(d) == (topic, partition)


def test_partition_dir_name_validates_both_parts():
    with pytest.raises(InvalidTopicError):
        partition_dir_name("../x", 0)
    with pytest.raises(InvalidPartitionError):
        partition_dir_name("x", -1)


def test_partition_dir_name_respects_file_name_limit():
    assert len(partition_dir_name("a" * 249, 99999)) == 255
    with pytest.raises(InvalidTopicError, match="file system limit"):
        partition_dir_name("a" * 249, 100000)


@pytest.mark.parametrize("dirname,error,fragment", [
    ("orders", InvalidPartitionError, "<topic>-<partition>"),
    ("-0", InvalidPartitionError, "<topic>-<partition>"),
    ("orders-", InvalidPartitionError, "not a non-negative integer"),
    ("orders-x", InvalidPartitionError, "not a non-negative integer"),
    ("orders-01", InvalidPartitionError, "not a non-negative integer"),
    ("orders-+1", InvalidPartitionError, "not a non-negative integer"),
    ("orders-\u0663", InvalidPartitionError, "not a non-negative integer"),
    ("orders-0.abc-delete", InvalidPartitionError, "not a non-negative integer"),
    ("orders-99999999999", InvalidPartitionError, "out of range"),
    ("a/b-0", InvalidTopicError, "illegal topic"),
    ("..-0", InvalidTopicError, "illegal topic"),
])
def test_parse_bad_dir_names(dirname, error, fragment):
    with pytest.raises(error) as ei:
        parse_partition_dir_name(dirname)
    assert fragment in str(ei.value)
