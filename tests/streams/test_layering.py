"""Layering that can be seen: streams/ and state/ import nothing from replication/ (only
streams/backends.py, the backend factory, may), and replication/ never imports streams/ or state/."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _imported_modules(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), str(path))
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module)
    return names


def _top_packages(path: Path) -> set[str]:
    return {name.split(".")[0] for name in _imported_modules(path)}


@pytest.mark.parametrize("package, forbidden, allowed", [
    ("streams", {"replication"}, {"streams/backends.py"}),
    ("state", {"replication"}, set()),
    ("replication", {"streams", "state"}, set()),
    ("eddy", {"streams", "state", "replication", "connectors"}, set()),
])
def test_layers_import_only_what_is_below_them(package, forbidden, allowed):
    offenders = {}
    for path in sorted((ROOT / package).rglob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        if rel in allowed:
            continue
        bad = _top_packages(path) & forbidden
        if bad:
            offenders[rel] = sorted(bad)
    assert offenders == {}
