"""`dev up`, `dev status`, `dev down` against real processes, through the CLI's own handlers."""
from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from devstack.processes import pid_alive, terminate_pid
from devstack.stack import read_state
from cluster.cli_dev import add_dev_commands

pytestmark = pytest.mark.integration


def _run(state_file: Path, *argv: str) -> int:
    parser = argparse.ArgumentParser(prog="laminar-kafka")
    add_dev_commands(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(["dev", "--state-file", str(state_file), *argv])
    return int(args.handler(args))


def test_dev_up_status_down_leaves_no_process(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    state_file = tmp_path / "state.json"
    assert _run(state_file, "up") == 0
    printed = capsys.readouterr().out
    assert "bootstrap.servers" in printed and "zookeeper" in printed and "started in" in printed
    recorded = read_state(state_file)
    assert recorded is not None and recorded.healthy
    pids = [p.pid for p in recorded.processes]
    try:
        assert _run(state_file, "up") == 0
        assert "already running" in capsys.readouterr().out
        assert _run(state_file, "status") == 0
        # A crash of one server makes the recording stale: status says so, up cleans and restarts.
        terminate_pid(pids[-1], timeout=0)
        assert _run(state_file, "status") == 1
        assert _run(state_file, "up") == 0
        assert "stale state file" in capsys.readouterr().out
        recorded = read_state(state_file)
        assert recorded is not None and recorded.healthy
        pids += [p.pid for p in recorded.processes]
    finally:
        assert _run(state_file, "down") == 0
    assert not state_file.exists()
    assert not any(pid_alive(pid) for pid in pids)
    assert _run(state_file, "status") == 3
