"""The base of the caching stores: binds a store wrapper to its named cache in a ThreadCache."""

from __future__ import annotations

import threading
from typing import Any, Callable, Optional, Sequence

from state.cache.thread_cache import (CACHE_MAX_BYTES_CONFIG, DEFAULT_CACHE_MAX_BYTES, ENTRY_OVERHEAD, NamedCache,
                                      ThreadCache)
from state.errors import StateError, StoreClosedError
from state.store import StoreContext, WrappedStateStore, open_probe

class CachingStore(WrappedStateStore):
    """Binds a wrapper to its named cache in a `ThreadCache`.

    The `ThreadCache` is the one passed in (or set with `set_cache`) before `init`; otherwise the
    context's `thread_cache` attribute if it has one; otherwise a private cache sized by the
    context's `statestore.cache.max.bytes`.

    The layer below is reached through a small protocol, never by its type or private fields:
    a layer whose reads only delegate names the store they come from (`reads_from`: reads of old
    values skip it), and a layer that can take a flush's changes at once offers `write_changes`
    (the change-logging layers: the inner writes, then the changelog records); otherwise each
    change is its own `put`.
    """

    # the bytes Kafka's cache keys of this kind of store hold before the store key (the segment
    # id of a window or session store's), counted in each entry's size
    cache_key_prefix = 0
    # the thread that opened the store (set by init; see CachingKeyValueStore.get)
    _owner_thread: Optional[int] = None

    def __init__(self, wrapped, cache: Optional[ThreadCache] = None) -> None:
        super().__init__(wrapped)
        self._cache = cache
        self._namespace: Optional[str] = None
        self._named: Optional[NamedCache] = None  # set while open
        self._flush_listener: Optional[Callable] = None
        # where writes read their record context and flushes set it (`metadata`, `headers`):
        # the task's processor context (set_record_context); None: entries keep none
        self._record_context: Any = None
        # `self._probe.is_open` is `self.wrapped.is_open` without the delegation chain.
        self._probe = open_probe(wrapped)
        # The store whose reads answer `wrapped`'s (a layer that only delegates reads says so
        # with `reads_from`).
        reader = wrapped
        while getattr(reader, "reads_from", None) is not None:
            reader = reader.reads_from
        self._reader = reader

    def _write_changes(self, changes: list, put) -> None:
        """Write a flush's changes down: at once where the layer below offers `write_changes`,
        else `put(*change)` each."""
        write_changes = getattr(self.wrapped, "write_changes", None)
        if write_changes is not None:
            write_changes(changes)
            return
        for change in changes:
            put(*change)

    def set_cache(self, cache: ThreadCache) -> None:
        if self._namespace is not None:
            raise StateError(f"state store {self.name!r}: cannot change the cache after init")
        self._cache = cache

    @property
    def cache(self) -> Optional[ThreadCache]:
        return self._cache

    @property
    def namespace(self) -> Optional[str]:
        return self._namespace

    def init(self, context: StoreContext) -> None:
        super().init(context)
        if self._cache is None:
            cache = getattr(context, "thread_cache", None)
            if cache is None:
                config = getattr(context, "config", None) or {}
                cache = ThreadCache(int(config.get(CACHE_MAX_BYTES_CONFIG, DEFAULT_CACHE_MAX_BYTES)))
            self._cache = cache
        self._namespace = f"{getattr(context, 'task_id', 'none')}-{self.name}"
        self._cache.add_dirty_entry_flush_listener(self._namespace, self._write_down)
        self._named = self._cache.named_cache(self._namespace)
        self._named.context = self._record_context
        # the thread that opened the store (its stream thread, Kafka's streamThread): only its
        # reads put read-through entries into the cache (see CachingKeyValueStore.get)
        self._owner_thread = threading.get_ident()
        self._named.entry_overhead = ENTRY_OVERHEAD + self.cache_key_prefix

    def set_record_context(self, context: Any) -> None:
        """Where a write's record context comes from and where a flush sets each entry's (an
        object with `metadata` and `headers`: the task's processor context), as Kafka's caching
        stores use the processor context's record context."""
        self._record_context = context
        if self._named is not None:
            self._named.context = context
        super().set_record_context(context)

    def forward_in_contexts(self, changes: Sequence[tuple], forward: Callable[[tuple], None], at: int = 4) -> None:
        """`forward(change)` for each flushed change with the record context set to the
        change's own (`change[at]` its metadata, `change[at + 1]` its headers: a DirtyEntry's
        by default), the writer's put back after (Kafka's CachingKeyValueStore.putAndMaybeForward)."""
        context = self._record_context
        if context is None:
            for change in changes:
                forward(change)
            return
        metadata, headers = context.metadata, context.headers
        try:
            for change in changes:
                context.metadata, context.headers = change[at], change[at + 1]
                forward(change)
        finally:
            context.metadata, context.headers = metadata, headers

    def set_flush_listener(self, listener: Optional[Callable]) -> bool:
        """`listener(key, new_value, old_value, timestamp)` for each entry written down."""
        self._flush_listener = listener
        return True

    def _write_down(self, entries: list) -> None:  # pragma: no cover - overridden
        raise NotImplementedError

    def _check(self) -> ThreadCache:
        if self._named is None or not self._probe.is_open:
            raise StoreClosedError(f"state store {self.name!r} is not open")
        return self._cache

    def flush_cache(self) -> None:
        """Write dirty entries down (and forward them) without flushing the wrapped store."""
        self._check().flush(self._namespace)

    def flush(self) -> None:
        self.flush_cache()
        self.wrapped.flush()

    def close(self, dirty: bool = False) -> None:
        """Clean close flushes the cache first (like Kafka); dirty close drops dirty entries."""
        if self._namespace is None:
            self.wrapped.close(dirty)
            return
        errors = []
        try:
            if self.wrapped.is_open and not dirty:
                self._cache.flush(self._namespace)
        except Exception as exc:  # close the rest anyway; re-raise below
            errors.append(exc)
        self._cache.close(self._namespace)
        self._namespace = None
        self._named = None
        try:
            self.wrapped.close(dirty)
        except Exception as exc:
            errors.append(exc)
        if errors:
            raise errors[0]

    @property
    def is_open(self) -> bool:
        return self._named is not None and self._probe.is_open
