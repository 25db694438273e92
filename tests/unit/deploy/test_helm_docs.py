"""docs/kubernetes.md's values file renders and gives settings the node accepts."""
from __future__ import annotations

import re
import tomllib
from pathlib import Path

import yaml

from laminar_kafka.cluster.config import settings_from
from tests.unit.deploy.helm_tools import REPO, by_kind, find_helm, one, render

DOC = REPO / "docs" / "kubernetes.md"


def _values_block() -> dict[str, object]:
    blocks = re.findall(r"```yaml\n(# my-values\.yaml\n.*?)```", DOC.read_text(), re.S)
    assert len(blocks) == 1, "docs/kubernetes.md has one `# my-values.yaml` block"
    values = yaml.safe_load(blocks[0])
    assert isinstance(values, dict)
    return values


def test_the_documented_values_render_what_the_doc_says(tmp_path: Path) -> None:
    objects = render(find_helm(), _values_block(), tmp_path)
    assert by_kind(objects, "Secret") == [], "the object store's keys come from the Secret the doc creates"
    sts = one(objects, "StatefulSet")
    assert sts["metadata"]["name"] == "laminar-kafka"  # `helm template laminar-kafka`: the doc's release is orders
    container = sts["spec"]["template"]["spec"]["containers"][0]
    assert container["image"] == "registry.example.com/lake/laminar-kafka:0.1.0"
    assert container["envFrom"] == [{"secretRef": {"name": "lake-s3"}}]
    document = tomllib.loads(one(objects, "ConfigMap")["data"]["laminar.toml"])
    settings = settings_from(document, {}, {"node-id": "auto"})
    assert (settings.pipeline, settings.table_format, settings.catalog_uri) == (
        "orders", "iceberg", "http://iceberg-rest.lake.svc:8181")
    assert settings.zk.startswith("zk-0.zk.lake.svc:2181")


def test_the_documented_release_names_its_pods_as_the_doc_does(tmp_path: Path) -> None:
    """`helm install orders ...`: the StatefulSet orders-laminar-kafka, as the doc's commands name it."""
    objects = render(find_helm(), _values_block(), tmp_path, release="orders")
    assert one(objects, "StatefulSet")["metadata"]["name"] == "orders-laminar-kafka"
    text = DOC.read_text()
    assert "statefulset/orders-laminar-kafka" in text and "exec orders-laminar-kafka-0" in text
