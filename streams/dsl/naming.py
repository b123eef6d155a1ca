"""Kafka's generated DSL names (KStreamImpl / KTableImpl / KGroupedStreamImpl prefixes) and the
serde fallbacks every DSL class shares."""

from __future__ import annotations

from typing import Any, Callable, Optional

from eddy.config_values import parse_bool

from streams import serdes as _serdes
from streams.errors import TopologyError

SOURCE = "KSTREAM-SOURCE-"
SINK = "KSTREAM-SINK-"
MAP = "KSTREAM-MAP-"
MAPVALUES = "KSTREAM-MAPVALUES-"
FLATMAP = "KSTREAM-FLATMAP-"
FLATMAPVALUES = "KSTREAM-FLATMAPVALUES-"
FILTER = "KSTREAM-FILTER-"
PEEK = "KSTREAM-PEEK-"
PRINTER = "KSTREAM-PRINTER-"
FOREACH = "KSTREAM-FOREACH-"
KEY_SELECT = "KSTREAM-KEY-SELECT-"
MERGE = "KSTREAM-MERGE-"
BRANCH = "KSTREAM-BRANCH-"
PROCESSOR = "KSTREAM-PROCESSOR-"
PROCESSVALUES = "KSTREAM-PROCESSVALUES-"
REPARTITION = "KSTREAM-REPARTITION-"
TO_KTABLE = "KSTREAM-TOTABLE-"
AGGREGATE = "KSTREAM-AGGREGATE-"
REDUCE = "KSTREAM-REDUCE-"
COGROUP_AGGREGATE = "COGROUPKSTREAM-AGGREGATE-"
COGROUP_MERGE = "COGROUPKSTREAM-MERGE-"
LEFTJOIN = "KSTREAM-LEFTJOIN-"
TABLE_SOURCE = "KTABLE-SOURCE-"
TABLE_FILTER = "KTABLE-FILTER-"
TABLE_MAPVALUES = "KTABLE-MAPVALUES-"
TABLE_TRANSFORMVALUES = "KTABLE-TRANSFORMVALUES-"
TABLE_TOSTREAM = "KTABLE-TOSTREAM-"
TABLE_SUPPRESS = "KTABLE-SUPPRESS-"
TABLE_SELECT = "KTABLE-SELECT-"
TABLE_AGGREGATE = "KTABLE-AGGREGATE-"
TABLE_REDUCE = "KTABLE-REDUCE-"
TABLE_JOINTHIS = "KTABLE-JOINTHIS-"
TABLE_JOINOTHER = "KTABLE-JOINOTHER-"
TABLE_MERGE = "KTABLE-MERGE-"
JOIN = "KSTREAM-JOIN-"
JOINTHIS = "KSTREAM-JOINTHIS-"
JOINOTHER = "KSTREAM-JOINOTHER-"
OUTERTHIS = "KSTREAM-OUTERTHIS-"
OUTEROTHER = "KSTREAM-OUTEROTHER-"
WINDOWED = "KSTREAM-WINDOWED-"
OUTERSHARED = "KSTREAM-OUTERSHARED-"
STATE_STORE = "STATE-STORE-"
TABLE_SINK = "KTABLE-SINK-"
# the foreign-key join's nodes, stores and topics (KTableImpl.doJoinOnForeignKey)
FK_JOIN = "KTABLE-FK-JOIN-"
FK_SUBSCRIPTION_REGISTRATION = FK_JOIN + "SUBSCRIPTION-REGISTRATION-"
FK_SUBSCRIPTION_RESPONSE = FK_JOIN + "SUBSCRIPTION-RESPONSE-"
FK_SUBSCRIPTION_PROCESSOR = FK_JOIN + "SUBSCRIPTION-PROCESSOR-"
FK_RESPONSE_RESOLVER = FK_JOIN + "SUBSCRIPTION-RESPONSE-RESOLVER-PROCESSOR-"
FK_SUBSCRIPTION_STATE_STORE = FK_JOIN + "SUBSCRIPTION-STATE-STORE-"
FK_JOIN_OUTPUT = FK_JOIN + "OUTPUT-"
FK_TOPIC_SUFFIX = "-topic"
REPARTITION_SUFFIX = "-repartition"
STORE_SUFFIX = "-store"

MAX_NAME_LENGTH = 249  # Kafka's Named
_NAME_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-")


def processor_name(name: Optional[str], op: str) -> Optional[str]:
    """A processor name the user gives `op` (Kafka's Named.as), checked by Kafka's rules: a
    TopologyError naming `op` unless it is 1 to 249 ASCII alphanumerics, '.', '_' or '-' (and not
    "." or "..")."""
    if name is None:
        return None
    if not isinstance(name, str) or not name:
        raise TopologyError(f"{op}: name must be a non-empty string, got {name!r}")
    if name in (".", ".."):
        raise TopologyError(f"{op}: name cannot be {name!r}")
    if len(name) > MAX_NAME_LENGTH:
        raise TopologyError(f"{op}: name {name!r} is longer than {MAX_NAME_LENGTH} characters")
    if not _NAME_CHARS.issuperset(name):
        raise TopologyError(f"{op}: name {name!r} contains a character other than ASCII alphanumerics, "
                            "'.', '_' and '-'")
    return name


def check_fn(fn: Any, op: str) -> None:
    if not callable(fn):
        raise TopologyError(f"{op} needs a callable, got {fn!r}")


def key_or_default(serde: Any, where: str) -> Any:
    return serde if serde is not None else _serdes.ConfigDefaultSerde(_serdes.DEFAULT_KEY_SERDE_CONFIG, where)


def value_or_default(serde: Any, where: str) -> Any:
    return serde if serde is not None else _serdes.ConfigDefaultSerde(_serdes.DEFAULT_VALUE_SERDE_CONFIG, where)


def store_name(graph: Any, mat: Any, prefix: str, *, implicit: bool = True) -> str:
    """A Materialized's name, else Kafka's generated `<prefix>STATE-STORE-<index>`, noted with
    its changelog as unnamed (Kafka's MaterializedInternal made with the builder; `implicit`
    False: one made without it, which notes nothing)."""
    if mat.store_name:
        return mat.store_name
    name = graph.new_name(prefix + STATE_STORE)
    if implicit:
        graph.implicit_store(name, mat.logging_enabled)
    return name


ENSURE_EXPLICIT_NAMING = "ensure.explicit.internal.resource.naming"


def ensure_explicit_naming(config: Any) -> bool:
    """The config's ensure.explicit.internal.resource.naming (Kafka's boolean: true or false, any
    case, or a bool), False unless set; ConfigError for another value."""
    from streams.errors import ConfigError

    value = config.get(ENSURE_EXPLICIT_NAMING, False)
    parsed = parse_bool(value)
    if parsed is not None:
        return parsed
    raise ConfigError(f"config {ENSURE_EXPLICIT_NAMING!r} must be true or false, got {value!r}")


def unnamed_resources(graph: Any) -> Optional[str]:
    """Kafka's checkUnprovidedNames text for the generated names `graph` noted, or None."""
    kinds = (("changelog topic(s)", 0), ("state store(s)", 1), ("repartition topic(s)", 2))
    lines = []
    for what, at in kinds:
        names = [entry[at] for entry in graph.implicit_names if entry[at]]
        if names:
            lines.append(f"Following {what} has not been named: {', '.join(names)}\n")
    return "".join(lines) or None


def deferred(*serdes: Any) -> tuple:
    return tuple(s for s in serdes if isinstance(s, _serdes.ConfigDefaultSerde))


Fn = Callable[..., Any]
