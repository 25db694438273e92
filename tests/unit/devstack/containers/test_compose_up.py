"""`ComposeProject.up` rides out podman's race with a one-shot container's exit, and nothing else."""
from __future__ import annotations

import subprocess

import pytest

from laminar_kafka.devstack.containers.compose import UP_ATTEMPTS, ComposeProject, engine_race
from laminar_kafka.devstack.containers.engine import ContainerError

RACE = ("up -d failed (1):\nCreating laminar-compose-1_topic-init_1 ... done\n"
        "read /proc/31435/cgroup: no such process")


def test_the_race_is_recognised_and_other_failures_are_not() -> None:
    assert engine_race(RACE)
    assert not engine_race("up -d failed (1):\nERROR: pull access denied for laminar-kafka")
    assert not engine_race("read /proc/self/status: permission denied")


def _project(monkeypatch: pytest.MonkeyPatch, failures: list[str]) -> list[tuple[str, ...]]:
    calls: list[tuple[str, ...]] = []

    def run(self: ComposeProject, *args: str, timeout: float = 300.0, check: bool = True
            ) -> subprocess.CompletedProcess[str]:
        calls.append(args)
        if failures:
            raise ContainerError(failures.pop(0))
        return subprocess.CompletedProcess(list(args), 0, "", "")

    monkeypatch.setattr(ComposeProject, "run", run)
    return calls


def test_up_is_tried_again_after_the_race(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = _project(monkeypatch, [RACE])
    ComposeProject("p").up()
    assert calls == [("up", "-d", "--no-build")] * 2


def test_up_gives_up_after_its_attempts(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = _project(monkeypatch, [RACE] * UP_ATTEMPTS)
    with pytest.raises(ContainerError, match="cgroup: no such process"):
        ComposeProject("p").up("node1")
    assert len(calls) == UP_ATTEMPTS


def test_another_failure_is_raised_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = _project(monkeypatch, ["up -d failed (1):\nERROR: no such image"])
    with pytest.raises(ContainerError, match="no such image"):
        ComposeProject("p").up()
    assert len(calls) == 1
