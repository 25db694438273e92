"""Chaos faults around the nodes: topic growth, Kafka broker and ZooKeeper server kills, network cuts
and slow links (:mod:`laminar_kafka.devstack.netfaults.faults`), aborted transactions, a read-only or
full output, and the services of the ``s3-rest`` lake (:class:`~laminar_kafka.chaos.lake.LakeServices`):
the object store restarted or unreachable, the REST catalog restarted, unreachable or slow (through
the fault proxy in front of each: :mod:`laminar_kafka.devstack.netfaults.proxy`)."""
from __future__ import annotations

import socket
import time

from confluent_kafka.admin import NewPartitions

from laminar_kafka.chaos.fault_api import Fault, FaultContext, Injection, resolve_node
from laminar_kafka.chaos.lake import LakeServices
from laminar_kafka.chaos.plan import FaultEvent
from laminar_kafka.chaos.servers import ChaosError
from laminar_kafka.devstack.topics import create_topic
from laminar_kafka.kafka_source.clients import client_config, make_admin

__all__ = ["AbortBurst", "AddPartitions", "BrokerFreeze", "BrokerKill", "CatalogSlow", "LakeServiceCut", "LakeServiceRestart",
           "NetworkCut", "NewTopic", "OutputFault", "SlowLinks", "ZooKeeperKill"]


# --------------------------------------------------------------------------------------------------
# Topics


class AddPartitions(Fault):
    """Add ``count`` partitions to a random topic of the run (the producer writes to them at once)."""

    kind, role = "add-partitions", "topic"

    def inject(self, ctx: FaultContext, event: FaultEvent) -> Injection:
        topic = ctx.rng.choice(sorted(ctx.topics.partitions))
        old = ctx.topics.partitions[topic]
        new = old + int(event.number("count", 1))
        admin = make_admin(client_config(ctx.bootstrap))
        targets = ctx.highs()
        admin.create_partitions([NewPartitions(topic, new)], operation_timeout=30)[topic].result(60)
        at = time.monotonic()
        ctx.topics.partitions[topic] = new
        ctx.producer.add_partitions(topic, new)
        ctx.note(f"{topic}: partitions {old} -> {new}")
        return Injection(at, targets, {"topic": topic, "partitions": [old, new]},
                         new_partitions=[(topic, p) for p in range(old, new)])


class NewTopic(Fault):
    """Create the next ``<prefix>.t<k>`` topic (it matches the nodes' ``re:`` pattern)."""

    kind, role = "new-topic", "topic"

    def inject(self, ctx: FaultContext, event: FaultEvent) -> Injection:
        topic = ctx.topics.name(len(ctx.topics.partitions))
        count = int(event.number("partitions", 2))
        targets = ctx.highs()
        create_topic(ctx.bootstrap, topic, count, replication=ctx.replication)
        at = time.monotonic()
        ctx.topics.partitions[topic] = count
        ctx.producer.add_partitions(topic, count)
        ctx.note(f"created {topic} with {count} partition(s)")
        return Injection(at, targets, {"topic": topic, "partitions": count},
                         new_partitions=[(topic, p) for p in range(count)])


# --------------------------------------------------------------------------------------------------
# Servers


class BrokerKill(Fault):
    """SIGKILL a broker of the 3-broker cluster (``broker:leader``: the one leading most of the run's
    partitions), restart it after ``hold_s``."""

    kind, role = "broker-kill", "broker"

    def inject(self, ctx: FaultContext, event: FaultEvent) -> Injection:
        kafka = ctx.stack.kafka
        if kafka is None or len(kafka.brokers) < 3:
            raise ChaosError("broker-kill needs the 3-broker Kafka cluster")
        if event.target == "broker:leader":
            leaders = ctx.probe.broker_leaders(sorted(ctx.topics.partitions))
            index = (max(leaders, key=lambda b: leaders[b]) - 1) if leaders else 0
        else:
            index = int(event.target.split(":")[1])
        targets = ctx.highs()
        kafka.kill_broker(index)
        at = time.monotonic()
        ctx.note(f"SIGKILL broker {index + 1}")

        def heal() -> None:
            kafka.start_broker(index, 120.0)
            ctx.note(f"broker {index + 1} restarted")
        details: dict[str, object] = {"broker": index + 1, "leader": event.target == "broker:leader"}
        return Injection(at, targets, details, heal, event.hold_s)


class BrokerFreeze(Fault):
    """SIGSTOP a broker of the run (its sockets stay open, nothing answers), SIGCONT after ``hold_s``.
    A single KRaft broker frozen this long misses its controller heartbeats and is fenced for a
    moment; its next metadata answer lists no broker, which can leave a librdkafka client knowing
    none for good (:mod:`laminar_kafka.kafka_source.read.client_watch`)."""

    kind, role = "broker-freeze", "broker"

    def inject(self, ctx: FaultContext, event: FaultEvent) -> Injection:
        kafka = ctx.stack.kafka
        if kafka is None:
            raise ChaosError("broker-freeze needs the run's Kafka cluster")
        index = ctx.rng.randrange(len(kafka.brokers))
        targets = ctx.highs()
        kafka.pause_broker(index)
        at = time.monotonic()
        ctx.note(f"SIGSTOP broker {index + 1}")

        def heal() -> None:
            kafka.resume_broker(index)
            ctx.note(f"SIGCONT broker {index + 1}")
        return Injection(at, targets, {"broker": index + 1, "brokers": len(kafka.brokers)}, heal, event.hold_s)


def _zk_mode(port: int) -> str:
    """``leader`` / ``follower`` / ``standalone`` / '' from the ``srvr`` four-letter word."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=2.0) as sock:
            sock.sendall(b"srvr")
            data = b""
            while chunk := sock.recv(4096):
                data += chunk
    except OSError:
        return ""
    for line in data.decode(errors="replace").splitlines():
        if line.startswith("Mode:"):
            return line.split(":", 1)[1].strip()
    return ""


class ZooKeeperKill(Fault):
    """SIGKILL ZooKeeper server(s) of the 3-server ensemble, restart after ``hold_s``. One server
    (``zk:leader`` or ``zk:<i>``) keeps the quorum; two (``zk:<i>,<j>``) lose it until healed."""

    role = "zookeeper"

    def __init__(self, kind: str) -> None:
        self.kind = kind

    def inject(self, ctx: FaultContext, event: FaultEvent) -> Injection:
        ensemble = ctx.stack.zookeeper
        if ensemble is None or len(ensemble.servers) < 3:
            raise ChaosError(f"{self.kind} needs the 3-server ZooKeeper ensemble")
        spec = event.target.split(":")[1]
        if spec == "leader":
            modes = [_zk_mode(server.port) for server in ensemble.servers]
            indices = [modes.index("leader") if "leader" in modes else 0]
        else:
            indices = [int(i) for i in spec.split(",")]
        targets = ctx.highs()
        for index in indices:
            ensemble.kill_server(index)
        at = time.monotonic()
        ctx.note(f"SIGKILL ZooKeeper server(s) {[i + 1 for i in indices]}")

        def heal() -> None:
            for index in indices:
                ensemble.servers[index].start()
            for index in indices:
                ensemble.servers[index].wait_healthy(120.0)
            ctx.note(f"ZooKeeper server(s) {[i + 1 for i in indices]} restarted")
        details: dict[str, object] = {"servers": [i + 1 for i in indices], "quorum_lost": len(indices) >= 2}
        return Injection(at, targets, details, heal, event.hold_s)


# --------------------------------------------------------------------------------------------------
# Network (laminar_kafka.devstack.netfaults.faults), producer, output


class NetworkCut(Fault):
    """Cut one node from ZooKeeper only or Kafka only (its own namespace; the others are untouched)."""

    role = "node network"

    def __init__(self, kind: str, group: str) -> None:
        self.kind = kind
        self.group = group

    def inject(self, ctx: FaultContext, event: FaultEvent) -> Injection:
        victim = resolve_node(ctx, event.target)
        network = ctx.nodes.network(victim)
        targets = ctx.highs()
        network.cut(self.group, str(event.param("mode", "blackhole")))
        ctx.note(f"node {victim}: cut from {self.group} for {event.hold_s:.1f}s")

        def heal() -> None:
            network.heal(self.group)
            ctx.note(f"node {victim}: {self.group} healed")
        return Injection(time.monotonic(), targets, {"victim": victim, "group": self.group}, heal, event.hold_s,
                         targets_at_heal=self.group == "kafka")


class SlowLinks(Fault):
    """Added latency on one node's (or every node's) links to Kafka, ZooKeeper or both."""

    kind, role = "net-slow", "node network"

    def inject(self, ctx: FaultContext, event: FaultEvent) -> Injection:
        victims = ctx.nodes.running() if event.target == "node:all" else [resolve_node(ctx, event.target)]
        group = event.param("group")
        group_arg = None if group in (None, "all") else str(group)
        latency = event.number("latency_ms", 100.0)
        networks = [ctx.nodes.network(v) for v in victims]
        targets = ctx.highs()
        for network in networks:
            network.set_latency(latency, group_arg)
        ctx.note(f"nodes {victims}: +{latency:.0f} ms to {group} for {event.hold_s:.1f}s")

        def heal() -> None:
            for network in networks:
                network.set_latency(0.0, group_arg)
            ctx.note(f"nodes {victims}: latency removed")
        details: dict[str, object] = {"victims": victims, "latency_ms": latency, "group": group}
        return Injection(time.monotonic(), targets, details, heal, event.hold_s)


class AbortBurst(Fault):
    """The transactional producer aborts its next ``aborts`` transactions."""

    kind, role = "transactions", "producer"

    def inject(self, ctx: FaultContext, event: FaultEvent) -> Injection:
        if not ctx.producer.transactional:
            raise ChaosError("the transactions fault needs the transactional producer")
        count = int(event.number("aborts", 3))
        targets = ctx.highs()
        ctx.producer.request_aborts(count)
        ctx.note(f"producer aborts its next {count} transactions")
        return Injection(time.monotonic(), targets, {"aborts": count})


class OutputFault(Fault):
    """The output file system turns read-only (remount) or full (a ballast file), healed after ``hold_s``."""

    role = "output"

    def __init__(self, kind: str) -> None:
        self.kind = kind

    def inject(self, ctx: FaultContext, event: FaultEvent) -> Injection:
        mount = ctx.output
        if mount is None or not mount.mounted:
            raise ChaosError(f"{self.kind} needs the output on its own mount")
        targets = ctx.highs()
        if self.kind == "output-readonly":
            mount.make_readonly()
            details: dict[str, object] = {"mode": "read-only"}
            heal = mount.make_writable
        else:
            details = {"ballast_bytes": mount.fill()}
            heal = mount.free
        ctx.note(f"output {details} for {event.hold_s:.1f}s")

        def healed() -> None:
            heal()
            ctx.note("output healed")
        return Injection(time.monotonic(), targets, details, healed, event.hold_s)


# --------------------------------------------------------------------------------------------------
# The object store and the catalog (the s3-rest lake)


#: how long after a lake fault's heal a node's one-line failure is explained by it
LAKE_EXPLAINED_WINDOW_S = 30.0
#: the start of the one line a node fails with (a traceback's last line does not start so)
_ONE_LINE = "error: "


def _services(ctx: FaultContext, kind: str, hold_s: float) -> LakeServices:
    """The run's lake services; declares the exits the fault may cause by design: a node that cannot
    reach the object store (or the catalog) past its retries fails in one line (exit 1), and one
    restarted meanwhile refuses to start in one line (exit 2); the supervisor restarts both."""
    if ctx.services is None:
        raise ChaosError(f"{kind} needs the s3-rest lake (laminar-kafka chaos --lake s3-rest)")
    for code in (1, 2):
        ctx.nodes.expect_exits(kind, code, _ONE_LINE, hold_s + LAKE_EXPLAINED_WINDOW_S)
    return ctx.services


class LakeServiceRestart(Fault):
    """The object store (``store-restart``) or the catalog (``catalog-restart``) stopped (SIGKILL or
    SIGTERM: ``signal``), ``down_s`` later started again on its data at its address. The injection
    returns once it serves again (the object store: once an object written at start reads back)."""

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self.role = "object store" if kind == "store-restart" else "catalog"

    def inject(self, ctx: FaultContext, event: FaultEvent) -> Injection:
        services = _services(ctx, self.kind, event.number("down_s", 0.0))
        hard = event.param("signal") == "kill"
        down_s = event.number("down_s", 0.0)
        targets = ctx.highs()
        at = time.monotonic()
        restart = services.restart_store if self.kind == "store-restart" else services.restart_catalog
        took = restart(hard, down_s)
        details: dict[str, object] = {"signal": "SIGKILL" if hard else "SIGTERM", "down_s": round(took, 1)}
        ctx.note(f"{self.role} restarted ({details['signal']}, down {details['down_s']}s)")
        return Injection(at, targets, details)


class LakeServiceCut(Fault):
    """The object store (``store-unreachable``) or the catalog (``catalog-unreachable``) unreachable
    for ``hold_s`` through its proxy: ``mode`` ``blackhole`` (silence: requests hang, open ones
    freeze) or ``reset`` (refused at once). The nodes reach it only through the proxy, and the
    catalog reaches the object store through it too."""

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self.role = "object store" if kind == "store-unreachable" else "catalog"

    def inject(self, ctx: FaultContext, event: FaultEvent) -> Injection:
        services = _services(ctx, self.kind, event.hold_s)
        proxy = services.store_proxy if self.kind == "store-unreachable" else services.catalog_proxy
        mode = str(event.param("mode", "blackhole"))
        targets = ctx.highs()
        proxy.cut(mode)
        ctx.note(f"{self.role} unreachable ({mode}) for {event.hold_s:.1f}s")

        def heal() -> None:
            proxy.heal()
            ctx.note(f"{self.role} reachable again")
        return Injection(time.monotonic(), targets, {"mode": mode}, heal, event.hold_s)


class CatalogSlow(Fault):
    """Every exchange with the catalog delayed by ``latency_ms`` each way for ``hold_s``."""

    kind, role = "catalog-slow", "catalog"

    def inject(self, ctx: FaultContext, event: FaultEvent) -> Injection:
        proxy = _services(ctx, self.kind, event.hold_s).catalog_proxy
        latency = event.number("latency_ms", 250.0)
        targets = ctx.highs()
        proxy.set_latency(latency)
        ctx.note(f"catalog +{latency:.0f} ms each way for {event.hold_s:.1f}s")

        def heal() -> None:
            proxy.set_latency(0)
            ctx.note("catalog latency removed")
        return Injection(time.monotonic(), targets, {"latency_ms": latency}, heal, event.hold_s)
