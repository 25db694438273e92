"""The Kafka and ZooKeeper jars: pinned by `pom.xml` beside this module, resolved once into a cache.

Maven resolves the official Maven Central artifacts (with their runtime dependencies); the first
call runs it, later calls find the completed cache directory and return at once. Other releases
than the pins (`laminar_kafka.devstack.jvm.versions`: ``LAMINAR_KAFKA_VERSION``,
``LAMINAR_ZOOKEEPER_VERSION``) resolve through the same POM with its version properties overridden,
each pair of versions into its own cache directory.
"""
from __future__ import annotations

import fcntl
import logging
import os
import shutil
import subprocess
import tempfile
from collections.abc import Callable
from pathlib import Path

from laminar_kafka.devstack.errors import ArtifactError, ToolMissingError
from laminar_kafka.devstack.jvm.versions import POM_PATH, ServerVersions, pinned_versions, selected_versions

logger = logging.getLogger(__name__)

__all__ = [
    "JAVA_HINT", "LOG_TAIL_LINES", "MAVEN_HINT", "POM_PATH", "cached_maven_build", "copy_dependencies", "default_cache_dir", "ensure_artifacts",
    "artifacts_dir", "pinned_versions", "require_tool",
]

LOG_TAIL_LINES = 30

JAVA_HINT = "Java 17 or newer is required to run Kafka and ZooKeeper: install it (Debian: apt-get install openjdk-17-jre-headless)"
MAVEN_HINT = "Maven is required to fetch the Kafka and ZooKeeper artifacts: install it (Debian: apt-get install maven)"


def default_cache_dir() -> Path:
    """`$LAMINAR_CACHE_DIR`, else `~/.cache/laminar-kafka`."""
    configured = os.environ.get("LAMINAR_CACHE_DIR")
    if configured:
        return Path(configured)
    return Path.home() / ".cache" / "laminar-kafka"


def require_tool(name: str, hint: str) -> str:
    """Return the path of executable `name`, or raise ToolMissingError with one line saying what to install."""
    path = shutil.which(name)
    if path is None:
        raise ToolMissingError(hint)
    return path


def copy_dependencies(pom: Path, *, transitive: bool = True) -> Callable[[Path], list[str]]:
    """The Maven arguments that copy ``pom``'s runtime dependencies (with their dependencies unless
    ``transitive`` is False) into a staging directory, as :func:`cached_maven_build` takes them."""
    return lambda staging: ["-f", str(pom), "dependency:copy-dependencies", f"-DoutputDirectory={staging}",
                            "-DincludeScope=runtime", *([] if transitive else ["-DexcludeTransitive=true"]),
                            "-Dmdep.prependGroupId=true"]


def cached_maven_build(target: Path, marker_text: str, what: str, maven_args: Callable[[Path], list[str]],
                       built_in: Callable[[Path], Path]) -> Path:
    """``target`` (a directory of the cache) built once by Maven; return it.

    ``maven_args(staging)`` are Maven's arguments for a build into the fresh directory ``staging``;
    ``built_in(staging)`` is the directory that build produced, which becomes ``target`` (raise
    :class:`ArtifactError` there when it is incomplete). Concurrent callers serialise on a lock file
    beside ``target``, and only a completed build gets the marker, so a half-finished one is never
    mistaken for a complete one. A failed build raises :class:`ArtifactError` with the tail of
    Maven's output.
    """
    marker = target / ".complete"
    if marker.exists():
        return target
    require_tool("java", JAVA_HINT)
    mvn = require_tool("mvn", MAVEN_HINT)
    cache = target.parent
    cache.mkdir(parents=True, exist_ok=True)
    with open(cache / f".{target.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if marker.exists():
            return target
        staging = Path(tempfile.mkdtemp(prefix=".building-", dir=cache))
        try:
            logger.info("Maven: %s (first use only)", what)
            result = subprocess.run([mvn, "-q", "-B", *maven_args(staging)], capture_output=True, text=True,
                                    stdin=subprocess.DEVNULL)
            if result.returncode != 0:
                tail = "\n".join((result.stdout + result.stderr).splitlines()[-LOG_TAIL_LINES:])
                raise ArtifactError(f"Maven could not {what}:\n{tail}")
            built = built_in(staging)
            if target.exists():
                shutil.rmtree(target)
            built.rename(target)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
        marker.write_text(marker_text)
    return target


def artifacts_dir(cache: Path, versions: ServerVersions) -> Path:
    """The cache directory of one (Kafka, ZooKeeper) pair: ``jvm-kafka-<k>-zookeeper-<z>``."""
    return cache / f"jvm-kafka-{versions.kafka}-zookeeper-{versions.zookeeper}"


def ensure_artifacts(cache_dir: Path | None = None, versions: ServerVersions | None = None) -> Path:
    """Resolve the Kafka and ZooKeeper jars (with their runtime dependencies) into the cache.

    ``versions`` defaults to :func:`~laminar_kafka.devstack.jvm.versions.selected_versions` (the POM's
    pins unless the environment chooses others). Returns the directory holding the jars: one
    classpath for both servers, in which the POM's ZooKeeper wins over the one Kafka 3.x depends on
    (so a ZooKeeper-mode broker's client is the chosen ZooKeeper release). The first call for a pair
    runs Maven (Maven Central only); later calls find the completed directory and return at once
    (see :func:`cached_maven_build`).
    """
    cache = cache_dir or default_cache_dir()
    chosen = versions or selected_versions()

    def resolved(staging: Path) -> Path:
        if not any(staging.glob(f"*kafka_2.13-{chosen.kafka}.jar")):
            raise ArtifactError(f"Maven resolved no Kafka {chosen.kafka} jar")
        if not any(staging.glob(f"*zookeeper-{chosen.zookeeper}.jar")):
            raise ArtifactError(f"Maven resolved no ZooKeeper {chosen.zookeeper} jar")
        return staging

    copy = copy_dependencies(POM_PATH)
    return cached_maven_build(
        artifacts_dir(cache, chosen),
        f"kafka={chosen.kafka}\nzookeeper={chosen.zookeeper}\n",
        f"resolve Kafka {chosen.kafka} and ZooKeeper {chosen.zookeeper}",
        lambda staging: [*copy(staging), f"-Dkafka.version={chosen.kafka}", f"-Dzookeeper.version={chosen.zookeeper}"],
        resolved,
    )
