"""docs/testing.md runs as written: its first example, copied into an empty folder outside the
repository, passes with plain `pytest` against the built wheel installed with its `testing` extra in
a fresh virtualenv (the process backend in the first pass, the containers backend in the container
pass: ``LAMINAR_TEST_BACKEND=docker``); its other examples pass with this checkout's plugin.
"""
from __future__ import annotations

import os
import re
import subprocess
import sys
import time
import venv
from pathlib import Path

import pytest

from tests.markdown_docs import fenced_blocks

pytestmark = [pytest.mark.integration, pytest.mark.timeout(900)]

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "testing.md"
BLOCKS = [block for block in fenced_blocks(DOC.read_text()) if block.language == "python"]


def _docker_pass() -> bool:
    return os.environ.get("LAMINAR_TEST_BACKEND", "local").lower() == "docker"


def _user_environment() -> dict[str, str]:
    """Our environment as a user's shell would have it: no path into this checkout, no virtualenv."""
    return {key: value for key, value in os.environ.items() if key not in ("PYTHONPATH", "VIRTUAL_ENV")}


def _run(argv: list[str], cwd: Path, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, cwd=cwd, env=_user_environment(), capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="module")
def wheel_venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh virtualenv (outside the repository) with this checkout's wheel and its `testing` extra;
    its Python. About 35 s (pip's cache and the local wheel directory make it fast)."""
    base = tmp_path_factory.mktemp("testing-doc")
    assert ROOT not in base.parents
    started = time.monotonic()
    wheels = base / "wheel"
    built = _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", str(ROOT), "-w", str(wheels)], base)
    assert built.returncode == 0, built.stdout + built.stderr
    (wheel,) = wheels.glob("laminar_kafka-*.whl")
    venv.create(base / "venv", with_pip=True)
    python = base / "venv" / "bin" / "python"
    installed = _run([str(python), "-m", "pip", "install", "-q", f"{wheel}[testing]"], base)
    assert installed.returncode == 0, installed.stdout + installed.stderr
    print(f"wheel and virtualenv ready in {time.monotonic() - started:.0f}s")
    return python


def test_the_first_example_passes_in_an_empty_folder_against_the_wheel(
    wheel_venv: Path, tmp_path: Path
) -> None:
    where = _run([str(wheel_venv), "-c", "import laminar_kafka; print(laminar_kafka.__file__)"], tmp_path)
    assert where.returncode == 0 and Path(where.stdout.strip()).is_relative_to(wheel_venv.parents[1]), where
    backend = "process"
    if _docker_pass():
        from tests.conftest import container_engine

        container_engine()  # the server images built from this checkout (skips, or fails in CI, without an engine)
        backend = "containers"
    folder = tmp_path / "empty"
    folder.mkdir()
    example = BLOCKS[0].text
    (folder / "test_with_laminar.py").write_text(example)
    result = _run([str(wheel_venv), "-m", "pytest", f"--laminar-backend={backend}"], folder)
    tests = len(re.findall(r"^def test_", example, re.MULTILINE))
    assert result.returncode == 0 and f"{tests} passed" in result.stdout, result.stdout[-4000:] + result.stderr[-2000:]
    assert f"laminar_kafka.testing: {backend} backend" in result.stdout


@pytest.mark.parametrize("block", BLOCKS[1:], ids=lambda block: f"line-{block.line}")
def test_every_other_example_passes_as_written(block: object, tmp_path: Path) -> None:
    if _docker_pass():
        pytest.skip("the process pass runs the reference examples (they use the process backend's clusters)")
    from laminar_kafka.devstack.netfaults.host import network_faults_available

    text = block.text  # type: ignore[attr-defined]
    (tmp_path / "test_example.py").write_text(text)
    result = _run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-rs", "--laminar-backend=process"],
                  tmp_path)
    tests = len(re.findall(r"^def test_", text, re.MULTILINE))
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
    if "network_partition" in text and not network_faults_available()[0]:
        assert f"{tests} skipped" in result.stdout, result.stdout[-2000:]
    else:
        assert f"{tests} passed" in result.stdout, result.stdout[-4000:]
