"""The pytest plugin (entry point ``pytest11``: ``laminar_kafka``): real Kafka, ZooKeeper and an S3
store with an Iceberg REST catalog, as fixtures. docs/testing.md is its guide.

Inert until a fixture is used: registering it adds two options and a header line, imports no client
library and starts nothing. A server fixture starts its servers on first use, shares them for the
session and stops them at its end, also when the run is interrupted (Ctrl-C, or SIGTERM, which
the plugin turns into the same orderly interruption while its servers run).

Session fixtures (servers): `kafka_cluster` (one KRaft broker), `kafka_cluster_3` (three brokers,
replication 3), `kafka_cluster_secure` (one broker with SASL_SSL and mTLS listeners), `zookeeper`,
`object_store`. Function fixtures (helpers): `unique_topic`, `kafka_producer`, `produce_records`,
`consume_records`, `network_partition`. A server that cannot start for want of a tool (Java, a
container engine, an image) is an error at setup whose one line says what to install.

For a conftest of one's own built on :mod:`laminar_kafka.testing.servers` (the project's is):
`session_backend` is the backend the plugin's fixtures use, `start_servers` starts servers for a
fixture as the plugin's own fixtures do.
"""
from __future__ import annotations

import contextlib
import itertools
import os
import re
import signal
import threading
import uuid
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING, Any, NoReturn, TypeVar

import pytest

from laminar_kafka.testing.options import BACKEND_ENV, Backend, PluginOptions, choose_backend

if TYPE_CHECKING:
    from confluent_kafka import Producer

    from laminar_kafka.testing.handles import KafkaTestCluster, ObjectStore, ZooKeeperTestEnsemble
    from laminar_kafka.testing.partition import NetworkPartition
    from laminar_kafka.testing.records import Record

T = TypeVar("T")
_OPTIONS = pytest.StashKey[PluginOptions]()
_RUN = uuid.uuid4().hex[:6]
_names = itertools.count(1)


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("laminar_kafka", "laminar-kafka test servers (laminar_kafka.testing)")
    group.addoption("--laminar-backend", default=None, choices=("process", "containers"),
                    help=f"where Kafka and ZooKeeper run: local JVM processes (default) or containers of the "
                         f"project's images (default from {BACKEND_ENV}: local|docker)")
    group.addoption("--laminar-kafka-version", default=None, metavar="X.Y.Z",
                    help="the Kafka release of the process backend "
                         "(default: LAMINAR_KAFKA_VERSION, else the pinned one)")


def session_backend(config: pytest.Config) -> Backend:
    """The session's backend (`laminar_kafka.testing.options.choose_backend` of ``--laminar-backend``
    and the environment); raises pytest.UsageError (one line) for an unknown value. Public: a
    conftest whose own fixtures must run where the plugin's do asks this."""
    try:
        return choose_backend(config.getoption("--laminar-backend"), os.environ)
    except ValueError as exc:
        raise pytest.UsageError(str(exc)) from None


def pytest_configure(config: pytest.Config) -> None:
    backend = session_backend(config)
    version = config.getoption("--laminar-kafka-version")
    if version and backend is Backend.CONTAINERS:
        raise pytest.UsageError("--laminar-kafka-version chooses the process backend's release; the containers "
                                "backend runs the pinned images")
    if version:
        from laminar_kafka.devstack.jvm.versions import UnsupportedVersionError, selected_versions

        try:
            selected_versions({**os.environ, "LAMINAR_KAFKA_VERSION": version})
        except UnsupportedVersionError as exc:
            raise pytest.UsageError(f"--laminar-kafka-version: {exc}") from None
    config.stash[_OPTIONS] = PluginOptions(backend, version)


def pytest_report_header(config: pytest.Config) -> str:
    return config.stash[_OPTIONS].describe()


def _options(request: pytest.FixtureRequest) -> PluginOptions:
    return request.config.stash[_OPTIONS]


@contextlib.contextmanager
def _versions_chosen(options: PluginOptions) -> Iterator[None]:
    """``--laminar-kafka-version`` in force (as ``LAMINAR_KAFKA_VERSION``, the variable the dev stack
    reads) while servers are prepared; the environment is restored after."""
    if not options.kafka_version:
        yield
        return
    saved = os.environ.get("LAMINAR_KAFKA_VERSION")
    os.environ["LAMINAR_KAFKA_VERSION"] = options.kafka_version
    try:
        yield
    finally:
        if saved is None:
            os.environ.pop("LAMINAR_KAFKA_VERSION", None)
        else:
            os.environ["LAMINAR_KAFKA_VERSION"] = saved


class SigtermInterrupts:
    """While servers run, SIGTERM interrupts the run as Ctrl-C does, so pytest stops them (the
    default SIGTERM would end the process at once and leave them running).

    :meth:`while_servers_run` is entered once per server context; the first entry installs the
    handler (only from the main thread, and only when nobody set a SIGTERM handler of their own),
    and the exit of the last one puts the default back (unless someone replaced the handler in
    between: theirs stays). One instance per process (:data:`SIGTERM_INTERRUPTS`)."""

    def __init__(self) -> None:
        self._users = 0
        self._installed = False

    @contextlib.contextmanager
    def while_servers_run(self) -> Iterator[None]:
        if threading.current_thread() is not threading.main_thread():
            yield
            return
        if self._users == 0 and signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:
            signal.signal(signal.SIGTERM, _raise_keyboard_interrupt)
            self._installed = True
        self._users += 1
        try:
            yield
        finally:
            self._users -= 1
            if self._users == 0 and self._installed:
                self._installed = False
                if signal.getsignal(signal.SIGTERM) is _raise_keyboard_interrupt:
                    signal.signal(signal.SIGTERM, signal.SIG_DFL)


#: the process's one SIGTERM guard (signal handlers are per process)
SIGTERM_INTERRUPTS = SigtermInterrupts()


def _raise_keyboard_interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def _fail(message: str) -> NoReturn:
    pytest.fail(message, pytrace=False)


@contextlib.contextmanager
def start_servers(starter: Callable[[], contextlib.AbstractContextManager[T]], *,
                  unavailable: Callable[[str], NoReturn] = _fail) -> Iterator[T]:
    """Enter `starter()` (a context manager of `laminar_kafka.testing.servers`) for a fixture, and
    leave it (the servers stop) when the fixture ends, however it ends. A server that cannot start
    for want of a tool calls `unavailable` with the one-line message (default: the fixture fails
    with it; a suite that skips such tests passes its own, which must raise, as pytest.skip does);
    any other failure to start fails the fixture in one line. Public: every server fixture of the
    plugin, and of a conftest built on `laminar_kafka.testing.servers`, starts servers through it."""
    from laminar_kafka.devstack.errors import DevStackError
    from laminar_kafka.testing.servers import ServersUnavailable

    with SIGTERM_INTERRUPTS.while_servers_run():
        problem, report = "", unavailable
        try:
            manager = starter()
            value = manager.__enter__()
        except ServersUnavailable as exc:
            problem = str(exc)
        except DevStackError as exc:
            problem, report = f"the test servers did not start: {exc}", _fail
        if problem:  # reported outside the handlers: the report shows the message, not a chain of exceptions
            report(problem)
        try:
            yield value
        except BaseException as exc:  # passed to the manager, which stops the servers
            if not manager.__exit__(type(exc), exc, exc.__traceback__):
                raise
        else:
            manager.__exit__(None, None, None)


def _process_kafka(request: pytest.FixtureRequest, name: str, brokers: int, secure: bool = False) -> Callable[[], Any]:
    """The starter of a process-backend cluster (ZooKeeper-mode brokers register on the session's
    `zookeeper`, under a chroot of their own)."""
    from laminar_kafka.devstack.jvm.versions import selected_versions
    from laminar_kafka.testing.servers import process_kafka

    options = _options(request)
    with _versions_chosen(options):
        zookeeper_mode = selected_versions().zookeeper_mode
    chroot = None
    if zookeeper_mode:
        ensemble: ZooKeeperTestEnsemble = request.getfixturevalue("zookeeper")
        chroot = f"{ensemble.hosts}/{name}-{_RUN}"
    base = request.getfixturevalue("tmp_path_factory").mktemp(name)

    @contextlib.contextmanager
    def start() -> Iterator[Any]:
        with _versions_chosen(options):
            manager = process_kafka(base, brokers=brokers, secure=secure, zookeeper_connect=chroot)
            cluster = manager.__enter__()
        try:
            yield cluster
        finally:
            # the session's brokers and their data end here: SIGKILL them, so the stop has nothing to
            # wait for (a controlled shutdown takes up to 20 s a broker, longer on three)
            for broker in cluster.brokers:
                broker.kill()
            manager.__exit__(None, None, None)

    return start


@pytest.fixture(scope="session")
def kafka_cluster(request: pytest.FixtureRequest) -> Iterator[KafkaTestCluster]:
    """One Kafka broker (KRaft) for the session: a local process, or a container with the containers
    backend. Yields a `KafkaTestCluster` (bootstrap, admin, create_topic, brokers with faults)."""
    if _options(request).backend is Backend.CONTAINERS:
        from laminar_kafka.testing.servers import container_kafka

        starter: Callable[[], Any] = container_kafka
    else:
        starter = _process_kafka(request, "kafka", 1)
    with start_servers(starter) as cluster:
        yield cluster


@pytest.fixture(scope="session")
def kafka_cluster_3(request: pytest.FixtureRequest) -> Iterator[KafkaTestCluster]:
    """Three Kafka brokers (KRaft, replication 3, min.insync.replicas 2) for the session, as local
    processes; skipped with the containers backend."""
    if _options(request).backend is Backend.CONTAINERS:
        pytest.skip("kafka_cluster_3 runs on the process backend only (--laminar-backend=process)")
    with start_servers(_process_kafka(request, "kafka3", 3)) as cluster:
        yield cluster


@pytest.fixture(scope="session")
def kafka_cluster_secure(request: pytest.FixtureRequest) -> Iterator[KafkaTestCluster]:
    """One KRaft broker with SASL_SSL (SCRAM-SHA-512) and mTLS listeners, as a local process; its
    `client_settings` are the SASL_SSL ones, `mtls_bootstrap`/`mtls_settings` the mTLS ones.
    Skipped with the containers backend."""
    if _options(request).backend is Backend.CONTAINERS:
        pytest.skip("kafka_cluster_secure runs on the process backend only (--laminar-backend=process)")
    with start_servers(_process_kafka(request, "kafka-secure", 1, secure=True)) as cluster:
        yield cluster


@pytest.fixture(scope="session")
def zookeeper(request: pytest.FixtureRequest) -> Iterator[ZooKeeperTestEnsemble]:
    """A standalone ZooKeeper for the session (a local process, or a container). Yields a
    `ZooKeeperTestEnsemble`: ``hosts``, ``client(chroot)`` (kazoo), ``servers`` with faults."""
    from laminar_kafka.testing import servers

    if _options(request).backend is Backend.CONTAINERS:
        starter: Callable[[], Any] = servers.container_zookeeper
    else:
        base = request.getfixturevalue("tmp_path_factory").mktemp("zookeeper")
        starter = lambda: servers.process_zookeeper(base)
    with start_servers(starter) as ensemble:
        yield ensemble


@pytest.fixture(scope="session")
def object_store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ObjectStore]:
    """SeaweedFS for the session (a local process with either backend): S3 with the bucket
    ``laminar-test``, and an Iceberg REST catalog (``catalog()`` gives a pyiceberg catalog)."""
    from laminar_kafka.testing.servers import object_store as start_object_store

    base = tmp_path_factory.mktemp("object-store")
    with start_servers(lambda: start_object_store(base)) as store:
        yield store


def _name(request: pytest.FixtureRequest, prefix: str) -> str:
    """A topic name unique in this run and any other: `prefix`, the test's name, a counter, a token."""
    test = re.sub(r"[^A-Za-z0-9._-]+", "-", request.node.name).strip("-")[:80]
    return f"{prefix}-{test}-{next(_names)}-{_RUN}"


@pytest.fixture
def unique_topic(request: pytest.FixtureRequest) -> Callable[..., str]:
    """``unique_topic(partitions=1, *, cluster=None, config=None, prefix="t")`` creates a topic no other
    test uses (on `kafka_cluster` unless `cluster` is given) and returns its name."""

    def make(partitions: int = 1, *, cluster: KafkaTestCluster | None = None,
             config: dict[str, str] | None = None, prefix: str = "t") -> str:
        target = cluster or request.getfixturevalue("kafka_cluster")
        return target.create_topic(_name(request, prefix), partitions, config=config)

    return make


@pytest.fixture
def kafka_producer(kafka_cluster: KafkaTestCluster) -> Iterator[Producer]:
    """A confluent_kafka Producer of `kafka_cluster` (idempotent, ``acks=all``), flushed after the test."""
    from confluent_kafka import Producer

    producer = Producer(kafka_cluster.config(**{"enable.idempotence": True, "acks": "all", "linger.ms": 5}))
    yield producer
    producer.flush(30)


@pytest.fixture
def produce_records(request: pytest.FixtureRequest) -> Callable[..., int]:
    """``produce_records(topic, values, *, key=None, partition=None, timeout=60.0, cluster=None)``:
    produce and wait for every acknowledgement; returns the count (see
    `laminar_kafka.testing.records.produce_records`)."""
    from laminar_kafka.testing import records

    def produce(topic: str, values: Iterable[bytes | str], *, key: bytes | str | None = None,
                partition: int | None = None, timeout: float = 60.0, cluster: KafkaTestCluster | None = None) -> int:
        target = cluster or request.getfixturevalue("kafka_cluster")
        return records.produce_records(target, topic, values, key=key, partition=partition, timeout=timeout)

    return produce


@pytest.fixture
def consume_records(request: pytest.FixtureRequest) -> Callable[..., list[Record]]:
    """``consume_records(topic, count=None, *, timeout=30.0, isolation="read_committed", cluster=None)``:
    the topic's records from the beginning (`laminar_kafka.testing.records.Record`: partition,
    offset, key, value)."""
    from laminar_kafka.testing import records

    def consume(topic: str, count: int | None = None, *, timeout: float = 30.0, isolation: str = "read_committed",
                cluster: KafkaTestCluster | None = None) -> list[Record]:
        target = cluster or request.getfixturevalue("kafka_cluster")
        return records.consume_records(target, topic, count, timeout=timeout, isolation=isolation)

    return consume


@pytest.fixture
def network_partition(request: pytest.FixtureRequest) -> Iterator[Callable[..., NetworkPartition]]:
    """``network_partition(cluster=None, broker=None)``: a `NetworkPartition` between a client and the
    brokers of `cluster` (default `kafka_cluster`), or broker `broker` only; removed after the test.
    Skipped (one line, why) where the host cannot make network namespaces (needs Linux, root, iproute2)."""
    from laminar_kafka.testing.partition import NetworkPartition, partition_available

    available, reason = partition_available()
    if not available:
        pytest.skip(f"network_partition: {reason}")
    made: list[NetworkPartition] = []

    def make(cluster: KafkaTestCluster | None = None, broker: int | None = None) -> NetworkPartition:
        partition = NetworkPartition(cluster or request.getfixturevalue("kafka_cluster"), broker)
        made.append(partition)
        return partition

    yield make
    for partition in made:
        partition.close()
