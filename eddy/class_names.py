"""Classes named in a config by 'package.module.Class' (or 'package.module:Class'), as Kafka's
configs of type CLASS name a Java class."""

from __future__ import annotations

import importlib


def import_class(name: str, what: str) -> type:
    """The class `name` names. Raises ValueError starting with `what` (the config) and saying
    what is wrong: not such a name, a module that does not import, no class under that name."""
    module_name, sep, attr = name.strip().rpartition(":")
    if not sep:
        module_name, _, attr = name.strip().rpartition(".")
    if not module_name or not attr:
        raise ValueError(f"{what}: {name!r} is not a 'package.module.Class' name")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ValueError(f"{what}: cannot import module {module_name!r} of {name!r}: {exc}") from exc
    found = getattr(module, attr, None)
    if not isinstance(found, type):
        raise ValueError(f"{what}: {name!r} names {'nothing' if found is None else 'a ' + type(found).__name__}, "
                         "not a class")
    return found
