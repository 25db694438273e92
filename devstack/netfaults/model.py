"""The pure part of the network fault layer: names, subnets, validation, endpoints, the error.

Contract: no I/O, no threads, no root. Everything here is deterministic and raises ValueError on
bad input (NetworkUnavailable is defined here only so every netfaults module shares one error
class; nothing here raises it). The other `devstack.netfaults_*` modules import from this one and
never the reverse:

- `namespace_name`, `host_interface_name`, `subnet_addresses`: how a node's name and index map to
  its namespace `<prefix><name>`, its host veth `<prefix><index>-<name>` (at most 15 characters)
  and its subnet 10.231.<index>.0/30.
- `validate_group`, `validate_mode`, `validate_latency`: the checks every fault entry point runs.
- `Endpoints`: the loopback server ports a node talks to, by server group (`GROUPS`).

Public names are re-exported by :mod:`laminar_kafka.devstack.netfaults.faults`, the entry point to import from.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any, Iterable

from laminar_kafka.devstack.errors import DevStackError

GROUPS: tuple[str, ...] = ("kafka", "zookeeper", "other")
"""Server groups a fault applies to: Kafka brokers, ZooKeeper servers, and any other relayed port."""
MODES: tuple[str, ...] = ("blackhole", "reset")
"""How `cut` treats connections: freeze them silently (a real partition) or reset them (fail fast)."""

DEFAULT_PREFIX = "lk-"
SUBNET_BASE = "10.231"
MAX_INDEX = 255
IFNAME_MAX = 15  # IFNAMSIZ - 1
INNER_INTERFACE = "veth0"

_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
_NAME_MAX = 48
CONTROL_TIMEOUT_S = 15.0  # longest wait for a cross-thread control call (relay loop, setns thread)


class NetworkUnavailable(DevStackError):
    """Network namespaces (or the relay inside one) cannot be set up here; the message is one line."""


# --------------------------------------------------------------------------------------------------
# Names, addresses, validation, endpoints


def namespace_name(name: str, prefix: str = DEFAULT_PREFIX) -> str:
    """The namespace of node `name`: `<prefix><name>` (`lk-node-1`)."""
    _check_name(name)
    return f"{prefix}{name}"


def host_interface_name(name: str, index: int, prefix: str = DEFAULT_PREFIX) -> str:
    """The host end of the node's veth pair: `<prefix><index>-<name>`, cut to 15 characters.

    The index makes it unique among live networks (two live networks never share an index: they
    would share a subnet); the name is there for people reading `ip link`.
    """
    _check_name(name)
    check_index(index)
    candidate = f"{prefix}{index}-{name}"[:IFNAME_MAX]
    return candidate.rstrip("-.") or candidate


def subnet_addresses(index: int) -> tuple[str, str, str]:
    """(host address, node address, subnet) of index i: 10.231.i.1, 10.231.i.2, 10.231.i.0/30."""
    check_index(index)
    return f"{SUBNET_BASE}.{index}.1", f"{SUBNET_BASE}.{index}.2", f"{SUBNET_BASE}.{index}.0/30"



def validate_group(group: str) -> str:
    if group not in GROUPS:
        raise ValueError(f"unknown server group {group!r}: expected one of {', '.join(GROUPS)}")
    return group


def validate_mode(mode: str) -> str:
    if mode not in MODES:
        raise ValueError(f"unknown cut mode {mode!r}: expected one of {', '.join(MODES)}")
    return mode


def validate_latency(ms: float) -> float:
    if isinstance(ms, bool) or not isinstance(ms, (int, float)) or not math.isfinite(ms) or ms < 0:
        raise ValueError(f"latency must be a finite number of milliseconds >= 0, not {ms!r}")
    return float(ms)


def _check_name(name: str) -> None:
    if not isinstance(name, str) or not _NAME_RE.match(name) or len(name) > _NAME_MAX:
        raise ValueError(
            f"invalid node network name {name!r}: 1-{_NAME_MAX} characters of A-Z a-z 0-9 _ . -, "
            "starting with a letter or digit"
        )


def check_index(index: int) -> None:
    """Raise ValueError unless ``index`` is a network index (an int in 0..MAX_INDEX)."""
    if isinstance(index, bool) or not isinstance(index, int) or not 0 <= index <= MAX_INDEX:
        raise ValueError(f"network index must be an integer 0..{MAX_INDEX}, not {index!r}")


def _check_ports(label: str, ports: Iterable[int]) -> tuple[int, ...]:
    result = tuple(ports)
    for port in result:
        if isinstance(port, bool) or not isinstance(port, int) or not 1 <= port <= 65535:
            raise ValueError(f"{label}: invalid TCP port {port!r}")
    if len(set(result)) != len(result):
        raise ValueError(f"{label}: duplicate ports in {result}")
    return result


_LOOPBACK_HOSTS = {"127.0.0.1", "localhost"}


def _loopback_ports(hosts: str, label: str) -> tuple[int, ...]:
    ports: list[int] = []
    for item in hosts.split("/", 1)[0].split(","):  # a ZooKeeper chroot follows the first '/'
        item = item.strip()
        if not item:
            continue
        host, sep, port = item.rpartition(":")
        if not sep or host not in _LOOPBACK_HOSTS or not port.isdigit():
            raise ValueError(f"{label}: {item!r} is not 127.0.0.1:<port> (only loopback servers can be relayed)")
        if int(port) not in ports:
            ports.append(int(port))
    return tuple(ports)


@dataclass(frozen=True)
class Endpoints:
    """The server ports a node talks to, all on 127.0.0.1 of the host.

    `extra_ports` (group "other") are relayed too, so a node in a namespace can still reach, say, an
    S3 server or a schema registry on the host's loopback; they are faulted only when cut by name.
    """

    kafka_ports: tuple[int, ...] = ()
    zookeeper_ports: tuple[int, ...] = ()
    extra_ports: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        kafka = _check_ports("kafka_ports", self.kafka_ports)
        zookeeper = _check_ports("zookeeper_ports", self.zookeeper_ports)
        extra = _check_ports("extra_ports", self.extra_ports)
        object.__setattr__(self, "kafka_ports", kafka)
        object.__setattr__(self, "zookeeper_ports", zookeeper)
        object.__setattr__(self, "extra_ports", extra)
        seen: dict[int, str] = {}
        for group, ports in self.by_group().items():
            for port in ports:
                if port in seen:
                    raise ValueError(f"port {port} is in both {seen[port]} and {group}")
                seen[port] = group

    @classmethod
    def from_hosts(cls, bootstrap: str = "", zk_hosts: str = "", extra_ports: Iterable[int] = ()) -> Endpoints:
        """From connection strings: `127.0.0.1:9092,127.0.0.1:9093` and `127.0.0.1:2181[/chroot]`."""
        return cls(
            _loopback_ports(bootstrap, "bootstrap"), _loopback_ports(zk_hosts, "zk_hosts"), tuple(extra_ports)
        )

    @classmethod
    def from_stack(cls, stack: Any) -> Endpoints:
        """From a `laminar_kafka.devstack.stack.DevStack` (its brokers' and ZooKeeper servers' client ports)."""
        return cls.from_hosts(stack.bootstrap, stack.zk_hosts)

    def by_group(self) -> dict[str, tuple[int, ...]]:
        return {"kafka": self.kafka_ports, "zookeeper": self.zookeeper_ports, "other": self.extra_ports}

    def group_of(self, port: int) -> str | None:
        for group, ports in self.by_group().items():
            if port in ports:
                return group
        return None

    def merged(self, other: Endpoints) -> Endpoints:
        """These endpoints plus `other`'s new ports (a port keeps its group; a conflict is an error)."""
        combined = {g: list(p) for g, p in self.by_group().items()}
        for group, ports in other.by_group().items():
            for port in ports:
                existing = self.group_of(port)
                if existing is None:
                    combined[group].append(port)
                elif existing != group:
                    raise ValueError(f"port {port} is already relayed as {existing}, not {group}")
        return Endpoints(tuple(combined["kafka"]), tuple(combined["zookeeper"]), tuple(combined["other"]))
