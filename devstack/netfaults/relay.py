"""The TCP relay that applies network faults: `TcpRelay`, per server group, and its counters.

Contract: `TcpRelay` forwards connections accepted on the listening sockets it is given to
`upstream_host:<port>`, and applies per-group faults (`GROUPS`):

- `cut(group, "blackhole")`: established connections freeze (no byte forwarded either way, nothing
  closed); new ones are accepted and wait, dropped if their client gives up before the heal.
- `cut(group, "reset")`: every connection of the group is reset (RST to both ends), new ones too.
- `heal(group=None)`: frozen connections resume where they stopped, in order; waiting ones connect.
- `set_latency(ms, group=None)`: each forwarded chunk waits `ms` in each direction, pipelined.

One asyncio loop per relay, in a daemon thread; every public method is thread-safe and returns once
the change is in force. It knows nothing of namespaces, root or `ip`: :mod:`laminar_kafka.devstack.netfaults.node`
hands it listeners made inside a namespace, and the unit tests hand it host loopback listeners.
Depends only on :mod:`laminar_kafka.devstack.netfaults.model`.
"""
from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import socket
import struct
import threading
import time
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any, Coroutine, Iterable, TypeVar

from laminar_kafka.devstack.netfaults.model import (
    CONTROL_TIMEOUT_S,
    GROUPS,
    validate_group,
    validate_latency,
    validate_mode,
)

logger = logging.getLogger("laminar_kafka.devstack.netfaults.faults")  # the whole layer logs under its entry point's name

_CHUNK = 256 * 1024          # bytes read per recv; one send may join several due chunks up to this
_HOLD_LIMIT = 4 * 1024 * 1024  # bytes a direction may hold (frozen or delayed) before it stops reading
_CONNECT_TIMEOUT_S = 5.0


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
                asyncio.run_coroutine_threadsafe(self._shutdown(), self.loop).result(CONTROL_TIMEOUT_S)
        except Exception:  # closing must not fail the caller
            logger.exception("relay %s: shutdown failed", self.label)
        with contextlib.suppress(RuntimeError):
            self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(CONTROL_TIMEOUT_S)
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
        return future.result(CONTROL_TIMEOUT_S)

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
