"""GlobalStateManager: the global stores of one instance (Kafka's GlobalStateManagerImpl).

Global stores live in `<state.dir>/<application.id>/global/` (`rocksdb/<store>/` and the
`.checkpoint` file), apart from the task directories. Each global store is filled from every
partition of its source topic, which is also its changelog: the store is never change-logged.

Offsets here are Kafka's global ones: the NEXT offset to read of each source partition (the
consumer position), not the last offset applied as in a task's checkpoint. The checkpoint is
read at `initialize()`, and written by `checkpoint()` for the topics of persistent stores only
(an in-memory store restores from the beginning, as in Kafka).

Typical life (the global thread's, or the TopologyTestDriver's)::

    manager = GlobalStateManager(state_directory, {"store": "topic"}, config)
    offsets = manager.initialize(stores)       # open the stores, read the checkpoint
    ... restore and update the stores, manager.update_offsets({tp: next_offset}) ...
    manager.flush(); manager.checkpoint()      # periodically and at a clean close
    manager.close()                            # (manager.wipe() after out-of-range offsets)
"""

from __future__ import annotations

import logging
import shutil
from pathlib import Path
from typing import Any, Iterable, Mapping, Optional

from confluent_kafka import TopicPartition

from state.checkpoint import CHECKPOINT_FILE_NAME, OffsetCheckpoint
from state.directory import StateDirectory
from state.errors import StateError
from state.store import BatchRestoreCallback, StateStore

logger = logging.getLogger(__name__)

GLOBAL_DIR_NAME = "global"
#: Kafka's task id of the global task (TaskId(-1, -1)); it tags metrics and cache namespaces.
GLOBAL_TASK_ID = "-1_-1"


class GlobalStateManager:
    """The global stores of one instance; implements `state.store.StoreContext` for them.
    Driven by one thread (the global thread); other threads only read the stores."""

    task_id = GLOBAL_TASK_ID

    def __init__(self, state_directory: StateDirectory, store_topics: Mapping[str, str],
                 config: Optional[dict] = None, thread_cache: Any = None) -> None:
        """`store_topics`: global store name -> its source topic. `thread_cache`: the cache of
        caching global stores (None: each gets a private one)."""
        self.state_directory = state_directory
        self.application_id = state_directory.application_id
        self.config = dict(config or {})
        self.thread_cache = thread_cache
        self.store_topics = dict(store_topics)
        self.task_dir: Path = state_directory.app_dir / GLOBAL_DIR_NAME
        self.checkpoint_file = OffsetCheckpoint(self.task_dir / CHECKPOINT_FILE_NAME)
        self._stores: dict[str, StateStore] = {}
        self._offsets: dict[TopicPartition, int] = {}
        self._initialized = False

    def __repr__(self) -> str:
        return f"GlobalStateManager({str(self.task_dir)!r}, stores={list(self._stores)})"

    # ----------------------------------------------------------- StoreContext

    def store_dir(self, store_name: str) -> Path:
        return self.task_dir / "rocksdb" / store_name

    def register(self, store: StateStore, restore_callback: Optional[BatchRestoreCallback], *, logged: bool) -> None:
        name = store.name
        if name not in self.store_topics:
            raise StateError(f"store {name!r} is not a global store (global stores: {sorted(self.store_topics)})")
        if name in self._stores:
            raise StateError(f"global store {name!r} has already been registered")
        if logged:
            raise StateError(f"global store {name!r} must not be change-logged: its topic "
                             f"{self.store_topics[name]!r} is its changelog")
        self._stores[name] = store

    def log_change(self, store_name: str, key: bytes, value: Optional[bytes], timestamp: int,
                   headers: Any = None) -> None:
        raise StateError(f"global store {store_name!r} is not change-logged")

    # ----------------------------------------------------------- lifecycle

    def initialize(self, stores: Iterable[StateStore]) -> dict[TopicPartition, int]:
        """Open (init) the global stores and read the checkpoint; returns the checkpointed next
        offset of each source partition. A checkpointed partition of a topic no global store
        reads is an error (Kafka: an application reset and state cleanup are needed)."""
        self.task_dir.mkdir(parents=True, exist_ok=True)
        checkpointed = self.checkpoint_file.read()
        topics = set(self.store_topics.values())
        unknown = sorted(f"{tp.topic}-{tp.partition}" for tp in checkpointed if tp.topic not in topics)
        if unknown:
            raise StateError(
                f"the global checkpoint {self.checkpoint_file.path} has partitions no global store reads: "
                f"{unknown}; reset the application and clean up its state directory")
        try:
            for store in stores:
                store.init(self)
        except BaseException:
            self.close()
            raise
        missing = sorted(set(self.store_topics) - set(self._stores))
        if missing:
            self.close()
            raise StateError(f"global stores {missing} were not registered when initialised")
        # an in-memory store starts empty whatever the checkpoint says (it was persistent before)
        persistent_topics = {self.store_topics[n] for n, s in self._stores.items() if s.persistent}
        self._offsets = {tp: o for tp, o in checkpointed.items() if tp.topic in persistent_topics}
        self._initialized = True
        return dict(self._offsets)

    @property
    def stores(self) -> dict[str, StateStore]:
        return dict(self._stores)

    def offsets(self) -> dict[TopicPartition, int]:
        """The next offset to read of each source partition, as far as the stores hold it."""
        return dict(self._offsets)

    def update_offsets(self, offsets: Mapping[TopicPartition, int]) -> None:
        self._offsets.update(offsets)

    def flush(self) -> None:
        """Flush every store; the first failure is raised after trying all."""
        first_error = None
        for name, store in self._stores.items():
            try:
                store.flush()
            except Exception as e:  # noqa: BLE001 - keep flushing the other stores
                logger.error("failed to flush global store %s: %s", name, e)
                first_error = first_error or e
        if first_error is not None:
            raise StateError(f"failed to flush global state stores: {first_error}") from first_error

    def checkpoint(self) -> None:
        """Write the offsets of the persistent stores' topics (the stores must be flushed first)."""
        if not self._initialized:
            return  # never overwrite a good checkpoint with a half-initialised state
        persistent_topics = {self.store_topics[n] for n, s in self._stores.items() if s.persistent}
        offsets = {tp: o for tp, o in self._offsets.items() if tp.topic in persistent_topics}
        logger.debug("writing the global checkpoint %s", offsets)
        self.checkpoint_file.write(offsets)

    def close(self) -> None:
        """Close every store (no flush, no checkpoint: the caller decides); the first failure is
        raised after trying all."""
        first_error = None
        for name, store in self._stores.items():
            try:
                if store.is_open:
                    store.close()
            except Exception as e:  # noqa: BLE001 - close the other stores too
                logger.error("failed to close global store %s: %s", name, e)
                first_error = first_error or e
        self._stores.clear()
        self._initialized = False
        if first_error is not None:
            raise StateError(f"failed to close global state stores: {first_error}") from first_error

    def wipe(self) -> None:
        """Delete the global state (stores and checkpoint), closing the stores first: after
        offsets out of range the next start restores every global store from the beginning."""
        if self._stores:
            try:
                self.close()
            except StateError:
                logger.exception("closing the global stores before wiping them failed")
        logger.info("deleting the global state directory %s", self.task_dir)
        shutil.rmtree(self.task_dir, ignore_errors=True)
