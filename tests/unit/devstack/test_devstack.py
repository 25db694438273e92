"""Unit tests of the launcher's pure parts: versions, tools, ports, state files (no server starts)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from laminar_kafka.devstack import processes, stack
from laminar_kafka.devstack.errors import ArtifactError, DevStackStateError, ToolMissingError
from laminar_kafka.devstack.jvm import artifacts, kafka_cluster, maven
from laminar_kafka.devstack.jvm.versions import ServerVersions
from laminar_kafka.devstack.waiting import wait_until


def test_pom_pins_kafka_4_and_zookeeper_3_9() -> None:
    kafka, zookeeper = artifacts.pinned_versions()
    assert kafka.startswith("4.")
    assert zookeeper.startswith("3.9.")


def test_missing_tool_names_what_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", "/nonexistent")
    with pytest.raises(ToolMissingError, match="install openssl"):
        artifacts.require_tool("openssl", "install openssl")
    assert "\n" not in artifacts.JAVA_HINT


def test_an_unlocked_pair_without_mvn_on_path_bootstraps_maven(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # no lock covers Kafka 4.0.0: Maven must resolve it, and with no mvn on PATH Maven's own
    # distribution is fetched into the cache (stopped here before any download)
    monkeypatch.setenv("PATH", "/nonexistent")
    asked: list[Path] = []

    def no_download(cache: Path) -> Path:
        asked.append(cache)
        raise ArtifactError("no download in a unit test")

    monkeypatch.setattr(maven, "bootstrap_maven", no_download)
    with pytest.raises(ArtifactError, match="no download"):
        artifacts.ensure_artifacts(tmp_path, ServerVersions(kafka="4.0.0", zookeeper="3.9.3"))
    assert asked == [tmp_path]


def test_free_ports_are_distinct_and_bindable() -> None:
    ports = {processes.free_port() for _ in range(50)}
    assert len(ports) == 50
    assert not any(processes.port_accepts(p, timeout=0.1) for p in list(ports)[:5])


def test_log_tail_quotes_the_last_lines(tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    log.write_text("".join(f"line {i}\n" for i in range(100)))
    tail = processes.log_tail(log)
    assert tail.splitlines() == [f"line {i}" for i in range(70, 100)]
    assert processes.log_tail(tmp_path / "missing.log") == ""


def _state(tmp_path: Path, pid: int, name: str = "kafka-1") -> Path:
    state_file = tmp_path / "state.json"
    state_file.write_text(json.dumps({
        "base_dir": str(tmp_path / "laminar-devstack-x"), "bootstrap": "127.0.0.1:1", "zk_hosts": "127.0.0.1:2",
        "startup_seconds": 3.5, "processes": [{"name": name, "pid": pid, "port": 1, "log": "x"}],
    }))
    return state_file


def test_state_with_a_dead_pid_is_stale(tmp_path: Path) -> None:
    finished = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    recorded = stack.read_state(_state(tmp_path, int(finished.stdout)))
    assert recorded is not None and not recorded.healthy


def test_state_whose_pid_now_belongs_to_another_program_is_not_trusted(tmp_path: Path) -> None:
    recorded = stack.read_state(_state(tmp_path, os.getpid()))
    assert recorded is not None
    assert not recorded.processes[0].alive, "our own pytest process must not pass for a recorded server"


def test_tearing_down_a_stale_state_signals_nobody_and_removes_the_file(tmp_path: Path) -> None:
    state_file = _state(tmp_path, os.getpid())
    recorded = stack.read_state(state_file)
    assert recorded is not None
    assert stack.tear_down_recorded(recorded, state_file) == []
    assert not state_file.exists()


def test_unreadable_state_file_raises_a_state_error(tmp_path: Path) -> None:
    state_file = tmp_path / "state.json"
    state_file.write_text("{not json")
    with pytest.raises(DevStackStateError):
        stack.read_state(state_file)
    assert stack.read_state(tmp_path / "absent.json") is None


def test_cluster_ids_are_22_url_safe_characters_never_starting_with_a_dash() -> None:
    ids = [kafka_cluster.new_cluster_id() for _ in range(5000)]
    assert all(len(i) == 22 and not i.startswith("-") for i in ids)
    assert all(set(i) <= set("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_") for i in ids)
    assert len(set(ids)) == len(ids)


def test_wait_until_returns_at_once_when_the_condition_holds() -> None:
    calls: list[int] = []

    def holds() -> bool:
        calls.append(1)
        return True

    assert wait_until(holds, 0.0, "anything") < 0.5
    assert calls == [1]


def test_wait_until_polls_until_the_condition_holds() -> None:
    answers = iter([False, False, True])
    wait_until(lambda: next(answers), 5.0, "the third answer", interval=0.01)
    assert next(answers, "exhausted") == "exhausted"


def test_wait_until_raises_a_timeout_naming_what_it_waited_for() -> None:
    with pytest.raises(TimeoutError, match="the moon turning blue did not happen within 0s"):
        wait_until(lambda: False, 0.05, "the moon turning blue", interval=0.01)


def test_wait_until_lets_the_predicate_abort_early() -> None:
    def broken() -> bool:
        raise RuntimeError("gave up")

    with pytest.raises(RuntimeError, match="gave up"):
        wait_until(broken, 60.0, "never")
