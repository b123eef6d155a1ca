"""Kafka's generated DSL names (KStreamImpl / KTableImpl / KGroupedStreamImpl prefixes) and the
serde fallbacks every DSL class shares."""

from __future__ import annotations

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
COGROUP_AGGREGATE = "COGROUPKSTREAM-AGGREGATE-"
COGROUP_MERGE = "COGROUPKSTREAM-MERGE-"
LEFTJOIN = "KSTREAM-LEFTJOIN-"
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
