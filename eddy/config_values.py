"""Config values of Kafka's types, parsed one way wherever a layer reads them."""

from __future__ import annotations

from typing import Optional


def parse_bool(value: object) -> Optional[bool]:
    """A config of Kafka's BOOLEAN type: a bool, or the string true or false in any case with
    blanks around it (ConfigDef's rule); None for anything else, which the caller reports with
    its own typed error naming the config."""
    if isinstance(value, bool):
        return value
    if isinstance(value, str):
        text = value.strip().lower()
        if text == "true":
            return True
        if text == "false":
            return False
    return None
