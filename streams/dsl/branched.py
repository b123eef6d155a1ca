"""`Branched`: how one branch of `KStream.split()` is named and post-processed (Kafka's Branched).

The branch-map rules live here (`branch_name`, `Branched.add_to`) so the split operator only
creates the branch streams: a branch is keyed `split name + branch name`; an unnamed branch is
named by its 1-based position and an unnamed default branch "0". A branch with a function is
replaced by the function's result (left out when the result is None); a branch with a consumer
is handed to the consumer and left out of the map.
"""

from __future__ import annotations

from typing import Any, Callable, Optional

from streams.errors import TopologyError

__all__ = ["Branched", "branch_name"]


class Branched:
    """A branch's name and optional chain function or consumer; immutable."""

    __slots__ = ("name", "chain_function", "chain_consumer")

    def __init__(self, name: Optional[str] = None, chain_function: Optional[Callable[[Any], Any]] = None,
                 chain_consumer: Optional[Callable[[Any], None]] = None) -> None:
        if name is not None and (not isinstance(name, str) or not name):
            raise TopologyError(f"Branched: name must be a non-empty string, got {name!r}")
        if chain_function is not None and chain_consumer is not None:
            raise TopologyError("Branched: a branch takes a function or a consumer, not both")
        object.__setattr__(self, "name", name)
        object.__setattr__(self, "chain_function", chain_function)
        object.__setattr__(self, "chain_consumer", chain_consumer)

    def __setattr__(self, key: str, value: Any) -> None:
        raise AttributeError("Branched is immutable")

    @classmethod
    def as_(cls, name: str) -> "Branched":
        if name is None:
            raise TopologyError("Branched.as_: name must not be None")
        return cls(name)

    @classmethod
    def with_function(cls, chain: Callable[[Any], Any], name: Optional[str] = None) -> "Branched":
        """The branch's entry in the result map becomes `chain(branch_stream)` (omitted if None)."""
        if not callable(chain):
            raise TopologyError(f"Branched.with_function: chain must be callable, got {chain!r}")
        return cls(name, chain_function=chain)

    @classmethod
    def with_consumer(cls, chain: Callable[[Any], None], name: Optional[str] = None) -> "Branched":
        """`chain(branch_stream)` is called and the branch is left out of the result map."""
        if not callable(chain):
            raise TopologyError(f"Branched.with_consumer: chain must be callable, got {chain!r}")
        return cls(name, chain_consumer=chain)

    def add_to(self, branches: dict, split_name: str, position: int, stream: Any) -> None:
        """Apply this branch's rule to `stream` and record the result in `branches` (in place).
        `position` is the branch's 1-based position, or 0 for the default branch."""
        key = branch_name(split_name, self.name, position)
        if key in branches:
            raise TopologyError(f"KStream.split: branch name {key!r} is used twice")
        if self.chain_function is not None:
            result = self.chain_function(stream)
            if result is not None:
                branches[key] = result
        elif self.chain_consumer is not None:
            self.chain_consumer(stream)
        else:
            branches[key] = stream

    def __eq__(self, other: object) -> bool:
        return (type(other) is Branched and other.name == self.name
                and other.chain_function is self.chain_function and other.chain_consumer is self.chain_consumer)

    def __hash__(self) -> int:
        return hash((self.name, id(self.chain_function), id(self.chain_consumer)))

    def __repr__(self) -> str:
        kind = ("function" if self.chain_function is not None
                else "consumer" if self.chain_consumer is not None else "stream")
        return f"Branched(name={self.name!r}, {kind})"


def branch_name(split_name: str, name: Optional[str], position: int) -> str:
    """Kafka's BranchedKStream key: the splitter's name (given or generated) + the branch name
    (or the position; "0" is the default branch)."""
    return split_name + (name if name is not None else str(position))
