"""A stack started without `detach` never outlives the Python process that started it."""
from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from laminar_kafka.devstack.processes import pid_alive

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]


def test_servers_stop_when_the_starting_process_exits_without_stopping_them() -> None:
    script = textwrap.dedent(f"""
        import sys
        sys.path.insert(0, {str(ROOT)!r})
        from laminar_kafka.devstack.stack import DevStack
        stack = DevStack.launch(kafka_brokers=0, zookeeper_servers=1)
        print(stack.servers()[0].pid, flush=True)
        raise SystemExit(0)  # no stack.stop(): the exit hook must do it
    """)
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    pid = int(result.stdout.strip().splitlines()[-1])
    assert not pid_alive(pid), "the ZooKeeper JVM outlived the process that started it"
