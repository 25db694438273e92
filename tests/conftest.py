"""Session fixtures: real Kafka and ZooKeeper for tests/integration and tests/faults.

Backend choice, in order:
1. `KAFKA_BOOTSTRAP` / `ZK_HOSTS` set: use that existing cluster (servers cannot be restarted, so
   tests that need to control a server are skipped with that reason).
2. `LAMINAR_TEST_BACKEND=docker`: testcontainers (Kafka in KRaft mode, a ZooKeeper container);
   skipped with a clear reason where no Docker engine answers.
3. Otherwise (default): local JVM processes from `cluster.devstack`, started once per session.

Unit tests (tests/unit) never touch these fixtures and never start a server.
"""
from __future__ import annotations

import contextlib
import itertools
from abc import ABC, abstractmethod
import os
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest

from cluster import devstack

_RUN_TOKEN = uuid.uuid4().hex[:8]
_counter = itertools.count(1)


class _Controllable(ABC):
    """Common part of the handles: the servers may be controllable (local processes) or not."""

    _control_kind = "server"

    @abstractmethod
    def _controlled(self) -> object | None:
        """The controllable servers, or None."""

    @property
    def can_control(self) -> bool:
        return self._controlled() is not None

    def _require_control(self) -> Any:
        controlled = self._controlled()
        if controlled is None:
            pytest.skip(f"this {self._control_kind} backend (external or container) cannot be restarted by the test")
        return controlled


@dataclass
class KafkaHandle(_Controllable):
    """What a test gets from the `kafka` fixture.

    `cluster` is the controllable local cluster, or None for an external / container backend.
    """

    bootstrap: str
    cluster: devstack.KafkaCluster | None = None
    _control_kind = "Kafka"

    def _controlled(self) -> devstack.KafkaCluster | None:
        return self.cluster

    def restart_broker(self, index: int = 0) -> None:
        self._require_control().restart_broker(index)

    def kill_broker(self, index: int = 0) -> None:
        self._require_control().kill_broker(index)

    def start_broker(self, index: int = 0) -> None:
        self._require_control().start_broker(index)

    def pause_broker(self, index: int = 0) -> None:
        self._require_control().pause_broker(index)

    def resume_broker(self, index: int = 0) -> None:
        self._require_control().resume_broker(index)


@dataclass
class ZooKeeperHandle(_Controllable):
    """What a test gets from the `zookeeper` fixture (`ensemble` None when not controllable)."""

    hosts: str
    ensemble: devstack.ZooKeeperEnsemble | None = None
    _control_kind = "ZooKeeper"

    def _controlled(self) -> devstack.ZooKeeperEnsemble | None:
        return self.ensemble

    def kill_server(self, index: int = 0) -> None:
        self._require_control().kill_server(index)

    def start_server(self, index: int = 0) -> None:
        self._require_control().start_server(index)

    def restart_server(self, index: int = 0) -> None:
        self._require_control().restart_server(index)

    def pause_server(self, index: int = 0) -> None:
        self._require_control().pause_server(index)

    def resume_server(self, index: int = 0) -> None:
        self._require_control().resume_server(index)


def _backend() -> str:
    return os.environ.get("LAMINAR_TEST_BACKEND", "local").lower()


def _docker_or_skip() -> None:
    try:
        import docker  # type: ignore[import-not-found]

        docker.from_env().ping()
    except Exception as exc:  # noqa: BLE001 - any failure means "no engine here"
        pytest.skip(f"LAMINAR_TEST_BACKEND=docker but no Docker engine answers: {exc}")


@contextlib.contextmanager
def _local_stack(
    tmp_path_factory: pytest.TempPathFactory, name: str, **servers: int
) -> Iterator[devstack.DevStack]:
    """A started local stack in a pytest temporary directory, stopped on exit."""
    stack = devstack.DevStack.launch(base_dir=Path(tmp_path_factory.mktemp(name)), **servers)
    try:
        yield stack
    finally:
        stack.stop()


@contextlib.contextmanager
def _dedicated_stack(
    tmp_path_factory: pytest.TempPathFactory, name: str, external_env: str, reason: str, **servers: int
) -> Iterator[devstack.DevStack]:
    """A local stack a test module may kill and restart; skipped on external or container backends."""
    if os.environ.get(external_env) or _backend() == "docker":
        pytest.skip(reason)
    with _local_stack(tmp_path_factory, name, **servers) as stack:
        yield stack


def _kafka_handle(stack: devstack.DevStack) -> KafkaHandle:
    assert stack.kafka is not None
    return KafkaHandle(bootstrap=stack.bootstrap, cluster=stack.kafka)


def _zookeeper_handle(stack: devstack.DevStack) -> ZooKeeperHandle:
    assert stack.zookeeper is not None
    return ZooKeeperHandle(hosts=stack.zk_hosts, ensemble=stack.zookeeper)


@pytest.fixture(scope="session")
def kafka(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaHandle]:
    """A session-wide Kafka. Tests must not restart it; use `kafka_restartable` for that."""
    external = os.environ.get("KAFKA_BOOTSTRAP")
    if external:
        yield KafkaHandle(bootstrap=external)
        return
    if _backend() == "docker":
        _docker_or_skip()
        from testcontainers.kafka import KafkaContainer  # type: ignore[import-not-found]

        with KafkaContainer().with_kraft() as container:
            yield KafkaHandle(bootstrap=container.get_bootstrap_server())
        return
    with _local_stack(tmp_path_factory, "kafka", kafka_brokers=1, zookeeper_servers=0) as stack:
        yield _kafka_handle(stack)


@pytest.fixture(scope="module")
def kafka_restartable(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaHandle]:
    """A dedicated single local broker for one test module; tests may kill and restart it."""
    with _dedicated_stack(
        tmp_path_factory, "kafka-restartable", "KAFKA_BOOTSTRAP", "broker restarts need the local process backend",
        kafka_brokers=1, zookeeper_servers=0,
    ) as stack:
        yield _kafka_handle(stack)


@pytest.fixture(scope="module")
def kafka_cluster3(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaHandle]:
    """A dedicated three-broker KRaft cluster (replication 3, min.insync.replicas 2) for one module."""
    with _dedicated_stack(
        tmp_path_factory, "kafka-cluster3", "KAFKA_BOOTSTRAP",
        "a three-broker cluster with broker faults needs the local process backend",
        kafka_brokers=3, zookeeper_servers=0,
    ) as stack:
        yield _kafka_handle(stack)


@pytest.fixture(scope="session")
def zookeeper(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ZooKeeperHandle]:
    """A session-wide standalone ZooKeeper. Tests use a unique chroot and must not restart it."""
    external = os.environ.get("ZK_HOSTS")
    if external:
        yield ZooKeeperHandle(hosts=external)
        return
    if _backend() == "docker":
        _docker_or_skip()
        from testcontainers.core.container import DockerContainer  # type: ignore[import-not-found]
        from testcontainers.core.waiting_utils import wait_for_logs  # type: ignore[import-not-found]

        with DockerContainer("zookeeper:3.9").with_exposed_ports(2181) as container:
            wait_for_logs(container, "binding to port", timeout=60)
            port = container.get_exposed_port(2181)
            yield ZooKeeperHandle(hosts=f"{container.get_container_host_ip()}:{port}")
        return
    with _local_stack(tmp_path_factory, "zookeeper", kafka_brokers=0, zookeeper_servers=1) as stack:
        yield _zookeeper_handle(stack)


@pytest.fixture(scope="module")
def zookeeper_restartable(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ZooKeeperHandle]:
    """A dedicated standalone ZooKeeper for one test module; tests may kill and restart it."""
    with _dedicated_stack(
        tmp_path_factory, "zookeeper-restartable", "ZK_HOSTS", "ZooKeeper restarts need the local process backend",
        kafka_brokers=0, zookeeper_servers=1,
    ) as stack:
        yield _zookeeper_handle(stack)


@pytest.fixture(scope="module")
def zookeeper_ensemble(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ZooKeeperHandle]:
    """A dedicated three-server ZooKeeper ensemble for one test module."""
    with _dedicated_stack(
        tmp_path_factory, "zookeeper-ensemble", "ZK_HOSTS",
        "an ensemble with server faults needs the local process backend",
        kafka_brokers=0, zookeeper_servers=3,
    ) as stack:
        yield _zookeeper_handle(stack)


@pytest.fixture
def unique() -> Callable[[str], str]:
    """`unique(prefix)` -> a name no other test in any run uses (topics, groups, chroots, pipelines)."""

    def make(prefix: str) -> str:
        return f"{prefix}-{_RUN_TOKEN}-{next(_counter)}"

    return make
