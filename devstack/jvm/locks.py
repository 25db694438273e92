"""Jar locks: the exact jars (Maven coordinates and SHA-256) one build of the dev stack's JVM servers uses.

A build (:class:`JarBuild`) is what Maven's ``dependency:copy-dependencies`` resolves from one POM
beside this module, with version properties overridden (the compatibility matrix's releases). Its
lock, ``locks/<build name>.txt`` beside this module, is generated once with Maven (``make jvm-lock``,
`laminar_kafka.devstack.jvm.lockgen`) and committed; with it, the jars come straight from Maven
Central (`laminar_kafka.devstack.jvm.fetch`) and Maven is not needed.

A lock file is text: ``#`` comment lines, then one line per jar with six whitespace-separated
fields, ``groupId artifactId version classifier extension sha256`` (``-`` for no classifier).

Everything here is pure except :func:`read_lock`, which reads a lock file.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from laminar_kafka.devstack.errors import ArtifactError

__all__ = [
    "LOCKS_DIR", "MAVEN_CENTRAL", "JarBuild", "LockedJar", "lock_path", "parse_dependency_list", "parse_lock",
    "read_lock", "render_lock",
]

#: the committed locks, one file per build
LOCKS_DIR = Path(__file__).with_name("locks")
#: where locked jars are downloaded from
MAVEN_CENTRAL = "https://repo1.maven.org/maven2"

_SHA256 = re.compile(r"^[0-9a-f]{64}$")
_NO_CLASSIFIER = "-"


@dataclass(frozen=True)
class JarBuild:
    """The jars Maven's ``copy-dependencies`` resolves from ``pom`` (runtime scope, with their
    dependencies unless ``transitive`` is False) with ``properties`` overridden.

    ``name`` is both the build's cache directory (under the dev stack's cache) and its lock's name.
    """

    name: str
    pom: Path
    properties: tuple[tuple[str, str], ...] = ()
    transitive: bool = True

    def maven_goal_args(self) -> list[str]:
        """The Maven arguments shared by every goal run on this build: the POM, the scope, the overrides."""
        return ["-f", str(self.pom), "-DincludeScope=runtime",
                *([] if self.transitive else ["-DexcludeTransitive=true"]),
                *(f"-D{key}={value}" for key, value in self.properties)]

    def maven_args(self, staging: Path) -> list[str]:
        """Maven's arguments that copy the build's jars into ``staging``, named as :attr:`LockedJar.cache_name`."""
        return [*self.maven_goal_args(), "dependency:copy-dependencies", f"-DoutputDirectory={staging}",
                "-Dmdep.prependGroupId=true"]


@dataclass(frozen=True)
class LockedJar:
    """One jar of a build: its Maven coordinates and, once locked, the SHA-256 of its content
    (empty while only the coordinates are known)."""

    group: str
    artifact: str
    version: str
    classifier: str
    extension: str
    sha256: str = ""

    @property
    def file_name(self) -> str:
        """The file's name in a Maven repository: ``<artifact>-<version>[-<classifier>].<extension>``."""
        suffix = f"-{self.classifier}" if self.classifier else ""
        return f"{self.artifact}-{self.version}{suffix}.{self.extension}"

    @property
    def cache_name(self) -> str:
        """The file's name in a build's cache directory (what ``copy-dependencies`` with
        ``mdep.prependGroupId`` names it): ``<group>.<file_name>``."""
        return f"{self.group}.{self.file_name}"

    def url(self, base: str) -> str:
        """The file's URL in the Maven repository at ``base`` (no trailing slash)."""
        return f"{base}/{self.group.replace('.', '/')}/{self.artifact}/{self.version}/{self.file_name}"

    def with_sha256(self, sha256: str) -> LockedJar:
        return LockedJar(self.group, self.artifact, self.version, self.classifier, self.extension, sha256)


def lock_path(name: str, locks_dir: Path = LOCKS_DIR) -> Path:
    """The lock file of the build called ``name``."""
    return locks_dir / f"{name}.txt"


def parse_lock(text: str, source: str) -> tuple[LockedJar, ...]:
    """The jars of a lock file's ``text``; a malformed line raises :class:`ArtifactError` naming
    ``source`` and the line number."""
    jars: list[LockedJar] = []
    for number, line in enumerate(text.splitlines(), start=1):
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        fields = stripped.split()
        if len(fields) != 6 or not _SHA256.match(fields[5]):
            raise ArtifactError(f"{source}:{number}: expected 'groupId artifactId version classifier extension sha256'")
        group, artifact, version, classifier, extension, sha256 = fields
        jars.append(LockedJar(group, artifact, version, "" if classifier == _NO_CLASSIFIER else classifier,
                              extension, sha256))
    if not jars:
        raise ArtifactError(f"{source} locks no jar")
    return tuple(jars)


def render_lock(jars: tuple[LockedJar, ...], header: str) -> str:
    """A lock file's text: ``header`` as comment lines, then the jars sorted by cache name."""
    lines = [f"# {line}" for line in header.splitlines()]
    for jar in sorted(jars, key=lambda jar: jar.cache_name):
        if not _SHA256.match(jar.sha256):
            raise ArtifactError(f"{jar.cache_name} has no SHA-256 to lock")
        lines.append(" ".join((jar.group, jar.artifact, jar.version, jar.classifier or _NO_CLASSIFIER,
                               jar.extension, jar.sha256)))
    return "\n".join(lines) + "\n"


def read_lock(name: str, locks_dir: Path = LOCKS_DIR) -> tuple[LockedJar, ...] | None:
    """The jars locked for the build called ``name``, or None when it has no lock (Maven resolves it)."""
    path = lock_path(name, locks_dir)
    if not path.is_file():
        return None
    return parse_lock(path.read_text(), str(path))


def _extension(maven_type: str) -> str:
    """A dependency type's file extension (``test-jar`` is a ``jar`` with the ``tests`` classifier)."""
    return "jar" if maven_type == "test-jar" else maven_type


def parse_dependency_list(text: str) -> tuple[LockedJar, ...]:
    """The jars (without SHA-256) in the output file of Maven's ``dependency:list``.

    Its lines are ``group:artifact:type[:classifier]:version:scope[:path]``, indented, possibly
    followed by `` -- module ...``; every other line is ignored.
    """
    jars: list[LockedJar] = []
    for line in text.splitlines():
        if not line.startswith("   "):
            continue
        coordinates = line.strip().split(" ", 1)[0]
        parts = coordinates.split(":")
        if len(parts) >= 5 and parts[4] in _SCOPES:  # group:artifact:type:version:scope[:path]
            group, artifact, maven_type, version = parts[:4]
            classifier = ""
        elif len(parts) >= 6 and parts[5] in _SCOPES:  # group:artifact:type:classifier:version:scope[:path]
            group, artifact, maven_type, classifier, version = parts[:5]
        else:
            continue
        jars.append(LockedJar(group, artifact, version, classifier, _extension(maven_type)))
    return tuple(jars)


_SCOPES = frozenset({"compile", "runtime", "provided", "system", "test", "import"})
