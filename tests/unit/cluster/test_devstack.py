"""Unit tests of the launcher's pure parts: versions, tools, ports, state files (no server starts)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from cluster import devstack
from cluster.errors import DevStackStateError, ToolMissingError


def test_pom_pins_kafka_4_and_zookeeper_3_9() -> None:
    kafka, zookeeper = devstack.pinned_versions()
    assert kafka.startswith("4.")
    assert zookeeper.startswith("3.9.")


def test_missing_tool_names_what_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", "/nonexistent")
    with pytest.raises(ToolMissingError, match="install"):
        devstack.require_tool("java", devstack._JAVA_HINT)
    assert "\n" not in devstack._JAVA_HINT and "\n" not in devstack._MAVEN_HINT


def test_ensure_artifacts_without_maven_says_so(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", "/nonexistent")
    with pytest.raises(ToolMissingError):
        devstack.ensure_artifacts(tmp_path)


def test_free_ports_are_distinct_and_bindable() -> None:
    ports = {devstack.free_port() for _ in range(50)}
    assert len(ports) == 50
    assert not any(devstack.port_accepts(p, timeout=0.1) for p in list(ports)[:5])


def test_log_tail_quotes_the_last_lines(tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    log.write_text("".join(f"line {i}\n" for i in range(100)))
    tail = devstack.log_tail(log)
    assert tail.splitlines() == [f"line {i}" for i in range(70, 100)]
    assert devstack.log_tail(tmp_path / "missing.log") == ""


def _state(tmp_path: Path, pid: int, name: str = "kafka-1") -> Path:
    state_file = tmp_path / "state.json"
    state_file.write_text(json.dumps({
        "base_dir": str(tmp_path / "laminar-devstack-x"), "bootstrap": "127.0.0.1:1", "zk_hosts": "127.0.0.1:2",
        "startup_seconds": 3.5, "processes": [{"name": name, "pid": pid, "port": 1, "log": "x"}],
    }))
    return state_file


def test_state_with_a_dead_pid_is_stale(tmp_path: Path) -> None:
    finished = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    recorded = devstack.read_state(_state(tmp_path, int(finished.stdout)))
    assert recorded is not None and not recorded.healthy


def test_state_whose_pid_now_belongs_to_another_program_is_not_trusted(tmp_path: Path) -> None:
    recorded = devstack.read_state(_state(tmp_path, os.getpid()))
    assert recorded is not None
    assert not recorded.processes[0].alive, "our own pytest process must not pass for a recorded server"


def test_tearing_down_a_stale_state_signals_nobody_and_removes_the_file(tmp_path: Path) -> None:
    state_file = _state(tmp_path, os.getpid())
    recorded = devstack.read_state(state_file)
    assert recorded is not None
    assert devstack.tear_down_recorded(recorded, state_file) == []
    assert not state_file.exists()


def test_unreadable_state_file_raises_a_state_error(tmp_path: Path) -> None:
    state_file = tmp_path / "state.json"
    state_file.write_text("{not json")
    with pytest.raises(DevStackStateError):
        devstack.read_state(state_file)
    assert devstack.read_state(tmp_path / "absent.json") is None


def test_cluster_ids_are_22_url_safe_characters_never_starting_with_a_dash() -> None:
    ids = [devstack.new_cluster_id() for _ in range(5000)]
    assert all(len(i) == 22 and not i.startswith("-") for i in ids)
    assert all(set(i) <= set("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_") for i in ids)
    assert len(set(ids)) == len(ids)
