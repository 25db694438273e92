"""`laminar-kafka redis` refuses what it cannot do in one line, exit 2: a bad flag, an unreachable
server (its password never printed), an output that holds no rows of the stream (a wrong --output
or --stream, not "every entry missing")."""
from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
import redis

from laminar_kafka.devstack.redis_server import RedisServer

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "laminar_kafka.cli.main", "redis", *args],
                          capture_output=True, text=True, timeout=60)


def test_a_bad_flag_is_one_line_exit_2(tmp_path: Path) -> None:
    done = cli("run", "--redis-url", "redis://127.0.0.1:1/0", "--stream", "s", "--partitions", "0", "--output",
               str(tmp_path), "--node-id", "1", "--zk", "127.0.0.1:1", "--pipeline", "p")
    assert done.returncode == 2 and done.stderr.strip() == "error: partitions must be >= 1, got 0"


def test_an_unreachable_server_is_one_line_without_its_password(tmp_path: Path) -> None:
    done = cli("verify", "--redis-url", "redis://app:s3cret@127.0.0.1:1/0", "--stream", "s", "--partitions", "2",
               "--output", str(tmp_path))
    assert done.returncode == 2 and len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert "cannot read the streams s:* on redis://app:***@127.0.0.1:1/0" in done.stderr and "s3cret" not in done.stderr


def test_verify_names_a_stream_the_output_does_not_hold(redis_server: RedisServer, unique: Callable[[str], str],
                                                        tmp_path: Path) -> None:
    stream = unique("verify")
    client = redis.Redis.from_url(redis_server.url)
    client.xadd(f"{stream}:0", {"value": b"x"})
    client.close()
    (tmp_path / "orders").mkdir()
    done = cli("verify", "--redis-url", redis_server.url, "--stream", stream, "--partitions", "2",
               "--output", str(tmp_path))
    assert done.returncode == 2, done.stdout + done.stderr
    assert f"holds no rows of stream '{stream}' (1 entries in Redis): wrong --output or --stream? It holds orders" \
        in done.stderr
