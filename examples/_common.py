"""What every example does before it starts: a fresh data directory and the embedded cluster's
bootstrap address under it."""

from __future__ import annotations

import os
import shutil


def fresh_data_dir(path: str) -> str:
    """`path` made absolute, emptied and created: each run of an example starts from nothing."""
    data_dir = os.path.abspath(path)
    shutil.rmtree(data_dir, ignore_errors=True)
    os.makedirs(data_dir)
    return data_dir


def embedded_bootstrap(data_dir: str) -> str:
    """The bootstrap address of the embedded cluster kept in `data_dir`/cluster."""
    return f"local://{data_dir}/cluster"
