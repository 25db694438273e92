"""docs/testing.md runs as written: its first example, copied into an empty folder outside the
repository, passes with plain `pytest` against the built wheel installed with its `testing` extra in
a fresh virtualenv (the process backend in the first pass, the containers backend in the container
pass: ``LAMINAR_TEST_BACKEND=docker``); its other examples pass with this checkout's plugin.
"""
from __future__ import annotations

import os
import re
import sys
from pathlib import Path

import pytest

from tests.markdown_docs import fenced_blocks
from tests.wheel_venv import ROOT, run, wheel_venv_with

pytestmark = [pytest.mark.integration, pytest.mark.timeout(900)]

DOC = ROOT / "docs" / "testing.md"
BLOCKS = [block for block in fenced_blocks(DOC.read_text()) if block.language == "python"]


def _docker_pass() -> bool:
    return os.environ.get("LAMINAR_TEST_BACKEND", "local").lower() == "docker"


@pytest.fixture(scope="module")
def wheel_venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh virtualenv (outside the repository) with this checkout's wheel and its `testing` extra;
    its Python (:mod:`tests.wheel_venv`: the wheel is built once per session)."""
    return wheel_venv_with(tmp_path_factory, "testing")


def test_the_first_example_passes_in_an_empty_folder_against_the_wheel(
    wheel_venv: Path, tmp_path: Path
) -> None:
    where = run([str(wheel_venv), "-c", "import laminar_kafka; print(laminar_kafka.__file__)"], tmp_path)
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
    result = run([str(wheel_venv), "-m", "pytest", f"--laminar-backend={backend}"], folder)
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
    result = run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-rs", "--laminar-backend=process"],
                  tmp_path)
    tests = len(re.findall(r"^def test_", text, re.MULTILINE))
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
    if "network_partition" in text and not network_faults_available()[0]:
        assert f"{tests} skipped" in result.stdout, result.stdout[-2000:]
    else:
        assert f"{tests} passed" in result.stdout, result.stdout[-4000:]
