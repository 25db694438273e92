"""Session fixtures: real Kafka and ZooKeeper for tests/integration and tests/faults.

Backend choice, in order:
1. `KAFKA_BOOTSTRAP` / `ZK_HOSTS` set: use that existing cluster (servers cannot be restarted, so
   tests that need to control a server are skipped with that reason).
2. `LAMINAR_TEST_BACKEND=docker`: testcontainers starts Kafka (KRaft) and ZooKeeper containers from
   the project's images (`python -m laminar_kafka.devstack.containers build`; missing server images are built on
   first use), on any engine that answers the Docker API (Docker, or podman's service, started when
   needed). Restartable fixtures are dedicated containers the tests kill, stop, pause and restart;
   the three-broker cluster and the ZooKeeper ensemble stay on the local backend (skipped here).
   Without an engine the tests are skipped with the one-line reason, or fail when
   `LAMINAR_CONTAINERS_REQUIRED=1` (CI). Tests marked `containers` (images, compose, container
   faults) run only with this backend.
3. Otherwise (default): local JVM processes from `laminar_kafka.devstack.stack.DevStack`, started once per session.

Server releases (local backend): the POM's pins, or those chosen by ``LAMINAR_KAFKA_VERSION``,
``LAMINAR_KAFKA_MODE`` (``kraft`` | ``zookeeper``) and ``LAMINAR_ZOOKEEPER_VERSION``
(`laminar_kafka.devstack.jvm.versions`; the compatibility matrix, docs/compatibility.md). ZooKeeper-mode
brokers (Kafka 3.x) register under a chroot of their own on the session's `zookeeper`. The pytest
header names the releases and the library versions in use, so a CI log shows its matrix cell.

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

from laminar_kafka.devstack.processes import free_port
from laminar_kafka.devstack.jvm.artifacts import pinned_versions
from laminar_kafka.devstack.jvm.versions import ServerVersions, UnsupportedVersionError, selected_versions
from laminar_kafka.devstack.jvm.servers import KafkaCluster, ZooKeeperEnsemble
from laminar_kafka.devstack.stack import DevStack
from tests.s3_fixtures import moto_s3_server, s3_server  # noqa: F401
from tests.rest_catalog_fixtures import rest_catalog, rest_catalog_on_s3  # noqa: F401

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
            pytest.skip(f"this {self._control_kind} backend (an external cluster) cannot be restarted by the test")
        return controlled


@dataclass
class KafkaHandle(_Controllable):
    """What a test gets from the `kafka` fixture.

    `cluster` is the controllable local cluster (a `laminar_kafka.devstack.containers.servers.ContainerGroup` with the
    docker backend), or None for an external cluster.
    """

    bootstrap: str
    cluster: KafkaCluster | None = None
    _control_kind = "Kafka"

    def _controlled(self) -> KafkaCluster | None:
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
    """What a test gets from the `zookeeper` fixture (`ensemble` None when not controllable; a
    `ContainerGroup` with the docker backend)."""

    hosts: str
    ensemble: ZooKeeperEnsemble | None = None
    _control_kind = "ZooKeeper"

    def _controlled(self) -> ZooKeeperEnsemble | None:
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


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "containers: needs a container engine and the project's images "
                                       "(runs only with LAMINAR_TEST_BACKEND=docker)")
    _server_versions()  # a release the dev stack cannot run stops the session here, in one line


def _server_versions() -> ServerVersions:
    """The releases the local backend runs; raises pytest.UsageError (one line) for an unsupported
    choice, or for a choice other than the pins with the container backend (its images are the pins)."""
    try:
        versions = selected_versions()
    except UnsupportedVersionError as exc:
        raise pytest.UsageError(str(exc)) from None
    pinned = (versions.kafka, versions.zookeeper) == pinned_versions() and not versions.zookeeper_mode
    if _backend() == "docker" and not pinned:
        raise pytest.UsageError(f"LAMINAR_TEST_BACKEND=docker runs the pinned images, not {versions.describe()}: "
                                "unset LAMINAR_KAFKA_VERSION, LAMINAR_KAFKA_MODE and LAMINAR_ZOOKEEPER_VERSION")
    return versions


def _library_versions() -> str:
    """The Python and the runtime libraries this session imports, as one line."""
    import platform
    from importlib.metadata import PackageNotFoundError, version

    import confluent_kafka

    parts = [f"Python {platform.python_version()}"]
    for name in ("confluent-kafka", "pyarrow", "kazoo", "pyiceberg", "numpy"):
        try:
            parts.append(f"{name} {version(name)}")
        except PackageNotFoundError:
            parts.append(f"{name} (not installed)")
    parts[1] += f" (librdkafka {confluent_kafka.libversion()[0]})"
    return ", ".join(parts)


def pytest_report_header(config: pytest.Config) -> list[str]:
    """What this session runs against: the matrix cell (``LAMINAR_MATRIX_CELL``, set by .ci/matrix.sh),
    the server releases and backend, the library versions."""
    if os.environ.get("KAFKA_BOOTSTRAP") or os.environ.get("ZK_HOSTS"):
        backend = "external servers (KAFKA_BOOTSTRAP / ZK_HOSTS): their releases are not known here"
    elif _backend() == "docker":
        backend = "containers of the pinned images"
    else:
        backend = "local processes"
    lines = [
        f"laminar servers: {_server_versions().describe()}; backend: {backend}",
        f"laminar libraries: {_library_versions()}",
    ]
    cell = os.environ.get("LAMINAR_MATRIX_CELL")
    if cell:
        lines.insert(0, f"laminar matrix cell: {cell}")
    return lines


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if _backend() == "docker":
        return
    skip = pytest.mark.skip(reason="container test: runs with LAMINAR_TEST_BACKEND=docker (the container pass)")
    for item in items:
        if item.get_closest_marker("containers") is not None:  # the marker, not a folder named containers
            item.add_marker(skip)


_engine_problem: list[str] = []


def containers_unavailable(reason: str) -> None:
    """Skip with `reason`, or fail when LAMINAR_CONTAINERS_REQUIRED=1 (CI: the container pass must run)."""
    if os.environ.get("LAMINAR_CONTAINERS_REQUIRED") == "1":
        pytest.fail(reason, pytrace=False)
    pytest.skip(reason)


def container_engine(*, compose: bool = False) -> Any:
    """The docker SDK client of the engine, with the server images built (and a compose client when
    `compose`); skips (or fails) saying in one line what is missing."""
    from laminar_kafka.devstack.containers import engine as containers

    if compose:
        from laminar_kafka.devstack.containers.compose import compose_command

        try:
            compose_command()
        except containers.ContainerError as exc:
            containers_unavailable(str(exc))
    if not _engine_problem:
        try:
            client = containers.connect()
            containers.check_container_runs(client)
            containers.configure_testcontainers()
            from laminar_kafka.devstack.containers.images import ImageBuilder

            ImageBuilder(client, log=lambda line: None).build(["kafka", "zookeeper"])
            return client
        except containers.ContainerError as exc:
            _engine_problem.append(str(exc).splitlines()[0])
    containers_unavailable(f"LAMINAR_TEST_BACKEND=docker but {_engine_problem[0]}")


@contextlib.contextmanager
def _server_container(role: str, name: str) -> Iterator[Any]:
    """A Kafka or ZooKeeper container started by testcontainers, healthy, removed on exit.

    Yields a `laminar_kafka.devstack.containers.servers.ServerContainer` (host port, health, fault controls).
    """
    container_engine()
    from testcontainers.core.container import DockerContainer  # type: ignore[import-not-found]

    from laminar_kafka.devstack.containers import servers

    for attempt in range(1, 4):
        port = free_port()
        if role == "kafka":
            image, inside, env, health = (servers.KAFKA_IMAGE, servers.KAFKA_PORT, servers.kafka_environment(port),
                                          servers.kafka_health(port))
        else:
            image, inside, env, health = (servers.ZOOKEEPER_IMAGE, servers.ZOOKEEPER_PORT,
                                          servers.zookeeper_environment(), servers.zookeeper_health(port))
        container = DockerContainer(image).with_name(f"{name}-{_RUN_TOKEN}-{next(_counter)}").with_envs(**env)
        container.ports[f"{inside}/tcp"] = ("127.0.0.1", port)  # type: ignore[assignment] - loopback only
        container.with_kwargs(labels={servers.ROLE_LABEL: role, "dev.laminar.test": _RUN_TOKEN})
        try:
            container.start()
        except Exception as exc:  # noqa: BLE001 - a port taken in between is retried
            container.stop()
            if attempt == 3 or not servers._port_taken(exc):
                raise
            continue
        server = servers.ServerContainer(container._name, container.get_wrapped_container(), port, health)
        try:
            server.wait_healthy()
            yield server
        finally:
            container.stop()
        return


@contextlib.contextmanager
def _container_handles(role: str, name: str) -> Iterator[Any]:
    """A controllable Kafka or ZooKeeper handle backed by one container."""
    from laminar_kafka.devstack.containers.servers import ContainerGroup

    with _server_container(role, name) as server:
        group = ContainerGroup([server])
        if role == "kafka":
            yield KafkaHandle(bootstrap=f"127.0.0.1:{server.port}", cluster=group)  # type: ignore[arg-type]
        else:
            yield ZooKeeperHandle(hosts=f"127.0.0.1:{server.port}", ensemble=group)  # type: ignore[arg-type]


@contextlib.contextmanager
def _local_stack(
    tmp_path_factory: pytest.TempPathFactory, name: str, kafka_zookeeper: str | None = None, **servers: int
) -> Iterator[DevStack]:
    """A started local stack in a pytest temporary directory, stopped on exit (`kafka_zookeeper`:
    where ZooKeeper-mode brokers register, see `_broker_zookeeper`)."""
    stack = DevStack.launch(base_dir=Path(tmp_path_factory.mktemp(name)), kafka_zookeeper=kafka_zookeeper, **servers)
    try:
        yield stack
    finally:
        stack.stop()


@contextlib.contextmanager
def _dedicated_stack(
    tmp_path_factory: pytest.TempPathFactory, name: str, external_env: str, reason: str,
    kafka_zookeeper: Callable[[], str | None] = lambda: None, **servers: int
) -> Iterator[DevStack]:
    """A local stack a test module may kill and restart; skipped on external or container backends.
    `kafka_zookeeper` is called only when the stack is started (it may start the session's ZooKeeper)."""
    if os.environ.get(external_env) or _backend() == "docker":
        pytest.skip(reason if os.environ.get(external_env) else f"{reason} (container backend: the local backend covers it)")
    with _local_stack(tmp_path_factory, name, kafka_zookeeper(), **servers) as stack:
        yield stack


def _broker_zookeeper(request: pytest.FixtureRequest, name: str) -> str | None:
    """Where a local stack's ZooKeeper-mode brokers register: a chroot of their own on the session's
    `zookeeper` (None with KRaft brokers, which need no ZooKeeper)."""
    if not _server_versions().zookeeper_mode:
        return None
    zookeeper: ZooKeeperHandle = request.getfixturevalue("zookeeper")
    return f"{zookeeper.hosts}/{name}-{_RUN_TOKEN}-{next(_counter)}"


def _kafka_handle(stack: DevStack) -> KafkaHandle:
    assert stack.kafka is not None
    return KafkaHandle(bootstrap=stack.bootstrap, cluster=stack.kafka)


def _zookeeper_handle(stack: DevStack) -> ZooKeeperHandle:
    assert stack.zookeeper is not None
    return ZooKeeperHandle(hosts=stack.zk_hosts, ensemble=stack.zookeeper)


@pytest.fixture(scope="session")
def kafka(tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest) -> Iterator[KafkaHandle]:
    """A session-wide Kafka. Tests must not restart it; use `kafka_restartable` for that."""
    external = os.environ.get("KAFKA_BOOTSTRAP")
    if external:
        yield KafkaHandle(bootstrap=external)
        return
    if _backend() == "docker":
        with _container_handles("kafka", "laminar-test-kafka") as handle:
            yield handle
        return
    with _local_stack(tmp_path_factory, "kafka", _broker_zookeeper(request, "kafka"), kafka_brokers=1,
                      zookeeper_servers=0) as stack:
        yield _kafka_handle(stack)


@pytest.fixture(scope="module")
def kafka_restartable(tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest) -> Iterator[KafkaHandle]:
    """A dedicated single broker for one test module (a local process, or a container with the docker
    backend); tests may kill and restart it."""
    if _backend() == "docker" and not os.environ.get("KAFKA_BOOTSTRAP"):
        with _container_handles("kafka", "laminar-test-kafka-restartable") as handle:
            yield handle
        return
    with _dedicated_stack(
        tmp_path_factory, "kafka-restartable", "KAFKA_BOOTSTRAP", "broker restarts need the local process backend",
        lambda: _broker_zookeeper(request, "kafka-restartable"), kafka_brokers=1, zookeeper_servers=0,
    ) as stack:
        yield _kafka_handle(stack)


@pytest.fixture(scope="module")
def kafka_cluster3(tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest) -> Iterator[KafkaHandle]:
    """A dedicated three-broker KRaft cluster (replication 3, min.insync.replicas 2) for one module."""
    with _dedicated_stack(
        tmp_path_factory, "kafka-cluster3", "KAFKA_BOOTSTRAP",
        "a three-broker cluster with broker faults needs the local process backend",
        lambda: _broker_zookeeper(request, "kafka-cluster3"), kafka_brokers=3, zookeeper_servers=0,
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
        with _container_handles("zookeeper", "laminar-test-zookeeper") as handle:
            yield handle
        return
    with _local_stack(tmp_path_factory, "zookeeper", kafka_brokers=0, zookeeper_servers=1) as stack:
        yield _zookeeper_handle(stack)


@pytest.fixture(scope="module")
def zookeeper_restartable(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ZooKeeperHandle]:
    """A dedicated standalone ZooKeeper for one test module (a local process, or a container with the
    docker backend); tests may kill and restart it."""
    if _backend() == "docker" and not os.environ.get("ZK_HOSTS"):
        with _container_handles("zookeeper", "laminar-test-zookeeper-restartable") as handle:
            yield handle
        return
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


@pytest.fixture(scope="session")
def schema_registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The Confluent-compatible base URL of a real schema registry (laminar_kafka.devstack.jvm.schema_registry: Apicurio, in
    memory) running for the session; ``SCHEMA_REGISTRY_URL`` set: that registry instead."""
    external = os.environ.get("SCHEMA_REGISTRY_URL")
    if external:
        yield external
        return
    from laminar_kafka.devstack.jvm.schema_registry import new_schema_registry

    registry = new_schema_registry(Path(tmp_path_factory.mktemp("schema-registry")))
    registry.start(timeout=120.0)  # about 3 s warm; the first run also builds the application
    try:
        yield registry.url
    finally:
        registry.stop()


@pytest.fixture
def unique() -> Callable[[str], str]:
    """`unique(prefix)` -> a name no other test in any run uses (topics, groups, chroots, pipelines)."""

    def make(prefix: str) -> str:
        return f"{prefix}-{_RUN_TOKEN}-{next(_counter)}"

    return make
