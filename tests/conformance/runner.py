"""Runs a batch of conformance scenarios through Kafka Streams' TopologyTestDriver in one JVM."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from streams.testing.maven_jars import STREAMS_ARTIFACTS, class_path, compile_java, fetch_jars

HERE = Path(__file__).parent
_JVM_TIMEOUT_S = 600.0


def scratch_dir(prefix: str) -> Path:
    """A fresh directory in RAM when the machine has /dev/shm: both test drivers checkpoint
    (fsync) after every record, which is the cost of a scenario on a disk."""
    shm = "/dev/shm"
    base = shm if os.path.isdir(shm) and os.access(shm, os.W_OK) else None
    return Path(tempfile.mkdtemp(prefix=prefix, dir=base))


def run_kafka_streams(scenarios: list[dict]) -> dict[int, dict]:
    """{seed: result} from ConformanceDriver.java; raises JarFetchError when Java or the jars are missing."""
    jars = fetch_jars("streams", STREAMS_ARTIFACTS)
    classes = compile_java([HERE / "java" / "ConformanceDriver.java"], jars)
    work = scratch_dir("eddy-conformance-")
    try:
        (work / "scenarios.json").write_text(json.dumps(scenarios))
        done = subprocess.run(
            [shutil.which("java") or "java", "-Xmx512m", "-cp", f"{classes}:{class_path(jars)}",
             f"-Djava.io.tmpdir={work}", "ConformanceDriver", str(work / "scenarios.json"), str(work / "results.json"),
             str(work / "state")],
            capture_output=True, text=True, timeout=_JVM_TIMEOUT_S, stdin=subprocess.DEVNULL)
        if done.returncode != 0:
            raise RuntimeError(f"ConformanceDriver failed (exit {done.returncode}): {(done.stdout + done.stderr)[-3000:]}")
        return {r["seed"]: r for r in json.loads((work / "results.json").read_text())}
    finally:
        shutil.rmtree(work, ignore_errors=True)
