"""laminar_kafka.testing's pure parts: the backend choice, the partition's port groups, the handles'
settings and their fault controls (on a recording fake group, no server)."""
from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from laminar_kafka.testing.handles import Broker, KafkaTestCluster, ObjectStore, ZooKeeperServer
from laminar_kafka.testing.options import Backend, PluginOptions, choose_backend
from laminar_kafka.testing.partition import partition_endpoints


@pytest.mark.parametrize(("option", "environ", "expected"), [
    (None, {}, Backend.PROCESS),
    ("containers", {}, Backend.CONTAINERS),
    ("process", {"LAMINAR_TEST_BACKEND": "docker"}, Backend.PROCESS),  # the option wins
    (None, {"LAMINAR_TEST_BACKEND": "docker"}, Backend.CONTAINERS),  # the project's own spelling
    (None, {"LAMINAR_TEST_BACKEND": "local"}, Backend.PROCESS),
    (None, {"LAMINAR_TEST_BACKEND": " Containers "}, Backend.CONTAINERS),
    (None, {"LAMINAR_TEST_BACKEND": ""}, Backend.PROCESS),
    ("", {"LAMINAR_TEST_BACKEND": "docker"}, Backend.CONTAINERS),
])
def test_the_backend_is_the_option_then_the_environment_then_processes(
    option: str | None, environ: dict[str, str], expected: Backend
) -> None:
    assert choose_backend(option, environ) is expected


def test_an_unknown_backend_names_where_it_came_from_and_the_choices() -> None:
    with pytest.raises(ValueError, match=r"^LAMINAR_TEST_BACKEND='kubernetes': expected process or containers$"):
        choose_backend(None, {"LAMINAR_TEST_BACKEND": "kubernetes"})
    with pytest.raises(ValueError, match=r"^--laminar-backend='vm'"):
        choose_backend("vm", {})


def test_the_header_line_names_the_backend_and_a_chosen_release() -> None:
    assert PluginOptions(Backend.PROCESS).describe() == (
        "laminar_kafka.testing: process backend (servers start when a fixture asks)")
    assert "containers backend, Kafka 3.9.1" in PluginOptions(Backend.CONTAINERS, "3.9.1").describe()


def test_a_partition_from_every_broker_relays_them_all_as_kafka() -> None:
    assert partition_endpoints((9001, 9002, 9003), None) == ((9001, 9002, 9003), ())


def test_a_partition_from_one_broker_puts_that_broker_alone_in_the_other_group() -> None:
    assert partition_endpoints((9001, 9002, 9003), 1) == ((9001, 9003), (9002,))
    with pytest.raises(IndexError):
        partition_endpoints((9001,), 1)


@dataclass
class RecordingGroup:
    """A server group that records the controls it received."""

    calls: list[tuple[str, int]] = field(default_factory=list)

    def kill(self, index: int = 0) -> None:
        self.calls.append(("kill", index))

    def start_member(self, index: int = 0, timeout: float = 90.0) -> None:
        self.calls.append(("start", index))

    def restart(self, index: int = 0, timeout: float = 90.0) -> None:
        self.calls.append(("restart", index))

    def pause(self, index: int = 0) -> None:
        self.calls.append(("pause", index))

    def resume(self, index: int = 0) -> None:
        self.calls.append(("resume", index))


def test_a_broker_handle_controls_its_own_member_of_the_group() -> None:
    group = RecordingGroup()
    broker = Broker(group, 2, 9003)
    broker.kill()
    broker.start()
    broker.pause()
    broker.resume()
    broker.restart()
    ZooKeeperServer(group, 0, 2181).kill()
    assert group.calls == [("kill", 2), ("start", 2), ("pause", 2), ("resume", 2), ("restart", 2), ("kill", 0)]
    assert broker.address == "127.0.0.1:9003"


def test_a_cluster_config_layers_bootstrap_settings_and_overrides() -> None:
    group = RecordingGroup()
    cluster = KafkaTestCluster("127.0.0.1:9001", (Broker(group, 0, 9001),), "process",
                               {"security.protocol": "SASL_SSL", "acks": "1"})
    assert cluster.config(group_id="g", acks="all") == {
        "bootstrap.servers": "127.0.0.1:9001", "security.protocol": "SASL_SSL", "group.id": "g", "acks": "all"}
    assert cluster.replication == 1
    three = KafkaTestCluster("a", tuple(Broker(group, i, 9001 + i) for i in range(3)), "process")
    assert three.replication == 3


def test_an_object_store_exports_its_endpoint_and_names_s3_uris() -> None:
    store = ObjectStore("http://127.0.0.1:8333", "us-east-1", "key", "secret", "laminar-test",
                        "http://127.0.0.1:8181", "laminar-tables")
    assert store.env() == {"AWS_ENDPOINT_URL": "http://127.0.0.1:8333", "AWS_REGION": "us-east-1",
                           "AWS_DEFAULT_REGION": "us-east-1", "AWS_ACCESS_KEY_ID": "key",
                           "AWS_SECRET_ACCESS_KEY": "secret"}
    assert store.uri() == "s3://laminar-test"
    assert store.uri("runs/1/") == "s3://laminar-test/runs/1"
    assert store.uri("x", bucket="other") == "s3://other/x"
    assert "secret" not in repr(store)
