"""No module of the distribution or of the benchmarks is longer than 450 lines: past that, a module
is asking to be split by concern (docs/development.md)."""
from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
FOLDERS = ("laminar_kafka", "coordinator", "connector", "kafka_source", "redis_source", "cluster", "devstack", "bench")
MAX_LINES = 450


def module_lengths(root: Path) -> dict[str, int]:
    """Every ``.py`` file under the folders (links not followed) by its path, with its line count."""
    lengths: dict[str, int] = {}
    for folder in FOLDERS:
        base = root / folder
        for path in sorted(base.rglob("*.py")):
            if any(part.is_symlink() for part in [path, *path.parents] if part != root and root in part.parents):
                continue
            lengths[str(path.relative_to(root))] = len(path.read_text().splitlines())
    return lengths


def test_no_module_is_longer_than_450_lines() -> None:
    lengths = module_lengths(ROOT)
    assert len(lengths) > 200, "the scan found the modules"
    too_long = {path: n for path, n in lengths.items() if n > MAX_LINES}
    assert too_long == {}, f"split these by concern: {too_long}"


def test_the_scan_sees_a_long_module(tmp_path: Path) -> None:
    (tmp_path / "cluster").mkdir()
    (tmp_path / "cluster" / "long.py").write_text("x = 1\n" * (MAX_LINES + 1))
    assert module_lengths(tmp_path) == {"cluster/long.py": MAX_LINES + 1}
