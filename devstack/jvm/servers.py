"""Dev servers as local JVM processes, with fault controls: `JvmServer` (one process) and
`ServerGroup` (fault controls by index), and Apache ZooKeeper (`new_zookeeper`). The Kafka cluster
is in `laminar_kafka.devstack.jvm.kafka_cluster`.

`new_zookeeper` writes server configurations under a base directory and picks free loopback ports;
`JvmServer.start` launches one server detached, `wait_healthy` waits for it. A ZooKeeper server is
healthy when it grants a client session (for an ensemble member, only possible once a quorum has
formed).

Fault injection (tests/faults, the chaos campaign) uses `kill` (SIGKILL), `pause`/`resume`
(SIGSTOP/SIGCONT) and `restart` on single servers; a restarted server keeps its port and data.
"""
from __future__ import annotations

import contextlib
import functools
import logging
import os
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Callable

from laminar_kafka.devstack.errors import ServerStartError
from laminar_kafka.devstack.jvm.java import java_executable
from laminar_kafka.devstack.processes import free_port, log_tail, pid_alive, port_accepts, terminate_pid

if TYPE_CHECKING:
    pass

__all__ = [
    "DEFAULT_START_TIMEOUT_S", "JvmServer", "ServerGroup", "ZooKeeperEnsemble", "java_options", "new_zookeeper",
    "write_properties", "zookeeper_session_ok",
]

DEFAULT_START_TIMEOUT_S = 90.0


_LOG4J2_PROPERTIES = """\
status = warn
appender.out.type = Console
appender.out.name = OUT
appender.out.layout.type = PatternLayout
appender.out.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = INFO
rootLogger.appenderRef.out.ref = OUT
logger.kafkareq.name = kafka.request.logger
logger.kafkareq.level = WARN
logger.state.name = state.change.logger
logger.state.level = WARN
"""


@dataclass
class JvmServer:
    """One JVM server process: a main class, its arguments, a working directory and a log file.

    Invariants: `port` and `workdir` never change across restarts; `pid` is the running process or
    None. `health` is a callable that returns True once the server serves clients.
    """

    name: str
    main_class: str
    args: list[str]
    workdir: Path
    classpath: str
    port: int
    health: Callable[[], bool]
    jvm_options: list[str] = field(default_factory=list)
    pid: int | None = None
    _process: subprocess.Popen[bytes] | None = field(default=None, repr=False)

    @property
    def log_path(self) -> Path:
        return self.workdir / "server.log"

    def command(self) -> list[str]:
        java = java_executable()
        log4j = self.workdir / "log4j2.properties"
        if not log4j.exists():
            log4j.write_text(_LOG4J2_PROPERTIES)
        return [
            java, *self.jvm_options,
            f"-Dlog4j2.configurationFile={log4j}",
            f"-Dlaminar.devstack.server={self.name}",
            "-cp", self.classpath, self.main_class, *self.args,
        ]

    def start(self) -> None:
        """Launch the process (detached in its own session); does not wait for health."""
        if self.pid is not None and pid_alive(self.pid):
            raise ServerStartError(f"{self.name} is already running as pid {self.pid}")
        with open(self.log_path, "ab") as log:
            self._process = subprocess.Popen(
                self.command(), cwd=self.workdir, stdout=log, stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL, start_new_session=True,
            )
        self.pid = self._process.pid

    def running(self) -> bool:
        return self.pid is not None and pid_alive(self.pid)

    def wait_healthy(self, timeout: float = DEFAULT_START_TIMEOUT_S) -> float:
        """Block until `health()` holds; return the seconds waited.

        Raises ServerStartError quoting the last lines of the log when the process exits first or
        the timeout passes.
        """
        started = time.monotonic()
        deadline = started + timeout
        while True:
            if not self.running():
                raise ServerStartError(
                    f"{self.name} exited before becoming healthy; last lines of {self.log_path}:\n{log_tail(self.log_path)}"
                )
            if port_accepts(self.port) and self.health():
                return time.monotonic() - started
            if time.monotonic() > deadline:
                raise ServerStartError(
                    f"{self.name} not healthy after {timeout:.0f}s; last lines of {self.log_path}:\n{log_tail(self.log_path)}"
                )
            time.sleep(0.2)

    def stop(self, timeout: float = 20.0) -> None:
        """Graceful stop (SIGTERM, then SIGKILL after `timeout`). No-op when not running."""
        if self.pid is not None:
            terminate_pid(self.pid, timeout)
        self._forget()

    def kill(self) -> None:
        """SIGKILL, as a crash would; waits until the process is gone."""
        if self.pid is not None:
            terminate_pid(self.pid, timeout=0)
        self._forget()

    def pause(self) -> None:
        """SIGSTOP: the process keeps its sockets but answers nothing."""
        if self.pid is not None:
            os.kill(self.pid, signal.SIGSTOP)

    def resume(self) -> None:
        """SIGCONT after `pause`."""
        if self.pid is not None:
            os.kill(self.pid, signal.SIGCONT)

    def _forget(self) -> None:
        if self._process is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                self._process.wait(timeout=5)
        self._process = None
        self.pid = None


def java_options(heap: str) -> list[str]:
    """The JVM options of a dev server with a ``heap`` maximum heap (e.g. ``1g``)."""
    return [
        f"-Xmx{heap}", "-Xms128m", "-XX:+UseG1GC", "-XX:MaxGCPauseMillis=20",
        "-Djava.awt.headless=true", "-Djava.net.preferIPv4Stack=true",
    ]


def write_properties(path: Path, values: dict[str, object]) -> None:
    """Write a properties file, readable by its owner only (a secured broker's holds store passwords)."""
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(descriptor, "w") as handle:
        handle.write("".join(f"{key}={value}\n" for key, value in values.items()))


class ServerGroup:
    """Fault controls on one server of a group (by index); a restarted server keeps its port and data.
    Subclasses name their servers ``members``."""

    @property
    def members(self) -> list[JvmServer]:
        """The servers, in index order."""
        raise NotImplementedError

    def kill(self, index: int = 0) -> None:
        self.members[index].kill()

    def start_member(self, index: int = 0, timeout: float = DEFAULT_START_TIMEOUT_S) -> None:
        self.members[index].start()
        self.members[index].wait_healthy(timeout)

    def restart(self, index: int = 0, timeout: float = DEFAULT_START_TIMEOUT_S) -> None:
        self.members[index].stop()
        self.start_member(index, timeout)

    def pause(self, index: int = 0) -> None:
        self.members[index].pause()

    def resume(self, index: int = 0) -> None:
        self.members[index].resume()


# Health probes fail by design while a server starts; their connection warnings are not news.
_quiet_kazoo_logger = logging.getLogger(f"{__name__}.health_probe")
_quiet_kazoo_logger.setLevel(logging.CRITICAL)


def zookeeper_session_ok(hosts: str) -> bool:
    from kazoo.client import KazooClient

    client = KazooClient(
        hosts=hosts, timeout=3.0, connection_retry=None, command_retry=None, logger=_quiet_kazoo_logger
    )
    try:
        client.start(timeout=2.0)
    except Exception:  # noqa: BLE001 - any failure here just means "not healthy yet"
        with contextlib.suppress(Exception):
            client.stop()
            client.close()
        return False
    client.stop()
    client.close()
    return True


@dataclass
class ZooKeeperEnsemble(ServerGroup):
    """A standalone ZooKeeper server, or a three-server ensemble, on loopback."""

    servers: list[JvmServer]

    @property
    def members(self) -> list[JvmServer]:
        return self.servers

    @property
    def hosts(self) -> str:
        return ",".join(f"127.0.0.1:{server.port}" for server in self.servers)

    kill_server = ServerGroup.kill
    start_server = ServerGroup.start_member
    restart_server = ServerGroup.restart
    pause_server = ServerGroup.pause
    resume_server = ServerGroup.resume


def new_zookeeper(lib_dir: Path, base_dir: Path, server_count: int = 1) -> ZooKeeperEnsemble:
    """Write configurations for a standalone server (1) or an ensemble (3) under `base_dir`.

    tickTime is 500 ms, so sessions may negotiate timeouts from 1 s to 60 s (tests use short ones).
    """
    if server_count not in (1, 3):
        raise ValueError("server_count must be 1 or 3")
    classpath = f"{lib_dir}/*"
    ports = [(free_port(), free_port(), free_port()) for _ in range(server_count)]
    servers: list[JvmServer] = []
    for index, (client_port, _, _) in enumerate(ports):
        workdir = base_dir / f"zookeeper-{index + 1}"
        data = workdir / "data"
        data.mkdir(parents=True, exist_ok=True)
        values: dict[str, object] = {
            "tickTime": 500,
            "initLimit": 20,
            "syncLimit": 10,
            "dataDir": data,
            "clientPort": client_port,
            "clientPortAddress": "127.0.0.1",
            "maxClientCnxns": 0,
            "minSessionTimeout": 1000,
            "maxSessionTimeout": 60000,
            "admin.enableServer": "false",
            "4lw.commands.whitelist": "*",
            "autopurge.purgeInterval": 1,
        }
        if server_count > 1:
            (data / "myid").write_text(f"{index + 1}\n")
            for peer, (_, peer_p, election_p) in enumerate(ports):
                values[f"server.{peer + 1}"] = f"127.0.0.1:{peer_p}:{election_p}"
        config = workdir / "zoo.cfg"
        write_properties(config, values)
        hosts = f"127.0.0.1:{client_port}"
        servers.append(JvmServer(
            name=f"zookeeper-{index + 1}",
            main_class="org.apache.zookeeper.server.quorum.QuorumPeerMain",
            args=[str(config)],
            workdir=workdir,
            classpath=classpath,
            port=client_port,
            health=functools.partial(zookeeper_session_ok, hosts),
            jvm_options=[*java_options("512m"), "-Dzookeeper.admin.enableServer=false"],
        ))
    return ZooKeeperEnsemble(servers=servers)
