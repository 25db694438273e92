"""`laminar-kafka run --zk ... ` with zk-auth: the pipeline's subtree is the user's alone; a node
without the credentials (or with wrong ones) stops at start with one line and writes nothing; the
password appears in no log, no status output and no znode."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from kazoo.client import KazooClient
from kazoo.exceptions import NoAuthError

from laminar_kafka.demo import wait_caught_up
from laminar_kafka.devstack.processes import NodeProcess
from laminar_kafka.devstack.topics import create_topic
from tests import support
from tests.conftest import KafkaHandle, ZooKeeperHandle

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]

PASSWORD = "zk-Secr3t-pw"


def cli(*argv: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "laminar_kafka.cli.main", *argv], capture_output=True, text=True, timeout=90,
                          cwd=Path(__file__).resolve().parents[3], env={**os.environ, **(env or {})})


def test_zk_auth_protects_the_pipeline_and_never_shows_the_password(
    kafka: KafkaHandle, zookeeper: ZooKeeperHandle, unique: Callable[[str], str], tmp_path: Path
) -> None:
    topic, pipeline = unique("zkauth"), unique("zkauth-p")
    create_topic(kafka.bootstrap, topic, 2)
    support.produce(kafka.bootstrap, topic, [b"r%d" % i for i in range(500)])
    output = str(tmp_path / "out")
    node = NodeProcess.launch(1, bootstrap=kafka.bootstrap, topic=topic, output=output, zk=zookeeper.hosts,
                              pipeline=pipeline, log_dir=tmp_path,
                              extra=["--zk-auth", f"lake:{PASSWORD}", "--checkpoint-interval-ms", "300",
                                     "--metrics-port", "0"])
    try:
        assert wait_caught_up(kafka.bootstrap, topic, output, 90).ok, node.log.read_text()[-2000:]

        stranger = KazooClient(hosts=zookeeper.hosts, timeout=10)
        stranger.start(timeout=10)
        try:
            with pytest.raises(NoAuthError):
                stranger.get_children(f"/laminar/{pipeline}")
            with pytest.raises(NoAuthError):
                stranger.create(f"/laminar/{pipeline}/intruder", b"x")
        finally:
            stranger.stop()
            stranger.close()

        base = ["run", "--bootstrap", kafka.bootstrap, "--topic", topic, "--output", str(tmp_path / "other"),
                "--zk", zookeeper.hosts, "--pipeline", pipeline, "--node-id", "2", "--connect-timeout", "5"]
        for extra_env in ({}, {"LAMINAR_ZK_AUTH": "lake:wrong"}):
            refused = cli(*base, env=extra_env)
            lines = [line for line in refused.stderr.splitlines() if line.strip()]
            assert refused.returncode == 2 and len(lines) == 1, refused.stderr
            assert "denied access" in lines[0] and not (tmp_path / "other").exists()

        status = cli("status", "--bootstrap", kafka.bootstrap, "--topic", topic, "--zk", zookeeper.hosts,
                     "--pipeline", pipeline, "--json", env={"LAMINAR_ZK_AUTH": f"lake:{PASSWORD}"})
        assert status.returncode in (0, 1), status.stderr
        assert json.loads(status.stdout)["nodes"][0]["node_id"] == 1
        assert PASSWORD not in status.stdout + status.stderr
        node.terminate()
        assert node.wait(60) == 0
    finally:
        node.stop()
    assert PASSWORD not in node.log.read_text()
    for path in Path(output).rglob("*"):
        if path.is_file() and path.suffix != ".parquet":
            assert PASSWORD.encode() not in path.read_bytes(), path
