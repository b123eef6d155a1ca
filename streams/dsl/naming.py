"""Kafka's generated DSL names (KStreamImpl / KTableImpl / KGroupedStreamImpl prefixes) and the
serde fallbacks every DSL class shares."""

from __future__ import annotations

import re
from typing import Any, Callable

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
FOREACH = "KSTREAM-FOREACH-"
KEY_SELECT = "KSTREAM-KEY-SELECT-"
MERGE = "KSTREAM-MERGE-"
BRANCH = "KSTREAM-BRANCH-"
PROCESSOR = "KSTREAM-PROCESSOR-"
REPARTITION = "KSTREAM-REPARTITION-"
TO_KTABLE = "KSTREAM-TOTABLE-"
AGGREGATE = "KSTREAM-AGGREGATE-"
REDUCE = "KSTREAM-REDUCE-"
TABLE_SOURCE = "KTABLE-SOURCE-"
TABLE_FILTER = "KTABLE-FILTER-"
TABLE_MAPVALUES = "KTABLE-MAPVALUES-"
TABLE_TOSTREAM = "KTABLE-TOSTREAM-"
TABLE_SUPPRESS = "KTABLE-SUPPRESS-"
TABLE_SELECT = "KTABLE-SELECT-"
TABLE_AGGREGATE = "KTABLE-AGGREGATE-"
TABLE_REDUCE = "KTABLE-REDUCE-"
TABLE_JOINTHIS = "KTABLE-JOINTHIS-"
TABLE_JOINOTHER = "KTABLE-JOINOTHER-"
TABLE_MERGE = "KTABLE-MERGE-"
JOIN = "KSTREAM-JOIN-"
LEFTJOIN = "KSTREAM-LEFTJOIN-"
JOINTHIS = "KSTREAM-JOINTHIS-"
JOINOTHER = "KSTREAM-JOINOTHER-"
OUTERTHIS = "KSTREAM-OUTERTHIS-"
OUTEROTHER = "KSTREAM-OUTEROTHER-"
WINDOWED = "KSTREAM-WINDOWED-"
OUTERSHARED = "KSTREAM-OUTERSHARED-"
STATE_STORE = "STATE-STORE-"
REPARTITION_SUFFIX = "-repartition"
STORE_SUFFIX = "-store"
# Kafka's createRepartitionedSource: a topic prefix that is a generated node or store name keeps
# the generated sink/filter/source names; any other prefix names them after the topic
_GENERATED = re.compile(r"KSTREAM.*-[0-9]{10}")


def is_generated(name: str) -> bool:
    return _GENERATED.fullmatch(name) is not None


def check_fn(fn: Any, op: str) -> None:
    if not callable(fn):
        raise TopologyError(f"{op} needs a callable, got {fn!r}")


def key_or_default(serde: Any, where: str) -> Any:
    return serde if serde is not None else _serdes.ConfigDefaultSerde(_serdes.DEFAULT_KEY_SERDE_CONFIG, where)


def value_or_default(serde: Any, where: str) -> Any:
    return serde if serde is not None else _serdes.ConfigDefaultSerde(_serdes.DEFAULT_VALUE_SERDE_CONFIG, where)


def store_name(graph: Any, mat: Any, prefix: str) -> str:
    """A Materialized's name, else Kafka's generated `<prefix>STATE-STORE-<index>`."""
    return mat.store_name or graph.new_name(prefix + STATE_STORE)


def deferred(*serdes: Any) -> tuple:
    return tuple(s for s in serdes if isinstance(s, _serdes.ConfigDefaultSerde))


Fn = Callable[..., Any]
