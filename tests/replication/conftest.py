import sys
from pathlib import Path

# Shared workloads (fault_workload.py) live beside the tests that use them.
sys.path.insert(0, str(Path(__file__).parent))
