"""Typed errors of the Spark connector. Snapshot errors (missing or corrupt manifest, not a
snapshot, not raw mode, unknown serde) are state.snapshot's and are raised as they are."""

from connectors.errors import ConnectorError
from state.snapshot import (  # noqa: F401 - re-exported: the errors a reader of snapshots meets
    NotASnapshotError,
    SnapshotError,
    SnapshotManifestCorruptError,
    SnapshotManifestMissingError,
    StoreNotRawModeError,
    UnknownSerdeError,
)


class SparkConnectorError(ConnectorError):
    """Base of the Spark connector's own errors."""


class BadOptionError(SparkConnectorError, ValueError):
    """A data source or export option has a bad value; the message names it."""


class KeyRangeError(BadOptionError):
    """A key range that cannot apply (a bound the key serde cannot encode, a window store)."""


class ValueDecodeError(SparkConnectorError, ValueError):
    """Stored bytes do not decode with the serde (or into the schema) they are read with."""


class TopicNotFoundError(SparkConnectorError):
    """The changelog (or other) topic to read does not exist."""


class ChangelogReadError(SparkConnectorError):
    """A changelog could not be read (cluster directory unreadable, broker error)."""
