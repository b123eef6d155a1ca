"""`Materialized`: how a DSL table is stored (name, serdes, caching, logging, store type, retention),
and the store builders the windowed and session aggregations make from it (Kafka's rules)."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Optional

from streams.dsl.store_suppliers import (IN_MEMORY, BuiltInDslStoreSuppliers, DslKeyValueParams, DslSessionParams,
                                         DslStoreSuppliers, DslWindowParams, supplier_of)
from streams.dsl.store_suppliers import store_type as _store_type
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
    #: a DslStoreSuppliers (with_store_type), or None: the builder's or the app's config decides
    store_type: Any = None
    store_supplier: Any = None
    retention_ms: Optional[int] = None

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
        if config is not None and not isinstance(config, dict):
            raise TopologyError(f"Materialized.with_logging_enabled: config must be a dict, got {type(config).__name__}")
        return replace(self, logging_enabled=True, log_config=dict(config or {}))

    def with_logging_disabled(self) -> "Materialized":
        return replace(self, logging_enabled=False, log_config=None)

    def with_in_memory_store(self) -> "Materialized":
        """with_store_type("in_memory")."""
        return self.with_store_type(IN_MEMORY)

    def with_store_type(self, store_type: Any) -> "Materialized":
        """Kafka's withStoreType: "rocksDB", "in_memory", or a DslStoreSuppliers (instance or
        class), over the builder's and the app's config (streams/dsl/store_suppliers.py)."""
        return replace(self, store_type=_store_type(store_type, "Materialized.with_store_type"))

    def with_retention(self, retention: Any) -> "Materialized":
        """How long a window or session store keeps windows (int ms or timedelta); the default is
        window size + grace (sliding: 2 x time difference + grace; session: gap + grace).

        Under at_least_once, a restart after a crash processes again the records since the last
        commit; a window the store dropped meanwhile (stream time had passed its retention)
        starts again from nothing, and its final result can then come out smaller than the one
        the crash lost, as in Kafka Streams. Retention beyond the default by more than the event
        time the records of one commit interval span keeps those windows (exactly_once_v2 has no
        such replay)."""
        from streams.dsl.windows import duration_ms

        ms = duration_ms(retention, "retention")
        if ms < 0:
            raise TopologyError(f"Materialized.with_retention: retention must not be negative, got {ms} ms")
        return replace(self, retention_ms=ms)


def as_materialized(store: Any, where: str) -> Materialized:
    if store is None:
        return Materialized()
    if isinstance(store, Materialized):
        return store
    if isinstance(store, str):
        return Materialized.as_(store)
    raise TopologyError(f"{where}: store must be a name or a Materialized, got {store!r}")


# ------------------------------------------------------------------------------ store builders
def _finish(builder: Any, mat: Materialized) -> Any:
    builder = builder.with_caching_enabled() if mat.caching_enabled else builder.with_caching_disabled()
    if mat.logging_enabled:
        builder = builder.with_logging_enabled(mat.log_config)
    else:
        builder = builder.with_logging_disabled()
    return builder


def _supplier_of_kind(mat: Materialized, kind: str, where: str) -> Any:
    supplier = mat.store_supplier
    if supplier is not None and getattr(supplier, "kind", None) != kind:
        raise TopologyError(
            f"{where}: store {mat.store_name!r} needs a {kind.replace('_', '-')} store supplier, got {supplier!r}")
    return supplier


def _suppliers(mat: Materialized, suppliers: Optional[DslStoreSuppliers]) -> DslStoreSuppliers:
    """The DslStoreSuppliers a store without a supplier of its own takes: the Materialized's store
    type, else `suppliers` (the builder's or the app's, LazyStoreBuilder), else RocksDB."""
    return mat.store_type or suppliers or BuiltInDslStoreSuppliers.ROCKS_DB


def key_value_store_builder(mat: Materialized, store_name: str, key_serde: Any = None, value_serde: Any = None,
                            *, timestamped: bool = False, suppliers: Optional[DslStoreSuppliers] = None) -> Any:
    """The StoreBuilder of a table's key-value store (Materialized's serdes win over the given
    ones); `suppliers`: see _suppliers."""
    from state.stores import Stores

    name = mat.store_name or store_name
    supplier = _supplier_of_kind(mat, "key_value", "key-value store")
    if supplier is None:
        supplier = supplier_of(_suppliers(mat, suppliers), "key_value", DslKeyValueParams(name, timestamped))
    make = Stores.timestamped_key_value_store_builder if timestamped else Stores.key_value_store_builder
    return _finish(make(supplier, mat.key_serde or key_serde, mat.value_serde or value_serde), mat)


def window_store_builder(mat: Materialized, store_name: str, windows: Any, key_serde: Any = None,
                         value_serde: Any = None, *, timestamped: bool = False, emit_strategy: Any = None,
                         suppliers: Optional[DslStoreSuppliers] = None) -> Any:
    """The StoreBuilder of a time- or sliding-windowed aggregation's window store (Kafka's
    TimeWindowedKStreamImpl / SlidingWindowedKStreamImpl.materialize). With `timestamped`, values
    are ValueAndTimestamp (Kafka's TimestampedWindowStore: 8-byte timestamp + value, logged in
    Kafka's timestamped changelog format), so the aggregate keeps the largest record timestamp of
    its window. `emit_strategy` goes to the store suppliers (the built-in ones order the store by
    window start for final results on window close, as Kafka's); `suppliers`: see _suppliers."""
    from state.stores import Stores
    from streams.dsl.windows import EmitStrategy, SlidingWindows, TimeWindows

    name = mat.store_name or store_name
    supplier = _supplier_of_kind(mat, "window", "windowed aggregation")
    if supplier is None:
        if isinstance(windows, TimeWindows):
            size, grace = windows.size_ms, windows.grace_ms
            minimum = size + grace
            retention = mat.retention_ms if mat.retention_ms is not None else minimum
            if retention < minimum:
                raise TopologyError(
                    f"The retention period of the window store {name} must be no smaller than its window size "
                    f"plus the grace period. Got size=[{size}], grace=[{grace}], retention=[{retention}]")
        elif isinstance(windows, SlidingWindows):
            size, grace = windows.time_difference_ms, windows.grace_ms
            minimum = 2 * size + grace
            retention = mat.retention_ms if mat.retention_ms is not None else minimum
            if retention < minimum:
                raise TopologyError(
                    f"The retention period of the window store {name} must be no smaller than 2 * time difference "
                    f"plus the grace period. Got time difference=[{size}], grace=[{grace}], retention=[{retention}]")
        else:
            raise TopologyError(f"window store {name!r}: windows must be TimeWindows or SlidingWindows, got {windows!r}")
        params = DslWindowParams(name, retention, size, False, emit_strategy or EmitStrategy.on_window_update(),
                                 isinstance(windows, SlidingWindows), timestamped)
        supplier = supplier_of(_suppliers(mat, suppliers), "window", params)
    make_builder = Stores.timestamped_window_store_builder if timestamped else Stores.window_store_builder
    return _finish(make_builder(supplier, mat.key_serde or key_serde, mat.value_serde or value_serde), mat)


def session_store_builder(mat: Materialized, store_name: str, windows: Any, key_serde: Any = None,
                          value_serde: Any = None, *, emit_strategy: Any = None,
                          suppliers: Optional[DslStoreSuppliers] = None) -> Any:
    """The StoreBuilder of a session-windowed aggregation's session store (Kafka's
    SessionWindowedKStreamImpl.materialize); `suppliers`: see _suppliers."""
    from state.stores import Stores
    from streams.dsl.windows import EmitStrategy, SessionWindows

    name = mat.store_name or store_name
    if not isinstance(windows, SessionWindows):
        raise TopologyError(f"session store {name!r}: windows must be SessionWindows, got {windows!r}")
    supplier = _supplier_of_kind(mat, "session", "session-windowed aggregation")
    if supplier is None:
        gap, grace = windows.gap_ms, windows.grace_ms
        retention = mat.retention_ms if mat.retention_ms is not None else gap + grace
        if retention < gap + grace:
            raise TopologyError(
                f"The retention period of the session store {name} must be no smaller than the session inactivity "
                f"gap plus the grace period. Got gap=[{gap}], grace=[{grace}], retention=[{retention}]")
        params = DslSessionParams(name, retention, emit_strategy or EmitStrategy.on_window_update())
        supplier = supplier_of(_suppliers(mat, suppliers), "session", params)
    return _finish(Stores.session_store_builder(supplier, mat.key_serde or key_serde, mat.value_serde or value_serde),
                   mat)
