"""The orders Kafka's TopologyDescription text comes out in, which are those of Java collections:
a processor's stores print in java.util.HashSet order, and the successors/predecessors of a node
are a TreeSet whose comparator (sub-tree size, then name) is applied while the sizes still grow,
so their order depends on the order in which InternalTopologyBuilder.describeSubtopology visits
the nodes (a HashMap's). This module reproduces java.util.HashMap iteration order and
java.util.TreeMap (red-black tree) insertion, so `Topology.describe()` prints what Kafka prints.
"""

from __future__ import annotations

from typing import Any, Callable, Iterable, Iterator, Optional

__all__ = ["string_hash", "hash_order", "put_capacity", "copy_capacity", "TreeSet"]

_MASK = 0xFFFFFFFF


def string_hash(s: str) -> int:
    """java.lang.String.hashCode() as an unsigned 32-bit int (UTF-16 code units)."""
    data = s.encode("utf-16-be")
    h = 0
    for i in range(0, len(data), 2):
        h = (31 * h + (data[i] << 8 | data[i + 1])) & _MASK
    return h


def _bucket(s: str, capacity: int) -> int:
    h = string_hash(s)
    return (h ^ (h >> 16)) & (capacity - 1)  # HashMap.hash() then the table index


def put_capacity(n: int) -> int:
    """Table size of a HashMap/HashSet built empty and grown by n puts (load factor 0.75)."""
    capacity = 16
    while n > capacity * 3 // 4:
        capacity *= 2
    return capacity


def copy_capacity(n: int) -> int:
    """Table size of `new HashSet<>(collection)` of n elements."""
    wanted = max(int(n / 0.75) + 1, 16)
    capacity = 1
    while capacity < wanted:
        capacity *= 2
    return capacity


def hash_order(names: Iterable[str], capacity: int) -> list[str]:
    """Iteration order of a HashMap/HashSet of these names inserted in this order: by table
    bucket, then insertion order within a bucket (a resize keeps the relative order)."""
    names = list(names)
    return sorted(names, key=lambda n: _bucket(n, capacity))  # sorted() is stable


class _Entry:
    __slots__ = ("key", "left", "right", "parent", "red")

    def __init__(self, key: Any, parent: Optional["_Entry"]) -> None:
        self.key = key
        self.left: Optional[_Entry] = None
        self.right: Optional[_Entry] = None
        self.parent = parent
        self.red = False


class TreeSet:
    """java.util.TreeSet: a red-black tree keeping the shape Java's TreeMap.put gives it, so a
    comparator whose answers change between insertions leaves the elements in Java's order."""

    def __init__(self, compare: Callable[[Any, Any], int]) -> None:
        self.compare = compare
        self.root: Optional[_Entry] = None

    def add(self, key: Any) -> None:
        t = self.root
        if t is None:
            self.root = _Entry(key, None)
            return
        while True:
            parent = t
            cmp = self.compare(key, t.key)
            if cmp == 0:
                return
            t = t.left if cmp < 0 else t.right
            if t is None:
                break
        entry = _Entry(key, parent)
        if cmp < 0:
            parent.left = entry
        else:
            parent.right = entry
        self._fix_after_insertion(entry)

    def __iter__(self) -> Iterator[Any]:
        stack: list[_Entry] = []
        node = self.root
        while stack or node is not None:
            while node is not None:
                stack.append(node)
                node = node.left
            node = stack.pop()
            yield node.key
            node = node.right

    # TreeMap's rotations and fixAfterInsertion (CLR), each written once for both sides: `left`
    # is rotateLeft (the right child comes up), else rotateRight
    def _rotate(self, p: Optional[_Entry], left: bool) -> None:
        if p is None:
            return
        up, across = ("right", "left") if left else ("left", "right")
        child = getattr(p, up)
        moved = getattr(child, across)
        setattr(p, up, moved)
        if moved is not None:
            moved.parent = p
        child.parent = p.parent
        if p.parent is None:
            self.root = child
        elif getattr(p.parent, across) is p:
            setattr(p.parent, across, child)
        else:
            setattr(p.parent, up, child)
        setattr(child, across, p)
        p.parent = child

    def _fix_after_insertion(self, x: Optional[_Entry]) -> None:
        def parent(e: Optional[_Entry]) -> Optional[_Entry]:
            return None if e is None else e.parent

        def set_red(e: Optional[_Entry], red: bool) -> None:
            if e is not None:
                e.red = red

        x.red = True
        while x is not None and x is not self.root and x.parent.red:
            grand = parent(parent(x))
            on_left = parent(x) is (None if grand is None else grand.left)
            inner = "right" if on_left else "left"
            uncle = None if grand is None else getattr(grand, inner)
            if uncle is not None and uncle.red:
                set_red(parent(x), False)
                set_red(uncle, False)
                set_red(grand, True)
                x = grand
            else:
                if x is getattr(parent(x), inner):
                    x = parent(x)
                    self._rotate(x, left=on_left)
                set_red(parent(x), False)
                set_red(parent(parent(x)), True)
                self._rotate(parent(parent(x)), left=not on_left)
        self.root.red = False
