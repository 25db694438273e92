"""Running helm on the chart for the deployment tests: finding the binary, rendering, parsing.

helm comes from ``LAMINAR_HELM`` (what ``.ci/go-tools.sh`` prints) or PATH. Without it a test skips
with one line naming ``.ci/go-tools.sh``, except under ``LAMINAR_DEPLOY_TOOLS_REQUIRED=1`` (CI), where
it fails.
"""
from __future__ import annotations

import base64
import os
import shutil
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

REPO = Path(__file__).resolve().parents[3]
CHART = REPO / "deploy" / "helm" / "laminar-kafka"
#: the try-out values: dev servers inside the cluster
DEV_VALUES = CHART / "values-dev.yaml"
MANIFESTS = REPO / "deploy" / "kubernetes"
ALERTS = REPO / "deploy" / "monitoring" / "alerts.yaml"
RELEASE = "laminar-kafka"
#: the Kubernetes releases every rendered object is validated against (kubernetes-validate's schemas)
KUBERNETES_RELEASES = ("1.33.0", "1.36.0")


def deploy_tools_unavailable(reason: str) -> None:
    """Skip with ``reason``, or fail when LAMINAR_DEPLOY_TOOLS_REQUIRED=1 (CI must run these checks)."""
    if os.environ.get("LAMINAR_DEPLOY_TOOLS_REQUIRED") == "1":
        pytest.fail(reason, pytrace=False)
    pytest.skip(reason)


def find_tool(name: str, variable: str) -> str:
    """The ``name`` binary (the ``variable`` environment variable, else PATH: what ``.ci/go-tools.sh``
    builds and prints); skips, or fails under LAMINAR_DEPLOY_TOOLS_REQUIRED=1, when there is none."""
    configured = os.environ.get(variable)
    if configured:
        if not os.access(configured, os.X_OK):
            deploy_tools_unavailable(f"{variable}={configured} is not an executable")
        return configured
    found = shutil.which(name)
    if found is None:
        deploy_tools_unavailable(f"{name} not found: export $(bash .ci/go-tools.sh | tail -2) builds it "
                                 f"(or set {variable})")
    assert found is not None
    return found


def find_helm() -> str:
    """The helm binary (``LAMINAR_HELM``, else PATH)."""
    return find_tool("helm", "LAMINAR_HELM")


def secret_env(objects: Sequence[Mapping[str, Any]]) -> dict[str, str]:
    """Every variable the chart's Secrets hand to the node (their keys are the variable names)."""
    env: dict[str, str] = {}
    for secret in by_kind(objects, "Secret"):
        env.update(secret.get("stringData", {}))
        env.update({k: base64.b64decode(v).decode() for k, v in secret.get("data", {}).items()})
    return env


@dataclass(frozen=True)
class HelmRun:
    """One finished helm command."""

    returncode: int
    stdout: str
    stderr: str


def run_helm(helm: str, *args: str, values: Mapping[str, Any] | None = None, tmp: Path | None = None,
             cwd: Path = REPO) -> HelmRun:
    """``helm <args>``, with ``values`` written to a file under ``tmp`` and passed as ``-f``."""
    command = [helm, *args]
    if values is not None:
        assert tmp is not None, "values need a directory for their file"
        path = tmp / f"values-{len(list(tmp.glob('values-*.yaml')))}.yaml"
        path.write_text(yaml.safe_dump(dict(values)))
        command += ["-f", str(path)]
    done = subprocess.run(command, cwd=cwd, capture_output=True, text=True, timeout=120)
    return HelmRun(done.returncode, done.stdout, done.stderr)


class _UniqueKeyLoader(yaml.SafeLoader):
    """A YAML loader that refuses a mapping with a key twice (PyYAML keeps the last one silently; the
    API server's decoder refuses such a manifest)."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        keys = [self.construct_object(key, deep=deep) for key, _ in node.value]
        duplicated = sorted({str(k) for k in keys if keys.count(k) > 1})
        if duplicated:
            raise yaml.constructor.ConstructorError(None, None, f"keys given twice: {duplicated}", node.start_mark)
        return super().construct_mapping(node, deep=deep)


def load_documents(text: str) -> list[dict[str, Any]]:
    """Every non-empty document of a multi-document YAML text; a key given twice in a mapping fails."""
    return [doc for doc in yaml.load_all(text, Loader=_UniqueKeyLoader) if doc]


def render(helm: str, values: Mapping[str, Any] | None = None, tmp: Path | None = None,
           extra: Sequence[str] = (), release: str = RELEASE) -> list[dict[str, Any]]:
    """The objects ``helm template <release>`` renders for ``values`` (defaults when None); fails on an error."""
    done = run_helm(helm, "template", release, str(CHART), *extra, values=values, tmp=tmp)
    assert done.returncode == 0, done.stderr
    return load_documents(done.stdout)


def by_kind(objects: Sequence[Mapping[str, Any]], kind: str) -> list[Mapping[str, Any]]:
    return [obj for obj in objects if obj["kind"] == kind]


def one(objects: Sequence[Mapping[str, Any]], kind: str) -> Mapping[str, Any]:
    """The single object of ``kind``."""
    found = by_kind(objects, kind)
    assert len(found) == 1, f"{len(found)} objects of kind {kind}"
    return found[0]


#: values turning every optional feature on, each secret a distinct string the tests look for
SECRET_STRINGS = ("kafka-sasl-password-1", "kafka-key-password-2", "zk-user:zk-password-3",
                  "object-store-secret-key-4", "catalog-id:catalog-secret-5", "catalog-token-6")
ALL_FEATURES: dict[str, Any] = {
    "replicaCount": 5,
    "topics": "re:orders\\..*",
    "output": "s3://lake/orders",
    "tableFormat": "iceberg",
    "format": "json",
    "kafka": {
        "bootstrap": "kafka-0.kafka:9093,kafka-1.kafka:9093",
        "properties": {"security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512",
                       "ssl.ca.location": "/etc/kafka-tls/ca.crt"},
        "secretProperties": {"sasl.username": "lake", "sasl.password": SECRET_STRINGS[0],
                             "ssl.key.password": SECRET_STRINGS[1]},
        "tlsSecret": "kafka-client-tls",
    },
    "zookeeper": {"hosts": "zk-0.zk:2181,zk-1.zk:2181,zk-2.zk:2181", "auth": SECRET_STRINGS[2]},
    "objectStore": {"endpoint": "http://seaweedfs:8333", "region": "eu-west-1", "accessKeyId": "AKIDEXAMPLE",
                    "secretAccessKey": SECRET_STRINGS[3]},
    "catalog": {"uri": "https://catalog.example:8181", "namespace": "shop", "tableLocation": "catalog",
                "properties": {"warehouse": "lake"}, "credential": SECRET_STRINGS[4], "token": SECRET_STRINGS[5]},
    "schemaRegistry": {"url": "http://registry:8081"},
    "settings": {"checkpoint-interval-ms": 5000, "partition-by": "hour", "on-bad-record": "skip",
                 "include-key": True, "max-error-rate": 0.05},
    "logFormat": "json",
    "metrics": {"serviceMonitor": {"enabled": True, "labels": {"release": "prometheus"}},
                "prometheusRule": {"enabled": True, "labels": {"release": "prometheus"}}},
    "serviceAccount": {"annotations": {"eks.amazonaws.com/role-arn": "arn:aws:iam::1:role/lake"}},
    "podAnnotations": {"example.com/team": "data"},
    "nodeSelector": {"kubernetes.io/os": "linux"},
    "tolerations": [{"key": "dedicated", "operator": "Equal", "value": "lake", "effect": "NoSchedule"}],
    "topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": "topology.kubernetes.io/zone",
                                   "whenUnsatisfiable": "ScheduleAnyway",
                                   "labelSelector": {"matchLabels": {"app.kubernetes.io/name": "laminar-kafka"}}}],
    "priorityClassName": "lake-nodes",
    "imagePullSecrets": [{"name": "registry-credentials"}],
    "extraEnv": [{"name": "LAMINAR_LOG_LEVEL", "value": "debug"}],
}
