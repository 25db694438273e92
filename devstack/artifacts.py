"""The Kafka and ZooKeeper jars: pinned by `pom.xml` beside this module, resolved once into a cache.

Maven resolves the official Maven Central artifacts (with their runtime dependencies); the first
call runs it, later calls find the completed cache directory and return at once.
"""
from __future__ import annotations

import fcntl
import logging
import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

from devstack.errors import ArtifactError, ToolMissingError

logger = logging.getLogger(__name__)

__all__ = [
    "JAVA_HINT", "LOG_TAIL_LINES", "MAVEN_HINT", "POM_PATH", "default_cache_dir", "ensure_artifacts",
    "pinned_versions", "require_tool",
]

POM_PATH = Path(__file__).with_name("pom.xml")
LOG_TAIL_LINES = 30

JAVA_HINT = "Java 17 or newer is required to run Kafka and ZooKeeper: install it (Debian: apt-get install openjdk-17-jre-headless)"
MAVEN_HINT = "Maven is required to fetch the Kafka and ZooKeeper artifacts: install it (Debian: apt-get install maven)"


def pinned_versions(pom_path: Path = POM_PATH) -> tuple[str, str]:
    """Return the (Kafka, ZooKeeper) versions pinned in the POM."""
    text = pom_path.read_text()
    kafka = re.search(r"<kafka\.version>([^<]+)</kafka\.version>", text)
    zookeeper = re.search(r"<zookeeper\.version>([^<]+)</zookeeper\.version>", text)
    if not kafka or not zookeeper:
        raise ArtifactError(f"{pom_path} does not pin kafka.version and zookeeper.version")
    return kafka.group(1), zookeeper.group(1)


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


def ensure_artifacts(cache_dir: Path | None = None) -> Path:
    """Resolve the pinned Kafka and ZooKeeper jars (with their runtime dependencies) into the cache.

    Returns the directory holding the jars. The first call runs Maven (Maven Central only); later
    calls find the completed directory and return at once. Concurrent callers serialise on a lock
    file, and a half-finished resolution is never mistaken for a complete one.
    """
    cache = cache_dir or default_cache_dir()
    kafka_version, zookeeper_version = pinned_versions()
    lib_dir = cache / f"jvm-kafka-{kafka_version}-zookeeper-{zookeeper_version}"
    marker = lib_dir / ".complete"
    if marker.exists():
        return lib_dir
    require_tool("java", JAVA_HINT)
    mvn = require_tool("mvn", MAVEN_HINT)
    cache.mkdir(parents=True, exist_ok=True)
    with open(cache / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if marker.exists():
            return lib_dir
        staging = Path(tempfile.mkdtemp(prefix=".resolving-", dir=cache))
        command = [
            mvn, "-q", "-B", "-f", str(POM_PATH), "dependency:copy-dependencies",
            f"-DoutputDirectory={staging}", "-DincludeScope=runtime", "-Dmdep.prependGroupId=true",
        ]
        logger.info("resolving Kafka %s and ZooKeeper %s from Maven Central", kafka_version, zookeeper_version)
        result = subprocess.run(command, capture_output=True, text=True, stdin=subprocess.DEVNULL)
        if result.returncode != 0 or not any(staging.glob("*kafka_2.13-*.jar")):
            shutil.rmtree(staging, ignore_errors=True)
            tail = "\n".join((result.stdout + result.stderr).splitlines()[-LOG_TAIL_LINES:])
            raise ArtifactError(f"Maven could not resolve the Kafka/ZooKeeper artifacts:\n{tail}")
        if lib_dir.exists():
            shutil.rmtree(lib_dir)
        staging.rename(lib_dir)
        marker.write_text(f"kafka={kafka_version}\nzookeeper={zookeeper_version}\n")
    return lib_dir
