"""The wheel the documentation tests install is built from a clean copy of the checkout, and a
wheel that carries a module outside pyproject.toml's packages (a leftover ``build/lib``) is caught."""
from __future__ import annotations

import subprocess
import zipfile
from pathlib import Path

from tests.wheel_venv import checkout_files, clean_copy, declared_packages, stray_modules, wheel_modules


def test_the_clean_copy_lists_the_sources_and_no_build_output() -> None:
    files = checkout_files()
    assert {"pyproject.toml", "connector/__init__.py", "laminar_kafka/testing/plugin.py"} <= set(files)
    leftovers = [f for f in files if f.startswith(("build/", ".venv", "dist/")) or ".egg-info/" in f]
    assert leftovers == []


def test_clean_copy_copies_exactly_the_listed_files(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    (repo / ".gitignore").write_text("build/\n")
    (repo / "kept.py").write_text("x = 1\n")
    (repo / "build" / "lib").mkdir(parents=True)
    (repo / "build" / "lib" / "stale.py").write_text("old = 1\n")
    subprocess.run(["git", "-C", str(repo), "add", "kept.py", ".gitignore"], check=True)
    (repo / "new.py").write_text("y = 2\n")  # not added yet: a working-tree change, copied
    copy = clean_copy(tmp_path / "copy", repo)
    assert sorted(str(p.relative_to(copy)) for p in copy.rglob("*") if p.is_file()) == [".gitignore", "kept.py", "new.py"]


def test_a_module_outside_the_declared_packages_is_a_stray(tmp_path: Path) -> None:
    packages = declared_packages()
    assert {"laminar_kafka.connector", "laminar_kafka.connector.conformance"} <= packages
    assert "laminar_kafka.kafka_source.conformance" not in packages
    wheel = tmp_path / "laminar_kafka-0.1.0-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        for name in ("laminar_kafka/__init__.py", "laminar_kafka/connector/conformance/scenarios.py",
                     "laminar_kafka/kafka_source/connector.py", "laminar_kafka/kafka_source/conformance/__init__.py",
                     "laminar_kafka/kafka_source/conformance/scenarios.py", "laminar_kafka/connector/py.typed"):
            archive.writestr(name, "")
    modules = wheel_modules(wheel)
    assert "laminar_kafka.kafka_source.connector" in modules and len(modules) == 5
    assert stray_modules(modules, packages) == [
        "laminar_kafka.kafka_source.conformance.__init__", "laminar_kafka.kafka_source.conformance.scenarios",
    ]

