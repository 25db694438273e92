"""docker/compose.production.yaml agrees with the images, the entrypoints and the CLI (no engine needed:
tests/integration/test_containers_production.py runs it for real)."""
from __future__ import annotations

import re
from pathlib import Path

import yaml

from laminar_kafka.cli.main import build_parser
from laminar_kafka.cluster.config import SETTING_NAMES, env_name, settings_from
from laminar_kafka.devstack.containers import engine as containers
from laminar_kafka.devstack.containers.topic_init import main as topic_init_main

DOCKER = Path(__file__).resolve().parents[4] / "docker"
_DEFAULT = re.compile(r"\$\{[A-Z0-9_]+:-([^}]*)\}")
ZOOKEEPERS = ("zk1", "zk2", "zk3")
BROKERS = ("kafka1", "kafka2", "kafka3")


def load() -> dict:
    return yaml.safe_load((DOCKER / "compose.production.yaml").read_text())


def default(value: str) -> str:
    """A compose value with every ${VAR:-default} replaced by its default."""
    return _DEFAULT.sub(lambda m: m.group(1), value)


def test_images_are_the_built_images() -> None:
    services = load()["services"]
    for name in ZOOKEEPERS:
        assert default(services[name]["image"]) == containers.ZOOKEEPER_IMAGE
    for name in BROKERS:
        assert default(services[name]["image"]) == containers.KAFKA_IMAGE
    assert default(services["seaweedfs"]["image"]) == containers.SEAWEEDFS_IMAGE
    assert default(services["catalog"]["image"]) == containers.REST_CATALOG_IMAGE
    assert default(services["init"]["image"]) == default(services["node"]["image"]) == containers.NODE_IMAGE


def test_zookeeper_is_a_three_server_ensemble() -> None:
    services = load()["services"]
    ids = set()
    for name in ZOOKEEPERS:
        env = services[name]["environment"]
        ids.add(env["ZOO_MY_ID"])
        assert env["ZOO_SERVERS"].split() == [f"server.{n}=zk{n}:2888:3888" for n in (1, 2, 3)]
        assert services[name]["volumes"] == [f"{name}-data:/var/lib/zookeeper"]
    assert ids == {"1", "2", "3"}


def test_three_kraft_brokers_one_cluster_three_replicas_min_isr_two() -> None:
    services = load()["services"]
    node_ids, ports = set(), set()
    for name in BROKERS:
        env = services[name]["environment"]
        node_ids.add(env["KAFKA_NODE_ID"])
        assert env["CLUSTER_ID"] == services["kafka1"]["environment"]["CLUSTER_ID"]
        assert len(env["CLUSTER_ID"]) == 22  # a base64 UUID, as the storage tool wants
        assert env["KAFKA_CONTROLLER_QUORUM_VOTERS"] == "1@kafka1:9093,2@kafka2:9093,3@kafka3:9093"
        assert "controller" in env["KAFKA_PROCESS_ROLES"]
        for setting in ("DEFAULT_REPLICATION_FACTOR", "OFFSETS_TOPIC_REPLICATION_FACTOR",
                        "TRANSACTION_STATE_LOG_REPLICATION_FACTOR"):
            assert env[f"KAFKA_{setting}"] == "3", setting
        assert env["KAFKA_MIN_INSYNC_REPLICAS"] == env["KAFKA_TRANSACTION_STATE_LOG_MIN_ISR"] == "2"
        advertised = env["KAFKA_ADVERTISED_LISTENERS"]
        external = re.search(r"EXTERNAL://127\.0\.0\.1:(\$\{[^}]+\})", advertised)
        assert external is not None and f"PLAINTEXT://{name}:9092" in advertised
        assert services[name]["ports"] == [f"127.0.0.1:{external.group(1)}:19092"]
        ports.add(default(external.group(1)))
        assert services[name]["volumes"] == [f"{name}-data:/var/lib/kafka/data"]
    assert node_ids == {"1", "2", "3"} and len(ports) == 3


def test_init_creates_the_bucket_and_a_topic_with_three_replicas() -> None:
    init = load()["services"]["init"]
    assert init["entrypoint"][-1] == "laminar_kafka.devstack.containers.topic_init"
    command = init["command"]
    assert command[command.index("--replication-factor") + 1] == "3"
    assert command[command.index("--bucket") + 1] == "lake"
    assert init["healthcheck"] == {"disable": True} and init["restart"] == "no"
    assert init["environment"]["AWS_ENDPOINT_URL"] == "http://seaweedfs:8333"


def test_topic_init_parses_the_compose_command(monkeypatch) -> None:
    """The init's flags are the module's (its main parses them before it waits for anything)."""
    seen = {}

    def stop(bucket: str, deadline: float) -> str:
        seen["bucket"] = bucket
        raise TimeoutError("stop here")

    monkeypatch.setattr("laminar_kafka.devstack.containers.topic_init.ensure_bucket", stop)
    assert topic_init_main(load()["services"]["init"]["command"]) == 1
    assert seen == {"bucket": "lake"}


def test_the_node_service_is_one_scalable_configuration_with_node_id_auto() -> None:
    services = load()["services"]
    node = services["node"]
    args = build_parser().parse_args(node["command"])
    assert args.command == "run"
    known_env = {env_name(name) for name in SETTING_NAMES}
    env = {k: str(v) for k, v in node["environment"].items()}
    laminar = {k: v for k, v in env.items() if k.startswith("LAMINAR_")}
    assert set(laminar) <= known_env, set(laminar) - known_env
    flags = {n: getattr(args, n.replace("-", "_")) for n in SETTING_NAMES}
    settings = settings_from({}, laminar, flags)  # the merged settings validate
    assert settings.node_id_auto
    assert not settings.embedded and settings.metrics_port == 9100
    assert settings.output.startswith("s3://lake/") and settings.catalog_uri == "http://catalog:8181"
    assert settings.table_format == "iceberg" and settings.state_dir == "/var/lib/laminar"
    assert env["AWS_ENDPOINT_URL"] == "http://seaweedfs:8333"
    # its only volume: an anonymous one at its state-dir; no fixed host port (it is scaled)
    assert node["volumes"] == ["/var/lib/laminar"] and "ports" not in node and "container_name" not in node
    assert "hostname" not in node  # a replica's host name is its container id: ZooKeeper allocates the id
    assert node["scale"] == 3 and node["restart"] == "unless-stopped" and node["stop_signal"] == "SIGTERM"
    assert node["depends_on"]["init"] == {"condition": "service_completed_successfully"}
    assert node["depends_on"]["catalog"] == {"condition": "service_healthy"}
    assert {name for name, rule in node["depends_on"].items() if rule == {"condition": "service_healthy"}} == \
        {*ZOOKEEPERS, *BROKERS, "seaweedfs", "catalog"}
    assert "/var/lib/laminar" in (DOCKER / "Dockerfile").read_text()  # the volume starts owned by the node's user


def test_the_catalog_keeps_its_tables_on_its_volume_and_writes_s3() -> None:
    catalog = load()["services"]["catalog"]
    env = catalog["environment"]
    assert env["CATALOG_URI"] == "jdbc:sqlite:/var/lib/iceberg/catalog.db"
    assert env["CATALOG_CLIENTS"] == "1"  # one SQLite connection: a restarted catalog commits again
    assert catalog["volumes"] == ["catalog-data:/var/lib/iceberg"]
    assert env["CATALOG_S3_ENDPOINT"] == "http://seaweedfs:8333" and env["CATALOG_S3_PATH__STYLE__ACCESS"] == "true"
    assert not any("SECRET" in key for key in env if key.startswith("CATALOG_"))  # the server logs CATALOG_*


def test_every_long_running_service_has_a_one_string_healthcheck() -> None:
    services = load()["services"]
    for name, service in services.items():
        if name == "init":
            continue
        test = service["healthcheck"]["test"]
        # one shell string: podman's Docker API splits the arguments of the CMD form at whitespace
        assert test[0] == "CMD-SHELL" and len(test) == 2, name


def test_every_named_volume_is_declared() -> None:
    document = load()
    used = {volume.split(":", 1)[0] for service in document["services"].values()
            for volume in service.get("volumes", []) if ":" in volume}
    assert used == set(document["volumes"])


class _Container:
    def __init__(self, mounts: list[dict], project: str = "prod") -> None:
        self.attrs = {"Mounts": mounts}
        self.labels = {"com.docker.compose.project": project}


def test_anonymous_volumes_are_the_mounts_no_compose_file_names() -> None:
    from laminar_kafka.devstack.containers.compose import anonymous_volumes

    container = _Container([
        {"Type": "volume", "Name": "3f9a" * 16, "Destination": "/var/lib/laminar"},  # `- /var/lib/laminar`
        {"Type": "volume", "Name": "prod_catalog-data", "Destination": "/var/lib/iceberg"},  # a named one
        {"Type": "bind", "Source": "/etc/hosts", "Destination": "/etc/hosts"},
        {"Type": "tmpfs", "Destination": "/tmp"},
    ])
    assert anonymous_volumes(container) == ["3f9a" * 16]
    assert anonymous_volumes(_Container([])) == []
