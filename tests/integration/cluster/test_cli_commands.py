"""The CLI against a real Kafka: bad input exits 2 with one line and writes nothing; run/verify/status."""
from __future__ import annotations

import json
import socket
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from laminar_kafka.demo import wait_caught_up
from laminar_kafka.devstack.processes import NodeProcess
from laminar_kafka.devstack.topics import create_topic
from tests import support
from tests.conftest import KafkaHandle

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]


def cli(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "laminar_kafka.cli.main", *argv], capture_output=True, text=True, timeout=90,
                          cwd=Path(__file__).resolve().parents[3])


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize("case", ["missing-topic", "unreachable-kafka", "unreachable-zk", "unwritable-output",
                                  "missing-key-file"])
def test_bad_input_exit_2_one_line_nothing_written(case: str, kafka: KafkaHandle, unique: Callable[[str], str],
                                                   tmp_path: Path) -> None:
    topic = unique("cli")
    create_topic(kafka.bootstrap, topic, 1)
    output = tmp_path / "out"
    argv = ["run", "--bootstrap", kafka.bootstrap, "--topic", topic, "--output", str(output), "--connect-timeout", "2"]
    if case == "missing-topic":
        argv[4] = unique("absent")
    elif case == "unreachable-kafka":  # librdkafka retries every second: still one line, no %3|...|FAIL|
        argv[2] = f"127.0.0.1:{closed_port()}"
    elif case == "missing-key-file":
        argv += ["--config", str(tmp_path / "tls.toml")]
        (tmp_path / "tls.toml").write_text('[kafka]\nsecurity.protocol = "SSL"\n'
                                           f'"ssl.key.location" = "{tmp_path}/absent.key"\n'
                                           f'"ssl.certificate.location" = "{tmp_path}/absent.crt"\n')
    elif case == "unreachable-zk":
        argv += ["--zk", f"127.0.0.1:{closed_port()}"]
    else:
        blocker = tmp_path / "file"
        blocker.write_text("x")
        argv[6] = str(blocker / "out")
    result = cli(*argv)
    assert result.returncode == 2, result.stderr
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    assert "%3|" not in result.stderr and "%4|" not in result.stderr
    assert not output.exists()


def test_run_verify_status_embedded(kafka: KafkaHandle, unique: Callable[[str], str], tmp_path: Path) -> None:
    topic = unique("cli")
    create_topic(kafka.bootstrap, topic, 3)
    support.produce(kafka.bootstrap, topic, [b"v%d" % i for i in range(3000)])
    output = str(tmp_path / "out")
    node = NodeProcess.launch(1, bootstrap=kafka.bootstrap, topic=topic, output=output, zk=None, pipeline="p",
                              log_dir=tmp_path, extra=["--checkpoint-interval-ms", "300"])
    try:
        assert wait_caught_up(kafka.bootstrap, topic, output, 60).ok
        verify = cli("verify", "--output", output, "--bootstrap", kafka.bootstrap, "--topic", topic, "--json")
        assert verify.returncode == 0, verify.stderr
        report = json.loads(verify.stdout)
        assert report["ok"] and report["missing"] == 0 and [p["expected"] for p in report["partitions"]] == [1000] * 3
        status = cli("status", "--bootstrap", kafka.bootstrap, "--topic", topic, "--state-dir",
                     str(Path(output) / "_coordinator"), "--json")
        assert status.returncode == 0, status.stderr
        view = json.loads(status.stdout)
        assert view["assignment_version"] >= 1 and view["nodes"][0]["node_id"] == 1
        assert {p["partition"]: p["high_watermark"] for p in view["partitions"]} == {f"{topic}:{i}": 1000 for i in range(3)}
        node.terminate()
        assert node.wait(30) == 0
    finally:
        node.stop()
    # a duplicated file makes verify fail with exit 1
    published = sorted(Path(output).glob("[!_]*/**/epoch-*.parquet"))  # not _staging/
    (Path(output) / "copy.parquet").write_bytes(published[0].read_bytes())
    result = cli("verify", "--output", output, "--bootstrap", kafka.bootstrap, "--topic", topic)
    assert result.returncode == 1 and "FAILED" in result.stdout
