"""`NetworkPartition`: cut one client off from the Kafka brokers (or from one broker) while the
test itself and every other client keep talking to them.

It is the dev stack's network fault layer (`laminar_kafka.devstack.netfaults`): a network namespace
whose 127.0.0.1:<broker port> listeners relay, through this process, to the real brokers; faults
act on that relay. The client lives inside the namespace: a subprocess started with `wrap(argv)`,
or an in-process client made by `inside(factory)` (a librdkafka client's threads stay in the
namespace they were created in). Needs Linux, root and the ``ip`` command (iproute2):
`partition_available()` says whether this host has them.
"""
from __future__ import annotations

import itertools
import os
from collections.abc import Callable
from typing import TypeVar

from laminar_kafka.testing.handles import KafkaTestCluster

__all__ = ["NetworkPartition", "partition_available", "partition_endpoints"]

_T = TypeVar("_T")
#: namespaces and interfaces this plugin makes start with it (the netfaults cleanup finds leftovers)
PREFIX = "lkp-"
_counter = itertools.count(1)


def partition_available() -> tuple[bool, str]:
    """(True, "") when this host can make network namespaces; else (False, one-line reason)."""
    from laminar_kafka.devstack.netfaults.host import network_faults_available

    return network_faults_available()


def partition_endpoints(broker_ports: tuple[int, ...], broker: int | None) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """(ports relayed as the "kafka" group, ports relayed as the "other" group): every broker is
    relayed; with `broker` (an index), that broker alone is in "other", so a cut of "other" cuts
    the client from it and no other. Pure; IndexError for an index the cluster has not."""
    if broker is None:
        return broker_ports, ()
    target = broker_ports[broker]
    return tuple(port for port in broker_ports if port != target), (target,)


class NetworkPartition:
    """A client's private network to `cluster` (to all its brokers; `cut()` cuts them all, or only
    broker `broker` when given). Made and closed by the `network_partition` fixture."""

    def __init__(self, cluster: KafkaTestCluster, broker: int | None = None) -> None:
        from laminar_kafka.devstack.netfaults.faults import Endpoints, NodeNetwork, unused_index

        kafka_ports, other_ports = partition_endpoints(tuple(b.port for b in cluster.brokers), broker)
        self._group = "kafka" if broker is None else "other"
        self.cluster = cluster
        self._network = NodeNetwork(f"p{os.getpid()}-{next(_counter)}", Endpoints(kafka_ports, (), other_ports),
                                    unused_index(), prefix=PREFIX)
        self._network.start()

    def wrap(self, argv: list[str]) -> list[str]:
        """The argv that runs `argv` inside the partition's network (``ip netns exec``)."""
        return self._network.wrap(argv)

    def inside(self, factory: Callable[[], _T]) -> _T:
        """Call `factory` in a thread that entered the partition's network and return what it made
        (a confluent_kafka Producer or Consumer: its network threads stay inside)."""
        from laminar_kafka.devstack.netfaults.namespaces import in_namespace

        return in_namespace(self._network.namespace, factory)

    def cut(self, mode: str = "blackhole") -> None:
        """Partition the client: "blackhole" freezes its connections (timeouts, as a real partition),
        "reset" resets them and refuses new ones. In force when this returns."""
        self._network.cut(self._group, mode)

    def heal(self) -> None:
        """Undo `cut()`: frozen connections resume where they stopped."""
        self._network.heal(self._group)

    def set_latency(self, ms: float) -> None:
        """Delay every forwarded chunk by `ms` milliseconds each way (0: none)."""
        self._network.set_latency(ms, self._group)

    def close(self) -> None:
        """Remove the network (idempotent; processes still inside are left with no route)."""
        self._network.close()
