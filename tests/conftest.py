"""Session fixtures: real Kafka and ZooKeeper for tests/integration and tests/faults.

One test bed: the servers are started by the project's pytest plugin, `laminar_kafka.testing`
(its `servers` module, through its `start_servers`); this file gives them the names and handles
this suite's tests use (`KafkaHandle`, `ZooKeeperHandle`). `kafka` is the plugin's own `kafka_cluster`.

Backend choice, in order:
1. `KAFKA_BOOTSTRAP` / `ZK_HOSTS` set: use that existing cluster (servers cannot be restarted, so
   tests that need to control a server are skipped with that reason).
2. The container backend (`LAMINAR_TEST_BACKEND=docker`, or `--laminar-backend=containers`: the
   plugin's choice, `laminar_kafka.testing.options`): testcontainers starts Kafka (KRaft) and
   ZooKeeper containers from the project's images (`python -m laminar_kafka.devstack.containers
   build`; server images missing or older than their recipes are built on first use), on any engine
   that answers the Docker API (Docker, or podman's service, started when needed). Restartable
   fixtures are dedicated containers the tests kill, stop, pause and restart; the three-broker
   cluster and the ZooKeeper ensemble stay on the local backend (skipped here). Without an engine
   the tests are skipped with the one-line reason, or fail when `LAMINAR_CONTAINERS_REQUIRED=1`
   (CI). Tests marked `containers` (images, compose, container faults) run only with this backend.
3. Otherwise (default): local JVM processes (`laminar_kafka.devstack.stack.DevStack`), the session
   ones started once per session. A missing tool (Java) fails the fixture in one line.

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
import logging
import os
import uuid
from abc import ABC, abstractmethod
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterator, NoReturn, cast

import pytest

from laminar_kafka.devstack.jvm.artifacts import pinned_versions
from laminar_kafka.devstack.jvm.kafka_cluster import KafkaCluster
from laminar_kafka.devstack.jvm.servers import ZooKeeperEnsemble
from laminar_kafka.devstack.jvm.versions import ServerVersions, UnsupportedVersionError, selected_versions
from laminar_kafka.kafka_source.clients import LIBRDKAFKA_LOGGER
from laminar_kafka.testing import servers as test_servers
from laminar_kafka.testing.handles import KafkaTestCluster, ZooKeeperTestEnsemble
from laminar_kafka.testing.options import Backend
from laminar_kafka.testing.plugin import session_backend, start_servers
from tests.rest_catalog_fixtures import rest_catalog, rest_catalog_on_s3  # noqa: F401 - fixtures, registered by importing them here
from tests.s3_fixtures import moto_s3_server, s3_server  # noqa: F401 - fixtures, registered by importing them here

if TYPE_CHECKING:
    from laminar_kafka.devstack.containers.servers import ContainerGroup

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
    cluster: KafkaCluster | ContainerGroup | None = None
    _control_kind = "Kafka"

    def _controlled(self) -> KafkaCluster | ContainerGroup | None:
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
    ensemble: ZooKeeperEnsemble | ContainerGroup | None = None
    _control_kind = "ZooKeeper"

    def _controlled(self) -> ZooKeeperEnsemble | ContainerGroup | None:
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


def _pytests(handler: logging.Handler) -> bool:
    return type(handler).__module__.startswith("_pytest")


@pytest.fixture(autouse=True)
def _logging_as_it_was() -> Iterator[None]:
    """A command run in-process (``main([...])``) configures the root logger for a process; the next
    test gets the handlers and levels it would have had without it."""
    loggers = [logging.getLogger(), logging.getLogger("kazoo"), LIBRDKAFKA_LOGGER]
    root = loggers[0]
    handlers, levels = [h for h in root.handlers if not _pytests(h)], [lg.level for lg in loggers]
    yield
    for handler in [h for h in root.handlers if not _pytests(h) and h not in handlers]:
        root.removeHandler(handler)
        handler.close()
    for handler in handlers:  # pytest's own capture handlers come and go with each phase
        root.addHandler(handler)
    for lg, level in zip(loggers, levels, strict=True):
        lg.setLevel(level)


def _containers(config: pytest.Config) -> bool:
    """Whether this session runs the container backend: the plugin's choice
    (`laminar_kafka.testing.plugin.session_backend`: ``--laminar-backend``, else
    ``LAMINAR_TEST_BACKEND``), so this suite's fixtures and the plugin's run in the same place."""
    return session_backend(config) is Backend.CONTAINERS


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "containers: needs a container engine and the project's images "
                                       "(runs only with LAMINAR_TEST_BACKEND=docker)")
    _server_versions(config)  # a release the dev stack cannot run stops the session here, in one line


def _server_versions(config: pytest.Config) -> ServerVersions:
    """The releases the local backend runs; raises pytest.UsageError (one line) for an unsupported
    choice, or for a choice other than the pins with the container backend (its images are the pins)."""
    try:
        versions = selected_versions()
    except UnsupportedVersionError as exc:
        raise pytest.UsageError(str(exc)) from None
    pinned = (versions.kafka, versions.zookeeper) == pinned_versions() and not versions.zookeeper_mode
    if _containers(config) and not pinned:
        raise pytest.UsageError(f"the container backend runs the pinned images, not {versions.describe()}: "
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
    elif _containers(config):
        backend = "containers of the pinned images"
    else:
        backend = "local processes"
    lines = [
        f"laminar servers: {_server_versions(config).describe()}; backend: {backend}",
        f"laminar libraries: {_library_versions()}",
    ]
    cell = os.environ.get("LAMINAR_MATRIX_CELL")
    if cell:
        lines.insert(0, f"laminar matrix cell: {cell}")
    return lines


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if _containers(config):
        return
    skip = pytest.mark.skip(reason="container test: runs with LAMINAR_TEST_BACKEND=docker (the container pass)")
    for item in items:
        if item.get_closest_marker("containers") is not None:  # the marker, not a folder named containers
            item.add_marker(skip)


_engine_problem: list[str] = []


def containers_unavailable(reason: str) -> NoReturn:
    """Skip with `reason`, or fail when LAMINAR_CONTAINERS_REQUIRED=1 (CI: the container pass must run)."""
    if os.environ.get("LAMINAR_CONTAINERS_REQUIRED") == "1":
        pytest.fail(reason, pytrace=False)
    pytest.skip(reason)


def container_engine(*, compose: bool = False) -> Any:
    """The docker SDK client of the engine, with the server images current with this checkout's
    recipes (`laminar_kafka.testing.servers.engine_with_images`; and a compose client when
    `compose`); skips (or fails) saying in one line what is missing. An engine found missing once
    is not looked for again in the session."""
    from laminar_kafka.devstack.containers import engine as containers

    if compose:
        from laminar_kafka.devstack.containers.compose import compose_command

        try:
            compose_command()
        except containers.ContainerError as exc:
            containers_unavailable(str(exc))
    if not _engine_problem:
        try:
            return test_servers.engine_with_images(up_to_date=True)
        except test_servers.ServersUnavailable as exc:
            _engine_problem.append(str(exc))
    containers_unavailable(_engine_problem[0])


def _container_names(name: str) -> dict[str, Any]:
    """The name prefix and labels (besides the plugin's) of a container this suite starts itself."""
    return {"name_prefix": f"{name}-{_RUN_TOKEN}", "labels": {"dev.laminar.test": _RUN_TOKEN}}


def _kafka_handle(cluster: KafkaTestCluster) -> KafkaHandle:
    """This suite's handle on a cluster the plugin's servers started: the brokers' group (the dev
    stack's `KafkaCluster`, or a `ContainerGroup`) has the fault controls by index."""
    return KafkaHandle(bootstrap=cluster.bootstrap, cluster=cast(Any, cluster.brokers[0].group))


def _zookeeper_handle(ensemble: ZooKeeperTestEnsemble) -> ZooKeeperHandle:
    """As `_kafka_handle`, for ZooKeeper (the dev stack's `ZooKeeperEnsemble`, or a `ContainerGroup`)."""
    return ZooKeeperHandle(hosts=ensemble.hosts, ensemble=cast(Any, ensemble.servers[0].group))


@contextlib.contextmanager
def _container_kafka(name: str) -> Iterator[KafkaHandle]:
    """A single broker in a container (`laminar_kafka.testing.servers.container_kafka`), removed on
    exit; skipped (or failed in CI) without an engine."""
    container_engine()
    with start_servers(lambda: test_servers.container_kafka(**_container_names(name)),
                       unavailable=containers_unavailable) as cluster:
        yield _kafka_handle(cluster)


@contextlib.contextmanager
def _container_zookeeper(name: str) -> Iterator[ZooKeeperHandle]:
    """A ZooKeeper server in a container (`laminar_kafka.testing.servers.container_zookeeper`), as
    `_container_kafka`."""
    container_engine()
    with start_servers(lambda: test_servers.container_zookeeper(**_container_names(name)),
                       unavailable=containers_unavailable) as ensemble:
        yield _zookeeper_handle(ensemble)


@contextlib.contextmanager
def _process_kafka(request: pytest.FixtureRequest, name: str, brokers: int) -> Iterator[KafkaHandle]:
    """`brokers` local broker processes (`laminar_kafka.testing.servers.process_kafka`) in a pytest
    temporary directory, stopped on exit (ZooKeeper-mode brokers: see `_broker_zookeeper`)."""
    zookeeper_connect = _broker_zookeeper(request, name)
    base = request.getfixturevalue("tmp_path_factory").mktemp(name)
    with start_servers(lambda: test_servers.process_kafka(base, brokers=brokers,
                                                          zookeeper_connect=zookeeper_connect)) as cluster:
        handle = _kafka_handle(cluster)
        yield handle
        # The cluster and its data end with the fixture: SIGKILL its brokers, so the stop that follows
        # has nothing to wait for (a graceful stop waits out a controlled shutdown, up to 20 s a broker,
        # longer on a cluster whose partitions have no other replica left to lead).
        for index in range(brokers):
            handle.kill_broker(index)


@contextlib.contextmanager
def _process_zookeeper(tmp_path_factory: pytest.TempPathFactory, name: str, servers: int) -> Iterator[ZooKeeperHandle]:
    """`servers` local ZooKeeper processes (`laminar_kafka.testing.servers.process_zookeeper`) in a
    pytest temporary directory, stopped on exit."""
    base = tmp_path_factory.mktemp(name)
    with start_servers(lambda: test_servers.process_zookeeper(base, servers=servers)) as ensemble:
        yield _zookeeper_handle(ensemble)


def _require_local(config: pytest.Config, external_env: str, reason: str) -> None:
    """Skip a fixture whose servers the tests control as local processes, on an external cluster
    (`external_env` set) or the container backend."""
    if os.environ.get(external_env):
        pytest.skip(reason)
    if _containers(config):
        pytest.skip(f"{reason} (container backend: the local backend covers it)")


def _broker_zookeeper(request: pytest.FixtureRequest, name: str) -> str | None:
    """Where a local stack's ZooKeeper-mode brokers register: a chroot of their own on the session's
    `zookeeper` (None with KRaft brokers, which need no ZooKeeper)."""
    if not _server_versions(request.config).zookeeper_mode:
        return None
    zookeeper: ZooKeeperHandle = request.getfixturevalue("zookeeper")
    return f"{zookeeper.hosts}/{name}-{_RUN_TOKEN}-{next(_counter)}"


# Fixture precedence: the plugin (laminar_kafka.testing, loaded from its entry point) defines
# `zookeeper` too; pytest prefers this conftest's, so in this repository every test, and the plugin's
# own fixtures (its ZooKeeper-mode brokers register on `zookeeper`, using only its `hosts`), get the
# `ZooKeeperHandle` below. `kafka` is the plugin's `kafka_cluster` under this suite's name and handle.


@pytest.fixture(scope="session")
def kafka(request: pytest.FixtureRequest) -> KafkaHandle:
    """A session-wide Kafka: the plugin's `kafka_cluster` (one broker, a local process or a container),
    so this suite and tests of the plugin's fixtures share it; `KAFKA_BOOTSTRAP`'s cluster when set.
    Tests must not restart it; use `kafka_restartable` for that."""
    external = os.environ.get("KAFKA_BOOTSTRAP")
    if external:
        return KafkaHandle(bootstrap=external)
    if _containers(request.config):
        container_engine()  # skips (fails in CI) without an engine; images current with this checkout
    return _kafka_handle(request.getfixturevalue("kafka_cluster"))


@pytest.fixture(scope="module")
def kafka_restartable(request: pytest.FixtureRequest) -> Iterator[KafkaHandle]:
    """A dedicated single broker for one test module (a local process, or a container with the
    container backend); tests may kill and restart it."""
    if os.environ.get("KAFKA_BOOTSTRAP"):
        pytest.skip("broker restarts need the local process backend")
    if _containers(request.config):
        with _container_kafka("laminar-test-kafka-restartable") as handle:
            yield handle
        return
    with _process_kafka(request, "kafka-restartable", 1) as handle:
        yield handle


@pytest.fixture(scope="module")
def kafka_cluster3(request: pytest.FixtureRequest) -> Iterator[KafkaHandle]:
    """A dedicated three-broker KRaft cluster (replication 3, min.insync.replicas 2) for one module."""
    _require_local(request.config, "KAFKA_BOOTSTRAP",
                   "a three-broker cluster with broker faults needs the local process backend")
    with _process_kafka(request, "kafka-cluster3", 3) as handle:
        yield handle


@pytest.fixture(scope="session")
def zookeeper(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ZooKeeperHandle]:
    """A session-wide standalone ZooKeeper. Tests use a unique chroot and must not restart it.
    Overrides the plugin's `zookeeper` in this repository (see the comment above)."""
    external = os.environ.get("ZK_HOSTS")
    if external:
        yield ZooKeeperHandle(hosts=external)
        return
    if _containers(request.config):
        with _container_zookeeper("laminar-test-zookeeper") as handle:
            yield handle
        return
    with _process_zookeeper(tmp_path_factory, "zookeeper", 1) as handle:
        yield handle


@pytest.fixture(scope="module")
def zookeeper_restartable(request: pytest.FixtureRequest,
                          tmp_path_factory: pytest.TempPathFactory) -> Iterator[ZooKeeperHandle]:
    """A dedicated standalone ZooKeeper for one test module (a local process, or a container with the
    container backend); tests may kill and restart it."""
    if os.environ.get("ZK_HOSTS"):
        pytest.skip("ZooKeeper restarts need the local process backend")
    if _containers(request.config):
        with _container_zookeeper("laminar-test-zookeeper-restartable") as handle:
            yield handle
        return
    with _process_zookeeper(tmp_path_factory, "zookeeper-restartable", 1) as handle:
        yield handle


@pytest.fixture(scope="module")
def zookeeper_ensemble(request: pytest.FixtureRequest,
                       tmp_path_factory: pytest.TempPathFactory) -> Iterator[ZooKeeperHandle]:
    """A dedicated three-server ZooKeeper ensemble for one test module."""
    _require_local(request.config, "ZK_HOSTS", "an ensemble with server faults needs the local process backend")
    with _process_zookeeper(tmp_path_factory, "zookeeper-ensemble", 3) as handle:
        yield handle


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
