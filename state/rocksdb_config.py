"""`rocksdb.config.setter`: the user's hook on a RocksDB store's options (Kafka's RocksDBConfigSetter).

The config names a class (or its `"package.module.Class"` / `"package.module:Class"` name). Each
time a RocksDB store opens its database, a new instance of that class gets
`set_config(store_name, options, configs)` with the store's options (a `rocksdict.Options`
holding Eddy's defaults, which it may change) and the app's config, before RocksDB opens with
them; when that database handle closes, the same instance gets `close(store_name, options)`
(to release what `set_config` made, as Kafka's close does for RocksObjects). A store reopens its
database when a large restore switches bulk loading on and off, as Kafka's
toggleDbForBulkLoading did: each handle has its own instance and its own pair of calls, and
while bulk loading the restore's own settings are applied over the setter's.

A segmented (window or session) store is one RocksDB database under the store's name, so its
setter sees that name (Kafka's sees each segment's).

The options change how RocksDB stores and reads the data, not what the store returns, with the
usual RocksDB caveats: a prefix extractor or a hash memtable gives up total-order iteration,
which range and prefix reads need; `set_inplace_update_support` breaks reverse iteration.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Mapping, Optional

from eddy.class_names import import_class

if TYPE_CHECKING:  # not imported at run time: StreamsConfig checks the config without RocksDB
    from rocksdict import Options

ROCKSDB_CONFIG_SETTER = "rocksdb.config.setter"


class RocksDBConfigSetter:
    """Base class of a `rocksdb.config.setter` (subclassing it is optional: any class with a
    `set_config` method will do). Instantiated with no arguments, once per database handle."""

    def set_config(self, store_name: str, options: Options, configs: Mapping[str, Any]) -> None:
        """Change `options` (Eddy's defaults for store `store_name`) before RocksDB opens with them."""
        raise NotImplementedError(f"{type(self).__name__}.set_config")

    def close(self, store_name: str, options: Options) -> None:
        """The database `set_config` configured has closed: release what it made."""


def config_setter_class(configs: Optional[Mapping[str, Any]]) -> Optional[type]:
    """The class `rocksdb.config.setter` names in `configs`, or None when it is not set.

    Raises ValueError, naming the config and what is wrong, for a value that is not such a
    class or the name of one (an instance, a name that does not import, a class without
    `set_config`)."""
    value = configs.get(ROCKSDB_CONFIG_SETTER) if configs else None
    if value is None:
        return None
    if isinstance(value, str):
        cls = import_class(value, f"config '{ROCKSDB_CONFIG_SETTER}'")
    elif isinstance(value, type):
        cls = value
    else:
        what = "an instance of " + type(value).__name__ if callable(getattr(value, "set_config", None)) \
            else repr(value)
        raise ValueError(f"config '{ROCKSDB_CONFIG_SETTER}' must be a class (a new instance configures each "
                         f"RocksDB store) or its 'package.module.Class' name, got {what}")
    if not callable(getattr(cls, "set_config", None)):
        raise ValueError(f"config '{ROCKSDB_CONFIG_SETTER}': class {_qualified(cls)} has no "
                         "set_config(store_name, options, configs) method")
    return cls


def _qualified(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"
