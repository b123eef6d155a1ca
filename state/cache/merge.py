"""Merging a sorted snapshot of cached entries with the wrapped store's iterator: the cache wins
on equal keys, and a cached delete (None) hides the store's entry."""

from __future__ import annotations

from typing import Callable, Iterator

from state.store import KeyValueIterator


def merge_sorted(cached: list, store_iter: KeyValueIterator, reverse: bool) -> Iterator:
    """Merge a sorted cache snapshot with a store iterator; the cache wins, cached deletes hide."""
    try:
        ci = iter(cached)
        c = next(ci, None)
        for item in store_iter:
            store_key = item[0]
            while c is not None and ((c[0] > store_key) if reverse else (c[0] < store_key)):
                if c[1] is not None:
                    yield c
                c = next(ci, None)
            if c is not None and c[0] == store_key:
                if c[1] is not None:
                    yield c
                c = next(ci, None)
            else:
                yield item
        while c is not None:
            if c[1] is not None:
                yield c
            c = next(ci, None)
    finally:
        store_iter.close()



def merge_sorted_by(cached: list, store_iter: KeyValueIterator, store_sort_key: Callable, reverse: bool) -> Iterator:
    """Merge a sorted cache snapshot of (sort_key, item-or-None) with a store iterator sorted the
    same way; the cache wins on equal sort keys and a None item (cached delete) hides the store's."""
    try:
        ci = iter(cached)
        c = next(ci, None)
        for item in store_iter:
            sk = store_sort_key(item)
            while c is not None and ((c[0] > sk) if reverse else (c[0] < sk)):
                if c[1] is not None:
                    yield c[1]
                c = next(ci, None)
            if c is not None and c[0] == sk:
                if c[1] is not None:
                    yield c[1]
                c = next(ci, None)
            else:
                yield item
        while c is not None:
            if c[1] is not None:
                yield c[1]
            c = next(ci, None)
    finally:
        store_iter.close()
