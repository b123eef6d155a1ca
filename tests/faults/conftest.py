"""The fault campaign (issue 20): every test here is ``slow`` and prints its seed."""

import sys
from pathlib import Path

import pytest

HERE = Path(__file__).parent
# The campaign reuses the replication tests' workloads and helpers (fault_workload.py, ...).
sys.path.insert(0, str(HERE.parent / "replication"))
sys.path.insert(0, str(HERE))


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if HERE in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.slow)
