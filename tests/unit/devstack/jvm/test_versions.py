"""Unit tests of the server-version choice (devstack/jvm/versions.py) and what follows from it: the
artifact cache directory, the Maven overrides, the brokers' configuration per release and mode, and
where ZooKeeper-mode brokers register. No server starts and Maven never runs."""
from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from laminar_kafka.devstack import stack
from laminar_kafka.devstack.errors import DevStackError
from laminar_kafka.devstack.jvm import artifacts, kafka_cluster
from laminar_kafka.devstack.jvm.locks import JarBuild
from laminar_kafka.devstack.jvm.versions import (
    KAFKA_MODE_ENV,
    KAFKA_VERSION_ENV,
    ZOOKEEPER_VERSION_ENV,
    KafkaMode,
    ServerVersions,
    UnsupportedVersionError,
    parse_release,
    selected_versions,
)

KAFKA_39_ZK = ServerVersions(kafka="3.9.1", zookeeper="3.8.4", kafka_mode=KafkaMode.ZOOKEEPER)
KAFKA_39_KRAFT = ServerVersions(kafka="3.9.1", zookeeper="3.9.4")
KAFKA_41 = ServerVersions(kafka="4.1.1", zookeeper="3.9.4")


def test_no_variable_means_the_pom_pins_in_kraft_mode() -> None:
    kafka, zookeeper = artifacts.pinned_versions()
    assert selected_versions({}) == ServerVersions(kafka=kafka, zookeeper=zookeeper, kafka_mode=KafkaMode.KRAFT)
    assert selected_versions({KAFKA_VERSION_ENV: "", ZOOKEEPER_VERSION_ENV: " ", KAFKA_MODE_ENV: ""}) == \
        selected_versions({})


def test_variables_choose_kafka_3_9_zookeeper_mode_and_zookeeper_3_8() -> None:
    chosen = selected_versions({KAFKA_VERSION_ENV: "3.9.1", KAFKA_MODE_ENV: "ZooKeeper", ZOOKEEPER_VERSION_ENV: "3.8.4"})
    assert chosen == KAFKA_39_ZK
    assert chosen.zookeeper_mode and not chosen.share_groups
    assert chosen.describe() == "Kafka 3.9.1 (ZooKeeper-mode brokers), ZooKeeper 3.8.4"
    assert KAFKA_41.share_groups and KAFKA_41.describe() == "Kafka 4.1.1 (KRaft), ZooKeeper 3.9.4"


@pytest.mark.parametrize(("environ", "names"), [
    ({KAFKA_VERSION_ENV: "3.8.1"}, "LAMINAR_KAFKA_VERSION=3.8.1 is not supported"),
    ({KAFKA_VERSION_ENV: "5.0.0"}, "LAMINAR_KAFKA_VERSION=5.0.0 is not supported"),
    ({KAFKA_VERSION_ENV: "3.9"}, "LAMINAR_KAFKA_VERSION='3.9' is not a release number"),
    ({ZOOKEEPER_VERSION_ENV: "3.7.2"}, "LAMINAR_ZOOKEEPER_VERSION=3.7.2 is not supported"),
    ({KAFKA_MODE_ENV: "zk"}, "LAMINAR_KAFKA_MODE='zk': expected 'kraft' or 'zookeeper'"),
    ({KAFKA_MODE_ENV: "zookeeper", KAFKA_VERSION_ENV: "4.1.1"}, "LAMINAR_KAFKA_MODE=zookeeper needs Kafka 3.x"),
])
def test_an_unsupported_choice_is_refused_in_one_line_naming_its_variable(environ: dict[str, str], names: str) -> None:
    with pytest.raises(UnsupportedVersionError) as raised:
        selected_versions(environ)
    assert str(raised.value).startswith(names)
    assert "\n" not in str(raised.value)
    assert isinstance(raised.value, DevStackError)  # the CLI reports it as one line


def test_parse_release() -> None:
    assert parse_release("3.9.10", "X") == (3, 9, 10)
    assert ServerVersions(kafka="3.9.10", zookeeper="3.9.4").kafka_release > KAFKA_39_KRAFT.kafka_release


def test_each_pair_of_versions_has_its_own_cache_directory_and_maven_gets_both_overrides(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    seen: dict[str, object] = {}

    def fake_build(cache: Path, build: JarBuild, marker: str, what: str, check: Callable[[Path], None]) -> Path:
        seen.update(target=cache / build.name, marker=marker, args=build.maven_args(tmp_path / "staging"))
        return cache / build.name

    monkeypatch.setattr(artifacts, "cached_jar_build", fake_build)
    assert artifacts.ensure_artifacts(tmp_path, KAFKA_39_ZK) == tmp_path / "jvm-kafka-3.9.1-zookeeper-3.8.4"
    assert "-Dkafka.version=3.9.1" in seen["args"] and "-Dzookeeper.version=3.8.4" in seen["args"]  # type: ignore[operator]
    assert seen["marker"] == "kafka=3.9.1\nzookeeper=3.8.4\n"
    monkeypatch.setenv(KAFKA_VERSION_ENV, "3.9.1")
    assert artifacts.ensure_artifacts(tmp_path) == tmp_path / f"jvm-kafka-3.9.1-zookeeper-{artifacts.pinned_versions()[1]}"


def _properties(path: Path) -> dict[str, str]:
    return dict(line.split("=", 1) for line in path.read_text().splitlines())


def test_zookeeper_mode_brokers_register_under_zookeeper_connect_and_skip_the_format(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(kafka_cluster, "_format_kraft_storage", lambda *args: pytest.fail("a ZooKeeper-mode broker is not formatted"))
    cluster = kafka_cluster.new_kafka_cluster(tmp_path, tmp_path, 3, versions=KAFKA_39_ZK,
                                        zookeeper_connect="127.0.0.1:2181/kafka-x")
    assert cluster.cluster_id == "" and cluster.zookeeper_connect == "127.0.0.1:2181/kafka-x"
    for index, broker in enumerate(cluster.brokers):
        values = _properties(broker.workdir / "server.properties")
        assert values["broker.id"] == str(index + 1)
        assert values["zookeeper.connect"] == "127.0.0.1:2181/kafka-x"
        assert "process.roles" not in values and "controller.listener.names" not in values
        assert values["listeners"] == f"PLAINTEXT://127.0.0.1:{broker.port}"
        assert "share.coordinator.state.topic.replication.factor" not in values  # Kafka 4.0 on
        assert values["min.insync.replicas"] == "2"
        assert broker.main_class == "kafka.Kafka"


@pytest.mark.parametrize(("versions", "share_groups"), [(KAFKA_39_KRAFT, False), (KAFKA_41, True)])
def test_kraft_nodes_are_formatted_and_write_the_share_group_settings_from_kafka_4(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, versions: ServerVersions, share_groups: bool,
) -> None:
    formatted: list[str] = []
    monkeypatch.setattr(kafka_cluster, "_format_kraft_storage", lambda classpath, cluster_id, *rest: formatted.append(cluster_id))
    cluster = kafka_cluster.new_kafka_cluster(tmp_path, tmp_path, 1, versions=versions)
    values = _properties(cluster.brokers[0].workdir / "server.properties")
    assert values["process.roles"] == "broker,controller" and "zookeeper.connect" not in values
    assert values["listener.security.protocol.map"] == "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT"
    assert ("share.coordinator.state.topic.replication.factor" in values) is share_groups
    assert formatted == [cluster.cluster_id]


def test_new_kafka_cluster_refuses_a_mode_without_what_it_needs(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="need zookeeper_connect"):
        kafka_cluster.new_kafka_cluster(tmp_path, tmp_path, 1, versions=KAFKA_39_ZK)
    with pytest.raises(ValueError, match="only for ZooKeeper-mode brokers"):
        kafka_cluster.new_kafka_cluster(tmp_path, tmp_path, 1, versions=KAFKA_41, zookeeper_connect="127.0.0.1:1/k")


def _zookeeper_mode_stack(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv(KAFKA_VERSION_ENV, "3.9.1")
    monkeypatch.setenv(KAFKA_MODE_ENV, "zookeeper")
    monkeypatch.setattr(stack, "ensure_artifacts", lambda cache_dir, versions: tmp_path / "lib")


def test_a_stack_of_zookeeper_mode_brokers_uses_its_own_zookeeper_or_the_one_given(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    _zookeeper_mode_stack(monkeypatch, tmp_path)
    own = stack.DevStack.create(kafka_brokers=1, zookeeper_servers=1, base_dir=tmp_path / "own")
    assert own.kafka is not None and own.kafka.zookeeper_connect == f"{own.zk_hosts}/kafka"
    given = stack.DevStack.create(kafka_brokers=1, zookeeper_servers=0, base_dir=tmp_path / "given",
                                  kafka_zookeeper="127.0.0.1:2181/kafka-t")
    assert given.kafka is not None and given.kafka.zookeeper_connect == "127.0.0.1:2181/kafka-t"
    assert given.zookeeper is None


def test_a_stack_of_zookeeper_mode_brokers_without_a_zookeeper_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    _zookeeper_mode_stack(monkeypatch, tmp_path)
    with pytest.raises(DevStackError, match="the brokers need a ZooKeeper"):
        stack.DevStack.create(kafka_brokers=1, zookeeper_servers=0, base_dir=tmp_path)
    with pytest.raises(DevStackError, match="secured listeners need KRaft"):
        stack.DevStack.create(kafka_brokers=1, zookeeper_servers=1, base_dir=tmp_path, secure=True)
