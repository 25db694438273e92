"""The compose file and Dockerfile agree with the CLI (no Docker engine runs here)."""
from __future__ import annotations

from pathlib import Path

import yaml

from cluster.cli import build_parser
from cluster.config import SETTING_NAMES, env_name, settings_from

DOCKER = Path(__file__).resolve().parents[3] / "docker"


def load() -> dict:
    return yaml.safe_load((DOCKER / "compose.yaml").read_text())


def test_compose_has_zookeeper_kraft_kafka_and_three_nodes() -> None:
    services = load()["services"]
    assert {"zookeeper", "kafka", "node1", "node2", "node3"} <= set(services)
    assert "controller" in services["kafka"]["environment"]["KAFKA_PROCESS_ROLES"]  # KRaft, no ZooKeeper for Kafka


def test_node_commands_parse_and_env_vars_are_settings() -> None:
    services = load()["services"]
    parser = build_parser()
    known_env = {env_name(name) for name in SETTING_NAMES}
    node_ids = set()
    for name in ("node1", "node2", "node3"):
        service = services[name]
        args = parser.parse_args(service["command"])  # raises UsageError on a wrong flag
        assert args.command == "run"
        env = {k: str(v) for k, v in service["environment"].items()}
        assert set(env) <= known_env, set(env) - known_env
        flags = {n: getattr(args, n.replace("-", "_")) for n in SETTING_NAMES}
        settings = settings_from({}, env, flags)  # the merged settings validate
        assert not settings.embedded and settings.metrics_port == 9100
        node_ids.add(settings.node_id)
        assert service["volumes"] == ["output:/data"] and settings.output.startswith("/data/")
        assert service["stop_signal"] == "SIGTERM"
    assert node_ids == {1, 2, 3}


def test_dockerfile_installs_the_package_and_runs_the_console_script() -> None:
    text = (DOCKER / "Dockerfile").read_text()
    assert text.startswith("#") and "FROM python:3.11-slim" in text
    assert "pip install --no-cache-dir ." in text
    assert 'ENTRYPOINT ["laminar-kafka"]' in text
    for package in ("kafka_source", "coordinator", "cluster"):
        assert f"COPY {package} ./{package}" in text
