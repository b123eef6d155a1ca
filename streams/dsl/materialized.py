"""`Materialized`: how a DSL table is stored (name, serdes, caching, logging, store type)."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Optional

from streams.errors import TopologyError


@dataclass(frozen=True)
class Materialized:
    """Store options for an aggregation. `Materialized.as_("counts")` names the store
    (queryable, and its changelog/repartition topics are named after it)."""

    store_name: Optional[str] = None
    key_serde: Any = None
    value_serde: Any = None
    caching_enabled: bool = True
    logging_enabled: bool = True
    log_config: Optional[dict] = None
    in_memory: bool = False
    store_supplier: Any = None

    def __post_init__(self) -> None:
        if self.store_name is not None and (not isinstance(self.store_name, str) or not self.store_name):
            raise TopologyError(f"Materialized store name must be a non-empty string, got {self.store_name!r}")

    @classmethod
    def as_(cls, store: Any) -> "Materialized":
        """Named store (a string) or a store supplier from `state.Stores`."""
        if isinstance(store, str):
            return cls(store_name=store)
        name = getattr(store, "name", None)
        if not isinstance(name, str):
            raise TopologyError(f"Materialized.as_ needs a store name or a store supplier, got {store!r}")
        return cls(store_name=name, store_supplier=store)

    @classmethod
    def with_serdes(cls, key_serde: Any, value_serde: Any) -> "Materialized":
        return cls(key_serde=key_serde, value_serde=value_serde)

    def with_key_serde(self, serde: Any) -> "Materialized":
        return replace(self, key_serde=serde)

    def with_value_serde(self, serde: Any) -> "Materialized":
        return replace(self, value_serde=serde)

    def with_caching_enabled(self) -> "Materialized":
        return replace(self, caching_enabled=True)

    def with_caching_disabled(self) -> "Materialized":
        return replace(self, caching_enabled=False)

    def with_logging_enabled(self, config: Optional[dict] = None) -> "Materialized":
        return replace(self, logging_enabled=True, log_config=dict(config or {}))

    def with_logging_disabled(self) -> "Materialized":
        return replace(self, logging_enabled=False, log_config=None)

    def with_in_memory_store(self) -> "Materialized":
        return replace(self, in_memory=True)


def as_materialized(store: Any, where: str) -> Materialized:
    if store is None:
        return Materialized()
    if isinstance(store, Materialized):
        return store
    if isinstance(store, str):
        return Materialized.as_(store)
    raise TopologyError(f"{where}: store must be a name or a Materialized, got {store!r}")
