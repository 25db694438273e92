"""The container tooling for real: the engine check, cached image builds, the node image, and
`laminar-kafka dev up --containers` / `dev status` / `dev down`."""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from laminar_kafka.cli.dev import _stack_name, add_dev_commands
from laminar_kafka.devstack.containers import engine as containers
from laminar_kafka.devstack.containers.servers import stack_containers
from tests import support
from tests.conftest import container_engine

pytestmark = [pytest.mark.integration, pytest.mark.containers, pytest.mark.timeout(300)]
REPO = Path(__file__).resolve().parents[2]


def _module(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "laminar_kafka.devstack.containers", *args], cwd=REPO, capture_output=True,
                          text=True, env={**os.environ, **(env or {})}, timeout=900)


def test_check_says_in_one_line_what_is_missing() -> None:
    container_engine()
    ok = _module("check")
    assert ok.returncode == 0 and ok.stdout.startswith("containers: ok"), ok.stderr
    missing = _module("check", env={"DOCKER_HOST": "unix:///nonexistent/engine.sock"})
    assert missing.returncode == 2
    assert missing.stderr.count("\n") == 1 and "does not answer" in missing.stderr


def test_a_second_build_is_all_cached() -> None:
    container_engine()
    first = _module("build")  # builds whatever is missing or stale (nothing, after `make images`)
    assert first.returncode == 0, first.stdout + first.stderr
    started = time.monotonic()
    second = _module("build")
    elapsed = time.monotonic() - started
    assert second.returncode == 0, second.stderr
    assert "built: nothing, all cached" in second.stdout and elapsed < 60, second.stdout
    assert all(line.rstrip().endswith("cached") for line in second.stdout.splitlines()[:-1])


def test_the_node_image_runs_the_console_script() -> None:
    client = container_engine()
    from laminar_kafka.devstack.containers.images import ImageBuilder

    ImageBuilder(client, log=lambda line: None).build(["node"])
    output = client.containers.run(containers.NODE_IMAGE, ["verify", "--help"], remove=True).decode()
    assert "--bootstrap" in output and "--output" in output


def _dev(state_file: Path, *argv: str) -> int:
    parser = argparse.ArgumentParser(prog="laminar-kafka")
    add_dev_commands(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(["dev", "--state-file", str(state_file), *argv])
    return int(args.handler(args))


def test_dev_up_containers_status_down(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                       unique) -> None:
    client = container_engine()
    state_file = tmp_path / "state.json"
    name = _stack_name(argparse.Namespace(state_file=state_file))
    assert _dev(state_file, "up", "--containers") == 0
    printed = capsys.readouterr().out
    assert "bootstrap.servers" in printed and "started in" in printed
    bootstrap = next(line.split()[-1] for line in printed.splitlines() if line.startswith("bootstrap.servers"))
    try:
        topic = unique("dev-containers")
        support.create_topic(bootstrap, topic, 2)
        support.produce(bootstrap, topic, [b"v%d" % i for i in range(100)])
        assert sum(len(v) for v in support.read_all(bootstrap, topic).values()) == 100

        assert _dev(state_file, "up", "--containers") == 0
        assert "already running" in capsys.readouterr().out
        assert _dev(state_file, "status") == 0
        kafka = next(c for c in stack_containers(client, name) if c.name.endswith("-kafka"))
        kafka.kill()  # a crashed server: status says so, up cleans the stack and starts a new one
        assert _dev(state_file, "status") == 1
        assert _dev(state_file, "up", "--containers") == 0
        assert "stale container stack" in capsys.readouterr().err
        assert _dev(state_file, "status") == 0
    finally:
        assert _dev(state_file, "down") == 0
    assert stack_containers(client, name) == []
    assert _dev(state_file, "status") == 3
