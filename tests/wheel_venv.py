"""This checkout as a user gets it: its wheel, built once per test session, installed with an extra
into a fresh virtualenv outside the repository, and commands run there with a user's environment.

The documentation tests that copy an example into an empty folder and run it with plain ``pytest``
(``tests/integration/test_testing_doc.py``, ``tests/integration/test_connector_guide_doc.py``) share
this; each virtualenv is made once per extra and session.
"""
from __future__ import annotations

import os
import subprocess
import sys
import time
import venv
from pathlib import Path

import pytest

__all__ = ["ROOT", "checkout_wheel", "run", "user_environment", "wheel_venv_with"]

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


def checkout_wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """This checkout's wheel, built once per session (``pip wheel --no-deps``), outside the repository."""
    if not _WHEEL:
        base = tmp_path_factory.mktemp("wheel")
        assert ROOT not in base.parents
        built = run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", str(ROOT), "-w", str(base)], base)
        assert built.returncode == 0, built.stdout + built.stderr
        (wheel,) = base.glob("laminar_kafka-*.whl")
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
