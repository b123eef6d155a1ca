"""Topic and partition naming, as Kafka's ``org.apache.kafka.common.internals.Topic`` does.

A valid topic name is 1..249 ASCII characters from ``[a-zA-Z0-9._-]`` and is neither ``.`` nor
``..``, so ``<topic>-<partition>`` is always a single, safe path component under a data directory.
"""

from __future__ import annotations

import logging
import re

from replication.errors import InvalidPartitionError, InvalidTopicError

log = logging.getLogger(__name__)

MAX_TOPIC_NAME_LENGTH = 249
MAX_PARTITION = 2**31 - 1  # partitions are Int32 in the protocol
MAX_DIR_NAME_LENGTH = 255  # NAME_MAX on ext4, xfs, btrfs, apfs
_LEGAL = re.compile(r"[a-zA-Z0-9._-]+")

GROUP_METADATA_TOPIC_NAME = "__consumer_offsets"
TRANSACTION_STATE_TOPIC_NAME = "__transaction_state"
INTERNAL_TOPICS = frozenset({GROUP_METADATA_TOPIC_NAME, TRANSACTION_STATE_TOPIC_NAME})


def validate_topic_name(name: object) -> str:
    """Return ``name`` if it is a legal topic name, else raise :class:`InvalidTopicError`
    naming the topic and the rule it breaks."""
    if not isinstance(name, str):
        raise InvalidTopicError(f"topic name must be a str, got {type(name).__name__} {name!r}")
    if not name:
        raise InvalidTopicError("topic name is illegal: it can't be empty")
    if name in (".", ".."):
        raise InvalidTopicError(f"topic name {name!r} is illegal: it can't be '.' or '..'")
    if len(name) > MAX_TOPIC_NAME_LENGTH:
        raise InvalidTopicError(
            f"topic name {name[:40]!r}... is illegal: it is {len(name)} characters long, "
            f"more than the maximum {MAX_TOPIC_NAME_LENGTH}")
    if _LEGAL.fullmatch(name) is None:
        bad = next(c for c in name if _LEGAL.fullmatch(c) is None)
        raise InvalidTopicError(
            f"topic name {name!r} is illegal: it contains {bad!r}, a character other than "
            "ASCII alphanumerics, '.', '_' and '-'")
    return name


def is_valid_topic_name(name: object) -> bool:
    try:
        validate_topic_name(name)
    except InvalidTopicError:
        return False
    return True


def is_internal_topic(name: str) -> bool:
    return name in INTERNAL_TOPICS


def has_collision_chars(name: str) -> bool:
    """True if the name contains '.' or '_', which metric names cannot tell apart."""
    return "." in name or "_" in name


def unify_collision_chars(name: str) -> str:
    return name.replace(".", "_")


def has_collision(a: str, b: str) -> bool:
    """True if two topic names differ only by '.' versus '_'."""
    return unify_collision_chars(a) == unify_collision_chars(b)


def warn_if_collision_prone(name: str, existing: object = ()) -> bool:
    """Log Kafka's warning for names with '.' or '_'; raise :class:`InvalidTopicError` if the
    name collides with one of ``existing`` (an iterable of topic names) other than itself.

    Returns True if a warning was logged.
    """
    for other in existing:  # type: ignore[attr-defined]
        if other != name and has_collision(name, other):
            raise InvalidTopicError(
                f"topic {name!r} collides with existing topic {other!r}: they differ only by "
                "'.' versus '_'")
    if has_collision_chars(name):
        log.warning("topic %r contains a period ('.') or underscore ('_'); due to limitations "
                    "in metric names, topics with a period or underscore could collide", name)
        return True
    return False


def validate_partition(partition: object) -> int:
    """Return ``partition`` if it is an int in ``[0, 2**31-1]``, else raise
    :class:`InvalidPartitionError`."""
    if isinstance(partition, bool) or not isinstance(partition, int):
        raise InvalidPartitionError(
            f"partition must be an int, got {type(partition).__name__} {partition!r}")
    if partition < 0 or partition > MAX_PARTITION:
        raise InvalidPartitionError(f"partition {partition} is out of range [0, {MAX_PARTITION}]")
    return partition


def partition_dir_name(topic: str, partition: int) -> str:
    """The log directory name ``<topic>-<partition>`` after validating both parts."""
    name = f"{validate_topic_name(topic)}-{validate_partition(partition)}"
    if len(name) > MAX_DIR_NAME_LENGTH:
        # 249 characters plus a large partition number can pass NAME_MAX on common filesystems.
        raise InvalidTopicError(
            f"directory name for topic {topic[:40]!r}... partition {partition} is {len(name)} "
            f"characters, more than the file system limit {MAX_DIR_NAME_LENGTH}")
    return name


def parse_partition_dir_name(dirname: str) -> tuple[str, int]:
    """Split ``<topic>-<partition>`` back into ``(topic, partition)``.

    The topic may itself contain '-'; the partition is after the last one. Raises
    :class:`InvalidPartitionError` if the partition part is missing or not a number and
    :class:`InvalidTopicError` if the topic part is not a legal name.
    """
    if not isinstance(dirname, str):
        raise InvalidPartitionError(f"directory name must be a str, got {dirname!r}")
    topic, sep, part = dirname.rpartition("-")
    if not sep or not topic:
        raise InvalidPartitionError(
            f"directory {dirname!r} is not in the form <topic>-<partition>")
    # isdigit() alone accepts non-ASCII digits such as '٣'.
    if not part.isascii() or not part.isdigit() or (len(part) > 1 and part[0] == "0"):
        raise InvalidPartitionError(
            f"directory {dirname!r} is not in the form <topic>-<partition>: "
            f"partition {part!r} is not a non-negative integer")
    try:
        validate_topic_name(topic)
    except InvalidTopicError as e:
        raise InvalidTopicError(f"directory {dirname!r} has an illegal topic: {e}") from None
    return topic, validate_partition(int(part))
