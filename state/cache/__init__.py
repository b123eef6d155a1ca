"""Record caches (Kafka's ThreadCache / NamedCache / Caching*Store).

- thread_cache.py: ThreadCache (one byte budget per stream thread) and its named caches
- base.py: CachingStore, binding a store wrapper to its named cache
- kv.py: CachingKeyValueStore (and C increment_run, _cache.c, for an aggregation's hot case)
- window.py, session.py: the caching window and session stores
- merge.py: merging cached entries with the wrapped store's iterators
"""

from state.cache.base import CachingStore
from state.cache.kv import CachingKeyValueStore
from state.cache.session import CachingSessionStore
from state.cache.thread_cache import (CACHE_MAX_BYTES_CONFIG, DEFAULT_CACHE_MAX_BYTES, ENTRY_OVERHEAD, UNKNOWN,
                                      CacheEntry, DirtyEntry, NamedCache, ThreadCache)
from state.cache.window import CachingWindowStore

__all__ = ["ThreadCache", "NamedCache", "CacheEntry", "DirtyEntry", "CachingStore", "CachingKeyValueStore",
           "CachingWindowStore", "CachingSessionStore", "ENTRY_OVERHEAD", "UNKNOWN", "DEFAULT_CACHE_MAX_BYTES",
           "CACHE_MAX_BYTES_CONFIG"]
