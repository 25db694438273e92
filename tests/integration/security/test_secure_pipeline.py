"""The whole pipeline against the secured broker, through the CLI only: `run` (embedded mode, a
subprocess) lands a topic produced over SASL_SSL (and over mTLS), then `verify` and `status` with the
same `--config` file exit 0. No secret reaches a log, a command's output, the output directory
(manifests, `_coordinator/`) or `/metrics`. Bad credentials make `run` and `verify` exit 2 with one
line naming the cause, writing nothing.
"""
from __future__ import annotations

import json
import subprocess
import sys
import urllib.request
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from laminar_kafka.cluster.lake.parquet.sink import open_output
from laminar_kafka.cluster.ops.verify import audit, read_output, read_topic
from laminar_kafka.devstack.processes import REPO_ROOT, NodeProcess, free_port, node_environment
from laminar_kafka.devstack.producers import produce
from laminar_kafka.devstack.security import write_client_toml
from laminar_kafka.devstack.stack import DevStack
from laminar_kafka.devstack.topics import create_topic
from laminar_kafka.devstack.waiting import wait_until
from laminar_kafka.kafka_source.clients import KafkaClientConfig

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

RECORDS_PER_PARTITION = 1000


def cli(*argv: str, env: Mapping[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """`laminar-kafka <argv>` as a subprocess of this checkout, without our LAMINAR_* variables."""
    return subprocess.run([sys.executable, "-m", "laminar_kafka.cli.main", *argv], capture_output=True, text=True, timeout=120,
                          cwd=REPO_ROOT, env={**node_environment(), **dict(env or {})})


def missing_records(client: KafkaClientConfig, topic: str, output: Path) -> int:
    """How many records of `topic` (read over `client`) the output lacks."""
    fs, root = open_output(str(output))
    expected, highs, lows = read_topic(client, topic, 30.0)
    return audit(topic, expected, highs, read_output(fs, root, topic), lows).missing


@dataclass
class Evidence:
    """Everything a pipeline run showed or wrote, to search for secrets."""

    topic: str
    output: Path
    texts: dict[str, str] = field(default_factory=dict)
    files: list[Path] = field(default_factory=list)

    def add(self, name: str, result: subprocess.CompletedProcess[str]) -> None:
        self.texts[f"{name} stdout"] = result.stdout
        self.texts[f"{name} stderr"] = result.stderr

    def leaks(self, secrets: Iterable[str]) -> list[str]:
        found = []
        for secret in secrets:
            found += [f"{name} holds a secret" for name, text in self.texts.items() if secret in text]
            found += [f"{path} holds a secret" for path in self.files if secret.encode() in path.read_bytes()]
        return found


def land_and_check(stack: DevStack, client: KafkaClientConfig, config: Path, tmp_path: Path,
                   unique: Callable[[str], str], *, debug: bool = False) -> Evidence:
    """Produce over `client`, run one node with `--config config`, wait until the output holds every
    record, check `/metrics`, `verify` and `status` (exit 0), stop the node; return the evidence."""
    topic = unique("secure-landing")
    create_topic("", topic, 3, client=client)
    produce("", topic, [b"r-%d" % i for i in range(3 * RECORDS_PER_PARTITION)], client=client)
    output = tmp_path / "out"
    metrics_port = free_port()
    node = NodeProcess.launch(
        1, bootstrap=client.bootstrap, topic=topic, output=str(output), zk=None, pipeline=unique("secure"),
        log_dir=tmp_path / "logs", extra=["--config", str(config), "--checkpoint-interval-ms", "300",
                                          "--metrics-port", str(metrics_port), *(["--debug"] if debug else [])],
    )
    evidence = Evidence(topic, output)
    try:
        def landed() -> bool:
            if not node.alive():
                raise AssertionError(f"the node exited with {node.process.returncode if node.process else None}:\n"
                                     + node.log_text()[-3000:])
            return output.exists() and missing_records(client, topic, output) == 0

        wait_until(landed, 120, "every record landed", interval=1.0)
        with urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=10) as page:
            evidence.texts["/metrics"] = page.read().decode()
        assert "laminar_" in evidence.texts["/metrics"]
        verify = cli("verify", "--config", str(config), "--output", str(output), "--topic", topic, "--json")
        evidence.add("verify", verify)
        assert verify.returncode == 0, verify.stdout + verify.stderr
        report = json.loads(verify.stdout)
        assert report["ok"] and report["missing"] == 0 and report["duplicated"] == 0
        assert sorted(p["expected"] for p in report["partitions"]) == [RECORDS_PER_PARTITION] * 3
        status = cli("status", "--config", str(config), "--topic", topic, "--state-dir",
                     str(output / "_coordinator"), "--json")
        evidence.add("status", status)
        assert status.returncode == 0, status.stdout + status.stderr
        view = json.loads(status.stdout)
        assert {p["partition"]: p["high_watermark"] for p in view["partitions"]} == {
            f"{topic}:{i}": RECORDS_PER_PARTITION for i in range(3)}
        node.terminate()
        assert node.wait(30) == 0, node.log_text()[-3000:]
    finally:
        node.stop()
    evidence.texts["node log"] = node.log_text()
    evidence.files += [path for path in output.rglob("*") if path.is_file()]
    assert any(path.parent.name == "_coordinator" or "_coordinator" in path.parts for path in evidence.files)
    assert stack.kafka is not None
    evidence.files += [broker.log_path for broker in stack.kafka.brokers]
    return evidence


@pytest.mark.parametrize("listener", ["sasl_ssl", "mtls"])
def test_run_verify_status_over_a_secured_listener(listener: str, secure_kafka: DevStack, tmp_path: Path,
                                                   unique: Callable[[str], str]) -> None:
    if listener == "sasl_ssl":
        client, config = secure_kafka.sasl_ssl_client(), secure_kafka.client_config_path
    else:
        client, config = secure_kafka.mtls_client(), secure_kafka.mtls_client_config_path
    evidence = land_and_check(secure_kafka, client, config, tmp_path, unique)
    assert secure_kafka.security is not None
    assert not evidence.leaks(secure_kafka.security.secrets)


def test_no_secret_in_logs_outputs_status_or_metrics(secure_kafka: DevStack, tmp_path: Path,
                                                     unique: Callable[[str], str]) -> None:
    """A debug run over SASL_SSL, librdkafka's security, broker and configuration debug logs on (the
    most talkative), its password in the config file; and a `verify` given the password in
    LAMINAR_KAFKA__SASL_PASSWORD only."""
    material = secure_kafka.security
    assert material is not None
    password = material.user.password
    client = secure_kafka.sasl_ssl_client()
    talkative = write_client_toml(tmp_path / "debug.toml", {**client.properties, "debug": "security,broker,conf"},
                                  bootstrap=client.bootstrap)
    assert password in talkative.read_text()  # the search below can find it
    evidence = land_and_check(secure_kafka, client, talkative, tmp_path, unique, debug=True)
    assert "SASL" in evidence.texts["node log"] and "DEBUG" in evidence.texts["node log"]
    without_password = write_client_toml(
        tmp_path / "no-password.toml", {k: v for k, v in client.properties.items() if k != "sasl.password"},
        bootstrap=client.bootstrap)
    audited = cli("verify", "--config", str(without_password), "--output", str(evidence.output), "--topic",
                  evidence.topic, "--debug", env={"LAMINAR_KAFKA__SASL_PASSWORD": password})
    evidence.add("verify (password from the environment)", audited)
    assert audited.returncode == 0, audited.stdout + audited.stderr
    assert not evidence.leaks(material.secrets), evidence.leaks(material.secrets)


@pytest.mark.parametrize("case", ["wrong-password", "untrusted-ca", "missing-key"])
def test_bad_credentials_exit_2_in_one_line_writing_nothing(case: str, secure_kafka: DevStack, tmp_path: Path,
                                                            unique: Callable[[str], str]) -> None:
    material = secure_kafka.security
    assert material is not None
    if case == "wrong-password":
        client, cause = secure_kafka.sasl_ssl_client(password="not-the-password"), ("authentication", "credentials")
    elif case == "untrusted-ca":
        client, cause = secure_kafka.sasl_ssl_client(ca_cert=material.untrusted_ca_cert), ("certificate",)
    else:
        client, cause = secure_kafka.mtls_client(key=tmp_path / "absent.key"), ("key",)
    topic = unique("secure-bad")
    create_topic("", topic, 1, client=secure_kafka.sasl_ssl_client())
    config = write_client_toml(tmp_path / "bad.toml", dict(client.properties), bootstrap=client.bootstrap)
    output = tmp_path / "out"
    run = cli("run", "--config", str(config), "--topic", topic, "--output", str(output), "--connect-timeout", "8")
    verify = cli("verify", "--config", str(config), "--output", str(tmp_path), "--topic", topic, "--timeout", "10")
    for name, result in (("run", run), ("verify", verify)):
        lines = [line for line in result.stderr.splitlines() if line.strip()]
        assert result.returncode == 2, f"{name}: {result.stderr}"
        assert len(lines) == 1 and lines[0].startswith("error: "), f"{name}: {result.stderr}"
        assert any(word in lines[0].lower() for word in cause), f"{name}: {lines[0]}"
        assert "not-the-password" not in result.stdout + result.stderr
        assert not any(secret in result.stdout + result.stderr for secret in material.secrets)
    assert not output.exists()


def test_json_schema_inferred_over_sasl_ssl(secure_kafka: DevStack, tmp_path: Path,
                                            unique: Callable[[str], str]) -> None:
    """A real user's combination: a secured cluster and `--format json` without a schema. The
    sampling consumer that infers the schema must use the same [kafka] settings as every other client."""
    client, config = secure_kafka.sasl_ssl_client(), secure_kafka.client_config_path
    topic = unique("secure-json")
    create_topic("", topic, 2, client=client)
    produce("", topic, [json.dumps({"id": i, "name": f"n{i}"}).encode() for i in range(400)], client=client)
    output = tmp_path / "out"
    node = NodeProcess.launch(1, bootstrap=client.bootstrap, topic=topic, output=str(output), zk=None,
                              pipeline=unique("secure-json"), log_dir=tmp_path / "logs",
                              extra=["--config", str(config), "--format", "json", "--checkpoint-interval-ms", "300"])
    try:
        wait_until(lambda: node.alive() and output.exists() and missing_records(client, topic, output) == 0
                   or not node.alive(), 120, "every record landed (or the node exited)", interval=1.0)
        assert node.alive(), node.log_text()[-3000:]
        node.terminate()
        assert node.wait(30) == 0, node.log_text()[-3000:]
    finally:
        node.stop()
    pinned = json.loads((output / "_coordinator" / "settings.json").read_text())["json.schema"]
    assert pinned == "id:int64,name:string"
    verify = cli("verify", "--config", str(config), "--output", str(output), "--topic", topic, "--json")
    assert verify.returncode == 0 and json.loads(verify.stdout)["ok"], verify.stdout + verify.stderr
