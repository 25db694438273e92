"""`laminar-kafka status` against a real pipeline: exit 0 while it is healthy, 1 once its nodes are gone
(no leader, members missing, durable lag growing), 3 when Kafka cannot be reached; `--watch` prints one
JSON document per refresh without a terminal and stops on Ctrl-C."""
from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from tests.integration.cluster.harness import Pipeline

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]

ROOT = Path(__file__).resolve().parents[3]


def status_argv(p: Pipeline, *more: str) -> list[str]:
    assert p.zk is not None
    return [sys.executable, "-m", "laminar_kafka.cli.main", "status", "--bootstrap", p.bootstrap, "--topic", p.topic,
            "--zk", p.zk, "--pipeline", p.pipeline, *more]


def status(p: Pipeline, *more: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(status_argv(p, *more), capture_output=True, text=True, timeout=60, cwd=ROOT)


def test_status_exit_codes_follow_the_health_of_a_real_pipeline(pipeline: Pipeline) -> None:
    p = pipeline
    p.launch(1)
    p.launch(2)
    p.wait_spread(2)
    producer = p.produce(300)
    outcome: dict[str, subprocess.CompletedProcess[str]] = {}

    def exits(code: int) -> bool:
        outcome["last"] = status(p, "--json", "--stale-after", "3")
        return outcome["last"].returncode == code

    p.wait_until(lambda: exits(0), 60, "status exit 0 (healthy)")
    healthy = json.loads(outcome["last"].stdout)
    assert healthy["health"] == {"code": 0, "state": "healthy", "reasons": []} and healthy["leader"] in (1, 2)

    # --watch without a terminal: one JSON line per refresh, rates from successive durable cursors
    watch = subprocess.Popen(status_argv(p, "--watch", "--json", "--interval", "1"), stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True, cwd=ROOT)
    try:
        assert watch.stdout is not None
        lines = [json.loads(watch.stdout.readline()) for _ in range(3)]
        watch.send_signal(signal.SIGINT)
        assert watch.wait(30) in (0, 1), watch.stderr.read() if watch.stderr else ""
    finally:
        if watch.poll() is None:
            watch.kill()
    assert [line["health"]["code"] for line in lines] == [0, 0, 0], lines[-1]["health"]
    assert lines[0]["rates"] == {} and set(lines[2]["rates"]) == {part["partition"] for part in lines[2]["partitions"]}

    for node in p.nodes.values():  # crashes: the sessions expire, owners stay in the assignment
        node.kill()
    # at once: records wait, no epoch commits; once the sessions expired: no leader, members missing
    p.wait_until(lambda: exits(1) and "no leader" in outcome["last"].stdout, 60, "status exit 1, no leader")
    degraded = json.loads(outcome["last"].stdout)
    reasons = " | ".join(degraded["health"]["reasons"])
    assert degraded["health"]["state"] == "degraded"
    assert "member missing: node 1" in reasons and "member missing: node 2" in reasons
    assert "durable lag growing" in reasons
    table = status(p, "--stale-after", "3")
    assert table.returncode == 1 and "health: degraded" in table.stdout and "  - no leader" in table.stdout
    producer.stop()


def test_status_exits_3_in_one_line_when_kafka_cannot_be_reached(pipeline: Pipeline) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        closed = s.getsockname()[1]
    p = pipeline
    argv = status_argv(p)
    argv[argv.index("--bootstrap") + 1] = f"127.0.0.1:{closed}"
    result = subprocess.run(argv, capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert result.returncode == 3, result.stderr  # unknown, as probes read it: 2 is a usage error
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: cannot reach Kafka"), result.stderr
