"""One node's private network: `NodeNetwork`, and the registry of the networks open here.

Contract: `NodeNetwork(name, endpoints, index)` owns, between `start()` and `close()`, the
namespace `<prefix><name>`, the veth pair `<prefix><index>-<name>` / veth0 on 10.231.<index>.0/30,
an owner record, and a `TcpRelay` with one listener inside the namespace per endpoint port.
`start()` is idempotent and undoes what it made before raising NetworkUnavailable; `close()` is
idempotent and never raises. `cut`, `heal` and `set_latency` are remembered, so faults set before
`start()` apply from the start. Every started network is in `OPEN` until closed, and an atexit
hook closes whatever is still open at a normal exit; :mod:`laminar_kafka.devstack.netfaults.host` reads `OPEN` so
that cleanup and index allocation leave live networks of this process alone.

Builds on :mod:`laminar_kafka.devstack.netfaults.model`, :mod:`laminar_kafka.devstack.netfaults.namespaces` and
:mod:`laminar_kafka.devstack.netfaults.relay`.
"""
from __future__ import annotations

import atexit
import contextlib
import functools
import logging
import os
import threading

from laminar_kafka.devstack.netfaults.model import (
    DEFAULT_PREFIX,
    GROUPS,
    INNER_INTERFACE,
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
    in_namespace,
    list_namespaces,
    list_veths,
    loopback_listener,
    namespace_pids,
    owner_alive,
    read_owner,
    remove_owner,
    run_ip,
    wrap_argv,
    write_owner,
)
from laminar_kafka.devstack.netfaults.relay import GroupStats, TcpRelay

logger = logging.getLogger("laminar_kafka.devstack.netfaults.faults")  # the whole layer logs under its entry point's name


#: the networks of this process that are started and not closed yet (a cleanup spares them)
OPEN: set[NodeNetwork] = set()
_OPEN_LOCK = threading.Lock()


def _close_all_at_exit() -> None:
    for network in list(OPEN):
        network.close()


atexit.register(_close_all_at_exit)


class NodeNetwork:
    """One node's private network: a namespace named from `name`, relays for every endpoint.

    Run the node with `subprocess.Popen(network.wrap(argv))`; it reaches every Kafka broker and
    ZooKeeper server at 127.0.0.1:<port> through this process's relay, where `cut`, `heal` and
    `set_latency` act. Faults set before `start()` apply from the start.
    """

    def __init__(self, name: str, endpoints: Endpoints, index: int, prefix: str = DEFAULT_PREFIX) -> None:
        if not isinstance(endpoints, Endpoints):
            raise TypeError("endpoints must be an Endpoints")
        self.name = name
        self.index = index
        self.namespace = namespace_name(name, prefix)
        self.host_interface = host_interface_name(name, index, prefix)
        self.host_address, self.node_address, self.subnet = subnet_addresses(index)
        self._endpoints = endpoints
        self._relay: TcpRelay | None = None
        self._lock = threading.RLock()
        self._created: list[str] = []   # what start() made, for close(): "owner", "namespace", "veth"
        self._faults: dict[str, str | None] = {g: None for g in GROUPS}
        self._latency_ms: dict[str, float] = {g: 0.0 for g in GROUPS}

    # ---- pure ----

    @property
    def endpoints(self) -> Endpoints:
        return self._endpoints

    @property
    def started(self) -> bool:
        return self._relay is not None

    def wrap(self, argv: list[str]) -> list[str]:
        """The argv that runs `argv` inside this node's namespace (same pid: `ip netns exec` execs)."""
        return wrap_argv(self.namespace, argv)

    def faults(self) -> dict[str, tuple[str | None, float]]:
        """group -> (cut mode or None, latency in ms): the state this network applies."""
        return {g: (self._faults[g], self._latency_ms[g]) for g in GROUPS}

    def __repr__(self) -> str:
        return f"NodeNetwork({self.name!r}, namespace={self.namespace!r}, index={self.index}, started={self.started})"

    # ---- lifecycle ----

    def start(self) -> None:
        """Create the namespace, the veth pair and the relays. Idempotent; raises NetworkUnavailable
        (after undoing whatever it made) when this machine or this index cannot have them."""
        with self._lock:
            if self._relay is not None:
                return
            if os.geteuid() != 0:
                raise NetworkUnavailable(f"network namespaces need root (running as uid {os.geteuid()})")
            try:
                self._create()
            except BaseException as exc:  # undo, then re-raised (an Exception as NetworkUnavailable)
                self._teardown()
                if isinstance(exc, NetworkUnavailable):
                    raise
                if isinstance(exc, Exception):
                    raise NetworkUnavailable(f"setting up {self.namespace} failed: {exc}", cause=exc) from exc
                raise
            with _OPEN_LOCK:
                OPEN.add(self)
            logger.info(
                "network %s up: node %s, host %s, relaying kafka %s, zookeeper %s, other %s",
                self.namespace, self.node_address, self.host_address, list(self._endpoints.kafka_ports),
                list(self._endpoints.zookeeper_ports), list(self._endpoints.extra_ports),
            )

    def _create(self) -> None:
        namespace = self.namespace
        if namespace in list_namespaces():
            record = read_owner(namespace)
            if any(n.namespace == namespace for n in list(OPEN)) or (
                owner_alive(record) and record is not None and record.get("pid") != os.getpid()
            ):
                owner = record.get("pid") if record else "?"
                raise NetworkUnavailable(f"namespace {namespace} is in use (owner pid {owner})")
            logger.warning("removing stale namespace %s left by an earlier run", namespace)
            if record and record.get("interface"):
                run_ip("link", "del", str(record["interface"]), check=False)
            run_ip("netns", "del", namespace, check=False)
            remove_owner(namespace)
        self._check_subnet_free()
        write_owner(namespace, self.host_interface, self.index)
        self._created.append("owner")
        run_ip("netns", "add", namespace)
        self._created.append("namespace")
        run_ip("-n", namespace, "link", "set", "lo", "up")
        run_ip("link", "add", self.host_interface, "type", "veth", "peer", "name", INNER_INTERFACE, "netns", namespace)
        self._created.append("veth")
        run_ip("addr", "add", f"{self.host_address}/30", "dev", self.host_interface)
        run_ip("link", "set", self.host_interface, "up")
        run_ip("-n", namespace, "addr", "add", f"{self.node_address}/30", "dev", INNER_INTERFACE)
        run_ip("-n", namespace, "link", "set", INNER_INTERFACE, "up")
        relay = TcpRelay(label=self.namespace)
        try:
            for group in GROUPS:
                mode = self._faults[group]
                if mode is not None:
                    relay.cut(group, mode)
                if self._latency_ms[group]:
                    relay.set_latency(self._latency_ms[group], group)
            self._listen(relay, self._endpoints)
        except BaseException:  # close the relay, then re-raised
            relay.close()
            raise
        self._relay = relay

    def _check_subnet_free(self) -> None:
        result = run_ip("-o", "-4", "addr", "show", check=False)
        prefix = f"{SUBNET_BASE}.{self.index}."
        for line in result.stdout.splitlines():
            fields = line.split()
            if "inet" in fields:
                address = fields[fields.index("inet") + 1]
                if address.startswith(prefix):
                    owner = fields[1] if len(fields) > 1 else "?"
                    raise NetworkUnavailable(
                        f"subnet {self.subnet} (index {self.index}) is already used by interface {owner}"
                        " (another live network, or a stale one: cleanup_stale() removes those)"
                    )
        if self.host_interface in list_veths():
            raise NetworkUnavailable(
                f"interface {self.host_interface} already exists (a stale one: cleanup_stale() removes it)"
            )

    def _listen(self, relay: TcpRelay, endpoints: Endpoints) -> None:
        taken = relay.ports()
        for group, ports in endpoints.by_group().items():
            for port in ports:
                if port in taken:
                    continue
                listener = in_namespace(self.namespace, functools.partial(loopback_listener, port))
                try:
                    relay.listen(listener, group, port)
                except BaseException:  # close the listener, then re-raised
                    listener.close()
                    raise

    def add_endpoints(self, endpoints: Endpoints) -> None:
        """Relay more ports (e.g. a broker restarted on a new port); known ports are left as they are."""
        with self._lock:
            merged = self._endpoints.merged(endpoints)
            if self._relay is not None:
                try:
                    self._listen(self._relay, merged)
                except NetworkUnavailable:
                    raise
                except Exception as exc:  # any failure to relay is NetworkUnavailable (the contract)
                    raise NetworkUnavailable(f"relaying {endpoints} in {self.namespace} failed: {exc}", cause=exc) from exc
            self._endpoints = merged

    def close(self) -> None:
        """Stop the relays, delete the veth pair and the namespace. Idempotent; never raises.

        Processes still running inside the namespace are not killed (their owner stops them); they
        are left with a loopback only, so they reach no server.
        """
        with self._lock:
            with _OPEN_LOCK:
                OPEN.discard(self)
            try:
                self._teardown()
            except Exception:  # close never raises
                logger.exception("closing network %s failed", self.namespace)

    def _teardown(self) -> None:
        relay, self._relay = self._relay, None
        if relay is not None:
            relay.close()
        created, self._created = self._created, []
        if "namespace" in created:
            with contextlib.suppress(Exception):  # only a warning: teardown goes on
                pids = namespace_pids(self.namespace)
                if pids:
                    logger.warning("closing %s while processes %s still run inside it", self.namespace, pids)
        if "veth" in created:
            with contextlib.suppress(Exception):  # best effort: the namespace and owner still go
                run_ip("link", "del", self.host_interface, check=False)
        if "namespace" in created:
            with contextlib.suppress(Exception):  # best effort: the owner record still goes
                run_ip("netns", "del", self.namespace, check=False)
        if "owner" in created:
            remove_owner(self.namespace)
        if created:
            logger.info("network %s removed", self.namespace)

    def __enter__(self) -> NodeNetwork:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ---- faults ----

    def cut(self, group: str, mode: str = "blackhole") -> None:
        """Partition this node from one server group ("kafka" | "zookeeper" | "other").

        "blackhole": connections freeze (timeouts, as in a real partition); "reset": connections are
        reset and new ones refused at once. Returns once the cut is in force.
        """
        validate_group(group)
        validate_mode(mode)
        with self._lock:
            self._faults[group] = mode
            if self._relay is not None:
                self._relay.cut(group, mode)
        logger.info("network %s: %s cut (%s)", self.namespace, group, mode)

    def heal(self, group: str | None = None) -> None:
        """Undo `cut` for one group, or for all; frozen connections resume where they stopped."""
        groups = GROUPS if group is None else (validate_group(group),)
        with self._lock:
            for name in groups:
                self._faults[name] = None
            if self._relay is not None:
                self._relay.heal(group)
        logger.info("network %s: %s healed", self.namespace, group or "every group")

    def set_latency(self, ms: float, group: str | None = None) -> None:
        """Delay every forwarded chunk by `ms` in each direction (0 = none) for one group, or all."""
        value = validate_latency(ms)
        groups = GROUPS if group is None else (validate_group(group),)
        with self._lock:
            for name in groups:
                self._latency_ms[name] = value
            if self._relay is not None:
                self._relay.set_latency(value, group)
        logger.info("network %s: %s latency %.0f ms", self.namespace, group or "every group", value)

    def stats(self) -> dict[str, GroupStats]:
        """Per-group counters of the relay (empty before `start()`)."""
        relay = self._relay
        return relay.stats() if relay is not None else {}
