"""Task identity: a (subtopology, partition) pair rendered as "<subtopology>_<partition>"."""

from __future__ import annotations

import re
from dataclasses import dataclass

from state.errors import StateError

_TASK_ID_RE = re.compile(r"([0-9]+)_([0-9]+)\Z")


class InvalidTaskIdError(StateError, ValueError):
    """A string or value that is not a valid task id."""


@dataclass(frozen=True, order=True)
class TaskId:
    """Identifies a task: the subtopology it runs and the input partition it owns.

    Ordering is by subtopology, then partition (like Kafka's TaskId.compareTo).
    """

    subtopology: int
    partition: int

    def __post_init__(self) -> None:
        for field_name in ("subtopology", "partition"):
            value = getattr(self, field_name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise InvalidTaskIdError(
                    f"TaskId.{field_name} must be a non-negative int, got {value!r}"
                )

    def __str__(self) -> str:
        return f"{self.subtopology}_{self.partition}"

    @classmethod
    def parse(cls, text: str) -> "TaskId":
        """Parse "0_3" into TaskId(0, 3); raises InvalidTaskIdError on anything else."""
        if not isinstance(text, str):
            raise InvalidTaskIdError(f"task id must be a string like '0_3', got {type(text).__name__}")
        match = _TASK_ID_RE.match(text)
        if match is None:
            raise InvalidTaskIdError(
                f"invalid task id {text!r}: expected '<subtopology>_<partition>' with "
                "non-negative integers, e.g. '0_3'"
            )
        return cls(int(match.group(1)), int(match.group(2)))
