"""``bench/bench_control_plane.py`` end to end on a tiny cluster: 3 simulated nodes (the real ZooKeeper
coordinator each) over 30 partitions, a join, a kill, a leader kill and a ZooKeeper restart; one JSON
object with every figure the docs quote, and the in-memory lake holding each record exactly once."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

BENCH = Path(__file__).resolve().parents[3] / "bench" / "bench_control_plane.py"
KEYS = {"epoch_commit_p50_s", "epoch_commit_p99_s", "rebalance_s", "kill_recovery_s", "leader_kill_recovery_s",
        "zk_restart_recovery_s", "zk_write_bytes_per_s", "zk_znodes", "leader_cpu_ms_per_s", "node_cpu_ms_per_s",
        "exact"}


def test_a_tiny_run_reports_every_figure_and_lands_exactly_once() -> None:
    done = subprocess.run([sys.executable, str(BENCH), "--nodes", "3", "--partitions", "30", "--duration", "4",
                           "--rate", "300", "--epoch", "0.5", "--kill-leader", "--restart-zk", "--json"],
                          capture_output=True, text=True, timeout=110, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads(done.stdout)
    assert KEYS <= result.keys()
    assert result["exact"] is True, result
    assert result["records_landed"] > 0 and result["gaps"] == 0 and result["duplicates"] == 0
    assert result["epochs_in_window"] >= 3 and result["zk_znodes"] > 0
    assert 0 < result["epoch_commit_p50_s"] <= result["epoch_commit_p99_s"] < 5
    assert result["rebalance_share"]["owned"] > 0
