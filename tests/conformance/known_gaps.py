"""Divergences from Kafka Streams found by this harness and being fixed on another branch.

Each gap names the branch that fixes it and recognises its own mismatches narrowly: by the
scenario's shape and the records that trigger it, and where the gap leaves a recognisable trace
by what differs (a scenario of the same shape that differs in another way still fails). The
test xfails a mismatch a gap explains, with the gap's reason; once the branch lands, the gap
explains nothing any more and its entry can go.
"""

from __future__ import annotations

from typing import Callable, NamedTuple, Optional


class Gap(NamedTuple):
    name: str
    branch: str
    reason: str
    explains: Callable[[dict, dict, dict], bool]  # (scenario, got, expected) -> bool


#: none open: each gap found so far is fixed (its scenarios are regressions.py's)
GAPS: tuple[Gap, ...] = ()


def explain(scenario: dict, got: dict, expected: dict) -> Optional[Gap]:
    """The known gap that explains this mismatch, if any."""
    for gap in GAPS:
        if gap.explains(scenario, got, expected):
            return gap
    return None
