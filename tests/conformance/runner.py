"""Runs conformance scenarios through Kafka Streams' TopologyTestDriver in one JVM.

The JVM (ConformanceDriver.java) prints one result per scenario as it ends; `KafkaStreamsRun`
starts it in the background and hands the results out in order, so the Eddy side of the
harness compares scenario after scenario while the JVM runs the next ones (two cores busy,
not one after the other).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
import threading
from pathlib import Path
from typing import Optional

import vocabulary
from vocabulary import canonical

from streams.testing.maven_jars import STREAMS_ARTIFACTS, class_path, compile_java, fetch_jars

HERE = Path(__file__).parent
#: a JVM that runs longer is killed as hung: 600 s, and 0.1 s more per scenario (the JVM lives
#: until the harness has read every result, so a big run lasts as long as Eddy's side of it)
_JVM_TIMEOUT_S, _JVM_TIMEOUT_PER_SCENARIO_S = 600.0, 0.1
#: C1 only: a short run of many small topologies gains nothing from C2 but its compile threads'
#: CPU (measured: about 40% less wall time for a few hundred scenarios on 2 cores)
_JVM_FLAGS = ("-Xmx512m", "-XX:TieredStopAtLevel=1")


def scratch_dir(prefix: str) -> Path:
    """A fresh directory in RAM when the machine has /dev/shm: both test drivers checkpoint
    (fsync) after every record, which is the cost of a scenario on a disk."""
    shm = "/dev/shm"
    base = shm if os.path.isdir(shm) and os.access(shm, os.W_OK) else None
    return Path(tempfile.mkdtemp(prefix=prefix, dir=base))


def run_eddy(scenario: dict, work: Path, **kwargs) -> dict:
    """`vocabulary.run_eddy` in a fresh state directory under `work`, removed once the run is
    over: a campaign runs thousands of scenarios, and their RocksDB files in `scratch_dir`
    would fill /dev/shm (RAM)."""
    state_dir = tempfile.mkdtemp(dir=work)
    try:
        return vocabulary.run_eddy(scenario, state_dir, **kwargs)
    finally:
        shutil.rmtree(state_dir, ignore_errors=True)


class KafkaStreamsRun:
    """ConformanceDriver.java over `scenarios`, started at once; `result(seed)` waits for the
    scenarios up to that one. Raises JarFetchError when Java or the jars are missing."""

    def __init__(self, scenarios: list[dict]) -> None:
        self._scenarios = {s["seed"]: s for s in scenarios}
        self._results: dict[int, dict] = {}
        jars = fetch_jars("streams", STREAMS_ARTIFACTS)
        classes = compile_java([HERE / "java" / "ConformanceDriver.java"], jars)
        self._work = scratch_dir("eddy-conformance-")
        (self._work / "scenarios.json").write_text(json.dumps(scenarios))
        self._stderr = open(self._work / "stderr.txt", "w+")
        self._proc: Optional[subprocess.Popen] = subprocess.Popen(
            [shutil.which("java") or "java", *_JVM_FLAGS, "-cp", f"{classes}:{class_path(jars)}",
             f"-Djava.io.tmpdir={self._work}", "ConformanceDriver", str(self._work / "scenarios.json"),
             str(self._work / "state")],
            stdout=subprocess.PIPE, stderr=self._stderr, stdin=subprocess.DEVNULL, text=True)
        # a JVM that hangs is killed (this run's own process) and its reader sees the end
        self._watchdog = threading.Timer(_JVM_TIMEOUT_S + _JVM_TIMEOUT_PER_SCENARIO_S * len(scenarios),
                                         self._proc.kill)
        self._watchdog.daemon = True
        self._watchdog.start()

    def __getitem__(self, seed: int) -> dict:
        return self.result(seed)

    def result(self, seed: int) -> dict:
        """The result of scenario `seed` (store contents canonical, as vocabulary.run_eddy's)."""
        if seed not in self._scenarios:
            raise KeyError(f"seed {seed} was not given to this run")
        while seed not in self._results:
            line = self._proc.stdout.readline() if self._proc is not None else ""
            if not line:
                raise RuntimeError(f"ConformanceDriver ended before seed {seed}: {self._failure()}")
            result = json.loads(line)
            if result.get("store") is not None:
                result["store"] = canonical(self._scenarios[result["seed"]], result["store"])
            self._results[result["seed"]] = result
        return self._results[seed]

    def _failure(self) -> str:
        code = None
        if self._proc is not None:
            try:
                code = self._proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                code = "still running"
        self._stderr.seek(0)
        return f"exit {code}: {self._stderr.read()[-3000:]}"

    def close(self) -> None:
        """Stop the JVM (if it still runs) and remove its files."""
        self._watchdog.cancel()
        proc, self._proc = self._proc, None
        if proc is not None:
            if proc.poll() is None:
                proc.kill()  # the process this run started, by its handle
            proc.wait()
            proc.stdout.close()
        self._stderr.close()
        shutil.rmtree(self._work, ignore_errors=True)

    def __enter__(self) -> "KafkaStreamsRun":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def run_kafka_streams(scenarios: list[dict]) -> dict[int, dict]:
    """{seed: result} for all of `scenarios`, run through Kafka Streams in one JVM."""
    with KafkaStreamsRun(scenarios) as run:
        return {s["seed"]: run.result(s["seed"]) for s in scenarios}
