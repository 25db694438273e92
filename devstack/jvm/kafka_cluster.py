"""Apache Kafka on loopback as local JVM processes: KRaft (combined broker+controller nodes), or,
for Kafka 3.x, ZooKeeper-mode brokers, with fault controls (`KafkaCluster`).

Which releases run is `laminar_kafka.devstack.jvm.versions`' choice (the POM's pins by default).
`new_kafka_cluster` writes the brokers' configurations under a base directory and picks free
loopback ports. A Kafka cluster is healthy when every broker answers a metadata request listing all
brokers (`kafka_healthy`).

A cluster made with `security` (a `laminar_kafka.devstack.security.SecurityMaterial`) has, on every broker, besides
its PLAINTEXT listener (inter-broker traffic and the health probe, on loopback), a `SASL_SSL`
listener (SCRAM-SHA-512 users created at format time) and an `SSL` listener that requires a client
certificate (mTLS): `KafkaCluster.sasl_ssl_bootstrap` and `ssl_bootstrap`.
"""
from __future__ import annotations

import base64
import functools
import subprocess
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from laminar_kafka.devstack.errors import ServerStartError
from laminar_kafka.devstack.jvm.java import java_executable
from laminar_kafka.devstack.jvm.servers import JvmServer, ServerGroup, java_options, write_properties
from laminar_kafka.devstack.jvm.versions import ServerVersions, selected_versions
from laminar_kafka.devstack.processes import free_port, port_accepts

if TYPE_CHECKING:
    from laminar_kafka.devstack.security import SecurityMaterial

__all__ = ["KafkaCluster", "kafka_healthy", "new_cluster_id", "new_kafka_cluster"]


def kafka_healthy(bootstrap: str, broker_count: int, secure_ports: tuple[int, ...] = ()) -> bool:
    """Every broker answers a metadata request listing all brokers (on the PLAINTEXT listener), and
    every port of `secure_ports` accepts connections."""
    from laminar_kafka.kafka_source.clients import KafkaClientConfig, make_admin

    if not all(port_accepts(port) for port in secure_ports):
        return False
    admin = make_admin(KafkaClientConfig(bootstrap), {"log_level": 0, "socket.timeout.ms": 2000})
    try:
        metadata = admin.list_topics(timeout=2)
    except Exception:  # noqa: BLE001 - any failure here just means "not healthy yet"
        return False
    return len(metadata.brokers) >= broker_count


@dataclass
class KafkaCluster(ServerGroup):
    """A Kafka cluster on loopback: KRaft (combined broker+controller nodes), or, for Kafka 3.x,
    ZooKeeper-mode brokers (`versions.kafka_mode`).

    One node: replication 1. Three nodes: replication 3 and min.insync.replicas 2, for fault tests.
    """

    brokers: list[JvmServer]
    #: the KRaft cluster id ('' for ZooKeeper-mode brokers, whose id Kafka keeps in ZooKeeper)
    cluster_id: str
    security: SecurityMaterial | None = None
    #: (SASL_SSL port, SSL port) of each broker, when `security` is set.
    secure_ports: list[tuple[int, int]] = field(default_factory=list)
    #: the Kafka release and mode the brokers run (None: made by hand, the POM's pins)
    versions: ServerVersions | None = None
    #: ZooKeeper-mode brokers: the hosts and chroot they register under ('' with KRaft)
    zookeeper_connect: str = ""

    @property
    def members(self) -> list[JvmServer]:
        return self.brokers

    @property
    def bootstrap(self) -> str:
        """The PLAINTEXT listeners."""
        return ",".join(f"127.0.0.1:{broker.port}" for broker in self.brokers)

    @property
    def sasl_ssl_bootstrap(self) -> str:
        """The SASL_SSL (SCRAM-SHA-512) listeners ('' without security)."""
        return ",".join(f"127.0.0.1:{sasl_ssl}" for sasl_ssl, _ in self.secure_ports)

    @property
    def ssl_bootstrap(self) -> str:
        """The SSL listeners that require a client certificate ('' without security)."""
        return ",".join(f"127.0.0.1:{ssl}" for _, ssl in self.secure_ports)

    kill_broker = ServerGroup.kill
    start_broker = ServerGroup.start_member
    restart_broker = ServerGroup.restart
    pause_broker = ServerGroup.pause
    resume_broker = ServerGroup.resume


def new_cluster_id() -> str:
    """A KRaft cluster id: 16 random bytes, URL-safe base64 without padding, as Kafka's
    `Uuid.randomUuid()` makes them; like Kafka, never one that starts with '-' (a command line would
    read it as an option)."""
    while True:
        cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not cluster_id.startswith("-"):
            return cluster_id


def _listener_properties(port: int, controller_port: int | None, secure: tuple[int, int] | None) -> dict[str, object]:
    """The listeners of one broker: PLAINTEXT (+ SASL_SSL and SSL when `secure`), and the KRaft
    CONTROLLER listener unless `controller_port` is None (a ZooKeeper-mode broker has none)."""
    listeners = f"PLAINTEXT://127.0.0.1:{port}"
    protocols = "PLAINTEXT:PLAINTEXT"
    if secure is not None:
        listeners += f",SASL_SSL://127.0.0.1:{secure[0]},SSL://127.0.0.1:{secure[1]}"
        protocols += ",SASL_SSL:SASL_SSL,SSL:SSL"
    values: dict[str, object] = {
        "listeners": listeners,
        "advertised.listeners": listeners,
        "inter.broker.listener.name": "PLAINTEXT",
        "listener.security.protocol.map": protocols,
    }
    if controller_port is not None:
        values["listeners"] = f"{listeners},CONTROLLER://127.0.0.1:{controller_port}"
        values["controller.listener.names"] = "CONTROLLER"
        values["listener.security.protocol.map"] = f"{protocols},CONTROLLER:PLAINTEXT"
    return values


def _kraft_node_properties(node_id: int, voters: str) -> dict[str, object]:
    """A combined broker+controller KRaft node with a static voter set (`controller.quorum.voters`):
    Kafka 3.9 and 4.x read it alike, and format its storage without --standalone or
    --initial-controllers (those are for a dynamic quorum)."""
    return {
        "process.roles": "broker,controller",
        "node.id": node_id,
        "controller.quorum.voters": voters,
        "broker.heartbeat.interval.ms": 500,
        "broker.session.timeout.ms": 3000,
    }


def _zookeeper_broker_properties(broker_id: int, zookeeper_connect: str) -> dict[str, object]:
    """A ZooKeeper-mode broker (Kafka 3.x): `broker.id` and `zookeeper.connect`, no `process.roles`.
    The broker creates the chroot of `zookeeper_connect` on first start; its storage needs no format."""
    return {
        "broker.id": broker_id,
        "zookeeper.connect": zookeeper_connect,
        "zookeeper.session.timeout.ms": 10000,
        "zookeeper.connection.timeout.ms": 30000,  # ZooKeeper may start beside the broker, as in DevStack
    }


def _shared_broker_properties(data_dir: Path, broker_count: int, versions: ServerVersions) -> dict[str, object]:
    """Every broker's storage, replication and timing settings, whatever its mode.

    One broker: replication 1. Three: replication 3 and min.insync.replicas 2. The share-group
    coordinator's settings exist from Kafka 4.0 on and are written only there.
    """
    replication = broker_count
    min_isr = 2 if broker_count == 3 else 1
    values: dict[str, object] = {
        "log.dirs": data_dir,
        "num.partitions": 1,
        "default.replication.factor": replication,
        "min.insync.replicas": min_isr,
        "offsets.topic.replication.factor": replication,
        "offsets.topic.num.partitions": 10,
        "transaction.state.log.replication.factor": replication,
        "transaction.state.log.min.isr": min_isr,
        "transaction.state.log.num.partitions": 4,
        "group.initial.rebalance.delay.ms": 0,
        "auto.create.topics.enable": "false",
        "num.network.threads": 2,
        "num.io.threads": 4,
        "log.retention.check.interval.ms": 1000,
        "log.segment.delete.delay.ms": 500,
        "log.initial.task.delay.ms": 1000,
    }
    if versions.share_groups:
        values["share.coordinator.state.topic.replication.factor"] = replication
        values["share.coordinator.state.topic.min.isr"] = min_isr
    return values


def _format_kraft_storage(classpath: str, cluster_id: str, properties: Path, extra_arguments: list[str]) -> None:
    """`kafka.tools.StorageTool format` (the same class and flags in Kafka 3.9 and 4.x); raises
    ServerStartError with its output when it fails."""
    format_command = [
        java_executable(), "-Xmx256m", "-cp", classpath, "kafka.tools.StorageTool",
        "format", f"--cluster-id={cluster_id}", "--config", str(properties), "--ignore-formatted",
        *extra_arguments,
    ]
    result = subprocess.run(format_command, capture_output=True, text=True, stdin=subprocess.DEVNULL)
    if result.returncode != 0:
        raise ServerStartError(f"formatting KRaft storage failed:\n{(result.stdout + result.stderr)[-3000:]}")


def new_kafka_cluster(
    lib_dir: Path, base_dir: Path, broker_count: int = 1, security: SecurityMaterial | None = None, *,
    versions: ServerVersions | None = None, zookeeper_connect: str | None = None,
) -> KafkaCluster:
    """Write configurations for `broker_count` brokers under `base_dir`; KRaft nodes get their storage formatted.

    `versions` (default: `selected_versions()`, the POM's pins unless the environment chooses others)
    says which Kafka `lib_dir` holds and in which mode its brokers run. KRaft (any supported Kafka):
    combined broker+controller nodes. ZooKeeper mode (Kafka 3.x only): brokers registered under
    `zookeeper_connect` (hosts plus a chroot, e.g. ``127.0.0.1:2181/kafka``), which is then required;
    with KRaft it must be None. With `security` (KRaft only), every broker also gets the SASL_SSL and
    mTLS listeners (see the module doc) and its storage is formatted with the SCRAM user of `security`.
    Raises ValueError for a combination it cannot run.
    """
    from laminar_kafka.devstack.security import broker_properties, scram_format_arguments

    if broker_count not in (1, 3):
        raise ValueError("broker_count must be 1 or 3")
    chosen = versions or selected_versions()
    if chosen.zookeeper_mode and not zookeeper_connect:
        raise ValueError(f"{chosen.describe()}: ZooKeeper-mode brokers need zookeeper_connect")
    if not chosen.zookeeper_mode and zookeeper_connect:
        raise ValueError(f"{chosen.describe()}: zookeeper_connect is only for ZooKeeper-mode brokers")
    if chosen.zookeeper_mode and security is not None:
        raise ValueError("the secured listeners (SCRAM users made at format time) need KRaft brokers")
    classpath = f"{lib_dir}/*"
    cluster_id = "" if chosen.zookeeper_mode else new_cluster_id()
    ports = [(free_port(), None if chosen.zookeeper_mode else free_port()) for _ in range(broker_count)]
    secure_ports = [(free_port(), free_port()) for _ in range(broker_count)] if security else []
    scram_arguments = scram_format_arguments(security.user) if security else []
    voters = ",".join(f"{i + 1}@127.0.0.1:{controller}" for i, (_, controller) in enumerate(ports))
    bootstrap = ",".join(f"127.0.0.1:{port}" for port, _ in ports)
    secure = tuple(port for pair in secure_ports for port in pair)
    brokers: list[JvmServer] = []
    for index, (port, controller_port) in enumerate(ports):
        workdir = base_dir / f"kafka-{index + 1}"
        (workdir / "data").mkdir(parents=True, exist_ok=True)
        properties = workdir / "server.properties"
        if chosen.zookeeper_mode:
            assert zookeeper_connect is not None
            mode_properties = _zookeeper_broker_properties(index + 1, zookeeper_connect)
        else:
            mode_properties = _kraft_node_properties(index + 1, voters)
        write_properties(properties, {
            **mode_properties,
            **_listener_properties(port, controller_port, secure_ports[index] if security else None),
            **(broker_properties(security) if security else {}),
            **_shared_broker_properties(workdir / "data", broker_count, chosen),
        })
        if not chosen.zookeeper_mode:
            _format_kraft_storage(classpath, cluster_id, properties, scram_arguments)
        brokers.append(JvmServer(
            name=f"kafka-{index + 1}",
            main_class="kafka.Kafka",  # the broker's entry point in Kafka 3.9 and 4.x, either mode
            args=[str(properties)],
            workdir=workdir,
            classpath=classpath,
            port=port,
            health=functools.partial(kafka_healthy, bootstrap, broker_count, secure),
            jvm_options=java_options("1g"),
        ))
    return KafkaCluster(brokers=brokers, cluster_id=cluster_id, security=security, secure_ports=secure_ports,
                        versions=chosen, zookeeper_connect=zookeeper_connect or "")
