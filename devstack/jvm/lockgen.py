"""Generate the jar locks (`laminar_kafka.devstack.jvm.locks`) with Maven: ``make jvm-lock``.

For every build the dev stack downloads without Maven (:func:`locked_builds`: the pinned Kafka and
ZooKeeper, the compatibility matrix's pairs, the Iceberg REST catalog server and its S3 add-on,
Kafka Connect with Iceberg's sink), Maven resolves the build twice over the same POM and overrides:
``dependency:list`` names each jar's coordinates, ``dependency:copy-dependencies`` copies the jars,
whose SHA-256s are taken from those copies. The two must name the same files (what the downloader
will write is exactly what Maven would have), else the lock is not written.

Run when a POM or a pinned version changes (needs Maven Central; Maven and Java as the dev stack finds them):
``python -m laminar_kafka.devstack.jvm.lockgen [BUILD_NAME...]``; it rewrites ``locks/*.txt``.
"""
from __future__ import annotations

import argparse
import hashlib
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from laminar_kafka.devstack.errors import ArtifactError, DevStackError
from laminar_kafka.devstack.jvm.artifacts import LOG_TAIL_LINES, kafka_build
from laminar_kafka.devstack.jvm.cache import default_cache_dir
from laminar_kafka.devstack.jvm.connect import connect_build
from laminar_kafka.devstack.jvm.java import find_java
from laminar_kafka.devstack.jvm.locks import (
    LOCKS_DIR,
    JarBuild,
    LockedJar,
    lock_path,
    parse_dependency_list,
    render_lock,
)
from laminar_kafka.devstack.jvm.maven import maven_executable
from laminar_kafka.devstack.jvm.rest_catalog import rest_catalog_build, rest_catalog_s3_build
from laminar_kafka.devstack.jvm.versions import KafkaMode, ServerVersions, pinned_versions

__all__ = ["MATRIX_PAIRS", "lock_build", "locked_builds", "main"]

#: the (Kafka, ZooKeeper) pairs of the compatibility matrix's cells (.ci/matrix.sh) besides the pins
MATRIX_PAIRS: tuple[tuple[str, str], ...] = (("3.9.1", "3.8.4"), ("3.9.1", "3.9.4"))


def locked_builds() -> tuple[JarBuild, ...]:
    """Every build that has a committed lock."""
    kafka, zookeeper = pinned_versions()
    pairs = [(kafka, zookeeper), *(pair for pair in MATRIX_PAIRS if pair != (kafka, zookeeper))]
    return (
        *(kafka_build(ServerVersions(k, z, KafkaMode.KRAFT)) for k, z in pairs),
        rest_catalog_build(),
        rest_catalog_s3_build(),
        connect_build(),
    )


def _maven(mvn: str, java_home: Path, args: list[str], what: str) -> None:
    result = subprocess.run([mvn, "-q", "-B", *args], capture_output=True, text=True, stdin=subprocess.DEVNULL,
                            env={**os.environ, "JAVA_HOME": str(java_home)})
    if result.returncode != 0:
        tail = "\n".join((result.stdout + result.stderr).splitlines()[-LOG_TAIL_LINES:])
        raise ArtifactError(f"Maven could not {what}:\n{tail}")


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while chunk := handle.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def lock_build(build: JarBuild, mvn: str, java_home: Path, workdir: Path) -> tuple[LockedJar, ...]:
    """The locked jars of ``build``, resolved by Maven (see the module). Raises ArtifactError when
    Maven fails or its two answers disagree."""
    listing = workdir / f"{build.name}.list"
    copies = workdir / build.name
    copies.mkdir()
    _maven(mvn, java_home, [*build.maven_goal_args(), "dependency:list", f"-DoutputFile={listing}",
                            "-DappendOutput=false", "-DoutputAbsoluteArtifactFilename=true"], f"list {build.name}")
    _maven(mvn, java_home, build.maven_args(copies), f"copy {build.name}")
    jars = parse_dependency_list(listing.read_text())
    listed = {jar.cache_name for jar in jars}
    copied = {path.name for path in copies.iterdir()}
    if listed != copied:
        raise ArtifactError(f"{build.name}: dependency:list and copy-dependencies disagree: "
                            f"listed only {sorted(listed - copied)}, copied only {sorted(copied - listed)}")
    return tuple(jar.with_sha256(_sha256(copies / jar.cache_name)) for jar in jars)


def main(argv: list[str] | None = None) -> int:
    """Rewrite the locks of the named builds (default: every one of :func:`locked_builds`)."""
    parser = argparse.ArgumentParser(description="Generate devstack/jvm/locks/*.txt with Maven.")
    parser.add_argument("builds", nargs="*", help="build names (default: all)")
    options = parser.parse_args(argv)
    builds = [build for build in locked_builds() if not options.builds or build.name in options.builds]
    unknown = set(options.builds) - {build.name for build in builds}
    if unknown:
        print(f"unknown build(s): {', '.join(sorted(unknown))}", file=sys.stderr)
        return 2
    try:
        mvn = maven_executable(default_cache_dir())
        java_home = find_java().java.parent.parent
        LOCKS_DIR.mkdir(exist_ok=True)
        with tempfile.TemporaryDirectory(prefix="laminar-jvm-lock-") as workdir:
            for build in builds:
                jars = lock_build(build, mvn, java_home, Path(workdir))
                header = (f"{build.name}: the jars Maven resolves from {build.pom.name}"
                          f"{''.join(f' -D{key}={value}' for key, value in build.properties)}"
                          f"{'' if build.transitive else ' (not transitive)'}.\n"
                          "Generated by `make jvm-lock` (python -m laminar_kafka.devstack.jvm.lockgen): do not edit.")
                lock_path(build.name).write_text(render_lock(jars, header))
                print(f"{lock_path(build.name).name}: {len(jars)} jars")
    except DevStackError as exc:
        print(f"jvm-lock: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
