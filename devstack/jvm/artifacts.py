"""The Kafka and ZooKeeper jars: pinned by `pom.xml` beside this module, resolved once into a cache.

A build whose jars are locked (`laminar_kafka.devstack.jvm.locks`: the pins, the compatibility
matrix's releases, the REST catalog's and Kafka Connect's jars) is downloaded from Maven Central
and checked against its lock's SHA-256s, without Maven or Java. Any other build (a release the locks
do not cover, chosen with ``LAMINAR_KAFKA_VERSION`` / ``LAMINAR_ZOOKEEPER_VERSION``:
`laminar_kafka.devstack.jvm.versions`) is resolved by Maven through the same POM with its version
properties overridden (the ``mvn`` on PATH, else Maven's own distribution from Maven Central:
`laminar_kafka.devstack.jvm.maven`). Either way the first call fills the build's cache directory, and later calls
find it complete and return at once.
"""
from __future__ import annotations

import logging
import os
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

from laminar_kafka.devstack.errors import ArtifactError, ToolMissingError
from laminar_kafka.devstack.jvm.cache import cached_build, default_cache_dir
from laminar_kafka.devstack.jvm.fetch import fetch_jars
from laminar_kafka.devstack.jvm.java import JAVA_HINT, find_java
from laminar_kafka.devstack.jvm.locks import LOCKS_DIR, MAVEN_CENTRAL, JarBuild, read_lock
from laminar_kafka.devstack.jvm.maven import maven_executable
from laminar_kafka.devstack.jvm.versions import POM_PATH, ServerVersions, pinned_versions, selected_versions

logger = logging.getLogger(__name__)

__all__ = [
    "JAVA_HINT", "LOG_TAIL_LINES", "POM_PATH", "artifacts_dir", "cached_build", "cached_jar_build",
    "cached_maven_build", "default_cache_dir", "ensure_artifacts", "kafka_build", "pinned_versions", "require_tool",
]

LOG_TAIL_LINES = 30

def require_tool(name: str, hint: str) -> str:
    """Return the path of executable `name`, or raise ToolMissingError with one line saying what to install."""
    path = shutil.which(name)
    if path is None:
        raise ToolMissingError(hint)
    return path


def cached_maven_build(target: Path, marker_text: str, what: str, maven_args: Callable[[Path], list[str]],
                       built_in: Callable[[Path], Path]) -> Path:
    """``target`` (a directory of the cache) built once by Maven; return it (see :func:`cached_build`).

    ``maven_args(staging)`` are Maven's arguments for a build into the fresh directory ``staging``;
    ``built_in(staging)`` is the directory that build produced, which becomes ``target`` (raise
    :class:`ArtifactError` there when it is incomplete). Maven is the ``mvn`` on PATH, else Apache
    Maven's distribution downloaded into the cache (`laminar_kafka.devstack.jvm.maven`); it runs on
    :func:`find_java`'s Java (as its ``JAVA_HOME``). Raises ToolMissingError without Java,
    ArtifactError when Maven cannot be had or the build fails (with the tail of Maven's output).
    """
    if (target / ".complete").exists():
        return target
    java_home = find_java().java.parent.parent
    mvn = maven_executable(target.parent)

    def produce(staging: Path) -> Path:
        logger.info("Maven: %s (first use only)", what)
        result = subprocess.run([mvn, "-q", "-B", *maven_args(staging)], capture_output=True, text=True,
                                stdin=subprocess.DEVNULL, env={**os.environ, "JAVA_HOME": str(java_home)})
        if result.returncode != 0:
            tail = "\n".join((result.stdout + result.stderr).splitlines()[-LOG_TAIL_LINES:])
            raise ArtifactError(f"Maven could not {what}:\n{tail}")
        return built_in(staging)

    return cached_build(target, marker_text, produce)


def cached_jar_build(cache: Path, build: JarBuild, marker_text: str, what: str, check: Callable[[Path], None], *,
                     base_url: str = MAVEN_CENTRAL, locks_dir: Path = LOCKS_DIR) -> Path:
    """The jars of ``build`` in ``<cache>/<build.name>``, resolved once; return that directory.

    With a lock (:func:`~laminar_kafka.devstack.jvm.locks.read_lock`) they are downloaded from the
    Maven repository at ``base_url`` and each checked against its SHA-256 (a mismatch raises
    :class:`~laminar_kafka.devstack.jvm.fetch.ChecksumError` naming the file); without one Maven
    resolves them (:func:`cached_maven_build`). ``check(directory)`` raises ArtifactError when the
    jars lack one the caller needs.
    """
    target = cache / build.name
    jars = read_lock(build.name, locks_dir)
    if jars is None:
        def built_in(staging: Path) -> Path:
            check(staging)
            return staging

        return cached_maven_build(target, marker_text, what, build.maven_args, built_in)

    def produce(staging: Path) -> Path:
        logger.info("Maven Central: %s, %d locked jars (first use only)", what, len(jars))
        fetch_jars(jars, staging, base_url)
        check(staging)
        return staging

    return cached_build(target, marker_text, produce)


def artifacts_dir(cache: Path, versions: ServerVersions) -> Path:
    """The cache directory of one (Kafka, ZooKeeper) pair: ``jvm-kafka-<k>-zookeeper-<z>``."""
    return cache / f"jvm-kafka-{versions.kafka}-zookeeper-{versions.zookeeper}"


def kafka_build(versions: ServerVersions) -> JarBuild:
    """The build of one (Kafka, ZooKeeper) pair: `pom.xml` with both versions overridden."""
    return JarBuild(f"jvm-kafka-{versions.kafka}-zookeeper-{versions.zookeeper}", POM_PATH,
                    (("kafka.version", versions.kafka), ("zookeeper.version", versions.zookeeper)))


def ensure_artifacts(cache_dir: Path | None = None, versions: ServerVersions | None = None) -> Path:
    """Resolve the Kafka and ZooKeeper jars (with their runtime dependencies) into the cache.

    ``versions`` defaults to :func:`~laminar_kafka.devstack.jvm.versions.selected_versions` (the POM's
    pins unless the environment chooses others). Returns the directory holding the jars: one
    classpath for both servers, in which the POM's ZooKeeper wins over the one Kafka 3.x depends on
    (so a ZooKeeper-mode broker's client is the chosen ZooKeeper release). The first call for a pair
    downloads its locked jars from Maven Central, or runs Maven when no lock covers the pair; later
    calls find the completed directory and return at once (see :func:`cached_jar_build`).
    """
    cache = cache_dir or default_cache_dir()
    chosen = versions or selected_versions()

    def check(directory: Path) -> None:
        if not any(directory.glob(f"*kafka_2.13-{chosen.kafka}.jar")):
            raise ArtifactError(f"no Kafka {chosen.kafka} jar was resolved")
        if not any(directory.glob(f"*zookeeper-{chosen.zookeeper}.jar")):
            raise ArtifactError(f"no ZooKeeper {chosen.zookeeper} jar was resolved")

    return cached_jar_build(cache, kafka_build(chosen), f"kafka={chosen.kafka}\nzookeeper={chosen.zookeeper}\n",
                            f"resolve Kafka {chosen.kafka} and ZooKeeper {chosen.zookeeper}", check)
