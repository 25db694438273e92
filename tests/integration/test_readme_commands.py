"""README.md's runnable blocks (the ones marked ``<!-- runnable ... -->`` on the line before the
fence), run as written: extracted in order, run by bash with ``set -euo pipefail`` in an empty
directory, against the real servers the block starts itself (``dev up``) and stops (``dev down``),
its background nodes stopped by the block too. The run must exit 0 within its time bound and
``verify`` must report every record present exactly once.

The block's ``dev up`` records its stack under a cache directory of this test's own
(``LAMINAR_CACHE_DIR``), so it never meets a developer's running dev stack; the Kafka and ZooKeeper
jars are linked into it from the usual cache. Whatever a failing block leaves is stopped here."""
from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from laminar_kafka.cluster.config import SETTING_NAMES, env_name
from laminar_kafka.devstack.jvm.artifacts import ensure_artifacts
from tests.markdown_docs import fenced_blocks

pytestmark = [pytest.mark.integration, pytest.mark.timeout(900)]

ROOT = Path(__file__).resolve().parents[2]
#: seconds the blocks may take: a dev stack's start (up to 90 s), 10,000 records landed, two leaves
TIME_BOUND_S = 600
#: the records the README's walk-through produces
RECORDS = 10_000


def readme_script() -> str:
    """The runnable blocks, in order, under ``set -euo pipefail``."""
    blocks = [block for block in fenced_blocks((ROOT / "README.md").read_text()) if block.runnable]
    assert blocks, "README.md marks no runnable block"
    return "set -euo pipefail\n" + "".join(block.text for block in blocks)


def block_environment(cache: Path) -> dict[str, str]:
    """This process's environment without any pipeline setting (the block exports its own), with the
    venv's `laminar-kafka` first on PATH and the test's own cache directory."""
    settings = {env_name(name) for name in SETTING_NAMES}
    env = {key: value for key, value in os.environ.items() if key not in settings}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env["LAMINAR_CACHE_DIR"] = str(cache)
    return env


def verify_totals(stdout: str) -> dict[str, int]:
    """The ``total`` line of ``verify``'s table: expected, present, rejected, missing, duplicated,
    unexpected."""
    rows = [line.split() for line in stdout.splitlines() if line.split()[:1] == ["total"]]
    assert len(rows) == 1, stdout
    names = ("expected", "present", "rejected", "missing", "duplicated", "unexpected")
    return dict(zip(names, (int(v) for v in rows[0][1:]), strict=True))


def test_the_readme_cluster_walk_through_runs_as_written(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    cache.mkdir()
    jars = ensure_artifacts()  # into the usual cache, once; linked into the test's own
    (cache / jars.name).symlink_to(jars, target_is_directory=True)
    work = tmp_path / "work"
    work.mkdir()
    env = block_environment(cache)
    block = subprocess.Popen(["bash", "-c", readme_script()], cwd=work, env=env, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        stdout, stderr = block.communicate(timeout=TIME_BOUND_S)
    except subprocess.TimeoutExpired:
        os.killpg(block.pid, signal.SIGKILL)
        stdout, stderr = block.communicate()
        pytest.fail(f"the README's runnable blocks took more than {TIME_BOUND_S} s:\n{stdout[-3000:]}\n{stderr[-3000:]}")
    finally:
        # a block that failed half-way leaves its nodes (its process group) and its dev stack
        try:
            os.killpg(block.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        subprocess.run([sys.executable, "-m", "laminar_kafka.cli.main", "dev", "down"], env=env,
                       capture_output=True, timeout=120)
    logs = "".join(f"\n--- {log.name}\n{log.read_text()[-3000:]}" for log in sorted(work.glob("*.log")))
    assert block.returncode == 0, f"exit {block.returncode}\n{stdout[-4000:]}\n{stderr[-4000:]}{logs}"
    totals = verify_totals(stdout)
    assert totals == {"expected": RECORDS, "present": RECORDS, "rejected": 0, "missing": 0, "duplicated": 0,
                      "unexpected": 0}, stdout
    assert re.search(r"^\d+ file\(s\), \d+ row\(s\): OK$", stdout, re.MULTILINE), stdout
    assert "health: healthy" in stdout and "stopped: " in stdout, stdout  # status, then dev down
