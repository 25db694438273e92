"""values-dev.yaml's servers: non-root, the object-store Secret of the nodes (the chart's or your own),
the ports given in dev.<server>.port, and no empty Secret reference anywhere."""
from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

from tests.unit.deploy.helm_tools import DEV_VALUES, RELEASE, by_kind, find_helm, render

#: the user the dev images run as (docker/images: the first system user of their Dockerfiles)
IMAGE_UID = 999


@pytest.fixture(scope="module")
def helm() -> str:
    return find_helm()


def _servers(objects: Sequence[Mapping[str, Any]]) -> dict[str, Mapping[str, Any]]:
    """The dev servers' pod specs by server name."""
    return {o["metadata"]["labels"]["app.kubernetes.io/component"].removeprefix("dev-"): o["spec"]["template"]["spec"]
            for o in by_kind(objects, "StatefulSet") if o["metadata"]["labels"]["app.kubernetes.io/component"] != "node"}


def _nodes(objects: Sequence[Mapping[str, Any]]) -> Mapping[str, Any]:
    (nodes,) = [o for o in by_kind(objects, "StatefulSet") if o["metadata"]["labels"]["app.kubernetes.io/component"] == "node"]
    return nodes["spec"]["template"]["spec"]


def _dev(helm: str, tmp_path: Path, values: Mapping[str, Any] | None = None) -> list[dict[str, Any]]:
    return render(helm, values, tmp_path if values is not None else None, extra=["-f", str(DEV_VALUES)])


def test_the_dev_servers_run_as_their_images_user_without_privileges(helm: str, tmp_path: Path) -> None:
    servers = _servers(_dev(helm, tmp_path))
    assert sorted(servers) == ["kafka", "s3", "zookeeper"]
    for pod in servers.values():
        context = pod["securityContext"]
        assert context["runAsNonRoot"] is True and context["runAsUser"] == IMAGE_UID
        assert context["seccompProfile"] == {"type": "RuntimeDefault"}
        (container,) = pod["containers"]
        assert container["securityContext"] == {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}


def test_the_images_users_are_the_uid_the_chart_runs_as() -> None:
    """The Dockerfiles create their user as the first system user (uid 999 on Debian) and switch to it."""
    images = Path(__file__).resolve().parents[3] / "docker" / "images"
    for name in ("kafka", "zookeeper", "seaweedfs"):
        text = (images / f"{name}.Dockerfile").read_text()
        assert "\nUSER " in text, f"{name}.Dockerfile runs as root"
    assert "useradd --system" in (images / "jvm-servers.Dockerfile").read_text()
    assert "useradd --system" in (images / "seaweedfs.Dockerfile").read_text()


def test_the_s3_server_takes_an_existing_object_store_secret(helm: str, tmp_path: Path) -> None:
    values = {"objectStore": {"accessKeyId": "", "secretAccessKey": "", "existingSecret": "my-s3"}}
    objects = _dev(helm, tmp_path, values)
    assert by_kind(objects, "Secret") == []
    (s3,) = _servers(objects)["s3"]["containers"]
    assert {e["valueFrom"]["secretKeyRef"]["name"] for e in s3["env"]} == {"my-s3"}
    nodes = _nodes(objects)
    (init,) = nodes["initContainers"]
    assert init["envFrom"] == [{"secretRef": {"name": "my-s3"}}]
    assert {"secretRef": {"name": "my-s3"}} in nodes["containers"][0]["envFrom"]


def test_the_dev_ports_are_the_ones_the_nodes_and_the_broker_use(helm: str, tmp_path: Path) -> None:
    values = {"dev": {"kafka": {"port": 19092}, "zookeeper": {"port": 12181}, "s3": {"port": 18333}}}
    objects = _dev(helm, tmp_path, values)
    services = {s["metadata"]["name"]: s["spec"]["ports"] for s in by_kind(objects, "Service")}
    servers = _servers(objects)
    for server, port, listens in (("kafka", 19092, 9092), ("zookeeper", 12181, 2181), ("s3", 18333, 8333)):
        (service_port,) = services[f"{RELEASE}-dev-{server}"]
        assert service_port == {"name": server, "port": port, "targetPort": server}
        (container,) = servers[server]["containers"]
        assert container["ports"] == [{"name": server, "containerPort": listens}]  # the image's own port
        assert container["readinessProbe"]["tcpSocket"]["port"] == server
    (broker,) = servers["kafka"]["containers"]
    advertised = {e["name"]: e.get("value") for e in broker["env"]}["KAFKA_ADVERTISED_LISTENERS"]
    assert advertised == f"PLAINTEXT://{RELEASE}-dev-kafka:19092,BROKER://localhost:9094"
    text = json.dumps(_nodes(objects))
    assert f"{RELEASE}-dev-kafka:19092" in text and f"{RELEASE}-dev-zookeeper:12181" in text
    assert f"http://{RELEASE}-dev-s3:18333" in text
    assert "9092" not in text.replace("19092", "") and ":2181" not in text and ":8333" not in text


def test_no_empty_secret_reference(helm: str, tmp_path: Path) -> None:
    """An object store reached by an IAM role (no keys, no Secret): the init container takes no envFrom."""
    values = {"dev": {"enabled": True, "partitions": 2}, "topics": ["orders"], "output": "s3://lake/orders"}
    # the schema asks the dev store for keys; the template alone is checked here with --skip-schema-validation
    objects = render(helm, values, tmp_path, extra=["--skip-schema-validation"])
    for obj in by_kind(objects, "StatefulSet"):
        for container in [*obj["spec"]["template"]["spec"].get("initContainers", []),
                          *obj["spec"]["template"]["spec"]["containers"]]:
            for ref in container.get("envFrom", []):
                assert ref["secretRef"]["name"], f"an empty secretRef in {obj['metadata']['name']}"
    (init,) = _nodes(objects)["initContainers"]
    assert "envFrom" not in init
