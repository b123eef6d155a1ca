import logging
import os

import pytest
from confluent_kafka import TopicPartition

from state.checkpoint import OFFSET_UNKNOWN, OffsetCheckpoint
from state.errors import CheckpointError


@pytest.fixture
def cp(tmp_path):
    return OffsetCheckpoint(tmp_path / ".checkpoint")


def write_raw(cp, data):
    cp.path.write_bytes(data if isinstance(data, bytes) else data.encode())


def test_missing_file_reads_empty(cp):
    assert cp.read() == {}


def test_round_trip(cp):
    offsets = {
        TopicPartition("app-store-changelog", 3): 41234,
        TopicPartition("app-win-changelog", 3): OFFSET_UNKNOWN,
        TopicPartition("app-store-changelog", 0): 0,
    }
    cp.write(offsets)
    assert cp.read() == offsets
    assert cp.read()[TopicPartition("app-win-changelog", 3)] == -4


def test_exact_kafka_format(cp):
    cp.write({TopicPartition("b-changelog", 1): 7, TopicPartition("a-changelog", 1): 41234})
    assert cp.path.read_bytes() == b"0\n2\na-changelog 1 41234\nb-changelog 1 7\n"


def test_reads_kafka_written_file_with_extra_whitespace(cp):
    write_raw(cp, "0\r\n2\r\nt\t1  5\nu 2 -4")
    assert cp.read() == {TopicPartition("t", 1): 5, TopicPartition("u", 2): -4}


def test_tuple_keys_accepted_on_write(cp):
    cp.write({("t", 2): 9})
    assert cp.read() == {TopicPartition("t", 2): 9}


def test_empty_map_deletes_file(cp):
    cp.write({TopicPartition("t", 0): 1})
    assert cp.path.exists()
    cp.write({})
    assert not cp.path.exists()
    assert cp.read() == {}


def test_delete(cp):
    cp.delete()  # missing file is fine
    cp.write({TopicPartition("t", 0): 1})
    cp.delete()
    assert not cp.path.exists()


def test_write_rejects_negative_offsets(cp):
    for bad in (-1, -2, -5):
        with pytest.raises(CheckpointError, match=f"invalid offset {bad} for t-0"):
            cp.write({TopicPartition("t", 0): bad})
    assert not cp.path.exists()


@pytest.mark.parametrize(
    "offsets, match",
    [
        ({TopicPartition("t", 0): "5"}, "must be an int"),
        ({TopicPartition("t", 0): True}, "must be an int"),
        ({TopicPartition("bad topic", 0): 1}, "illegal topic name"),
        ({TopicPartition("../x", 0): 1}, "illegal topic name"),
        ({("t", -1): 1}, "illegal partition"),
        ({"t": 1}, "must be a TopicPartition"),
    ],
)
def test_write_rejects_bad_entries(cp, offsets, match):
    with pytest.raises(CheckpointError, match=match):
        cp.write(offsets)
    assert not cp.path.exists()


def test_failed_write_keeps_previous_file(cp):
    cp.write({TopicPartition("t", 0): 1})
    with pytest.raises(CheckpointError):
        cp.write({TopicPartition("t", 0): 2, TopicPartition("t", 1): -7})
    assert cp.read() == {TopicPartition("t", 0): 1}


def test_leftover_tmp_file_is_ignored_and_overwritten(cp):
    cp.write({TopicPartition("t", 0): 1})
    tmp = cp.path.with_name(".checkpoint.tmp")
    tmp.write_bytes(b"0\n1\nt 0 999\ngarbage-from-a-crash")
    assert cp.read() == {TopicPartition("t", 0): 1}
    cp.write({TopicPartition("t", 0): 2})
    assert cp.read() == {TopicPartition("t", 0): 2}
    assert not tmp.exists()  # the tmp file became the checkpoint


def test_leftover_tmp_without_checkpoint_reads_empty(cp):
    cp.path.with_name(".checkpoint.tmp").write_bytes(b"0\n1\nt 0 5\n")
    assert cp.read() == {}


@pytest.mark.parametrize(
    "content, match",
    [
        ("", r"file is empty"),
        ("1\n0\n", r"line 1: unknown checkpoint version 1"),
        ("-1\n0\n", r"line 1: unknown checkpoint version -1"),
        ("x\n0\n", r"line 1: bad version 'x'"),
        (" 0\n0\n", r"line 1: bad version ' 0'"),
        ("0\n", r"ended before the entry count on line 2"),
        ("0\nabc\n", r"line 2: bad entry count 'abc'"),
        ("0\n-1\n", r"line 2: negative entry count -1"),
        ("0\n99999999999999999999\n", r"line 2: bad entry count"),
        ("0\n2147483647\nt 0 1\n", r"expected 2147483647 valid entries but found 1"),
        ("0\n2\nt 0 1\n", r"expected 2 valid entries but found 1"),
        ("0\n0\nt 0 1\n", r"expected 0 valid entries but found 1"),
        ("0\n1\nt 0\n", r"line 3: malformed entry 't 0' .*got 2 fields"),
        ("0\n1\nt 0 1 2\n", r"line 3: malformed entry 't 0 1 2'"),
        ("0\n1\n t 0 1\n", r"line 3: malformed entry ' t 0 1'"),
        ("0\n2\nt 0 1\n\nt 1 1\n", r"line 4: malformed entry ''"),
        ("0\n1\nt x 1\n", r"line 3: bad partition 'x' in 't x 1'"),
        ("0\n1\nt -1 1\n", r"line 3: bad partition '-1'"),
        ("0\n1\nt 99999999999 1\n", r"line 3: bad partition '99999999999'"),
        ("0\n1\nt 0 1.5\n", r"line 3: bad offset '1.5' in 't 0 1.5'"),
        ("0\n1\nt 0 1_000\n", r"line 3: bad offset '1_000'"),
        ("0\n1\nt 0 ١٢\n", r"line 3: bad offset"),
        ("0\n1\nt 0 99999999999999999999\n", r"line 3: bad offset"),
        ("0\n2\nt 0 1\nt 0 2\n", r"line 4: duplicate entry for t-0"),
        ("0\n1\n../../etc/passwd 0 1\n", r"line 3: illegal topic name '../../etc/passwd'"),
    ],
)
def test_bad_forms_name_file_and_line(cp, content, match):
    write_raw(cp, content)
    with pytest.raises(CheckpointError, match=match) as info:
        cp.read()
    assert str(cp.path) in str(info.value)


def test_invalid_negative_offset_skipped_and_count_reduced(cp, caplog):
    write_raw(cp, "0\n2\nt 0 -1\nt 1 5\n")
    with caplog.at_level(logging.WARNING, logger="state.checkpoint"):
        assert cp.read() == {TopicPartition("t", 1): 5}
    assert "invalid offset -1 for t-0" in caplog.text
    # Without the reduction a count of 2 would now be wrong: Kafka rejects it too.
    write_raw(cp, "0\n1\nt 0 -1\nt 1 5\n")
    with pytest.raises(CheckpointError, match="expected 0 valid entries but found 1"):
        cp.read()


def test_binary_garbage(cp):
    write_raw(cp, b"\x00\xff\xfe\x80garbage\x00\n\x01")
    with pytest.raises(CheckpointError, match=r"not valid UTF-8 at byte 1"):
        cp.read()


def test_binary_but_valid_utf8_control_chars(cp):
    write_raw(cp, "0\n1\n\x00\x01 0 1\n")
    with pytest.raises(CheckpointError, match="line 3: illegal topic name"):
        cp.read()


def test_huge_file_refused(cp, monkeypatch):
    import state.checkpoint as mod

    monkeypatch.setattr(mod, "MAX_FILE_BYTES", 1024)
    write_raw(cp, "0\n1\n" + "t 0 1\n" * 400)
    with pytest.raises(CheckpointError, match="larger than 1024 bytes"):
        cp.read()


def test_many_entries_round_trip(cp):
    offsets = {TopicPartition(f"app-s{i}-changelog", i % 7): i * 1000 for i in range(2000)}
    cp.write(offsets)
    assert cp.read() == offsets


def test_checkpoint_path_is_a_directory(cp):
    os.mkdir(cp.path)
    with pytest.raises(CheckpointError, match="cannot read checkpoint"):
        cp.read()
