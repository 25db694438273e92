"""What the plugin's server fixtures yield: handles on a Kafka cluster, a ZooKeeper and an object store.

A handle holds addresses and fault controls; it never starts or stops the servers themselves (the
session fixtures in :mod:`laminar_kafka.testing.plugin` do). Client libraries (confluent_kafka,
kazoo, pyiceberg) are imported when a method needs them, never when this module is imported.
"""
from __future__ import annotations

import contextlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from confluent_kafka.admin import AdminClient
    from kazoo.client import KazooClient
    from pyiceberg.catalog import Catalog

__all__ = ["Broker", "KafkaTestCluster", "ObjectStore", "ServerGroup", "ZooKeeperServer", "ZooKeeperTestEnsemble"]


class ServerGroup(Protocol):
    """The fault controls, by member index, that the dev stack's clusters (local processes) and its
    container groups both offer (`laminar_kafka.devstack.jvm.servers.ServerGroup`,
    `laminar_kafka.devstack.containers.servers.ContainerGroup`)."""

    def kill(self, index: int = 0) -> None: ...
    def start_member(self, index: int = 0, timeout: float = ...) -> None: ...
    def restart(self, index: int = 0, timeout: float = ...) -> None: ...
    def pause(self, index: int = 0) -> None: ...
    def resume(self, index: int = 0) -> None: ...


@dataclass(frozen=True)
class _Member:
    """One server of a group: `index` in the group, `port` its client port on 127.0.0.1."""

    group: ServerGroup = field(repr=False)
    index: int
    port: int

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def kill(self) -> None:
        """SIGKILL, as a crash would; returns once the server is gone. `start()` brings it back."""
        self.group.kill(self.index)

    def start(self, timeout: float = 90.0) -> None:
        """Start a killed server again (same port, same data); returns once it serves clients."""
        self.group.start_member(self.index, timeout)

    def restart(self, timeout: float = 90.0) -> None:
        """A graceful stop, then `start()`: returns once the server serves clients again."""
        self.group.restart(self.index, timeout)

    def pause(self) -> None:
        """Freeze the server (SIGSTOP, or the container's freezer): its port stays open, nothing answers."""
        self.group.pause(self.index)

    def resume(self) -> None:
        """Undo `pause()`."""
        self.group.resume(self.index)


class Broker(_Member):
    """One Kafka broker of a `KafkaTestCluster` (`index` from 0; its node id is ``index + 1``)."""


class ZooKeeperServer(_Member):
    """One ZooKeeper server of the `zookeeper` fixture."""


@dataclass(frozen=True)
class KafkaTestCluster:
    """A running Kafka cluster: its bootstrap servers, client settings and brokers.

    `client_settings` are the librdkafka settings every client needs besides ``bootstrap.servers``
    (empty for a plain cluster; SASL_SSL settings for the secured one). `mtls_settings` (the secured
    cluster only) reach the brokers' mTLS listeners at `mtls_bootstrap`.
    """

    bootstrap: str
    brokers: tuple[Broker, ...]
    backend: str
    client_settings: Mapping[str, str] = field(default_factory=dict)
    mtls_bootstrap: str = ""
    mtls_settings: Mapping[str, str] = field(default_factory=dict)

    @property
    def replication(self) -> int:
        """The replication factor topics get by default (1, or 3 on a three-broker cluster)."""
        return 3 if len(self.brokers) >= 3 else 1

    def config(self, **overrides: Any) -> dict[str, Any]:
        """A librdkafka configuration for any client: ``bootstrap.servers``, `client_settings`, then
        `overrides` (dots spelled as underscores are turned back: ``group_id=`` is ``group.id``)."""
        extra = {key.replace("_", "."): value for key, value in overrides.items()}
        return {"bootstrap.servers": self.bootstrap, **self.client_settings, **extra}

    def admin(self) -> AdminClient:
        """A new confluent_kafka AdminClient of this cluster."""
        from confluent_kafka.admin import AdminClient

        return AdminClient(self.config())

    def create_topic(
        self, name: str, partitions: int = 1, *, replication: int | None = None,
        config: Mapping[str, str] | None = None, timeout: float = 30.0,
    ) -> str:
        """Create topic `name` and return it once every partition has a leader. `replication`
        defaults to `replication`. Raises the broker's error (the topic exists, say)."""
        from laminar_kafka.devstack.topics import create_topic
        from laminar_kafka.kafka_source.clients import KafkaClientConfig

        create_topic(KafkaClientConfig(self.bootstrap, dict(self.client_settings)), name, partitions, timeout,
                     replication=replication or self.replication, config=config)
        return name

    def delete_topic(self, name: str, timeout: float = 30.0) -> None:
        """Delete topic `name` and wait for the broker to confirm."""
        self.admin().delete_topics([name], operation_timeout=timeout)[name].result(timeout)

    def topics(self) -> set[str]:
        """The names of the cluster's topics (internal ones included)."""
        return set(self.admin().list_topics(timeout=10).topics)

    def wait_in_sync(self, topic: str, timeout: float = 60.0) -> None:
        """Return once every partition of `topic` has all its replicas in sync, as the brokers'
        metadata says: after a broker came back (`Broker.start`), the next fault then meets a full
        ISR, not one still short of the returned broker. Raises TimeoutError naming the partitions
        still short after `timeout` seconds."""
        import time

        admin, deadline = self.admin(), time.monotonic() + timeout
        while True:
            info = admin.list_topics(topic, timeout=10).topics.get(topic)
            partitions = info.partitions if info is not None and info.error is None else {}
            short = {p.id: (sorted(p.isrs), sorted(p.replicas)) for p in partitions.values()
                     if sorted(p.isrs) != sorted(p.replicas)}
            if partitions and not short:
                return
            if time.monotonic() >= deadline:
                found = ", ".join(f"partition {i} in sync {isr} of {rep}" for i, (isr, rep) in sorted(short.items()))
                raise TimeoutError(f"topic {topic!r} not in sync after {timeout:g}s: {found or 'no partitions known'}")
            time.sleep(0.2)


@dataclass
class ZooKeeperTestEnsemble:
    """A running ZooKeeper: its connection string, its servers, and a kazoo client factory.

    Clients made by `client()` are stopped and closed when the session ends (or by `close_clients`).
    """

    hosts: str
    servers: tuple[ZooKeeperServer, ...]
    backend: str
    _clients: list[Any] = field(default_factory=list, repr=False)

    def client(self, chroot: str = "", *, timeout: float = 10.0, **kazoo_options: Any) -> KazooClient:
        """A started kazoo client of this ZooKeeper (under `chroot`, e.g. ``"/my-test"``, when given:
        created if missing). `kazoo_options` go to ``KazooClient``."""
        from kazoo.client import KazooClient

        if chroot:
            root = KazooClient(hosts=self.hosts, timeout=timeout)
            root.start(timeout=timeout)
            try:
                root.ensure_path(chroot)
            finally:
                root.stop()
                root.close()
        client = KazooClient(hosts=self.hosts + chroot, timeout=timeout, **kazoo_options)
        client.start(timeout=timeout)
        self._clients.append(client)
        return client

    def close_clients(self) -> None:
        """Stop and close every client `client()` made (teardown)."""
        while self._clients:
            client = self._clients.pop()
            with contextlib.suppress(Exception):
                client.stop()
                client.close()


@dataclass(frozen=True)
class ObjectStore:
    """A running S3 store (SeaweedFS) with an Iceberg REST catalog.

    `endpoint`, `region`, `access_key_id` and `secret_access_key` reach the S3 API; `bucket` exists
    already (keep tests apart by prefixes, or make buckets with `create_bucket`). `catalog_uri` is
    the Iceberg REST catalog; its tables live in the table bucket `warehouse`.
    """

    endpoint: str
    region: str
    access_key_id: str
    secret_access_key: str = field(repr=False)
    bucket: str = ""
    catalog_uri: str = ""
    warehouse: str = ""
    catalog_settings: Mapping[str, str] = field(default_factory=dict, repr=False)
    _access: Any = field(default=None, repr=False, compare=False)

    def env(self) -> dict[str, str]:
        """The ``AWS_*`` variables (endpoint, region, credentials) that point S3 clients here."""
        return {
            "AWS_ENDPOINT_URL": self.endpoint, "AWS_REGION": self.region, "AWS_DEFAULT_REGION": self.region,
            "AWS_ACCESS_KEY_ID": self.access_key_id, "AWS_SECRET_ACCESS_KEY": self.secret_access_key,
        }

    def uri(self, key: str = "", bucket: str | None = None) -> str:
        """``s3://<bucket>/<key>`` (default bucket: `bucket`)."""
        return f"s3://{bucket or self.bucket}/{key}".rstrip("/") if key else f"s3://{bucket or self.bucket}"

    def create_bucket(self, name: str) -> str:
        """Create bucket `name` (nothing happens when it exists); returns the name."""
        self._access.create_bucket(name)
        return name

    def catalog(self, name: str = "test", **properties: str) -> Catalog:
        """A pyiceberg REST catalog of `catalog_uri`, with the S3 settings its FileIO needs;
        `properties` add to or replace them."""
        from pyiceberg.catalog.rest import RestCatalog

        settings = {
            "uri": self.catalog_uri, **self.catalog_settings,
            "s3.endpoint": self.endpoint, "s3.region": self.region,
            "s3.access-key-id": self.access_key_id, "s3.secret-access-key": self.secret_access_key,
            **properties,
        }
        return RestCatalog(name, **settings)
