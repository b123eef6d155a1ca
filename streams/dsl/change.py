"""A table update flowing between KTable nodes."""

from __future__ import annotations

from typing import Any, NamedTuple


class Change(NamedTuple):
    """A table update flowing between KTable nodes: the new value and the previous one."""

    new_value: Any
    old_value: Any
