"""How the exception handler configs are read: the names Kafka renamed (KIP-1056, Kafka 4.0: the new
name wins over the deprecated one, which is still read when the new one is not set, as Kafka's
StreamsConfig does), and a handler given by name or as a callable."""

from __future__ import annotations

import logging
from typing import Any, Callable, Mapping, Optional

from streams.errors import ConfigError

log = logging.getLogger(__name__)

DESERIALIZATION_HANDLER_CONFIG = "deserialization.exception.handler"
DEPRECATED_DESERIALIZATION_HANDLER_CONFIG = "default.deserialization.exception.handler"
PRODUCTION_HANDLER_CONFIG = "production.exception.handler"
DEPRECATED_PRODUCTION_HANDLER_CONFIG = "default.production.exception.handler"

_DEPRECATED = {DESERIALIZATION_HANDLER_CONFIG: DEPRECATED_DESERIALIZATION_HANDLER_CONFIG,
               PRODUCTION_HANDLER_CONFIG: DEPRECATED_PRODUCTION_HANDLER_CONFIG}


def renamed_config(config: Optional[Mapping[str, Any]], name: str) -> tuple[str, Any]:
    """(the key `config` sets for `name`, its value): `name` itself when set, else its deprecated
    name (value None when neither is). Both set: the deprecated one is ignored, with a warning."""
    config = config or {}
    old = _DEPRECATED[name]
    if name in config:
        if old in config:
            log.warning("both %r and its deprecated name %r are set: %r is ignored", name, old, old)
        return name, config[name]
    return old, config.get(old)


def handler_named(key: str, value: Any, handlers: Mapping[str, Callable]) -> Callable:
    """The handler config `key` gives: `value` itself when callable, else the one of `handlers`
    its name (any case) names. ConfigError naming `key` for anything else."""
    if isinstance(value, str):
        handler = handlers.get(value.strip().lower())
        if handler is None:
            raise ConfigError(f"config {key!r}: unknown handler {value!r}; use 'log_and_fail', 'log_and_continue' "
                              "or a callable")
        return handler
    if callable(value):
        return value
    raise ConfigError(f"config {key!r} must be a handler name or a callable, got {value!r}")
