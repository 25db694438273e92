"""Unit tests of laminar_kafka.devstack.netfaults.proxy.FaultProxy on host loopback sockets (no root,
no namespace): forwarding, a blackhole and its heal, resets, latency, an upstream restarted on its
port, closing."""
from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator

import pytest

from laminar_kafka.devstack.netfaults.proxy import FaultProxy
from laminar_kafka.devstack.waiting import wait_until
from tests.unit.devstack.netfaults.test_netfaults import EchoServer, connect, roundtrip

pytestmark = pytest.mark.timeout(60)


def echo_on(port: int) -> EchoServer:
    """An echo server on ``port`` (a server restarted on its old port)."""
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", port))
    listener.listen()
    server = EchoServer.__new__(EchoServer)
    server.listener, server.port, server.accepted, server.resets = listener, port, 0, 0
    threading.Thread(target=server._serve, daemon=True).start()
    return server


@pytest.fixture
def echo() -> Iterator[EchoServer]:
    server = EchoServer()
    yield server
    server.close()


@pytest.fixture
def proxy(echo: EchoServer) -> Iterator[FaultProxy]:
    with FaultProxy(echo.port, "unit") as made:
        yield made


def test_forwards_to_the_upstream_on_its_own_port(proxy: FaultProxy, echo: EchoServer) -> None:
    assert proxy.port != echo.port and proxy.endpoint == f"http://127.0.0.1:{proxy.port}"
    with connect(proxy.port) as sock:
        assert roundtrip(sock, b"hello" * 1000) == b"hello" * 1000
    stats = proxy.stats()
    assert stats.accepted == 1 and stats.bytes_to_server == stats.bytes_to_client == 5000 and stats.mode is None
    assert "unit" in repr(proxy) and str(echo.port) in repr(proxy)


def test_blackhole_freezes_and_heal_resumes_in_order(proxy: FaultProxy, echo: EchoServer) -> None:
    with connect(proxy.port, timeout=0.4) as sock:
        assert roundtrip(sock) == b"ping"
        proxy.cut()
        assert proxy.stats().mode == "blackhole"
        sock.sendall(b"held")
        with pytest.raises(TimeoutError):
            sock.recv(10)
        before = echo.accepted
        with connect(proxy.port, timeout=0.3) as late:  # accepted by the proxy, never reaches the server
            late.sendall(b"x")
            with pytest.raises(TimeoutError):
                late.recv(10)
        assert echo.accepted == before
        proxy.heal()
        sock.settimeout(2)
        received = b""
        while len(received) < 4:
            received += sock.recv(10)
        assert received == b"held"
    assert proxy.stats().mode is None


def test_reset_refuses_at_once_until_healed(proxy: FaultProxy) -> None:
    proxy.cut("reset")
    started = time.monotonic()
    with pytest.raises(ConnectionError):  # reset during connect() or at the first read, as it races
        with connect(proxy.port, timeout=2) as sock:
            roundtrip(sock)
    assert time.monotonic() - started < 1.0
    proxy.heal()
    with connect(proxy.port) as sock:
        assert roundtrip(sock) == b"ping"


def test_latency_slows_each_round_trip_then_goes(proxy: FaultProxy) -> None:
    with connect(proxy.port, timeout=5) as sock:
        proxy.set_latency(150)
        started = time.monotonic()
        assert roundtrip(sock) == b"ping"
        assert 0.3 <= time.monotonic() - started < 2.0  # 150 ms each way
        assert proxy.stats().latency_ms == 150
        proxy.set_latency(0)
        started = time.monotonic()
        assert roundtrip(sock) == b"ping"
        assert time.monotonic() - started < 0.1


def test_an_upstream_restarted_on_its_port_is_reached_again(echo: EchoServer) -> None:
    port = echo.port
    with FaultProxy(port, "restart") as proxy:
        with connect(proxy.port) as sock:
            assert roundtrip(sock) == b"ping"
        echo.listener.shutdown(socket.SHUT_RDWR)  # wakes its accept(), so the port is really closed
        echo.close()
        with pytest.raises(ConnectionError):  # down: the client sees a reset, as if refused
            with connect(proxy.port, timeout=2) as sock:
                roundtrip(sock)
        again = echo_on(port)
        try:
            with connect(proxy.port) as sock:
                assert roundtrip(sock) == b"ping"
            assert again.accepted == 1
        finally:
            again.listener.shutdown(socket.SHUT_RDWR)
            again.close()


def test_close_stops_listening_and_is_idempotent(echo: EchoServer) -> None:
    proxy = FaultProxy(echo.port)
    open_sock = connect(proxy.port)
    assert roundtrip(open_sock) == b"ping"
    proxy.close()
    proxy.close()
    with pytest.raises(ConnectionRefusedError):
        connect(proxy.port)
    wait_until(lambda: open_sock.recv(10) == b"", 5.0, "the open connection closed", interval=0.01)
    open_sock.close()


def test_a_bad_upstream_port_or_mode_is_refused(proxy: FaultProxy) -> None:
    with pytest.raises(ValueError):
        FaultProxy(0)
    with pytest.raises(ValueError):
        proxy.cut("sideways")
    with pytest.raises(ValueError):
        proxy.set_latency(-1)
