"""`dev up --exports` and `dev status --exports` against real processes: the lines are exactly the
recorded stack's addresses as shell exports, and nothing else reaches stdout (``eval`` takes it)."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from laminar_kafka.devstack.stack import read_state

pytestmark = pytest.mark.integration


def _dev(state_file: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "laminar_kafka.cli.main", "dev", "--state-file", str(state_file),
                           *argv], capture_output=True, text=True, timeout=180)


def test_the_exports_name_the_recorded_stack(tmp_path: Path) -> None:
    state_file = tmp_path / "state.json"
    up = _dev(state_file, "up", "--exports")
    try:
        assert up.returncode == 0, up.stderr
        recorded = read_state(state_file)
        assert recorded is not None and recorded.healthy
        expected = f"export LAMINAR_BOOTSTRAP={recorded.bootstrap}\nexport LAMINAR_ZK={recorded.zk_hosts}\n"
        assert up.stdout == expected
        again = _dev(state_file, "up", "--exports")  # already running: the same lines, the note on stderr
        assert again.returncode == 0 and again.stdout == expected and "already running" in again.stderr
        status = _dev(state_file, "status", "--exports")
        assert status.returncode == 0 and status.stdout == expected, status.stderr
        shell = subprocess.run(["bash", "-c", f'eval "{up.stdout}"; echo "$LAMINAR_BOOTSTRAP $LAMINAR_ZK"'],
                               capture_output=True, text=True, check=True, env={"PATH": os.environ["PATH"]})
        assert shell.stdout.split() == [recorded.bootstrap, recorded.zk_hosts]
    finally:
        assert _dev(state_file, "down").returncode == 0
    gone = _dev(state_file, "status", "--exports")
    assert gone.returncode == 3 and gone.stdout == "" and "no dev stack recorded" in gone.stderr
