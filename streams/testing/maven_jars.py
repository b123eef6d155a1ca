"""Fetch Apache Kafka's jars from Maven Central once per machine, for the test broker,
the Kafka Streams benchmark and the conformance harness.

`fetch_jars` writes a small POM (type ``pom``) declaring the wanted artifacts into a
cache directory (``~/.cache/eddy/kafka-<version>/<name>`` unless ``EDDY_CACHE_DIR``
says otherwise) and runs ``mvn dependency:copy-dependencies`` into it. A file lock
serialises parallel pytest processes; a marker file written after success makes the
second call a directory listing.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import logging
import os
import shutil
import subprocess
from pathlib import Path
from typing import Iterator, Sequence

from streams.errors import StreamsError

logger = logging.getLogger(__name__)

#: The pinned Apache Kafka release (broker, Kafka Streams, test utils).
KAFKA_VERSION = "4.1.1"
#: Kafka 4.1 logs through SLF4J 1.7; this binding routes it to log4j2 (at Kafka's own log4j2 version).
LOG4J2_VERSION = "2.24.3"

LOG4J2_ARTIFACTS = (
    ("org.apache.logging.log4j", "log4j-slf4j-impl", LOG4J2_VERSION),
    ("org.apache.logging.log4j", "log4j-api", LOG4J2_VERSION),
    ("org.apache.logging.log4j", "log4j-core", LOG4J2_VERSION),
)
#: What a single-node KRaft broker needs on its class path.
BROKER_ARTIFACTS = (("org.apache.kafka", "kafka_2.13", KAFKA_VERSION), *LOG4J2_ARTIFACTS)
#: Kafka Streams and its TopologyTestDriver, for the benchmark and the conformance harness.
STREAMS_ARTIFACTS = (
    ("org.apache.kafka", "kafka-streams", KAFKA_VERSION),
    ("org.apache.kafka", "kafka-streams-test-utils", KAFKA_VERSION),
    *LOG4J2_ARTIFACTS,
)

_MVN_TIMEOUT_S = 600.0
_DONE_MARKER = ".complete"


class JarFetchError(StreamsError):
    """The jars could not be had (no java/mvn, or Maven failed); the message says why."""


class JavaCompileError(StreamsError):
    """javac refused the project's own Java helpers: a bug to fix, never a reason to skip (as a
    missing JDK, JarFetchError, may be)."""


def cache_root() -> Path:
    """Where fetched jars live: ``$EDDY_CACHE_DIR`` or ``~/.cache/eddy``."""
    configured = os.environ.get("EDDY_CACHE_DIR", "").strip()
    return Path(configured) if configured else Path.home() / ".cache" / "eddy"


def java_problem() -> str | None:
    """None when ``java`` 17+ and ``mvn`` are on PATH, else why not."""
    java = shutil.which("java")
    if java is None:
        return "no java on PATH"
    if shutil.which("mvn") is None:
        return "no mvn on PATH"
    try:
        out = subprocess.run([java, "-version"], capture_output=True, text=True, timeout=30).stderr
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"java -version failed ({exc})"
    major = _java_major(out)
    if major is None:
        return f"cannot read the java version from {out.strip()[:200]!r}"
    if major < 17:
        return f"java {major} is older than 17, which Kafka 4 needs"
    return None


def _java_major(version_output: str) -> int | None:
    # 'openjdk version "17.0.15" 2025-04-15' or 'java version "1.8.0_392"'
    for line in version_output.splitlines():
        if 'version "' in line:
            number = line.split('version "', 1)[1].split('"', 1)[0]
            parts = number.split(".")
            with contextlib.suppress(ValueError):
                return int(parts[1]) if parts[0] == "1" else int(parts[0])
    return None


def _pom(name: str, artifacts: Sequence[tuple[str, str, str]]) -> str:
    deps = "\n".join(
        f"    <dependency><groupId>{g}</groupId><artifactId>{a}</artifactId><version>{v}</version></dependency>"
        for g, a, v in artifacts
    )
    return f"""<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>eddy.testing</groupId>
  <artifactId>{name}</artifactId>
  <version>1</version>
  <packaging>pom</packaging>
  <dependencies>
{deps}
  </dependencies>
</project>
"""


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a+") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def fetch_jars(name: str, artifacts: Sequence[tuple[str, str, str]] = BROKER_ARTIFACTS,
               version: str = KAFKA_VERSION) -> Path:
    """Return a directory holding ``artifacts`` and their runtime dependencies as jars.

    Downloads them with Maven the first time (under a lock, so concurrent callers wait
    for one download); later calls find the marker file and return at once.
    Raises `JarFetchError` naming the reason when java/mvn are missing or Maven fails.
    """
    target = cache_root() / f"kafka-{version}" / name
    pom_text = _pom(name, artifacts)
    if (target / _DONE_MARKER).is_file() and (target / _DONE_MARKER).read_text() == pom_text:
        return target
    problem = java_problem()
    if problem is not None:
        raise JarFetchError(f"cannot fetch Kafka jars: {problem}")
    with _locked(target.parent / f".{name}.lock"):
        if (target / _DONE_MARKER).is_file() and (target / _DONE_MARKER).read_text() == pom_text:
            return target  # another process fetched them while this one waited
        jars = target / "jars"
        shutil.rmtree(jars, ignore_errors=True)
        target.mkdir(parents=True, exist_ok=True)
        pom = target / "pom.xml"
        pom.write_text(pom_text)
        command = ["mvn", "-q", "-B", "-f", str(pom), "dependency:copy-dependencies",
                   "-DincludeScope=runtime", f"-DoutputDirectory={jars}"]
        logger.info("fetching Kafka %s jars (%s) with Maven into %s", version, name, jars)
        try:
            done = subprocess.run(command, capture_output=True, text=True, timeout=_MVN_TIMEOUT_S,
                                  stdin=subprocess.DEVNULL)
        except subprocess.TimeoutExpired as exc:
            raise JarFetchError(f"mvn did not fetch the Kafka jars within {_MVN_TIMEOUT_S:.0f}s") from exc
        if done.returncode != 0:
            tail = (done.stdout + done.stderr)[-2000:].strip()
            raise JarFetchError(f"mvn failed (exit {done.returncode}) fetching Kafka jars: {tail}")
        if not any(jars.glob("*.jar")):
            raise JarFetchError(f"mvn reported success but {jars} holds no jar")
        (target / _DONE_MARKER).write_text(pom_text)
    return target


def class_path(directory: Path) -> str:
    """The ``-cp`` argument for the jars `fetch_jars` put in ``directory``."""
    return str(directory / "jars" / "*")


def compile_java(sources: Sequence[Path], jars: Path) -> Path:
    """Compile ``sources`` with ``javac`` against the jars of ``jars`` (a `fetch_jars` directory);
    return the classes directory. Cached by the sources' content, under the same lock."""
    digest = hashlib.sha256()
    for source in sorted(sources):
        digest.update(source.name.encode() + b"\0" + source.read_bytes())
    classes = jars / f"classes-{digest.hexdigest()[:16]}"
    if (classes / _DONE_MARKER).is_file():
        return classes
    javac = shutil.which("javac")
    if javac is None:
        raise JarFetchError("no javac on PATH (a JDK 17+ is needed to build the Java helpers)")
    with _locked(jars.parent / f".{jars.name}.lock"):
        if (classes / _DONE_MARKER).is_file():
            return classes
        shutil.rmtree(classes, ignore_errors=True)
        classes.mkdir(parents=True)
        done = subprocess.run([javac, "-nowarn", "-d", str(classes), "-cp", class_path(jars),
                               *map(str, sources)], capture_output=True, text=True, timeout=_MVN_TIMEOUT_S)
        if done.returncode != 0:
            raise JavaCompileError(f"javac failed (exit {done.returncode}): {(done.stdout + done.stderr)[-3000:]}")
        (classes / _DONE_MARKER).write_text("\n".join(map(str, sources)))
    return classes
