"""docs/connector-guide.md runs as written: its first python block (a connector over an in-memory,
list-backed log and its conformance test), copied into an empty folder outside the repository,
passes with plain ``pytest`` against the built wheel installed with the ``kit`` extra the guide
names, in a fresh virtualenv. No server is started."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.markdown_docs import fenced_blocks
from tests.wheel_venv import ROOT, run, wheel_venv_with

pytestmark = [pytest.mark.integration, pytest.mark.timeout(900)]

GUIDE = ROOT / "docs" / "connector-guide.md"
EXTRA = "kit"


def _example() -> str:
    blocks = [block for block in fenced_blocks(GUIDE.read_text()) if block.language == "python"]
    assert blocks, "the guide has no python block"
    return blocks[0].text


def test_the_guide_names_the_extra_it_is_tested_with() -> None:
    text = GUIDE.read_text()
    assert f"pip install 'laminar-kafka[{EXTRA}]'" in text
    assert text.index(f"[{EXTRA}]") < text.index("```python")  # said before the example


def test_the_first_example_passes_in_an_empty_folder_against_the_wheel(
    tmp_path_factory: pytest.TempPathFactory, tmp_path: Path
) -> None:
    python = wheel_venv_with(tmp_path_factory, EXTRA)
    folder = tmp_path / "empty"
    folder.mkdir()
    assert ROOT not in folder.parents
    (folder / "test_list_log.py").write_text(_example())
    result = run([str(python), "-m", "pytest"], folder)
    output = result.stdout[-4000:] + result.stderr[-2000:]
    passed = re.search(r"(\d+) passed", result.stdout)
    assert result.returncode == 0 and passed is not None and int(passed.group(1)) > 0, output
    assert not re.search(r"\d+ (failed|skipped|error)", result.stdout), output
    said = re.search(r"run `pytest` there: (\d+) tests", GUIDE.read_text())
    assert said is not None and int(said.group(1)) == int(passed.group(1)), "the guide's count of tests"
    # the kit started no server and needed nothing of the [test] extra: none of it is installed
    listed = run([str(python), "-m", "pip", "list", "--format=freeze"], folder)
    installed = {line.split("==")[0].lower() for line in listed.stdout.splitlines()}
    assert not installed & {"duckdb", "moto", "testcontainers", "docker", "redis"}, sorted(installed)
