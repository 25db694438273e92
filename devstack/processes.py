"""Loopback ports, process ids, and `NodeProcess`: one `laminar-kafka run` started as a subprocess."""
from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from laminar_kafka.devstack.errors import ServerStartError
from laminar_kafka.devstack.jvm.artifacts import LOG_TAIL_LINES

__all__ = [
    "NodeProcess", "free_port", "log_tail", "node_command", "pid_alive", "pid_cmdline", "port_accepts",
    "terminate_pid",
]

REPO_ROOT = Path(__file__).resolve().parents[1]

_handed_out_ports: set[int] = set()


def free_port() -> int:
    """A loopback TCP port that is free now and was not handed out before by this process."""
    for _ in range(100):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.bind(("127.0.0.1", 0))
            port = sock.getsockname()[1]
        if port not in _handed_out_ports:
            _handed_out_ports.add(port)
            return port
    raise ServerStartError("no free loopback port found")


def port_accepts(port: int, timeout: float = 0.5) -> bool:
    """Whether something accepts TCP connections on 127.0.0.1:port."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=timeout):
            return True
    except OSError:
        return False


def pid_alive(pid: int) -> bool:
    """Whether `pid` names a live (not zombie) process."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().split(") ", 1)[1][:1] != "Z"
    except OSError:
        return True


def pid_cmdline(pid: int) -> str:
    """The command line of `pid` ('' when unknown)."""
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def terminate_pid(pid: int, timeout: float = 20.0) -> None:
    """SIGTERM `pid` (resuming it first if stopped), wait up to `timeout`, then SIGKILL."""
    for sig in (signal.SIGCONT, signal.SIGTERM):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, sig)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and pid_alive(pid):
        _reap(pid)
        time.sleep(0.1)
    if pid_alive(pid):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and pid_alive(pid):
            _reap(pid)
            time.sleep(0.05)
    _reap(pid)


def _reap(pid: int) -> None:
    with contextlib.suppress(ChildProcessError, OSError):
        os.waitpid(pid, os.WNOHANG)


def log_tail(path: Path, lines: int = LOG_TAIL_LINES) -> str:
    """The last `lines` lines of a log file ('' when it does not exist)."""
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return ""


def node_command(flags: Sequence[str]) -> list[str]:
    """The argv of one node: ``python -m laminar_kafka.cli.main run`` + `flags` (this interpreter, this checkout)."""
    return [sys.executable, "-m", "laminar_kafka.cli.main", "run", *flags]


def node_environment() -> dict[str, str]:
    """The environment of a node subprocess: ours without LAMINAR_* settings (flags say everything),
    with this checkout first on PYTHONPATH."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("LAMINAR_")}
    env["PYTHONPATH"] = str(REPO_ROOT) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return env


@dataclass
class NodeProcess:
    """One `laminar-kafka run` process; its output goes to ``log``. ``cwd``: its working directory
    (default: ours); ``env``: variables added to :func:`node_environment` (an object store's
    ``AWS_*``, say)."""

    node_id: int
    args: list[str]
    log: Path
    process: subprocess.Popen[bytes] | None = None
    started_at: float = 0.0
    cwd: Path | None = None
    env: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def launch(
        cls,
        node_id: int,
        *,
        bootstrap: str,
        topic: str,
        output: str,
        zk: str | None,
        pipeline: str,
        log_dir: Path,
        extra: Sequence[str] = (),
    ) -> NodeProcess:
        """Start node `node_id` with the given settings (`extra`: more flags); returns at once."""
        flags = ["--bootstrap", bootstrap, "--topic", topic, "--output", output, "--pipeline", pipeline,
                 "--node-id", str(node_id), *extra]
        if zk:
            flags += ["--zk", zk]
        node = cls(node_id, node_command(flags), log_dir / f"node-{node_id}.log")
        node.start()
        return node

    def start(self) -> None:
        """Start (or start again) the process, appending to its log."""
        self.log.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log, "ab") as handle:
            self.process = subprocess.Popen(self.args, stdout=handle, stderr=subprocess.STDOUT, cwd=self.cwd,
                                            env={**node_environment(), **self.env})
        self.started_at = time.monotonic()

    @property
    def pid(self) -> int:
        assert self.process is not None
        return self.process.pid

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def kill(self) -> None:
        """SIGKILL: a crash."""
        if self.alive():
            assert self.process is not None
            self.process.send_signal(signal.SIGKILL)
            self.process.wait(10)

    def terminate(self) -> None:
        """SIGTERM: a planned leave."""
        if self.alive():
            assert self.process is not None
            self.process.send_signal(signal.SIGTERM)

    def wait(self, timeout: float) -> int:
        assert self.process is not None
        return self.process.wait(timeout)

    def log_text(self) -> str:
        try:
            return self.log.read_text(errors="replace")
        except OSError:
            return ""

    def stop(self) -> None:
        """Best effort for test teardown: SIGTERM, then SIGKILL after 15 s."""
        if not self.alive():
            return
        self.terminate()
        try:
            self.wait(15)
        except subprocess.TimeoutExpired:
            self.kill()
