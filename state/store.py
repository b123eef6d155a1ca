"""The state-store base contract shared by every store and by the state manager.

Everything below the typed layer is bytes-in, bytes-out. See notes/STATE_API.md.
"""

from __future__ import annotations

import pathlib
from abc import ABC, abstractmethod
from typing import TYPE_CHECKING, Any, Callable, Optional, Protocol, runtime_checkable

from state.errors import StoreClosedError

if TYPE_CHECKING:  # pragma: no cover
    from state.task_id import TaskId

# Applies one restored batch of changelog records (key bytes, value bytes or None = tombstone).
# RocksDB stores implement it as ONE rocksdict WriteBatch with the WAL disabled.
BatchRestoreCallback = Callable[[list[tuple[bytes, Optional[bytes]]]], None]


@runtime_checkable
class StoreContext(Protocol):
    """What a store needs from its owner (ProcessorStateManager implements it)."""

    application_id: str
    task_id: "TaskId"
    task_dir: pathlib.Path
    config: dict

    def store_dir(self, store_name: str) -> pathlib.Path:
        """task_dir / "rocksdb" / store_name."""
        ...

    def register(
        self,
        store: "StateStore",
        restore_callback: Optional[BatchRestoreCallback],
        *,
        logged: bool,
    ) -> None:
        ...

    def log_change(
        self,
        store_name: str,
        key: bytes,
        value: Optional[bytes],
        timestamp: int,
        headers: Any = None,
    ) -> None:
        ...


class StateStore(ABC):
    """Base of every store and store wrapper.

    `init(context)` opens the store and registers it with the context for restore;
    `flush()` makes written data durable (or writes caches down); `close()` releases it.
    """

    name: str
    persistent: bool = False

    @abstractmethod
    def init(self, context: StoreContext) -> None:
        """Open the store and register it (with its restore callback) in `context`."""

    @abstractmethod
    def flush(self) -> None:
        ...

    @abstractmethod
    def close(self) -> None:
        ...

    @property
    @abstractmethod
    def is_open(self) -> bool:
        ...

    def _check_open(self) -> None:
        if not self.is_open:
            raise StoreClosedError(f"state store {self.name!r} is not open")

    def __repr__(self) -> str:
        return f"{type(self).__name__}(name={self.name!r}, open={self.is_open})"
