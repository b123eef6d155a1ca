"""The jar fetcher behind the local Kafka broker: cached once per machine, clear errors otherwise."""

from __future__ import annotations

from pathlib import Path

import pytest

from streams.testing import maven_jars
from streams.testing.maven_jars import BROKER_ARTIFACTS, JarFetchError, fetch_jars


@pytest.mark.parametrize("output, major", [
    ('openjdk version "17.0.15" 2025-04-15\nOpenJDK Runtime Environment', 17),
    ('java version "1.8.0_392"', 8),
    ('openjdk version "21" 2023-09-19', 21),
    ("something else", None),
])
def test_java_major_version_is_read_from_java_version(output: str, major: int | None) -> None:
    assert maven_jars._java_major(output) == major


def test_a_completed_fetch_is_reused_without_java_or_maven(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EDDY_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))  # no java, no mvn: a download would fail
    target = tmp_path / f"kafka-{maven_jars.KAFKA_VERSION}" / "broker"
    (target / "jars").mkdir(parents=True)
    (target / ".complete").write_text(maven_jars._pom("broker", BROKER_ARTIFACTS))
    assert fetch_jars("broker", BROKER_ARTIFACTS) == target


def test_a_fetch_for_other_artifacts_is_not_taken_for_a_completed_one(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EDDY_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    target = tmp_path / f"kafka-{maven_jars.KAFKA_VERSION}" / "broker"
    target.mkdir(parents=True)
    (target / ".complete").write_text("a pom of other artifacts")
    with pytest.raises(JarFetchError, match="cannot fetch Kafka jars: no java on PATH"):
        fetch_jars("broker", BROKER_ARTIFACTS)


def test_the_pom_pins_every_artifact() -> None:
    pom = maven_jars._pom("broker", BROKER_ARTIFACTS)
    assert "<packaging>pom</packaging>" in pom
    for group, artifact, version in BROKER_ARTIFACTS:
        assert f"<groupId>{group}</groupId><artifactId>{artifact}</artifactId><version>{version}</version>" in pom
