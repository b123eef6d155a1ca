"""Which stores the DSL's operators make (Kafka's DslStoreSuppliers, KIP-954): RocksDB by default,
in memory, or a user's class, and Kafka's rules for where that choice comes from.

A DSL store takes the first of:
1. its `Materialized`'s store type (`with_store_type`, `with_in_memory_store`; a stream-stream
   join's `store=` too), as Kafka's Materialized.withStoreType;
2. the config given to `StreamsBuilder(config)` (Kafka's StreamsBuilder(TopologyConfig)): its
   `dsl.store.suppliers.class` if set, else its `default.dsl.store` if set;
3. the app's `dsl.store.suppliers.class` (Kafka's StoreFactory.configure at KafkaStreams'
   construction), `RocksDBDslStoreSuppliers` unless set.

As in Kafka, an app's own `default.dsl.store` (not given to the builder) does not reach its
stores: it is checked, and a warning says to give it to the builder. The foreign-key join's
subscription store takes only the third (Kafka's SubscriptionStoreFactory). A store named by a
supplier (`Materialized.as_(Stores....)`) is that supplier's, whatever these say.
"""

from __future__ import annotations

import logging
from typing import Any, Mapping, NamedTuple, Optional

from eddy.class_names import import_class
from streams.errors import ConfigError, TopologyError

log = logging.getLogger(__name__)

DEFAULT_DSL_STORE = "default.dsl.store"
DSL_STORE_SUPPLIERS_CLASS = "dsl.store.suppliers.class"
ROCKS_DB, IN_MEMORY = "rocksDB", "in_memory"  # default.dsl.store's values (Kafka's, case included)
_KAFKA_BUILT_INS = "org.apache.kafka.streams.state.BuiltInDslStoreSuppliers$"


class DslKeyValueParams(NamedTuple):
    name: str
    is_timestamped: bool


class DslWindowParams(NamedTuple):
    name: str
    retention_period_ms: int
    window_size_ms: int
    retain_duplicates: bool
    emit_strategy: Any  # an EmitStrategy
    is_sliding_window: bool
    is_timestamped: bool


class DslSessionParams(NamedTuple):
    name: str
    retention_period_ms: int
    emit_strategy: Any


class DslStoreSuppliers:
    """The stores the DSL makes: each method returns a `state.Stores` supplier of its kind.
    `configure(configs)` gets the config that named the class (the app's or the builder's)."""

    def configure(self, configs: Mapping[str, Any]) -> None:
        """Optional: the config this instance was made for."""

    def key_value_store(self, params: DslKeyValueParams) -> Any:
        raise NotImplementedError

    def window_store(self, params: DslWindowParams) -> Any:
        raise NotImplementedError

    def session_store(self, params: DslSessionParams) -> Any:
        raise NotImplementedError


def _emits_on_close(emit_strategy: Any) -> bool:
    return emit_strategy is not None and emit_strategy.emits_on_close


class RocksDBDslStoreSuppliers(DslStoreSuppliers):
    """RocksDB stores; a windowed aggregation emitting on window close gets a store ordered by
    window start (indexed by key for sliding windows), as Kafka's."""

    persistent = True

    def key_value_store(self, params: DslKeyValueParams) -> Any:
        from state.stores import Stores

        make = Stores.persistent_key_value_store if self.persistent else Stores.in_memory_key_value_store
        return make(params.name)

    def window_store(self, params: DslWindowParams) -> Any:
        from state.stores import Stores

        if _emits_on_close(params.emit_strategy):
            return Stores.time_ordered_window_store(params.name, params.retention_period_ms, params.window_size_ms,
                                                    persistent=self.persistent,
                                                    with_index=params.is_sliding_window)
        make = Stores.persistent_window_store if self.persistent else Stores.in_memory_window_store
        return make(params.name, retention_ms=params.retention_period_ms, window_size_ms=params.window_size_ms,
                    retain_duplicates=params.retain_duplicates)

    def session_store(self, params: DslSessionParams) -> Any:
        from state.stores import Stores

        make = Stores.persistent_session_store if self.persistent else Stores.in_memory_session_store
        return make(params.name, retention_ms=params.retention_period_ms)


class InMemoryDslStoreSuppliers(RocksDBDslStoreSuppliers):
    """In-memory stores (restored from their changelogs at every start). Eddy keeps the
    time-ordered window store on window close in memory too (Kafka's gives a plain one: the
    results are the same, the scan for closed windows is shorter)."""

    persistent = False


class BuiltInDslStoreSuppliers:
    """Kafka's two built-in choices, as instances."""

    ROCKS_DB = RocksDBDslStoreSuppliers()
    IN_MEMORY = InMemoryDslStoreSuppliers()


_BY_STORE_TYPE = {ROCKS_DB: BuiltInDslStoreSuppliers.ROCKS_DB, IN_MEMORY: BuiltInDslStoreSuppliers.IN_MEMORY}
_BY_KAFKA_NAME = {_KAFKA_BUILT_INS + "RocksDBDslStoreSuppliers": RocksDBDslStoreSuppliers,
                  _KAFKA_BUILT_INS + "InMemoryDslStoreSuppliers": InMemoryDslStoreSuppliers}


def store_type(value: Any, where: str) -> DslStoreSuppliers:
    """A store type as Materialized.with_store_type takes it: "rocksDB", "in_memory", a
    DslStoreSuppliers or its class. TopologyError naming `where` otherwise."""
    if isinstance(value, str):
        found = _BY_STORE_TYPE.get(value)
        if found is None:
            raise TopologyError(f"{where}: store type must be {ROCKS_DB!r} or {IN_MEMORY!r}, got {value!r}")
        return found
    if isinstance(value, type) and issubclass(value, DslStoreSuppliers):
        return value()
    if isinstance(value, DslStoreSuppliers):
        return value
    raise TopologyError(f"{where}: store type must be {ROCKS_DB!r}, {IN_MEMORY!r} or a DslStoreSuppliers, "
                        f"got {value!r}")


def _default_dsl_store(configs: Mapping[str, Any]) -> Optional[DslStoreSuppliers]:
    value = configs.get(DEFAULT_DSL_STORE)
    if value is None:
        return None
    found = _BY_STORE_TYPE.get(value) if isinstance(value, str) else None
    if found is None:
        raise ConfigError(f"config {DEFAULT_DSL_STORE!r} must be {ROCKS_DB!r} or {IN_MEMORY!r}, got {value!r}")
    return found


def _suppliers_class(configs: Mapping[str, Any]) -> Optional[type]:
    value = configs.get(DSL_STORE_SUPPLIERS_CLASS)
    if value is None:
        return None
    if isinstance(value, str):
        cls = _BY_KAFKA_NAME.get(value.strip())
        if cls is None:
            try:
                cls = import_class(value, f"config {DSL_STORE_SUPPLIERS_CLASS!r}")
            except ValueError as exc:
                raise ConfigError(str(exc)) from None
    elif isinstance(value, type):
        cls = value
    else:
        raise ConfigError(f"config {DSL_STORE_SUPPLIERS_CLASS!r} must be a DslStoreSuppliers class or its "
                          f"'package.module.Class' name, got {value!r}")
    if not issubclass(cls, DslStoreSuppliers):
        raise ConfigError(f"config {DSL_STORE_SUPPLIERS_CLASS!r}: {cls.__module__}.{cls.__qualname__} is not a "
                          "DslStoreSuppliers (streams.dsl.store_suppliers.DslStoreSuppliers)")
    return cls


def _configured_instance(cls: type, configs: Mapping[str, Any]) -> DslStoreSuppliers:
    """Kafka's getConfiguredInstance: a new instance, configured with the config that named it."""
    try:
        suppliers = cls()
        suppliers.configure(dict(configs))
    except Exception as exc:
        raise ConfigError(f"config {DSL_STORE_SUPPLIERS_CLASS!r}: {cls.__module__}.{cls.__qualname__} failed to "
                          f"instantiate or configure: {exc!r}") from exc
    return suppliers


def builder_store_suppliers(configs: Optional[Mapping[str, Any]]) -> Optional[DslStoreSuppliers]:
    """The store type a StreamsBuilder's config sets for its DSL stores (Kafka's
    TopologyConfig.resolveDslStoreSuppliers): its dsl.store.suppliers.class, else its
    default.dsl.store, else None (the app's config decides). ConfigError for a bad value."""
    if not configs:
        return None
    by_type = _default_dsl_store(configs)  # checked even when the class wins
    cls = _suppliers_class(configs)
    if cls is not None:
        return _configured_instance(cls, configs)
    return by_type


def app_store_suppliers(configs: Mapping[str, Any]) -> DslStoreSuppliers:
    """The store type an app's config gives the DSL stores nothing else chose (Kafka's
    StoreFactory.configure): its dsl.store.suppliers.class, RocksDB unless set."""
    cls = _suppliers_class(configs)
    if cls is None or cls is RocksDBDslStoreSuppliers:
        return BuiltInDslStoreSuppliers.ROCKS_DB
    if cls is InMemoryDslStoreSuppliers:
        return BuiltInDslStoreSuppliers.IN_MEMORY
    return _configured_instance(cls, configs)


def check_app_configs(configs: Mapping[str, Any]) -> None:
    """An app's config (StreamsConfig.parse, the test driver): both settings checked (ConfigError)."""
    _default_dsl_store(configs)
    _suppliers_class(configs)


def unapplied_default_dsl_store(configs: Mapping[str, Any]) -> Optional[str]:
    """The app's default.dsl.store when it asks for other stores than the app's DSL stores get
    (see the module doc: only a builder's applies), else None."""
    value = configs.get(DEFAULT_DSL_STORE)
    if value is None or value == ROCKS_DB or configs.get(DSL_STORE_SUPPLIERS_CLASS) is not None:
        return None
    return value


def supplier_of(suppliers: DslStoreSuppliers, kind: str, params: Any) -> Any:
    """The supplier `suppliers` gives for a store of `kind` ("key_value", "window", "session"),
    checked: TopologyError naming the class when it returns something else."""
    method = {"key_value": suppliers.key_value_store, "window": suppliers.window_store,
              "session": suppliers.session_store}[kind]
    supplier = method(params)
    if getattr(supplier, "kind", None) != kind or getattr(supplier, "name", None) != params.name:
        cls = type(suppliers)
        raise TopologyError(f"{cls.__module__}.{cls.__qualname__}.{method.__name__} must return a "
                            f"{kind.replace('_', '-')} store supplier named {params.name!r} (state.Stores), "
                            f"got {supplier!r}")
    return supplier
