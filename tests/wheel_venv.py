"""This checkout as a user gets it: its wheel, built once per test session, installed with an extra
into a fresh virtualenv outside the repository, and commands run there with a user's environment.

The documentation tests that copy an example into an empty folder and run it with plain ``pytest``
(``tests/integration/test_testing_doc.py``, ``tests/integration/test_connector_guide_doc.py``) share
this; each virtualenv is made once per extra and session.

The wheel is built from a clean copy of the checkout (:func:`clean_copy`: the files git tracks, as
they are in the working tree, and new files not ignored), never from the checkout itself: setuptools
copies a leftover ``build/lib`` into the wheel, so a build in place could ship modules that no longer
exist. :func:`stray_modules` names any module of a wheel outside pyproject.toml's packages.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
import tomllib
import venv
import zipfile
from collections.abc import Iterable
from pathlib import Path

import pytest

__all__ = ["ROOT", "checkout_files", "checkout_wheel", "clean_copy", "declared_packages", "run", "stray_modules",
           "user_environment", "wheel_modules", "wheel_venv_with"]

ROOT = Path(__file__).resolve().parents[1]
_WHEEL: list[Path] = []
_VENVS: dict[str, Path] = {}


def user_environment() -> dict[str, str]:
    """Our environment as a user's shell would have it: no path into this checkout, no virtualenv."""
    return {key: value for key, value in os.environ.items() if key not in ("PYTHONPATH", "VIRTUAL_ENV")}


def run(argv: list[str], cwd: Path, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    """``argv`` in ``cwd`` with :func:`user_environment`, its output captured."""
    return subprocess.run(argv, cwd=cwd, env=user_environment(), capture_output=True, text=True, timeout=timeout,
                          check=False)


def checkout_files(root: Path = ROOT) -> list[str]:
    """The checkout's files (relative paths, sorted): those git tracks and those not yet added that
    it does not ignore, as they are in the working tree; deleted ones left out. Build output
    (``build/``, ``*.egg-info``) and virtualenvs are ignored, so never listed. Symbolic links
    (``laminar_kafka/<folder> -> ../<folder>``) are listed as files: git tracks the link itself."""
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=root,
                            capture_output=True, check=True).stdout.decode()
    return sorted({path for path in listed.split("\0")
                   if path and ((root / path).is_symlink() or (root / path).is_file())})


def clean_copy(destination: Path, root: Path = ROOT) -> Path:
    """Copy :func:`checkout_files` of ``root`` into ``destination`` (made; must not exist) and return it.
    Links are copied as links."""
    destination.mkdir(parents=True)
    for path in checkout_files(root):
        target = destination / path
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(root / path, target, follow_symlinks=False)
    return destination


def declared_packages(root: Path = ROOT) -> frozenset[str]:
    """pyproject.toml's ``[tool.setuptools] packages``."""
    with (root / "pyproject.toml").open("rb") as file:
        return frozenset(tomllib.load(file)["tool"]["setuptools"]["packages"])


def wheel_modules(wheel: Path) -> list[str]:
    """The dotted names of the Python modules in ``wheel`` (``a/b/c.py`` -> ``a.b.c``), sorted."""
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
    return sorted(name[: -len(".py")].replace("/", ".") for name in names if name.endswith(".py"))


def stray_modules(modules: Iterable[str], packages: frozenset[str]) -> list[str]:
    """The modules whose package is not one of ``packages`` (a package's ``__init__`` is its own)."""
    strays = []
    for module in modules:
        package = module[: -len(".__init__")] if module.endswith(".__init__") else module.rpartition(".")[0]
        if package not in packages:
            strays.append(module)
    return strays


def checkout_wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """This checkout's wheel, built once per session (``pip wheel --no-deps``) from :func:`clean_copy`
    outside the repository. Asserts that it holds no module outside pyproject.toml's packages."""
    if not _WHEEL:
        base = tmp_path_factory.mktemp("wheel")
        assert ROOT not in base.parents
        source = clean_copy(base / "source")
        built = run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", str(source), "-w", str(base)], base)
        assert built.returncode == 0, built.stdout + built.stderr
        (wheel,) = base.glob("laminar_kafka-*.whl")
        assert stray_modules(wheel_modules(wheel), declared_packages()) == [], wheel
        _WHEEL.append(wheel)
    return _WHEEL[0]


def wheel_venv_with(tmp_path_factory: pytest.TempPathFactory, extra: str) -> Path:
    """The Python of a fresh virtualenv outside the repository holding :func:`checkout_wheel` with
    ``extra`` (made once per extra and session; pip's cache and the local wheel directory make it
    take tens of seconds). Asserts that it imports the wheel, not this checkout."""
    if extra not in _VENVS:
        wheel = checkout_wheel(tmp_path_factory)
        base = tmp_path_factory.mktemp(f"venv-{extra}")
        started = time.monotonic()
        venv.create(base / "venv", with_pip=True)
        python = base / "venv" / "bin" / "python"
        installed = run([str(python), "-m", "pip", "install", "-q", f"{wheel}[{extra}]"], base)
        assert installed.returncode == 0, installed.stdout + installed.stderr
        where = run([str(python), "-c", "import laminar_kafka; print(laminar_kafka.__file__)"], base)
        assert where.returncode == 0 and Path(where.stdout.strip()).is_relative_to(base / "venv"), where
        print(f"wheel [{extra}] virtualenv ready in {time.monotonic() - started:.0f}s")
        _VENVS[extra] = python
    return _VENVS[extra]
