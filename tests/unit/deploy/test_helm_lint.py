"""`helm lint` of the chart, and values.schema.json refusing wrong values with a message naming them."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.unit.deploy.helm_tools import ALL_FEATURES, CHART, DEV_VALUES, RELEASE, find_helm, run_helm


@pytest.fixture(scope="module")
def helm() -> str:
    return find_helm()


@pytest.mark.parametrize("strict", [False, True], ids=["lint", "lint-strict"])
@pytest.mark.parametrize("features", ["defaults", "all-features", "values-dev"])
def test_chart_lints(helm: str, tmp_path: Path, strict: bool, features: str) -> None:
    values = ALL_FEATURES if features == "all-features" else None
    extra = ["-f", str(DEV_VALUES)] if features == "values-dev" else []
    done = run_helm(helm, "lint", str(CHART), *(["--strict"] if strict else []), *extra, values=values, tmp=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "0 chart(s) failed" in done.stdout


# (values, the path or name the error names, a fragment of the message). A refused property name is
# reported at an arbitrary path by helm's validator, so those cases look for the name instead.
WRONG_VALUES: list[tuple[dict[str, Any], str, str]] = [
    ({"replicaCount": 0}, "/replicaCount", "minimum"),
    ({"replicaCount": "3"}, "/replicaCount", "want integer"),
    ({"output": "/data/lake"}, "/output", "does not match pattern"),
    ({"topics": []}, "/topics", "minItems: got 0, want 1"),
    ({"topics": "orders"}, "/topics", "'orders' does not match pattern '^re:.+'"),
    ({"tableFormat": "delta"}, "/tableFormat", "must be one of 'parquet', 'iceberg'"),
    ({"kafka": {"bootstrap": ""}}, "/kafka/bootstrap", "does not match pattern"),
    ({"zookeeper": {"hosts": "zookeeper"}}, "/zookeeper/hosts", "does not match pattern"),
    ({"kafka": {"properties": {"sasl.password": "in-the-configmap"}}}, "sasl.password", "invalid propertyName"),
    ({"catalog": {"properties": {"token": "in-the-configmap"}}}, "token", "invalid propertyName"),
    ({"settings": {"zk-auth": "user:in-the-configmap"}}, "'zk-auth'", "invalid propertyName"),
    ({"settings": {"node-id": 4}}, "'node-id'", "invalid propertyName"),
    ({"terminationGracePeriodSeconds": 10}, "/terminationGracePeriodSeconds", "minimum"),
    ({"logFormat": "xml"}, "/logFormat", "must be one of 'text', 'json'"),
    ({"metricsPort": 80}, "/metricsPort", "minimum"),
    ({"dev": {"enabled": True}}, "/objectStore/accessKeyId", "minLength: got 0, want 1"),
]


@pytest.mark.parametrize(("values", "path", "fragment"), WRONG_VALUES, ids=[w[1] + ":" + repr(w[0])[:40] for w in WRONG_VALUES])
def test_schema_refuses_wrong_values(helm: str, tmp_path: Path, values: dict[str, Any], path: str,
                                     fragment: str) -> None:
    done = run_helm(helm, "template", RELEASE, str(CHART), values=values, tmp=tmp_path)
    assert done.returncode != 0, f"{values} rendered"
    assert "don't meet the specifications of the schema" in done.stderr, done.stderr
    assert path in done.stderr and fragment in done.stderr, done.stderr


def test_lint_refuses_wrong_values_too(helm: str, tmp_path: Path) -> None:
    done = run_helm(helm, "lint", str(CHART), "--strict", values={"output": "./lake"}, tmp=tmp_path)
    assert done.returncode != 0
    assert "/output" in done.stdout + done.stderr
