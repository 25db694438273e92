"""`helm template` of the chart, at its defaults and with every optional feature on: each object valid
for two Kubernetes releases (offline schemas, strict), and the properties that matter to a node."""
from __future__ import annotations

import json
import tomllib
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from laminar_kafka.cluster.config import settings_from
from laminar_kafka.cluster.node_identity import NodeIdScheme, plan_node_id
from laminar_kafka.cluster.runtime.state import RuntimeOptions
from laminar_kafka.devstack.containers.engine import KAFKA_IMAGE, NODE_IMAGE, SEAWEEDFS_IMAGE, ZOOKEEPER_IMAGE
from tests.unit.deploy.helm_tools import (
    ALERTS,
    ALL_FEATURES,
    CHART,
    DEV_VALUES,
    KUBERNETES_RELEASES,
    RELEASE,
    SECRET_STRINGS,
    by_kind,
    find_helm,
    one,
    render,
    secret_env,
)

#: kinds of CustomResourceDefinitions the offline schemas do not know (checked by shape below)
CUSTOM_KINDS = {"ServiceMonitor": "monitoring.coreos.com/v1", "PrometheusRule": "monitoring.coreos.com/v1"}


@pytest.fixture(scope="module")
def helm() -> str:
    return find_helm()


@pytest.fixture(scope="module")
def defaults(helm: str) -> list[dict[str, Any]]:
    return render(helm)


@pytest.fixture(scope="module")
def all_features(helm: str, tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    return render(helm, ALL_FEATURES, tmp_path_factory.mktemp("values"))


@pytest.fixture(scope="module")
def dev(helm: str) -> list[dict[str, Any]]:
    return render(helm, extra=["-f", str(DEV_VALUES)])


def _container(objects: Sequence[Mapping[str, Any]]) -> Mapping[str, Any]:
    (container,) = _nodes(objects)["spec"]["template"]["spec"]["containers"]
    return container


def _nodes(objects: Sequence[Mapping[str, Any]]) -> Mapping[str, Any]:
    """The nodes' StatefulSet (values-dev.yaml adds the dev servers' own)."""
    (nodes,) = [o for o in by_kind(objects, "StatefulSet")
                if o["metadata"]["labels"]["app.kubernetes.io/component"] == "node"]
    return nodes


def _option(args: Sequence[str], flag: str) -> str:
    assert args.count(flag) == 1, f"{flag} given {args.count(flag)} times in {args}"
    return args[args.index(flag) + 1]


def one_named(objects: Sequence[Mapping[str, Any]], kind: str, name: str) -> Mapping[str, Any]:
    """The single object of ``kind`` named ``name``."""
    (found,) = [o for o in by_kind(objects, kind) if o["metadata"]["name"] == name]
    return found


def test_defaults_render_the_expected_objects(defaults: list[dict[str, Any]]) -> None:
    assert sorted(obj["kind"] for obj in defaults) == [
        "ConfigMap", "PodDisruptionBudget", "Service", "ServiceAccount", "StatefulSet"]
    assert {obj["metadata"]["name"] for obj in defaults} == {RELEASE}


def test_all_features_render_secrets_and_the_monitoring_resources(all_features: list[dict[str, Any]]) -> None:
    kinds = sorted(obj["kind"] for obj in all_features)
    assert kinds == ["ConfigMap", "PodDisruptionBudget", "PrometheusRule", "Secret", "Secret", "Secret", "Secret",
                     "Service", "ServiceAccount", "ServiceMonitor", "StatefulSet"]


@pytest.mark.parametrize("release", KUBERNETES_RELEASES)
@pytest.mark.parametrize("features", ["defaults", "all_features", "dev"])
def test_every_object_is_valid_for_the_kubernetes_release(request: pytest.FixtureRequest, features: str,
                                                          release: str) -> None:
    objects: list[dict[str, Any]] = request.getfixturevalue(features)
    validated = 0
    for obj in objects:
        if obj["kind"] in CUSTOM_KINDS:
            assert obj["apiVersion"] == CUSTOM_KINDS[obj["kind"]]
            continue
        try:
            kubernetes_validate.validate(obj, release, strict=True)
        except kubernetes_validate.ValidationError as exc:
            pytest.fail(f"{obj['kind']} {obj['metadata']['name']} on Kubernetes {release}: {exc.message} "
                        f"at {'.'.join(str(p) for p in exc.caught.absolute_path)}", pytrace=False)
        validated += 1
    assert validated == len([o for o in objects if o["kind"] not in CUSTOM_KINDS]) > 0


def test_strict_validation_catches_a_misspelt_field() -> None:
    """The validator the test above relies on refuses an unknown field (strict) for both releases."""
    bad = {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "x"},
           "spec": {"clusterIP": "None", "port": [{"port": 9100}]}}
    for release in KUBERNETES_RELEASES:
        with pytest.raises(kubernetes_validate.ValidationError):
            kubernetes_validate.validate(bad, release, strict=True)


@pytest.mark.parametrize("features", ["defaults", "all_features"])
def test_the_node_runs_with_node_id_auto_and_the_config_file(request: pytest.FixtureRequest, features: str) -> None:
    container = _container(request.getfixturevalue(features))
    assert container["command"] == ["laminar-kafka"]
    args = container["args"]
    assert args[0] == "run"
    assert _option(args, "--node-id") == "auto"
    assert _option(args, "--config") == "/etc/laminar/laminar.toml"
    assert _option(args, "--state-dir") == "/var/lib/laminar"
    assert _option(args, "--metrics-port") == "9100"
    mounts = {m["mountPath"]: m for m in container["volumeMounts"]}
    assert mounts["/etc/laminar"]["name"] == "config" and mounts["/etc/laminar"]["readOnly"] is True


@pytest.mark.parametrize("features", ["defaults", "all_features"])
def test_the_statefulset_shape(request: pytest.FixtureRequest, features: str) -> None:
    objects = request.getfixturevalue(features)
    sts = one(objects, "StatefulSet")
    spec = sts["spec"]
    assert spec["podManagementPolicy"] == "Parallel"
    assert spec["replicas"] == (5 if features == "all_features" else 3)
    assert "volumeClaimTemplates" not in spec, "no PersistentVolume: the lake is the truth"
    assert spec["serviceName"] == one(objects, "Service")["metadata"]["name"]
    assert spec["selector"]["matchLabels"].items() <= spec["template"]["metadata"]["labels"].items()
    volumes = {v["name"]: v for v in spec["template"]["spec"]["volumes"]}
    assert not any("persistentVolumeClaim" in v for v in volumes.values())
    assert volumes["config"]["configMap"]["name"] == one(objects, "ConfigMap")["metadata"]["name"]


def test_pod_names_give_node_ids_one_to_n(defaults: list[dict[str, Any]]) -> None:
    """The pods' host names (<statefulset>-<ordinal>) take ids 1..replicas from `--node-id auto`."""
    sts = one(defaults, "StatefulSet")
    ids = []
    for ordinal in range(sts["spec"]["replicas"]):
        plan = plan_node_id(f"{sts['metadata']['name']}-{ordinal}", embedded=False)
        assert plan.scheme is NodeIdScheme.ORDINAL
        ids.append(plan.node_id)
    assert ids == [1, 2, 3]


@pytest.mark.parametrize("features", ["defaults", "all_features"])
def test_probes_point_at_healthz_and_readyz_on_the_metrics_port(request: pytest.FixtureRequest, features: str) -> None:
    objects = request.getfixturevalue(features)
    container = _container(objects)
    (port,) = container["ports"]
    assert port == {"name": "metrics", "containerPort": 9100, "protocol": "TCP"}
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "metrics"}
    assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "metrics"}
    assert container["startupProbe"]["httpGet"] == {"path": "/healthz", "port": "metrics"}
    startup = container["startupProbe"]
    assert startup["periodSeconds"] * startup["failureThreshold"] >= 120, "a start may take minutes"
    (service_port,) = one(objects, "Service")["spec"]["ports"]
    assert service_port["name"] == "metrics" and service_port["targetPort"] == "metrics"


@pytest.mark.parametrize("features", ["defaults", "all_features"])
def test_the_grace_period_covers_a_planned_leave(request: pytest.FixtureRequest, features: str) -> None:
    pod = one(request.getfixturevalue(features), "StatefulSet")["spec"]["template"]["spec"]
    grace = pod["terminationGracePeriodSeconds"]
    assert grace == 130
    # the node's own bound on a planned leave acts before the kubelet's SIGKILL
    assert grace > RuntimeOptions.leave_timeout_s
    assert grace > settings_from({"topic": "t", "output": "s3://b/p", "bootstrap": "k:9092"}, {}, {}).drain_timeout_ms / 1000


@pytest.mark.parametrize("features", ["defaults", "all_features"])
def test_the_disruption_budget(request: pytest.FixtureRequest, features: str) -> None:
    objects = request.getfixturevalue(features)
    pdb = one(objects, "PodDisruptionBudget")
    assert pdb["spec"] == {"maxUnavailable": 1,
                           "selector": one(objects, "StatefulSet")["spec"]["selector"]}


def test_no_secret_value_in_a_configmap_or_the_pod_spec(all_features: list[dict[str, Any]]) -> None:
    secrets = json.dumps(by_kind(all_features, "Secret"))
    for value in SECRET_STRINGS:
        assert value in secrets, f"{value} is in no Secret"
        for obj in all_features:
            if obj["kind"] != "Secret":
                assert value not in json.dumps(obj), f"{value} in {obj['kind']} {obj['metadata']['name']}"


def test_the_secrets_reach_the_node_as_environment(all_features: list[dict[str, Any]]) -> None:
    container = _container(all_features)
    referenced = sorted(ref["secretRef"]["name"] for ref in container["envFrom"])
    assert referenced == sorted(s["metadata"]["name"] for s in by_kind(all_features, "Secret"))
    env = secret_env(all_features)
    assert env == {
        "LAMINAR_KAFKA__SASL_USERNAME": "lake", "LAMINAR_KAFKA__SASL_PASSWORD": SECRET_STRINGS[0],
        "LAMINAR_KAFKA__SSL_KEY_PASSWORD": SECRET_STRINGS[1], "LAMINAR_ZK_AUTH": SECRET_STRINGS[2],
        "AWS_ACCESS_KEY_ID": "AKIDEXAMPLE", "AWS_SECRET_ACCESS_KEY": SECRET_STRINGS[3],
        "LAMINAR_ICEBERG__CREDENTIAL": SECRET_STRINGS[4], "LAMINAR_ICEBERG__TOKEN": SECRET_STRINGS[5],
    }
    plain = {e["name"]: e.get("value") for e in container["env"]}
    assert plain["AWS_ENDPOINT_URL"] == "http://seaweedfs:8333" and plain["AWS_REGION"] == "eu-west-1"
    tls = {v["name"]: v for v in one(all_features, "StatefulSet")["spec"]["template"]["spec"]["volumes"]}["kafka-tls"]
    assert tls["secret"]["secretName"] == "kafka-client-tls"


def test_existing_secrets_are_referenced_and_none_is_created(helm: str, tmp_path: Path) -> None:
    values = {"kafka": {"existingSecret": "my-kafka", "secretProperties": {"sasl.password": "ignored"}},
              "zookeeper": {"existingSecret": "my-zk"}, "objectStore": {"existingSecret": "my-s3"},
              "catalog": {"existingSecret": "my-catalog"}}
    objects = render(helm, values, tmp_path)
    assert by_kind(objects, "Secret") == []
    refs = [ref["secretRef"]["name"] for ref in _container(objects)["envFrom"]]
    assert refs == ["my-kafka", "my-zk", "my-s3", "my-catalog"]


@pytest.mark.parametrize("features", ["defaults", "all_features"])
def test_the_configmap_is_settings_the_node_accepts(request: pytest.FixtureRequest, features: str) -> None:
    """laminar.toml with the Secrets' variables is what `laminar-kafka run` loads (the node's own parser)."""
    objects = request.getfixturevalue(features)
    document = tomllib.loads(one(objects, "ConfigMap")["data"]["laminar.toml"])
    settings = settings_from(document, secret_env(objects), {"node-id": "auto"})
    assert settings.node_id_auto
    if features == "defaults":
        assert (settings.zk, settings.pipeline, settings.topics, settings.output, settings.table_format) == (
            "zookeeper:2181", "orders", ("orders",), "s3://lake/orders", "parquet")
        assert settings.kafka == {}
        return
    assert settings.topics == ("re:orders\\..*",)
    assert settings.bootstrap == "kafka-0.kafka:9093,kafka-1.kafka:9093"
    assert (settings.table_format, settings.catalog_uri, settings.namespace, settings.table_location) == (
        "iceberg", "https://catalog.example:8181", "shop", "catalog")
    assert (settings.checkpoint_interval_ms, settings.partition_by, settings.include_key) == (5000, "hour", True)
    assert settings.kafka == {"security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512",
                              "ssl.ca.location": "/etc/kafka-tls/ca.crt", "sasl.username": "lake",
                              "sasl.password": SECRET_STRINGS[0], "ssl.key.password": SECRET_STRINGS[1]}
    assert settings.iceberg == {"warehouse": "lake", "credential": SECRET_STRINGS[4], "token": SECRET_STRINGS[5]}
    assert settings.zk_auth == SECRET_STRINGS[2]


@pytest.mark.parametrize("features", ["defaults", "all_features"])
def test_non_root_with_a_read_only_root_filesystem(request: pytest.FixtureRequest, features: str) -> None:
    pod = one(request.getfixturevalue(features), "StatefulSet")["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True and pod["securityContext"]["runAsUser"] != 0
    container = pod["containers"][0]
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert container["securityContext"]["allowPrivilegeEscalation"] is False
    # what the node writes: its state-dir and temporary files, on emptyDir volumes
    volumes = {v["name"]: v for v in pod["volumes"]}
    mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
    for path in ("/var/lib/laminar", "/tmp"):
        assert volumes[mounts[path]] == {"name": mounts[path], "emptyDir": {}}


def test_default_scheduling_is_a_soft_anti_affinity_by_host(defaults: list[dict[str, Any]]) -> None:
    affinity = one(defaults, "StatefulSet")["spec"]["template"]["spec"]["affinity"]
    assert list(affinity) == ["podAntiAffinity"]
    (term,) = affinity["podAntiAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"]
    assert term["podAffinityTerm"]["topologyKey"] == "kubernetes.io/hostname"
    assert "requiredDuringSchedulingIgnoredDuringExecution" not in affinity["podAntiAffinity"]


def test_scrape_annotations_by_default_and_the_service_monitor_on_request(
        defaults: list[dict[str, Any]], all_features: list[dict[str, Any]]) -> None:
    annotations = one(defaults, "StatefulSet")["spec"]["template"]["metadata"]["annotations"]
    assert (annotations["prometheus.io/scrape"], annotations["prometheus.io/port"],
            annotations["prometheus.io/path"]) == ("true", "9100", "/metrics")
    assert by_kind(defaults, "ServiceMonitor") == []
    monitor = one(all_features, "ServiceMonitor")
    assert monitor["spec"]["endpoints"] == [{"port": "metrics", "path": "/metrics", "interval": "15s"}]
    assert monitor["spec"]["selector"]["matchLabels"].items() <= one(all_features, "Service")["metadata"]["labels"].items()
    assert monitor["metadata"]["labels"]["release"] == "prometheus"


def test_a_changed_config_rolls_the_pods(helm: str, tmp_path: Path, defaults: list[dict[str, Any]]) -> None:
    changed = render(helm, {"settings": {"checkpoint-interval-ms": 4000}}, tmp_path)
    assert _config_checksum(changed) != _config_checksum(defaults)


def _config_checksum(objects: Sequence[Mapping[str, Any]]) -> str:
    return str(one(objects, "StatefulSet")["spec"]["template"]["metadata"]["annotations"]["checksum/config"])


def test_the_prometheus_rule_carries_the_alert_rules(defaults: list[dict[str, Any]],
                                                     all_features: list[dict[str, Any]]) -> None:
    """Its groups are deploy/monitoring/alerts.yaml's, through the chart's copy (`make manifests` refreshes it)."""
    assert (CHART / "files" / "alerts.yaml").read_text() == ALERTS.read_text(), (
        "deploy/helm/laminar-kafka/files/alerts.yaml differs from deploy/monitoring/alerts.yaml: run `make manifests`")
    assert by_kind(defaults, "PrometheusRule") == []
    rule = one(all_features, "PrometheusRule")
    assert rule["spec"]["groups"] == yaml.safe_load(ALERTS.read_text())["groups"]
    assert rule["metadata"]["labels"]["release"] == "prometheus"


def test_values_dev_starts_the_servers_from_the_images_the_project_builds(dev: list[dict[str, Any]]) -> None:
    servers = {o["metadata"]["labels"]["app.kubernetes.io/component"]: o for o in by_kind(dev, "StatefulSet")}
    assert sorted(servers) == ["dev-kafka", "dev-s3", "dev-zookeeper", "node"]
    images = {name: sts["spec"]["template"]["spec"]["containers"][0]["image"] for name, sts in servers.items()}
    assert images == {"dev-kafka": KAFKA_IMAGE, "dev-s3": SEAWEEDFS_IMAGE, "dev-zookeeper": ZOOKEEPER_IMAGE,
                      "node": NODE_IMAGE}
    services = {s["metadata"]["name"]: s for s in by_kind(dev, "Service")}
    for name, sts in servers.items():
        if name == "node":
            continue
        assert sts["spec"]["replicas"] == 1
        pod = sts["spec"]["template"]
        assert pod["metadata"]["labels"].items() >= services[sts["metadata"]["name"]]["spec"]["selector"].items()
        assert pod["spec"]["volumes"] == [{"name": "data", "emptyDir": {}}]
    # the node Service and PDB select the nodes only
    nodes = _nodes(dev)
    for selector in (one_named(dev, "Service", RELEASE)["spec"]["selector"],
                     one(dev, "PodDisruptionBudget")["spec"]["selector"]["matchLabels"]):
        assert selector.items() <= nodes["spec"]["template"]["metadata"]["labels"].items()
        assert all(not selector.items() <= s["spec"]["template"]["metadata"]["labels"].items()
                   for name, s in servers.items() if name != "node")


def test_values_dev_points_the_nodes_at_the_dev_servers(dev: list[dict[str, Any]]) -> None:
    kafka = f"{RELEASE}-dev-kafka:9092"
    zookeeper = f"{RELEASE}-dev-zookeeper:2181"
    document = tomllib.loads(one(dev, "ConfigMap")["data"]["laminar.toml"])
    settings = settings_from(document, secret_env(dev), {"node-id": "auto"})
    assert (settings.bootstrap, settings.zk, settings.output) == (kafka, zookeeper, "s3://lake/orders")
    pod = _nodes(dev)["spec"]["template"]["spec"]
    env = {e["name"]: e["value"] for e in pod["containers"][0]["env"]}
    assert env["AWS_ENDPOINT_URL"] == f"http://{RELEASE}-dev-s3:8333"
    (init,) = pod["initContainers"]
    assert init["command"] == ["python", "-m", "laminar_kafka.devstack.containers.topic_init", "--bootstrap", kafka,
                               "--zk", zookeeper, "--topic", "orders", "--partitions", "8", "--bucket", "lake"]
    # the dev S3 store's identity is the nodes' keys, from the object-store Secret the chart creates
    (secret,) = by_kind(dev, "Secret")
    s3 = one_named(dev, "StatefulSet", f"{RELEASE}-dev-s3")["spec"]["template"]["spec"]["containers"][0]
    refs = {e["name"]: e["valueFrom"]["secretKeyRef"] for e in s3["env"]}
    assert refs == {"SEAWEEDFS_ACCESS_KEY": {"name": secret["metadata"]["name"], "key": "AWS_ACCESS_KEY_ID"},
                    "SEAWEEDFS_SECRET_KEY": {"name": secret["metadata"]["name"], "key": "AWS_SECRET_ACCESS_KEY"}}
    broker = one_named(dev, "StatefulSet", f"{RELEASE}-dev-kafka")["spec"]["template"]["spec"]["containers"][0]
    advertised = {e["name"]: e.get("value") for e in broker["env"]}["KAFKA_ADVERTISED_LISTENERS"]
    assert advertised.startswith(f"PLAINTEXT://{kafka},")
