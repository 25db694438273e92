"""Unit tests of laminar_kafka.devstack.netfaults.faults without namespaces or root: names, subnets, argv wrapping,
validation, endpoints, owner records, and the relay's fault semantics on host loopback sockets."""
from __future__ import annotations

import hashlib
import os
import socket
import subprocess
import threading
import time
from typing import Iterator

import pytest

from laminar_kafka.devstack.netfaults import faults as netfaults
from laminar_kafka.devstack.netfaults.faults import (
    Endpoints,
    NetworkUnavailable,
    NodeNetwork,
    TcpRelay,
    host_interface_name,
    namespace_name,
    subnet_addresses,
    wrap_argv,
)
from laminar_kafka.devstack.netfaults.host import probe_pid
from laminar_kafka.devstack.netfaults.namespaces import process_start
from laminar_kafka.devstack.waiting import wait_until

pytestmark = pytest.mark.timeout(60)


# ---- names, subnets, argv ----------------------------------------------------------------------


def test_namespace_is_prefixed_node_name() -> None:
    assert namespace_name("node-1") == "lk-node-1"
    assert namespace_name("n1", prefix="xy-") == "xy-n1"


@pytest.mark.parametrize("bad", ["", "-x", "a b", "a/b", "x" * 49, "ünï", None, 3])
def test_invalid_names_are_rejected(bad: object) -> None:
    with pytest.raises(ValueError, match="name"):
        namespace_name(bad)  # type: ignore[arg-type]


def test_host_interface_names_fit_ifnamsiz_and_differ_per_index() -> None:
    names = {host_interface_name("a-very-long-node-name-indeed", i) for i in range(256)}
    assert len(names) == 256
    assert all(len(n) <= 15 and n.startswith("lk-") for n in names)
    assert host_interface_name("n1", 3) == "lk-3-n1"
    assert not host_interface_name("abcdefghij-", 100).endswith("-")


def test_subnet_addresses_per_index() -> None:
    assert subnet_addresses(0) == ("10.231.0.1", "10.231.0.2", "10.231.0.0/30")
    assert subnet_addresses(255) == ("10.231.255.1", "10.231.255.2", "10.231.255.0/30")


@pytest.mark.parametrize("bad", [-1, 256, True, "1", 1.0])
def test_subnet_index_out_of_range(bad: object) -> None:
    with pytest.raises(ValueError, match="index"):
        subnet_addresses(bad)  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        NodeNetwork("n", Endpoints(), bad)  # type: ignore[arg-type]


def test_wrap_runs_the_command_inside_the_namespace() -> None:
    argv = ["python", "-c", "print(1)"]
    assert wrap_argv("lk-n1", argv, ip="/usr/sbin/ip") == ["/usr/sbin/ip", "netns", "exec", "lk-n1", *argv]
    network = NodeNetwork("n1", Endpoints((9092,), (2181,)), 4)
    wrapped = network.wrap(argv)
    assert wrapped[1:4] == ["netns", "exec", "lk-n1"] and wrapped[4:] == argv
    assert os.path.basename(wrapped[0]) == "ip"
    assert argv == ["python", "-c", "print(1)"]  # not modified


@pytest.mark.parametrize("bad", ["python -c 1", [], [b"python"], None])
def test_wrap_rejects_what_is_not_an_argv(bad: object) -> None:
    with pytest.raises(ValueError, match="argv"):
        wrap_argv("lk-n1", bad)  # type: ignore[arg-type]


def test_node_network_attributes_before_start() -> None:
    network = NodeNetwork("worker-2", Endpoints((1, 2), (3,)), 9)
    assert (network.namespace, network.host_interface) == ("lk-worker-2", "lk-9-worker-2")
    assert (network.host_address, network.node_address, network.subnet) == ("10.231.9.1", "10.231.9.2", "10.231.9.0/30")
    assert not network.started and network.stats() == {}
    network.close()  # never started: a no-op, and idempotent
    network.close()


def test_fault_arguments_are_validated_before_anything_happens() -> None:
    network = NodeNetwork("n1", Endpoints((9092,), (2181,)), 1)
    with pytest.raises(ValueError, match="group"):
        network.cut("kafak")
    with pytest.raises(ValueError, match="mode"):
        network.cut("kafka", "drop")
    with pytest.raises(ValueError, match="group"):
        network.heal("zk")
    for bad in (-1, float("nan"), float("inf"), "200", True):
        with pytest.raises(ValueError, match="latency"):
            network.set_latency(bad)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="group"):
        network.set_latency(10, "brokers")
    assert network.faults() == {g: (None, 0.0) for g in netfaults.GROUPS}


def test_faults_set_before_start_are_remembered() -> None:
    network = NodeNetwork("n1", Endpoints((9092,), (2181,)), 1)
    network.cut("zookeeper")
    network.cut("kafka", "reset")
    network.set_latency(50, "kafka")
    assert network.faults()["zookeeper"] == ("blackhole", 0.0)
    assert network.faults()["kafka"] == ("reset", 50.0)
    network.heal("kafka")
    network.set_latency(0)
    assert network.faults() == {"kafka": (None, 0.0), "zookeeper": ("blackhole", 0.0), "other": (None, 0.0)}
    network.heal()
    assert all(mode is None for mode, _ in network.faults().values())


def test_start_without_root_is_network_unavailable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    ok, reason = netfaults.network_faults_available()
    assert not ok and "root" in reason and "\n" not in reason
    with pytest.raises(NetworkUnavailable, match="root"):
        NodeNetwork("n1", Endpoints((9092,)), 1).start()
    assert netfaults.cleanup_stale() == []


def test_network_unavailable_is_a_dev_stack_error() -> None:
    from laminar_kafka.devstack.errors import DevStackError

    assert issubclass(NetworkUnavailable, DevStackError) and issubclass(NetworkUnavailable, Exception)


# ---- endpoints ---------------------------------------------------------------------------------


def test_endpoints_coerce_and_validate() -> None:
    endpoints = Endpoints([9092, 9093], [2181])  # type: ignore[arg-type]
    assert endpoints.kafka_ports == (9092, 9093) and endpoints.zookeeper_ports == (2181,)
    assert endpoints.group_of(9093) == "kafka" and endpoints.group_of(2181) == "zookeeper"
    assert endpoints.group_of(1) is None
    with pytest.raises(ValueError, match="both"):
        Endpoints((9092,), (9092,))
    with pytest.raises(ValueError, match="duplicate"):
        Endpoints((9092, 9092))
    for bad in (0, 65536, "9092", True):
        with pytest.raises(ValueError, match="port"):
            Endpoints((bad,))  # type: ignore[arg-type]


def test_endpoints_from_connection_strings() -> None:
    endpoints = Endpoints.from_hosts("127.0.0.1:9092,localhost:9093", "127.0.0.1:2181,127.0.0.1:2182/laminar/x")
    assert endpoints == Endpoints((9092, 9093), (2181, 2182))
    assert Endpoints.from_hosts("127.0.0.1:9092") == Endpoints((9092,))
    with pytest.raises(ValueError, match="loopback"):
        Endpoints.from_hosts("kafka.example:9092")
    with pytest.raises(ValueError, match="loopback"):
        Endpoints.from_hosts("", "10.0.0.1:2181")

    class Stack:
        bootstrap = "127.0.0.1:1000,127.0.0.1:1001"
        zk_hosts = "127.0.0.1:2000"

    assert Endpoints.from_stack(Stack()) == Endpoints((1000, 1001), (2000,))


def test_endpoints_merge_adds_new_ports_only() -> None:
    base = Endpoints((9092,), (2181,))
    merged = base.merged(Endpoints((9092, 9095), (), (8080,)))
    assert merged == Endpoints((9092, 9095), (2181,), (8080,))
    with pytest.raises(ValueError, match="already relayed"):
        base.merged(Endpoints((2181,)))


def test_add_endpoints_before_start_merges() -> None:
    network = NodeNetwork("n1", Endpoints((9092,), (2181,)), 1)
    network.add_endpoints(Endpoints((9099,)))
    assert network.endpoints == Endpoints((9092, 9099), (2181,))


# ---- ip output, owner records ------------------------------------------------------------------


def test_parse_link_names() -> None:
    output = (
        "5: lk-3-n1@if4: <BROADCAST,MULTICAST,UP,LOWER_UP> mtu 1500 qdisc noqueue state UP\\    link/ether ...\n"
        "7: veth0@if6: <BROADCAST> mtu 1500\n"
        "garbage line\n"
    )
    assert netfaults.parse_link_names(output) == ["lk-3-n1", "veth0"]


def test_probe_names_carry_their_pid() -> None:
    assert probe_pid("lk-probe-1234-ab12", "lk-") == 1234
    assert probe_pid("lk-p99-0f", "lk-") == 99
    assert probe_pid("lk-3-node1", "lk-") is None
    assert probe_pid("lk-probe", "lk-") is None


def test_owner_records_know_live_from_dead_processes() -> None:
    me = {"pid": os.getpid(), "start": process_start(os.getpid())}
    assert netfaults.owner_alive(me)
    assert not netfaults.owner_alive({**me, "start": "0"})  # same pid, another process (pid reuse)
    finished = subprocess.Popen(["true"])
    finished.wait()
    assert not netfaults.owner_alive({"pid": finished.pid, "start": "1"})
    assert not netfaults.owner_alive(None) and not netfaults.owner_alive({"pid": "x"})


# ---- the relay, on loopback sockets of the host ---------------------------------------------------


class EchoServer:
    """A loopback echo server that counts the connections it accepted."""

    def __init__(self) -> None:
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.accepted = 0
        self.resets = 0
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            self.accepted += 1
            threading.Thread(target=self._echo, args=(conn,), daemon=True).start()

    def _echo(self, conn: socket.socket) -> None:
        with conn:
            try:
                while data := conn.recv(1 << 20):
                    conn.sendall(data)
            except ConnectionResetError:
                self.resets += 1
            except OSError:
                pass

    def close(self) -> None:
        self.listener.close()


@pytest.fixture
def echo() -> Iterator[EchoServer]:
    server = EchoServer()
    yield server
    server.close()


@pytest.fixture
def relay(echo: EchoServer) -> Iterator[tuple[TcpRelay, int]]:
    """A relay listening on a free loopback port, forwarding to the echo server (group "kafka")."""
    relay = TcpRelay("unit")
    listener = socket.create_server(("127.0.0.1", 0))
    relay.listen(listener, "kafka", echo.port)
    yield relay, listener.getsockname()[1]
    relay.close()


def connect(port: int, timeout: float = 2.0) -> socket.socket:
    return socket.create_connection(("127.0.0.1", port), timeout=timeout)


def roundtrip(sock: socket.socket, payload: bytes = b"ping") -> bytes:
    sock.sendall(payload)
    received = b""
    while len(received) < len(payload):
        chunk = sock.recv(65536)
        if not chunk:
            raise ConnectionError("closed")
        received += chunk
    return received


def test_relay_forwards_both_ways_intact(relay: tuple[TcpRelay, int]) -> None:
    proxy, port = relay
    payload = os.urandom(1 << 20) * 16  # 16 MiB
    with connect(port, timeout=20) as sock:
        received = bytearray()

        def read() -> None:
            while len(received) < len(payload):
                chunk = sock.recv(1 << 20)
                if not chunk:
                    return
                received.extend(chunk)

        reader = threading.Thread(target=read)
        reader.start()
        sock.sendall(payload)
        reader.join(20)
    assert hashlib.sha256(received).digest() == hashlib.sha256(payload).digest()
    stats = proxy.stats()["kafka"]
    assert stats.bytes_to_server == stats.bytes_to_client == len(payload) and stats.accepted == 1
    assert proxy.ports() == {port: "kafka"}


def test_blackhole_freezes_an_open_connection_and_heal_resumes_it(relay: tuple[TcpRelay, int]) -> None:
    proxy, port = relay
    with connect(port, timeout=0.4) as sock:
        assert roundtrip(sock) == b"ping"
        proxy.cut("kafka")
        sock.sendall(b"during")
        with pytest.raises(TimeoutError):
            sock.recv(100)
        assert proxy.stats()["kafka"].mode == "blackhole"
        proxy.heal("kafka")
        sock.settimeout(2)
        received = b""
        while len(received) < 6:
            received += sock.recv(100)
        assert received == b"during"  # held, then delivered in order once healed
        assert roundtrip(sock) == b"ping"


def test_blackhole_only_affects_its_group(echo: EchoServer) -> None:
    proxy = TcpRelay("groups")
    try:
        kafka_listener = socket.create_server(("127.0.0.1", 0))
        zk_listener = socket.create_server(("127.0.0.1", 0))
        proxy.listen(kafka_listener, "kafka", echo.port)
        proxy.listen(zk_listener, "zookeeper", echo.port)
        proxy.cut("kafka")
        with connect(zk_listener.getsockname()[1]) as sock:
            assert roundtrip(sock) == b"ping"
        with connect(kafka_listener.getsockname()[1], timeout=0.3) as sock:
            sock.sendall(b"x")
            with pytest.raises(TimeoutError):
                sock.recv(10)
        assert echo.port not in proxy.ports()
    finally:
        proxy.close()


def test_connection_into_a_blackhole_never_reaches_the_server_if_the_client_gives_up(
    relay: tuple[TcpRelay, int], echo: EchoServer
) -> None:
    proxy, port = relay
    proxy.cut("kafka")
    before = echo.accepted
    with connect(port, timeout=0.3) as sock:  # the handshake succeeds: the relay's kernel accepts
        sock.sendall(b"hello")
        with pytest.raises(TimeoutError):
            sock.recv(10)
    wait_until(lambda: proxy.stats()["kafka"].open_connections == 0, 5.0, "every relayed connection closed", interval=0.01)
    proxy.heal()
    with connect(port) as sock:
        assert roundtrip(sock) == b"ping"
    assert echo.accepted == before + 1  # only the connection made after the heal


def test_connection_into_a_blackhole_is_connected_at_heal(relay: tuple[TcpRelay, int]) -> None:
    proxy, port = relay
    proxy.cut("kafka")
    with connect(port, timeout=0.3) as sock:
        sock.sendall(b"early")
        with pytest.raises(TimeoutError):
            sock.recv(10)
        proxy.heal("kafka")
        sock.settimeout(2)
        received = b""
        while len(received) < 5:
            received += sock.recv(10)
        assert received == b"early"


def test_reset_fails_open_and_new_connections_at_once(relay: tuple[TcpRelay, int], echo: EchoServer) -> None:
    proxy, port = relay
    with connect(port, timeout=2) as sock:
        assert roundtrip(sock) == b"ping"
        started = time.monotonic()
        proxy.cut("kafka", "reset")
        with pytest.raises(ConnectionResetError):
            roundtrip(sock)
        assert time.monotonic() - started < 1.0
    wait_until(lambda: echo.resets == 1, 5.0, "the server side reset too", interval=0.01)
    with pytest.raises(ConnectionError):  # reset during connect() or at the first read, as it races
        with connect(port, timeout=2) as sock:
            roundtrip(sock)
    proxy.heal()
    with connect(port) as sock:
        assert roundtrip(sock) == b"ping"


def test_reset_also_drops_frozen_connections(relay: tuple[TcpRelay, int]) -> None:
    proxy, port = relay
    with connect(port, timeout=2) as sock:
        assert roundtrip(sock) == b"ping"
        proxy.cut("kafka")
        sock.sendall(b"held")
        proxy.cut("kafka", "reset")
        with pytest.raises(ConnectionResetError):
            sock.recv(10)
    assert proxy.stats()["kafka"].open_connections == 0


def test_latency_delays_each_direction_and_keeps_order(relay: tuple[TcpRelay, int]) -> None:
    proxy, port = relay
    with connect(port, timeout=5) as sock:
        assert roundtrip(sock) == b"ping"
        proxy.set_latency(100, "kafka")
        started = time.monotonic()
        assert roundtrip(sock) == b"ping"
        elapsed = time.monotonic() - started
        assert 0.2 <= elapsed < 1.5, elapsed  # 100 ms each way
        messages = [f"{i:06d}".encode() for i in range(2000)]
        for message in messages:  # many small chunks, read at different times
            sock.sendall(message)
        received = b""
        while len(received) < 6 * len(messages):
            received += sock.recv(65536)
        assert received == b"".join(messages)
        proxy.set_latency(0)
        started = time.monotonic()
        assert roundtrip(sock) == b"ping"
        assert time.monotonic() - started < 0.1
    assert proxy.stats()["kafka"].latency_ms == 0


def test_latency_does_not_limit_throughput_much(relay: tuple[TcpRelay, int]) -> None:
    proxy, port = relay
    proxy.set_latency(20)
    payload = b"x" * (8 << 20)
    with connect(port, timeout=10) as sock:
        started = time.monotonic()
        received = 0

        def read() -> None:
            nonlocal received
            while received < len(payload):
                chunk = sock.recv(1 << 20)
                if not chunk:
                    return
                received += len(chunk)

        thread = threading.Thread(target=read)
        thread.start()
        sock.sendall(payload)
        thread.join(10)
        elapsed = time.monotonic() - started
    assert received == len(payload)
    assert elapsed < 3.0, f"8 MiB echoed through 20 ms each way took {elapsed:.2f}s"


def test_server_down_looks_like_a_refusal(echo: EchoServer) -> None:
    proxy = TcpRelay("down")
    try:
        listener = socket.create_server(("127.0.0.1", 0))
        dead = socket.create_server(("127.0.0.1", 0))
        dead_port = dead.getsockname()[1]
        dead.close()
        proxy.listen(listener, "zookeeper", dead_port)
        started = time.monotonic()
        with pytest.raises(ConnectionError):  # reset during connect() or at the first read
            with connect(listener.getsockname()[1], timeout=2) as sock:
                roundtrip(sock)
        assert time.monotonic() - started < 1.5
    finally:
        proxy.close()


def test_server_closing_is_passed_on(relay: tuple[TcpRelay, int], echo: EchoServer) -> None:
    proxy, port = relay
    with connect(port, timeout=2) as sock:
        assert roundtrip(sock) == b"ping"
        sock.shutdown(socket.SHUT_WR)  # the echo server sees EOF and closes; the client sees EOF
        assert sock.recv(10) == b""
    wait_until(lambda: proxy.stats()["kafka"].open_connections == 0, 5.0, "every relayed connection closed", interval=0.01)


def test_close_stops_listening_and_is_idempotent(echo: EchoServer) -> None:
    proxy = TcpRelay("close")
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    proxy.listen(listener, "other", echo.port)
    open_sock = connect(port)
    assert roundtrip(open_sock) == b"ping"
    proxy.close()
    proxy.close()
    with pytest.raises(ConnectionRefusedError):
        connect(port)
    assert open_sock.recv(10) == b""  # the open connection was closed
    open_sock.close()
    with pytest.raises(RuntimeError, match="closed"):
        proxy.cut("other")
    with pytest.raises(ValueError):
        TcpRelay.listen(proxy, listener, "nope")
