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
"""
from __future__ import annotations

import asyncio
import atexit
import collections
import contextlib
import ctypes
import json
import logging
import math
import os
import re
import shutil
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
import uuid
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Coroutine, Iterable, TypeVar

from cluster.devstack import pid_alive
from cluster.errors import ClusterError

logger = logging.getLogger(__name__)

GROUPS: tuple[str, ...] = ("kafka", "zookeeper", "other")
"""Server groups a fault applies to: Kafka brokers, ZooKeeper servers, and any other relayed port."""
MODES: tuple[str, ...] = ("blackhole", "reset")
"""How `cut` treats connections: freeze them silently (a real partition) or reset them (fail fast)."""

DEFAULT_PREFIX = "lk-"
SUBNET_BASE = "10.231"
MAX_INDEX = 255
IFNAME_MAX = 15  # IFNAMSIZ - 1
OWNER_DIR = Path("/run/laminar-netfaults")
INNER_INTERFACE = "veth0"

_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
_NAME_MAX = 48
_CLONE_NEWNET = 0x40000000
_CHUNK = 256 * 1024          # bytes read per recv; one send may join several due chunks up to this
_HOLD_LIMIT = 4 * 1024 * 1024  # bytes a direction may hold (frozen or delayed) before it stops reading
_CONNECT_TIMEOUT_S = 5.0
_CONTROL_TIMEOUT_S = 15.0
_IP_TIMEOUT_S = 20.0


class NetworkUnavailable(ClusterError):
    """Network namespaces (or the relay inside one) cannot be set up here; the message is one line."""


# --------------------------------------------------------------------------------------------------
# Pure parts: names, addresses, endpoints, argv


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
    _check_index(index)
    candidate = f"{prefix}{index}-{name}"[:IFNAME_MAX]
    return candidate.rstrip("-.") or candidate


def subnet_addresses(index: int) -> tuple[str, str, str]:
    """(host address, node address, subnet) of index i: 10.231.i.1, 10.231.i.2, 10.231.i.0/30."""
    _check_index(index)
    return f"{SUBNET_BASE}.{index}.1", f"{SUBNET_BASE}.{index}.2", f"{SUBNET_BASE}.{index}.0/30"


def wrap_argv(namespace: str, argv: list[str], ip: str | None = None) -> list[str]:
    """The argv that runs `argv` inside `namespace` (`ip netns exec`, which execs: same pid)."""
    if isinstance(argv, (str, bytes)) or not argv or not all(isinstance(a, str) for a in argv):
        raise ValueError("argv must be a non-empty list of strings")
    return [ip or _ip_path(), "netns", "exec", namespace, *argv]


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


def _check_index(index: int) -> None:
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
        """From a `cluster.devstack.DevStack` (its brokers' and ZooKeeper servers' client ports)."""
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


# --------------------------------------------------------------------------------------------------
# The relay (no namespaces here: it forwards whatever listeners it is given)


@dataclass
class GroupStats:
    """Counters of one server group of a relay."""

    mode: str | None            # None = healthy, else the cut mode
    latency_ms: float
    open_connections: int       # connections the relay holds now (frozen ones included)
    accepted: int               # connections accepted since start
    bytes_to_server: int
    bytes_to_client: int


class _Group:
    def __init__(self, name: str) -> None:
        self.name = name
        self.mode: str | None = None
        self.latency_s = 0.0
        self.open = asyncio.Event()
        self.open.set()
        self.connections: set[_Connection] = set()
        self.accepted = 0
        self.bytes_to_server = 0
        self.bytes_to_client = 0


class _Pipe:
    """One direction of a connection: a reader that queues (due time, chunk), a writer that sends
    each chunk once it is due and its group is not cut. b'' in the queue is the end of the stream."""

    def __init__(self, loop: asyncio.AbstractEventLoop, src: socket.socket, group: _Group, to_server: bool) -> None:
        self._loop = loop
        self._src = src
        self._group = group
        self._to_server = to_server
        self._queue: collections.deque[tuple[float, bytes]] = collections.deque()
        self._held = 0
        self._arrived = asyncio.Event()
        self._room = asyncio.Event()
        self._room.set()
        self.ended = asyncio.Event()     # the source closed (EOF or error)
        self.error: OSError | None = None
        self.reader: asyncio.Task[None] = loop.create_task(self._read())

    async def _read(self) -> None:
        while True:
            while self._held >= _HOLD_LIMIT:
                self._room.clear()
                await self._room.wait()
            try:
                data = await self._loop.sock_recv(self._src, _CHUNK)
            except OSError as exc:
                self.error = exc
                data = b""
            self._queue.append((time.monotonic() + self._group.latency_s, data))
            self._held += len(data)
            self._arrived.set()
            if not data:
                self.ended.set()
                return

    async def forward(self, dst: socket.socket) -> None:
        """Send everything to `dst` until the source's end; raise the source's error, if any."""
        group = self._group
        while True:
            while not self._queue:
                self._arrived.clear()
                await self._arrived.wait()
            if not group.open.is_set():
                await group.open.wait()
                continue
            delay = self._queue[0][0] - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
                continue
            parts: list[bytes] = []
            size = 0
            now = time.monotonic()
            while self._queue and self._queue[0][1] and self._queue[0][0] <= now and size < _CHUNK:
                data = self._queue.popleft()[1]
                parts.append(data)
                size += len(data)
            if not parts:  # the head is the end of the stream
                self._queue.popleft()
                if self.error is not None:
                    raise self.error
                with contextlib.suppress(OSError):
                    dst.shutdown(socket.SHUT_WR)
                return
            self._held -= size
            if self._held < _HOLD_LIMIT:
                self._room.set()
            await self._loop.sock_sendall(dst, parts[0] if len(parts) == 1 else b"".join(parts))
            if self._to_server:
                group.bytes_to_server += size
            else:
                group.bytes_to_client += size


def _tune(sock: socket.socket) -> None:
    sock.setblocking(False)
    with contextlib.suppress(OSError):
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)


def _close(sock: socket.socket | None, reset: bool) -> None:
    if sock is None:
        return
    if reset:
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    with contextlib.suppress(OSError):
        sock.close()


class _Connection:
    def __init__(self, relay: TcpRelay, group: _Group, client: socket.socket, port: int) -> None:
        self._relay = relay
        self._group = group
        self._client = client
        self._port = port
        self._upstream: socket.socket | None = None
        self._reset = False
        self.task: asyncio.Task[None] | None = None

    def abort(self) -> None:
        """Reset both ends (called from the loop; the run task closes the sockets)."""
        self._reset = True
        if self.task is not None:
            self.task.cancel()

    async def run(self) -> None:
        loop = self._relay.loop
        group = self._group
        pipes: list[_Pipe] = []
        try:
            if group.mode == "reset":
                self._reset = True
                return
            _tune(self._client)
            to_server = _Pipe(loop, self._client, group, to_server=True)
            pipes.append(to_server)
            if not group.open.is_set():
                # A connection attempt into a blackhole: it reaches the server only if the client is
                # still there when the partition heals.
                healed = loop.create_task(group.open.wait())
                gave_up = loop.create_task(to_server.ended.wait())
                try:
                    await asyncio.wait({healed, gave_up}, return_when=asyncio.FIRST_COMPLETED)
                finally:
                    healed.cancel()
                    gave_up.cancel()
                if to_server.ended.is_set():
                    return
            upstream = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            self._upstream = upstream
            _tune(upstream)
            try:
                await asyncio.wait_for(
                    loop.sock_connect(upstream, (self._relay.upstream_host, self._port)), _CONNECT_TIMEOUT_S
                )
            except (OSError, asyncio.TimeoutError) as exc:
                logger.debug("relay %s: upstream %d unreachable: %s", self._relay.label, self._port, exc)
                self._reset = True  # the server is down: the client sees a reset, as if refused
                return
            to_client = _Pipe(loop, upstream, group, to_server=False)
            pipes.append(to_client)
            forwards = [
                loop.create_task(to_server.forward(upstream)), loop.create_task(to_client.forward(self._client)),
            ]
            try:
                done, _ = await asyncio.wait(forwards, return_when=asyncio.FIRST_EXCEPTION)
                for task in done:
                    error = task.exception()
                    if error is not None:
                        raise error
            finally:
                for task in forwards:
                    task.cancel()
                await asyncio.gather(*forwards, return_exceptions=True)
        except OSError as exc:
            logger.debug("relay %s: connection to %d ended: %s", self._relay.label, self._port, exc)
            self._reset = True  # pass a reset on to the other end
        finally:
            for pipe in pipes:
                pipe.reader.cancel()
            for pipe in pipes:
                with contextlib.suppress(BaseException):
                    await pipe.reader
            _close(self._client, self._reset)
            _close(self._upstream, self._reset)
            group.connections.discard(self)


_T = TypeVar("_T")


class TcpRelay:
    """Forwards connections accepted on given listening sockets to `upstream_host:<port>`, with
    per-group faults. One asyncio loop in a daemon thread; every public method is thread-safe and
    returns once the change is in force (e.g. `cut(..., "reset")` returns after the resets).

    NodeNetwork gives it listeners made inside a namespace; it works as well with any listener
    (the unit tests use loopback listeners in the host namespace).
    """

    def __init__(self, label: str = "relay", upstream_host: str = "127.0.0.1") -> None:
        self.label = label
        self.upstream_host = upstream_host
        self.loop = asyncio.new_event_loop()
        self._closed = False
        self._listeners: dict[int, tuple[socket.socket, asyncio.Task[None], str]] = {}
        self._groups: dict[str, _Group] = {}
        self._thread = threading.Thread(target=self._run, name=f"netfaults-{label}", daemon=True)
        self._thread.start()
        self._call(self._init())

    # ---- public, thread-safe ----

    def listen(self, listener: socket.socket, group: str, port: int | None = None) -> None:
        """Serve `listener` (bound and listening); forward to `port` (default: the listener's port)."""
        validate_group(group)
        target = listener.getsockname()[1] if port is None else port
        self._call(self._listen(listener, group, target))

    def cut(self, group: str, mode: str = "blackhole") -> None:
        validate_group(group)
        validate_mode(mode)
        self._call(self._cut(group, mode))

    def heal(self, group: str | None = None) -> None:
        groups = GROUPS if group is None else (validate_group(group),)
        self._call(self._heal(groups))

    def set_latency(self, ms: float, group: str | None = None) -> None:
        seconds = validate_latency(ms) / 1000.0
        groups = GROUPS if group is None else (validate_group(group),)
        self._call(self._set_latency(groups, seconds))

    def stats(self) -> dict[str, GroupStats]:
        return self._call(self._stats())

    def ports(self) -> dict[int, str]:
        """Listened port -> group."""
        return self._call(self._ports())

    def close(self) -> None:
        """Close listeners and connections, stop the loop. Idempotent; never raises."""
        if self._closed:
            return
        self._closed = True
        try:
            if self._thread.is_alive():
                asyncio.run_coroutine_threadsafe(self._shutdown(), self.loop).result(_CONTROL_TIMEOUT_S)
        except Exception:  # noqa: BLE001 - closing must not fail the caller
            logger.exception("relay %s: shutdown failed", self.label)
        with contextlib.suppress(RuntimeError):
            self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(_CONTROL_TIMEOUT_S)
        if not self._thread.is_alive():
            with contextlib.suppress(Exception):
                self.loop.close()

    # ---- loop side ----

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        try:
            self.loop.run_forever()
        finally:
            # Anything still pending after stop (only on an abnormal shutdown): close its sockets.
            for listener, _, _ in self._listeners.values():
                _close(listener, False)

    def _call(self, coroutine: Coroutine[Any, Any, _T]) -> _T:
        if self._closed:
            coroutine.close()
            raise RuntimeError(f"relay {self.label} is closed")
        future: Future[_T] = asyncio.run_coroutine_threadsafe(coroutine, self.loop)
        return future.result(_CONTROL_TIMEOUT_S)

    async def _init(self) -> None:
        self._groups = {name: _Group(name) for name in GROUPS}

    async def _listen(self, listener: socket.socket, group: str, port: int) -> None:
        local = listener.getsockname()[1]
        if local in self._listeners:
            raise ValueError(f"relay {self.label} already listens on port {local}")
        listener.setblocking(False)
        task = self.loop.create_task(self._accept(listener, self._groups[group], port))
        self._listeners[local] = (listener, task, group)

    async def _accept(self, listener: socket.socket, group: _Group, port: int) -> None:
        while True:
            try:
                client, _ = await self.loop.sock_accept(listener)
            except OSError as exc:
                if listener.fileno() < 0:
                    return
                logger.warning("relay %s: accept on %d failed: %s", self.label, port, exc)
                await asyncio.sleep(0.1)
                continue
            group.accepted += 1
            connection = _Connection(self, group, client, port)
            group.connections.add(connection)
            connection.task = self.loop.create_task(connection.run())

    async def _cut(self, name: str, mode: str) -> None:
        group = self._groups[name]
        group.mode = mode
        group.open.clear()
        if mode == "reset":
            await self._abort_all(group)

    async def _abort_all(self, group: _Group) -> None:
        connections = list(group.connections)
        for connection in connections:
            connection.abort()
        tasks = [c.task for c in connections if c.task is not None]
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)

    async def _heal(self, names: Iterable[str]) -> None:
        for name in names:
            group = self._groups[name]
            group.mode = None
            group.open.set()

    async def _set_latency(self, names: Iterable[str], seconds: float) -> None:
        for name in names:
            self._groups[name].latency_s = seconds

    async def _stats(self) -> dict[str, GroupStats]:
        return {
            name: GroupStats(
                mode=g.mode, latency_ms=g.latency_s * 1000.0, open_connections=len(g.connections),
                accepted=g.accepted, bytes_to_server=g.bytes_to_server, bytes_to_client=g.bytes_to_client,
            )
            for name, g in self._groups.items()
        }

    async def _ports(self) -> dict[int, str]:
        return {port: group for port, (_, _, group) in self._listeners.items()}

    async def _shutdown(self) -> None:
        for listener, task, _ in self._listeners.values():
            task.cancel()
            _close(listener, False)
        self._listeners.clear()
        for group in self._groups.values():
            group.open.set()  # let nothing wait on a heal that will not come
            connections = list(group.connections)
            for connection in connections:
                if connection.task is not None:
                    connection.task.cancel()
            tasks = [c.task for c in connections if c.task is not None]
            if tasks:
                await asyncio.gather(*tasks, return_exceptions=True)


# --------------------------------------------------------------------------------------------------
# Namespaces and interfaces (root, iproute2)


def _ip_path() -> str:
    return shutil.which("ip") or shutil.which("ip", path="/usr/sbin:/sbin:/usr/bin:/bin") or "ip"


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    command = [_ip_path(), *args]
    try:
        result = subprocess.run(
            command, capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=_IP_TIMEOUT_S
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise NetworkUnavailable(f"`ip {' '.join(args)}` could not run: {exc}", cause=exc) from exc
    if check and result.returncode != 0:
        detail = (result.stderr or result.stdout).strip().splitlines()
        raise NetworkUnavailable(f"`ip {' '.join(args)}` failed: {detail[0] if detail else f'exit {result.returncode}'}")
    return result


def _list_namespaces() -> list[str]:
    result = _ip("netns", "list", check=False)
    return [line.split()[0] for line in result.stdout.splitlines() if line.strip()]


def _list_veths() -> list[str]:
    result = _ip("-o", "link", "show", "type", "veth", check=False)
    return parse_link_names(result.stdout)


def parse_link_names(output: str) -> list[str]:
    """Interface names from `ip -o link show` output (`12: lk-1-n1@if11: <...> ...`)."""
    names: list[str] = []
    for line in output.splitlines():
        parts = line.split(":", 2)
        if len(parts) >= 2 and parts[0].strip().isdigit():
            names.append(parts[1].strip().split("@", 1)[0])
    return names


def _libc_setns() -> Callable[[int, int], int] | None:
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        function = libc.setns
    except (OSError, AttributeError):
        return None
    function.argtypes = [ctypes.c_int, ctypes.c_int]
    function.restype = ctypes.c_int
    return function


def _in_namespace(namespace: str, function: Callable[[], _T]) -> _T:
    """Run `function` in a fresh thread that has entered `namespace` (the thread then ends, so no
    thread of this process stays in the namespace)."""
    setns = _libc_setns()
    if setns is None:
        raise NetworkUnavailable("setns(2) is not available from libc")
    outcome: dict[str, Any] = {}

    def target() -> None:
        try:
            fd = os.open(f"/run/netns/{namespace}", os.O_RDONLY | os.O_CLOEXEC)
            try:
                if setns(fd, _CLONE_NEWNET) != 0:
                    error = ctypes.get_errno()
                    raise OSError(error, f"setns into {namespace}: {os.strerror(error)}")
            finally:
                os.close(fd)
            outcome["value"] = function()
        except BaseException as exc:  # noqa: BLE001 - handed to the calling thread
            outcome["error"] = exc

    thread = threading.Thread(target=target, name=f"netfaults-setns-{namespace}", daemon=True)
    thread.start()
    thread.join(_CONTROL_TIMEOUT_S)
    if "error" in outcome:
        raise outcome["error"]
    if "value" not in outcome:
        raise NetworkUnavailable(f"entering namespace {namespace} did not finish")
    return outcome["value"]


def _loopback_listener(port: int) -> socket.socket:
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", port))
        listener.listen(1024)
    except OSError:
        listener.close()
        raise
    return listener


# ---- owner records (which process made a namespace), for cleanup after a crash ----


def _process_start(pid: int) -> str | None:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(") ", 1)[1].split()[19]
    except (OSError, IndexError):
        return None


def _owner_path(namespace: str) -> Path:
    return OWNER_DIR / f"{namespace}.json"


def _write_owner(namespace: str, interface: str, index: int) -> None:
    OWNER_DIR.mkdir(parents=True, exist_ok=True)
    record = {"pid": os.getpid(), "start": _process_start(os.getpid()), "interface": interface, "index": index}
    temporary = _owner_path(namespace).with_suffix(f".{uuid.uuid4().hex[:6]}.tmp")
    temporary.write_text(json.dumps(record))
    temporary.replace(_owner_path(namespace))


def _read_owner(namespace: str) -> dict[str, Any] | None:
    try:
        record = json.loads(_owner_path(namespace).read_text())
        return record if isinstance(record, dict) else None
    except (OSError, ValueError):
        return None


def owner_alive(record: dict[str, Any] | None) -> bool:
    """Whether the process named by an owner record still runs (same pid AND same start time)."""
    if not record:
        return False
    try:
        pid = int(record["pid"])
    except (KeyError, TypeError, ValueError):
        return False
    start = _process_start(pid)
    return start is not None and start == record.get("start")


def _remove_owner(namespace: str) -> None:
    with contextlib.suppress(OSError):
        _owner_path(namespace).unlink()


# --------------------------------------------------------------------------------------------------
# Availability and cleanup


def network_faults_available() -> tuple[bool, str]:
    """(True, "") when namespaces, veth pairs and setns work here; else (False, one-line reason)."""
    if not sys.platform.startswith("linux"):
        return False, f"network namespaces need Linux (this is {sys.platform})"
    if os.geteuid() != 0:
        return False, f"network namespaces need root (running as uid {os.geteuid()})"
    if shutil.which("ip") is None and not Path(_ip_path()).is_file():
        return False, "the `ip` command is missing (Debian package iproute2)"
    if _libc_setns() is None:
        return False, "setns(2) is not available from libc"
    probe = f"{DEFAULT_PREFIX}probe-{os.getpid()}-{uuid.uuid4().hex[:4]}"
    interface = f"{DEFAULT_PREFIX}p{os.getpid()}-{uuid.uuid4().hex[:2]}"[:IFNAME_MAX]
    try:
        _ip("netns", "add", probe)
        _ip("-n", probe, "link", "set", "lo", "up")
        _ip("link", "add", interface, "type", "veth", "peer", "name", INNER_INTERFACE, "netns", probe)
        _in_namespace(probe, lambda: _loopback_listener(0).close())
    except (NetworkUnavailable, OSError) as exc:
        return False, f"network namespaces do not work here: {exc}"
    finally:
        _ip("link", "del", interface, check=False)
        _ip("netns", "del", probe, check=False)
    return True, ""


def cleanup_stale(prefix: str = DEFAULT_PREFIX, force: bool = False, kill_processes: bool = False) -> list[str]:
    """Delete namespaces `<prefix>*` and host veths `<prefix>*` left by a run that is gone.

    A namespace whose owner process still runs (another campaign, another test) is kept unless
    `force`. Processes still inside a removed namespace (nodes of a killed campaign) are left
    running, cut off from every server, unless `kill_processes` (SIGKILL). Returns the names
    removed (namespaces and interfaces). Never raises for a missing `ip` or a non-root user: then
    there is nothing it could have made, and it returns [].
    """
    if os.geteuid() != 0 or shutil.which("ip") is None and not Path(_ip_path()).is_file():
        return []
    removed: list[str] = []
    keep_interfaces: set[str] = set()
    live = {network.namespace for network in list(_OPEN)}
    for namespace in _list_namespaces():
        if not namespace.startswith(prefix):
            continue
        record = _read_owner(namespace)
        probing = _probe_pid(namespace, prefix)
        if not force and (
            namespace in live
            or (owner_alive(record) and record is not None and record.get("pid") != os.getpid())
            or (probing is not None and pid_alive(probing))
        ):
            if record and record.get("interface"):
                keep_interfaces.add(str(record["interface"]))
            continue
        pids = _namespace_pids(namespace)
        if pids and kill_processes:
            for pid in pids:
                with contextlib.suppress(OSError):
                    os.kill(pid, signal.SIGKILL)
            logger.warning("killed processes %s left in stale namespace %s", pids, namespace)
        elif pids:
            logger.warning("stale namespace %s still holds processes %s (left running)", namespace, pids)
        if record and record.get("interface"):
            if _ip("link", "del", str(record["interface"]), check=False).returncode == 0:
                removed.append(str(record["interface"]))
        _ip("netns", "del", namespace, check=False)
        _remove_owner(namespace)
        removed.append(namespace)
    for interface in _list_veths():
        if interface.startswith(prefix) and interface not in keep_interfaces and interface not in removed:
            probing = _probe_pid(interface, prefix)
            if not force and (
                any(n.host_interface == interface for n in list(_OPEN))
                or (probing is not None and pid_alive(probing))
            ):
                continue
            if _ip("link", "del", interface, check=False).returncode == 0:
                removed.append(interface)
    with contextlib.suppress(OSError):
        for path in OWNER_DIR.glob(f"{prefix}*.json"):
            namespace = path.name[: -len(".json")]
            if not owner_alive(_read_owner(namespace)) and namespace not in _list_namespaces():
                path.unlink()
    if removed:
        logger.info("removed stale network state: %s", ", ".join(removed))
    return removed


def _probe_pid(name: str, prefix: str) -> int | None:
    """The pid in the name of a namespace or veth made by `network_faults_available()`, if it is one."""
    match = re.match(rf"^{re.escape(prefix)}(?:probe-|p)(\d+)-", name)
    return int(match.group(1)) if match else None




def used_indexes() -> set[int]:
    """Indexes whose 10.231.<i>.0/30 subnet is on a host interface or taken by an open network here."""
    used = {network.index for network in list(_OPEN)}
    output = _ip("-o", "-4", "addr", "show", check=False).stdout if os.geteuid() == 0 else ""
    for match in re.finditer(rf"\binet {re.escape(SUBNET_BASE)}\.(\d+)\.", output):
        used.add(int(match.group(1)))
    return used


def unused_index(start: int = 1) -> int:
    """The first index >= `start` that `used_indexes()` does not hold (racy across processes: a
    clash makes `start()` raise NetworkUnavailable rather than share a subnet)."""
    _check_index(start)
    used = used_indexes()
    for index in range(start, MAX_INDEX + 1):
        if index not in used:
            return index
    raise NetworkUnavailable(f"no free 10.231.<i>.0/30 subnet with i >= {start}")


def _namespace_pids(namespace: str) -> list[int]:
    result = _ip("netns", "pids", namespace, check=False)
    return [int(token) for token in result.stdout.split() if token.isdigit()]


# --------------------------------------------------------------------------------------------------
# One node's network


_OPEN: set[NodeNetwork] = set()
_OPEN_LOCK = threading.Lock()


def _close_all_at_exit() -> None:
    for network in list(_OPEN):
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
            except BaseException as exc:
                self._teardown()
                if isinstance(exc, NetworkUnavailable):
                    raise
                if isinstance(exc, Exception):
                    raise NetworkUnavailable(f"setting up {self.namespace} failed: {exc}", cause=exc) from exc
                raise
            with _OPEN_LOCK:
                _OPEN.add(self)
            logger.info(
                "network %s up: node %s, host %s, relaying kafka %s, zookeeper %s, other %s",
                self.namespace, self.node_address, self.host_address, list(self._endpoints.kafka_ports),
                list(self._endpoints.zookeeper_ports), list(self._endpoints.extra_ports),
            )

    def _create(self) -> None:
        namespace = self.namespace
        if namespace in _list_namespaces():
            record = _read_owner(namespace)
            if any(n.namespace == namespace for n in list(_OPEN)) or (
                owner_alive(record) and record is not None and record.get("pid") != os.getpid()
            ):
                owner = record.get("pid") if record else "?"
                raise NetworkUnavailable(f"namespace {namespace} is in use (owner pid {owner})")
            logger.warning("removing stale namespace %s left by an earlier run", namespace)
            if record and record.get("interface"):
                _ip("link", "del", str(record["interface"]), check=False)
            _ip("netns", "del", namespace, check=False)
            _remove_owner(namespace)
        self._check_subnet_free()
        _write_owner(namespace, self.host_interface, self.index)
        self._created.append("owner")
        _ip("netns", "add", namespace)
        self._created.append("namespace")
        _ip("-n", namespace, "link", "set", "lo", "up")
        _ip("link", "add", self.host_interface, "type", "veth", "peer", "name", INNER_INTERFACE, "netns", namespace)
        self._created.append("veth")
        _ip("addr", "add", f"{self.host_address}/30", "dev", self.host_interface)
        _ip("link", "set", self.host_interface, "up")
        _ip("-n", namespace, "addr", "add", f"{self.node_address}/30", "dev", INNER_INTERFACE)
        _ip("-n", namespace, "link", "set", INNER_INTERFACE, "up")
        relay = TcpRelay(label=self.namespace)
        try:
            for group in GROUPS:
                if self._faults[group] is not None:
                    relay.cut(group, self._faults[group])  # type: ignore[arg-type]
                if self._latency_ms[group]:
                    relay.set_latency(self._latency_ms[group], group)
            self._listen(relay, self._endpoints)
        except BaseException:
            relay.close()
            raise
        self._relay = relay

    def _check_subnet_free(self) -> None:
        result = _ip("-o", "-4", "addr", "show", check=False)
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
        if self.host_interface in _list_veths():
            raise NetworkUnavailable(
                f"interface {self.host_interface} already exists (a stale one: cleanup_stale() removes it)"
            )

    def _listen(self, relay: TcpRelay, endpoints: Endpoints) -> None:
        taken = relay.ports()
        for group, ports in endpoints.by_group().items():
            for port in ports:
                if port in taken:
                    continue
                listener = _in_namespace(self.namespace, lambda port=port: _loopback_listener(port))
                try:
                    relay.listen(listener, group, port)
                except BaseException:
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
                except Exception as exc:
                    raise NetworkUnavailable(f"relaying {endpoints} in {self.namespace} failed: {exc}", cause=exc) from exc
            self._endpoints = merged

    def close(self) -> None:
        """Stop the relays, delete the veth pair and the namespace. Idempotent; never raises.

        Processes still running inside the namespace are not killed (their owner stops them); they
        are left with a loopback only, so they reach no server.
        """
        with self._lock:
            with _OPEN_LOCK:
                _OPEN.discard(self)
            try:
                self._teardown()
            except Exception:  # noqa: BLE001 - close never raises
                logger.exception("closing network %s failed", self.namespace)

    def _teardown(self) -> None:
        relay, self._relay = self._relay, None
        if relay is not None:
            relay.close()
        created, self._created = self._created, []
        if "namespace" in created:
            with contextlib.suppress(Exception):
                pids = _namespace_pids(self.namespace)
                if pids:
                    logger.warning("closing %s while processes %s still run inside it", self.namespace, pids)
        if "veth" in created:
            with contextlib.suppress(Exception):
                _ip("link", "del", self.host_interface, check=False)
        if "namespace" in created:
            with contextlib.suppress(Exception):
                _ip("netns", "del", self.namespace, check=False)
        if "owner" in created:
            _remove_owner(self.namespace)
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
