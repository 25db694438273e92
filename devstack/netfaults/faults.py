"""Network faults for one node process: partitions from ZooKeeper or Kafka only, and slow links.

`tc netem` is not available on our machines, so faults are applied by a TCP relay we control, and
network namespaces make the relay unavoidable for exactly one process tree while every other node
and the test's own clients keep talking to the servers directly.

How a `NodeNetwork` is wired::

    namespace lk-<name>                              host namespace (the servers, every other client)
    +-------------------------------+               +------------------------------------------+
    | node process (`wrap(argv)`)   |               |                                          |
    |   -> 127.0.0.1:<broker port>  |  listener     |  relay thread (this process) connects to |
    |   -> 127.0.0.1:<zk port>      |--sockets----->|  127.0.0.1:<same port> = the real server |
    |  lo up                        |  (made in the |  faults applied here, per server group   |
    |  veth0 10.231.<i>.2/30 -------+--namespace)---+- lk-<i>-<name> 10.231.<i>.1/30           |
    +-------------------------------+               +------------------------------------------+

- Inside the namespace, 127.0.0.1 is the namespace's own loopback. For every server port (each
  Kafka broker's advertised port, each ZooKeeper client port) a listening socket is created *inside*
  the namespace on 127.0.0.1:<port> (a short-lived thread enters the namespace with setns(2), makes
  and binds the socket, and exits; a socket keeps the namespace it was made in). The node therefore
  reaches every server at exactly the address the server advertises.
- The relay itself runs in this process's namespace: one asyncio event loop per `NodeNetwork`, in a
  daemon thread, accepts on those listeners and connects to 127.0.0.1:<port> on the host. So there
  is a single relay hop (no second relay on the veth), and nothing outside this process can leak
  relays: if the controlling process dies, the listeners die with it.
- The veth pair is not on the relay path. It gives the host a route to services the node serves on
  0.0.0.0 (Prometheus metrics: `http://<node_address>:<port>/metrics`) and pins the subnet chosen
  by `index`.

Faults, per (node, server group), applied by the relay:

- `cut(group, "blackhole")`: what a real partition looks like. Established connections freeze: no
  byte is forwarded in either direction, nothing is closed, so clients see timeouts, not errors, and
  servers see silence (a ZooKeeper session expires on the server). New connections are accepted (the
  TCP handshake is the namespace kernel's) and then hear nothing; one whose client gives up before
  the heal is dropped without ever reaching the server. `heal()` resumes every frozen connection
  where it stopped, in order, and connects the waiting ones, as a healed network would.
- `cut(group, "reset")`: every connection of the group is reset (RST to both ends), and new ones
  are accepted and reset at once, so clients fail fast.
- `set_latency(ms)`: each forwarded chunk waits `ms` after it was read, in each direction (a round
  trip gains 2 x ms), order preserved and without limiting throughput (pipelined, like netem delay).

Bookkeeping for crashes: before creating a namespace, an owner record (pid and process start time)
is written to /run/laminar-netfaults/<namespace>.json; `cleanup_stale()` removes namespaces and
veths whose owner is gone. Normal exits (including exceptions and `sys.exit`) close every open
`NodeNetwork` through atexit; a SIGKILLed campaign leaves its namespaces for `cleanup_stale()`.

Needs root and the `ip` command (Debian package iproute2); nothing else (no iptables, no netem).

The layer is split by concern; this module is its entry point and re-exports the public API:

- :mod:`laminar_kafka.devstack.netfaults.model`: names, subnets, validation, `Endpoints`, `NetworkUnavailable`.
- :mod:`laminar_kafka.devstack.netfaults.relay`: `TcpRelay`, the faults it applies, `GroupStats`.
- :mod:`laminar_kafka.devstack.netfaults.namespaces`: `ip`, setns(2), listeners inside a namespace, owner records.
- :mod:`laminar_kafka.devstack.netfaults.node`: `NodeNetwork`, and the registry of the networks open here.
- :mod:`laminar_kafka.devstack.netfaults.host`: `network_faults_available`, `cleanup_stale`, subnet indexes.
"""
from __future__ import annotations

from laminar_kafka.devstack.netfaults.host import (
    cleanup_stale,
    network_faults_available,
    unused_index,
    used_indexes,
)
from laminar_kafka.devstack.netfaults.model import (
    DEFAULT_PREFIX,
    GROUPS,
    IFNAME_MAX,
    INNER_INTERFACE,
    MAX_INDEX,
    MODES,
    SUBNET_BASE,
    Endpoints,
    NetworkUnavailable,
    host_interface_name,
    namespace_name,
    subnet_addresses,
    validate_group,
    validate_latency,
    validate_mode,
)
from laminar_kafka.devstack.netfaults.namespaces import (
    OWNER_DIR,
    owner_alive,
    parse_link_names,
    wrap_argv,
)
from laminar_kafka.devstack.netfaults.node import NodeNetwork
from laminar_kafka.devstack.netfaults.relay import GroupStats, TcpRelay

__all__ = [
    "DEFAULT_PREFIX",
    "GROUPS",
    "IFNAME_MAX",
    "INNER_INTERFACE",
    "MAX_INDEX",
    "MODES",
    "OWNER_DIR",
    "SUBNET_BASE",
    "Endpoints",
    "GroupStats",
    "NetworkUnavailable",
    "NodeNetwork",
    "TcpRelay",
    "cleanup_stale",
    "host_interface_name",
    "namespace_name",
    "network_faults_available",
    "owner_alive",
    "parse_link_names",
    "subnet_addresses",
    "unused_index",
    "used_indexes",
    "validate_group",
    "validate_latency",
    "validate_mode",
    "wrap_argv",
]
