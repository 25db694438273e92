"""The chart's properties and Secrets: numbers rendered as numbers, property names the node treats as
secret refused outside a Secret (the schema's patterns are the node's own markers), the secret routes
for catalog FileIO keys and the schema registry, and a changed Secret rolling the pods."""
from __future__ import annotations

import json
import re
import tomllib
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

from laminar_kafka.cluster.config import settings_from
from laminar_kafka.cluster.lake.iceberg import tables
from laminar_kafka.kafka_source import clients
from tests.unit.deploy.helm_tools import CHART, RELEASE, by_kind, find_helm, one, render, run_helm, secret_env

SCHEMA = json.loads((CHART / "values.schema.json").read_text())


@pytest.fixture(scope="module")
def helm() -> str:
    return find_helm()


def _toml(objects: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    return tomllib.loads(one(objects, "ConfigMap")["data"]["laminar.toml"])


def _annotations(objects: Sequence[Mapping[str, Any]]) -> Mapping[str, str]:
    (nodes,) = [o for o in by_kind(objects, "StatefulSet") if o["metadata"]["labels"]["app.kubernetes.io/component"] == "node"]
    return nodes["spec"]["template"]["metadata"]["annotations"]


# -- numbers -----------------------------------------------------------------------------------------


def test_numeric_and_boolean_properties_render_as_written(helm: str, tmp_path: Path) -> None:
    """Helm reads YAML numbers as float64: 52428800 must not become "5.24288e+07" (librdkafka refuses
    it, or takes the leading digits)."""
    numbers = {"fetch.max.bytes": 52428800, "message.max.bytes": 1000000, "socket.keepalive.enable": True,
               "x.ratio": 0.5}
    values = {"tableFormat": "iceberg", "catalog": {"uri": "http://catalog:8181", "properties": {"x.size": 134217728}},
              "kafka": {"properties": numbers, "secretProperties": {"fetch.min.bytes": 1000000, "sasl.password": "pw"}}}
    objects = render(helm, values, tmp_path)
    document = _toml(objects)
    assert document["kafka"] == {"fetch.max.bytes": "52428800", "message.max.bytes": "1000000",
                                 "socket.keepalive.enable": "true", "x.ratio": "0.5"}
    assert document["iceberg"] == {"x.size": "134217728"}
    env = secret_env(objects)
    assert env["LAMINAR_KAFKA__FETCH_MIN_BYTES"] == "1000000" and env["LAMINAR_KAFKA__SASL_PASSWORD"] == "pw"
    settings = settings_from(document, env, {"node-id": "auto"})
    assert settings.kafka["fetch.max.bytes"] == "52428800" and settings.kafka["fetch.min.bytes"] == "1000000"
    text = json.dumps(objects)
    assert "e+0" not in text, "a number in exponent form"


# -- names the node treats as secret -----------------------------------------------------------------


def _refused_pattern(path: Sequence[str]) -> str:
    node: Any = SCHEMA
    for key in path:
        node = node["properties"][key]
    return str(node["propertyNames"]["not"]["pattern"])


@pytest.mark.parametrize(("path", "markers"), [
    (("kafka", "properties"), clients._SECRET_MARKERS),
    (("catalog", "properties"), tables._SECRET_MARKERS),
], ids=["kafka", "catalog"])
def test_the_schema_refuses_exactly_the_names_the_node_treats_as_secret(path: Sequence[str],
                                                                        markers: Sequence[str]) -> None:
    """One source of truth: the schema's pattern is the node's marker list (change one, change both)."""
    assert _refused_pattern(path) == "(?i)(" + "|".join(re.escape(m) for m in markers) + ")"


@pytest.mark.parametrize("values", [
    {"kafka": {"properties": {"sasl.oauthbearer.config": "principal=lake"}}},
    {"kafka": {"properties": {"sasl.jaas.config": "x"}}},
    {"kafka": {"properties": {"SASL.PASSWORD": "x"}}},
    {"tableFormat": "iceberg", "catalog": {"uri": "http://c:8181", "properties": {"s3.secret-access-key": "x"}}},
    {"tableFormat": "iceberg", "catalog": {"uri": "http://c:8181", "properties": {"s3.session-token": "x"}}},
    {"tableFormat": "iceberg", "catalog": {"uri": "http://c:8181", "properties": {"s3.access-key-id": "x"}}},
], ids=lambda v: json.dumps(v)[-48:])
def test_a_secret_property_outside_a_secret_is_refused(helm: str, tmp_path: Path, values: dict[str, Any]) -> None:
    done = run_helm(helm, "template", RELEASE, str(CHART), values=values, tmp=tmp_path)
    assert done.returncode != 0, f"{values} rendered"
    assert "invalid propertyName" in done.stderr, done.stderr


def test_plain_properties_still_render(helm: str, tmp_path: Path) -> None:
    values = {"tableFormat": "iceberg",
              "catalog": {"uri": "http://c:8181", "properties": {"warehouse": "lake", "s3.region": "eu-west-1",
                                                                 "header.X-Iceberg-Access-Delegation": "vended"}},
              "kafka": {"properties": {"security.protocol": "SASL_SSL", "ssl.ca.location": "/etc/kafka-tls/ca.crt"}}}
    document = _toml(render(helm, values, tmp_path))
    assert document["iceberg"]["header.X-Iceberg-Access-Delegation"] == "vended"
    assert document["kafka"]["security.protocol"] == "SASL_SSL"


# -- the secret routes -------------------------------------------------------------------------------


SECRET_ROUTES: dict[str, Any] = {
    "tableFormat": "iceberg",
    "format": "avro",
    "catalog": {"uri": "http://catalog:8181", "properties": {"s3.region": "eu-west-1"},
                "secretProperties": {"s3.access-key-id": "AKID-7", "s3.secret-access-key": "fileio-secret-8",
                                     "s3.session-token": "fileio-token-9"}},
    "schemaRegistry": {"url": "http://registry:8081", "basicAuthUserInfo": "registry-user:registry-pw-10"},
}


def test_catalog_fileio_keys_and_the_registry_credentials_reach_the_node_from_secrets(helm: str, tmp_path: Path) -> None:
    objects = render(helm, SECRET_ROUTES, tmp_path)
    secrets = {s["metadata"]["name"]: s["stringData"] for s in by_kind(objects, "Secret")}
    assert secrets == {
        f"{RELEASE}-catalog": {"LAMINAR_ICEBERG__s3.access-key-id": "AKID-7",
                               "LAMINAR_ICEBERG__s3.secret-access-key": "fileio-secret-8",
                               "LAMINAR_ICEBERG__s3.session-token": "fileio-token-9"},
        f"{RELEASE}-schema-registry": {"LAMINAR_SCHEMA_REGISTRY__BASIC_AUTH_USER_INFO": "registry-user:registry-pw-10"},
    }
    for obj in objects:
        if obj["kind"] != "Secret":
            for value in ("fileio-secret-8", "fileio-token-9", "registry-pw-10"):
                assert value not in json.dumps(obj), f"{value} in {obj['kind']}"
    (nodes,) = by_kind(objects, "StatefulSet")
    refs = [r["secretRef"]["name"] for r in nodes["spec"]["template"]["spec"]["containers"][0]["envFrom"]]
    assert refs == [f"{RELEASE}-catalog", f"{RELEASE}-schema-registry"]
    settings = settings_from(_toml(objects), secret_env(objects), {"node-id": "auto"})
    assert settings.iceberg == {"s3.region": "eu-west-1", "s3.access-key-id": "AKID-7",
                                "s3.secret-access-key": "fileio-secret-8", "s3.session-token": "fileio-token-9"}
    assert settings.schema_registry["basic.auth.user.info"] == "registry-user:registry-pw-10"


def test_a_registry_secret_of_your_own_is_referenced(helm: str, tmp_path: Path) -> None:
    values = {**SECRET_ROUTES, "schemaRegistry": {"url": "http://registry:8081", "existingSecret": "my-registry"}}
    objects = render(helm, values, tmp_path)
    assert [s["metadata"]["name"] for s in by_kind(objects, "Secret")] == [f"{RELEASE}-catalog"]
    (nodes,) = by_kind(objects, "StatefulSet")
    refs = [r["secretRef"]["name"] for r in nodes["spec"]["template"]["spec"]["containers"][0]["envFrom"]]
    assert refs == [f"{RELEASE}-catalog", "my-registry"]


@pytest.mark.parametrize("key", ["client_secret", "S3.KEY ID", ""])
def test_a_catalog_secret_key_the_environment_would_rename_is_refused(helm: str, tmp_path: Path, key: str) -> None:
    """A key without a dot or a dash would be read with '_' as a dot (docs/settings.md): refused."""
    values = {"tableFormat": "iceberg", "catalog": {"uri": "http://c:8181", "secretProperties": {key: "x"}}}
    done = run_helm(helm, "template", RELEASE, str(CHART), values=values, tmp=tmp_path)
    assert done.returncode != 0 and "invalid propertyName" in done.stderr, done.stderr


# -- a changed Secret rolls the pods -----------------------------------------------------------------


def test_a_changed_secret_rolls_the_pods_without_its_value_in_clear(helm: str, tmp_path: Path) -> None:
    base = {"kafka": {"secretProperties": {"sasl.password": "old-password-11"}}}
    before = _annotations(render(helm, base, tmp_path))
    after = _annotations(render(helm, {"kafka": {"secretProperties": {"sasl.password": "new-password-12"}}}, tmp_path))
    assert before["checksum/secrets"] != after["checksum/secrets"]
    assert before["checksum/config"] == after["checksum/config"]
    assert re.fullmatch(r"[0-9a-f]{64}", before["checksum/secrets"])
    assert "old-password-11" not in json.dumps(before)
    again = _annotations(render(helm, base, tmp_path))
    assert again["checksum/secrets"] == before["checksum/secrets"]  # stable: no roll without a change
