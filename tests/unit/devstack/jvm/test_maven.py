"""Unit tests of Maven's bootstrap (devstack/jvm/maven.py): a fake distribution in a file: repository."""
from __future__ import annotations

import hashlib
import io
import tarfile
from pathlib import Path

import pytest

from laminar_kafka.devstack.errors import ArtifactError
from laminar_kafka.devstack.jvm import maven
from laminar_kafka.devstack.jvm.fetch import ChecksumError
from laminar_kafka.devstack.jvm.locks import LockedJar

FAKE = LockedJar("org.apache.maven", "apache-maven", "9.9.9", "bin", "tar.gz")


def _distribution(repository: Path, members: dict[str, bytes]) -> LockedJar:
    """A tar.gz of ``members`` (path -> content, executable) published as FAKE; FAKE locked to it."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        for name, content in members.items():
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(content), 0o755
            tar.addfile(info, io.BytesIO(content))
    path = repository / FAKE.url("").lstrip("/")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(buffer.getvalue())
    return FAKE.with_sha256(hashlib.sha256(buffer.getvalue()).hexdigest())


def test_the_distribution_is_unpacked_into_the_cache_once(tmp_path: Path) -> None:
    repository, cache = tmp_path / "repository", tmp_path / "cache"
    locked = _distribution(repository, {"apache-maven-9.9.9/bin/mvn": b"#!/bin/sh\necho maven\n"})
    mvn = maven.bootstrap_maven(cache, repository.as_uri(), locked)
    assert mvn == cache / "apache-maven-9.9.9" / "bin" / "mvn"
    assert mvn.read_bytes() == b"#!/bin/sh\necho maven\n" and mvn.stat().st_mode & 0o100
    (repository / FAKE.url("").lstrip("/")).unlink()  # a second call downloads nothing
    assert maven.bootstrap_maven(cache, repository.as_uri(), locked) == mvn


def test_a_tampered_distribution_is_refused(tmp_path: Path) -> None:
    repository = tmp_path / "repository"
    locked = _distribution(repository, {"apache-maven-9.9.9/bin/mvn": b"x"})
    _distribution(repository, {"apache-maven-9.9.9/bin/mvn": b"tampered"})
    with pytest.raises(ChecksumError, match="apache-maven-9.9.9-bin.tar.gz"):
        maven.bootstrap_maven(tmp_path / "cache", repository.as_uri(), locked)
    assert not (tmp_path / "cache" / "apache-maven-9.9.9").exists()


def test_an_archive_without_mvn_is_refused(tmp_path: Path) -> None:
    repository = tmp_path / "repository"
    locked = _distribution(repository, {"something-else/README": b"x"})
    with pytest.raises(ArtifactError, match="holds no apache-maven-9.9.9/bin/mvn"):
        maven.bootstrap_maven(tmp_path / "cache", repository.as_uri(), locked)


def test_mvn_on_path_comes_first(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    mvn = tmp_path / "bin" / "mvn"
    mvn.parent.mkdir()
    mvn.write_text("#!/bin/sh\n")
    mvn.chmod(0o755)
    monkeypatch.setenv("PATH", str(mvn.parent))
    monkeypatch.setattr(maven, "bootstrap_maven", lambda cache: pytest.fail("mvn is on PATH"))
    assert maven.maven_executable(tmp_path / "cache") == str(mvn)


def test_the_pinned_distribution_is_a_locked_maven_central_artifact() -> None:
    assert maven.MAVEN_DISTRIBUTION.url("https://repo1.maven.org/maven2") == (
        "https://repo1.maven.org/maven2/org/apache/maven/apache-maven/3.9.16/apache-maven-3.9.16-bin.tar.gz")
    assert len(maven.MAVEN_DISTRIBUTION.sha256) == 64
